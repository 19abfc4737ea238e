"""``textdp audit --conformance`` (issue 28, items 1, 2 and 5): releases drawn through the mechanism objects'
``privatize_ids`` against each mechanism's declared law, on a real 5k GloVe artifact with a real K = 40
neighbour table.

False-failure rates. Draws come from fresh OS entropy (no seed), so every run is a new statistical trial.
* A correct mechanism is flagged with probability at most the run's false-alarm rate (Bonferroni over its
  units; chi-square approximation of G): each test below runs at 1e-3 / 9 per mechanism, 1e-3 for the nine
  registered mechanisms together. A correct mechanism's test also needs its power check to reject (status
  "pass", not "inconclusive"); that miss rate is not bounded analytically: the check rejected in each of the
  runs made while writing these tests (every test run twice) and in every unit of the 20k benchmark but one
  (TEM at epsilon 10, not tested here).
* A broken variant passing: in the runs made while writing them each was flagged far beyond its level of 1e-4
  (ShortRadiusMadlib, the weakest, with p ~ 4e-18 at epsilon 5; DoubleGammaTEM ~ 1e-110 at epsilon 10; the
  others p ~ 0 or releases of probability 0); a miss would need the statistic to fall by several standard
  deviations.
"""

from __future__ import annotations

import json
import os

import pytest

from pipelines.cli import main as cli_main
from tests.audit_broken import (
    DoubleGammaTEM,
    HalfDoubleSanText,
    OtherKCusText,
    ShortRadiusMadlib,
    SwappedVickrey,
)
from tests.custom_mechanism import IMPORT_PATH, CappedExponential
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.audit.conformance import NOT_TESTED, law_kind, run_conformance
from textdp.mechanisms import REGISTRY

RUNNER = ["--runner=FnApiRunner"]
REGISTERED = tuple(REGISTRY)
ALPHA = 1e-3

# (variant, epsilons, parameters, draws per word): where the test has its power on the 5k artifact
BROKEN = [
    (DoubleGammaTEM, (10.0,), {}, None),  # far tail beyond gamma: mass ~1e-3 that the 2 x gamma sampler moves inside
    (ShortRadiusMadlib, (5.0,), {}, 10_000),  # radius 2 % short: the Mann-Whitney shift statistic sees it
    (HalfDoubleSanText, (2.0,), {}, None),
    (SwappedVickrey, (10.0,), {"vickrey_t": 0.2}, 4_000),  # t = 0.5 is its own swap: invisible there, by definition
    (OtherKCusText, (2.0,), {}, None),  # releases outside the declared output set: probability 0 under the law
]


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


@pytest.mark.parametrize("variant, epsilons, params, draws", BROKEN, ids=[b[0].__name__ for b in BROKEN])
def test_each_broken_variant_is_flagged(artifact, variant, epsilons, params, draws):
    result = run_conformance(variant, artifact, epsilons=epsilons, params=params, draws=draws,
                             false_alarm_rate=ALPHA / 10, power_repeats=1)
    assert result["verdicts"] == {variant.name: "FLAG"}, result["rows"]
    assert result["flagged"] == [variant.name]
    for row in result["rows"]:
        assert row["rejected"] and row["status"] == "FLAG"
        assert row["mechanism"] == variant.name


def test_the_custext_variant_is_caught_by_impossible_releases(artifact):
    """Groups built on another K release words outside the declared output set: events of probability 0."""
    row = run_conformance(OtherKCusText, artifact, epsilons=(2.0,), draws=2_000, power_repeats=1)["rows"][0]
    assert row["impossible_releases"] > 0 and row["status"] == "FLAG"


# the search mechanisms at the smaller sizes these tests afford (3,000 draws per word and side); the power
# check still rejects at 1.25 x epsilon
SIZES = {"madlib": 3_000, "mahalanobis": 3_000, "vickrey": 3_000}


@pytest.mark.parametrize("name", REGISTERED)
def test_every_correct_registered_mechanism_passes(artifact, name):
    result = run_conformance(name, artifact, epsilons=(5.0,), draws=SIZES.get(name),
                             false_alarm_rate=ALPHA / len(REGISTERED), power_repeats=1)
    verdict = result["verdicts"][name]
    if law_kind(REGISTRY[name]) is None:
        assert verdict == NOT_TESTED  # never a pass
        assert result["tests"] == 0
        return
    assert verdict == "pass", result["rows"]
    row = result["rows"][0]
    assert row["power"] == 1.0 and row["impossible_releases"] == 0
    assert row["level"] == pytest.approx(ALPHA / len(REGISTERED))
    assert row["law"] == ("reference simulation" if REGISTRY[name].SEARCHES_NEAREST else "closed form")


def test_a_custom_mechanism_through_the_python_entry_point():
    """The class object and its import path: both audited, the law its class declares (EXACT_LAW)."""
    import tempfile

    from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource
    from textdp.artifact.store import build_artifact

    with tempfile.TemporaryDirectory() as tmp:
        path = build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), os.path.join(tmp, "a"), vocab_size=2000,
                              trees=2, seed=0)
        result = run_conformance([CappedExponential, IMPORT_PATH], path, epsilons=(3.0,), draws=20_000,
                                 params={CappedExponential: {"distance_cap": 4.0}}, power_repeats=1)
    rows = result["rows"]
    assert [r["mechanism"] for r in rows] == ["capped-exponential"] * 2
    assert rows[0]["parameters"]["distance_cap"] == 4.0 and rows[1]["parameters"]["distance_cap"] is None
    assert all(r["status"] == "pass" and r["law"] == "closed form" for r in rows), rows


