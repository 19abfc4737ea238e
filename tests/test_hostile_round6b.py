"""Round-6 hostile findings fixed on branch fix6b (issue 25): F14 (with F8 and F15), F1, F13, F16, F17, F18, F6, F9.
Real runs of the CLI on the local runner (FnApiRunner) over the real 300-word GloVe artifact; nothing is mocked."""

import bz2
import glob
import gzip
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import textdp
from pipelines.cli import main as cli_main
from pipelines.jobs import RUNNER_DOWNLOADS, _reachable
from tests.custom_mechanism import CappedExponential
from tests.test_neighbours import copy_artifact, run_neighbours
from textdp.errors import TextdpError
from textdp.mechanisms import probe_ids
from textdp.outputs import EARLIER_FOLDER_PREFIX, FAILED_FOLDER_PREFIX

RUNNER = "--runner=FnApiRunner"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REVIEWS = ["The pasta was cold and the waiter forgot our drinks.", "A fine hotel, the staff were kind.",
           "We would not go back to that place again."]


class LateFailure(CappedExponential):
    """Passes the launcher's trial (its 64 vocabulary ids, textdp.mechanisms.probe_ids), then fails on every worker batch: a
    failure found only once the pipeline runs."""

    name = "r6b-late-failure"

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        if not np.isin(ids, probe_ids(self.vocab_size)).all():  # the trial's ids (and its band re-draws)
            raise RuntimeError("a worker failure")
        return super().privatize_ids(ids, rng)


def _input(tmp_path, name="in.txt", lines=REVIEWS) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _snapshot(directory) -> dict:
    """Every file under ``directory`` by name and bytes; the run record by the files it lists."""
    found = {}
    for path in sorted(glob.glob(f"{directory}/**", recursive=True)):
        if os.path.isfile(path):
            name = os.path.relpath(path, directory)
            with open(path, "rb") as handle:
                data = handle.read()
            found[name] = json.loads(data)["files"] if name.endswith(".textdp-run.json") else data
    return found


def _earlier_release(tmp_path, artifact) -> tuple:
    source = _input(tmp_path)
    output = f"{tmp_path}/o/p"
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10",
                     f"--artifact={artifact}", RUNNER]) == 0
    before = _snapshot(f"{tmp_path}/o")
    assert any(name.startswith("p-00000-of-") for name in before) and "p-summary.json" in before
    return source, output, before


def signal_during_overwrite(tmp_path, artifact, signum) -> tuple:
    """Run the CLI with --overwrite over an earlier release (a real subprocess, 90,000 records) and send ``signum``
    once it is privatizing (after its first progress line, TEXTDP_PROGRESS_INTERVAL 0.3 s): (the earlier release's
    snapshot, exit code, stderr). Shared by the round-6 (SIGTERM) and round-7 (SIGQUIT) tests."""
    _, output, before = _earlier_release(tmp_path, artifact)
    big = _input(tmp_path, "big.txt", REVIEWS * 30000)
    env = dict(os.environ, TEXTDP_PROGRESS_INTERVAL="0.3")
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "privatize", f"--input={big}",
                                f"--output={output}", "--epsilon=10", "--overwrite", f"--artifact={artifact}",
                                RUNNER], cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if " records (" in line:
            process.send_signal(signum)
            break
    _, rest = process.communicate(timeout=120)
    return before, process.returncode, "".join(lines) + rest


# --- F14: --overwrite keeps the earlier release until the run succeeded ----------------------------------------


def test_f14_a_worker_failure_with_overwrite_leaves_the_earlier_release_byte_identical(tmp_path, tiny_artifact_dir,
                                                                                        capsys):
    """The earlier release used to be deleted before the pipeline started, so a failure on the workers left an
    empty directory. Now it is moved aside and put back: every file byte-identical, the run record listing the same
    files, no hidden folder left, exit 1 with one line saying so."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    capsys.readouterr()
    code = cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--overwrite",
                     f"--artifact={tiny_artifact_dir}", RUNNER, f"--mechanism={__name__}:LateFailure"])
    err = capsys.readouterr().err
    assert code == 1
    assert "the earlier run's files were put back" in err and "RuntimeError" in err
    assert _snapshot(f"{tmp_path}/o") == before
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")


def test_f14_a_run_that_releases_nothing_with_overwrite_puts_the_earlier_release_back(tmp_path, tiny_artifact_dir,
                                                                                      capsys):
    """A run that ends with exit 1 after the pipeline (every record failed: "no record was privatized") used to
    replace the earlier release with an empty shard; now the earlier release is put back whole, and the finished
    run's files (its error records and summary say why it failed) are kept in a hidden folder the line names."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    capsys.readouterr()
    code = cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--overwrite",
                     "--max-record-bytes=5", f"--artifact={tiny_artifact_dir}", RUNNER])
    err = capsys.readouterr().err
    assert code == 1 and "no record was privatized" in err and "put back" in err
    assert _snapshot(f"{tmp_path}/o") == before
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")
    kept = glob.glob(f"{tmp_path}/o/{FAILED_FOLDER_PREFIX}*")  # the finished run's own files, for the operator
    assert len(kept) == 1 and kept[0] in err
    # R9-2: the line says the files it named are now in that folder (their names hold the earlier release again)
    assert f"this run's files named above (its error records and summary) are now in {kept[0]}" in err
    with open(f"{kept[0]}/p-summary.json") as handle:
        assert json.load(handle)["records"]["out"] == 0


