"""The attacks' arithmetic against brute force and exact values, on real GloVe words.

Exact checks (no randomness): normalisers and posterior rankings against a direct float64
computation from TEM's closed form; count tables, tie-breaking and corpus planning on small
hand-made inputs. Statistical checks (fixed seeds): the exact attacker's measured top-1 rate must
fall within the binomial 1 - 1e-6 interval of its exact Bayes rate; the Monte Carlo attacker must
not beat the exact Bayes rate beyond that interval (it cannot, in expectation), and its in-sample
estimate plus McDiarmid's margin at delta = 1e-6 must not fall below it. With 4 such checks the
chance that a correct implementation fails this module is below 1e-5.
"""

import math

import numpy as np
import pytest
from scipy import stats

from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.audit.attacks import (
    CountTable,
    Kernel,
    KernelPosterior,
    Prior,
    fill_guesses,
    inversion_outcomes,
    kernel_of,
    linkage_success,
    log_normalizers,
    mcdiarmid_margin,
    rank_band,
    structure_unique,
)
from textdp.audit.corpus import UNK_MARKER_KEY, encode_record, linkage_scores, plan_corpus, release_keys, unknown_log_likelihood
from textdp.mechanisms.madlib import Madlib
from textdp.mechanisms.tem import TEM, output_distribution
from textdp.search.geometry import distance_row
from textdp.text.tokenize import Tokenizer

EPSILON, GAMMA = 3.0, 4.0


def exact_rows(artifact, words, epsilon=EPSILON, gamma=GAMMA):
    vectors = np.asarray(artifact.vectors)
    return np.array([output_distribution(distance_row(vectors, int(w)), epsilon, gamma, self_id=int(w)) for w in words])


def test_normalisers_match_the_closed_form(small_artifact):
    vectors = np.asarray(small_artifact.vectors)
    words = np.array([0, 7, 150, 2999, 4998])
    kernels = [Kernel(0.5 * EPSILON, GAMMA), Kernel(0.5 * 8.0, math.inf)]
    got = log_normalizers(vectors, words, kernels, points64=vectors.astype(np.float64), block=2)
    for i, w in enumerate(words):
        row = distance_row(vectors, int(w))
        for k, kernel in enumerate(kernels):
            expected = np.log(np.sum(np.exp(-kernel.scale * np.minimum(row, kernel.cap))))
            assert got[i, k] == pytest.approx(expected, abs=1e-6)


def test_posterior_ranking_is_the_exact_bayes_ranking(small_artifact):
    prior = Prior.by_rank(small_artifact.vocab_size, 300)
    rows = exact_rows(small_artifact, prior.support)  # P(. | w) for every candidate w
    kernel = Kernel(0.5 * EPSILON, GAMMA)
    log_z = log_normalizers(np.asarray(small_artifact.vectors), prior.support, [kernel],
                            points64=np.asarray(small_artifact.vectors, dtype=np.float64))[:, 0]
    posterior = KernelPosterior(np.asarray(small_artifact.vectors, dtype=np.float64), prior, log_z, kernel)
    outputs = np.random.default_rng(0).choice(small_artifact.vocab_size, 60, replace=False)
    guesses = posterior.top_guesses(outputs)
    for o, got in zip(outputs, guesses):
        score = prior.log_prob + np.log(rows[:, o])
        order = np.lexsort((prior.support, -score))[:10]
        # the same words in the same order, up to ties closer than floating-point noise
        expected = prior.support[order]
        if not np.array_equal(got, expected):
            ours = prior.log_prob[np.searchsorted(prior.support, got)] + np.log(rows[np.searchsorted(prior.support, got), o])
            np.testing.assert_allclose(np.sort(ours)[::-1], score[order], rtol=0, atol=1e-9)


def test_exact_and_monte_carlo_attackers_against_the_bayes_rate(neighbour_artifact_dir):  # noqa: F811
    artifact = open_artifact(neighbour_artifact_dir)
    tem = TEM(artifact, EPSILON, gamma=GAMMA)
    prior = Prior.by_rank(artifact.vocab_size, 200)
    prob = np.exp(prior.log_prob)
    rows = exact_rows(artifact, prior.support)
    bayes_top1 = float(np.sum(np.max(prob[:, None] * rows, axis=0)))  # sum_o max_w pi(w) P(o | w)
    rng = np.random.default_rng(42)
    trials = 20000
    inputs = prior.sample(trials, rng)
    outputs = tem.privatize_ids(inputs, rng)
    lo, hi = stats.binom.interval(1 - 1e-6, trials, bayes_top1)
    # the exact attacker (closed form) recovers at the Bayes rate
    kernel = kernel_of(tem)
    log_z = log_normalizers(np.asarray(artifact.vectors), prior.support, [kernel],
                            points64=np.asarray(artifact.vectors, dtype=np.float64))[:, 0]
    posterior = KernelPosterior(np.asarray(artifact.vectors, dtype=np.float64), prior, log_z, kernel)
    distinct, inverse = np.unique(outputs, return_inverse=True)
    guesses = posterior.top_guesses(distinct)[inverse]
    hits = int((guesses[:, 0] == inputs).sum())
    assert lo <= hits <= hi
    # the Monte Carlo attacker, trained on independent draws, does not beat it; its upper bound covers it
    train_in = prior.sample(30000, rng)
    table = CountTable(train_in, tem.privatize_ids(train_in, rng), artifact.vocab_size)
    mc_guesses = fill_guesses(table.guesses(prior), distinct, prior.top(10))[inverse]
    assert int((mc_guesses[:, 0] == inputs).sum()) <= hi
    assert table.in_sample_rates((1,))[1] + mcdiarmid_margin(table.total, 1e-6) >= bayes_top1


