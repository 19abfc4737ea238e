"""Round-11 hostile findings fixed on branch fix11a (issue 25): R11-4 (control characters of the artifact path and of
TEXTDP_CACHE_DIR printed raw in refusals) and R11-6 (NaN / Infinity / -Infinity literals in JSONL input written back
into a release that was then not strict JSON). Real runs of the CLI on the local runner (FnApiRunner) over the real
300-word GloVe artifact, copied to real directories; nothing is mocked. No test here is randomized (every check is
deterministic), so none has a false-failure rate."""

import glob
import json
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


# --- R11-6: NaN / Infinity / -Infinity are not JSON ---------------------------------------------------------------

def _strict(line):
    """json.loads that refuses the non-standard constants, as jq, JSON.parse, Go and Java do."""
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(line, parse_constant=refuse)


def test_r11_6_nan_and_infinity_are_unsupported_number_records_and_the_release_is_strict(tmp_path, tiny_artifact_dir):
    """NaN, Infinity and -Infinity in a pass-through field, nested in a list or an object, or as the text field
    itself: each record is an unsupported_number error record (never the value quoted), counted in the summary; the
    records without them (a text holding the WORDS NaN and Infinity, a quoted "NaN") are released, and every file the
    run wrote parses as strict JSON. Real CLI run, exit 0."""
    lines = ['{"id": 1, "text": "the of and", "score": NaN}',
             '{"id": 2, "text": "to in a", "scores": [1, Infinity]}',
             '{"id": 3, "text": "for that", "meta": {"deep": {"x": -Infinity}}}',
             '{"id": 4, "text": NaN}',
             '{"id": 5, "text": "the NaN of Infinity", "score": "NaN"}',
             '{"id": 6, "text": "is was", "score": 1.5}']
    source = tmp_path / "in.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = f"{tmp_path}/o/p"
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--max-failed-fraction=1",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 0
    released = [_strict(line) for f in sorted(glob.glob(f"{output}-*-of-*.jsonl")) for line in open(f, encoding="utf-8")]
    assert sorted((r["id"], r["score"]) for r in released) == [(5, "NaN"), (6, 1.5)]
    errors = [_strict(line) for f in sorted(glob.glob(f"{output}-errors-*.jsonl")) for line in open(f, encoding="utf-8")]
    assert sorted((e["position"], e["reason"]) for e in errors) == [(n, "unsupported_number") for n in (1, 2, 3, 4)]
    assert all("not JSON numbers" in e["detail"] for e in errors)
    for name in glob.glob(f"{tmp_path}/o/*.json"):  # the summary and the run record: strict too
        with open(name, encoding="utf-8") as handle:
            _strict(handle.read())
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        records = json.load(handle)["records"]
    assert (records["in"], records["out"], records["failed"]) == (6, 2, 4)
    assert records["failed_by_reason"] == {"unsupported_number": 4} and records["reconciled"] is True
