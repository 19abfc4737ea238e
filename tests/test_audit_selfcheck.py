"""The self-check flags deliberately broken mechanisms and passes the real ones (tests/audit_broken.py).

False alarms. Every "passes" assertion below runs a self-check whose family-wise false-alarm rate
is FALSE_ALARM_RATE = 0.001 (Bonferroni over all its tests): a correct mechanism fails one with
probability at most 0.001. There are 7 such runs in this module, so a correct implementation
fails this module by chance with probability below 0.007; draws use fixed seeds, so a failure
reproduces. The "flags" assertions are power checks: each was measured with a margin (the broken
mechanism's lower bound exceeds its guarantee by 0.5-1 nats at these draw counts).

Why these settings. Madlib in 50 dimensions leaks far less than epsilon * d on any event of the
released words (the noise direction is almost never aligned with w - w'), so a 0.7 noise scale
cannot push the measured leakage over the guarantee there; on a 1-D vocabulary Madlib's noise is
Laplace and tail events reach the guarantee almost exactly, so the test has power, and the broken
scale is caught. MLDP's bottom-element weight matters only where the bottom carries mass, so the
TEM checks use a small explicit gamma on the 5k GloVe vocabulary.
"""

import math

import numpy as np
import pytest

from tests.audit_broken import AlgorithmTwoTEM, PassThroughPrivatizer, ShrunkNoiseMadlib
from tests.test_calibration import LINE_POSITIONS, make_artifact
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.audit.pairs import BANDS, PairSpec, TokenReleaser, band_pairs, base_words, guarantee_row, oov_pair_bound, oov_pairs, pair_bound
from textdp.audit.selfcheck import planned_tests, self_check, summarise_self_check
from textdp.audit.stats import cp_lower, cp_upper
from textdp.mechanisms.madlib import Madlib
from textdp.mechanisms.tem import TEM

FALSE_ALARM_RATE = 0.001


def run_check(artifact, build, pairs, epsilon, draws, seed, oov_policy="random", privatizer_class=None):
    releaser = TokenReleaser(build, artifact, oov_policy=oov_policy)
    if privatizer_class is not None:
        releaser.privatizer_class = privatizer_class
    rows = self_check(pairs, {epsilon: releaser}, {epsilon: build()}, artifact, draws, FALSE_ALARM_RATE,
                      seed=seed, oov_policy=oov_policy)
    return rows, summarise_self_check(rows, FALSE_ALARM_RATE, planned_tests(len(pairs), 1))


@pytest.fixture(scope="module")
def line_artifact(tmp_path_factory):
    return make_artifact(tmp_path_factory, "audit-line", LINE_POSITIONS[:, None])


def line_pairs(n):
    return ([PairSpec(f"p{i}", i, i + 1, "band", 1) for i in range(n - 1)]
            + [PairSpec(f"q{i}", i, i + 3, "band", 3) for i in range(n - 3)])


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_madlib_passes_and_shrunk_noise_is_flagged_on_a_line(line_artifact, epsilon):
    pairs = line_pairs(len(LINE_POSITIONS))
    rows, honest = run_check(line_artifact, lambda: Madlib(line_artifact, epsilon), pairs, epsilon, 20000, seed=1)
    assert honest["status"] == "pass", honest["worst_violations"]
    # the test has power here: the real mechanism's lower bounds come close to the guarantee
    assert honest["per_epsilon"][f"{epsilon:g}"]["max_tightness"] > 0.8
    _, broken = run_check(line_artifact, lambda: ShrunkNoiseMadlib(line_artifact, epsilon), pairs, epsilon, 20000,
                          seed=2)
    assert broken["status"] == "violation"
    assert broken["per_epsilon"][f"{epsilon:g}"]["violations"] >= len(pairs) // 2
    assert "VIOLATION" in broken["message"] and str(FALSE_ALARM_RATE) in broken["message"]


def test_madlib_passes_on_real_glove(small_artifact):
    """Madlib at epsilon 10 on the 5k GloVe vocabulary, band pairs: passes; tightness says how weak the test is."""
    mech = Madlib(small_artifact, 10.0)
    pairs = []
    for index, word in enumerate(base_words(small_artifact.vocab_size, 4, np.random.default_rng(5))):
        pairs += band_pairs(index, int(word), guarantee_row(mech, small_artifact.vectors, int(word)), BANDS, 5,
                            small_artifact.words)
    rows, summary = run_check(small_artifact, lambda: Madlib(small_artifact, 10.0), pairs, 10.0, 10000, seed=3)
    assert summary["status"] == "pass", summary["worst_violations"]
    assert all(r["tightness"] is None or r["tightness"] < 1 for r in rows)


# --- TEM --------------------------------------------------------------------------------------------


TEM_EPSILON, TEM_GAMMA = 2.0, 2.5


def worst_mldp_pair(artifact, words=300, neighbours=15, half=50000, alpha=1e-4):
    """From the closed form of the MLDP variant: the pair (among frequent words and their neighbours) whose
    expected self-check lower bound exceeds the guarantee the most."""
    mldp = AlgorithmTwoTEM(artifact, TEM_EPSILON, TEM_GAMMA, bottom="mldp")
    dists = {w: mldp.distribution(w) for w in range(words)}
    best = None
    for w in range(words):
        row = guarantee_row(mldp, artifact.vectors, w)
        for v in np.argsort(row)[1:neighbours + 1]:
            v = int(v)
            if v not in dists:
                continue
            bound = TEM_EPSILON * min(row[v], TEM_GAMMA)
            with np.errstate(divide="ignore"):
                ratio = np.log(dists[w]) - np.log(dists[v])
            event = ratio > bound
            p, q = dists[w][event].sum(), dists[v][event].sum()
            if p <= 0:
                continue
            lcb = (math.log(float(cp_lower(np.floor(p * half), half, alpha / 2)) + 1e-300)
                   - math.log(float(cp_upper(np.ceil(q * half), half, alpha / 2))))
            if best is None or lcb - bound > best[0]:
                best = (lcb - bound, w, v, float(ratio[event].max() - bound))
    return best


