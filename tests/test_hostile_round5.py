"""Variants found by a fifth hostile round (issue 25) that this session fixed; the others are listed in the issue's
note. Real runs on the local runner and the small GloVe fixtures."""

import os
import subprocess
import sys

import pytest

import textdp
from pipelines.cli import main as cli_main
from tests.custom_mechanism import CappedExponential
from tests.test_custom_mechanism import install_entry_point
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.errors import ParameterError
from textdp.mechanisms import mechanism_class
from textdp.mechanisms.base import Parameter

RUNNER = ["--runner=FnApiRunner"]
MODULE = "tests.test_hostile_round5"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- R5-0/1/2: mechanisms whose parameter flags are Apache Beam's options ----------------------------------------


def _clash(class_name: str, mechanism_name: str, parameter: Parameter) -> type:
    return type(class_name, (CappedExponential,), {"name": mechanism_name, "PARAMETERS": (parameter,),
                                                    "__module__": __name__})


ExtraPackageClash = _clash("ExtraPackageClash", "r5-extra-package", Parameter("extra_package", str, None, help="x",
                                                                              example="x"))
MachineTypeClash = _clash("MachineTypeClash", "r5-machine-type", Parameter("worker_machine_type", str, None,
                                                                           help="x", example="x"))
ProjectClash = _clash("ProjectClash", "r5-project", Parameter("project", str, None, help="x", example="x"))
MachineDestClash = _clash("MachineDestClash", "r5-machine-dest", Parameter("machine_type", str, None, help="x",
                                                                           example="x"))
AliasClash = _clash("AliasClash", "r5-alias", Parameter("spread", float, None, help="x", example=1.0,
                                                        flag_aliases=("sdk_location",)))


class PrefixOfBeamFlag(CappedExponential):
    name = "r5-prefix"
    PARAMETERS = (Parameter("worker_machine", str, None, help="a prefix of Beam's --worker_machine_type", example="x"),)

    def __init__(self, artifact, epsilon, worker_machine=None):
        super().__init__(artifact, epsilon)


@pytest.mark.parametrize("cls, phrase", [
    (ExtraPackageClash, "'extra_package', which is already the flag --extra-package (as --extra_package)"),
    (MachineTypeClash, "'worker_machine_type', which is already the flag --worker-machine-type"),
    (ProjectClash, "'project', which is already the flag --project"),
    (MachineDestClash, "'machine_type', which is already the flag --machine-type (as --machine_type)"),
    (AliasClash, "'spread', whose flag alias --sdk_location is already a flag"),
])
def test_a_custom_parameter_whose_flag_is_a_beam_option_is_refused_in_one_line(cls, phrase, tmp_path):
    """The CLI stopped with argparse's 'conflicting option string' traceback (exit 1). Now a subprocess of the real
    CLI exits 2 with one line naming the mechanism and the parameter; nothing is written. The set of Beam's option
    strings is built from Beam's own options classes (pipelines/custom_flags.py), not a list."""
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n", encoding="utf-8")
    argv = [sys.executable, "-m", "pipelines.cli", "privatize", f"--input={source}", f"--output={tmp_path}/o/x",
            "--epsilon=5", f"--mechanism={MODULE}:{cls.__name__}", "--artifact=/nonexistent-artifact"] + RUNNER
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    err = done.stderr.strip()
    assert done.returncode == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"textdp privatize: error: mechanism {MODULE}:{cls.__name__} declares a parameter "), err
    assert phrase in err
    assert not (tmp_path / "o").exists()


def test_a_prefix_of_a_beam_flag_is_a_parameter_of_its_own(tiny_artifact_dir, tmp_path, capsys):
    """Beam's parser does not expand abbreviations (allow_abbrev=False), so --worker-machine (a prefix of
    --worker_machine_type) is not Beam's: the mechanism runs with it."""
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n", encoding="utf-8")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=5",
                     f"--mechanism={MODULE}:PrefixOfBeamFlag", "--worker-machine=n1", f"--artifact={tiny_artifact_dir}"]
                    + RUNNER) == 0
    assert os.listdir(tmp_path / "o")


