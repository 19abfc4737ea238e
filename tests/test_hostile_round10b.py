"""Red-team round-10 findings R10-1 and R10-8 (issue 25), fixed on branch fix10b.

Real runs of the CLI on the local runner (FnApiRunner) over the real GloVe test artifact; nothing is mocked. No test
here is statistical (only files, exit codes and console lines are compared).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from pipelines.cli import main as cli_main
from tests.test_hostile_round6b import REVIEWS, _earlier_release, _input, _snapshot
from textdp.outputs import EARLIER_FOLDER_PREFIX, FAILED_FOLDER_PREFIX, read_attached

RUNNER = "--runner=FnApiRunner"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(artifact, *args) -> int:
    return cli_main(["privatize", "--epsilon=10", f"--artifact={artifact}", RUNNER, *args])


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


# --- R10-1: an attached public summary that is now another release's -------------------------------------------


def _two_releases_one_publishing_path(tmp_path, artifact) -> tuple:
    """Release p with --public-summary pub.json, pub.json moved away (published), then release q with the same
    --public-summary: pub.json is q's, and p's run record still lists it as ``attached``."""
    source, out = _input(tmp_path), tmp_path / "f"
    p, q, pub = str(out / "p"), str(out / "q"), str(out / "pub.json")
    assert _run(artifact, f"--input={source}", f"--output={p}", f"--public-summary={pub}") == 0
    os.rename(pub, str(tmp_path / "published-p.json"))
    assert _run(artifact, f"--input={source}", f"--output={q}", f"--public-summary={pub}") == 0
    assert read_attached(f"{p}.textdp-run.json") == [pub] and read_attached(f"{q}.textdp-run.json") == [pub]
    assert json.loads(_read(pub))["output"].startswith(q + "-")
    return source, p, q, pub


def test_overwrite_leaves_an_attached_public_summary_that_is_now_another_releases(tmp_path, tiny_artifact_dir,
                                                                                  capsys):
    """R10-1: `--overwrite` of p (no --public-summary) used to move aside and delete pub.json, although it had become
    q's public summary (its "output" names q). Now it stays byte-identical, the console says so in one line, the run
    succeeds, and p's new run record no longer attaches it (so later runs of p leave it alone too)."""
    source, p, q, pub = _two_releases_one_publishing_path(tmp_path, tiny_artifact_dir)
    before = _read(pub)
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={p}", "--overwrite") == 0
    err = capsys.readouterr().err
    assert _read(pub) == before
    said = [line for line in err.splitlines() if "left in place" in line]
    assert len(said) == 1 and "is now the public summary of another release" in said[0] and q in said[0], err
    assert read_attached(f"{p}.textdp-run.json") == [] and read_attached(f"{q}.textdp-run.json") == [pub]
    assert not glob.glob(str(tmp_path / "f" / f"{EARLIER_FOLDER_PREFIX}*"))
    assert not glob.glob(str(tmp_path / "f" / f"{FAILED_FOLDER_PREFIX}*"))


def test_overwrite_with_the_public_summary_of_another_release_is_refused_though_attached(tmp_path,
                                                                                        tiny_artifact_dir, capsys):
    """R10-1 variant: `--overwrite --public-summary pub.json` for p, whose run record attaches pub.json but pub.json
    is now q's: refused before the run in one line (exit 2), every file byte-identical (it used to replace q's public
    summary with p's)."""
    source, p, q, pub = _two_releases_one_publishing_path(tmp_path, tiny_artifact_dir)
    before = {path: _read(path) for path in glob.glob(str(tmp_path / "f" / "*"))}
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={p}", "--overwrite", f"--public-summary={pub}") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is the public summary of another release" in err, err
    assert {path: _read(path) for path in glob.glob(str(tmp_path / "f" / "*"))} == before


def test_overwrite_still_replaces_its_own_public_summary_given_relative_to_another_directory(
        tmp_path, tiny_artifact_dir, monkeypatch, capsys):
    """The rule still knows a release's own public summary when its --output was given relative to another
    working directory (the summary's "output" is that relative path): --overwrite from elsewhere replaces it, with
    --public-summary (exit 0, now naming the new path) and without (moved aside and removed)."""
    source = _input(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert _run(tiny_artifact_dir, f"--input={source}", "--output=o/p", "--public-summary=o/pub.json") == 0
    pub = str(tmp_path / "work" / "o" / "pub.json")
    assert json.loads(_read(pub))["output"].startswith("o/p-")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", "--output=work/o/p", "--overwrite",
                "--public-summary=work/o/pub.json") == 0
    assert "left in place" not in capsys.readouterr().err
    assert json.loads(_read(pub))["output"].startswith("work/o/p-")
    monkeypatch.chdir(tmp_path / "work")
    assert _run(tiny_artifact_dir, f"--input={source}", "--output=o/p", "--overwrite") == 0
    assert not os.path.exists(pub) and not glob.glob(str(tmp_path / "work" / "o" / f"{EARLIER_FOLDER_PREFIX}*"))


# --- R10-8: a signal after the run is committed ----------------------------------------------------------------

