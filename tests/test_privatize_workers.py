"""Two worker processes on a real corpus: one artifact load per process, independent random streams."""

import glob
import json
import os

import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.privatize import build_pipeline
from textdp.allocator import MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_worker_processes_load_once_and_draw_independent_noise(tmp_path, imdb_rows, small_artifact_dir):
    """400 IMDb reviews in two files, ``--direct_running_mode=multi_processing --direct_num_workers=2``.

    The diagnostics output has one line per bundle with the worker's pid, how many times that
    process loaded the artifact holder, the holder's identity and a SHA-256 fingerprint of the first
    noise draws of the DoFn instance's generator (made in ``setup()`` from OS entropy). It shows:
    * two distinct worker processes did the perturbation;
    * each process loaded the artifact exactly once (every line of a pid says 1 load, one holder);
    * no two generators start with the same draws: a generator made in ``__init__`` and pickled to
      the workers (the bug this guards against) would give every process the same fingerprint.
      Distinct OS-entropy streams share a first draw with probability ~0, so there is no false
      failure rate to speak of.
    """
    sources = []
    for part in range(2):
        path = tmp_path / f"reviews-{part}.txt"
        path.write_text("".join(row["text"].replace("\n", " ") + "\n"
                                for row in imdb_rows[part * 200:(part + 1) * 200]), encoding="utf-8")
        sources.append(path)
    output, diagnostics = str(tmp_path / "out" / "reviews"), str(tmp_path / "out" / "diagnostics")
    options = PipelineOptions([
        f"--input={tmp_path}/reviews-*.txt", f"--output={output}", "--epsilon=10",
        f"--artifact={small_artifact_dir}", f"--diagnostics-output={diagnostics}", "--batch-tokens=2000",
        "--runner=FnApiRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    result = build_pipeline(options).run()
    result.wait_until_finish()

    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    assert summary["records"] == {"in": 400, "out": 400, "failed": 0, "failed_by_reason": {}, "reconciled": True}

    lines = [json.loads(line) for path in glob.glob(f"{diagnostics}-*.jsonl")
             for line in open(path, encoding="utf-8") if line.strip()]
    pids = {line["pid"] for line in lines}
    assert len(pids) == 2, f"expected two worker processes, saw {len(pids)}"
    for pid in pids:
        mine = [line for line in lines if line["pid"] == pid]
        assert {line["process_loads"] for line in mine} == {1}
        assert {line["holder_id"] for line in mine} == {mine[0]["holder_id"]}
    # no thread variable was set: each of the two processes gave its exact search cores / 2 threads
    # itself, over single-threaded BLAS calls
    assert {line["search_threads"] for line in lines} == {max(1, (os.cpu_count() or 1) // 2)}
    assert {line["blas_threads"] for line in lines} == {1}
    # and each kept its freed memory for the next batch (textdp/allocator.py; glibc on this machine)
    assert all(line["allocator"]["allocator"].startswith("glibc ") for line in lines)
    assert {(line["allocator"]["mmap_threshold"], line["allocator"]["trim_threshold"]) for line in lines} == {
        (MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES)}
    streams = {line["dofn_instance"]: line["noise_stream_sha256"] for line in lines}
    assert len(set(streams.values())) == len(streams) >= 2
    assert not any(line["seeded"] for line in lines)

    loads = result.metrics().query(MetricsFilter().with_namespace("textdp").with_name("artifact_loads"))
    assert sum(c.committed for c in loads["counters"]) == len(pids)
