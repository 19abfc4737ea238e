"""``textdp privatize --streaming``: the same ``Privatize`` transform over unbounded sources, window by window.

    sources -> items ("in", count) / ("r", (source, position, payload)) / ("e", error record), timestamped
            -> CloseLateWindows (keyed by window: a record for a window that has closed is an error record
               ``late``, written to ``<output>-late-*-errors.jsonl`` and counted, never dropped silently)
            -> WindowInto(FixedWindows(--window-size), --allowed-lateness)
            -> Privatize (the batch job's transform, keyed by (source, position))
            -> one GroupByKey per window pane -> WriteWindowPane: the pane's records, error records, summary
               (with an Amplifier flag its amplification report, with --public-summary its publishable
               summary), each in files named after the window and pane.

A window pane is written by one worker, as one shard of the batch shuffle is. The Amplifier's steps run
there on the pane's records (``pane_amplifier``: --subsample, --user-field, --k-threshold, --drop-fields,
with the batch stage's helpers, then --shuffle), and the amplification report is computed from that pane's
records only (the accounting of textdp/privacy/accounting.py, unchanged: a pane too small for the theorem's
condition claims nothing; authors and the k-threshold count within the pane). With --user-field a record
without its author becomes an error record ``missing_author`` before it is privatized. The per-pane
summary is ``textdp.privacy.summary.build_summary``, the batch job's, so its counts reconcile the same way
(in = out + failed + dropped) and its privacy statements are the batch job's for the same
mechanism and settings. A window in which nothing arrived writes nothing (no pane fires for it).

State the job holds (docs/streaming.md, drain and update): ``CloseLateWindows`` keeps one boolean per
window seen and a timer per open window; the panes' GroupByKey holds a window's items until it closes;
the file watch keeps the identity (content digest) of the files already read.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import random
import uuid
from collections import Counter
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.coders import BooleanCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger, window
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Duration, Timestamp

from textdp.privacy import accounting
from textdp.privacy.statements import unbounded_epsilon0_reason
from textdp.privacy.summary import FAILED_PREFIX
from textdp.text.records import check_author, without_fields
from transforms.io import OUTPUT_SUFFIX, ReadFileRecords, create_owner_only, error_record, hidden_match
from transforms.worker import NAMESPACE

LATE = "late"
IN, RECORD, ERROR, STATS = "in", "r", "e", "s"


def window_name(start: Timestamp, end: Timestamp) -> str:
    """``20261128T085000Z-20261128T085100Z``: a window as a file name part (UTC, sortable, no colons)."""
    fmt = "%Y%m%dT%H%M%SZ"
    return (f"{start.to_utc_datetime().strftime(fmt)}-{end.to_utc_datetime().strftime(fmt)}")


def pane_prefix(output: str, win, pane_index: int) -> str:
    """Where a window pane's files go: ``<output>-<start>-<end>-p<pane>``."""
    return f"{output}-{window_name(win.start, win.end)}-p{int(pane_index)}"


def window_start(timestamp: Timestamp, size: int) -> int:
    """The start (microseconds) of the fixed window of ``size`` seconds that holds ``timestamp``."""
    micros = int(timestamp.micros)
    size_us = int(size) * 1_000_000
    return micros - micros % size_us


class ParseMessages(beam.DoFn):
    """``(source, position, bytes)`` messages (Pub/Sub, TestStream) -> items, one record each, parsed and checked
    exactly as a line of a text or JSONL file is (``ReadFileRecords``): a record or an error record, and one
    ("in", 1) for the count of records in."""

    def __init__(self, data_format: str, text_fields: Sequence[str], max_record_bytes: int, keep_failed_text: bool):
        super().__init__()
        if data_format not in ("text", "jsonl"):
            raise ValueError("--streaming reads text or JSONL records")
        self.reader = ReadFileRecords(data_format, text_fields, max_record_bytes, keep_failed_text)

    def process(self, message):
        source, position, data = message
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        parsed = self.reader._line_record(source, position, data.rstrip(b"\r\n"))  # one message, one line
        yield IN, 1
        if isinstance(parsed, beam.pvalue.TaggedOutput):
            yield ERROR, parsed.value
        else:
            yield RECORD, parsed


class ReadFiles(beam.PTransform):
    """Files matched by a watch (``fileio.MatchContinuously``) -> items. Each file is read by ``ReadFileRecords``,
    the batch job's reader, so a file's records, error records and count are the batch job's."""

    def __init__(self, data_format: str, text_fields: Sequence[str], max_record_bytes: int, keep_failed_text: bool,
                 opened: bool = False):
        super().__init__()
        self.reader = ReadFileRecords(data_format, text_fields, max_record_bytes, keep_failed_text)
        self.opened = bool(opened)

    def expand(self, matches):
        from apache_beam.io import fileio

        if not self.opened:  # matched files' metadata; else SnapshotFile already read (the local watch)
            matches = matches | "Open" >> fileio.ReadMatches()
        read = (matches
                | "Parse" >> beam.ParDo(self.reader).with_outputs(ReadFileRecords.ERRORS, ReadFileRecords.COUNTS,
                                                                    main="records"))
        return ((read.records | "Records" >> beam.Map(lambda record: (RECORD, record)),
                 read[ReadFileRecords.ERRORS] | "Errors" >> beam.Map(lambda error: (ERROR, error)),
                 read[ReadFileRecords.COUNTS] | "Counts" >> beam.Map(lambda counted: (IN, counted[1])))
                | "Items" >> beam.Flatten())


def _late_error(item, window_text: str):
    """The error record of an item that arrived after its window closed (a count item: None, nothing to write)."""
    kind, value = item
    if kind == RECORD:
        return error_record(value[0], value[1], LATE, f"arrived after its window {window_text} had closed")
    if kind == ERROR:
        return dict(value, reason=LATE, detail=f"arrived after its window {window_text} had closed "
                                               f"(it had failed: {value.get('reason')})")
    return None


_CLOSED = ReadModifyWriteStateSpec("closed", BooleanCoder())  # module-level: DoFn parameters by default value
_CLOSE = TimerSpec("close", beam.TimeDomain.WATERMARK)
_CLOSED_PARAM = beam.DoFn.StateParam(_CLOSED)
_CLOSE_PARAM = beam.DoFn.TimerParam(_CLOSE)


