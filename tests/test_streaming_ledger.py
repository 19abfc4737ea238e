"""The exposure ledger in streaming (issue 29: "every run or WINDOW records per author what was released";
docs/ledger.md, "The ledger in streaming").

Real components only: the SQLite ledger file (and a real PostgreSQL for the concurrency test, started by
tests/test_ledger.py's fixture, skipped with the reason where it cannot start), the 300-word artifact, a TestStream
on Beam's BundleBasedDirectRunner in streaming mode (FnApiRunner runs no TestStream), and the real `textdp privatize`
command (`--streaming` file watch on FnApiRunner, then a batch run) against the same ledger. Admission is
deterministic (no randomness decides which record is withheld), so every assertion is exact: no false-failure rate
to state. The expected withholdings are simulated independently (exact decimals, each author's records in read
order, the windows in the order the ledger decided them).
"""

from __future__ import annotations

import glob
import json
import os
import threading
from fractions import Fraction

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream as Events
from apache_beam.transforms.window import TimestampedValue

from pipelines.ledger import LedgerRun
from tests.test_ledger import ledger_location, postgres_server  # noqa: F401  (fixtures: SQLite and PostgreSQL)
from textdp.ledger import Ledger, author_hash, key_fingerprint
from textdp.ledger.statements import ledger_statement
from textdp.text.records import author_identity
from transforms.amplifier import AmplifierConfig
from transforms.privatize import Privatize
from transforms.streaming import ParseMessages, PrivatizeWindows

ART = "/tmp/art300"
KEY = b"0123456789abcdef-test-ledger-key"
FP = key_fingerprint(KEY)
WORDS = ["the", "of", "to", "and", "in", "for", "that", "is", "on", "with"]  # all in the 300-word vocabulary
SHAPE = "__textdp_shape__"
CONTEXT = dict(input_pattern="test-stream", data_format="jsonl", text_fields=("text",), max_record_bytes=10_000,
               max_failed_fraction=0.5, amplifier_steps=None, warnings=[])

pytestmark = pytest.mark.skipif(not os.path.isdir(ART), reason="the 300-word artifact /tmp/art300 is not built here")


def text(words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(words))


def hashed(author: str) -> str:
    return author_hash(KEY, author_identity(author))


def read_jsonl(pattern):
    return [json.loads(line) for path in sorted(glob.glob(pattern)) for line in open(path, encoding="utf-8")]


def simulate(spent: dict, rows, epsilon: float, budget: float):
    """The rule, independently: rows (position, author, words) of one window (or run) in read order per author;
    each released while the author's cumulative mass stays <= budget. Returns the withheld positions."""
    eps, cap, withheld = Fraction(str(epsilon)), Fraction(str(budget)), []
    for position, author, words in sorted(rows):
        if spent.get(author, 0) + eps * words <= cap:
            spent[author] = spent.get(author, 0) + eps * words
        else:
            withheld.append(position)
    return sorted(withheld)


def run_teststream(tmp_path, name, location, run_id, epsilon, budget, windows, window_size=10):
    """A streaming run with --ledger on the TestStream runner, its launcher side done by the real LedgerRun
    (reserve the ledger, then settle it when the job has ended). ``windows``: per window, [(position, author,
    words)], each window's records timestamped inside it and the watermark moved past it before the next."""
    ledger = LedgerRun(location, KEY, budget, run_id, "author")
    out = str(tmp_path / name / "r")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    ledger.reserve_streaming(epsilon, "madlib", out, "jsonl")
    events = Events().advance_watermark_to(0)
    for index, rows in enumerate(windows):
        start = index * window_size
        events = events.add_elements([
            TimestampedValue(("sub", position, json.dumps({"author": author, "text": text(words)}).encode()),
                             start + 1 + k % (window_size - 2)) for k, (position, author, words) in enumerate(rows)])
        events = events.advance_watermark_to(start + window_size + 1)
    events = events.advance_watermark_to_infinity()
    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    privatize = Privatize(epsilon=epsilon, artifact=ART, text_fields=["text"], keyed=True, shape_field=SHAPE)
    amplifier = AmplifierConfig(user_field="author")
    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline | events
             | beam.ParDo(ParseMessages("jsonl", ("text",), 10_000, False))
             | PrivatizeWindows(privatize, out, "jsonl", window_size, 0, amplifier=amplifier, shape_field=SHAPE,
                                context=dict(CONTEXT, amplifier_steps=amplifier.steps()), public_prefix=out + "-pub",
                                ledger=ledger.window_ledger()))
    notes = ledger.settle("run")
    assert ledger.committed(), notes
    return out