def test_a_custom_mechanism_end_to_end_through_the_cli(neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    output = str(tmp_path / "out")
    code = cli_main(["audit", f"--artifact={neighbour_artifact_dir}", f"--output={output}", "--conformance",
                     f"--conformance-mechanisms={IMPORT_PATH},truncated-gumbel", "--epsilons=2,4",
                     "--conformance-draws=20000"] + RUNNER)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    with open(os.path.join(output, "conformance.json"), encoding="utf-8") as handle:
        result = json.load(handle)
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    assert result["verdicts"] == {"capped-exponential": "pass", "truncated-gumbel": NOT_TESTED}
    assert result["tests"] == 2 and len(result["rows"]) == 4
    assert summary["conformance"]["verdicts"] == result["verdicts"]
    assert "conformance capped-exponential: pass (closed form)" in printed.out
    assert f"truncated-gumbel: {NOT_TESTED}" in printed.out
    assert "conformance.json" in printed.out


def test_a_flagged_installation_exits_1_in_one_line_with_the_results_written(neighbour_artifact_dir, tmp_path,  # noqa: F811
                                                                             capsys):
    """An operator's check that finds a mechanism releasing outside its declared law is not a success: exit 1, one line
    naming it; conformance.json and the summary are still written. (CusText sampling from groups built on another K:
    releases of probability 0 under the declared law.)"""
    output = str(tmp_path / "out")
    code = cli_main(["audit", f"--artifact={neighbour_artifact_dir}", f"--output={output}", "--conformance",
                     "--conformance-mechanisms=tests.audit_broken:OtherKCusText", "--epsilons=2",
                     "--conformance-draws=2000", "--power-repeats=1"] + RUNNER)
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]  # (progress lines aside)
    assert code == 1 and len(errors) == 1
    assert errors[0].startswith("textdp audit: error: conformance: broken-custext-other-k flagged")
    with open(os.path.join(output, "conformance.json"), encoding="utf-8") as handle:
        assert json.load(handle)["flagged"] == ["broken-custext-other-k"]


@pytest.mark.parametrize("flags, phrase", [
    (["--conformance-mechanisms=no-such-mechanism"], "unknown mechanism 'no-such-mechanism'"),
    (["--checks=self-check"], "--conformance runs the conformance test alone"),
    (["--power-repeats=0"], "--power-repeats must be between 1 and 100"),
    (["--conformance-draws=5"], "--conformance-draws must be 0"),
    (["--epsilons=900000", "--conformance-mechanisms=santext"], "epsilon must be"),
])
def test_bad_conformance_flags_are_refused_in_one_line(neighbour_artifact_dir, tmp_path, capsys, flags,  # noqa: F811
                                                       phrase):
    output = str(tmp_path / "out")
    code = cli_main(["audit", f"--artifact={neighbour_artifact_dir}", f"--output={output}", "--conformance"]
                    + flags + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("textdp audit: error: ") and phrase in err and "\n" not in err
    assert not os.path.exists(os.path.join(output, "conformance.json"))


def test_a_custom_mechanism_goes_through_every_part_of_the_audit(neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    """Issue 28, item 2: the import path through the self-check and the attacks (one run), then the conformance test
    with the run's own flag for it (--distance-cap reaches the mechanism named by --mechanism)."""
    from benchmarks.harness import imdb_texts

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(text.replace("\n", " ") for text in imdb_texts(60)) + "\n", encoding="utf-8")
    common = [f"--artifact={neighbour_artifact_dir}", f"--mechanism={IMPORT_PATH}", "--distance-cap=3"] + RUNNER
    output = str(tmp_path / "all")
    code = cli_main(["audit", *common, f"--output={output}", "--epsilons=3", "--pairs=3", "--draws=2000",
                     f"--corpus={corpus}", "--records=30", "--inversion-tokens=300", "--prior-words=300",
                     "--linkage-sizes=10", "--linkage-window=5"])
    assert code == 0, capsys.readouterr().err
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    assert summary["checks"] == ["self-check", "inversion", "linkage"]
    assert summary["self_check"]["status"] == "pass"  # false-alarm rate 0.001 (the run's default)
    assert summary["inversion"]["per_epsilon"] and summary["linkage"]["per_epsilon"]
    capsys.readouterr()

    output = str(tmp_path / "conf")
    code = cli_main(["audit", *common, f"--output={output}", "--epsilons=2", "--conformance",
                     f"--conformance-mechanisms={IMPORT_PATH}", "--conformance-draws=20000"])
    assert code == 0, capsys.readouterr().err
    with open(os.path.join(output, "conformance.json"), encoding="utf-8") as handle:
        row = json.load(handle)["rows"][0]
    assert row["mechanism"] == "capped-exponential" and row["parameters"]["distance_cap"] == 3.0
    assert row["status"] == "pass", row
