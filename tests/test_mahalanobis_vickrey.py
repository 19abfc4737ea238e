"""Mahalanobis and Vickrey on real GloVe vectors (5k artifact) against a direct simulation written here.

The reference is an independent, plain implementation of the papers: the regularized covariance from
``np.cov`` and ``scipy.linalg.sqrtm``, noise l * S^{1/2} v, nearest (and second nearest) word by
float64 brute force, the Vickrey rule with its probability p(t, z). Output distributions are compared
by a two-sample G-test of the released word ids (words with fewer than 20 draws in both samples
pooled) at significance 1e-5; there are 7 such checks here plus 3 KS tests at 1e-5, so a correct
implementation fails any with probability below 1e-4. Power: draws at 1.25 x epsilon must be told
apart from the reference at epsilon (p < 1e-5). Fixed seeds so that a failure reproduces.
"""

import math

import numpy as np
import pytest
from scipy import linalg, stats

from tests.statcheck import two_sample_g
from textdp.mechanisms.madlib import Madlib
from textdp.mechanisms.mahalanobis import Mahalanobis, regularized_covariance
from textdp.mechanisms.vickrey import Vickrey

ALPHA = 1e-5
DRAWS = 10_000
DIM = 50


def reference_covariance(vectors, lam):
    points = np.asarray(vectors, dtype=np.float64)
    sigma = np.cov(points, rowvar=False, ddof=0)
    return lam * sigma / np.mean(np.var(points, axis=0)) + (1 - lam) * np.eye(points.shape[1])


def reference_noisy_points(vectors, word_id, epsilon, draws, rng, root=None):
    g = rng.standard_normal((draws, DIM))
    v = g / np.linalg.norm(g, axis=1, keepdims=True)
    if root is not None:
        v = v @ root.T
    lengths = stats.gamma(a=DIM, scale=1.0 / epsilon).rvs(size=draws, random_state=rng)
    return np.asarray(vectors[word_id], dtype=np.float64) + lengths[:, None] * v


def reference_two_nearest(vectors, points, block=500):
    all_points = np.asarray(vectors, dtype=np.float64)
    sq = (all_points ** 2).sum(axis=1)
    out = np.empty((len(points), 2), dtype=np.int64)
    dist = np.empty((len(points), 2))
    for start in range(0, len(points), block):
        z = points[start:start + block]
        d2 = sq[None, :] - 2.0 * z @ all_points.T + (z ** 2).sum(axis=1)[:, None]
        top = np.argpartition(d2, 1, axis=1)[:, :2]
        top_d = np.take_along_axis(d2, top, axis=1)
        order = np.argsort(top_d, axis=1)
        out[start:start + block] = np.take_along_axis(top, order, axis=1)
        dist[start:start + block] = np.sqrt(np.maximum(np.take_along_axis(top_d, order, axis=1), 0.0))
    return out, dist


def reference_vickrey(vectors, word_id, epsilon, t, draws, rng, root=None):
    pair, dist = reference_two_nearest(vectors, reference_noisy_points(vectors, word_id, epsilon, draws, rng, root))
    p_first = (1 - t) * dist[:, 1] / (t * dist[:, 0] + (1 - t) * dist[:, 1])
    return np.where(rng.random(draws) < p_first, pair[:, 0], pair[:, 1])


# --- Mahalanobis ---------------------------------------------------------------------------------------


def test_covariance_and_its_square_root(small_artifact):
    for lam in (0.0, 0.2, 0.75):
        expected = reference_covariance(small_artifact.vectors, lam)
        np.testing.assert_allclose(regularized_covariance(small_artifact.vectors, lam), expected, rtol=1e-9, atol=1e-12)
    mech = Mahalanobis(small_artifact, 5.0, lam=0.75)
    np.testing.assert_allclose(mech.root, linalg.sqrtm(reference_covariance(small_artifact.vectors, 0.75)).real, atol=1e-9)
    np.testing.assert_allclose(mech.root @ mech.inverse_root, np.eye(DIM), atol=1e-9)
    with pytest.raises(ValueError):
        Mahalanobis(small_artifact, 5.0, lam=1.5)


@pytest.mark.parametrize("epsilon", [2.0, 20.0])
def test_whitened_noise_is_madlib_noise(small_artifact, epsilon):
    """S^{-1/2} (z - phi(w)) must be Madlib's noise: norm Gamma(n, 1/epsilon) (KS, 1e-5) and a direction
    uniform on the sphere (projection on a fixed axis ~ Beta((n-1)/2, (n-1)/2), KS 1e-5 for epsilon 2).
    Power: the norm test rejects Gamma(n, 1/(1.25 epsilon))."""
    mech = Mahalanobis(small_artifact, epsilon, lam=0.75)
    noise = mech.noise(20_000, DIM, np.random.default_rng(int(epsilon)))
    white = noise @ mech.inverse_root
    norms = np.linalg.norm(white, axis=1)
    assert stats.kstest(norms, stats.gamma(a=DIM, scale=1.0 / epsilon).cdf).pvalue > ALPHA
    assert stats.kstest(norms, stats.gamma(a=DIM, scale=1.0 / (1.25 * epsilon)).cdf).pvalue < ALPHA
    if epsilon == 2.0:
        axis = np.eye(DIM)[7]
        beta = stats.beta((DIM - 1) / 2, (DIM - 1) / 2)
        assert stats.kstest((white @ axis / norms + 1) / 2, beta.cdf).pvalue > ALPHA
        # and the Euclidean noise itself is NOT spherical at lam 0.75 (pyPANTERA's renormalised noise would be)
        raw = np.linalg.norm(noise, axis=1)
        assert stats.kstest(raw, stats.gamma(a=DIM, scale=1.0 / epsilon).cdf).pvalue < ALPHA


