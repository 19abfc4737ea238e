"""No file of the user's is ever overwritten and no record is lost silently (issue 25, items 1-7).

Every test is built from the exact case of the issue it names, through the real command
(``pipelines.cli.main``, or ``python -m pipelines.cli`` in subprocesses for the concurrent runs) on
the local FnApiRunner and the 5,000-word artifact, with files in ``tmp_path``. Each refusal is
checked for its exit code (2), its one line ``textdp <job>: error: ...``, and that every file that
was there before (inputs, other runs' outputs) is byte-for-byte intact and nothing new was written.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

from pipelines.cli import main as cli_main
from tests.conftest import REPO

RUNNER = ["--runner=FnApiRunner"]
SECRET = "zyxwvut"  # a word in every input line: it must never appear in a message


def _lines(path, n):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"a {SECRET} movie line number {i}\n" for i in range(n)), encoding="utf-8")
    return path


def _jsonl(path, n):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": f"user-{SECRET}-{i}", "text": f"a good movie {i}"}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return path


def _files(root):
    """Every file under ``root`` (paths relative to it) with its bytes; symlinks as their target."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = ("link", os.readlink(path)) if os.path.islink(path) \
                else open(path, "rb").read()
    return found


def _refused(capsys, argv, *fragments, job="privatize"):
    """Run ``argv``; assert exit 2 and one line naming every fragment (and no input text)."""
    code = cli_main([job] + argv + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(f"textdp {job}: error: "), err
    for fragment in fragments:
        assert fragment in err, err
    assert SECRET not in err
    return err


def _records(output, suffix=".txt"):
    return [line for path in sorted(glob.glob(f"{output}-[0-9]*-of-*{suffix}"))
            for line in open(path, encoding="utf-8")]


@pytest.fixture
def base(tmp_path, small_artifact_dir):
    return ["--epsilon=5", f"--artifact={small_artifact_dir}"]


# --- item 1: --public-summary -----------------------------------------------------------------------

def test_item1_public_summary_never_replaces_records_input_operator_summary_or_any_existing_file(
        tmp_path, base, capsys):
    source = _lines(tmp_path / "in.txt", 3)
    o = tmp_path / "o"
    before = _files(tmp_path)
    # at this run's own records, at its operator summary, at its amplification report: one line, nothing written
    _refused(capsys, base + [f"--input={source}", f"--output={o}/x", f"--public-summary={o}/x-00000-of-00001.txt"],
             "--public-summary", "the records")
    _refused(capsys, base + [f"--input={source}", f"--output={o}/x", f"--public-summary={o}/x-summary.json"],
             "the operator summary")
    # at the input (also through ./ and a symlink)
    _refused(capsys, base + [f"--input={source}", f"--output={o}/x", f"--public-summary={source}"],
             "--input matches", "the public summary")
    os.symlink(source, tmp_path / "link.json")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={o}/x", f"--public-summary={tmp_path}/link.json"],
             "--input matches")
    assert _files(tmp_path) == before
    # any existing file: refused without --overwrite, replaced with it
    (tmp_path / "notes.json").write_text("my notes\n", encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={o}/x", f"--public-summary={tmp_path}/notes.json"],
             f"--public-summary {tmp_path}/notes.json already exists", "--overwrite")
    assert _files(tmp_path) == before
    # an earlier run's records: refused even with --overwrite when they are this run's input
    assert cli_main(["privatize", f"--input={source}", f"--output={o}/x"] + base + RUNNER) == 0
    capsys.readouterr()
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={o}/y", f"--public-summary={o}/x-00000-of-00001.txt"],
             f"--public-summary {o}/x-00000-of-00001.txt already exists")
    assert _files(tmp_path) == before
    # --overwrite replaces only an earlier PUBLIC summary (F6b): the notes stay, so does an operator summary
    _refused(capsys, base + [f"--input={source}", f"--output={o}/y", f"--public-summary={tmp_path}/notes.json",
                             "--overwrite"], f"--public-summary {tmp_path}/notes.json exists and is not an earlier "
             "public summary", "choose another --public-summary")
    _refused(capsys, base + [f"--input={source}", f"--output={o}/y", f"--public-summary={o}/x-summary.json",
                             "--overwrite"], "is not an earlier public summary")
    assert _files(tmp_path) == before
    assert cli_main(["privatize", f"--input={source}", f"--output={o}/y", f"--public-summary={tmp_path}/pub.json"]
                    + base + RUNNER) == 0
    assert cli_main(["privatize", f"--input={source}", f"--output={o}/y", f"--public-summary={tmp_path}/pub.json",
                     "--overwrite"] + base + RUNNER) == 0
    assert json.loads((tmp_path / "pub.json").read_text(encoding="utf-8"))["publishable"] is True
    assert (tmp_path / "notes.json").read_text(encoding="utf-8") == "my notes\n"
    assert len(_records(f"{o}/x")) == len(_records(f"{o}/y")) == 3