def check_window(out, window, withheld_positions, released_count):
    """One window pane's files: the withheld records are budget_exhausted errors at exactly those positions; the
    summary counts them and reconciles; the public summary has the budget and statement only."""
    (summary,) = [json.load(open(p)) for p in glob.glob(f"{out}-{window}-summary.json")]
    errors = read_jsonl(f"{out}-{window}-errors.jsonl")
    assert sorted(e["position"] for e in errors) == withheld_positions
    assert all(e["reason"] == "budget_exhausted" and "text" not in e for e in errors)
    released = read_jsonl(f"{out}-{window}-0*-of-*.jsonl")
    assert len(released) == released_count
    assert all("author" not in r and "__textdp_position__" not in r and SHAPE not in r for r in released)
    records = summary["records"]
    assert records["reconciled"] and records["failed"] == len(withheld_positions) and records["out"] == released_count
    section = summary["ledger"]
    assert section["records_withheld"] == len(withheld_positions) and section["state"] == "committed"
    assert section["window"] == window and f"{len(withheld_positions)} record(s) of this window" in section["statement"]
    assert {"ledger.records_withheld", "ledger.cumulative_mass"} <= set(summary["raw_data_figures"]["figures"])
    public = json.load(open(glob.glob(f"{out}-pub-{window}.json")[0]))
    assert set(public["ledger"]) == {"author_budget", "statement"}
    return summary


