"""Red-team 6b findings on ``textdp privatize --streaming`` (F5, F6, F7, F13, F15), each on the real component.

The file-watch test runs the real command on the local FnApiRunner (bounded by --streaming-stop-after) while a
thread renames, re-creates and half-writes files in the watched directory. Runs use --oov-policy keep with a huge
epsilon so the released text can be compared: no test here is statistical.
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
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from transforms.streaming import DUPLICATE_FILE, FILE_CHANGED, SKIPPED, OncePerContent, file_identity

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ART = "/tmp/art300"


def run_cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _released(out):
    lines = []
    for path in sorted(glob.glob(out + "-*-of-*.txt")):
        lines += open(path, encoding="utf-8").read().splitlines()
    return lines


def _errors(out):
    found = []
    for path in sorted(glob.glob(out + "-*-errors.jsonl")):
        found += [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    return found


def test_watch_reads_each_content_once_rereads_a_recreated_name_and_waits_for_a_whole_file(tmp_path):
    """F5, F6, F7. While the watch runs: b.txt is written in two parts 0.6 s apart (less than the 1 s poll
    interval): it is read whole, once its size and time stood still for one interval, so no cut-off line is
    released. Once every file was read: d.txt is renamed e.txt (same content: not read again, one error record
    duplicate_file); a.txt is deleted and re-created with new content (the new content is read); c.txt grows (not
    read again: file_changed_after_read). Every record is released exactly once, the counts reconcile (a skipped
    file is one item in and one failed) and the console names the files not read, never their text."""
    watched, stage, out = tmp_path / "in", tmp_path / "stage", tmp_path / "out"
    for folder in (watched, stage, out):
        folder.mkdir()

    def put(name, lines):
        (stage / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        os.utime(stage / name, ns=(0, time.time_ns()))  # an old access time: the watch's read moves it
        os.rename(stage / name, watched / name)

    def taken(path, wait=40):
        """Until the watch has read ``path`` (its access time moves on a relatime mount; else ``wait`` s)."""
        first, deadline = os.stat(path).st_atime_ns, time.monotonic() + wait
        while os.stat(path).st_atime_ns == first and time.monotonic() < deadline:
            time.sleep(0.1)

    def writer():
        (watched / "start.txt").write_text("start line\n", encoding="utf-8")
        os.utime(watched / "start.txt", ns=(0, time.time_ns()))  # an old access time: the first read moves it
        taken(watched / "start.txt")  # the watch runs
        put("a.txt", ["afile one", "afile two"])
        with open(watched / "b.txt", "w", encoding="utf-8") as handle:  # half-written for 0.6 s (< 1 s interval)
            handle.write("bfile one\nbfile tw")
            handle.flush()
            time.sleep(0.6)
            handle.write("o\nbfile three\n")
        put("c.txt", ["cfile one"])
        put("d.txt", ["dfile one"])
        taken(watched / "d.txt")
        time.sleep(2)  # one more poll: every file is taken
        os.rename(watched / "d.txt", watched / "e.txt")  # F5: a rename within the pattern
        os.remove(watched / "a.txt")  # F6: the same name, new content
        put("a.txt", ["afile NEW one"])
        with open(watched / "c.txt", "a", encoding="utf-8") as handle:  # grows after it was read
            handle.write("cfile two\n")

    thread = threading.Thread(target=writer)
    thread.start()
    result = run_cli("--streaming", "--input", str(watched / "*.txt"), "--output", str(out / "r"), "--artifact", ART,
                     "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "60", "--poll-interval", "1",
                     "--streaming-stop-after", "25")
    thread.join()
    assert result.returncode == 0, result.stderr
    released = _released(str(out / "r"))
    assert sorted(released) == sorted(["start line", "afile one", "afile two", "bfile one", "bfile two", "bfile three",
                                       "cfile one", "dfile one", "afile NEW one"]), released
    errors = _errors(str(out / "r"))
    assert sorted((os.path.basename(e["source"]), e["reason"]) for e in errors) == [
        ("c.txt", FILE_CHANGED), ("e.txt", DUPLICATE_FILE)], errors
    assert "8 in" not in result.stdout and "11 in, 9 out, 2 failed; 0 late" in result.stdout, result.stdout
    assert f"files not read: 2 ({DUPLICATE_FILE} 1, {FILE_CHANGED} 1)" in result.stdout, result.stdout
    assert "afile" not in result.stdout + result.stderr + json.dumps(errors)  # no input text in the messages


def test_a_file_still_changing_when_the_watch_stops_is_an_error_record_not_a_cut_record(tmp_path):
    """F7: a file whose last line is still being written when the watch stops is not read (its cut-off line is
    not released as a record): one error record file_not_settled, counted."""
    watched, out = tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    out.mkdir()
    stop = threading.Event()

    def writer():
        with open(watched / "b.txt", "w", encoding="utf-8") as handle:
            while not stop.is_set():
                handle.write("bfile one\nbfile tw")
                handle.flush()
                time.sleep(0.2)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        result = run_cli("--streaming", "--input", str(watched / "*.txt"), "--output", str(out / "r"), "--artifact",
                         ART, "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "60", "--poll-interval",
                         "0.5", "--streaming-stop-after", "3")
    finally:
        stop.set()
        thread.join()
    assert result.returncode == 0, result.stderr
    assert _released(str(out / "r")) == []
    assert [e["reason"] for e in _errors(str(out / "r"))] == ["file_not_settled"]
    assert "1 in, 0 out, 1 failed" in result.stdout and "file_not_settled 1" in result.stdout, result.stdout


def test_once_per_content_reads_a_content_once_whatever_its_name(tmp_path):
    """The streaming runners' half (after MatchContinuously(match_updated_files=True)): two names with one content
    -> one file read, one duplicate_file error record; another content -> read. Run on the FnApiRunner."""
    for name, text in (("x.txt", "same\n"), ("y.txt", "same\n"), ("z.txt", "other\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    metas = FileSystems.match([str(tmp_path / "*.txt")])[0].metadata_list
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        out = (pipeline | beam.Create([(file_identity(m.path, "text", ()), m) for m in metas])
               | beam.ParDo(OncePerContent()).with_outputs(SKIPPED, main="files"))
        contents = out.files | "Content" >> beam.Map(lambda m: open(m.path, encoding="utf-8").read())
        assert_that(contents, equal_to(["same\n", "other\n"]), label="files")
        assert_that(out[SKIPPED] | beam.Map(lambda e: e["reason"]), equal_to([DUPLICATE_FILE]), label="skipped")


def test_the_dataflow_watch_finds_updated_files_and_deduplicates_by_content(tmp_path):
    """The graph built for a streaming runner: MatchContinuously with match_updated_files (a re-created name is
    found again) followed by OncePerContent (a renamed content is not read again)."""
    from apache_beam.io import fileio

    from transforms.streaming import watch_files

    pipeline = beam.Pipeline(runner="FnApiRunner")
    watch_files(pipeline, str(tmp_path / "*.txt"), 5, None, ("text", (), 10_000, False), local=False)
    labels, watches = [], []

    class Visit(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            labels.append(node.full_label)
            if isinstance(node.transform, fileio.MatchContinuously):
                watches.append(node.transform)

        def visit_transform(self, node):
            labels.append(node.full_label)

    pipeline.visit(Visit())
    assert watches and watches[0].match_upd and watches[0].has_deduplication
    assert "OncePerContent" in labels


@pytest.mark.parametrize("name", ["projects/my-project/subscriptions/s/extra", "projects/my-project/subscriptions/ééé",
                                  "projects/my-project/subscriptions/goog-x",
                                  "projects/my-project/subscriptions/ab", "projects/my-project/subscriptions/1abc",
                                  "projects/my-project/subscriptions/" + "a" * 256, "projects/My_Project/subscriptions/sub",
                                  "projects/my-project/subscriptions/a b c"])
def test_subscription_names_pubsub_rejects_are_refused(name):
    """F13: Pub/Sub's naming rules (check_subscription), in one line naming the rule, never the name."""
    from pipelines.streaming import check_subscription
    from textdp.errors import TextdpError

    with pytest.raises(TextdpError) as caught:
        check_subscription(name)
    assert "\n" not in str(caught.value) and "--input-subscription" in str(caught.value)


