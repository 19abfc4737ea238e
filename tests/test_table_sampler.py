"""The one table sampler (textdp.mechanisms.table_sampler) against its closed form, directly, in its four corners.

P(y | x) ~ exp(-epsilon/2 * min(d(x, y), cap)) over the allowed words: cap finite (TEM's floor) or infinite
(SanText), allowed = every word or a subset that excludes the input (SanText+ for a frequent word). Each
corner runs through each of the sampler's three ways to a draw: rejection rounds from the table envelope
alone (budget and dense rows off), dense rows (forced with DENSE_AFTER_CANDIDATES = 0), and the per-word round budget followed
by an exact pass (a tiny GIVE_UP_FACTOR, dense rows off). Real GloVe vectors and a K = 40 table built by the
neighbour job (5k artifact, tests/test_neighbours.py fixture).

Statistics. Every case is a G-test of 40,000 draws against the closed form computed here by brute force in
float64 (cells expected below 20 pooled) at significance 1e-5: 15 checks (12 corners x paths, one at
epsilon 500, two on the angular metric), so a correct sampler fails any with probability below
15 x 1e-5 = 1.5e-4 (Bonferroni). Power: the same draws tested against the closed
form at 1.25 x epsilon must be rejected (p < 1e-5). A guard checks that each case puts real mass outside
the table (and on the floor when the cap is finite), so the rejection part is what the test checks. Draws
use fixed seeds so a failure reproduces.
"""

import importlib
import math
import pkgutil
import zlib

import numpy as np
import pytest

from tests.statcheck import g_test
from tests.test_neighbours import angular_artifact_dir, neighbour_artifact_dir  # noqa: F401  (fixtures)
from textdp import mechanisms
from textdp.artifact.locate import open_artifact
from textdp.artifact.neighbours import NeighbourTable, metric_points
from textdp.mechanisms.santext import SanText
from textdp.mechanisms.table_sampler import TableSampler
from textdp.mechanisms.tem import TEM

ALPHA = 1e-5
DRAWS = 40_000
WORD = "good"
EPSILON = 4.0
CAP = 4.5  # above d_K of "good" (2.75: the excess envelope works), below many distances (the floor carries mass)


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


@pytest.fixture(scope="module")
def table(artifact):
    return NeighbourTable.from_artifact(artifact)


