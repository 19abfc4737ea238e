"""``textdp privatize``: privatize a corpus word by word with a registered mechanism or your own (``--mechanism``,
madlib by default), as a Beam pipeline.

Read (text / JSONL / Parquet, local or gs://) -> ``Privatize`` (transforms/privatize.py) -> the LAC
Amplifier if asked (transforms/amplifier.py) -> write in the input's format; failed records go to
``<output>-errors-SSSSS.jsonl`` and the run's counts, parameters and privacy statement to
``<output>-summary.json`` (the operator's) and, with ``--public-summary``, a publishable one; all
written by the pipeline itself so they exist on every runner. Beam's own flags (``--runner``,
``--direct_num_workers``, ``--project``, ...) pass through unchanged, so the same command line
targets the local runner, Dataflow or Flink. Everything that can be checked is checked before the
pipeline starts (``prepare``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import List, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.fields import check_fields_and_artifact, check_run_flags
from pipelines.flags import (
    AmplifierOptions,
    ArtifactOptions,
    MechanismOptions,
    OovOptions,
    OutputOptions,
    PrivatizeOptions,
    SeedOptions,
    StreamingOptions,
    WorkerResourceOptions,
)
from pipelines.jobs import Plan, is_dry_run, run_job
from pipelines.ledger import LedgerRun, kept_earlier_release, refuse_key_file_input, release_path, report_line
from textdp.artifact import gcs
from textdp.errors import TextdpError
from textdp.outputs import OutputGuard, missing_fields, refuse_public_of_another_release, shown
from textdp.privacy.statements import run_warnings
from textdp.privacy.summary import FAILED_PREFIX
from transforms.amplifier import Amplify, SplitAuthorless
from transforms.io import (
    FIELD_SAMPLE_RECORDS,
    OUTPUT_SUFFIX,
    ReadRecords,
    WriteErrors,
    WriteRecords,
    first_record_fields,
    holds_no_record,
    infer_format,
    matched_paths,
    parquet_schema,
    refuse_duplicate_content,
    refuse_skipped_matches,
    refuse_wide_text,
)
from transforms.ledger import BoundContributions, TagPositions, WriteLedgerRelease
from transforms.perturb import WriteSummary
from transforms.privatize import Privatize, SumCounts
from transforms.shard_writer import WriteShuffledShards, temporary_name_part

# the field in which the privatize workers hand each record's word count and layout digest to the
# Amplifier's accounting; it never reaches the output (an input field of that name is overwritten)
SHAPE_FIELD = "__textdp_shape__"
FIVE_DIGITS = "[0-9]" * 5


def output_paths(output: str, data_format: str) -> dict:
    """Where a run writes. The globs match this run's files only: ``news`` never matches ``news-2024-...``."""
    suffix = OUTPUT_SUFFIX[data_format]
    return {
        "output": f"{output}-{FIVE_DIGITS}-of-{FIVE_DIGITS}{suffix}",
        "errors_prefix": f"{output}-errors",
        "errors": f"{output}-errors-{FIVE_DIGITS}.jsonl",
        "summary": f"{output}-summary.json",
        "amplification": f"{output}-amplification.json",
    }


@dataclass
class Checked:
    """What ``check`` found out about a run, for building its pipeline."""

    data_format: str
    text_fields: Tuple[str, ...]
    schema: object
    paths: dict
    inputs: List[str]
    earlier_files: List[str]
    warnings: List[str]
    guard: Optional[OutputGuard] = None  # run_job locks the outputs with it for the run
    ledger: Optional[LedgerRun] = None  # --ledger (docs/ledger.md)
    scale: Optional[dict] = None  # epsilon on the artifact's scale (textdp.privacy.statements.scale_section)


def _matches(pattern: str) -> List[str]:
    return matched_paths(pattern)