@pytest.mark.parametrize("name", ["projects/my-project/subscriptions/sub", "projects/p-123456/subscriptions/A.b_c~d+e%f",
                                  "projects/example.com:my-project/subscriptions/sub-1"])
def test_subscription_names_pubsub_accepts_pass(name):
    from pipelines.streaming import check_subscription

    check_subscription(name)


def test_public_window_summary_carries_the_pane_scope_and_the_stream_order_not_the_batch_shuffle(tmp_path):
    """F15: with --shuffle, a window pane's publishable summary says what the stream did: the operator report's
    scope sentence (pane_scope_statement, the same code), and an order statement in which the window follows the
    arrival time; the batch sentence "independent of its input position" appears in no summary of the pane."""
    from tests.test_streaming import Events, _msg, run_stream
    from transforms.amplifier import AmplifierConfig
    from transforms.streaming import BATCH_SHUFFLE_CLAUSE, pane_order_statement, pane_scope_statement

    stream = (Events().advance_watermark_to(0)
              .add_elements([_msg(i, {"text": "the cat sat"}, 1) for i in range(3)])
              .advance_watermark_to_infinity())
    out = run_stream(tmp_path, stream, amplifier=AmplifierConfig(shuffle=True), public=str(tmp_path / "out" / "pub"))
    (public_path,) = glob.glob(str(tmp_path / "out" / "pub") + "-*.json")
    public = json.load(open(public_path, encoding="utf-8"))
    (report_path,) = glob.glob(out + "-*-amplification.json")
    report = json.load(open(report_path, encoding="utf-8"))
    (summary_path,) = glob.glob(out + "-*-summary.json")
    summary = json.load(open(summary_path, encoding="utf-8"))
    assert public["window"]["scope"] == report["scope"] == pane_scope_statement(3)
    per_shard = AmplifierConfig(shuffle=True).records_per_shard
    assert public["amplification"]["order"] == report["order"] == pane_order_statement(True, per_shard)
    assert "arrival time" in public["privacy"]["records"] and "arrival time" in summary["privacy"]["records"]
    for document in (public, report, summary):
        text = json.dumps(document)
        assert "independent of its input position and author" not in text and BATCH_SHUFFLE_CLAUSE not in text
