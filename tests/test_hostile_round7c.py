"""Variants found by the seventh hostile round (issue 25, findings F15, F12, F13, F6) that this branch fixed.
Real Privatizers, real subprocesses of the command on the local runner (FnApiRunner) and the small GloVe fixture; no
mocks. No test here is randomized in a way that can fail: the assertions hold for every draw of the noise."""

import glob
import io
import json
import os
import subprocess
import sys

import numpy as np

import textdp
from pipelines.cli import main as cli_main
from tests.custom_mechanism import CappedExponential
from textdp.mechanisms import PROBE_IDS, probe_ids, trial_build
from textdp.progress import console_print, console_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = "--runner=FnApiRunner"


def _close_stderr():
    os.close(2)  # as `2>&-`: Python then starts with sys.stderr None


def _privatize(arguments, env=None, close_stderr=False):
    """A real subprocess of the command; stdout and stderr as text (stderr empty when it was closed)."""
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", RUNNER, "--epsilon=5"] + arguments,
                          cwd=ROOT, env=dict(os.environ, **(env or {})), capture_output=not close_stderr,
                          stdout=subprocess.PIPE if close_stderr else None,
                          preexec_fn=_close_stderr if close_stderr else None, timeout=300, text=True, errors="replace")

# --- F15: privacy_statement() after a seeded call ----------------------------------------------------------------


def test_f15_privacy_statement_after_a_seeded_call_states_the_seed(tiny_artifact_dir):
    """After P.privatize(texts, seed=42), P.privacy_statement() said "No seed was used" and covered_by_guarantee True.
    Now the Privatizer records that a call was seeded and its statement says so (covered by nothing), even when the
    caller passes seed_used=False; a Privatizer that never saw a seed still states the guarantee."""
    fresh = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    fresh.privatize(["the was cold"])
    unseeded = fresh.privacy_statement()
    assert unseeded["covered_by_guarantee"] is True and unseeded["seed"].startswith("No seed")
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    p.privatize(["the was cold"], seed=42)
    p.privatize(["the was cold"])  # a later unseeded call does not wash the seed out
    for statement in (p.privacy_statement(), p.privacy_statement(seed_used=False), p.privacy_statement(seed_used=True)):
        assert statement["covered_by_guarantee"] is False
        assert statement["output_coverage"]["covered"] == "none"
        assert not statement["seed"].startswith("No seed")
    assert p.seeded is True and fresh.seeded is False


# --- F12/F13: console writes after a committed release ------------------------------------------------------------


def test_f12_console_write_escapes_what_the_stream_cannot_hold_and_skips_a_closed_or_missing_stream():
    """The one place console lines go through (textdp/progress.py): an ASCII stream gets a backslash escape, a closed
    stream or None gets nothing, and neither raises."""
    raw = io.BytesIO()
    ascii_stream = io.TextIOWrapper(raw, encoding="ascii")
    assert console_print("output: /tmp/\u00e9/p", ascii_stream) is True
    assert raw.getvalue() == b"output: /tmp/\\xe9/p\n"
    closed = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    closed.close()
    assert console_write("x\n", closed) is False
    saved = sys.stderr
    try:
        sys.stderr = None
        assert console_write("x\n") is False
    finally:
        sys.stderr = saved


def test_f12_a_non_ascii_output_path_on_an_ascii_console_ends_in_exit_0(tiny_artifact_dir, tmp_path):
    """PYTHONIOENCODING=ascii (LANG=C, a Latin-1 or Windows console) and an output folder named with an accent: the
    run released, then printing its report raised UnicodeEncodeError, exit 1 (a scheduler retries: a second noisy
    release). Now the report escapes the accent, exit 0, for a first run and for an --overwrite run, whose new
    release stays (nothing put back)."""
    folder = tmp_path / "\u00e9"
    folder.mkdir()
    source = folder / "r.txt"
    source.write_text("the president said our police were cold\n", encoding="utf-8")
    arguments = [f"--input={source}", f"--output={folder / 'o' / 'p'}", f"--artifact={tiny_artifact_dir}"]
    env = {"PYTHONIOENCODING": "ascii", "LANG": "C", "LC_ALL": "C"}
    for extra in ([], ["--overwrite"]):
        done = _privatize(arguments + extra, env=env)
        assert done.returncode == 0, done.stderr[-400:]
        assert "Traceback" not in done.stderr and "\\xe9" in done.stdout
        assert "president" not in done.stdout + done.stderr
        shards = glob.glob(str(folder / "o" / "p-0*"))
        assert len(shards) == 1 and not glob.glob(str(folder / "o" / ".textdp-earlier-*"))


