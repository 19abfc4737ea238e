"""The exposure ledger around a privatize run, and the ``textdp ledger`` command (docs/ledger.md).

``LedgerRun`` is the launcher's side of a run with ``--ledger``: it checks the flags, the key and the ledger before
anything starts (one-line refusals, exit 2), reserves the ledger when the job is built (the committed mass of every
author becomes the pipeline's side input), and settles the run when it ends however it ended (``settle``):

* the run wrote ``<output>-ledger.json`` (its per-author releases): committed in one transaction, keyed by run id,
  so a second commit of the same run changes nothing; the ledger section is added to the summaries;
* it wrote no record file: its launcher discards the reservation (a failed run changes nothing); a plain
  ``textdp ledger reconcile`` never discards (the files may have been moved, or the run may still be running):
  the run stays pending until ``reconcile --discard RUN_ID``;
* it wrote records but no ledger file (stopped between the two): the run stays pending, the ledger refuses new
  runs, and ``textdp ledger reconcile`` settles it.

``textdp ledger status`` shows the ledger's runs and the distribution over authors of their cumulative mass
(never an author); ``textdp ledger reconcile [--discard RUN_ID]`` settles pending runs as above.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from typing import List, Optional

from textdp.errors import TextdpError
from textdp.ledger import Ledger, LedgerError, key_fingerprint, load_key, mass_distribution
from textdp.ledger.statements import LEDGER_RAW_FIGURES, ledger_statement
from textdp.ledger.store import COMMITTED, DISCARDED, PENDING, shown_url
from textdp.paths import shown

FIVE_DIGITS = "[0-9]" * 5
# test-only hooks (tests/test_ledger_faults.py): stop the launcher between writing the outputs and the commit
KILL_ENV, HOLD_ENV = "TEXTDP_TEST_LEDGER_KILL", "TEXTDP_TEST_LEDGER_HOLD"




def absolute(output: str) -> str:
    """The output as the ledger stores it: a local prefix made absolute (a reconcile run from another folder
    finds it, round 9b R9b-3), a URL as given."""
    return output if "://" in output else os.path.abspath(output)


def release_path(output: str) -> str:
    from textdp.ledger.store import release_file

    return release_file(output)


def kept_earlier_release(path: str, directory: str) -> Optional[str]:
    """``OutputGuard.keep_on_commit`` for privatize (R12-3): an earlier release's ``<output>-ledger.json`` that a
    successful --overwrite would delete (``path``: where it was set aside; ``directory``: its folder) is kept as
    ``<output>-ledger-<run_id>.json`` beside the new release: it is what re-counts that run after a restore. Any
    other file: None (removed as before)."""
    import re

    from textdp.ledger.store import kept_release_file

    name = os.path.basename(path)
    if not name.endswith("-ledger.json"):
        return None
    found = _read_json(path)
    run_id = found.get("run_id") if isinstance(found, dict) else None
    if not isinstance(run_id, str) or not re.fullmatch(r"[A-Za-z0-9._:+-]{1,200}", run_id):
        return None
    return kept_release_file(os.path.join(directory, name[:-len("-ledger.json")]), run_id)


def _records_pattern(output: str, data_format: str) -> str:
    from transforms.io import OUTPUT_SUFFIX

    return f"{output}-{FIVE_DIGITS}-of-{FIVE_DIGITS}{OUTPUT_SUFFIX[data_format]}"


def _exists(path: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def _any_match(pattern: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    try:
        return any(m.metadata_list for m in FileSystems.match([pattern]))
    except Exception:
        return False


def _read_json(path: str) -> Optional[dict]:
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path) as handle:
            return json.loads(handle.read().decode("utf-8"))
    except Exception:
        return None


def _write_json(path: str, document: dict) -> None:
    from transforms.io import write_json

    write_json(path, document)


STREAM_PREFIX = "stream:"  # a streaming run's data_format in the ledger's runs table: "stream:jsonl"


def is_streaming_run(run: dict) -> bool:
    return str(run.get("data_format") or "").startswith(STREAM_PREFIX)


def settle_streaming_run(ledger: Ledger, run: dict) -> str:
    """A streaming run whose job has ended (or was lost): each pending window whose summary was written (its
    files are out) is committed, the others stay pending and keep counting; then the run is committed and the
    ledger freed. A window decided after this releases nothing (``ledger_closed``)."""
    run_id = run["run_id"]
    settled = 0
    for win in ledger.windows_of(run_id):
        if win["state"] == PENDING and _exists(f"{win['output']}-summary.json"):
            settled += ledger.commit_window(run_id, win["window"])
    ledger.settle_streaming(run_id, run.get("epsilon") or 0.0, str(run.get("mechanism")))
    windows = ledger.windows_of(run_id)
    pending = sum(1 for win in windows if win["state"] == PENDING)
    after = ledger.run(run_id) or {}
    return (f"ledger: streaming run {run_id} committed: {len(windows)} window(s), {after.get('records') or 0} record(s) "
            f"released, {after.get('withheld') or 0} withheld (budget_exhausted)"
            + (f"; {pending} window(s) wrote no summary and stay pending, counted in full (their records may be out)"
               if pending else ""))


def running_holder(output: str) -> Optional[str]:
    """Why the run writing at ``output`` may still be running (its output lock exists and its holder is not provably
    gone), else None. Local outputs only (a gs:// run's lock cannot be asked for its process)."""
    from textdp.outputs import LOCK_SUFFIX, is_remote, lock_holder

    lock = output + LOCK_SUFFIX
    if is_remote(output) or not os.path.lexists(lock):
        return None
    verdict = lock_holder(lock)[0]
    if verdict == "stale":
        return None
    return (f"its output lock {lock} is held by a live process" if verdict == "alive" else
            f"its output lock {lock} exists ({verdict})")


def record_form(ledger: Ledger, run_id: str, section: dict) -> None:
    """Run ``run_id``'s bound form into the ledger, from its section (``epsilon_d_bound``, ``artifact``; a release
    file of an older textdp has no ``artifact``: unknown), before its commit frees the slot (R10b-6)."""
    ledger.record_form(run_id, bool(section.get("epsilon_d_bound")), section.get("artifact"))


def with_ledger_form(ledger: Ledger, run_id: str, section: dict) -> dict:
    """The run's section (its form recorded at its commit, ``record_form``) with ``ledger_form``, whether every run
    the ledger counts has the "B x d" form (``Ledger.bound_form``): what the statement is derived from (R10b-6)."""
    return dict(section, ledger_form=ledger.bound_form(run_id))


def _commit_release(ledger: Ledger, run_id: str, output: str, release: dict, reopen: bool = False,
                    kept: Optional[str] = None) -> str:
    """Commit a run from its release file; ``kept``: the file is a kept copy (``kept_release_file``) of a release
    whose names now hold another run's files: it is stamped there and no summary at ``output`` is touched."""
    section = release["section"]
    record_form(ledger, run_id, section)
    new = ledger.commit(run_id, section["epsilon"], str(section["mechanism"]), release["entries"], reopen=reopen)
    if new:
        stamp_release(output, release, ledger, kept)
    section = with_ledger_form(ledger, run_id, section)
    if kept is None:
        _add_to_summary(f"{output}-summary.json", section, public=False)
    return (f"ledger: run {run_id} {'committed' if new else 'was already committed'}: "
            f"{section['records_released']} record(s) of {section['authors']} author(s) released, "
            f"{section['records_withheld']} withheld (budget_exhausted)")


def stamp_release(output: str, release: dict, ledger: Ledger, path: Optional[str] = None) -> None:
    """After its commit: the release file records the ledger's identity and the commit count its commit made
    (round 11b, R11b-4), so that ``textdp ledger status --release`` can tell a ledger that went back before it, and
    ``reconcile --release`` refuses it for another ledger. Best effort: a file that cannot be rewritten keeps what
    it held (its run id and key still identify it)."""
    try:
        _write_json(path or release_path(output), dict(release, ledger_id=ledger.ledger_id, ledger_seq=ledger.last_seq))
    except Exception:
        pass


def _release_of(ledger: Ledger, run_id: str, output: str) -> Optional[dict]:
    release = _read_json(release_path(output))
    if release is not None and release.get("run_id") == run_id and release.get("key_fingerprint") == ledger.fingerprint:
        return release
    return None


def _kept_release(ledger: Ledger, run_id: str, output: str) -> Optional[str]:
    """Where a failed --overwrite run's files went (R11b-5): the earlier release was put back at ``output``'s names and
    this run's files, its release file included, kept in a ``.textdp-failed-*`` folder beside them. The prefix there
    whose release file is this run's (run id and key), or None. Local outputs only."""
    import glob

    from textdp.outputs import FAILED_FOLDER_PREFIX, is_remote

    if is_remote(output):
        return None
    directory, name = os.path.split(output)
    for folder in sorted(glob.glob(os.path.join(glob.escape(directory), FAILED_FOLDER_PREFIX + "*"))):
        prefix = os.path.join(folder, name)
        if _release_of(ledger, run_id, prefix) is not None:
            return prefix
    return None


def _another_runs_release(output: str, run_id: str) -> Optional[str]:
    """The run id a release file at ``output``'s name holds when it is another run's (the files there are that run's)."""
    found = _read_json(release_path(output))
    other = found.get("run_id") if isinstance(found, dict) else None
    return other if isinstance(other, str) and other != run_id else None


def settle_discarded_run(ledger: Ledger, run: dict) -> Optional[str]:
    """A run whose reservation was discarded (``reconcile --discard``, or an implicit discard of an older textdp)
    but which then finished and wrote its release file: committed now, said loudly (round 9b, R9b-11): its
    authors' masses count again, and may be above the budget (a run admitted meanwhile did not see them)."""
    if is_streaming_run(run) or not run.get("output"):
        return None
    release = _release_of(ledger, run["run_id"], run["output"])
    if release is None:
        return None
    line = _commit_release(ledger, run["run_id"], run["output"], release, reopen=True)
    return (line + "; WARNING: its reservation had been discarded while it ran, so runs admitted after that did not "
            "count these releases: some authors may now be above the budget (`textdp ledger status` shows how many)")


def settle_run(ledger: Ledger, run: dict, launcher: bool = False) -> str:
    """Settle one pending run from what it wrote (see the module docstring); returns what happened, one line.
    ``launcher``: the run's own launcher after its job ended (it knows its run is over and where it wrote): a run
    that wrote no record file is discarded. A plain ``textdp ledger reconcile`` never discards (round 9b, R9b-3,
    R9b-11): a run still running, or whose files are not found, stays pending; discarding is ``--discard RUN_ID``."""
    if is_streaming_run(run):
        return settle_streaming_run(ledger, run)
    run_id, output = run["run_id"], run["output"]
    release = _release_of(ledger, run_id, output)
    if release is not None:
        return _commit_release(ledger, run_id, output, release)
    from textdp.ledger.store import kept_release_file

    copy = _read_json(kept_release_file(output, run_id))  # R12-5: kept by a later --overwrite of its output
    if isinstance(copy, dict) and copy.get("run_id") == run_id and copy.get("key_fingerprint") == ledger.fingerprint:
        return _commit_release(ledger, run_id, output, copy, kept=kept_release_file(output, run_id)) + (
            f" (from {shown(kept_release_file(output, run_id))}: a later --overwrite of {shown(output)} replaced its files)")
    kept = _kept_release(ledger, run_id, output)
    if kept is not None:  # a failed --overwrite run: its files (released to disk, hidden) count where they are
        return _commit_release(ledger, run_id, kept, _release_of(ledger, run_id, kept)) + (
            f" (from {shown(os.path.dirname(kept))}, where the failed --overwrite run's files were kept)")
    other = _another_runs_release(output, run_id)
    if other is not None:  # R11b-5: the files at the names are another release's: never describe them as this run's
        return (f"ledger: run {run_id} stays pending: the files at {shown(output)} are another release's (its ledger "
                f"file names run {other}), and no .textdp-failed-* folder beside them holds this run's ledger file: "
                f"find where its files went, put its ledger file back beside them and run `textdp ledger reconcile` "
                "again; never remove the files at those names for it")
    running = None if launcher else running_holder(output)
    if running is not None:
        return (f"ledger: run {run_id} is still running ({running}): it stays pending, untouched; run `textdp ledger "
                "reconcile` again after it ends")
    if not _any_match(_records_pattern(output, run["data_format"])):
        if launcher:
            ledger.discard(run_id)
            return f"ledger: run {run_id} wrote no records; its reservation was discarded (the ledger is unchanged)"
        return (f"ledger: run {run_id} stays pending: no release file {release_path(output)} and no record file at "
                f"{output} were found (moved, published, or never written): put its release file back there and run "
                f"`textdp ledger reconcile` again; if it released nothing, `textdp ledger reconcile --discard {run_id}` "
                "is the operator's explicit choice")
    return (f"ledger: run {run_id} wrote records at {output} but not its ledger file {release_path(output)}: it stays "
            "pending and the ledger takes no new run until it is settled; remove its record files and run "
            f"`textdp ledger reconcile --discard {run_id}`, or restore the ledger file and run `textdp ledger reconcile`")


def _add_to_summary(path: Optional[str], section: dict, public: bool) -> None:
    """The run's ledger section (public: the budget, the statement and the run's aggregate counts) into a summary."""
    if not path:
        return
    summary = _read_json(path)
    if summary is None:
        return
    if public:  # the budget and the statement: no figure of the raw input (textdp/privacy/summary.py)
        summary["ledger"] = {"author_budget": section["author_budget"], "statement": ledger_statement(section, public=True)}
    else:
        summary["ledger"] = dict(section, state=COMMITTED, statement=ledger_statement(section))
        figures = summary.get("raw_data_figures", {}).get("figures")
        if isinstance(figures, list):  # the ledger's counts come from how much each author wrote
            figures += [f"ledger.{key}" for key in LEDGER_RAW_FIGURES if f"ledger.{key}" not in figures]
    _write_json(path, summary)


def report_line(summary: dict) -> Optional[str]:
    """The console line of a committed run, from its operator summary's ledger section."""
    section = summary.get("ledger")
    if not section:
        return None
    dist = section["cumulative_mass"]
    spread = (f"; this run's {dist['authors']} author(s) now at cumulative epsilon-mass median {dist['median']:g}, max "
              f"{dist['max']:g}" if dist.get("authors") else "")
    if section.get("author_budget") is None:
        return f"ledger: run {section['run_id']} recorded (no --author-budget){spread}"
    return (f"ledger: {section['records_withheld']} record(s) withheld by --author-budget {section['author_budget']:g} "
            f"(error output, budget_exhausted){spread}, {dist.get('at_cap', 0)} at the budget")


class LedgerRun:
    """The ledger of one privatize run (``--ledger``); ``None`` from ``LedgerRun.from_options`` without it."""

    def __init__(self, location: str, key: bytes, budget: Optional[float], run_id: str, user_field: str,
                 create: Optional[bool] = None):
        self.location, self.key, self.run_id = location, key, run_id
        self.user_field = user_field
        self.fingerprint = key_fingerprint(key)
        self.shown = shown_url(location)
        # refuses a corrupt ledger, another schema or key, a missing one without --ledger-create, now
        self.ledger = Ledger(location, self.fingerprint, require_new=create)
        went_back = self.ledger.rollback()  # R11b-4: an SQLite file copied back from a backup
        if went_back is not None:
            self.ledger.close()
            raise LedgerError(self.ledger.rollback_line(went_back))
        self.budget = self.ledger.resolve_budget(budget)  # the ledger's budget (docs/ledger.md)
        self.reserved = False
        self.outcome: Optional[str] = None
        self.output = self.data_format = self.public_summary = None
        self.streaming = False
        self.written = None  # a streaming run's window summaries (reserve_streaming)

    @classmethod
    def from_options(cls, options, oov_policy: str, data_format: str, guard=None) -> Optional["LedgerRun"]:
        """The one check of the ledger flags, batch and --streaming (one-line refusals, before any worker starts),
        then the ledger opened (or created, with --ledger-create). ``guard``: the run's output guard, every output
        and input registered: the ledger may be none of them (checked before the ledger is created)."""
        from apache_beam.options.pipeline_options import StandardOptions

        from pipelines.flags import AmplifierOptions, LedgerOptions, PrivatizeOptions
        from pipelines.jobs import is_local

        opts = options.view_as(LedgerOptions)
        user_field = options.view_as(AmplifierOptions).user_field
        if not opts.ledger:
            for flag, value in (("--author-budget", opts.author_budget), ("--ledger-key-file", opts.ledger_key_file),
                                ("--ledger-run-id", opts.ledger_run_id), ("--ledger-create", opts.ledger_create or None)):
                if value is not None:
                    raise TextdpError(f"{flag} needs --ledger (the database that records each author's releases)")
            return None
        if not user_field:
            raise TextdpError("--ledger needs --user-field: the ledger records releases per author")
        if data_format == "text":
            raise TextdpError("--ledger needs JSONL or Parquet input (plain-text lines have no author field)")
        streaming = bool(options.view_as(StandardOptions).streaming)
        if streaming and "://" not in opts.ledger and not is_local(options):
            raise TextdpError("--ledger with --streaming on a remote runner needs a server database (an SQLAlchemy URL "
                              "such as postgresql+psycopg://...): each window is decided and committed by a worker, "
                              "which cannot reach a SQLite file on this machine")
        if oov_policy == "keep":
            raise TextdpError("--ledger with --oov-policy keep is refused: unknown words released unchanged have no "
                              "epsilon, so no epsilon-mass could bound them; use --oov-policy random or unk")
        budget = opts.author_budget
        if budget is not None and not (budget > 0 and budget < float("inf")):
            raise TextdpError(f"--author-budget must be a finite number > 0, got {budget:g}")
        epsilon = options.view_as(PrivatizeOptions).epsilon
        refuse_budget_below_epsilon(budget, epsilon, "--author-budget")
        if guard is not None:
            guard_ledger(guard, opts.ledger)
            guard_key_file(guard, opts.ledger_key_file)
        run_id = opts.ledger_run_id or f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}"
        if not 1 <= len(run_id) <= 128 or not all(c.isalnum() or c in "-_.:" for c in run_id):
            raise TextdpError("--ledger-run-id must be 1 to 128 letters, digits or -_.:")
        key = load_key(opts.ledger_key_file)
        run = cls(opts.ledger, key, budget, run_id, user_field, create=bool(opts.ledger_create))
        if run.ledger.created:
            print(f"textdp privatize: ledger: created a new ledger at {run.shown} (--ledger-create): every author starts "
                  "at epsilon-mass 0", file=sys.stderr)
        refuse_budget_below_epsilon(run.budget, epsilon, "the ledger's budget")
        if run.ledger.run(run_id) is not None:
            raise LedgerError(f"run id {run_id!r} is already in the ledger; each release needs a new run id")
        return run

    def reserve(self, epsilon: float, mechanism: str, output: str, data_format: str, public_summary: Optional[str]):
        """Take the ledger for this run; returns [(author hash, (numerator, denominator))] of committed masses."""
        from textdp.ledger.budget import as_pair

        self.output, self.data_format, self.public_summary = absolute(output), data_format, public_summary
        spent = self.ledger.reserve(self.run_id, epsilon, mechanism, self.budget, self.output, data_format)
        self.reserved = True
        return sorted((author, as_pair(mass)) for author, mass in spent.items())

    def reserve_streaming(self, epsilon: float, mechanism: str, output: str, data_format: str, written=None):
        """Take the ledger for this streaming run, until ``settle``: its windows are decided and committed by the
        workers (``transforms.ledger.WindowLedger``), each against the ledger as it stands then. ``written``: the
        streaming launcher's ``() -> (the window summaries the run wrote or None, their pattern)``, for ``settle``'s
        line when the ledger is gone."""
        self.output, self.data_format, self.streaming = absolute(output), STREAM_PREFIX + data_format, True
        self.written = written
        self.ledger.reserve(self.run_id, epsilon, mechanism, self.budget, self.output, self.data_format)
        self.reserved = True

    def window_ledger(self):
        """What the workers need to decide and commit each window (no database handle: they open their own)."""
        from transforms.ledger import WindowLedger

        return WindowLedger(self.location, self.key, self.fingerprint, self.budget, self.run_id, self.user_field,
                            self.shown)

    def spent_pairs(self):
        from textdp.ledger.budget import as_pair

        return sorted((author, as_pair(mass)) for author, mass in self.ledger.spent().items())

    def settle(self, stage: str) -> List[str]:
        """``Plan.settle``: after the run however it ended. Never raises; returns the lines to print."""
        if not self.reserved:
            return []
        if os.environ.get(HOLD_ENV):  # test-only: wait here, between the outputs and the commit
            _hold(os.environ[HOLD_ENV])
        if os.environ.get(KILL_ENV) and _exists(release_path(self.output)):  # test-only: killed right here
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            gone = self.ledger.still_here()
            if gone is not None:  # deleted or replaced since the reservation: never committed to another ledger
                self.outcome = (f"ledger: {'streaming ' if self.streaming else ''}run {self.run_id} is counted in no "
                                f"ledger: --ledger {self.shown} is not the ledger this run reserved ({gone}); the run "
                                "stays pending in that ledger and " + (self._streaming_gone() if self.streaming else
                                f"its release file {release_path(self.output)} holds what it released: restore the "
                                "ledger, then run `textdp ledger reconcile`"))
                return [self.outcome]
            run = self.ledger.run(self.run_id)
            if run and run["state"] == PENDING:
                self.outcome = settle_run(self.ledger, run, launcher=True)
            elif run and run["state"] == DISCARDED:  # discarded while it ran (R9b-11): never silent
                self.outcome = settle_discarded_run(self.ledger, run) or (
                    f"ledger: run {self.run_id}'s reservation was discarded while it ran and it wrote no release file "
                    f"{release_path(self.output)}: whatever it released is counted in no ledger")
            elif run and run["state"] == COMMITTED:  # a `textdp ledger reconcile` committed it from its release file
                self.outcome = f"ledger: run {self.run_id} was already committed (by `textdp ledger reconcile`)"
            elif not self.streaming:  # unknown to the ledger it reserved: a backup copied over it while it ran (R11b-4)
                self.outcome = (f"ledger: run {self.run_id} is not in the ledger {self.shown} any more (restored from a "
                                "backup while it ran?): it is counted in no ledger; its release file "
                                f"{release_path(self.output)} holds what it released: re-count it with `textdp ledger "
                                f"reconcile --release {release_path(self.output)}`")
            else:
                self.outcome = None
            if self.outcome and "committed" in self.outcome and not self.streaming:
                section = (_read_json(release_path(self.output)) or {}).get("section")
                if section:
                    _add_to_summary(self.public_summary, with_ledger_form(self.ledger, self.run_id, section), public=True)
        except Exception as exc:  # the database went away after the run: the run stays pending, said in one line
            from textdp.ledger.store import _reason

            held = "" if self.streaming else f"; its release file {release_path(self.output)} holds what it released"
            self.outcome = (f"ledger: run {self.run_id} could not be settled: the ledger {self.shown} cannot be reached "
                            f"now ({getattr(exc, 'reason', '') or _reason(exc)})"
                            f"; it stays pending{held}: run `textdp ledger reconcile` when the ledger is reachable (it "
                            "is not lost: do not restore it from a backup)")
        finally:
            self.ledger.close()
            self.reserved = False  # settled once
        return [self.outcome] if self.outcome else []

    def _streaming_gone(self) -> str:
        """The rest of the ``gone`` line of a streaming run (round 8b R8b-13): a streaming run writes no release file;
        what it released is in its window summaries (each written after its window was decided in the ledger)."""
        summaries, pattern = self.written() if self.written else (None, f"{self.output}-*-summary.json")
        if summaries is None:
            written = f"its window summaries ({pattern}) cannot be read"
        elif summaries:
            written = (f"{len(summaries)} window(s) of it wrote their summary ({pattern}): decided in that ledger, their "
                       "records are out")
        else:
            written = f"no window of it wrote its summary ({pattern}): none is known to have released a record"
        return (f"{written}; a window decided in that ledger without a summary stays pending there, counted in full "
                "(a streaming run writes no release file): restore the ledger, then run `textdp ledger reconcile`, "
                "which commits the windows that wrote their summary")

    def committed(self) -> bool:
        return bool(self.outcome) and " committed" in self.outcome

    def discard_created(self) -> List[str]:
        """``Plan.abandon``: the run was refused before anything ran (a lock, the runner, the build). A ledger this
        run created (--ledger-create) is removed again, so that a refusal leaves no file behind and the same command
        can be given again once fixed (round 8, R8-2); a ledger that existed before is never touched. Never raises."""
        if not self.ledger.created or self.reserved:
            return []
        self.ledger.created = False
        try:
            self.ledger.close()
            if self.ledger.file is not None:
                for name in (self.ledger.file, *(self.ledger.file + s for s in ("-journal", "-wal", "-shm"))):
                    if os.path.lexists(name):
                        os.remove(name)
            else:  # an empty database this run filled with the ledger's tables
                self.ledger.metadata.drop_all(self.ledger.engine)
                self.ledger.close()
        except Exception as exc:
            return [f"ledger: the new ledger {self.shown} this refused run created could not be removed "
                    f"({type(exc).__name__}): remove it before giving --ledger-create again"]
        return [f"ledger: the new ledger {self.shown} was removed again (the run was refused)"]


