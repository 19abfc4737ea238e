"""Accounting: hand-computed examples, the formulas' published special cases, and real vocabularies."""

import math

import numpy as np
import pytest

from textdp import accounting as acc


# --- diameter ---------------------------------------------------------------------------------


def test_diameter_bounds_on_a_line_are_exact():
    # points 0, 1, 3: centroid 4/3, distances 4/3, 1/3, 5/3 -> upper 5/3 + 4/3 = 3 = the diameter
    bounds = acc.diameter_bounds(np.array([[0.0], [1.0], [3.0]], dtype=np.float32))
    assert bounds.lower == pytest.approx(3.0)
    assert bounds.upper == pytest.approx(3.0)


def _exact_diameter(vectors, block=1000):
    vectors = np.asarray(vectors, dtype=np.float64)
    sq = (vectors ** 2).sum(axis=1)
    best = 0.0
    for start in range(0, len(vectors), block):
        rows = vectors[start:start + block]
        d2 = sq[start:start + block, None] + sq[None, :] - 2.0 * rows @ vectors.T
        best = max(best, float(d2.max()))
    return math.sqrt(best)


def test_diameter_bounds_bracket_the_exact_diameter_of_5000_glove_words(small_artifact):
    exact = _exact_diameter(small_artifact.vectors)
    bounds = acc.diameter_bounds(small_artifact.vectors)
    assert bounds.lower <= exact + 1e-6
    assert exact <= bounds.upper + 1e-6
    assert bounds.upper <= 2.0 * bounds.lower  # the centroid bound is never worse than a factor 2


def test_token_epsilon0_rules():
    assert acc.token_epsilon0("madlib", 2.0, 10.0) == pytest.approx(20.0)
    assert acc.token_epsilon0("tem", 2.0, 10.0, gamma=3.0) == pytest.approx(6.0)   # capped by gamma
    assert acc.token_epsilon0("tem", 2.0, 10.0, gamma=30.0) == pytest.approx(20.0)  # capped by diam
    assert acc.token_epsilon0("madlib", 2.0, 10.0, oov_policy="keep") == math.inf
    with pytest.raises(ValueError):
        acc.token_epsilon0("tem", 2.0, 10.0)
    with pytest.raises(ValueError):
        acc.token_epsilon0("other", 2.0, 10.0)


def test_local_guarantees_per_token_and_record():
    assert acc.token_guarantee(0.5, 3.0) == pytest.approx(1.5)
    assert acc.record_guarantee(2.0, [1.0, 0.5, 0.0]) == pytest.approx(3.0)
    assert acc.record_epsilon0(2.5, 4) == pytest.approx(10.0)
    assert acc.record_epsilon0(math.inf, 0) == 0.0


# --- Poisson sub-sampling -------------------------------------------------------------------------


def test_subsampling_hand_computed_and_special_cases():
    # ln(1 + 0.1 (e - 1)) = ln(1.1718281828) = ln(1.17) + ln(1.0015625) = 0.157004 + 0.001561 = 0.158565
    assert acc.poisson_subsampling_epsilon(1.0, 0.1) == pytest.approx(math.log(1.0 + 0.1 * (math.e - 1.0)))
    assert acc.poisson_subsampling_epsilon(1.0, 0.1) == pytest.approx(0.158565, abs=1e-6)
    assert acc.poisson_subsampling_epsilon(3.0, 1.0) == pytest.approx(3.0)           # q = 1: no change
    assert acc.poisson_subsampling_epsilon(1e-6, 0.2) == pytest.approx(2e-7, rel=1e-5)  # small eps: ~ q eps
    assert acc.poisson_subsampling_epsilon(2.0, 1e-9) < 1e-8                          # q -> 0: -> 0
    # large eps does not overflow and tends to eps + ln q
    assert acc.poisson_subsampling_epsilon(1000.0, 0.5) == pytest.approx(1000.0 + math.log(0.5))
    assert acc.poisson_subsampling_epsilon(math.inf, 0.5) == math.inf
    with pytest.raises(ValueError):
        acc.poisson_subsampling_epsilon(1.0, 0.0)


