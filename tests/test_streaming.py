"""``textdp privatize --streaming`` (pipelines/streaming.py, transforms/streaming.py) on local runners.

Runners: the TestStream tests run on Beam's Python BundleBasedDirectRunner in streaming mode
(StandardOptions.streaming=True): a local runner that downloads nothing (FnApiRunner runs no TestStream).
The file-watch test runs the real command on the local FnApiRunner, whose bounded watch
(``--streaming-stop-after``) sees files that a thread writes into the watched directory while the job runs.
No test uses the network: the Pub/Sub path is only built into a graph.

The mechanism's randomness is not tested here (its own tests do that): runs use --oov-policy keep with a
huge epsilon only where a test compares released text, and counts otherwise, so no test is statistical.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream as Events
from apache_beam.transforms.window import TimestampedValue

from transforms.privatize import Privatize
from transforms.streaming import ParseMessages, PrivatizeWindows, pane_scope_statement

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ART = "/tmp/art300"
CONTEXT = dict(input_pattern="test-stream", data_format="jsonl", text_fields=("text",), max_record_bytes=10_000,
               max_failed_fraction=0.1, amplifier_steps=None, warnings=[])


def _msg(position, payload, at):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
    return TimestampedValue(("sub", position, data), at)


def run_stream(tmp_path, stream, window=10, lateness=0, amplifier=None, epsilon=1e6, public=None, keep_failed_text=False):
    """Runs ``stream`` (a TestStream of messages) through ParseMessages + PrivatizeWindows on the
    BundleBasedDirectRunner in streaming mode; returns the output prefix. ``public``: the public summary prefix."""
    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    out = str(tmp_path / "out" / "r")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    shape = "__textdp_shape__" if amplifier else None
    privatize = Privatize(epsilon=epsilon, artifact=ART, text_fields=["text"], oov_policy="keep", keyed=True,
                          shape_field=shape)
    context = dict(CONTEXT, amplifier_steps=amplifier.steps() if amplifier else None)
    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline | stream
             | beam.ParDo(ParseMessages("jsonl", ("text",), 10_000, keep_failed_text))
             | PrivatizeWindows(privatize, out, "jsonl", window, lateness,
                                amplifier=amplifier, keep_failed_text=keep_failed_text,
                                shape_field=shape, context=context, public_prefix=public))
    return out


def summaries(out):
    found = {}
    for path in sorted(glob.glob(out + "-*-summary.json")):
        with open(path, encoding="utf-8") as handle:
            found[os.path.basename(path)[len(os.path.basename(out)) + 1:-len("-summary.json")]] = json.load(handle)
    return found


def lines(pattern):
    found = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as handle:
            found += [json.loads(line) for line in handle if line.strip()]
    return found


def test_out_of_order_late_and_bad_only_windows_reconcile(tmp_path):
    """Out-of-order records land in their own window; a window of bad records only has a summary and errors
    but no record file; an empty window writes nothing; a record later than the allowed lateness (0) is an
    error record ``late`` in the late file, never lost; every summary reconciles (in = out + failed)."""
    stream = (Events()
              .advance_watermark_to(0)
              .add_elements([_msg(1, {"text": "the cat sat"}, 12), _msg(2, {"text": "a dog ran"}, 3)])  # out of order
              .add_elements([_msg(3, {"text": "hello world"}, 5), _msg(4, b"not json", 7)])
              .advance_watermark_to(21)
              .add_elements([_msg(5, {"text": "too late for the first window"}, 4)])  # window [0, 10) closed
              .add_elements([_msg(6, b"", 45), _msg(7, {"other": 1}, 47)])  # window [40, 50): bad records only
              .advance_watermark_to_infinity())
    out = run_stream(tmp_path, stream)
    found = summaries(out)
    names = sorted(found)
    assert names == ["19700101T000000Z-19700101T000010Z-p0", "19700101T000010Z-19700101T000020Z-p0",
                     "19700101T000040Z-19700101T000050Z-p0"]  # [20, 40) had nothing: no file at all
    first, second, bad = (found[n]["records"] for n in names)
    assert (first["in"], first["out"], first["failed"]) == (3, 2, 1) and first["failed_by_reason"] == {"malformed_json": 1}
    assert (second["in"], second["out"], second["failed"]) == (1, 1, 0)
    assert (bad["in"], bad["out"], bad["failed"]) == (2, 0, 2)
    assert all(found[n]["records"]["reconciled"] for n in names)
    assert not glob.glob(out + "-19700101T000040Z-*-of-*.jsonl")  # no record released: no record file
    assert {e["reason"] for e in lines(out + "-19700101T000040Z-*-errors.jsonl")} == {"empty", "missing_field"}
    released = lines(out + "-19700101T000000Z-*-of-*.jsonl")
    assert sorted(r["text"] for r in released) == ["a dog ran", "hello world"]
    late = lines(out + "-late-*-errors.jsonl")
    assert [(e["position"], e["reason"]) for e in late] == [(5, "late")]
    assert "text" not in json.dumps(late)  # the error record names where and why, never the text
    assert all(found[n]["window"]["allowed_lateness_seconds"] == 0 for n in names)


def test_allowed_lateness_takes_a_late_record_into_its_window(tmp_path):
    """With --allowed-lateness 30 the same late record is privatized in its own window, whose one pane is written
    when the watermark passes the window's end + 30 s and reconciles; nothing goes to the late file."""
    stream = (Events()
              .advance_watermark_to(0)
              .add_elements([_msg(1, {"text": "the cat sat"}, 2)])
              .advance_watermark_to(21)
              .add_elements([_msg(2, {"text": "a dog ran"}, 4), _msg(3, b"[]", 5)])
              .advance_watermark_to(41)
              .add_elements([_msg(4, {"text": "now too late"}, 6)])  # 41 > 10 + 30: closed
              .advance_watermark_to_infinity())
    out = run_stream(tmp_path, stream, lateness=30)
    found = summaries(out)
    assert sorted(found) == ["19700101T000000Z-19700101T000010Z-p0"]
    (summary,) = found.values()
    assert (summary["records"]["in"], summary["records"]["out"], summary["records"]["failed"]) == (3, 2, 1)
    assert summary["records"]["reconciled"] and summary["window"]["allowed_lateness_seconds"] == 30
    assert summary["window"]["start"].startswith("1970-01-01T00:00:00")
    assert sorted(r["text"] for r in lines(out + "-*-of-*.jsonl")) == ["a dog ran", "the cat sat"]
    assert [(e["position"], e["reason"]) for e in lines(out + "-late-*-errors.jsonl")] == [(4, "late")]


