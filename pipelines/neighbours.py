"""``textdp neighbours``: add every word's exact K nearest neighbours to an artifact (Beam pipeline).

TEM (``textdp privatize --mechanism tem``) needs this table. The job shards the vocabulary into
row ranges, compares each range with the whole vocabulary on the workers (each memory-maps the
vectors), and writes ``neighbours_ids.npy`` / ``neighbours_distances.npy`` into the artifact with
their SHA-256 under the manifest section "neighbours". One table per artifact: artifacts are never
overwritten. Beam's own flags (``--runner``, ``--direct_num_workers``, ``--direct_running_mode``)
pass through; for two local cores use ``--direct_num_workers 2 --direct_running_mode multi_processing``.
With a gs:// ``--artifact`` the job runs on any runner (Dataflow, Flink, or the local ones): the
workers fetch the artifact and the table is uploaded next to it (``transforms.neighbours``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.options import flag_adder, job_options
from textdp.locate import read_manifest, resolve_artifact
from textdp.errors import TextdpError
from textdp.neighbours import METRICS, table_files_exist
from transforms.neighbours import ComputeNeighbourTable

DEFAULT_K = 100
DEFAULT_SHARD_ROWS = 8192


class NeighbourOptions(PipelineOptions):
    """Flags of ``textdp neighbours`` (the single source of truth, also for template metadata)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add = flag_adder(parser)

        add("--artifact", dest="artifact", default=None,
            help="artifact to add the table to: a local directory or a gs:// URL; default: the bundled GloVe 50d "
                 "artifact in the textdp cache (TEXTDP_CACHE_DIR). With gs:// any runner works (Dataflow "
                 "included): the workers fetch the artifact, and the table's two files and then the new manifest "
                 "are uploaded next to it when the job ends")
        add("--k", dest="k", type=int, default=DEFAULT_K,
            help=f"neighbours stored per word, the word itself included (default {DEFAULT_K}); larger K makes TEM "
                 "faster at middle epsilons and the table bigger: N x K x 8 bytes")
        add("--metric", dest="metric", choices=METRICS, default="euclidean",
            help="distance between embeddings: euclidean (default) or angular (chord between directions, "
                 "sqrt(2 - 2 cos)); TEM's privacy statement is in this metric")
        add("--shard-rows", "--shard_rows", dest="shard_rows", type=int, default=DEFAULT_SHARD_ROWS,
            help=f"vocabulary rows per work item (default {DEFAULT_SHARD_ROWS}); smaller spreads work over more workers")


def artifact_location(opts: NeighbourOptions) -> str:
    """The gs:// URL as given (without a trailing slash), or the local directory (default: the cache's)."""
    if (opts.artifact or "").startswith("gs://"):
        return opts.artifact.rstrip("/")
    return resolve_artifact(opts.artifact)


def validate(opts: NeighbourOptions) -> tuple:
    """Check the flags and the artifact; returns (artifact location: local directory or gs:// URL, manifest).

    A gs:// artifact is only read here (its manifest): the workers fetch it and the writer uploads the table.
    """
    if opts.metric not in METRICS:
        raise TextdpError(f"--metric must be one of {', '.join(METRICS)}")
    if opts.shard_rows is None or opts.shard_rows < 1:
        raise TextdpError("--shard-rows must be >= 1")
    location = artifact_location(opts)
    remote_artifact = location.startswith("gs://")
    manifest = read_manifest(location)
    if "neighbours" in manifest or (not remote_artifact and table_files_exist(location)):
        raise TextdpError(f"{location} already has a neighbour table (artifacts are never overwritten)")
    if not 1 <= opts.k <= int(manifest["vocab_size"]):
        raise TextdpError(f"--k must be between 1 and the vocabulary size {manifest['vocab_size']}")
    return location, manifest


def build_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """The neighbour job as an unrun pipeline (tests inspect or run it)."""
    opts = options.view_as(NeighbourOptions)
    location, manifest = validate(opts)
    vocab_size = int(manifest["vocab_size"])
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "NeighbourTable" >> ComputeNeighbourTable(
        location, vocab_size, opts.k, opts.metric, opts.shard_rows,
        extra={"created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shard_rows": opts.shard_rows})
    return pipeline


def help_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="textdp neighbours", description=__doc__.splitlines()[0].replace("``", ""),
        epilog="Beam flags (--runner, --direct_num_workers, --direct_running_mode, ...) are passed to Beam.")
    NeighbourOptions._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


def run(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = job_options(argv, help_parser)
    if options is None:
        return 0
    opts = options.view_as(NeighbourOptions)
    started = time.perf_counter()
    try:
        build_pipeline(options).run().wait_until_finish()  # validates first
        location = artifact_location(opts)
        section = read_manifest(location)["neighbours"]
    except TextdpError as exc:
        print(f"textdp neighbours: error: {exc}", file=sys.stderr)
        return 1
    report = {"artifact": location, "seconds": round(time.perf_counter() - started, 1),
              "k": section["k"], "metric": section["metric"], "kth_distance": section["kth_distance"],
              "fallback_rows": section["fallback_rows"]}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run())