def test_f13_a_closed_stderr_does_not_fail_a_run(tiny_artifact_dir, tmp_path):
    """With stderr closed (2>&-) the progress reporter raised AttributeError after the release was written: "the
    pipeline failed", exit 1 (with --overwrite the new release was thrown away). Now no progress is shown, exit 0,
    the report on stdout, the public summary written, with and without --overwrite."""
    source = tmp_path / "r.txt"
    source.write_text("the president said our police were cold\n", encoding="utf-8")
    arguments = [f"--input={source}", f"--output={tmp_path / 'o' / 'p'}", f"--artifact={tiny_artifact_dir}",
                 f"--public-summary={tmp_path / 'o' / 'pub.json'}"]
    for extra in ([], ["--overwrite"]):
        done = _privatize(arguments + extra, env={"TEXTDP_PROGRESS_INTERVAL": "0.1"}, close_stderr=True)
        assert done.returncode == 0, done.stdout[-400:]
        assert "error:" not in done.stdout and "public summary:" in done.stdout
        with open(tmp_path / "o" / "pub.json", encoding="utf-8") as handle:
            assert json.load(handle)["records_released"] == 1
        assert not glob.glob(str(tmp_path / "o" / ".textdp-earlier-*"))


API_AND_NOTEBOOK = """
import sys
import textdp
from pipelines import notebook
assert sys.stderr is None
released = textdp.Privatizer(epsilon=5, artifact=sys.argv[1], progress=True).privatize(["the was cold", "our police"])
result = notebook.calibrate([5.0], artifact=sys.argv[1], words=5, samples=20, runner="FnApiRunner")
print("ok", len(released), type(result).__name__)
"""


def test_f13_the_api_and_notebook_calibrate_run_with_sys_stderr_none(tiny_artifact_dir):
    """sys.stderr None (pythonw, a GUI or service host): Privatizer(progress=True).privatize and notebook.calibrate
    raised a bare AttributeError. Now the bar is not shown and calibrate's job output is kept only: both return."""
    done = subprocess.run([sys.executable, "-c", API_AND_NOTEBOOK, tiny_artifact_dir], cwd=ROOT, stdout=subprocess.PIPE,
                          text=True, preexec_fn=_close_stderr, timeout=300)
    assert done.returncode == 0, done.stdout[-400:]
    assert done.stdout.strip().splitlines()[-1] == "ok 2 CalibrationResult"


# --- F6: the launcher's trial of a custom mechanism covers the whole vocabulary ----------------------------------


class TopTableOnly(CappedExponential):
    """Right on the 64 most frequent words only (a precomputed table for the top N), -1 (no entry) for the others."""

    name = "r7c-top-table"

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        out = CappedExponential.privatize_ids(self, ids, rng)
        out[ids >= 64] = -1
        return out


def test_f6_the_trial_ids_are_spread_over_the_whole_vocabulary():
    """The trial released ids 0..63 only. Now PROBE_IDS distinct ids from the most frequent (0) to the rarest (size-1),
    evenly spaced; every id of a smaller vocabulary."""
    for size in (300, 5000, 391311):
        probe = probe_ids(size)
        assert len(probe) == len(np.unique(probe)) == PROBE_IDS and probe[0] == 0 and probe[-1] == size - 1
        assert np.diff(probe).max() <= -(-(size - 1) // (PROBE_IDS - 1))
        assert np.count_nonzero(probe < 64) <= 1 + 63 * (PROBE_IDS - 1) // (size - 1)
    assert list(probe_ids(10)) == list(range(10))


def test_f6_a_mechanism_right_only_on_the_frequent_words_is_refused_by_the_trial(tiny_artifact_dir, tmp_path, capsys):
    """A custom mechanism that is right on the first 64 ids and wrong on every other passed the launcher's trial (it
    was found on the workers only, after the run started). Now the trial covers the tail: refused before the run in
    one line (exit 2), nothing written, no word quoted."""
    from textdp.artifact.store import Artifact

    artifact = Artifact(tiny_artifact_dir)
    try:
        trial_build(TopTableOnly, artifact, 5.0)
    except textdp.TextdpError as exc:
        assert "privatize_ids returned the id -1" in str(exc)
    else:
        raise AssertionError("the trial passed a mechanism wrong on every id >= 64")
    source = tmp_path / "in.txt"
    source.write_text("the president said our police were cold\n", encoding="utf-8")
    output = tmp_path / "o"
    code = cli_main(["privatize", RUNNER, "--epsilon=5", f"--input={source}", f"--output={output / 'p'}",
                     f"--artifact={tiny_artifact_dir}", "--mechanism=tests.test_hostile_round7c:TopTableOnly"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "president" not in err
    assert not output.exists() or not os.listdir(output)
