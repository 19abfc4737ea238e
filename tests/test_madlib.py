"""Madlib: the noise law, exact nearest search, and the two limits of epsilon.

Statistical tests draw from fresh OS entropy (the seed is printed on failure so a failure can be
replayed). Each test's false-failure rate is stated in its docstring; across this module it is
below 1e-3 per run.
"""

import numpy as np
import pytest
from scipy import stats

from textdp.mechanisms.madlib import Madlib, sample_noise
from textdp.search import int8_search
from textdp.search.nearest import AnnoyNearest, ExactNearest

DIM = 50


def fresh_rng():
    seed = int(np.random.SeedSequence().entropy % (2**63))
    return seed, np.random.default_rng(seed)


@pytest.mark.parametrize("epsilon", [0.5, 5.0, 50.0])
def test_noise_magnitude_is_gamma(epsilon):
    """KS test of ||noise|| against Gamma(shape=n, scale=1/epsilon). False-failure rate 1e-4 per case."""
    seed, rng = fresh_rng()
    norms = np.linalg.norm(sample_noise(20_000, DIM, epsilon, rng), axis=1)
    p = stats.kstest(norms, stats.gamma(a=DIM, scale=1.0 / epsilon).cdf).pvalue
    assert p > 1e-4, f"seed={seed} p={p}"
    # Power check: the test would notice the wrong scale (a common bug: scale=epsilon).
    assert stats.kstest(norms, stats.gamma(a=DIM, scale=1.05 / epsilon).cdf).pvalue < 1e-4


def test_noise_direction_is_uniform_on_the_sphere():
    """For v uniform on S^{n-1} and any fixed unit u, (<v,u>+1)/2 ~ Beta((n-1)/2, (n-1)/2).

    KS tests on 6 fixed directions (3 axes, 3 random), each at 1e-5, plus the magnitude being
    independent of direction (Spearman on |<v,u>| vs ||noise||, 1e-5): false-failure rate < 1e-4.
    """
    seed, rng = fresh_rng()
    noise = sample_noise(20_000, DIM, 3.0, rng)
    norms = np.linalg.norm(noise, axis=1)
    direction = noise / norms[:, None]
    axes = [np.eye(DIM)[i] for i in (0, 17, 49)]
    fixed = np.random.default_rng(12345).standard_normal((3, DIM))
    axes += list(fixed / np.linalg.norm(fixed, axis=1, keepdims=True))
    beta = stats.beta((DIM - 1) / 2, (DIM - 1) / 2)
    for u in axes:
        p = stats.kstest((direction @ u + 1) / 2, beta.cdf).pvalue
        assert p > 1e-5, f"seed={seed} p={p}"
    assert stats.spearmanr(np.abs(direction @ axes[0]), norms).pvalue > 1e-5, f"seed={seed}"


def test_noise_rejects_bad_epsilon():
    with pytest.raises(ValueError):
        sample_noise(3, DIM, 0.0, np.random.default_rng())


def _plain_nearest(vectors, points):
    v = np.asarray(vectors, dtype=np.float64)
    return np.array([np.argmin(((v - p) ** 2).sum(axis=1)) for p in np.asarray(points, np.float64)]), v


def _assert_same_nearest(vectors, points, got):
    want, v = _plain_nearest(vectors, points)
    for p, g, w in zip(np.asarray(points, np.float64), got, want):
        if g != w:  # only a float32 rounding tie may differ
            dg, dw = ((v[g] - p) ** 2).sum(), ((v[w] - p) ** 2).sum()
            assert dg - dw <= 1e-4 * max(dw, 1.0), (g, w, dg, dw)
    return want


# both exact searches, whatever the CPU (int8 runs its portable loop where there is no AVX-512 VNNI)
SEARCHES = pytest.mark.parametrize("search", ["blas", pytest.param("int8", marks=pytest.mark.skipif(
    not int8_search.available(), reason="textdp._top2 not built (no C compiler at install)"))])


@SEARCHES
def test_exact_search_equals_plain_reference_on_real_glove(default_artifact, search):
    """Noisy points around real rows (several noise levels) on the full 400k vocabulary, and
    odd block/batch sizes so that block edges are crossed."""
    rng = np.random.default_rng(2024)
    vectors = default_artifact.vectors
    ids = rng.integers(0, len(vectors), 48)
    scales = np.repeat([0.05, 0.5, 2.0, 8.0], 12)[:, None]
    points = vectors[ids] + scales * rng.standard_normal((48, DIM)).astype(np.float32)
    got = ExactNearest(vectors, default_artifact.sqnorms, block_rows=7919, batch=13, search=search).query(points)
    want = _assert_same_nearest(vectors, points, got)
    assert (got == want).mean() >= 0.95
    assert (want[:12] == ids[:12]).all()  # tiny noise: the row itself


@SEARCHES
def test_exact_search_small_vocab_many_points(small_artifact, search):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, small_artifact.vocab_size, 400)
    points = small_artifact.vectors[ids] + rng.standard_normal((400, DIM)).astype(np.float32)
    got = ExactNearest(small_artifact.vectors, small_artifact.sqnorms, search=search).query(points)
    _assert_same_nearest(small_artifact.vectors, points, got)


def _distinct_vector_ids(artifact, count, rng):
    """Ids whose vectors are unique (a duplicated vector could legitimately return its twin)."""
    _, first, counts = np.unique(np.asarray(artifact.vectors), axis=0, return_index=True, return_counts=True)
    unique_ids = first[counts == 1]
    return rng.choice(unique_ids, size=count, replace=True)


