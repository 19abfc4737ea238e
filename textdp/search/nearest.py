"""Nearest-vocabulary-word search for noisy vectors.

Both searches are functions of the fixed embedding and the noisy vector only, so releasing their
answer is post-processing of the noisy vector and keeps the mechanism's guarantee. They differ in
utility and speed:

``ExactNearest``
    two implementations with the same guarantee, chosen by ``search``:

    int8 (``search="auto"`` on a CPU with AVX-512 VNNI, when textdp's optional C extension is built,
    or ``search="int8"``): an int8 prefilter that skips a word only when one (nearest) or two (two
    nearest) exactly computed words are provably nearer, then float64 distances for the rest
    (textdp.search.int8_search, with the proof). The answer is the float64 brute force's, ties to the lower
    id; ~4x faster than BLAS per core on 400k x 50.

    BLAS (everywhere else, or ``search="blas"``): blocked brute force. For a batch X of queries and a block V_b of vocabulary rows,
    ``||x - v||^2 = ||x||^2 - 2 x.v + ||v||^2``; the ``||x||^2`` term is the same for every v and
    is dropped, and the row norms ride along as an extra column of the block, so one matrix product
    ranks the block. Memory is one (batch x block) float32 buffer whatever the vocabulary size. The answer is the true
    nearest word up to float32 rounding (two words whose squared distances differ by less than
    about 1e-5 may come out in either order).
``AnnoyNearest``
    the artifact's memory-mapped Annoy index (``search_k`` as in Annoy: -1 means trees * n). Much
    faster on large vocabularies but approximate: its recall on noisy vectors is low at small
    epsilon and must be measured (benchmarks/bench_madlib.py), not assumed.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from textdp.search import int8_search

DEFAULT_BLOCK_ROWS = 768  # measured fastest for 1024-token batches (benchmarks/bench_madlib.py)
DEFAULT_BATCH = 1024

_SEARCH_THREADS = 1  # threads of this process's exact searches (set by the worker from --blas-threads)
_SEARCH_LOCK = threading.Lock()


def set_search_threads(threads: int) -> None:
    """How many threads each exact search of this process uses (process-wide, like a BLAS pool).

    The vocabulary is split into that many contiguous ranges, each ranked by its own thread with
    single-threaded BLAS calls (numpy releases the GIL in them). On small blocks this scales better
    than a multi-threaded BLAS, whose threads synchronise at every call and spin when cores are
    busy (benchmarks/results/scaling.md)."""
    global _SEARCH_THREADS
    with _SEARCH_LOCK:
        _SEARCH_THREADS = max(1, int(threads))


def search_threads() -> int:
    return _SEARCH_THREADS


class ExactNearest:
    """Exact Euclidean nearest neighbour by blocked BLAS brute force."""

    name = "exact"

    SEARCHES = ("auto", "int8", "blas")

    def __init__(self, vectors: np.ndarray, sqnorms: np.ndarray,
                 block_rows: int = DEFAULT_BLOCK_ROWS, batch: int = DEFAULT_BATCH, threads: int = 0,
                 search: str = "auto"):
        if vectors.ndim != 2 or len(sqnorms) != len(vectors):
            raise ValueError("vectors must be 2-D with one squared norm per row")
        if search not in self.SEARCHES:
            raise ValueError(f"search must be one of {', '.join(self.SEARCHES)}")
        # "int8" (textdp.search.int8_search: its VNNI kernel where the CPU has it, else its portable loop),
        # "blas" (below), "auto" (int8 with VNNI where available, else BLAS)
        self.search = search
        self._int8 = None
        self.vectors = vectors
        self.sqnorms = sqnorms
        self.block_rows = int(block_rows)
        self.batch = int(batch)
        self.threads = int(threads)  # 0: the process's setting (set_search_threads)
        self._scratch = {}  # per range: (scores buffer, block buffer); one thread per range at a time
        self._pool = None

    def query(self, points: np.ndarray) -> np.ndarray:
        """Index of the nearest vocabulary row for every row of ``points``."""
        points = np.asarray(points, dtype=np.float32)
        if self.search_method() == "int8":
            index, threads = self._int8_index(), self.threads or _SEARCH_THREADS
            return self._in_batches(points, lambda batch: index.query(batch, threads))
        return self._in_batches(points, self._query_batch)

    def _in_batches(self, points: np.ndarray, search, width: int = 0) -> np.ndarray:
        """``search`` over ``points`` in batches of ``self.batch`` rows; ids (B,) or, with ``width``, (B x width)."""
        out = np.empty((len(points), width) if width else len(points), dtype=np.int64)
        for start in range(0, len(points), self.batch):
            out[start:start + self.batch] = search(points[start:start + self.batch])
        return out

    def _ranges(self, threads: int) -> list:
        """Contiguous row ranges, aligned to blocks, one per thread."""
        n = len(self.vectors)
        blocks = -(-n // self.block_rows)
        per = -(-blocks // threads)
        return [(i * per * self.block_rows, min(n, (i + 1) * per * self.block_rows))
                for i in range(threads) if i * per * self.block_rows < n]

    def _query_batch(self, points: np.ndarray) -> np.ndarray:
        # Augmented operands: [-2x, 1] . [v, ||v||^2] = ||v||^2 - 2 x.v, so one BLAS call yields
        # the ranking and the only extra pass over the (batch x block) scores is the argmin.
        b, dim = points.shape
        query = np.empty((b, dim + 1), dtype=np.float32)
        query[:, :dim] = -2.0 * points
        query[:, dim] = 1.0
        threads = self.threads or _SEARCH_THREADS
        ranges = self._ranges(max(1, threads))
        if len(ranges) == 1:
            return self._rank_range(query, 0, *ranges[0])[1]
        if self._pool is None or self._pool._max_workers != len(ranges):
            self._pool = ThreadPoolExecutor(max_workers=len(ranges), thread_name_prefix="textdp-search")
        parts = list(self._pool.map(lambda item: self._rank_range(query, item[0], *item[1]), enumerate(ranges)))
        best, arg = parts[0]
        for value, index in parts[1:]:  # ranges in id order: on a tie the lower id (earlier range) stays
            better = value < best
            best = np.where(better, value, best)
            arg = np.where(better, index, arg)
        return arg

    def _rank_range(self, query: np.ndarray, slot: int, first: int, stop: int):
        """(best score, its id) per query over vocabulary rows [first, stop)."""
        b, width = query.shape
        dim = width - 1
        buffers = self._scratch.get(slot)
        if buffers is None or buffers[0].shape[0] < b:
            buffers = (np.empty((max(b, 1), self.block_rows), dtype=np.float32),
                       np.empty((self.block_rows, width), dtype=np.float32))
            self._scratch[slot] = buffers
        buffer, block = buffers
        best = np.full(b, np.inf, dtype=np.float32)
        arg = np.zeros(b, dtype=np.int64)
        local = np.empty(b, dtype=np.int64)
        better = np.empty(b, dtype=bool)
        rows = np.arange(b)
        for start in range(first, stop, self.block_rows):
            part = self.vectors[start:min(start + self.block_rows, stop)]
            m = len(part)
            block[:m, :dim] = part
            block[:m, dim] = self.sqnorms[start:start + m]
            scores = buffer[:b, :m]
            np.matmul(query, block[:m].T, out=scores)
            np.argmin(scores, axis=1, out=local)
            value = scores[rows, local]
            np.less(value, best, out=better)  # strict: on a tie the lower id (earlier block) stays
            np.copyto(best, value, where=better)
            local += start
            np.copyto(arg, local, where=better)
        return best, arg

    def query_two(self, points: np.ndarray) -> np.ndarray:
        """Indices of the two nearest vocabulary rows for every row of ``points`` (B x 2, nearest first).

        With the int8 search (see ``search``): the two smallest float64 distances, ties to the lower id.
        With BLAS: the same blocked scores as :meth:`query`; each block contributes its two best
        columns and a running top-2 is kept; the pair is then ordered by float64 distances recomputed
        from differences, so the order does not depend on float32 rounding of the expanded form
        (Vickrey's choice uses both distances).
        """
        points = np.asarray(points, dtype=np.float32)
        if self.search_method() == "int8":
            index, threads = self._int8_index(), self.threads or _SEARCH_THREADS
            return self._in_batches(points, lambda batch: index.query_two(batch, threads), width=2)
        return self._in_batches(points, self._query_two_batch, width=2)

    def search_method(self) -> str:
        """The search this object runs: "int8" or "blas"."""
        if self.search == "auto":
            return "int8" if int8_search.has_vnni() else "blas"
        return self.search

    def _int8_index(self):
        with _SEARCH_LOCK:  # built once per search object (~0.3 s and ~25 MB for 400k x 50)
            if self._int8 is None:
                self._int8 = int8_search.Int8Search(self.vectors)
            return self._int8

    def _query_two_batch(self, points: np.ndarray) -> np.ndarray:
        b, dim = points.shape
        n = len(self.vectors)
        if n < 2:
            raise ValueError("the vocabulary needs at least two words for a top-2 search")
        query = np.empty((b, dim + 1), dtype=np.float32)
        query[:, :dim] = -2.0 * points
        query[:, dim] = 1.0
        block = np.empty((self.block_rows, dim + 1), dtype=np.float32)
        scores = np.empty((b, self.block_rows), dtype=np.float32)
        best1 = np.full(b, np.inf, dtype=np.float32)
        best2 = np.full(b, np.inf, dtype=np.float32)
        arg1 = np.zeros(b, dtype=np.int64)
        arg2 = np.zeros(b, dtype=np.int64)
        rows = np.arange(b)
        for start in range(0, n, self.block_rows):
            part = self.vectors[start:start + self.block_rows]
            m = len(part)
            block[:m, :dim] = part
            block[:m, dim] = self.sqnorms[start:start + m]
            s = scores[:, :m]
            np.matmul(query, block[:m].T, out=s)
            # the block's two best by two argmin passes (much cheaper than argpartition)
            local1 = np.argmin(s, axis=1)
            value1 = s[rows, local1]
            s[rows, local1] = np.inf
            local2 = np.argmin(s, axis=1)
            value2 = s[rows, local2]
            local1 += start
            local2 += start
            # merge two sorted pairs: (best1 <= best2) and (value1 <= value2)
            new_first = value1 < best1
            second_value = np.where(new_first, np.minimum(best1, value2), np.minimum(best2, value1))
            second_arg = np.where(new_first, np.where(best1 <= value2, arg1, local2), np.where(best2 <= value1, arg2, local1))
            arg1 = np.where(new_first, local1, arg1)
            best1 = np.where(new_first, value1, best1)
            arg2, best2 = second_arg, second_value
        arg = np.stack([arg1, arg2], axis=1)
        diff = np.asarray(self.vectors[arg.ravel()], dtype=np.float64).reshape(b, 2, dim) - points[:, None, :].astype(np.float64)
        exact = np.einsum("bkn,bkn->bk", diff, diff)
        swap = (exact[:, 1] < exact[:, 0]) | ((exact[:, 1] == exact[:, 0]) & (arg[:, 1] < arg[:, 0]))
        arg[swap] = arg[swap][:, ::-1]
        return arg


class AnnoyNearest:
    """Approximate nearest neighbour from the artifact's Annoy index.

    Annoy answers one query at a time; this is the one per-token loop in the Madlib path and
    it runs in Annoy's C++ code.
    """

    name = "annoy"

    def __init__(self, index, search_k: int = -1):
        self.index = index
        self.search_k = int(search_k)

    def query(self, points: np.ndarray) -> np.ndarray:
        get = self.index.get_nns_by_vector
        k = self.search_k
        out = np.empty(len(points), dtype=np.int64)
        for i, point in enumerate(np.asarray(points, dtype=np.float32).tolist()):
            found = get(point, 1, search_k=k)
            out[i] = found[0] if found else -1
        if (out < 0).any():
            raise RuntimeError("Annoy returned no neighbour (empty index?)")
        return out


def make_nearest(artifact, method: str = "exact", search_k: int = -1):
    """The nearest-neighbour search named by ``--nn`` for a loaded artifact."""
    if method == "exact":
        return ExactNearest(artifact.vectors, artifact.sqnorms)
    if method == "annoy":
        return AnnoyNearest(artifact.annoy_index, search_k)
    raise ValueError(f"unknown nearest-neighbour method {method!r} (expected 'exact' or 'annoy')")
