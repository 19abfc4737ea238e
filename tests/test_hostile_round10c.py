"""Round 10b ledger findings (issue 25): R10b-6, R10b-1, R10b-7, R10b-3, R10b-5.

Every test runs the real CLI (FnApiRunner) or the real ledger on SQLite files with the 300-word artifact; nothing is
mocked. No test here is randomized in what it asserts (the statements' forms and refusals are deterministic)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from tests.test_hostile_round9l import FP, REPO, cli
from tests.test_ledger import ART300, KEY, write_corpus
from textdp.ledger import Ledger

pytestmark = pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")

BXD = "100 x max_i d(w_i, w_i')"


def privatize(tmp_path, output, ledger, *extra, artifact=ART300, key_file=None, inputs=None, cwd=None):
    """``textdp privatize`` with --ledger (created with --author-budget 100 when new) on a two-author corpus."""
    key = key_file or tmp_path / "ledger.key"
    if not os.path.exists(key):
        open(key, "wb").write(KEY)
    if inputs is None:
        inputs = tmp_path / "in.jsonl"
        if not os.path.exists(inputs):
            write_corpus(inputs, [("a", 5), ("b", 5)])
    create = [] if os.path.exists(ledger) else ["--ledger-create", "--author-budget", 100]
    return cli(["privatize", "--input", inputs, "--output", output, "--epsilon", 1, "--artifact", artifact,
                "--user-field", "author", "--ledger", ledger, "--ledger-key-file", key, "--runner", "FnApiRunner",
                *create, *extra], cwd=cwd or REPO)


def public_statement(path) -> str:
    return json.load(open(path))["ledger"]["statement"]


def scaled_artifact(tmp_path, factor: float = 10.0) -> str:
    """A copy of the 300-word artifact with every vector times ``factor`` (the same words, distances x factor),
    its manifest's checksums updated: a valid artifact with another identity."""
    art = tmp_path / "art_scaled"
    shutil.copytree(ART300, art)
    vectors = np.load(art / "vectors.npy") * np.float32(factor)
    np.save(art / "vectors.npy", vectors.astype(np.float32))
    manifest = json.load(open(art / "manifest.json"))
    data = (art / "vectors.npy").read_bytes()
    manifest["files"]["vectors.npy"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (art / "manifest.json").write_text(json.dumps(manifest))
    return str(art)


# --- R10b-6 -------------------------------------------------------------------------------------------------------


def test_a_madlib_run_after_a_custext_run_publishes_the_general_form(tmp_path):
    """R10b-6: a CusText run, then a Madlib run on one ledger: the Madlib run's public statement must not claim
    "B x max_i d" (the CusText words' loss does not shrink with d); it gives the general form and says why."""
    ledger = str(tmp_path / "L.sqlite")
    code, _, err = privatize(tmp_path, tmp_path / "c" / "r", ledger, "--mechanism", "custext",
                             "--public-summary", tmp_path / "c" / "pub.json")
    assert code == 0, err
    code, _, err = privatize(tmp_path, tmp_path / "m" / "r", ledger, "--mechanism", "madlib",
                             "--public-summary", tmp_path / "m" / "pub.json")
    assert code == 0, err
    statement = public_statement(tmp_path / "m" / "pub.json")
    assert BXD not in statement, statement
    assert "some of the ledger's runs used a mechanism whose per-word bound is not epsilon x d" in statement, statement
    operator = json.load(open(tmp_path / "m" / "r-summary.json"))["ledger"]
    assert BXD not in operator["statement"] and operator["ledger_form"]["epsilon_d"] is False


def test_madlib_runs_on_one_artifact_keep_the_bxd_form_and_another_artifact_drops_it(tmp_path):
    """R10b-6: two Madlib runs on one artifact: "B x max_i d" (derived from the ledger: both recorded that form and
    the same artifact identity); a third Madlib run on a copy of the artifact with scaled vectors (other distances):
    the general form, naming the different artifacts."""
    ledger = str(tmp_path / "L.sqlite")
    for name in ("a", "b"):
        code, _, err = privatize(tmp_path, tmp_path / name / "r", ledger, "--public-summary", tmp_path / name / "pub.json")
        assert code == 0, err
        assert BXD in public_statement(tmp_path / name / "pub.json")
    art = scaled_artifact(tmp_path)
    code, _, err = privatize(tmp_path, tmp_path / "s" / "r", ledger, "--public-summary", tmp_path / "s" / "pub.json",
                             artifact=art)
    assert code == 0, err
    statement = public_statement(tmp_path / "s" / "pub.json")
    assert BXD not in statement and "different vocabulary artifacts" in statement, statement
    store = Ledger(ledger, FP, create=False)
    try:
        forms = {row["run_id"]: row for row in store.runs_list()}
        assert len(forms) == 3
    finally:
        store.close()


def test_an_older_ledger_without_forms_is_unknown(tmp_path):
    """R10b-6: a run recorded without its form (an older textdp) makes the ledger's form unknown: general."""
    from textdp.ledger.store import BOUND_EPSILON_D

    store = Ledger(str(tmp_path / "L.sqlite"), FP)
    try:
        for run in ("old", "new"):
            store.reserve(run, 1.0, "madlib", None, str(tmp_path / run), "jsonl")
            if run == "new":
                store.record_form(run, True, "v/x")
            store.commit(run, 1.0, "madlib", [("h" * 64, 3, 1, 0)])
        form = store.bound_form("new")
        assert form["epsilon_d"] is False and "older textdp" in form["why"]
        store.record_form("old", True, "v/x")
        assert store.bound_form("new") == {"epsilon_d": True, "runs": 2}
        assert store.bound_form("new")["epsilon_d"] is True and BOUND_EPSILON_D == "epsilon_d"
    finally:
        store.close()


# --- R10b-1 -------------------------------------------------------------------------------------------------------


def test_an_sqlite_vfs_ledger_url_is_refused_before_the_run(tmp_path):
    """R10b-1: ``?vfs=memdb&uri=true`` made an in-memory ledger that the run released into and then found "deleted
    or moved": refused in one line before any worker starts (exit 2, no output, no ledger file)."""
    url = f"sqlite:///file:{tmp_path}/Lvfs.sqlite?vfs=memdb&uri=true"
    code, out, err = privatize(tmp_path, tmp_path / "o" / "r", url)
    assert code == 2, err
    assert "names an SQLite VFS (vfs=...)" in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(tmp_path / "Lvfs.sqlite")


def test_a_new_ledger_is_found_again_through_a_fresh_connection(tmp_path, monkeypatch):
    """R10b-1: after creating a ledger, a fresh connection must find its identity: an SQLite temporary database
    (``file:`` with an empty name, gone with its connection) is refused in one line, nothing ran."""
    from textdp.ledger import LedgerError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError, match="cannot be found again through a fresh connection"):
        Ledger("sqlite:///file:?uri=true", FP)
    store = Ledger(str(tmp_path / "L.sqlite"), FP)  # a file ledger passes the same check
    try:
        assert store.created and store.still_here() is None
    finally:
        store.close()


