"""The neighbour job and its core: exact K-nearest lists (checked against float64 brute force on
real GloVe rows), the word itself first at distance 0 even with duplicate vectors, the manifest
section with checksums, and clear refusals. Pipelines run on the local FnApiRunner."""

import json
import os
import shutil

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.neighbours import build_pipeline, run
from textdp.artifact.embeddings import EmbeddingSource
from textdp.artifact.locate import open_artifact
from textdp.artifact.neighbours import DISTANCES_FILE, IDS_FILE, NeighbourTable, brute_force_knn, knn_rows, metric_points
from textdp.artifact.store import build_artifact
from textdp.artifact.verification import sha256_file
from textdp.errors import ArtifactError, TextdpError

K = 40


def run_neighbours(artifact_dir, *flags):
    argv = ["--runner=FnApiRunner", f"--artifact={artifact_dir}", *flags]
    result = build_pipeline(PipelineOptions(argv)).run()
    result.wait_until_finish()
    return result


def copy_artifact(src, dest):
    shutil.copytree(src, dest)
    return str(dest)


@pytest.fixture(scope="session")
def neighbour_artifact_dir(small_artifact_dir, tmp_path_factory):
    """A copy of the 5k GloVe artifact with a euclidean K=40 table computed by the Beam job."""
    path = copy_artifact(small_artifact_dir, tmp_path_factory.mktemp("nb") / "glove5k")
    run_neighbours(path, f"--k={K}", "--metric=euclidean", "--shard-rows=1500")
    return path


@pytest.fixture(scope="session")
def angular_artifact_dir(small_artifact_dir, tmp_path_factory):
    path = copy_artifact(small_artifact_dir, tmp_path_factory.mktemp("nb-angular") / "glove5k")
    run_neighbours(path, "--k=25", "--metric=angular", "--shard-rows=2500")
    return path


@pytest.mark.parametrize("fixture, metric, k", [("neighbour_artifact_dir", "euclidean", K),
                                                ("angular_artifact_dir", "angular", 25)])
def test_table_equals_brute_force_on_a_sample(request, fixture, metric, k):
    artifact = open_artifact(request.getfixturevalue(fixture))
    table = NeighbourTable.from_artifact(artifact)
    assert (table.metric, table.k) == (metric, k)
    rows = np.random.default_rng(7).choice(artifact.vocab_size, 150, replace=False)
    points = metric_points(artifact.vectors, metric, dtype=np.float64)
    ref_ids, ref_d = brute_force_knn(points, rows, k)
    got_ids, got_d = np.asarray(table.ids[rows]), np.asarray(table.distances[rows])
    np.testing.assert_allclose(got_d, ref_d, rtol=1e-6, atol=1e-6)
    # ids equal except where two words are at the same distance (ties may come in any order)
    same = got_ids == ref_ids
    tie = np.isclose(got_d, ref_d, rtol=0, atol=1e-6)
    assert same.mean() > 0.99 and (same | tie).all()


def test_word_itself_first_at_exactly_zero(neighbour_artifact_dir):
    table = NeighbourTable.from_artifact(open_artifact(neighbour_artifact_dir))
    n = len(table.ids)
    assert (np.asarray(table.ids[:, 0]) == np.arange(n)).all()
    assert (np.asarray(table.distances[:, 0]) == 0.0).all()
    d = np.asarray(table.distances)
    assert (np.diff(d, axis=1) >= 0).all() and (d[:, 1:] > 0).mean() > 0.999


def test_job_metrics_count_every_row(small_artifact_dir, tmp_path):
    """The job's counters: every vocabulary row once, no float64 fallback on real GloVe rows."""
    from apache_beam.metrics.metric import MetricsFilter

    path = copy_artifact(small_artifact_dir, tmp_path / "metrics")
    result = run_neighbours(path, "--k=10", "--shard-rows=2000")
    found = result.metrics().query(MetricsFilter().with_namespace("textdp"))
    counters = {c.key.metric.name: c.committed for c in found["counters"]}
    distributions = {d.key.metric.name: d.committed for d in found["distributions"]}
    assert counters["neighbour_rows"] == 5000 and counters["neighbour_fallback_rows"] == 0
    assert distributions["artifact_load_ms"].count >= 1 and distributions["neighbour_block_ms"].count == 5


