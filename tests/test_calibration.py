"""Calibration statistics: estimators against exactly known values, exact pruned search, helpers.

Exactly known N_w and S_w come from synthetic vocabularies built as real artifacts (a .npy matrix
plus a vocabulary file through ``build_artifact``) where Madlib's output distribution can be
computed without sampling:

- 1-D (n = 1): the noise is +-Gamma(1, 1/eps), i.e. Laplace(0, 1/eps); nearest-word cells are
  the intervals between midpoints, so every output probability is a difference of Laplace CDFs.
- 2-D square lattice (n = 2): the noise density is eps^2/(2 pi) exp(-eps |z|); each word's
  Voronoi cell is a square (clipped far away), integrated numerically (scipy, error < 1e-9).

Then N_w = P(w), E[S_w estimate] = sum_i 1 - (1 - p_i)^samples. A count of M(w) = w must lie in
the exact binomial interval of probability 1 - 1e-6, and the distinct count within the Bernstein
deviation of probability 1 - 1e-6 (:func:`distinct_count_deviation`). Randomness is fresh OS
entropy (the seed is printed on failure); with fewer than 60 such checks in this module, the
false-failure rate of a run is below 1e-4 (union bound).
"""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from textdp.artifact.embeddings import EmbeddingSource
from textdp.artifact.locate import open_artifact
from textdp.artifact.store import build_artifact
from textdp.calibration.statistics import (
    CandidatePrunedSearch,
    WordCalibrator,
    describe_values,
    distance_row,
    distinct_count_deviation,
    expected_distinct,
    knn_distance_percentiles,
    knn_distances,
    recommend,
    stratified_word_sample,
    summarise_statistics,
)
from textdp.mechanisms.madlib import Madlib

CHECK_FAILURE_RATE = 1e-6


def fresh_rng():
    seed = int(np.random.SeedSequence().entropy % (2**63))
    return seed, np.random.default_rng(seed)


def make_artifact(tmp_path_factory, name, matrix):
    """A real artifact from a .npy matrix and a vocabulary file (words w0, w1, ...)."""
    root = tmp_path_factory.mktemp(name)
    npy, vocab = root / "vectors.npy", root / "vocab.txt"
    np.save(npy, np.asarray(matrix, dtype=np.float32))
    vocab.write_text("".join(f"w{i}\n" for i in range(len(matrix))), encoding="utf-8")
    path = build_artifact(EmbeddingSource("npy", str(npy), str(vocab)), str(root / "artifact"), trees=5, seed=0)
    return open_artifact(path)


# --- exact output distributions of Madlib on synthetic vocabularies ----------------------------------

LINE_POSITIONS = np.array([0.0, 0.4, 1.0, 1.3, 2.1, 2.6, 3.0, 3.9, 4.2, 5.0, 5.5, 6.3])


@pytest.fixture(scope="module")
def line_artifact(tmp_path_factory):
    return make_artifact(tmp_path_factory, "line", LINE_POSITIONS[:, None])


def laplace_cdf(t, epsilon):
    t = np.asarray(t, dtype=np.float64)
    return np.where(t < 0, 0.5 * np.exp(epsilon * np.minimum(t, 0)), 1 - 0.5 * np.exp(-epsilon * np.maximum(t, 0)))


def line_output_distribution(word, epsilon):
    """Exact P(M(word) = i) on the 1-D vocabulary: Laplace mass of i's nearest-word interval."""
    x = LINE_POSITIONS
    mids = (x[1:] + x[:-1]) / 2
    lower = np.concatenate([[-np.inf], mids]) - x[word]
    upper = np.concatenate([mids, [np.inf]]) - x[word]
    return laplace_cdf(upper, epsilon) - laplace_cdf(lower, epsilon)


GRID_SIDE = 7
GRID_RADIUS_CLIP = 40.0  # noise beyond this radius has probability < 1e-30 at the epsilons used


