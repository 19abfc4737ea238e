"""``textdp privatize``: privatize a corpus word by word with Madlib (or TEM), as a Beam pipeline.

Read (text / JSONL / Parquet, local or gs://) -> Reshuffle -> PerturbTokens in batches -> write in
the input's format; failed records go to ``<output>-errors-*.jsonl`` and the run's counts, parameters
and privacy statement to ``<output>-summary.json``, both written by the pipeline itself so they
exist on every runner. Beam's own flags (``--runner``, ``--direct_num_workers``, ``--project``, ...)
pass through unchanged, so the same command line targets the local runner, Dataflow or Flink.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from textdp.artifact import MANIFEST, default_artifact_path, read_manifest
from textdp.errors import TextdpError
from textdp.neighbours import SECTION as NEIGHBOURS_SECTION
from textdp.mechanisms import MECHANISMS
from textdp.summary import FAILED_PREFIX
from textdp.text_privatizer import OOV_POLICIES
from transforms.io import (FORMATS, OUTPUT_SUFFIX, ReadRecords, WriteErrors, WriteRecords, infer_format,
                           matched_paths, parquet_schema)
from transforms.perturb import PerturbConfig, PerturbTokens, WriteSummary
from pipelines.lac_options import SHAPE_FIELD, AmplifierOptions, amplify_privatized
from pipelines.options import flag_adder, job_options

DEFAULT_MAX_RECORD_BYTES = 1_000_000
DEFAULT_BATCH_RECORDS = 64


class PrivatizeOptions(PipelineOptions):
    """Flags of ``textdp privatize`` (the single source of truth, also for template metadata)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add = flag_adder(parser)
        add("--input", dest="input",
            help="input file pattern, local or gs:// (e.g. 'data/*.jsonl', 'gs://bucket/corpus-*.txt.gz'); required")
        add("--output", dest="output",
            help="output prefix, local or gs://: writes <output>-SSSSS-of-NNNNN.<ext>, <output>-errors-*.jsonl "
                 "and <output>-summary.json; required")
        add("--format", dest="format", choices=FORMATS, default=None,
            help="input format text|jsonl|parquet; default: inferred from the input's extension "
                 "(.txt, .jsonl/.ndjson/.json, .parquet, optionally followed by .gz). The output keeps it")
        add("--text-field", "--text_field", dest="text_field", action="append", default=None,
            help="JSONL/Parquet: field to privatize (repeat the flag or separate with commas for several); "
                 "every other field passes through unchanged. Default for JSONL/Parquet: 'text'")
        add("--mechanism", dest="mechanism", choices=MECHANISMS, default="madlib",
            help="privacy mechanism: madlib (multivariate Laplace on embeddings, default) or tem "
                 "(truncated exponential mechanism)")
        add("--epsilon", dest="epsilon", type=float, default=None,
            help="privacy parameter epsilon > 0 (per unit of embedding distance; smaller = more private); required")
        add("--nn", dest="nn", choices=("exact", "annoy"), default="exact",
            help="Madlib nearest-word search: exact (brute force, default) or annoy (approximate, faster; "
                 "same guarantee, lower utility at small epsilon)")
        add("--search-k", "--search_k", dest="search_k", type=int, default=-1,
            help="Annoy search_k for --nn annoy (-1: trees * n, Annoy's default)")
        add("--gamma", dest="gamma", type=float, default=None,
            help="TEM truncation radius gamma; default: from --beta (Thm. 4.2 of Carvalho et al.)")
        add("--beta", dest="beta", type=float, default=0.001,
            help="TEM: probability mass allowed outside the gamma-ball when gamma is derived; default 0.001")
        add("--artifact", dest="artifact", default=None,
            help="vocabulary artifact directory or gs:// URL; default: the bundled GloVe 6B 50d artifact "
                 "(400k words), built once into the local cache")
        add("--oov-policy", "--oov_policy", dest="oov_policy", choices=OOV_POLICIES, default="random",
            help="words not in the vocabulary: random (default; a uniformly random vocabulary word, independent "
                 "of the input), unk (the --unk-token marker) or keep (released unchanged and NOT covered by "
                 "the guarantee)")
        add("--unk-token", "--unk_token", dest="unk_token", default="<unk>",
            help="marker written for unknown words with --oov-policy unk; default '<unk>'")
        add("--seed", dest="seed", type=int, default=None,
            help="fixed seed for reproducible tests and benchmarks ONLY: output made with it is not private "
                 "against anyone who knows the seed (the summary records it). Default: OS entropy")
        add("--max-record-bytes", "--max_record_bytes", dest="max_record_bytes", type=int,
            default=DEFAULT_MAX_RECORD_BYTES,
            help="a record larger than this many bytes goes to the error output (reason too_large), not privatized: for "
                 "text and JSONL the bytes of its line as read (after decompression, without the line ending; "
                 "for JSONL the whole line, every field), for Parquet the UTF-8 bytes of its text fields "
                 f"together; default {DEFAULT_MAX_RECORD_BYTES}")
        add("--keep-failed-text", "--keep_failed_text", dest="keep_failed_text", action="store_true", default=False,
            help="also write the text of failed records into the error output (which must then be protected "
                 "like the input). Default: each error record holds only its source file, position (line or "
                 "row), reason code and a detail with exact numbers about the record (its size in bytes, the "
                 "offset of an invalid byte, the character where JSON parsing failed) and names of text fields "
                 "or Parquet columns. Even so the error output is operator data derived from the raw input: "
                 "do not publish it with the output")
        add("--batch-records", "--batch_records", dest="batch_records", type=int, default=DEFAULT_BATCH_RECORDS,
            help=f"maximum records per perturbation batch (one mechanism call); default {DEFAULT_BATCH_RECORDS}")
        add("--diagnostics-output", "--diagnostics_output", dest="diagnostics_output", default=None,
            help="for tests and operations: write one JSON line per bundle with the worker's pid, how often "
                 "its process loaded the artifact and a SHA-256 fingerprint of its generator's first noise draws "
                 "(no input text, no noise values) "
                 "to this prefix")