def refuse_budget_below_epsilon(budget: Optional[float], epsilon: Optional[float], what: str) -> None:
    """A budget below one word's epsilon-mass (epsilon x 1 token) releases no word: refused before the run."""
    from textdp.ledger.budget import exact

    if budget is None or epsilon is None or not epsilon > 0:
        return
    if exact(budget) < exact(epsilon):
        raise TextdpError(f"{what} {budget:g} is below --epsilon {epsilon:g}, the epsilon-mass of one released word: no "
                          "record with a word could be released (docs/ledger.md)")


def guard_ledger(guard, location: str) -> None:
    """The ledger file (an embedded SQLite ledger, and its -journal/-wal/-shm files) against the run's outputs and
    inputs, registered with its output guard: refused in one line before the ledger is opened or created."""
    from textdp.ledger.store import SEQ_SUFFIX, refuse_keyword_dsn, sqlite_file
    from textdp.outputs import (
        LOCK_SUFFIX,
        RUN_RECORD_SUFFIX,
        SYSTEM_PLACES,
        identity,
        pattern_matches,
        real_path,
        refuse_control_characters,
    )

    refuse_keyword_dsn(location)  # R10b-7: a libpq "host=... password=..." string, refused without showing it
    refuse_control_characters("--ledger", location)  # R8-7: no newline or ESC in a name printed on the console
    path = sqlite_file(location)  # refuses an in-memory SQLite URL
    if path is None:
        return
    real = real_path(path)
    shown = shown_url(location)
    names = [real] + [real + suffix for suffix in ("-journal", "-wal", "-shm", SEQ_SUFFIX)]
    place = next((p for p in SYSTEM_PLACES if real == p or real.startswith(p + "/")), None)
    if place is not None:  # /dev/shm is a tmpfs emptied at every reboot: every author's budget would start again
        raise TextdpError(f"--ledger {shown} is under {place}, a system folder (/dev/shm is emptied at every reboot): a "
                          "ledger there could cap nothing across reboots; keep it on a disk that is backed up")
    base = os.path.basename(real)
    if base.endswith(LOCK_SUFFIX) or base.endswith(RUN_RECORD_SUFFIX) or base.endswith(SEQ_SUFFIX) or base.startswith(".textdp-"):
        # textdp's own lock / run-record / hidden-folder names: a run would take the ledger for a stale lock or a
        # run record of its own (and an operator unblocking a directory would delete it) (round 8, R8-2)
        raise TextdpError(f"--ledger {shown}: a name ending in {LOCK_SUFFIX}, {RUN_RECORD_SUFFIX} or {SEQ_SUFFIX} (or "
                          "starting with .textdp-) is one textdp uses for its locks and run records; give the ledger another name")
    for out in guard.outputs:
        if any(out.catches(name) for name in names):
            raise TextdpError(f"--ledger {shown} is one of this run's outputs ({out.what}, {out.flag} {out.label}): "
                              "give the ledger a path of its own")
    held = guard.read_place_holding(real)  # R12-4: the artifact (or the cache) a run reads is never written
    if held is not None:
        raise TextdpError(f"--ledger {shown} is inside {held[1]} ({held[0]}): a run never writes into the folder it "
                          "reads (a cache folder can also be wiped); keep the ledger elsewhere")
    found = identity(path)
    for flag, name in guard.inputs:
        if name in names or (found is not None and identity(name) == found):
            raise TextdpError(f"--ledger {shown} is a file {flag} reads: give the ledger a path of its own")
    for flag, pattern in guard.input_patterns:
        if any(pattern_matches(pattern, name) for name in names):
            raise TextdpError(f"{flag} {pattern} matches --ledger {shown} (or its journal), which this run writes: it "
                              f"would be read as input; narrow {flag} or keep the ledger elsewhere")