def test_f14_sigterm_during_an_overwrite_run_puts_the_earlier_release_back(tmp_path, tiny_artifact_dir):
    """SIGTERM (what timeout and schedulers send) once the pipeline is privatizing: exit 143, one line, the earlier
    release byte-identical. A real subprocess of the CLI over 90,000 records, signalled after its first progress
    line (TEXTDP_PROGRESS_INTERVAL 0.3 s)."""
    before, code, err = signal_during_overwrite(tmp_path, tiny_artifact_dir, signal.SIGTERM)
    assert code == 143, err
    assert "terminated (SIGTERM)" in err and "the earlier run's files were put back" in err
    assert _snapshot(f"{tmp_path}/o") == before
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")


def test_f14_a_successful_overwrite_replaces_the_release_and_leaves_no_hidden_folder(tmp_path, tiny_artifact_dir):
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    _input(tmp_path, lines=REVIEWS[:2])
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--overwrite",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 0
    after = _snapshot(f"{tmp_path}/o")
    assert set(after) == set(before)
    assert json.loads(after["p-summary.json"])["records"]["in"] == 2
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")


# --- F8: santext on an angular table, refused before the run everywhere ------------------------------------------


@pytest.fixture(scope="module")
def angular_tiny_artifact(tiny_artifact_dir, tmp_path_factory):
    path = copy_artifact(tiny_artifact_dir, tmp_path_factory.mktemp("r6b-angular") / "glove300")
    run_neighbours(path, "--k=5", "--metric=angular")
    return path


