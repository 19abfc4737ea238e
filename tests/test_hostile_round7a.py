"""Round-7 hostile findings fixed on branch fix7a (issue 25): F8, F9, F2, F1/F14, F3, F4.
Real runs of the CLI on the local runner (FnApiRunner) over the real GloVe test artifact; nothing is mocked."""

import bz2
import glob
import gzip
import os
import shutil
import signal
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.cli import main as cli_main
from pipelines.jobs import _termination_signals
from tests.test_hostile_round6b import REVIEWS, _earlier_release, _input, _snapshot, signal_during_overwrite
from textdp.outputs import EARLIER_FOLDER_PREFIX, read_attached

RUNNER = "--runner=FnApiRunner"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def _run(artifact, *args) -> int:
    return cli_main(["privatize", "--epsilon=10", f"--artifact={artifact}", RUNNER, *args])



# --- F8/F9: the public summary belongs to its release ---------------------------------------------------------


def test_f8_overwrite_without_public_summary_removes_the_earlier_releases_public_summary(tmp_path, tiny_artifact_dir,
                                                                                        capsys):
    """The run record lists the public summary it wrote ("attached"); an --overwrite run without --public-summary
    moves it aside with the rest of the release, so no public summary certifies a release it does not describe."""
    source, output, pub = _input(tmp_path), f"{tmp_path}/o/p", f"{tmp_path}/pubs/pub.json"
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}", f"--public-summary={pub}") == 0
    assert read_attached(f"{output}.textdp-run.json") == [pub]
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}") == 2  # without --overwrite: refused
    assert "give --overwrite" in capsys.readouterr().err and os.path.isfile(pub)
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}", "--seed=0", "--overwrite") == 0
    assert not os.path.exists(pub) and read_attached(f"{output}.textdp-run.json") == []
    assert not glob.glob(f"{tmp_path}/pubs/{EARLIER_FOLDER_PREFIX}*")


def test_f9_overwrite_refuses_the_public_summary_of_another_release(tmp_path, tiny_artifact_dir, capsys):
    """A copy-pasted job line: release B with --overwrite onto release A's public summary is refused in one line
    (exit 2); A's public summary stays byte-identical. B's own public summary is replaced as before."""
    source, pub = _input(tmp_path), f"{tmp_path}/pubs/a.json"
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={tmp_path}/oa/a", f"--public-summary={pub}") == 0
    with open(pub, "rb") as handle:
        before = handle.read()
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={tmp_path}/ob/b", f"--public-summary={pub}",
                "--overwrite") == 2
    err = capsys.readouterr().err
    assert "is the public summary of another release" in err and len(err.strip().splitlines()) == 1
    with open(pub, "rb") as handle:
        assert handle.read() == before
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={tmp_path}/oa/a", f"--public-summary={pub}",
                "--overwrite") == 0


# --- F2: an input with no record at all ---------------------------------------------------------------------------



def test_f2_an_input_with_no_record_is_refused_before_the_run(tmp_path, tiny_artifact_dir, capsys):
    """A 0-byte file, an empty .gz and a 0-row Parquet file: refused before the run (exit 2), the earlier release
    untouched by --overwrite."""
    _, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "empty.txt.gz").write_bytes(gzip.compress(b""))
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), str(tmp_path / "empty.parquet"))
    for name in ("empty.txt", "empty.txt.gz", "empty.parquet"):
        capsys.readouterr()
        assert _run(tiny_artifact_dir, f"--input={tmp_path}/{name}", f"--output={output}", "--overwrite") == 2, name
        assert "none holds a record" in capsys.readouterr().err
        assert _snapshot(f"{tmp_path}/o") == before


def test_f2_a_run_that_read_no_record_exits_1_and_puts_the_earlier_release_back(tmp_path, tiny_artifact_dir, capsys):
    """An empty .bz2 is now seen empty by the launcher (R10-7: it reads each local file up to its first record):
    refused before the run, the earlier release untouched. An input whose every record fails (each line longer than
    --max-record-bytes): the run privatizes no record, exits 1 and --overwrite puts the earlier release back."""
    _, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    (tmp_path / "empty.txt.bz2").write_bytes(bz2.compress(b""))
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={tmp_path}/empty.txt.bz2", f"--output={output}", "--overwrite") == 2
    assert "none holds a record" in capsys.readouterr().err
    assert _snapshot(f"{tmp_path}/o") == before
    (tmp_path / "failing.txt").write_bytes(b"the president said\nour police were here\n")
    assert _run(tiny_artifact_dir, f"--input={tmp_path}/failing.txt", f"--output={output}", "--overwrite",
                "--max-record-bytes=8") == 1
    err = capsys.readouterr().err
    assert "no record was privatized" in err and "put back" in err, err
    assert {k: v for k, v in _snapshot(f"{tmp_path}/o").items() if not k.startswith(".textdp-failed-")} == before


# --- F14/F1: other termination signals; a leftover hidden folder --------------------------------------------------


