"""The two attacks of the audit: inverting released words and linking released records to their source.

Inversion (Bayes-optimal adversary). An attacker knows the mechanism M and a public prior pi over
words, sees a released word o and guesses the input: the guess maximising the posterior
``P(w | o) ~ pi(w) P(o | w)`` (top-10: the ten most probable). No attacker who knows only M, pi
and o does better on inputs drawn from pi. Two ways to get ``P(o | w)``:

* closed form (``Kernel``): mechanisms whose output distribution is
  ``P(o | w) = exp(-s * min(d(w, o), cap)) / Z_w`` -- TEM (s = epsilon/2, cap = gamma) and
  SanText (cap = inf). ``Z_w`` is summed over the whole vocabulary for every word in the prior's
  support (:func:`log_normalizers`): the posterior is then exact over that support, up to
  floating point (float64 distances for the ranking; the normalisers from float32 distances,
  re-computed in float64 for pairs closer than 0.5, so their relative error stays below 1e-4);
* Monte Carlo (``CountTable``), for every other mechanism (Madlib): draw S inputs from the prior,
  release each once, and estimate the posterior by the counts ``C(w, o)``. The attacker guesses
  the words with the largest counts for o (then the prior; for an output never seen, o itself and
  then the prior's top words). Its success on fresh releases is what a real attacker with this
  estimate achieves, so it is a lower bound of the Bayes-optimal rate (in expectation); and
  ``sum_o max_w C(w, o) / S`` over the same draws is an UPPER estimate (its expectation is at least
  the Bayes-optimal rate, by Jensen's inequality, and it moves by at most 1/S when one draw
  changes, so adding ``sqrt(ln(1/delta) / 2S)`` makes it an upper bound with probability
  1 - delta, McDiarmid). The Bayes-optimal rate for inputs drawn from the prior lies between the
  two; the gap is the Monte Carlo error, reported.

Linkage. The attacker holds a set of original records, one of which is the source of a released
record, and ranks them by the likelihood of the release: ``sum_j ln P(y_j | x_j)`` over the first
L words (records compared word for word, as the guarantee compares them). With the source placed
uniformly in the set, ranking by the exact likelihood is the Bayes-optimal linkage attack (top-k
included); with an estimated likelihood the attack is weaker, so its rate is again a lower bound.
For Monte Carlo the likelihood is ``(C(x, y) + 1/N) / (n_x + 1)`` from independent draws of the
pool's words (smoothed so that an output never seen keeps a small probability). Ties are broken
uniformly at random: the reported rate is the expected success.

Nothing here imports Beam.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

RANK_BANDS = ((1, 100), (101, 1000), (1001, 10000), (10001, 100000), (100001, None))
BAND_LABELS = tuple(f"ranks {lo:,}-{hi:,}" if hi else f"ranks {lo:,}+" for lo, hi in RANK_BANDS)
TOP_K = 10
LINKAGE_K = (1, 5)
NEAR_DISTANCE = 0.5  # float32 distances below this are recomputed in float64 for the normalisers


def rank_band(word_ids: np.ndarray) -> np.ndarray:
    """Band index (into ``RANK_BANDS``) of each word id; artifacts keep words in frequency order."""
    ranks = np.asarray(word_ids, dtype=np.int64) + 1
    edges = np.array([lo for lo, _ in RANK_BANDS[1:]], dtype=np.int64)
    return np.searchsorted(edges, ranks, side="right")


# --- priors -------------------------------------------------------------------------------------------


@dataclass
class Prior:
    """A public prior over vocabulary words: ``support`` (sorted ids) and their log-probabilities."""

    support: np.ndarray
    log_prob: np.ndarray
    source: str

    @classmethod
    def from_counts(cls, ids: np.ndarray, counts: np.ndarray, max_words: Optional[int], source: str,
                    vocab_size: Optional[int] = None, rank_share: float = 0.0) -> "Prior":
        """Word frequencies of a reference corpus, mixed with ``rank_share`` of Zipf's law over the
        vocabulary's ranks (so that words the reference corpus lacks keep some probability); the
        ``max_words`` most probable words are kept."""
        ids = np.asarray(ids, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.float64)
        keep = counts > 0
        ids, counts = ids[keep], counts[keep]
        if not len(ids):
            raise ValueError("the reference corpus has no vocabulary word")
        if rank_share > 0:
            if vocab_size is None:
                raise ValueError("mixing in the rank prior needs the vocabulary size")
            prob = np.zeros(vocab_size)
            prob[ids] = (1.0 - rank_share) * counts / counts.sum()
            zipf = 1.0 / np.arange(1, vocab_size + 1)
            prob += rank_share * zipf / zipf.sum()
            ids = np.arange(vocab_size, dtype=np.int64)
            counts = prob
        if max_words is not None and len(ids) > max_words:
            top = np.lexsort((ids, -counts))[:max_words]
            ids, counts = ids[top], counts[top]
        order = np.argsort(ids)
        ids, counts = ids[order], counts[order]
        return cls(ids, np.log(counts) - math.log(counts.sum()), source)

    @classmethod
    def by_rank(cls, vocab_size: int, max_words: Optional[int]) -> "Prior":
        """Zipf's law over the vocabulary's rank order, P(rank r) ~ 1/r, on the ``max_words`` first words."""
        size = vocab_size if max_words is None else min(vocab_size, max_words)
        ids = np.arange(size, dtype=np.int64)
        weights = -np.log(ids + 1.0)
        return cls(ids, weights - _logsumexp(weights), f"Zipf over the vocabulary's rank order (1/rank), first {size:,} words")

    def __len__(self) -> int:
        return len(self.support)

    def top(self, k: int) -> np.ndarray:
        """The k most probable words (ties by id)."""
        order = np.lexsort((self.support, -self.log_prob))[:k]
        return self.support[order]

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        prob = np.exp(self.log_prob - self.log_prob.max())
        return self.support[rng.choice(len(prob), size=count, p=prob / prob.sum())]

    def log_prob_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.support, ids), len(self.support) - 1)
        found = self.support[pos] == ids
        return np.where(found, self.log_prob[pos], -np.inf)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        return np.isfinite(self.log_prob_of(ids))


def _logsumexp(values: np.ndarray, axis=None):
    values = np.asarray(values, dtype=np.float64)
    top = np.max(values, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(values - top), axis=axis, keepdims=True)) + top
    return out.squeeze(axis) if axis is not None else float(out.reshape(()))


# --- the closed form ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """``P(o | w) = exp(-scale * min(d(w, o), cap)) / Z_w`` in the metric ``metric``."""

    scale: float
    cap: float
    metric: str = "euclidean"

    def describe(self) -> str:
        cap = "inf" if math.isinf(self.cap) else f"{self.cap:.6g}"
        return f"P(o | w) = exp(-{self.scale:.6g} * min(d(w, o), {cap})) / Z_w ({self.metric} distance)"


def kernel_of(mechanism) -> Optional[Kernel]:
    """The closed form of a mechanism's output distribution (its ``audit_kernel()``), or None (then Monte
    Carlo is used)."""
    own = getattr(mechanism, "audit_kernel", None)
    found = own() if own is not None else None
    return None if found is None else Kernel(*found)


def metric_points64(vectors: np.ndarray, metric: str) -> np.ndarray:
    from textdp.artifact.neighbours import metric_points

    return metric_points(vectors, metric, dtype=np.float64)


def _row_distances64(points: np.ndarray, ids: np.ndarray, others: np.ndarray) -> np.ndarray:
    """float64 distances by differences, ``ids`` x ``others`` (both small or one of them small)."""
    diff = points[others][None, :, :] - points[ids][:, None, :]
    return np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))


def log_normalizers(points32: np.ndarray, word_ids: np.ndarray, kernels: Sequence[Kernel],
                    points64: Optional[np.ndarray] = None, block: int = 64) -> np.ndarray:
    """ln Z_w for each word and kernel: ``Z_w = sum over the vocabulary of exp(-s min(d(w, i), cap))``.

    One float32 BLAS pass per block of words gives all distances; those below ``NEAR_DISTANCE`` (where
    float32 rounding of the expanded form matters) are recomputed in float64 from differences, and the
    word itself is exactly 0. Sums in float64 with the largest term factored out.
    """
    word_ids = np.asarray(word_ids, dtype=np.int64)
    points32 = np.asarray(points32, dtype=np.float32)
    sq = np.einsum("ij,ij->i", points32.astype(np.float64), points32.astype(np.float64)).astype(np.float32)
    # augmented operands: [-2x, |x|^2, 1] . [v, 1, |v|^2] = |x - v|^2 in one BLAS call
    vocab_side = np.empty((len(points32), points32.shape[1] + 2), dtype=np.float32)
    vocab_side[:, :-2] = points32
    vocab_side[:, -2] = 1.0
    vocab_side[:, -1] = sq
    out = np.empty((len(word_ids), len(kernels)))
    weights = None
    for start in range(0, len(word_ids), block):
        ids = word_ids[start:start + block]
        query = np.empty((len(ids), vocab_side.shape[1]), dtype=np.float32)
        query[:, :-2] = -2.0 * points32[ids]
        query[:, -2] = sq[ids]
        query[:, -1] = 1.0
        dist = query @ vocab_side.T  # float32 throughout the bulk: terms are in [exp(-s cap), 1]
        np.maximum(dist, 0.0, out=dist)
        np.sqrt(dist, out=dist)
        near_rows, near_cols = np.divmod(np.flatnonzero(dist < NEAR_DISTANCE), dist.shape[1])
        off = near_cols != ids[near_rows]
        near_rows, near_cols = near_rows[off], near_cols[off]
        near = None
        if points64 is not None and len(near_rows):  # close pairs: float64 from differences
            diff = points64[near_cols] - points64[ids[near_rows]]
            near = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        if weights is None or weights.shape != dist.shape:
            weights = np.empty_like(dist)
        for k, kernel in enumerate(kernels):
            np.minimum(dist, np.float32(min(kernel.cap, 3.0e38)), out=weights)
            weights *= np.float32(-kernel.scale)
            np.exp(weights, out=weights)
            weights[np.arange(len(ids)), ids] = 1.0  # the word itself, at distance exactly 0
            total = weights.sum(axis=1, dtype=np.float64)
            if near is not None:  # replace the float32 terms of close pairs by float64 ones
                exact = np.exp(-kernel.scale * np.minimum(near, kernel.cap))
                total += np.bincount(near_rows, weights=exact - weights[near_rows, near_cols].astype(np.float64),
                                     minlength=len(ids))
            out[start:start + len(ids), k] = np.log(total)
    return out


class KernelPosterior:
    """Exact posterior ``pi(w) P(o | w)`` over the prior's support for a closed-form mechanism."""

    def __init__(self, points64: np.ndarray, prior: Prior, log_z: np.ndarray, kernel: Kernel):
        if len(log_z) != len(prior):
            raise ValueError("one normaliser per word of the prior's support")
        self.points = points64
        self.prior = prior
        self.kernel = kernel
        self.support_points = np.ascontiguousarray(points64[prior.support])
        self.support_sq = np.einsum("ij,ij->i", self.support_points, self.support_points)
        self.base = prior.log_prob - np.asarray(log_z, dtype=np.float64)  # ln pi(w) - ln Z_w

    def top_guesses(self, outputs: np.ndarray, k: int = TOP_K, block: int = 64, margin: int = 40) -> np.ndarray:
        """The k most probable inputs for each output (rows), most probable first."""
        outputs = np.asarray(outputs, dtype=np.int64)
        k = min(k, len(self.prior))
        keep = min(len(self.prior), k + margin)
        out = np.empty((len(outputs), k), dtype=np.int64)
        for start in range(0, len(outputs), block):
            chunk = outputs[start:start + block]
            q = self.points[chunk]
            d2 = np.einsum("ij,ij->i", q, q)[:, None] - 2.0 * q @ self.support_points.T + self.support_sq[None, :]
            score = self.base[None, :] - self.kernel.scale * np.minimum(np.sqrt(np.maximum(d2, 0.0)), self.kernel.cap)
            cand = np.argpartition(-score, keep - 1, axis=1)[:, :keep]
            # re-score the candidates from float64 differences (the expanded form loses digits for close pairs)
            diff = self.support_points[cand] - q[:, None, :]
            exact = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
            rescored = self.base[cand] - self.kernel.scale * np.minimum(exact, self.kernel.cap)
            order = np.lexsort((self.prior.support[cand], -rescored), axis=1)[:, :k]
            out[start:start + len(chunk)] = self.prior.support[np.take_along_axis(cand, order, axis=1)]
        return out

    def log_likelihood(self, inputs: np.ndarray, outputs: np.ndarray, log_z_of_inputs: np.ndarray) -> np.ndarray:
        """ln P(o | x) elementwise for arrays of inputs and outputs (normalisers of the inputs given)."""
        diff = self.points[np.asarray(outputs)] - self.points[np.asarray(inputs)]
        dist = np.sqrt(np.einsum("...k,...k->...", diff, diff))
        return -self.kernel.scale * np.minimum(dist, self.kernel.cap) - log_z_of_inputs