def check(options: PipelineOptions) -> Checked:
    """Every check that needs no worker: flags, the artifact, inputs and outputs. Raises TextdpError."""
    opts = options.view_as(PrivatizeOptions)
    out = options.view_as(OutputOptions)
    if not opts.input:
        raise TextdpError("--input is required (a file pattern, local or gs://)")
    if not out.output:
        raise TextdpError("--output is required (an output prefix, local or gs://)")
    if opts.epsilon is None:
        raise TextdpError("--epsilon is required (a finite number > 0)")
    check_run_flags(options)
    data_format = opts.format or infer_format(opts.input)
    if data_format is None:
        raise TextdpError(f"cannot infer the format of {opts.input!r} from its extension; give --format "
                          "(text|jsonl|parquet)")
    if opts.text_field and data_format == "text":
        raise TextdpError("--text-field applies to JSONL and Parquet input only")
    text_fields, amplifier, artifact, manifest, spec = check_fields_and_artifact(options, data_format, "JSONL or Parquet")
    gcs.preflight([opts.input], writes=False)  # gs:// refused in seconds, not after minutes of retries
    gcs.preflight([out.output, opts.public_summary or "", opts.diagnostics_output or ""], writes=True)
    inputs = _matches(opts.input)
    if not inputs:
        raise TextdpError(f"no file matches --input {opts.input!r}")
    refuse_skipped_matches("--input", opts.input)  # a dangling or looping symlink: never skipped silently (F13)
    paths = output_paths(out.output, data_format)
    guard = _check_outputs(options, paths, data_format, inputs)  # before any input is opened: refuses unreadable ones
    refuse_key_file_input(options, guard)  # R10b-3: the ledger's key is never read as input
    read = refuse_duplicate_content("--input", inputs, data_format, text_fields)  # what it read, for the next check
    _refuse_empty_inputs(inputs, data_format, text_fields, read)  # round 7 F2, R10-7
    format_warnings = refuse_wide_text("--input", inputs, data_format, text_fields,  # and JSONL/text against the first lines
                                       duplicates_checked=True)
    schema = parquet_schema(opts.input, text_fields) if data_format == "parquet" else None  # refuses mismatches
    _check_fields(amplifier, data_format, schema, inputs, text_fields)
    warnings = list(format_warnings)
    found, scale = run_warnings(spec, artifact, manifest)  # epsilon on the artifact's scale; a no-op custom mechanism
    warnings += found
    # last: the key and the ledger (opening a new SQLite ledger creates it, so only once everything else passed)
    ledger = LedgerRun.from_options(options, options.view_as(OovOptions).oov_policy, data_format, guard=guard)
    return Checked(data_format, text_fields, schema, paths, inputs, guard.earlier, warnings, guard, ledger, scale)


SHARD_SAMPLES = ("-00000-of-00001", "-00003-of-00012")  # example shard parts, to compare outputs with each other


def _check_outputs(options: PipelineOptions, paths: dict, data_format: str, inputs: List[str]) -> OutputGuard:
    """Every output of the run (records, errors, operator and public summaries, amplification report,
    diagnostics) registered with the one output guard (textdp/outputs.py) and checked against each
    other, the input files and what exists; ``guard.earlier`` lists the files --overwrite removes."""
    opts, out = options.view_as(PrivatizeOptions), options.view_as(OutputOptions)
    guard = OutputGuard("privatize", out.overwrite, FileSystems.exists, _matches)
    guard.read("--input", inputs, pattern=opts.input)
    artifact = options.view_as(ArtifactOptions).artifact
    if not gcs.is_gcs_url(artifact):  # its files are inputs too: no output may be one of them (F6)
        from textdp.artifact.locate import resolve_artifact

        guard.read_directory("--artifact", resolve_artifact(artifact))
    suffix = OUTPUT_SUFFIX[data_format]
    prefix = guard.prefix("--output", out.output, release_of=_release_of)
    shard = f"-{FIVE_DIGITS}-of-{FIVE_DIGITS}"
    shuffled = options.view_as(AmplifierOptions).amplifier_config().shuffle  # its writer's temporary names count
    guard.sharded("--output", "the records", prefix, shard, suffix, SHARD_SAMPLES, (f"{prefix}-*-of-*{suffix}",),
                  label=out.output, temporary=temporary_name_part() if shuffled else "")
    for other in sorted(set(OUTPUT_SUFFIX.values()) - {suffix}):  # an earlier run in another format: its shards
        guard.sharded("--output", f"an earlier run's {other} records", prefix, shard, other, (), label=out.output)
    guard.sharded("--output", "the error records", prefix, f"-errors-{FIVE_DIGITS}", ".jsonl", ("-errors-00000",),
                  (f"{prefix}-errors-*.jsonl",), label=out.output)
    guard.file("--output", "the operator summary", paths["summary"], label=out.output)
    guard.file("--output", "the amplification report", paths["amplification"], label=out.output)
    # always, as the amplification report: the release's own family of names (a --public-summary there, R9-10)
    guard.file("--output", "the ledger release", release_path(out.output), label=out.output)
    guard.keep_on_commit = kept_earlier_release  # R12-3: an earlier ledger release file is kept, never deleted
    if opts.public_summary:
        from textdp.privacy.summary import is_public_summary

        def _is_public_summary(path: str) -> bool:  # --overwrite replaces only an earlier public summary
            try:
                with FileSystems.open(path) as handle:
                    return is_public_summary(handle.read(1 << 24))
            except Exception:
                return False

        if out.overwrite and "://" not in opts.public_summary and os.path.isfile(opts.public_summary):
            refuse_public_of_another_release(opts.public_summary, [opts.public_summary], out.output, _release_of)
        guard.file("--public-summary", "the public summary", opts.public_summary, lock=True,
                   replaceable=_is_public_summary, replaceable_what='an earlier public summary ("publishable": true)',
                   attach_to="--output")  # the run record lists it: the next --overwrite replaces it (round 7 F8)
    if opts.diagnostics_output:
        diagnostics = guard.prefix("--diagnostics-output", opts.diagnostics_output)
        guard.sharded("--diagnostics-output", "the diagnostics", diagnostics, shard, ".jsonl", SHARD_SAMPLES,
                      (f"{diagnostics}-*-of-*.jsonl",))
    guard.check()
    return guard