def test_window_privacy_statement_is_the_batch_statement(tmp_path):
    """A window's summary carries the privacy section that the batch job writes for the same mechanism, settings
    and record (textdp.privacy.summary.build_summary in both), not a sentence of its own."""
    stream = (Events().advance_watermark_to(0).add_elements([_msg(1, {"text": "the cat sat"}, 1)])
              .advance_watermark_to_infinity())
    out = run_stream(tmp_path, stream, epsilon=10)
    (summary,) = summaries(out).values()
    corpus = tmp_path / "batch.jsonl"
    corpus.write_text(json.dumps({"text": "the cat sat"}) + "\n", encoding="utf-8")
    result = run_cli("--input", str(corpus), "--output", str(tmp_path / "batch"), "--artifact", ART, "--epsilon", "10",
                     "--oov-policy", "keep")
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "batch-summary.json", encoding="utf-8") as handle:
        batch = json.load(handle)
    assert summary["privacy"] == batch["privacy"] and summary["mechanism"] == batch["mechanism"]


def test_shuffle_accounts_each_pane_from_its_own_records(tmp_path):
    """--shuffle in streaming: each pane's amplification report is computed from that pane's records only and
    says so (its record count); a pane of one record is too small for the theorem's condition and claims
    nothing; the shape field and dropped fields never reach the output."""
    from transforms.amplifier import AmplifierConfig

    stream = (Events().advance_watermark_to(0)
              .add_elements([_msg(1, {"text": "the cat sat", "id": 1}, 1)])
              .advance_watermark_to_infinity())
    out = run_stream(tmp_path, stream, amplifier=AmplifierConfig(shuffle=True, drop_fields=("id",)))
    (report_path,) = glob.glob(out + "-*-amplification.json")
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["scope"] == pane_scope_statement(1)
    assert report["shuffle"]["claimed"] is False and report["records"]["out"] == 1
    (record,) = lines(out + "-*-of-*.jsonl")
    assert set(record) == {"text"}
    (summary,) = summaries(out).values()
    assert summary["amplification_report"] == report_path and summary["records"]["reconciled"]


