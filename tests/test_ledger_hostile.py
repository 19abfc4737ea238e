"""Red-team 6b's ledger findings (F1, F2, F3, F4, F10, F11, F14, F17), each with its defined outcome, on real
processes (``python -m pipelines.cli``), real SQLite ledgers and the 300-word artifact:

* F1: the budget is the ledger's: set by its first capped run, kept, used by a later run without --author-budget,
  and a different value refused in one line; a ledger without a budget takes one only if no author is above it;
  ``ledger status`` reports the ledger's budget;
* F3: in-memory SQLite URLs refused in one line (and a relative ``sqlite:///name`` accepted);
* F11: a missing ledger needs --ledger-create (and --ledger-create an absent one); a ledger deleted or replaced
  between the reservation and the commit leaves the run pending with one line, never committed elsewhere;
* F10: every ledger flag without --ledger refused with --streaming as in batch (the one check both use);
* F17: a password in the URL's query is in no message, summary or ledger file;
* F2, F14: a ledger at an output's name or matched by --input refused before anything is created;
* F4: a budget below one word's epsilon refused before the run.

Admission is deterministic (exact arithmetic): every assertion is exact, no false-failure rate.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.test_ledger import ART300, KEY, write_corpus
from textdp.ledger import Ledger, key_fingerprint
from textdp.ledger.store import LedgerError, shown_url

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP = key_fingerprint(KEY)
SECRET = "S3CRETPW"
pytestmark = pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")


def cli(args, env_extra=None, background=False):
    env = dict(os.environ, **(env_extra or {}))
    command = [sys.executable, "-m", "pipelines.cli"] + [str(a) for a in args]
    if background:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, timeout=600)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def run_args(tmp_path, name, ledger, *extra, epsilon=1, inputs=None):
    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    if inputs is None:
        inputs = tmp_path / "in.jsonl"
        if not inputs.exists():
            write_corpus(inputs, [("a", 5), ("b", 5)])  # each author: mass 5 at epsilon 1
    return ["privatize", "--input", inputs, "--output", tmp_path / name, "--epsilon", epsilon, "--artifact", ART300,
            "--user-field", "author", "--ledger", ledger, "--ledger-key-file", key, "--runner", "FnApiRunner", *extra]


def one_line_refusal(code, err, needle):
    assert code == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_budget_is_the_ledgers(tmp_path):
    """F1 (and F17 on the same runs): after a run capped at 12, a run without --author-budget is capped at 12 too
    (authors at 10 + 5 > 12: all withheld), --author-budget 100 is refused in one line, and `ledger status` reports
    the ledger's budget 12 with nobody above it. The ledger URL carries ?password=: in no output of any run."""
    ledger = f"sqlite:///{tmp_path}/L.sqlite?password={SECRET}"
    code, out, err = cli(run_args(tmp_path, "r1", ledger, "--author-budget", 12, "--ledger-create",
                                  "--public-summary", tmp_path / "pub1.json"))
    assert code == 0, err
    assert "created a new ledger" in err
    code, out2, err2 = cli(run_args(tmp_path, "r2", ledger))  # authors at 5: 5 + 5 = 10 <= 12, released
    assert code == 0, err2
    assert "withheld by --author-budget 12" in out2, out2
    code, out3, err3 = cli(run_args(tmp_path, "r3", ledger))  # 10 + 5 > 12: every record withheld (rc 1)
    assert code == 1 and "budget_exhausted" in out3 + err3, out3 + err3
    code, out4, err4 = cli(run_args(tmp_path, "r4", ledger, "--author-budget", 100))
    one_line_refusal(code, err4, "differs from the ledger's budget 12")
    assert not glob.glob(str(tmp_path / "r4*"))
    code, out5, err5 = cli(run_args(tmp_path, "r5", ledger, "--author-budget", 11))  # lowering: refused as well
    one_line_refusal(code, err5, "differs from the ledger's budget 12")
    code, status, err6 = cli(["ledger", "status", "--ledger", ledger, "--ledger-key-file", tmp_path / "ledger.key", "--json"])
    assert code == 0, err6
    found = json.loads(status)
    assert found["author_budget"] == 12 and found["cumulative_mass"]["max"] == 10
    assert found["cumulative_mass"]["above_cap"] == 0
    code, text, _ = cli(["ledger", "status", "--ledger", ledger, "--ledger-key-file", tmp_path / "ledger.key"])
    assert "budget: 12 (the ledger's" in text and "ABOVE" not in text
    everything = out + err + out2 + err2 + out3 + err3 + err4 + err5 + status + err6 + text
    for path in glob.glob(str(tmp_path / "*.json")) + glob.glob(str(tmp_path / "*.jsonl")):
        everything += open(path, encoding="utf-8", errors="replace").read()
    assert SECRET not in everything
    assert "L.sqlite" in json.load(open(tmp_path / "r1-ledger.json"))["section"]["ledger"]