def _release_of(described: str) -> tuple:
    """A public summary's ``output`` (``<output>-SSSSS-of-NNNNN.<ext>``) -> (``<output>``, the name of that release's
    operator summary, which its run record lists): textdp.outputs.another_release."""
    prefix = described.split(f"-{FIVE_DIGITS}", 1)[0]
    return prefix, os.path.basename(output_paths(prefix, "text")["summary"])


def _refuse_empty_inputs(inputs: List[str], data_format: str, text_fields=(), read=None) -> None:
    """Every matched file holds no record at all (0 bytes, an empty .gz, a 0-row Parquet file; R10-7: only blank
    lines, JSONL objects or Parquet rows whose text fields are all blank, which the reader fails as empty): refused
    before the run (round 7 F2; typically an upstream export that failed). ``read``: what the duplicate check read
    (``refuse_duplicate_content``'s answer), so a file is not read twice; others are read up to their first record
    (``transforms.io.holds_no_record``). Remote or unreadable files let the run go on: a run that read no record then
    exits 1."""
    read = read or {}
    blank = None
    for path in inputs:
        if "://" in path:
            return
        try:
            if data_format == "parquet":
                import pyarrow.parquet as pq

                rows = pq.ParquetFile(path).metadata.num_rows
            else:
                rows = None
        except Exception:  # unreadable or corrupt: the run's own checks and error records say so
            return
        if rows == 0 or (rows is None and os.path.isfile(path) and os.path.getsize(path) == 0):
            continue
        if not holds_no_record(path, data_format, text_fields, read.get(path)):
            return
        blank = blank or path
    how = f"{shown(blank)} holds only blank lines or blank text fields" if blank else f"{shown(inputs[0])} is empty"
    raise TextdpError(f"--input matches {len(inputs)} file(s) and none holds a record (e.g. {how}); "
                      "nothing would be released (with --overwrite, an empty release would replace the earlier one): "
                      "check the input")