@pytest.fixture(scope="module")
def grid_artifact(tmp_path_factory):
    xs, ys = np.meshgrid(np.arange(GRID_SIDE, dtype=float), np.arange(GRID_SIDE, dtype=float), indexing="ij")
    return make_artifact(tmp_path_factory, "grid", np.stack([xs.ravel(), ys.ravel()], axis=1))


def grid_output_distribution(word, epsilon):
    """Exact P(M(word) = i) on the 7x7 unit lattice by integrating the 2-D Madlib noise density
    eps^2/(2 pi) exp(-eps |z|) over each word's square Voronoi cell (outer cells clipped at a
    radius whose outside mass is negligible)."""
    cx, cy = divmod(word, GRID_SIDE)
    density = lambda y, x: epsilon ** 2 / (2 * math.pi) * math.exp(-epsilon * math.hypot(x, y))  # noqa: E731
    probabilities = np.empty(GRID_SIDE * GRID_SIDE)
    for i in range(GRID_SIDE * GRID_SIDE):
        gx, gy = divmod(i, GRID_SIDE)
        x0 = -GRID_RADIUS_CLIP if gx == 0 else gx - 0.5 - cx
        x1 = GRID_RADIUS_CLIP if gx == GRID_SIDE - 1 else gx + 0.5 - cx
        y0 = -GRID_RADIUS_CLIP if gy == 0 else gy - 0.5 - cy
        y1 = GRID_RADIUS_CLIP if gy == GRID_SIDE - 1 else gy + 0.5 - cy
        # split at the origin so the cusp of the density lies on a corner of the pieces
        total = 0.0
        for a, b in ((x0, min(x1, 0.0)), (max(x0, 0.0), x1)):
            for c, d in ((y0, min(y1, 0.0)), (max(y0, 0.0), y1)):
                if b > a and d > c:
                    total += integrate.dblquad(density, a, b, c, d, epsabs=1e-11, epsrel=1e-9)[0]
        probabilities[i] = total
    return probabilities


RUNS = 20  # independent estimates pooled per case, so the bounds are tight enough to mean something


def check_estimates(artifact, word, epsilon, probabilities, seed, rng, prune=True, mechanism_epsilon=None):
    """Pool RUNS estimates of ``samples`` = 1000 draws each and compare them with the exact values.

    The pooled count of M(w) = w must lie in its exact binomial interval and the mean distinct
    count within its Bernstein deviation, each of probability 1 - 1e-6. Returns the failures
    (empty when consistent) so that power checks can use the same code. ``mechanism_epsilon``
    runs the mechanism at another epsilon than the exact values were computed for.
    """
    samples = 1000
    eps = epsilon if mechanism_epsilon is None else mechanism_epsilon
    calibrator = WordCalibrator(artifact, "madlib", {eps: Madlib(artifact, eps)}, samples=samples, prune=prune)
    rows = [calibrator.calibrate(word, rng)[0] for _ in range(RUNS)]
    assert all(r["n_w"] == r["n_w_count"] / samples for r in rows)
    failures = []
    same = sum(r["n_w_count"] for r in rows)
    lo, hi = stats.binom.interval(1 - CHECK_FAILURE_RATE, RUNS * samples, probabilities[word])
    if not lo <= same <= hi:
        failures.append(f"seed={seed} word={word} eps={epsilon}: N_w count {same} not in [{lo}, {hi}]")
    mean_distinct = np.mean([r["s_w"] for r in rows])
    expected = expected_distinct(probabilities, samples)
    slack = distinct_count_deviation(probabilities, samples, CHECK_FAILURE_RATE, runs=RUNS)
    if abs(mean_distinct - expected) > slack:
        failures.append(f"seed={seed} word={word} eps={epsilon}: mean S_w {mean_distinct} vs exact {expected:.2f} +- {slack:.2f}")
    return failures


