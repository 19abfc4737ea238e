"""Issue 25 item 8: mistakes in the environment get one line before the run, never a traceback.

Real runs of the ``textdp`` command in subprocesses (so that a signal can reach them) and in-process
through ``pipelines.cli.main``; nothing is mocked.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

import textdp
from benchmarks.harness import REPO
from pipelines.cli import main as cli_main
from tests.gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (pytest fixtures)


def _textdp(args, env):
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli"] + args, cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cache_under_a_file_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(blocker / "cache"))
    code = cli_main(["privatize", "--input", os.path.join(REPO, "examples", "reviews.txt"), "--output",
                     str(tmp_path / "out" / "x"), "--epsilon", "10", "--runner", "FnApiRunner"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "cannot hold the default artifact" in err and "TEXTDP_CACHE_DIR" in err
    assert "Traceback" not in err
    try:
        textdp.Privatizer(epsilon=5)
    except textdp.TextdpError as exc:
        assert "TEXTDP_CACHE_DIR" in str(exc)
    else:
        raise AssertionError("the API built a Privatizer without a usable cache")


def test_ctrl_c_while_the_default_artifact_builds(tmp_path):
    env = dict(os.environ, TEXTDP_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    out = tmp_path / "out"
    process = _textdp(["privatize", "--input", os.path.join(REPO, "examples", "reviews.txt"), "--output",
                       str(out / "x"), "--epsilon", "10", "--runner", "FnApiRunner"], env)
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline:  # wait until the build has started
        line = process.stderr.readline()
        seen += line
        if "building the default artifact" in line or not line:
            break
    assert "building the default artifact" in seen
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    rest_out, rest_err = process.communicate(timeout=120)
    err = seen + rest_err
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "interrupted before the run started" in err
    artifacts = tmp_path / "cache" / "artifacts"
    leftovers = [name for name in os.listdir(artifacts) if not name.endswith(".lock")] if artifacts.exists() else []
    assert leftovers == []  # no half-built artifact, no staging folder
    assert not out.exists() or os.listdir(out) == []


def test_gcs_preflight_refuses_in_seconds(gcs_emulator, gcs_bucket, monkeypatch):
    """gs:// with no route, a missing bucket or no credentials: refused at once, not after 2 minutes of retries."""
    from textdp.artifact import gcs

    gcs.preflight([f"gs://{gcs_bucket}/corpus-*.txt"], writes=True)  # reachable (the emulator): no error
    with pytest.raises(textdp.TextdpError, match="does not exist"):
        gcs.preflight(["gs://textdp-no-such-bucket/x.txt"], writes=False)
    with socket.socket() as closed:  # a local port with nothing listening: connection refused
        closed.bind(("localhost", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://localhost:{port}")
    started = time.monotonic()
    with pytest.raises(textdp.TextdpError, match="could not be reached"):
        gcs.preflight([f"gs://{gcs_bucket}/x.txt"], writes=False, timeout=5)
    assert time.monotonic() - started < 30


def test_gcs_output_without_credentials_is_refused_before_any_request(tmp_path, monkeypatch):
    from textdp.artifact import gcs

    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google.auth must not probe a metadata server from a test
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    with pytest.raises(textdp.TextdpError, match="needs Google Cloud credentials"):
        gcs.preflight(["gs://textdp-some-bucket/out/x"], writes=True)


# Permission checks bind root only without CAP_DAC_OVERRIDE: setpriv drops it for the child, so that
# an unreadable input and a read-only output directory behave for the test as for an ordinary user.
WITHOUT_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps",
               "-dac_override,-dac_read_search"]


def _refused(args, tiny_artifact_dir, tmp_path, prefix=()):
    env = dict(os.environ, TEXTDP_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(list(prefix) + [sys.executable, "-m", "pipelines.cli", "privatize", "--epsilon", "5",
                                          "--artifact", tiny_artifact_dir, "--runner", "FnApiRunner"] + args,
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (util-linux)")
def test_unreadable_input_and_read_only_output_directory_are_refused(tiny_artifact_dir, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("a private line\n")
    secret.chmod(0)
    err = _refused(["--input", str(secret), "--output", str(tmp_path / "o" / "x")], tiny_artifact_dir, tmp_path,
                   WITHOUT_DAC)
    assert "cannot be read (Permission denied)" in err and "private" not in err
    readable = tmp_path / "in.txt"
    readable.write_text("a line\n")
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    err = _refused(["--input", str(readable), "--output", str(locked / "x")], tiny_artifact_dir, tmp_path, WITHOUT_DAC)
    assert "is not a writable directory (Permission denied)" in err
    assert os.listdir(locked) == []


def test_directory_fifo_and_file_parent_are_refused_before_the_run(tiny_artifact_dir, tmp_path):
    folder = tmp_path / "folder.txt"
    folder.mkdir()
    (folder / "a.txt").write_text("one line\n")
    err = _refused(["--input", str(folder), "--format", "text", "--output", str(tmp_path / "o" / "x")],
                   tiny_artifact_dir, tmp_path)
    assert "is a directory, not a file" in err
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    err = _refused(["--input", str(fifo), "--output", str(tmp_path / "o" / "y")], tiny_artifact_dir, tmp_path)
    assert "is not a regular file" in err  # and it returned: nothing opened the FIFO (that would hang)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    err = _refused(["--input", str(folder / "a.txt"), "--output", str(blocker / "x")], tiny_artifact_dir, tmp_path)
    assert "is a file, not a directory" in err
    err = _refused(["--input", str(folder / "a.txt"), "--output", str(blocker / "sub" / "x")], tiny_artifact_dir,
                   tmp_path)
    assert "not a writable directory" in err
    assert blocker.read_text() == "x"


def test_privatize_with_unreachable_cloud_storage_is_refused_in_seconds(tiny_artifact_dir, tmp_path):
    with socket.socket() as closed:
        closed.bind(("localhost", 0))
        port = closed.getsockname()[1]
    env = dict(os.environ, STORAGE_EMULATOR_HOST=f"http://localhost:{port}", TEXTDP_CACHE_DIR=str(tmp_path / "c"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", "--epsilon", "5", "--artifact",
                           tiny_artifact_dir, "--input", "gs://textdp-bucket/corpus-*.txt", "--output",
                           str(tmp_path / "o" / "x"), "--runner", "FnApiRunner"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "could not be reached" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert time.monotonic() - started < 60  # was two minutes of retries, then a traceback
