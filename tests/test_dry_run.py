"""Issue 27, item 7: the Dataflow dry run (``--runner DataflowRunner --dry_run=True``, docs/scale.md).

Without credentials it used to retry the credentials and default-bucket lookups for minutes; now it is
refused in one line within seconds, before any worker or artifact is touched (``textdp.artifact.gcs.
preflight_runner``). With credentials it builds and validates the job graph and submits and writes nothing.
Real subprocesses of the ``textdp`` command; the "metadata server that never answers" is a real listening
socket, the credentials a real (self-generated, never valid at Google) service-account key, the bucket the
local Cloud Storage emulator. Nothing is mocked.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from benchmarks.harness import REPO
from pipelines.cli import main as cli_main
from tests.gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (pytest fixtures)

DRY_RUN = ["--runner", "DataflowRunner", "--dry_run=True", "--project", "textdp-test-123", "--region", "us-central1"]
CREDENTIAL_VARIABLES = ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "NO_GCE_CHECK", "GCE_METADATA_HOST",
                        "GCE_METADATA_IP", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG")


@pytest.fixture
def silent_metadata_server():
    """host:port of a server that accepts connections and never answers: the slowest "no metadata server"."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"127.0.0.1:{server.getsockname()[1]}"


def _bare_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}
    env.update(HOME=str(tmp_path / "home"), CLOUDSDK_CONFIG=str(tmp_path / "home" / "gcloud"),
               TEXTDP_CACHE_DIR=str(tmp_path / "cache"), **extra)
    return env


def _privatize(flags, env, tiny_artifact_dir, tmp_path, timeout=120):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", "--input", "examples/reviews.txt",
                           "--output", str(tmp_path / "out" / "reviews"), "--epsilon", "10", "--artifact",
                           tiny_artifact_dir] + flags, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("credentials", ["a key file that does not exist", "none, and a silent metadata server"])
def test_a_dry_run_without_credentials_is_refused_within_seconds(credentials, silent_metadata_server,
                                                                 tiny_artifact_dir, tmp_path):
    extra = {"GCE_METADATA_HOST": silent_metadata_server, "GCE_METADATA_IP": silent_metadata_server}
    if credentials.startswith("a key file"):
        extra["GOOGLE_APPLICATION_CREDENTIALS"] = str(tmp_path / "no-such-key.json")
    started = time.monotonic()
    done = _privatize(DRY_RUN + ["--temp_location", "gs://textdp-bucket/tmp"], _bare_env(tmp_path, **extra),
                      tiny_artifact_dir, tmp_path, timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "textdp privatize: error: --runner DataflowRunner --dry_run needs Google Cloud credentials, and none were "
        "found"), done.stderr
    assert "GOOGLE_APPLICATION_CREDENTIALS" in lines[0] and "gcloud auth application-default login" in lines[0]
    assert elapsed < 30, f"took {elapsed:.0f} s"  # was minutes of retries
    assert not (tmp_path / "out").exists()  # refused before the outputs were even checked


def _service_account_key(path):
    """A well-formed service-account key with a fresh RSA key: google.auth accepts it without any request."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({"type": "service_account", "project_id": "textdp-test-123", "private_key_id": "0" * 40,
                                "private_key": pem, "client_email": "dry-run@textdp-test-123.iam.gserviceaccount.com",
                                "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}))
    return str(path)


def test_a_dry_run_with_credentials_builds_the_graph_and_writes_nothing(gcs_emulator, gcs_bucket, tiny_artifact_dir,
                                                                        tmp_path):
    key = _service_account_key(tmp_path / "key.json")
    env = _bare_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=key, STORAGE_EMULATOR_HOST=gcs_emulator.url,
                    NO_GCE_CHECK="True")
    started = time.monotonic()
    done = _privatize(DRY_RUN + ["--temp_location", f"gs://{gcs_bucket}/tmp"], env, tiny_artifact_dir, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        ("textdp privatize: dry run: DataflowRunner built and validated the job graph; no job was submitted and no "
         "output file was written")]
    assert time.monotonic() - started < 60
    out = tmp_path / "out"
    assert not out.exists() or [name for name in os.listdir(out) if not name.endswith(".lock")] == []
    assert list(gcs_emulator.client().list_blobs(gcs_bucket)) == []  # nothing staged in --temp_location


@pytest.mark.parametrize("flags, message", [
    (["--dry_run=True"], ("--dry_run applies to --runner DataflowRunner only (runner FnApiRunner would ignore it "
                          "and run the job for real); leave it out to run locally")),
    (["--runner", "DataflowRunner", "--dry_run=False"],
     "--dry_run=False is ambiguous: Beam treats any value as a dry run; give --dry_run=True or leave the flag out"),
    (["--runner", "DataflowRunner"], ("--runner DataflowRunner needs --temp_location gs://BUCKET/PATH (textdp does "
                                      "not let Beam look up or create a default bucket)")),
    (["--runner", "DataflowRunner", "--temp_location", "/tmp/local"],
     "--runner DataflowRunner: --temp_location and --staging_location must be gs:// locations"),
])
def test_dry_run_and_dataflow_flags_that_cannot_work_are_refused(flags, message, tiny_artifact_dir, tmp_path, capsys,
                                                                 monkeypatch):
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", _service_account_key(tmp_path / "key.json"))
    code = cli_main(["privatize", "--input", os.path.join(REPO, "examples", "reviews.txt"), "--output",
                     str(tmp_path / "out" / "reviews"), "--epsilon", "10", "--artifact", tiny_artifact_dir] + flags)
    assert code == 2
    assert capsys.readouterr().err == f"textdp privatize: error: {message}\n"
    assert not (tmp_path / "out").exists()
