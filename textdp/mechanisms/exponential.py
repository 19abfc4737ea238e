"""The exponential mechanism over a large output set: its exact law by brute force (tests, calibration).

Target. For an input word x and an allowed output set A (the whole vocabulary, or a subset),
P(y | x) = f(y) / Z with f(y) = exp(-epsilon d(x, y) / 2) for y in A and 0 elsewhere,
Z = sum_{y in A} f(y): SanText's distribution (Yue et al. 2021, the exponential mechanism with
utility -d_euc), and TEM's closed form with gamma = infinity. Z needs every distance, which is what
makes a direct sampler cost one pass over the vocabulary per token; the mechanisms draw from it exactly
with the one table sampler (textdp.mechanisms.table_sampler, cap = infinity), whose docstring holds the
exactness argument.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np


def exact_distribution(vectors: np.ndarray, word_id: int, epsilon: float,
                       allowed: Optional[np.ndarray] = None) -> np.ndarray:
    """The target P(. | word) over the vocabulary, by brute force in float64 (tests, calibration)."""
    points = np.asarray(vectors, dtype=np.float64)
    dist = np.sqrt(((points - points[word_id]) ** 2).sum(axis=1))
    dist[word_id] = 0.0
    log_w = -0.5 * epsilon * dist
    if allowed is not None:
        mask = np.zeros(len(points), dtype=bool)
        mask[np.asarray(allowed, dtype=np.int64)] = True
        log_w[~mask] = -math.inf
    log_w -= log_w.max()
    weights = np.exp(log_w)
    return weights / weights.sum()