# --- item 2: --diagnostics-output --------------------------------------------------------------------

def test_item2_diagnostics_never_share_the_records_prefix_or_overwrite_the_input(tmp_path, base, capsys):
    source = _jsonl(tmp_path / "in.jsonl", 3)
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o/x", f"--diagnostics-output={tmp_path}/o/x"],
             "--diagnostics-output", "is also --output")
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o/x",
                             f"--diagnostics-output={tmp_path}/o/x-errors"],
             "would be the same files or delete each other", "the diagnostics")
    assert _files(tmp_path) == before
    earlier = _jsonl(tmp_path / "d-00000-of-00001.jsonl", 2)  # an earlier diagnostics-named file used as input
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={earlier}", f"--output={tmp_path}/o/x", f"--diagnostics-output={tmp_path}/d",
                             "--overwrite"], "--input matches", "the diagnostics")
    assert _files(tmp_path) == before
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x",
                     f"--diagnostics-output={tmp_path}/o/diag"] + base + RUNNER) == 0
    summary = json.load(open(f"{tmp_path}/o/x-summary.json", encoding="utf-8"))
    assert len(_records(f"{tmp_path}/o/x", ".jsonl")) == summary["records"]["out"] == 3
    assert glob.glob(f"{tmp_path}/o/diag-*-of-*.jsonl")


# --- item 3: the same file under another name ---------------------------------------------------------

