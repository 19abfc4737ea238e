"""SanText and SanText+ against their closed forms on real GloVe words (5k artifact, K=40 table from
the neighbour job).

Every distribution check is a G-test of 40,000 draws against the exact distribution computed here by
brute force in float64 (cells expected below 20 pooled), at significance 1e-5. There are 12 such
checks in this file (and 5 z-tests at 1e-5), so a correct sampler fails any with probability below 2e-4 (Bonferroni). Power:
the same draws tested against the closed form at 1.25 x epsilon must be rejected (p < 1e-5). Draws use
fixed seeds so a failure reproduces.
"""

import math
import zlib

import numpy as np
import pytest

from tests.statcheck import g_test
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.mechanisms.exponential import exact_distribution
from textdp.mechanisms.santext import SanText, rarest_ids

ALPHA = 1e-5
DRAWS = 40_000


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


def santext_plus_distribution(artifact, word_id, epsilon, sensitive, p):
    """P(y | x) of SanText+ written from the paper: sensitive outputs by the exponential mechanism over
    the sensitive words (always for a sensitive x, with probability p otherwise), x itself otherwise."""
    probs = exact_distribution(artifact.vectors, word_id, epsilon, allowed=np.flatnonzero(sensitive))
    if not sensitive[word_id]:
        probs = p * probs
        probs[word_id] += 1.0 - p
    return probs


@pytest.mark.parametrize("word, epsilon", [("good", 1.0), ("the", 3.0), ("paris", 3.0), ("good", 8.0)])
def test_santext_matches_closed_form(artifact, word, epsilon):
    word_id = artifact.word_to_id[word]
    mech = SanText(artifact, epsilon)
    released = mech.privatize_ids(np.full(DRAWS, word_id), np.random.default_rng(zlib.crc32(f"{word}-{epsilon}".encode())))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, exact_distribution(artifact.vectors, word_id, epsilon)) > ALPHA
    # power: the draws are told apart from the mechanism at 1.25 x epsilon
    assert g_test(counts, exact_distribution(artifact.vectors, word_id, 1.25 * epsilon)) < ALPHA


def test_santext_spreads_over_the_vocabulary_at_small_epsilon(artifact):
    """Guard for the cases above: at epsilon 1 most of the mass is outside the 40-word table, so the
    rejection part of the sampler (not only the table) is what the G-test checked."""
    word_id = artifact.word_to_id["good"]
    probs = exact_distribution(artifact.vectors, word_id, 1.0)
    table = np.asarray(SanText(artifact, 1.0).table.ids[word_id])
    assert 1.0 - probs[table].sum() > 0.9


@pytest.mark.parametrize("word, epsilon, p", [("good", 3.0, 0.3), ("film", 2.0, 0.8), ("paris", 4.0, 0.3)])
def test_santext_plus_matches_closed_form(artifact, word, epsilon, p):
    """'good' and 'film' are frequent (non-sensitive): kept with probability 1 - p, else sanitized into
    the rarest 90%; 'paris' is checked as a sensitive word by giving the sensitive set explicitly."""
    word_id = artifact.word_to_id[word]
    if word == "paris":
        sensitive_ids = np.concatenate([[word_id], rarest_ids(artifact.vocab_size, 0.5)])
        mech = SanText(artifact, epsilon, plus=True, p=p, sensitive_ids=sensitive_ids)
    else:
        mech = SanText(artifact, epsilon, plus=True, p=p, sensitive_fraction=0.9)
    assert mech.name == "santext+"
    sensitive = mech.sensitive
    assert sensitive[word_id] == (word == "paris")
    released = mech.privatize_ids(np.full(DRAWS, word_id), np.random.default_rng(zlib.crc32(f"{word}-{p}".encode())))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, santext_plus_distribution(artifact, word_id, epsilon, sensitive, p)) > ALPHA
    assert g_test(counts, santext_plus_distribution(artifact, word_id, 1.25 * epsilon, sensitive, p)) < ALPHA
    assert sensitive[released[released != word_id]].all()  # a sanitized word is always a sensitive word


def test_rarest_fraction_is_the_tail_of_the_frequency_order(artifact):
    ids = rarest_ids(artifact.vocab_size, 0.9)
    assert len(ids) == 4500 and ids[0] == 500 and ids[-1] == artifact.vocab_size - 1
    for bad in (0.0, 1.5, 1e-6):
        with pytest.raises(ValueError):
            rarest_ids(artifact.vocab_size, bad)