def _check_fields(amplifier, data_format: str, schema, inputs: List[str], text_fields=()) -> None:
    """Field names that no record has are refused: a --drop-fields / --user-field typo would release the
    field, a --text-field typo would send every record to the error output. JSONL: refused when none of
    the first objects has the field (a field some records lack is the run's to report, per record)."""
    names = [("--user-field", amplifier.user_field)] if amplifier.user_field else []
    names += [("--drop-fields", name) for name in amplifier.drop_fields]
    if data_format in ("jsonl", "parquet"):  # Parquet: the schema refused absent ones; here their padded twins
        names += [("--text-field", name) for name in text_fields]
    if not names or data_format == "text":
        return _check_field_values(amplifier, data_format, inputs, text_fields)
    if data_format == "parquet":
        known, where = list(schema.names), "the Parquet schema"
    else:
        known, read = first_record_fields(inputs, FIELD_SAMPLE_RECORDS)
        if not read:  # no JSON object to learn the fields from: the run reports the lines as errors
            return
        where = f"the first {read} JSON object(s) of the input"
    for flag, name in names:
        problem = missing_fields(flag, [name], known, where)
        if problem:
            raise TextdpError(problem)
    if data_format == "parquet" and amplifier.user_field:
        _refuse_narrow_float_authors(amplifier.user_field, schema.field(amplifier.user_field).type)
    _check_field_values(amplifier, data_format, inputs, text_fields)


def _refuse_narrow_float_authors(name: str, column_type) -> None:
    """A Parquet --user-field column of 16- or 32-bit floats (or lists/structs holding them) is refused (R11b-1):
    read as Python floats, 16777217 in a FLOAT column is 16777216.0, an exact integer below 2**53 that passes the
    per-record check, so one stored value stands for two ids (one person counted as two authors, a budget exceeded).
    A 32-bit float holds integers exactly only up to 2**24, a 16-bit one up to 2**11."""
    import pyarrow as pa

    def narrow(kind) -> Optional[int]:
        if pa.types.is_float16(kind):
            return 16
        if pa.types.is_float32(kind):
            return 32
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            return narrow(kind.value_type)
        if pa.types.is_struct(kind):
            return next((bits for bits in (narrow(kind.field(i).type) for i in range(kind.num_fields)) if bits), None)
        if pa.types.is_dictionary(kind):
            return narrow(kind.value_type)
        return None

    bits = narrow(column_type)
    if bits:
        exact = "2**24 (16,777,216)" if bits == 32 else "2**11 (2,048)"
        raise TextdpError(f"--user-field {name}: the column holds {bits}-bit floating-point numbers, which are exact "
                          f"integers only up to {exact}: above that one stored value stands for several ids, so one "
                          "person could count as two authors or two as one; write the author ids as int64 or strings "
                          "(docs/lac.md)")


def _check_field_values(amplifier, data_format: str, inputs: List[str], text_fields) -> None:
    """Fields that exist but hold nothing usable (round 7 F10) are refused in one line before the run: a
    --user-field that no sampled JSON object names a usable author in (null, absent, a float that is no safe id),
    and a Parquet --text-field / --user-field null in every row (footer statistics). Never quotes a value."""
    from textdp.text.records import MISSING_AUTHOR, UNSAFE_AUTHOR_ID
    from transforms.io import first_record_authors, parquet_null_columns

    if data_format == "parquet":
        asked = list(text_fields) + ([amplifier.user_field] if amplifier.user_field else [])
        for name in parquet_null_columns(inputs, asked):
            flag = "--user-field" if name == amplifier.user_field else "--text-field"
            raise TextdpError(f"{flag} {name}: the column is null in every row of the input (Parquet row-group "
                              "statistics), so every record would fail; choose the column that holds the "
                              f"{'author ids' if flag == '--user-field' else 'text'}")
        return
    if data_format != "jsonl" or not amplifier.user_field:
        return
    counts = first_record_authors(inputs, amplifier.user_field, FIELD_SAMPLE_RECORDS)
    if counts["read"] and not counts["usable"]:
        raise TextdpError(f"--user-field {amplifier.user_field}: none of the first {counts['read']} JSON object(s) of "
                          f"the input names a usable author ({counts[MISSING_AUTHOR]} null or absent, "
                          f"{counts[UNSAFE_AUTHOR_ID]} a floating-point number that is no exact integer below 2**53); "
                          "every record would fail: choose the field that holds the author ids, written as integers "
                          "or strings (docs/lac.md)")


def _count_records(inputs: List[str], data_format: str) -> Optional[int]:
    """Records in local uncompressed inputs (lines, or Parquet row counts), for the progress line's
    percentage and time left; None when that would mean reading compressed or remote data."""
    total = 0
    for path in inputs:
        if "://" in path or infer_format(path) is None or path.lower().endswith((".gz", ".bz2", ".zst", ".xz",
                                                                                   ".deflate", ".lzma")):
            return None
        if data_format == "parquet":
            import pyarrow.parquet as pq

            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except Exception:
                return None
            continue
        size = os.path.getsize(path)
        if size > (8 << 30):
            return None
        last = b"\n"
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                total += chunk.count(b"\n")
                last = chunk[-1:]
        total += 0 if last == b"\n" else 1
    return total