@pytest.mark.parametrize("mechanism", ["santext", "santext+"])
def test_f8_santext_on_an_angular_table_is_refused_before_the_run(mechanism, tmp_path, tiny_artifact_dir,
                                                                 angular_tiny_artifact, capsys):
    """It failed on the workers (after --overwrite had deleted the earlier release); the table's metric is in the
    manifest, and the mechanism declares the one it needs (TABLE_METRIC): CLI exit 2, nothing touched; the API and
    transforms.Privatize raise TextdpError (the Privatizer raised a bare ValueError, the transform built)."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    capsys.readouterr()
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=1", "--overwrite",
                     f"--artifact={angular_tiny_artifact}", RUNNER, f"--mechanism={mechanism}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "euclidean distance" in err[0] and "'angular'" in err[0]
    assert _snapshot(f"{tmp_path}/o") == before
    with pytest.raises(TextdpError, match="'angular'"):
        textdp.Privatizer(epsilon=1, mechanism=mechanism, artifact=angular_tiny_artifact)
    from textdp.transforms import Privatize

    with pytest.raises(TextdpError, match="'angular'"):
        Privatize(epsilon=1, mechanism=mechanism, artifact=angular_tiny_artifact)


# --- F15: a runner that cannot start ------------------------------------------------------------------------------


def test_f15_portable_runner_without_job_endpoint_is_refused_before_anything(tmp_path, tiny_artifact_dir, capsys):
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    capsys.readouterr()
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--overwrite",
                     f"--artifact={tiny_artifact_dir}", "--runner=PortableRunner"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --job_endpoint" in err[0]
    assert _snapshot(f"{tmp_path}/o") == before


@pytest.mark.parametrize("runner", sorted(RUNNER_DOWNLOADS))
def test_f15_a_runner_whose_binary_cannot_be_downloaded_is_refused_before_anything(runner, tmp_path,
                                                                                   tiny_artifact_dir, capsys):
    """Prism/Flink/Spark download a binary or a job-server jar when none is given or cached; with no route to its
    host they failed after --overwrite had deleted the release. Only where the host is unreachable (as here)."""
    what, host, flag = RUNNER_DOWNLOADS[runner]
    if _reachable(host, 3.0):
        pytest.skip(f"{host} is reachable: the runner would download {what}")
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    capsys.readouterr()
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--overwrite",
                     f"--artifact={tiny_artifact_dir}", f"--runner={runner}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "not reachable" in err[0]
    assert _snapshot(f"{tmp_path}/o") == before


# --- F1 / F13: what an --input glob matches -----------------------------------------------------------------------


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_f1_one_file_matched_twice_is_refused(link, tmp_path, tiny_artifact_dir, capsys):
    """Each record was released once per name (fresh noise each time, composing) with the per-record claim
    unchanged; now refused before the run, naming both names."""
    directory = tmp_path / "d"
    directory.mkdir()
    source = _input(directory, "a.txt")
    (os.symlink if link == "symlink" else os.link)(source if link == "hard link" else "a.txt", str(directory / "b.txt"))
    assert cli_main(["privatize", f"--input={directory}/*.txt", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matches one file twice" in err[0] and "b.txt" in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


@pytest.mark.parametrize("kind", ["dangling", "looping"])
def test_f13_a_dangling_or_looping_symlink_matched_by_the_glob_is_refused(kind, tmp_path, tiny_artifact_dir, capsys):
    """Beam's match skips such a name silently and the run said reconciled: true; now refused, naming it."""
    directory = tmp_path / "d"
    directory.mkdir()
    _input(directory, "a.txt")
    bad = directory / f"{kind}.txt"
    os.symlink(str(tmp_path / "nonexistent") if kind == "dangling" else str(bad), str(bad))
    assert cli_main(["privatize", f"--input={directory}/*.txt", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{kind}.txt" in err[0] and "cannot be read" in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


# --- F16: an unexpanded ~ ------------------------------------------------------------------------------------------


def test_f16_an_output_starting_with_a_tilde_is_refused(tmp_path, tiny_artifact_dir, capsys, monkeypatch):
    """--output=~/x (bash expands no tilde after =) created a directory named ~ in the working directory."""
    source = _input(tmp_path)
    monkeypatch.chdir(tmp_path)
    for flag in ("--output", "--public-summary"):
        extra = [f"--output={tmp_path}/o/p"] if flag != "--output" else []
        assert cli_main(["privatize", f"--input={source}", f"{flag}=~/r6b/p", "--epsilon=10", *extra,
                         f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "starts with ~" in err[0]
        assert not os.path.exists(tmp_path / "~")


# --- F17 / F18: the first bytes of each input, before the run ------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True])
def test_f17_a_windows_1252_input_is_refused_before_the_run_naming_the_offset(compressed, tmp_path, tiny_artifact_dir,
                                                                             capsys):
    """It ran the whole job and then failed (every record undecodable). Refused before the run naming the byte
    offset, never the bytes; a UTF-8 file with one undecodable line still runs (tests/test_privatize_pipeline.py)."""
    data = b"".join(f"\u201c{line}\u201d caf\u00e9\n".encode("cp1252") for line in REVIEWS)
    path = tmp_path / ("in.txt.gz" if compressed else "in.txt")
    path.write_bytes(gzip.compress(data) if compressed else data)
    assert cli_main(["privatize", f"--input={path}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not UTF-8" in err[0] and "offset 0" in err[0] and "iconv" in err[0]
    assert "pasta" not in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


@pytest.mark.parametrize("content", ["plain", "bzip2"])
def test_f18_a_file_whose_gz_suffix_lies_is_refused_before_the_run(content, tmp_path, tiny_artifact_dir, capsys):
    data = ("\n".join(REVIEWS) + "\n").encode()
    path = tmp_path / "in.txt.gz"
    path.write_bytes(bz2.compress(data) if content == "bzip2" else data)
    assert cli_main(["privatize", f"--input={path}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "named as gzip data but its first bytes are not" in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


# --- F6: streaming's own outputs, by real path -------------------------------------------------------------------


def test_f6_streaming_output_through_a_symlinked_directory_inside_the_watch_is_refused(tmp_path, tiny_artifact_dir,
                                                                                      capsys):
    watched = tmp_path / "s"
    watched.mkdir()
    _input(watched, "in.txt")
    os.symlink(str(watched), str(tmp_path / "s2"))
    assert cli_main(["privatize", "--streaming", f"--input={watched}/*.txt", f"--output={tmp_path}/s2/out",
                     "--epsilon=10", f"--artifact={tiny_artifact_dir}", RUNNER, "--window-size=5",
                     "--poll-interval=2", "--streaming-stop-after=30"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would match this job's own output files" in err[0]
    assert sorted(os.listdir(watched)) == ["in.txt"]


# --- F9: JSONL numbers a float64 cannot hold ----------------------------------------------------------------------


def test_f9_a_decimal_beyond_float64_is_an_error_record_never_rounded(tmp_path, tiny_artifact_dir):
    """0.1000000000000000055511151231257827 came back as 0.1, 12345678901234567.89 as 1.2345678901234568e16, with
    no error. Now such a record is an unsupported_number error record (no value quoted); numbers a float64 holds
    exactly (1.10, 1e5) pass as their values."""
    lines = ['{"id": 1, "a": 1.10, "b": 1e5, "text": "the pasta was cold"}',
             '{"id": 2, "f": 0.1000000000000000055511151231257827, "text": "the pasta was cold"}',
             '{"id": 3, "price": 12345678901234567.89, "text": "the pasta was cold"}']
    source = _input(tmp_path, "in.jsonl", lines)
    output = f"{tmp_path}/o/p"
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10",
                     "--max-failed-fraction=1", f"--artifact={tiny_artifact_dir}", RUNNER]) == 0
    released = [json.loads(line) for f in sorted(glob.glob(f"{output}-*-of-*.jsonl")) for line in open(f)]
    assert [(r["id"], r["a"], r["b"]) for r in released] == [(1, 1.1, 100000.0)]
    errors = [json.loads(line) for f in sorted(glob.glob(f"{output}-errors-*.jsonl")) for line in open(f)]
    assert sorted((e["position"], e["reason"]) for e in errors) == [(2, "unsupported_number"), (3, "unsupported_number")]
    assert all("55511" not in json.dumps(e) and "4567" not in json.dumps(e) for e in errors)
