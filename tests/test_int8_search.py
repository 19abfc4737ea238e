"""The int8-prefiltered nearest and two-nearest search (textdp/search/int8_search.py, textdp/_top2.c) against float64 brute force.

The reference here is independent of the kernel: float64 BLAS scores pick each query's 12 best
candidates, whose squared distances are then recomputed from differences in float64 and sorted by
(distance, id). The search must return exactly those two ids, in that order, for every query: on the
5k GloVe fixture at several epsilons, on the full 400k vocabulary, and on hostile points (exact ties
from duplicated rows, a query on a word, tiny and huge coordinates, all-zero batches). Both kernels
run: the portable C loop everywhere, the AVX-512 VNNI loop where the CPU has it (skipped elsewhere,
with the reason). Noise is drawn with fixed seeds; nothing here is statistical.
"""

import threading

import numpy as np
import pytest

from textdp.mechanisms.madlib import Madlib, sample_noise
from textdp.mechanisms.vickrey import Vickrey
from textdp.search import int8_search
from textdp.search.nearest import ExactNearest

pytestmark = pytest.mark.skipif(not int8_search.available(), reason="textdp._top2 not built (no C compiler at install)")

KERNELS = ["portable", pytest.param("vnni", marks=pytest.mark.skipif(
    not int8_search.has_vnni(), reason="this CPU has no AVX-512 VNNI"))]


def reference_top2(vectors, points, chunk=16):
    """(B x 2) ids of the two smallest float64 distances, ties to the lower id (independent of the kernel)."""
    v64 = np.asarray(vectors, dtype=np.float64)
    sq = (v64 * v64).sum(axis=1)
    ids = np.arange(len(v64))
    out = np.empty((len(points), 2), dtype=np.int64)
    for start in range(0, len(points), chunk):
        z = np.asarray(points[start:start + chunk], dtype=np.float32).astype(np.float64)
        scores = sq[None, :] - 2.0 * z @ v64.T
        cand = np.argpartition(scores, 12, axis=1)[:, :12]
        for row, (point, near) in enumerate(zip(z, cand)):
            exact = ((v64[near] - point) ** 2).sum(axis=1)
            order = np.lexsort((ids[near], exact))
            assert exact[order[2]] - exact[order[1]] > 1e-9 * (1 + exact[order[1]]) or ids[near][order[2]] > ids[near][order[1]]
            out[start + row] = near[order[:2]]
    return out


def noisy(vectors, count, epsilon, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, len(vectors), size=count)
    base = np.asarray(vectors[ids], dtype=np.float64)
    return (base + sample_noise(count, base.shape[1], epsilon, rng)).astype(np.float32)


@pytest.fixture(scope="module")
def small_vectors(small_artifact):
    return np.asarray(small_artifact.vectors, dtype=np.float32)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("epsilon", [1.0, 5.0, 10.0, 50.0])
def test_equals_float64_brute_force_on_5k_words(small_vectors, kernel, epsilon):
    search = int8_search.Int8Search(small_vectors, kernel=kernel)
    points = noisy(small_vectors, 301, epsilon, seed=int(epsilon * 7))  # 301: not a multiple of the query group
    expected = reference_top2(small_vectors, points)
    assert (search.query_two(points) == expected).all()
    assert search.last_checked.max() < len(small_vectors)  # the prefilter skipped words for every query
    assert (search.query(points) == expected[:, 0]).all()  # the nearest alone (threshold from the best)
    for threads in (2, 3):  # vocabulary split in ranges searched at once, then merged
        assert (search.query_two(points, threads=threads) == expected).all(), threads
        assert (search.query(points, threads=threads) == expected[:, 0]).all(), threads


@pytest.mark.parametrize("kernel", KERNELS)
def test_equals_float64_brute_force_on_400k_words_and_skips_almost_all(default_artifact, kernel):
    vectors = default_artifact.vectors
    search = int8_search.Int8Search(vectors, kernel=kernel)
    count = 256 if kernel == "vnni" else 48
    for epsilon in (5.0, 10.0):
        points = noisy(vectors, count, epsilon, seed=int(epsilon))
        expected = reference_top2(vectors, points)
        assert (search.query_two(points) == expected).all(), epsilon
        # the point of the prefilter: far fewer than 1% of the words get an exact distance
        assert np.median(search.last_checked) < 0.01 * len(vectors), np.median(search.last_checked)
        assert (search.query(points) == expected[:, 0]).all(), epsilon
        assert np.median(search.last_checked) < 0.01 * len(vectors), np.median(search.last_checked)
        assert (search.query(points, threads=2) == expected[:, 0]).all(), epsilon