def refuse_key_file_input(options, guard) -> None:
    """``guard_key_file`` for the run's --ledger-key-file (batch: called before any input is opened, R10b-3)."""
    from pipelines.flags import LedgerOptions

    guard_key_file(guard, options.view_as(LedgerOptions).ledger_key_file)


def guard_key_file(guard, path: Optional[str]) -> None:
    """The ledger's key file against the run's inputs (batch files, and a streaming watch's patterns): read as input,
    the secret key would be a record (and, with --keep-failed-text, written into an error file). Refused in one line
    before the run, as the ledger itself is (round 10b, R10b-3). The key is never shown, only the path."""
    from textdp.outputs import identity, pattern_matches, real_path

    if not path:
        return
    real = real_path(os.path.abspath(os.path.expanduser(path)))
    found = identity(real)
    for flag, name in guard.inputs:
        if name == real or real_path(name) == real or (found is not None and identity(name) == found):
            raise TextdpError(f"--ledger-key-file {path!r} is a file {flag} reads: the ledger's secret key would be "
                              "read as a record; keep the key outside the input")
    for flag, pattern in guard.input_patterns:
        if pattern_matches(pattern, real):
            raise TextdpError(f"{flag} {pattern} matches --ledger-key-file {path!r}: the ledger's secret key would be "
                              f"read as a record (and could land in an error file); narrow {flag} or keep the key "
                              "elsewhere")


