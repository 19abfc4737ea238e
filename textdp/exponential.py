"""Exact exponential mechanism over a large output set, sampled from a K-nearest table.

Target. For an input word x and an allowed output set A (the whole vocabulary, or a subset),
P(y | x) = f(y) / Z with f(y) = exp(-epsilon d(x, y) / 2) for y in A and 0 elsewhere,
Z = sum_{y in A} f(y): SanText's distribution (Yue et al. 2021, the exponential mechanism with
utility -d_euc), and TEM's closed form with gamma = infinity. Z needs every distance, which is what
makes a direct sampler cost one pass over the vocabulary per token.

Exact rejection sampling, as in textdp.tem (the same envelope with TEM's floor c = 0). T(x), the K
nearest words of x from the exact neighbour table, sorted, d_K the K-th distance. Every word
outside T(x) is at least d_K away, so f(y) <= u = exp(-epsilon d_K (1 - 1e-5) / 2) there (the factor
covers the float32 storage of d_K). The envelope g = f on T(x) and g = u on every allowed word has
total E = M_T + |A| u, M_T = sum_{T(x) and A} f, known exactly. One round draws U uniform on
[0, E): if U < M_T, the table word whose cumulative weight interval holds U (probability f(y)/E);
otherwise a uniform allowed word y, accepted iff y is not in T(x) and V u < f(y) for a uniform V
(probability (|A| u / E)(1/|A|)(f(y)/u) = f(y)/E). Every round returns y with probability f(y)/E or
nothing, so the first accepted round has law f/Z exactly; the number of rounds is geometric with
mean E/Z. Only rejected-or-accepted uniform rounds compute a distance (float64, from the vectors).

Work is vectorised over the batch: every pending token gets a block of rounds (4 at first, four
times more on each retry, at most 256), the first accepted round per token is kept (discarding the
later ones does not bias anything), and the rounds held in memory at once are capped.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

FLOAT32_DISTANCE_SLACK = 1e-5  # d_K is stored in float32 (relative error < 1e-7): u is taken at d_K (1 - 1e-5)


class TableExponentialSampler:
    """P(y | x) ~ exp(-epsilon d(x, y) / 2) over the allowed words, exactly, from a Euclidean neighbour table."""

    FIRST_ROUNDS = 4
    MAX_ROUNDS_PER_BLOCK = 256
    MAX_ROUNDS_TOTAL = 1 << 17

    def __init__(self, vectors: np.ndarray, table_ids: np.ndarray, table_distances: np.ndarray, epsilon: float,
                 allowed: Optional[np.ndarray] = None):
        if not epsilon > 0:
            raise ValueError("epsilon must be > 0")
        self.vectors = np.asarray(vectors)
        self.table_ids = np.asarray(table_ids)
        self.table_distances = np.asarray(table_distances)
        self.epsilon = float(epsilon)
        self.vocab_size = len(self.vectors)
        self.k = self.table_ids.shape[1]
        if allowed is None:
            self.allowed_mask = None
            self.allowed_ids = None
            self.allowed_count = self.vocab_size
        else:
            mask = np.zeros(self.vocab_size, dtype=bool)
            mask[np.asarray(allowed, dtype=np.int64)] = True
            if not mask.any():
                raise ValueError("the allowed output set is empty")
            self.allowed_mask = mask
            self.allowed_ids = np.flatnonzero(mask)
            self.allowed_count = len(self.allowed_ids)
        self.rounds = 0  # rounds drawn, summed over calls (for benchmarks)
        self.distances_computed = 0

    def _uniform_allowed(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.allowed_ids is None:
            return rng.integers(0, self.vocab_size, size=size)
        return self.allowed_ids[rng.integers(0, self.allowed_count, size=size)]

    def sample(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One exact draw per input id."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        if not len(ids):
            return out
        half = 0.5 * self.epsilon
        table_ids = np.take(self.table_ids, ids, axis=0).astype(np.int64)
        table_d = np.take(self.table_distances, ids, axis=0).astype(np.float64)
        table_d[:, 0] = 0.0  # the word itself
        weights = np.exp(-half * table_d)
        if self.allowed_mask is not None:
            weights *= self.allowed_mask[table_ids]
        cumulative = np.cumsum(weights, axis=1)
        mass_table = cumulative[:, -1]
        if self.k >= self.vocab_size:  # the table holds every word: nothing outside it
            cap = np.zeros(len(ids))
        else:
            cap = np.exp(-half * table_d[:, -1] * (1.0 - FLOAT32_DISTANCE_SLACK))
        envelope = mass_table + self.allowed_count * cap
        if not (envelope > 0).all():
            raise ValueError("an input has no allowed output within reach (empty envelope)")
        query = np.take(self.vectors, ids, axis=0).astype(np.float64)

        pending = np.arange(len(ids))
        rounds = np.full(len(ids), self.FIRST_ROUNDS, dtype=np.int64)
        while len(pending):
            fits = max(1, int(np.searchsorted(np.cumsum(rounds[pending]), self.MAX_ROUNDS_TOTAL, side="right")))
            waiting, active = pending[fits:], pending[:fits]
            token = np.repeat(active, rounds[active])  # grouped by token, in order
            self.rounds += len(token)
            draw = rng.random(len(token)) * envelope[token]
            accepted = draw < mass_table[token]
            chosen = np.full(len(token), -1, dtype=np.int64)
            outside = np.flatnonzero(~accepted)
            if len(outside):
                t = token[outside]
                candidate = self._uniform_allowed(rng, len(outside))
                diff = np.take(self.vectors, candidate, axis=0).astype(np.float64) - query[t]
                dist = np.sqrt(np.einsum("ij,ij->i", diff, diff))
                self.distances_computed += len(outside)
                ok = rng.random(len(outside)) * cap[t] < np.exp(-half * dist)
                member = (table_ids[t] == candidate[:, None]).any(axis=1)
                ok &= ~member
                accepted[outside] = ok
                chosen[outside] = candidate
            hits = np.flatnonzero(accepted)
            hit_tokens = token[hits]
            leading = np.ones(len(hits), dtype=bool)
            leading[1:] = hit_tokens[1:] != hit_tokens[:-1]
            first, first_tokens = hits[leading], hit_tokens[leading]
            from_table = first[chosen[first] < 0]
            if len(from_table):
                tt = token[from_table]
                column = (cumulative[tt] <= draw[from_table, None]).sum(axis=1)
                chosen[from_table] = table_ids[tt, np.minimum(column, self.k - 1)]
            out[first_tokens] = chosen[first]
            done = np.zeros(len(ids), dtype=bool)
            done[first_tokens] = True
            retry = active[~done[active]]
            rounds[retry] = np.minimum(rounds[retry] * 4, self.MAX_ROUNDS_PER_BLOCK)
            pending = np.sort(np.concatenate([retry, waiting]))
        return out


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
