"""The contextual inversion attacker: a bigram language model over the released word order (HMM).

The context-free attacker (``textdp.audit.attacks``) inverts each released word alone,
``P(w | o) ~ prior(w) P(o | w)``. A release keeps the word order, so an attacker with a language
model does better. This one is a hidden Markov model over each run of in-vocabulary words:

* **transitions**: a word bigram model trained on public text disjoint from the attacked records
  (``--prior-corpus`` when given, otherwise the records of ``--corpus`` that are not attacked).
  Smoothing: interpolated absolute discounting (Kneser-Ney's bigram discount) with the audit's own
  unigram prior as the lower order,
  ``P(b | a) = max(c(a, b) - D, 0) / c(a) + D N1+(a .) / c(a) * prior(b)``, and ``P(b | a) = prior(b)``
  for a history never seen; ``D = n1 / (n1 + 2 n2)`` from the training counts of bigram types seen
  once / twice. The model lives on the prior's support (bigrams with a word outside it are dropped),
  so with no training bigram it *is* the prior and the attacker is the context-free one. The first
  word of a run is drawn from the prior.
* **emissions**: the mechanism's release law ``P(o | w)`` -- the closed form ``Kernel`` (TEM,
  SanText) or the Monte Carlo ``CountTable`` estimate ``(C(w, o) + 1/N) / (n_w + 1)`` for the others,
  the same estimates the context-free attacker uses.
* **the approximation**: at each position the hidden word ranges over a *candidate set*: the K most
  probable inputs under the context-free posterior plus the released word itself (when the prior
  holds it). Forward-backward, in log space, over those sets gives every position's posterior
  marginal; top-1 / top-10 are the marginal's argmax / ten largest (ties by context-free rank).
  A word outside its candidate set is never guessed, so the approximation only lowers the rate.

The rates are a lower bound on what an attacker with a better language model (or a larger K)
achieves. Nothing here imports Beam.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

from textdp.audit.attacks import TOP_K, Prior

DEFAULT_CANDIDATES = 50
SMOOTHING = ("interpolated absolute discounting (Kneser-Ney's bigram discount D = n1 / (n1 + 2 n2)) with the audit's "
             "unigram prior as the lower order")


def _lse(values: np.ndarray, axis: int) -> np.ndarray:
    """log-sum-exp along ``axis`` that keeps rows of -inf at -inf (no NaN)."""
    top = np.max(values, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(np.log(np.sum(np.exp(values - top), axis=axis, keepdims=True)) + top, axis=axis)


# --- training counts -----------------------------------------------------------------------------------


def record_bigrams(keys: np.ndarray, vocab_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """(bigram keys a * N + b, counts) of adjacent vocabulary words of one record (negative keys break a run)."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    a, b = keys[:-1], keys[1:]
    both = (a >= 0) & (b >= 0)
    return np.unique(a[both] * int(vocab_size) + b[both], return_counts=True)


