"""A real local Cloud Storage server for tests: the gcp-storage-emulator package, not a mock.

``gcs_emulator`` (session scope) starts ``python -m gcp_storage_emulator`` in a subprocess on a free
localhost port and sets ``STORAGE_EMULATOR_HOST``, which google-cloud-storage (and so Beam's
gcsio, which is built on it) obeys: every client created afterwards talks to the emulator with
anonymous credentials. Test modules import the fixtures they use::

    from tests.gcs_emulator import gcs_emulator, gcs_bucket  # noqa: F401 (pytest fixtures)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

STARTUP_TIMEOUT_S = 30


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


class GcsEmulator:
    """One emulator process; ``stop()`` and ``start()`` again keep the port and the stored objects."""

    def __init__(self, data_dir: str, port: int = 0):
        self.data_dir = data_dir
        self.port = port or _free_port()
        self.url = f"http://localhost:{self.port}"
        self.log_path = os.path.join(os.path.dirname(os.path.abspath(data_dir)), f"emulator-{self.port}.log")
        self.process = None

    def start(self) -> "GcsEmulator":
        os.makedirs(self.data_dir, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "--data-dir", self.data_dir, "start",
             "--host", "localhost", "--port", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"gcp-storage-emulator exited with {self.process.returncode} on port {self.port}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b?project=test", timeout=2):
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"gcp-storage-emulator did not answer on {self.url} in {STARTUP_TIMEOUT_S}s") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    def media_requests(self, bucket: str, object_name: str) -> int:
        """How many requests for an object's content (whole or a range) the server has logged."""
        quoted = urllib.parse.quote(object_name, safe="")
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return sum(1 for line in handle
                       if "GET " in line and f"/b/{bucket}/o/{quoted}?" in line and "alt=media" in line)

    def client(self):
        from google.cloud import storage

        return storage.Client()

    def new_bucket(self, prefix: str = "textdp-test") -> str:
        """Create a bucket with a unique name and return the name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(name)
        return name


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    """The running emulator, with STORAGE_EMULATOR_HOST pointing at it for this test session."""
    emulator = GcsEmulator(str(tmp_path_factory.mktemp("gcs") / "data")).start()
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    try:
        yield emulator
    finally:
        emulator.stop()
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def gcs_bucket(gcs_emulator):
    """A fresh, empty bucket in the emulator (its name, without gs://)."""
    return gcs_emulator.new_bucket()


@pytest.fixture(scope="session")
def beam_gcs_anonymous():
    """Tell Beam's gcsio up front that this process has no Google credentials.

    Beam looks for Application Default Credentials once per process, retrying with backoff for
    about 20 s before it connects anonymously, which is the right outcome against the emulator.
    This sets Beam's per-process answer to "anonymous" directly (Beam's internal cache; if a Beam
    version moves it, the tests only get slower, not different).
    """
    try:
        from apache_beam.internal.gcp import auth

        holder = auth._Credentials
        with holder._credentials_lock:
            holder._credentials = None
            holder._credentials_init = True
    except (ImportError, AttributeError):
        pass