# --- R10b-7 -------------------------------------------------------------------------------------------------------

DSN = "host=127.0.0.1 port=5432 dbname=ledger user=textdp password=S3CRETPW"


def test_a_keyword_value_dsn_ledger_is_refused_without_its_password(tmp_path):
    """R10b-7: a libpq keyword/value DSN as --ledger became a local SQLite file named after it, its password printed
    and written to the summaries: refused in one line asking for a URL, before any worker starts, the password in no
    message and no file (privatize with --ledger-create, and ``textdp ledger status``)."""
    code, out, err = privatize(tmp_path, tmp_path / "o" / "r", DSN, "--public-summary", tmp_path / "o" / "pub.json",
                               cwd=tmp_path)
    assert code == 2, err
    assert "libpq keyword/value connection string" in err and "postgresql+psycopg://" in err
    assert "S3CRETPW" not in out + err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "o")
    assert not any("host=" in name for name in os.listdir(tmp_path))
    code, out, err = cli(["ledger", "status", "--ledger", DSN, "--ledger-key-file", tmp_path / "ledger.key"])
    assert code == 2 and "libpq keyword/value connection string" in err and "S3CRETPW" not in out + err


def test_a_password_pair_is_masked_wherever_the_ledger_is_shown():
    """R10b-7: ``shown_url`` masks a ``password=...`` pair outside a URL too (quoted values included)."""
    from textdp.ledger.store import shown_url

    assert shown_url(DSN) == "host=127.0.0.1 port=5432 dbname=ledger user=textdp password=***"
    assert "s e c" not in shown_url("user=u password='s e c' host=h") and "password=***" in shown_url("password='s e c'")
    assert shown_url("/data/ledger.sqlite") == "/data/ledger.sqlite"