def build_pipeline(options: PipelineOptions, progress_dir: Optional[str] = None,
                   checked: Optional[Checked] = None, spent: Optional[list] = None) -> beam.Pipeline:
    """The privatize pipeline for ``options``, not yet run (tests and templates inspect or run it). With
    ``--ledger``: ``spent``, the committed masses the launcher reserved (default: read now, not reserved)."""
    from pipelines import streaming

    if streaming.is_streaming(options):  # --streaming: windows over unbounded sources (pipelines/streaming.py)
        return streaming.build_pipeline(options, progress_dir, checked)
    checked = checked or check(options)
    opts = options.view_as(PrivatizeOptions)
    mech = options.view_as(MechanismOptions)
    seed = options.view_as(SeedOptions).seed
    output = options.view_as(OutputOptions).output
    data_format, text_fields, paths = checked.data_format, checked.text_fields, checked.paths
    amplifier = options.view_as(AmplifierOptions).amplifier_config()
    amplify = amplifier.requested()
    oov = options.view_as(OovOptions)
    worker = options.view_as(WorkerResourceOptions).worker_config(progress_dir)
    privatize = Privatize(
        epsilon=opts.epsilon, mechanism=mech.mechanism, artifact=options.view_as(ArtifactOptions).artifact,
        text_fields=text_fields, oov_policy=oov.oov_policy, unk_token=oov.unk_token, seed=seed,
        batch_tokens=opts.batch_tokens, shape_field=SHAPE_FIELD if amplify else None, keyed=True,
        diagnostics=bool(opts.diagnostics_output), worker=worker, redistribute=True, log_warnings=False,  # printed by prepare
        **mech.mechanism_kwargs())
    summary_writer = WriteSummary(privatize.shared_handle, privatize.config, paths["summary"],
                                  public_path=opts.public_summary, worker=worker, context={
        "input_pattern": opts.input, "output": paths["output"], "errors_output": paths["errors"],
        "data_format": data_format, "text_fields": text_fields, "max_record_bytes": opts.max_record_bytes,
        "amplifier_steps": amplifier.steps() if amplify else None, "warnings": checked.warnings,
        "amplification_report": paths["amplification"] if amplify else None,
        "max_failed_fraction": opts.max_failed_fraction, "scale": checked.scale})

    pipeline = beam.Pipeline(options=options)
    read = pipeline | "Read" >> ReadRecords(opts.input, data_format, text_fields, opts.max_record_bytes,
                                            opts.keep_failed_text)
    records, authorless = read["records"], []
    ledger = checked.ledger
    if ledger is not None:  # each released record must still say where it came from (docs/ledger.md)
        records = records | "Positions" >> TagPositions()
    if amplify and amplifier.user_field:  # a record without its author is an error record, not a failed job
        split = records | "Authors" >> SplitAuthorless(amplifier.user_field, opts.keep_failed_text)
        records, authorless = split["records"], [split["errors"]]
    privatized = (records
                  | "Keyed" >> beam.Map(lambda item: ((item[0], item[1]), item[2]))
                  | "Privatize" >> privatize)  # batches, then spreads the batches over the workers
    released, dropped, shards, section = privatized.released, None, None, None
    bounded = []
    if ledger is not None:  # contribution bounding per author, before anything is de-linked or written
        spent = ledger.spent_pairs() if spent is None else spent
        bound = released | "Budget" >> BoundContributions(
            ledger.key, ledger.user_field, SHAPE_FIELD, ledger.budget,
            pipeline | "Spent" >> beam.Create(spent, reshuffle=False), privatize.shared_handle, privatize.config)
        released, bounded = bound["records"], [bound["errors"]]
        (bound["authors"]
         | "LedgerEntries" >> beam.combiners.ToList()
         | "WriteLedger" >> beam.ParDo(WriteLedgerRelease(
             privatize.shared_handle, privatize.config, release_path(output), ledger.run_id, ledger.fingerprint,
             ledger.budget, ledger.shown)))
    if amplify:  # LAC Amplifier (docs/lac.md)
        amplified = released | "Amplifier" >> Amplify(amplifier, privatize.config, privatize.shared_handle,
                                                       data_format, text_fields, paths["amplification"])
        released, dropped, shards, section = (amplified["records"], amplified["dropped"], amplified["shards"],
                                              amplified["section"])
    if shards is not None:  # the shuffled order is kept file by file; Beam's sinks would choose their own
        shards | "Write" >> WriteShuffledShards(output, data_format, OUTPUT_SUFFIX[data_format], checked.schema)
        records_out = (shards | "ShardSizes" >> beam.Map(lambda shard: len(shard[2]))
                       | "CountOut" >> beam.CombineGlobally(sum))
    else:
        released | "Write" >> WriteRecords(output, data_format, checked.schema)
        records_out = released | "CountOut" >> beam.combiners.Count.Globally()
    errors = (read["errors"], privatized.errors, *authorless, *bounded) | "AllErrors" >> beam.Flatten()
    errors | "WriteErrors" >> WriteErrors(paths["errors_prefix"], private=opts.keep_failed_text)  # 0600 (F7)
    parts = (
        read["counts"] | "RecordsIn" >> beam.Map(lambda path_count: {"records_in": path_count[1]}),
        privatized.batch_stats | "TokenStats" >> beam.Map(
            lambda s: {k: s[k] for k in ("tokens", "changed_tokens", "unknown_tokens")}),
        errors | "FailedCounts" >> beam.Map(lambda rec: {"records_failed": 1, FAILED_PREFIX + rec["reason"]: 1}),
        records_out | "RecordsOut" >> beam.Map(lambda n: {"records_out": n}),
    )
    if dropped is not None:
        parts += (dropped | "RecordsDropped" >> beam.Map(lambda n: {"records_dropped": n}),)
    amplification = beam.pvalue.AsList(section) if section is not None else []
    _ = (parts
         | "AllCounts" >> beam.Flatten()
         | "SumCounts" >> beam.CombineGlobally(SumCounts())
         | "WriteSummary" >> beam.ParDo(summary_writer, amplification=amplification))
    if opts.diagnostics_output:
        (privatized.diagnostics
         | "DiagnosticsJson" >> beam.Map(lambda rec: json.dumps(rec, sort_keys=True))
         | "WriteDiagnostics" >> beam.io.WriteToText(opts.diagnostics_output, file_name_suffix=".jsonl"))
    if checked.earlier_files and not is_dry_run(options):  # --overwrite: the earlier run's files go once the job
        # is built (round 4 N12); a dry run submits nothing, so it removes nothing
        checked.guard.remove_earlier(FileSystems.delete)
        checked.earlier_files = []
    return pipeline