def test_uncapped_ledger_takes_a_budget_only_if_nobody_is_above(tmp_path):
    """F1, a ledger created without a budget: a later --author-budget below an author's mass is refused in one line
    (it could not cap that author); one at or above every author's mass becomes the ledger's budget."""
    store = Ledger(str(tmp_path / "L.sqlite"), FP)
    store.reserve("r0", 1.0, "madlib", None, str(tmp_path / "x"), "jsonl")
    store.commit("r0", 1.0, "madlib", [("h1", 8, 1, 0)])
    assert store.budget() is None
    with pytest.raises(LedgerError, match="already above 5"):
        store.resolve_budget(5.0)
    assert store.resolve_budget(8.0) == 8.0 and store.resolve_budget(None) is None
    store.reserve("r1", 1.0, "madlib", 8.0, str(tmp_path / "y"), "jsonl")
    assert store.budget() == 8.0 and store.resolve_budget(None) == 8.0
    with pytest.raises(LedgerError, match="differs from the ledger's budget 8"):
        store.resolve_budget(9.0)
    store.close()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite+pysqlite://", "sqlite:///:memory:"])
def test_in_memory_ledger_refused(tmp_path, url):
    """F3: an in-memory SQLite ledger would be gone when the run ends: one line, exit 2, nothing written."""
    code, _, err = cli(run_args(tmp_path, "r", url, "--author-budget", 12, "--ledger-create"))
    one_line_refusal(code, err, "is an in-memory SQLite database")
    assert not glob.glob(str(tmp_path / "r*"))


def test_relative_sqlite_url_accepted(tmp_path, monkeypatch):
    """F3, related: sqlite:///name.sqlite is a file in the current directory, not 'the folder ""'."""
    monkeypatch.chdir(tmp_path)
    Ledger("sqlite:///rel.sqlite", FP).close()
    assert os.path.isfile(tmp_path / "rel.sqlite")


def test_missing_ledger_needs_create(tmp_path):
    """F11: a --ledger that does not exist is refused without --ledger-create (a typo would reset every author),
    and nothing is created; --ledger-create on an existing ledger is refused too."""
    ledger = str(tmp_path / "L.sqlite")
    code, _, err = cli(run_args(tmp_path, "r", ledger, "--author-budget", 12))
    one_line_refusal(code, err, "give --ledger-create")
    assert not os.path.exists(ledger) and not glob.glob(str(tmp_path / "r*"))
    Ledger(ledger, FP).close()
    code, _, err = cli(run_args(tmp_path, "r", ledger, "--author-budget", 12, "--ledger-create"))
    one_line_refusal(code, err, "--ledger-create asks for a new")


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_ledger_gone_during_run_is_not_committed(tmp_path, how):
    """F11: the ledger deleted (or replaced by another ledger of the same key) between the reservation and the
    commit: the run fails, saying in one line that it is counted in no ledger, and neither a new ledger nor the replacement
    counts it."""
    ledger = str(tmp_path / "L.sqlite")
    Ledger(ledger, FP).close()
    other = str(tmp_path / "other.sqlite")
    Ledger(other, FP).close()
    hold = str(tmp_path / "hold")
    first = cli(run_args(tmp_path, "r", ledger, "--author-budget", 12), env_extra={"TEXTDP_TEST_LEDGER_HOLD": hold},
                background=True)
    try:
        deadline = time.time() + 300
        while not os.path.exists(hold + ".ready") and time.time() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert os.path.exists(hold + ".ready"), first.communicate()[1].decode()
        for suffix in ("", "-journal", "-wal", "-shm"):
            if os.path.exists(ledger + suffix):
                os.remove(ledger + suffix)
        if how == "replaced":
            shutil.copy(other, ledger)
    finally:
        open(hold, "w").close()
        out, err = first.communicate(timeout=300)
    err = err.decode()
    assert first.returncode != 0, err
    assert "is counted in no ledger" in err and "is not the ledger this run reserved" in err, err
    assert os.path.exists(ledger) == (how == "replaced")
    if how == "replaced":
        store = Ledger(ledger, FP)
        assert store.runs_list() == [] and store.spent() == {}
        store.close()


@pytest.mark.parametrize("flag", [["--author-budget", "5"], ["--ledger-key-file", "KEY"], ["--ledger-run-id", "abc"],
                                  ["--ledger-create"]])
