"""Exact K-nearest-neighbour lists for every vocabulary word, and the table TEM reads them from.

Metrics
    ``euclidean``: ||phi(a) - phi(b)||. ``angular``: ||phi(a)/|phi(a)| - phi(b)/|phi(b)|||, the
    chord between the two directions (the same quantity Annoy calls "angular"; it equals
    sqrt(2 - 2 cos)). Both are Euclidean distances between points that depend on one word each,
    so both satisfy the metric axioms (two words whose vectors, or directions, coincide are at
    distance 0 from each other: a pseudo-metric, which is all metric DP needs). A zero vector
    keeps the point 0 under ``angular``.

Exactness
    A block of query rows is compared with the whole vocabulary in float32 by BLAS
    (``|v|^2 - 2 q.v``, the same for every v up to the constant |q|^2), keeping every candidate
    below a per-row threshold that tightens as better candidates arrive; K + ``MARGIN`` candidates
    per row survive. Their distances are then recomputed in float64 from the differences, which is
    exact to ~1e-12, and the K smallest are kept, ordered by (distance, id). A word excluded in the
    float32 pass had a float32 score at least the row's final threshold; if the float64 K-th
    distance is not below that threshold minus a bound on the float32 rounding error, the row is
    recomputed by float64 brute force. So the list is the exact K nearest (ties in any order).
    The word itself is always at position 0 with distance exactly 0, even when other words have
    an identical vector (they follow it at distance 0).

Layout (``NeighbourTable``)
    Two row-major .npy files, ``neighbours_ids.npy`` (int32, N x K) and
    ``neighbours_distances.npy`` (float32, N x K, ascending per row): CSR with a constant stride,
    so no offsets file is needed, a batch of rows is one memory-mapped gather, and the list of words
    within any gamma is a prefix of the row. TEM needs the K nearest whatever gamma is, so a
    fixed-K table serves every epsilon.
"""

from __future__ import annotations

import os
import shlex
from typing import Tuple

import numpy as np

from textdp.errors import ArtifactError
from textdp.paths import shown

METRICS = ("euclidean", "angular")
SECTION = "neighbours"
IDS_FILE = "neighbours_ids.npy"
DISTANCES_FILE = "neighbours_distances.npy"
MARGIN = 16  # extra float32 candidates per row, re-ranked in float64
QUERY_ROWS = 1024
VOCAB_ROWS = 8192


def metric_points(vectors: np.ndarray, metric: str, dtype=np.float32) -> np.ndarray:
    """The points whose Euclidean distances are the metric: the vectors, or their directions."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r} (expected one of {', '.join(METRICS)})")
    points = np.array(vectors, dtype=dtype, copy=True)
    if metric == "angular":
        norms = np.sqrt(np.einsum("ij,ij->i", points.astype(np.float64), points.astype(np.float64)))
        norms[norms == 0] = 1.0
        points /= norms[:, None].astype(dtype)
    return points


def exact_distances(points: np.ndarray, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float64 distances from ``query`` points (B x n) to ``points[ids]`` (B x m) by differences."""
    diff = np.asarray(points[ids], dtype=np.float64) - np.asarray(query, dtype=np.float64)[:, None, :]
    return np.sqrt(np.einsum("bmn,bmn->bm", diff, diff))


def _rounding_bound(dim: int, query_norms: np.ndarray, max_norm: float) -> np.ndarray:
    """Generous bound on the float32 error of |v|^2 - 2 q.v (BLAS dot products of length dim)."""
    return 8.0 * (dim + 2) * np.finfo(np.float32).eps * (query_norms + max_norm) ** 2


