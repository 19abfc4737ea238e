"""The ledger database: one SQLAlchemy code path for an embedded SQLite file and a shared server (PostgreSQL).

Tables: ``meta`` (schema version, key fingerprint), ``runs`` (one row per run: pending, committed or discarded),
``releases`` (per committed run and author hash: epsilon, released tokens, records released and withheld),
``active`` (one slot: the run that holds the ledger between its reservation and its settlement) and, for streaming
runs (schema version 2), ``windows`` (one row per (run, window): pending from its admission, committed once its
files are written) and ``window_releases`` (per (run, window, author): epsilon, tokens, records released and
withheld, and the author's mass before the window, from which a retried window re-decides the same records).

Protocol (docs/ledger.md, "Faults"): ``reserve`` takes the slot in one transaction (a second run is refused while
one is pending: the slot's primary key serialises them on every backend) and returns every author's committed mass;
``commit`` writes a run's per-author releases, marks it committed and frees the slot in one transaction, and does
nothing for a run that is already committed (idempotent); ``discard`` frees the slot of a run that released nothing.
Workers of a batch run never touch the database.

Streaming (docs/ledger.md, "The ledger in streaming"): the launcher reserves the slot for the whole streaming run as
for a batch run. Each window pane then calls ``admit_window`` once (one transaction, serialised with every other
window of the run by an UPDATE of the run's row taken first: a row lock on PostgreSQL, the database's write lock
on SQLite): it reads the mass of the pane's authors (committed runs, and every window not discarded: pending windows
count, so two windows never spend the same remaining budget), decides, and records the window as pending with its
per-author releases, before any of its files is written. ``commit_window`` marks it committed after its files;
both are idempotent by (run id, window): a retried pane gets the recorded decision back and changes nothing.
``settle_streaming`` marks the run committed and frees the slot when the job has ended.
"""

from __future__ import annotations

import datetime
import os
import re
import uuid
import warnings
from fractions import Fraction
from typing import Dict, Iterable, List, Optional, Tuple

from textdp.errors import TextdpError
from textdp.ledger.budget import spent_by_author

SCHEMA_VERSION = "2"  # 2: the streaming windows' tables (a version-1 ledger is upgraded when opened)
READABLE_VERSIONS = ("1", SCHEMA_VERSION)
PENDING, COMMITTED, DISCARDED = "pending", "committed", "discarded"
LEDGER_ID, BUDGET = "ledger_id", "author_budget"  # meta rows: the ledger's identity, the ledger's budget
COMMIT_SEQ = "commit_seq"  # meta row: how many commits the ledger has taken (monotonic; round 11b, R11b-4)
SEQ_SUFFIX = ".textdp-seq"  # beside an SQLite ledger: its identity, commit count and committed runs (R11b-4)


def release_file(output: str) -> str:
    """A batch run's release file: what it released per author, what a ledger is settled or re-counted from."""
    return f"{output}-ledger.json"


def kept_release_file(output: str, run_id: str) -> str:
    """Where a successful ``--overwrite`` of ``output`` keeps the earlier run's release file (R12-3): the file a
    restored ledger is re-counted from is never deleted with the release it described."""
    return f"{output}-ledger-{run_id}.json"


def release_output(path: str, run_id: str) -> Tuple[str, Optional[str]]:
    """A release file's ``--output`` prefix, and the file itself when it is a kept copy (``kept_release_file``: the
    names at that prefix hold another run's files, so a commit from it stamps the copy and touches nothing there)."""
    suffix = f"-ledger-{run_id}.json"
    if path.endswith(suffix):
        return path[:-len(suffix)], path
    return (path[:-len("-ledger.json")] if path.endswith("-ledger.json") else path), None


def release_file_of(output: str, run_id: str) -> str:
    """The file that holds run ``run_id``'s release for ``output`` (for a message): ``release_file`` when it is that
    run's, else its kept copy if present, else ``release_file`` said to be replaced (R12-3: never name another run's
    file as this run's)."""
    import json

    for path in (release_file(output), kept_release_file(output, run_id)):
        try:
            with open(path, "rb") as handle:
                if json.loads(handle.read(1 << 24)).get("run_id") == run_id:
                    return path
        except (OSError, ValueError, AttributeError):
            continue
    return f"{release_file(output)} (replaced since: find the file whose run_id is {run_id})"
# what a damaged ledger's refusal advises: a backup is older than the runs committed since (R11b-4)
RESTORE = ("restore it from a backup, then re-count every run committed after that backup: `textdp ledger reconcile "
           "--release <output>-ledger.json` (a restore loses them: docs/ledger.md, \"A ledger restored from a backup\")")


class LedgerError(TextdpError):
    """A ledger that cannot be used (corrupt, another schema or key, busy): one line, nothing ran."""


class LedgerUnreachable(LedgerError):
    """The ledger's database is there but cannot be reached now (an SQLite file locked by another process, a server
    down or refusing connections): retry later; never "restore it" (round 9b, R9b-4). ``reason``: the driver's
    first line."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


# how long an SQLite connection waits for another process's lock before the ledger is "unreachable" (seconds);
# the environment variable is for tests only
BUSY_TIMEOUT = float(os.environ.get("TEXTDP_TEST_LEDGER_BUSY_TIMEOUT") or 60)
_UNREACHABLE = ("database is locked", "database is busy", "database table is locked", "connection", "could not connect",
                "timeout", "timed out", "server closed", "refused", "no route to host", "name or service not known",
                "could not translate host name", "the database system is starting up", "shutting down")


def unreachable(exc: BaseException) -> bool:
    """Whether a driver error means "cannot be reached now" (busy, locked, no connection) rather than "not a
    usable ledger" (not a database, tables missing)."""
    from sqlalchemy.exc import DisconnectionError, InterfaceError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, (DisconnectionError, InterfaceError, PoolTimeout)):
        return True
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).lower()
    return any(needle in text for needle in _UNREACHABLE)