def prepare(options: PipelineOptions) -> Plan:
    """``run_job``'s entry: check everything, then the plan (pipeline builder, progress, report)."""
    from pipelines import streaming

    if streaming.is_streaming(options):  # --streaming: windows over unbounded sources (pipelines/streaming.py)
        return streaming.prepare(options)
    options.view_as(StreamingOptions).given_without_streaming()
    checked = check(options)
    opts = options.view_as(PrivatizeOptions)
    output = options.view_as(OutputOptions).output
    amplify = options.view_as(AmplifierOptions).amplifier_config().requested()
    for warning in checked.warnings:
        print(f"textdp privatize: WARNING: {warning}", file=sys.stderr)
    total = _count_records(checked.inputs, checked.data_format)
    paths = checked.paths

    def report() -> List[str]:
        lines = [f"output:  {paths['output']}", f"errors:  {paths['errors']}",
                 f"summary: {paths['summary']}  (the operator's: raw-data figures, not for publication)"]
        if opts.public_summary:
            lines.append(f"public summary: {opts.public_summary}")
        if amplify:
            lines.append(f"amplification: {paths['amplification']}")
        if checked.ledger is not None:
            if not checked.ledger.committed():  # the records are out but the ledger does not count them yet
                raise TextdpError(checked.ledger.outcome or f"ledger: run {checked.ledger.run_id} was not settled")
        summary = _read_summary(paths["summary"])
        if summary is None:  # a summary this machine cannot read (remote, no access): nothing to judge or show
            return lines + [f"WARNING: {w}" for w in checked.warnings] + [
                "WARNING: the summary cannot be read from here, so the failed share was not checked against "
                "--max-failed-fraction; its failure_check section says whether it was exceeded"]
        _refuse_empty_release(summary["records"], paths)
        _refuse_failed_share(summary, paths)
        found = [w for w in summary.get("warnings", []) if w not in checked.warnings]  # found while running
        ledger_line = [report_line(summary)] if checked.ledger is not None and summary.get("ledger") else []
        return lines + [_headline(summary)] + ledger_line + [f"WARNING: {w}" for w in checked.warnings + found]

    parents = tuple(dict.fromkeys(FileSystems.split(path)[0] if "://" in path
                                  else os.path.dirname(os.path.abspath(path))
                                  for path in (output, opts.diagnostics_output) if path))
    def build(progress_dir):
        spent = None
        if checked.ledger is not None:  # the reservation: from here on the run is pending in the ledger
            mech = options.view_as(MechanismOptions)
            spent = checked.ledger.reserve(opts.epsilon, str(mech.mechanism), output, checked.data_format,
                                           opts.public_summary)
        return build_pipeline(options, progress_dir, checked, spent)

    return Plan(build=build, report=report, temp_parents=parents, progress=("records", total, "tokens"),
                guard=checked.guard, settle=checked.ledger.settle if checked.ledger is not None else None,
                abandon=checked.ledger.discard_created if checked.ledger is not None else None)