def _hold(path: str) -> None:
    with open(path + ".ready", "w"):
        pass
    deadline = time.time() + 300
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.1)


# --- textdp ledger ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="textdp ledger", description="Show or settle an exposure ledger (docs/ledger.md). Exit codes: 0 done, "
                                          "1 a run stays pending or committed runs are missing from the ledger, "
                                          "2 refused.")
    parser.add_argument("action", choices=("status", "reconcile"),
                        help="status: the ledger's runs and the distribution over authors of their cumulative "
                             "epsilon-mass; reconcile: settle pending runs from what they wrote")
    parser.add_argument("--ledger", required=True, metavar="PATH_OR_URL", help="the ledger, as given to privatize")
    parser.add_argument("--ledger-key-file", "--ledger_key_file", dest="ledger_key_file", default=None,
                        metavar="PATH", help="the ledger's key (default: $TEXTDP_LEDGER_KEY)")
    parser.add_argument("--discard", default=None, metavar="RUN_ID",
                        help="reconcile: discard this pending run's reservation; refused while any of its record "
                             "files exists")
    parser.add_argument("--release", action="extend", nargs="+", default=None, metavar="OUTPUT-ledger.json",
                        help="reconcile: re-commit these runs' release files (a file, several, or a quoted glob), each "
                             "a committed run the ledger no longer holds (restored from a backup older than its "
                             "commit); a run the ledger has is left as it is. status: say whether each is counted")
    parser.add_argument("--json", action="store_true", default=False, help="status as one JSON document")
    return parser