def test_count_table_by_hand():
    table = CountTable(np.array([1, 1, 2, 2, 2, 3]), np.array([5, 5, 5, 6, 6, 5]), vocab_size=10)
    prior = Prior(np.array([1, 2, 3]), np.log(np.array([0.2, 0.3, 0.5])), "test")
    guesses = table.guesses(prior)
    assert guesses[5].tolist() == [1, 3, 2] and guesses[6].tolist() == [2]
    assert table.in_sample_rates((1, 10)) == {1: pytest.approx(4 / 6), 10: pytest.approx(1.0)}
    assert table.log_likelihood(np.array([2]), np.array([6]))[0] == pytest.approx(math.log(2.1 / 4))
    assert table.log_likelihood(np.array([4]), np.array([6]))[0] == pytest.approx(math.log(0.1))
    filled = fill_guesses(guesses, np.array([6, 9]), np.array([3, 1, 2]), k=3)
    assert filled.tolist() == [[2, 6, 3], [9, 3, 1]]


def test_outcomes_bands_and_prior():
    prior = Prior.by_rank(1000, 100)
    assert prior.log_prob[0] - prior.log_prob[1] == pytest.approx(math.log(2.0))
    assert np.exp(prior.log_prob).sum() == pytest.approx(1.0) and prior.top(3).tolist() == [0, 1, 2]
    counts = Prior.from_counts(np.array([4, 9, 2]), np.array([5, 1, 7]), 2, "c")
    assert counts.support.tolist() == [2, 4] and counts.contains(np.array([9, 2])).tolist() == [False, True]
    mixed = Prior.from_counts(np.array([4, 9]), np.array([3, 1]), None, "m", vocab_size=10, rank_share=0.1)
    zipf = 1 / np.arange(1, 11) / np.sum(1 / np.arange(1, 11))
    expected = 0.1 * zipf + 0.9 * np.array([0, 0, 0, 0, 0.75, 0, 0, 0, 0, 0.25])
    np.testing.assert_allclose(np.exp(mixed.log_prob), expected, rtol=1e-12)
    assert rank_band(np.array([0, 99, 100, 999, 1000, 99999, 100000])).tolist() == [0, 0, 1, 1, 2, 3, 4]
    outcomes = inversion_outcomes(np.array([3, 0, 150]), np.array([3, 5, 7]),
                                  np.array([[3] * 10, [5] + [0] * 9, [1] * 10]), prior.top(10), prior)
    assert outcomes["top1"].tolist() == [True, False, False] and outcomes["top10"].tolist() == [True, True, False]
    assert outcomes["released"].tolist() == [True, False, False] and outcomes["in_prior"].tolist() == [True, True, False]


def test_linkage_ties_and_structure():
    scores = np.array([5.0, 7.0, 5.0, 5.0, 1.0])
    success = linkage_success(scores, 0, np.array([1, 2, 3, 4]), (2, 3, 5, 9), ks=(1, 5))
    assert success == {2: {1: 0.0, 5: 1.0}, 3: {1: 0.0, 5: 1.0}, 5: {1: 0.0, 5: 1.0}}
    success = linkage_success(scores, 2, np.array([3, 0, 4, 1]), (3, 4), ks=(1,))
    assert success[3][1] == pytest.approx(1 / 3)  # two ties, nothing higher
    assert success[4][1] == pytest.approx(1 / 3)  # the record scoring 1 changes nothing
    layouts = np.array([10, 11, 10, 12])
    assert structure_unique(layouts, 1, np.array([0, 2, 3]), (2, 4)) == {2: True, 4: True}
    assert structure_unique(layouts, 0, np.array([3, 2, 1]), (2, 3)) == {2: True, 3: False}


def test_corpus_encoding_planning_and_releases(small_artifact):
    tokenizer = Tokenizer(small_artifact.word_to_id)
    ids, layout = encode_record(tokenizer, "The movie was zqxjblorf, truly zqxjblorf!")
    again, layout2 = encode_record(tokenizer, "A film is qqqvvvzz, truly zqxjblorf?")
    assert ids[0] == small_artifact.word_to_id["the"] and ids[3] < 0 and ids[3] == ids[5] == again[5]
    assert again[3] != ids[3] and layout != layout2 and isinstance(layout, int)
    records = [(5, np.arange(30), 1), (1, np.arange(3), 2), (3, np.array([-7] * 25), 3), (9, np.arange(40), 4)]
    plan = plan_corpus(records, evaluated=2, window=20, inversion_tokens=None, rng=np.random.default_rng(0))
    assert plan.eval_records == 2 and plan.eval_token_total == 3 and plan.eval_unknown_tokens == 25
    assert plan.pool_windows.shape == (3, 20) and plan.query_rows.tolist() == [0]
    assert plan.pool_layouts.tolist() == [3, 1, 4]
    mech = Madlib(small_artifact, 30.0)
    keys = np.array([5, -11, 7])
    rng = np.random.default_rng(1)
    assert release_keys(mech, keys, "keep", small_artifact.vocab_size, rng)[1] == -11
    assert release_keys(mech, keys, "unk", small_artifact.vocab_size, rng)[1] == UNK_MARKER_KEY
    assert (release_keys(mech, keys, "random", small_artifact.vocab_size, rng) >= 0).all()
    scores = linkage_scores(np.array([[5, -11], [5, 6]]), np.array([5, -11]), "keep", small_artifact.vocab_size,
                            lambda x, y: np.where(x == y, 0.0, -5.0))
    assert scores.tolist() == [0.0, -math.inf]
    assert unknown_log_likelihood("random", np.array([-3]), np.array([4]), 100)[0] == pytest.approx(-math.log(100))