@pytest.mark.parametrize("word, epsilon, lam", [("good", 8.0, 0.75), ("london", 5.0, 0.2)])
def test_mahalanobis_output_matches_direct_simulation(small_artifact, word, epsilon, lam):
    word_id = small_artifact.word_to_id[word]
    root = linalg.sqrtm(reference_covariance(small_artifact.vectors, lam)).real
    rng = np.random.default_rng(len(word) * 1000 + int(epsilon))
    reference, _ = reference_two_nearest(small_artifact.vectors,
                                         reference_noisy_points(small_artifact.vectors, word_id, epsilon, DRAWS, rng, root))
    ours = Mahalanobis(small_artifact, epsilon, lam=lam).privatize_ids(np.full(DRAWS, word_id), rng)
    assert two_sample_g(ours, reference[:, 0], small_artifact.vocab_size) > ALPHA
    shifted = Mahalanobis(small_artifact, 1.25 * epsilon, lam=lam).privatize_ids(np.full(DRAWS, word_id), rng)
    assert two_sample_g(shifted, reference[:, 0], small_artifact.vocab_size) < ALPHA


# --- Vickrey -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("word, epsilon, t, noise", [("good", 8.0, 0.5, "madlib"), ("paris", 10.0, 0.8, "madlib"),
                                                    ("good", 8.0, 0.5, "mahalanobis")])
def test_vickrey_output_matches_direct_simulation(small_artifact, word, epsilon, t, noise):
    word_id = small_artifact.word_to_id[word]
    root = linalg.sqrtm(reference_covariance(small_artifact.vectors, 0.2)).real if noise == "mahalanobis" else None
    rng = np.random.default_rng(int(100 * t) + int(epsilon))
    reference = reference_vickrey(small_artifact.vectors, word_id, epsilon, t, DRAWS, rng, root)
    ours = Vickrey(small_artifact, epsilon, t=t, noise=noise).privatize_ids(np.full(DRAWS, word_id), rng)
    assert two_sample_g(ours, reference, small_artifact.vocab_size) > ALPHA
    if noise == "madlib":
        shifted = Vickrey(small_artifact, 1.25 * epsilon, t=t, noise=noise).privatize_ids(np.full(DRAWS, word_id), rng)
        assert two_sample_g(shifted, reference, small_artifact.vocab_size) < ALPHA


def test_vickrey_rule_at_its_limits(small_artifact):
    """t = 0 releases the nearest word (Madlib's answer), t = 1 the second nearest, for the same points."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, small_artifact.vocab_size, 2000)
    points = Madlib(small_artifact, 6.0).noisy_vectors(ids, rng)
    pair = Vickrey(small_artifact, 6.0).two_nearest(points)
    ref_pair, _ = reference_two_nearest(small_artifact.vectors, points.astype(np.float64))
    assert (pair == ref_pair).mean() > 0.999  # float32 search vs float64 reference: only near-ties may differ
    np.testing.assert_array_equal(Vickrey(small_artifact, 6.0, t=0.0).choose(points, pair, rng), pair[:, 0])
    np.testing.assert_array_equal(Vickrey(small_artifact, 6.0, t=1.0).choose(points, pair, rng), pair[:, 1])
    np.testing.assert_array_equal(pair[:, 0], Madlib(small_artifact, 6.0).nearest.query(points))


def test_statements_parameters_and_epsilon0(small_artifact):
    mech = Mahalanobis(small_artifact, 4.0, lam=0.3)
    assert mech.parameters()["lam"] == 0.3 and mech.parameters()["mechanism"] == "mahalanobis"
    assert "exp(4 * d_RM(w, w'))" in mech.privacy_statement()["per_token"]
    points = mech.metric_points(small_artifact.vectors[:3])
    a, b = np.asarray(small_artifact.vectors[:2], dtype=np.float64)
    d_rm = math.sqrt((a - b) @ np.linalg.inv(mech.covariance) @ (a - b))
    assert np.linalg.norm(points[0] - points[1]) == pytest.approx(d_rm, rel=1e-9)
    assert mech.token_epsilon0(3.0) == 12.0
    vick = Vickrey(small_artifact, 4.0, t=0.25, noise="mahalanobis", lam=0.3)
    assert vick.parameters() == {"mechanism": "vickrey", "epsilon": 4.0, "vickrey_t": 0.25,
                                 "vickrey_noise": "mahalanobis", "nn": "exact", "lam": 0.3}
    assert "t = 0.25" in vick.privacy_statement()["selection"] and "d_RM" in vick.privacy_statement()["per_token"]
    assert vick.token_epsilon0(3.0) == 12.0
    np.testing.assert_allclose(vick.metric_points(small_artifact.vectors[:3]), points)
    for bad in ({"t": 1.5}, {"noise": "laplace"}, {"nn": "hnsw"}):
        with pytest.raises(ValueError):
            Vickrey(small_artifact, 4.0, **bad)


def test_vickrey_with_annoy_at_tiny_noise_releases_the_input_or_its_neighbour(small_artifact):
    """Annoy's two nearest to a point next to a word: the word itself first (t = 0 releases it), and
    t = 1 releases a different word."""
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 500, 300)
    unique_rows = len(np.unique(np.asarray(small_artifact.vectors)[ids], axis=0)) == len(np.unique(ids))
    first = Vickrey(small_artifact, 1e6, t=0.0, nn="annoy", search_k=20_000).privatize_ids(ids, rng)
    second = Vickrey(small_artifact, 1e6, t=1.0, nn="annoy", search_k=20_000).privatize_ids(ids, rng)
    assert unique_rows and (first == ids).mean() > 0.99 and (second != ids).mean() > 0.99
