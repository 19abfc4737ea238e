"""The one exact sampler from a K-nearest table: P(y | x) ~ exp(-epsilon/2 * min(d(x, y), cap)) over an allowed set.

Used by TEM (cap = gamma, allowed = every word) and by SanText / SanText+ (cap = infinity, allowed = every
word / the sensitive words). Nothing here knows a mechanism: a mechanism passes its cap and allowed set.

Target. Input word x (an id), metric d (Euclidean distance between metric points: the vectors, or their
directions for the angular metric), d(x, x) = 0, half = epsilon / 2, allowed output set A, and
    f(y) = exp(-half * min(d(x, y), cap)) for y in A,   f(y) = 0 otherwise,   P(y | x) = f(y) / Z.
Table words T(x) (the exact K nearest, sorted, the first being x itself) use the table's distances; every
other word uses a float64 distance computed here from the float32 points, so f is one fixed function.

Shift. Every weight of a token is taken relative to a per-token reference s (multiplied by exp(half s)),
which does not change f / Z: s = the nearest allowed table word's min(d, cap), or min(reach, cap) when no
allowed word is in the row (``reach`` below). So the largest envelope weight is 1 and nothing underflows:
exp(-half d) alone is 0 for every allowed word at large epsilon (SanText+ at epsilon ~500). With
A = everything, s = 0 (the word itself).

Envelope (exact rejection sampling). d_K is the K-th table distance, stored in float32; every word outside
T(x) is at least ``reach`` = d_K (1 - 1e-5) away (the factor covers the float32 storage). So for an allowed
word outside the table (weights shifted by s)
    c = exp(-half (cap - s))  <=  f(y)  <=  u = exp(-half (min(reach, cap) - s)),
c being the floor that the cap gives (c = 0 when cap = infinity). Write f(y) = c + e(y), 0 <= e(y) <= u - c.
The envelope g = f on T(x) and g = c + (u - c) on every word of A (which also covers the table words:
their outside share is rejected) dominates f, and its total E = M_T + |A| c + |A| (u - c), with
M_T = sum over T(x) and A of f, is known exactly. One round draws U uniform on [0, E):
  * U < M_T: the table word whose cumulative weight interval holds U (probability f(y) / E); accepted;
  * M_T <= U < M_T + |A| c: a uniform word y of A, accepted iff y is not in T(x) (probability c / E each);
  * otherwise: a uniform word y of A, accepted iff y is not in T(x) and V (u - c) < f(y) - c for a uniform
    V (probability (u - c) / E * e(y) / (u - c) = e(y) / E each).
So each round returns y with probability f(y) / E, or nothing; rounds are independent, and the first
accepted round has law f / Z exactly. Rounds are geometric with mean E / Z. Both cases are the same
formula: the cap only adds the floor (TEM's bottom element of Alg. 2, spread uniformly), the allowed set
only restricts the uniform proposals and the table weights (and sets the shift). When the table holds
every word (K >= |V|) nothing is outside: E = M_T.

Distance decisions. A candidate's distance is computed first in float32 with a relative error bound
(``FLOAT32_DISTANCE_ERROR``); a decision (accept, table membership) is taken from it only when that bound
cannot change it, otherwise from the float64 distance. Exactness holds up to float64 arithmetic.
``envelope_violations`` counts outside words found nearer than d_K by more than the rounding (an inexact
table); it stays 0.

Work is vectorised over the batch: every pending token gets a block of rounds (``FIRST_ROUNDS`` at first,
four times more on each retry, at most ``MAX_ROUNDS_PER_BLOCK``), the first accepted round per token is
kept (discarding later ones does not bias anything: which round is used depends only on earlier ones), and
the rounds held in memory at once are capped (``MAX_ROUNDS_TOTAL``).

Dense rows. Frequent words in dense regions ("the") have a small d_K, so u is loose and E / Z reaches
hundreds of rounds at middle epsilons. Once a word has cost more on-the-fly distances than
``dense_after`` (default: the vocabulary size, the price of one row), it gets a dense row built at run time
for this epsilon (nothing stored): f(y) for every word (0 outside A), from float64 distances (the table's
own distances for the table words, so the target is the same function), and its cumulative sum. A draw is
then one uniform number and a binary search: exact. At most ``DENSE_MAX_WORDS`` rows are kept (8 bytes per
vocabulary word each).

Budget and pass (``give_up_factor``). Where E / Z has no useful bound (an allowed set far from x, no floor:
SanText+ for a frequent word, unbounded as epsilon grows), a word whose rounds in one call exceed
``give_up_factor x |V|`` leaves its pending tokens to an exact pass: the dense row above, built for a few
words at once. Exact: the decision depends only on how many rounds were rejected, and a rejected round
carries no information about the output (every round returns y with probability f(y) / E, or nothing).
With the input in A (TEM), its shifted weight is 1, so E / Z <= M_T + |A| u is bounded and the rule can
be left off (None): dense rows then take over the costly words.
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import numpy as np

FLOAT32_DISTANCE_ERROR = 1e-5  # relative bound on |float32 - float64| distance over 50-300 dimensions, and on d_K's storage


def _metric_points(rows: np.ndarray, metric: str, dtype=np.float32) -> np.ndarray:
    from textdp.artifact.neighbours import metric_points

    return metric_points(rows, metric, dtype=dtype)


def forward_to_sampler(name: str) -> property:
    """A mechanism attribute that reads and sets its table sampler's attribute ``name`` (tuning knobs)."""
    return property(lambda self: getattr(self.sampler, name), lambda self, value: setattr(self.sampler, name, value))


