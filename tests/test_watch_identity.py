"""The streaming watch knows a file by the batch job's duplicate key (issue 25's review: two definitions of "the
same content" let the watch release a copy the batch job refuses).

``transforms.io.records_identity`` is the one definition: the batch check (``refuse_duplicate_content``) and the
watch (``transforms.streaming.file_identity``, used by the local watch ``PollFiles`` and the streaming runners'
``DigestFiles``) both ask it. Runs are the real command / the real DoFns on the local FnApiRunner with --oov-policy
keep and a huge epsilon so released text can be compared: nothing here is statistical.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import time
import unicodedata

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from tests.test_streaming_hostile import ART, _errors, _released, run_cli
from textdp.errors import TextdpError
from transforms.io import records_identity, refuse_duplicate_content
from transforms.streaming import DUPLICATE_FILE, SKIPPED, DigestFiles, OncePerContent, file_identity

TEXT = "the president said\nour police were here\n"
# Copies the batch job refuses as the same records: each must have the watch's identity of TEXT.
TEXT_COPIES = {
    "crlf": TEXT.replace("\n", "\r\n").encode(),
    "bom, no final newline": b"\xef\xbb\xbf" + TEXT.rstrip("\n").encode(),
    "trailing spaces": TEXT.replace("\n", " \n").encode(),
    "doubled spaces": TEXT.replace(" ", "  ").encode(),
    "blank lines": ("\n" + TEXT.replace("\n", "\n\n")).encode(),
    "fullwidth (NFKC)": TEXT.replace("the", "\uff54\uff48\uff45").encode(),
    "upper-cased (R10-3)": TEXT.upper().encode(),
    "quoted '> ' with punctuation (R10b-2)": "".join(f"> {line}!\n" for line in TEXT.splitlines()).encode(),
}
ROWS = [{"id": 0, "text": "the president said"}, {"id": 1, "text": "our police were here"}]
JSONL = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
JSONL_COPIES = {
    "extra field": "".join(json.dumps({**r, "exported": "2026-11-28"}) + "\n" for r in ROWS).encode(),
    "float ids": "".join(json.dumps({**r, "id": float(r["id"])}) + "\n" for r in ROWS).encode(),
    "keys reordered": "".join(json.dumps({"text": r["text"], "id": r["id"]}) + "\n" for r in ROWS).encode(),
}


def _identity(path, data, data_format="text", text_fields=()):
    return records_identity(path, io.BytesIO(data), data_format, text_fields)


@pytest.mark.parametrize("variant", sorted(TEXT_COPIES))
def test_a_copy_the_batch_job_refuses_has_the_watchs_identity(variant, tmp_path):
    """Each text copy is refused by the batch duplicate check AND has the original's identity, on the watch's
    in-memory path and on its opened-file path (and gzipped: decompressed first)."""
    (tmp_path / "a.txt").write_bytes(TEXT.encode())
    (tmp_path / "b.txt").write_bytes(TEXT_COPIES[variant])
    with pytest.raises(TextdpError, match="the same content"):
        refuse_duplicate_content("--input", [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], "text")
    original = _identity("a.txt", TEXT.encode())
    assert _identity("b.txt", TEXT_COPIES[variant]) == original
    assert file_identity(str(tmp_path / "b.txt"), "text", ()) == original
    assert _identity("b.txt.gz", gzip.compress(TEXT_COPIES[variant])) == original


@pytest.mark.parametrize("variant", sorted(JSONL_COPIES))
def test_a_jsonl_copy_is_known_by_its_text_fields(variant, tmp_path):
    """A JSONL re-export (another field, ids as floats, keys reordered) is the same records for both checks; a
    text field changed is not."""
    (tmp_path / "a.jsonl").write_bytes(JSONL)
    (tmp_path / "b.jsonl").write_bytes(JSONL_COPIES[variant])
    with pytest.raises(TextdpError, match="the same content"):
        refuse_duplicate_content("--input", [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], "jsonl")
    assert _identity("b.jsonl", JSONL_COPIES[variant], "jsonl", ("text",)) == _identity("a.jsonl", JSONL, "jsonl",
                                                                                          ("text",))
    other = JSONL.replace(b"our police", b"our doctors")
    assert _identity("c.jsonl", other, "jsonl", ("text",)) != _identity("a.jsonl", JSONL, "jsonl", ("text",))


def test_different_records_have_different_identities():
    """A line added, removed, reordered or a word changed is another file (a sorted copy is refused by the batch
    containment check, not by equality; the watch reads it). Case is not a difference (the tokenizer looks words up
    case folded: R10-3; the upper-cased copy is in TEXT_COPIES), a word is."""
    lines = TEXT.splitlines()
    others = ["\n".join(lines[:1]), "\n".join(lines + ["one more"]), "\n".join(reversed(lines)),
              TEXT.replace("police", "doctors"), TEXT.upper().replace("POLICE", "POLICEMEN")]
    identities = {_identity("x.txt", TEXT.encode())} | {_identity("x.txt", o.encode()) for o in others}
    assert len(identities) == 1 + len(others)


def test_the_streaming_runners_watch_skips_a_trailing_space_copy(tmp_path):
    """DigestFiles -> OncePerContent (the Dataflow/Flink half) on the FnApiRunner: a trailing-space copy and an NFD
    copy of a file are duplicate_file; a different file is read."""
    text = "the présidént said\n"
    (tmp_path / "a.txt").write_bytes(text.encode())
    (tmp_path / "b.txt").write_bytes(text.replace("\n", "  \n").encode())
    (tmp_path / "c.txt").write_bytes(unicodedata.normalize("NFD", text).encode())
    (tmp_path / "d.txt").write_bytes(b"our police\n")
    metas = sorted(FileSystems.match([str(tmp_path / "*.txt")])[0].metadata_list, key=lambda m: m.path)
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        digested = (pipeline | beam.Create(metas)
                    | beam.ParDo(DigestFiles("", "text", ())).with_outputs(SKIPPED, main="digests"))
        out = digested.digests | beam.ParDo(OncePerContent()).with_outputs(SKIPPED, main="files")
        assert_that(out.files | beam.Map(lambda m: os.path.basename(m.path) in ("b.txt", "c.txt")),
                    equal_to([False, False]), label="files")
        assert_that(out[SKIPPED] | beam.Map(lambda e: e["reason"]), equal_to([DUPLICATE_FILE, DUPLICATE_FILE]),
                    label="skipped")


def test_the_local_watch_releases_a_trailing_space_copy_once(tmp_path):
    """The real `textdp privatize --streaming` (local watch): a.txt and b.txt (a.txt with trailing spaces and
    doubled spaces, the copy an editor's re-save makes) are present and settled when the watch starts; a.txt's
    records are released once and b.txt is one duplicate_file error record; the counts reconcile and no text of
    the files is in the messages."""
    watched, out = tmp_path / "in", tmp_path / "out"
    watched.mkdir()
    out.mkdir()
    (watched / "a.txt").write_bytes(b"the president said\nour police\n")
    (watched / "b.txt").write_bytes(b"the  president said \nour police \n")
    past = time.time() - 60
    for name in ("a.txt", "b.txt"):
        os.utime(watched / name, (past, past))
    result = run_cli("--streaming", "--input", str(watched / "*.txt"), "--output", str(out / "r"), "--artifact", ART,
                     "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "60", "--poll-interval", "0.5",
                     "--streaming-stop-after", "3", timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(_released(str(out / "r"))) == ["our police", "the president said"]
    errors = _errors(str(out / "r"))
    assert [(os.path.basename(e["source"]), e["reason"]) for e in errors] == [("b.txt", DUPLICATE_FILE)], errors
    assert "3 in, 2 out, 1 failed" in result.stdout, result.stdout
    assert "president" not in result.stdout + result.stderr + json.dumps(errors)
