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
             "is the same file as", "the public summary")  # the link's own name is the output (R11-3): the same file
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
    (tmp_path / "x.textdp-run.json").write_text('{"textdp_run_record": 1, "files": ["x-00000-of-00001.txt"]}\n',
                                                 encoding="utf-8")  # as another textdp run leaves it
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


# --- red-team round (F1, F6, F7, F8, F13, F14, F15, F20) ------------------------------------------------

def _calibrate(tmp_path, artifact, output, *extra):
    return ["calibrate", f"--artifact={artifact}", "--epsilons=5", "--words=3", "--samples=10",
            f"--output={output}"] + list(extra) + RUNNER


def test_f1_an_input_that_is_a_hard_link_of_an_output_is_refused_even_with_overwrite(tmp_path, base,
                                                                                   tiny_artifact_dir, capsys):
    """Same st_dev/st_ino under another name: calibrate's --word-list, privatize's --input, audit's --corpus."""
    (tmp_path / "c2").mkdir()
    (tmp_path / "c2" / "summary.json").write_text("the\nof\nand\n", encoding="utf-8")
    os.link(tmp_path / "c2" / "summary.json", tmp_path / "wl.txt")
    _lines(tmp_path / "o" / "x-00000-of-00001.txt", 3)
    os.link(tmp_path / "o" / "x-00000-of-00001.txt", tmp_path / "in.txt")
    (tmp_path / "aud").mkdir()
    (tmp_path / "aud" / "report.html").write_text(json.dumps({"text": f"a good {SECRET} movie"}) + "\n",
                                                  encoding="utf-8")
    os.link(tmp_path / "aud" / "report.html", tmp_path / "corpus.jsonl")
    before = _files(tmp_path)
    _refused(capsys, [f"--artifact={tiny_artifact_dir}", "--epsilons=5", "--samples=10", f"--output={tmp_path}/c2",
                      f"--word-list={tmp_path}/wl.txt", "--overwrite"],
             f"--word-list {tmp_path}/wl.txt is the same file as {tmp_path}/c2/summary.json", "hard link",
             job="calibrate")
    _refused(capsys, base + [f"--input={tmp_path}/in.txt", f"--output={tmp_path}/o/x", "--overwrite"],
             f"--input {tmp_path}/in.txt is the same file as {tmp_path}/o/x-00000-of-00001.txt")
    _refused(capsys, base + [f"--input={tmp_path}/in.txt", f"--output={tmp_path}/p",
                             f"--public-summary={tmp_path}/o/x-00000-of-00001.txt", "--overwrite"],
             "is the same file as", "the public summary")
    _refused(capsys, [f"--artifact={tiny_artifact_dir}", "--epsilons=5", "--checks=inversion",
                      f"--corpus={tmp_path}/corpus.jsonl", "--corpus-format=jsonl", f"--output={tmp_path}/aud",
                      "--overwrite"], "--corpus", "is the same file as", job="audit")
    assert _files(tmp_path) == before


def test_f6_no_output_may_be_a_file_of_the_artifact_even_with_overwrite(tmp_path, tiny_artifact_dir, capsys):
    import shutil
    art = tmp_path / "art3"
    shutil.copytree(tiny_artifact_dir, art)
    source = _lines(tmp_path / "in.txt", 3)
    (tmp_path / "cal").mkdir()
    os.link(art / "vocab.txt", tmp_path / "cal" / "report.html")  # an artifact file under a calibrate output name
    before = _files(tmp_path)
    common = ["--epsilon=5", f"--artifact={art}", f"--input={source}", f"--output={tmp_path}/q/o/out", "--overwrite"]
    _refused(capsys, common + [f"--public-summary={art}/manifest.json"],
             f"--artifact matches {os.path.realpath(art)}/manifest.json", "the public summary")
    _refused(capsys, common + [f"--public-summary={art}/vectors.npy"], "--artifact matches")
    os.link(art / "manifest.json", tmp_path / "pub.json")
    _refused(capsys, common + [f"--public-summary={tmp_path}/pub.json"], "--artifact", "is the same file as")
    os.remove(tmp_path / "pub.json")
    _refused(capsys, [f"--artifact={art}", "--epsilons=5", "--words=3", "--samples=10", f"--output={tmp_path}/cal",
                      "--overwrite"], "--artifact", "is the same file as", f"{tmp_path}/cal/report.html",
             job="calibrate")
    assert _files(tmp_path) == before
    # the default artifact (no --artifact) is registered the same way
    from textdp.artifact.locate import resolve_artifact
    default = resolve_artifact(None)
    _refused(capsys, ["--epsilon=5", f"--input={source}", f"--output={tmp_path}/q/o/out", "--overwrite",
                      f"--public-summary={default}/manifest.json"], "--artifact matches", "manifest.json")
    assert os.path.isfile(f"{default}/manifest.json")
    assert _files(tmp_path) == before