def _read_summary(summary_path: str) -> Optional[dict]:
    """The run's operator summary, when this machine can read it (local or gs:// access); else None."""
    try:
        with FileSystems.open(summary_path) as handle:
            return json.loads(handle.read().decode("utf-8"))
    except Exception:
        return None


def _refuse_empty_release(records: dict, paths: dict) -> None:
    """A run that read records and released none did not succeed (every record failed, the input was not
    what the flags say, or sub-sampling dropped everything): TextdpError, so that run_job exits 1 in one
    line, never 0."""
    dropped = records.get("dropped", 0)
    if records["in"] == 0:  # no record at all (an input whose emptiness the launcher could not know): round 7 F2
        raise TextdpError(f"no record was read: the input held no record, so nothing was released; the counts are in "
                          f"{paths['summary']}")
    if records["out"] == 0 and records["failed"] > 0:
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(records["failed_by_reason"].items()))
        also = f" and {dropped} dropped by --subsample" if dropped else ""
        raise TextdpError(f"no record was privatized: {records['failed']} of {records['in']} failed ({reasons}){also}; "
                          f"the error records are at {paths['errors']}, the counts in {paths['summary']}")
    if records["out"] == 0 and dropped > 0:
        raise TextdpError(f"no record was released: --subsample dropped all {dropped} of {records['in']}; the counts "
                          f"are in {paths['summary']}")


def _refuse_failed_share(summary: dict, paths: dict) -> None:
    """More records failed than --max-failed-fraction allows (the pipeline judged it: the summary's
    ``failure_check``): TextdpError, so that run_job exits 1 in one line; the outputs stay written."""
    from textdp.privacy.summary import failure_line

    check = summary.get("failure_check")
    if check and check["exceeded"]:
        raise TextdpError(f"{failure_line(summary['records'], check)}; the error records are at {paths['errors']}, "
                          f"the counts in {paths['summary']}")


def _headline(summary: dict) -> str:
    """One line of counts from the summary."""
    records, tokens = summary["records"], summary["tokens"]
    reconciled = "" if records["reconciled"] else "  NOT RECONCILED: see the summary"
    dropped = f", {records['dropped']} dropped by --subsample" if "dropped" in records else ""
    return (f"records: {records['in']} in, {records['out']} out, {records['failed']} failed{dropped}; "
            f"tokens: {tokens['total']} ({tokens['changed_fraction']:.1%} changed, {tokens['unknown']} unknown)"
            f"{reconciled}")


def help_parser():
    from pipelines.jobs import help_parser as job_help

    return job_help("privatize")


def run(argv: Optional[List[str]] = None) -> int:
    return run_job("privatize", argv)


if __name__ == "__main__":
    sys.exit(run())