class CloseLateWindows(beam.DoFn):
    """Keyed by window start: passes an item through while its window is open (the watermark has not passed
    the window's end + the allowed lateness), else sends it to the ``late`` output as an error record.

    This is the rule by which Beam's GroupByKey drops late data, applied one step earlier, so that a late
    record is counted and written instead of disappearing. A timer at end + lateness marks the window
    closed. An item passed through is moved forward in time by the lateness, and the windows downstream are
    offset by it, so each window has exactly one pane, fired when the watermark passes its end + the
    lateness: every piece of every record taken in (its count, its release or error, its token counts) is in
    that pane, whose counts therefore reconcile. State: one boolean per window seen.
    """

    CLOSED = _CLOSED
    CLOSE = _CLOSE
    LATE = LATE

    def __init__(self, window_size: int, allowed_lateness: int):
        super().__init__()
        self.window_size = int(window_size)
        self.allowed_lateness = int(allowed_lateness)
        self._late = Metrics.counter(NAMESPACE, "late_records")

    def process(self, keyed, timestamp=beam.DoFn.TimestampParam, closed=_CLOSED_PARAM, close=_CLOSE_PARAM):
        start, item = keyed
        if closed.read():
            begin = Timestamp(micros=start)
            late = _late_error(item, window_name(begin, begin + Duration(self.window_size)))
            if late is not None:
                self._late.inc()
                yield beam.pvalue.TaggedOutput(self.LATE, late)
            return
        close.set(Timestamp(micros=start) + Duration(self.window_size + self.allowed_lateness))
        # moved forward by the lateness: the window's one pane fires when the watermark passes end + lateness, as
        # this window closes here, so every record taken in is in that pane with its count (never a pane per piece)
        yield window.TimestampedValue(item, timestamp + Duration(self.allowed_lateness))

    @on_timer(_CLOSE)
    def on_close(self, closed=_CLOSED_PARAM):
        closed.write(True)


