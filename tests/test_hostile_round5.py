"""Variants found by a fifth hostile round (issue 25) that this session fixed; the others are listed in the issue's
note. Real runs on the local runner and the small GloVe fixtures."""

import os

import pytest

import textdp
from pipelines.cli import main as cli_main
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)

RUNNER = ["--runner=FnApiRunner"]


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
