"""Red-team 6b findings on ``textdp audit`` (F8, F9, F16), on the real command (local FnApiRunner, the 300-word
artifact /tmp/art300 and the example corpus). No test here is statistical: each asserts what the run refuses,
records or prints, not a rate."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from pipelines.cli import main as cli_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ART = "/tmp/art300"
CORPUS = os.path.join(REPO, "examples", "reviews.txt")  # 30 records
RUNNER = ["--runner=FnApiRunner"]


def audit(out, *extra):
    return cli_main(["audit", f"--artifact={ART}", "--checks=inversion", "--epsilons=5", f"--corpus={CORPUS}",
                     "--inversion-tokens=200", "--mc-draws=2000", "--prior-words=300", "--seed=1", f"--output={out}",
                     *extra] + RUNNER)


@pytest.mark.parametrize("how", ["same", "link", "glob", "hard link", "copy", "gzip copy"])
def test_prior_corpus_that_reads_the_attacked_file_is_refused(tmp_path, capsys, how):
    """F8: --prior-corpus naming the --corpus file (the same path, a symlink or a hard link to it (R8b-11), or a
    pattern matching it) would
    train the attackers on the records they attack: one line, exit 2, before anything runs (no output)."""
    corpus = tmp_path / "c" / "reviews.txt"
    corpus.parent.mkdir()
    shutil.copy(CORPUS, corpus)
    prior = {"same": str(corpus), "glob": str(tmp_path / "c" / "*.txt")}.get(how)
    if how == "link":
        os.symlink(corpus, tmp_path / "link.txt")
        prior = str(tmp_path / "link.txt")
    if how == "hard link":
        os.link(corpus, tmp_path / "hard.txt")
        prior = str(tmp_path / "hard.txt")
    if how in ("copy", "gzip copy"):  # R9b-5: the same records in another file
        import gzip

        prior = str(tmp_path / ("copy.txt.gz" if how == "gzip copy" else "copy.txt"))
        with open(corpus, "rb") as plain, (gzip.open if how == "gzip copy" else open)(prior, "wb") as packed:
            packed.write(plain.read())
    code = cli_main(["audit", f"--artifact={ART}", "--checks=inversion", "--epsilons=5", f"--corpus={corpus}",
                     f"--prior-corpus={prior}", f"--output={tmp_path / 'out'}"] + RUNNER)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert ("--prior-corpus and --corpus both read reviews.txt" in err if "copy" not in how else
            "--prior-corpus holds 30 of the 30 distinct records of --corpus" in err), err
    assert not (tmp_path / "out").exists()


def test_no_contextual_with_contextual_candidates_is_refused(tmp_path, capsys):
    """F9's contradictory flags: --no-contextual with --contextual-candidates is refused in one line."""
    assert audit(tmp_path / "out", "--no-contextual", "--contextual-candidates=7") == 2
    err = capsys.readouterr().err
    assert "--no-contextual" in err and "--contextual-candidates" in err and len(err.strip().splitlines()) == 1


def test_an_untrained_contextual_attacker_is_flagged_in_summary_report_and_console(tmp_path, capsys):
    """F9: every record of the corpus attacked and no --prior-corpus: the language model has nothing to learn from;
    the summary's model records a warning, the console prints it once, and report.html shows it."""
    out = tmp_path / "out"
    assert audit(out, "--records=30") == 0
    printed = capsys.readouterr().out
    summary = json.load(open(out / "summary.json", encoding="utf-8"))
    model = summary["contextual_inversion"]["model"]
    assert model["training_bigrams"] == 0 and "knows no word order" in model["warning"]
    assert printed.count("WARNING: contextual attacker: its language model holds no bigram") == 1, printed
    assert "knows no word order" in open(out / "report.html", encoding="utf-8").read()


def test_a_trained_contextual_attacker_has_no_warning(tmp_path, capsys):
    """The control of the test above: with records left to train on, no warning."""
    out = tmp_path / "out"
    assert audit(out, "--records=10") == 0
    summary = json.load(open(out / "summary.json", encoding="utf-8"))
    assert summary["contextual_inversion"]["model"]["training_bigrams"] > 0
    assert "warning" not in summary["contextual_inversion"]["model"]
    assert "WARNING: contextual attacker" not in capsys.readouterr().out


def test_no_contextual_leaves_no_contextual_figure_and_says_it_was_skipped(tmp_path, capsys):
    """F16: with --no-contextual the summary has no contextual record/token counts and no contextual definition;
    it says the attacker was not run, and so do the console and report.html."""
    out = tmp_path / "out"
    assert audit(out, "--records=20", "--no-contextual") == 0
    printed = capsys.readouterr().out
    summary = json.load(open(out / "summary.json", encoding="utf-8"))
    assert "contextual_inversion" not in summary
    assert not [key for key in summary["corpus"] if key.startswith("contextual")]
    assert not [term for term in summary["definitions"] if "contextual" in term]
    assert "--no-contextual" in summary["contextual_inversion_skipped"]
    assert "contextual attacker: not run (--no-contextual)" in printed
    assert "not run (--no-contextual)" in open(out / "report.html", encoding="utf-8").read()
