"""``textdp neighbours``: add every word's exact K nearest neighbours to an artifact (Beam pipeline).

TEM (``textdp privatize --mechanism tem``) needs this table. The job shards the vocabulary into
row ranges, compares each range with the whole vocabulary on the workers (each memory-maps the
vectors), and writes ``neighbours_ids.npy`` / ``neighbours_distances.npy`` into the artifact with
their SHA-256 under the manifest section "neighbours". One table per artifact: artifacts are never
overwritten. Beam's own flags (``--runner``, ``--direct_num_workers``, ``--direct_running_mode``)
pass through; for two local cores use ``--direct_num_workers 2 --direct_running_mode multi_processing``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.options import flag_adder, job_options
from textdp.artifact import read_manifest, resolve_artifact
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
            help="artifact directory to add the table to; default: the bundled GloVe 50d artifact in the textdp "
                 "cache (TEXTDP_CACHE_DIR). A gs:// artifact is checked out to this machine, the table computed "
                 "here (local runner) and the new files and manifest uploaded back")
        add("--k", dest="k", type=int, default=DEFAULT_K,
            help=f"neighbours stored per word, the word itself included (default {DEFAULT_K}); larger K makes TEM "
                 "faster at middle epsilons and the table bigger: N x K x 8 bytes")
        add("--metric", dest="metric", choices=METRICS, default="euclidean",
            help="distance between embeddings: euclidean (default) or angular (chord between directions, "
                 "sqrt(2 - 2 cos)); TEM's privacy statement is in this metric")
        add("--shard-rows", "--shard_rows", dest="shard_rows", type=int, default=DEFAULT_SHARD_ROWS,
            help=f"vocabulary rows per work item (default {DEFAULT_SHARD_ROWS}); smaller spreads work over more workers")


def validate(opts: NeighbourOptions) -> str:
    """Resolve the artifact and check the flags; returns the local artifact directory."""
    if opts.artifact and opts.artifact.startswith("gs://"):
        raise TextdpError("build_pipeline needs a local artifact directory; `textdp neighbours` (run) checks a "
                          "gs:// artifact out, computes the table locally and uploads it")
    if opts.metric not in METRICS:
        raise TextdpError(f"--metric must be one of {', '.join(METRICS)}")
    if opts.shard_rows is None or opts.shard_rows < 1:
        raise TextdpError("--shard-rows must be >= 1")
    artifact_dir = resolve_artifact(opts.artifact)
    manifest = read_manifest(artifact_dir)
    if "neighbours" in manifest or table_files_exist(artifact_dir):
        raise TextdpError(f"{artifact_dir} already has a neighbour table (artifacts are never overwritten)")
    if not 1 <= opts.k <= int(manifest["vocab_size"]):
        raise TextdpError(f"--k must be between 1 and the vocabulary size {manifest['vocab_size']}")
    return artifact_dir


def build_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """The neighbour job as an unrun pipeline (tests inspect or run it)."""
    opts = options.view_as(NeighbourOptions)
    artifact_dir = validate(opts)
    vocab_size = int(read_manifest(artifact_dir)["vocab_size"])
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "NeighbourTable" >> ComputeNeighbourTable(
        artifact_dir, vocab_size, opts.k, opts.metric, opts.shard_rows,
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
        if (opts.artifact or "").startswith("gs://"):
            section, artifact = _run_on_gcs_artifact(options, opts)
        else:
            build_pipeline(options).run().wait_until_finish()
            artifact = resolve_artifact(opts.artifact)
            section = read_manifest(artifact)["neighbours"]
    except TextdpError as exc:
        print(f"textdp neighbours: error: {exc}", file=sys.stderr)
        return 1
    report = {"artifact": artifact, "seconds": round(time.perf_counter() - started, 1),
              "k": section["k"], "metric": section["metric"], "kth_distance": section["kth_distance"],
              "fallback_rows": section["fallback_rows"]}
    print(json.dumps(report, indent=2))
    return 0


LOCAL_RUNNERS = (None, "DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")


def _run_on_gcs_artifact(options: PipelineOptions, opts: NeighbourOptions):
    """gs:// artifact: check out a working copy here, compute the table into it, upload the new files.

    The workers write the table into the working copy, so they must run on this machine (a local
    runner; ``--direct_num_workers`` still spreads the work over its cores). The upload sends only
    the new files and then the manifest; the cached copy other jobs map is never modified.
    """
    from textdp import remote  # pylint: disable=import-outside-toplevel
    from textdp.artifact import stderr_progress  # pylint: disable=import-outside-toplevel

    runner = options.view_as(StandardOptions).runner
    if runner not in LOCAL_RUNNERS:
        raise TextdpError(f"a gs:// --artifact is processed on this machine, not with --runner {runner}: "
                          "run with the local runner (e.g. --direct_num_workers 2 --direct_running_mode "
                          "multi_processing); the table is uploaded when it is complete")
    url = opts.artifact
    workdir = tempfile.mkdtemp(prefix="textdp-neighbours-")
    try:
        local = remote.checkout_artifact(url, os.path.join(workdir, "artifact"), progress=stderr_progress)
        opts.artifact = local
        build_pipeline(options).run().wait_until_finish()
        remote.upload_artifact(local, url, progress=stderr_progress)
        return read_manifest(local)["neighbours"], url
    finally:
        opts.artifact = url
        shutil.rmtree(workdir, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(run())