def text_fields_of(opts: PrivatizeOptions, data_format: str) -> tuple:
    if data_format == "text":
        return ()
    raw = opts.text_field or ["text"]
    fields = [f.strip() for value in raw for f in value.split(",") if f.strip()]
    return tuple(dict.fromkeys(fields))


def validate(opts: PrivatizeOptions) -> str:
    """Check the flags before anything runs; returns the input format. Raises TextdpError."""
    if not opts.input:
        raise TextdpError("--input is required (a file pattern, local or gs://)")
    if not opts.output:
        raise TextdpError("--output is required (an output prefix, local or gs://)")
    if opts.epsilon is None or not opts.epsilon > 0:
        raise TextdpError("--epsilon is required and must be > 0")
    if opts.max_record_bytes < 1 or opts.batch_records < 1:
        raise TextdpError("--max-record-bytes and --batch-records must be >= 1")
    if opts.text_field and (opts.format == "text" or infer_format(opts.input) == "text"):
        raise TextdpError("--text-field applies to JSONL and Parquet input only")
    data_format = opts.format or infer_format(opts.input)
    if data_format is None:
        raise TextdpError(f"cannot infer the format of {opts.input!r} from its extension; give --format "
                          f"({'|'.join(FORMATS)})")
    if opts.mechanism == "tem":
        try:
            import textdp.tem  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except ImportError as exc:
            raise TextdpError(f"--mechanism tem is not available (textdp.tem cannot be imported: {exc})") from None
    if opts.artifact and not opts.artifact.startswith("gs://") and not os.path.isdir(opts.artifact):
        raise TextdpError(f"--artifact {opts.artifact!r} is not a directory")
    if opts.mechanism == "tem" and not (opts.artifact or "").startswith("gs://"):
        _require_neighbour_table(opts.artifact or default_artifact_path())
    if not matched_paths(opts.input):
        raise TextdpError(f"no file matches --input {opts.input!r}")
    return data_format


