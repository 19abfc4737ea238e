"""Round-10 findings R10-9, R10b-8 and R10b-4, each on the real component (the local Beam runner FnApiRunner, the real
300-word GloVe artifact, real files, the real CLI); nothing is mocked."""

from __future__ import annotations

import json
import logging
import warnings

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

import textdp
from tests.custom_mechanism import CappedExponential

RUNNER = "--runner=FnApiRunner"
TEXT = "the president said our police were in his company"
TRIAL = "released each of the 64 vocabulary words of the launcher's trial as itself"


class Ident(CappedExponential):
    """A user's mechanism that releases every word unchanged (R10-9's repro)."""

    name = "r10d-ident"

    def privatize_ids(self, ids, rng):
        return np.asarray(ids, dtype=np.int64).copy()


# --- R10-9: the API and the transform ask the launcher's trial ------------------------------------------------------


def test_r10_9_an_identity_custom_mechanism_is_warned_by_the_privatizer_and_in_its_statement(tiny_artifact_dir):
    """textdp.Privatizer runs the launcher's trial (PrivacySpec.check_artifact) for a mechanism that is not built in:
    a TextdpWarning at construction, and privacy_statement() carries the trial's line in "warnings" beside
    covered_by_guarantee, as the CLI's summaries do. Deterministic (the mechanism is the identity)."""
    with pytest.warns(textdp.TextdpWarning) as caught:
        p = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, mechanism=Ident)
    assert any(TRIAL in str(w.message) for w in caught)
    assert p.privatize([TEXT] * 3) == [TEXT] * 3  # what the trial said: the identity
    statement = p.privacy_statement()
    assert any(TRIAL in line for line in statement["warnings"])
    assert not any("president" in str(w.message) for w in caught)


def test_r10_9_a_built_in_mechanism_gets_no_trial_and_no_warning(tiny_artifact_dir):
    """The built-in fast path: no trial, no TextdpWarning, no "warnings" entry (the statement equals the public
    summary's privacy section, tests/test_api.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", textdp.TextdpWarning)
        p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)
    assert "warnings" not in p.privacy_statement() and p._trial_warnings == ()


def test_r10_9_a_changing_custom_mechanism_is_not_warned(tiny_artifact_dir):
    """A custom mechanism that changes words (CappedExponential at epsilon 1 on GloVe: the trial changes most of its
    64 ids; a false alarm would need no change in all 64, probability far below 1e-9) is not warned."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", textdp.TextdpWarning)
        p = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, mechanism=CappedExponential)
    assert "warnings" not in p.privacy_statement()


def test_r10_9_the_transform_logs_the_trial_once_and_exposes_it(tiny_artifact_dir, caplog):
    """transforms.Privatize: one WARNING log line per trial line at construction (no raw text), ``warnings`` holds
    them; the pipeline still runs (a warning, not a refusal) on FnApiRunner."""
    from transforms import Privatize

    with caplog.at_level(logging.WARNING, logger="transforms.privatize"):
        transform = Privatize(epsilon=1, artifact=tiny_artifact_dir, mechanism=Ident)
    lines = [r.getMessage() for r in caplog.records if r.name == "transforms.privatize"]
    assert len(lines) == 1 and TRIAL in lines[0] and "president" not in lines[0]
    assert len(transform.warnings) == 1 and TRIAL in transform.warnings[0]
    with beam.Pipeline(argv=[RUNNER]) as pipeline:
        result = pipeline | beam.Create([TEXT]) | transform
        assert_that(result.released, equal_to([TEXT]))


# --- R10b-8: a directory the watch's pattern matches --------------------------------------------------------------


