"""``textdp privatize`` and ``calibrate`` with input, output and artifact on gs:// (a real local emulator).

Beam's gcsio is built on google-cloud-storage, so it follows STORAGE_EMULATOR_HOST like our own
artifact fetch does: the pipeline reads and writes the emulator's buckets through Beam's own
file system, and the workers fetch the artifact into the local cache.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.privatize import build_pipeline
from tests.gcs_emulator import beam_gcs_anonymous, gcs_bucket, gcs_emulator  # noqa: F401 (pytest fixtures)
from textdp.artifact import gcs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_TXT = os.path.join(REPO, "examples", "reviews.txt")


@pytest.fixture
def corpus_on_gcs(gcs_emulator, gcs_bucket, small_artifact_dir, tmp_path, monkeypatch, beam_gcs_anonymous):
    """The example corpus and the 5,000-word artifact uploaded to a fresh bucket; a private cache."""
    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(tmp_path / "cache"))
    bucket = gcs_emulator.client().bucket(gcs_bucket)
    bucket.blob("corpus/2026-11-21/reviews-00000.txt").upload_from_filename(EXAMPLE_TXT)
    artifact_url = gcs.upload_artifact(small_artifact_dir, f"gs://{gcs_bucket}/artifacts/glove5k")
    return {"bucket": bucket, "name": gcs_bucket, "artifact": artifact_url, "cache": tmp_path / "cache"}


def test_privatize_reads_writes_and_fetches_on_gcs(corpus_on_gcs):
    """epsilon = 1e6 with ``keep``: noise far below any word distance, so the output must equal the input.

    That makes the check exact: every byte went gs:// -> Beam -> mechanism -> Beam -> gs://.
    """
    name, bucket = corpus_on_gcs["name"], corpus_on_gcs["bucket"]
    output = f"gs://{name}/privatized/2026-11-21/reviews"
    argv = ["--runner=FnApiRunner", f"--input=gs://{name}/corpus/2026-11-21/*.txt", f"--output={output}",
            f"--artifact={corpus_on_gcs['artifact']}", "--epsilon=1e6", "--oov-policy=keep"]
    build_pipeline(PipelineOptions(argv)).run().wait_until_finish()

    written = sorted(blob.name for blob in bucket.list_blobs(prefix="privatized/2026-11-21/"))
    shards = [n for n in written if n.endswith(".txt") and "-errors-" not in n]
    assert shards and "privatized/2026-11-21/reviews-summary.json" in written
    released = "".join(bucket.blob(n).download_as_text() for n in shards).splitlines()
    with open(EXAMPLE_TXT, encoding="utf-8") as handle:
        original = handle.read().splitlines()
    assert sorted(released) == sorted(original)
    summary = json.loads(bucket.blob("privatized/2026-11-21/reviews-summary.json").download_as_text())
    assert summary["records"]["in"] == len(original) == summary["records"]["out"]
    cached = [e for e in os.listdir(corpus_on_gcs["cache"] / "remote") if not e.endswith(".lock")]
    assert len(cached) == 1 and cached[0].startswith(f"{name}_artifacts_glove5k-"), cached


def test_dataflow_job_graph_is_built_offline_with_dry_run(corpus_on_gcs):
    """DataflowRunner with --dry_run builds the full job request (no submission, no network but the emulator)."""
    name = corpus_on_gcs["name"]
    argv = ["--runner=DataflowRunner", "--dry_run=True", "--project=textdp-test", "--region=europe-west1",
            f"--temp_location=gs://{name}/tmp", f"--input=gs://{name}/corpus/2026-11-21/*.txt",
            f"--output=gs://{name}/privatized/reviews", f"--artifact={corpus_on_gcs['artifact']}",
            "--epsilon=10", "--sdk_container_image=europe-docker.pkg.dev/textdp-test/textdp/textdp:0.1.0"]
    result = build_pipeline(PipelineOptions(argv)).run()
    job = result.job.proto
    assert job.name and job.type.name == "JOB_TYPE_BATCH"
    transforms = result.job.proto_pipeline.components.transforms
    labels = {t.unique_name for t in transforms.values()}
    for label in ("Read", "Privatize", "Write", "WriteErrors", "WriteSummary"):
        assert any(name == label or name.startswith(label + "/") for name in labels), label
    images = {env.payload for env in result.job.proto_pipeline.components.environments.values()}
    assert any(b"textdp/textdp:0.1.0" in payload for payload in images)
    assert not list(corpus_on_gcs["bucket"].list_blobs(prefix="privatized/")), "a dry run writes nothing"


def test_calibrate_reads_the_artifact_and_writes_its_report_on_gcs(corpus_on_gcs):
    """calibrate with --artifact and --output on gs://: the summary lands in the bucket, the artifact in the cache."""
    from pipelines import calibrate

    name, bucket = corpus_on_gcs["name"], corpus_on_gcs["bucket"]
    argv = ["--runner=FnApiRunner", f"--artifact={corpus_on_gcs['artifact']}", "--epsilons=5", "--words=6",
            "--samples=40", "--seed=1", f"--output=gs://{name}/calibration/2026-11-21"]
    calibrate.build_pipeline(PipelineOptions(argv)).run().wait_until_finish()
    written = {blob.name for blob in bucket.list_blobs(prefix="calibration/2026-11-21/")}
    assert "calibration/2026-11-21/summary.json" in written, sorted(written)
    summary = json.loads(bucket.blob("calibration/2026-11-21/summary.json").download_as_text())
    assert summary["artifact"]["vocab_size"] == 5000 and summary["epsilons"] == [5.0]
    assert summary["statistics"]["5"]["n_w"]["mean"] >= 0
    cached = [e for e in os.listdir(corpus_on_gcs["cache"] / "remote") if not e.endswith(".lock")]
    assert len(cached) == 1 and cached[0].startswith(f"{name}_artifacts_glove5k-"), cached


