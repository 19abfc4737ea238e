"""Vocabulary artifacts: contents, checksums, refusal of damage, atomic builds, the default artifact."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from textdp.artifact import store
from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource, load_embeddings
from textdp.artifact.locate import open_artifact
from textdp.artifact.store import Artifact, build_artifact
from textdp.artifact.verification import sha256_file
from textdp.errors import ArtifactError
from textdp.text.tokenize import unreadable_entries

GLOVE = EmbeddingSource("bundled", BUNDLED_GLOVE)


@pytest.fixture
def tiny_artifact(tmp_path):
    """A fresh 300-word real-GloVe artifact that a test may damage."""
    return build_artifact(GLOVE, str(tmp_path / "tiny"), vocab_size=300, trees=4, seed=7)


def test_manifest_and_contents(small_artifact_dir, small_artifact):
    manifest = json.load(open(os.path.join(small_artifact_dir, "manifest.json")))
    assert manifest["format_version"] == store.FORMAT_VERSION
    assert manifest["source"] == {"kind": "bundled", "name": BUNDLED_GLOVE}
    assert (manifest["dimension"], manifest["vocab_size"], manifest["metric"]) == (50, 5000, "euclidean")
    assert manifest["annoy"] == {"file": "index.ann", "metric": "euclidean", "trees": 10, "seed": 0}
    for name, entry in manifest["files"].items():
        path = os.path.join(small_artifact_dir, name)
        assert entry == {"sha256": sha256_file(path), "bytes": os.path.getsize(path)}
    assert set(manifest["files"]) == {"vocab.txt", "vectors.npy", "index.ann"}
    words, vectors = load_embeddings(GLOVE, vocab_size=5200)  # the source's first entries: the artifact keeps the
    keep = np.ones(len(words), dtype=bool)                      # first 5,000 the tokenizer reads as themselves
    keep[unreadable_entries(words)] = False
    kept = np.flatnonzero(keep)[:5000]
    words, vectors = [words[i] for i in kept], vectors[kept]
    dropped = int(np.count_nonzero(~keep[:kept[-1] + 1]))
    assert 50 < dropped < 200 and manifest["dropped_entries"]["count"] == dropped  # 94 punctuation etc. (",", "u.s.")
    assert {",", ".", "u.s."} <= set(manifest["dropped_entries"]["examples"])
    assert small_artifact.words == words
    assert isinstance(small_artifact.vectors, np.memmap) and small_artifact.vectors.flags.c_contiguous
    np.testing.assert_array_equal(small_artifact.vectors, vectors)
    assert small_artifact.annoy_index.get_n_items() == 5000
    np.testing.assert_allclose(small_artifact.annoy_index.get_item_vector(42), vectors[42], rtol=1e-6)
    np.testing.assert_allclose(small_artifact.sqnorms, (vectors.astype(np.float64) ** 2).sum(1), rtol=1e-5)
    assert small_artifact.word_to_id["movie"] == words.index("movie")


def test_build_progress_and_no_overwrite(tmp_path):
    messages = []
    out = build_artifact(GLOVE, str(tmp_path / "a"), vocab_size=100, trees=2, progress=messages.append)
    assert any("Annoy" in m for m in messages) and any("ready" in m for m in messages)
    before = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
    with pytest.raises(ArtifactError, match="already exists"):
        build_artifact(GLOVE, out, vocab_size=100, trees=2)
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)} == before


def test_failed_build_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\na 3 4\n")
    from textdp.artifact.embeddings import parse_source

    with pytest.raises(Exception, match="duplicate"):
        build_artifact(parse_source(str(bad)), str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["bad.txt"]


@pytest.mark.parametrize("name", ["vectors.npy", "vocab.txt"])
def test_corrupted_file_is_refused(tiny_artifact, name):
    path = os.path.join(tiny_artifact, name)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as handle:
        handle.write(data)
    with pytest.raises(ArtifactError, match=f"{name} fails its SHA-256 check"):
        open_artifact(tiny_artifact)


@pytest.mark.parametrize("name", ["vectors.npy", "vocab.txt", "index.ann"])
def test_truncated_file_is_refused(tiny_artifact, name):
    path = os.path.join(tiny_artifact, name)
    os.truncate(path, os.path.getsize(path) - 100)
    with pytest.raises(ArtifactError, match="truncated or corrupted"):
        loaded = open_artifact(tiny_artifact)
        loaded.annoy_index  # the index is verified when first used  # noqa: B018


def test_corrupted_index_refused_on_first_use(tiny_artifact):
    path = os.path.join(tiny_artifact, "index.ann")
    data = bytearray(open(path, "rb").read())
    data[100] ^= 0xFF
    open(path, "wb").write(data)
    loaded = open_artifact(tiny_artifact)  # vocabulary and vectors are fine
    with pytest.raises(ArtifactError, match="index.ann fails its SHA-256 check"):
        loaded.annoy_index  # noqa: B018


def test_missing_or_foreign_manifest(tiny_artifact, tmp_path):
    manifest_path = os.path.join(tiny_artifact, "manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["format_version"] = 99
    json.dump(manifest, open(manifest_path, "w"))
    with pytest.raises(ArtifactError, match="format version 99"):
        open_artifact(tiny_artifact)
    open(manifest_path, "w").write("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        open_artifact(tiny_artifact)
    os.remove(manifest_path)
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        open_artifact(tiny_artifact)
    with pytest.raises(ArtifactError, match="not a directory"):
        open_artifact(str(tmp_path / "nowhere"))


def test_manifest_lying_about_shape_is_refused(tiny_artifact):
    manifest_path = os.path.join(tiny_artifact, "manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["vocab_size"] = 301
    json.dump(manifest, open(manifest_path, "w"))
    with pytest.raises(ArtifactError, match="vocabulary has 300 words, manifest says 301"):
        Artifact(tiny_artifact)


def test_add_files_never_overwrites(tiny_artifact, tmp_path):
    extra = tmp_path / "extra.npy"
    np.save(extra, np.arange(5))
    manifest = store.add_files(tiny_artifact, {"extra.npy": str(extra)}, "extra", {"rows": 5})
    assert manifest["extra"] == {"rows": 5} and "extra.npy" in manifest["files"]
    loaded = open_artifact(tiny_artifact)
    np.testing.assert_array_equal(np.load(loaded.file_path("extra.npy")), np.arange(5))
    np.save(extra, np.arange(6))
    with pytest.raises(ArtifactError, match="never overwritten"):
        store.add_files(tiny_artifact, {"extra.npy": str(extra)}, "extra", {"rows": 6})
    np.testing.assert_array_equal(np.load(os.path.join(tiny_artifact, "extra.npy")), np.arange(5))


def test_default_artifact_built_once_with_progress_then_reused(tmp_path):
    """Two processes race to build the default artifact into an empty cache: one builds, both use it."""
    env = dict(os.environ, TEXTDP_CACHE_DIR=str(tmp_path / "cache"))
    code = ("from textdp.artifact.store import ensure_default_artifact; from textdp.artifact.locate import open_artifact; "
            "p = ensure_default_artifact(); a = open_artifact(p); print(p, a.vocab_size)")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), [err[-2000:] for _, err, _ in results]
    outs = {out.strip() for out, _, _ in results}
    expected = os.path.join(str(tmp_path / "cache"), "artifacts", os.path.basename(store.default_artifact_path()))
    dropped = json.load(open(os.path.join(expected, "manifest.json")))["dropped_entries"]["count"]
    assert 8000 < dropped < 9500  # GloVe's entries the tokenizer never reads as one word (8,689 with this tokenizer)
    assert outs == {f"{expected} {400000 - dropped}"}
    builders = [err for _, err, _ in results if "building the default artifact" in err]
    assert len(builders) == 1 and "building Annoy index" in builders[0]
    # A third call finds it and prints nothing.
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stderr == ""
    leftovers = [n for n in os.listdir(os.path.dirname(expected)) if ".tmp-" in n]
    assert leftovers == []
