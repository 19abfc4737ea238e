"""Exact nearest and two-nearest word search with an int8 prefilter (textdp.search.nearest's fast path).

The answer is the same as a float64 brute force: for every query z, the vocabulary row (``query``)
or the two rows (``query_two``) with the smallest squared Euclidean distance ``||z - v||^2`` computed in double precision from the float32
vectors, ties to the lower id. Integers only decide which words are *not worth computing*; a word is
skipped only when one word (nearest) or two words (two nearest) already computed exactly are strictly
nearer than any value its distance can take. The proof is below, and tests/test_int8_search.py checks the result against a float64
brute force.

Quantisation (built once per vocabulary). Per dimension i, s_i = max_v |v_i| / 127 (1 if the column is
zero). Every word is written v'_i = v_i / s_i = vh_i + dv_i with vh_i = round(v'_i), an integer in
[-127, 127], stored as the unsigned byte vh_i + 128. Kept per vocabulary: dvmax = max_v ||dv|| and
vmax = max_v ||v'|| (Euclidean norms of the scaled rows), and sq_v = ||v||^2.

Per batch of queries. z'_i = z_i s_i (so z.v = z'.v' in exact arithmetic; the margin below covers the
double rounding of both products), one scale sz = max |z'| / 127 for the
batch, zh = round(z'/sz) in [-127, 127] (signed bytes), dz = z' - sz zh. Then

    z.v = sz zh.vh + sz zh.dv + dz.v'  with  |sz zh.dv| <= ||sz zh|| dvmax,  |dz.v'| <= ||dz|| vmax,

so the score ``s_v = ||v||^2 - 2 z.v = ||z - v||^2 - ||z||^2`` lies within E_q = 2 (||sz zh|| dvmax +
||dz|| vmax) of A_v = sq_v - W (zh.vh) with W = 2 sz. The kernel computes acc = sum_i (vh_i + 128) zh_i
= zh.vh + shift_q (shift_q = 128 sum_i zh_i) with byte products (AVX-512 VNNI where the CPU has it).

Skipping rule (shown for the two nearest, k = 2; for the nearest alone, k = 1, read "best" for
"second best" and "one word" for "two words"). Let e2 be the exact squared distance of the
second-best word verified so far and T = e2 - ||z||^2 its score; slack_q >= E_q (E_q plus margins for double rounding). With
R_v = floor(sq_v / W) - 1 and tau_q = floor((T + slack_q) / W) + 1 - shift_q, word v is skipped when
acc + tau_q < R_v. Then

    A_v / W = sq_v / W - acc + shift_q >= R_v + 1 - acc + shift_q > floor((T + slack_q) / W) + 2 > (T + slack_q) / W,

so s_v >= A_v - E_q > T: two verified words (the best and second best, both with score <= T) are
strictly nearer than v, which therefore is neither of the two nearest, whatever the tie rule. Every
word not skipped has its distance computed exactly and competes for the running best two; tau_q only
decreases as e2 does, so the rule stays valid for the words already passed. Integers stay far from
overflow: |acc| <= 255 * 127 * 4 * groups < 2^28 (checked when the index is built), R_v (never below
-1, as sq_v >= 0) is clipped down to at most 2^28 (a smaller R_v only admits more words), and tau_q
is clipped to [-2^29, 2^29] (capped at 2^29 it admits every word, since acc + 2^29 > 2^28 >= R_v;
raised to -2^29 it admits more).

How much is skipped depends on E_q against the gaps between distances, and on how early good words
are met (the threshold starts open and tightens as the scan goes): on the 400,000 GloVe 6B 50d words
at epsilon 5 and 10 a query computed 84 and 65 exact distances (median; p99 309 and 444) instead of
400,000 (benchmarks/results/peer_mechanisms.md reports the counts of its run).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:
    from textdp import _top2
except ImportError:  # the optional C extension was not built: callers use the BLAS search
    _top2 = None

if _top2 is not None:  # the layout and the cap are the kernel's (textdp/_top2.c), defined there once
    TILE, QGROUP, TAU_CAP = _top2.TILE, _top2.QGROUP, _top2.TAU_CAP  # 16, 8, 2^29
    _R_CLIP = TAU_CAP // 2  # |R_v| bound: with |acc| < 2^28 a capped tau (+2^29) always selects
    _R_PAD = TAU_CAP * 2  # padding words: acc + tau <= 2^29 + |acc| < 2^30, never selected
_CHUNK = 65536  # vocabulary rows per step of the build


def available() -> bool:
    """Whether the compiled kernel is importable (any CPU: the portable loop runs where VNNI does not)."""
    return _top2 is not None


def has_vnni() -> bool:
    """Whether this CPU runs the AVX-512 VNNI kernel (the fast one)."""
    return _top2 is not None and bool(_top2.has_vnni())


class Int8Search:
    """Exact nearest and two-nearest search over fixed float32 ``vectors`` (n x d); see the module docstring.

    ``kernel``: "vnni" (AVX-512 VNNI, raises if the CPU lacks it), "portable" (plain C, any CPU), or
    "auto" (VNNI where available). ``query(points)`` returns (B,) int64 ids; ``query_two(points)``
    (B x 2), nearest first.
    """

    def __init__(self, vectors: np.ndarray, kernel: str = "auto"):
        if _top2 is None:
            raise RuntimeError("textdp._top2 is not built (reinstall textdp with a C compiler)")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) < 2:
            raise ValueError("vectors must be 2-D with at least two rows")
        if kernel not in ("auto", "vnni", "portable"):
            raise ValueError(f"unknown kernel {kernel!r}")
        self.kernel = ("vnni" if has_vnni() else "portable") if kernel == "auto" else kernel
        if self.kernel == "vnni" and not has_vnni():
            raise RuntimeError("this CPU has no AVX-512 VNNI")
        self.vectors = vectors
        n, d = vectors.shape
        self.n, self.d = n, d
        self.groups = -(-d // 4)
        if 255 * 127 * 4 * self.groups >= 1 << 28:
            raise ValueError("embedding too wide for the int8 search")
        top = np.zeros(d, dtype=np.float64)
        for start in range(0, n, _CHUNK):  # in chunks: no float64 copy of the whole vocabulary
            top = np.maximum(top, np.abs(vectors[start:start + _CHUNK]).max(axis=0).astype(np.float64))
        self.scale = np.where(top > 0, top / 127.0, 1.0)
        tiles = -(-n // TILE)
        self.tiles = tiles
        width = 4 * self.groups
        unsigned = np.full((tiles * TILE, width), 128, dtype=np.uint8)  # padding: vh = 0
        self.sq = np.empty(n, dtype=np.float64)
        self.dvmax = self.vmax = 0.0
        for start in range(0, n, _CHUNK):
            v64 = vectors[start:start + _CHUNK].astype(np.float64)
            scaled = v64 / self.scale
            vh = np.clip(np.rint(scaled), -127, 127)
            self.dvmax = max(self.dvmax, float(np.sqrt(((scaled - vh) ** 2).sum(axis=1)).max()))
            self.vmax = max(self.vmax, float(np.sqrt((scaled ** 2).sum(axis=1)).max()))
            self.sq[start:start + len(v64)] = (v64 * v64).sum(axis=1)
            unsigned[start:start + len(v64), :d] = (vh + 128).astype(np.uint8)
        self.sqmax = float(self.sq.max())
        # tile layout: [tile][group][word in tile][4 bytes]
        self.packed = np.ascontiguousarray(
            unsigned.reshape(tiles, TILE, self.groups, 4).transpose(0, 2, 1, 3)).reshape(-1)
        del unsigned
        self.last_checked = None  # exact distances computed per query in the last call (diagnostics)
        self._lock = threading.Lock()
        self._pool = None  # threads for range-split searches, made on first use

    def _prepare(self, points: np.ndarray):
        b = len(points)
        nq = -(-b // QGROUP) * QGROUP
        z = np.zeros((nq, self.d), dtype=np.float64)
        z[:b] = points
        zs = z * self.scale
        top = float(np.abs(zs).max())
        sz = top / 127.0 if top > 0 else 1.0
        zh = np.clip(np.rint(zs / sz), -127, 127)
        dz = zs - sz * zh
        zq = np.zeros((nq, 4 * self.groups), dtype=np.int8)
        zq[:, :self.d] = zh.astype(np.int8)
        zz = (z * z).sum(axis=1)
        error = 2.0 * (np.sqrt(((sz * zh) ** 2).sum(axis=1)) * self.dvmax + np.sqrt((dz * dz).sum(axis=1)) * self.vmax)
        # margins for double rounding in E, in e2 - ||z||^2 and in A_v: far above what ~60 roundings can add
        slack = error * (1.0 + 1e-9) + 1e-7 * (1.0 + zz + self.sqmax + 2.0 * np.sqrt(zz * self.sqmax))
        shift = (128 * zh.sum(axis=1)).astype(np.int32)
        w = 2.0 * sz
        # R_v >= -1; clipping it down only admits more words (the proof needs R_v <= sq_v / W - 1); with
        # R_v <= 2^28 a word can only be skipped when tau_q is below its cap, where tau_q is the formula's value
        r = np.full(self.tiles * TILE, _R_PAD, dtype=np.int32)  # per call: calls from several threads may overlap
        r[:self.n] = np.clip(np.floor(self.sq / w) - 1.0, -_R_CLIP, _R_CLIP)
        tau = np.full(nq, TAU_CAP, dtype=np.int32)
        tau[b:] = -TAU_CAP  # padding queries select nothing
        return nq, zq, z, zz, slack, shift, w, tau, r

    def query(self, points: np.ndarray, threads: int = 1) -> np.ndarray:
        """Id of the nearest row for every point (the float64 brute force's answer; k = 1 below)."""
        return self._search(points, 1, threads)[:, 0]

    def query_two(self, points: np.ndarray, threads: int = 1) -> np.ndarray:
        """(B x 2) ids of the two nearest rows, nearest first (k = 2)."""
        return self._search(points, 2, threads)

    def _ranges(self, threads: int) -> list:
        per = -(-self.tiles // max(1, int(threads)))
        return [(t, min(self.tiles, t + per)) for t in range(0, self.tiles, per)]

    def _search(self, points: np.ndarray, k: int, threads: int) -> np.ndarray:
        """Best k ids per point. With several threads the tiles are split into contiguous ranges, each
        searched with its own running best (the proof holds per range: a word is skipped only when k
        words of its own range are strictly nearer), then merged by (distance, id)."""
        points = np.asarray(points, dtype=np.float32)
        if points.ndim != 2 or points.shape[1] != self.d:
            raise ValueError(f"points must be (B x {self.d})")
        b = len(points)
        if b == 0:
            return np.empty((0, k), dtype=np.int64)
        if not np.isfinite(points).all():
            raise ValueError("points must be finite")
        nq, zq, z, zz, slack, shift, w, tau0, r = self._prepare(points)
        ranges = self._ranges(threads)
        kernel = 1 if self.kernel == "vnni" else 0

        def run(bounds):
            tau = tau0.copy()
            best = np.full((nq, 2), np.inf, dtype=np.float64)
            arg = np.full((nq, 2), -1, dtype=np.int64)
            checked = np.zeros(nq, dtype=np.int64)
            _top2.top2(self.packed, r, self.vectors, zq, z, zz, slack, shift, w, tau, best, arg, checked,
                       self.n, self.d, self.groups, nq, bounds[0], bounds[1], kernel, k)
            return best, arg, checked

        if len(ranges) == 1:
            best, arg, checked = run(ranges[0])
        else:
            with self._lock:
                if self._pool is None or self._pool._max_workers != len(ranges):
                    self._pool = ThreadPoolExecutor(max_workers=len(ranges), thread_name_prefix="textdp-int8")
                pool = self._pool
            parts = list(pool.map(run, ranges))
            best = np.concatenate([p[0] for p in parts], axis=1)
            arg = np.concatenate([p[1] for p in parts], axis=1)
            checked = sum(p[2] for p in parts)
            order = np.lexsort((np.where(arg < 0, np.iinfo(np.int64).max, arg), best), axis=1)[:, :2]
            arg = np.take_along_axis(arg, order, axis=1)
        self.last_checked = checked[:b]
        return arg[:b, :k]
