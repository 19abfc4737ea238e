"""Every job refuses bad input before it starts, fails in one line, and never destroys or lies (issue 13).

Each test is built from the exact case of issue 13 it names (items 1, 2, 8, 9, 10, 11 and
"Progress"), through the real command (``pipelines.cli.main``) on the local FnApiRunner and the
5,000-word artifact.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pipelines import jobs
from pipelines.cli import main as cli_main
from tests.conftest import REPO

RUNNER = ["--runner=FnApiRunner"]


def _lines(path, n, word="movie"):
    path.write_text("".join(f"a {word} line number {i}\n" for i in range(n)), encoding="utf-8")
    return path


def _strict(path):
    """JSON that any reader accepts: no Infinity or NaN literals."""
    def refuse(constant):
        raise AssertionError(f"{path} holds the non-JSON constant {constant}")

    return json.load(open(path, encoding="utf-8"), parse_constant=refuse)


def test_misspelled_flag_is_refused_before_anything_runs(tmp_path, small_artifact_dir, capsys):
    """Item 1: '--text-feild title' was a Beam warning and the field was released unprivatized."""
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"title": "a secret title", "body": "x"}) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "r"
    code = cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=5",
                     f"--artifact={small_artifact_dir}", "--text-feild", "title"] + RUNNER)
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        "textdp privatize: error: unrecognized argument --text-feild (did you mean --text-field?); "
        "see `textdp privatize --help` (nothing was run)"]
    assert not (tmp_path / "out").exists()
    for job in ("calibrate", "neighbours"):  # every job refuses what neither it nor Beam defines
        assert cli_main([job, "--output-dir=x", "--artifact=y"] + RUNNER) == 2
        assert "unrecognized argument --output-dir" in capsys.readouterr().err
    assert cli_main(["privatize", "--words=3", f"--input={source}", f"--output={output}", "--epsilon=5"]) == 2
    assert "unrecognized argument --words" in capsys.readouterr().err  # calibrate's flag is not privatize's
    assert cli_main(["privatize", "stray", f"--input={source}", f"--output={output}", "--epsilon=5"]) == 2
    assert "unexpected argument 'stray' (every textdp argument is a --flag)" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1", "1e7"])
def test_epsilon_must_be_finite_positive_and_bounded(tmp_path, small_artifact_dir, capsys, value):
    """Item 2: '--epsilon inf' released every word unchanged and wrote Infinity into the summary."""
    source = _lines(tmp_path / "in.txt", 3)
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o", f"--epsilon={value}",
                     f"--artifact={small_artifact_dir}"] + RUNNER)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("textdp privatize: error: --epsilon")
    assert not glob.glob(f"{tmp_path}/o*")


def test_a_vacuous_epsilon_runs_with_a_loud_warning_and_strict_json(tmp_path, small_artifact_dir, capsys):
    """Above 100 the bound protects nothing: the console and the summary say so. With --oov-policy keep
    the Amplifier's epsilon_0 is unbounded, and the report still parses as JSON (no Infinity)."""
    source = _lines(tmp_path / "in.txt", 5, word="zzqxw")
    output = f"{tmp_path}/o"
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=500", "--oov-policy=keep",
                     "--shuffle", f"--artifact={small_artifact_dir}"] + RUNNER) == 0
    captured = capsys.readouterr()
    assert "WARNING: epsilon 500 x the artifact's typical nearest-neighbour distance" in captured.err and "protects nothing" in captured.out
    summary = _strict(f"{output}-summary.json")
    assert len(summary["warnings"]) == 2 and "protects nothing" in summary["warnings"][0]
    assert summary["warnings"][1].startswith("this run changed no vocabulary word")  # at 500: none changed
    report = _strict(f"{output}-amplification.json")
    assert report["local"]["token_epsilon0"] == "inf"