def test_the_budget_holds_across_windows_two_streaming_runs_and_a_batch_run(tmp_path, capsys):
    """Authors near the cap: records are withheld exactly when releasing them would take the author's cumulative
    epsilon-mass above the budget, across the windows of a streaming run (TestStream), a second streaming run
    (the real command, file watch) and a batch run, all against one SQLite ledger; the ledger ends with exactly the
    simulated masses and no run pending."""
    from pipelines.cli import main

    location, budget, spent = str(tmp_path / "ledger.sqlite"), 1.2, {}
    windows = [  # (position, author, words) per window of the first streaming run, epsilon 0.1
        [(1, "a", 4), (2, "b", 3), (3, "a", 5), (4, "a", 4), (5, "c", 2)],
        [(11, "a", 3), (12, "a", 1), (13, "b", 9), (14, "c", 5)],
        [(21, "b", 1), (22, "c", 8), (23, "c", 3), (24, "d", 2)],
    ]
    out = run_teststream(tmp_path, "s1", location, "stream-1", 0.1, budget, windows)
    ledger = Ledger(location, FP)
    decided = ledger.windows_of("stream-1")
    assert [w["state"] for w in decided] == ["committed"] * 3
    by_window = {w["window"]: w for w in decided}
    names = sorted(by_window)
    for window in sorted(names, key=lambda name: by_window[name]["seq"]):  # in the order the ledger decided them
        rows = windows[names.index(window)]
        withheld = simulate(spent, rows, 0.1, budget)
        check_window(out, window, withheld, len(rows) - len(withheld))
    assert sum(len(simulate({}, w, 0.1, 100)) for w in windows) == 0  # (sanity: without the cap nothing is withheld)
    assert ledger.spent() == {hashed(a): m for a, m in spent.items()}
    run = ledger.run("stream-1")
    assert run["state"] == "committed" and run["withheld"] == 4 and not ledger.pending()  # a:1+1, b:1, c:1 (c:8)
    ledger.close()

    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    common = ["--artifact", ART, "--user-field", "author", "--ledger", location, "--ledger-key-file", str(key),
              "--author-budget", str(budget), "--runner", "FnApiRunner"]
    watched = tmp_path / "in2"
    watched.mkdir()
    second = [("a", 1), ("d", 5), ("d", 1), ("e", 3), ("b", 1)]  # epsilon 0.2, one window (the file's arrival)
    (watched / "part.jsonl").write_text("".join(json.dumps({"author": a, "text": text(n)}) + "\n" for a, n in second))
    code = main(["privatize", "--streaming", "--input", str(watched / "*.jsonl"), "--output", str(tmp_path / "s2" / "r"),
                 "--epsilon", "0.2", "--window-size", "3600", "--streaming-stop-after", "0", "--ledger-run-id",
                 "stream-2", *common])
    stdout, err = capsys.readouterr()
    withheld = simulate(spent, [(i + 1, a, n) for i, (a, n) in enumerate(second)], 0.2, budget)
    assert code == 0, err
    assert withheld == [1, 3, 5]  # a and b are at the cap; d's second record would exceed it
    assert f"ledger: {len(withheld)} record(s) withheld over 1 window(s) by --author-budget 1.2" in stdout
    assert "streaming run stream-2 committed" in err
    (summary_path,) = glob.glob(str(tmp_path / "s2" / "r") + "-*-summary.json")
    window = os.path.basename(summary_path)[len("r-"):-len("-summary.json")]
    check_window_files = read_jsonl(str(tmp_path / "s2" / "r") + f"-{window}-errors.jsonl")
    assert sorted(e["position"] for e in check_window_files if e["reason"] == "budget_exhausted") == withheld

    third = [("e", 6), ("e", 1), ("f", 13), ("f", 12), ("d", 1)]  # a batch run, epsilon 0.1
    corpus = tmp_path / "in3.jsonl"
    corpus.write_text("".join(json.dumps({"author": a, "text": text(n)}) + "\n" for a, n in third))
    code = main(["privatize", "--input", str(corpus), "--output", str(tmp_path / "b3"), "--epsilon", "0.1", *common])
    stdout, err = capsys.readouterr()
    withheld = simulate(spent, [(i + 1, a, n) for i, (a, n) in enumerate(third)], 0.1, budget)
    assert code == 0, err
    assert withheld == [2, 3, 5]
    errors = read_jsonl(str(tmp_path / "b3-errors-*.jsonl"))
    assert sorted(e["position"] for e in errors if e["reason"] == "budget_exhausted") == withheld
    ledger = Ledger(location, FP)
    assert ledger.spent() == {hashed(a): m for a, m in spent.items()}  # every release counted once, none over
    assert all(m <= Fraction("1.2") for m in ledger.spent().values())
    assert [r["state"] for r in ledger.runs_list()] == ["committed"] * 3 and not ledger.pending()
    ledger.close()


def _records(rows):
    """Privatized-record dicts as the pane writer holds them (author, shape, position), for ``WindowLedger``."""
    from transforms.ledger import POSITION_FIELD

    return [{"author": a, "text": text(n), SHAPE: {"words": n, "layout": "x"}, POSITION_FIELD: ["s", p]}
            for p, a, n in rows]


class _Mechanism:
    """The two questions WindowLedger asks the mechanism object, as Madlib at epsilon 0.1 answers them."""

    def parameters(self):
        return {"epsilon": 0.1, "mechanism": "madlib"}

    def privacy_statement(self):
        return {"coverage": {"covered": "all"}}