def test_f14_the_catchable_termination_signals_are_handled_like_sigterm():
    assert {signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGXCPU} <= set(_termination_signals())


def test_f14_sigquit_during_an_overwrite_run_puts_the_earlier_release_back(tmp_path, tiny_artifact_dir):
    """Ctrl-\\ (SIGQUIT) once the pipeline is privatizing: exit 131, one line, the earlier release byte-identical.
    A real subprocess over 90,000 records, signalled after its first progress line."""
    before, code, err = signal_during_overwrite(tmp_path, tiny_artifact_dir, signal.SIGQUIT)
    assert code == 128 + signal.SIGQUIT, err
    assert "terminated (SIGQUIT)" in err and "the earlier run's files were put back" in err
    assert _snapshot(f"{tmp_path}/o") == before
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")


def test_f1_a_leftover_earlier_folder_is_refused_with_how_to_restore_it(tmp_path, tiny_artifact_dir, capsys):
    """What a SIGKILLed --overwrite run leaves: the release's files in .textdp-earlier-*. The next run on that
    output (with --overwrite or without) is refused in one line naming the folder and the mv that restores it;
    after that mv the release is whole again and runs go on."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    folder = f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}abc123"
    os.mkdir(folder)
    for name in before:
        if not name.endswith(".textdp-run.json"):
            shutil.move(f"{tmp_path}/o/{name}", f"{folder}/{name}")
    for extra in ([], ["--overwrite"]):
        capsys.readouterr()
        assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}", *extra) == 2
        err = capsys.readouterr().err
        assert folder in err and "mv" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(folder)  # nothing was moved
    subprocess.run(f"mv {folder}/* {tmp_path}/o/ && rmdir {folder}", shell=True, check=True)
    assert _snapshot(f"{tmp_path}/o") == before
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}", "--overwrite") == 0


# --- F3: an input that is an earlier run's output -----------------------------------------------------------------


def test_f3_an_input_glob_matching_an_earlier_runs_files_is_refused(tmp_path, tiny_artifact_dir, capsys):
    folder = tmp_path / "d"
    folder.mkdir()
    _input(folder, "a.txt")
    assert _run(tiny_artifact_dir, f"--input={folder}/*.txt", f"--output={folder}/p") == 0
    for pattern, extra in ((f"{folder}/*", ["--format=text"]), (f"{folder}/*.txt", [])):
        capsys.readouterr()
        assert _run(tiny_artifact_dir, f"--input={pattern}", f"--output={tmp_path}/o8/x", *extra) == 2
        err = capsys.readouterr().err
        assert "a file an earlier textdp run wrote" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(f"{tmp_path}/o8")


# --- F4: --output under /dev, /proc, /sys or at a device/FIFO -----------------------------------------------------


def test_f4_an_output_under_dev_or_at_a_fifo_is_refused(tmp_path, tiny_artifact_dir, capsys):
    source = _input(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for flag, value in (("--output", "/dev/null"), ("--output", "/dev/textdp-r7-test"), ("--output", str(fifo)),
                        ("--diagnostics-output", "/dev/null")):
        capsys.readouterr()
        args = [f"--output={tmp_path}/o/p"] if flag != "--output" else []
        assert _run(tiny_artifact_dir, f"--input={source}", f"{flag}={value}", *args) == 2, value
        err = capsys.readouterr().err
        assert "--dry-run" in err and len(err.strip().splitlines()) == 1
    assert not glob.glob("/dev/null-*") and not glob.glob("/dev/textdp-r7-test*")


def test_f1_after_a_sigkilled_overwrite_run_the_next_run_is_refused_and_the_mv_restores_the_release(
        tmp_path, tiny_artifact_dir, capsys):
    """The finding's own sequence: an --overwrite run SIGKILLed while privatizing (a real subprocess, killed after
    its first progress line), then a run without --overwrite: refused in one line naming the hidden folder (it used
    to run, exit 0, and overwrite the run record). The mv it names puts the earlier release back byte-identical."""
    source, output, before = _earlier_release(tmp_path, tiny_artifact_dir)
    big = _input(tmp_path, "big.txt", REVIEWS * 30000)
    env = dict(os.environ, TEXTDP_PROGRESS_INTERVAL="0.3")
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "privatize", f"--input={big}",
                                f"--output={output}", "--epsilon=10", "--overwrite", f"--artifact={tiny_artifact_dir}",
                                RUNNER], cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in process.stderr:
        if " records (" in line:
            process.kill()
            break
    process.communicate(timeout=120)
    folders = glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")
    assert len(folders) == 1
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={output}") == 2
    err = capsys.readouterr().err
    assert folders[0] in err and "mv" in err and len(err.strip().splitlines()) == 1
    subprocess.run(f"mv {folders[0]}/* {tmp_path}/o/ && rmdir {folders[0]}", shell=True, check=True)
    after = {k: v for k, v in _snapshot(f"{tmp_path}/o").items()  # the killed run's stale locks and Beam temp files
             if not k.endswith(".lock") and not k.startswith("beam-temp-")}
    assert after == before