# --- Monte Carlo ------------------------------------------------------------------------------------------


class CountTable:
    """Counts C(w, o) of releases o of inputs w, for the Monte Carlo posterior and likelihood."""

    def __init__(self, inputs: np.ndarray, outputs: np.ndarray, vocab_size: int, counts: Optional[np.ndarray] = None):
        self.vocab_size = int(vocab_size)
        inputs = np.asarray(inputs, dtype=np.int64)
        outputs = np.asarray(outputs, dtype=np.int64)
        weights = np.ones(len(inputs), dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        keys = inputs * self.vocab_size + outputs
        order = np.argsort(keys, kind="stable")
        keys, weights = keys[order], weights[order]
        unique, start = np.unique(keys, return_index=True)
        self.keys = unique
        self.counts = np.add.reduceat(weights, start) if len(keys) else np.zeros(0, dtype=np.int64)
        self.inputs = self.keys // self.vocab_size
        self.outputs = self.keys % self.vocab_size
        self.total = int(self.counts.sum())
        words, first = np.unique(self.inputs, return_index=True)
        self.input_ids = words
        self.input_totals = np.add.reduceat(self.counts, first) if len(words) else np.zeros(0, dtype=np.int64)

    def draws_of(self, inputs: np.ndarray) -> np.ndarray:
        inputs = np.asarray(inputs, dtype=np.int64)
        if not len(self.input_ids):
            return np.zeros(inputs.shape, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.input_ids, inputs), len(self.input_ids) - 1)
        return np.where(self.input_ids[pos] == inputs, self.input_totals[pos], 0)

    def count(self, inputs: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        keys = np.asarray(inputs, dtype=np.int64) * self.vocab_size + np.asarray(outputs, dtype=np.int64)
        if not len(self.keys):
            return np.zeros(keys.shape, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[pos] == keys, self.counts[pos], 0)

    def log_likelihood(self, inputs: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """ln of the smoothed estimate (C(x, y) + 1/N) / (n_x + 1)."""
        c = self.count(inputs, outputs).astype(np.float64)
        n = self.draws_of(inputs).astype(np.float64)
        return np.log(c + 1.0 / self.vocab_size) - np.log(n + 1.0)

    def guesses(self, prior: Prior, k: int = TOP_K) -> Dict[int, np.ndarray]:
        """For every output seen: the inputs by count (desc), then prior (desc), at most k."""
        order = np.lexsort((-prior.log_prob_of(self.inputs), -self.counts, self.outputs))
        outs = self.outputs[order]
        ins = self.inputs[order]
        bounds = np.flatnonzero(np.diff(outs)) + 1
        result = {}
        for o_block, i_block in zip(np.split(outs, bounds), np.split(ins, bounds)):
            if len(o_block):
                result[int(o_block[0])] = i_block[:k]
        return result

    def in_sample_rates(self, ks: Sequence[int] = (1, TOP_K)) -> Dict[int, float]:
        """``sum_o (sum of the k largest C(w, o)) / S``: the upward-biased plug-in estimate of the
        Bayes-optimal top-k rate for inputs drawn like these draws."""
        if not self.total:
            return {k: 0.0 for k in ks}
        order = np.lexsort((-self.counts, self.outputs))
        outs, counts = self.outputs[order], self.counts[order]
        first = np.r_[0, np.flatnonzero(np.diff(outs)) + 1]
        position = np.arange(len(outs)) - np.repeat(first, np.diff(np.r_[first, len(outs)]))
        return {k: float(counts[position < k].sum()) / self.total for k in ks}


def fill_guesses(known: Dict[int, np.ndarray], outputs: np.ndarray, prior_top: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Guess lists for ``outputs``: the table's guesses, then o itself, then the prior's top words."""
    out = np.empty((len(outputs), k), dtype=np.int64)
    for row, o in enumerate(np.asarray(outputs, dtype=np.int64)):
        chosen = list(known.get(int(o), ()))[:k]
        for extra in [int(o)] + [int(w) for w in prior_top]:
            if len(chosen) >= k:
                break
            if extra not in chosen:
                chosen.append(extra)
        out[row] = chosen[:k]
    return out


def mcdiarmid_margin(draws: int, delta: float) -> float:
    """sqrt(ln(1/delta) / 2S): how far the plug-in estimate can fall below its expectation (prob. delta)."""
    return math.sqrt(math.log(1.0 / delta) / (2.0 * draws)) if draws else math.inf


# --- outcomes and rates ------------------------------------------------------------------------------------


def inversion_outcomes(inputs: np.ndarray, outputs: np.ndarray, guesses: np.ndarray, prior_top: np.ndarray,
                       prior: Optional[Prior] = None) -> dict:
    """Per token: did the attacker (top-1 / top-10), the released word, or the prior's guess recover it;
    and is the word in the prior's support at all (an attacker never names a word outside it)."""
    inputs = np.asarray(inputs, dtype=np.int64)
    return {
        "in_prior": prior.contains(inputs) if prior is not None else np.ones(len(inputs), dtype=bool),
        "top1": guesses[:, 0] == inputs,
        "top10": (guesses == inputs[:, None]).any(axis=1),
        "released": np.asarray(outputs) == inputs,
        "prior_top1": inputs == prior_top[0],
        "prior_top10": np.isin(inputs, prior_top[:TOP_K]),
    }


def linkage_success(scores: np.ndarray, source: int, others: np.ndarray, sizes: Sequence[int],
                    ks: Sequence[int] = LINKAGE_K) -> Dict[int, Dict[int, float]]:
    """Expected top-k success (ties broken uniformly) of ranking by ``scores`` in nested sets.

    The set of size n is the source plus the first n - 1 records of ``others`` (a random order of
    the other records, drawn by the caller). Returns {n: {k: success}} for the sizes that fit.
    """
    own = scores[source]
    ordered = scores[others]
    higher = np.cumsum(ordered > own)
    tied = np.cumsum(ordered == own)
    out = {}
    for n in sizes:
        if n - 1 > len(others) or n < 1:
            continue
        h = int(higher[n - 2]) if n >= 2 else 0
        t = int(tied[n - 2]) if n >= 2 else 0
        out[int(n)] = {int(k): min(max(k - h, 0), t + 1) / (t + 1) for k in ks}
    return out


def structure_unique(layouts: np.ndarray, source: int, others: np.ndarray, sizes: Sequence[int]) -> Dict[int, bool]:
    """Whether the source's layout (its word count, punctuation, case pattern) differs from every other
    record's in each nested set: then the structure alone, which privatize releases, links it."""
    same = np.cumsum(layouts[others] == layouts[source])
    return {int(n): (int(same[n - 2]) if n >= 2 else 0) == 0 for n in sizes if 1 <= n and n - 1 <= len(others)}


def binomial_interval(successes: float, trials: int, confidence: float = 0.95) -> Tuple[Optional[float], Optional[float]]:
    """Two-sided Clopper-Pearson interval (successes may be fractional from tie-breaking: rounded outwards)."""
    if trials <= 0:
        return None, None
    from textdp.audit.stats import cp_lower, cp_upper

    alpha = (1.0 - confidence) / 2.0
    low = float(cp_lower(np.array([math.floor(successes)]), trials, alpha)[0])
    high = float(cp_upper(np.array([math.ceil(successes)]), trials, alpha)[0])
    return low, high


def rate_entry(successes: float, trials: int) -> dict:
    low, high = binomial_interval(successes, trials)
    return {"rate": (successes / trials) if trials else None, "ci95": [low, high], "count": float(successes),
            "of": int(trials)}


def summarise_inversion(rows: Iterable[dict]) -> dict:
    """rows: one per (epsilon, band) with token counts and success counts -> rates with 95% intervals."""
    by_eps: Dict[float, List[dict]] = {}
    for row in rows:
        by_eps.setdefault(float(row["epsilon"]), []).append(row)
    keys = ("top1", "top10", "released", "prior_top1", "prior_top10", "in_prior")
    out = {}
    for eps in sorted(by_eps):
        group = by_eps[eps]
        total = {key: sum(r.get(key, 0) for r in group) for key in keys}
        tokens = sum(r["tokens"] for r in group)
        entry = {"tokens": tokens, "overall": {key: rate_entry(total[key], tokens) for key in keys}, "bands": {}}
        for r in sorted(group, key=lambda r: r["band"]):
            entry["bands"][BAND_LABELS[r["band"]]] = {"tokens": r["tokens"],
                                                      **{key: rate_entry(r.get(key, 0), r["tokens"]) for key in keys}}
        out[f"{eps:g}"] = entry
    return out