def test_item3_input_named_by_dot_slash_absolute_path_or_symlink_is_never_deleted(tmp_path, base, capsys,
                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = _lines(tmp_path / "o" / "x-00000-of-00001.txt", 3)
    os.symlink(source, tmp_path / "link.txt")
    os.symlink(tmp_path / "o", tmp_path / "dirlink")
    before = _files(tmp_path)
    for given, output in (("./o/x-00000-of-00001.txt", "o/x"), (str(source), "o/x"),
                          ("o/x-00000-of-00001.txt", f"{tmp_path}/o/x"), ("link.txt", "o/x"),
                          ("o/x-00000-of-00001.txt", "dirlink/x")):
        _refused(capsys, base + [f"--input={given}", f"--output={output}", "--overwrite"],
                 "--input matches", "which this run would overwrite")
        assert _files(tmp_path) == before


# --- item 4: glob characters ------------------------------------------------------------------------------

@pytest.mark.parametrize("output", ["o/r[12]", "o/run[1]", "o/x?", "o/r*", "o/{r1,r2}"])
def test_item4_glob_characters_in_an_output_are_refused_before_anything_is_deleted(tmp_path, base, capsys,
                                                                                   monkeypatch, output):
    monkeypatch.chdir(tmp_path)
    source = _lines(tmp_path / "in.txt", 3)
    for run in ("r1", "r2", "run1"):
        _lines(tmp_path / "o" / f"{run}-00000-of-00001.txt", 2)
        (tmp_path / "o" / f"{run}-summary.json").write_text('{"records": 2}\n', encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={output}", "--overwrite"], "glob character")
    assert _files(tmp_path) == before  # both runs intact, no beam-temp-* folder, no lock


# --- item 5: two runs on one prefix at once ------------------------------------------------------------

def test_item5_two_concurrent_runs_on_one_prefix_exactly_one_succeeds(tmp_path, small_artifact_dir):
    """Both processes start together; whichever takes <output>.lock first runs, the other is refused
    (by the lock while the first runs, or by the first run's files if it has already finished)."""
    sources = [_lines(tmp_path / f"in{i}.txt", 5 + i) for i in range(2)]
    output = f"{tmp_path}/o/x"
    os.makedirs(f"{tmp_path}/o")
    processes = [subprocess.Popen([sys.executable, "-m", "pipelines.cli", "privatize", f"--input={source}",
                                   f"--output={output}", "--epsilon=5", f"--artifact={small_artifact_dir}"] + RUNNER,
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for source in sources]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in processes]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refusal = next(err for code, err in results if code == 2).strip()
    assert len(refusal.splitlines()) == 1 and refusal.startswith("textdp privatize: error: ")
    assert "lock file" in refusal or "already holds" in refusal, refusal
    winner = next(i for i, (code, _) in enumerate(results) if code == 0)
    summary = json.load(open(f"{output}-summary.json", encoding="utf-8"))
    assert len(_records(output)) == summary["records"]["out"] == summary["records"]["in"] == 5 + winner
    assert not os.path.exists(f"{output}.lock")


def test_item5_a_held_lock_refuses_the_run_and_names_the_lock_and_how_to_remove_a_stale_one(tmp_path, base,
                                                                                           capsys):
    source = _lines(tmp_path / "in.txt", 3)
    os.makedirs(tmp_path / "o")
    (tmp_path / "o" / "x.lock").write_text("textdp privatize, pid 1 on elsewhere, since 2026-01-01T00:00:00Z\n",
                                           encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o/x"],
             f"lock file {tmp_path}/o/x.lock", "pid 1 on elsewhere", f"remove {tmp_path}/o/x.lock")
    assert _files(tmp_path) == before
    os.remove(tmp_path / "o" / "x.lock")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x"] + base + RUNNER) == 0
    assert not os.path.exists(tmp_path / "o" / "x.lock")  # released after the run
    assert len(_records(f"{tmp_path}/o/x")) == 3


# --- item 6: a directory as a prefix ------------------------------------------------------------------

def test_item6_an_output_that_is_a_directory_or_ends_with_a_separator_is_refused(tmp_path, base, capsys):
    source = _lines(tmp_path / "in.txt", 3)
    os.makedirs(tmp_path / "o")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o/"], "ends with a path separator")
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/new/"], "ends with a path separator")
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o"], "is a directory")
    assert _files(tmp_path) == before and not os.path.exists(tmp_path / "new")


# --- item 7: fields no record has ----------------------------------------------------------------------

def test_item7_drop_fields_and_user_field_no_record_has_are_refused_with_a_hint(tmp_path, base, capsys):
    source = _jsonl(tmp_path / "in.jsonl", 4)
    before = _files(tmp_path)
    err = _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o", "--shuffle", "--drop-fields=idd"],
                   "--drop-fields 'idd'", "did you mean 'id'?")
    assert "user-" not in err
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o", "--shuffle", "--user-field=iD"],
             "--user-field 'iD'", "did you mean 'id'?")
    assert _files(tmp_path) == before
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["good movie", "bad movie"]}), tmp_path / "in.parquet")
    _refused(capsys, base + [f"--input={tmp_path}/in.parquet", f"--output={tmp_path}/p", "--shuffle",
                             "--drop-fields=id,idd"], "--drop-fields 'idd'", "the Parquet schema")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o", "--shuffle",
                     "--drop-fields=id"] + base + RUNNER) == 0
    released = [json.loads(line) for line in _records(f"{tmp_path}/o", ".jsonl")]
    assert len(released) == 4 and all("id" not in record for record in released)


# --- the other jobs ------------------------------------------------------------------------------------