def test_streaming_ledger_flags_need_ledger(tmp_path, flag):
    """F10: with --streaming, a ledger flag without --ledger is refused in one line as in batch."""
    (tmp_path / "in").mkdir()
    (tmp_path / "KEY").write_bytes(KEY)
    flag = [str(tmp_path / "KEY") if part == "KEY" else part for part in flag]
    code, _, err = cli(["privatize", "--streaming", "--input", tmp_path / "in" / "*.jsonl", "--output", tmp_path / "s" / "r",
                        "--epsilon", 3, "--user-field", "author", "--artifact", ART300, "--streaming-stop-after", 1,
                        "--runner", "FnApiRunner", *flag])
    one_line_refusal(code, err, f"{flag[0]} needs --ledger")


def test_shown_url_masks_every_credential():
    """F17: the one function that shows a ledger URL drops the userinfo password and password-like query keys."""
    shown = shown_url(f"postgresql+psycopg://u:{SECRET}@h:1/db?password={SECRET}&sslpassword={SECRET}"
                      f"&passfile=/x&application_name=a&token={SECRET}")
    assert SECRET not in shown and "passfile" not in shown and "application_name=a" in shown and "u:***@" in shown


def test_unreachable_ledger_message_masks_query_password(tmp_path):
    """F17: the refusal for an unreachable server ledger does not quote ?password=."""
    code, _, err = cli(run_args(tmp_path, "r", f"postgresql+psycopg://u@127.0.0.1:1/db?password={SECRET}",
                                "--author-budget", 12))
    assert code == 2 and SECRET not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("suffix", ["-ledger.json", "-summary.json", "-00000-of-00001.jsonl"])
def test_ledger_at_an_output_name_refused_before_creation(tmp_path, suffix):
    """F2: a --ledger at one of the run's output names is refused in one line naming --ledger, and not created."""
    ledger = str(tmp_path / f"r{suffix}")
    code, _, err = cli(run_args(tmp_path, "r", ledger, "--author-budget", 12, "--ledger-create"))
    one_line_refusal(code, err, "is one of this run's outputs")
    assert not os.path.exists(ledger)


def test_ledger_matched_by_input_refused_before_creation(tmp_path):
    """F14: a --ledger the --input pattern matches (it would be read back as records) is refused in one line,
    before the ledger is created."""
    (tmp_path / "w").mkdir()
    write_corpus(tmp_path / "w" / "a.jsonl", [("a", 3)])
    ledger = str(tmp_path / "w" / "L.jsonl")
    code, _, err = cli(run_args(tmp_path, "r", ledger, "--author-budget", 12, "--ledger-create",
                                inputs=tmp_path / "w" / "*.jsonl"))
    one_line_refusal(code, err, "would be read as input")
    assert not os.path.exists(ledger)


def test_budget_below_one_word_refused_before_run(tmp_path):
    """F4: --author-budget below --epsilon can release no word: one line before the run, nothing created."""
    ledger = str(tmp_path / "L.sqlite")
    code, _, err = cli(run_args(tmp_path, "r", ledger, "--author-budget", "1e-320", "--ledger-create"))
    one_line_refusal(code, err, "is below --epsilon 1")
    assert not os.path.exists(ledger) and not glob.glob(str(tmp_path / "r*"))


def test_status_of_an_older_ledger_says_who_is_above_its_budget(tmp_path, capsys):
    """F1, a ledger written before textdp kept its budget (the red team's L1: runs capped at 12, then uncapped
    ones took authors to 40): its budget is the smallest of its committed runs', and `ledger status` says how many
    authors are ABOVE it instead of calling them "at the budget"; a new run without --author-budget is capped by it."""
    from sqlalchemy import delete, update

    from pipelines.ledger import run as ledger_command

    location = str(tmp_path / "L.sqlite")
    store = Ledger(location, FP)
    store.reserve("r0", 1.0, "madlib", None, str(tmp_path / "x"), "jsonl")
    store.commit("r0", 1.0, "madlib", [("h1", 40, 4, 0), ("h2", 12, 1, 0)])
    with store.engine.begin() as conn:  # as an older textdp left it: the budget only in the run's row
        conn.execute(update(store.runs).where(store.runs.c.run_id == "r0").values(budget=12.0))
        conn.execute(delete(store.meta).where(store.meta.c.name == "author_budget"))
    assert store.budget() == 12.0 and store.resolve_budget(None) == 12.0
    store.close()
    (tmp_path / "ledger.key").write_bytes(KEY)
    assert ledger_command(["status", "--ledger", location, "--ledger-key-file", str(tmp_path / "ledger.key")]) == 0
    out = capsys.readouterr().out
    assert "1 at the budget 12; 1 ABOVE it" in out and "budget: 12 (the ledger's" in out, out