def release_files(given: List[str]) -> tuple:
    """--release as given -> (the files, in order, each once; one line per argument that names none)."""
    import glob

    files, refused = [], []
    for name in given:
        found = sorted(glob.glob(name)) if glob.has_magic(name) else [name]
        if not found:
            refused.append(f"--release {name!r} matches no file")
        files += [path for path in found if path not in files]
    return files, refused


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_release(path: str, ledger: Ledger) -> tuple:
    """A release file ``<output>-ledger.json`` checked for ``ledger`` -> (release, None), or (None, why not: one
    clause, the path quoted, nothing of the file's content): missing, not a release file, damaged (its figures do
    not add up), made with another key, or committed to another ledger (round 11b, R11b-4)."""
    import math

    from transforms.ledger import RELEASE_FORMAT

    if not os.path.isfile(path):
        return None, f"--release {path!r} is not a file"
    release = _read_json(path)
    if not isinstance(release, dict):
        return None, f"--release {path!r} cannot be read as JSON (damaged?): nothing of it was counted"
    if release.get("format") != RELEASE_FORMAT:
        return None, f"--release {path!r} is not a textdp ledger release file (format {RELEASE_FORMAT})"
    if release.get("key_fingerprint") != ledger.fingerprint:
        return None, (f"--release {path!r} was made with another ledger key (its authors' hashes mean nothing in "
                      "this ledger): nothing of it was counted")
    if release.get("ledger_id") not in (None, ledger.ledger_id):
        return None, f"--release {path!r} was committed to another ledger (another identity): nothing of it was counted"
    section, entries, run_id = release.get("section"), release.get("entries"), release.get("run_id")
    ok = (isinstance(run_id, str) and 0 < len(run_id) <= 128 and isinstance(section, dict) and isinstance(entries, list)
          and isinstance(section.get("epsilon"), (int, float)) and not isinstance(section.get("epsilon"), bool)
          and math.isfinite(section["epsilon"]) and section["epsilon"] > 0 and isinstance(section.get("mechanism"), str)
          and all(isinstance(e, list) and len(e) == 4 and isinstance(e[0], str) and len(e[0]) == 64
                  and all(_count(v) for v in e[1:]) for e in entries)
          and len({e[0] for e in entries}) == len(entries))
    if ok:  # its own totals must agree with its entries (a truncated or edited file does not)
        ok = (section.get("authors") == len(entries) and section.get("records_released") == sum(e[2] for e in entries)
              and section.get("tokens_released") == sum(e[1] for e in entries)
              and section.get("records_withheld") == sum(e[3] for e in entries))
    if not ok:
        return None, f"--release {path!r} is damaged (its run, section or entries do not hold together): nothing of it was counted"
    return release, None