def test_calibrate_and_audit_outputs_go_through_the_same_guard(tmp_path, small_artifact_dir, capsys):
    words = tmp_path / "cal" / "report.html"
    words.parent.mkdir()
    words.write_text("movie\ngood\n", encoding="utf-8")
    before = _files(tmp_path)
    common = [f"--artifact={small_artifact_dir}", "--epsilons=5", "--samples=10"]
    _refused(capsys, common + [f"--output={tmp_path}/cal[1]"], "glob character", job="calibrate")
    _refused(capsys, common + [f"--output={tmp_path}/cal", f"--word-list={words}", "--overwrite"],
             "--word-list matches", job="calibrate")
    _refused(capsys, [f"--artifact={small_artifact_dir}", "--epsilons=5", f"--output={tmp_path}/a*"],
             "glob character", job="audit")
    corpus = tmp_path / "aud" / "summary.json"
    corpus.parent.mkdir()
    corpus.write_text(json.dumps({"text": f"a good {SECRET} movie"}) + "\n", encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, [f"--artifact={small_artifact_dir}", "--epsilons=5", "--checks=inversion",
                      f"--corpus={corpus}", "--corpus-format=jsonl", f"--output={tmp_path}/aud", "--overwrite"],
             "--corpus matches", job="audit")
    assert _files(tmp_path) == before


def test_calibrate_and_neighbours_hold_a_lock_for_their_run(tmp_path, tiny_artifact_dir, capsys):
    """Two calibrations into one directory, or two table jobs on one artifact, at once: the second is refused."""
    import shutil
    (tmp_path / "cal.lock").write_text("textdp calibrate, pid 7 on elsewhere, since 2026-01-01T00:00:00Z\n",
                                       encoding="utf-8")
    copy = tmp_path / "artifact"
    shutil.copytree(tiny_artifact_dir, copy)
    (tmp_path / "artifact.lock").write_text("textdp neighbours, pid 8 on elsewhere\n", encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, [f"--artifact={tiny_artifact_dir}", "--epsilons=5", "--samples=10", f"--output={tmp_path}/cal"],
             f"lock file {tmp_path}/cal.lock", "pid 7", f"remove {tmp_path}/cal.lock", job="calibrate")
    _refused(capsys, [f"--artifact={copy}", "--k=5"], f"lock file {copy}.lock", f"remove {copy}.lock",
             job="neighbours")
    assert _files(tmp_path) == before
    os.remove(f"{copy}.lock")
    assert cli_main(["neighbours", f"--artifact={copy}", "--k=5"] + RUNNER) == 0
    assert not os.path.exists(f"{copy}.lock")


# --- the guard itself (textdp/outputs.py, no Beam) ---------------------------------------------------------

def _local_guard(overwrite=False):
    from textdp.outputs import OutputGuard
    return OutputGuard("privatize", overwrite, os.path.exists, lambda pattern: sorted(glob.glob(pattern)))


def test_an_output_written_between_the_check_and_the_lock_refuses_the_run(tmp_path):
    """The lock is taken just before the pipeline runs; the check is repeated under it, so a run that
    finished in between (or any file that appeared) is not overwritten."""
    from textdp.errors import TextdpError
    guard = _local_guard()
    prefix = guard.prefix("--output", f"{tmp_path}/x")
    guard.sharded("--output", "the records", prefix, "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]",
                  ".txt", ("-00000-of-00001",), (f"{prefix}-*-of-*.txt",))
    assert guard.check() == []
    (tmp_path / "x-00000-of-00001.txt").write_text("another run\n", encoding="utf-8")
    with pytest.raises(TextdpError, match="already holds 1 file"):
        guard.acquire()
    assert not os.path.exists(f"{tmp_path}/x.lock") and guard.held == ()
    assert (tmp_path / "x-00000-of-00001.txt").read_text(encoding="utf-8") == "another run\n"


def test_gs_paths_get_the_glob_and_separator_refusals_and_no_lock():
    from textdp.errors import TextdpError
    guard = _local_guard()
    for bad, message in (("gs://bucket/o/r[12]", "glob character"), ("gs://bucket/o/", "path separator")):
        with pytest.raises(TextdpError, match=message):
            guard.prefix("--output", bad)
    assert guard.prefix("--output", "gs://bucket/o/x") == "gs://bucket/o/x"
    guard.acquire()  # nothing local to lock: gs:// outputs are not protected against concurrent runs
    assert guard.held == ()