def test_stale_shards_are_refused_and_overwrite_removes_every_file_of_the_earlier_run(tmp_path, small_artifact_dir,
                                                                                       capsys):
    """Item 8: a 2-shard run then a 1-shard run into the same prefix left the old shards, and the new
    summary's glob matched 2,029 records while it said 30."""
    source = _lines(tmp_path / "in.txt", 30)
    output = f"{tmp_path}/o"
    for shard in range(2):  # what a 2-worker run leaves behind
        with open(f"{output}-{shard:05d}-of-00002.txt", "w", encoding="utf-8") as handle:
            handle.write("old line\n" * 1000)
    with open(f"{output}-errors-00000.jsonl", "w", encoding="utf-8") as handle:
        handle.write("{}\n")
    with open(f"{output}.textdp-run.json", "w", encoding="utf-8") as handle:  # as that run's end left it
        json.dump({"textdp_run_record": 1, "files": ["o-00000-of-00002.txt", "o-00001-of-00002.txt",
                                                     "o-errors-00000.jsonl"]}, handle)
    argv = ["privatize", f"--input={source}", f"--output={output}", "--epsilon=5",
            f"--artifact={small_artifact_dir}"] + RUNNER
    assert cli_main(argv) == 2
    assert "already holds 3 file(s) of an earlier run" in capsys.readouterr().err
    assert cli_main(argv + ["--overwrite"]) == 0
    printed = capsys.readouterr().out
    pattern = next(line.split(None, 1)[1] for line in printed.splitlines() if line.startswith("output:"))
    lines = [line for path in glob.glob(pattern) for line in open(path, encoding="utf-8")]
    summary = _strict(f"{output}-summary.json")
    assert len(lines) == summary["records"]["out"] == 30
    assert not os.path.exists(f"{output}-00000-of-00002.txt") and not os.path.exists(f"{output}-00001-of-00002.txt")


def test_an_input_named_like_an_output_is_never_overwritten(tmp_path, small_artifact_dir, capsys):
    """Item 9: the input was overwritten when it had the name of an output shard."""
    source = _lines(tmp_path / "o-00000-of-00001.txt", 4)
    before = source.read_bytes()
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o", "--epsilon=5",
                     f"--artifact={small_artifact_dir}"] + RUNNER) == 2
    assert "which this run would overwrite" in capsys.readouterr().err
    assert source.read_bytes() == before
    summary_named = _lines(tmp_path / "p-summary.json", 1)
    assert cli_main(["privatize", f"--input={summary_named}", "--format=text", f"--output={tmp_path}/p",
                     "--epsilon=5", f"--artifact={small_artifact_dir}"] + RUNNER) == 2


def test_output_glob_matches_only_this_run_and_sibling_prefixes_are_protected(tmp_path, small_artifact_dir, capsys):
    """Item 10: '<out>-*-of-*.txt' also matched a sibling prefix such as 'news-2024-...'; and Beam's file
    sink deletes every '<prefix>-*-of-N' file before writing, so a sibling run's files would be lost."""
    sibling = tmp_path / "news-2024-00000-of-00001.txt"
    sibling.write_text("another run's output\n", encoding="utf-8")
    source = _lines(tmp_path / "in.txt", 3)
    argv = ["privatize", f"--input={source}", "--epsilon=5", f"--artifact={small_artifact_dir}"] + RUNNER
    assert cli_main(argv + [f"--output={tmp_path}/news"]) == 2
    assert "shares its prefix with 1 file(s) of another run" in capsys.readouterr().err
    assert sibling.read_text(encoding="utf-8") == "another run's output\n"
    assert cli_main(argv + [f"--output={tmp_path}/news-2025"]) == 0
    printed = capsys.readouterr().out
    pattern = next(line.split(None, 1)[1] for line in printed.splitlines() if line.startswith("output:"))
    assert sorted(glob.glob(pattern)) == [f"{tmp_path}/news-2025-00000-of-00001.txt"]
    assert _strict(f"{tmp_path}/news-2025-summary.json")["output"] == pattern
    assert sibling.exists()