def test_tem_with_mldp_bottom_weight_is_flagged(small_artifact, neighbour_artifact_dir):  # noqa: F811
    excess, w, v, exact_excess = worst_mldp_pair(small_artifact)
    assert exact_excess > 0.5 and excess > 0.3  # the premise: this pair really violates, detectably
    pairs = [PairSpec("mldp-worst", w, v, "user")]
    for index, word in enumerate(base_words(small_artifact.vocab_size, 3, np.random.default_rng(7))):
        pairs += band_pairs(index, int(word), guarantee_row(Madlib(small_artifact, 1.0), small_artifact.vectors,
                                                            int(word)), BANDS[:4], 4, small_artifact.words)
    broken = AlgorithmTwoTEM(small_artifact, TEM_EPSILON, TEM_GAMMA, bottom="mldp")
    rows, summary = run_check(small_artifact, lambda: broken, pairs, TEM_EPSILON, 100000, seed=11)
    assert summary["status"] == "violation"
    assert {r["pair_id"] for r in rows if r["verdict"] == "violation"} >= {"mldp-worst"}
    # the same sampler with the paper's bottom weight passes on the same pairs ...
    paper = AlgorithmTwoTEM(small_artifact, TEM_EPSILON, TEM_GAMMA, bottom="paper")
    _, summary = run_check(small_artifact, lambda: paper, pairs, TEM_EPSILON, 100000, seed=12)
    assert summary["status"] == "pass", summary["worst_violations"]
    # ... and so does textdp's TEM (K-nearest table, rejection sampling) at the same epsilon and gamma
    artifact = open_artifact(neighbour_artifact_dir)
    _, summary = run_check(artifact, lambda: TEM(artifact, TEM_EPSILON, gamma=TEM_GAMMA), pairs, TEM_EPSILON, 100000,
                           seed=13)
    assert summary["status"] == "pass", summary["worst_violations"]


# --- unknown words ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy, claimed, expected", [
    ("random", "random", "pass"),
    ("unk", "unk", "pass"),
    ("keep", "keep", "no guarantee"),       # the real keep policy: leaks, and claims nothing
    ("keep", "random", "violation"),        # a privatizer that says 'random' but passes words through
])
def test_oov_policies(small_artifact, policy, claimed, expected):
    pairs = oov_pairs(claimed, small_artifact.word_to_id, 0)
    privatizer = PassThroughPrivatizer if (policy, claimed) == ("keep", "random") else None
    rows, summary = run_check(small_artifact, lambda: Madlib(small_artifact, 10.0), pairs, 10.0, 2000, seed=17,
                              oov_policy=claimed, privatizer_class=privatizer)
    assert summary["status"] == expected, summary
    if expected != "pass":
        oov_rows = [r for r in rows if r["pair_id"] == "oov-oov"]
        assert all(r["lcb"] > 3 for r in oov_rows)  # two unknown words told apart with near certainty


# --- pairs and guarantees --------------------------------------------------------------------------------


def test_band_partners_are_the_exact_neighbour_ranks(small_artifact):
    mech = Madlib(small_artifact, 5.0)
    word = small_artifact.word_to_id["movie"]
    row = guarantee_row(mech, small_artifact.vectors, word)
    pairs = band_pairs(0, word, row, BANDS, 5, small_artifact.words)
    order = np.lexsort((np.arange(len(row)), row))
    order = order[order != word]
    assert [p.band for p in pairs] == [1, 10, 100, 1000]  # 10,000 > 4,999 other words: skipped
    assert [p.b for p in pairs] == [int(order[k - 1]) for k in (1, 10, 100, 1000)]
    assert all(p.a == word and "movie" in p.label for p in pairs)


def test_guarantees_of_pairs(neighbour_artifact_dir):  # noqa: F811
    artifact = open_artifact(neighbour_artifact_dir)
    tem = TEM(artifact, 4.0, gamma=3.0)
    assert pair_bound(tem, 2.0) == pytest.approx(8.0) and pair_bound(tem, 5.0) == pytest.approx(12.0)
    assert pair_bound(Madlib(artifact, 4.0), 5.0) == pytest.approx(20.0)
    assert oov_pair_bound("random", tem, None) == 0.0 and oov_pair_bound("unk", tem, None) == 0.0
    assert oov_pair_bound("random", tem, 9.0) == pytest.approx(12.0)
    assert math.isinf(oov_pair_bound("unk", tem, 9.0)) and math.isinf(oov_pair_bound("keep", tem, None))
    assert len(oov_pairs("unk", artifact.word_to_id, 0)) == 1 and len(oov_pairs("random", artifact.word_to_id, 0)) == 2
    assert all(w not in artifact.word_to_id for p in oov_pairs("random", artifact.word_to_id, 0)
               for w in (p.a, p.b) if isinstance(w, str))