# The real command (pipelines.cli.main on this process's own argv, as `python -m pipelines.cli` runs it), with the
# signal delivered by the process to itself from inside the commit step (OutputGuard.commit_earlier, which removes
# the earlier release once the report judged the run a success) or right after the command returned: os.kill runs
# the Python handler before it returns, so where the signal lands is fixed, not a race.
_COMMAND = """
import os, signal, sys
from pipelines import cli
from textdp import outputs
signum, where = getattr(signal, sys.argv.pop(1)), sys.argv.pop(1)
commit = outputs.OutputGuard.commit_earlier
def at_commit(self):
    if where == "commit":
        os.kill(os.getpid(), signum)
    commit(self)
outputs.OutputGuard.commit_earlier = at_commit
records, sent = outputs.OutputGuard.write_records, []
def at_records(self):
    if where == "records" and not sent:
        sent.append(os.kill(os.getpid(), signum))
    records(self)
outputs.OutputGuard.write_records = at_records
code = cli.main()
if where == "exit":
    os.kill(os.getpid(), signum)
sys.exit(code)
"""


@pytest.mark.parametrize("name,where", [("SIGTERM", "commit"), ("SIGINT", "commit"), ("SIGTERM", "exit")])
def test_a_signal_after_an_overwrite_run_committed_exits_0_with_the_new_release(name, where, tmp_path,
                                                                               tiny_artifact_dir):
    """R10-8: SIGINT/SIGTERM arriving once an --overwrite run is committed (the earlier release being removed,
    the report about to be printed) or after the command returned, before the process exits, used to give exit
    130/143 with no line, while the new release was complete and the earlier one gone. Now: exit 0, the full
    report, the new release (2 records) on disk, no hidden folder; a signal inside the run says so in one line."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    _input(tmp_path, lines=REVIEWS[:2])
    result = subprocess.run([sys.executable, "-c", _COMMAND, name, where, "privatize", f"--input={source}",
                             f"--output={output}", "--epsilon=10", "--overwrite", f"--artifact={tiny_artifact_dir}",
                             RUNNER], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "records: 2 in, 2 out, 0 failed" in result.stdout, result.stdout
    late = [line for line in result.stderr.splitlines() if "arrived after the run completed" in line]
    assert len(late) == (1 if where == "commit" else 0) and all(name in line for line in late), result.stderr
    assert ": interrupted" not in result.stderr and "terminated (" not in result.stderr and "put back" not in result.stderr
    assert json.loads(_read(f"{output}-summary.json"))["records"]["in"] == 2
    with open(glob.glob(f"{output}-00000-of-*.txt")[0], encoding="utf-8") as handle:
        assert len(handle.read().splitlines()) == 2
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*") and not glob.glob(f"{tmp_path}/o/*.lock")


def test_after_a_committed_run_in_process_the_callers_signal_handlers_are_back(tmp_path, tiny_artifact_dir):
    """R10-8's deferral is the command's alone: a run called in-process (tests, notebooks: pipelines.cli.main with an
    argv) leaves the caller's SIGINT/SIGTERM handlers as they were."""
    source, output, _ = _earlier_release(tmp_path, tiny_artifact_dir)
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}", "--overwrite") == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


def test_a_signal_during_the_runs_bookkeeping_puts_the_earlier_release_back_in_one_line(tmp_path, tiny_artifact_dir):
    """Found while fixing R10-8: SIGTERM while the finished pipeline's run records were written (before the report,
    the release not yet committed) escaped as a KeyboardInterrupt traceback, exit 130, leaving the earlier release in
    a .textdp-earlier-* folder and stale locks. Now the signal waits for the end of that bookkeeping and then
    interrupts where the release is put back: exit 143, one line, the earlier release (3 records) at its names."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    _input(tmp_path, lines=REVIEWS[:2])
    result = subprocess.run([sys.executable, "-c", _COMMAND, "SIGTERM", "records", "privatize", f"--input={source}",
                             f"--output={output}", "--epsilon=10", "--overwrite", f"--artifact={tiny_artifact_dir}",
                             RUNNER], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 143, result.stderr
    assert "Traceback" not in result.stderr and "terminated (SIGTERM)" in result.stderr, result.stderr
    assert "the earlier run's files were put back" in result.stderr
    assert _snapshot(f"{tmp_path}/o") == before
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*") and not glob.glob(f"{tmp_path}/o/*.lock")


def test_an_interrupted_command_does_not_wait_for_lingering_worker_threads():
    """After a signal, a runner's non-daemon worker thread stuck mid-bundle kept the interrupted process alive at exit
    for minutes (seen once, after its one-line message). ``leave_without_waiting`` ends the process with the exit code
    at once when such threads linger (the real function in a real process with a thread sleeping 120 s: the 60 s
    timeout fails the test if it waits), and returns when none linger."""
    import subprocess
    import sys

    script = ("import threading, time, sys\n"
              "threading.Thread(target=time.sleep, args=(120,)).start()\n"
              "from pipelines.cli import leave_without_waiting\n"
              "print('said', flush=False)\n"
              "leave_without_waiting(143)\n"
              "print('not reached')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=os.path.dirname(os.path.dirname(__file__)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 143 and done.stdout == "said\n", (done.returncode, done.stdout, done.stderr)
    quiet = subprocess.run([sys.executable, "-c", "from pipelines.cli import leave_without_waiting\n"
                            "leave_without_waiting(130)\nprint('returned')"],
                           cwd=os.path.dirname(os.path.dirname(__file__)), capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and quiet.stdout == "returned\n"