def test_r10b_8_a_directory_the_watch_matches_is_one_error_record(tmp_path):
    """A Spark-style export folder ``export.jsonl/`` (part file + _SUCCESS) matched by the watch's pattern, one at the
    start and one moved in while the watch runs, was skipped silently ("0 in", no error file): now each is one
    not_a_regular_file error record (once per path, though every poll matches it and its times change), counted as
    one item in and one failed and named on the console; the real file beside them is released. The real CLI
    (--streaming, FnApiRunner, --streaming-stop-after); deterministic (epsilon 1e6, --oov-policy keep)."""
    import os
    import threading

    from tests.test_hostile_round8c import _start_file, _taken
    from tests.test_streaming_hostile import ART, _errors, _released, run_cli
    from transforms.streaming import NOT_REGULAR

    watched, stage, out = tmp_path / "in", tmp_path / "stage", tmp_path / "out"
    for folder in (watched, stage, out):
        folder.mkdir()
    _start_file(watched)
    (watched / "d0.txt").mkdir()  # matched at the start
    export = stage / "export.txt"
    export.mkdir()
    (export / "part-00000.txt").write_text("spark line one\nspark line two\n", encoding="utf-8")
    (export / "_SUCCESS").write_bytes(b"")

    def writer():
        _taken(watched / "start.txt")
        os.rename(export, watched / "export.txt")  # moved in while the watch runs
        (watched / "export.txt" / "part-00001.txt").write_text("more\n", encoding="utf-8")  # its times change

    thread = threading.Thread(target=writer)
    thread.start()
    result = run_cli("--streaming", "--input", str(watched / "*.txt"), "--output", str(out / "r"), "--artifact", ART,
                     "--epsilon", "1e6", "--oov-policy", "keep", "--window-size", "60", "--poll-interval", "0.5",
                     "--streaming-stop-after", "6", timeout=120)
    thread.join()
    assert result.returncode == 0, result.stderr
    assert _released(str(out / "r")) == ["start line"]
    errors = _errors(str(out / "r"))
    assert sorted((os.path.basename(e["source"]), e["reason"]) for e in errors) == [
        ("d0.txt", NOT_REGULAR), ("export.txt", NOT_REGULAR)], errors
    assert all("a directory" in e["detail"] and "spark" not in json.dumps(e) for e in errors)
    assert "3 in, 1 out, 2 failed" in result.stdout, result.stdout
    assert f"files not read: 2 ({NOT_REGULAR} 2)" in result.stdout, result.stdout


# --- R10b-4: the contextual attacker's default training text holds no copy of an attacked record ---------------------


def _audit_model(tmp_path, corpus_text, records):
    from pipelines.cli import main as cli_main
    from tests.test_audit_hostile import ART, RUNNER

    corpus, out = tmp_path / "double.txt", tmp_path / "aud"
    corpus.write_text(corpus_text, encoding="utf-8")
    assert cli_main(["audit", f"--artifact={ART}", "--checks=inversion", "--epsilons=2", f"--corpus={corpus}",
                     f"--records={records}", "--inversion-tokens=100", "--mc-draws=2000", "--prior-words=300",
                     "--seed=1", f"--output={out}"] + RUNNER) == 0
    return json.load(open(out / "summary.json", encoding="utf-8"))["contextual_inversion"]["model"]


def test_r10b_4_a_corpus_of_one_record_repeated_trains_on_none_of_its_copies(tmp_path):
    """Every record is one text: the 10 attacked records' 50 copies were the whole training text (the summary called
    it "disjoint"); now all 50 are left out and counted, and the model holds no bigram. Deterministic."""
    model = _audit_model(tmp_path, "the president said our police were in his company\n" * 60, 10)
    assert model["copies_left_out"] == 50 and model["training_tokens"] == 0 and model["training_bigrams"] == 0
    assert "less every exact copy of an attacked record" in model["training_text"]


def test_r10b_4_a_file_twice_over_leaves_out_each_copy_of_an_attacked_record(tmp_path):
    """--corpus = examples/reviews.txt twice (60 records, 30 distinct), 10 attacked: each attacked record whose copy is
    not attacked has that copy left out (2d - 10 of them for d distinct attacked texts: an even number from 0 to 10),
    and what remains are both copies of the texts never attacked, so training_tokens is even. 0 left out would need
    all 10 attacked records to be 5 whole pairs; the seeded audit (--seed 1) is deterministic and has 2 or more."""
    lines = [line for line in open("examples/reviews.txt", encoding="utf-8").read().splitlines() if line.strip()]
    model = _audit_model(tmp_path, "\n".join(lines + lines) + "\n", 10)
    assert model["copies_left_out"] in range(2, 11, 2), model
    assert model["training_tokens"] > 0 and model["training_tokens"] % 2 == 0, model