# --- shuffling (Feldman, McMillan, Talwar 2021, Thm. 3.1) -----------------------------------------


def test_shuffle_hand_computed_example():
    """eps0 = 1, n = 10^6, delta = 1e-6, worked by hand.

    a = 8 sqrt(e ln(4e6)) / 1000 = 0.0514262, c = 8 e / 1e6 = 2.1746e-5.
    As stated: ln(1 + (e-1)/(e+1) (a + c)) = 0.0234968.
    Reference-code factor (1 - 1/e) / (1 + e^(-1 - ln(1 + a + c))) gives 0.0238064, the larger: returned.
    Condition: ln(1e6 / (16 ln(4e6))) = 8.32151.
    """
    bound = acc.shuffle_epsilon(1.0, 10 ** 6, 1e-6)
    assert bound.valid and bound.amplified
    assert bound.condition_max_epsilon0 == pytest.approx(8.32151, abs=1e-5)
    assert bound.epsilon == pytest.approx(0.0238064, abs=1e-6)
    a = 8 * math.sqrt(math.e * math.log(4e6)) / 1000
    c = 8 * math.e / 1e6
    stated = math.log(1 + (math.e - 1) / (math.e + 1) * (a + c))
    assert stated == pytest.approx(0.0234968, abs=1e-6)
    assert bound.epsilon >= stated


def test_shuffle_condition_is_checked():
    n, delta = 10 ** 6, 1e-6
    limit = math.log(n / (16 * math.log(4 / delta)))
    assert acc.shuffle_epsilon(limit - 1e-9, n, delta).valid
    beyond = acc.shuffle_epsilon(limit + 1e-9, n, delta)
    assert not beyond.valid and beyond.epsilon is None and not beyond.amplified
    # the published condition ln(n / (16 ln(2/delta))) is looser; we require the stricter one
    assert limit < math.log(n / (16 * math.log(2 / delta)))
    small = acc.shuffle_epsilon(0.01, 100, delta)  # n < 16 ln(4/delta): no epsilon0 qualifies
    assert not small.valid and small.condition_max_epsilon0 < 0


def test_shuffle_special_cases():
    # eps0 -> 0: the shuffled epsilon -> 0
    assert acc.shuffle_epsilon(1e-9, 10 ** 5, 1e-6).epsilon < 1e-9
    # the abstract's rate: eps = O((1 - e^-e0) sqrt(e^e0 ln(1/delta) / n)). With the theorem's constants
    # the ratio to (1 - e^-e0) sqrt(e^e0 ln(4/delta) / n) stays bounded and tends to 8 / (1 + e^-e0)
    # as n -> infinity (the 8 e^e0 / n term vanishes and ln(1 + x) ~ x)
    delta = 1e-6
    for e0 in (0.5, 1.0, 2.0):
        ratios = []
        for n in (10 ** 5, 10 ** 6, 10 ** 7, 10 ** 8):
            scale = -math.expm1(-e0) * math.sqrt(math.exp(e0) * math.log(4 / delta) / n)
            ratios.append(acc.shuffle_epsilon(e0, n, delta).epsilon / scale)
        assert all(r < 8.5 for r in ratios)
        assert ratios[-1] == pytest.approx(8 / (1 + math.exp(-e0)), rel=1e-2)
    # at the condition's edge (8.3215 for n = 1e6, delta = 1e-6) the bound is still below eps0
    edge = acc.shuffle_epsilon(8.3, 10 ** 6, 1e-6)
    assert edge.valid and edge.amplified and 1.0 < edge.epsilon < 8.3


