"""Red-team round 11 findings on textdp privatize (the real CLI on the local FnApiRunner, real files)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from pipelines.cli import main as cli_main
from textdp.outputs import EARLIER_FOLDER_PREFIX

RUNNER = "--runner=FnApiRunner"


@pytest.mark.parametrize("directory,name", [("rel $(touch PWNED) x; echo", "p"), ("My Releases", "p"), ("plain", ".rel")])
def test_r11_1_the_restore_command_is_safe_to_paste_and_restores_the_release(directory, name, tmp_path,
                                                                             tiny_artifact_dir, capsys):
    """The `mv` a refusal gives for a leftover `.textdp-earlier-*` folder had its paths unquoted: a directory named
    with `$(...)` or `;` ran code when pasted, one with a space moved the wrong things, and a release named with a
    leading dot (`--output dir/.rel`) was not matched by `*`. Now each path is shell-quoted, `--` ends the options,
    and `.[!.]*` is added where the folder holds dot-files: run through a real shell (in tmp_path as the current
    directory), the command puts back every file byte for byte, runs nothing, and the next run goes on."""
    out_dir = tmp_path / directory
    out_dir.mkdir()
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    output = out_dir / name
    argv = ["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", f"--artifact={tiny_artifact_dir}",
            RUNNER]
    assert cli_main(argv) == 0
    files = [p for p in glob.glob(glob.escape(str(out_dir)) + "/*") + glob.glob(glob.escape(str(out_dir)) + "/.*")
             if not p.endswith(".textdp-run.json") and EARLIER_FOLDER_PREFIX not in p]
    before = {p: open(p, "rb").read() for p in files}
    assert before
    folder = out_dir / f"{EARLIER_FOLDER_PREFIX}abc123"  # what a killed --overwrite run leaves
    folder.mkdir()
    for path in before:
        shutil.move(path, folder / os.path.basename(path))
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "restore it with: mv -- " in err[0], err
    restore = err[0].split("restore it with: ", 1)[1].split(" (after removing", 1)[0]
    done = subprocess.run(restore, shell=True, cwd=tmp_path, executable="/bin/bash", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "PWNED").exists() and not os.path.exists(out_dir / "PWNED")
    assert {p: open(p, "rb").read() for p in before} == before and not folder.exists()
    assert cli_main(argv + ["--overwrite"]) == 0


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("flag", ["--text-field=review ", "--text-field=review", "--drop-fields=review"])
def test_r11_2_a_field_with_a_whitespace_padded_twin_is_refused(fmt, flag, tmp_path, tiny_artifact_dir, capsys):
    """`--text-field 'review '` was read as `review` (the flag's names are stripped): with both `review` and `review `
    in the records, `review` was privatized and `review ` released raw, exit 0. Now a named field that has a twin
    differing only by surrounding whitespace is refused in one line before the run (JSONL and Parquet), never
    showing a value; without the twin the run goes on."""
    rows = [{"id": 1, "text": "the cat", "review": "the of", "review ": "CANARYTRAIL secret words"},
            {"id": 2, "text": "a dog", "review": "and to in", "review ": "CANARYTRAIL two"}]
    if fmt == "jsonl":
        import json

        source = tmp_path / "both.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        source = tmp_path / "both.parquet"
        pq.write_table(pa.Table.from_pylist(rows), source)
    argv = ["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10", f"--format={fmt}",
            f"--artifact={tiny_artifact_dir}", RUNNER]
    extra = ["--shuffle"] if flag.startswith("--drop") else []  # --drop-fields: text field "text"
    assert cli_main(argv + [flag] + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "surrounding whitespace" in err[0] and "CANARY" not in err[0], err
    assert not os.path.exists(tmp_path / "o")
    single = [{k: v for k, v in r.items() if k != "review "} for r in rows]
    if fmt == "jsonl":
        source.write_text("".join(json.dumps(r) + "\n" for r in single), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(single), source)
    assert cli_main(argv + ["--text-field=review"]) == 0


@pytest.mark.parametrize("name,extra", [("p-summary.json", []), ("pub.json", ["--public-summary={d}/pub.json"]),
                                        ("p-amplification.json", ["--shuffle"]),
                                        ("p-00000-of-00001.txt", [])])
def test_r11_3_a_symlink_at_an_output_name_is_refused_not_written_through(name, extra, tmp_path, tiny_artifact_dir,
                                                                          capsys):
    """A dangling symlink at the operator summary's, the public summary's or the amplification report's name was
    followed: the file was written at the link's target in another directory (exit 0), while the same link at a
    shard name was refused. Now a symlink at any output name is refused in one line before the run, nothing is
    written there or at its target; without the link the run goes on."""
    out, elsewhere = tmp_path / "o", tmp_path / "else"
    out.mkdir()
    elsewhere.mkdir()
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    os.symlink(elsewhere / "victim", out / name)
    argv = ["privatize", f"--input={source}", f"--output={out}/p", "--epsilon=10", f"--artifact={tiny_artifact_dir}",
            RUNNER] + [e.format(d=out) for e in extra]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "symbolic link" in err[0], err
    assert os.listdir(elsewhere) == [] and os.listdir(out) == [name]
    os.remove(out / name)
    assert cli_main(argv) == 0 and os.listdir(elsewhere) == []


def test_r11_3_calibrate_refuses_a_symlink_at_its_summary(tmp_path, tiny_artifact_dir, capsys):
    """The calibrate variant: summary.json a dangling link into another directory was written through."""
    out, elsewhere = tmp_path / "cal", tmp_path / "else"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere / "victim.json", out / "summary.json")
    code = cli_main(["calibrate", f"--output={out}", "--epsilons=10", f"--artifact={tiny_artifact_dir}", "--words=5",
                     "--samples=50", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "symbolic link" in err[0], err
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("suffix,compress", [(".gz", "gzip"), (".bz2", "bz2"), (".xz", "lzma")])
def test_r11b_2_a_truncated_compressed_file_in_the_watch_is_one_error_record(suffix, compress, tmp_path):
    """A truncated .gz/.bz2/.xz dropped into the watched place failed the whole streaming job ("I/O operation on closed
    file" in PollFiles: the identity's fallback read a stream the decompressor had closed), losing every record read.
    Now its identity is the digest of its bytes and the reader makes its error record: the other file's records are
    released (and the damaged file's lines before the cut, as the batch job releases them), the damaged file is one
    error record, and no text is in the messages (the real command, local watch)."""
    import importlib
    import json
    import sys
    import time

    module = importlib.import_module(compress)
    watched = tmp_path / "in"
    watched.mkdir()
    (watched / "a.txt").write_bytes(b"the cat sat\n")
    (watched / f"trunc.txt{suffix}").write_bytes(module.compress(b"a dog ran away\n" * 50)[:30])
    past = time.time() - 60
    for path in watched.iterdir():
        os.utime(path, (past, past))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "privatize", "--streaming", "--format", "text",
                           "--input", str(watched / "*"), "--output", str(out / "r"), "--artifact", "/tmp/art300",
                           "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "60", "--poll-interval", "0.5",
                           "--streaming-stop-after", "2", RUNNER], cwd=os.path.dirname(os.path.dirname(__file__)),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    released = [line for p in glob.glob(f"{out}/r-*-of-*.txt") for line in open(p, encoding="utf-8").read().splitlines()]
    assert "the cat sat" in released and set(released) <= {"the cat sat", "a dog ran away"}  # lines before the cut
    errors = [json.loads(line) for p in glob.glob(f"{out}/r-*errors*.jsonl") for line in open(p, encoding="utf-8")]
    assert [os.path.basename(e["source"]) for e in errors] == [f"trunc.txt{suffix}"], errors
    assert "0 failed" not in done.stdout and "dog" not in done.stdout + done.stderr


@pytest.mark.parametrize("column", ["float32", "float16", "list_float32"])
def test_r11b_1_a_narrow_float_author_column_is_refused(column, tmp_path, tiny_artifact_dir, capsys):
    """A Parquet FLOAT author column read 16777217 as 16777216.0 (an exact integer below 2**53, so it passed), making
    one person a new author and exceeding the ledger budget. Now a 16/32-bit float author column (or a list of them)
    is refused in one line before the run, never showing an id; a float64 or int64 column still runs."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [16777217, 16777217]
    as32 = np.array(ids, dtype=np.float32)  # what a float-typed export writes: 16777216.0
    values = {"float32": pa.array(as32), "float16": pa.array(np.array([3, 3], dtype=np.float16)),
              "list_float32": pa.array([[v] for v in as32.tolist()], pa.list_(pa.float32()))}[column]
    source = tmp_path / "a.parquet"
    pq.write_table(pa.table({"user_id": values, "text": ["the cat sat", "a dog ran"]}), source)
    argv = ["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10", "--user-field=user_id",
            "--shuffle", f"--artifact={tiny_artifact_dir}", RUNNER]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-bit floating-point" in err[0] and "16777217" not in err[0], err
    assert not os.path.exists(tmp_path / "o")
    pq.write_table(pa.table({"user_id": pa.array(ids, pa.int64()), "text": ["the cat sat", "a dog ran"]}), source)
    assert cli_main(argv) == 0


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_r11b_3_a_prior_corpus_without_a_vocabulary_word_is_refused_before_the_run(fmt, tmp_path, tiny_artifact_dir,
                                                                                     capsys):
    """A --prior-corpus holding no vocabulary word was found only in the pipeline's prior stage, after the other
    checks had run: exit 1, "the pipeline failed: ValueError". Now one line before the run, exit 2, nothing written,
    never a word of the file shown; one vocabulary word anywhere (here the last line) lets it through."""
    import json

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the cat sat on the mat number {i}\n" for i in range(30)), encoding="utf-8")
    lines = [f"zzqx{i} qqzz{i}" for i in range(3000)]
    prior = tmp_path / f"prior.{'jsonl' if fmt == 'jsonl' else 'txt'}"

    def write(rows):
        prior.write_text("".join((json.dumps({"text": r}) if fmt == "jsonl" else r) + "\n" for r in rows),
                         encoding="utf-8")

    write(lines)
    argv = ["audit", "--checks=inversion", "--epsilons=2", f"--corpus={corpus}", "--records=10",
            "--inversion-tokens=50", "--mc-draws=300", "--prior-words=50", f"--prior-corpus={prior}",
            f"--artifact={tiny_artifact_dir}", RUNNER]
    assert cli_main(argv + [f"--output={tmp_path}/a"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no word of its 1 file(s)" in err[0] and "zzqx" not in err[0], err
    assert not os.path.exists(tmp_path / "a")
    write(lines + ["the end"])
    assert cli_main(argv + [f"--output={tmp_path}/b"]) == 0


def test_r11_7_jsonl_copies_with_texts_moved_between_text_fields_are_refused(tmp_path, tiny_artifact_dir, capsys):
    """The duplicate key held an object's text fields as a list, so the same words under `text` in one export and
    under `title` (or split across both) in another were three different records: each released three times. Now an
    object is keyed by the words of all its text fields in order: refused in one line naming two files, never text;
    different texts still run."""
    import json

    texts = ["the cat sat on the mat today", "a dog ran in the park at night", "we said they would be here"]
    shapes = {"a": lambda t: ("", t), "b": lambda t: (t, ""),
              "c": lambda t: (" ".join(t.split()[:3]), " ".join(t.split()[3:]))}
    folder = tmp_path / "in"
    folder.mkdir()
    for name, shape in shapes.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"id": i, "title": shape(t)[0], "text": shape(t)[1]})
                                                      + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    argv = ["privatize", f"--input={folder}/*.jsonl", f"--output={tmp_path}/o/p", "--epsilon=10",
            "--text-field=title,text", f"--artifact={tiny_artifact_dir}", RUNNER]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "same content" in err[0] and "cat" not in err[0], err
    for name in ("b", "c"):
        os.remove(folder / f"{name}.jsonl")
    (folder / "b.jsonl").write_text(json.dumps({"id": 9, "title": "other words", "text": "our police were there"})
                                    + "\n", encoding="utf-8")
    assert cli_main(argv) == 0


def _released_with(tmp_path, artifact, mechanism):
    """A first release at <tmp>/o/p by tests.custom_mechanism's ``mechanism``: (its folder, the argv to run again)."""
    out = tmp_path / "o"
    out.mkdir()
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", f"--output={out}/p", "--epsilon=10", f"--artifact={artifact}",
            f"--mechanism=tests.custom_mechanism:{mechanism}", RUNNER]
    assert cli_main(argv) == 0
    return out, argv


def test_r11_5_an_earlier_file_that_cannot_be_put_back_is_named_not_said_restored(tmp_path, tiny_artifact_dir,
                                                                                   capsys, monkeypatch):
    """A failed --overwrite run said "the earlier run's files were put back" when one could not be (its name taken
    meanwhile, here by a directory the mechanism makes during the run): the earlier summary stayed hidden in
    .textdp-earlier-*. Now the line says which file was not put back and where it is; the others are back."""
    out, argv = _released_with(tmp_path, tiny_artifact_dir, "NameTaker")
    earlier = open(out / "p-summary.json", "rb").read()
    monkeypatch.setenv("TEXTDP_TEST_TAKE_DIR", str(out))
    monkeypatch.setenv("TEXTDP_TEST_TAKE_NAME", str(out / "p-summary.json"))
    capsys.readouterr()
    assert cli_main(argv + ["--overwrite"]) == 1
    err = [line for line in capsys.readouterr().err.strip().splitlines() if ": error:" in line]  # not the trial or progress
    assert len(err) == 1 and "were put back except 1" in err[0] and "p-summary.json" in err[0], err
    assert "the earlier run's files were put back (" not in err[0]
    left = glob.glob(f"{out}/.textdp-earlier-*/p-summary.json")
    assert len(left) == 1 and open(left[0], "rb").read() == earlier and left[0] in err[0]
    assert os.path.isdir(out / "p-summary.json") and os.path.isfile(out / "p-00000-of-00001.txt")


@pytest.mark.parametrize("extra", [["--contextual-candidates=120", "--prior-words=100"],
                                   ["--contextual-candidates=1000", "--prior-words=3000"]])
def test_r11b_6_more_contextual_candidates_than_the_pool_is_refused_before_the_run(extra, tmp_path, tiny_artifact_dir,
                                                                                  capsys):
    """--contextual-candidates above --prior-words or the vocabulary (300 words here) crashed the contextual attack
    in the pipeline (a numpy broadcast error, exit 1) after the other checks ran. Now one line before the run; K equal
    to the pool runs."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the cat sat on the mat number {i}\n" for i in range(30)), encoding="utf-8")
    argv = ["audit", "--checks=inversion", "--epsilons=2", f"--corpus={corpus}", "--records=10",
            "--inversion-tokens=50", "--mc-draws=300", f"--artifact={tiny_artifact_dir}", RUNNER]
    assert cli_main(argv + extra + [f"--output={tmp_path}/a"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "candidate words" in err[0], err
    assert not os.path.exists(tmp_path / "a")
    assert cli_main(argv + ["--contextual-candidates=100", "--prior-words=100", f"--output={tmp_path}/b"]) == 0


def test_r11_9_bidi_controls_in_an_output_path_are_refused_and_format_characters_shown_escaped(tmp_path,
                                                                                               tiny_artifact_dir,
                                                                                               capsys):
    """U+202E (right-to-left override) in --output was accepted and printed raw: a console showed the operator
    summary's name reversed, as another file's. Now a bidi control in an output path is refused in one line with the
    character escaped (as ESC and newlines are); any format character in a shown path (a zero-width space in an input
    name) is escaped too."""
    source = tmp_path / "in\u200bput.txt"
    source.write_text("the cat sat\n", encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o\u202eyrammus-cilbup", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "\\u202e" in err[0] and "\u202e" not in err[0], err
    assert not any("cilbup" in name for name in os.listdir(tmp_path))
    from textdp.outputs import shown

    assert shown(str(source)).endswith("in\\u200bput.txt")


def test_r11_8_a_second_signal_during_the_put_back_never_stops_it(tmp_path, tiny_artifact_dir, capsys, monkeypatch):
    """Ctrl-C twice (or SIGINT then SIGTERM) during an interrupted --overwrite run: the second signal raised inside
    the put-back (a traceback, stale locks). Now signals wait while the earlier release is put back: the first
    SIGINT comes from the mechanism during the run, the second is sent by the real restore_earlier's caller hook at
    its start; one line, exit 130, every earlier file back byte for byte, no lock left."""
    import signal

    from tests.custom_mechanism import Interrupter
    from textdp import outputs

    out, argv = _released_with(tmp_path, tiny_artifact_dir, "Interrupter")
    before = {p: open(p, "rb").read() for p in glob.glob(f"{out}/*") if not p.endswith(".textdp-run.json")}
    original = outputs.OutputGuard.restore_earlier

    def signalled(self, *args, **kwargs):  # the second Ctrl-C, as the put-back starts
        os.kill(os.getpid(), signal.SIGINT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(outputs.OutputGuard, "restore_earlier", signalled)
    monkeypatch.setenv("TEXTDP_TEST_TAKE_DIR", str(out))
    monkeypatch.setattr(Interrupter, "sent", False)
    capsys.readouterr()
    assert cli_main(argv + ["--overwrite"]) == 130
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "WARNING" not in line and "%" not in line]
    assert len(err) == 1 and "interrupted" in err[0] and "Traceback" not in err[0], err
    assert {p: open(p, "rb").read() for p in before} == before
    assert not glob.glob(f"{out}/.textdp-earlier-*") and not glob.glob(f"{out}/*.lock") + glob.glob(f"{out}/.*.lock")


def test_r12_2_a_fifo_as_prior_corpus_is_refused_not_read(tmp_path, tiny_artifact_dir, capsys):
    """A FIFO as audit's --prior-corpus hung forever (the overlap and vocabulary checks opened it before the
    regular-file check). Now one line before anything is opened (the test's own timeout would catch a hang)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the cat sat on the mat number {i}\n" for i in range(30)), encoding="utf-8")
    os.mkfifo(tmp_path / "prior.txt")
    code = cli_main(["audit", "--checks=inversion", "--epsilons=2", f"--corpus={corpus}", "--records=10",
                     "--inversion-tokens=50", "--mc-draws=300", f"--prior-corpus={tmp_path}/prior.txt",
                     f"--output={tmp_path}/a", f"--artifact={tiny_artifact_dir}", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not a regular file" in err[0], err