def test_neighbours_job_for_dataflow_is_built_offline_with_dry_run(corpus_on_gcs, capsys):
    """`textdp neighbours --artifact gs://... --runner DataflowRunner`: the job request is built (workers
    fetch the artifact, the writer uploads), only the manifest is read at submit time, nothing is written."""
    from pipelines import neighbours

    name, url = corpus_on_gcs["name"], corpus_on_gcs["artifact"]
    argv = ["--runner=DataflowRunner", "--dry_run=True", "--project=textdp-test", "--region=europe-west1",
            f"--temp_location=gs://{name}/tmp", f"--artifact={url}", "--k=10",
            "--sdk_container_image=europe-docker.pkg.dev/textdp-test/textdp/textdp:0.1.0"]
    result = neighbours.build_pipeline(PipelineOptions(argv)).run()
    labels = {t.unique_name for t in result.job.proto_pipeline.components.transforms.values()}
    for label in ("NeighbourTable/NearestK", "NeighbourTable/Gather", "NeighbourTable/WriteTable"):
        assert any(name == label or name.startswith(label + "/") for name in labels), label
    assert not os.path.exists(corpus_on_gcs["cache"] / "remote"), "submitting must not download the artifact"
    manifest = json.loads(corpus_on_gcs["bucket"].blob("artifacts/glove5k/manifest.json").download_as_text())
    assert "neighbours" not in manifest
    assert neighbours.run(["--runner=FnApiRunner", f"--artifact=gs://{name}/artifacts/missing", "--k=10"]) == 2  # refused before running
    assert "cannot read" in capsys.readouterr().err