def recommit_release(ledger: Ledger, path: str, release: dict) -> str:
    """One release file into the ledger (``reconcile --release``): a run the ledger does not know is re-committed
    as its first commit was (its authors' mass added); a pending or discarded run is settled from it; a committed
    one is left as it is (idempotent). Returns the line to print."""
    from textdp.ledger.store import release_output

    run_id, section = release["run_id"], release["section"]
    output, kept = release_output(path, run_id)  # a kept copy (R12-3) is stamped where it is, its output untouched
    known = ledger.run(run_id)
    if known is not None and known["state"] == COMMITTED:
        return f"ledger: run {run_id} ({path}) is already in the ledger, committed: nothing changed"
    if known is not None and known["state"] == PENDING:
        return _commit_release(ledger, run_id, output, release, kept=kept)
    if known is not None:  # discarded, then found released: committed loudly (R9b-11)
        return (_commit_release(ledger, run_id, output, release, reopen=True, kept=kept) + "; WARNING: its reservation had been "
                "discarded, so runs admitted after that did not count these releases: some authors may now be above the "
                "budget (`textdp ledger status` shows how many)")
    recorded = ledger.recorded_run(run_id)
    record_form(ledger, run_id, section)
    ledger.restore_run(run_id, section["epsilon"], section["mechanism"], section.get("author_budget"),
                       recorded.get("output") or absolute(output), recorded.get("data_format"), release["entries"])
    return (f"ledger: run {run_id} re-committed from {path}: {section['records_released']} record(s) of "
            f"{section['authors']} author(s) released, {section['records_withheld']} withheld; their epsilon-mass counts "
            "again (the ledger had lost the run: restored from a backup older than its commit?)")