def merge_bigrams(parts) -> Tuple[np.ndarray, np.ndarray]:
    """Sum (keys, counts) pairs into one sorted sparse table."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    keys = np.concatenate([k for k, _ in parts])
    counts = np.concatenate([np.asarray(c, dtype=np.int64) for _, c in parts])
    unique, inverse = np.unique(keys, return_inverse=True)
    return unique, np.bincount(inverse.reshape(-1), weights=counts, minlength=len(unique)).astype(np.int64)


# --- the language model --------------------------------------------------------------------------------


# A model with no training bigram knows no word order: its transition prior is the context-free prior, so this
# attacker is the context-free one (up to its own Monte Carlo estimate), and comparing the two says nothing about
# what word order leaks (red team F9).
def untrained_warning(training_tokens: int, source: str) -> str:
    """The warning of a contextual attacker whose language model holds no bigram."""
    return (f"its language model holds no bigram ({int(training_tokens):,} training tokens of {source}), so it "
            "knows no word order and is the context-free attacker under another Monte Carlo estimate: its rates say "
            "nothing about what the word order leaks; give --prior-corpus (public text disjoint from --corpus) or "
            "attack fewer --records so that some are left to train on")


@dataclass
class BigramLM:
    """A bigram model over the prior's support, smoothed towards the prior (see the module's docstring)."""

    prior: Prior
    vocab_size: int
    keys: np.ndarray          # sorted a * N + b of the training bigrams kept
    counts: np.ndarray        # c(a, b)
    history_ids: np.ndarray   # sorted a with c(a) > 0
    history_totals: np.ndarray  # c(a)
    history_types: np.ndarray   # N1+(a .)
    discount: float
    training_tokens: int      # word tokens of the training text (in the vocabulary)
    source: str

    @classmethod
    def from_counts(cls, keys: np.ndarray, counts: np.ndarray, prior: Prior, vocab_size: int, training_tokens: int,
                    source: str) -> "BigramLM":
        keys = np.asarray(keys, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        a, b = keys // vocab_size, keys % vocab_size
        keep = prior.contains(a) & prior.contains(b) & (counts > 0)
        keys, counts, a = keys[keep], counts[keep], a[keep]
        order = np.argsort(keys)
        keys, counts, a = keys[order], counts[order], a[order]
        n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
        discount = n1 / (n1 + 2.0 * n2) if n1 + n2 else 0.75
        discount = min(max(discount, 0.05), 0.95)
        hist, first = np.unique(a, return_index=True)
        totals = np.add.reduceat(counts, first) if len(hist) else np.zeros(0, np.int64)
        types = np.diff(np.r_[first, len(a)]) if len(hist) else np.zeros(0, np.int64)
        return cls(prior, int(vocab_size), keys, counts, hist, totals, types, float(discount), int(training_tokens),
                   source)

    @property
    def training_bigrams(self) -> int:
        return int(self.counts.sum())

    def _lookup(self, table_ids: np.ndarray, values: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if not len(table_ids):
            return np.zeros(ids.shape, dtype=values.dtype)
        pos = np.minimum(np.searchsorted(table_ids, ids), len(table_ids) - 1)
        return np.where(table_ids[pos] == ids, values[pos], 0)

    def log_prob(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """ln P(nxt | prev), elementwise with broadcasting (-inf for a word outside the prior's support)."""
        prev, nxt = np.broadcast_arrays(np.asarray(prev, dtype=np.int64), np.asarray(nxt, dtype=np.int64))
        lower = np.exp(self.prior.log_prob_of(nxt))
        c_ab = self._lookup(self.keys, self.counts, prev * self.vocab_size + nxt).astype(np.float64)
        c_a = self._lookup(self.history_ids, self.history_totals, prev).astype(np.float64)
        n_a = self._lookup(self.history_ids, self.history_types, prev).astype(np.float64)
        seen = c_a > 0
        safe = np.where(seen, c_a, 1.0)
        prob = np.where(seen, np.maximum(c_ab - self.discount, 0.0) / safe + self.discount * n_a / safe * lower, lower)
        with np.errstate(divide="ignore"):
            return np.log(prob)

    def describe(self, candidates: int) -> dict:
        return {
            "order": 2,
            "smoothing": SMOOTHING,
            "discount": self.discount,
            "training_text": self.source,
            "training_tokens": int(self.training_tokens),
            "training_bigrams": self.training_bigrams,
            "bigram_types": int(len(self.keys)),
            "vocabulary": f"the prior's support ({len(self.prior):,} words); the first word of a run is drawn from the prior",
            "candidates_K": int(candidates),
            "approximation": (f"forward-backward over a candidate set per position: the {candidates} most probable inputs "
                              "under the context-free posterior plus the released word itself (when the prior holds "
                              "it); a word outside it is never guessed. Runs of in-vocabulary words between "
                              "out-of-vocabulary slots are attacked as separate sequences."),
            "bound": ("a lower bound on what an attacker with a better language model (higher order, more training "
                      "text) or a larger candidate set achieves"),
        } | ({"warning": untrained_warning(self.training_tokens, self.source)} if self.training_bigrams == 0 else {})


# --- forward-backward ----------------------------------------------------------------------------------


def posterior_marginals(log_init: np.ndarray, log_trans: np.ndarray, log_emit: np.ndarray) -> np.ndarray:
    """Log posterior marginals ln P(h_t = j | o_1..o_T) of a hidden Markov model with per-step state sets.

    ``log_init``: (K,) ln P(h_1 = j); ``log_trans``: (T-1, K, K) ln P(h_t = j | h_{t-1} = i) at [t-1, i, j];
    ``log_emit``: (T, K) ln P(o_t | h_t = j). Returns (T, K); rows of states impossible everywhere are -inf.
    """
    log_emit = np.asarray(log_emit, dtype=np.float64)
    steps, width = log_emit.shape
    alpha = np.empty((steps, width))
    beta = np.zeros((steps, width))
    alpha[0] = np.asarray(log_init, dtype=np.float64) + log_emit[0]
    for t in range(1, steps):
        alpha[t] = _lse(alpha[t - 1][:, None] + log_trans[t - 1], axis=0) + log_emit[t]
    for t in range(steps - 2, -1, -1):
        beta[t] = _lse(log_trans[t] + (log_emit[t + 1] + beta[t + 1])[None, :], axis=1)
    joint = alpha + beta
    out = joint - _lse(joint, axis=1)[:, None]
    return np.where(np.isnan(out), -np.inf, out)  # an observation impossible under every state: no guess ranks higher


def runs_of(keys: np.ndarray) -> List[Tuple[int, int]]:
    """(start, end) of the runs of in-vocabulary keys (>= 0) in one record."""
    known = np.r_[False, np.asarray(keys) >= 0, False].astype(np.int8)
    edges = np.flatnonzero(np.diff(known))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def candidate_sets(context_free: np.ndarray, outputs: np.ndarray, prior: Prior) -> Tuple[np.ndarray, np.ndarray]:
    """(T, K + 1) candidates: the context-free ranking's K words, then the released word (masked out when it is
    already among them or outside the prior); and the (T, K + 1) mask of valid columns."""
    context_free = np.asarray(context_free, dtype=np.int64)
    outputs = np.asarray(outputs, dtype=np.int64)
    cands = np.concatenate([context_free, outputs[:, None]], axis=1)
    valid = np.ones(cands.shape, dtype=bool)
    valid[:, -1] = ~(context_free == outputs[:, None]).any(axis=1) & (outputs >= 0)
    valid[:, -1] &= prior.contains(np.where(outputs >= 0, outputs, 0))
    valid[:, :-1] = prior.contains(context_free)
    return cands, valid


def contextual_guesses(lm: BigramLM, cands: np.ndarray, valid: np.ndarray, log_emit: np.ndarray,
                       runs: List[Tuple[int, int]], k: int = TOP_K, block: int = 256) -> np.ndarray:
    """The attacker's k guesses per position (rows of ``cands``), most probable posterior marginal first.

    ``runs``: (start, end) row ranges that are sequences (the model restarts from the prior at each).
    ``log_emit``: (T, K + 1) ln P(o_t | cands[t, j]). Ties keep the context-free order (column order).
    """
    cands = np.asarray(cands, dtype=np.int64)
    log_prior = np.where(valid, lm.prior.log_prob_of(cands), -np.inf)
    log_emit = np.where(valid, log_emit, -np.inf)
    # every transition of every run at once: ln P(cands[t, j] | cands[t-1, i]) for rows t that continue a run
    follows = np.ones(len(cands), dtype=bool)
    follows[[start for start, _ in runs]] = False
    rows = np.flatnonzero(follows)
    trans = np.empty((len(cands), cands.shape[1], cands.shape[1]))
    for low in range(0, len(rows), block):  # in blocks: the broadcast lookups hold a few (rows, K, K) arrays
        part = rows[low:low + block]
        trans[part] = np.where(valid[part][:, None, :],
                               lm.log_prob(cands[part - 1][:, :, None], cands[part][:, None, :]), -np.inf)
    marginals = np.empty(cands.shape)
    for start, end in runs:
        marginals[start:end] = posterior_marginals(log_prior[start], trans[start + 1:end], log_emit[start:end])
    marginals = np.where(valid, marginals, -np.inf)
    order = np.argsort(-marginals, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(cands, order, axis=1)


def kernel_emission(posterior, block: int = 128):
    """ln P(o | w) from a ``KernelPosterior`` (closed form; ln Z_w of its prior's support), for candidate
    matrices whose words all lie in that support: float64 distances from differences, in row blocks."""
    log_z = posterior.prior.log_prob - posterior.base

    def emission(cands: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(posterior.prior.support, cands)
        out = np.empty(cands.shape)
        for low in range(0, len(cands), block):
            rows = slice(low, low + block)
            out[rows] = posterior.log_likelihood(cands[rows], outputs[rows][:, None], log_z[pos[rows]])
        return out
    return emission


def table_emission(table):
    """ln P(o | w) from a Monte Carlo ``CountTable``: ``(C(w, o) + 1/N) / (n_w + 1)``."""
    def emission(cands: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        return table.log_likelihood(cands, np.broadcast_to(np.asarray(outputs)[:, None], cands.shape))
    return emission


def contextual_attack(lm: BigramLM, ranked: np.ndarray, outputs: np.ndarray, runs: List[Tuple[int, int]], emission,
                      k: int = TOP_K) -> np.ndarray:
    """The contextual attacker's k guesses for released words ``outputs`` (rows; ``runs`` mark the sequences),
    given the context-free ranking ``ranked`` (T, K) and ``emission(cands, outputs)`` -> ln P(o | cand)."""
    cands, valid = candidate_sets(ranked, outputs, lm.prior)
    log_emit = emission(np.where(valid, cands, cands[:, :1]), np.asarray(outputs, dtype=np.int64))
    return contextual_guesses(lm, cands, valid, log_emit, runs, k=k)


def paired_rates(rows) -> dict:
    """Per epsilon: context-free top-1 / top-10 on the very releases the contextual attacker saw."""
    from textdp.audit.attacks import rate_entry

    by_eps: dict = {}
    for row in rows:
        entry = by_eps.setdefault(float(row["epsilon"]), {"tokens": 0, "top1": 0, "top10": 0})
        entry["tokens"] += row["tokens"]
        entry["top1"] += row.get("cf_top1", 0)
        entry["top10"] += row.get("cf_top10", 0)
    return {f"{eps:g}": {"tokens": e["tokens"], "top1": rate_entry(e["top1"], e["tokens"]),
                         "top10": rate_entry(e["top10"], e["tokens"])} for eps, e in sorted(by_eps.items())}


def log_emission_note(closed: bool) -> str:
    return ("the mechanism's closed form (the same law as the context-free attacker's)" if closed else
            "the Monte Carlo estimate (C(w, o) + 1/N) / (n_w + 1) from the context-free attacker's draws")

