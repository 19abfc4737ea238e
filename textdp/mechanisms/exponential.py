"""Exact exponential mechanism over a large output set, sampled from a K-nearest table.

Target. For an input word x and an allowed output set A (the whole vocabulary, or a subset),
P(y | x) = f(y) / Z with f(y) = exp(-epsilon d(x, y) / 2) for y in A and 0 elsewhere,
Z = sum_{y in A} f(y): SanText's distribution (Yue et al. 2021, the exponential mechanism with
utility -d_euc), and TEM's closed form with gamma = infinity. Z needs every distance, which is what
makes a direct sampler cost one pass over the vocabulary per token.

Exact rejection sampling, as in textdp.mechanisms.tem (the same envelope with TEM's floor c = 0). T(x), the K
nearest words of x from the exact neighbour table, sorted, d_K the K-th distance. Every word
outside T(x) is at least d_K away, so f(y) <= u = exp(-epsilon d_K (1 - 1e-5) / 2) there (the factor
covers the float32 storage of d_K). The envelope g = f on T(x) and g = u on every allowed word has
total E = M_T + |A| u, M_T = sum_{T(x) and A} f, known exactly. One round draws U uniform on
[0, E): if U < M_T, the table word whose cumulative weight interval holds U (probability f(y)/E);
otherwise a uniform allowed word y, accepted iff y is not in T(x) and V u < f(y) for a uniform V
(probability (|A| u / E)(1/|A|)(f(y)/u) = f(y)/E). Every round returns y with probability f(y)/E or
nothing, so the first accepted round has law f/Z exactly; the number of rounds is geometric with
mean E/Z. Only rejected-or-accepted uniform rounds compute a distance (float64, from the vectors).
All weights of a token are taken relative to its nearest allowed table word (or to d_K when no
allowed word is in its row: SanText+ for a frequent word), which multiplies f, u and E by one constant
(the same law) and keeps them representable: exp(-epsilon d / 2) alone underflows to 0 for every
allowed word at large epsilon (SanText+ at epsilon ~500), which would leave the envelope empty.

Work is vectorised over the batch: every pending token gets a block of rounds (4 at first, four
times more on each retry, at most 256), the first accepted round per token is kept (discarding the
later ones does not bias anything), and the rounds held in memory at once are capped.

Frequent words in dense regions ("the", "and") have a small d_K, so u is loose and E/Z reaches
hundreds of rounds at middle epsilons (as in TEM). Once a word has cost more on-the-fly distances
than ``DENSE_AFTER_CANDIDATES`` (by default the vocabulary size: the price of one dense row) it gets a dense
row, built at run time for this epsilon (nothing stored): f(y) for every allowed word, from float64
distances (and from the table's own distances for the table words, so the target is the same
function), and its cumulative sum; a draw is then one uniform number and a binary search, exact.
At most ``DENSE_MAX_WORDS`` rows are kept (8 bytes per vocabulary word each).
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import numpy as np

FLOAT32_DISTANCE_SLACK = 1e-5  # d_K is stored in float32 (relative error < 1e-7): u is taken at d_K (1 - 1e-5)


class TableExponentialSampler:
    """P(y | x) ~ exp(-epsilon d(x, y) / 2) over the allowed words, exactly, from a Euclidean neighbour table."""

    FIRST_ROUNDS = 4
    MAX_ROUNDS_PER_BLOCK = 256
    MAX_ROUNDS_TOTAL = 1 << 17
    DENSE_MAX_WORDS = 16
    DENSE_AFTER_CANDIDATES = None  # None: the vocabulary size, i.e. what building one dense row costs
    PASS_WORDS = 16  # words whose exact rows one pass builds together (16 x 8 bytes x vocabulary)
    GIVE_UP_FACTOR = 0.05  # a word's rounds in one call, in units of vocab_size, before it is sampled by a pass (measured on 60 IMDb reviews: 8,000 rounds per word beat 40,000 at epsilon 8)

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
        self.passes = 0  # words sampled by one pass after their rounds ran over budget (for tests, benchmarks)
        self._dense_lock = threading.Lock()
        self._dense_rows: dict = {}  # word id -> cumulative weights over the vocabulary (replaced, never mutated)
        self._spent = np.zeros(self.vocab_size)

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
        cached = self._dense_rows
        dense = np.isin(ids, np.fromiter(cached, dtype=np.int64, count=len(cached))) if cached else np.zeros(len(ids), bool)
        for word in np.unique(ids[dense]):
            at = np.flatnonzero(ids == word)
            out[at] = self._draw_from(cached[int(word)], len(at), rng)
        rest = np.flatnonzero(~dense)
        if len(rest):
            out[rest], spent = self._sample_rejection(ids[rest], rng)
            self._account(ids[rest], spent)
            unfinished = rest[out[rest] < 0]
            if len(unfinished):  # words whose rounds cost more than a pass (see _sample_rejection)
                words = np.unique(ids[unfinished]).tolist()
                for start in range(0, len(words), self.PASS_WORDS):  # a few words per pass: bounded memory
                    group = words[start:start + self.PASS_WORDS]
                    rows = self._dense_rows_of(group)
                    for word, cumulative in zip(group, rows):
                        at = unfinished[ids[unfinished] == word]
                        out[at] = self._draw_from(cumulative, len(at), rng)
                    self._keep(dict(zip(group, rows)))  # later calls draw them directly while there is room
                self.passes += len(words)
        return out

    def _account(self, ids: np.ndarray, spent: np.ndarray) -> None:
        if self.DENSE_MAX_WORDS <= 0:
            return
        words, inverse = np.unique(ids, return_inverse=True)
        per_word = np.bincount(inverse, weights=spent, minlength=len(words))
        with self._dense_lock:
            self._spent[words] += per_word
            after = self.vocab_size if self.DENSE_AFTER_CANDIDATES is None else self.DENSE_AFTER_CANDIDATES
            due = [int(w) for w in words[self._spent[words] > after] if int(w) not in self._dense_rows]
            room = self.DENSE_MAX_WORDS - len(self._dense_rows)
            due = sorted(due, key=lambda w: -self._spent[w])[:max(room, 0)]
        if due:
            self._keep(dict(zip(due, self._dense_rows_of(due))))

    def _keep(self, rows: dict) -> None:
        """Add dense rows while there is room (the dict is replaced, never mutated: readers need no lock)."""
        with self._dense_lock:
            new = [w for w in rows if w not in self._dense_rows][:max(self.DENSE_MAX_WORDS - len(self._dense_rows), 0)]
            if new:
                kept = dict(self._dense_rows)
                kept.update((w, rows[w]) for w in new)
                self._dense_rows = kept

    def _draw_from(self, cumulative: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` exact draws by inverse CDF from cumulative weights over the vocabulary."""
        pick = np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right")
        return np.minimum(pick, self.vocab_size - 1)

    def _dense_rows_of(self, words) -> list:
        """Cumulative f over the vocabulary for each input word (0 weight outside the allowed set), in one
        pass over the vectors for all of them; cached ones are reused.

        Distances are float64: ||v - q||^2 = ||v||^2 - 2 v.q + ||q||^2 on float64 copies of each block
        (one matrix product for all the words; the cancellation error, ~1e-15 relative to the squared
        norms, is far below the float32 rounding of the stored vectors), and the table's own distances
        for the table words, so that the target is the same function as on the table path.
        """
        cached = self._dense_rows
        todo = [w for w in dict.fromkeys(words) if w not in cached]
        rows = {}
        if todo:
            queries = np.asarray(self.vectors[todo], dtype=np.float64)
            query_sq = np.einsum("ij,ij->i", queries, queries)
            squared = np.empty((len(todo), self.vocab_size))
            for start in range(0, self.vocab_size, 32768):
                block = np.asarray(self.vectors[start:start + 32768], dtype=np.float64)
                block_sq = np.einsum("ij,ij->i", block, block)
                squared[:, start:start + len(block)] = block_sq[None, :] - 2.0 * (queries @ block.T) + query_sq[:, None]
            dist = np.sqrt(np.maximum(squared, 0.0, out=squared), out=squared)
            for row, word in enumerate(todo):
                table_ids = np.asarray(self.table_ids[word], dtype=np.int64)
                table_d = np.asarray(self.table_distances[word], dtype=np.float64)
                table_d[0] = 0.0
                d = dist[row]
                d[table_ids] = table_d  # the same distances as the table path uses
                # shifted by the nearest allowed word's distance: the same law, no underflow at large epsilon
                nearest = d.min() if self.allowed_mask is None else d[self.allowed_mask].min()
                weights = np.exp(-0.5 * self.epsilon * (d - nearest))
                if self.allowed_mask is not None:
                    weights *= self.allowed_mask
                rows[word] = np.cumsum(weights)
        return [cached[w] if w in cached else rows[w] for w in words]

    def _sample_rejection(self, ids: np.ndarray, rng: np.random.Generator):
        """Exact draws by rejection from the table envelope; also the on-the-fly distances per token."""
        out = np.empty(len(ids), dtype=np.int64)
        spent = np.zeros(len(ids))
        half = 0.5 * self.epsilon
        table_ids = np.take(self.table_ids, ids, axis=0).astype(np.int64)
        table_d = np.take(self.table_distances, ids, axis=0).astype(np.float64)
        table_d[:, 0] = 0.0  # the word itself
        # Weights relative to a per-token reference distance ``shift`` (the same law f / Z: every weight of
        # the token is multiplied by exp(half * shift)), chosen so that the largest weight of the envelope
        # is 1: the nearest allowed table word, or the table's reach when no allowed word is in the row
        # (SanText+ for a frequent word). Without it, exp(-half * d) underflows to 0 for every allowed word
        # at large epsilon and the envelope is empty.
        everything = self.k >= self.vocab_size  # the table holds every word: nothing outside it
        reach = table_d[:, -1] * (1.0 - FLOAT32_DISTANCE_SLACK)  # every word outside the table is this far at least
        if self.allowed_mask is None:
            shift = np.zeros(len(ids))  # the word itself, at 0
            exponent = -half * table_d
        else:
            allowed_here = self.allowed_mask[table_ids]
            nearest = np.where(allowed_here, table_d, np.inf).min(axis=1)
            shift = nearest if everything else np.minimum(nearest, reach)
            exponent = np.where(allowed_here, -half * (table_d - shift[:, None]), -np.inf)
        weights = np.exp(exponent)
        cumulative = np.cumsum(weights, axis=1)
        mass_table = cumulative[:, -1]
        if everything:
            cap = np.zeros(len(ids))
        else:
            cap = np.exp(-half * (reach - shift))
        envelope = mass_table + self.allowed_count * cap
        if not (envelope > 0).all():
            raise ValueError("an input has no allowed output within reach (empty envelope)")
        query = np.take(self.vectors, ids, axis=0).astype(np.float64)

        pending = np.arange(len(ids))
        rounds = np.full(len(ids), self.FIRST_ROUNDS, dtype=np.int64)
        # Budget per input word and call: when the rounds of a word's tokens add up to more than what one
        # pass over the vocabulary costs, its pending tokens are left to the caller (out = -1), which
        # draws them from the exact distribution built in one pass. Exact: the decision depends only on
        # how many rounds were rejected, and a rejected round carries no information about the output
        # (every round returns y with probability f(y)/E, or nothing), so the law stays f / Z.
        words, word_of = np.unique(ids, return_inverse=True)
        word_rounds = np.zeros(len(words))
        budget = self.GIVE_UP_FACTOR * self.vocab_size
        out[:] = -1
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
                spent += np.bincount(t, minlength=len(ids))
                with np.errstate(over="ignore"):  # a table word nearer than shift: rejected below anyway
                    ok = rng.random(len(outside)) * cap[t] < np.exp(-half * (dist - shift[t]))
                # a table word is no farther than d_K: only those candidates need the membership test
                near = np.flatnonzero(ok & (dist <= table_d[t, -1] * (1.0 + FLOAT32_DISTANCE_SLACK) + 1e-12))
                if len(near):
                    member = (table_ids[t[near]] == candidate[near, None]).any(axis=1)
                    ok[near[member]] = False
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
            word_rounds += np.bincount(word_of[active], weights=rounds[active], minlength=len(words))
            retry = active[~done[active]]
            rounds[retry] = np.minimum(rounds[retry] * 4, self.MAX_ROUNDS_PER_BLOCK)
            pending = np.sort(np.concatenate([retry, waiting]))
            pending = pending[word_rounds[word_of[pending]] <= budget]  # over budget: left for a pass
        return out, spent


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