def test_a_retried_window_and_a_duplicate_commit_change_nothing(tmp_path):
    """Bundle retries: a window pane decided again gets the recorded decision back (the same records released and
    withheld) even though the ledger has moved on, and adds nothing; committing a window twice changes nothing.
    A window decided after its run was settled (e.g. by reconcile while the job still ran) releases nothing."""
    from transforms.ledger import WindowLedger

    location = str(tmp_path / "ledger.sqlite")
    run = LedgerRun(location, KEY, 1.0, "s", "author")
    run.reserve_streaming(0.1, "madlib", str(tmp_path / "r"), "jsonl")
    workers = WindowLedger(location, KEY, FP, 1.0, "s", "author", location)
    mechanism = _Mechanism()
    rows = [(1, "a", 6), (2, "a", 5), (3, "a", 4), (4, "b", 2)]
    released, withheld, section = workers.decide(_records(rows), "w1", str(tmp_path / "r-w1"), mechanism, SHAPE)
    assert sorted(e["position"] for e in withheld) == [2] and len(released) == 3 and not section["decided_before"]
    ledger = Ledger(location, FP)
    after_first = ledger.spent()
    assert after_first == {hashed("a"): Fraction(1), hashed("b"): Fraction(2, 10)}  # pending windows count at once
    _, _, other = workers.decide(_records([(9, "b", 8)]), "w2", str(tmp_path / "r-w2"), mechanism, SHAPE)
    assert other["records_released"] == 1 and ledger.spent()[hashed("b")] == Fraction(1)
    again = workers.decide(_records(rows), "w1", str(tmp_path / "r-w1"), mechanism, SHAPE)  # the retry of w1
    assert [e["position"] for e in again[1]] == [2] and len(again[0]) == 3 and again[2]["decided_before"]
    assert again[0] == released  # the same records, though b is now at the cap
    assert ledger.spent() == {hashed("a"): Fraction(1), hashed("b"): Fraction(1)}
    assert workers.commit("w1") is True and workers.commit("w1") is False
    assert ledger.spent() == {hashed("a"): Fraction(1), hashed("b"): Fraction(1)}
    # w2 wrote its summary but was not committed (a crash right after): the settlement commits it from its files
    open(str(tmp_path / "r-w2") + "-summary.json", "w").write("{}")
    notes = run.settle("run")
    assert "streaming run s committed: 2 window(s), 4 record(s) released, 1 withheld" in notes[0], notes
    ledger = Ledger(location, FP)
    assert [w["state"] for w in ledger.windows_of("s")] == ["committed", "committed"]
    late = workers.decide(_records([(30, "c", 1)]), "w3", str(tmp_path / "r-w3"), mechanism, SHAPE)
    assert late[0] == [] and [e["reason"] for e in late[1]] == ["ledger_closed"] and late[2]["state"] == "closed"
    assert "none of its records was released" in ledger_statement(late[2])
    assert hashed("c") not in ledger.spent() and len(ledger.windows_of("s")) == 2
    assert ledger.run("s")["state"] == "committed" and not ledger.pending()
    workers.teardown()
    ledger.close()


def test_windows_decided_at_once_never_spend_the_same_budget(tmp_path, ledger_location):  # noqa: F811
    """Eight windows of one run decided at the same time by eight threads (eight workers), each with one record of
    author a worth 0.3 against a budget of 1.2: exactly four are released, whatever the interleaving, on SQLite and
    on PostgreSQL (the UPDATE of the run's row that opens each decision serialises them)."""
    from transforms.ledger import WindowLedger

    run = LedgerRun(ledger_location, KEY, 1.2, "s", "author")
    run.reserve_streaming(0.1, "madlib", str(tmp_path / "r"), "jsonl")
    results, barrier = [], threading.Barrier(8)

    def worker(index):
        workers = WindowLedger(ledger_location, KEY, FP, 1.2, "s", "author", "L")
        workers.setup()
        barrier.wait()
        released, _, _ = workers.decide(_records([(index, "a", 3)]), f"w{index}", str(tmp_path / f"r-w{index}"),
                                        _Mechanism(), SHAPE)
        results.append(len(released))
        workers.teardown()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 0, 0, 0, 1, 1, 1, 1]
    ledger = Ledger(ledger_location, FP)
    assert ledger.spent() == {hashed("a"): Fraction(12, 10)}
    assert sorted(w["seq"] for w in ledger.windows_of("s")) == list(range(1, 9))
    ledger.close()


