"""The self-check's statistics: an empirical lower bound on the privacy loss of one pair of words.

A mechanism M is epsilon*d-private when, for any two inputs w, w' and ANY set E of outputs,
``P[M(w) in E] <= exp(B(w, w')) P[M(w') in E]`` with the guarantee ``B(w, w') = epsilon * d(w, w')``
(or the mechanism's own per-pair bound, e.g. TEM's ``epsilon * min(d, gamma)``). The self-check
looks for an event that breaks this, from draws only (the mechanism is a black box):

1. draw ``n`` releases of M(w) and ``n`` of M(w') and split each set in two halves, A and B;
2. on half A only, choose the event E: order the outputs by how much more often w released them
   than w' did (the smoothed ratio ``(a + 1/2) / (b + 1/2)`` of their counts), and take the prefix
   of that order whose half-A Clopper-Pearson bound (step 3) is largest; "every output w
   released more often than w'" is one of the prefixes;
3. on half B only, count how often each side's draws fall in E (k of n_B and k' of n_B) and take
   the one-sided Clopper-Pearson bounds ``p_lo <= P[M(w) in E]`` and ``p'_hi >= P[M(w') in E]``,
   each failing with probability at most ``alpha_test / 2``. Then
   ``LCB = ln(p_lo / p'_hi) <= ln(P[M(w) in E] / P[M(w') in E])`` with probability at least
   ``1 - alpha_test``.
4. The pair *violates* the guarantee when ``LCB > B(w, w')``.

Why the false-alarm rate holds. E depends only on half A, which is independent of half B, so for
the fixed E the two Clopper-Pearson bounds hold with their stated probabilities (they are exact
binomial bounds, conservative for every n and p). If M keeps its guarantee, the true log-ratio of
every event is at most B(w, w'), so ``LCB > B`` requires a failed bound: probability at most
``alpha_test``. A run makes ``T`` such tests (every pair, both directions, every epsilon), all
planned before any draw; with ``alpha_test = alpha / T`` (Bonferroni) the probability that a
correct mechanism shows ANY violation in the whole run is at most ``alpha``, whatever the
dependence between tests (a union bound). The false-alarm rate stated in a report is that
``alpha``.

What a pass means. The LCB is a lower bound on what the mechanism leaks for that pair; a pass
says only that these draws found no event beyond the guarantee. How close the LCB comes to the
guarantee (``tightness = LCB / B``) is the test's power for that pair: near 1 a broken mechanism
would have been caught, near 0 the pair could hide a large violation (Madlib in 50 dimensions
leaks far less than epsilon * d on any event of the released words, so its tightness stays low).

Nothing here imports Beam; numpy and scipy (the beta quantile) only.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
from scipy.special import betaincinv

SMOOTHING = 0.5  # added to both counts when ordering outputs by their ratio (half A only)


# --- Clopper-Pearson -------------------------------------------------------------------------------


def cp_lower(k, n, alpha) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound for a binomial p from k successes in n: P(bound > p) <= alpha."""
    k = np.asarray(k, dtype=np.float64)
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), k.shape)
    out = np.zeros(k.shape)
    pos = k > 0
    if pos.any():
        out[pos] = betaincinv(k[pos], n[pos] - k[pos] + 1.0, alpha)
    return out