def test_user_field_and_k_threshold_apply_per_window_as_the_batch_job_does(tmp_path):
    """--user-field with --k-threshold in streaming: each window's k-threshold counts the distinct authors of that
    window only and its accounting is per author within the window, with the batch code, so a window's release,
    amplification figures and statements are the batch job's on that window's records: the first window is
    compared with `textdp privatize` (batch) on the same records and flags. A record without its author is an
    error record missing_author; the author field never reaches the output; every summary reconciles. The
    publishable summary of each window is the batch job's public summary for that release (plus the window).
    Deterministic: --oov-policy keep at epsilon 1e6 releases the input words, and no flag here is random."""
    from textdp.privacy.statements import records_statement
    from transforms.amplifier import AmplifierConfig

    first = [{"u": "a", "text": "the cat sat"}, {"u": "b", "text": "the cat ran"}, {"u": "a", "text": "the dog"},
             {"u": "c", "text": "a dog ran"}]
    second = [{"u": "a", "text": "the cat sat"}, {"u": "d", "text": "the bird sang"}]  # "cat": one author here
    stream = (Events().advance_watermark_to(0)
              .add_elements([_msg(i, record, 1 + i) for i, record in enumerate(first)] + [_msg(9, {"text": "no one"}, 8)])
              .add_elements([_msg(20 + i, record, 11 + i) for i, record in enumerate(second)])
              .advance_watermark_to_infinity())
    amplifier = AmplifierConfig(user_field="u", k_threshold=2)
    out = run_stream(tmp_path, stream, amplifier=amplifier, epsilon=1e6, public=str(tmp_path / "out" / "pub"))
    found = summaries(out)
    names = sorted(found)
    assert len(names) == 2 and all(found[n]["records"]["reconciled"] for n in names)
    one, two = (found[n] for n in names)
    assert (one["records"]["in"], one["records"]["out"], one["records"]["failed"]) == (5, 4, 1)
    assert one["records"]["failed_by_reason"] == {"missing_author": 1} and one["records"]["dropped"] == 0
    assert [e["reason"] for e in lines(out + "-" + names[0] + "-errors.jsonl")] == ["missing_author"]
    released_two = sorted(r["text"] for r in lines(out + "-" + names[1] + "-*-of-*.jsonl"))
    assert released_two == ["the <rare> <rare>"] * 2  # only "the" has 2 authors in window 2 ("cat" had 2 in window 1)
    released_one = lines(out + "-" + names[0] + "-*-of-*.jsonl")
    assert all(set(r) == {"text"} for r in released_one)
    assert sorted(r["text"] for r in released_one) == ["<rare> dog ran", "the cat <rare>", "the cat ran", "the dog"]
    with open(one["amplification_report"], encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["scope"] == pane_scope_statement(4, False, True, 2, None)
    assert one["privacy"]["records"] == records_statement(amplifier.steps(), one["amplification_report"])

    corpus = tmp_path / "batch.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in first), encoding="utf-8")
    result = run_cli("--input", str(corpus), "--output", str(tmp_path / "batch"), "--artifact", ART, "--epsilon", "1e6",
                     "--oov-policy", "keep", "--user-field", "u", "--k-threshold", "2",
                     "--public-summary", str(tmp_path / "batch-public.json"))
    assert result.returncode == 0, result.stderr
    batch_released = lines(str(tmp_path / "batch") + "-*-of-*.jsonl")
    assert sorted(r["text"] for r in released_one) == sorted(r["text"] for r in batch_released)
    with open(tmp_path / "batch-amplification.json", encoding="utf-8") as handle:
        batch_report = json.load(handle)
    for key in ("local", "k_threshold", "fields", "order", "seed"):
        assert report[key] == batch_report[key], key
    with open(tmp_path / "batch-summary.json", encoding="utf-8") as handle:
        batch = json.load(handle)
    assert {k: v for k, v in one["privacy"].items() if k != "records"} == {
        k: v for k, v in batch["privacy"].items() if k != "records"}
    with open(tmp_path / "batch-public.json", encoding="utf-8") as handle:
        batch_public = json.load(handle)
    (public_path,) = glob.glob(str(tmp_path / "out" / "pub") + "-" + names[0] + ".json")
    assert one["public_summary"] == public_path
    with open(public_path, encoding="utf-8") as handle:
        public = json.load(handle)
    assert public["publishable"] is True and public["records_released"] == 4
    assert public["window"]["start"] == one["window"]["start"] and public["window"]["end"] == one["window"]["end"]
    assert public["amplification"] == batch_public["amplification"]
    assert {k: v for k, v in public["privacy"].items() if k != "records"} == {
        k: v for k, v in batch_public["privacy"].items() if k != "records"}
    assert "records" not in public and "tokens" not in public  # no raw-input figure
    assert len(glob.glob(str(tmp_path / "out" / "pub") + "-*.json")) == 2


def test_subsample_applies_per_window_and_the_counts_reconcile(tmp_path):
    """--subsample in streaming: each record of a window is kept independently (OS CSPRNG) and the window's
    summary counts the dropped ones (in = out + failed + dropped); its report carries the batch job's
    sub-sampling section (never claimed) and a scope that names the rate. Rate 1e-12 on 3 records: a record is
    kept with probability at most 3e-12 (the test's false-failure rate)."""
    from transforms.amplifier import AmplifierConfig

    stream = (Events().advance_watermark_to(0)
              .add_elements([_msg(1, {"text": "the cat sat"}, 1), _msg(2, {"text": "a dog"}, 2), _msg(3, b"", 3),
                             _msg(4, {"text": "hello"}, 4)])
              .advance_watermark_to_infinity())
    out = run_stream(tmp_path, stream, amplifier=AmplifierConfig(subsample=1e-12))
    (summary,) = summaries(out).values()
    records = summary["records"]
    assert (records["in"], records["out"], records["failed"], records["dropped"]) == (4, 0, 1, 3)
    assert records["reconciled"] and not glob.glob(out + "-*-of-*.jsonl")
    with open(summary["amplification_report"], encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["subsample"]["rate"] == 1e-12 and report["subsample"]["claimed"] is False
    assert report["records"] == {"in": 3, "out": 0, "dropped_by_subsampling": 3}
    assert report["scope"] == pane_scope_statement(0, False, False, None, 1e-12)


def test_the_window_state_key_has_a_deterministic_coder(caplog):
    """The late-window step (CloseLateWindows, stateful) is keyed by the window start with a typed int key, so
    Beam finds a deterministic key coder and logs no warning about it."""
    import logging

    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    privatize = Privatize(epsilon=5, artifact=ART, text_fields=["text"], oov_policy="keep", keyed=True)
    with caplog.at_level(logging.WARNING):
        _ = (pipeline | Events().advance_watermark_to_infinity()
             | beam.ParDo(ParseMessages("jsonl", ("text",), 10_000, False))
             | PrivatizeWindows(privatize, "/nonexistent/r", "jsonl", 10, 0, context=CONTEXT))
    assert not [r for r in caplog.records if "deterministic" in r.getMessage()]


def run_cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_file_watch_end_to_end_reads_files_that_appear_while_it_runs(tmp_path):
    """The real command, file watch on the local runner (FnApiRunner, bounded by --streaming-stop-after): a
    thread moves files into the watched directory while the job runs; each is read once, every record is in
    exactly one window pane, the summaries reconcile and their totals are the records written."""
    watched, out = tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    out.mkdir()
    batches = [["the cat sat on the mat", "", "hello world"], ["a dog ran"], ["one more line", "and another"]]

    def writer():
        for index, batch in enumerate(batches):
            time.sleep(3)
            staging = tmp_path / f"staging-{index}.txt"
            staging.write_text("\n".join(batch) + "\n", encoding="utf-8")
            os.rename(staging, watched / f"part-{index}.txt")  # appears whole, as a watched file should

    thread = threading.Thread(target=writer)
    thread.start()
    result = run_cli("--streaming", "--input", str(watched / "*.txt"), "--output", str(out / "r"), "--artifact", ART,
                     "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "2", "--poll-interval", "0.5",
                     "--streaming-stop-after", "14", "--public-summary", str(out / "public"))
    thread.join()
    assert result.returncode == 0, result.stderr
    found = summaries(str(out / "r"))
    assert found and all(s["records"]["reconciled"] for s in found.values())
    assert sum(s["records"]["in"] for s in found.values()) == 6
    assert sum(s["records"]["failed"] for s in found.values()) == 1  # the blank line
    released = []
    for path in sorted(glob.glob(str(out / "r") + "-*-of-*.txt")):
        released += open(path, encoding="utf-8").read().splitlines()
    assert sorted(released) == sorted(line for batch in batches for line in batch if line)
    assert "6 in, 5 out, 1 failed; 0 late" in result.stdout
    public = sorted(glob.glob(str(out / "public") + "-*.json"))  # one publishable summary per window pane
    assert [os.path.basename(p)[len("public-"):-len(".json")] for p in public] == sorted(found)
    assert sum(json.load(open(p, encoding="utf-8"))["records_released"] for p in public) == 5


@pytest.mark.parametrize("args, message", [
    (["--input-subscription", "projects/p/subscriptions/s"], "not a Pub/Sub subscription name"),
    (["--input-subscription", "subscriptions/s"], "not a Pub/Sub subscription name"),
    (["--input-subscription", "projects/my-project/subscriptions/sub", "--format", "jsonl"], "needs a streaming runner"),
    (["--input", "x/*.txt", "--input-subscription", "projects/my-project/subscriptions/sub"], "give exactly one"),
    (["--input", "{dir}/*.txt"], "needs --streaming-stop-after"),
    (["--input", "{dir}/*.txt", "--streaming-stop-after", "1", "--window-size", "0"], "--window-size must be"),
    (["--input", "{dir}/*.txt", "--streaming-stop-after", "1", "--allowed-lateness", "-1"], "--allowed-lateness"),
    (["--input", "{dir}/*.txt", "--streaming-stop-after", "1", "--poll-interval", "nan"], "--poll-interval"),
    (["--input", "{dir}/*.parquet", "--streaming-stop-after", "1"], "Parquet is batch only"),
    (["--input", "{dir}/in/*.txt", "--streaming-stop-after", "1", "--diagnostics-output", "{dir}/d"],
     "--diagnostics-output is not supported with --streaming"),
    (["--input", "{dir}/in/*.txt", "--streaming-stop-after", "1", "--user-field", "u"],
     "--user-field needs JSONL input"),
    (["--input", "{dir}/in/*.jsonl", "--streaming-stop-after", "1", "--user-field", "text"],
     "a text field cannot also be the author field"),
    (["--input", "{dir}/p*", "--format", "jsonl", "--streaming-stop-after", "1", "--public-summary", "{dir}/pub"],
     "would match this job's own output files (such as pub-"),
    (["--input", "{dir}/in/*.txt", "--streaming-stop-after", "1", "--public-summary", "{dir}/r"],
     "give each output its own prefix"),
    (["--input", "{dir}/in/*.txt", "--streaming-stop-after", "1", "--k-threshold", "2", "--oov-policy", "unk",
      "--unk-token", "<rare>"], "is the --k-threshold marker"),
    (["--input-subscription", "projects/my-project/subscriptions/sub", "--format", "jsonl", "--streaming-stop-after",
      "5", "--runner", "PortableRunner"], "applies to a file watch"),
    (["--input", "{dir}/*", "--format", "text", "--streaming-stop-after", "1"], "would match this job's own output files"),
])
def test_streaming_refusals_are_one_line_before_anything_runs(tmp_path, args, message):
    args = [a.replace("{dir}", str(tmp_path)) for a in args]
    result = run_cli("--streaming", *args, "--output", str(tmp_path / "r"), "--artifact", ART, "--epsilon", "5",
                     timeout=120)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("earlier, flag", [("r-20260101T000000Z-20260101T000100Z-p0-summary.json", "--output"),
                                           ("pub-20260101T000000Z-20260101T000100Z-p0.json", "--public-summary")])
def test_earlier_window_files_refused_without_overwrite(tmp_path, earlier, flag):
    """An earlier run's window files (records' summaries, or public summaries at --public-summary's prefix) are
    refused without --overwrite, in one line naming the flag, before anything runs."""
    (tmp_path / "in").mkdir()
    (tmp_path / earlier).write_text("{}", encoding="utf-8")
    result = run_cli("--streaming", "--input", str(tmp_path / "in" / "*.txt"), "--output", str(tmp_path / "r"),
                     "--public-summary", str(tmp_path / "pub"),
                     "--artifact", ART, "--epsilon", "5", "--streaming-stop-after", "0", timeout=120)
    assert result.returncode == 2 and "--overwrite" in result.stderr and flag in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_pubsub_path_builds_into_a_graph_without_network(tmp_path):
    """--input-subscription: the streaming graph with Beam's ReadFromPubSub, built (not run: no network)."""
    from pipelines import streaming
    from pipelines.jobs import parse_job_options

    options = parse_job_options("privatize", [
        "--streaming", "--input-subscription", "projects/my-project/subscriptions/reviews", "--format", "jsonl",
        "--output", str(tmp_path / "r"), "--artifact", ART, "--epsilon", "5", "--runner", "PortableRunner"])  # not local; never run
    pipeline = streaming.build_pipeline(options)
    labels = [t.full_label for t in pipeline.transforms_stack[0].parts]
    assert "ReadPubSub" in labels and "PrivatizeWindows" in labels
    assert options.view_as(StandardOptions).streaming


def test_streaming_flex_template_beside_the_batch_one(tmp_path):
    """The privatize-streaming template: metadata generated from privatize's own flags (streaming flags
    included) and marked streaming; its launcher adds Beam's --streaming and builds the streaming graph."""
    from templates import generate_metadata, jobs
    from templates import main as template_main

    assert generate_metadata.main(["--output-dir", str(tmp_path), "privatize-streaming", "privatize"]) == 0
    with open(tmp_path / "privatize_streaming" / "metadata.json", encoding="utf-8") as handle:
        streaming = json.load(handle)
    with open(tmp_path / "privatize" / "metadata.json", encoding="utf-8") as handle:
        batch = json.load(handle)
    assert streaming["streaming"] is True and batch["streaming"] is False
    names = {p["name"] for p in streaming["parameters"]}
    assert {"window_size", "allowed_lateness", "input_subscription", "poll_interval"} <= names
    assert streaming["parameters"] == batch["parameters"] == jobs.parameters(jobs.job_parser("privatize")[0],
                                                                              jobs.JOBS["privatize"].required)
    job_argv, other = template_main.to_job_argv("privatize-streaming", ["--window_size=30", "--project=p"])
    assert job_argv == ["--window_size=30"] and other == ["--project=p"]


def test_the_template_build_loop_and_readme_include_the_streaming_template():
    """docs/scale.md's build loop builds every template templates/jobs.py defines, the streaming one included,
    generating its metadata before building its spec; templates/README.md names it."""
    from templates import jobs

    scale = open(os.path.join(REPO, "docs", "scale.md"), encoding="utf-8").read()
    start = scale.index("for JOB in ")
    loop = scale[start:scale.index("done", start)]
    assert set(loop.splitlines()[0][len("for JOB in "):].split(";")[0].split()) == set(jobs.JOBS)
    assert "privatize-streaming" in jobs.STREAMING_TEMPLATES
    assert loop.index("python templates/generate_metadata.py $JOB") < loop.index("gcloud dataflow flex-template build")
    readme = open(os.path.join(REPO, "templates", "README.md"), encoding="utf-8").read()
    assert all(name in readme for name in jobs.JOBS)


def test_the_local_streaming_runner_cannot_run_the_file_watch(tmp_path):
    """docs/streaming.md says why a local file watch writes its windows only when it stops: Beam's
    BundleBasedDirectRunner (the local runner that fires windows as the watermark passes) refuses the graph of
    fileio.MatchContinuously before running it. If a Beam upgrade lifts this, this test fails: then the local
    watch can use MatchContinuously on that runner and write windows as time passes (docs/streaming.md)."""
    from apache_beam.io import fileio
    from apache_beam.utils.timestamp import Duration, Timestamp

    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | fileio.MatchContinuously(str(tmp_path / "*.txt"), interval=0.5, start_timestamp=Timestamp.now(),
                                            stop_timestamp=Timestamp.now() + Duration(1))
    with pytest.raises(RuntimeError, match="was not replaced as expected"):
        pipeline.run()
