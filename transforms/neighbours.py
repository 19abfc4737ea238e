"""Beam stages of ``textdp neighbours``: the exact K-nearest table, sharded over vocabulary rows.

``ComputeNeighbourTable`` = Create(row ranges) -> Reshuffle -> ``ComputeNeighbourBlocks`` (each
worker memory-maps the artifact's vectors once, behind ``Shared``, and compares its rows with the
whole vocabulary; see ``textdp.artifact.neighbours.knn_rows``) -> one ``WriteNeighbourTable`` that fills
staging files in the artifact directory and adds them to the manifest atomically.

The artifact is a local directory that every worker can reach (the local runners) or a gs:// URL
(any runner, Dataflow included): each worker then fetches the artifact into its own cache once,
and the writer checks out a working copy on its worker (hard links into that cache), writes the
table into it and uploads the two new files and then the manifest (``textdp.artifact.gcs``), so readers
see either the old artifact or the complete new one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from textdp.artifact import gcs
from textdp.artifact.locate import open_artifact
from textdp.artifact.neighbours import QUERY_ROWS, TableWriter, knn_rows, metric_points
from transforms.worker import NAMESPACE, WorkerConfig, WorkerState


class VocabularyPoints:
    """Per-process read-only state: the artifact's vectors mapped to the metric's points."""

    def __init__(self, artifact: str, metric: str):
        artifact = open_artifact(artifact)  # a gs:// URL is fetched into this machine's cache once
        if metric == "euclidean":
            self.points = artifact.vectors  # the memory map itself: shared through the page cache
        else:
            self.points = metric_points(artifact.vectors, metric)
        self.sqnorms = np.einsum("ij,ij->i", self.points, self.points, dtype=np.float32)


def row_ranges(vocab_size: int, shard_rows: int) -> list:
    """Contiguous [start, stop) row ranges covering the vocabulary."""
    if shard_rows < 1:
        raise ValueError("shard_rows must be >= 1")
    return [(start, min(start + shard_rows, vocab_size)) for start in range(0, vocab_size, shard_rows)]


class ComputeNeighbourBlocks(beam.DoFn):
    """(start, stop) -> (start, ids int32 (m x k), distances float32 (m x k), fallback rows)."""

    def __init__(self, shared_handle, artifact_dir: str, k: int, metric: str, query_rows: int = QUERY_ROWS,
                 worker: Optional[WorkerConfig] = None):
        self.artifact_dir, self.k, self.metric, self.query_rows = artifact_dir, int(k), metric, int(query_rows)
        key = (artifact_dir, metric)
        self._state = WorkerState(shared_handle, f"textdp-points:{key}", lambda: VocabularyPoints(*key), worker)
        self._rows = Metrics.counter(NAMESPACE, "neighbour_rows")
        self._fallback = Metrics.counter(NAMESPACE, "neighbour_fallback_rows")
        self._block_ms = Metrics.distribution(NAMESPACE, "neighbour_block_ms")

    def setup(self):
        self._state.setup()

    def finish_bundle(self):
        self._state.progress.flush()

    def process(self, row_range: Tuple[int, int]):
        self._state.report()
        holder = self._state.value
        start, stop = row_range
        for lo in range(start, stop, self.query_rows):
            hi = min(lo + self.query_rows, stop)
            began = time.perf_counter()
            ids, distances, fallback = knn_rows(holder.points, holder.sqnorms, lo, hi, self.k)
            self._block_ms.update(int((time.perf_counter() - began) * 1000))
            self._rows.inc(hi - lo)
            self._fallback.inc(fallback)
            self._state.progress.add(rows=hi - lo)
            yield lo, ids, distances, fallback


class WriteNeighbourTable(beam.DoFn):
    """All blocks (one grouped element) -> the table files added to the artifact; yields the section."""

    def __init__(self, artifact_dir: str, vocab_size: int, k: int, metric: str, extra: dict):
        self.artifact_dir, self.vocab_size, self.k, self.metric, self.extra = artifact_dir, vocab_size, k, metric, extra

    def process(self, keyed_blocks):
        _, blocks = keyed_blocks
        if not self.artifact_dir.startswith("gs://"):
            yield self._write(self.artifact_dir, blocks)["neighbours"]
            return
        workdir = tempfile.mkdtemp(prefix="textdp-neighbours-")
        try:  # a working copy on this worker, the table written into it, the new files uploaded
            local = gcs.checkout_artifact(self.artifact_dir, os.path.join(workdir, "artifact"))
            manifest = self._write(local, blocks)
            gcs.upload_artifact(local, self.artifact_dir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        yield manifest["neighbours"]

    def _write(self, artifact_dir: str, blocks) -> dict:
        writer = TableWriter(artifact_dir, self.vocab_size, self.k, self.metric)
        try:
            for start, ids, distances, fallback in blocks:
                writer.write_block(start, ids, distances, fallback)
            return writer.finish(dict(self.extra))
        except BaseException:
            writer.abort()
            raise


class ComputeNeighbourTable(beam.PTransform):
    """Pipeline root -> PCollection with one element: the manifest section of the new table."""

    def __init__(self, artifact_dir: str, vocab_size: int, k: int, metric: str, shard_rows: int, extra: dict,
                 worker: Optional[WorkerConfig] = None):
        super().__init__()
        self.artifact_dir, self.vocab_size, self.k, self.metric = artifact_dir, vocab_size, k, metric
        self.shard_rows, self.extra, self.worker = shard_rows, extra, worker

    def expand(self, pbegin):
        handle = shared.Shared()
        return (pbegin
                | "RowRanges" >> beam.Create(row_ranges(self.vocab_size, self.shard_rows))
                | "Distribute" >> beam.Reshuffle()
                | "NearestK" >> beam.ParDo(ComputeNeighbourBlocks(handle, self.artifact_dir, self.k, self.metric,
                                                                 worker=self.worker))
                | "OneKey" >> beam.Map(lambda block: (None, block))
                | "Gather" >> beam.GroupByKey()
                | "WriteTable" >> beam.ParDo(WriteNeighbourTable(self.artifact_dir, self.vocab_size, self.k,
                                                                 self.metric, self.extra)))