def cp_upper(k, n, alpha) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound: P(bound < p) <= alpha."""
    k = np.asarray(k, dtype=np.float64)
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), k.shape)
    out = np.ones(k.shape)
    below = k < n
    if below.any():
        out[below] = betaincinv(k[below] + 1.0, n[below] - k[below], 1.0 - alpha)
    return out


def log_ratio_lower_bound(k_w, n_w, k_v, n_v, alpha) -> np.ndarray:
    """ln(p_lo / p'_hi) with each one-sided bound at alpha/2 (-inf when k_w is 0)."""
    lower = cp_lower(k_w, n_w, alpha / 2.0)
    upper = cp_upper(k_v, n_v, alpha / 2.0)
    with np.errstate(divide="ignore"):
        return np.log(lower) - np.log(upper)


# --- histograms of draws ---------------------------------------------------------------------------


def split_histograms(outputs: np.ndarray) -> Tuple[tuple, tuple]:
    """Draws -> ((keys, counts) of the first half, (keys, counts) of the second half).

    Draws are independent and identically distributed, so the first ``n // 2`` and the rest are two
    independent samples; the halves are kept apart from here on.
    """
    outputs = np.asarray(outputs, dtype=np.int64)
    half = len(outputs) // 2
    first = np.unique(outputs[:half], return_counts=True)
    second = np.unique(outputs[half:], return_counts=True)
    return ((first[0], first[1].astype(np.int64)), (second[0], second[1].astype(np.int64)))


def _aligned(keys_w, counts_w, keys_v, counts_v):
    keys = np.union1d(keys_w, keys_v)
    a = np.zeros(len(keys), dtype=np.int64)
    b = np.zeros(len(keys), dtype=np.int64)
    a[np.searchsorted(keys, keys_w)] = counts_w
    b[np.searchsorted(keys, keys_v)] = counts_v
    return keys, a, b


def choose_event(hist_w: tuple, hist_v: tuple, n: int, alpha: float) -> np.ndarray:
    """The output keys of the event E, chosen from one half of the draws (see the module docstring).

    Outputs are grouped by their count pair (a, b) (outputs with equal counts are interchangeable,
    so a prefix never splits a group) and ordered by ``(a + 1/2) / (b + 1/2)``, larger first (then
    by a). Every prefix of groups is scored by the same one-sided Clopper-Pearson log-ratio bound
    used on the other half; the best prefix is E. Empty when w released nothing (n = 0).
    """
    keys, a, b = _aligned(*hist_w, *hist_v)
    seen = a > 0
    keys, a, b = keys[seen], a[seen], b[seen]
    if not len(keys):
        return keys
    pairs, group = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
    group = np.asarray(group).reshape(-1)
    members = np.bincount(group, minlength=len(pairs))
    ratio = (pairs[:, 0] + SMOOTHING) / (pairs[:, 1] + SMOOTHING)
    order = np.lexsort((-pairs[:, 0], -ratio))
    total_a = np.cumsum(pairs[order, 0] * members[order])
    total_b = np.cumsum(pairs[order, 1] * members[order])
    score = log_ratio_lower_bound(total_a, n, total_b, n, alpha)
    best = int(np.argmax(score))
    chosen_groups = order[:best + 1]
    in_event = np.isin(group, chosen_groups)
    return keys[in_event]


def count_in(hist: tuple, event_keys: np.ndarray) -> int:
    keys, counts = hist
    return int(counts[np.isin(keys, event_keys, assume_unique=True)].sum())


def directional_test(halves_w: tuple, halves_v: tuple, n_first: int, n_second: int, alpha_test: float) -> dict:
    """Lower bound on ln(P[M(w) in E] / P[M(w') in E]) for the event E chosen on the first halves.

    ``halves_w`` = (first-half histogram, second-half histogram) of M(w), the same for M(w') in
    ``halves_v``. Returns the bound (``lcb``, -inf when w's second half never falls in E), the
    plain estimate ln(k/k') and the counts behind them.
    """
    event = choose_event(halves_w[0], halves_v[0], n_first, alpha_test)
    k_w = count_in(halves_w[1], event)
    k_v = count_in(halves_v[1], event)
    lcb = float(log_ratio_lower_bound(np.array([k_w]), n_second, np.array([k_v]), n_second, alpha_test)[0])
    if k_w > 0 and k_v > 0:
        estimate = math.log(k_w / k_v)
    elif k_w > 0:
        estimate = math.inf
    else:
        estimate = -math.inf if k_v > 0 else math.nan
    return {"lcb": lcb, "estimate": estimate, "event_size": int(len(event)), "k_w": k_w, "k_v": k_v,
            "n_second_half": int(n_second)}


def per_test_alpha(false_alarm_rate: float, tests: int) -> float:
    """Bonferroni: the level of each of ``tests`` tests so that all of them together stay below the rate."""
    if not 0 < false_alarm_rate < 1:
        raise ValueError("the false-alarm rate must be in (0, 1)")
    if tests < 1:
        raise ValueError("a run makes at least one test")
    return false_alarm_rate / tests


def verdict(lcb: float, bound: float) -> str:
    """'violation' when the lower bound exceeds a finite guarantee; 'no guarantee' when none is claimed
    (bound inf) and the draws still tell the words apart (lcb > 0); else 'pass'."""
    if math.isinf(bound):
        return "no guarantee" if lcb > 0 else "pass"
    return "violation" if lcb > bound else "pass"