def rarest_half(vocab_size):
    return np.arange(vocab_size // 2, vocab_size)


def closed_form(artifact, word_id, epsilon, cap, allowed):
    """exp(-epsilon/2 min(d, cap)) over the allowed words, normalised; brute force in float64."""
    points = np.asarray(artifact.vectors, dtype=np.float64)
    dist = np.sqrt(((points - points[word_id]) ** 2).sum(axis=1))
    dist[word_id] = 0.0
    log_w = -0.5 * epsilon * np.minimum(dist, cap)
    if allowed is not None:
        mask = np.zeros(len(points), dtype=bool)
        mask[allowed] = True
        log_w[~mask] = -math.inf
    log_w -= log_w.max()
    weights = np.exp(log_w)
    return weights / weights.sum()


CORNERS = [(CAP, False), (CAP, True), (math.inf, False), (math.inf, True)]


@pytest.mark.parametrize("path", ["rejection", "dense", "pass"])
@pytest.mark.parametrize("cap, subset", CORNERS)
def test_sampler_matches_closed_form_in_every_corner(artifact, table, cap, subset, path):
    word_id = artifact.word_to_id[WORD]
    allowed = rarest_half(artifact.vocab_size) if subset else None
    assert allowed is None or word_id not in allowed  # the input is not an allowed output: the shift matters
    sampler = TableSampler(artifact.vectors, table.ids, table.distances, EPSILON, cap=cap, allowed=allowed)
    rng = np.random.default_rng(zlib.crc32(f"{cap}-{subset}-{path}".encode()))
    if path == "rejection":  # rounds only: no budget, no dense rows
        sampler.GIVE_UP_FACTOR = None
        sampler.DENSE_MAX_WORDS = 0
    elif path == "dense":
        sampler.DENSE_AFTER_CANDIDATES = 0  # a dense row at the first chance
        sampler.sample(np.full(200, word_id), rng)
        assert word_id in sampler._dense_rows
        rounds_before = sampler.rounds
    elif path == "pass":
        sampler.DENSE_MAX_WORDS = 0  # every call decides anew
        sampler.GIVE_UP_FACTOR = 0.002  # 10 rounds per word and call on 5,000 words
        sampler.FIRST_ROUNDS = 1  # one round per token first: some tokens finish by rounds, the rest by the pass
    released = np.concatenate([sampler.sample(np.full(DRAWS // 8, word_id), rng) for _ in range(8)])
    if path == "dense":
        assert sampler.rounds == rounds_before  # every draw came from the dense row
    elif path == "pass":
        assert sampler.passes == 8 and sampler.rounds > 0  # every call: rounds first, then a pass for the rest
    else:
        assert sampler.passes == 0 and not sampler._dense_rows
    assert sampler.envelope_violations == 0
    counts = np.bincount(released, minlength=artifact.vocab_size)
    probs = closed_form(artifact, word_id, EPSILON, cap, allowed)
    assert g_test(counts, probs) > ALPHA
    # power: the same draws are told apart from the law at 1.25 x epsilon
    assert g_test(counts, closed_form(artifact, word_id, 1.25 * EPSILON, cap, allowed)) < ALPHA


@pytest.mark.parametrize("cap, subset", CORNERS)
def test_cases_put_real_mass_outside_the_table(artifact, table, cap, subset):
    """Guard for the test above: the closed form puts at least 30% of its mass outside the 40-word table,
    and, with the cap, at least 20% on words beyond the cap (the floor)."""
    word_id = artifact.word_to_id[WORD]
    allowed = rarest_half(artifact.vocab_size) if subset else None
    probs = closed_form(artifact, word_id, EPSILON, cap, allowed)
    assert 1.0 - probs[np.asarray(table.ids[word_id])].sum() > 0.3
    assert float(table.distances[word_id][-1]) < CAP  # the excess envelope (u > c) is in play
    if math.isfinite(cap):
        points = np.asarray(artifact.vectors, dtype=np.float64)
        beyond = np.sqrt(((points - points[word_id]) ** 2).sum(axis=1)) >= cap
        assert probs[beyond].sum() > 0.2


def test_large_epsilon_subset_far_from_the_input_does_not_underflow(artifact, table):
    """SanText+ at epsilon 500: exp(-250 d) is 0 in float64 for every allowed word; the shifted weights keep
    the envelope non-empty and the draws land on the nearest allowed words (the closed form's support)."""
    word_id = artifact.word_to_id[WORD]
    allowed = rarest_half(artifact.vocab_size)
    sampler = TableSampler(artifact.vectors, table.ids, table.distances, 500.0, allowed=allowed)
    released = sampler.sample(np.full(2000, word_id), np.random.default_rng(5))
    probs = closed_form(artifact, word_id, 500.0, math.inf, allowed)
    assert probs[released].min() > 1e-6 and g_test(np.bincount(released, minlength=len(probs)), probs) > ALPHA


def test_refusals(artifact, table):
    for kwargs in ({"epsilon": 0.0}, {"epsilon": 1.0, "cap": -1.0}, {"epsilon": 1.0, "allowed": np.array([], dtype=np.int64)}):
        with pytest.raises(ValueError):
            TableSampler(artifact.vectors, table.ids, table.distances, **kwargs)


def test_tem_santext_and_santext_plus_draw_with_this_one_sampler(artifact):
    """One sampler: TEM passes cap = gamma and allows every word; SanText has no cap; SanText+ allows the
    sensitive words only. No second table sampler class remains in the mechanisms."""
    tem = TEM(artifact, 4.0)
    plain, plus = SanText(artifact, 4.0), SanText(artifact, 4.0, plus=True)
    assert all(type(m.sampler) is TableSampler for m in (tem, plain, plus))
    assert tem.sampler.cap == tem.gamma and tem.sampler.allowed_mask is None
    assert plain.sampler.cap == math.inf and plain.sampler.allowed_mask is None
    assert plus.sampler.cap == math.inf and (plus.sampler.allowed_mask == plus.sensitive).all()
    samplers = {name for info in pkgutil.iter_modules(mechanisms.__path__)
                for name, obj in vars(importlib.import_module(f"textdp.mechanisms.{info.name}")).items()
                if isinstance(obj, type) and name.endswith("Sampler") and obj.__module__.startswith("textdp.mechanisms")}
    assert samplers == {"TableSampler"}


@pytest.mark.parametrize("path", ["rejection", "dense"])
def test_angular_metric_through_metric_points(angular_artifact_dir, path):  # noqa: F811
    """The angular table (K = 25): distances between unit directions, on the rounds and in the dense rows.
    G-test at 1e-5 against the closed form (2 checks, counted in the module's total), power at 1.25 x epsilon,
    and a guard that half the mass or more lies outside the table."""
    artifact = open_artifact(angular_artifact_dir)
    table = NeighbourTable.from_artifact(artifact)
    word_id = artifact.word_to_id["movie"]
    epsilon, cap = 8.0, 1.0
    sampler = TableSampler(artifact.vectors, table.ids, table.distances, epsilon, cap=cap, metric="angular")
    rng = np.random.default_rng(zlib.crc32(f"angular-{path}".encode()))
    if path == "rejection":
        sampler.DENSE_MAX_WORDS = 0
    else:
        sampler.DENSE_AFTER_CANDIDATES = 0
        sampler.sample(np.full(200, word_id), rng)
        assert word_id in sampler._dense_rows
    released = sampler.sample(np.full(DRAWS, word_id), rng)
    points = metric_points(artifact.vectors, "angular", dtype=np.float64)

    def law(eps):
        dist = np.sqrt(((points - points[word_id]) ** 2).sum(axis=1))
        dist[word_id] = 0.0
        log_w = -0.5 * eps * np.minimum(dist, cap)
        weights = np.exp(log_w - log_w.max())
        return weights / weights.sum()

    assert 1.0 - law(epsilon)[np.asarray(table.ids[word_id])].sum() > 0.5
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, law(epsilon)) > ALPHA
    assert g_test(counts, law(1.25 * epsilon)) < ALPHA