def shown_budget(value: float, other: float) -> str:
    """``value`` with :g, or with every digit when :g would print it the same as ``other`` (R9b-4: "12 differs
    from 12")."""
    return format(value, "g") if format(value, "g") != format(other, "g") else repr(float(value))


def ledger_url(location: str):
    """An SQLAlchemy URL as given (``postgresql+psycopg://...``), or a plain path: an embedded SQLite file, as a URL
    object whose database is that path verbatim (a string URL would read a ``?`` in the name as query arguments and
    ``%41`` as ``A``, so the ledger would be another file than the one every check looks at: round 8, R8b-10)."""
    if "://" in location:
        return location
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=os.path.abspath(os.path.expanduser(location)))


SECRET_QUERY = ("pass", "secret", "token", "cred", "auth")  # query keys dropped from a shown URL (?password=...)


# libpq's keyword/value connection string ("host=db port=5432 dbname=ledger user=u password=..."): R10b-7
_LIBPQ_KEYWORDS = ("host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode", "sslpassword",
                   "service", "connect_timeout", "application_name", "options", "target_session_attrs", "sslrootcert")
_KEYWORD_DSN = re.compile(r"(?:^|\s)(?:" + "|".join(_LIBPQ_KEYWORDS) + r")\s*=", re.IGNORECASE)
_SECRET_VALUE = re.compile(r"(\b[\w-]*(?:pass|secret|token|cred|auth)[\w-]*\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)",
                           re.IGNORECASE)


def refuse_keyword_dsn(location: str) -> None:
    """A libpq keyword/value DSN given as --ledger (not a URL) would be taken as a file name: a local SQLite ledger
    named after it, its password printed. Refused in one line that never shows the value (round 10b, R10b-7)."""
    if "://" not in location and _KEYWORD_DSN.search(location):
        raise LedgerError("--ledger looks like a libpq keyword/value connection string (host=... dbname=... user=...), "
                          "which would be taken as a file name: give the database as a URL, e.g. "
                          "postgresql+psycopg://USER@HOST:5432/DBNAME (the password in $PGPASSWORD or ~/.pgpass), or "
                          "a plain file path for an SQLite ledger")


def shown_url(location: str) -> str:
    """The location without any credential, for messages, summaries and the ledger file: the URL's password
    masked (``user:***@``) and every query parameter named like a password, secret, token or credential dropped
    (libpq reads ``?password=``, ``?sslpassword=``, ``?passfile=``); outside a URL, the value of any
    ``password=``-like pair masked (R10b-7). The one function that shows a ledger URL."""
    if "://" not in location:
        return _SECRET_VALUE.sub(lambda m: m.group(1) + "***", location)
    from sqlalchemy.engine import make_url

    try:
        url = make_url(location)
        query = {k: v for k, v in url.query.items() if not any(word in k.lower() for word in SECRET_QUERY)}
        return url.set(query=query).render_as_string(hide_password=True)
    except Exception:
        return location.split("://", 1)[0] + "://..."


def sqlite_file(location: str) -> Optional[str]:
    """The file of an embedded SQLite ledger (absolute), None for a server database. LedgerError for an in-memory
    SQLite database (``sqlite://``, ``sqlite+pysqlite://``, ``:memory:``, ``mode=memory``): it is gone when the
    process ends, so it can cap nothing across runs."""
    refuse_keyword_dsn(location)
    if "://" not in location:
        return os.path.abspath(os.path.expanduser(location))
    from sqlalchemy.engine import make_url

    try:
        url = make_url(location)
    except Exception:
        return None  # refused when the engine is made
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if any(key.lower() == "vfs" for key in url.query) or "vfs=" in database.lower():  # R10b-1: vfs=memdb
        raise LedgerError(f"--ledger {shown_url(location)!r} names an SQLite VFS (vfs=...): it can put the ledger in "
                          "memory (memdb) or elsewhere than the file every check looks at; give a plain file path "
                          "or a server database URL, without vfs=")
    if (database in ("", ":memory:") or database.startswith("file::memory:") or "mode=memory" in database
            or str(url.query.get("mode", "")).lower() == "memory"):
        raise LedgerError(f"--ledger {shown_url(location)!r} is an in-memory SQLite database: it is gone when the run "
                          "ends, so it could cap nothing across runs; give a file path or a server database URL")
    if database.startswith("file:"):  # an SQLite URI (uri=true): its path part
        database = database[len("file:"):].split("?", 1)[0]
    return os.path.abspath(os.path.expanduser(database))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _tables():
    from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

    metadata = MetaData()
    meta = Table("textdp_ledger_meta", metadata, Column("name", String(64), primary_key=True),
                 Column("value", Text, nullable=False))
    runs = Table("textdp_ledger_runs", metadata, Column("run_id", String(128), primary_key=True),
                 Column("state", String(16), nullable=False), Column("reserved_at", String(40), nullable=False),
                 Column("settled_at", String(40)), Column("epsilon", Float), Column("mechanism", String(200)),
                 Column("budget", Float), Column("output", Text), Column("data_format", String(16)),
                 Column("authors", Integer), Column("tokens", Integer), Column("records", Integer),
                 Column("withheld", Integer))
    releases = Table("textdp_ledger_releases", metadata,
                     Column("run_id", String(128), primary_key=True), Column("author", String(64), primary_key=True),
                     Column("epsilon", Float, nullable=False), Column("tokens", Integer, nullable=False),
                     Column("records", Integer, nullable=False), Column("withheld", Integer, nullable=False))
    active = Table("textdp_ledger_active", metadata, Column("slot", Integer, primary_key=True, autoincrement=False),
                   Column("run_id", String(128), nullable=False), Column("since", String(40), nullable=False))
    return metadata, meta, runs, releases, active


