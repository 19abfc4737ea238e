"""Red-team round 8b findings R8b-5 and R8b-3 on ``textdp privatize --streaming``'s file watch, on the real component.

The watch runs are the real command on the local FnApiRunner (bounded by --streaming-stop-after) while a thread
creates files (a FIFO, re-sent copies) in the watched directory; the streaming runners' half (DigestFiles and
OncePerContent after MatchContinuously) runs on the FnApiRunner. Runs use --oov-policy keep with a huge epsilon so
the released text can be compared: no test here is statistical.
"""

from __future__ import annotations

import json
import os
import threading
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from tests.test_streaming_hostile import ART, _errors, _released, run_cli  # noqa: E402  (one copy of the helpers)
from transforms.streaming import DUPLICATE_FILE, FILE_CHANGED, NOT_REGULAR, SKIPPED, DigestFiles, OncePerContent


def _watch(watched, out, writer, stop_after):
    """The real streaming command watching ``watched/*.txt`` while ``writer`` runs in a thread; the finished process."""
    thread = threading.Thread(target=writer)
    thread.start()
    result = run_cli("--streaming", "--input", str(watched / "*.txt"), "--output", str(out / "r"), "--artifact", ART,
                     "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "60", "--poll-interval", "0.5",
                     "--streaming-stop-after", str(stop_after), timeout=120)
    thread.join()
    return result


def _taken(path, wait=30):
    """Until the watch has read ``path`` (its access time moves on a relatime mount; else ``wait`` s)."""
    first, deadline = os.stat(path).st_atime_ns, time.monotonic() + wait
    while os.stat(path).st_atime_ns == first and time.monotonic() < deadline:
        time.sleep(0.1)


def _start_file(watched):
    (watched / "start.txt").write_bytes(b"start line\n")
    os.utime(watched / "start.txt", ns=(0, time.time_ns()))  # an old access time: the watch's read moves it


def _put(stage, watched, name, data: bytes):
    """``data`` written elsewhere, then moved into the watched place whole (an old access time: a read moves it)."""
    (stage / name).write_bytes(data)
    os.utime(stage / name, ns=(0, time.time_ns()))
    os.rename(stage / name, watched / name)


def test_a_fifo_appearing_in_the_watched_place_is_an_error_record_and_the_watch_still_stops(tmp_path):
    """R8b-5: a named pipe created in the watched place after the start is never opened (opening it would block
    the watch until a writer comes: the run never stopped and lost every record read). The run stops at
    --streaming-stop-after, releases the records read, and the FIFO is one error record not_a_regular_file (once,
    though every poll matches it), counted as one item in and one failed and named on the console. The 120 s
    subprocess timeout makes a hang a failure."""
    watched, out = tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    out.mkdir()
    _start_file(watched)

    def writer():
        _taken(watched / "start.txt")
        os.mkfifo(watched / "q.txt")

    result = _watch(watched, out, writer, 6)
    assert result.returncode == 0, result.stderr
    assert _released(str(out / "r")) == ["start line"]
    errors = _errors(str(out / "r"))
    assert [(os.path.basename(e["source"]), e["reason"]) for e in errors] == [("q.txt", NOT_REGULAR)], errors
    assert "named pipe" in errors[0]["detail"]
    assert "2 in, 1 out, 1 failed" in result.stdout, result.stdout
    assert f"files not read: 1 ({NOT_REGULAR} 1)" in result.stdout, result.stdout


def test_a_resent_file_differing_only_by_line_endings_bom_or_final_newline_is_a_duplicate(tmp_path):
    """R8b-3: once a.txt, b.txt, c.txt and g.txt were read, re-sent copies differing only by CRLF line endings
    (b2), the final newline (c2), or a byte order mark + CRLF + no final newline (a3) are duplicate_file (their
    records are not released twice); g.txt rewritten as its records in CRLF plus one more line is
    file_changed_after_read (growth detection on the normalised records). A different export (d.txt: one line
    prepended to a.txt's lines) is not recognised, as docs/streaming.md says: its records are released."""
    watched, stage, out = tmp_path / "in", tmp_path / "stage", tmp_path / "out"
    for folder in (watched, stage, out):
        folder.mkdir()
    _start_file(watched)

    def writer():
        _taken(watched / "start.txt")
        _put(stage, watched, "a.txt", b"alpha one\nbeta two\n")
        _put(stage, watched, "b.txt", b"delta four\n")
        _put(stage, watched, "c.txt", b"eps five\n")
        _put(stage, watched, "g.txt", b"grow one\n")
        _taken(watched / "g.txt")
        time.sleep(1.5)  # more polls: every file is taken
        _put(stage, watched, "b2.txt", b"delta four\r\n")
        _put(stage, watched, "c2.txt", b"eps five")
        _put(stage, watched, "a3.txt", b"\xef\xbb\xbfalpha one\r\nbeta two")
        _put(stage, watched, "g.txt", b"grow one\r\ngrow two\r\n")
        _put(stage, watched, "d.txt", b"gamma three\nalpha one\nbeta two\n")

    result = _watch(watched, out, writer, 10)
    assert result.returncode == 0, result.stderr
    released = _released(str(out / "r"))
    assert sorted(released) == sorted(["start line", "alpha one", "beta two", "delta four", "eps five", "grow one",
                                       "gamma three", "alpha one", "beta two"]), released
    errors = _errors(str(out / "r"))
    assert sorted((os.path.basename(e["source"]), e["reason"]) for e in errors) == [
        ("a3.txt", DUPLICATE_FILE), ("b2.txt", DUPLICATE_FILE), ("c2.txt", DUPLICATE_FILE), ("g.txt", FILE_CHANGED)]
    assert "13 in, 9 out, 4 failed" in result.stdout, result.stdout
    assert f"files not read: 4 ({DUPLICATE_FILE} 3, {FILE_CHANGED} 1)" in result.stdout, result.stdout
    assert "alpha" not in result.stdout + result.stderr + json.dumps(errors)  # no input text in the messages


def test_the_streaming_runners_watch_never_opens_a_fifo_and_dedups_normalised_content(tmp_path):
    """The streaming runners' half (MatchContinuously's matches -> DigestFiles -> OncePerContent), on the
    FnApiRunner: a FIFO matched is an error record not_a_regular_file and is never opened (the pipeline would
    block forever: the test's own timeout is the pipeline finishing); a CRLF copy of a file is duplicate_file."""
    (tmp_path / "x.txt").write_bytes(b"same\nline\n")
    (tmp_path / "y.txt").write_bytes(b"same\r\nline")
    (tmp_path / "z.txt").write_bytes(b"other\n")
    os.mkfifo(tmp_path / "q.txt")
    metas = FileSystems.match([str(tmp_path / "*.txt")])[0].metadata_list
    assert len(metas) == 4
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        digested = (pipeline | beam.Create(sorted(metas, key=lambda m: m.path))
                    | beam.ParDo(DigestFiles()).with_outputs(SKIPPED, main="digests"))
        out = digested.digests | beam.ParDo(OncePerContent()).with_outputs(SKIPPED, main="files")
        names = out.files | "Names" >> beam.Map(lambda m: os.path.basename(m.path))
        assert_that(names | "Kind" >> beam.Map(lambda n: n == "z.txt"), equal_to([False, True]), label="files")
        reasons = ((digested[SKIPPED], out[SKIPPED]) | beam.Flatten()
                   | beam.Map(lambda e: (os.path.basename(e["source"]), e["reason"])))
        assert_that(reasons | "Reason" >> beam.Map(lambda r: r[1]), equal_to([NOT_REGULAR, DUPLICATE_FILE]),
                    label="skipped")