def test_line_distribution_is_a_distribution():
    for word in (0, 5, 11):
        p = line_output_distribution(word, 1.5)
        assert p.min() >= 0 and abs(p.sum() - 1) < 1e-12


@pytest.mark.parametrize("epsilon", [0.7, 2.0, 6.0])
@pytest.mark.parametrize("word", [0, 4, 11])
def test_madlib_estimates_on_a_line_match_the_exact_laplace_values(line_artifact, epsilon, word):
    """N_w within its exact binomial interval, S_w within its Bernstein bound (1e-6 each)."""
    seed, rng = fresh_rng()
    assert not check_estimates(line_artifact, word, epsilon, line_output_distribution(word, epsilon), seed, rng)


WIDE_LINE = np.cumsum(np.random.default_rng(99).uniform(0.002, 0.02, 3000))  # 3,000 words, uneven gaps


@pytest.fixture(scope="module")
def wide_line_artifact(tmp_path_factory):
    return make_artifact(tmp_path_factory, "wide_line", WIDE_LINE[:, None])


def wide_line_output_distribution(word, epsilon):
    x = WIDE_LINE
    mids = (x[1:] + x[:-1]) / 2
    lower = np.concatenate([[-np.inf], mids]) - x[word]
    upper = np.concatenate([mids, [np.inf]]) - x[word]
    return laplace_cdf(upper, epsilon) - laplace_cdf(lower, epsilon)


@pytest.mark.parametrize("epsilon", [2.0, 10.0, 60.0])
def test_madlib_estimates_in_the_papers_regime(wide_line_artifact, epsilon):
    """3,000 words on a line: S_w in the hundreds and N_w near 0 (as for GloVe at small epsilon)
    down to S_w of a few dozen; same bounds as above (1e-6 each)."""
    seed, rng = fresh_rng()
    word = 1500
    p = wide_line_output_distribution(word, epsilon)
    assert not check_estimates(wide_line_artifact, word, epsilon, p, seed, rng)


def test_the_exact_value_checks_have_power(wide_line_artifact, line_artifact):
    """The same checks reject a mechanism run at a 15% larger epsilon. This can fail by chance only
    if the wrong epsilon's estimates happen to fit the right values: probability far below 1e-6
    at these sizes (the gaps are many standard deviations)."""
    seed, rng = fresh_rng()
    p = wide_line_output_distribution(1500, 10.0)
    failures = check_estimates(wide_line_artifact, 1500, 10.0, p, seed, rng, mechanism_epsilon=11.5)
    assert any("S_w" in f for f in failures), f"seed={seed}"
    p = line_output_distribution(4, 2.0)
    failures = check_estimates(line_artifact, 4, 2.0, p, seed, rng, mechanism_epsilon=2.3)
    assert any("N_w" in f for f in failures), f"seed={seed}"


def test_madlib_full_distribution_on_a_line(line_artifact):
    """Beyond N_w and S_w: the whole output histogram of 20,000 draws fits the exact Laplace cell
    masses (chi-square goodness of fit, false-failure rate 1e-6)."""
    seed, rng = fresh_rng()
    epsilon, word, draws = 1.5, 6, 20_000
    out = Madlib(line_artifact, epsilon).privatize_ids(np.full(draws, word), rng)
    p = line_output_distribution(word, epsilon)
    observed = np.bincount(out, minlength=len(p))
    assert stats.chisquare(observed, p * draws).pvalue > 1e-6, f"seed={seed}"


@pytest.fixture(scope="module")
def grid_exact():
    cases = {}
    for word in (24, 0, 10):  # centre, corner, near the edge
        for epsilon in (1.0, 3.0):
            cases[(word, epsilon)] = grid_output_distribution(word, epsilon)
    return cases


def test_grid_distribution_is_a_distribution(grid_exact):
    for p in grid_exact.values():
        assert p.min() >= 0 and abs(p.sum() - 1) < 1e-6


