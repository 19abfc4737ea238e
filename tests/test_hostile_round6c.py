"""Variants found by the sixth hostile round (issue 25, findings F11, F2, F7, F10, F5) that this branch fixed.
Real runs on the local runner (FnApiRunner) and the small GloVe fixture; no mocks. No test here is randomized in a
way that can fail: the assertions hold for every draw of the mechanisms' noise."""

import json
import os

import numpy as np
import pytest

from pipelines.cli import main as cli_main
from tests.custom_mechanism import CappedExponential
from textdp.mechanisms import probe_ids

RUNNER = ["--runner=FnApiRunner"]
MODULE = "tests.test_hostile_round6c"


def _outputs(directory, prefix="x"):
    with open(os.path.join(directory, f"{prefix}-summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    errors = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(f"{prefix}-errors-"):
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                errors += [json.loads(line) for line in handle if line.strip()]
    return summary, errors


# --- F11: composite author ids holding equal numbers are one author; unsafe floats inside are refused ------------


def test_f11_lists_and_objects_holding_equal_numbers_are_one_author(tiny_artifact_dir, tmp_path, capsys):
    """{"uid": 1} and {"uid": 1.0}, [2] and [2.0] counted as four authors (their JSON differs), so --k-threshold 2
    and the shuffle's author count were computed on an inflated number. Now numbers inside lists and objects are
    compared by value: two authors; a float inside that is no safe id (1.5, 1e300) is an error record
    unsafe_author_id, its value never shown."""
    lines = ['{"u": {"org": 7, "uid": 1}, "text": "our drinks"}', '{"u": {"uid": 1.0, "org": 7.0}, "text": "our drinks"}',
             '{"u": [2], "text": "the hotel"}', '{"u": [2.0], "text": "the hotel"}',
             '{"u": {"uid": [1.5]}, "text": "the hotel"}', '{"u": [1e300], "text": "the hotel"}']
    source = tmp_path / "in.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", "--shuffle", "--user-field=u", "--k-threshold=2",
                     "--max-failed-fraction=1"] + RUNNER)
    out = capsys.readouterr()
    assert code == 0, out.err
    summary, errors = _outputs(tmp_path / "o")
    assert summary["records"]["failed_by_reason"] == {"unsafe_author_id": 2}
    assert sorted(e["position"] for e in errors) == [5, 6] and all(e["reason"] == "unsafe_author_id" for e in errors)
    assert "1e+300" not in json.dumps(errors) + out.err and "1.5" not in json.dumps(errors)
    with open(tmp_path / "o" / "x-amplification.json", encoding="utf-8") as handle:
        amplification = json.load(handle)
    assert amplification["shuffle"]["authors"] == 2, amplification["shuffle"]

    from textdp.text.records import author_identity, unsafe_author_id

    assert author_identity({"org": 7, "uid": 1}) == author_identity({"uid": 1.0, "org": 7.0})
    assert author_identity([2]) == author_identity([2.0]) == author_identity(np.array([2.0]))
    assert len({author_identity([1]), author_identity(["1"]), author_identity([True]), author_identity([None])}) == 4
    assert author_identity({"a": [1, "x"]}) == ("json", '{"a": [1, "x"]}')  # ids without floats keep their key
    assert [unsafe_author_id(v) for v in ([float("nan")], {"a": [2.0 ** 60]}, [1.5], [2 ** 60], [1.0], {"a": None})
            ] == [True, True, True, False, False, False]


# --- F2: an --unk-token that reads as several words ------------------------------------------------------------


@pytest.mark.parametrize("marker", ["the-the", "of/and", "unk.unk", "<unk-1>"])
def test_f2_an_unk_token_read_as_several_words_is_refused(marker, tiny_artifact_dir, tmp_path, capsys):
    """'the-the' released every unknown word as two vocabulary words and changed the word count the structure
    statement says is kept. Now any marker the tokenizer reads as more than one word (vocabulary words or not) is
    refused before the run: exit 2, one line, nothing written. '<unk>' is still accepted."""
    source = tmp_path / "in.txt"
    source.write_text("Zyxwq went to the qwzzx.\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", "--epsilon=10", f"--artifact={tiny_artifact_dir}",
            "--oov-policy=unk"] + RUNNER
    assert cli_main(argv + [f"--output={tmp_path}/o/x", f"--unk-token={marker}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "words" in err and "not one" in err and "Zyxwq" not in err, err
    assert not (tmp_path / "o").exists()
    assert cli_main(argv + [f"--output={tmp_path}/ok/x", "--unk-token=<unk>"]) == 0

    from textdp.artifact.store import Artifact
    from textdp.errors import ParameterError
    from textdp.text.privatizer import check_unk_token

    with pytest.raises(ParameterError, match="is read as 2 words"):
        check_unk_token(marker, Artifact(tiny_artifact_dir).word_to_id)


# --- F7: --delta that is no guarantee ---------------------------------------------------------------------------


def test_f7_a_delta_above_the_cap_is_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    """--delta 0.9 was accepted and the public summary headlined "(0.138, 0.9)-DP for every record". Now --delta above
    1e-3 is refused before the run: exit 2, one line, nothing written."""
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "text": "the pasta was cold"}\n', encoding="utf-8")
    for delta in ("0.9", "0.01", "0.0011"):
        code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=0.01",
                         f"--artifact={tiny_artifact_dir}", "--shuffle", "--drop-fields=id", f"--delta={delta}"] + RUNNER)
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err and "--delta must be in (0, 0.001]" in err, err
        assert not (tmp_path / "o").exists()