def _corrupt_copy(source, tmp_path):
    copy = tmp_path / "artifact"
    shutil.copytree(source, copy)
    with open(copy / "vectors.npy", "r+b") as handle:
        handle.seek(1000)
        byte = handle.read(1)
        handle.seek(1000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    return str(copy)


def test_mistakes_are_refused_in_one_line_before_the_pipeline_starts(tmp_path, small_artifact_dir, capsys):
    """Item 11: a corrupted artifact and --seed -1 were found inside a worker: a 150-line traceback and
    empty beam-temp-* folders. Now: one line, exit 2, nothing written; the same convention for every job."""
    source = _lines(tmp_path / "in.txt", 3)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    corrupt = _corrupt_copy(small_artifact_dir, tmp_path)
    cases = [
        (["privatize", f"--input={source}", f"--output={out_dir}/o", "--epsilon=5", f"--artifact={corrupt}"],
         "vectors.npy"),
        (["privatize", f"--input={source}", f"--output={out_dir}/o", "--epsilon=5", "--seed=-1",
          f"--artifact={small_artifact_dir}"], "--seed must be an integer >= 0"),
        (["privatize", f"--output={out_dir}/o", "--epsilon=5"], "missing required flag --input"),
        (["privatize", f"--input={source}", f"--output={out_dir}/o", "--epsilon=five"], "invalid float value"),
        (["calibrate", f"--output={out_dir}/c", f"--artifact={corrupt}"], "vectors.npy"),
        (["calibrate", f"--output={out_dir}/c", "--seed=-3", f"--artifact={small_artifact_dir}"], "--seed"),
        (["neighbours", f"--artifact={corrupt}"], "vectors.npy"),
        (["neighbours", f"--artifact={small_artifact_dir}", "--k=0"], "--k must be between"),
        (["build-index", f"--output={small_artifact_dir}", "--vocab-size=10"], "exists"),
        (["build-index", "--trees=x", f"--output={out_dir}/b"], "invalid int value"),
    ]
    for argv, message in cases:
        code = cli_main(argv + (RUNNER if argv[0] != "build-index" else []))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, argv
        assert len(err) == 1 and err[0].startswith(f"textdp {argv[0]}: error: ") and message in err[0], (argv, err)
    assert os.listdir(out_dir) == []


def _register_misbehaving_job(monkeypatch):
    from tests import job_fixtures

    monkeypatch.setitem(jobs.JOBS, "misbehave", job_fixtures.JOB)


def test_a_worker_failure_ends_in_one_line_and_removes_the_temporary_folders(tmp_path, monkeypatch, capsys):
    """Item 11: errors that can only happen on a worker end with one line (not a traceback), exit 1, and
    the run's beam-temp-* folders are removed; folders that existed before the run are left alone."""
    _register_misbehaving_job(monkeypatch)
    (tmp_path / "beam-temp-of-someone-else").mkdir()
    code = jobs.run_job("misbehave", [f"--misbehave-out-dir={tmp_path}", "--misbehave-mode=fail"] + RUNNER)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith("textdp misbehave: error: the pipeline failed: ")
    assert "worker step failed on purpose" in err[0] and "Traceback" not in err[0]
    assert sorted(os.listdir(tmp_path)) == ["beam-temp-of-someone-else"]


def test_ctrl_c_prints_one_line_and_leaves_no_temporary_folder(tmp_path):
    """Item 11: Ctrl-C (SIGINT) while a worker is busy: one line, exit 130, no beam-temp-* left behind."""
    code = ("import sys; from pipelines import jobs; from tests import job_fixtures; "
            "jobs.JOBS['misbehave'] = job_fixtures.JOB; "
            f"sys.exit(jobs.run_job('misbehave', ['--misbehave-out-dir={tmp_path}', '--misbehave-mode=wait', '--runner=FnApiRunner']))")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "started").exists():
        assert time.time() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert err.strip().splitlines() == ["textdp misbehave: interrupted; the run's temporary files were removed"]
    assert not [name for name in os.listdir(tmp_path) if name.startswith("beam-temp-")]