@pytest.mark.parametrize("kernel", KERNELS)
def test_ties_words_and_extreme_points(small_vectors, kernel):
    base = small_vectors[:700]
    # every word twice (rows i and i + 700): exact ties, which go to the lower id
    vocab = np.concatenate([base, base, small_vectors[700:1000]])
    search = int8_search.Int8Search(vocab, kernel=kernel)
    on_words = vocab[[0, 5, 699, 1399, 1500]]  # a query exactly on a word: that word and its twin
    got = search.query_two(on_words)
    assert got[:4].tolist() == [[0, 700], [5, 705], [699, 1399], [699, 1399]]
    assert got[4, 0] == 1500  # a word that appears once
    assert search.query(on_words).tolist() == [0, 5, 699, 699, 1500]
    # split so that a word and its twin fall in different ranges: the merge keeps the lower id
    assert search.query_two(on_words, threads=3)[:4].tolist() == [[0, 700], [5, 705], [699, 1399], [699, 1399]]
    assert search.query(on_words, threads=3).tolist() == [0, 5, 699, 699, 1500]
    rng = np.random.default_rng(3)
    for points in (noisy(vocab, 40, 3.0, seed=11),
                   rng.standard_normal((9, 50)).astype(np.float32) * np.float32(1e-30),  # tiny: R_v clipped
                   rng.standard_normal((9, 50)).astype(np.float32) * np.float32(1e4),  # far from every word
                   np.zeros((8, 50), dtype=np.float32),
                   on_words[:1]):
        expected = reference_top2(vocab, points)
        assert (search.query_two(points) == expected).all()
        assert (search.query(points, threads=2) == expected[:, 0]).all()


@pytest.mark.parametrize("dims", [7, 64, 101])
def test_other_dimensions(small_vectors, dims):
    """Widths that are and are not multiples of the kernel's 4-byte groups (real GloVe coordinates,
    cut or stacked with a permuted copy), through both kernels."""
    wide = np.hstack([small_vectors, small_vectors[:, ::-1], small_vectors[:, :1]])[:2000, :dims]
    points = noisy(wide, 90, 5.0, seed=dims)
    expected = reference_top2(wide, points)
    for kernel in ("portable",) + (("vnni",) if int8_search.has_vnni() else ()):
        assert (int8_search.Int8Search(wide, kernel=kernel).query_two(points) == expected).all(), kernel


def test_rejects_bad_input(small_vectors):
    search = int8_search.Int8Search(small_vectors, kernel="portable")
    assert search.query_two(np.empty((0, 50), dtype=np.float32)).shape == (0, 2)
    with pytest.raises(ValueError, match="finite"):
        search.query_two(np.full((2, 50), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(B x 50\)"):
        search.query_two(np.zeros((2, 49), dtype=np.float32))
    with pytest.raises(ValueError, match="at least two rows"):
        int8_search.Int8Search(small_vectors[:1])
    with pytest.raises(ValueError, match="unknown kernel"):
        int8_search.Int8Search(small_vectors, kernel="gpu")


def test_threads_share_one_search(small_vectors):
    """Two threads calling the same search at once (a Beam worker's threads share it) get exact answers."""
    search = int8_search.Int8Search(small_vectors)
    batches = [noisy(small_vectors, 200, eps, seed=i) for i, eps in enumerate((2.0, 20.0, 5.0, 40.0))]
    expected = [reference_top2(small_vectors, b) for b in batches]
    results = {}

    def run(i):
        for _ in range(3):
            results[i] = search.query_two(batches[i])
            if not (results[i] == expected[i]).all():
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all((results[i] == expected[i]).all() for i in range(len(batches)))


def test_exact_nearest_selects_the_two_nearest_search(small_artifact):
    vectors, sqnorms = small_artifact.vectors, small_artifact.sqnorms
    assert ExactNearest(vectors, sqnorms, search="blas").search_method() == "blas"
    assert ExactNearest(vectors, sqnorms, search="int8").search_method() == "int8"
    assert ExactNearest(vectors, sqnorms).search_method() == ("int8" if int8_search.has_vnni() else "blas")
    with pytest.raises(ValueError, match="search must be one of"):
        ExactNearest(vectors, sqnorms, search="fast")
    points = noisy(vectors, 500, 8.0, seed=5)
    reference = reference_top2(vectors, points)
    for threads in (1, 2):
        int8 = ExactNearest(vectors, sqnorms, search="int8", batch=128, threads=threads)
        assert (int8.query_two(points) == reference).all()
        assert (int8.query(points) == reference[:, 0]).all()
    blas = ExactNearest(vectors, sqnorms, search="blas")
    assert (blas.query_two(points) == reference).mean() > 0.99  # BLAS ranks in float32: near-ties only
    assert (blas.query(points) == reference[:, 0]).mean() > 0.99


def test_vickrey_releases_the_same_words_with_either_search(small_artifact):
    """Same seed, same noise: the Vickrey mechanism's output does not depend on which exact search ran."""
    ids = np.random.default_rng(0).integers(0, 5000, size=3000)
    released = {}
    for method in ("int8", "blas"):
        mech = Vickrey(small_artifact, epsilon=10.0, t=0.5)
        mech.base.nearest = ExactNearest(small_artifact.vectors, small_artifact.sqnorms, search=method)
        released[method] = mech.privatize_ids(ids, np.random.default_rng(42))
    assert (released["int8"] == released["blas"]).mean() > 0.999
    assert isinstance(Vickrey(small_artifact, epsilon=10.0).base, Madlib)
