"""Red-team round 9b findings R9b-7, R9b-10 and R9b-9 on ``textdp privatize --streaming``, on the real component.

The watch runs are the real command on the local FnApiRunner (bounded by --streaming-stop-after) while a thread
changes the watched directory (tests/test_hostile_round8c.py's _watch); the streaming runners' half (DigestFiles
after MatchContinuously) runs on the FnApiRunner. Runs use --oov-policy keep with a huge epsilon so the released
text can be compared: no test here is statistical.
"""

from __future__ import annotations

import glob
import os
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from tests.test_hostile_round8c import _start_file, _taken, _watch
from tests.test_streaming_hostile import ART, _errors, _released, run_cli
from transforms.streaming import DUPLICATE_FILE, SKIPPED, SYMLINK, DigestFiles

SECRET = "topsecret hunter two"


def _everything_written(out) -> str:
    text = ""
    for path in sorted(glob.glob(str(out / "*"))):
        if os.path.isfile(path):
            text += open(path, encoding="utf-8", errors="replace").read()
    return text


def test_a_symlink_dropped_into_the_watched_place_is_an_error_record_never_followed(tmp_path):
    """R9b-7: a symbolic link created in the watched place while the watch runs, pointing to a private file the job
    can read (mode 700 folder), is never followed: one error record ``symlink`` (once, though every poll matches it),
    counted as one item in and one failed and named on the console's "files not read" line; the private file's
    text is in no output (it would be released verbatim at this epsilon with --oov-policy keep)."""
    watched, out, secret = tmp_path / "in", tmp_path / "out", tmp_path / "secret"
    for folder in (watched, out, secret):
        folder.mkdir()
    (secret / "pw.txt").write_text(SECRET + "\n", encoding="utf-8")
    os.chmod(secret, 0o700)
    _start_file(watched)

    def writer():
        _taken(watched / "start.txt")
        os.symlink(secret / "pw.txt", watched / "z.txt")

    result = _watch(watched, out, writer, 6)
    assert result.returncode == 0, result.stderr
    assert _released(str(out / "r")) == ["start line"]
    errors = _errors(str(out / "r"))
    assert [(os.path.basename(e["source"]), e["reason"]) for e in errors] == [("z.txt", SYMLINK)], errors
    assert "symbolic link" in errors[0]["detail"]
    assert "topsecret" not in _everything_written(out) and "topsecret" not in result.stdout + result.stderr
    assert "2 in, 1 out, 1 failed" in result.stdout, result.stdout
    assert f"files not read: 1 ({SYMLINK} 1)" in result.stdout, result.stdout


def test_the_streaming_runners_watch_never_follows_a_symlink_or_a_linked_folder(tmp_path):
    """R9b-7, the streaming runners' half (MatchContinuously's matches -> DigestFiles), on the FnApiRunner: a file
    that is a symbolic link, and a file reached through a symlinked folder below the pattern's fixed folder, are
    error records ``symlink``; a regular file is digested. Deterministic."""
    watched, secret = tmp_path / "in", tmp_path / "secret"
    (watched / "real").mkdir(parents=True)
    secret.mkdir()
    (secret / "pw.txt").write_text(SECRET + "\n", encoding="utf-8")
    (watched / "real" / "a.txt").write_text("alpha one\n", encoding="utf-8")
    os.symlink(secret / "pw.txt", watched / "real" / "z.txt")
    os.symlink(secret, watched / "linked")
    pattern = str(watched / "*" / "*.txt")
    # Beam's local match does not descend into a linked folder, a remote file system or another matcher may
    metas = sorted(FileSystems.match([pattern])[0].metadata_list
                   + FileSystems.match([str(watched / "linked" / "pw.txt")])[0].metadata_list, key=lambda m: m.path)
    assert [os.path.relpath(m.path, watched) for m in metas] == ["linked/pw.txt", "real/a.txt", "real/z.txt"]
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        digested = (pipeline | beam.Create(metas)
                    | beam.ParDo(DigestFiles(pattern)).with_outputs(SKIPPED, main="digests"))
        assert_that(digested.digests | beam.Map(lambda d: os.path.basename(d[1].path)), equal_to(["a.txt"]),
                    label="digested")
        assert_that(digested[SKIPPED] | beam.Map(lambda e: (os.path.basename(e["source"]), e["reason"])),
                    equal_to([("pw.txt", SYMLINK), ("z.txt", SYMLINK)]), label="skipped")


