"""Red-team round 11b, R11b-5: a failed --overwrite run whose ledger commit could not reach the ledger.

The run stays pending; the earlier release is put back at the output's names and this run's files (its ledger file
included) are kept in a ``.textdp-failed-*`` folder beside them. ``ledger reconcile`` took the earlier release's files
for this run's ("wrote records at ... but not its ledger file: remove its record files and --discard"), advice that
deleted a committed release and forgot records this run released. The real CLI, a real SQLite ledger, and the
launcher's test-only hold between the outputs and the commit (``TEXTDP_TEST_LEDGER_HOLD``), during which the test
holds the ledger in an exclusive transaction (with ``TEXTDP_TEST_LEDGER_BUSY_TIMEOUT`` 1 s the commit cannot reach it).
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import time
from fractions import Fraction

import pytest

from tests.test_ledger import ART300, write_corpus
from tests.test_ledger_faults import FP, a_hash, argv, cli, ledger_cli
from textdp.ledger import Ledger

pytestmark = pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")


def _unreachable_at_commit(tmp_path, ledger: str, args: list) -> tuple:
    """Run the real CLI with ``args`` (an existing ledger: no --ledger-create) while the test holds the ledger in an
    exclusive transaction from the launcher's hold (between the outputs and the commit) to the run's end; the commit
    cannot reach it (busy timeout 1 s). (exit code, stderr)."""
    hold = tmp_path / "hold"
    run = cli([a for a in args if a != "--ledger-create"],
              {"TEXTDP_TEST_LEDGER_HOLD": str(hold), "TEXTDP_TEST_LEDGER_BUSY_TIMEOUT": "1"}, background=True)
    deadline = time.time() + 300
    while not os.path.exists(str(hold) + ".ready") and time.time() < deadline:
        time.sleep(0.1)
    blocker = sqlite3.connect(ledger, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    hold.write_text("go")
    _, err = run.communicate(timeout=300)
    blocker.execute("ROLLBACK")
    blocker.close()
    return run.returncode, err.decode()


def test_r11b_5_reconcile_counts_a_failed_overwrite_runs_kept_files_and_never_blames_the_earlier_release(tmp_path):
    ledger = str(tmp_path / "l.sqlite")
    write_corpus(tmp_path / "first.jsonl", [("a", 2)])
    code, _, err = cli(argv(tmp_path, "first", ledger, budget=10))
    assert code == 0, err
    earlier = {p: open(p, "rb").read() for p in glob.glob(str(tmp_path / "first-*"))}
    write_corpus(tmp_path / "first.jsonl", [("a", 3)])  # one good record by author a, then 9 malformed lines
    with open(tmp_path / "first.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{not json\n" * 9)
    code, err = _unreachable_at_commit(tmp_path, ledger, argv(tmp_path, "first", ledger, budget=10) + ["--overwrite"])
    assert code == 1, err
    assert {p: open(p, "rb").read() for p in earlier} == earlier  # the earlier release is back at its names
    kept = glob.glob(str(tmp_path / ".textdp-failed-*" / "first-ledger.json"))
    assert len(kept) == 1, err
    store = Ledger(ledger, FP)
    assert [r["run_id"] for r in store.pending()] and store.spent() == {a_hash(): Fraction("0.2")}
    store.close()

    code, out, err = ledger_cli(tmp_path, "reconcile", ledger=ledger)
    assert code == 0 and "committed" in out and ".textdp-failed-" in out, (out, err)
    assert "--discard" not in out + err
    store = Ledger(ledger, FP)
    assert store.pending() == [] and store.spent() == {a_hash(): Fraction("0.5")}  # 0.2 + this run's 0.3, once
    store.close()
    assert {p: open(p, "rb").read() for p in earlier} == earlier  # nothing of the earlier release touched


def test_r12_5_a_pending_runs_release_file_survives_a_later_overwrite_and_reconcile_counts_it(tmp_path):
    """R12-5: a run left pending (the ledger unreachable at its commit) had its <output>-ledger.json deleted by a later
    --overwrite run without --ledger; reconcile then took the new run's records for the pending run's and advised
    removing them and --discard (a release deleted, released records forgotten). Now the later --overwrite keeps the
    file as <output>-ledger-<run_id>.json and reconcile commits the pending run from it, saying so, advising nothing."""
    ledger = str(tmp_path / "l.sqlite")
    write_corpus(tmp_path / "first.jsonl", [("a", 2)])
    code, _, err = cli(argv(tmp_path, "first", ledger, budget=10))
    assert code == 0, err
    write_corpus(tmp_path / "second.jsonl", [("a", 3)])
    _, err = _unreachable_at_commit(tmp_path, ledger, argv(tmp_path, "second", ledger, budget=10))
    pending = json.load(open(tmp_path / "second-ledger.json", encoding="utf-8"))["run_id"]
    store = Ledger(ledger, FP)
    assert [r["run_id"] for r in store.pending()] == [pending], err
    store.close()
    write_corpus(tmp_path / "other.jsonl", [("z", 4)])  # a later run on the same output, without --ledger
    code, _, err = cli(["privatize", "--input", str(tmp_path / "other.jsonl"), "--output", str(tmp_path / "second"),
                        "--epsilon", "1", "--artifact", ART300, "--runner", "FnApiRunner", "--overwrite"])
    assert code == 0 and f"second-ledger-{pending}.json" in err, err
    code, out, err = ledger_cli(tmp_path, "reconcile", ledger=ledger)
    assert code == 0 and f"run {pending} committed" in out and f"second-ledger-{pending}.json" in out, (out, err)
    assert "--discard" not in out + err
    store = Ledger(ledger, FP)
    assert store.pending() == [] and store.spent() == {a_hash(): Fraction("0.5")}
    store.close()
