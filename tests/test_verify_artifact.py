"""The pre-run artifact check (``textdp.artifact.locate.verify_artifact``) and the verification stamps behind it.

Real GloVe artifacts (300 words, an Annoy index and an exact K=8 neighbour table), damaged the way
a disk, a careless copy or a partial upload damages them; gs:// artifacts on the real Cloud
Storage emulator. Files that must be stamped are copied, then left to age past
``STAMP_MIN_AGE_NS`` once for the whole module (a file younger than that is never stamped).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import numpy as np
import pytest

from tests.gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401 (pytest fixtures)
from textdp.artifact import gcs, store
from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource
from textdp.artifact.locate import ARTIFACT_PARTS, open_artifact, read_manifest, verify_artifact
from textdp.artifact.neighbours import DISTANCES_FILE, IDS_FILE, TableWriter, knn_rows, metric_points
from textdp.artifact.store import MANIFEST, build_artifact, stamp_dir
from textdp.artifact.verification import STAMP_MIN_AGE_NS, stamp_path
from textdp.errors import ArtifactError
from textdp.mechanisms import artifact_needs

EVERYTHING = artifact_needs("tem") + ("annoy",)
AGED_COPIES = 12  # one per test (and parameter) that takes ``aged_copy``


@pytest.fixture(scope="module")
def tiny_with_table(tmp_path_factory):
    """300 real GloVe words, a 2-tree Annoy index and an exact euclidean K=8 neighbour table."""
    path = build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), str(tmp_path_factory.mktemp("verify") / "tiny"),
                          vocab_size=300, trees=2, seed=3)
    points = metric_points(open_artifact(path).vectors, "euclidean")
    ids, distances, fallback = knn_rows(points, np.einsum("ij,ij->i", points, points), 0, len(points), 8)
    writer = TableWriter(path, len(points), 8, "euclidean")
    writer.write_block(0, ids, distances, fallback)
    writer.finish({})
    return path


@pytest.fixture(scope="module")
def aged_copies(tiny_with_table, tmp_path_factory):
    """Copies whose files are older than STAMP_MIN_AGE_NS, so that a passing check stamps them."""
    root = tmp_path_factory.mktemp("aged")
    copies = [str(shutil.copytree(tiny_with_table, root / f"copy{i}")) for i in range(AGED_COPIES)]
    time.sleep(STAMP_MIN_AGE_NS / 1e9 + 0.2)
    return copies


@pytest.fixture
def aged_copy(aged_copies):
    assert aged_copies, "raise AGED_COPIES: more tests take an aged copy than were made"
    return aged_copies.pop()


@pytest.fixture
def fresh_copy(tiny_with_table, tmp_path):
    return str(shutil.copytree(tiny_with_table, tmp_path / "artifact"))


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A TEXTDP_CACHE_DIR of this test's own: its stamps and fetched artifacts."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(path))
    return path


def flip_byte_keeping_mtime(path: str, offset: int) -> None:
    """Corrupt one byte in place, then put the old mtime back: size, inode and mtime are unchanged."""
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)


def edit_manifest(directory: str, change) -> None:
    path = os.path.join(directory, MANIFEST)
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    change(manifest)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)


# --- local artifacts ----------------------------------------------------------------------------


def test_corruption_after_a_verification_is_refused_although_mtime_was_put_back(aged_copy, private_cache):
    vectors = os.path.join(aged_copy, "vectors.npy")
    manifest = verify_artifact(aged_copy, needs=EVERYTHING)
    assert manifest["vocab_size"] == 300
    stamp = stamp_path(stamp_dir(), vectors)
    assert os.path.exists(stamp), "an aged file that passed is stamped"
    flip_byte_keeping_mtime(vectors, os.path.getsize(vectors) // 2)
    refusal = re.escape(vectors) + " fails its SHA-256 check"  # names the artifact directory and the file
    with pytest.raises(ArtifactError, match=refusal):
        verify_artifact(aged_copy, needs=EVERYTHING)
    with pytest.raises(ArtifactError, match=refusal):  # the workers' loader shares the stamps and refuses too
        open_artifact(aged_copy)


@pytest.mark.parametrize("forged", [None, "dev", "ino", "size", "mtime_ns", "ctime_ns", "sha256", "path"])
def test_a_stamp_vouches_only_for_the_exact_file_state_it_recorded(aged_copy, private_cache, forged):
    """A stamp is edited to describe the corrupted file exactly, except for one field. With every
    field matching (``forged=None``, the control) the stamp is trusted and the corruption passes
    unseen: that is what a stamp is for, and shows the test can tell trusted from untrusted. One
    field from another file state (another size, inode, device, mtime, ctime, checksum or path)
    and the file is hashed again and refused."""
    vectors = os.path.join(aged_copy, "vectors.npy")
    verify_artifact(aged_copy)
    stamp = stamp_path(stamp_dir(), vectors)
    flip_byte_keeping_mtime(vectors, os.path.getsize(vectors) - 7)
    with open(stamp, encoding="utf-8") as handle:
        record = json.load(handle)
    now = os.stat(vectors)
    record.update(dev=now.st_dev, ino=now.st_ino, size=now.st_size, mtime_ns=now.st_mtime_ns, ctime_ns=now.st_ctime_ns)
    if forged == "sha256":
        record["sha256"] = "0" * 64
    elif forged == "path":
        record["path"] += ".other"
    elif forged:
        record[forged] += 1
    with open(stamp, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    if forged is None:
        assert verify_artifact(aged_copy)["vocab_size"] == 300
    else:
        with pytest.raises(ArtifactError, match=re.escape(vectors) + " fails its SHA-256 check"):
            verify_artifact(aged_copy)


def test_a_file_replaced_by_another_with_the_same_size_and_mtime_is_refused(aged_copy, private_cache):
    """A stamp from another inode is not trusted: a damaged copy renamed over the file (as a sync
    tool or an editor does), with the old mtime put back."""
    vectors = os.path.join(aged_copy, "vectors.npy")
    verify_artifact(aged_copy)
    before = os.stat(vectors)
    replacement = os.path.join(aged_copy, ".vectors.replacement")
    shutil.copyfile(vectors, replacement)
    flip_byte_keeping_mtime(replacement, before.st_size // 3)
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, vectors)
    assert os.stat(vectors).st_ino != before.st_ino and os.stat(vectors).st_mtime_ns == before.st_mtime_ns
    with pytest.raises(ArtifactError, match=re.escape(vectors) + " fails its SHA-256 check"):
        verify_artifact(aged_copy)


def test_a_passing_aged_file_is_stamped_and_a_young_one_is_not(aged_copy, fresh_copy, private_cache):
    """Every file a check passed is stamped once it is older than STAMP_MIN_AGE_NS (the control test
    above shows the stamp is then trusted); a file changed more recently is checked but never
    stamped, so a write racing with the check cannot hide behind a stamp."""
    verify_artifact(aged_copy, needs=EVERYTHING)
    stamped = sorted(os.listdir(stamp_dir()))
    assert len(stamped) == 5  # vocab, vectors, index, two neighbour files
    verify_artifact(fresh_copy, needs=EVERYTHING)  # copied within the last second: checked, not stamped
    assert sorted(os.listdir(stamp_dir())) == stamped
    for name in ("vocab.txt", "vectors.npy", "index.ann", IDS_FILE, DISTANCES_FILE):
        assert os.path.exists(stamp_path(stamp_dir(), os.path.join(aged_copy, name)))


@pytest.mark.parametrize("name, mechanism, nn", [("vectors.npy", "madlib", "exact"), ("vocab.txt", "madlib", "exact"),
                                                 ("index.ann", "madlib", "annoy"), (IDS_FILE, "tem", "exact"),
                                                 (DISTANCES_FILE, "tem", "exact")])
def test_a_truncated_file_is_refused_by_its_size(fresh_copy, private_cache, name, mechanism, nn):
    path = os.path.join(fresh_copy, name)
    size = os.path.getsize(path)
    os.truncate(path, size - 100)
    with pytest.raises(ArtifactError, match=re.escape(f"{path} has {size - 100} bytes but the manifest records {size}")):
        verify_artifact(fresh_copy, needs=artifact_needs(mechanism, nn))


def test_only_the_files_the_run_uses_are_checked(fresh_copy, private_cache):
    """Madlib with exact search never opens the Annoy index or the neighbour table: damage there does
    not stop it, and stops the runs that use them."""
    for name in ("index.ann", IDS_FILE):
        os.truncate(os.path.join(fresh_copy, name), 10)
    assert verify_artifact(fresh_copy, needs=artifact_needs("madlib", "exact"))["vocab_size"] == 300
    with pytest.raises(ArtifactError, match="index.ann has 10 bytes"):
        verify_artifact(fresh_copy, needs=artifact_needs("madlib", "annoy"))
    with pytest.raises(ArtifactError, match=f"{IDS_FILE} has 10 bytes"):
        verify_artifact(fresh_copy, needs=artifact_needs("tem"))


def test_missing_unreadable_or_unknown_manifest_is_refused(fresh_copy, tmp_path, private_cache):
    manifest_path = os.path.join(fresh_copy, MANIFEST)
    edit_manifest(fresh_copy, lambda m: m.update(format_version=99))
    with pytest.raises(ArtifactError, match=re.escape(manifest_path) + " has format version 99; this textdp reads version 1 or 2"):
        verify_artifact(fresh_copy)
    with open(manifest_path, "w", encoding="utf-8") as handle:
        handle.write('{"kind": "textdp-vocab')
    with pytest.raises(ArtifactError, match=re.escape(manifest_path) + " is not valid JSON"):
        verify_artifact(fresh_copy)
    os.remove(manifest_path)
    with pytest.raises(ArtifactError, match=re.escape(f"{fresh_copy} is not a textdp artifact: {MANIFEST} is missing")):
        verify_artifact(fresh_copy)
    with pytest.raises(ArtifactError, match="is not a directory"):
        verify_artifact(str(tmp_path / "nowhere"))


def test_a_file_the_manifest_does_not_list_or_a_lying_shape_is_refused(fresh_copy, private_cache):
    edit_manifest(fresh_copy, lambda m: m["files"].pop("vectors.npy"))
    with pytest.raises(ArtifactError, match=f"{re.escape(fresh_copy)}/{MANIFEST} lists no size and checksum for vectors.npy"):
        verify_artifact(fresh_copy)
    edit_manifest(fresh_copy, lambda m: m.update(vectors="../vectors.npy"))
    with pytest.raises(ArtifactError, match="names an invalid file '../vectors.npy'"):
        verify_artifact(fresh_copy)


def test_a_manifest_whose_shapes_disagree_with_the_arrays_is_refused(fresh_copy, private_cache):
    """Sizes and checksums match (the manifest was edited, not the files): the .npy headers catch it."""
    edit_manifest(fresh_copy, lambda m: m.update(vocab_size=301))
    with pytest.raises(ArtifactError, match=r"vectors.npy: expected a row-major float32 array of shape \(301, 50\), "
                                            r"found float32 \(300, 50\)"):
        verify_artifact(fresh_copy)
    edit_manifest(fresh_copy, lambda m: m.update(vocab_size=300) or m["neighbours"].update(k=9))
    with pytest.raises(ArtifactError, match=rf"{IDS_FILE}: expected a row-major int32 array of shape \(300, 9\)"):
        verify_artifact(fresh_copy, needs=artifact_needs("tem"))


def test_tem_without_a_neighbour_table_is_told_to_run_textdp_neighbours(small_artifact_dir, fresh_copy, private_cache):
    command = f"`textdp neighbours --artifact {small_artifact_dir}`"
    with pytest.raises(ArtifactError, match="needs a neighbour table and the artifact .* has none; run " + re.escape(command)):
        verify_artifact(small_artifact_dir, needs=artifact_needs("tem"))
    edit_manifest(fresh_copy, lambda m: m.pop("annoy"))
    with pytest.raises(ArtifactError, match="--nn annoy needs an Annoy index and the artifact .* has none"):
        verify_artifact(fresh_copy, needs=artifact_needs("madlib", "annoy"))


def test_needs_of_each_mechanism():
    assert artifact_needs() == ("vocab", "vectors")
    assert artifact_needs("madlib", "annoy") == ("vocab", "vectors", "annoy")
    assert artifact_needs("tem") == ("vocab", "vectors", "neighbours")
    assert set(EVERYTHING) == set(ARTIFACT_PARTS)
    with pytest.raises(ValueError, match="unknown mechanism"):
        artifact_needs("laplace")
    with pytest.raises(ValueError, match="unknown artifact part"):
        verify_artifact(None, needs=("vectors", "index"))


def test_one_manifest_reader_for_the_default_a_directory_and_gcs(default_artifact_dir, small_artifact_dir, gcs_bucket):
    assert read_manifest(None) == read_manifest(default_artifact_dir)
    default = read_manifest(None)
    assert default["vocab_size"] == 400000 - default["dropped_entries"]["count"]  # GloVe 6B minus what no text can hold
    assert verify_artifact(None) == read_manifest(None)
    url = gcs.upload_artifact(small_artifact_dir, f"gs://{gcs_bucket}/artifacts/glove5k/")
    assert read_manifest(url) == read_manifest(small_artifact_dir) == read_manifest(url.rstrip("/"))


# --- gs:// artifacts ----------------------------------------------------------------------------


@pytest.fixture
def uploaded(tiny_with_table, gcs_bucket, private_cache):
    return gcs.upload_artifact(tiny_with_table, f"gs://{gcs_bucket}/artifacts/tiny")


def assert_nothing_downloaded(gcs_emulator, url, cache):
    bucket, prefix = gcs.parse_gcs_url(url)
    for name in ("vocab.txt", "vectors.npy", "index.ann", IDS_FILE, DISTANCES_FILE):
        assert gcs_emulator.media_requests(bucket, f"{prefix}/{name}") == 0, name
    assert not os.path.exists(cache / "remote"), "the check fetches nothing into the cache"


def test_gcs_artifact_checked_from_object_metadata_alone(uploaded, tiny_with_table, gcs_emulator, private_cache):
    assert verify_artifact(uploaded, needs=EVERYTHING) == read_manifest(tiny_with_table)
    assert_nothing_downloaded(gcs_emulator, uploaded, private_cache)


def test_gcs_artifact_with_a_missing_object_is_refused_without_downloading(uploaded, gcs_emulator, private_cache):
    bucket_name, prefix = gcs.parse_gcs_url(uploaded)
    gcs_emulator.client().bucket(bucket_name).blob(f"{prefix}/index.ann").delete()
    assert verify_artifact(uploaded, needs=artifact_needs("madlib", "exact"))["vocab_size"] == 300  # not needed
    with pytest.raises(ArtifactError, match=re.escape(f"{uploaded}/index.ann is missing")):
        verify_artifact(uploaded, needs=artifact_needs("madlib", "annoy"))
    assert_nothing_downloaded(gcs_emulator, uploaded, private_cache)


def test_gcs_artifact_with_a_wrong_size_or_foreign_object_is_refused_without_downloading(
        uploaded, tiny_with_table, gcs_emulator, private_cache):
    bucket_name, prefix = gcs.parse_gcs_url(uploaded)
    bucket = gcs_emulator.client().bucket(bucket_name)
    with open(os.path.join(tiny_with_table, "vectors.npy"), "rb") as handle:
        vectors = handle.read()
    bucket.blob(f"{prefix}/vectors.npy").upload_from_string(vectors[:-64])
    with pytest.raises(ArtifactError, match=re.escape(f"{uploaded}/vectors.npy has {len(vectors) - 64} bytes but "
                                                      f"{MANIFEST} records {len(vectors)}")):
        verify_artifact(uploaded)
    foreign = bucket.blob(f"{prefix}/vectors.npy")
    foreign.metadata = {gcs.SHA256_METADATA_KEY: "ab" * 32}  # the same size, uploaded for another manifest
    foreign.upload_from_string(vectors[:-1] + b"x")
    with pytest.raises(ArtifactError, match=re.escape(f"{uploaded}/vectors.npy was uploaded with SHA-256 abababababab")):
        verify_artifact(uploaded)
    assert_nothing_downloaded(gcs_emulator, uploaded, private_cache)


def test_gcs_artifact_without_or_with_an_unknown_manifest_is_refused(uploaded, gcs_bucket, gcs_emulator, private_cache):
    with pytest.raises(ArtifactError, match="no textdp artifact there"):
        verify_artifact(f"gs://{gcs_bucket}/artifacts/nothing-here")
    bucket_name, prefix = gcs.parse_gcs_url(uploaded)
    blob = gcs_emulator.client().bucket(bucket_name).blob(f"{prefix}/{MANIFEST}")
    manifest = json.loads(blob.download_as_bytes())
    blob.upload_from_string(json.dumps(dict(manifest, format_version=store.FORMAT_VERSION + 1)))
    with pytest.raises(ArtifactError, match=re.escape(f"{uploaded}/{MANIFEST} has format version {store.FORMAT_VERSION + 1}")):
        verify_artifact(uploaded)
    blob.upload_from_string(json.dumps(dict(manifest, format_version=1)))  # its vocabulary is not read before the run
    with pytest.raises(ArtifactError, match=r"built by an older textdp \(format version 1\).*rebuild it"):
        verify_artifact(uploaded)
    blob.upload_from_string(json.dumps({key: value for key, value in manifest.items() if key != "neighbours"}))
    with pytest.raises(ArtifactError, match=re.escape(f"run `textdp neighbours --artifact {uploaded}` first")):
        verify_artifact(uploaded, needs=artifact_needs("tem"))
    assert_nothing_downloaded(gcs_emulator, uploaded, private_cache)


# --- layers -------------------------------------------------------------------------------------


def test_artifact_layers_import_only_downwards():
    """verification <- store <- gcs <- locate: no module imports one above it, not even inside a
    function (the old artifact/remote pair imported each other)."""
    import ast

    layers = ["textdp.artifact.verification", "textdp.artifact.store", "textdp.artifact.gcs", "textdp.artifact.locate"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for level, module in enumerate(layers):
        with open(os.path.join(root, *module.split(".")) + ".py", encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        assert not imported & set(layers[level + 1:]), (module, imported & set(layers[level + 1:]))
        assert not imported & {"textdp.remote", "apache_beam"}, module  # (textdp.artifact is now the wing itself)