def test_a_file_rewritten_in_place_with_the_same_size_and_time_is_read_again(tmp_path):
    """R9b-10: a.txt, stamped with a fixed modification time, is rewritten in place after it was read with new
    content of the same size and the same modification time (as ``touch -d``, ``cp -p`` or ``rsync -t --inplace``
    leave it): the new content is read (its status-change time moved); b.txt, rewritten in place with its own
    content and time, is the same records: one error record ``duplicate_file``. Every record is released once and
    the counts reconcile."""
    watched, out = tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    out.mkdir()
    stamp = 1_700_000_000 * 10**9  # a business date, long ago: the file is settled at once

    def put(name, data: bytes):
        with open(watched / name, "r+b" if (watched / name).exists() else "wb") as handle:  # in place: same inode
            handle.write(data)
            handle.truncate()
        os.utime(watched / name, ns=(0, stamp))  # an old access time: the watch's read moves it

    _start_file(watched)

    def writer():
        _taken(watched / "start.txt")  # the launch's readability check reads it: the files below are the watch's
        put("a.txt", b"alpha one\n")
        put("b.txt", b"beta three\n")
        inode = os.stat(watched / "a.txt").st_ino
        deadline = time.monotonic() + 30  # until the watch read both (a read moves an access time of 0)
        while any(os.stat(watched / n).st_atime_ns == 0 for n in ("a.txt", "b.txt")) and time.monotonic() < deadline:
            time.sleep(0.1)
        put("a.txt", b"gamma two\n")
        put("b.txt", b"beta three\n")
        assert os.stat(watched / "a.txt").st_ino == inode

    result = _watch(watched, out, writer, 10)
    assert result.returncode == 0, result.stderr
    assert sorted(_released(str(out / "r"))) == ["alpha one", "beta three", "gamma two", "start line"], result.stdout
    errors = _errors(str(out / "r"))
    assert [(os.path.basename(e["source"]), e["reason"]) for e in errors] == [("b.txt", DUPLICATE_FILE)], errors
    assert "5 in, 4 out, 1 failed" in result.stdout, result.stdout


def test_a_streaming_run_never_replaces_the_window_public_summaries_of_another_release(tmp_path):
    """R9b-9: a streaming release (--output out/r) wrote its window public summaries at --public-summary pub/p; a run
    with a new --output out2/r and the same --public-summary is refused in one line before any worker starts (exit
    2), with --overwrite or without (the files there name out/r as their output), and the first release's public
    summaries are left as they were. Deterministic (one real watch run, then two refusals)."""
    watched, out = tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    (watched / "a.txt").write_text("alpha one\n", encoding="utf-8")
    common = ("--streaming", "--format", "text", "--input", str(watched / "*.txt"), "--public-summary",
              str(tmp_path / "pub" / "p"), "--artifact", ART, "--epsilon", "1", "--window-size", "60",
              "--poll-interval", "0.5", "--streaming-stop-after", "2")
    (tmp_path / "pub").mkdir()
    first = run_cli(*common, "--output", str(out / "r"), timeout=120)
    assert first.returncode == 0, first.stderr
    published = sorted(glob.glob(str(tmp_path / "pub" / "p-*Z-*Z-p*.json")))
    assert len(published) == 1
    before = open(published[0], "rb").read()
    for overwrite in ((), ("--overwrite",)):
        refused = run_cli(*common, "--output", str(tmp_path / "out2" / "r"), *overwrite, timeout=120)
        assert refused.returncode == 2, (overwrite, refused.stdout, refused.stderr)
        lines = [line for line in refused.stderr.splitlines() if "error" in line]
        assert len(lines) == 1 and "is the public summary of another release" in lines[0], refused.stderr
        assert f"its output is {out / 'r'}" in lines[0] and "with --overwrite or without" in lines[0]
        assert open(published[0], "rb").read() == before
        assert not os.path.exists(tmp_path / "out2")