def _window_tables(metadata):
    """The streaming tables (schema version 2), in ``metadata``."""
    from sqlalchemy import Column, Float, Integer, String, Table, Text

    windows = Table("textdp_ledger_windows", metadata,
                    Column("run_id", String(128), primary_key=True), Column("window", String(64), primary_key=True),
                    Column("seq", Integer, nullable=False), Column("state", String(16), nullable=False),
                    Column("reserved_at", String(40), nullable=False), Column("settled_at", String(40)),
                    Column("output", Text), Column("epsilon", Float), Column("authors", Integer),
                    Column("tokens", Integer), Column("records", Integer), Column("withheld", Integer))
    window_releases = Table("textdp_ledger_window_releases", metadata,
                            Column("run_id", String(128), primary_key=True), Column("window", String(64), primary_key=True),
                            Column("author", String(64), primary_key=True), Column("epsilon", Float, nullable=False),
                            Column("tokens", Integer, nullable=False), Column("records", Integer, nullable=False),
                            Column("withheld", Integer, nullable=False), Column("before", Text, nullable=False))
    return windows, window_releases


def _form_table(metadata):
    """Each run's per-word bound form and artifact (round 10b, R10b-6): ``bound`` is BOUND_EPSILON_D for a mechanism
    whose per-word bound is exp(epsilon d(w, w')) (``Mechanism.EPSILON_D_BOUND``), else BOUND_GENERAL; ``artifact``
    the artifact's identity (``textdp.artifact.store.artifact_identity``: whose distances d are). A run without a row
    (recorded by an older textdp) is unknown. Added to an older ledger when it is opened; no schema version change
    (an older textdp ignores it and records runs without a row, which later statements treat as unknown)."""
    from sqlalchemy import Column, String, Table, Text

    return Table("textdp_ledger_run_forms", metadata, Column("run_id", String(128), primary_key=True),
                 Column("bound", String(32), nullable=False), Column("artifact", Text))


BOUND_EPSILON_D, BOUND_GENERAL = "epsilon_d", "general"


