"""The truncated Gumbel mechanism (BRR reading) against its exact law, on real GloVe words (5k artifact,
K=40 table from the neighbour job).

The exact law of the released candidate is computed by numerical integration
(``textdp.mechanisms.truncated_gumbel.output_distribution``: the Poisson weights times the probability that a
candidate has the smallest noisy distance, integrated over the truncated Gumbel density), a
derivation independent of the sampler. G-tests of 40,000 draws (by candidate rank) at significance
1e-5; 4 checks, so a correct sampler fails any with probability below 4e-5. Power: the same draws
against the law at scale b / 1.25 (the noise of a 1.25x larger epsilon) must be rejected (p < 1e-5).
"""

import math

import numpy as np
import pytest

from tests.statcheck import g_test
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.mechanisms.truncated_gumbel import (
    TruncatedGumbel,
    lambert_w0,
    output_distribution,
    poisson_pmf,
    scale_from_epsilon,
    truncated_gumbel_noise,
)

ALPHA = 1e-5
DRAWS = 40_000


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


def rank_law(mech, word_id, scale):
    row_ids = np.asarray(mech.table.ids[word_id], dtype=np.int64)
    row_d = np.asarray(mech.table.distances[word_id], dtype=np.float64)
    row_d[0] = 0.0
    law = output_distribution(row_d, scale, mech.max_distance, mech.mean_candidates, mech.vocab_size - 1)
    return row_ids, law


@pytest.mark.parametrize("word, scale", [("good", 0.5), ("paris", 2.0), ("the", 1.0), ("acting", 0.8)])
def test_sampler_matches_the_exact_law(artifact, word, scale):
    word_id = artifact.word_to_id[word]
    mech = TruncatedGumbel(artifact, 1.0, scale=scale)
    row_ids, law = rank_law(mech, word_id, scale)
    assert law.sum() == pytest.approx(1.0, abs=1e-9)  # Poisson mass beyond the 40-word table is ~1e-14
    released = mech.privatize_ids(np.full(DRAWS, word_id), np.random.default_rng(int(scale * 100) + len(word)))
    rank = {int(w): r for r, w in enumerate(row_ids)}
    ranks = np.array([rank[int(w)] for w in np.unique(released)])
    counts = np.zeros(len(row_ids))
    values, numbers = np.unique(released, return_counts=True)
    counts[[rank[int(v)] for v in values]] = numbers
    assert len(ranks) == len(values)  # every released word is a table word of the input
    assert g_test(counts, law) > ALPHA
    _, sharper = rank_law(mech, word_id, scale / 1.25)
    assert g_test(counts, sharper) < ALPHA
    assert mech.fallbacks == 0


def test_noise_is_a_truncated_gumbel():
    """KS test of the noise against Gumbel(0, b) conditioned on |G| <= bound (1e-5), and the bound holds."""
    from scipy import stats

    scale, bound = 1.5, 2.0
    noise = truncated_gumbel_noise(50_000, scale, bound, np.random.default_rng(2))
    assert np.abs(noise).max() <= bound
    gumbel = stats.gumbel_r(loc=0.0, scale=scale)
    low, high = gumbel.cdf(-bound), gumbel.cdf(bound)
    assert stats.kstest(noise, lambda x: (gumbel.cdf(x) - low) / (high - low)).pvalue > ALPHA


def test_candidates_past_the_table_use_the_exact_search(artifact):
    """With a mean of 60 candidates most draws need more than the 40 table words: the search path."""
    mech = TruncatedGumbel(artifact, 1.0, scale=0.3, mean_candidates=60.0)
    out = mech.privatize_ids(np.full(200, artifact.word_to_id["good"]), np.random.default_rng(0))
    assert mech.fallbacks > 100 and ((out >= 0) & (out < artifact.vocab_size)).all()


def test_scale_relation_and_statement(artifact):
    mech = TruncatedGumbel(artifact, 1.0, scale=0.8)
    assert mech.mean_candidates == pytest.approx(math.log(artifact.vocab_size - 1))
    assert mech.token_epsilon0(10.0) == math.inf
    statement = mech.privacy_statement()
    assert statement["notion"] == "none claimed by textdp" and "no guarantee" in statement["per_token"]
    assert "Gumbel(0, 0.8)" in statement["mechanism"]
    with pytest.raises(ValueError, match="give the Gumbel scale"):
        TruncatedGumbel(artifact, 5.0)  # far below the relation's range on this vocabulary
    big = 2.0 * (1.0 + math.log(artifact.vocab_size)) / mech.min_distance + 10.0 / mech.min_distance
    b = scale_from_epsilon(big, artifact.vocab_size, mech.min_distance, mech.max_distance)
    assert b > 0 and TruncatedGumbel(artifact, big).scale == pytest.approx(b)


def test_lambert_w_and_poisson_without_scipy_match_scipy():
    """The core library computes both without scipy (not a runtime dependency); scipy is the reference."""
    from scipy import special, stats

    for x in (0.0, 1e-9, 0.3, 1.0, math.e, 50.0, 1e6):
        assert lambert_w0(x) == pytest.approx(special.lambertw(x).real, rel=1e-12, abs=1e-15)
    for mean in (0.5, math.log(4999), 60.0):
        np.testing.assert_allclose(poisson_pmf(mean, 400), stats.poisson.pmf(np.arange(401), mean), rtol=1e-9, atol=1e-300)
