"""gs:// artifacts against a real local Cloud Storage server (gcp-storage-emulator, no mocks).

Covers: upload + fetch round trip, build-index straight to gs://, never overwriting, a remote
update landing in a new cache directory, a corrupted object refused by its checksum, interrupted
downloads (Ctrl-C and a killed process) leaving no half file in the cache, retries with backoff
while the server is down, and two processes fetching at once downloading once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from tests.gcs_emulator import GcsEmulator, gcs_bucket, gcs_emulator  # noqa: F401 (pytest fixtures)
from textdp.artifact import gcs
from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource
from textdp.artifact.locate import open_artifact, read_manifest
from textdp.artifact.store import MANIFEST, VECTORS_FILE, add_files, build_artifact
from textdp.errors import ArtifactError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK_RETRY = gcs.RetryPolicy(attempts=3, initial_delay=0.05, max_delay=0.2)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private TEXTDP_CACHE_DIR for one test (child processes inherit it)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(path))
    return path


@pytest.fixture
def uploaded(small_artifact_dir, gcs_bucket):
    """The 5,000-word test artifact uploaded to a fresh bucket; returns its gs:// URL."""
    url = f"gs://{gcs_bucket}/artifacts/glove5k"
    gcs.upload_artifact(small_artifact_dir, url)
    return url


def remote_entries(cache_path):
    root = cache_path / "remote"
    return sorted(os.listdir(root)) if root.exists() else []


def messages():
    collected = []
    return collected, collected.append


def test_round_trip_fetches_once_and_loads_identical_artifact(small_artifact_dir, uploaded, cache, gcs_emulator):
    bucket, prefix = gcs.parse_gcs_url(uploaded)
    names = {blob.name for blob in gcs_emulator.client().list_blobs(bucket, prefix=prefix + "/")}
    assert names == {f"{prefix}/{name}" for name in ("manifest.json", "vocab.txt", "vectors.npy", "index.ann")}

    log, say = messages()
    local = gcs.fetch_artifact(uploaded, progress=say)
    assert local.startswith(str(cache / "remote"))
    assert any(m.startswith("downloading vectors.npy") for m in log)
    original, fetched = open_artifact(small_artifact_dir), open_artifact(local)
    assert fetched.words == original.words
    np.testing.assert_array_equal(np.asarray(fetched.vectors), np.asarray(original.vectors))
    assert fetched.annoy_index.get_nns_by_item(7, 5) == original.annoy_index.get_nns_by_item(7, 5)
    assert all(oct(os.stat(os.path.join(local, name)).st_mode & 0o777) == "0o444" for name in os.listdir(local))

    log2, say2 = messages()
    assert gcs.fetch_artifact(uploaded, progress=say2) == local
    assert not any("downloading" in m for m in log2), "a verified cached copy must be reused"
    assert open_artifact(uploaded).path == local  # --artifact gs://... goes through the same cache
    assert [e for e in remote_entries(cache) if not e.endswith(".lock")] == [os.path.basename(local)]


def test_build_index_writes_straight_to_gcs(gcs_bucket, cache, capsys):
    from pipelines import build_index

    url = f"gs://{gcs_bucket}/built/glove1k"
    assert build_index.run(["--output", url, "--vocab-size", "1000", "--trees", "2"]) == 0
    assert url in capsys.readouterr().out
    log, say = messages()
    local = gcs.fetch_artifact(url, progress=say)
    assert not any("downloading" in m for m in log), "the machine that built it keeps it as its cached copy"
    artifact = open_artifact(local)
    assert artifact.vocab_size == 1000 and artifact.manifest["annoy"]["trees"] == 2
    assert build_index.run(["--output", url, "--vocab-size", "1000", "--trees", "2"]) == 2  # refused: never overwritten


def test_upload_never_overwrites_different_content(small_artifact_dir, uploaded, tmp_path):
    gcs.upload_artifact(small_artifact_dir, uploaded)  # same bytes again: a no-op, not an error
    other = build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), str(tmp_path / "other"), vocab_size=300,
                           trees=1, seed=3)
    with pytest.raises(ArtifactError, match="already exists with different content"):
        gcs.upload_artifact(other, uploaded)


