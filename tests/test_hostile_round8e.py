"""Red-team round 8b findings R8b-12 (input patterns matched hidden partial copies) and R8b-13 (a streaming run
whose ledger was moved away pointed the operator to a release file streaming never writes).

Real components only: real files in a temporary directory matched by Beam's FileSystems, the real `textdp
privatize` command (batch, and `--streaming` on the local FnApiRunner bounded by --streaming-stop-after) on the
300-word artifact, a real SQLite ledger moved away at the launcher's test-only hold (TEXTDP_TEST_LEDGER_HOLD, between
the job and the settlement). Runs use --oov-policy keep with a huge epsilon where released text is compared, and the
ledger admission is deterministic: no test here is statistical.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import apache_beam as beam
import pytest

from pipelines.ledger import LedgerRun
from pipelines.ledger import run as ledger_cli
from pipelines.streaming import PANE, window_summaries
from textdp.ledger import Ledger, key_fingerprint
from transforms.io import hidden_match, matched_paths

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ART = "/tmp/art300"
KEY = b"0123456789abcdef-round8e-ledgerk"
needs_artifact = pytest.mark.skipif(not os.path.isdir(ART), reason="the 300-word artifact /tmp/art300 is not built here")


def privatize(*args, env_extra=None, background=False):
    command = [sys.executable, "-m", "pipelines.cli", "privatize", *args, "--artifact", ART, "--runner", "FnApiRunner"]
    env = dict(os.environ, **(env_extra or {}))
    if background:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


def released(prefix):
    return sorted(line for path in glob.glob(prefix + "*-of-*.txt") for line in open(path, encoding="utf-8").read().splitlines())


def _partial_copy(watched):
    """a.txt and the hidden partial copy rsync would leave beside it, both settled (5 s old)."""
    watched.mkdir(parents=True)
    (watched / "a.txt").write_text("visible one\n")
    (watched / ".a.txt.Xq12").write_text("hidden partial\n")
    old = time.time() - 5
    for name in ("a.txt", ".a.txt.Xq12"):
        os.utime(watched / name, (old, old))


def test_the_hidden_name_rule_is_the_shells(tmp_path):
    """R8b-12: a name starting with "." is matched only by a pattern component that starts with "." (Python's glob,
    the shell); Beam's match alone takes them. gs:// names (no bucket here) are judged by the same rule."""
    root = tmp_path / "in"
    for name in ("a.txt", ".b.txt", "sub/c.txt", "sub/.e.txt", ".hd/d.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    base = str(root)
    from apache_beam.io.filesystems import FileSystems

    assert len(FileSystems.match([base + "/*"])[0].metadata_list) == 2  # Beam's match takes .b.txt (the finding)
    expected = {"/*": ["a.txt"], "/**": ["a.txt", "sub/c.txt"], "/*/*": ["sub/c.txt"], "/.*": [".b.txt"],
                "/.b.txt": [".b.txt"], "/.hd/*": [".hd/d.txt"], "/*/.e.txt": ["sub/.e.txt"], "/?b.txt": [],
                "/[.]b.txt": [], "/**/*.txt": ["sub/c.txt"]}
    for pattern, names in expected.items():
        assert matched_paths(base + pattern) == [f"{base}/{n}" for n in names], pattern
    for pattern, names in expected.items():  # Python's glob agrees (its files; ** aside: Beam's crosses "/")
        if "**" not in pattern:
            assert sorted(p for p in glob.glob(base + pattern) if os.path.isfile(p)) == [f"{base}/{n}" for n in names], pattern
    assert hidden_match("gs://bucket/in/.a.txt.Xq12", "gs://bucket/in/*")
    assert not hidden_match("gs://bucket/in/a.txt", "gs://bucket/in/*")
    assert not hidden_match("gs://bucket/in/.a.txt", "gs://bucket/in/.*")


@needs_artifact
def test_a_batch_run_skips_a_hidden_partial_copy(tmp_path):
    """R8b-12, batch: `--input 'in/*'` reads a.txt, not rsync's `.a.txt.Xq12`; the counts say one record."""
    _partial_copy(tmp_path / "in")
    out = str(tmp_path / "o" / "r")
    result = privatize("--input", str(tmp_path / "in" / "*"), "--output", out, "--format", "text", "--epsilon", "1e6",
                       "--oov-policy", "keep")
    assert result.returncode == 0, result.stderr
    assert released(out) == ["visible one"]
    summary = json.load(open(out + "-summary.json", encoding="utf-8"))
    assert summary["records"]["in"] == 1, summary["records"]


@needs_artifact
def test_the_streaming_watch_skips_a_hidden_partial_copy(tmp_path):
    """R8b-12, streaming (the local watch): the same; and the streaming runners' graph filters MatchContinuously's
    matches by the same rule (`NotHidden` right after the watch)."""
    _partial_copy(tmp_path / "in")
    out = str(tmp_path / "o" / "r")
    result = privatize("--streaming", "--format", "text", "--input", str(tmp_path / "in" / "*"), "--output", out,
                       "--epsilon", "1e6", "--oov-policy", "keep", "--poll-interval", "0.5", "--streaming-stop-after", "1")
    assert result.returncode == 0, result.stderr
    assert released(out) == ["visible one"]
    assert "hidden partial" not in "".join(open(p, encoding="utf-8").read() for p in glob.glob(out + "*"))

    from transforms.streaming import watch_files

    pipeline = beam.Pipeline(runner="FnApiRunner")
    watch_files(pipeline, str(tmp_path / "in" / "*"), 5, None, ("text", (), 10_000, False), local=False)
    labels = []

    class Visit(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            labels.append(node.full_label)

        def visit_transform(self, node):
            labels.append(node.full_label)

    pipeline.visit(Visit())
    first = [next(i for i, label in enumerate(labels) if label.split("/")[0] == name) for name in ("Watch", "NotHidden", "Digest")]
    assert first == sorted(first), labels


def _ledger(tmp_path):
    location = str(tmp_path / "L.sqlite")
    Ledger(location, key_fingerprint(KEY)).close()
    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    return location, str(key)


@needs_artifact
def test_a_streaming_run_whose_ledger_was_moved_says_which_windows_wrote_their_summary(tmp_path):
    """R8b-13: the ledger moved away after the run's one window was decided and written: the line says the
    streaming run is counted in no ledger, that 1 window wrote its summary, and names no release file (none is
    written); moved back, `textdp ledger reconcile` commits that window, as the line says."""
    location, key = _ledger(tmp_path)
    watched = tmp_path / "in"
    watched.mkdir()
    (watched / "a.jsonl").write_text("".join(json.dumps({"author": a, "text": "the of to and"}) + "\n" for a in "abc"))
    out, hold = str(tmp_path / "o" / "r"), str(tmp_path / "hold")
    proc = privatize("--streaming", "--input", str(watched / "*.jsonl"), "--output", out, "--epsilon", "1",
                     "--user-field", "author", "--ledger", location, "--ledger-key-file", key, "--ledger-run-id", "s-1",
                     "--window-size", "3600", "--streaming-stop-after", "0",
                     env_extra={"TEXTDP_TEST_LEDGER_HOLD": hold}, background=True)
    try:
        deadline = time.time() + 150
        while not os.path.exists(hold + ".ready") and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert os.path.exists(hold + ".ready"), proc.communicate()[1]
        shutil.move(location, location + ".moved")
    finally:
        open(hold, "w").close()
        _, err = proc.communicate(timeout=150)
    assert proc.returncode != 0, err
    assert "ledger: streaming run s-1 is counted in no ledger" in err, err
    assert "1 window(s) of it wrote their summary" in err and "-ledger.json" not in err, err
    assert "holds what it released" not in err and "a streaming run writes no release file" in err, err
    assert not os.path.exists(out + "-ledger.json") and len(glob.glob(out + "-*-summary.json")) == 1
    shutil.move(location + ".moved", location)
    assert ledger_cli(["reconcile", "--ledger", location, "--ledger-key-file", key]) == 0
    ledger = Ledger(location, key_fingerprint(KEY))
    assert ledger.run("s-1")["state"] == "committed"
    assert [w["state"] for w in ledger.windows_of("s-1")] == ["committed"]
    ledger.close()


def test_a_streaming_run_whose_ledger_was_moved_before_any_window_says_none_did(tmp_path):
    """R8b-13: the real LedgerRun of a streaming run (reserved as the streaming launcher does), its ledger moved
    away before any window was decided: the line says no window wrote its summary, and names no release file."""
    location, _ = _ledger(tmp_path)
    run = LedgerRun(location, KEY, None, "s-0", "author")
    out = str(tmp_path / "o" / "r")
    os.makedirs(os.path.dirname(out))
    run.reserve_streaming(1.0, "madlib", out, "jsonl", written=lambda: (window_summaries(out), f"{out}{PANE}-summary.json"))
    shutil.move(location, location + ".moved")
    (line,) = run.settle("the end")
    assert line.startswith("ledger: streaming run s-0 is counted in no ledger") and "it was deleted or moved" in line
    assert "no window of it wrote its summary" in line and "ledger.json" not in line and "holds what it released" not in line
    assert "`textdp ledger reconcile`" in line