def rollback_lines(ledger: Ledger) -> List[str]:
    """``status`` and ``reconcile``: the committed runs the file beside the ledger remembers and the ledger lost."""
    from textdp.ledger.store import release_file_of

    found = ledger.rollback()
    if found is None:
        return []
    return [f"ledger: WARNING: {ledger.rollback_line(found, refused=False)}"] + [
        f"missing: run {entry['run_id']} (commit {entry.get('seq')}), "
        + ("streaming, no release file: its windows cannot be re-counted (docs/ledger.md)"
           if str(entry.get("data_format") or "").startswith(STREAM_PREFIX)
           else f"re-count it with `textdp ledger reconcile --release {release_file_of(entry.get('output') or '', entry['run_id'])}`")
        for entry in found["missing"]]


help_parser = build_parser  # the job's --help (templates/jobs.py derives its parameters from it)


def release_state(ledger: Ledger, path: str) -> str:
    """``status --release``: whether the run of a release file is counted in the ledger (one clause)."""
    release, why = read_release(path, ledger)
    if release is None:
        return f"refused: {why}"
    known = ledger.run(release["run_id"])
    if known is not None:
        return f"run {release['run_id']} is in the ledger ({known['state']})"
    behind = release.get("ledger_seq")
    return (f"NOT in the ledger: run {release['run_id']} is unknown to it"
            + (f" (its commit was the ledger's commit {behind}; the ledger is at {ledger.commit_seq()}: it went back, "
               "restored from a backup?)" if isinstance(behind, int) else "")
            + f": re-count it with `textdp ledger reconcile --release {path}`")


