"""Reference simulations of the noise-then-search mechanisms, for the conformance audit only.

These are deliberately NOT the production code paths: plain numpy float64, written from the mechanisms'
declared parameters (``parameters()``) and the definitions in their module docstrings, with an exact
brute-force search in float64. ``textdp.audit.conformance`` compares the releases of the installed
pipeline (the mechanism object's ``privatize_ids``, which runs the float32/int8/BLAS search, the
mechanism's own noise sampler and its own selection rule) with draws from these, by a two-sample test.
A mechanism declares its simulation through ``Mechanism.reference_simulation()`` (Madlib, Mahalanobis,
Vickrey); each returns ``release(ids, rng) -> ids`` built here.

What they share with the production code: numpy's generators (``standard_normal``, ``gamma``, ``random``)
and the artifact's vectors. Nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CHUNK = 1024  # noisy points per brute-force block (CHUNK x |V| float64 distances in memory)


def sphere_gamma_noise(count: int, dim: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Density proportional to exp(-epsilon ||z||) on R^dim: direction uniform on the sphere (a normalised
    Gaussian), radius Gamma(shape=dim, scale=1/epsilon)."""
    gauss = rng.standard_normal((count, dim))
    direction = gauss / np.sqrt(np.sum(gauss * gauss, axis=1))[:, None]
    radius = rng.gamma(dim, 1.0 / float(epsilon), size=count)
    return direction * radius[:, None]


def regularized_root(vectors: np.ndarray, lam: float) -> np.ndarray:
    """S^{1/2} for S = lam * Sigma / (tr(Sigma) / n) + (1 - lam) * I, Sigma the population covariance of the
    rows (np.cov, float64), by an eigendecomposition."""
    data = np.asarray(vectors, dtype=np.float64)
    sigma = np.atleast_2d(np.cov(data, rowvar=False, bias=True))
    dim = sigma.shape[0]
    matrix = lam * sigma / (np.trace(sigma) / dim) + (1.0 - lam) * np.eye(dim)
    values, vecs = np.linalg.eigh(matrix)
    return (vecs * np.sqrt(np.clip(values, 0.0, None))) @ vecs.T


def nearest_two(vectors64: np.ndarray, sqnorms: np.ndarray, points: np.ndarray):
    """(ids of the nearest and second nearest rows, their distances) for every point: float64 brute force."""
    count = len(points)
    first, second = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    d1, d2 = np.empty(count), np.empty(count)
    for start in range(0, count, CHUNK):
        block = points[start:start + CHUNK]
        sq = sqnorms[None, :] - 2.0 * (block @ vectors64.T) + np.sum(block * block, axis=1)[:, None]
        two = np.argpartition(sq, 1, axis=1)[:, :2]
        rows = np.arange(len(block))[:, None]
        pair_sq = sq[rows, two]
        swap = pair_sq[:, 1] < pair_sq[:, 0]
        two[swap] = two[swap][:, ::-1]
        # recompute the two distances directly (no cancellation) for the selection rule
        diff = vectors64[two] - block[:, None, :]
        dist = np.sqrt(np.einsum("bkn,bkn->bk", diff, diff))
        first[start:start + len(block)], second[start:start + len(block)] = two[:, 0], two[:, 1]
        d1[start:start + len(block)], d2[start:start + len(block)] = dist[:, 0], dist[:, 1]
    return first, second, d1, d2


def noise_then_nearest(vectors, epsilon: float, root: np.ndarray | None = None,
                       vickrey_t: float | None = None) -> Callable:
    """``release(ids, rng)``: phi(w) + l * (S^{1/2}) v, then the nearest word (``vickrey_t`` None) or the
    Vickrey rule between the two nearest: the nearest with probability (1 - t) d2 / (t d1 + (1 - t) d2)."""
    vectors64 = np.asarray(vectors, dtype=np.float64)
    sqnorms = np.sum(vectors64 * vectors64, axis=1)
    dim = vectors64.shape[1]

    def release(ids, rng: np.random.Generator) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        noise = sphere_gamma_noise(len(ids), dim, epsilon, rng)
        if root is not None:
            noise = noise @ root
        first, second, d1, d2 = nearest_two(vectors64, sqnorms, vectors64[ids] + noise)
        if vickrey_t is None:
            return first
        t = float(vickrey_t)
        denominator = t * d1 + (1.0 - t) * d2
        p_first = np.ones(len(ids))
        positive = denominator > 0
        p_first[positive] = (1.0 - t) * d2[positive] / denominator[positive]
        return np.where(rng.random(len(ids)) < p_first, first, second)

    return release