def knn_rows(points: np.ndarray, sqnorms: np.ndarray, start: int, stop: int, k: int,
             vocab_rows: int = VOCAB_ROWS) -> Tuple[np.ndarray, np.ndarray, int]:
    """Exact K nearest of rows ``start:stop`` of ``points`` (already mapped by ``metric_points``).

    ``sqnorms`` are the float32 squared norms of ``points``. Returns (ids int32 (m x k),
    distances float32 (m x k), number of rows that needed the float64 brute-force fallback).
    """
    n_words, dim = points.shape
    if not 1 <= k <= n_words:
        raise ValueError(f"k must be in 1..{n_words}")
    query = np.ascontiguousarray(points[start:stop], dtype=np.float32)
    m = len(query)
    keep = min(k + MARGIN, n_words)
    max_norm = float(np.sqrt(sqnorms.max()))
    q_norms = np.sqrt(np.einsum("ij,ij->i", query.astype(np.float64), query.astype(np.float64)))
    scaled = -2.0 * query
    scores = np.empty((m, min(max(vocab_rows, keep), n_words)), dtype=np.float32)
    width = scores.shape[1]
    mask = np.empty(scores.shape, dtype=bool)
    best_ids = best_scores = None
    threshold = None
    cand_rows, cand_ids, cand_scores, buffered = [], [], [], 0
    for b0 in range(0, n_words, width):
        block = points[b0:b0 + width]
        s = scores[:, :len(block)]
        np.matmul(scaled, block.T, out=s)
        s += sqnorms[b0:b0 + len(block)]
        lo, hi = max(start, b0), min(stop, b0 + len(block))
        if lo < hi:  # the word itself always survives (it goes to position 0)
            s[np.arange(lo, hi) - start, np.arange(lo, hi) - b0] = -np.inf
        if best_ids is None:  # first block: at least ``keep`` columns, take the best per row
            part = np.argpartition(s, keep - 1, axis=1)[:, :keep]
            best_ids = part + b0
            best_scores = np.take_along_axis(s, part, axis=1)
            threshold = best_scores.max(axis=1)
            continue
        hit = mask[:, :len(block)]
        np.less_equal(s, threshold[:, None], out=hit)
        flat = np.flatnonzero(hit)  # far cheaper than 2-D nonzero when hits are rare
        if len(flat):
            r, c = np.divmod(flat, len(block))
            cand_rows.append(r)
            cand_ids.append(c + b0)
            cand_scores.append(s[r, c])
            buffered += len(r)
        if buffered > 2 * m * keep:
            best_ids, best_scores = _compact(best_ids, best_scores, cand_rows, cand_ids, cand_scores, keep)
            threshold = best_scores.max(axis=1)
            cand_rows, cand_ids, cand_scores, buffered = [], [], [], 0
    if buffered:
        best_ids, best_scores = _compact(best_ids, best_scores, cand_rows, cand_ids, cand_scores, keep)
        threshold = best_scores.max(axis=1)
    # float64 re-ranking of the survivors, the word itself first
    self_ids = np.arange(start, stop)
    exact = exact_distances(points, query, best_ids)
    is_self = best_ids == self_ids[:, None]
    exact[is_self] = 0.0
    order = _row_order(exact, is_self, best_ids)
    top_ids = np.take_along_axis(best_ids, order, axis=1)[:, :k]
    top_d = np.take_along_axis(exact, order, axis=1)[:, :k]
    # certificate: every excluded word had float32 score >= the row's threshold, so its true
    # squared distance is >= threshold + |q|^2 - rounding bound; the K-th found must be below that.
    excluded_floor = threshold.astype(np.float64) + q_norms ** 2 - _rounding_bound(dim, q_norms, max_norm)
    uncertain = (keep < n_words) & (top_d[:, -1] ** 2 >= excluded_floor)
    fallback = np.flatnonzero(uncertain)
    for row in fallback:
        top_ids[row], top_d[row] = _brute_force_row(points, start + row, k)
    return top_ids.astype(np.int32), top_d.astype(np.float32), int(len(fallback))