def test_an_entry_point_mechanism_whose_parameter_is_a_beam_flag_is_refused_and_other_runs_go_on(
        tiny_artifact_dir, tmp_path, monkeypatch, capsys):
    """Registered through the entry point group, its flags were declared for every run: every textdp job stopped with
    argparse's traceback. Now it is left out of the flags, refused in one line when named, and other runs go on."""
    site = tmp_path / "site"
    site.mkdir()
    install_entry_point(site, "r5-extra-package", f"{MODULE}:ExtraPackageClash")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ParameterError, match="entry point group textdp.mechanisms.*'extra_package', which is already"):
        mechanism_class("r5-extra-package")
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", "--epsilon=5", f"--artifact={tiny_artifact_dir}"] + RUNNER
    capsys.readouterr()
    assert cli_main(argv + [f"--output={tmp_path}/o/x", "--mechanism=r5-extra-package"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "mechanism 'r5-extra-package'" in err and "'extra_package'" in err, err
    assert not (tmp_path / "o").exists()
    assert cli_main(argv + [f"--output={tmp_path}/o2/x"]) == 0  # madlib: the bad entry point does not stop it


def test_a_tem_beta_that_leaves_no_truncation_is_refused_before_the_run(neighbour_artifact_dir, tmp_path,  # noqa: F811
                                                                        capsys):
    """beta 0.9999 on 5,000 words gives gamma < 0 ((1 - beta)(|W| - 1) <= beta): the worker used to fail with "cap
    must be >= 0" after --overwrite had removed the earlier release; now the launcher refuses it in one line and an
    earlier release stays. A beta just below the limit still runs."""
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=5", "--mechanism=tem",
            f"--artifact={neighbour_artifact_dir}"] + RUNNER
    assert cli_main(argv) == 0
    first = sorted(os.listdir(tmp_path / "o"))
    capsys.readouterr()
    assert cli_main(argv + ["--beta=0.9999", "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("textdp privatize: error: beta 0.9999 leaves no truncation") and "\n" not in err
    assert sorted(os.listdir(tmp_path / "o")) == first  # the earlier release is intact
    with pytest.raises(textdp.TextdpError, match="leaves no truncation"):
        textdp.Privatizer(epsilon=5, mechanism="tem", artifact=neighbour_artifact_dir, beta=0.9999)
    textdp.Privatizer(epsilon=5, mechanism="tem", artifact=neighbour_artifact_dir, beta=0.999)  # gamma > 0: runs


@pytest.mark.parametrize("flag", ["--conformance-mechanisms=madlib", "--conformance-draws=5", "--power-repeats=0",
                                  "--conformance-words=3"])
def test_conformance_flags_without_conformance_are_refused(neighbour_artifact_dir, tmp_path, capsys, flag):  # noqa: F811
    """They were ignored (exit 0, the self-check printed 'Pass' whatever they said)."""
    code = cli_main(["audit", f"--artifact={neighbour_artifact_dir}", f"--output={tmp_path}/a", flag] + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "applies to --conformance only" in err and "\n" not in err
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("ids, message", [
    ([], "non-empty"), ([-1], "vocabulary ids"), ([10**30], "vocabulary ids"), ([5000], "0 to 4,999"),
    (["the"], "integers"), ([True], "integers"), ([1.5], "integers"), ("the", "not a str"), (7, "not a int"),
    ({1: 2}, "not a dict"), ([[1, 2]], "flat list"),
])
def test_santext_plus_sensitive_ids_of_every_odd_kind_are_refused_without_quoting_them(neighbour_artifact_dir,  # noqa: F811
                                                                                       ids, message):
    """R5-9: empty, negative, huge, out-of-range, words, booleans, floats, strings, numbers, dicts and nested lists
    raised raw ValueError/OverflowError/TypeError (one quoting the word) or were accepted silently."""
    with pytest.raises(textdp.TextdpError, match=message) as caught:
        textdp.Privatizer(epsilon=3, mechanism="santext+", artifact=neighbour_artifact_dir, sensitive_ids=ids)
    assert "the'" not in str(caught.value) and "'the" not in str(caught.value)
    released = textdp.Privatizer(epsilon=3, mechanism="santext+", artifact=neighbour_artifact_dir,
                                 sensitive_ids=[3, 4, 5], p=1.0).privatize(["the movie was good"], seed=1)
    assert len(released[0].split()) == 4


@pytest.mark.parametrize("content", [
    '{\n  "text": "the movie was good",\n  "id": 1\n}\n',  # one pretty-printed object
    '[\n{"text": "the movie was good"},\n{"text": "a quiet room"}\n]\n',  # a short array, one object a line
])
def test_json_that_is_not_one_object_per_line_is_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys, content):
    """R5-7: both shapes passed the format sniff and failed after the whole run (exit 1)."""
    source = tmp_path / "in.jsonl"
    source.write_text(content, encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=5",
                     f"--artifact={tiny_artifact_dir}"] + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2 and ("not JSON Lines" in err or "not JSONL" in err), err
    assert "\n" not in err and "movie" not in err and not (tmp_path / "o").exists()


# --- R5-10: a 64-bit author id written once as an integer, once as the float of a column with nulls --------------

BIG_ID = 1234567890123456789  # a 64-bit id; an exporter writes it 1.2345678901234568e18 in a column with a null


def _k_threshold_run(tmp_path, artifact, lines, capsys):
    import json

    source = tmp_path / "in.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=10", "--seed=1",
                     f"--artifact={artifact}", "--user-field=u", "--k-threshold=2", "--max-failed-fraction=1"] + RUNNER)
    out = capsys.readouterr()
    assert code == 0, out.err
    with open(tmp_path / "o" / "x-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    errors = []
    for name in sorted(os.listdir(tmp_path / "o")):
        if name.startswith("x-errors-"):
            with open(tmp_path / "o" / name, encoding="utf-8") as handle:
                errors += [json.loads(line) for line in handle if line.strip()]
    return summary, errors, out.out + out.err


def test_a_float_author_id_above_2_53_is_an_error_record_not_a_second_author(tiny_artifact_dir, tmp_path, capsys):
    """One person's two records, the id once an integer and once the float an exporter writes: they counted as two
    authors, so --k-threshold 2 released that person's words. Now the float is an error record unsafe_author_id
    (its digits never shown); one author remains, below k, and the run says every word was masked."""
    summary, errors, console = _k_threshold_run(tmp_path, tiny_artifact_dir, [
        f'{{"u": {BIG_ID}, "text": "the city was quiet"}}', f'{{"u": {float(BIG_ID)!r}, "text": "the city was quiet"}}',
    ], capsys)
    assert summary["records"]["failed_by_reason"] == {"unsafe_author_id": 1}
    assert [(e["position"], e["reason"]) for e in errors] == [(2, "unsafe_author_id")]
    assert "2**53" in errors[0]["detail"] and "12345" not in errors[0]["detail"] + console + str(summary)
    assert any("above the number of distinct authors" in w for w in summary["warnings"]), summary["warnings"]


def test_integer_author_ids_above_2_53_are_compared_exactly(tiny_artifact_dir, tmp_path, capsys):
    """Two integers that are one float (BIG_ID and BIG_ID - 1) are two authors (k = 2 is not above the number of
    authors, as it would be if they were one); an integral float below 2**53 is its integer (1.0 and 1 are one
    author) and no error."""
    assert float(BIG_ID) == float(BIG_ID - 1)
    summary, errors, _ = _k_threshold_run(tmp_path, tiny_artifact_dir, [
        f'{{"u": {BIG_ID}, "text": "the city"}}', f'{{"u": {BIG_ID - 1}, "text": "the city"}}'], capsys)
    assert errors == [] and summary["records"]["failed"] == 0
    assert not any("above the number of distinct authors" in w for w in summary["warnings"]), summary["warnings"]
    from textdp.text.records import author_identity, unsafe_author_id

    assert author_identity(BIG_ID) != author_identity(BIG_ID - 1) and author_identity(1.0) == author_identity(1)
    assert [unsafe_author_id(v) for v in (float(BIG_ID), 1.5, float("nan"), float("inf"), 2.0**53, 2.0**53 - 1,
                                          BIG_ID, "1.5", True)] == [True] * 5 + [False] * 4


# --- R5-6: audit --conformance tries every listed mechanism before any output is touched ---------------------------

BROKEN = "tests.broken_custom_mechanisms"
CONFORMANCE = ["--conformance", "--epsilons=5", "--conformance-draws=100", "--conformance-words=1",
               "--power-repeats=1"]


def test_conformance_mechanisms_are_tried_before_an_earlier_audit_is_overwritten(tiny_artifact_dir, tmp_path, capsys):
    """A listed mechanism whose constructor raises, or whose privatize_ids returns ids outside the vocabulary, failed
    in the worker after --overwrite had emptied the earlier audit. Now each is built and run on a few ids first
    (textdp.mechanisms.trial_build): exit 2, one line naming it, the earlier audit intact. One that returns bad ids
    only beyond the ids tried fails the run (exit 1) with released_ids' message, never a report of bad ids."""
    argv = ["audit", f"--artifact={tiny_artifact_dir}", f"--output={tmp_path}/a"] + CONFORMANCE + RUNNER
    assert cli_main(argv + ["--conformance-mechanisms=madlib"]) == 0
    earlier = {name: (tmp_path / "a" / name).read_bytes() for name in os.listdir(tmp_path / "a")}
    capsys.readouterr()
    for cls, phrase in (("InitBoom", "could not be built: RuntimeError: boom in init"),
                        ("BadIds", "privatize_ids returned the id -1")):
        assert cli_main(argv + [f"--conformance-mechanisms=madlib,{BROKEN}:{cls}", "--overwrite"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("textdp audit: error: mechanism 'rt-") and phrase in err, err
        assert {name: (tmp_path / "a" / name).read_bytes() for name in os.listdir(tmp_path / "a")} == earlier
    assert cli_main(argv + [f"--conformance-mechanisms={BROKEN}:LateBadIds", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "privatize_ids returned the id -1, outside the vocabulary" in err and "Traceback" not in err


def test_the_conformance_release_path_checks_released_ids(tiny_artifact_dir):
    """textdp.audit.conformance.release goes through textdp.text.privatizer.released_ids, the one place released ids
    are checked: float ids, short arrays and out-of-vocabulary ids are refused, not tested as releases."""
    import numpy as np

    import tests.broken_custom_mechanisms as broken
    from textdp.artifact.store import Artifact
    from textdp.audit.conformance import release

    artifact = Artifact(tiny_artifact_dir)
    ids = np.arange(100, dtype=np.int64)
    for cls, phrase in ((broken.LateBadIds, "the id -1"), (broken.FloatIds, "not of integers"),
                        (broken.ShortIds, "shape"), (broken.TooLargeIds, "the id 300")):
        with pytest.raises(textdp.TextdpError, match=phrase):
            release(cls(artifact, 5.0), ids, np.random.default_rng(0), artifact.vocab_size)
    good = release(CappedExponential(artifact, 5.0), ids, np.random.default_rng(0), artifact.vocab_size)
    assert good.dtype == np.int64 and good.shape == ids.shape and 0 <= good.min() and good.max() < 300


# --- R5-3/4/5: the notebook API refuses what it does not take, naming its kind, never its content -----------------


def _odd_values():
    from decimal import Decimal

    import pandas as pd

    return [
        (b"SECRETCANARY", "not a bytes"), (bytearray(b"SECRETCANARY"), "not a bytearray"),
        ({"SECRETCANARY": "the movie"}, "not a dict"), ({"SECRETCANARY"}, "not a set"),
        (pd.DataFrame({"SECRETCANARY": ["the movie"]}), "not a pandas.DataFrame"), (Decimal("1.5"), "not a decimal.Decimal"),
        (7, "not a int"), ([b"SECRETCANARY"], "holds a bytes at position 0"),
        (["the movie", Decimal("1.5")], "holds a decimal.Decimal at position 1"), ([{"SECRETCANARY": 1}], "holds a dict"),
    ]


def test_notebook_audit_and_calibrate_refuse_odd_inputs_naming_their_kind(tiny_artifact_dir):
    """calibrate(word_list=b"...") calibrated the byte values as words; audit(corpus=dict) audited the keys; a
    DataFrame, bytes or Decimal raised raw AttributeError/TypeError. Each is now TextdpTypeError (a TextdpError)
    naming the kind received, before any job runs, and never quoting it."""
    from pipelines.notebook import audit, calibrate

    for value, phrase in _odd_values():
        for call in (lambda v: audit([5], artifact=tiny_artifact_dir, corpus=v, checks="inversion"),
                     lambda v: audit([5], artifact=tiny_artifact_dir, prior_corpus=v, checks="inversion"),
                     lambda v: calibrate([5], artifact=tiny_artifact_dir, word_list=v, samples=10)):
            with pytest.raises(textdp.TextdpError, match=phrase) as caught:
                call(value)
            assert isinstance(caught.value, TypeError) and "SECRETCANARY" not in str(caught.value)
            assert "movie" not in str(caught.value)


def test_notebook_calibrate_takes_a_tuple_or_series_of_words(tiny_artifact_dir):
    """What the docstring promises still runs: a tuple, and a pandas Series with a missing value (left out)."""
    import pandas as pd

    from pipelines.notebook import calibrate

    for words in (("good", "the"), pd.Series(["good", None, "the"])):
        result = calibrate([8], artifact=tiny_artifact_dir, word_list=words, samples=10, seed=1)
        assert sorted(set(result.table["word"])) == ["good", "the"]


# --- minor: an output prefix named like textdp's own directory lock ----------------------------------------------


def test_an_output_prefix_named_like_the_directory_lock_is_refused_for_what_it_is(tiny_artifact_dir, tmp_path, capsys):
    """--output o2/.textdp: its lock file o2/.textdp.lock is the lock textdp keeps for the directory, so the run was
    refused as 'being written by another textdp run'. Now the one line says the prefix is textdp's own name;
    nothing is written, and a prefix that only starts so (.textdpx) runs."""
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", "--epsilon=5", f"--artifact={tiny_artifact_dir}"] + RUNNER
    assert cli_main(argv + [f"--output={tmp_path}/o2/.textdp"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the file-name prefix .textdp is textdp's own name" in err, err
    assert "another textdp run" not in err and not (tmp_path / "o2").exists()
    assert cli_main(argv + [f"--output={tmp_path}/o3/.textdpx"]) == 0
