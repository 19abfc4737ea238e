"""Red-team 9b's exposure-ledger findings (R9b-3, R9b-11, R9b-8, R9b-6, R9b-4), each with its defined outcome, on real
processes (``python -m pipelines.cli``), real SQLite ledgers and the 300-word artifact:

* R9b-3: a plain ``textdp ledger reconcile`` never discards: a pending run whose release was moved stays pending (exit
  1, one line saying where it looked and naming ``--discard``); the output is stored absolute, so a reconcile run from
  another folder finds a run given a relative ``--output``;
* R9b-11: a run still running (its output lock held by a live process) is reported "still running", untouched, and
  ``--discard`` of it is refused; a run discarded while it ran is committed from its release file, loudly;
* R9b-8: the ledger statement's "B x max d" form only for a mechanism that declares an epsilon x d per-word bound;
* R9b-6: a streaming window's scope sentence names the ledger section as the exception with --ledger;
* R9b-4: a busy (locked) SQLite ledger at commit time is "unreachable, retry reconcile", never "restore"; budgets
  that differ beyond :g are printed with the digits that differ.

Admission is deterministic (exact arithmetic) and no mechanism's output is compared: no test here is statistical.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.test_ledger import ART300, KEY, write_corpus
from textdp.ledger import Ledger, key_fingerprint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP = key_fingerprint(KEY)
pytestmark = pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")


def cli(args, env_extra=None, background=False, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=REPO, **(env_extra or {}))  # this worktree's code from any folder
    command = [sys.executable, "-m", "pipelines.cli"] + [str(a) for a in args]
    if background:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=600)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def privatize(tmp_path, output, ledger, *extra, env_extra=None, cwd=REPO, background=False):
    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    inputs = tmp_path / "in.jsonl"
    if not inputs.exists():
        write_corpus(inputs, [("a", 5), ("b", 5)])  # each author: mass 5 at epsilon 1
    create = [] if os.path.exists(ledger) else ["--ledger-create", "--author-budget", 100]
    return cli(["privatize", "--input", inputs, "--output", output, "--epsilon", 1, "--artifact", ART300,
                "--user-field", "author", "--ledger", ledger, "--ledger-key-file", key, "--runner", "FnApiRunner",
                *create, *extra], env_extra, background=background, cwd=cwd)


def reconcile(tmp_path, ledger, *extra, cwd=REPO):
    return cli(["ledger", "reconcile", "--ledger", ledger, "--ledger-key-file", tmp_path / "ledger.key", *extra], cwd=cwd)


def state_of(ledger, run_id):
    store = Ledger(str(ledger), FP)
    try:
        return store.run(run_id)["state"], sum(store.spent().values())
    finally:
        store.close()


def killed_run(tmp_path, output, ledger, run_id, cwd=REPO):
    """A run stopped between its outputs and its commit: pending, its release file written."""
    code, _, err = privatize(tmp_path, output, ledger, "--ledger-run-id", run_id, env_extra={"TEXTDP_TEST_LEDGER_KILL": "1"},
                             cwd=cwd)
    assert code == -9, err


# --- R9b-3 ------------------------------------------------------------------------------------------------


def test_reconcile_never_discards_a_run_whose_release_was_moved(tmp_path):
    """R9b-3: the release folder is moved after the run: reconcile leaves the run pending (exit 1, where it looked,
    --discard named), the ledger still refuses a new run; moved back, reconcile commits the 10 released words."""
    ledger = str(tmp_path / "L.sqlite")
    os.makedirs(tmp_path / "first")
    assert privatize(tmp_path, tmp_path / "first" / "r", ledger)[0] == 0  # creates the ledger (budget 100): authors at 5
    os.makedirs(tmp_path / "p1")
    killed_run(tmp_path, tmp_path / "p1" / "r", ledger, "moved-run")
    shutil.move(tmp_path / "p1", tmp_path / "published")
    code, out, err = reconcile(tmp_path, ledger)
    assert code == 1, out + err
    assert "run moved-run stays pending: no release file" in out and str(tmp_path / "p1" / "r-ledger.json") in out, out
    assert "reconcile --discard moved-run` is the operator's explicit choice" in out and "discarded" not in out, out
    assert state_of(ledger, "moved-run") == ("pending", 10)
    shutil.move(tmp_path / "published", tmp_path / "p1")
    code, out, err = reconcile(tmp_path, ledger)
    assert code == 0 and "run moved-run committed: 2 record(s) of 2 author(s) released" in out, out + err
    assert state_of(ledger, "moved-run") == ("committed", 20)


def test_a_relative_output_is_stored_absolute_and_found_from_another_folder(tmp_path):
    """R9b-3 variant: --output rel/r given from tmp_path; reconcile from / commits it (the ledger stores the path
    absolute)."""
    ledger = str(tmp_path / "L.sqlite")
    os.makedirs(tmp_path / "rel")
    killed_run(tmp_path, "rel/r", ledger, "relative-run", cwd=tmp_path)
    store = Ledger(ledger, FP)
    assert store.run("relative-run")["output"] == str(tmp_path / "rel" / "r")
    store.close()
    code, out, err = reconcile(tmp_path, ledger, cwd="/")
    assert code == 0 and "run relative-run committed: 2 record(s) of 2 author(s) released" in out, out + err


# --- R9b-11 -----------------------------------------------------------------------------------------------


def test_a_running_run_is_left_pending_and_cannot_be_discarded(tmp_path):
    """R9b-11: a reserved run whose output lock is held by a live process (this test's, textdp's lock format) is
    "still running": reconcile exits 1 and leaves it pending, --discard is refused; once the lock is gone and no
    file is found it stays pending until the explicit --discard."""
    from textdp.outputs import _lock_content

    (tmp_path / "ledger.key").write_bytes(KEY)
    ledger = str(tmp_path / "L.sqlite")
    store = Ledger(ledger, FP)
    store.reserve("live-run", 1.0, "madlib", 12.0, str(tmp_path / "out" / "r"), "jsonl")
    store.close()
    os.makedirs(tmp_path / "out")
    (tmp_path / "out" / "r.lock").write_bytes(_lock_content("privatize"))
    code, out, err = reconcile(tmp_path, ledger)
    assert code == 1 and "run live-run is still running (its output lock" in out and "held by a live process" in out, out
    assert state_of(ledger, "live-run")[0] == "pending"
    code, out, err = reconcile(tmp_path, ledger, "--discard", "live-run")
    assert code == 2 and "still running" in err and len(err.strip().splitlines()) == 1, err
    assert state_of(ledger, "live-run")[0] == "pending"
    os.remove(tmp_path / "out" / "r.lock")
    code, out, err = reconcile(tmp_path, ledger)
    assert code == 1 and "run live-run stays pending: no release file" in out, out
    code, out, err = reconcile(tmp_path, ledger, "--discard", "live-run")
    assert code == 0 and "run live-run discarded" in out, out + err
    assert state_of(ledger, "live-run") == ("discarded", 0)


def test_a_run_discarded_while_it_ran_is_committed_loudly(tmp_path):
    """R9b-11: the reservation is discarded while the run is between its outputs and its settlement (an older
    textdp's reconcile did that): the launcher commits its release file and says so with a WARNING; the same
    for `reconcile` on a run killed there and then discarded."""
    ledger = str(tmp_path / "L.sqlite")
    os.makedirs(tmp_path / "first")
    assert privatize(tmp_path, tmp_path / "first" / "r", ledger)[0] == 0
    hold = str(tmp_path / "hold")
    os.makedirs(tmp_path / "second")
    proc = privatize(tmp_path, tmp_path / "second" / "r", ledger, "--ledger-run-id", "held-run",
                     env_extra={"TEXTDP_TEST_LEDGER_HOLD": hold}, background=True)
    try:
        deadline = time.time() + 200
        while not os.path.exists(hold + ".ready") and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert os.path.exists(hold + ".ready"), proc.communicate()[1]
        store = Ledger(ledger, FP)
        assert store.discard("held-run")
        store.close()
    finally:
        open(hold, "w").close()
        out, err = (s.decode() for s in proc.communicate(timeout=200))
    assert "run held-run committed: 2 record(s) of 2 author(s) released" in out + err, out + err
    assert "WARNING: its reservation had been discarded while it ran" in out + err, out + err
    assert state_of(ledger, "held-run") == ("committed", 20)

    os.makedirs(tmp_path / "third")
    killed_run(tmp_path, tmp_path / "third" / "r", ledger, "killed-run")
    store = Ledger(ledger, FP)
    assert store.discard("killed-run")
    store.close()
    code, out, err = reconcile(tmp_path, ledger)
    assert code == 0 and "run killed-run committed" in out and "WARNING: its reservation had been discarded" in out, out
    assert state_of(ledger, "killed-run") == ("committed", 30)
    code, out, err = reconcile(tmp_path, ledger)  # committed once
    assert code == 0 and "killed-run" not in out and "no run is pending" in out, out


# --- R9b-8 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism,epsilon_d", [("madlib", True), ("clusant", False), ("custext", False),
                                                 ("mahalanobis", False)])
def test_ledger_statement_follows_the_mechanisms_bound(tmp_path, mechanism, epsilon_d):
    """R9b-8: the public summary's ledger statement says "B x max_i d" only for a mechanism that declares an
    epsilon x d per-word bound (Mechanism.EPSILON_D_BOUND); CluSanT, CusText and Mahalanobis get the epsilon-mass
    form, which refers to the privacy statement's per-word exponents."""
    from textdp.mechanisms import mechanism_class

    assert mechanism_class(mechanism).EPSILON_D_BOUND is epsilon_d
    ledger = str(tmp_path / "L.sqlite")
    code, _, err = privatize(tmp_path, tmp_path / "r", ledger, "--mechanism", mechanism, "--public-summary",
                             tmp_path / "pub.json")
    assert code == 0, err
    statement = json.load(open(tmp_path / "pub.json"))["ledger"]["statement"]
    assert ("100 x max_i d(w_i, w_i')" in statement) is epsilon_d, statement
    assert ("the sum of the per-word exponents of this run's privacy statement" in statement) is not epsilon_d, statement
    assert "epsilon-mass" in statement and "at most 100" in statement


# --- R9b-6 ------------------------------------------------------------------------------------------------


def test_a_window_scope_names_the_ledger_section_as_the_exception(tmp_path):
    """R9b-6: with --ledger, a streaming window's public summary's scope names the ledger section as its one
    cross-window claim (beside the ledger statement's cap); without a ledger the scope is as before."""
    from tests.test_streaming_ledger import run_teststream
    from transforms.streaming import pane_scope_statement

    out = run_teststream(tmp_path, "s", str(tmp_path / "L.sqlite"), "s-1", 1.0, 12.0, [[(0, "a", 3), (1, "b", 2)]])
    (path,) = glob.glob(f"{out}-pub-*.json")
    public = json.load(open(path))
    scope = public["window"]["scope"]
    assert "the ledger section (--ledger) is the exception" in scope and "no claim here covers" not in scope, scope
    assert "is at most 12" in public["ledger"]["statement"]
    assert pane_scope_statement(3, per_author=True).endswith("no claim here covers an author across windows.")


# --- R9b-4 ------------------------------------------------------------------------------------------------


def test_a_ledger_locked_at_commit_is_unreachable_not_replaced(tmp_path):
    """R9b-4: another process holds an exclusive lock on the SQLite ledger when the run settles (the launcher's
    busy timeout shortened to 1 s by the test-only variable): the run stays pending with the unreachable message
    (retry reconcile; never "restore", never "counted in no ledger"); once the lock is gone, reconcile commits it."""
    ledger = str(tmp_path / "L.sqlite")
    os.makedirs(tmp_path / "first")
    assert privatize(tmp_path, tmp_path / "first" / "r", ledger)[0] == 0
    hold = str(tmp_path / "hold")
    os.makedirs(tmp_path / "second")
    proc = privatize(tmp_path, tmp_path / "second" / "r", ledger, "--ledger-run-id", "busy-run",
                     env_extra={"TEXTDP_TEST_LEDGER_HOLD": hold, "TEXTDP_TEST_LEDGER_BUSY_TIMEOUT": "1"},
                     background=True)
    locker = sqlite3.connect(ledger, timeout=1, isolation_level=None)
    try:
        deadline = time.time() + 200
        while not os.path.exists(hold + ".ready") and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert os.path.exists(hold + ".ready"), proc.communicate()[1]
        locker.execute("BEGIN EXCLUSIVE")
        open(hold, "w").close()
        out, err = (s.decode() for s in proc.communicate(timeout=200))
    finally:
        open(hold, "w").close()
        locker.close()
    assert proc.returncode != 0, out + err
    assert "run busy-run could not be settled: the ledger" in err and "cannot be reached now" in err, err
    assert "database is locked" in err and "it stays pending; its release file" in err, err
    assert "counted in no ledger" not in err and "restore the ledger" not in err, err
    code, out, err = reconcile(tmp_path, ledger)
    assert code == 0 and "run busy-run committed: 2 record(s) of 2 author(s) released" in out, out + err


def test_an_unreachable_server_is_not_a_ledger_to_restore(tmp_path):
    """R9b-4 variant: a PostgreSQL URL whose server refuses connections (port 1): 'cannot be reached now', one
    line, exit 2, no 'restore it from a backup'; the password is in no message."""
    (tmp_path / "ledger.key").write_bytes(KEY)
    code, out, err = cli(["ledger", "status", "--ledger", "postgresql+psycopg://u:SECRETPW@127.0.0.1:1/db",
                          "--ledger-key-file", tmp_path / "ledger.key"])
    assert code == 2 and "cannot be reached now" in err and len(err.strip().splitlines()) == 1, err
    assert "restore" not in err and "SECRETPW" not in err + out, err


def test_budgets_that_differ_are_printed_with_the_digits_that_differ(tmp_path):
    """R9b-4 cosmetic: --author-budget 100.00000000000001 on a ledger at 100 is refused naming both values with
    enough digits to differ."""
    ledger = str(tmp_path / "L.sqlite")
    os.makedirs(tmp_path / "first")
    assert privatize(tmp_path, tmp_path / "first" / "r", ledger)[0] == 0
    code, out, err = privatize(tmp_path, tmp_path / "first" / "r2", ledger, "--author-budget", "100.00000000000001")
    assert code == 2 and "--author-budget 100.00000000000001 differs from the ledger's budget 100.0 " in err, err