def test_progress_lines_for_a_local_run(tmp_path, small_artifact_dir, imdb_rows, capsys, monkeypatch):
    """Progress: records done of the total, tokens, rate and time left, as plain lines when stderr is
    not a terminal (every TEXTDP_PROGRESS_INTERVAL seconds; 30 by default), ending with the totals."""
    monkeypatch.setenv("TEXTDP_PROGRESS_INTERVAL", "0.5")
    source = tmp_path / "reviews.txt"
    source.write_text("".join(row["text"].replace("\n", " ") + "\n" for row in imdb_rows[:300]), encoding="utf-8")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o", "--epsilon=5",
                     f"--artifact={small_artifact_dir}"] + RUNNER) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("textdp privatize: ")]
    assert lines, "no progress line"
    assert lines[-1].startswith("textdp privatize: 300 / 300 records (100%)")
    tokens = _strict(f"{tmp_path}/o-summary.json")["tokens"]["total"]
    assert f"{tokens:,} tokens" in lines[-1] and "elapsed" in lines[-1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_beam_noise_does_not_reach_the_user(tmp_path, small_artifact_dir):
    """Progress: Beam's own warnings ('Discarding unparseable args', 'No semi_persistent_directory' from
    worker processes) are hidden at the default level; the command prints its report lines only."""
    source = _lines(tmp_path / "in.txt", 50)
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", f"--input={source}",
                             f"--output={tmp_path}/o", "--epsilon=5", f"--artifact={small_artifact_dir}",
                             "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
                            cwd=REPO, capture_output=True, text=True, timeout=500)
    assert result.returncode == 0, result.stderr
    for noise in ("Discarding unparseable args", "semi_persistent_directory", "WARNING", "Traceback"):
        assert noise not in result.stderr and noise not in result.stdout


def test_blas_threads_default_from_the_runner_and_its_workers():
    """Issue 17, deliverable 1: cores / worker processes per machine, decided from the options."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.flags import WorkerResourceOptions

    def threads(*argv):
        return PipelineOptions(list(argv)).view_as(WorkerResourceOptions).worker_config().threads()

    cores = os.cpu_count() or 1
    assert threads() == cores  # the in-process local runner: one worker
    assert threads("--direct_num_workers=2", "--direct_running_mode=multi_processing") == max(1, cores // 2)
    assert threads("--runner=DataflowRunner") == 1  # one SDK process per vCPU
    assert threads("--runner=DataflowRunner", "--experiments=no_use_multiple_sdk_containers") == cores
    assert threads("--runner=FlinkRunner", "--sdk_worker_parallelism=4") == max(1, cores // 4)
    assert threads("--blas-threads=3", "--direct_num_workers=8") == 3


def test_progress_lines_for_calibrate_and_neighbours(tmp_path, small_artifact_dir, capsys, monkeypatch):
    """Progress for the other long jobs: words calibrated of the sample, vocabulary rows of the table."""
    monkeypatch.setenv("TEXTDP_PROGRESS_INTERVAL", "0.3")
    assert cli_main(["calibrate", f"--artifact={small_artifact_dir}", "--words=6", "--samples=50", "--epsilons=5",
                     f"--output={tmp_path}/cal"] + RUNNER) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("textdp calibrate: ")]
    assert lines and lines[-1].startswith("textdp calibrate: 6 / 6 words (100%), 300 draws")
    copy = tmp_path / "artifact"
    shutil.copytree(small_artifact_dir, copy)
    assert cli_main(["neighbours", f"--artifact={copy}", "--k=5"] + RUNNER) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("textdp neighbours: ")]
    assert lines and lines[-1].startswith("textdp neighbours: 5,000 / 5,000 rows (100%)")