# --- R10b-3 -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])
def test_a_key_file_the_input_matches_is_refused(tmp_path, streaming):
    """R10b-3: a --ledger-key-file in the folder --input matches (a drop folder with the key beside the data) was
    read as a record (with --keep-failed-text the key landed in the error file): refused in one line before the run,
    batch and --streaming, never showing the key."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_corpus(folder / "a.jsonl", [("a", 5), ("b", 5)])
    key = folder / "ledger.key"
    key.write_bytes(KEY)
    extra = ["--format", "jsonl"] + (["--streaming", "--window-size", 60, "--poll-interval", 0.5,
                                      "--streaming-stop-after", 3] if streaming else [])
    code, out, err = privatize(tmp_path, tmp_path / "o" / "r", str(tmp_path / "L.sqlite"), "--keep-failed-text", *extra,
                               key_file=key, inputs=f"{folder}/*")
    assert code == 2, err
    assert "--ledger-key-file" in err and "would be read as a record" in err and "Traceback" not in err
    assert KEY.decode() not in out + err
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(tmp_path / "L.sqlite")


# --- R10b-5 -------------------------------------------------------------------------------------------------------


def _window_run(tmp_path, budget):
    """A streaming run's ledger, done by the real LedgerRun and WindowLedger with a real Madlib on the 300-word
    artifact: window w1 decided, then the run settled (as `textdp ledger reconcile` would while the job runs), then
    window w2 decided after it: closed, its records withheld as ledger_closed. Returns the run and both sections."""
    from pipelines.ledger import LedgerRun
    from tests.test_streaming_ledger import SHAPE, _records
    from textdp.artifact.locate import open_artifact
    from textdp.mechanisms import mechanism_class
    from transforms.ledger import WindowLedger

    location = str(tmp_path / "L.sqlite")
    run = LedgerRun(location, KEY, budget, "s", "author", create=True)
    run.reserve_streaming(1.0, "madlib", str(tmp_path / "r"), "jsonl")
    mechanism = mechanism_class("madlib")(open_artifact(ART300, progress=None), 1.0)
    workers = WindowLedger(location, KEY, FP, budget, "s", "author", location)
    try:
        first = workers.decide(_records([(1, "a", 3), (2, "a", 3), (3, "b", 2)]), "w1", str(tmp_path / "r-w1"),
                               mechanism, SHAPE)[2]
        workers.commit("w1")
        open(str(tmp_path / "r-w1") + "-summary.json", "w").write("{}")
        assert run.settle("run") and run.committed()
        second = workers.decide(_records([(4, "c", 1), (5, "d", 1)]), "w2", str(tmp_path / "r-w2"), mechanism, SHAPE)[2]
    finally:
        workers.teardown()
    assert second["state"] == "closed" and second["records_withheld"] == 2
    return run, first, second


def test_the_streaming_ledger_line_never_counts_closed_windows_as_budget_withheld(tmp_path):
    """R10b-5: without a budget, the console line said "2 record(s) withheld ... by no --author-budget
    (budget_exhausted)" for a window decided after the run was settled: it now says no record was withheld by a
    budget and gives the ledger_closed records separately."""
    from pipelines.streaming import ledger_report_line

    run, first, second = _window_run(tmp_path, None)
    line = ledger_report_line(run, [{"ledger": first}, {"ledger": second}])
    assert "budget_exhausted" not in line and "withheld over" not in line, line
    assert "1 window(s) recorded (no --author-budget: no record was withheld by a budget)" in line, line
    assert "2 record(s) of 1 window(s) decided after the run was settled were not released (error output, " \
           "ledger_closed)" in line, line
    assert first["ledger_form"] == {"epsilon_d": True, "runs": 1}  # the streaming section's form (R10b-6)


def test_with_a_budget_the_line_counts_only_decided_windows(tmp_path):
    """R10b-5: with --author-budget 5 (epsilon 1: five words per author), the budget_exhausted figure counts the
    decided windows' withheld records only; the closed window's are given as ledger_closed."""
    from pipelines.streaming import ledger_report_line

    run, first, second = _window_run(tmp_path, 5.0)
    assert first["records_withheld"] == 1  # a's second record (3 + 3 words > 5)
    line = ledger_report_line(run, [{"ledger": first}, {"ledger": second}])
    assert line.startswith("ledger: 1 record(s) withheld over 1 window(s) by --author-budget 5 (error output, "
                           "budget_exhausted); 2 record(s) of 1 window(s)"), line