def test_duplicate_vectors_keep_the_word_itself_first(tmp_path):
    """Three words share one vector: each lists itself first, then its twins, all at distance 0."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    vectors[[10, 57, 200]] = vectors[57]
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "v.txt").write_text("\n".join(f"w{i}" for i in range(300)) + "\n")
    path = build_artifact(EmbeddingSource("npy", str(tmp_path / "v.npy"), str(tmp_path / "v.txt")),
                          str(tmp_path / "dup"), trees=1)
    run_neighbours(path, "--k=5", "--shard-rows=128")
    table = NeighbourTable.from_artifact(open_artifact(path))
    for word, twins in ((10, [57, 200]), (57, [10, 200]), (200, [10, 57])):
        assert table.ids[word, 0] == word
        assert sorted(table.ids[word, 1:3]) == twins
        assert (table.distances[word, :3] == 0).all() and table.distances[word, 3] > 0


def test_knn_rows_is_exact_for_angular_and_euclidean_on_real_rows(small_artifact):
    """The core without Beam, on a block that straddles vocabulary blocks (vocab_rows=700)."""
    for metric in ("euclidean", "angular"):
        points = metric_points(small_artifact.vectors, metric)
        sq = np.einsum("ij,ij->i", points, points)
        ids, dist, fallback = knn_rows(points, sq, 1200, 1450, 30, vocab_rows=700)
        ref_ids, ref_d = brute_force_knn(metric_points(small_artifact.vectors, metric, np.float64),
                                         np.arange(1200, 1450), 30)
        np.testing.assert_allclose(dist, ref_d, rtol=1e-6, atol=1e-6)
        assert (ids == ref_ids).mean() > 0.99 and fallback == 0


def test_angular_is_a_metric_on_real_words(small_artifact):
    """Symmetry, identity and the triangle inequality on 20,000 random triples of real words."""
    points = metric_points(small_artifact.vectors, "angular", dtype=np.float64)
    a, b, c = np.random.default_rng(5).integers(0, len(points), (3, 20000))
    d = lambda x, y: np.linalg.norm(points[x] - points[y], axis=1)  # noqa: E731
    assert np.allclose(d(a, b), d(b, a)) and (d(a, a) == 0).all()
    assert (d(a, c) <= d(a, b) + d(b, c) + 1e-12).all()
    assert (d(a, b) <= 2 + 1e-12).all()


def test_manifest_section_and_checksums(neighbour_artifact_dir):
    with open(os.path.join(neighbour_artifact_dir, "manifest.json")) as handle:
        manifest = json.load(handle)
    section = manifest["neighbours"]
    assert section["k"] == K and section["metric"] == "euclidean" and section["shape"] == [5000, K]
    assert section["ids_dtype"] == "int32" and section["distances_dtype"] == "float32"
    assert "distance exactly 0" in section["self_first"]
    for name in (IDS_FILE, DISTANCES_FILE):
        path = os.path.join(neighbour_artifact_dir, name)
        assert manifest["files"][name]["sha256"] == sha256_file(path)
        assert np.load(path, mmap_mode="r").flags.c_contiguous
    assert section["vectors_sha256"] == manifest["files"]["vectors.npy"]["sha256"]
    assert not [f for f in os.listdir(neighbour_artifact_dir) if f.startswith(".")]  # no staging left over


def test_damaged_table_is_refused(neighbour_artifact_dir, tmp_path):
    path = copy_artifact(neighbour_artifact_dir, tmp_path / "damaged")
    with open(os.path.join(path, DISTANCES_FILE), "r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(b"\x00\x00\x80\x7f")
    with pytest.raises(ArtifactError, match="SHA-256"):
        NeighbourTable.from_artifact(open_artifact(path))


def test_missing_table_tells_the_user_what_to_run(small_artifact):
    with pytest.raises(ArtifactError, match="textdp neighbours --artifact"):
        NeighbourTable.from_artifact(small_artifact)


def test_refusals_are_clear(neighbour_artifact_dir, small_artifact_dir, capsys):
    with pytest.raises(TextdpError, match="already has a neighbour table"):
        build_pipeline(PipelineOptions([f"--artifact={neighbour_artifact_dir}"]))
    with pytest.raises(TextdpError, match="--k must be between"):
        build_pipeline(PipelineOptions([f"--artifact={small_artifact_dir}", "--k=0"]))
    assert run([f"--artifact={neighbour_artifact_dir}", "--runner=FnApiRunner"]) == 2  # refused before running
    assert "already has a neighbour table" in capsys.readouterr().err
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--metric" in out and "--k" in out and "--shard-rows" in out