def _row_order(dist: np.ndarray, is_self: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per-row column order by (distance, not-self, id), vectorised over rows."""
    m, width = dist.shape
    rows = np.repeat(np.arange(m), width)
    flat = np.lexsort((ids.ravel(), ~is_self.ravel(), dist.ravel(), rows))
    return (flat - rows * width).reshape(m, width)


def _compact(best_ids, best_scores, cand_rows, cand_ids, cand_scores, keep):
    """Merge buffered candidates into the per-row best ``keep`` by float32 score.

    Candidates are scattered into a row-padded matrix (padding +inf) and cut with one
    ``argpartition``: every dropped candidate scores >= every kept one in its row.
    """
    m, width = best_ids.shape
    rows = np.concatenate([np.repeat(np.arange(m), width)] + cand_rows)
    ids = np.concatenate([best_ids.ravel()] + cand_ids)
    scores = np.concatenate([best_scores.ravel()] + cand_scores)
    order = np.argsort(rows, kind="stable")
    rows, ids, scores = rows[order], ids[order], scores[order]
    counts = np.bincount(rows, minlength=m)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.arange(len(rows)) - first[rows]
    padded_scores = np.full((m, int(counts.max())), np.inf, dtype=np.float32)
    padded_ids = np.zeros((m, int(counts.max())), dtype=np.int64)
    padded_scores[rows, rank] = scores
    padded_ids[rows, rank] = ids
    part = np.argpartition(padded_scores, keep - 1, axis=1)[:, :keep]
    return np.take_along_axis(padded_ids, part, axis=1), np.take_along_axis(padded_scores, part, axis=1)


def _brute_force_row(points: np.ndarray, row: int, k: int):
    q = np.asarray(points[row], dtype=np.float64)
    dist = np.sqrt(((np.asarray(points, dtype=np.float64) - q) ** 2).sum(axis=1))
    dist[row] = 0.0
    ids = np.arange(len(points))
    order = np.lexsort((ids, ids != row, dist))[:k]
    return order, dist[order]


def brute_force_knn(points: np.ndarray, rows: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """float64 brute-force reference for selected rows (tests)."""
    out_ids, out_d = [], []
    for row in np.asarray(rows):
        ids, dist = _brute_force_row(points, int(row), k)
        out_ids.append(ids)
        out_d.append(dist)
    return np.array(out_ids), np.array(out_d)


class NeighbourTable:
    """The artifact's memory-mapped K-nearest table (``ids``, ``distances``: N x K row-major)."""

    def __init__(self, ids: np.ndarray, distances: np.ndarray, metric: str, info: dict):
        if ids.shape != distances.shape or ids.ndim != 2:
            raise ArtifactError("neighbour ids and distances must be two N x K arrays of one shape")
        self.ids = ids
        self.distances = distances
        self.metric = metric
        self.k = ids.shape[1]
        self.info = info

    @classmethod
    def from_artifact(cls, artifact) -> "NeighbourTable":
        info = artifact.manifest.get(SECTION)
        if not info:
            where = shown(artifact.path)
            raise ArtifactError(f"{where} has no neighbour table; run `textdp neighbours --artifact {shlex.quote(where)}` first")
        metric = info.get("metric")
        if metric not in METRICS:
            raise ArtifactError(f"{shown(artifact.path)}: neighbour table has unknown metric {metric!r}")
        arrays = []
        for key, dtype in (("ids_file", np.int32), ("distances_file", np.float32)):
            path = artifact.file_path(info[key])
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            if array.dtype != dtype or array.shape != (artifact.vocab_size, int(info["k"])) or not array.flags.c_contiguous:
                raise ArtifactError(
                    f"{shown(path)}: expected a row-major {np.dtype(dtype).name} array of shape "
                    f"{(artifact.vocab_size, int(info['k']))}, found {array.dtype} {array.shape}")
            arrays.append(array)
        return cls(arrays[0], arrays[1], metric, info)


def table_files_exist(artifact_dir: str) -> bool:
    return any(os.path.exists(os.path.join(artifact_dir, name)) for name in (IDS_FILE, DISTANCES_FILE))


# --- writing a table into an artifact (used by the Beam job; no Beam here) ----------------------


class TableWriter:
    """Staging files for a table being computed, filled block by block, then added to the artifact.

    The staging files live inside the artifact directory (same filesystem, so ``add_files`` can
    rename them into place) under names that start with a dot and a random suffix; they are
    removed if the job fails. Ids are pre-filled with -1 so a missing block is detected.
    """

    def __init__(self, artifact_dir: str, vocab_size: int, k: int, metric: str):
        import uuid

        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}")
        if table_files_exist(artifact_dir):
            raise ArtifactError(
                f"{shown(artifact_dir)} already has a neighbour table; artifacts are never overwritten "
                "(copy the artifact without its neighbours_* files to compute another table)")
        self.artifact_dir = artifact_dir
        self.k, self.metric, self.vocab_size = int(k), metric, int(vocab_size)
        tag = uuid.uuid4().hex[:12]
        self.paths = {IDS_FILE: os.path.join(artifact_dir, f".{IDS_FILE}.tmp-{tag}"),
                      DISTANCES_FILE: os.path.join(artifact_dir, f".{DISTANCES_FILE}.tmp-{tag}")}
        shape = (self.vocab_size, self.k)
        self.ids = np.lib.format.open_memmap(self.paths[IDS_FILE], mode="w+", dtype=np.int32, shape=shape)
        self.distances = np.lib.format.open_memmap(self.paths[DISTANCES_FILE], mode="w+", dtype=np.float32, shape=shape)
        self.ids[:] = -1
        self.fallback_rows = 0

    def write_block(self, start: int, ids: np.ndarray, distances: np.ndarray, fallback_rows: int = 0) -> None:
        stop = start + len(ids)
        if ids.shape != (stop - start, self.k) or distances.shape != ids.shape or not 0 <= start < stop <= self.vocab_size:
            raise ValueError(f"block at row {start} has shape {ids.shape}, expected (rows, {self.k}) within the vocabulary")
        self.ids[start:stop] = ids
        self.distances[start:stop] = distances
        self.fallback_rows += int(fallback_rows)

    def finish(self, extra: dict) -> dict:
        """Check completeness, flush, and add the files and the manifest section to the artifact."""
        from textdp.artifact.store import add_files, read_directory_manifest

        first = np.asarray(self.ids[:, 0])
        if (first != np.arange(self.vocab_size)).any():
            missing = int((first != np.arange(self.vocab_size)).sum())
            raise ArtifactError(f"neighbour table incomplete: {missing} rows were not computed")
        if (np.asarray(self.distances[:, 0]) != 0).any():
            raise ArtifactError("neighbour table invalid: a word's distance to itself is not 0")
        kth = np.asarray(self.distances[:, -1], dtype=np.float64)
        self.ids.flush()
        self.distances.flush()
        del self.ids, self.distances
        vectors_entry = read_directory_manifest(self.artifact_dir)["files"].get("vectors.npy", {})
        content = {
            "k": self.k,
            "metric": self.metric,
            "layout": "fixed-K row-major: CSR with constant stride K, row i = word i's K nearest by (distance, id)",
            "ids_file": IDS_FILE,
            "distances_file": DISTANCES_FILE,
            "ids_dtype": "int32",
            "distances_dtype": "float32",
            "shape": [self.vocab_size, self.k],
            "self_first": ("position 0 of row i is word i, with distance exactly 0 (float32 rounding would put it up to "
                           "~0.008 away), also when other words share its vector"),
            "exactness": ("float32 BLAS candidates re-ranked in float64 with a rounding-error certificate; uncertain rows "
                          "recomputed by float64 brute force"),
            "fallback_rows": int(self.fallback_rows),
            "kth_distance": {"min": float(kth.min()), "median": float(np.median(kth)), "max": float(kth.max())},
            "serves_every_gamma": "TEM samples exactly for any epsilon and gamma from the K nearest (rejection sampling), so no gamma_max",
            "vectors_sha256": vectors_entry.get("sha256"),
        }
        content.update(extra)
        return add_files(self.artifact_dir, {IDS_FILE: self.paths[IDS_FILE], DISTANCES_FILE: self.paths[DISTANCES_FILE]},
                         SECTION, content)

    def abort(self) -> None:
        for path in self.paths.values():
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