def _require_neighbour_table(artifact_dir: str) -> None:
    """TEM samples from the artifact's K-nearest table: refuse before any worker starts if it is missing.
    (A gs:// artifact is checked by the workers when they fetch it.)"""
    has_table = os.path.exists(os.path.join(artifact_dir, MANIFEST)) and NEIGHBOURS_SECTION in read_manifest(artifact_dir)
    if not has_table:
        raise TextdpError(f"--mechanism tem needs a neighbour table in the artifact {artifact_dir}; run "
                          f"`textdp neighbours --artifact {artifact_dir}` first (docs/tem.md)")


def output_paths(output: str, data_format: str) -> dict:
    return {
        "output": f"{output}-*-of-*{OUTPUT_SUFFIX[data_format]}",
        "errors_prefix": f"{output}-errors",
        "errors": f"{output}-errors-*.jsonl",
        "summary": f"{output}-summary.json",
        "amplification": f"{output}-amplification.json",
        "diagnostics": None,
    }


class SumCounts(beam.CombineFn):
    """Adds dicts of counts key by key (the summary's counters, combined across workers)."""

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, element):
        for key, value in element.items():
            accumulator[key] = accumulator.get(key, 0) + value
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


# --- stages: one function each, so a stage (e.g. the LAC shuffle) can be inserted between them ---

def read_stage(pipeline, opts, data_format, text_fields):
    return pipeline | "Read" >> ReadRecords(opts.input, data_format, text_fields, opts.max_record_bytes,
                                            opts.keep_failed_text)


def perturb_stage(records, config: PerturbConfig, shared_handle, batch_records: int, diagnostics: bool):
    return (records
            | "Redistribute" >> beam.Reshuffle()
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=batch_records)
            | "Perturb" >> beam.ParDo(PerturbTokens(shared_handle, config, diagnostics)).with_outputs(
                PerturbTokens.STATS, PerturbTokens.DIAGNOSTICS, main="released"))


def write_stage(released, opts, data_format, schema):
    released | "Write" >> WriteRecords(opts.output, data_format, schema)
    return released | "CountOut" >> beam.combiners.Count.Globally()


def errors_stage(errors, errors_prefix):
    errors | "WriteErrors" >> WriteErrors(errors_prefix)


def summary_stage(counts_in, stats, errors, records_out_count, summary_writer, records_dropped=None):
    """Combine every count into one dict and write the summary. ``records_dropped``: numbers of records
    a stage between perturbation and writing removed on purpose (sub-sampling); they reconcile too."""
    parts = (
        counts_in | "RecordsIn" >> beam.Map(lambda path_count: {"records_in": path_count[1]}),
        stats | "TokenStats" >> beam.Map(dict),
        errors | "FailedCounts" >> beam.Map(lambda rec: {"records_failed": 1, FAILED_PREFIX + rec["reason"]: 1}),
        records_out_count | "RecordsOut" >> beam.Map(lambda n: {"records_out": n}),
    )
    if records_dropped is not None:
        parts += (records_dropped | "RecordsDropped" >> beam.Map(lambda n: {"records_dropped": n}),)
    return (parts
            | "AllCounts" >> beam.Flatten()
            | "SumCounts" >> beam.CombineGlobally(SumCounts())
            | "WriteSummary" >> beam.ParDo(summary_writer))