class WriteLate(beam.DoFn):
    """A batch of late error records -> ``<output>-late-<UTC time>-<random>-errors.jsonl`` (never overwritten).
    With ``private`` (--keep-failed-text: the records may hold raw text) a local file is created 0600 first."""

    def __init__(self, output: str, private: bool = False):
        super().__init__()
        self.output = output
        self.private = bool(private)

    def process(self, keyed):
        from apache_beam.io.filesystems import FileSystems

        records = list(keyed[1])
        if not records:
            return
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        path = f"{self.output}-late-{now}-{uuid.uuid4().hex[:8]}-errors.jsonl"
        if self.private:
            create_owner_only(path)
        with FileSystems.create(path) as handle:
            for record in records:
                handle.write((json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
        yield path


def pane_amplifier(records: Sequence[dict], amplifier, shape_field: str, text_fields: Sequence[str], rng):
    """The batch Amplifier's steps (transforms/shuffle.py ``ShuffleAmplifier``, in its order) on one pane's
    privatized records, in memory: Poisson sub-sampling (``rng``, the OS CSPRNG), the accounting's shapes
    (per author with ``user_field``, else every record its own author), the k-threshold over this pane's
    authors, then the author, dropped and shape fields removed. The shuffle itself is the caller's.

    Returns (stats for ``accounting.amplification_section``, the released records): the same helpers and the
    same stats as the batch stage, computed from this pane's records only.
    """
    from transforms.shuffle import (
        DEFAULT_MARKER,
        author_key,
        record_shape_value,
        released_fingerprint,
        replace_rare_words,
        text_values,
        word_types,
    )

    amp = amplifier
    user_field = amp.user_field or None
    removed = frozenset(amp.drop_fields + ((user_field,) if user_field else ()) + (shape_field,))
    records_in = len(records)
    if amp.subsample is not None and amp.subsample < 1:
        records = [record for record in records if rng.random() < amp.subsample]

    def record_shape(record):  # what is released about a record besides its privatized words (as the batch stage)
        fingerprint = released_fingerprint(record, removed, text_fields)
        value = record_shape_value(record, shape_field)
        layout = hashlib.sha256(f"{fingerprint}/{value['layout']}".encode("utf-8")).hexdigest()[:16]
        return int(value["words"]), layout

    if user_field:
        by_author = {}
        for record in records:
            by_author.setdefault(author_key(record, user_field), []).append(record_shape(record))
        shapes = Counter(tuple(sorted(found)) for found in by_author.values())
    else:
        shapes = Counter((record_shape(record),) for record in records)
    rare, suppressed, types = frozenset(), 0, 0
    if amp.k_threshold is not None:
        def types_of(record):
            return frozenset().union(*map(word_types, text_values(record, text_fields)))

        if user_field:  # each author counts once per word type (the union of the author's records' types)
            type_sets = {}
            for record in records:
                key = author_key(record, user_field)
                type_sets[key] = type_sets.get(key, frozenset()) | types_of(record)
            per_type = Counter(t for found in type_sets.values() for t in found)
        else:
            per_type = Counter(t for record in records for t in types_of(record))
        rare = frozenset(t for t, count in per_type.items() if count < amp.k_threshold)
        types = len(per_type)
        if rare:
            masked = []
            for record in records:
                out = dict(record)
                for field in text_fields:
                    if isinstance(out.get(field), str):
                        out[field], replaced = replace_rare_words(out[field], rare, DEFAULT_MARKER)
                        suppressed += replaced
                masked.append(out)
            records = masked
    released = [without_fields(record, removed) for record in records]  # by normal form (R8-14)
    fields = set().union(*released) if released else set()
    stats = accounting.amplifier_stats(records_in, len(released), list(shapes.items()), sorted(fields), len(rare),
                                       suppressed, sorted(removed), bool(user_field), list(text_fields), shape_field)
    stats["word_types"] = types
    return stats, released


def pane_scope_statement(records: int, shuffled: bool = True, per_author: bool = False, k_threshold=None,
                         subsample=None, ledger: bool = False) -> str:
    """What the amplification report of a window pane covers (derived from the pane's record count and the
    Amplifier steps that ran). ``ledger``: the run has --ledger, whose section is the one cross-window claim
    (round 9b, R9b-6)."""
    text = (f"This report covers one window pane: its {records} record(s) were "
            + ("permuted among themselves and " if shuffled else "")
            + "released in this pane's files, and every figure and claim here is computed from those records only. "
            "Records of other windows and panes are released in their own files and are not part of this claim.")
    if subsample is not None:
        text += (f" Sub-sampling kept each record of this pane independently with probability {subsample:g}, as in "
                 "a batch run.")
    if per_author:
        text += (" Authors (--user-field) are counted within this pane only: an author whose records arrive in "
                 "several windows is released in each of them, and what each window's release costs that author adds "
                 "up (basic composition); " + (
                     "no claim of this amplification report covers an author across windows; the ledger section "
                     "(--ledger) is the exception: it caps each author id's cumulative epsilon-mass across every "
                     "window and run recorded in the ledger." if ledger else
                     "no claim here covers an author across windows."))
    if k_threshold is not None:
        text += (f" The k-threshold counted the distinct {'authors' if per_author else 'records'} of this pane only: "
                 f"a word was kept when at least {int(k_threshold)} of them used it in this window, whatever other "
                 "windows hold.")
    return text


# The batch job's shuffle clause (textdp.privacy.statements.records_statement) and its streaming counterpart: in
# a stream a record's window, and so its files, follow its arrival time; only the pane's records are permuted.
BATCH_SHUFFLE_CLAUSE = ("the records were released in a uniformly random order: each record's output file and "
                        "line are uniform and independent of its input position and author")


def pane_order_statement(shuffled: bool, per_shard: int) -> str:
    """How a window pane's records are ordered in its files (what ``WriteWindowPane`` does)."""
    window_part = ("a record's window, and so which files hold it, is fixed by its arrival time (its position in "
                   "the input stream) and is shown by the file names")
    if not shuffled:  # the batch sentence holds as it is: the output may follow the input order
        return accounting.UNSHUFFLED_ORDER_STATEMENT
    return ("records are output in a uniformly random order within their window pane only: the pane's records are "
            f"permuted uniformly at random (random.SystemRandom) and written in that order, {per_shard:,} per file, "
            "so a record's file and line within the pane are uniform and independent of its position among the "
            f"pane's records; but {window_part}: across windows the output follows the input order")


def pane_records_clause(per_shard: int) -> str:
    return ("the records of this window pane were released in a uniformly random order within the pane (its "
            "records permuted among themselves, " + f"{per_shard:,} per file); a record's window, and so its "
            "files, follows its arrival time (its position in the input stream)")


def streaming_records_statement(statement: str, shuffled: bool, per_shard: int) -> str:
    """The batch records statement (privacy.records) said of a window pane: the shuffle clause replaced."""
    if shuffled and BATCH_SHUFFLE_CLAUSE in statement:
        return statement.replace(BATCH_SHUFFLE_CLAUSE, pane_records_clause(per_shard))
    if shuffled:  # the batch wording changed: say it outright rather than leave a batch claim
        return statement + " In this stream: " + pane_records_clause(per_shard) + "."
    return statement


class WriteWindowPane(beam.DoFn):
    """One window pane's items (after one GroupByKey) -> its files; yields the pane's summary.

    Files (``pane_prefix``): records ``-SSSSS-of-NNNNN<ext>`` (only if any was released), error records
    ``-errors.jsonl`` (only if any failed), the operator summary ``-summary.json`` (always), with the
    Amplifier ``-amplification.json``, and with ``public_prefix`` the publishable summary
    ``<public_prefix>-<start>-<end>-p<pane>.json`` (``public_pane_path``).
    """

    def __init__(self, shared_handle, perturb_config, output: str, data_format: str, amplifier, shape_field,
                 context: dict, worker=None, public_prefix: Optional[str] = None, ledger=None, private_errors=False):
        super().__init__()
        from transforms.perturb import holder_state

        self.private_errors = bool(private_errors)  # --keep-failed-text: the error file is created 0600 first

        self.ledger = ledger  # transforms.ledger.WindowLedger (--ledger), or None

        self.config = perturb_config
        self.output = output
        self.data_format = data_format
        self.amplifier = amplifier
        self.shape_field = shape_field
        self.context = context
        self.public_prefix = public_prefix or None
        self._state = holder_state(shared_handle, perturb_config, worker)
        self._random = None
        self._epsilon0 = None

    def setup(self):
        self._state.setup()
        self._random = random.SystemRandom()
        if self.ledger is not None:
            self.ledger.setup()

    def teardown(self):
        if self.ledger is not None:
            self.ledger.teardown()

    def process(self, keyed, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        from textdp.mechanisms import statement_of
        from textdp.privacy.summary import build_public_summary, build_summary
        from transforms.io import write_json

        counts, records, errors = {}, [], []
        for kind, value in keyed[1]:
            if kind == RECORD:
                records.append(value)
            elif kind == ERROR:
                errors.append(value)
                counts["records_failed"] = counts.get("records_failed", 0) + 1
                key = FAILED_PREFIX + value["reason"]
                counts[key] = counts.get(key, 0) + 1
            elif kind == IN:
                counts["records_in"] = counts.get("records_in", 0) + int(value)
            else:  # STATS: a batch's token counts
                for name in ("tokens", "changed_tokens", "unknown_tokens"):
                    counts[name] = counts.get(name, 0) + int(value.get(name, 0))
        lateness = Duration(self.context["allowed_lateness"])
        win = window.IntervalWindow(win.start - lateness, win.end - lateness)  # the records' own window
        prefix = pane_prefix(self.output, win, pane.index)
        holder = self._state.value
        section = ledger_section = None
        window_id = f"{window_name(win.start, win.end)}-p{int(pane.index)}"
        if self.ledger is not None:  # decided (and recorded, pending) in the ledger before any file is written
            records, withheld, ledger_section = self.ledger.decide(records, window_id, prefix, holder.mechanism,
                                                                   self.shape_field)
            for error in withheld:
                errors.append(error)
                counts["records_failed"] = counts.get("records_failed", 0) + 1
                key = FAILED_PREFIX + error["reason"]
                counts[key] = counts.get(key, 0) + 1
        if self.amplifier is not None:
            privatized = len(records)
            section, records = self._amplify(holder, records, prefix)
            counts["records_dropped"] = privatized - len(records)  # by --subsample (0 without), as the batch job
        counts["records_out"] = len(records)
        suffix = OUTPUT_SUFFIX[self.data_format]
        per_shard = self.amplifier.records_per_shard if self.amplifier is not None else 20_000
        shards = max(1, -(-len(records) // per_shard)) if records else 0
        for index in range(shards):
            self._write_lines(f"{prefix}-{index:05d}-of-{shards:05d}{suffix}",
                              records[index * per_shard:(index + 1) * per_shard])
        if errors:
            errors.sort(key=lambda e: (str(e.get("source")), str(e.get("position"))))
            self._write_lines(f"{prefix}-errors.jsonl", errors, sort_keys=True, private=self.private_errors)
        mechanism = holder.mechanism
        context = dict(self.context)
        warnings = list(context.pop("warnings", None) or []) + (section or {}).get("warnings", [])
        lateness_seconds = context.pop("allowed_lateness")
        window_info = {"start": win.start.to_utc_datetime().isoformat() + "Z",
                       "end": win.end.to_utc_datetime().isoformat() + "Z",
                       "pane": int(pane.index), "timing": _timing(pane),
                       "allowed_lateness_seconds": lateness_seconds,
                       "empty_windows": "a window in which nothing arrived writes no file"}
        common = dict(mechanism_parameters=mechanism.parameters(), mechanism_statement=statement_of(mechanism),
                      artifact=holder.artifact.describe(), oov_policy=self.config.oov_policy,
                      unk_token=self.config.unk_token, seed=self.config.seed, warnings=warnings)
        public_path = public_pane_path(self.public_prefix, win, pane.index) if self.public_prefix else None
        summary = build_summary(
            counts, output=f"{prefix}-*-of-*{suffix}", errors_output=f"{prefix}-errors.jsonl",
            amplification_report=f"{prefix}-amplification.json" if section is not None else None,
            public_summary=public_path, extra={"window": window_info, "streaming": True}, **common, **context)
        if ledger_section is not None:
            from textdp.ledger.statements import LEDGER_RAW_FIGURES, ledger_statement

            summary["ledger"] = dict(ledger_section, statement=ledger_statement(ledger_section))
            figures = summary.get("raw_data_figures", {}).get("figures")
            if isinstance(figures, list):
                figures += [f"ledger.{key}" for key in LEDGER_RAW_FIGURES if f"ledger.{key}" not in figures]
        if self.amplifier is not None:  # the batch shuffle sentence said of this pane (F15)
            privacy = summary.get("privacy", {})
            if isinstance(privacy.get("records"), str):
                privacy["records"] = streaming_records_statement(privacy["records"], self.amplifier.shuffle, per_shard)
        write_json(f"{prefix}-summary.json", summary)
        if public_path:  # the batch job's publishable summary for this pane's release (no raw-input figure)
            public = build_public_summary(
                records_out=summary["records"]["out"], output=summary["output"], data_format=self.data_format,
                text_fields=context["text_fields"], amplifier_steps=context.get("amplifier_steps"),
                amplification=section, **common)
            public["window"] = {"start": window_info["start"], "end": window_info["end"], "pane": int(pane.index),
                                "statement": PUBLIC_WINDOW_STATEMENT}
            if self.amplifier is not None:  # the scope the operator's report has, and the stream's order (F15)
                public["privacy"]["records"] = streaming_records_statement(
                    public["privacy"]["records"], self.amplifier.shuffle, per_shard)
                if section is not None:  # beside the window's start and end: what the claims cover
                    public["window"]["scope"] = section["scope"]
            if ledger_section is not None:  # the budget and the statement: no figure of the raw input
                from textdp.ledger.statements import ledger_statement

                public["ledger"] = {"author_budget": ledger_section["author_budget"],
                                    "statement": ledger_statement(ledger_section, public=True)}
            write_json(public_path, public)
        if self.ledger is not None:  # every file of the pane is written (the summary last): the window is committed
            self.ledger.commit(window_id)
        yield summary

    def _amplify(self, holder, records, prefix):
        """The Amplifier within the pane (``pane_amplifier``: --subsample, --user-field, --k-threshold,
        --drop-fields, with the batch stage's helpers), its accounting from this pane's records, then (with
        --shuffle) a uniform permutation (OS CSPRNG)."""
        from transforms.amplifier import k_threshold_warnings
        from transforms.io import write_json

        amp, shape_field = self.amplifier, self.shape_field
        text_fields = ("text",) if self.data_format == "text" else tuple(self.config.text_fields)
        stats, released = pane_amplifier(records, amp, shape_field, text_fields, self._random)
        if self._epsilon0 is None:
            self._epsilon0 = accounting.mechanism_token_epsilon0(holder.mechanism, holder.artifact.vectors,
                                                                 self.config.oov_policy)
        token_eps0, diameter = self._epsilon0
        section = accounting.amplification_section(
            stats, token_eps0, shuffled=amp.shuffle, delta=amp.delta, subsample_rate=amp.subsample,
            k_threshold=amp.k_threshold, seed_used=self.config.seed is not None, diameter=diameter.to_dict(),
            epsilon0_reason=unbounded_epsilon0_reason(self.config.oov_policy,
                                                      holder.mechanism.privacy_statement().get("coverage")))
        warnings = k_threshold_warnings(amp.k_threshold, stats)
        if warnings:  # into the pane's summaries' warnings too, as the batch job does
            section["warnings"] = warnings
        section["scope"] = pane_scope_statement(len(released), amp.shuffle, stats["per_author"], amp.k_threshold,
                                                amp.subsample, ledger=self.ledger is not None)
        section["order"] = pane_order_statement(amp.shuffle, amp.records_per_shard)
        write_json(f"{prefix}-amplification.json", section)
        if self.data_format == "text":
            released = [record["text"] for record in released]
        if amp.shuffle:
            self._random.shuffle(released)
        return section, released

    def _write_lines(self, path: str, rows, sort_keys: bool = False, private: bool = False) -> None:
        from apache_beam.io.filesystems import FileSystems

        if private:
            create_owner_only(path)

        with FileSystems.create(path) as handle:
            for row in rows:
                line = row if isinstance(row, str) else json.dumps(row, ensure_ascii=False, sort_keys=sort_keys)
                handle.write((line + "\n").encode("utf-8"))


PUBLIC_WINDOW_STATEMENT = (
    "This publishable summary covers one window pane's released records (the files named in 'output'); the "
    "window's start and end are shown by the output's file names. Each window has its own summary.")


def public_pane_path(public_prefix: str, win, pane_index: int) -> str:
    """Where a window pane's publishable summary goes: ``<public_prefix>-<start>-<end>-p<pane>.json``."""
    return f"{pane_prefix(public_prefix, win, pane_index)}.json"


def _timing(pane) -> str:
    from apache_beam.utils.windowed_value import PaneInfoTiming

    return {PaneInfoTiming.EARLY: "early", PaneInfoTiming.ON_TIME: "on_time", PaneInfoTiming.LATE: "late"}.get(
        pane.timing, "unknown")


class PrivatizeWindows(beam.PTransform):
    """Items (see the module docstring), timestamped -> per-window-pane files; returns {'summaries', 'late'}."""

    def __init__(self, privatize, output: str, data_format: str, window_size: int, allowed_lateness: int,
                 amplifier=None, shape_field: Optional[str] = None, context: Optional[dict] = None, worker=None,
                 public_prefix: Optional[str] = None, keep_failed_text: bool = False, ledger=None):
        super().__init__()
        if ledger is not None and (amplifier is None or amplifier.user_field != ledger.user_field or shape_field is None):
            raise ValueError("--ledger needs --user-field (the Amplifier's author field) and the shape field")
        self.ledger = ledger
        if int(window_size) < 1 or int(allowed_lateness) < 0:
            raise ValueError("--window-size must be >= 1 second and --allowed-lateness >= 0")
        if amplifier is not None:  # the batch stage's own checks of the configuration (ValueError naming the flag)
            from transforms.amplifier import Amplify

            Amplify(amplifier, privatize.config, privatize.shared_handle, data_format, privatize.config.text_fields)
        self.public_prefix = public_prefix or None
        self.keep_failed_text = bool(keep_failed_text)
        self.privatize = privatize
        self.output = output
        self.data_format = data_format
        self.window_size = int(window_size)
        self.allowed_lateness = int(allowed_lateness)
        self.amplifier = amplifier
        self.shape_field = shape_field
        self.context = dict(context or {}, allowed_lateness=self.allowed_lateness)
        self.worker = worker

    def expand(self, items):
        size = self.window_size
        gated = (items
                 | "ByWindow" >> beam.Map(lambda item, ts=beam.DoFn.TimestampParam: (window_start(ts, size), item))
                 .with_output_types(beam.typehints.Tuple[int, beam.typehints.Any])  # the state key's coder: VarInt,
                 # deterministic (Beam warns about FastPrimitivesCoder, which is chosen for an untyped key)
                 | "CloseLateWindows" >> beam.ParDo(CloseLateWindows(size, self.allowed_lateness)).with_outputs(
                     LATE, main="items"))
        late = (gated[LATE]
                | "LateGlobal" >> beam.WindowInto(window.GlobalWindows(), trigger=trigger.Repeatedly(
                    trigger.AfterCount(1)), accumulation_mode=trigger.AccumulationMode.DISCARDING)
                | "LateKey" >> beam.Map(lambda record: (None, record))
                | "LateGroup" >> beam.GroupByKey()
                | "WriteLate" >> beam.ParDo(WriteLate(self.output, private=self.keep_failed_text)))
        windowed = gated["items"] | "Window" >> beam.WindowInto(  # offset: see CloseLateWindows
            window.FixedWindows(size, offset=self.allowed_lateness % size), trigger=trigger.AfterWatermark(),
            allowed_lateness=Duration(0), accumulation_mode=trigger.AccumulationMode.DISCARDING)
        user_field = self.amplifier.user_field if self.amplifier is not None else None
        if user_field:  # a record without its author: an error record missing_author, as in the batch job
            windowed = windowed | "Authors" >> beam.Map(_check_author, user_field, self.keep_failed_text)
        if self.ledger is not None:  # each released record must still say where it came from (docs/ledger.md)
            windowed = windowed | "Positions" >> beam.Map(_tag_position)
        kinds = windowed | "Kinds" >> beam.Partition(lambda item, _: 0 if item[0] == RECORD else 1, 2)
        privatized = (kinds[0]
                      | "Keyed" >> beam.Map(lambda item: ((item[1][0], item[1][1]), item[1][2]))
                      | "Privatize" >> self.privatize)
        pane_items = ((kinds[1],
                       privatized.released | "Released" >> beam.Map(lambda record: (RECORD, record)),
                       privatized.errors | "Failed" >> beam.Map(lambda error: (ERROR, error)),
                       privatized.batch_stats | "Stats" >> beam.Map(lambda stats: (STATS, stats)))
                      | "PaneItems" >> beam.Flatten()
                      | "OneKey" >> beam.Map(lambda item: (None, item))
                      | "GroupPane" >> beam.GroupByKey())
        summaries = pane_items | "WritePane" >> beam.ParDo(WriteWindowPane(
            self.privatize.shared_handle, self.privatize.config, self.output, self.data_format, self.amplifier,
            self.shape_field, self.context, self.worker, self.public_prefix, self.ledger,
            private_errors=self.keep_failed_text))
        return {"summaries": summaries, "late": late}


def _tag_position(item):
    """A record item -> the same, its payload carrying its (source, position) (``transforms.ledger.POSITION_FIELD``)."""
    from transforms.ledger import POSITION_FIELD

    if item[0] != RECORD or not isinstance(item[1][2], dict):
        return item
    source, position, payload = item[1]
    return RECORD, (source, position, dict(payload, **{POSITION_FIELD: [source, position]}))


def _check_author(item, user_field: str, keep_text: bool):
    """A record item whose ``user_field`` author is absent or null -> an error item ``missing_author``
    (``textdp.text.records.check_author``, the batch job's ``SplitAuthorless`` rule); other items unchanged."""
    if item[0] != RECORD:
        return item
    source, position, payload = item[1]
    problem = check_author(payload, user_field)
    if problem is None:
        return item
    text = json.dumps(payload, sort_keys=True, default=str) if keep_text else None
    return ERROR, error_record(source, position, *problem, text=text)


def stop_timestamp(seconds: Optional[float]) -> Timestamp:
    """When a file watch stops: ``seconds`` from now, or never (None)."""
    from apache_beam.utils.timestamp import MAX_TIMESTAMP

    return MAX_TIMESTAMP if seconds is None else Timestamp.now() + Duration(float(seconds))


# A watched file's identity (docs/streaming.md, "Which files are read"): its records, not its name or its exact
# bytes: what textdp privatizes of them (file_identity, the batch job's duplicate key). Each outcome other than "read" is one error item
# (counted as one item in and one failed, so the counts reconcile and the console names it), its source the file's
# path, never its text.
DUPLICATE_FILE = "duplicate_file"  # the same records as a file already read (a rename, a copy, a re-send): not read again
FILE_CHANGED = "file_changed_after_read"  # a file read earlier grew or was rewritten in place keeping its start
FILE_UNSETTLED = "file_not_settled"  # still changing (size or time) when the watch stopped: not read
NOT_REGULAR = "not_a_regular_file"  # a pipe, socket, device or directory matched: never opened (R8b-5)
SYMLINK = "symlink"  # a symbolic link matched (or one on its way below the pattern's fixed folder): never followed (R9b-7)
WATCH_REASONS = (DUPLICATE_FILE, FILE_CHANGED, FILE_UNSETTLED, NOT_REGULAR, SYMLINK)
SKIPPED = "skipped"
_BOM = b"\xef\xbb\xbf"


def normalised(content: bytes) -> bytes:
    """A file's content as its records are read (ReadFileRecords): a leading UTF-8 byte order mark dropped, CRLF
    line endings made LF, and one final line ending dropped (a last line is a record with or without it)."""
    if content.startswith(_BOM):
        content = content[len(_BOM):]
    content = content.replace(b"\r\n", b"\n")
    return content[:-1] if content.endswith(b"\n") else content


def not_regular(path: str) -> Optional[str]:
    """Why a matched local path is not read as a file (a FIFO, socket, device or directory: opening a FIFO
    blocks until a writer comes), or None (a regular file, or a remote object). From ``os.stat``: nothing is
    opened."""
    import stat

    from textdp.outputs import is_remote

    if is_remote(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # gone: the open says so
    if stat.S_ISREG(mode):
        return None
    kind = ("a directory" if stat.S_ISDIR(mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    return (f"the watch matched {kind}, not a regular file; it is never opened (a pipe would block the watch): "
            "put each input in a regular file")


SYMLINK_DETAIL = ("the watch matched {kind}; it is never followed (a link dropped into the watched place could make the job "
                  "read and release any file it can read): put each input in the watched place as a regular file")


def symlink_in(path: str, pattern: str = "") -> Optional[str]:
    """Why a matched local path is not read because it is a symbolic link, or a folder on its way below the
    pattern's fixed folder is one (``os.lstat``: nothing is followed or opened); None otherwise, or for a remote
    object. The folders the operator named in the pattern itself (its part before the first glob character) are
    the operator's choice and are not looked at (R9b-7)."""
    import stat

    from textdp.outputs import is_remote, shown

    if is_remote(path):
        return None
    parts = pattern.split("/")
    fixed = "/".join(parts[:next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")),
                                 len(parts) - 1)])
    base = os.path.abspath(fixed) if pattern else os.path.dirname(os.path.abspath(path))
    target = os.path.abspath(path)
    if os.path.commonpath([base, target]) != base:
        base = os.path.dirname(target)
    below = os.path.relpath(target, base).split(os.sep)
    for depth in range(1, len(below) + 1):
        place = os.path.join(base, *below[:depth])
        try:
            mode = os.lstat(place).st_mode
        except OSError:
            return None  # gone: the open says so
        if stat.S_ISLNK(mode):
            kind = "a symbolic link" if depth == len(below) else f"a path through the symbolic link {shown(place)}"
            return SYMLINK_DETAIL.format(kind=kind)
    return None


def open_watched(path: str, pattern: str = ""):
    """A matched file opened for reading, never blocking and never through a symbolic link: a local path that is
    a symlink (or lies below one under the pattern's fixed folder, ``symlink_in``) raises ``WatchedSymlink``; a
    local path is opened O_NONBLOCK | O_NOFOLLOW and checked (``fstat``) to be a regular file on the descriptor it
    reads, so a FIFO or a link put in its place after the check is not waited on or followed. Raises OSError if it
    is gone; ``NotRegularFile`` if it is not a regular file."""
    import stat

    from apache_beam.io.filesystems import FileSystems

    from textdp.outputs import is_remote

    if is_remote(path):
        return FileSystems.open(path, compression_type="uncompressed")
    problem = symlink_in(path, pattern)
    if problem:
        raise WatchedSymlink(problem)
    problem = not_regular(path)
    if problem:
        raise NotRegularFile(problem)
    try:  # O_NOFOLLOW: a symlink put in its place after the check is not followed either (ELOOP)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise WatchedSymlink(symlink_in(path, pattern) or SYMLINK_DETAIL.format(kind="a symbolic link")) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(not_regular(path) or "the watch matched a path that is not a regular file; it is "
                                 "not read: put each input in a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


class NotRegularFile(Exception):
    """A watched path that is not a regular file (its message: ``not_regular``'s, never the file's text)."""


class WatchedSymlink(Exception):
    """A watched path that is a symbolic link, or lies below one (its message: ``symlink_in``'s, never the text of
    the file it points to)."""


def file_identity(path: str, data_format: str, text_fields, data: Optional[bytes] = None) -> str:
    """A watched file's identity (``transforms.io.records_identity``: what textdp privatizes of its records, the
    batch job's duplicate key); ``data``: its bytes, already read, else it is opened without blocking
    (``open_watched``)."""
    import io

    from transforms.io import records_identity

    if data is not None:
        return records_identity(path, io.BytesIO(data), data_format, text_fields)
    with open_watched(path) as handle:
        return records_identity(path, handle if handle.seekable() else io.BytesIO(handle.read()), data_format,
                                text_fields)


def _compressed(path: str) -> bool:
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED


def duplicate_detail(digest: str) -> str:
    """The detail of a ``duplicate_file`` record (the identity's first 12 hex digits, never the file's text)."""
    return (f"the same records (identity {digest[:12]}: what textdp privatizes of each record, as the batch job's "
            "duplicate check compares files) as a file already read in this run; not read again (its records "
            "would be released twice)")


def skipped_file(path: str, reason: str, detail: str) -> dict:
    """The error record of a watched file that is not read (one of ``WATCH_REASONS``)."""
    return error_record(path, 0, reason, detail)


def skipped_items(error: dict):
    """A skipped file -> its items: one in, one failed."""
    return [(IN, 1), (ERROR, error)]


class SnapshotFile:
    """A watched file as it was when the local watch took it (``PollFiles``): its metadata and its bytes, read
    once, so the records read are exactly the content whose digest was checked, even if the file is renamed,
    deleted or rewritten afterwards (read as ``fileio.ReadableFile`` is, by ``ReadFileRecords``)."""

    def __init__(self, metadata, data: bytes):
        self.metadata, self.data = metadata, data

    def open(self, mime_type="application/octet-stream", compression_type=None):
        import io

        return io.BytesIO(self.data)


def watch_state(meta):
    """What the local watch compares to tell that a matched file changed, and when it last changed (seconds):
    for a local path its ``os.lstat`` size, modification time, inode and status-change time (``st_ctime_ns``, which
    a write moves even when the writer then sets the modification time back, as ``touch -d``, ``cp -p`` and
    ``rsync -t --inplace`` do: R9b-10), the later of the two times; for a remote object Beam's size and
    modification time. ``(None, 0)``: the local path is gone."""
    from textdp.outputs import is_remote

    if is_remote(meta.path):
        return (meta.size_in_bytes, meta.last_updated_in_seconds), meta.last_updated_in_seconds
    try:
        found = os.lstat(meta.path)
    except OSError:
        return None, 0
    return ((found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns),
            max(found.st_mtime_ns, found.st_ctime_ns) / 1e9)


class PollFiles(beam.DoFn):
    """The file watch of the local runner: from one impulse, match ``pattern`` every ``interval`` seconds until
    ``stop_after`` seconds have passed, timestamped with the time a file was taken (as ``MatchContinuously``
    does). The local runners run no unbounded source, so there the watch is bounded and the windows are written
    when it stops (docs/streaming.md).

    Which files are read (F5-F7 of the red team): a file is taken once its size, times and inode
    (``watch_state``) have not changed over one poll interval (seen unchanged by two polls, or last changed at
    least one interval ago), so a file still being written is not read half-way; a file rewritten in place keeping
    its size and modification time has a new status-change time, so it is looked at again (R9b-10).
    A file is known by its records: a file whose records read as the same text as a file read before
    (``file_identity``, the batch job's duplicate key: each record's words as the tokenizer looks them up, of a JSONL
    object's text fields; case, punctuation, whitespace, line endings, a byte order mark and the final newline
    aside), under any name, is not read again (a rename, a copy, a re-send through a tool that changes line endings or
    trailing spaces would release its records twice): error item ``duplicate_file``. A name that comes back with new content (deleted and
    re-created, or rewritten) is read. A file read earlier that then grew (its start, as bytes or as records, is
    the content read) is not read again: error item ``file_changed_after_read`` (its first part is out already,
    and reading it again would release that part twice). A match that is not a regular file (a FIFO, socket,
    device or directory) is never opened (``open_watched``): error item ``not_a_regular_file``, once; a symbolic
    link (or a path below one under the pattern's fixed folder) is never followed: error item ``symlink``, once. A hidden
    name (``.name.XXXXXX``, where rsync and scp write a partial copy) is not matched unless the pattern's own
    component starts with ``.`` (``transforms.io.hidden_match``, the shell's rule). When the
    watch stops, files new or changing at its last poll get one more look one interval later: settled, they are
    read; still changing, error item ``file_not_settled``. Main output: the files to read (``SnapshotFile``);
    output ``skipped``: error records."""

    def __init__(self, pattern: str, interval: float, stop_after: float, data_format: str = "text",
                 text_fields: Sequence[str] = ()):
        super().__init__()
        self.pattern, self.interval, self.stop_after = pattern, float(interval), float(stop_after)
        self.data_format, self.text_fields = data_format, tuple(text_fields)

    def process(self, _):
        import time

        # path -> its watch_state seen; path -> (watch_state, size read, sha256 of its bytes, length and sha256 of
        # its normalised content, for growth) taken; file_identity -> the first path read with it
        self._pending, self._taken, self._contents = {}, {}, {}
        self._directories_said = set()  # matched directories already reported (once per path)
        deadline = time.monotonic() + self.stop_after
        while True:
            yield from self._poll(final=False)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(self.interval, left))
        if self._pending:  # the last look: files new or changing at the last poll, one interval later
            time.sleep(self.interval)
            yield from self._poll(final=True)

    def _matched_directories(self, present, found):
        """Directories the pattern matches (a Spark/Hadoop export ``x.jsonl/``): Beam's match lists files only, so
        they are found here by the local glob (the shell's rule, ``**`` across folders), each reported once as error
        item ``not_a_regular_file`` (or ``symlink`` when it is, or lies below, a symbolic link), never opened or
        walked (round 10, R10b-8)."""
        import glob

        from textdp.outputs import is_remote

        if is_remote(self.pattern):  # an object store has no directories to match
            return
        for path in sorted(glob.glob(self.pattern, recursive=True)):
            if path in present or path in self._directories_said or hidden_match(path, self.pattern):
                continue
            if not os.path.isdir(path):
                continue
            problem = symlink_in(path, self.pattern)
            detail = problem or not_regular(path)
            if detail is None:  # gone since the glob: the next poll says what is there
                continue
            self._directories_said.add(path)
            yield beam.pvalue.TaggedOutput(SKIPPED, window.TimestampedValue(skipped_file(
                path, SYMLINK if problem else NOT_REGULAR, detail), found))

    def _poll(self, final: bool):
        """One match of the pattern: the files taken now; with ``final``, the files still not settled too."""
        import time

        from apache_beam.io.filesystems import FileSystems

        found = Timestamp.now()
        matched = sorted((meta for meta in FileSystems.match([self.pattern])[0].metadata_list
                          if not hidden_match(meta.path, self.pattern)), key=lambda m: m.path)
        present = {meta.path for meta in matched}
        yield from self._matched_directories(present, found)
        pending = {path: state for path, state in self._pending.items() if path in present}  # gone: nothing to read
        for meta in matched:
            if final and meta.path not in pending:  # the last look is for the files waiting to settle only
                continue
            state, changed = watch_state(meta)
            if state is None:  # gone since the match: the next match says what is there
                continue
            before = self._taken.get(meta.path)
            if before is not None and before[0] == state:  # unchanged since it was taken
                pending.pop(meta.path, None)
                continue
            settled = time.time() - changed >= self.interval  # unchanged for an interval
            if pending.get(meta.path) != state and not settled:  # new and recent, or changing: look again
                pending[meta.path] = state
                continue
            pending.pop(meta.path, None)
            try:
                with open_watched(meta.path, self.pattern) as handle:
                    data = handle.read()
            except (NotRegularFile, WatchedSymlink) as exc:  # a FIFO, socket, device, directory or link: said once
                self._taken[meta.path] = (state, None, None, 0, None)
                yield beam.pvalue.TaggedOutput(SKIPPED, window.TimestampedValue(skipped_file(
                    meta.path, SYMLINK if isinstance(exc, WatchedSymlink) else NOT_REGULAR, str(exc)), found))
                continue
            except OSError:  # gone between the match and the read: the next match says what is there
                continue
            raw_digest = hashlib.sha256(data).hexdigest()
            text = normalised(data) if not _compressed(meta.path) else None
            text_digest = hashlib.sha256(text).hexdigest() if text is not None else None
            digest = file_identity(meta.path, self.data_format, self.text_fields, data)
            grew = before is not None and before[2] is not None and (
                (0 < before[1] < len(data) and hashlib.sha256(data[:before[1]]).hexdigest() == before[2])
                or (text is not None and 0 < before[3] < len(text) and text[before[3]:before[3] + 1] == b"\n"
                    and hashlib.sha256(text[:before[3]]).hexdigest() == before[4]))  # its records, then more
            self._taken[meta.path] = (state, len(data), raw_digest, len(text or b""), text_digest)
            if grew:
                yield beam.pvalue.TaggedOutput(SKIPPED, window.TimestampedValue(skipped_file(
                    meta.path, FILE_CHANGED, f"the file grew from {before[1]} to {len(data)} bytes after "
                    "it was read; it is not read again (its first part would be released twice): write each file "
                    "whole under a new name"), found))
            elif digest in self._contents:
                yield beam.pvalue.TaggedOutput(SKIPPED, window.TimestampedValue(skipped_file(
                    meta.path, DUPLICATE_FILE, duplicate_detail(digest)), found))
            else:
                self._contents[digest] = meta.path
                yield window.TimestampedValue(SnapshotFile(meta, data), found)
        self._pending = pending
        if final:
            for path in sorted(pending):
                yield beam.pvalue.TaggedOutput(SKIPPED, window.TimestampedValue(skipped_file(
                    path, FILE_UNSETTLED, "the file was still changing when the watch stopped "
                    "(--streaming-stop-after, and one more poll interval); it was not read"), found))


_FIRST_PATH = ReadModifyWriteStateSpec("first_path", beam.coders.StrUtf8Coder())
_FIRST_PATH_PARAM = beam.DoFn.StateParam(_FIRST_PATH)


class DigestFiles(beam.DoFn):
    """The streaming runners' watch, after ``MatchContinuously``: a matched file -> ``(records digest, metadata)``
    (``file_identity``, opened without blocking); a FIFO, socket, device or directory -> output ``skipped``,
    error record ``not_a_regular_file`` (never opened); a symbolic link, or a path below one under ``pattern``'s
    fixed folder (``symlink_in``) -> error record ``symlink`` (never followed); a file gone since the match ->
    nothing."""

    def __init__(self, pattern: str = "", data_format: str = "text", text_fields: Sequence[str] = ()):
        super().__init__()
        self.pattern, self.data_format, self.text_fields = pattern, data_format, tuple(text_fields)

    def process(self, meta):
        try:
            problem = symlink_in(meta.path, self.pattern)
            if problem:
                raise WatchedSymlink(problem)
            yield file_identity(meta.path, self.data_format, self.text_fields), meta
        except NotRegularFile as exc:
            yield beam.pvalue.TaggedOutput(SKIPPED, skipped_file(meta.path, NOT_REGULAR, str(exc)))
        except WatchedSymlink as exc:
            yield beam.pvalue.TaggedOutput(SKIPPED, skipped_file(meta.path, SYMLINK, str(exc)))
        except OSError:
            return


class OncePerContent(beam.DoFn):
    """The streaming runners' half of the same policy (after ``MatchContinuously``, which finds a file again when
    its modification time changes): ``(digest, FileMetadata)`` keyed by content -> the file, the first time its
    content is seen; later files with that content -> output ``skipped``, error record ``duplicate_file``."""

    def process(self, keyed, first=_FIRST_PATH_PARAM):
        digest, meta = keyed
        if first.read() is None:
            first.write(meta.path)
            yield meta
            return
        yield beam.pvalue.TaggedOutput(SKIPPED, skipped_file(
            meta.path, DUPLICATE_FILE, duplicate_detail(digest)))


def watch_files(pipeline, pattern: str, poll_interval: float, stop_after: Optional[float], reader_args: tuple,
                local: bool = False):
    """The file-watch source: files matching ``pattern``, checked every ``poll_interval`` seconds, each content
    read once (``PollFiles``' docstring, docs/streaming.md). ``local``: the bounded watch of the local runner
    (``PollFiles``); else Beam's ``MatchContinuously`` with ``match_updated_files=True`` (a name re-created with
    new content is found again) and ``OncePerContent`` (a content already read, renamed or copied, is not)."""
    from apache_beam.io import fileio

    if local:
        polled = (pipeline | "Start" >> beam.Impulse()
                  | "Watch" >> beam.ParDo(PollFiles(pattern, poll_interval, stop_after, *reader_args[:2])).with_outputs(
                      SKIPPED, main="files"))
    else:
        polled = (pipeline
                  | "Watch" >> fileio.MatchContinuously(
                      pattern, interval=float(poll_interval), has_deduplication=True, match_updated_files=True,
                      start_timestamp=Timestamp.now(), stop_timestamp=stop_timestamp(stop_after))
                  | "NotHidden" >> beam.Filter(lambda meta, glob: not hidden_match(meta.path, glob), pattern)
                  | "Digest" >> beam.ParDo(DigestFiles(pattern, *reader_args[:2])).with_output_types(
                      beam.typehints.Tuple[str, beam.typehints.Any]).with_outputs(SKIPPED, main="digests"))
        once = polled.digests | "OncePerContent" >> beam.ParDo(OncePerContent()).with_output_types(
            beam.typehints.Any).with_outputs(SKIPPED, main="files")
        polled = {"files": once.files, SKIPPED: ((polled[SKIPPED], once[SKIPPED]) | "NotRead" >> beam.Flatten())}
    files = polled.files if local else polled["files"]
    read = files | "ReadFiles" >> ReadFiles(*reader_args, opened=local)
    skipped = polled[SKIPPED] | "Skipped" >> beam.FlatMap(skipped_items)
    return (read, skipped) | "WatchItems" >> beam.Flatten()


def read_subscription(pipeline, subscription: str, reader_args: tuple):
    """The Pub/Sub source (Dataflow): one record per message; its position is the message id."""
    from apache_beam.io.gcp.pubsub import ReadFromPubSub

    return (pipeline
            | "ReadPubSub" >> ReadFromPubSub(subscription=subscription, with_attributes=True)
            | "Messages" >> beam.Map(lambda message: (subscription, message.message_id, message.data))
            | "Parse" >> beam.ParDo(ParseMessages(*reader_args)))


def sample_pane_names(output: str, data_format: str) -> list:
    """Example file names of a pane (for checking that --input would not match the outputs)."""
    start = Timestamp(0)
    prefix = pane_prefix(output, window.IntervalWindow(start, start + Duration(60)), 0)
    return [f"{prefix}-00000-of-00001{OUTPUT_SUFFIX[data_format]}", f"{prefix}-errors.jsonl",
            f"{prefix}-summary.json", f"{prefix}-amplification.json",
            f"{output}-late-20260101T000000000000Z-0123abcd-errors.jsonl"]