@pytest.mark.parametrize("prune", [True, False])
def test_madlib_estimates_on_a_2d_lattice_match_numerical_integration(grid_artifact, grid_exact, prune):
    """Both the pruned and the plain exact search reproduce N_w and S_w (bounds as above, 1e-6 each)."""
    seed, rng = fresh_rng()
    for (word, epsilon), p in grid_exact.items():
        assert not check_estimates(grid_artifact, word, epsilon, p, seed, rng, prune=prune)


# --- exact pruned search = plain exact search ---------------------------------------------------------


def assert_same_as_plain(artifact, word, epsilon, rng, points=500):
    """Pruned answers equal plain exact search on the same noisy points (float32 near-ties aside);
    returns the share of the vocabulary the pruned search scanned."""
    mech = Madlib(artifact, epsilon)
    row = distance_row(artifact.vectors, word)
    search = CandidatePrunedSearch(artifact.vectors, artifact.sqnorms, word, row, group_size=64)
    points = mech.noisy_vectors(np.full(points, word), rng)
    plain = mech.nearest.query(points)
    pruned = search.query(points, mech.nearest)
    vectors = np.asarray(artifact.vectors, dtype=np.float64)
    for i in np.flatnonzero(plain != pruned):
        z = points[i].astype(np.float64)
        d_plain = ((vectors[plain[i]] - z) ** 2).sum()
        d_pruned = ((vectors[pruned[i]] - z) ** 2).sum()
        assert abs(d_plain - d_pruned) <= 1e-4 * max(d_plain, 1.0), (word, epsilon, i)
    return search.searched_rows / (search.queries * len(artifact.vectors))


def test_pruned_search_equals_plain_exact_search_on_glove(small_artifact):
    """5,000 real GloVe words, frequent to rare, small to large noise."""
    rng = np.random.default_rng(7)
    scanned = {}
    for word in (0, 150, 2500, 4999):
        for epsilon in (2.0, 10.0, 20.0, 40.0):
            scanned[(word, epsilon)] = assert_same_as_plain(small_artifact, word, epsilon, rng)
    # The pruning must actually prune where noise is small, else it is pointless.
    assert min(scanned[(w, 40.0)] for w in (0, 150, 2500, 4999)) < 0.5
    assert all(0 < s <= 1 for s in scanned.values())


@pytest.mark.slow
def test_pruned_search_equals_plain_exact_search_on_full_glove(default_artifact):
    """The 400k vocabulary of the benchmark, at the benchmark's epsilons."""
    rng = np.random.default_rng(11)
    for word, epsilon in ((3, 5.0), (3, 20.0), (200_000, 20.0)):
        assert_same_as_plain(default_artifact, word, epsilon, rng, points=200)


def test_pruned_search_on_duplicate_vectors(tmp_path_factory):
    """Many words on the same point as w (seeds all ties) still give exact answers."""
    matrix = np.zeros((40, 3))
    matrix[20:] = np.random.default_rng(0).standard_normal((20, 3))
    artifact = make_artifact(tmp_path_factory, "dups", matrix)
    assert_same_as_plain(artifact, 5, 50.0, np.random.default_rng(3))


# --- helpers ----------------------------------------------------------------------------------------