class TableSampler:
    """Exact draws of P(y | x) ~ exp(-epsilon/2 * min(d(x, y), cap)) over the allowed words, from a K-nearest table.

    ``vectors`` (|V| x n), ``table_ids`` / ``table_distances`` (|V| x K, the exact K nearest in ``metric``),
    ``cap`` (gamma; ``math.inf`` for none), ``allowed`` (ids; None for every word). ``dense_after``: on-the-fly
    distances per word before it gets a dense row (None: |V|); ``give_up_factor``: the per-word round budget
    in units of |V| before a pass (None: off). The exactness argument is the module's docstring.
    """

    FIRST_ROUNDS = 4
    MAX_ROUNDS_PER_BLOCK = 256
    MAX_ROUNDS_TOTAL = 1 << 17  # rounds held in memory at once
    DENSE_MAX_WORDS = 16  # dense rows kept (8 bytes x vocabulary each)
    PASS_WORDS = 16  # words whose exact rows one pass builds together (16 x 8 bytes x vocabulary)
    FLOAT32_DISTANCE_ERROR = FLOAT32_DISTANCE_ERROR

    def __init__(self, vectors: np.ndarray, table_ids: np.ndarray, table_distances: np.ndarray, epsilon: float, *,
                 cap: float = math.inf, allowed: Optional[np.ndarray] = None, metric: str = "euclidean",
                 dense_after: Optional[float] = None, give_up_factor: Optional[float] = 0.05):
        if not epsilon > 0:
            raise ValueError("epsilon must be > 0")
        if not cap >= 0:
            raise ValueError("cap must be >= 0")
        # plain ndarray views of the memory maps: fancy indexing without the memmap subclass overhead
        self.vectors = np.asarray(vectors)
        self.table_ids = np.asarray(table_ids)
        self.table_distances = np.asarray(table_distances)
        self.epsilon = float(epsilon)
        self.cap = float(cap)
        self.metric = metric
        self.vocab_size = len(self.vectors)
        self.k = self.table_ids.shape[1]
        self.DENSE_AFTER_CANDIDATES = dense_after  # a tuning knob, set by tests
        self.GIVE_UP_FACTOR = give_up_factor
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
        self.passes = 0  # words sampled by a pass after their rounds ran over budget (for tests, benchmarks)
        self.envelope_violations = 0
        self._dense_lock = threading.Lock()
        self._dense_rows: dict = {}  # word id -> cumulative weights over the vocabulary (replaced, never mutated)
        self._spent = np.zeros(self.vocab_size)

    # distances -------------------------------------------------------------------------------------
    def points32(self, ids: np.ndarray) -> np.ndarray:
        """The metric's float32 points for ``ids``, bit for bit as the neighbour job computed them."""
        rows = np.take(self.vectors, ids, axis=0)
        if self.metric != "euclidean":
            rows = _metric_points(rows, self.metric)
        return rows

    def distances(self, ids: np.ndarray, others: np.ndarray) -> np.ndarray:
        """float64 distance between ``ids[i]`` and ``others[i]`` (elementwise): the target's distance outside the table."""
        diff = self.points32(others).astype(np.float64) - self.points32(ids).astype(np.float64)
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    def _uniform_allowed(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.allowed_ids is None:
            return rng.integers(0, self.vocab_size, size=size)
        return self.allowed_ids[rng.integers(0, self.allowed_count, size=size)]

    # sampling --------------------------------------------------------------------------------------
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

    # dense rows ------------------------------------------------------------------------------------
    def _account(self, ids: np.ndarray, spent: np.ndarray) -> None:
        """Add up on-the-fly distances per input word; give a word a dense row once it has cost more than
        building one would, while there is room for it."""
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
        """Cumulative f over the vocabulary for each input word (0 outside the allowed set), in one pass over
        the points for all of them; cached ones are reused.

        Distances are float64: ||v - q||^2 = ||v||^2 - 2 v.q + ||q||^2 on float64 copies of each block of
        float32 points (one matrix product for all the words; the cancellation error, ~1e-15 relative to the
        squared norms, is far below the float32 rounding of the stored points), and the table's own
        distances for the table words, so that the target is the same function as on the table path.
        """
        cached = self._dense_rows
        todo = [w for w in dict.fromkeys(words) if w not in cached]
        rows = {}
        if todo:
            queries = self.points32(np.asarray(todo, dtype=np.int64)).astype(np.float64)
            query_sq = np.einsum("ij,ij->i", queries, queries)
            squared = np.empty((len(todo), self.vocab_size))
            for start in range(0, self.vocab_size, 32768):
                block = self.vectors[start:start + 32768]
                if self.metric != "euclidean":
                    block = _metric_points(block, self.metric)
                block = np.asarray(block, dtype=np.float64)
                block_sq = np.einsum("ij,ij->i", block, block)
                squared[:, start:start + len(block)] = block_sq[None, :] - 2.0 * (queries @ block.T) + query_sq[:, None]
            dist = np.sqrt(np.maximum(squared, 0.0, out=squared), out=squared)
            for row, word in enumerate(todo):
                table_ids = np.asarray(self.table_ids[word], dtype=np.int64)
                table_d = np.asarray(self.table_distances[word], dtype=np.float64)
                table_d[0] = 0.0
                d = np.minimum(dist[row], self.cap, out=dist[row])
                d[table_ids] = np.minimum(table_d, self.cap)  # the same distances as the table path uses
                # shifted by the nearest allowed word: the same law, no underflow at large epsilon
                nearest = d.min() if self.allowed_mask is None else d[self.allowed_mask].min()
                weights = np.exp(-0.5 * self.epsilon * (d - nearest))
                if self.allowed_mask is not None:
                    weights *= self.allowed_mask
                rows[word] = np.cumsum(weights)
        return [cached[w] if w in cached else rows[w] for w in words]

    # rejection from the table envelope ---------------------------------------------------------------
    def _sample_rejection(self, ids: np.ndarray, rng: np.random.Generator):
        """Exact draws by rejection from the table envelope; also the on-the-fly distances per token.
        Tokens left over budget for a pass come back as -1."""
        out = np.full(len(ids), -1, dtype=np.int64)
        spent = np.zeros(len(ids))
        half = 0.5 * self.epsilon
        n, cap = self.vocab_size, self.cap
        table_ids = np.take(self.table_ids, ids, axis=0)
        table_d = np.take(self.table_distances, ids, axis=0).astype(np.float64)
        table_d[:, 0] = 0.0  # the word itself
        d_k = table_d[:, -1]
        everything = self.k >= n  # the table holds every word: nothing outside it
        reach = np.minimum(d_k * (1.0 - self.FLOAT32_DISTANCE_ERROR), cap)  # min(d, cap) of any outside word is >= this
        capped = np.minimum(table_d, cap)
        if self.allowed_mask is None:
            shift = np.zeros(len(ids))  # the word itself, at 0
            exponent = -half * capped
        else:
            allowed_here = self.allowed_mask[table_ids]
            nearest = np.where(allowed_here, capped, np.inf).min(axis=1)
            shift = nearest if everything else np.minimum(nearest, reach)
            exponent = np.where(allowed_here, -half * (capped - shift[:, None]), -np.inf)
        cumulative = np.cumsum(np.exp(exponent), axis=1)
        mass_table = cumulative[:, -1]
        if everything:
            floor = np.zeros(len(ids))
            excess_cap = np.zeros(len(ids))
        else:
            floor = np.exp(-half * (cap - shift)) if math.isfinite(cap) else np.zeros(len(ids))  # c
            excess_cap = np.maximum(np.exp(-half * (reach - shift)) - floor, 0.0)  # u - c
        floor_mass = self.allowed_count * floor
        envelope = mass_table + floor_mass + self.allowed_count * excess_cap
        if not (envelope > 0).all():
            raise ValueError("an input has no allowed output within reach (empty envelope)")
        slack = 4.0 * np.finfo(np.float32).eps * np.maximum(d_k, 1.0)  # float32 storage of d_K (violation count)
        query_points = self.points32(ids)  # gathered once per batch, reused by every round

        pending = np.arange(len(ids))
        with np.errstate(divide="ignore"):  # no allowed word in the row: M_T = 0, start with FIRST_ROUNDS
            rounds = np.minimum(np.ceil(envelope / mass_table), self.FIRST_ROUNDS).astype(np.int64)
        # Budget per input word and call (module docstring): over it, a word's pending tokens are left to a pass.
        budget = math.inf if self.GIVE_UP_FACTOR is None else self.GIVE_UP_FACTOR * n
        if budget < math.inf:
            words, word_of = np.unique(ids, return_inverse=True)
            word_rounds = np.zeros(len(words))
        error_factor = self.FLOAT32_DISTANCE_ERROR
        shifted = self.allowed_mask is not None
        while len(pending):
            fits = max(1, int(np.searchsorted(np.cumsum(rounds[pending]), self.MAX_ROUNDS_TOTAL, side="right")))
            waiting, active = pending[fits:], pending[:fits]
            token = np.repeat(active, rounds[active])  # token index of every round, grouped by token in order
            self.rounds += len(token)
            draw = rng.random(len(token)) * envelope[token]
            in_table = draw < mass_table[token]
            accepted = in_table.copy()
            chosen = np.full(len(token), -1, dtype=np.int64)
            outside = np.flatnonzero(~in_table)
            if len(outside):
                t = token[outside]
                candidate = self._uniform_allowed(rng, len(outside))
                self.distances_computed += len(outside)
                spent += np.bincount(t, minlength=len(ids))
                # float32 distance first; float64 only where its rounding could change a decision
                diff = self.points32(candidate)
                diff -= query_points[t]
                dist = np.sqrt(np.einsum("ij,ij->i", diff, diff)).astype(np.float64)
                error = error_factor * dist
                ok = np.ones(len(outside), dtype=bool)
                is_excess = draw[outside] >= mass_table[t] + floor_mass[t]
                if is_excess.any():
                    e = np.flatnonzero(is_excess)
                    te = t[e]
                    # every word allowed: the shift is 0 and the floor one number (spares two gathers per round)
                    shift_e = shift[te] if shifted else 0.0
                    threshold = rng.random(len(e)) * excess_cap[te] + (floor[te] if shifted else floor[0])
                    with np.errstate(over="ignore"):  # a word nearer than the shift: a table word, rejected below
                        surely_in = np.exp(-half * (np.minimum(dist[e] + error[e], cap) - shift_e)) > threshold
                        surely_out = np.exp(-half * (np.minimum(np.maximum(dist[e] - error[e], 0.0), cap) - shift_e)) <= threshold
                    ok[e] = surely_in
                    unsure = np.flatnonzero(~surely_in & ~surely_out)
                    if len(unsure):
                        eu = e[unsure]
                        exact = self.distances(ids[t[eu]], candidate[eu])
                        with np.errstate(over="ignore"):
                            ok[eu] = np.exp(-half * (np.minimum(exact, cap) - shift[t[eu]])) > threshold[unsure]
                # table membership: only words no farther than d_K can be table words
                near = np.flatnonzero(ok & (dist - error <= d_k[t] * (1.0 + error_factor) + 1e-12))
                if len(near):
                    member = (table_ids[t[near]] == candidate[near, None]).any(axis=1)
                    ok[near[member]] = False
                    strays = near[~member]
                    if len(strays):  # outside word nearer than d_K: the table is not exact
                        self.envelope_violations += int((dist[strays] + error[strays] < d_k[t[strays]] - slack[t[strays]]).sum())
                accepted[outside] = ok
                chosen[outside] = candidate
            hits = np.flatnonzero(accepted)
            hit_tokens = token[hits]  # ascending, since rounds are grouped by token in order
            leading = np.ones(len(hits), dtype=bool)
            leading[1:] = hit_tokens[1:] != hit_tokens[:-1]
            first, first_tokens = hits[leading], hit_tokens[leading]
            # table rounds: the word whose cumulative weight interval holds the draw
            from_table = first[in_table[first]]
            if len(from_table):
                tt = token[from_table]
                column = (cumulative[tt] <= draw[from_table, None]).sum(axis=1)
                chosen[from_table] = table_ids[tt, np.minimum(column, self.k - 1)]
            out[first_tokens] = chosen[first]
            done = np.zeros(len(ids), dtype=bool)
            done[first_tokens] = True
            retry = active[~done[active]]
            rounds_used = rounds[active]
            rounds[retry] = np.minimum(rounds[retry] * 4, self.MAX_ROUNDS_PER_BLOCK)
            pending = np.sort(np.concatenate([retry, waiting]))
            if budget < math.inf:
                word_rounds += np.bincount(word_of[active], weights=rounds_used, minlength=len(words))
                pending = pending[word_rounds[word_of[pending]] <= budget]  # over budget: left for a pass
        return out, spent