def build_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """The privatize pipeline for ``options``, not yet run (tests inspect or run it)."""
    opts = options.view_as(PrivatizeOptions)
    data_format = validate(opts)
    text_fields = text_fields_of(opts, data_format)
    schema = parquet_schema(opts.input, text_fields) if data_format == "parquet" else None
    if schema is not None:
        for field in text_fields:
            if schema.get_field_index(field) < 0:
                raise TextdpError(f"--text-field {field!r} is not a column of the Parquet input")
    paths = output_paths(opts.output, data_format)
    amplify = options.view_as(AmplifierOptions).amplifier_requested()
    config = PerturbConfig(artifact=opts.artifact, mechanism=opts.mechanism, epsilon=opts.epsilon, nn=opts.nn,
                           search_k=opts.search_k, gamma=opts.gamma, beta=opts.beta, oov_policy=opts.oov_policy,
                           unk_token=opts.unk_token, seed=opts.seed, text_fields=text_fields,
                           shape_field=SHAPE_FIELD if amplify else None)
    shared_handle = shared.Shared()
    summary_writer = WriteSummary(shared_handle, config, paths["summary"], context={
        "input_pattern": opts.input, "output": paths["output"], "errors_output": paths["errors"],
        "data_format": data_format, "text_fields": text_fields, "max_record_bytes": opts.max_record_bytes,
        "amplification_report": paths["amplification"] if amplify else None})

    pipeline = beam.Pipeline(options=options)
    read = read_stage(pipeline, opts, data_format, text_fields)
    perturbed = perturb_stage(read["records"], config, shared_handle, opts.batch_records,
                              diagnostics=bool(opts.diagnostics_output))
    released, records_dropped = perturbed.released, None
    if amplify:  # LAC Amplifier (docs/lac.md)
        released, records_dropped = amplify_privatized(released, options, config, shared_handle, data_format,
                                                       text_fields, paths["amplification"])
    records_out = write_stage(released, opts, data_format, schema)
    errors_stage(read["errors"], paths["errors_prefix"])
    summary_stage(read["counts"], perturbed[PerturbTokens.STATS], read["errors"], records_out, summary_writer,
                  records_dropped)
    if opts.diagnostics_output:
        (perturbed[PerturbTokens.DIAGNOSTICS]
         | "DiagnosticsJson" >> beam.Map(lambda rec: json.dumps(rec, sort_keys=True))
         | "WriteDiagnostics" >> beam.io.WriteToText(opts.diagnostics_output, file_name_suffix=".jsonl"))
    return pipeline


def help_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="textdp privatize", description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="Beam flags (--runner, --direct_num_workers, --direct_running_mode, --project, --region, "
               "--temp_location, --setup_file, ...) pass through unchanged.")
    PrivatizeOptions._add_argparse_args(parser)  # pylint: disable=protected-access
    AmplifierOptions._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


def run(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = job_options(argv, help_parser)
    if options is None:
        return 0
    try:
        pipeline = build_pipeline(options)
    except (TextdpError, ValueError) as exc:
        print(f"textdp privatize: error: {exc}", file=sys.stderr)
        return 2
    opts = options.view_as(PrivatizeOptions)
    paths = output_paths(opts.output, opts.format or infer_format(opts.input))
    result = pipeline.run()
    result.wait_until_finish()
    print(f"output:  {paths['output']}")
    print(f"errors:  {paths['errors']}")
    print(f"summary: {paths['summary']}")
    if options.view_as(AmplifierOptions).amplifier_requested():
        print(f"amplification: {paths['amplification']}")
    _print_headline(paths["summary"])
    return 0


def _print_headline(summary_path: str) -> None:
    """One line of counts from the summary, when this machine can read it (local or gs:// access)."""
    try:
        with FileSystems.open(summary_path) as handle:
            summary = json.loads(handle.read().decode("utf-8"))
    except Exception:  # pylint: disable=broad-except
        return
    records, tokens = summary["records"], summary["tokens"]
    print(f"records: {records['in']} in, {records['out']} out, {records['failed']} failed; "
          f"tokens: {tokens['total']} ({tokens['changed_fraction']:.1%} changed, {tokens['unknown']} unknown)")


if __name__ == "__main__":
    sys.exit(run())
