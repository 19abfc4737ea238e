"""The Truncated Exponential Mechanism (TEM) of Carvalho et al. (tem-carvalho.txt, Alg. 2/3).

Closed form of its output distribution and the choice of gamma (Thm. 4.2). The sampler that
uses the pre-computed K-nearest table follows below in this module.
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import numpy as np

from textdp.mechanisms.base import Mechanism, Parameter

DEFAULT_BETA = 0.001

GAMMA = Parameter("gamma", float, None, low=0.0, example=2.5,
                  help="truncation radius gamma >= 0; default: from --beta (Thm. 4.2 of Carvalho et al.)")
BETA = Parameter("beta", float, DEFAULT_BETA, low=0.0, high=1.0, low_open=True, high_open=True, example=0.01,
                 help="probability mass allowed outside the gamma-ball when gamma is derived, in (0, 1); default 0.001")


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


class TEM(Mechanism):
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
    is taken, and tokens with none repeat with a fresh block. Discarding the rounds after the first
    acceptance does not bias anything: which round is used depends only on earlier rounds.

    Frequent words ("the", "and", ...) dominate real text and, at middle epsilons, need the most
    rounds (their tables are dense, so u is loose). Once a word has cost more on-the-fly distances
    than ``DENSE_AFTER_CANDIDATES`` (about the price of one pass over the vocabulary), it gets a
    dense row, built at run time for this epsilon and gamma (nothing is stored): envelope weights
    g(i) = exp(-epsilon/2 * min(d32(i) * (1 - 1e-5), gamma)) >= f(i) from float32 distances (whose
    relative error is far below 1e-5), with g = f on the table words, and their cumulative sum.
    A draw proposes i with probability g(i) / sum(g) by binary search and accepts it with
    probability f(i) / g(i) (f from the float32 distance when the decision is clear, else from
    float64): exact rejection sampling again, with acceptance 1 - O(1e-5). At most
    ``DENSE_MAX_WORDS`` rows are kept (16 bytes per vocabulary word each: 6.4 MB for 400k words).

    Candidate distances are computed in float32 and a decision is taken from them only when the
    float32 rounding bound cannot change it; otherwise the float64 distance decides. Exactness
    holds up to float64 arithmetic; the table distances are float32 (they are the
    metric's values as stored in the artifact). ``envelope_violations`` counts outside words whose
    recomputed distance fell below d_K by more than float32 rounding (an inexact table); it stays 0.
    """

    name = "tem"
    DESCRIPTION = "truncated exponential mechanism"
    PARAMETERS = (GAMMA, BETA)
    NEEDS_NEIGHBOUR_TABLE = True
    EXACT_LAW = True
    AUDIT_KERNEL = True
    BOUND_TEXT = "epsilon * min(d(w, w'), gamma) (Carvalho et al., Thm. 4.1; the scores are clipped at gamma)"
    FIRST_ROUNDS = 4
    MAX_ROUNDS_PER_BLOCK = 256
    FLOAT32_DISTANCE_ERROR = 1e-5  # relative bound on |float32 - float64| distance over 50-300 dimensions
    MAX_ROUNDS_TOTAL = 1 << 17  # rounds held in memory at once (about 50 MB of float64 rows)
    DENSE_MAX_WORDS = 16  # frequent input words given a dense row (16 bytes x vocabulary each)
    DENSE_AFTER_CANDIDATES = 1_000_000  # about the cost of building one dense row, in candidates

    TITLE = "TEM"

    @classmethod
    def exact_label(cls) -> str:
        return f"exact {cls.TITLE} values"

    def __init__(self, artifact, epsilon: float, gamma: Optional[float] = None,
                 beta: float = DEFAULT_BETA, batch: int = 8192):
        from textdp.artifact.neighbours import NeighbourTable, metric_points  # pylint: disable=import-outside-toplevel

        type(self).check_parameters(epsilon, artifact, gamma=gamma, beta=beta)
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
        # plain ndarray views of the memory maps: fancy indexing without the memmap subclass overhead
        self._vectors = np.asarray(artifact.vectors)
        self._table_ids = np.asarray(self.table.ids)
        self._table_distances = np.asarray(self.table.distances)
        self._dense_lock = threading.Lock()
        self._dense_rows: dict = {}
        self._spent = np.zeros(self.vocab_size)
        self.envelope_violations = 0

    # distances on the fly, in the table's metric -------------------------------------------------
    def _points32(self, ids: np.ndarray) -> np.ndarray:
        """The metric's float32 points for ``ids``, bit for bit as the neighbour job computed them
        (``metric_points`` works row by row)."""
        rows = np.take(self._vectors, ids, axis=0)
        if self.metric != "euclidean":
            rows = self._metric_points(rows, self.metric)
        return rows

    def distances(self, ids: np.ndarray, others: np.ndarray) -> np.ndarray:
        """float64 metric distance between ``ids[i]`` and ``others[i]`` (elementwise): the distance
        TEM's target uses for words outside the table."""
        diff = self._points32(others).astype(np.float64) - self._points32(ids).astype(np.float64)
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
        out = np.empty(len(ids), dtype=np.int64)
        cached = self._dense_rows  # dict replaced, never mutated in place: safe to read unlocked
        dense = np.isin(ids, np.fromiter(cached, dtype=np.int64, count=len(cached))) if cached else np.zeros(len(ids), bool)
        if dense.any():
            out[dense] = self._sample_dense(ids[dense], cached, rng)
        rest = ~dense
        if rest.any():
            out[rest], candidates = self._sample_rejection(ids[rest], rng)
            self._account(ids[rest], candidates)
        return out

    # dense rows for frequent words ---------------------------------------------------------------
    def _account(self, ids: np.ndarray, candidates: np.ndarray) -> None:
        """Add up on-the-fly distances per input word; give a word a dense row once it has cost more
        than building one would (``DENSE_AFTER_CANDIDATES``), while there is room for it."""
        if self.DENSE_MAX_WORDS <= 0:
            return
        words, inverse = np.unique(ids, return_inverse=True)
        spent = np.bincount(inverse, weights=candidates, minlength=len(words))
        with self._dense_lock:
            self._spent[words] += spent
            due = words[self._spent[words] > self.DENSE_AFTER_CANDIDATES]
            due = [int(w) for w in due if int(w) not in self._dense_rows]
            room = self.DENSE_MAX_WORDS - len(self._dense_rows)
            for word in sorted(due, key=lambda w: -self._spent[w])[:max(room, 0)]:
                rows = dict(self._dense_rows)
                rows[word] = self._build_dense_row(word)
                self._dense_rows = rows

    def _build_dense_row(self, word: int):
        """Envelope weights g >= f over the whole vocabulary for input ``word`` and their cumulative sum.

        g(i) = exp(-epsilon/2 min(d32(i) (1 - FLOAT32_DISTANCE_ERROR), gamma)) from float32 distances,
        which bounds f(i) from above; table words get their exact weight f(i).
        """
        half = 0.5 * self.epsilon
        query = self._points32(np.array([word]))[0]
        d32 = np.empty(self.vocab_size, dtype=np.float32)
        for start in range(0, self.vocab_size, 32768):
            rows = self._vectors[start:start + 32768]
            if self.metric != "euclidean":
                rows = self._metric_points(rows, self.metric)
            diff = rows - query
            d32[start:start + len(diff)] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        lower = np.maximum(d32.astype(np.float64) * (1.0 - self.FLOAT32_DISTANCE_ERROR), 0.0)
        envelope = np.exp(-half * np.minimum(lower, self.gamma))
        table_ids = np.array(self._table_ids[word], dtype=np.int64)
        table_d = self._table_distances[word].astype(np.float64)
        table_d[0] = 0.0
        envelope[table_ids] = np.exp(-half * np.minimum(table_d, self.gamma))
        return np.cumsum(envelope), envelope, table_ids

    def _sample_dense(self, ids: np.ndarray, cached: dict, rng: np.random.Generator) -> np.ndarray:
        """Exact draws for words with a dense row: propose i ~ g, accept with probability f(i)/g(i).

        Table words have g = f (always accepted); for other words g(i) >= f(i) by the float32 error
        bound, and f(i) is decided from the float32 distance when it is clear, else from float64.
        The acceptance rate is 1 - O(1e-5), so almost every token takes one round.
        """
        half = 0.5 * self.epsilon
        out = np.empty(len(ids), dtype=np.int64)
        pending = np.arange(len(ids))
        while len(pending):
            still = []
            for word in np.unique(ids[pending]):
                cumulative, envelope, table_ids = cached[int(word)]
                pos = pending[ids[pending] == word]
                pick = np.searchsorted(cumulative, rng.random(len(pos)) * cumulative[-1], side="right")
                pick = np.minimum(pick, self.vocab_size - 1)
                threshold = rng.random(len(pos)) * envelope[pick]
                member = (table_ids[None, :] == pick[:, None]).any(axis=1)
                words = np.full(len(pos), word)
                diff = self._points32(pick) - self._points32(words)
                d32 = np.sqrt(np.einsum("ij,ij->i", diff, diff)).astype(np.float64)
                upper = d32 * (1.0 + self.FLOAT32_DISTANCE_ERROR)
                accept = member | (np.exp(-half * np.minimum(upper, self.gamma)) > threshold)
                unsure = np.flatnonzero(~accept)
                if len(unsure):
                    exact = self.distances(words[unsure], pick[unsure])
                    accept[unsure] = np.exp(-half * np.minimum(exact, self.gamma)) > threshold[unsure]
                out[pos[accept]] = pick[accept]
                still.append(pos[~accept])
            pending = np.concatenate(still) if still else pending[:0]
        return out

    # rejection sampling from the K-nearest table ----------------------------------------------------
    def _sample_rejection(self, ids: np.ndarray, rng: np.random.Generator):
        """Exact draws for a batch; also returns the on-the-fly distances spent per token."""
        half = 0.5 * self.epsilon
        n = self.vocab_size
        table_ids = np.take(self._table_ids, ids, axis=0)
        table_d = np.take(self._table_distances, ids, axis=0).astype(np.float64)
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
        spent = np.zeros(len(ids))
        active = np.arange(len(ids))
        query_points = self._points32(ids)  # gathered once per batch, reused by every round
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
                spent += np.bincount(t, minlength=len(ids))
                # float32 distance first; float64 only where its rounding could change a decision
                diff = self._points32(candidate)
                diff -= query_points[t]
                dist = np.sqrt(np.einsum("ij,ij->i", diff, diff)).astype(np.float64)
                error = self.FLOAT32_DISTANCE_ERROR * dist
                is_excess = draw[rounds] >= mass_table[t] + floor_mass[t]
                ok = np.ones(len(rounds), dtype=bool)
                if is_excess.any():
                    e = np.flatnonzero(is_excess)
                    threshold = rng.random(len(e)) * excess_cap[t[e]] + floor
                    surely_in = np.exp(-half * np.minimum(dist[e] + error[e], self.gamma)) > threshold
                    surely_out = np.exp(-half * np.minimum(np.maximum(dist[e] - error[e], 0.0), self.gamma)) <= threshold
                    ok[e] = surely_in
                    unsure = np.flatnonzero(~surely_in & ~surely_out)
                    if len(unsure):
                        eu = e[unsure]
                        exact = self.distances(ids[t[eu]], candidate[eu])
                        ok[eu] = np.exp(-half * np.minimum(exact, self.gamma)) > threshold[unsure]
                # table membership: only words no farther than d_K can be table words
                near = np.flatnonzero(ok & (dist - error <= d_k[t] + slack[t]))
                if len(near):
                    member = (table_ids[t[near]] == candidate[near, None]).any(axis=1)
                    ok[near[member]] = False
                    strays = near[~member]
                    if len(strays):  # outside word closer than d_K: the table is not exact
                        self.envelope_violations += int((dist[strays] + error[strays] < d_k[t[strays]] - slack[t[strays]]).sum())
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
        return out, spent

    # the guarantee's metric ------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """Points whose Euclidean distances are the guarantee's metric (the table's metric): the vectors,
        or their directions for ``angular`` (row-wise, float64)."""
        return self._metric_points(vectors, self.metric, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """Pure local-DP epsilon_0 of one token: epsilon * min(diam, gamma), ``diameter_upper`` in the
        table's metric (of ``metric_points(vectors)``). The scores are clipped at gamma, so no two words
        are more than exp(epsilon gamma) apart whatever their distance (Carvalho et al., Lemma 4.1)."""
        from textdp.mechanisms.madlib import check_diameter  # pylint: disable=import-outside-toplevel

        return self.epsilon * min(check_diameter(diameter_upper), self.gamma)

    # the exact law ---------------------------------------------------------------------------------
    def exact_distribution(self, row: np.ndarray, word_id: int) -> np.ndarray:
        """The closed form: P(i) ~ exp(-epsilon d(w, i) / 2) within gamma, exp(-epsilon gamma / 2) beyond."""
        return output_distribution(row, self.epsilon, self.gamma, self_id=word_id)

    def audit_kernel(self):
        return 0.5 * self.epsilon, float(self.gamma), self.metric

    def calibration_fields(self) -> dict:
        return {"tem_gamma": float(self.gamma)}

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
            "coverage": {"covered": "all"},
        }
