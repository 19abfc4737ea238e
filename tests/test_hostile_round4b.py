"""Issue 25, fourth hostile round, output guard and runtime findings (N5, N12, N13, N14, N8, N7, N9, N10,
N1 and the '--unk-token <rare>' item of /work/prompts/redteam4-findings.md).

Real components throughout: the lock decision code of textdp/outputs.py against real processes (a
subprocess holding a lock, a killed one, a write that the kernel refuses), the command on the FnApiRunner,
transforms.Privatize in a real pipeline, the 300-word GloVe fixture of tests/conftest.py. Lock files with
another PID namespace or boot id are written by hand (the decision code that reads them is the real one).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines.cli import main as cli_main
from tests.conftest import REPO

RUNNER = ["--runner=FnApiRunner"]
SECRET = "zyxwvut"


def _guard(tmp_path, name="x"):
    from textdp.outputs import OutputGuard

    guard = OutputGuard("privatize", False, os.path.exists, lambda pattern: [])
    prefix = guard.prefix("--output", f"{tmp_path}/{name}")
    guard.sharded("--output", "the records", prefix, "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]",
                  ".txt", ("-00000-of-00001",), (f"{prefix}-*-of-*.txt",))
    assert guard.check() == []
    return guard


HOLDER = textwrap.dedent("""
    import glob, os, sys, time
    sys.path.insert(0, {repo!r})
    from textdp.outputs import OutputGuard
    guard = OutputGuard("privatize", False, os.path.exists, lambda pattern: [])
    prefix = guard.prefix("--output", {prefix!r})
    guard.sharded("--output", "the records", prefix, "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]",
                  ".txt", ("-00000-of-00001",), (prefix + "-*-of-*.txt",))
    guard.check()
    guard.acquire()
    print("held", flush=True)
    time.sleep(120)
""")


def _identity_line(boot, namespace, start="", token="00"):
    return f"textdp-lock 2 boot={boot} pidns={namespace} start={start} token={token}\n"


# --- N5: a process identity that holds across PID namespaces and reboots ----------------------------------

def test_n5_a_live_holder_refuses_a_killed_one_is_stale_and_another_namespace_or_boot_is_never_removed(tmp_path):
    from textdp.errors import TextdpError
    from textdp.outputs import process_identity

    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO), prefix=f"{tmp_path}/x")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = tmp_path / "x.lock"
        content = lock.read_text(encoding="utf-8")
        assert f"pid {holder.pid} on {socket.gethostname()}" in content and "pidns=pid:[" in content
        with pytest.raises(TextdpError, match="is being written by another textdp run"):  # alive: refused
            _guard(tmp_path).acquire()
        assert lock.read_text(encoding="utf-8") == content
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding its locks: no release
        holder.wait()
    guard = _guard(tmp_path)
    guard.acquire()  # same host, boot and namespace, the pid gone: provably stale, removed and said so
    assert any("removed the stale lock file" in note and str(tmp_path / "x.lock") in note for note in guard.notes)
    guard.release()
    assert not (tmp_path / "x.lock").exists()

    boot, namespace, _ = process_identity()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first = f"textdp privatize, pid {dead.pid} on {socket.gethostname()}, since 2026-01-01T00:00:00Z\n"
    for identity, why in ((_identity_line(boot, "pid:[1]"), "another PID namespace"),
                          (_identity_line("0000-other-boot", namespace), "reboot"),
                          ("", "without a process identity")):
        (tmp_path / "x.lock").write_text(first + identity, encoding="utf-8")
        with pytest.raises(TextdpError) as refused:
            _guard(tmp_path).acquire()
        message = str(refused.value)
        assert why in message and f"remove {tmp_path}/x.lock" in message and "check that no textdp run" in message
        assert (tmp_path / "x.lock").read_text(encoding="utf-8") == first + identity  # never removed

    # a live pid that is another process (its start time differs): the pid was reused, the lock is stale
    (tmp_path / "x.lock").write_text(f"textdp privatize, pid 1 on {socket.gethostname()}, since x\n"
                                     + _identity_line(boot, namespace, start="999999999999"), encoding="utf-8")
    reused = _guard(tmp_path)
    if os.path.exists("/proc/1/stat"):
        reused.acquire()
        assert reused.notes and "pid 1 on" in reused.notes[0]
        reused.release()


def test_n5_release_removes_only_the_lock_this_run_wrote(tmp_path):
    guard = _guard(tmp_path)
    guard.acquire()
    lock = tmp_path / "x.lock"
    other = f"textdp privatize, pid 4242 on {socket.gethostname()}, since 2026-01-01T00:00:00Z\n" + _identity_line(
        "b", "pid:[2]", "7", "abcd")
    os.remove(lock)  # ours was removed (by hand, or as stale by another namespace's textdp) and another run took it
    lock.write_text(other, encoding="utf-8")
    guard.release()
    assert lock.read_text(encoding="utf-8") == other  # the other run's lock stays
    os.remove(lock)
    mine = _guard(tmp_path)
    mine.acquire()
    mine.release()
    assert not lock.exists()


# --- N13: a user's file at <output>.lock ------------------------------------------------------------------

def test_n13_a_file_that_is_not_textdps_lock_is_refused_without_quoting_it(tmp_path, tiny_artifact_dir, capsys):
    source = tmp_path / "in.txt"
    source.write_text("the city\n", encoding="utf-8")
    poetry = tmp_path / "proj" / "poetry.lock"
    poetry.parent.mkdir()
    poetry.write_text(f"# This file is automatically @generated by Poetry {SECRET}\n[[package]]\n", encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/proj/poetry", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}"] + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"a file that is not textdp's lock is at {poetry}: choose another --output" in err
    assert SECRET not in err and "Poetry" not in err and "another textdp run" not in err
    assert sorted(os.listdir(poetry.parent)) == ["poetry.lock"] and SECRET in poetry.read_text(encoding="utf-8")


# --- N14: a lock that cannot be written; an empty lock ----------------------------------------------------

def test_n14_a_lock_the_disk_refuses_is_removed_with_one_line_and_an_empty_lock_is_refused_with_the_hint(tmp_path):
    from textdp.errors import TextdpError

    script = textwrap.dedent(f"""
        import os, resource, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from textdp.errors import TextdpError
        from tests.test_hostile_round4b import _guard
        import pathlib
        guard = _guard(pathlib.Path({str(tmp_path)!r}))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))  # every write: EFBIG, as disk full
        try:
            guard.acquire()
        except TextdpError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.count("\n") == 1 and "its lock file" in out.stdout and "could not be written" in out.stdout
    assert not (tmp_path / "x.lock").exists()  # removed: it would refuse every later run
    (tmp_path / "x.lock").write_bytes(b"")  # a crash between the create and the write
    with pytest.raises(TextdpError, match=f"the lock is empty.*remove {tmp_path}/x.lock and run again"):
        _guard(tmp_path).acquire()
    assert (tmp_path / "x.lock").exists()


