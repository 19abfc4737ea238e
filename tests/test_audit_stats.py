"""The self-check's statistics: Clopper-Pearson bounds, the event choice, the directional test.

The bounds are checked exactly (their coverage is a finite sum of binomial probabilities: no
randomness). The false-alarm property of the whole test is checked by simulation on a two-output
mechanism that sits exactly at its bound (randomized response): 300 independent tests at level
0.1 each must raise at most the binomial 1 - 1e-6 quantile of Bin(300, 0.1) alarms; the power
check (the same mechanism claiming a bound 40% too small) must raise alarms in most tests. Fixed
seeds; the chance that a correct implementation fails this module is below 1e-5.
"""

import math

import numpy as np
import pytest
from scipy import stats

from textdp.audit.stats import (
    choose_event,
    cp_lower,
    cp_upper,
    directional_test,
    log_ratio_lower_bound,
    per_test_alpha,
    split_histograms,
    verdict,
)


@pytest.mark.parametrize("n, p, alpha", [(50, 0.3, 0.05), (200, 0.01, 0.01), (1000, 0.5, 1e-4), (30, 0.97, 0.1)])
def test_clopper_pearson_coverage_is_exact(n, p, alpha):
    """P(lower bound > p) and P(upper bound < p), summed exactly over the binomial, are at most alpha."""
    k = np.arange(n + 1)
    pmf = stats.binom.pmf(k, n, p)
    assert pmf[cp_lower(k, n, alpha) > p].sum() <= alpha + 1e-12
    assert pmf[cp_upper(k, n, alpha) < p].sum() <= alpha + 1e-12
    # and they are the beta quantiles, with the conventional ends
    np.testing.assert_allclose(cp_lower(k[1:], n, alpha), stats.beta.ppf(alpha, k[1:], n - k[1:] + 1), rtol=1e-9)
    assert cp_lower(0, n, alpha) == 0.0 and cp_upper(n, n, alpha) == 1.0


def test_log_ratio_bound_is_minus_infinity_without_evidence():
    assert log_ratio_lower_bound(np.array([0]), 100, np.array([0]), 100, 0.01)[0] == -math.inf
    value = log_ratio_lower_bound(np.array([90]), 100, np.array([0]), 100, 0.01)[0]
    expected = math.log(stats.beta.ppf(0.005, 90, 11)) - math.log(stats.beta.ppf(0.995, 1, 100))
    assert value == pytest.approx(expected, rel=1e-9)


def test_event_is_where_w_dominates():
    """Outputs 1 and 2 come (almost) only from w: the chosen event is exactly them."""
    hist_w = (np.array([1, 2, 3, 4]), np.array([400, 300, 200, 100]))
    hist_v = (np.array([1, 3, 4, 5]), np.array([1, 250, 300, 449]))
    event = choose_event(hist_w, hist_v, 1000, 0.01)
    assert set(event.tolist()) == {1, 2}
    assert choose_event((np.array([], np.int64), np.array([], np.int64)), hist_v, 1000, 0.01).size == 0


def test_split_histograms_keeps_halves_apart():
    outputs = np.array([5, 5, 7, 9, 9, 9, 1])
    (k1, c1), (k2, c2) = split_histograms(outputs)
    assert dict(zip(k1.tolist(), c1.tolist())) == {5: 2, 7: 1}
    assert dict(zip(k2.tolist(), c2.tolist())) == {9: 3, 1: 1}


def _randomized_response(bound, rng, n):
    """Two outputs; P_w(0) = e^b / (1 + e^b), P_w'(0) = 1 / (1 + e^b): the log-ratio is exactly b."""
    p = math.exp(bound) / (1 + math.exp(bound))
    w = (rng.random(n) >= p).astype(np.int64)  # 0 with probability p
    v = (rng.random(n) >= 1 - p).astype(np.int64)
    return split_histograms(w), split_histograms(v)


def test_false_alarm_rate_at_the_bound_and_power_beyond_it():
    rng = np.random.default_rng(20261123)
    tests, alpha, n, bound = 300, 0.1, 4000, 1.0
    alarms = 0
    for _ in range(tests):
        halves_w, halves_v = _randomized_response(bound, rng, n)
        result = directional_test(halves_w, halves_v, n // 2, n - n // 2, alpha)
        alarms += verdict(result["lcb"], bound) == "violation"
    assert alarms <= stats.binom.ppf(1 - 1e-6, tests, alpha)
    # power: the same draws' mechanism really has log-ratio 1.0 but claims 0.6
    flagged = 0
    for _ in range(40):
        halves_w, halves_v = _randomized_response(bound, rng, n)
        result = directional_test(halves_w, halves_v, n // 2, n - n // 2, alpha)
        flagged += verdict(result["lcb"], 0.6) == "violation"
    assert flagged >= 30


def test_bonferroni_and_verdicts():
    assert per_test_alpha(0.001, 400) == pytest.approx(2.5e-6)
    with pytest.raises(ValueError):
        per_test_alpha(1.5, 10)
    assert verdict(2.0, 1.0) == "violation" and verdict(0.5, 1.0) == "pass"
    assert verdict(3.0, math.inf) == "no guarantee" and verdict(-math.inf, math.inf) == "pass"