@pytest.mark.parametrize("extra, message", [
    (["--runner", "FlinkRunner"], "--ledger with --streaming on a remote runner needs a server database"),
    (["--streaming-stop-after", "0", "--oov-policy", "keep"], "--ledger with --oov-policy keep is refused"),
])
def test_streaming_ledger_refusals_are_one_line_before_anything_runs(tmp_path, extra, message):
    """--ledger with --streaming: a SQLite ledger cannot be reached by remote workers (refused unless the runner is
    local), and the batch job's ledger refusals apply; one line, exit 2, no ledger and no output written."""
    import subprocess
    import sys

    (tmp_path / "in").mkdir()
    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", "--streaming", "--input",
                             str(tmp_path / "in" / "*.jsonl"), "--output", str(tmp_path / "r"), "--artifact", ART,
                             "--epsilon", "1", "--user-field", "author", "--ledger", str(tmp_path / "l.sqlite"),
                             "--ledger-key-file", str(key), *extra], cwd=repo, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(os.listdir(tmp_path)) == ["in", "ledger.key"]


def test_reconcile_settles_a_streaming_run_and_refuses_to_discard_it(tmp_path, capsys):
    """A streaming run whose launcher was lost stays pending and holds the ledger; `textdp ledger reconcile
    --discard` refuses it in one line (its windows were counted when decided), `textdp ledger reconcile` commits
    its windows that wrote their summary and the run, and frees the ledger; the windows' mass is unchanged."""
    from pipelines.ledger import run as ledger_command
    from transforms.ledger import WindowLedger

    location, key = str(tmp_path / "ledger.sqlite"), tmp_path / "ledger.key"
    key.write_bytes(KEY)
    LedgerRun(location, KEY, 1.0, "lost", "author").reserve_streaming(0.1, "madlib", str(tmp_path / "r"), "jsonl")
    workers = WindowLedger(location, KEY, FP, 1.0, "lost", "author", location)
    workers.decide(_records([(1, "a", 4)]), "w1", str(tmp_path / "r-w1"), _Mechanism(), SHAPE)
    open(str(tmp_path / "r-w1") + "-summary.json", "w").write("{}")
    workers.decide(_records([(2, "a", 3)]), "w2", str(tmp_path / "r-w2"), _Mechanism(), SHAPE)  # no summary: lost
    workers.teardown()
    flags = ["--ledger", location, "--ledger-key-file", str(key)]
    assert ledger_command(["reconcile", *flags, "--discard", "lost"]) == 2
    err = capsys.readouterr().err
    assert "is a streaming run" in err and len(err.strip().splitlines()) == 1
    assert ledger_command(["reconcile", *flags]) == 0
    out = capsys.readouterr().out
    assert "streaming run lost committed: 2 window(s), 2 record(s) released, 0 withheld" in out
    assert "1 window(s) wrote no summary and stay pending, counted in full" in out
    ledger = Ledger(location, FP)
    assert [w["state"] for w in ledger.windows_of("lost")] == ["committed", "pending"]
    assert ledger.spent() == {hashed("a"): Fraction(7, 10)} and not ledger.pending()
    ledger.close()


def test_a_version_1_ledger_is_upgraded_in_place_and_keeps_its_runs(tmp_path):
    """A ledger written before streaming (schema version 1: no window tables) is upgraded when opened: the window
    tables are added, the version becomes 2 (a textdp reading version 1 only then refuses it instead of ignoring
    the windows), and its committed runs' masses are unchanged."""
    import sqlite3

    location = str(tmp_path / "ledger.sqlite")
    ledger = Ledger(location, FP)
    ledger.reserve("batch-1", 0.1, "madlib", 1.0, str(tmp_path / "out"), "jsonl")
    ledger.commit("batch-1", 0.1, "madlib", [(hashed("a"), 5, 1, 0)])
    ledger.close()
    with sqlite3.connect(location) as conn:  # as version 1 left it
        conn.execute("DROP TABLE textdp_ledger_windows")
        conn.execute("DROP TABLE textdp_ledger_window_releases")
        conn.execute("UPDATE textdp_ledger_meta SET value = '1' WHERE name = 'schema_version'")
    ledger = Ledger(location, FP)
    assert ledger.spent() == {hashed("a"): Fraction(1, 2)}
    with sqlite3.connect(location) as conn:
        assert conn.execute("SELECT value FROM textdp_ledger_meta WHERE name = 'schema_version'").fetchone() == ("2",)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"textdp_ledger_windows", "textdp_ledger_window_releases"} <= tables
    ledger.close()
