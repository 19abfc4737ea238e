"""The Truncated Exponential Mechanism (TEM) of Carvalho et al. (tem-carvalho.txt, Alg. 2/3).

Closed form of its output distribution and the choice of gamma (Thm. 4.2). The sampler that
uses the pre-computed K-nearest table follows below in this module.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

DEFAULT_BETA = 0.001


def gamma_from_beta(epsilon: float, vocab_size: int, beta: float = DEFAULT_BETA) -> float:
    """Truncation threshold of Thm. 4.2: gamma = (2/epsilon) ln((1-beta)(|W|-1)/beta).

    With this gamma, TEM releases a word within distance gamma of the input with probability at
    least 1 - beta (the smallest gamma for which the theorem's bound holds).
    """
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")
    if not 0 < beta < 1:
        raise ValueError("beta must be in (0, 1)")
    if vocab_size < 2:
        raise ValueError("the vocabulary must hold at least 2 words")
    return (2.0 / epsilon) * math.log((1.0 - beta) * (vocab_size - 1) / beta)


def output_distribution(distances_to_all_words: np.ndarray, epsilon: float, gamma: float,
                        self_id: Optional[int] = None) -> np.ndarray:
    """TEM's exact output distribution for one input word: P(i) ~ exp(-epsilon * min(d(w,i), gamma) / 2).

    ``distances_to_all_words`` holds d(w, i) for every vocabulary word i (1-D), or one such row
    per input word (2-D, normalised row by row). ``self_id`` (an int, or one per row for 2-D
    input) is the input word's own id: its distance is forced to exactly 0, because distances
    recomputed in float32 put a word slightly away from itself. Computed in float64 with the
    largest weight factored out, so no weight underflows to an all-zero row.
    """
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")
    if not gamma >= 0:
        raise ValueError("gamma must be >= 0")
    dist = np.array(distances_to_all_words, dtype=np.float64, copy=True)
    if dist.ndim not in (1, 2):
        raise ValueError("distances must be 1-D (one word) or 2-D (one row per word)")
    if self_id is not None:
        if dist.ndim == 1:
            dist[int(self_id)] = 0.0
        else:
            dist[np.arange(len(dist)), np.asarray(self_id, dtype=np.int64)] = 0.0
    if np.isnan(dist).any() or (dist < 0).any():
        raise ValueError("distances must be non-negative numbers")
    log_weight = -0.5 * epsilon * np.minimum(dist, gamma)
    log_weight -= log_weight.max(axis=-1, keepdims=True)
    weight = np.exp(log_weight)
    return weight / weight.sum(axis=-1, keepdims=True)
