"""TEM: gamma (Thm. 4.2), the closed form, and the sampler against the closed form on real GloVe
words with a table computed by the neighbour job (FnApiRunner, K=40 on the 5k artifact).

Statistical tests: every (word, epsilon, gamma) case runs a G-test of 100,000 draws against the
exact distribution (cells with expected count < 20 are pooled into one cell) and a binomial z-test of
the share of draws outside the K-nearest table; the batch tests z-test each word's P(self). Every
check is at significance 1e-5; there are 54 checks in this file, so the chance that a correct
sampler fails any of them is below 54 x 1e-5 = 5.4e-4 (Bonferroni). Draws use fixed seeds so a failure reproduces.
"""

import math

import numpy as np
import pytest
from scipy.stats import chi2, norm

from tests.test_neighbours import angular_artifact_dir, neighbour_artifact_dir  # noqa: F401  (fixtures)
from textdp.artifact.locate import open_artifact
from textdp.artifact.neighbours import metric_points
from textdp.errors import ArtifactError
from textdp.mechanisms.tem import TEM, gamma_from_beta, output_distribution

ALPHA = 1e-5
DRAWS = 100_000


def g_test(counts, probs, min_expected=20.0):
    expected = probs * counts.sum()
    big = expected >= min_expected
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    nonzero = observed > 0
    stat = 2.0 * (observed[nonzero] * np.log(observed[nonzero] / expected[nonzero])).sum()
    return chi2.sf(stat, len(observed) - 1)


def exact_distribution(artifact, tem, word_id):
    points = metric_points(artifact.vectors, tem.metric, dtype=np.float64)
    dist = np.linalg.norm(points - points[word_id], axis=1)
    return output_distribution(dist, tem.epsilon, tem.gamma, self_id=word_id)


def check_against_closed_form(artifact, tem, word, seed):
    word_id = artifact.word_to_id[word]
    probs = exact_distribution(artifact, tem, word_id)
    released = tem.privatize_ids(np.full(DRAWS, word_id), np.random.default_rng(seed))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, probs) > ALPHA
    outside = np.ones(artifact.vocab_size, dtype=bool)
    outside[np.asarray(tem.table.ids[word_id])] = False
    p_out = probs[outside].sum()
    share = counts[outside].sum() / DRAWS
    if 0 < p_out < 1:
        z = (share - p_out) / math.sqrt(p_out * (1 - p_out) / DRAWS)
        assert abs(z) < norm.isf(ALPHA / 2)
    assert tem.envelope_violations == 0
    return p_out


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


def test_gamma_is_theorem_4_2():
    """gamma is the smallest threshold for which Thm. 4.2's bound holds: at it, the mass beyond gamma
    for an input with every other word at distance >= gamma is exactly beta."""
    for eps, n, beta in ((10, 400_000, 0.001), (5, 400_000, 0.001), (1, 5000, 0.01), (0.5, 10, 0.2)):
        gamma = gamma_from_beta(eps, n, beta)
        assert gamma == pytest.approx(2 / eps * math.log((1 - beta) * (n - 1) / beta), rel=1e-12)
        far = (n - 1) * math.exp(-eps * gamma / 2)
        assert far / (1 + far) == pytest.approx(beta, rel=1e-9)
    assert gamma_from_beta(10, 400_000) == pytest.approx(3.961, abs=1e-3)
    assert gamma_from_beta(5, 400_000) == pytest.approx(7.922, abs=1e-3)
    for bad in ((0, 10, 0.1), (1, 1, 0.1), (1, 10, 0), (1, 10, 1)):
        with pytest.raises(ValueError):
            gamma_from_beta(*bad)


def test_output_distribution_closed_form():
    dist = np.array([0.007, 0.5, 1.0, 3.0, 9.0, 50.0])
    p = output_distribution(dist, epsilon=2.0, gamma=3.0, self_id=0)
    assert p.sum() == pytest.approx(1.0) and p[0] == p.max()
    weights = np.exp(-np.minimum([0.0, 0.5, 1.0, 3.0, 3.0, 3.0], 3.0))
    np.testing.assert_allclose(p, weights / weights.sum(), rtol=1e-12)
    assert p[3] == p[4] == p[5]  # everything beyond gamma is one flat floor
    rows = output_distribution(np.vstack([dist, dist[::-1]]), 2.0, 3.0, self_id=[0, 5])
    np.testing.assert_allclose(rows[0], p) and np.testing.assert_allclose(rows[1], p[::-1])
    huge = output_distribution(np.array([0.0, 1e6]), 1e6, 1e9)  # no underflow to 0/0
    assert huge[0] == 1.0 and huge[1] == 0.0


@pytest.mark.parametrize("word", ["good", "paris", "london"])
@pytest.mark.parametrize("epsilon, gamma", [
    (1.0, None),   # gamma 17: the bottom element and the words between d_K and gamma carry almost all mass
    (3.0, None),   # gamma 5.7 > d_K: rejection through the excess envelope does real work
    (6.0, None),   # gamma 2.8: mostly the table; tails still visible
    (2.0, 2.5),    # given gamma near d_K: the uniform floor (bottom element) carries real mass
    (20.0, None),  # gamma below d_K: table plus a flat floor, no rejection
    (2.0, 0.0),    # gamma 0: every word equally likely (uniform output)
])
def test_sampler_matches_closed_form(artifact, word, epsilon, gamma):
    tem = TEM(artifact, epsilon, gamma=gamma)
    seed = hash((word, epsilon, gamma)) % 2**32
    check_against_closed_form(artifact, tem, word, seed)