def test_f7_a_delta_above_one_over_n_withholds_the_shuffle_claim(tiny_artifact_dir, tmp_path, capsys):
    """With delta above 1/n for the n records shuffled, the theorem's (epsilon, delta) allows about delta x n records
    to be released verbatim: the run's report and public summary now say that no amplification is claimed and why
    (delta, 1/n with the run's n), and publish no shuffled epsilon. The same run with delta <= 1/n claims it: the
    sentence follows the run's own n."""
    n = 1500
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": "the pasta was cold"}) + "\n" for i in range(n)),
                      encoding="utf-8")
    results = {}
    for delta in ("1e-3", "1e-6"):
        out = tmp_path / delta
        code = cli_main(["privatize", f"--input={source}", f"--output={out}/x", "--epsilon=0.01",
                         f"--artifact={tiny_artifact_dir}", "--shuffle", "--drop-fields=id", f"--delta={delta}",
                         f"--public-summary={out}/pub.json"] + RUNNER)
        assert code == 0, capsys.readouterr().err
        with open(out / "x-amplification.json", encoding="utf-8") as handle:
            amplification = json.load(handle)
        with open(out / "pub.json", encoding="utf-8") as handle:
            public = json.load(handle)
        results[delta] = (amplification, public)
    assert results["1e-3"][0]["shuffle"]["claimed"] is False and results["1e-3"][0]["shuffle"]["epsilon"] is None
    assert '"claimed": false' in json.dumps(results["1e-3"][1]["amplification"]["shuffle"])
    text, public_text = json.dumps(results["1e-3"][0]), json.dumps(results["1e-3"][1])
    for where in (text, public_text):
        assert f"delta = 0.001 is above 1/n = 1/{n:,} for the {n:,} records shuffled" in where, where
        assert ", 0.001)-DP for every record" not in where
    assert '"delta_at_most_one_over_n": false' in text
    assert ", 1e-06)-DP for every record" in json.dumps(results["1e-6"][1])


# --- F10: a custom mechanism's exception message is not relayed ---------------------------------------------------


class Talky(CappedExponential):
    """Passes the launcher's trial (textdp.mechanisms.probe_ids), then raises an exception quoting the record's words."""

    name = "r6c-talky"

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids)
        if len(ids) and not np.isin(ids, probe_ids(self.vocab_size)).all():  # the trial's ids (and its band re-draws)
            raise ValueError("cannot privatize: " + " ".join(self.artifact_words[i] for i in ids))
        return CappedExponential.privatize_ids(self, ids, rng)

    def __init__(self, artifact, epsilon, **params):
        super().__init__(artifact, epsilon, **params)
        self.artifact_words = list(artifact.words)


def test_f10_a_custom_mechanisms_exception_is_relayed_by_type_only(tiny_artifact_dir, tmp_path, capsys):
    """The first line of a custom mechanism's worker exception was printed as is, and it quoted the record's words.
    Now the run fails (exit 1) with one line naming the custom mechanism and the exception's type, never its message."""
    from textdp.artifact.store import Artifact

    words = list(Artifact(tiny_artifact_dir).words)[100:106]
    source = tmp_path / "in.txt"
    source.write_text(" ".join(words) + "\n", encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/x", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", f"--mechanism={MODULE}:Talky"] + RUNNER)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "custom mechanism 'r6c-talky'" in err and "raised ValueError in privatize_ids" in err, err
    assert "cannot privatize" not in err and not any(f" {word} " in f" {err} " for word in words), err


# --- F5: CusText on vectors whose float32 scores overflow -------------------------------------------------------


def test_f5_custext_refuses_vectors_whose_scores_overflow(tmp_path, capsys):
    """On an artifact with one coordinate scaled by 1e20 CusText printed numpy's raw overflow warnings and built its
    groups from NaN scores. Now it is refused before the run in one line (exit 2), without a warning; the same
    vectors on a usual scale run."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(20, 8))
    words = [f"w{i}" for i in range(19)] + ["the"]
    for name, scale in (("huge", 1e20), ("usual", 1.0)):
        scaled = vectors.copy()
        scaled[:, 0] *= scale
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(w + " " + " ".join(f"{x:.6g}" for x in row) + "\n" for w, row in zip(words, scaled)),
                        encoding="utf-8")
        assert cli_main(["build-index", f"--embeddings={path}", f"--output={tmp_path}/a_{name}"]) == 0
    capsys.readouterr()
    source = tmp_path / "in.txt"
    source.write_text("the w1 w2 w3\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", "--epsilon=1", "--mechanism=custext"] + RUNNER
    with _no_runtime_warning():
        code = cli_main(argv + [f"--artifact={tmp_path}/a_huge", f"--output={tmp_path}/o/x"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "RuntimeWarning" not in err, err
    assert "custext cannot build its output sets on this artifact" in err, err
    assert not (tmp_path / "o").exists()
    assert cli_main(argv + [f"--artifact={tmp_path}/a_usual", f"--output={tmp_path}/ok/x"]) == 0


class _no_runtime_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self.caught = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        assert not [w for w in self.caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in self.caught]
