"""``textdp audit`` end to end on the local FnApiRunner: outputs, summary, plots, report, CLI, progress.

Runs use ``--seed`` (reproducible). The only statistical assertions are the self-check verdicts of
correct mechanisms (no violation: false-alarm rate 0.001 per run by construction, 9 runs: below
0.009 for the module) and of the leaking policies and mechanisms (keep, santext+, custext,
truncated-gumbel tell two words apart with certainty at these draws).
"""

import json
import os

import pyarrow.parquet as pq
import pytest

from pipelines.cli import main as cli_main
from tests.test_calibration_pipeline import assert_valid_png
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.text.tokenize import Tokenizer

RUNNER = ["--runner=FnApiRunner"]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({"id": row["id"], "text": row["text"].replace("<br />", "\n")}) + "\n")
    return str(path)


def unknown_words(artifact, rows, count=30):
    """Distinctive words of the corpus that are not in the vocabulary (raw text that must never leak)."""
    tokenizer = Tokenizer(artifact.word_to_id)
    found = []
    for row in rows:
        tokenized = tokenizer.tokenize(row["text"])
        found += [w for w, i in zip(tokenized.words, tokenized.ids) if i < 0 and len(w) >= 8 and w.isalpha()]
    return sorted(set(found))[:count]


@pytest.fixture(scope="module")
def tem_run(neighbour_artifact_dir, imdb_rows, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("audit-tem")
    corpus = write_jsonl(root / "reviews.jsonl", imdb_rows[:400])
    prior = write_jsonl(root / "prior.jsonl", imdb_rows[400:700])
    pairs = root / "pairs.txt"
    pairs.write_text("good bad\nparis, london\nmovie zzqqxxv\n", encoding="utf-8")
    out = str(root / "out")
    code = cli_main(["audit", f"--artifact={neighbour_artifact_dir}", "--mechanism=tem", "--epsilons=3,6",
                     "--pairs=10", "--draws=4000", f"--pair-list={pairs}", f"--corpus={corpus}", "--records=100",
                     "--inversion-tokens=3000", f"--prior-corpus={prior}", "--prior-words=2000",
                     "--linkage-sizes=10,100,300", "--seed=5", f"--output={out}"] + RUNNER)
    return code, out, corpus


def test_tem_audit_outputs(tem_run, neighbour_artifact_dir, imdb_rows):  # noqa: F811
    code, out, _ = tem_run
    assert code == 0
    summary = json.load(open(f"{out}/summary.json", encoding="utf-8"))
    check = summary["self_check"]
    assert check["status"] == "pass", check["worst_violations"]
    # 10 band pairs + 3 user pairs + 2 OOV pairs, both directions, 2 epsilons: all planned tests ran
    assert check["planned_tests"] == check["tests_run"] == 2 * 15 * 2
    assert "0.001" in check["message"] and "60" in check["method"]
    rows = pq.read_table(f"{out}/self_check.parquet").to_pylist()
    assert len(rows) == 60 and {r["verdict"] for r in rows} == {"pass"}
    user = [r for r in rows if r["pair_id"] == "u3"]  # 'movie' against a word outside the vocabulary
    assert user and user[0]["distance"] is None and "line 3" in user[0]["label"] and "zzqqxxv" not in user[0]["label"]
    tem_rows = [r for r in rows if r["kind"] == "band"]
    assert all(r["bound"] <= r["epsilon"] * summary["parameters"][f"{r['epsilon']:g}"]["gamma"] + 1e-9 for r in tem_rows)
    inversion = summary["inversion"]
    assert inversion["posterior"].startswith("exact") and "reference corpus" in inversion["prior"]
    for eps in ("3", "6"):
        entry = inversion["per_epsilon"][eps]
        assert entry["tokens"] == 3000 == sum(b["tokens"] for b in entry["bands"].values())
        overall = entry["overall"]
        assert overall["top1"]["rate"] <= overall["top10"]["rate"] <= overall["in_prior"]["rate"]
    # less noise, more recovery
    assert inversion["per_epsilon"]["6"]["overall"]["top1"]["rate"] > inversion["per_epsilon"]["3"]["overall"]["top1"]["rate"]
    linkage = summary["linkage"]["per_epsilon"]["3"]
    assert set(linkage) == {"10", "100", "300"} and linkage["10"]["queries"] == summary["corpus"]["linkage_queries"]
    assert summary["corpus"]["records_read"] == 400 and summary["corpus"].get("records_unreadable", 0) == 0
    for name in ("self_check.png", "inversion.png", "linkage.png"):
        assert_valid_png(f"{out}/{name}")
    report = open(f"{out}/report.html", encoding="utf-8").read()
    assert "Pass:" in report and "self_check.png" in report and "Record linkage" in report
    # raw text never leaves: no out-of-vocabulary word of the corpus appears in any output
    artifact = open_artifact(neighbour_artifact_dir)
    secrets = unknown_words(artifact, imdb_rows[:400])
    assert len(secrets) >= 10
    for name in os.listdir(out):
        data = open(f"{out}/{name}", "rb").read()
        leaked = [w for w in secrets if w.encode("utf-8") in data]
        assert not leaked, f"{name} holds corpus words {leaked[:3]}"


def test_madlib_monte_carlo_and_keep_policy(small_artifact_dir, imdb_rows, tmp_path):
    corpus = write_jsonl(tmp_path / "reviews.jsonl", imdb_rows[:150])
    out = str(tmp_path / "out")
    code = cli_main(["audit", f"--artifact={small_artifact_dir}", "--mechanism=madlib", "--epsilons=15",
                     "--pairs=5", "--draws=2000", "--oov-policy=keep", f"--corpus={corpus}", "--records=60",
                     "--inversion-tokens=1500", "--mc-draws=20000", "--prior-words=3000", "--linkage-sizes=10,50",
                     "--seed=9", f"--output={out}"] + RUNNER)
    assert code == 0
    summary = json.load(open(f"{out}/summary.json", encoding="utf-8"))
    assert summary["self_check"]["status"] == "no guarantee"  # keep releases unknown words unchanged
    assert summary["self_check"]["per_epsilon"]["15"]["violations"] == 0
    assert summary["self_check"]["no_guarantee_examples"]
    inversion = summary["inversion"]
    assert inversion["posterior"].startswith("Monte Carlo") and "Zipf" in inversion["prior"]
    mc = inversion["monte_carlo"]["15"]
    assert mc["training_draws"] == 20000 and mc["in_sample_top1"] <= mc["upper_top1"] <= 1.0
    assert summary["linkage"]["likelihood"].startswith("Monte Carlo")


def test_self_check_only_and_refusals(small_artifact_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TEXTDP_PROGRESS_INTERVAL", "0.5")
    out = str(tmp_path / "only")
    assert cli_main(["audit", f"--artifact={small_artifact_dir}", "--epsilons=8", "--pairs=5", "--draws=20000",
                     "--seed=1", f"--output={out}"] + RUNNER) == 0
    captured = capsys.readouterr()
    progress = [line for line in captured.err.splitlines() if line.startswith("textdp audit: ")]
    assert progress and "draws" in progress[-1]
    assert "Pass:" in captured.out and "report:" in captured.out
    summary = json.load(open(f"{out}/summary.json", encoding="utf-8"))
    assert summary["checks"] == ["self-check"] and "inversion" not in summary
    assert sorted(os.listdir(out)) == ["report.html", "self_check.parquet", "self_check.png", "summary.json",
                                       "textdp-run.json"]  # the run record: the files --overwrite may replace
    # refusals: one line, exit 2, nothing run
    assert cli_main(["audit", f"--artifact={small_artifact_dir}", f"--output={out}"] + RUNNER) == 2
    assert "already holds an earlier audit" in capsys.readouterr().err
    assert cli_main(["audit", f"--artifact={small_artifact_dir}", "--checks=inversion",
                     f"--output={tmp_path}/x"] + RUNNER) == 2
    assert "needs --corpus" in capsys.readouterr().err
    assert cli_main(["audit", "--pairs=3"] + RUNNER) == 2
    assert "--output" in capsys.readouterr().err
    assert cli_main(["audit", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--false-alarm-rate", "--pairs", "--draws", "--corpus", "--prior-corpus", "--linkage-sizes",
                 "--oov-policy", "--epsilons", "--mechanism"):
        assert flag in text


@pytest.mark.parametrize("mechanism, expected", [
    ("mahalanobis", "pass"), ("vickrey", "pass"), ("santext", "pass"),
    ("santext+", "no guarantee"),          # a kept non-sensitive word reveals itself: no finite bound claimed
    ("custext", "no guarantee"),           # words of different output sets: no bound claimed (token_epsilon0 inf)
    ("truncated-gumbel", "no guarantee"),  # no guarantee claimed at all
])
def test_every_mechanism_goes_through_the_self_check(neighbour_artifact_dir, tmp_path, mechanism, expected):  # noqa: F811
    """The audit is generic over the mechanism interface: bounds from token_epsilon0, distances from
    metric_points, draws from privatize_ids. None of the real mechanisms may show a violation."""
    out = str(tmp_path / "out")
    extra = ["--gumbel-scale=0.5"] if mechanism == "truncated-gumbel" else []
    assert cli_main(["audit", f"--artifact={neighbour_artifact_dir}", f"--mechanism={mechanism}", "--epsilons=8",
                     "--pairs=4", "--draws=2000", "--no-oov-pairs", "--seed=2", f"--output={out}"] + extra + RUNNER) == 0
    check = json.load(open(f"{out}/summary.json", encoding="utf-8"))["self_check"]
    assert check["status"] == expected and check["per_epsilon"]["8"]["violations"] == 0


def test_santext_attacks_use_the_closed_form(neighbour_artifact_dir, imdb_rows, tmp_path):  # noqa: F811
    corpus = write_jsonl(tmp_path / "reviews.jsonl", imdb_rows[:120])
    out = str(tmp_path / "out")
    assert cli_main(["audit", f"--artifact={neighbour_artifact_dir}", "--mechanism=santext", "--epsilons=12",
                     "--checks=inversion,linkage", f"--corpus={corpus}", "--records=40", "--inversion-tokens=800",
                     "--prior-words=1500", "--linkage-sizes=10,50", "--seed=4", f"--output={out}"] + RUNNER) == 0
    summary = json.load(open(f"{out}/summary.json", encoding="utf-8"))
    assert summary["inversion"]["posterior"].startswith("exact") and summary["linkage"]["likelihood"] == "closed form"
    assert summary["inversion"]["per_epsilon"]["12"]["tokens"] == 800


@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 8, b"\x81\xfe\xff" * 999], ids=["empty", "bytes", "binary"])
def test_corpus_with_no_usable_record_is_a_failure_not_a_success(tiny_artifact_dir, tmp_path, capsys, content):
    """Issue 25 item 10: an empty or binary --corpus used to exit 0 having audited 0 records. A corpus none of whose
    first lines is UTF-8 is refused before the run (exit 2, one line, the byte offset but never the bytes); the others
    run and fail in one line (exit 1)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(content)
    code = cli_main(["audit", f"--artifact={tiny_artifact_dir}", "--checks=inversion,linkage", f"--corpus={corpus}",
                     "--epsilons=5", "--mc-draws=500", f"--output={tmp_path / 'audit'}"] + RUNNER)
    err = capsys.readouterr().err
    if content.startswith(b"\x81"):
        assert code == 2 and "is not UTF-8" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "audit").exists()
        return
    assert code == 1
    assert "--corpus yielded no record to attack" in err
    assert "report:" not in capsys.readouterr().out
