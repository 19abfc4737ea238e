"""The exposure ledger (issue 29, item 3): keyed hashes, exact budget arithmetic, the SQLAlchemy ledger, and real
privatize runs whose author budget holds across three successive runs, on SQLite and on a real PostgreSQL that the
session starts (skipped, with the reason, where it cannot start). Nothing is mocked; the pipeline runs on the local
FnApiRunner with the 300-word artifact (/tmp/art300, read-only). Admission is deterministic (no randomness decides
which record is withheld), so every assertion here is exact: no false-failure rate to state.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import threading
import uuid
from fractions import Fraction

import pytest

from textdp.errors import TextdpError
from textdp.ledger import Ledger, LedgerError, admit, author_hash, key_fingerprint, load_key, mass_distribution
from textdp.ledger.budget import mass_of
from textdp.ledger.statements import ledger_statement
from textdp.text.records import author_identity

ART300 = "/tmp/art300"
KEY = b"0123456789abcdef-test-ledger-key"
FP = key_fingerprint(KEY)
WORDS = ["the", "of", "to", "and", "in", "for", "that", "is", "on", "with"]  # all in the 300-word vocabulary


# --- PostgreSQL, started by the tests -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL on a temporary directory and a free port (initdb refuses root: run as `nobody`, in a
    directory of /tmp that nobody can reach: pytest's own temporary folders are root's only)."""
    initdb, pg_ctl = shutil.which("initdb") or "/usr/local/bin/initdb", shutil.which("pg_ctl") or "/usr/local/bin/pg_ctl"
    if not (os.path.exists(initdb) and os.path.exists(pg_ctl)):
        pytest.skip("PostgreSQL (initdb, pg_ctl) is not installed")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg 3 is not installed (pip install textdp[ledger-postgres])")
    import tempfile

    base = tempfile.mkdtemp(prefix="textdp-test-postgres-")
    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: initdb cannot run")
        shutil.chown(base, "nobody", "nogroup")
        os.chmod(base, 0o755)
        prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    env = dict(os.environ, HOME=base)
    data, port = os.path.join(base, "data"), _free_port()
    done = subprocess.run(prefix + [initdb, "-D", data, "--auth=trust", "-U", "textdp", "--no-sync", "-E", "UTF8"],
                          env=env, capture_output=True, timeout=120)
    if done.returncode:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed: {done.stderr.decode()[-200:]}")
    started = subprocess.run(prefix + [pg_ctl, "-D", data, "-l", os.path.join(base, "log"), "-w", "-t", "60", "-o",
                                       f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                             env=env, capture_output=True, timeout=120)
    if started.returncode:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {started.stderr.decode()[-200:]}")
    yield f"postgresql+psycopg://textdp@127.0.0.1:{port}"
    subprocess.run(prefix + [pg_ctl, "-D", data, "-m", "immediate", "stop"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(base, ignore_errors=True)


def _new_postgres_database(server: str) -> str:
    import sqlalchemy

    name = "ledger_" + uuid.uuid4().hex[:10]
    engine = sqlalchemy.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return f"{server}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return _new_postgres_database(request.getfixturevalue("postgres_server"))


# --- the core ---------------------------------------------------------------------------------------------


def test_author_hash_is_keyed_and_follows_author_identity():
    one = author_hash(KEY, author_identity(1))
    assert one == author_hash(KEY, author_identity(1.0))  # 1 and 1.0 are one author
    assert one != author_hash(KEY, author_identity("1"))  # "1" is another
    assert one != author_hash(b"another key of enough bytes", author_identity(1))  # without the key: no link
    assert len(one) == 64 and "1" != one


def test_load_key_refuses_a_missing_or_short_key(tmp_path):
    with pytest.raises(TextdpError, match="--ledger-key-file PATH or \\$TEXTDP_LEDGER_KEY"):
        load_key(None, environ={})
    short = tmp_path / "short"
    short.write_bytes(b"tooshort")
    with pytest.raises(TextdpError, match="has 8 bytes; it needs at least 16"):
        load_key(str(short))
    assert load_key(None, environ={"TEXTDP_LEDGER_KEY": KEY.decode()}) == KEY


def test_admission_is_first_fit_in_order_and_exact_in_decimals():
    masses = [mass_of(0.1, n) for n in (4, 7, 3, 2)]
    assert admit(Fraction(0), 1.0, masses) == [True, False, True, True]  # 0.4 + 0.3 + 0.2 = 0.9 <= 1; 0.7 would not
    assert admit(Fraction(0), 1.0, [mass_of(0.1, 10)]) == [True]  # ten tokens at 0.1 fit a budget of 1 exactly
    assert admit(Fraction(0), 1.0, [mass_of(0.1, 11)]) == [False]
    assert admit(Fraction(9, 10), None, masses) == [True] * 4  # no budget: everything is released


def test_mass_distribution_is_aggregate():
    dist = mass_distribution([Fraction(1), Fraction(3), Fraction(2), Fraction(5)], budget=3)
    assert dist == {"authors": 4, "min": 1.0, "median": 2.0, "p95": 5.0, "max": 5.0, "at_cap": 2}
    assert mass_distribution([]) == {"authors": 0}


def test_ledger_commit_is_idempotent_and_spent_accumulates(ledger_location):
    ledger = Ledger(ledger_location, FP)
    assert ledger.reserve("r1", 0.5, "madlib", 3.0, "/x/out", "jsonl") == {}
    assert ledger.commit("r1", 0.5, "madlib", [("a", 4, 2, 0), ("b", 1, 1, 1)]) is True
    assert ledger.commit("r1", 0.5, "madlib", [("a", 4, 2, 0), ("b", 1, 1, 1)]) is False  # twice: nothing changes
    assert ledger.spent() == {"a": Fraction(2), "b": Fraction(1, 2)}
    assert ledger.reserve("r2", 0.1, "madlib", 3.0, "/x/out2", "jsonl") == {"a": Fraction(2), "b": Fraction(1, 2)}
    with pytest.raises(LedgerError, match="held by run 'r2'"):
        Ledger(ledger_location, FP).reserve("r3", 0.1, "madlib", 3.0, "/x/out3", "jsonl")
    assert ledger.discard("r2") and ledger.spent() == {"a": Fraction(2), "b": Fraction(1, 2)}  # a discard changes nothing
    with pytest.raises(LedgerError, match="run id 'r1' is already in the ledger"):
        ledger.reserve("r1", 0.5, "madlib", 3.0, "/x/out", "jsonl")
    ledger.close()


def test_two_reservations_at_once_exactly_one_wins(ledger_location):
    Ledger(ledger_location, FP).close()  # the schema exists before the race
    barrier, results = threading.Barrier(4), []

    def reserve(index):
        ledger = Ledger(ledger_location, FP)
        barrier.wait()
        try:
            ledger.reserve(f"race{index}", 1.0, "madlib", 1.0, f"/x/{index}", "jsonl")
            results.append("won")
        except LedgerError as exc:
            results.append(str(exc))
        finally:
            ledger.close()

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results.count("won") == 1, results
    assert all("held by run" in r or "could not reserve" in r for r in results if r != "won"), results
    assert len(Ledger(ledger_location, FP).pending()) == 1


def test_corrupt_foreign_and_other_key_ledgers_are_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database " * 100)
    with pytest.raises(LedgerError, match="cannot be read as a textdp ledger .*file is not a database"):
        Ledger(str(bad), FP)
    good = str(tmp_path / "good.sqlite")
    Ledger(good, FP).close()
    with pytest.raises(LedgerError, match="was made with another key"):
        Ledger(good, key_fingerprint(b"a different key, long enough"))
    import sqlite3

    with sqlite3.connect(good) as conn:
        conn.execute("UPDATE textdp_ledger_meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(LedgerError, match="has schema version '99'; this textdp reads version 1"):
        Ledger(good, FP)
    foreign = str(tmp_path / "foreign.sqlite")
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(LedgerError, match="holds other tables and no textdp ledger"):
        Ledger(foreign, FP)
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger(str(tmp_path / "missing.sqlite"), FP, create=False)
    assert not os.path.exists(tmp_path / "missing.sqlite")  # textdp ledger status never creates a ledger
    with sqlite3.connect(good) as conn:
        conn.execute("DROP TABLE textdp_ledger_releases")
    with pytest.raises(LedgerError, match="is damaged"):
        Ledger(good, FP)


def test_statements_follow_the_section():
    section = {"ledger": "L", "author_budget": 2.5, "records_withheld": 3, "coverage": {"covered": "all"},
               "mechanism": "madlib", "epsilon_d_bound": True, "ledger_form": {"epsilon_d": True}}
    text = ledger_statement(section)
    assert "at most 2.5" in text and "3 record(s) of this run were withheld" in text and "2.5 x max_i d(w_i, w_i')" in text
    public = ledger_statement(section, public=True)
    assert "in this ledger" in public and "the ledger L" not in public and "3 record" not in public
    assert "claims no per-word guarantee" in ledger_statement(dict(section, coverage={"covered": "none"}))
    assert "covers" in ledger_statement(dict(section, coverage={"covered": "subset"}))
    assert "no record was withheld" in ledger_statement(dict(section, author_budget=None))


# --- real privatize runs ----------------------------------------------------------------------------------


def write_corpus(path, rows):
    with open(path, "w", encoding="utf-8") as handle:
        for author, words in rows:
            handle.write(json.dumps({"author": author, "id": uuid.uuid4().hex[:6],
                                     "text": " ".join(WORDS[i % len(WORDS)] for i in range(words))}) + "\n")


def create_flag(ledger):
    """``--ledger-create`` when ``ledger`` holds no ledger yet (a new ledger needs it: docs/ledger.md)."""
    from sqlalchemy import create_engine, inspect

    from textdp.ledger.store import ledger_url, sqlite_file

    path = sqlite_file(ledger)
    if path is not None:
        return [] if os.path.exists(path) and os.path.getsize(path) else ["--ledger-create"]
    engine = create_engine(ledger_url(ledger))
    try:
        return [] if "textdp_ledger_meta" in inspect(engine).get_table_names() else ["--ledger-create"]
    finally:
        engine.dispose()


def privatize(tmp_path, name, corpus, ledger, epsilon, budget, *extra):
    from pipelines.cli import main

    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    argv = ["privatize", "--input", str(corpus), "--output", str(tmp_path / name), "--epsilon", str(epsilon),
            "--artifact", ART300, "--user-field", "author", "--ledger", ledger, "--ledger-key-file", str(key),
            "--runner", "FnApiRunner", "--public-summary", str(tmp_path / f"{name}-public.json"), *create_flag(ledger)]
    if budget is not None:
        argv += ["--author-budget", str(budget)]
    return main(argv + list(extra))


def expected_run(spent, rows, epsilon, budget):
    """The rule, simulated independently: each author's records in input order, each released while the author's
    cumulative mass (decimal arithmetic) stays <= budget. Returns the withheld line numbers (0-based)."""
    eps, cap, withheld = Fraction(str(epsilon)), Fraction(str(budget)), []
    for line, (author, words) in enumerate(rows):
        mass = eps * words
        if spent.get(author, 0) + mass <= cap:
            spent[author] = spent.get(author, 0) + mass
        else:
            withheld.append(line)
    return withheld


def read_jsonl(pattern):
    return [json.loads(line) for path in sorted(glob.glob(pattern)) for line in open(path, encoding="utf-8")]


@pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")
def test_the_budget_holds_across_three_successive_runs(tmp_path, ledger_location, capsys):
    budget = 1.2
    runs = [  # (epsilon, [(author, words)]): the cap is reached in the first run by a, in the second by b, ...
        (0.1, [("a", 4), ("b", 3), ("a", 5), ("a", 4), ("c", 2), ("a", 1), ("b", 2)]),
        (0.2, [("b", 3), ("a", 1), ("b", 2), ("c", 4), ("d", 1), ("b", 1)]),
        (0.1, [("c", 3), ("a", 1), ("b", 1), ("d", 11), ("d", 1), ("c", 1), ("e", 12), ("e", 1)]),
    ]
    spent, raw_ids = {}, {"a", "b", "c", "d", "e"}
    for index, (epsilon, rows) in enumerate(runs):
        corpus = tmp_path / f"in{index}.jsonl"
        write_corpus(corpus, rows)
        withheld = expected_run(spent, rows, epsilon, budget)
        code = privatize(tmp_path, f"out{index}", corpus, ledger_location, epsilon, budget)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert f"ledger: {len(withheld)} record(s) withheld by --author-budget 1.2 (error output, budget_exhausted)" in out
        errors = read_jsonl(str(tmp_path / f"out{index}-errors-*.jsonl"))
        assert sorted(e["position"] for e in errors if e["reason"] == "budget_exhausted") == [w + 1 for w in withheld]
        assert all(e["reason"] == "budget_exhausted" for e in errors)
        released = read_jsonl(str(tmp_path / f"out{index}-0*-of-*.jsonl"))
        assert len(released) == len(rows) - len(withheld)
        assert all("author" not in r and "__textdp_position__" not in r for r in released)  # de-linked, no position
        assert f"committed: {len(released)} record(s)" in err and f"{len(withheld)} withheld" in err
        summary = json.load(open(tmp_path / f"out{index}-summary.json"))
        section = summary["ledger"]
        assert section["state"] == "committed" and section["records_withheld"] == len(withheld)
        mine = [float(spent[a]) for a in sorted({a for a, _ in rows})]
        assert section["cumulative_mass"]["max"] == pytest.approx(max(mine))
        assert section["cumulative_mass"]["min"] == pytest.approx(min(mine))
        assert section["cumulative_mass"]["at_cap"] == sum(1 for a in {a for a, _ in rows} if spent[a] >= Fraction("1.2"))
        assert summary["records"]["reconciled"] and summary["failure_check"]["exceeded"] is False
        public = json.load(open(tmp_path / f"out{index}-public.json"))
        assert set(public["ledger"]) == {"author_budget", "statement"}  # no figure of the raw input
        assert public["ledger"]["statement"] == ledger_statement(dict(section), public=True)
        assert "at most 1.2" in public["ledger"]["statement"] and "withheld" in public["ledger"]["statement"]
        assert str(tmp_path) not in json.dumps(public["ledger"]) and "record(s) of this run" not in json.dumps(public)
        assert {"ledger.records_withheld", "ledger.cumulative_mass"} <= set(summary["raw_data_figures"]["figures"])
    ledger = Ledger(ledger_location, FP)
    hashed = {author_hash(KEY, author_identity(a)): m for a, m in spent.items()}
    assert ledger.spent() == hashed  # exactly the simulated cumulative masses, keyed by the keyed hash
    assert all(m <= Fraction("1.2") for m in ledger.spent().values())
    assert len(ledger.runs_list()) == 3 and not ledger.pending()
    if ledger_location.endswith(".sqlite"):  # no raw author id anywhere in the ledger file
        blob = open(ledger_location, "rb").read()
        assert not any(f'"{a}"'.encode() in blob for a in raw_ids)
        assert all(len(author) == 64 for author in ledger.spent())
    ledger.close()


@pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")
def test_a_ledger_without_budget_records_and_withholds_nothing(tmp_path, capsys):
    corpus = tmp_path / "in.jsonl"
    write_corpus(corpus, [("a", 30), ("a", 30)])
    location = str(tmp_path / "l.sqlite")
    assert privatize(tmp_path, "out", corpus, location, 1.0, None) == 0, capsys.readouterr().err
    assert Ledger(location, FP).spent() == {author_hash(KEY, author_identity("a")): Fraction(60)}
    assert "no record was withheld" in json.load(open(tmp_path / "out-summary.json"))["ledger"]["statement"]


@pytest.mark.parametrize("extra, message", [
    (["--oov-policy", "keep"], "--ledger with --oov-policy keep is refused"),
    (["--author-budget", "-1"], "--author-budget must be a finite number > 0"),
    (["--ledger-run-id", "bad id!"], "--ledger-run-id must be 1 to 128"),
])
@pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")
def test_ledger_flag_refusals(tmp_path, capsys, extra, message):
    corpus = tmp_path / "in.jsonl"
    write_corpus(corpus, [("a", 3)])
    assert privatize(tmp_path, "out", corpus, str(tmp_path / "l.sqlite"), 1.0, None, *extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not glob.glob(str(tmp_path / "out*"))
