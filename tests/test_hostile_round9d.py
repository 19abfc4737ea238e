"""Round-9 hostile findings fixed on branch fix9d (issue 25): R9-3, R9-11, R9-6.
Real runs of the CLI on the local runner (FnApiRunner) over the real 300-word GloVe artifact, real files; nothing
is mocked. No test here is randomized (every check is deterministic), so none has a false-failure rate."""

import json
import os
import unicodedata

import pytest

from pipelines.cli import main as cli_main

RUNNER = "--runner=FnApiRunner"
REVIEWS = ["The président said our police were cold.", "A fine hotel, the staff were kind.",
           "We would not go back to that place again."]


def _privatize(tmp_path, artifact, *extra):
    return cli_main(["privatize", f"--output={tmp_path}/o/p", "--epsilon=10", f"--artifact={artifact}", RUNNER, *extra])


def _jsonl(objects) -> str:
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects)


# --- R9-3: copies differing in what textdp does not privatize (spaces, Unicode form, other JSONL fields) ----------


COPIES = {
    "trailing spaces": ("a.txt", lambda: "".join(r + " \n" for r in REVIEWS)),
    "doubled spaces": ("a.txt", lambda: "".join(r.replace(" ", "  ") + "\n" for r in REVIEWS)),
    "tabs and a leading space": ("a.txt", lambda: "".join(" " + r.replace(" ", "\t") + "\n" for r in REVIEWS)),
    "NFD": ("a.txt", lambda: unicodedata.normalize("NFD", "".join(r + "\n" for r in REVIEWS))),
    "jsonl with an added field": ("a.jsonl", lambda: _jsonl({"id": i, "text": r, "exported": "2026-11-28"}
                                                            for i, r in enumerate(REVIEWS))),
    "jsonl with float ids and other key order": ("a.jsonl", lambda: _jsonl({"text": r, "id": float(i)}
                                                                           for i, r in enumerate(REVIEWS))),
}


@pytest.mark.parametrize("variant", list(COPIES))
def test_r9_3_copies_differing_in_spaces_unicode_form_or_other_fields_are_refused(variant, tmp_path, tiny_artifact_dir,
                                                                                  capsys):
    """A copy whose records privatize to the same text (trailing or doubled spaces, NFD vs NFC, a JSONL re-export that
    adds a field or writes ids as 0.0) is refused in one line before the run (exit 2), naming both files, never their
    text; before R9-3 each record was released twice."""
    name, copy = COPIES[variant]
    directory = tmp_path / "d"
    directory.mkdir()
    original = "".join(r + "\n" for r in REVIEWS) if name.endswith(".txt") else \
        _jsonl({"id": i, "text": r} for i, r in enumerate(REVIEWS))
    (directory / name).write_text(unicodedata.normalize("NFC", original), encoding="utf-8")
    (directory / ("b" + name[1:])).write_text(copy(), encoding="utf-8")
    assert _privatize(tmp_path, tiny_artifact_dir, f"--input={directory}/*{name[1:]}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "same content" in err[0] and "a." in err[0] and "b." in err[0], err
    assert "police" not in err[0] and "hotel" not in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


def test_r9_3_jsonl_is_compared_by_the_text_fields_privatize_reads(tmp_path, tiny_artifact_dir, capsys):
    """With --text-field body, two files with the same `text` but different `body` values are two sets of records
    (exit 0, 6 records out); two files with the same `body` (their `text` differing) are one, and refused; a part next
    to its merge is refused by the same comparison (a trailing space added in the merge)."""
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "a.jsonl").write_text(_jsonl({"text": r, "body": f"review number {i}"} for i, r in enumerate(REVIEWS)))
    (directory / "b.jsonl").write_text(_jsonl({"text": r, "body": f"the staff {i}"} for i, r in enumerate(REVIEWS)))
    assert _privatize(tmp_path, tiny_artifact_dir, f"--input={directory}/*.jsonl", "--text-field=body") == 0
    assert "6 in, 6 out, 0 failed" in capsys.readouterr().out
    (directory / "b.jsonl").write_text(_jsonl({"text": f"other {i}", "body": f"review  number {i} "} for i in range(3)))
    assert _privatize(tmp_path, tiny_artifact_dir, f"--input={directory}/*.jsonl", "--text-field=body",
                      "--overwrite") == 2
    assert "same content" in capsys.readouterr().err
    (directory / "b.jsonl").write_text(_jsonl({"text": f"other {i}", "body": f"review number {i} "} for i in range(2)))
    (directory / "a.jsonl").write_text(_jsonl({"body": f"review number {i}"} for i in range(3)))
    assert _privatize(tmp_path, tiny_artifact_dir, f"--input={directory}/*.jsonl", "--text-field=body",
                      "--overwrite") == 2
    err = capsys.readouterr().err
    assert "every record of" in err and "b.jsonl" in err and "review" not in err


def test_r9_3_audit_prior_corpus_with_trailing_spaces_is_refused(tmp_path, tiny_artifact_dir, capsys):
    """audit's --prior-corpus overlap check (R9b-5) uses the same comparison: a copy of --corpus with trailing
    spaces and NFD text is refused in one line before anything runs."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(r + "\n" for r in REVIEWS), encoding="utf-8")
    prior = tmp_path / "prior.txt"
    prior.write_text(unicodedata.normalize("NFD", "".join(r + "  \n" for r in REVIEWS)), encoding="utf-8")
    code = cli_main(["audit", f"--artifact={tiny_artifact_dir}", "--checks=inversion", "--epsilons=5",
                     f"--corpus={corpus}", f"--prior-corpus={prior}", f"--output={tmp_path / 'out'}", RUNNER])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--prior-corpus holds 3 of the 3 distinct records of --corpus" in err
    assert not (tmp_path / "out").exists()
