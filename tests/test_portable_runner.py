"""``textdp privatize`` submitted through Beam's portability layer, as on Flink or Spark.

``PortableRunner`` turns the pipeline into a Runner API proto and submits it over gRPC to a job
service; FlinkRunner does the same against Flink's job server. Here the job service is Beam's
own local one (pure Python, nothing downloaded), started as a separate process, and the SDK
workers use the LOOPBACK environment (they run inside the submitting process). The in-process
``--job_endpoint=embed`` variant is checked too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines import privatize
from tests.run_outputs import read_lines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_TXT = os.path.join(REPO, "examples", "reviews.txt")
EXAMPLE_JSONL = os.path.join(REPO, "examples", "reviews.jsonl")


@pytest.fixture(scope="module")
def local_job_service(tmp_path_factory):
    """Beam's local portable job service in a subprocess; yields its ``localhost:PORT`` endpoint."""
    workdir = tmp_path_factory.mktemp("job-service")
    port_file = workdir / "port"
    log = open(workdir / "job-service.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
         "--port_file", str(port_file), "--staging_dir", str(workdir / "staging")],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert process.poll() is None, f"job service exited: {(workdir / 'job-service.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "job service did not start in 60 s"
            time.sleep(0.1)
        yield f"localhost:{port_file.read_text().strip()}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()




def test_privatize_on_the_local_portable_job_service(local_job_service, small_artifact_dir, tmp_path, capsys):
    """epsilon = 1e6 with ``keep``: noise far below any word distance, so the output must equal the input."""
    output = str(tmp_path / "reviews")
    code = privatize.run([f"--input={EXAMPLE_TXT}", f"--output={output}", f"--artifact={small_artifact_dir}",
                          "--epsilon=1e6", "--oov-policy=keep", "--runner=PortableRunner",
                          f"--job_endpoint={local_job_service}", "--environment_type=LOOPBACK"])
    assert code == 0
    with open(EXAMPLE_TXT, encoding="utf-8") as handle:
        original = handle.read().splitlines()
    assert sorted(read_lines(f"{output}-*-of-*.txt")) == sorted(original)
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    assert summary["records"]["in"] == summary["records"]["out"] == len(original)
    assert "summary:" in capsys.readouterr().out


def test_privatize_jsonl_with_the_embedded_job_service(small_artifact_dir, tmp_path):
    """A real epsilon through ``--job_endpoint=embed``: every record comes back, its other fields intact."""
    output = str(tmp_path / "reviews")
    code = privatize.run([f"--input={EXAMPLE_JSONL}", f"--output={output}", f"--artifact={small_artifact_dir}",
                          "--epsilon=15", "--runner=PortableRunner", "--job_endpoint=embed",
                          "--environment_type=LOOPBACK"])
    assert code == 0
    with open(EXAMPLE_JSONL, encoding="utf-8") as handle:
        original = [json.loads(line) for line in handle if line.strip()]
    released = [json.loads(line) for line in read_lines(f"{output}-*-of-*.jsonl")]
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    assert summary["records"]["in"] == summary["records"]["out"] == len(released) == len(original)
    by_id = {record["id"]: record for record in original}
    for record in released:
        source = by_id[record["id"]]
        assert record["rating"] == source["rating"]
        assert isinstance(record["text"], str) and record["text"]