# --- N12: nothing earlier is removed before everything that can be checked is -----------------------------

def test_n12_a_bad_environment_or_build_refusal_with_overwrite_keeps_the_earlier_release(tmp_path, tiny_artifact_dir,
                                                                                         capsys, monkeypatch):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"u": 1, "text": "the city"}) + "\n", encoding="utf-8")
    base = ["privatize", f"--input={source}", f"--output={tmp_path}/o/a", "--epsilon=10",
            f"--artifact={tiny_artifact_dir}"] + RUNNER
    assert cli_main(base) == 0
    capsys.readouterr()
    before = {name: open(tmp_path / "o" / name, "rb").read() for name in os.listdir(tmp_path / "o")}
    for variable, value, fragment in (("TEXTDP_PROGRESS_INTERVAL", "abc", "TEXTDP_PROGRESS_INTERVAL='abc'"),
                                      ("TEXTDP_PROGRESS_INTERVAL", "1e-300", "is not a number of seconds"),
                                      ("TEXTDP_PROGRESS_DIR", str(source), "is not a writable directory")):
        monkeypatch.setenv(variable, value)
        assert cli_main(base + ["--overwrite"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and fragment in err and "the pipeline failed" not in err, err
        monkeypatch.delenv(variable)
    # refused while the job is built (the unknown-word marker is the k-threshold marker): nothing removed
    assert cli_main(base + ["--overwrite", "--oov-policy=unk", "--unk-token=<rare>", "--shuffle",
                            "--k-threshold=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is the --k-threshold marker <rare>" in err and "the pipeline failed" not in err, err
    after = {name: open(tmp_path / "o" / name, "rb").read() for name in os.listdir(tmp_path / "o")}
    assert after == before


# --- N8: a JSON array is not JSON Lines --------------------------------------------------------------------

def test_n8_a_json_array_or_bracketed_text_given_as_jsonl_is_refused_before_the_run(tmp_path, tiny_artifact_dir,
                                                                                    capsys):
    pretty = tmp_path / "arr.json"
    pretty.write_text(json.dumps([{"id": i, "text": f"the city {SECRET}"} for i in range(30)], indent=2),
                      encoding="utf-8")
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps([{"id": i, "text": "the city"} for i in range(3)]) + "\n", encoding="utf-8")
    cite = tmp_path / "cite.txt"
    cite.write_text(f"[1] the people {SECRET}\n[2] the city\n[3] the state\n", encoding="utf-8")
    for path, extra, fragment in ((pretty, [], "holds a JSON array, not JSON Lines"),
                                  (flat, [], "jq -c '.[]'"),
                                  (cite, ["--format=jsonl"], "none of its first 3 non-blank line(s) is a JSON object")):
        code = cli_main(["privatize", f"--input={path}", f"--output={tmp_path}/o/{path.stem}", "--epsilon=10",
                         f"--artifact={tiny_artifact_dir}"] + extra + RUNNER)
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and fragment in err and SECRET not in err, err
    assert not (tmp_path / "o").exists()
    good = tmp_path / "good.jsonl"  # JSON Lines whose first record holds a list value is still JSON Lines
    good.write_text('{"text": "the city", "tags": [1]}\n', encoding="utf-8")
    assert cli_main(["privatize", f"--input={good}", f"--output={tmp_path}/g/x", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}"] + RUNNER) == 0


# --- N7: an _asdict object that is not a Row nor a NamedTuple ----------------------------------------------

class RowLike:
    """The shape of a SQLAlchemy 2.x Row: attributes and _asdict, not a tuple, not buildable from keywords."""

    def __init__(self, text):
        self.text, self.id = text, 7

    def _asdict(self):
        return {"id": self.id, "text": self.text}


def test_n7_an_asdict_object_that_is_not_a_row_is_an_error_record_and_the_rest_is_released(tiny_artifact_dir):
    from apache_beam.testing import test_pipeline

    from transforms import Privatize

    with test_pipeline.TestPipeline(runner="FnApiRunner") as pipeline:
        elements = [{"text": "the city"}, RowLike("the state"), beam.Row(text="the people")]
        result = (pipeline | beam.Create(list(range(3))) | beam.Map(lambda i: elements[i])
                  | Privatize(epsilon=1e6, text_fields=["text"], artifact=tiny_artifact_dir, seed=1))
        assert_that(result.errors | beam.Map(lambda e: e["reason"]), equal_to(["not_an_object"]), label="errors")
        assert_that(result.released | beam.Map(lambda r: (type(r).__name__, r["text"] if isinstance(r, dict)
                                                          else r.text)),
                    equal_to([("dict", "the city"), ("Row", "the people")]), label="released")


# --- N9: the failure line's top reasons leave the blanks out ---------------------------------------------

def test_n9_the_failure_line_does_not_lead_with_the_excluded_blank_records(tmp_path, tiny_artifact_dir, capsys):
    source = tmp_path / "mf.jsonl"
    source.write_text("\n".join([json.dumps({"text": "the city"})] + [json.dumps({"text": ""})] * 8
                                + [json.dumps({"other": "x"})]) + "\n", encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/a", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", "--max-failed-fraction=0.4"] + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 1, err
    assert "1 of 2 non-blank records failed (50.0%" in err and "top reasons: missing_field 1" in err, err
    assert "empty" not in err.split("top reasons:")[1]
    summary = json.load(open(f"{tmp_path}/o/a-summary.json", encoding="utf-8"))
    assert summary["failure_check"]["top_reasons"] == {"missing_field": 1}
    assert summary["records"]["failed_by_reason"]["empty"] == 8  # still counted in the error output


# --- N10: author ids compared as JSON values -------------------------------------------------------------

def test_n10_author_ids_one_and_one_point_zero_are_one_author_and_the_string_another(tmp_path, tiny_artifact_dir):
    from textdp.text.records import author_identity

    assert author_identity(1) == author_identity(1.0) == author_identity(1e0)
    assert len({author_identity(1), author_identity("1"), author_identity(True), author_identity(1.5)}) == 4
    source = tmp_path / "auth.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in (
        {"u": 1, "text": "president"}, {"u": 1.0, "text": "president"}, {"u": 2, "text": "city"},
        {"u": 3, "text": "city"}, {"u": 4, "text": "city"})), encoding="utf-8")
    output = f"{tmp_path}/o/a"
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=1000000",
                     f"--artifact={tiny_artifact_dir}", "--shuffle", "--user-field=u", "--k-threshold=2",
                     "--seed=1"] + RUNNER) == 0
    section = json.load(open(output + "-amplification.json", encoding="utf-8"))
    assert section["shuffle"]["authors"] == 4 and section["local"]["max_words_per_author"] == 2
    released = [json.loads(line)["text"] for line in open(f"{output}-00000-of-00001.jsonl", encoding="utf-8")]
    assert sorted(released) == ["<rare>", "<rare>", "city", "city", "city"]  # one author wrote "president"


# --- N1 and the <rare> marker ----------------------------------------------------------------------------

def test_n1_an_unk_token_of_punctuation_only_or_equal_to_the_k_threshold_marker_is_refused(tmp_path,
                                                                                          tiny_artifact_dir, capsys):
    import textdp
    from textdp.errors import ParameterError

    source = tmp_path / "in.txt"
    source.write_text("the zzqx city\n", encoding="utf-8")
    for marker in ("...", "-", "?"):
        code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/a", "--epsilon=10",
                         f"--artifact={tiny_artifact_dir}", "--oov-policy=unk", f"--unk-token={marker}"] + RUNNER)
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "holds no word character" in err, err
        with pytest.raises(ParameterError, match="holds no word character"):
            textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir, oov_policy="unk", unk_token=marker)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"u": 1, "text": "the zzqx city"}) + "\n", encoding="utf-8")
    code = cli_main(["privatize", f"--input={jsonl}", f"--output={tmp_path}/o/b", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", "--oov-policy=unk", "--unk-token=<rare>", "--shuffle",
                     "--k-threshold=2"] + RUNNER)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "is the --k-threshold marker <rare>" in err, err
    assert not os.path.exists(tmp_path / "o") or os.listdir(tmp_path / "o") == []  # no file, no lock left
