"""Accounting: hand-computed examples, the formulas' published special cases, and real vocabularies."""

import math

import numpy as np
import pytest

from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.mechanisms.madlib import Madlib
from textdp.privacy import accounting as acc

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


def test_token_epsilon0_rules(small_artifact, neighbour_artifact_dir):  # noqa: F811
    """epsilon_0 is the mechanism's own (textdp/mechanisms/base.py): Madlib epsilon * diam, TEM capped by gamma."""
    from textdp.mechanisms.tem import TEM

    assert Madlib(small_artifact, 2.0).token_epsilon0(10.0) == pytest.approx(20.0)
    table = open_artifact(neighbour_artifact_dir)
    assert TEM(table, 2.0, gamma=3.0).token_epsilon0(10.0) == pytest.approx(6.0)   # capped by gamma
    assert TEM(table, 2.0, gamma=30.0).token_epsilon0(10.0) == pytest.approx(20.0)  # capped by diam
    eps0, _ = acc.mechanism_token_epsilon0(Madlib(small_artifact, 2.0), small_artifact.vectors, oov_policy="keep")
    assert eps0 == math.inf
    with pytest.raises(ValueError):
        Madlib(small_artifact, 2.0).token_epsilon0(-1.0)


def test_report_says_plainly_when_nothing_is_amplified(default_artifact):
    """The real case: Madlib at epsilon 10 on the 400k GloVe vocabulary, records of 100-300 words."""
    bounds = acc.diameter_bounds(default_artifact.vectors)
    assert 20.0 < bounds.lower <= bounds.upper < 30.0  # GloVe 6B 50d: roughly 21 to 28
    eps0 = Madlib(default_artifact, 10.0).token_epsilon0(bounds.upper)
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
