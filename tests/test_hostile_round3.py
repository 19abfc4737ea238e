"""Where and how jobs write: the output, path and concurrency findings of the third hostile round (issue 25).

Each test is the round's reproduction (F1, F2, F10, F11, F13, F19, F19b and the misleading lock message),
run through the real command (``pipelines.cli.main``, or ``python -m pipelines.cli`` in subprocesses for
the concurrent runs) on the local FnApiRunner with the 300-word artifact of tests/conftest.py. Every
refusal is checked for its exit code (2), its one line ``textdp <job>: error: ...`` and that nothing
was written or changed (every file under ``tmp_path`` byte for byte the same).
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from pipelines.cli import main as cli_main
from tests.conftest import REPO

RUNNER = ["--runner=FnApiRunner"]
SECRET = "zyxwvut"  # a word of every input line: never in a message


def _lines(path, n, words="the city was good and he said it"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{words} {SECRET} {i}\n" for i in range(n)), encoding="utf-8")
    return path


def _files(root):
    """Every file under ``root`` (relative path -> bytes), as bytes paths (names need not be UTF-8)."""
    root = os.fsencode(str(root))
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = open(path, "rb").read()
    return found


def _refused(capsys, job, argv, *fragments):
    code = cli_main([job] + argv + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(f"textdp {job}: error: "), err
    for fragment in fragments:
        assert fragment in err, err
    assert SECRET not in err and "pipeline failed" not in err, err
    return err


def _calibrate(artifact, output, *extra):
    return [f"--artifact={artifact}", "--epsilons=5", "--words=3", "--samples=10", f"--output={output}"] + list(extra)


def _audit(artifact, output, *extra):
    return [f"--artifact={artifact}", "--epsilons=5", "--pairs=1", "--draws=100", f"--output={output}"] + list(extra)


# --- F19 / F19b: concurrent runs whose files overlap ----------------------------------------------------

def _start(argv):
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "privatize"] + argv + RUNNER, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("case", ["f19b_overlapping_prefixes", "f19_public_summary_is_the_other_runs_summary"])
def test_f19_a_run_whose_files_overlap_a_running_runs_files_is_refused(tmp_path, tiny_artifact_dir, case):
    """B runs (a long input); once B holds its locks, A starts with files that overlap B's: F19b ``--output
    o/q`` while B writes ``o/q-errors`` (A's sinks would delete B's records and errors), F19 A's
    ``--public-summary`` at B's operator summary. A is refused in one line naming the directory lock and B,
    still running then, finishes with every file it reports. Before the directory lock both exited 0."""
    big, small = _lines(tmp_path / "big.txt", 150000), _lines(tmp_path / "small.txt", 3)
    o = tmp_path / "o"
    common = ["--epsilon=5", f"--artifact={tiny_artifact_dir}"]
    if case == "f19b_overlapping_prefixes":
        b_output, a_argv = f"{o}/q-errors", [f"--input={small}", f"--output={o}/q"]
    else:
        b_output, a_argv = f"{o}/q", [f"--input={small}", f"--output={o}/a", f"--public-summary={o}/q-summary.json"]
    b = _start([f"--input={big}", f"--output={b_output}"] + common)
    deadline = time.time() + 120
    while not os.path.exists(f"{b_output}.lock") and time.time() < deadline and b.poll() is None:
        time.sleep(0.1)  # B holds its locks (its prefix's, then its directory's): it runs
    assert b.poll() is None and os.path.exists(f"{b_output}.lock"), b.stderr.read() if b.poll() is not None else ""
    time.sleep(0.5)
    a = _start(a_argv + common)
    a_code, a_err = a.wait(timeout=300), a.stderr.read().strip()
    b_running = b.poll() is None
    b_code, b_err = b.wait(timeout=600), b.stderr.read()
    assert b_running, "B ended before A was checked: make B's input larger"
    assert a_code == 2 and len(a_err.splitlines()) == 1, a_err
    assert a_err.startswith("textdp privatize: error: ") and f"lock file {os.path.realpath(o)}/.textdp.lock" in a_err
    assert "is being written by another textdp run" in a_err and "textdp privatize, pid " in a_err, a_err
    assert b_code == 0, b_err
    summary = json.load(open(f"{b_output}-summary.json", encoding="utf-8"))
    assert summary.get("publishable") is not True and summary["records"]["in"] == 150000
    released = sum(1 for _ in open(f"{b_output}-00000-of-00001.txt", encoding="utf-8"))
    assert released == summary["records"]["out"] == 150000
    assert os.path.exists(f"{b_output}-errors-00000.jsonl")
    assert not os.path.exists(o / ".textdp.lock") and not os.path.exists(f"{o}/a-summary.json")


# --- F1: --overwrite replaces only textdp's own files ------------------------------------------------------

def test_f1_calibrate_and_audit_never_replace_a_users_summary_or_report(tmp_path, tiny_artifact_dir, capsys):
    d = tmp_path / "proj"
    d.mkdir()
    (d / "summary.json").write_text('{"my": "precious data"}\n', encoding="utf-8")
    (d / "report.html").write_text("<html>my report</html>\n", encoding="utf-8")
    before = _files(tmp_path)
    for job, argv in (("calibrate", _calibrate(tiny_artifact_dir, d)), ("audit", _audit(tiny_artifact_dir, d))):
        for extra in ([], ["--overwrite"]):
            err = _refused(capsys, job, argv + extra, f"{os.path.realpath(d)}/", "was not written by a textdp run",
                           "never replaces a file it did not write")
            assert "earlier" not in err, err  # it holds no calibration: the refusal must not say it does
    assert _files(tmp_path) == before
    # an earlier calibration's own files: recognized (its run record lists them) and replaced by --overwrite
    cal = tmp_path / "cal"
    assert cli_main(["calibrate"] + _calibrate(tiny_artifact_dir, cal) + RUNNER) == 0
    capsys.readouterr()
    record = json.load(open(cal / "textdp-run.json", encoding="utf-8"))
    assert set(record["files"]) == set(os.listdir(cal)) - {"textdp-run.json"} and "summary.json" in record["files"]
    _refused(capsys, "calibrate", _calibrate(tiny_artifact_dir, cal), "already holds an earlier calibration")
    assert cli_main(["calibrate"] + _calibrate(tiny_artifact_dir, cal, "--overwrite") + RUNNER) == 0
    capsys.readouterr()
    # a user's PNG next to an earlier calibration, at a name the record does not list: refused, kept
    os.remove(cal / "hist_n_w.png")
    shutil.copy(cal / "hist_s_w.png", cal / "hist_n_w.png")  # the user's own plot under a calibrate name
    record = json.load(open(cal / "textdp-run.json", encoding="utf-8"))
    record["files"].remove("hist_n_w.png")
    (cal / "textdp-run.json").write_text(json.dumps({**record, "files": record["files"]}), encoding="utf-8")
    before = _files(tmp_path)
    _refused(capsys, "calibrate", _calibrate(tiny_artifact_dir, cal, "--overwrite"),
             f"{os.path.realpath(cal)}/hist_n_w.png was not written by a textdp run", "does not list it")
    assert _files(tmp_path) == before


def test_f1_privatize_overwrite_never_deletes_a_users_file_at_an_output_name(tmp_path, tiny_artifact_dir, capsys):
    source = _lines(tmp_path / "in.txt", 2)
    common = [f"--input={source}", "--epsilon=5", f"--artifact={tiny_artifact_dir}"]
    g = tmp_path / "g"
    assert cli_main(["privatize", f"--output={g}/z"] + common + RUNNER) == 0  # an earlier run: its own files
    capsys.readouterr()
    for name, content in (("z-amplification.json", "mine\n"), ("z-errors-00007.jsonl", '{"mine": 1}\n')):
        (g / name).write_text(content, encoding="utf-8")
        before = _files(tmp_path)
        for extra in ([], ["--overwrite"]):
            _refused(capsys, "privatize", [f"--output={g}/z"] + common + extra,
                     f"{os.path.realpath(g)}/{name} was not written by a textdp run", "choose another --output")
        assert _files(tmp_path) == before
        os.remove(g / name)
    # a file of the user's at the run record's own name is never replaced either
    (g / "y.textdp-run.json").write_text("my notes\n", encoding="utf-8")
    _refused(capsys, "privatize", [f"--output={g}/y", "--overwrite"] + common,
             f"{os.path.realpath(g)}/y.textdp-run.json is not a textdp run record")
    assert (g / "y.textdp-run.json").read_text(encoding="utf-8") == "my notes\n"
    # the earlier run's own files are still replaced by --overwrite
    assert cli_main(["privatize", f"--output={g}/z", "--overwrite"] + common + RUNNER) == 0


# --- F2: calibrate/audit --output in the artifact or the cache --------------------------------------------

def test_f2_an_output_in_the_artifact_or_the_cache_is_refused_before_the_run(tmp_path, tiny_artifact_dir, capsys,
                                                                               monkeypatch):
    art = tmp_path / "art2"
    shutil.copytree(tiny_artifact_dir, art)
    cache = tmp_path / "cache"
    (cache / "artifacts").mkdir(parents=True)
    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(cache))  # (the runs keep their verification stamps there)
    before = _files(art)
    real = os.path.realpath(art)
    for output in (art, f"{art}/", f"{art}/sub", f"{tmp_path}/./art2"):
        for extra in ([], ["--overwrite"]):
            _refused(capsys, "calibrate", _calibrate(art, output, *extra), f"is inside --artifact {real}",
                     "never writes into the --artifact it reads")
            _refused(capsys, "audit", _audit(art, output, *extra), f"is inside --artifact {real}")
    _refused(capsys, "privatize", [f"--input={_lines(tmp_path / 'x' / 'in.txt', 1)}", f"--output={art}/out",
                                   "--epsilon=5", f"--artifact={art}"], f"is inside --artifact {real}")
    _refused(capsys, "calibrate", _calibrate(art, cache / "artifacts" / "mine"),
             f"is inside the textdp cache {os.path.realpath(cache)}", "TEXTDP_CACHE_DIR")
    assert _files(art) == before and not os.path.exists(cache / "artifacts" / "mine")
    assert sorted(os.listdir(tmp_path)) == ["art2", "cache", "x"]


# --- F10: names that are not UTF-8 --------------------------------------------------------------------------

def test_f10_names_that_are_not_utf8_are_refused_in_one_line_before_the_run(tmp_path, tiny_artifact_dir, capsys):
    n = os.fsencode(str(tmp_path / "n"))
    os.makedirs(n)
    good = _lines(tmp_path / "n" / "in.txt", 2)
    bad_input = n + b"/in_\xff.txt"
    shutil.copy(os.fsencode(str(good)), bad_input)
    common = ["--epsilon=5", f"--artifact={tiny_artifact_dir}"]
    before = _files(tmp_path)
    name = os.fsdecode  # argv as Python gives it: undecodable bytes as surrogate escapes
    _refused(capsys, "privatize", [f"--input={name(bad_input)}", f"--output={name(n)}/o_a"] + common,
             "--input", "in_\\xff.txt has bytes that are not UTF-8")
    _refused(capsys, "privatize", [f"--input={good}", f"--output={name(n + b'/out_' + bytes([0xfe]))}"] + common,
             "--output", "out_\\xfe has bytes that are not UTF-8")
    _refused(capsys, "privatize", [f"--input={good}", f"--output={name(n)}/o_b",
                                   f"--public-summary={name(n + b'/pub_' + bytes([0xfd]) + b'.json')}"] + common,
             "--public-summary", "pub_\\xfd.json has bytes that are not UTF-8")
    _refused(capsys, "calibrate", _calibrate(tiny_artifact_dir, name(n + b"/cal_" + bytes([0xfc]))),
             "--output", "cal_\\xfc has bytes that are not UTF-8")
    assert _files(tmp_path) == before


# --- F11: names longer than NAME_MAX once the suffixes are added ------------------------------------------

def test_f11_names_over_name_max_are_refused_before_the_run_and_named_as_such(tmp_path, tiny_artifact_dir, capsys):
    source = _lines(tmp_path / "in.txt", 2)
    common = [f"--input={source}", "--epsilon=5", f"--artifact={tiny_artifact_dir}"]
    before = _files(tmp_path)
    for length in (206, 213, 240, 250):  # the lock (+5) fits, Beam's beam-temp-<name>-errors-<32 hex> (+50) not
        _refused(capsys, "privatize", [f"--output={tmp_path}/{'y' * length}"] + common,
                 "is too long", "bytes, above the file system's limit of 255 bytes per file name (NAME_MAX)")
    # --public-summary of 252 bytes: its lock name is too long; said so, not "not a writable directory"
    err = _refused(capsys, "privatize", [f"--output={tmp_path}/o", f"--public-summary={tmp_path}/{'z' * 252}"]
                   + common, "--public-summary", "is too long", "NAME_MAX")
    assert "writable" not in err
    _refused(capsys, "calibrate", _calibrate(tiny_artifact_dir, f"{tmp_path}/{'c' * 252}"), "is too long")
    assert _files(tmp_path) == before
    # with --shuffle the shard writer writes .textdp-tmp-<32 hex>-<shard name> (+64 for text): counted too
    _refused(capsys, "privatize", [f"--output={tmp_path}/{'s' * 192}", "--shuffle"] + common,
             "a temporary file of the shuffle writer", "NAME_MAX")
    assert _files(tmp_path) == before
    # the longest names that fit run
    assert cli_main(["privatize", f"--output={tmp_path}/{'y' * 205}"] + common + RUNNER) == 0
    assert cli_main(["privatize", f"--output={tmp_path}/{'s' * 191}", "--shuffle"] + common + RUNNER) == 0


# --- F13: neighbours with a manifest listing absent table files --------------------------------------------

def test_f13_neighbours_refuses_a_manifest_listing_absent_table_files_before_computing(tmp_path, tiny_artifact_dir,
                                                                                     capsys):
    art = tmp_path / "artA"
    shutil.copytree(tiny_artifact_dir, art)
    manifest = json.load(open(art / "manifest.json", encoding="utf-8"))
    assert "neighbours" not in manifest and not os.path.exists(art / "neighbours_ids.npy")
    manifest["files"]["neighbours_ids.npy"] = dict(next(iter(manifest["files"].values())))
    (art / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    before = _files(tmp_path)
    code = cli_main(["neighbours", f"--artifact={art}", "--k=5"] + RUNNER)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("textdp neighbours: error: "), err
    assert "manifest.json lists neighbours_ids.npy" in err and "never overwritten" in err, err
    assert "rows" not in captured.err.replace(err, "")  # refused before computing: no progress line
    assert _files(tmp_path) == before


# --- the run's own lock file as an output -------------------------------------------------------------------

def test_an_output_at_a_lock_or_record_of_the_run_is_refused_naming_what_it_is(tmp_path, tiny_artifact_dir, capsys):
    source = _lines(tmp_path / "in.txt", 2)
    o = tmp_path / "o"
    common = [f"--input={source}", "--epsilon=5", f"--artifact={tiny_artifact_dir}", f"--output={o}/x"]
    before = _files(tmp_path)
    for name, said in (("x.lock", "the lock file this run holds for --output"),
                       (".textdp.lock", "the lock file this run holds for the directory"),
                       ("x.textdp-run.json", "the run record this run writes for --output")):
        err = _refused(capsys, "privatize", common + [f"--public-summary={o}/{name}"],
                       f"--public-summary {o}/{name}: {os.path.realpath(o)}/{name} is {said}")
        assert "already exists" not in err and "--overwrite" not in err, err
    assert _files(tmp_path) == before