@pytest.mark.parametrize("nn", ["exact", "annoy"])
def test_very_large_epsilon_returns_the_input(small_artifact, nn):
    rng = np.random.default_rng()
    ids = _distinct_vector_ids(small_artifact, 3000, rng)
    out = Madlib(small_artifact, epsilon=1e6, nn=nn).privatize_ids(ids, rng)
    np.testing.assert_array_equal(out, ids)


def test_very_small_epsilon_output_is_nearly_independent_of_input(small_artifact):
    """At epsilon=0.01 the noise (norm ~ 5000) swamps the vectors (norm ~ 5): the release
    distributions for two very different words must be the same. Chi-square homogeneity test on
    the 20 most common outputs + 'other' (false-failure rate 1e-4), and the input is almost never
    returned. At epsilon=20, by contrast, the same test separates them (power check)."""
    seed, rng = fresh_rng()
    a, b = small_artifact.word_to_id["good"], small_artifact.word_to_id["london"]

    def table(epsilon):
        mech = Madlib(small_artifact, epsilon=epsilon)
        out_a = mech.privatize_ids(np.full(4000, a), rng)
        out_b = mech.privatize_ids(np.full(4000, b), rng)
        top = np.argsort(-np.bincount(np.concatenate([out_a, out_b]), minlength=small_artifact.vocab_size))[:20]
        rows = []
        for out in (out_a, out_b):
            counts = [(out == t).sum() for t in top]
            rows.append(counts + [len(out) - sum(counts)])
        return np.array(rows), out_a, out_b

    counts, out_a, out_b = table(0.01)
    counts = counts[:, counts.sum(0) > 0]
    assert stats.chi2_contingency(counts).pvalue > 1e-4, f"seed={seed}"
    assert (out_a == a).mean() < 0.01 and (out_b == b).mean() < 0.01
    counts, out_a, out_b = table(20.0)
    counts = counts[:, counts.sum(0) > 0]
    assert stats.chi2_contingency(counts).pvalue < 1e-10
    assert (out_a == a).mean() > 0.5


def test_madlib_is_fresh_per_call_and_reproducible_with_a_seed(small_artifact):
    mech = Madlib(small_artifact, epsilon=5.0)
    ids = np.arange(500)
    one = mech.privatize_ids(ids, np.random.default_rng(99))
    two = mech.privatize_ids(ids, np.random.default_rng(99))
    np.testing.assert_array_equal(one, two)
    rng = np.random.default_rng()
    assert (mech.privatize_ids(ids, rng) != mech.privatize_ids(ids, rng)).any()
    assert one.dtype == np.int64 and ((one >= 0) & (one < small_artifact.vocab_size)).all()


def test_annoy_search_agrees_with_exact_when_noise_is_small(small_artifact):
    """Annoy's recall is measured (benchmarks/bench_madlib.py), not assumed; here only a sanity
    bound on a small vocabulary with little noise, where Annoy with a large search_k is near-exact."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, small_artifact.vocab_size, 500)
    points = small_artifact.vectors[ids] + 0.3 * rng.standard_normal((500, DIM)).astype(np.float32)
    exact = ExactNearest(small_artifact.vectors, small_artifact.sqnorms).query(points)
    approx = AnnoyNearest(small_artifact.annoy_index, search_k=20_000).query(points)
    assert (exact == approx).mean() > 0.9


def test_privacy_statement_and_parameters(small_artifact):
    mech = Madlib(small_artifact, epsilon=10, nn="annoy", search_k=5000)
    assert mech.parameters() == {"mechanism": "madlib", "epsilon": 10.0, "nn": "annoy", "search_k": 5000}
    statement = mech.privacy_statement()
    assert "exp(10 * d(w, w'))" in statement["per_token"]
    assert "post-processing" in statement["nearest_neighbour"]
    with pytest.raises(ValueError, match="nn must be 'exact' or 'annoy', got 'hnsw'"):
        Madlib(small_artifact, epsilon=1, nn="hnsw")


@SEARCHES
def test_exact_search_split_over_threads_gives_the_same_answers(small_artifact, search):
    """The exact search may rank contiguous vocabulary ranges in parallel threads; the answer must be the
    single-threaded one exactly (ties included: the lower id wins in both), for uneven ranges too."""
    from textdp.search.nearest import ExactNearest, search_threads, set_search_threads

    rng = np.random.default_rng(11)
    points = (np.asarray(small_artifact.vectors)[rng.integers(0, 5000, 700)]
              + rng.normal(0, 0.8, (700, small_artifact.dimension))).astype(np.float32)
    points[:5] = small_artifact.vectors[:5]  # exact hits
    single = ExactNearest(small_artifact.vectors, small_artifact.sqnorms, block_rows=97, batch=256, threads=1,
                          search=search).query(points)
    for threads in (2, 3, 7):
        split = ExactNearest(small_artifact.vectors, small_artifact.sqnorms, block_rows=97, batch=256, threads=threads,
                             search=search)
        assert (split.query(points) == single).all(), threads
    before = search_threads()
    try:  # the process-wide setting is what a search without its own count uses
        set_search_threads(4)
        assert (ExactNearest(small_artifact.vectors, small_artifact.sqnorms, block_rows=97, search=search).query(points)
                == single).all()
    finally:
        set_search_threads(before)