def test_remote_update_gets_a_new_cache_dir_and_leaves_the_mapped_one(small_artifact_dir, uploaded, cache, tmp_path):
    first = gcs.fetch_artifact(uploaded)
    mapped = open_artifact(first)  # memory-maps vectors.npy in this process
    first_manifest = open(os.path.join(first, MANIFEST), "rb").read()

    # Add a table to a working copy (hard links to the cache; add_files never writes an existing file).
    work = gcs.checkout_artifact(uploaded, str(tmp_path / "work"))
    extra = tmp_path / "extra.bin"
    extra.write_bytes(np.arange(100, dtype=np.int64).tobytes())
    assert os.stat(os.path.join(work, VECTORS_FILE)).st_ino == os.stat(os.path.join(first, VECTORS_FILE)).st_ino
    add_files(work, {"extra.bin": str(extra)}, "extra", {"rows": 100})
    log, say = messages()
    gcs.upload_artifact(work, uploaded, progress=say)
    assert "vectors.npy already in the bucket, unchanged" in log and any(m.startswith("uploading extra.bin") for m in log)

    second = gcs.fetch_artifact(uploaded)
    assert second != first
    assert open(os.path.join(first, MANIFEST), "rb").read() == first_manifest, "old copy untouched"
    assert read_manifest(second)["extra"] == {"rows": 100}
    assert open_artifact(second).file_path("extra.bin")
    assert float(mapped.vectors[3, 0]) == float(open_artifact(second).vectors[3, 0])