def test_stratified_sample_covers_every_rank_stratum():
    rng = np.random.default_rng(0)
    ids, strata = stratified_word_sample(400_000, 1000, rng)
    assert len(ids) == 1000 and len(np.unique(ids)) == 1000
    assert np.array_equal(strata, np.arange(1000))
    assert np.array_equal(ids // 400, np.arange(1000))  # exactly one word per block of 400 ranks
    ids, _ = stratified_word_sample(10, 50, rng)
    assert np.array_equal(ids, np.arange(10))
    with pytest.raises(ValueError):
        stratified_word_sample(10, 0, rng)


def test_stratified_sample_is_uniform_within_strata():
    """Within-stratum position of 20,000 draws over 7 strata of unequal sizes: chi-square on the
    position of the first stratum's draws (false-failure rate 1e-6)."""
    seed, rng = fresh_rng()
    counts = np.zeros(14, dtype=int)  # vocab 100, 7 strata -> first stratum holds ranks 0..13
    for _ in range(20_000):
        ids, _ = stratified_word_sample(100, 7, rng)
        counts[ids[0]] += 1
    assert stats.chisquare(counts).pvalue > 1e-6, f"seed={seed}"


def test_distance_row_and_knn_distances(small_artifact):
    vectors = np.asarray(small_artifact.vectors, dtype=np.float64)
    word = 321
    row = distance_row(small_artifact.vectors, word, block_rows=777)
    reference = np.linalg.norm(vectors - vectors[word], axis=1)
    assert row[word] == 0.0
    assert np.allclose(row, reference, atol=1e-9)
    knn = knn_distances(row, word, (1, 5, 1000, 4999, 5000))
    others = np.sort(np.delete(reference, word))
    assert np.allclose(knn[:4], others[[0, 4, 999, 4998]])
    assert math.isnan(knn[4])  # only 4,999 other words


def test_expected_distinct_limits():
    assert expected_distinct(np.array([1.0, 0.0]), 1000) == 1.0
    p = np.full(100, 0.01)
    assert expected_distinct(p, 1) == pytest.approx(1.0)
    assert expected_distinct(p, 10_000) == pytest.approx(100.0)
    assert distinct_count_deviation(np.array([1.0, 0.0]), 1000, 1e-6) == pytest.approx(2 * math.log(2e6) / 3)
    assert distinct_count_deviation(p, 100, 1e-6, runs=4) < distinct_count_deviation(p, 100, 1e-6)


def rows_for(eps_to_values):
    rows = []
    for eps, values in eps_to_values.items():
        for i, (nw, sw) in enumerate(values):
            rows.append({"word_id": i, "epsilon": eps, "n_w": nw, "s_w": sw, "knn_distance_k1": 1.0 + i})
    return rows


def test_recommend_picks_largest_epsilon_meeting_the_targets():
    good, bad_nw, bad_sw = (0.1, 400), (0.9, 400), (0.1, 10)
    rows = rows_for({1.0: [good] * 100, 5.0: [good] * 99 + [bad_nw], 10.0: [good] * 90 + [bad_sw] * 10,
                     20.0: [bad_nw] * 100})
    rec = recommend(rows, max_nw=0.5, min_sw=50, coverage=0.99)
    assert rec["recommended_epsilon"] == 5.0
    by_eps = {e["epsilon"]: e for e in rec["per_epsilon"]}
    assert by_eps[10.0]["share_meeting"] == pytest.approx(0.9) and by_eps[10.0]["share_sw_ok"] == pytest.approx(0.9)
    assert by_eps[5.0]["worst_n_w"] == 0.9
    assert "5" in rec["message"]
    assert recommend(rows, max_nw=0.5, min_sw=50, coverage=1.0)["recommended_epsilon"] == 1.0
    assert recommend(rows, max_nw=0.05, min_sw=None, coverage=0.5)["recommended_epsilon"] is None
    assert recommend(rows, max_nw=None, min_sw=50, coverage=0.9)["recommended_epsilon"] == 20.0
    rec = recommend(rows, max_nw=None, min_sw=50, coverage=0.95)  # 10 fails, 20 meets: 20, and 10 is named
    assert rec["recommended_epsilon"] == 20.0 and rec["smaller_epsilons_failing"] == [10.0]


def test_recommend_flags_non_monotone_results():
    """S_w can be lower at a very small epsilon (hub words) than at a larger one: the largest epsilon
    meeting the targets is still recommended, and the failing smaller one is named."""
    good, low_support = (0.0, 400), (0.0, 30)
    rows = rows_for({1.0: [low_support] * 10, 2.0: [good] * 10, 5.0: [good] * 10, 10.0: [(0.8, 5)] * 10})
    rec = recommend(rows, coverage=0.99)
    assert rec["recommended_epsilon"] == 5.0
    assert rec["smaller_epsilons_failing"] == [1.0]
    assert "hub" in rec["message"] and "1 (share meeting 0.000" in rec["message"]
    with pytest.raises(ValueError):
        recommend(rows, max_nw=None, min_sw=None)


def test_summaries():
    d = describe_values([3.0, 1.0, 2.0, None])
    assert d["count"] == 3 and d["min"] == 1.0 and d["max"] == 3.0 and d["mean"] == 2.0 and d["p50"] == 2.0
    rows = rows_for({1.0: [(0.1, 10), (0.3, 30)], 2.0: [(0.5, 5), (0.7, 3)]})
    summary = summarise_statistics(rows)
    assert set(summary) == {"1", "2"}
    assert summary["2"]["n_w"]["mean"] == pytest.approx(0.6) and summary["1"]["s_w"]["min"] == 10
    knn = knn_distance_percentiles(rows, ks=(1, 5))
    assert knn["k"] == [1] and knn["words"] == 2 and knn["percentiles"]["50"] == [1.5]


# --- TEM: exact values from the closed form agree with sampling -------------------------------------------


def add_neighbour_table(artifact, k, metric):
    """Write an exact K-nearest table (float64 brute force) into a synthetic artifact, as TEM needs."""
    from textdp.artifact.neighbours import TableWriter, brute_force_knn, metric_points

    points = metric_points(artifact.vectors, metric, dtype=np.float64)
    ids, dist = brute_force_knn(points, np.arange(artifact.vocab_size), k)
    writer = TableWriter(artifact.path, artifact.vocab_size, k, metric)
    writer.write_block(0, ids.astype(np.int32), dist.astype(np.float32))
    writer.finish({})
    return open_artifact(artifact.path)


@pytest.fixture(scope="module", params=["euclidean", "angular"])
def tem_artifact(request, tmp_path_factory):
    """1,500 words in the plane (a dense cluster and a sparse cloud) with a 64-nearest table."""
    rng = np.random.default_rng(5)
    points = np.concatenate([rng.normal(3.0, 0.3, (500, 2)), rng.uniform(-6, 6, (1000, 2))])
    artifact = make_artifact(tmp_path_factory, f"tem_{request.param}", points)
    return add_neighbour_table(artifact, 64, request.param)


@pytest.mark.parametrize("epsilon", [1.0, 6.0, 40.0])
def test_tem_exact_values_agree_with_sampling(tem_artifact, epsilon):
    """For words in the cluster and in the sparse cloud: the exact N_w (closed form) against the
    pooled count of 20 x 1,000 TEM draws (exact binomial interval, 1e-6), and the exact expected
    distinct count against the mean S_w (Bernstein, 1e-6). Also checks the closed form used is
    the one over all words, in the table's metric."""
    from textdp.mechanisms.tem import TEM, output_distribution

    seed, rng = fresh_rng()
    mech = TEM(tem_artifact, epsilon)
    calibrator = WordCalibrator(tem_artifact, "tem", {epsilon: mech}, samples=1000)
    points = np.asarray(tem_artifact.vectors, dtype=np.float64)
    if mech.metric == "angular":
        points = points / np.linalg.norm(points, axis=1, keepdims=True)
    for word in (7, 900):
        rows = [calibrator.calibrate(word, rng)[0] for _ in range(RUNS)]
        exact_p = output_distribution(np.linalg.norm(points - points[word], axis=1), epsilon, mech.gamma, self_id=word)
        assert rows[0]["n_w_exact"] == pytest.approx(exact_p[word], rel=1e-9)
        assert rows[0]["s_w_exact"] == pytest.approx(expected_distinct(exact_p, 1000), rel=1e-9)
        assert rows[0]["tem_gamma"] == mech.gamma
        same = sum(r["n_w_count"] for r in rows)
        lo, hi = stats.binom.interval(1 - CHECK_FAILURE_RATE, RUNS * 1000, rows[0]["n_w_exact"])
        assert lo <= same <= hi, f"seed={seed} word={word}: {same} not in [{lo}, {hi}]"
        slack = distinct_count_deviation(exact_p, 1000, CHECK_FAILURE_RATE, runs=RUNS)
        mean_distinct = np.mean([r["s_w"] for r in rows])
        assert abs(mean_distinct - rows[0]["s_w_exact"]) <= slack, f"seed={seed} word={word}"


@pytest.fixture(scope="module")
def euclidean_table_artifact(tmp_path_factory):
    """The euclidean case of ``tem_artifact`` (SanText samples from a euclidean table only)."""
    rng = np.random.default_rng(5)
    points = np.concatenate([rng.normal(3.0, 0.3, (500, 2)), rng.uniform(-6, 6, (1000, 2))])
    artifact = make_artifact(tmp_path_factory, "closed_form_euclidean", points)
    return add_neighbour_table(artifact, 64, "euclidean")


@pytest.mark.parametrize("name, params", [("santext", {}), ("santext+", {"p": 0.4}), ("custext", {"k": 20})])
def test_closed_form_mechanisms_get_exact_values_that_agree_with_sampling(euclidean_table_artifact, name, params):
    """SanText, SanText+ and CusText: N_w and S_w estimated through privatize_ids, and exact from their
    closed forms (exact_distribution_of): the pooled count of 20 x 1,000 draws within the exact binomial
    interval (1e-6) and the mean S_w within the Bernstein bound (1e-6)."""
    from textdp.calibration.statistics import build_summary
    from textdp.mechanisms import make_mechanism

    tem_artifact = euclidean_table_artifact
    seed, rng = fresh_rng()
    mech = make_mechanism(name, tem_artifact, 3.0, **params)
    calibrator = WordCalibrator(tem_artifact, name, {3.0: mech}, samples=1000)
    rows_by_word = {}
    for word in (7, 1200):
        rows = [calibrator.calibrate(word, rng)[0] for _ in range(RUNS)]
        rows_by_word[word] = rows[0]
        exact = rows[0]["n_w_exact"]
        assert exact is not None and rows[0]["s_w_exact"] is not None
        same = sum(r["n_w_count"] for r in rows)
        lo, hi = stats.binom.interval(1 - CHECK_FAILURE_RATE, RUNS * 1000, exact)
        assert lo <= same <= hi, f"seed={seed} {name} word={word}: {same} not in [{lo}, {hi}]"
    summary = build_summary(list(rows_by_word.values()), mechanism=name, epsilons=[3.0], samples=1000,
                            artifact_info={}, nn_statement="", parameters=mech.parameters(), words_info={},
                            randomness="test", max_nw=0.9, min_sw=1, coverage=0.5,
                            privacy_statements={3.0: mech.privacy_statement()})
    assert summary["recommendation"]["basis"] == f"exact {name} values (closed form)"


def test_sampled_only_mechanisms_calibrate_through_privatize_ids(small_artifact):
    """Mahalanobis (no closed form): estimates only, exact columns empty; Madlib-like at lambda 0."""
    from textdp.mechanisms.mahalanobis import Mahalanobis

    _, rng = fresh_rng()
    mech = Mahalanobis(small_artifact, 10.0, lam=0.5)
    rows = WordCalibrator(small_artifact, "mahalanobis", {10.0: mech}, samples=200).calibrate(5, rng)
    assert rows[0]["n_w_exact"] is None and 0 <= rows[0]["n_w"] <= 1 and 1 <= rows[0]["s_w"] <= 200
    with pytest.raises(ValueError, match="unknown mechanism"):
        WordCalibrator(small_artifact, "laplace", {10.0: mech})