def status(ledger: Ledger) -> dict:
    runs = ledger.runs_list()
    spent = ledger.spent()
    from textdp.ledger.budget import exact

    budgets = {run["budget"] for run in runs if run["state"] == COMMITTED and run["budget"] is not None}
    budget = ledger.budget()  # the ledger's (docs/ledger.md, "The budget is the ledger's")
    dist = mass_distribution(spent.values(), budget)
    if budget is not None:  # a ledger capped only after uncapped or larger-budget runs (before textdp kept its budget)
        dist["above_cap"] = sum(1 for mass in spent.values() if mass > exact(budget))
    return {"ledger": ledger.shown, "runs": {state: sum(1 for r in runs if r["state"] == state)
                                             for state in (COMMITTED, PENDING, DISCARDED)},
            "pending": [r["run_id"] for r in runs if r["state"] == PENDING],
            "cumulative_mass": dist, "author_budget": budget, "smallest_budget": min(budgets) if budgets else None,
            "recent": [{k: r[k] for k in ("run_id", "state", "reserved_at", "epsilon", "mechanism", "budget", "authors",
                                          "records", "withheld")} for r in runs[-10:]]}


def run(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    say = lambda message: print(f"textdp ledger: error: {message}", file=sys.stderr)  # noqa: E731
    try:
        ledger = Ledger(args.ledger, key_fingerprint(load_key(args.ledger_key_file)), create=False)
    except TextdpError as exc:
        say(str(exc))
        return 2
    try:
        if args.discard and args.release:
            say("--discard and --release are two reconciles: give one at a time")
            return 2
        releases, refused = release_files(args.release or [])
        if args.action == "status":
            found = status(ledger)
            went_back = rollback_lines(ledger)
            found["rollback"] = ledger.rollback()
            checked = [release_state(ledger, path) for path in releases]
            if args.json:
                found["releases"] = [{"file": path, "state": state} for path, state in zip(releases, checked)]
                print(json.dumps(found, indent=2))
            else:
                dist = found["cumulative_mass"]
                print(f"ledger: {found['ledger']}")
                print("runs: " + ", ".join(f"{n} {state}" for state, n in found["runs"].items()))
                for run_id in found["pending"]:
                    print(f"pending: {run_id} (settle with `textdp ledger reconcile`)")
                print(f"authors: {dist['authors']}" + ("" if not dist["authors"] else
                      f"; cumulative epsilon-mass min {dist['min']:g}, median {dist['median']:g}, p95 {dist['p95']:g}, "
                      f"max {dist['max']:g}" + (f"; {dist['at_cap'] - dist['above_cap']} at the budget "
                                                 f"{found['author_budget']:g}" if "at_cap" in dist else "")
                      + (f"; {dist['above_cap']} ABOVE it (released before the ledger kept its budget)"
                         if dist.get("above_cap") else "")))
                print("budget: " + (f"{found['author_budget']:g} (the ledger's: every run is capped by it)"
                                    if found["author_budget"] is not None else
                                    "none yet (the first run with --author-budget sets it)"))
                for line in went_back:
                    print(line)
                for path, state in zip(releases, checked):
                    print(f"release {path}: {state}")
            for line in refused:
                say(line)
            lost = bool(went_back) or any(state.startswith("NOT") for state in checked)
            return 2 if refused or any(state.startswith("refused") for state in checked) else 1 if lost else 0
        if args.discard:
            run_ = ledger.run(args.discard)
            if not run_ or run_["state"] != PENDING:
                say(f"run {args.discard!r} is not pending in the ledger ({run_['state'] if run_ else 'unknown'})")
                return 2
            if is_streaming_run(run_):
                say(f"run {args.discard!r} is a streaming run: its windows were counted when each was decided; settle it "
                    "with `textdp ledger reconcile` once its job has stopped")
                return 2
            running = running_holder(run_["output"])
            if running is not None:
                say(f"run {args.discard!r} is still running ({running}): it cannot be discarded; wait for it to end, "
                    "then run `textdp ledger reconcile`")
                return 2
            if _any_match(_records_pattern(run_["output"], run_["data_format"])) or _exists(release_path(run_["output"])):
                say(f"run {args.discard!r} has files at {run_['output']} (records or its ledger file): remove them "
                    "first, or settle it with `textdp ledger reconcile`")
                return 2
            ledger.discard(args.discard)
            print(f"ledger: run {args.discard} discarded (the ledger is unchanged)")
            return 0
        still = 0
        for run_ in ledger.pending():
            line = settle_run(ledger, run_)
            print(line)
            still += "stays pending" in line
        for run_ in ledger.runs_list():  # discarded, then it finished and wrote its release file (R9b-11)
            if run_["state"] == DISCARDED:
                line = settle_discarded_run(ledger, run_)
                if line:
                    print(line)
        if releases and ledger.pending():
            refused.append("--release: another run is pending in the ledger (see above): settle it first, then give "
                           "--release again (nothing of the release files was counted)")
            releases = []
        for path in releases:
            release, why = read_release(path, ledger)
            if release is None:
                refused.append(why)
            else:
                print(recommit_release(ledger, path, release))
        if not ledger.pending():
            print("ledger: no run is pending")
        went_back = rollback_lines(ledger)
        for line in went_back:
            print(line)
        for line in refused:
            say(line)
        return 2 if refused else 1 if still or went_back else 0
    except TextdpError as exc:
        say(str(exc))
        return 2
    finally:
        ledger.close()


if __name__ == "__main__":
    sys.exit(run())