def test_f7_an_input_pattern_that_matches_a_lock_of_the_run_is_refused(tmp_path, base, small_artifact_dir, capsys):
    r4 = tmp_path / "r4"
    _lines(r4 / "data", 2)
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={r4}/*", "--format=text", f"--output={r4}/out"],
             f"--input {r4}/* matches {os.path.realpath(r4)}/out.lock", "lock file this run creates")
    _refused(capsys, base + [f"--input={r4}/*", "--format=text", f"--output={r4}/out",
                             f"--public-summary={r4}/pub.json"], "lock file this run creates")
    _refused(capsys, [f"--artifact={small_artifact_dir}", "--epsilons=5", "--checks=inversion",
                      f"--corpus={r4}/*", "--corpus-format=text", f"--output={r4}/a5"],
             f"--corpus {r4}/* matches {os.path.realpath(r4)}/a5.lock", job="audit")
    assert _files(tmp_path) == before
    # a pattern that cannot match the lock runs, and counts only the user's records
    assert cli_main(["privatize", f"--input={r4}/d*", "--format=text", f"--output={r4}/out"] + base + RUNNER) == 0
    summary = json.load(open(f"{r4}/out-summary.json", encoding="utf-8"))
    assert summary["records"]["in"] == summary["records"]["out"] == 2 and len(_records(f"{r4}/out")) == 2


def test_f8_overwrite_removes_the_earlier_run_in_another_format_and_without_it_is_refused(tmp_path, base, capsys):
    txt, jsonl = _lines(tmp_path / "in.txt", 3), _jsonl(tmp_path / "in.jsonl", 2)
    out = f"{tmp_path}/r6/out"
    assert cli_main(["privatize", f"--input={txt}", f"--output={out}"] + base + RUNNER) == 0
    capsys.readouterr()
    os.remove(f"{out}-summary.json")  # only the earlier run's .txt shards (and errors) left at the prefix
    os.remove(f"{out}-errors-00000.jsonl")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={jsonl}", f"--output={out}"], "already holds 1 file(s) of an earlier run",
             f"{out}-00000-of-00001.txt", "--overwrite")
    assert _files(tmp_path) == before
    assert cli_main(["privatize", f"--input={jsonl}", f"--output={out}", "--overwrite"] + base + RUNNER) == 0
    left = sorted(os.listdir(tmp_path / "r6"))
    assert left == ["out-00000-of-00001.jsonl", "out-errors-00000.jsonl", "out-summary.json",
                    "out.textdp-run.json"], left
    assert json.load(open(f"{out}.textdp-run.json", encoding="utf-8"))["files"] == left[:3]  # the run's own files
    summary = json.load(open(f"{out}-summary.json", encoding="utf-8"))
    assert summary["records"]["out"] == len(_records(out, ".jsonl")) == 2 and not _records(out, ".txt")


def test_f20_calibrate_and_audit_refuse_a_directory_of_the_other_job_naming_it(tmp_path, tiny_artifact_dir,
                                                                                capsys):
    assert cli_main(_calibrate(tmp_path, tiny_artifact_dir, f"{tmp_path}/m")) == 0
    capsys.readouterr()
    before = _files(tmp_path)
    for extra in ([], ["--overwrite"]):
        err = _refused(capsys, [f"--artifact={tiny_artifact_dir}", "--epsilons=5", "--pairs=1", "--draws=100",
                                f"--output={tmp_path}/m"] + extra,
                       "holds the files of a calibrate run", f"{tmp_path}/m/", "this audit run would not replace",
                       job="audit")
        assert "already holds an earlier audit" not in err
    assert _files(tmp_path) == before
    # an earlier calibration is replaced whole by --overwrite (no file of it left that the new one did not write)
    (tmp_path / "m" / "hist_s_w.png").write_bytes(b"stale plot")
    assert cli_main(_calibrate(tmp_path, tiny_artifact_dir, f"{tmp_path}/m", "--overwrite")) == 0
    assert (tmp_path / "m" / "hist_s_w.png").read_bytes() != b"stale plot"


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("name", ["out-00000-of-00001.txt", "out-errors-00000.jsonl"])
def test_f13_f14_a_directory_at_a_shard_or_error_file_name_is_refused_before_the_run(tmp_path, base, capsys,
                                                                                    shuffle, name):
    source = _lines(tmp_path / "in.txt", 2)
    (tmp_path / "p" / name / "sub").mkdir(parents=True)
    (tmp_path / "p" / name / "precious").write_text("keep\n", encoding="utf-8")
    (tmp_path / "p" / name / "sub" / "x").write_text("keep2\n", encoding="utf-8")
    before = _files(tmp_path)
    for extra in ([], ["--overwrite"]):
        _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/p/out"] + (["--shuffle"] if shuffle
                                                                                        else []) + extra,
                 f"{os.path.realpath(tmp_path)}/p/{name} is a directory", "never deletes a directory")
        assert _files(tmp_path) == before and not os.path.exists(tmp_path / "p" / "out.lock")


def test_f13_the_shard_writer_never_deletes_what_appeared_at_a_shard_name(tmp_path):
    """A directory that appears at a shard's name after the pre-run check: the run fails with one line, the
    directory and its files are intact, no temporary file is left; a file there (a retried shard) is replaced."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from transforms.shard_writer import WriteShuffledShards
    (tmp_path / "out-00000-of-00002.txt").mkdir()
    (tmp_path / "out-00000-of-00002.txt" / "precious").write_text("keep\n", encoding="utf-8")
    (tmp_path / "out-00001-of-00002.txt").write_text("an earlier attempt\n", encoding="utf-8")
    before = _files(tmp_path)
    with pytest.raises(Exception) as raised:
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (pipeline | beam.Create([(0, 2, ["a", "b"])])
                 | WriteShuffledShards(f"{tmp_path}/out", "text", ".txt"))
    assert f"{tmp_path}/out-00000-of-00002.txt is a directory" in str(raised.value)
    assert "nothing was deleted" in str(raised.value)
    assert _files(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["out-00000-of-00002.txt",
                                                                             "out-00001-of-00002.txt"]
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = pipeline | beam.Create([(1, 2, ["c"])]) | WriteShuffledShards(f"{tmp_path}/out", "text", ".txt")
    assert (tmp_path / "out-00001-of-00002.txt").read_text(encoding="utf-8") == "c\n"
    assert (tmp_path / "out-00000-of-00002.txt" / "precious").read_text(encoding="utf-8") == "keep\n"


@pytest.mark.parametrize("signame, exit_code, said", [("SIGTERM", 143, "terminated (SIGTERM)"),
                                                      ("SIGHUP", 129, "hung up (SIGHUP)")])
def test_f15_sigterm_during_a_run_is_handled_like_ctrl_c(tmp_path, small_artifact_dir, signame, exit_code, said):
    """One line, exit 143 (SIGHUP, a closed terminal: 129), the lock released, no beam-temp-* folder left."""
    import signal
    import time
    source = tmp_path / "huge.txt"
    source.write_text("the movie was good and the plot was fine\n" * 400000, encoding="utf-8")
    (tmp_path / "s1").mkdir()
    before = sorted(os.listdir(tmp_path / "s1"))
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "privatize", f"--input={source}",
                                f"--output={tmp_path}/s1/out", "--epsilon=5", f"--artifact={small_artifact_dir}"]
                               + RUNNER, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not glob.glob(f"{tmp_path}/s1/beam-temp-*") and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert process.poll() is None, "the run ended before it could be terminated: make the input larger"
    assert os.path.exists(f"{tmp_path}/s1/out.lock")
    process.send_signal(getattr(signal, signame))
    # Python runs the handler when the main thread next executes bytecode: while it waits inside the runner's C code
    # that can be long on a loaded machine (seen > 120 s with the suite on 2 busy cores), never forever
    code = process.wait(timeout=600)
    err = process.stderr.read().strip()
    assert code == exit_code, err
    assert err.splitlines()[-1] == f"textdp privatize: {said}; the run's temporary files were removed", err
    assert len([line for line in err.splitlines() if line.startswith("textdp privatize:")]) == 1, err
    assert sorted(os.listdir(tmp_path / "s1")) == before  # no lock, no beam-temp-*, nothing written


def test_f15_a_lock_of_a_dead_process_on_this_host_is_removed_and_said_so(tmp_path, base, capsys):
    import socket
    source = _lines(tmp_path / "in.txt", 3)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    os.makedirs(tmp_path / "o")
    lock = tmp_path / "o" / "x.lock"
    from textdp.outputs import process_identity
    boot, namespace, _ = process_identity()  # this boot and PID namespace: the pid is provably gone (round 4 N5)
    lock.write_text(f"textdp privatize, pid {dead.pid} on {socket.gethostname()}, since 2026-01-01T00:00:00Z\n"
                    f"textdp-lock 2 boot={boot} pidns={namespace} start= token=00\n", encoding="utf-8")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x"] + base + RUNNER) == 0
    err = capsys.readouterr().err
    assert (f"textdp privatize: removed the stale lock file {lock} (textdp privatize, pid {dead.pid} on "
            f"{socket.gethostname()}") in err and "no longer runs on this host" in err, err
    assert not lock.exists() and len(_records(f"{tmp_path}/o/x")) == 3
    # a live holder on this host (pid 1) is not stale: refused, the lock intact
    lock.write_text(f"textdp privatize, pid 1 on {socket.gethostname()}, since 2026-01-01T00:00:00Z\n",
                    encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, base + [f"--input={source}", f"--output={tmp_path}/o/x", "--overwrite"],
             f"lock file {lock}", "pid 1 on")
    assert _files(tmp_path) == before
