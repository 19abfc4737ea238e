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


# --- the sampler -------------------------------------------------------------------------------


class TEM:
    """TEM over a vocabulary artifact with a K-nearest neighbour table.

    Target. For input w (id), with d(w, w) = 0, the table's distances for the K nearest words
    T(w) and distances computed on the fly (float64, the table's metric) for every other word,
    P(i) = f(i) / Z with f(i) = exp(-epsilon * min(d(w, i), gamma) / 2). This is exactly the
    output distribution of the paper's Alg. 2: an item of L(w) wins with probability proportional
    to exp(epsilon/2 * -d), and the bottom element (score -gamma + 2 ln|W \\ L(w)| / epsilon) wins
    with probability proportional to |W \\ L(w)| exp(-epsilon gamma / 2), spread uniformly
    (Gumbel-max = exponential mechanism; paper Sec. 4, "equivalent to Algorithm 2").

    Exact sampling from the K-nearest table (rejection sampling). Let d_K be the K-th table
    distance of w, c = exp(-epsilon gamma / 2) and u = exp(-epsilon min(d_K, gamma) / 2). Every
    word outside the table is at least as far as d_K (the table is exact), so for it
    c <= f(i) <= u. Write f(i) = c + e(i) with 0 <= e(i) <= u - c. The envelope
        g(i) = f(i) on T(w);  g(i) = c + (u - c) for every word i of the vocabulary
    dominates the target pointwise (the second part also covers table words, whose outside
    contribution is rejected), and its total E = M_T + N c + N (u - c), with M_T = sum_T f, is
    known exactly. One round draws U uniform on [0, E):
      * U < M_T: the table word j with cumulative weight just above U (prob. f(j) / E); accepted;
      * M_T <= U < M_T + N c: a uniform word i; accepted iff i is not in T(w) (prob. c / E each);
      * otherwise: a uniform word i; accepted iff i is not in T(w) and a uniform V satisfies
        V (u - c) < f(i) - c (prob. (u - c)/N * N * e(i)/(u - c) / E = e(i) / E each).
    So each round returns word i with probability f(i) / E and fails otherwise; rounds are
    independent, and the first accepted round is distributed exactly as f / Z. The number of
    rounds is geometric with mean E / Z <= E / M_T, and only the third kind of round computes a
    distance (one gathered row). When d_K >= gamma, u = c and every round is accepted unless it
    lands on a table word through the uniform part (probability < K / N). Nothing depends on
    epsilon or gamma except a handful of exp() per token, so one table serves every epsilon.

    Work is vectorised over the batch: each token gets a block of independent rounds at once
    (a few at first, four times more for each retry, capped), the first accepted round per token
    is taken, and tokens with none repeat with a fresh block. Discarding rounds after the first acceptance does not bias
    anything, because the choice of round depends only on earlier rounds' outcomes.

    Exactness holds up to float64 arithmetic; the table distances are float32 (they are the
    metric's values as stored in the artifact). ``envelope_violations`` counts outside words whose
    recomputed distance fell below d_K by more than float32 rounding (an inexact table); it stays 0.
    """

    name = "tem"
    FIRST_ROUNDS = 4
    MAX_ROUNDS_PER_BLOCK = 256
    MAX_ROUNDS_TOTAL = 1 << 17  # rounds held in memory at once (about 50 MB of float64 rows)

    def __init__(self, artifact, epsilon: float, gamma: Optional[float] = None,
                 beta: float = DEFAULT_BETA, batch: int = 8192):
        from textdp.neighbours import NeighbourTable, metric_points  # pylint: disable=import-outside-toplevel

        if not epsilon > 0:
            raise ValueError("epsilon must be > 0")
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.vocab_size = int(artifact.vocab_size)
        if gamma is None:
            self.beta: Optional[float] = float(beta)
            self.gamma = gamma_from_beta(self.epsilon, self.vocab_size, self.beta)
        else:
            if not gamma >= 0:
                raise ValueError("gamma must be >= 0")
            self.beta = None
            self.gamma = float(gamma)
        self.table = NeighbourTable.from_artifact(artifact)
        self.metric = self.table.metric
        self.k = self.table.k
        self.batch = int(batch)
        self._metric_points = metric_points
        self.envelope_violations = 0

    # distances on the fly, in the table's metric -------------------------------------------------
    def _points(self, ids: np.ndarray) -> np.ndarray:
        """The metric's points for ``ids``, computed exactly as the neighbour job computed them
        (``metric_points`` row by row, float32), then widened to float64 for the differences."""
        rows = self.artifact.vectors[ids]
        if self.metric != "euclidean":
            rows = self._metric_points(rows, self.metric)
        return np.asarray(rows, dtype=np.float64)

    def distances(self, ids: np.ndarray, others: np.ndarray) -> np.ndarray:
        """float64 metric distance between ``ids[i]`` and ``others[i]`` (elementwise)."""
        diff = self._points(others) - self._points(ids)
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    # sampling ------------------------------------------------------------------------------------
    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id (independent draws)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError("word ids out of range for this artifact")
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            out[start:start + len(chunk)] = self._sample_batch(chunk, rng)
        return out

    def _sample_batch(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        half = 0.5 * self.epsilon
        n = self.vocab_size
        table_ids = np.asarray(self.table.ids[ids])
        table_d = np.asarray(self.table.distances[ids], dtype=np.float64)
        table_d[:, 0] = 0.0  # the word itself (stored as exactly 0 already)
        weights = np.exp(-half * np.minimum(table_d, self.gamma))
        cumulative = np.cumsum(weights, axis=1)
        mass_table = cumulative[:, -1]
        d_k = table_d[:, -1]
        floor = math.exp(-half * self.gamma)
        cap = np.exp(-half * np.minimum(d_k, self.gamma))  # u
        excess_cap = np.maximum(cap - floor, 0.0)
        if self.k >= n:  # the table is the whole vocabulary: nothing outside
            floor_mass = np.zeros(len(ids))
            excess_cap[:] = 0.0
        else:
            floor_mass = np.full(len(ids), n * floor)
        envelope = mass_table + floor_mass + n * excess_cap
        # tolerance for float32 storage of d_K when checking the envelope
        slack = 4.0 * np.finfo(np.float32).eps * np.maximum(d_k, 1.0)

        out = np.full(len(ids), -1, dtype=np.int64)
        active = np.arange(len(ids))
        query_points = self._points(ids)  # gathered once per batch, reused by every round
        # Rounds per token and block: a few first (most tokens finish at once), then four times as
        # many for the tokens still waiting, up to the cap: total work stays within a small factor
        # of the rounds actually needed, E / Z, which is unknown (Z is what we cannot afford).
        rounds_hint = np.minimum(np.ceil(envelope / mass_table), self.FIRST_ROUNDS).astype(np.int64)
        while len(active):
            # bound the memory of one block of rounds; tokens that do not fit wait their turn
            fits = max(1, int(np.searchsorted(np.cumsum(rounds_hint[active]), self.MAX_ROUNDS_TOTAL, side="right")))
            waiting, active = active[fits:], active[:fits]
            token = np.repeat(active, rounds_hint[active])  # token index of every round, grouped by token
            draw = rng.random(len(token)) * envelope[token]
            in_table = draw < mass_table[token]
            outside = ~in_table
            accepted = in_table.copy()
            chosen = np.full(len(token), -1, dtype=np.int64)
            if outside.any():
                rounds = np.flatnonzero(outside)
                t = token[rounds]
                candidate = rng.integers(0, n, size=len(rounds))
                diff = self._points(candidate)
                diff -= query_points[t]
                dist = np.sqrt(np.einsum("ij,ij->i", diff, diff))
                is_excess = draw[rounds] >= mass_table[t] + floor_mass[t]
                target = np.exp(-half * np.minimum(dist, self.gamma))
                ok = np.ones(len(rounds), dtype=bool)
                if is_excess.any():
                    e = np.flatnonzero(is_excess)
                    cap_e = excess_cap[t[e]]
                    ok[e] = rng.random(len(e)) * cap_e < target[e] - floor
                # table membership: only words no farther than d_K can be table words
                near = np.flatnonzero(ok & (dist <= d_k[t] + slack[t]))
                if len(near):
                    member = (table_ids[t[near]] == candidate[near, None]).any(axis=1)
                    ok[near[member]] = False
                    strays = near[~member]
                    if len(strays):  # outside word closer than d_K: the table is not exact
                        self.envelope_violations += int((dist[strays] < d_k[t[strays]] - slack[t[strays]]).sum())
                accepted[rounds] = ok
                chosen[rounds] = candidate
            hits = np.flatnonzero(accepted)
            hit_tokens = token[hits]  # ascending, since rounds are grouped by token in order
            leading = np.ones(len(hits), dtype=bool)
            leading[1:] = hit_tokens[1:] != hit_tokens[:-1]
            first, first_tokens = hits[leading], hit_tokens[leading]
            # table rounds: find the word whose cumulative weight interval holds the draw
            from_table = first[in_table[first]]
            if len(from_table):
                tt = token[from_table]
                column = (cumulative[tt] <= draw[from_table, None]).sum(axis=1)
                chosen[from_table] = table_ids[tt, np.minimum(column, self.k - 1)]
            out[first_tokens] = chosen[first]
            done = np.zeros(len(ids), dtype=bool)
            done[first_tokens] = True
            retry = active[~done[active]]
            rounds_hint[retry] = np.minimum(rounds_hint[retry] * 4, self.MAX_ROUNDS_PER_BLOCK)
            active = np.sort(np.concatenate([retry, waiting]))
        return out

    # reporting -------------------------------------------------------------------------------------
    def parameters(self) -> dict:
        params = {"mechanism": self.name, "epsilon": self.epsilon, "gamma": self.gamma,
                  "metric": self.metric, "neighbour_k": self.k}
        if self.beta is not None:
            params["beta"] = self.beta
            params["gamma_source"] = "Thm. 4.2 of Carvalho et al. from beta"
        else:
            params["gamma_source"] = "given"
        return params

    def privacy_statement(self) -> dict:
        """What holds for a released token and record (Carvalho et al., Thm. 4.1 / Lemma 4.1)."""
        e, g = self.epsilon, self.gamma
        metric = "Euclidean distance" if self.metric == "euclidean" else "angular (chord) distance"
        return {
            "notion": f"metric differential privacy (d_chi-privacy) on word embeddings, {metric}",
            "per_token": f"for any words w, w' and any output set S: P[M(w) in S] <= exp({e:g} * d(w, w')) * P[M(w') in S]",
            "per_token_cap": (
                f"the scores are clipped at gamma = {g:g}, so any two words are also bounded by "
                f"exp({e:g} * {g:g}) = exp({e * g:g}): P[M(w) in S] <= exp({e:g} * min(d(w, w'), {g:g})) * P[M(w') in S]"),
            "per_record": f"a record with words w_1..w_l versus w_1'..w_l': exp({e:g} * sum_i min(d(w_i, w_i'), {g:g}))",
            "utility": (f"with probability >= 1 - beta a released word is within gamma of the input (Thm. 4.2, beta={self.beta:g})"
                        if self.beta is not None else "gamma was given explicitly"),
            "sampling": "exact sampling of the closed-form output distribution from the K-nearest table (rejection sampling)",
        }