def test_neighbour_table_added_to_a_gcs_artifact_is_used_by_tem(corpus_on_gcs, tmp_path, capsys):
    """`textdp neighbours --artifact gs://...` (workers fetch, the writer uploads), then TEM reads it.

    epsilon = 1e6 with gamma = 5: every other word weighs at most exp(-1e6 * min(d, 5) / 2), so every
    known word comes back unchanged (with Thm. 4.2's gamma, about 3e-5 here, each token would still
    move with probability beta = 0.001 by design, which made this test fail about one run in four);
    the summary shows the table from the bucket was used.
    """
    from pipelines import neighbours

    name, bucket, url = corpus_on_gcs["name"], corpus_on_gcs["bucket"], corpus_on_gcs["artifact"]
    before = gcs.fetch_artifact(url)
    temp_before = set(os.listdir(tempfile.gettempdir()))
    assert neighbours.run(["--runner=FnApiRunner", f"--artifact={url}", "--k=10", "--shard-rows=2500"]) == 0
    assert json.loads(capsys.readouterr().out)["artifact"] == url
    uploaded = bucket.blob(gcs.parse_gcs_url(url)[1] + "/manifest.json").download_as_text()
    assert json.loads(uploaded)["neighbours"]["k"] == 10
    assert "neighbours" not in json.loads(open(os.path.join(before, "manifest.json")).read()), "cache untouched"
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("textdp-neighbours-")
                and p not in temp_before], "the writer's working copy is removed"
    assert neighbours.run(["--runner=FnApiRunner", f"--artifact={url}", "--k=10"]) == 2  # refused before running
    assert "already has a neighbour table" in capsys.readouterr().err

    output = f"gs://{name}/privatized-tem/reviews"
    argv = ["--runner=FnApiRunner", f"--input=gs://{name}/corpus/2026-11-21/*.txt", f"--output={output}",
            f"--artifact={url}", "--mechanism=tem", "--epsilon=1e6", "--gamma=5", "--oov-policy=keep"]
    build_pipeline(PipelineOptions(argv)).run().wait_until_finish()
    summary = json.loads(bucket.blob("privatized-tem/reviews-summary.json").download_as_text())
    assert summary["mechanism"]["mechanism"] == "tem" and summary["mechanism"]["neighbour_k"] == 10
    shards = [b.name for b in bucket.list_blobs(prefix="privatized-tem/") if b.name.endswith(".txt")
              and "-errors-" not in b.name]
    released = "".join(bucket.blob(n).download_as_text() for n in shards).splitlines()
    with open(EXAMPLE_TXT, encoding="utf-8") as handle:
        assert sorted(released) == sorted(handle.read().splitlines())
    versions = [e for e in os.listdir(corpus_on_gcs["cache"] / "remote") if not e.endswith(".lock")]
    assert len(versions) == 2, versions  # the table made a new version; the old one was not modified


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_worker_processes_share_one_download_of_a_gcs_artifact(corpus_on_gcs, imdb_rows, gcs_emulator):
    """``--direct_running_mode=multi_processing --direct_num_workers=2`` with ``--artifact gs://``.

    Both worker processes (seen by pid in the diagnostics output) load the artifact, and the
    emulator's own request log shows vectors.npy and index.ann were each sent exactly once: the
    second process found the first one's copy in the machine's cache (or waited on its lock).
    """
    name, bucket = corpus_on_gcs["name"], corpus_on_gcs["bucket"]
    for part in range(2):
        text = "".join(row["text"].replace("\n", " ") + "\n" for row in imdb_rows[part * 150:(part + 1) * 150])
        bucket.blob(f"imdb/reviews-{part}.txt").upload_from_string(text)
    diagnostics = str(corpus_on_gcs["cache"].parent / "diagnostics")
    argv = ["--runner=FnApiRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2",
            f"--input=gs://{name}/imdb/*.txt", f"--output=gs://{name}/imdb-out/reviews",
            f"--artifact={corpus_on_gcs['artifact']}", "--epsilon=10", "--batch-records=16",
            f"--diagnostics-output={diagnostics}"]
    build_pipeline(PipelineOptions(argv)).run().wait_until_finish()

    summary = json.loads(bucket.blob("imdb-out/reviews-summary.json").download_as_text())
    assert summary["records"]["in"] == summary["records"]["out"] == 300
    lines = [json.loads(line) for path in glob.glob(f"{diagnostics}-*.jsonl")
             for line in open(path, encoding="utf-8") if line.strip()]
    assert len({line["pid"] for line in lines}) == 2, "expected two worker processes"
    _, prefix = gcs.parse_gcs_url(corpus_on_gcs["artifact"])
    for name_in_artifact in ("vectors.npy", "index.ann", "vocab.txt"):
        assert gcs_emulator.media_requests(name, f"{prefix}/{name_in_artifact}") == 1, name_in_artifact