def test_mixed_batch_keeps_every_token_independent(artifact):
    """A shuffled batch of several words: each word's share of 'unchanged' matches its own P(self)
    (binomial z-test at 1e-5 per word)."""
    from scipy.stats import norm

    words = ["the", "good", "paris", "acting", "however"]
    ids = np.random.default_rng(3).permutation(np.repeat(artifact.ids_of(words), 6000))
    mech = SanText(artifact, 4.0)
    mech.sampler.MAX_ROUNDS_TOTAL = 2000  # most tokens wait for later blocks
    released = mech.privatize_ids(ids, np.random.default_rng(4))
    for word_id in artifact.ids_of(words):
        p_self = exact_distribution(artifact.vectors, word_id, 4.0)[word_id]
        share = (released[ids == word_id] == word_id).mean()
        z = (share - p_self) / math.sqrt(p_self * (1 - p_self) / 6000)
        assert abs(z) < norm.isf(ALPHA / 2)


def test_statements_parameters_and_epsilon0(artifact, small_artifact):
    plain = SanText(artifact, 2.0)
    assert plain.parameters() == {"mechanism": "santext", "epsilon": 2.0, "metric": "euclidean", "neighbour_k": 40}
    assert "exp(2 * d(x, x'))" in plain.privacy_statement()["per_token"]
    assert plain.token_epsilon0(10.0) == 20.0
    plus = SanText(artifact, 2.0, plus=True, p=0.3)
    statement = plus.privacy_statement()
    assert "the 4,500 rarest words" in statement["covered"] and "ids 500 to 4,999" in statement["covered"]
    assert "times 1/0.3" in statement["per_token"] and "probability 0.7" in statement["not_covered"]
    assert plus.token_epsilon0(10.0) == math.inf  # a kept non-sensitive word reveals itself
    assert SanText(artifact, 2.0, plus=True, p=1.0).token_epsilon0(10.0) == 20.0
    with pytest.raises(ValueError):
        SanText(artifact, 2.0, sensitive_ids=[1, 2])  # SanText+ only
    with pytest.raises(ValueError):
        SanText(artifact, 2.0, plus=True, p=0.0)
    with pytest.raises(Exception, match="textdp neighbours"):
        SanText(small_artifact, 2.0)  # no neighbour table


@pytest.mark.parametrize("plus", [False, True])
def test_dense_rows_for_frequent_words_match_the_closed_form(artifact, plus):
    """A word that has cost enough on-the-fly distances gets a dense row (exact inverse-CDF draws over the
    whole vocabulary); its draws must follow the same closed form (G-test 1e-5; 2 checks)."""
    word_id = artifact.word_to_id["the"]
    mech = SanText(artifact, 3.0, plus=plus, p=0.5)
    mech.sampler.DENSE_AFTER_CANDIDATES = 0  # build at the first chance
    mech.privatize_ids(np.full(200, word_id), np.random.default_rng(0))
    assert word_id in mech.sampler._dense_rows
    released = mech.privatize_ids(np.full(DRAWS, word_id), np.random.default_rng(17 + plus))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    if plus:
        expected = santext_plus_distribution(artifact, word_id, 3.0, mech.sensitive, 0.5)
    else:
        expected = exact_distribution(artifact.vectors, word_id, 3.0)
    assert g_test(counts, expected) > ALPHA


@pytest.mark.parametrize("epsilon", [8.0, 40.0])
def test_words_far_from_every_allowed_output_are_drawn_exactly_by_a_pass(artifact, epsilon):
    """SanText+ for a frequent word whose table holds few sensitive words: the rejection rounds would take
    ~E/Z of them per token (unbounded as epsilon grows: this hung the utility benchmark at epsilon 8 on
    400k words). After ``GIVE_UP_FACTOR x vocab_size`` rejected rounds for a word in one call, its
    pending tokens are drawn from the exact law built in one pass. The mixture of both paths must still
    follow the closed form (G-test, false-failure rate 1e-5), and the pass must have been used; at 1.25x
    epsilon the same draws are rejected (power). Dense rows are off, so every call decides anew."""
    word_id = artifact.word_to_id["the"]
    mech = SanText(artifact, epsilon, plus=True, p=0.5, sensitive_fraction=0.5)
    mech.sampler.DENSE_MAX_WORDS = 0
    released = mech.privatize_ids(np.full(DRAWS, word_id), np.random.default_rng(int(epsilon)))
    assert mech.sampler.passes > 0 and mech.sampler.rounds > 0  # both paths ran
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, santext_plus_distribution(artifact, word_id, epsilon, mech.sensitive, 0.5)) > ALPHA
    assert g_test(counts, santext_plus_distribution(artifact, word_id, 1.25 * epsilon, mech.sensitive, 0.5)) < ALPHA