class Ledger:
    """An opened, checked ledger. ``Ledger(location, fingerprint)`` refuses in one line (LedgerError): a file or
    database that is not a textdp ledger, another schema version, another key. A missing SQLite file (or an empty
    database) becomes a new ledger with this key. ``require_new`` (privatize's --ledger-create, docs/ledger.md
    "Creating a ledger"): True, only a new ledger is accepted; False, only an existing one (``create`` is then
    ignored); None, ``create`` decides (the library default)."""

    def __init__(self, location: str, fingerprint: str, create: bool = True, require_new: Optional[bool] = None):
        from sqlalchemy import create_engine, inspect, select
        from sqlalchemy.exc import SQLAlchemyError

        self.location, self.shown = location, shown_url(location)
        self.created = False  # True when this open made a new ledger
        self.last_seq, self.seq_error = 0, None  # the commit count of this object's last commit; a failed seq file
        url = ledger_url(location)
        self.file = sqlite_file(location)  # refuses an in-memory SQLite database
        if require_new is not None:
            create = require_new
        if self.file is not None:
            if os.path.isfile(self.file) and os.stat(self.file).st_nlink > 1:  # R12-1: one ledger, one name
                raise LedgerError(f"--ledger {self.shown!r} has {os.stat(self.file).st_nlink} names (hard links): the "
                                  "record of its commits beside it (.textdp-seq) would differ by name, and a restore "
                                  "could go unnoticed; keep one name and give that")
            folder = os.path.dirname(self.file)
            if not os.path.isdir(folder):
                raise LedgerError(f"--ledger {self.shown!r}: the folder {folder!r} does not exist")
            if not create and not os.path.exists(self.file):  # connecting would create an empty file
                raise LedgerError(f"--ledger {self.shown!r} does not exist" + (
                    "; give --ledger-create to start a new ledger (every author at 0), or check the path"
                    if require_new is False else ""))
            if require_new and os.path.exists(self.file) and os.path.getsize(self.file) > 0:
                raise LedgerError(f"--ledger {self.shown!r} already exists and --ledger-create asks for a new ledger: "
                                  "drop --ledger-create to use it, or give a new path")
        try:
            kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT}} if str(url).startswith("sqlite") else {"pool_pre_ping": True}
            with warnings.catch_warnings():  # pysqlite ignores query arguments (?password=): no multi-line warning
                warnings.simplefilter("ignore")
                self.engine = create_engine(url, **kwargs)
        except Exception as exc:  # no driver, a malformed URL
            raise LedgerError(f"--ledger {self.shown!r} cannot be opened: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}") from None
        self.metadata, self.meta, self.runs, self.releases, self.active = _tables()
        try:
            names = set(inspect(self.engine).get_table_names())
            ours = {table.name for table in self.metadata.sorted_tables}  # version 1's tables
            self.windows, self.window_releases = _window_tables(self.metadata)
            self.forms = _form_table(self.metadata)
            if require_new and names & ours:
                raise LedgerError(f"--ledger {self.shown!r} already holds a textdp ledger and --ledger-create asks for a "
                                  "new one: drop --ledger-create to use it, or give a new path")
            if not names & ours:
                if names and create:
                    raise LedgerError(f"--ledger {self.shown!r} holds other tables and no textdp ledger; give an empty "
                                      "database or a new file")
                if not create:
                    raise LedgerError(f"--ledger {self.shown!r} holds no textdp ledger" + (
                        "; give --ledger-create to start a new ledger (every author at 0)" if require_new is False else ""))
                self.ledger_id = uuid.uuid4().hex
                with self.engine.begin() as conn:
                    self.metadata.create_all(conn)  # every table, the streaming ones included (version 2)
                    conn.execute(self.meta.insert(), [{"name": "schema_version", "value": SCHEMA_VERSION},
                                                      {"name": "key_fingerprint", "value": fingerprint},
                                                      {"name": "created", "value": _now()},
                                                      {"name": LEDGER_ID, "value": self.ledger_id}])
                self.created = True
                gone = self.still_here()  # R10b-1: a fresh connection must find the new ledger (no in-memory VFS)
                if gone is not None:
                    raise LedgerError(f"--ledger {self.shown!r}: the new ledger cannot be found again through a fresh "
                                      f"connection ({gone}): it is not stored where --ledger points (an in-memory or "
                                      "temporary database?); nothing ran")
            elif not ours <= names:
                missing = ours - names
                raise LedgerError(f"--ledger {self.shown!r} is damaged: tables {sorted(missing)} are missing "
                                  f"(nothing ran; {RESTORE})")
            with self.engine.connect() as conn:
                values = dict(conn.execute(select(self.meta.c.name, self.meta.c.value)).all())
            streaming_tables = {self.windows.name, self.window_releases.name}
            if values.get("schema_version") == SCHEMA_VERSION and not streaming_tables <= set(inspect(self.engine).get_table_names()):
                raise LedgerError(f"--ledger {self.shown!r} is damaged: tables {sorted(streaming_tables - names)} are "
                                  f"missing (nothing ran; {RESTORE})")
        except LedgerError:
            raise
        except SQLAlchemyError as exc:
            if unreachable(exc):  # busy, locked or a server down: not a damaged ledger (R9b-4)
                raise LedgerUnreachable(f"--ledger {self.shown!r} cannot be reached now ({_reason(exc)}); nothing ran: "
                                        "try again when the database is reachable (another process may hold a lock "
                                        "on it)", _reason(exc)) from None
            raise LedgerError(f"--ledger {self.shown!r} cannot be read as a textdp ledger ({_reason(exc)}); nothing "
                              f"ran: point --ledger elsewhere, or {RESTORE}") from None
        if values.get("schema_version") not in READABLE_VERSIONS:
            raise LedgerError(f"--ledger {self.shown!r} has schema version {str(values.get('schema_version'))[:20]!r}; "
                              f"this textdp reads version {' or '.join(READABLE_VERSIONS)} (nothing ran)")
        if values.get("key_fingerprint") != fingerprint:
            raise LedgerError(f"--ledger {self.shown!r} was made with another key (fingerprint "
                              f"{str(values.get('key_fingerprint'))[:12]}..., this key's {fingerprint[:12]}...): with it "
                              "no author would be recognised; give the ledger's key (nothing ran)")
        self.fingerprint = fingerprint
        self.ledger_id = values.get(LEDGER_ID)
        if self.ledger_id is None:  # a ledger made before identities: given one now
            self.ledger_id = uuid.uuid4().hex
            try:
                with self.engine.begin() as conn:
                    conn.execute(self.meta.insert().values(name=LEDGER_ID, value=self.ledger_id))
            except SQLAlchemyError:
                with self.engine.connect() as conn:  # another process gave it one meanwhile
                    self.ledger_id = conn.execute(select(self.meta.c.value).where(self.meta.c.name == LEDGER_ID)).scalar()
        if self.forms.name not in names and not self.created:  # a ledger made before R10b-6: the forms table added
            try:
                with self.engine.begin() as conn:
                    self.metadata.create_all(conn, tables=[self.forms], checkfirst=True)
            except SQLAlchemyError as exc:
                raise LedgerError(f"--ledger {self.shown!r} could not be given its run-forms table ({_reason(exc)}); "
                                  "nothing ran") from None
        if values.get("schema_version") != SCHEMA_VERSION:  # version 1: add the streaming tables, in one transaction
            # (a textdp that reads version 1 only then refuses the ledger, instead of ignoring the windows' releases)
            try:
                with self.engine.begin() as conn:
                    self.metadata.create_all(conn, tables=[self.windows, self.window_releases], checkfirst=True)
                    conn.execute(self.meta.update().where(self.meta.c.name == "schema_version")
                                 .values(value=SCHEMA_VERSION))
            except SQLAlchemyError as exc:
                raise LedgerError(f"--ledger {self.shown!r} could not be upgraded to schema version {SCHEMA_VERSION} "
                                  f"({_reason(exc)}); nothing ran") from None

    # --- the protocol -------------------------------------------------------------------------------

    def reserve(self, run_id: str, epsilon: float, mechanism: str, budget: Optional[float], output: str,
                data_format: str) -> Dict[str, Fraction]:
        """Take the ledger for ``run_id`` and return every author's committed mass (exact). LedgerError if the run
        id was used before, or another run holds the ledger (pending: running, or killed before settling)."""
        from sqlalchemy import select
        from sqlalchemy.exc import IntegrityError, SQLAlchemyError

        try:
            with self.engine.begin() as conn:
                earlier = conn.execute(select(self.runs.c.state).where(self.runs.c.run_id == run_id)).scalar()
                if earlier is not None:
                    raise LedgerError(f"run id {run_id!r} is already in the ledger ({earlier}); each release needs a new "
                                      "run id" + (": settle it first with `textdp ledger reconcile`" if earlier == PENDING
                                                  else ""))
                try:
                    with conn.begin_nested():
                        conn.execute(self.active.insert().values(slot=1, run_id=run_id, since=_now()))
                except IntegrityError:
                    holder = conn.execute(select(self.active.c.run_id, self.active.c.since)).first()
                    raise LedgerError(f"the ledger is held by run {holder[0] if holder else '?'!r} (pending since "
                                      f"{holder[1] if holder else '?'}): it is running, or was stopped before it settled; "
                                      "wait for it, or run `textdp ledger reconcile` (nothing ran)") from None
                self._settle_budget(conn, budget)
                conn.execute(self.runs.insert().values(
                    run_id=run_id, state=PENDING, reserved_at=_now(), epsilon=float(epsilon), mechanism=str(mechanism),
                    budget=None if budget is None else float(budget), output=output, data_format=data_format))
                return self._spent(conn)
        except LedgerError:
            raise
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger {self.shown!r} could not reserve run {run_id!r} ({_reason(exc)}); nothing ran") from None

    # --- the ledger's budget (docs/ledger.md, "The budget is the ledger's") ---------------------------------

    def budget(self) -> Optional[float]:
        """The ledger's author budget: set once, by the first run that gives --author-budget, and kept in the
        ledger (a ledger written before it was kept there: the smallest budget of its committed runs). None: no
        run has given one yet."""
        with self.engine.connect() as conn:
            return self._budget(conn)

    def _budget(self, conn) -> Optional[float]:
        from sqlalchemy import func, select

        value = conn.execute(select(self.meta.c.value).where(self.meta.c.name == BUDGET)).scalar()
        if value is not None:
            return float(value)
        return conn.execute(select(func.min(self.runs.c.budget)).where(self.runs.c.state == COMMITTED,
                                                                       self.runs.c.budget.isnot(None))).scalar()

    def resolve_budget(self, given: Optional[float]) -> Optional[float]:
        """The budget a run must use with the --author-budget it was ``given`` (None: not given): the ledger's
        when it has one (another value is refused: raising it would release past a cap the ledger's earlier runs
        published; lowering it would leave authors above the new cap); ``given`` for a ledger without one, if no
        author is already above it (then the cap holds for every author from here on, and is kept)."""
        from textdp.ledger.budget import exact

        with self.engine.connect() as conn:
            current = self._budget(conn)
            if current is not None:
                if given is not None and exact(given) != exact(current):
                    raise LedgerError(f"--author-budget {shown_budget(given, current)} differs from the ledger's budget "
                                      f"{shown_budget(current, given)} (set by its "
                                      "first capped run and kept in the ledger): every run of a ledger is capped by "
                                      "its one budget; drop --author-budget or give the same value")
                return current
            if given is not None:
                self._refuse_above(conn, given)
            return given

    def _refuse_above(self, conn, budget: float) -> None:
        from textdp.ledger.budget import exact

        spent = self._spent(conn)
        above = sum(1 for mass in spent.values() if mass > exact(budget))
        if above:
            raise LedgerError(f"--author-budget {budget:g}: this ledger has no budget yet and {above} author(s) in it "
                              f"are already above {budget:g} (released by uncapped runs), so it cannot cap them; give "
                              f"a budget of at least {float(max(spent.values())):g}, or start a new ledger")

    def _settle_budget(self, conn, budget: Optional[float]) -> None:
        """In the reservation's transaction: the run's budget is the ledger's (kept when it is the first)."""
        from sqlalchemy import select

        from textdp.ledger.budget import exact

        stored = conn.execute(select(self.meta.c.value).where(self.meta.c.name == BUDGET)).scalar()
        current = float(stored) if stored is not None else self._budget(conn)
        if current is not None and (budget is None or exact(budget) != exact(current)):
            raise LedgerError(f"the ledger's budget is {current if budget is None else shown_budget(current, budget)}, "
                              f"this run's {'none' if budget is None else shown_budget(budget, current)} (nothing ran)")
        if budget is not None and stored is None:
            if current is None:
                self._refuse_above(conn, budget)
            conn.execute(self.meta.insert().values(name=BUDGET, value=repr(float(budget))))

    # --- the ledger's identity ---------------------------------------------------------------------------

    def still_here(self) -> Optional[str]:
        """None if the ledger this object opened is still at its location (same identity), else why not (one
        phrase): deleted, or replaced by another ledger or file, e.g. while a run was between its reservation and
        its commit. Fresh connections (a pooled one would still see a deleted SQLite file)."""
        from sqlalchemy import select

        if self.file is not None and not os.path.exists(self.file):
            return "it was deleted or moved"
        self.engine.dispose()
        try:
            with self.engine.connect() as conn:
                found = conn.execute(select(self.meta.c.value).where(self.meta.c.name == LEDGER_ID)).scalar()
        except Exception as exc:
            if unreachable(exc):  # busy or down, not replaced: the caller's "unreachable" path (R9b-4)
                raise LedgerUnreachable(f"the ledger {self.shown!r} cannot be reached now ({_reason(exc)})",
                                        _reason(exc)) from None
            return f"it cannot be read ({_reason(exc)})"
        return None if found == self.ledger_id else "it was replaced by another ledger or file"

    def spent(self) -> Dict[str, Fraction]:
        """Every author's committed mass (a read, no reservation: for inspecting a pipeline's graph)."""
        with self.engine.connect() as conn:
            return self._spent(conn)

    def _spent(self, conn, authors: Optional[List[str]] = None) -> Dict[str, Fraction]:
        """Every author's mass (or only ``authors``'): the releases of committed runs, plus those of every streaming
        window that is not discarded (a pending window counts: it may have released, so its mass is spent)."""
        from sqlalchemy import select

        r, runs, w, wr = self.releases, self.runs, self.windows, self.window_releases
        rows = []
        chunks = [None] if authors is None else [authors[i:i + 500] for i in range(0, len(authors), 500)]
        for chunk in chunks:
            batch = select(r.c.author, r.c.epsilon, r.c.tokens).join(runs, runs.c.run_id == r.c.run_id).where(
                runs.c.state == COMMITTED)
            streamed = select(wr.c.author, wr.c.epsilon, wr.c.tokens).join(
                w, (w.c.run_id == wr.c.run_id) & (w.c.window == wr.c.window)).where(w.c.state != DISCARDED)
            if chunk is not None:
                batch, streamed = batch.where(r.c.author.in_(chunk)), streamed.where(wr.c.author.in_(chunk))
            rows += conn.execute(batch).all() + conn.execute(streamed).all()
        return spent_by_author(rows)

    # --- streaming windows (docs/ledger.md, "The ledger in streaming") -------------------------------------

    def admit_window(self, run_id: str, window: str, output: str, epsilon: float, budget: Optional[float],
                     authors: Dict[str, List[int]]):
        """Decide one window pane of the streaming run ``run_id``, durably, before any of its files is written.

        ``authors``: author hash -> the word tokens of each of the author's records in the pane, in the pane's
        deterministic order. Returns (decisions: author -> [released?] per record, befores: author -> mass before
        the window, fresh: False for a window decided before (a retry: the recorded decision, nothing written)),
        or None when the run no longer holds the ledger (settled by reconcile: the window may release nothing).

        One transaction, serialised with every other window of the run (and with the run's settlement) by the
        UPDATE of the run's row that opens it."""
        from sqlalchemy import func, select

        from textdp.ledger.budget import admit, from_pair, mass_of

        with self.engine.begin() as conn:
            held = conn.execute(self.runs.update().where(self.runs.c.run_id == run_id, self.runs.c.state == PENDING)
                                .values(state=PENDING)).rowcount  # the lock: taken first, held to the commit
            earlier = conn.execute(select(self.windows.c.state).where(self.windows.c.run_id == run_id,
                                                                       self.windows.c.window == window)).scalar()
            if earlier is not None:  # a retry of this pane: the recorded befores decide the same records again
                rows = conn.execute(select(self.window_releases.c.author, self.window_releases.c.before).where(
                    self.window_releases.c.run_id == run_id, self.window_releases.c.window == window)).all()
                befores = {author: from_pair(before.split("/")) for author, before in rows}
                if set(befores) != set(authors):
                    raise LedgerError(f"window {window} of run {run_id!r} was decided for other authors than this "
                                      "retry holds; the pane's input changed")
                decisions = {a: admit(befores[a], budget, [mass_of(epsilon, n) for n in counts])
                             for a, counts in authors.items()}
                return decisions, befores, False
            if not held:
                return None
            spent = self._spent(conn, sorted(authors))
            seq = int(conn.execute(select(func.coalesce(func.max(self.windows.c.seq), 0))).scalar()) + 1
            decisions, befores, entries = {}, {}, []
            for author in sorted(authors):
                counts = authors[author]
                before = spent.get(author, Fraction(0))
                decided = admit(before, budget, [mass_of(epsilon, n) for n in counts])
                decisions[author], befores[author] = decided, before
                entries.append({"run_id": run_id, "window": window, "author": author, "epsilon": float(epsilon),
                                "tokens": sum(n for n, ok in zip(counts, decided) if ok),
                                "records": sum(decided), "withheld": len(decided) - sum(decided),
                                "before": f"{before.numerator}/{before.denominator}"})
            conn.execute(self.windows.insert().values(
                run_id=run_id, window=window, seq=seq, state=PENDING, reserved_at=_now(), output=output,
                epsilon=float(epsilon), authors=len(entries), tokens=sum(e["tokens"] for e in entries),
                records=sum(e["records"] for e in entries), withheld=sum(e["withheld"] for e in entries)))
            if entries:
                conn.execute(self.window_releases.insert(), entries)
            return decisions, befores, True

    def commit_window(self, run_id: str, window: str) -> bool:
        """The window's files are written: mark it committed. True if it was pending (committing twice changes
        nothing; its mass was counted from its admission either way)."""
        with self.engine.begin() as conn:
            return bool(conn.execute(self.windows.update().where(
                self.windows.c.run_id == run_id, self.windows.c.window == window, self.windows.c.state == PENDING)
                .values(state=COMMITTED, settled_at=_now())).rowcount)

    def windows_of(self, run_id: str) -> List[dict]:
        from sqlalchemy import select

        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(select(self.windows).where(self.windows.c.run_id == run_id)
                                                      .order_by(self.windows.c.seq)).mappings()]

    def settle_streaming(self, run_id: str, epsilon: float, mechanism: str) -> bool:
        """A streaming run has ended: mark it committed with its windows' totals and free the ledger, in one
        transaction taken like a window's (so no window is being decided meanwhile). True if it was pending.
        Windows still pending stay pending and keep counting (``commit_window`` or reconcile settles them)."""
        from sqlalchemy import func, select

        w = self.windows
        with self.engine.begin() as conn:
            if not conn.execute(self.runs.update().where(self.runs.c.run_id == run_id, self.runs.c.state == PENDING)
                                .values(state=PENDING)).rowcount:
                return False
            totals = conn.execute(select(func.count(func.distinct(self.window_releases.c.author)),
                                         func.coalesce(func.sum(self.window_releases.c.tokens), 0),
                                         func.coalesce(func.sum(self.window_releases.c.records), 0),
                                         func.coalesce(func.sum(self.window_releases.c.withheld), 0))
                                  .join(w, (w.c.run_id == self.window_releases.c.run_id)
                                        & (w.c.window == self.window_releases.c.window))
                                  .where(w.c.run_id == run_id, w.c.state != DISCARDED)).first()
            conn.execute(self.runs.update().where(self.runs.c.run_id == run_id).values(
                state=COMMITTED, settled_at=_now(), epsilon=float(epsilon), mechanism=str(mechanism),
                authors=int(totals[0]), tokens=int(totals[1]), records=int(totals[2]), withheld=int(totals[3])))
            conn.execute(self.active.delete().where(self.active.c.run_id == run_id))
            self.last_seq = self._next_seq(conn)
        self._record_commit(run_id)
        return True

    def commit(self, run_id: str, epsilon: float, mechanism: str,
               entries: Iterable[Tuple[str, int, int, int]], reopen: bool = False) -> bool:
        """Record a run's releases, (author hash, tokens, records, withheld) each, in one transaction; True if it
        was recorded now, False if it already was (committing a run twice changes nothing). ``reopen``: a run whose
        reservation was discarded may be committed too (it ran on and released: round 9b, R9b-11)."""
        from sqlalchemy import select

        entries = list(entries)
        with self.engine.begin() as conn:
            state = conn.execute(select(self.runs.c.state).where(self.runs.c.run_id == run_id)
                                 .with_for_update()).scalar()
            if state == COMMITTED:
                return False
            if state != PENDING and not (reopen and state == DISCARDED):
                raise LedgerError(f"run {run_id!r} is not pending in the ledger ({state or 'unknown'}); nothing to commit")
            if entries:
                conn.execute(self.releases.insert(), [
                    {"run_id": run_id, "author": author, "epsilon": float(epsilon), "tokens": int(tokens),
                     "records": int(records), "withheld": int(withheld)}
                    for author, tokens, records, withheld in entries])
            conn.execute(self.runs.update().where(self.runs.c.run_id == run_id).values(
                state=COMMITTED, settled_at=_now(), epsilon=float(epsilon), mechanism=str(mechanism),
                authors=len(entries), tokens=sum(int(e[1]) for e in entries), records=sum(int(e[2]) for e in entries),
                withheld=sum(int(e[3]) for e in entries)))
            conn.execute(self.active.delete().where(self.active.c.run_id == run_id))
            self.last_seq = self._next_seq(conn)
        self._record_commit(run_id)
        return True

    def restore_run(self, run_id: str, epsilon: float, mechanism: str, budget: Optional[float], output: str,
                    data_format: str, entries: Iterable[Tuple[str, int, int, int]]) -> bool:
        """Re-commit a committed run this ledger no longer knows (restored from a backup older than its commit), from
        its release file: the run's row, committed, and its per-author releases as its first commit wrote them, in
        one transaction (round 11b, R11b-4). False, and nothing changed, if the ledger already has the run."""
        from sqlalchemy import select

        entries = list(entries)
        with self.engine.begin() as conn:
            if conn.execute(select(self.runs.c.state).where(self.runs.c.run_id == run_id)).scalar() is not None:
                return False
            now = _now()
            conn.execute(self.runs.insert().values(
                run_id=run_id, state=COMMITTED, reserved_at=now, settled_at=now, epsilon=float(epsilon),
                mechanism=str(mechanism), budget=None if budget is None else float(budget), output=output,
                data_format=data_format, authors=len(entries), tokens=sum(int(e[1]) for e in entries),
                records=sum(int(e[2]) for e in entries), withheld=sum(int(e[3]) for e in entries)))
            if entries:
                conn.execute(self.releases.insert(), [
                    {"run_id": run_id, "author": author, "epsilon": float(epsilon), "tokens": int(tokens),
                     "records": int(records), "withheld": int(withheld)}
                    for author, tokens, records, withheld in entries])
            self.last_seq = self._next_seq(conn)
        self._record_commit(run_id)
        return True

    # --- the rollback check (round 11b, R11b-4; docs/ledger.md, "A ledger restored from a backup") -----------

    def _next_seq(self, conn) -> int:
        """In a commit's transaction: the ledger's commit count, plus one (a ledger older than the count starts
        from its number of committed runs)."""
        from sqlalchemy import func, select

        stored = conn.execute(select(self.meta.c.value).where(self.meta.c.name == COMMIT_SEQ)).scalar()
        if stored is None:
            seq = int(conn.execute(select(func.count()).select_from(self.runs).where(self.runs.c.state == COMMITTED))
                      .scalar())
            conn.execute(self.meta.insert().values(name=COMMIT_SEQ, value=str(seq)))
        else:
            seq = int(stored) + 1
            conn.execute(self.meta.update().where(self.meta.c.name == COMMIT_SEQ).values(value=str(seq)))
        return seq

    def commit_seq(self) -> int:
        """The ledger's commit count (0 before its first counted commit)."""
        from sqlalchemy import select

        with self.engine.connect() as conn:
            stored = conn.execute(select(self.meta.c.value).where(self.meta.c.name == COMMIT_SEQ)).scalar()
        return int(stored) if stored is not None else 0

    @property
    def seq_file(self) -> Optional[str]:
        """The file beside an SQLite ledger that remembers its commits (None for a server database)."""
        return None if self.file is None else os.path.realpath(self.file) + SEQ_SUFFIX  # by the real file (R12-1)

    def recorded_run(self, run_id: str) -> dict:
        """What the file beside the ledger remembers of committed run ``run_id`` ({} when nothing)."""
        return ((self._read_seq_file() or {}).get("runs") or {}).get(run_id) or {}

    def _read_seq_file(self) -> Optional[dict]:
        import json

        path = self.seq_file
        if path is None or not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                found = json.load(handle)
            if not isinstance(found, dict) or not isinstance(found.get("runs"), dict):
                raise ValueError("not a textdp sequence file")
            return found
        except (OSError, ValueError):
            return {"damaged": True}

    def _record_commit(self, run_id: str) -> None:
        """After a commit: the run, with the ledger's new count, added to the file beside an SQLite ledger (written
        whole, then renamed over the old one). A file of another ledger (another identity) is started again. A
        failure to write it is kept in ``seq_error`` (the commit stands; the next commit writes it again)."""
        import json

        path = self.seq_file
        if path is None:
            return
        self.seq_error = None
        try:
            found = self._read_seq_file() or {}
            same = found.get("ledger_id") == self.ledger_id and not found.get("damaged")
            runs = dict(found["runs"]) if same else {}
            run = self.run(run_id) or {}
            runs[run_id] = {"seq": self.last_seq, "output": run.get("output"), "data_format": run.get("data_format")}
            document = {"format": "textdp-ledger-seq/1", "ledger_id": self.ledger_id,
                        "seq": max(self.last_seq, int(found.get("seq") or 0) if same else 0), "runs": runs}
            temporary = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(document, handle)
            os.replace(temporary, path)
        except (OSError, ValueError, TypeError) as exc:
            self.seq_error = f"{type(exc).__name__}"

    def rollback(self) -> Optional[dict]:
        """Whether this ledger went back in time: the file beside it (same ledger identity) remembers committed runs
        the ledger does not hold as committed (an SQLite file copied back from a backup, R11b-4). None when nothing
        is missing (or there is no such file: a server database, a ledger never committed to since this check, a
        file deleted with the restore); else {"seq": the ledger's count, "recorded": the file's, "missing": [{run_id,
        output, data_format, seq}] in commit order}."""
        found = self._read_seq_file()
        if not found or found.get("damaged") or found.get("ledger_id") != self.ledger_id:
            return None
        committed = {run["run_id"] for run in self.runs_list() if run["state"] == COMMITTED}
        missing = [dict(entry, run_id=run_id) for run_id, entry in found["runs"].items()
                   if run_id not in committed and isinstance(entry, dict)]
        if not missing:
            return None
        missing.sort(key=lambda entry: int(entry.get("seq") or 0))
        return {"seq": self.commit_seq(), "recorded": int(found.get("seq") or 0), "missing": missing}

    def rollback_line(self, found: dict, refused: bool = True) -> str:
        """The one line that refuses a run on a ledger that went back in time (``refused``), or warns of it."""
        shown = [release_file_of(entry["output"], entry["run_id"]) if entry.get("output") and not str(
                 entry.get("data_format") or "").startswith("stream:") else
                 f"streaming run {entry['run_id']} (no release file)" for entry in found["missing"][:3]]
        more = len(found["missing"]) - len(shown)
        return (f"--ledger {self.shown!r} went back in time: it holds commit {found['seq']} but {self.seq_file} "
                f"recorded commit {found['recorded']}, and {len(found['missing'])} committed run(s) are missing from it "
                "(restored from a backup older than their commit?), so their authors' releases would not count; "
                f"{'nothing ran' if refused else 'every new run is refused until then'}: re-count them with "
                "`textdp ledger reconcile --ledger L --release <output>-ledger.json` "
                f"({'; '.join(shown)}{f'; and {more} more' if more > 0 else ''}); `textdp ledger status` lists them "
                "(docs/ledger.md, \"A ledger restored from a backup\")")

    def discard(self, run_id: str) -> bool:
        """Free the ledger from a pending run that released nothing; True if it was pending."""
        with self.engine.begin() as conn:
            done = conn.execute(self.runs.update().where(self.runs.c.run_id == run_id, self.runs.c.state == PENDING)
                                .values(state=DISCARDED, settled_at=_now())).rowcount
            conn.execute(self.active.delete().where(self.active.c.run_id == run_id))
        return bool(done)

    # --- each run's bound form (round 10b, R10b-6) -------------------------------------------------------

    def record_form(self, run_id: str, epsilon_d: bool, artifact: Optional[str]) -> None:
        """Record run ``run_id``'s per-word bound form and artifact identity, once (a retry or a second commit keeps
        the first: a run has one mechanism and one artifact)."""
        from sqlalchemy import select
        from sqlalchemy.exc import IntegrityError

        with self.engine.begin() as conn:
            if conn.execute(select(self.forms.c.run_id).where(self.forms.c.run_id == run_id)).first() is not None:
                return
            try:
                with conn.begin_nested():
                    conn.execute(self.forms.insert().values(run_id=run_id, artifact=artifact,
                                                            bound=BOUND_EPSILON_D if epsilon_d else BOUND_GENERAL))
            except IntegrityError:  # another worker of the run recorded it meanwhile
                pass

    def bound_form(self, run_id: str) -> dict:
        """Whether the "B x max_i d(w_i, w_i')" statement holds for every run this ledger counts, derived from the
        ledger: ``{"epsilon_d": True, "runs": n}`` when every run counted (committed or pending, and every run with a
        window not discarded; ``run_id`` itself included) recorded the form BOUND_EPSILON_D on one artifact identity;
        else ``{"epsilon_d": False, "runs": n, "why": one clause}``. A run without a recorded form is unknown."""
        from sqlalchemy import select

        with self.engine.connect() as conn:
            counted = {row[0] for row in conn.execute(select(self.runs.c.run_id).where(
                self.runs.c.state != DISCARDED)).all()}
            counted |= {row[0] for row in conn.execute(select(self.windows.c.run_id).where(
                self.windows.c.state != DISCARDED)).all()}
            counted.add(run_id)
            forms = {row[0]: (row[1], row[2]) for row in conn.execute(
                select(self.forms.c.run_id, self.forms.c.bound, self.forms.c.artifact)).all()}
        found = [forms.get(run) for run in sorted(counted)]
        if any(form is None for form in found):
            why = ("some of the ledger's runs were recorded without their per-word bound form and artifact (by an "
                   "older textdp), so one d cannot be claimed for them")
        elif any(bound != BOUND_EPSILON_D for bound, _ in found):
            why = "some of the ledger's runs used a mechanism whose per-word bound is not epsilon x d(w, w')"
        elif len({artifact for _, artifact in found}) != 1 or found[0][1] in (None, ""):
            why = ("the ledger's runs used different vocabulary artifacts, whose distances d differ, so no one d "
                   "bounds them all")
        else:
            return {"epsilon_d": True, "runs": len(found)}
        return {"epsilon_d": False, "runs": len(found), "why": why}

    def run(self, run_id: str) -> Optional[dict]:
        from sqlalchemy import select

        with self.engine.connect() as conn:
            row = conn.execute(select(self.runs).where(self.runs.c.run_id == run_id)).mappings().first()
        return dict(row) if row else None

    def runs_list(self) -> List[dict]:
        from sqlalchemy import select

        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(select(self.runs).order_by(self.runs.c.reserved_at)).mappings()]

    def pending(self) -> List[dict]:
        return [run for run in self.runs_list() if run["state"] == PENDING]

    def close(self) -> None:
        self.engine.dispose()


def _reason(exc: BaseException) -> str:
    """The driver's first line (e.g. 'file is not a database'), without SQL or bound values."""
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[0][:160]}" if text else type(inner).__name__
