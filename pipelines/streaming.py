"""``textdp privatize --streaming``: privatize records as they arrive, window by window (docs/streaming.md).

Sources: new files matching ``--input`` (watched with Beam's ``fileio.MatchContinuously``, local or gs://;
``--poll-interval``, bounded by ``--streaming-stop-after``) or a Pub/Sub subscription
(``--input-subscription``, Dataflow). The records go through the batch job's ``Privatize`` transform in fixed
windows (``--window-size``, ``--allowed-lateness``) and each window pane is written to its own files with its
own summary (``transforms/streaming.py``); the Amplifier flags and ``--public-summary`` (a prefix here: one
publishable summary per window pane) apply per window. ``pipelines/privatize.py`` hands over to this module when Beam's
``--streaming`` flag is given; the checks before the run are the batch job's where they apply, plus the
streaming ones here, each a one-line refusal (exit 2).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
from typing import List, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.fields import check_fields_and_artifact, check_run_flags
from pipelines.flags import (
    ArtifactOptions,
    MechanismOptions,
    OovOptions,
    OutputOptions,
    PrivatizeOptions,
    SeedOptions,
    StreamingOptions,
    WorkerResourceOptions,
)
from pipelines.jobs import Plan, is_local
from pipelines.ledger import LedgerRun
from textdp.artifact import gcs
from textdp.errors import TextdpError
from textdp.outputs import OutputGuard, pattern_matches, refuse_public_of_another_release
from textdp.privacy.statements import run_warnings
from transforms.io import OUTPUT_SUFFIX, infer_format, matched_paths
from transforms.privatize import Privatize
from transforms.streaming import WATCH_REASONS, PrivatizeWindows, read_subscription, sample_pane_names, watch_files

SHAPE_FIELD = "__textdp_shape__"  # as the batch job's (pipelines/privatize.py)
FIVE = "[0-9]" * 5
PANE = "-*Z-*Z-p*"  # <output>-<start>-<end>-p<pane>


def is_streaming(options: PipelineOptions) -> bool:
    return bool(options.view_as(StandardOptions).streaming)


def _refuse_batch_only(options: PipelineOptions) -> None:
    """Flags the streaming job does not support (yet): refused in one line, never ignored."""
    opts = options.view_as(PrivatizeOptions)
    unsupported = [("--diagnostics-output", opts.diagnostics_output)]
    for flag, value in unsupported:
        if value not in (None, "", False):
            raise TextdpError(f"{flag} is not supported with --streaming (yet); see docs/streaming.md for what a "
                              "streaming run writes")


# Pub/Sub's resource names (cloud.google.com/pubsub/docs/pubsub-basics, "Resource names"): a subscription ID
# starts with a letter, has 3 to 255 characters, only letters, digits and - . _ ~ % +, and does not start with
# "goog"; a project ID (Resource Manager) is 6 to 30 lowercase letters, digits and hyphens, starting with a letter,
# not ending with a hyphen, optionally after a domain ("example.com:my-project").
_SUBSCRIPTION_ID = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~%+]{2,254}")
_PROJECT_ID = re.compile(r"(?:[a-z0-9][a-z0-9.-]{0,252}:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")


def check_subscription(subscription: str) -> None:
    """A Pub/Sub subscription name as Pub/Sub defines it (projects/PROJECT/subscriptions/NAME, each part by
    Pub/Sub's naming rules), refused in one line naming the rule broken (never quoting the name)."""
    shape = "projects/PROJECT/subscriptions/NAME"
    parts = subscription.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "subscriptions":
        problem = f"it is not of the form {shape} (exactly four parts separated by /)"
    elif not _PROJECT_ID.fullmatch(parts[1]):
        problem = ("PROJECT must be a project ID: 6 to 30 lowercase letters, digits and hyphens, starting with a "
                   "letter and not ending with a hyphen")
    elif not _SUBSCRIPTION_ID.fullmatch(parts[3]):
        problem = ("NAME must have 3 to 255 characters, start with a letter and hold only letters, digits and "
                   "- . _ ~ % +")
    elif parts[3].startswith("goog"):
        problem = "NAME must not start with 'goog' (reserved by Google)"
    else:
        return
    raise TextdpError(f"--input-subscription is not a Pub/Sub subscription name ({shape}): {problem}")


def check(options: PipelineOptions) -> dict:
    """Every check that needs no worker, for a streaming run; returns what building the pipeline needs."""
    opts = options.view_as(PrivatizeOptions)
    out = options.view_as(OutputOptions)
    stream = options.view_as(StreamingOptions)
    if bool(opts.input) == bool(stream.input_subscription):
        raise TextdpError("--streaming reads either --input (a file pattern to watch) or --input-subscription "
                          "(Pub/Sub): give exactly one")
    if not out.output:
        raise TextdpError("--output is required (an output prefix, local or gs://)")
    if opts.epsilon is None:
        raise TextdpError("--epsilon is required (a finite number > 0)")
    _refuse_batch_only(options)
    check_run_flags(options)
    if not 1 <= stream.window_size <= 366 * 86400:
        raise TextdpError(f"--window-size must be a whole number of seconds from 1 to {366 * 86400}, "
                          f"got {stream.window_size}")
    if not 0 <= stream.allowed_lateness <= 366 * 86400:
        raise TextdpError(f"--allowed-lateness must be a whole number of seconds from 0 to {366 * 86400}, "
                          f"got {stream.allowed_lateness}")
    if not 0.01 <= stream.poll_interval <= 86400:  # nan fails both comparisons
        raise TextdpError(f"--poll-interval must be a number of seconds from 0.01 to 86400, got {stream.poll_interval:g}")
    stop = stream.streaming_stop_after
    if stop is not None and not 0 <= stop <= 366 * 86400:
        raise TextdpError(f"--streaming-stop-after must be a number of seconds from 0 to {366 * 86400}, got {stop:g}")
    if opts.input and stop is None and is_local(options):
        raise TextdpError("on the local runner a file watch needs --streaming-stop-after SECONDS (the local runners "
                          "run no unbounded source: the windows are written when the watch stops); on Dataflow or "
                          "Flink it runs until drained (docs/streaming.md)")
    if stream.input_subscription:
        check_subscription(stream.input_subscription)
    if stream.input_subscription and is_local(options):
        raise TextdpError("--input-subscription needs a streaming runner with Pub/Sub (--runner DataflowRunner); "
                          "locally, watch files with --input")
    if stream.input_subscription:
        if stop is not None:
            raise TextdpError("--streaming-stop-after applies to a file watch (--input) only; a Pub/Sub job runs until "
                              "it is drained (docs/streaming.md)")
    data_format = opts.format or (infer_format(opts.input) if opts.input else None)
    if data_format is None:
        raise TextdpError("give --format text or jsonl: the format cannot be inferred "
                          + ("from a Pub/Sub subscription" if stream.input_subscription else
                             f"from the extension of {opts.input!r}"))
    if data_format == "parquet":
        raise TextdpError("--streaming reads text or JSONL (one record per line or message); Parquet is batch only")
    if opts.text_field and data_format == "text":
        raise TextdpError("--text-field applies to JSONL input only")
    text_fields, amplifier, artifact, manifest, spec = check_fields_and_artifact(options, data_format, "JSONL")
    if opts.input:
        gcs.preflight([opts.input], writes=False)
    gcs.preflight([out.output, opts.public_summary or ""], writes=True)
    guard = _check_outputs(options, data_format)
    warnings = []
    found, _ = run_warnings(spec, artifact, manifest)  # epsilon on the artifact's scale; a no-op custom mechanism
    warnings += found
    # last: the key and the ledger (opening a new SQLite ledger creates it, so only once everything else passed)
    ledger = LedgerRun.from_options(options, options.view_as(OovOptions).oov_policy, data_format, guard=guard)
    return {"data_format": data_format, "text_fields": text_fields, "guard": guard, "warnings": warnings,
            "amplifier": amplifier, "ledger": ledger}


def _check_outputs(options: PipelineOptions, data_format: str) -> OutputGuard:
    """The window files, registered with the batch job's output guard (earlier files refused without
    --overwrite, locks held while the job runs), and never matched by the watched --input pattern (the job
    would read its own output back)."""
    opts, out = options.view_as(PrivatizeOptions), options.view_as(OutputOptions)
    guard = OutputGuard("privatize", out.overwrite, FileSystems.exists, matched_paths)
    if opts.input:
        guard.read("--input", matched_paths(opts.input), pattern=opts.input)
        _refuse_watched("--output", opts.input, sample_pane_names(out.output, data_format))
    artifact = options.view_as(ArtifactOptions).artifact
    if not gcs.is_gcs_url(artifact):  # its files are inputs too: no output may be one of them
        from textdp.artifact.locate import resolve_artifact

        guard.read_directory("--artifact", resolve_artifact(artifact))
    prefix = guard.prefix("--output", out.output)
    suffix = OUTPUT_SUFFIX[data_format]
    sample = "-19700101T000000Z-19700101T000100Z-p0"
    guard.sharded("--output", "the window records", prefix, f"{PANE}-{FIVE}-of-{FIVE}", suffix,
                  (f"{sample}-00000-of-00001",), label=out.output)
    for what, part, ext in (("the window error records", "errors", ".jsonl"), ("the window summaries", "summary",
                                                                                  ".json"),
                            ("the window amplification reports", "amplification", ".json")):
        guard.sharded("--output", what, prefix, f"{PANE}-{part}", ext, (f"{sample}-{part}",), label=out.output)
    guard.sharded("--output", "the late records", prefix, "-late-*-errors", ".jsonl",
                  ("-late-20260101T000000000000Z-0123abcd-errors",), label=out.output)
    if opts.public_summary:  # with --streaming a prefix: one publishable summary per window pane
        public = guard.prefix("--public-summary", opts.public_summary)
        guard.sharded("--public-summary", "the window public summaries", public, PANE, ".json", (sample,),
                      label=opts.public_summary)
        if opts.input:
            _refuse_watched("--public-summary", opts.input, [f"{opts.public_summary}{sample}.json"])
        refuse_public_of_another_release(opts.public_summary, matched_paths(f"{public}{PANE}.json"), out.output,
                                         _window_release)
    guard.check()
    return guard


_PANE_FILES = re.compile(r"(-\d{8}T\d{6}Z-\d{8}T\d{6}Z-p\d+)-\*-of-\*[^/]*$")


def _window_release(described: str) -> tuple:
    """A window public summary's ``output`` (``<output>-<start>-<end>-p<pane>-*-of-*.txt``) -> (``<output>``, the
    name of that pane's operator summary, which the release's run record lists)."""
    found = _PANE_FILES.search(described)
    if found is None:
        return described, ""
    prefix = described[:found.start()]
    return prefix, f"{os.path.basename(prefix)}{found.group(1)}-summary.json"


def _refuse_watched(flag: str, pattern: str, names) -> None:
    """A watched --input pattern must match none of the job's own files (the watch would read them back)."""
    for name in names:
        if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(os.path.abspath(name), os.path.abspath(pattern)) \
                or pattern_matches(pattern, name):  # real paths: an --output through a symlinked directory (F6)
            raise TextdpError(f"--input {pattern} would match this job's own output files (such as "
                              f"{os.path.basename(name)}): the watch would read them back; write {flag} "
                              "elsewhere or narrow --input")


def build_pipeline(options: PipelineOptions, progress_dir: Optional[str] = None,
                   checked: Optional[dict] = None) -> beam.Pipeline:
    """The streaming privatize pipeline for ``options``, not yet run (tests and the template inspect or run it).
    With ``--ledger`` the windows decide and commit against the ledger from the workers; the launcher reserves
    the ledger for the run first (``prepare``)."""
    checked = checked or check(options)
    ledger = checked.get("ledger")
    opts = options.view_as(PrivatizeOptions)
    stream = options.view_as(StreamingOptions)
    mech = options.view_as(MechanismOptions)
    oov = options.view_as(OovOptions)
    output = options.view_as(OutputOptions).output
    data_format, text_fields, amplifier = checked["data_format"], checked["text_fields"], checked["amplifier"]
    amplify = amplifier.requested()
    worker = options.view_as(WorkerResourceOptions).worker_config(progress_dir)
    options.view_as(StandardOptions).streaming = True
    privatize = Privatize(
        epsilon=opts.epsilon, mechanism=mech.mechanism, artifact=options.view_as(ArtifactOptions).artifact,
        text_fields=text_fields, oov_policy=oov.oov_policy, unk_token=oov.unk_token,
        seed=options.view_as(SeedOptions).seed, batch_tokens=opts.batch_tokens,
        shape_field=SHAPE_FIELD if amplify else None, keyed=True, worker=worker, log_warnings=False,  # printed by prepare
        **mech.mechanism_kwargs())
    reader_args = (data_format, text_fields, opts.max_record_bytes, opts.keep_failed_text)
    pipeline = beam.Pipeline(options=options)
    if stream.input_subscription:
        items = read_subscription(pipeline, stream.input_subscription, reader_args)
        source = stream.input_subscription
    else:
        items = watch_files(pipeline, opts.input, stream.poll_interval, stream.streaming_stop_after, reader_args,
                            local=is_local(options))
        source = opts.input
    context = {"input_pattern": source, "data_format": data_format, "text_fields": text_fields,
               "max_record_bytes": opts.max_record_bytes, "max_failed_fraction": opts.max_failed_fraction,
               "amplifier_steps": amplifier.steps() if amplify else None, "warnings": checked["warnings"]}
    _ = items | "PrivatizeWindows" >> PrivatizeWindows(
        privatize, output, data_format, stream.window_size, stream.allowed_lateness,
        amplifier=amplifier if amplify else None, shape_field=SHAPE_FIELD if amplify else None, context=context,
        worker=worker, public_prefix=opts.public_summary, keep_failed_text=opts.keep_failed_text,
        ledger=ledger.window_ledger() if ledger is not None else None)
    return pipeline


def prepare(options: PipelineOptions) -> Plan:
    """``run_job``'s entry for ``privatize --streaming``: check everything, then the plan."""
    checked = check(options)
    for warning in checked["warnings"]:
        print(f"textdp privatize: WARNING: {warning}", file=sys.stderr)
    output = options.view_as(OutputOptions).output
    public = options.view_as(PrivatizeOptions).public_summary

    def report() -> List[str]:
        summaries = window_summaries(output)
        late = late_records(output)
        lines = [f"windows: {output}{PANE}-*  (records, -errors.jsonl, -summary.json per window pane)",
                 f"late:    {output}-late-*-errors.jsonl  ({late} late record(s))"]
        if public:
            lines.append(f"public summaries: {public}{PANE}.json  (one per window pane, publishable)")
        if summaries is None:
            return lines + ["WARNING: the window summaries cannot be read from here"]
        totals = {key: sum(s["records"].get(key, 0) for s in summaries) for key in ("in", "out", "failed", "dropped")}
        unreconciled = [s["window"] for s in summaries if not s["records"]["reconciled"]]
        dropped = f", {totals['dropped']} dropped by --subsample" if totals["dropped"] else ""
        lines.append(f"{len(summaries)} window pane(s); records: {totals['in']} in, {totals['out']} out, "
                     f"{totals['failed']} failed{dropped}; {late} late"
                     + (f"; NOT RECONCILED in {len(unreconciled)} pane(s): see their summaries" if unreconciled else ""))
        skipped = watch_skipped_line(summaries)
        if skipped:
            lines.append(skipped)
        if ledger is not None:
            lines.append(ledger_report_line(ledger, summaries))
        return lines + [f"WARNING: {w}" for w in checked["warnings"]]

    ledger = checked["ledger"]

    def build(progress_dir):
        if ledger is not None:  # the reservation: from here on the run holds the ledger, until settled
            opts, mech = options.view_as(PrivatizeOptions), options.view_as(MechanismOptions)
            ledger.reserve_streaming(opts.epsilon, str(mech.mechanism), output, checked["data_format"],
                                     written=lambda: (window_summaries(output), f"{output}{PANE}-summary.json"))
        return build_pipeline(options, progress_dir, checked)

    parent = FileSystems.split(output)[0] if "://" in output else os.path.dirname(os.path.abspath(output))
    return Plan(build=build, report=report, temp_parents=(parent,), progress=None, guard=checked["guard"],
                settle=ledger.settle if ledger is not None else None,
                abandon=ledger.discard_created if ledger is not None else None)


def watch_skipped_line(summaries: list) -> Optional[str]:
    """The console line of the watched files that were not read (``transforms.streaming.WATCH_REASONS``: each
    one error record and one failed item in its window's summary), or None."""
    counts = {reason: sum(s["records"].get("failed_by_reason", {}).get(reason, 0) for s in summaries)
              for reason in WATCH_REASONS}
    counts = {reason: count for reason, count in counts.items() if count}
    if not counts:
        return None
    return (f"files not read: {sum(counts.values())} ("
            + ", ".join(f"{reason} {count}" for reason, count in counts.items())
            + "), each one failed item in its window's errors (docs/streaming.md, which files are read)")


def ledger_report_line(ledger, summaries: list) -> str:
    """The console line of a streaming run's ledger, from its window summaries; the run's settlement first."""
    if not ledger.committed():  # records may be out that the run's settlement did not confirm
        raise TextdpError(ledger.outcome or f"ledger: streaming run {ledger.run_id} was not settled")
    sections = [s["ledger"] for s in summaries if s.get("ledger")]
    decided = [section for section in sections if section.get("state") != "closed"]
    closed = [section for section in sections if section.get("state") == "closed"]
    # R10b-5: a closed window's records were withheld because the run was settled (ledger_closed), not by a budget
    withheld = sum(section["records_withheld"] for section in decided)
    if ledger.budget is not None:
        line = (f"ledger: {withheld} record(s) withheld over {len(decided)} window(s) by --author-budget "
                f"{ledger.budget:g} (error output, budget_exhausted)")
    else:
        line = (f"ledger: {len(decided)} window(s) recorded (no --author-budget: no record was withheld by a "
                "budget)")
    if closed:
        line += (f"; {sum(section['records_withheld'] for section in closed)} record(s) of {len(closed)} window(s) "
                 "decided after the run was settled were not released (error output, ledger_closed)")
    return line


def window_summaries(output: str) -> Optional[list]:
    """Every window pane summary a run at ``output`` wrote, oldest window first (None: cannot be read)."""
    try:
        paths = sorted(matched_paths(f"{output}{PANE}-summary.json"))
        summaries = []
        for path in paths:
            with FileSystems.open(path) as handle:
                summaries.append(json.loads(handle.read().decode("utf-8")))
        return summaries
    except Exception:
        return None


def late_records(output: str) -> int:
    """How many late error records a run at ``output`` wrote."""
    total = 0
    for path in matched_paths(f"{output}-late-*-errors.jsonl"):
        with FileSystems.open(path) as handle:
            total += sum(1 for line in handle.read().splitlines() if line.strip())
    return total