def test_shuffle_by_shape_needs_every_group_to_qualify():
    shapes = {(1,): 10 ** 6}
    result = acc.shuffle_by_shape(0.5, shapes, 1e-6)
    assert result["claimed"] and result["epsilon"] == pytest.approx(acc.shuffle_epsilon(0.5, 10 ** 6).epsilon)
    shapes[(3,)] = 1  # one author alone with 3 words: cannot hide, nothing is claimed for everyone
    result = acc.shuffle_by_shape(0.5, shapes, 1e-6)
    assert not result["claimed"] and result["epsilon"] is None
    assert result["authors_with_amplification"] == 10 ** 6 and result["authors"] == 10 ** 6 + 1


def test_report_says_plainly_when_nothing_is_amplified(default_artifact):
    """The real case: Madlib at epsilon 10 on the 400k GloVe vocabulary, records of 100-300 words."""
    bounds = acc.diameter_bounds(default_artifact.vectors)
    assert 20.0 < bounds.lower <= bounds.upper < 30.0  # GloVe 6B 50d: roughly 21 to 28
    eps0 = acc.token_epsilon0("madlib", 10.0, bounds.upper)
    shapes = {(length,): 5 for length in range(100, 300)}
    report = acc.amplification_report(eps0, shapes, shuffled=True, subsample_rate=0.5, k_threshold=5)
    assert report["shuffle"]["claimed"] is False
    assert report["shuffle"]["statement"].startswith("no amplification claimed")
    assert report["subsample"]["claimed"] is False and "No amplification is claimed" in report["subsample"]["statement"]
    assert report["k_threshold"]["claimed"] is False and "heuristic" in report["k_threshold"]["statement"]
    assert report["local"]["record_epsilon0"] == pytest.approx(299 * eps0)


def test_report_claims_the_theorem_when_it_applies():
    report = acc.amplification_report(0.001, {(5,): 10 ** 6}, shuffled=True, delta=1e-6)
    expected = acc.shuffle_epsilon(0.005, 10 ** 6, 1e-6).epsilon
    assert report["shuffle"]["claimed"] and report["shuffle"]["epsilon"] == pytest.approx(expected)
    assert f"{expected:.6g}" in report["shuffle"]["statement"]
    # the claim keeps its restriction (docs/lac.md): only the words change, within the same released shape
    statement = report["shuffle"]["statement"]
    assert "for every record" in statement and "privatized words only" in statement
    assert "released shape is the same" in statement and "swapped within that shape" in statement
    per_author = acc.amplification_report(0.001, {(5,): 10 ** 6}, shuffled=True, delta=1e-6, per_author=True)
    assert "for every author" in per_author["shuffle"]["statement"] and "record or author" not in statement


def test_an_unbounded_epsilon0_is_not_called_a_bound():
    """Issue 24 item 6: with epsilon_0 = inf (truncated-gumbel, SanText+ with p < 1, CusText with several groups,
    --oov-policy keep) the local statement says no finite bound is claimed and why; it never says 'inf-LDP' or
    derives it from the vocabulary diameter."""
    report = acc.amplification_report(math.inf, {(5,): 10}, shuffled=True, subsample_rate=0.5,
                                      epsilon0_reason="custext: words of different groups have disjoint outputs")
    local = report["local"]["statement"]
    assert local.startswith("no finite pure local-DP bound is claimed for a released word")
    assert "custext: words of different groups" in local
    assert "inf-LDP" not in local and "diameter" not in local
    assert report["shuffle"]["claimed"] is False
    finite = acc.amplification_report(0.5, {(5,): 10}, shuffled=False)["local"]["statement"]
    assert finite.startswith("every released word is 0.5-LDP over the vocabulary") and "at most 2.5 here" in finite


def test_estimated_word_counts_withhold_the_shuffle_claim():
    report = acc.amplification_report(0.001, {(5,): 10 ** 6}, shuffled=True, delta=1e-6, exact_word_counts=False)
    assert report["shuffle"]["claimed"] is False and report["shuffle"]["epsilon"] is None
    assert report["shuffle"]["statement"].startswith("no amplification claimed")
