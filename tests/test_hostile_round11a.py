"""Round-11 hostile findings fixed on branch fix11a (issue 25): R11-4 (control characters of the artifact path and of
TEXTDP_CACHE_DIR printed raw in refusals) and R11-6 (NaN / Infinity / -Infinity literals in JSONL input written back
into a release that was then not strict JSON). Real runs of the CLI on the local runner (FnApiRunner) over the real
300-word GloVe artifact, copied to real directories; nothing is mocked. No test here is randomized (every check is
deterministic), so none has a false-failure rate."""

import shutil
import unicodedata

import pytest

import textdp
from pipelines.cli import main as cli_main

RUNNER = "--runner=FnApiRunner"
HOSTILE = "art\nrecords: 3 in, 3 out, 0 failed \x1b[31mRED"  # a directory name that forges a report line and sends ESC
ESCAPED = "art\\nrecords: 3 in, 3 out, 0 failed \\x1b[31mRED"


def _no_control(text):
    return not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


def _one_escaped_line(capsys):
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)  # ONE console line
    assert _no_control(err[:-1]), repr(err)
    assert ESCAPED in err, repr(err)
    return err


@pytest.fixture
def hostile_artifact(tmp_path, tiny_artifact_dir):
    path = tmp_path / HOSTILE
    shutil.copytree(tiny_artifact_dir, path)
    return str(path)


@pytest.fixture
def one_record(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "the of and"}\n', encoding="utf-8")
    return str(path)


def _privatize(tmp_path, artifact, inp, *extra):
    return cli_main(["privatize", f"--input={inp}", f"--output={tmp_path}/o/p", "--epsilon=10", RUNNER,
                     *([f"--artifact={artifact}"] if artifact else []), *extra])


# --- R11-4: the artifact path and the cache directory go through the one path printer -----------------------------

def test_r11_4_shown_is_one_function_on_the_floor():
    """textdp.outputs.shown (and its old name escaped) is textdp.paths.shown: the artifact wing prints with it."""
    from textdp import outputs, paths

    assert outputs.shown is paths.shown and outputs.escaped is paths.shown
    assert paths.shown(HOSTILE) == ESCAPED


def test_r11_4_tem_without_neighbours_is_one_escaped_line(tmp_path, hostile_artifact, one_record, capsys):
    """--mechanism tem on an artifact without a neighbour table: exit 2, one line, newline and ESC shown as \\n and
    \\x1b, and the suggested command quotes the escaped path."""
    assert _privatize(tmp_path, hostile_artifact, one_record, "--mechanism=tem") == 2
    err = _one_escaped_line(capsys)
    assert "neighbour table" in err and f"--artifact '{tmp_path}/{ESCAPED}'" in err
    assert not (tmp_path / "o").exists()


def test_r11_4_annoy_without_its_index_is_one_escaped_line(tmp_path, hostile_artifact, one_record, capsys):
    """--nn annoy on a copy whose index.ann is gone: exit 2, one escaped line naming the missing file."""
    (tmp_path / HOSTILE / "index.ann").unlink()
    assert _privatize(tmp_path, hostile_artifact, one_record, "--nn=annoy") == 2
    assert "index.ann is missing" in _one_escaped_line(capsys)


def test_r11_4_a_size_mismatch_is_one_escaped_line(tmp_path, hostile_artifact, one_record, capsys):
    """A vocabulary file one line longer than the manifest records: exit 2, one escaped line."""
    with open(tmp_path / HOSTILE / "vocab.txt", "a", encoding="utf-8") as handle:
        handle.write("x\n")
    assert _privatize(tmp_path, hostile_artifact, one_record) == 2
    assert "but the manifest records" in _one_escaped_line(capsys)


def test_r11_4_a_bad_cache_dir_is_one_escaped_line(tmp_path, one_record, capsys, monkeypatch):
    """TEXTDP_CACHE_DIR under a file (no directory can be made there) with a newline and ESC in its name, no
    --artifact: exit 2, one escaped line naming the cache."""
    (tmp_path / "file").write_text("x", encoding="utf-8")
    monkeypatch.setenv("TEXTDP_CACHE_DIR", str(tmp_path / "file" / HOSTILE))
    assert _privatize(tmp_path, None, one_record) == 2
    assert "the textdp cache" in _one_escaped_line(capsys)


def test_r11_4_the_python_api_message_is_escaped(hostile_artifact):
    """str(exc) from textdp.Privatizer holds the escapes, never a raw control character."""
    with pytest.raises(textdp.TextdpError) as caught:
        textdp.Privatizer(artifact=hostile_artifact, mechanism="tem", epsilon=10)
    assert ESCAPED in str(caught.value) and _no_control(str(caught.value))
