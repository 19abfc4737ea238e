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

import json
import os
import sys
import time
from typing import List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.flags import ArtifactOptions, NeighbourOptions, WorkerResourceOptions
from pipelines.jobs import Plan, run_job
from textdp.artifact.locate import read_manifest, resolve_artifact, verify_artifact
from textdp.artifact.neighbours import DISTANCES_FILE, IDS_FILE, METRICS, table_files_exist
from textdp.errors import TextdpError
from textdp.outputs import OutputGuard, shown
from transforms.neighbours import ComputeNeighbourTable


def artifact_location(options: PipelineOptions) -> str:
    """The gs:// URL as given (without a trailing slash), or the local directory (default: the cache's)."""
    artifact = options.view_as(ArtifactOptions).artifact
    if (artifact or "").startswith("gs://"):
        return artifact.rstrip("/")
    return resolve_artifact(artifact)


def validate(options: PipelineOptions) -> tuple:
    """Check the flags and the artifact; returns (artifact location: local directory or gs:// URL, manifest).

    A gs:// artifact is only read here (its manifest and object sizes): the workers fetch it and the
    writer uploads the table.
    """
    opts = options.view_as(NeighbourOptions)
    if opts.metric not in METRICS:
        raise TextdpError(f"--metric must be one of {', '.join(METRICS)}")
    if opts.shard_rows is None or opts.shard_rows < 1:
        raise TextdpError("--shard-rows must be >= 1")
    location = artifact_location(options)
    manifest = verify_artifact(location)
    if "neighbours" in manifest or (not location.startswith("gs://") and table_files_exist(location)):
        raise TextdpError(f"{shown(location)} already has a neighbour table (artifacts are never overwritten)")
    listed = [name for name in (IDS_FILE, DISTANCES_FILE) if name in manifest.get("files", {})]
    if listed:  # the writer refuses a name the manifest lists: refused here, not after computing the table
        raise TextdpError(f"{shown(location)}/manifest.json lists {listed[0]} among its files but has no neighbour table "
                          "(a hand-edited or damaged manifest); artifact files are never overwritten, so the table "
                          "could not be written: rebuild the artifact with build-index, or add the table to a copy "
                          "whose manifest does not list it")
    if not location.startswith("gs://") and not os.access(location, os.W_OK | os.X_OK):
        raise TextdpError(f"--artifact {shown(location)} is not writable: the table's files could not be added to it")
    if not 1 <= opts.k <= int(manifest["vocab_size"]):
        raise TextdpError(f"--k must be between 1 and the vocabulary size {manifest['vocab_size']}")
    return location, manifest


def build_pipeline(options: PipelineOptions, progress_dir: Optional[str] = None, validated=None) -> beam.Pipeline:
    """The neighbour job as an unrun pipeline (tests inspect or run it)."""
    opts = options.view_as(NeighbourOptions)
    location, manifest = validated or validate(options)
    vocab_size = int(manifest["vocab_size"])
    worker = options.view_as(WorkerResourceOptions).worker_config(progress_dir)
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "NeighbourTable" >> ComputeNeighbourTable(
        location, vocab_size, opts.k, opts.metric, opts.shard_rows,
        extra={"created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shard_rows": opts.shard_rows},
        worker=worker)
    return pipeline


def prepare(options: PipelineOptions) -> Plan:
    validated = validate(options)
    location, manifest = validated
    started = time.perf_counter()

    def report() -> List[str]:
        section = read_manifest(location)["neighbours"]
        summary = {"artifact": location, "seconds": round(time.perf_counter() - started, 1),
                   "k": section["k"], "metric": section["metric"], "kth_distance": section["kth_distance"],
                   "fallback_rows": section["fallback_rows"]}
        return [json.dumps(summary, indent=2)]

    guard = OutputGuard("neighbours", False, lambda path: False, lambda pattern: [])  # the table's files: validate()
    guard.directory("--artifact", location)  # <artifact>.lock: one table job per artifact at a time
    return Plan(build=lambda progress_dir: build_pipeline(options, progress_dir, validated), report=report,
                progress=("rows", int(manifest["vocab_size"]), "rows"), guard=guard)


def help_parser():
    from pipelines.jobs import help_parser as job_help

    return job_help("neighbours")


def run(argv: Optional[List[str]] = None) -> int:
    return run_job("neighbours", argv)


if __name__ == "__main__":
    sys.exit(run())
