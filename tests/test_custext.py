"""CusText: the customized output sets against a plain re-implementation of the paper's greedy
partition, and the sampler against the paper's sampling function, on real GloVe words (5k artifact,
K=40 table from the neighbour job).

Distribution checks: G-tests of 40,000 draws (400,000 at epsilon 1) against P(y|x) ~ exp(epsilon u(x, y) / 2), computed here
from float64 distances with the normalised scores of the paper, at significance 1e-5; 6 checks, so a
correct sampler fails any with probability below 6e-5. Power: the same draws against the
distribution at 1.25 x epsilon must be rejected (p < 1e-5). Fixed seeds.
"""

import math
import zlib

import numpy as np
import pytest

from tests.statcheck import g_test
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.mechanisms.custext import CusText, build_output_sets

ALPHA = 1e-5
DRAWS = 40_000


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


def plain_partition(vectors, k):
    """The paper's f_map written directly: the most frequent unassigned word takes its k nearest
    unassigned words (float64 brute force, ties by id) as a group."""
    points = np.asarray(vectors, dtype=np.float64)
    unassigned = np.ones(len(points), dtype=bool)
    groups = []
    for word in range(len(points)):
        if not unassigned[word]:
            continue
        free = np.flatnonzero(unassigned)
        dist = np.sqrt(((points[free] - points[word]) ** 2).sum(axis=1))
        dist[free == word] = -1.0
        group = free[np.lexsort((free, dist))[:k]]
        unassigned[group] = False
        groups.append(group)
    return groups


def paper_distribution(artifact, mech, word_id, epsilon):
    members = mech.set_ids[word_id]
    members = members[members >= 0]
    points = np.asarray(artifact.vectors, dtype=np.float64)
    dist = np.sqrt(((points[members] - points[word_id]) ** 2).sum(axis=1))
    spread = dist.max() - dist.min()
    score = -(dist - dist.min()) / spread if spread > 0 else np.zeros(len(dist))
    probs = np.zeros(artifact.vocab_size)
    probs[members] = np.exp(epsilon * score / 2)
    return probs / probs.sum()


@pytest.mark.parametrize("k", [20, 7])
def test_output_sets_are_the_greedy_partition(artifact, k):
    """Same groups as the direct re-implementation (K=20: most groups from the table; K=7 with the table
    cut off so every group needs the search path)."""
    from textdp.artifact.neighbours import NeighbourTable

    table_ids = NeighbourTable.from_artifact(artifact).ids if k == 20 else None
    set_ids, set_d, stats = build_output_sets(np.asarray(artifact.vectors), k, table_ids)
    expected = plain_partition(artifact.vectors, k)
    assert stats["groups"] == len(expected) == math.ceil(artifact.vocab_size / k)
    if k == 20:
        assert stats["groups_from_table"] > 0 and stats["groups_searched"] > 0
    for group in expected:
        for member in group:
            got = set_ids[member]
            assert set(got[got >= 0].tolist()) == set(group.tolist())
    # every word is in exactly one output set, which contains it
    assert (set_ids == np.arange(artifact.vocab_size)[:, None]).any(axis=1).all()
    assert np.isfinite(set_d[set_ids >= 0]).all()


@pytest.mark.parametrize("word, epsilon, draws", [("good", 1.0, 400_000), ("the", 4.0, DRAWS), ("paris", 10.0, DRAWS)])
def test_sampler_matches_the_paper_distribution(artifact, word, epsilon, draws):
    """At epsilon 1 the 20 weights lie in [exp(-1/2), 1]: 400,000 draws are needed to see 1.25 x epsilon."""
    word_id = artifact.word_to_id[word]
    mech = CusText(artifact, epsilon, k=20)
    released = mech.privatize_ids(np.full(draws, word_id), np.random.default_rng(zlib.crc32(f"{word}-{epsilon}".encode())))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, paper_distribution(artifact, mech, word_id, epsilon)) > ALPHA
    assert g_test(counts, paper_distribution(artifact, mech, word_id, 1.25 * epsilon)) < ALPHA


def test_group_members_are_within_exp_epsilon_of_each_other(artifact):
    """The guarantee, checked on the exact probabilities: within a group every output's probability
    ratio between two inputs is at most exp(epsilon); across groups the supports are disjoint."""
    mech = CusText(artifact, 3.0, k=20)
    word = artifact.word_to_id["good"]
    members = mech.set_ids[word]
    probs = mech.probabilities(members)
    assert (probs.max(axis=0) / probs.min(axis=0)).max() <= math.exp(3.0) * (1 + 1e-12)
    other = next(i for i in range(artifact.vocab_size) if i not in set(members.tolist()))
    assert not set(mech.set_ids[other].tolist()) & set(members.tolist())


def test_statement_parameters_and_epsilon0(artifact):
    mech = CusText(artifact, 2.0, k=20)
    params = mech.parameters()
    assert params["mechanism"] == "custext" and params["custext_k"] == 20 and params["output_sets"] == 250
    statement = mech.privacy_statement()
    assert "250 groups of 20 words" in statement["notion"]
    assert "exp(2)" in statement["per_token"] and "disjoint" in statement["not_covered"]
    assert mech.token_epsilon0(10.0) == math.inf
    whole = CusText(artifact, 2.0, k=artifact.vocab_size)
    assert whole.groups() == 1 and whole.token_epsilon0(10.0) == 2.0
    assert "partitioned into 1 group of 5,000 words" in whole.privacy_statement()["notion"]
    with pytest.raises(ValueError):
        CusText(artifact, 2.0, k=0)


@pytest.mark.parametrize("k", [3, 7])
def test_statement_states_the_real_group_sizes_when_k_does_not_divide_the_vocabulary(artifact, k):
    """Issue 24 item 6: 5,000 words in groups of K = 3 (or 7) leave a last group of 2 (or 2): the statement
    names the sizes the partition really has, read here from the distinct output sets themselves."""
    mech = CusText(artifact, 2.0, k=k)
    groups = {tuple(int(i) for i in row if i >= 0) for row in np.asarray(mech.set_ids)}
    sizes = {}
    for group in groups:
        sizes[len(group)] = sizes.get(len(group), 0) + 1
    full, last = divmod(artifact.vocab_size, k)
    assert sizes == {k: full, last: 1} and len(groups) == mech.groups()
    notion = mech.privacy_statement()["notion"]
    assert f"partitioned into {full:,} groups of {k} words and 1 group of {last} words" in notion
    assert f"{mech.groups():,} groups of {k} words" not in notion
