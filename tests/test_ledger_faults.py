"""The exposure ledger's faults (issue 29, item 4), each with its defined outcome, on real processes:

* a run killed (SIGKILL) after writing its outputs and before the ledger commit stays pending; the ledger refuses
  new runs until ``textdp ledger reconcile`` commits it from the run's ledger file; nothing is counted twice;
* a run stopped with records but without its ledger file stays pending until its files are removed and it is
  discarded; a reservation whose run wrote nothing is discarded by reconcile (the ledger is unchanged);
* two runs at once: the second is refused in one line while the first holds the ledger, and after the first has
  committed, a new run sees its releases;
* a corrupted ledger, another key: one-line refusals before anything runs, nothing written.

The kill and the hold use the launcher's test-only hooks (``TEXTDP_TEST_LEDGER_KILL``, ``TEXTDP_TEST_LEDGER_HOLD``,
pipelines/ledger.py) in a real subprocess. Admission is deterministic: every assertion is exact.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from fractions import Fraction

import pytest

from pipelines.ledger import LedgerRun
from tests.test_ledger import ART300, KEY, create_flag, ledger_location, postgres_server, read_jsonl, write_corpus  # noqa: F401
from textdp.ledger import Ledger, author_hash, key_fingerprint
from textdp.text.records import author_identity

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP = key_fingerprint(KEY)
pytestmark = pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")


def argv(tmp_path, name, ledger, budget=1.0, epsilon=0.1, run_id=None, folder=None):
    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    output = tmp_path / name
    if folder:  # the output folder of a run is locked while it runs: a concurrent run writes elsewhere
        os.makedirs(tmp_path / folder, exist_ok=True)
        output = tmp_path / folder / name
    args = ["privatize", "--input", str(tmp_path / f"{name}.jsonl"), "--output", str(output),
            "--epsilon", str(epsilon), "--artifact", ART300, "--user-field", "author", "--ledger", ledger,
            "--ledger-key-file", str(key), "--author-budget", str(budget), "--runner", "FnApiRunner", *create_flag(ledger)]
    return args + (["--ledger-run-id", run_id] if run_id else [])


def cli(args, env_extra=None, background=False):
    env = dict(os.environ, **(env_extra or {}))
    command = [sys.executable, "-m", "pipelines.cli"] + args
    if background:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, timeout=600)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def ledger_cli(tmp_path, *args, ledger=None):
    return cli(["ledger", *args, "--ledger", ledger or str(tmp_path / "l.sqlite"),
                "--ledger-key-file", str(tmp_path / "ledger.key")])


def a_hash():
    return author_hash(KEY, author_identity("a"))


def test_a_run_killed_before_its_commit_stays_pending_and_reconcile_commits_it_once(tmp_path, ledger_location):
    """On SQLite and on the PostgreSQL the tests start (tests/test_ledger.py)."""
    ledger = ledger_location
    write_corpus(tmp_path / "first.jsonl", [("a", 4), ("a", 5), ("a", 3)])  # 0.4 + 0.5 released, 0.3 withheld
    code, _, err = cli(argv(tmp_path, "first", ledger, run_id="killed-run"), {"TEXTDP_TEST_LEDGER_KILL": "1"})
    assert code == -9, err  # SIGKILL between writing the outputs and the ledger commit
    assert glob.glob(str(tmp_path / "first-0*-of-*.jsonl")) and os.path.exists(tmp_path / "first-ledger.json")
    store = Ledger(ledger, FP)
    assert [r["run_id"] for r in store.pending()] == ["killed-run"] and store.spent() == {}
    store.close()

    code, out, _ = ledger_cli(tmp_path, "status", ledger=ledger)
    assert code == 0 and "pending: killed-run" in out and "1 pending" in out

    write_corpus(tmp_path / "second.jsonl", [("a", 1)])
    code, _, err = cli(argv(tmp_path, "second", ledger))
    assert code == 2 and "the ledger is held by run 'killed-run'" in err and err.count("error:") == 1, err
    assert not glob.glob(str(tmp_path / "second-*"))

    code, out, err = ledger_cli(tmp_path, "reconcile", "--discard", "killed-run", ledger=ledger)
    assert code == 2 and "has files" in err  # its records are out: it cannot be discarded
    code, out, _ = ledger_cli(tmp_path, "reconcile", ledger=ledger)
    assert code == 0 and "run killed-run committed: 2 record(s) of 1 author(s) released, 1 withheld" in out, out
    code, out, _ = ledger_cli(tmp_path, "reconcile", ledger=ledger)
    assert code == 0 and "no run is pending" in out
    assert json.load(open(tmp_path / "first-summary.json"))["ledger"]["state"] == "committed"
    store = Ledger(ledger, FP)
    assert store.spent() == {a_hash(): Fraction("0.9")}  # counted once
    store.close()

    write_corpus(tmp_path / "second.jsonl", [("a", 4), ("a", 3), ("a", 1)])  # 0.9 + 0.4, + 0.3: no; 0.9 + 0.1 = 1 fits
    code, _, err = cli(argv(tmp_path, "second", ledger))
    assert code == 0, err
    assert sorted(e["position"] for e in read_jsonl(str(tmp_path / "second-errors-*.jsonl"))) == [1, 2]
    store = Ledger(ledger, FP)
    assert store.spent() == {a_hash(): Fraction(1)}
    store.close()


def test_records_without_ledger_file_stay_pending_until_removed_and_discarded(tmp_path):
    ledger = str(tmp_path / "l.sqlite")
    write_corpus(tmp_path / "first.jsonl", [("a", 2)])
    code, _, err = cli(argv(tmp_path, "first", ledger, run_id="lost"), {"TEXTDP_TEST_LEDGER_KILL": "1"})
    assert code == -9, err
    os.remove(tmp_path / "first-ledger.json")  # stopped after the records, before its ledger file
    code, out, _ = ledger_cli(tmp_path, "reconcile")
    assert code == 1 and "wrote records" in out and "stays pending" in out
    for path in glob.glob(str(tmp_path / "first-0*-of-*.jsonl")):
        os.remove(path)
    code, out, _ = ledger_cli(tmp_path, "reconcile", "--discard", "lost")
    assert code == 0 and "run lost discarded" in out
    store = Ledger(ledger, FP)
    assert store.spent() == {} and not store.pending() and store.run("lost")["state"] == "discarded"
    store.close()


def test_a_reservation_whose_run_wrote_nothing_stays_pending_until_discarded(tmp_path):
    """A plain reconcile never discards (round 9b, R9b-3: the files may have been moved); --discard does."""
    (tmp_path / "ledger.key").write_bytes(KEY)
    store = Ledger(str(tmp_path / "l.sqlite"), FP)
    store.reserve("ghost", 0.1, "madlib", 1.0, str(tmp_path / "never"), "jsonl")
    store.close()
    code, out, _ = ledger_cli(tmp_path, "reconcile")
    assert code == 1 and "run ghost stays pending: no release file" in out
    code, out, _ = ledger_cli(tmp_path, "reconcile", "--discard", "ghost")
    assert code == 0 and "run ghost discarded" in out
    store = Ledger(str(tmp_path / "l.sqlite"), FP)
    assert store.spent() == {} and not store.pending()
    store.close()


def test_the_launcher_settles_a_failed_run_that_wrote_nothing_by_discarding_it(tmp_path):
    """The in-process settlement after a failure (Plan.settle): no file of the run exists, so its reservation is
    discarded and the ledger is as before; a second settle changes nothing."""
    store = Ledger(str(tmp_path / "l.sqlite"), FP)
    store.reserve("before", 0.5, "madlib", 1.0, str(tmp_path / "x"), "jsonl")
    store.commit("before", 0.5, "madlib", [(a_hash(), 1, 1, 0)])
    store.close()
    run = LedgerRun(str(tmp_path / "l.sqlite"), KEY, 1.0, "failed-run", "author")
    run.reserve(0.5, "madlib", str(tmp_path / "failed"), "jsonl", None)
    assert run.settle("run") == ["ledger: run failed-run wrote no records; its reservation was discarded (the ledger is "
                                 "unchanged)"]
    assert run.settle("run") == []  # settled once
    store = Ledger(str(tmp_path / "l.sqlite"), FP)
    assert store.spent() == {a_hash(): Fraction("0.5")} and store.run("failed-run")["state"] == "discarded"
    assert not store.pending()
    store.close()


def test_two_runs_at_once_the_second_is_refused_and_then_sees_the_first(tmp_path):
    ledger = str(tmp_path / "l.sqlite")
    hold = str(tmp_path / "release-first")
    write_corpus(tmp_path / "first.jsonl", [("a", 6)])
    first = cli(argv(tmp_path, "first", ledger), {"TEXTDP_TEST_LEDGER_HOLD": hold}, background=True)
    try:
        deadline = time.time() + 300
        while not os.path.exists(hold + ".ready") and time.time() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert os.path.exists(hold + ".ready"), first.communicate()[1].decode()
        write_corpus(tmp_path / "second.jsonl", [("a", 5), ("a", 4)])
        code, _, err = cli(argv(tmp_path, "second", ledger, folder="elsewhere"))
        assert code == 2 and "the ledger is held by run" in err, err
        assert not glob.glob(str(tmp_path / "elsewhere" / "second*"))
    finally:
        open(hold, "w").close()
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()
    code, _, err = cli(argv(tmp_path, "second", ledger, run_id="second-try"))
    assert code == 0, err
    assert [e["position"] for e in read_jsonl(str(tmp_path / "second-errors-*.jsonl"))] == [1]  # 0.6 + 0.5 > 1
    store = Ledger(ledger, FP)
    assert store.spent() == {a_hash(): Fraction("1.0")}
    store.close()


@pytest.mark.parametrize("damage, message", [
    ("garbage", "cannot be read as a textdp ledger (DatabaseError: file is not a database)"),
    ("other key", "was made with another key"),
])
def test_a_corrupted_ledger_or_another_key_is_refused_before_the_run(tmp_path, damage, message):
    ledger = str(tmp_path / "l.sqlite")
    if damage == "garbage":
        with open(ledger, "wb") as handle:
            handle.write(os.urandom(4096))
    else:
        Ledger(ledger, key_fingerprint(b"the key of another operator")).close()
    before = open(ledger, "rb").read()
    write_corpus(tmp_path / "first.jsonl", [("a", 2)])
    code, out, err = cli(argv(tmp_path, "first", ledger))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not glob.glob(str(tmp_path / "first-*")) and open(ledger, "rb").read() == before