@pytest.mark.parametrize("word, epsilon, gamma", [("good", 3.0, None), ("the", 1.0, None), ("paris", 2.0, 2.5)])
def test_dense_rows_for_frequent_words_match_closed_form(artifact, word, epsilon, gamma):
    """A word that has cost enough on-the-fly distances gets a dense row (proposal from float32
    bounds, exact acceptance); its draws must follow the same closed form."""
    tem = TEM(artifact, epsilon, gamma=gamma)
    tem.DENSE_AFTER_CANDIDATES = 0  # build at the first chance
    word_id = artifact.word_to_id[word]
    tem.privatize_ids(np.full(50, word_id), np.random.default_rng(0))
    assert word_id in tem._dense_rows
    check_against_closed_form(artifact, tem, word, seed=hash((word, epsilon, "dense")) % 2**32)


def test_bottom_element_carries_real_mass_in_the_checked_cases(artifact):
    """Guard for the test above: the cases do exercise the part of the distribution outside the table."""
    shares = {}
    for eps, gamma in ((1.0, None), (3.0, None), (2.0, 2.5)):
        tem = TEM(artifact, eps, gamma=gamma)
        word_id = artifact.word_to_id["good"]
        probs = exact_distribution(artifact, tem, word_id)
        outside = np.ones(artifact.vocab_size, dtype=bool)
        outside[np.asarray(tem.table.ids[word_id])] = False
        shares[(eps, gamma)] = probs[outside].sum()
    assert shares[(1.0, None)] > 0.9 and 0.2 < shares[(3.0, None)] < 0.95 and shares[(2.0, 2.5)] > 0.3


def test_angular_table_sampler_matches_closed_form(angular_artifact_dir):  # noqa: F811
    artifact = open_artifact(angular_artifact_dir)
    tem = TEM(artifact, 8.0)
    assert tem.metric == "angular" and tem.parameters()["metric"] == "angular"
    check_against_closed_form(artifact, tem, "movie", seed=11)


@pytest.mark.parametrize("rounds_in_memory, per_word", [(None, 20000), (1000, 5000)])
def test_mixed_batch_draws_independently_per_token(artifact, rounds_in_memory, per_word):
    """A batch with many words: each token's share of 'unchanged' matches its own P(self); also
    when only 1,000 rounds fit in memory at once, so most tokens wait for later blocks."""
    words = ["the", "good", "paris", "acting", "however"]
    ids = np.repeat(artifact.ids_of(words), per_word)
    tem = TEM(artifact, 4.0)
    if rounds_in_memory:
        tem.MAX_ROUNDS_TOTAL = rounds_in_memory
    else:  # frequent words switch to dense rows part way through the batches
        tem.DENSE_AFTER_CANDIDATES = 20000
    released = tem.privatize_ids(np.random.default_rng(3).permutation(ids), np.random.default_rng(4))
    # order was permuted: compare per word through the permutation
    perm_ids = np.random.default_rng(3).permutation(ids)
    for word_id in artifact.ids_of(words):
        p_self = exact_distribution(artifact, tem, word_id)[word_id]
        share = (released[perm_ids == word_id] == word_id).mean()
        z = (share - p_self) / math.sqrt(p_self * (1 - p_self) / per_word)
        assert abs(z) < norm.isf(ALPHA / 2)
    assert bool(tem._dense_rows) == (rounds_in_memory is None)


def test_parameters_and_privacy_statement(artifact):
    tem = TEM(artifact, 4.0)
    params = tem.parameters()
    assert params["mechanism"] == "tem" and params["epsilon"] == 4.0 and params["beta"] == 0.001
    assert params["gamma"] == pytest.approx(gamma_from_beta(4.0, 5000)) and params["neighbour_k"] == 40
    statement = tem.privacy_statement()
    assert "exp(4 * d(w, w'))" in statement["per_token"]
    assert f"exp({4.0 * tem.gamma:g})" in statement["per_token_cap"]
    given = TEM(artifact, 4.0, gamma=1.5)
    assert given.gamma == 1.5 and "beta" not in given.parameters() and given.parameters()["gamma_source"] == "given"


def test_seeded_runs_repeat_and_fresh_generators_differ(artifact):
    ids = artifact.ids_of(["good", "film", "acting"] * 2000)
    tem = TEM(artifact, 3.0)
    first = tem.privatize_ids(ids, np.random.default_rng(1))
    assert (first == tem.privatize_ids(ids, np.random.default_rng(1))).all()
    assert (first != tem.privatize_ids(ids, np.random.default_rng())).any()


def test_refusals(artifact, small_artifact):
    with pytest.raises(ArtifactError, match="textdp neighbours --artifact"):
        TEM(small_artifact, 1.0)
    for kwargs in ({"epsilon": 0}, {"epsilon": 1, "gamma": -1}, {"epsilon": 1, "beta": 1.5}):
        with pytest.raises(ValueError):
            TEM(artifact, **kwargs)
    with pytest.raises(ValueError, match="out of range"):
        TEM(artifact, 1.0).privatize_ids(np.array([5000]), np.random.default_rng())