def test_corrupted_object_is_refused_by_checksum(uploaded, cache, gcs_emulator):
    bucket, prefix = gcs.parse_gcs_url(uploaded)
    blob = gcs_emulator.client().bucket(bucket).blob(f"{prefix}/{VECTORS_FILE}")
    data = bytearray(blob.download_as_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit, same size: only the SHA-256 can tell
    blob.upload_from_string(bytes(data))

    with pytest.raises(ArtifactError, match=r"vectors\.npy fails its SHA-256 check"):
        gcs.fetch_artifact(uploaded, retry=QUICK_RETRY)
    assert [e for e in remote_entries(cache) if not e.endswith(".lock")] == [], "nothing half-made left behind"

    blob.upload_from_string(bytes(data[:-10]))  # truncated: refused from its size, before downloading
    with pytest.raises(ArtifactError, match="bytes but manifest.json records"):
        gcs.fetch_artifact(uploaded, retry=QUICK_RETRY)


def test_missing_artifact_is_a_clear_error(gcs_bucket, cache):
    with pytest.raises(ArtifactError, match="no textdp artifact there"):
        gcs.fetch_artifact(f"gs://{gcs_bucket}/nothing-here", retry=QUICK_RETRY)
    with pytest.raises(ArtifactError, match="not a gs:// URL"):
        gcs.fetch_artifact("/local/path")


def test_ctrl_c_during_download_leaves_no_half_file(uploaded, cache):
    def interrupt_mid_vectors(message):
        if message.startswith("vectors.npy: ") and not message.startswith("vectors.npy: 65,536 "):
            raise KeyboardInterrupt  # the second chunk of vectors.npy has been written to the .part file

    with pytest.raises(KeyboardInterrupt):
        gcs.fetch_artifact(uploaded, progress=interrupt_mid_vectors, chunk_bytes=65536)
    assert [e for e in remote_entries(cache) if not e.endswith(".lock")] == []
    local = gcs.fetch_artifact(uploaded, chunk_bytes=65536)
    assert open_artifact(local).vocab_size == 5000


CHILD_FETCH = textwrap.dedent("""
    import json, os, sys, time
    from textdp.artifact import gcs
    url, mode = sys.argv[1], sys.argv[2]
    log = []
    def say(message):
        log.append(message)
        if mode == "hang" and message.startswith("vectors.npy: 196,608 "):
            print("HALFWAY", flush=True)
            time.sleep(600)  # the test kills us here, a .part file half written
    if mode.startswith("wait:"):
        while not os.path.exists(mode[5:]):
            time.sleep(0.005)
    path = gcs.fetch_artifact(url, progress=say, chunk_bytes=65536)
    print(json.dumps({"path": path, "log": log}), flush=True)
""")


def run_child(url, mode):
    return subprocess.Popen([sys.executable, "-c", CHILD_FETCH, url, mode], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_killed_download_leaves_no_artifact_and_next_fetch_cleans_up(small_artifact_dir, uploaded, cache):
    child = run_child(uploaded, "hang")
    try:
        assert child.stdout.readline().strip() == "HALFWAY", child.stderr.read() if child.poll() is not None else ""
        staging = [e for e in remote_entries(cache) if ".staging-" in e]
        assert len(staging) == 1
        part = cache / "remote" / staging[0] / "vectors.npy.part"
        assert 0 < part.stat().st_size < read_manifest(small_artifact_dir)["files"][VECTORS_FILE]["bytes"]
        child.send_signal(signal.SIGKILL)  # a machine dying mid-download: no cleanup code runs
    finally:
        child.kill()
        child.wait()
    final_dirs = [e for e in remote_entries(cache) if ".staging-" not in e and not e.endswith(".lock")]
    assert final_dirs == [], "a killed download must not leave an artifact directory"

    log, say = messages()
    local = gcs.fetch_artifact(uploaded, progress=say)
    assert any(m.startswith("removing an interrupted download") for m in log)
    assert [e for e in remote_entries(cache) if not e.endswith(".lock")] == [os.path.basename(local)]
    assert open_artifact(local).file_path("vectors.npy")  # verifies the SHA-256


def test_two_processes_fetching_at_once_download_once(uploaded, cache, tmp_path, gcs_emulator):
    go = tmp_path / "go"
    children = [run_child(uploaded, f"wait:{go}") for _ in range(2)]
    time.sleep(1.5)  # both imported and polling for the start signal
    go.write_text("go")
    results = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["path"] == results[1]["path"]
    downloads = [m for r in results for m in r["log"] if m.startswith("downloading vectors.npy")]
    assert len(downloads) == 1, [r["log"][:3] for r in results]
    bucket, prefix = gcs.parse_gcs_url(uploaded)
    one_download = -(-open_artifact(results[0]["path"]).manifest["files"][VECTORS_FILE]["bytes"] // 65536)  # chunks
    assert gcs_emulator.media_requests(bucket, f"{prefix}/{VECTORS_FILE}") == one_download, "the server's own log"
    assert open_artifact(results[0]["path"]).vocab_size == 5000


def test_retries_with_backoff_while_the_server_is_down(small_artifact_dir, cache, tmp_path, monkeypatch,
                                                       gcs_emulator):
    """A second emulator that is stopped, then started again while fetch_artifact backs off."""
    flaky = GcsEmulator(str(tmp_path / "flaky-data")).start()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", flaky.url)
        bucket = flaky.new_bucket()
        url = f"gs://{bucket}/a"
        gcs.upload_artifact(small_artifact_dir, url)
        flaky.stop()

        log, result = [], {}
        retried = threading.Event()

        def say(message):
            log.append(message)
            if "retry" in message:
                retried.set()

        def fetch():
            try:
                result["path"] = gcs.fetch_artifact(
                    url, progress=say, retry=gcs.RetryPolicy(attempts=8, initial_delay=0.5, max_delay=4))
            except BaseException as exc:  # reported below
                result["error"] = exc

        worker = threading.Thread(target=fetch)
        worker.start()
        assert retried.wait(30), log
        flaky.start()
        worker.join(60)
        assert "error" not in result, result.get("error")
        assert open_artifact(result["path"]).vocab_size == 5000
        assert any("ConnectionError, retry 1/7" in m for m in log), log

        flaky.stop()
        with pytest.raises(ArtifactError, match="failed after 3 attempts"):
            gcs.fetch_artifact(url, retry=QUICK_RETRY)
    finally:
        flaky.stop()
