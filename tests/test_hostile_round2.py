"""Variants found by a second hostile-user round (issue 25, "a fresh round finds nothing new"): each has
a defined outcome, a one-line refusal before the run (exit 2) or one line at exit 1, never exit 0 for a
run that released nothing. Real runs on the local runner and the 300-word GloVe artifact."""

import decimal
import json
import os
import pathlib

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

import textdp
from pipelines.cli import main as cli_main
from textdp.mechanisms import EPSILON_RANGE_HELP
from transforms import Privatize

RUNNER = ["--runner", "FnApiRunner"]


def _run(capsys, args):
    code = cli_main(args + RUNNER)
    captured = capsys.readouterr()
    return code, captured.err


def _privatize(tmp_path, tiny_artifact_dir, *args):
    return ["privatize", "--epsilon", "10", "--artifact", tiny_artifact_dir, "--output", str(tmp_path / "o" / "x"),
            *args]


def test_a_run_that_released_nothing_exits_1_in_one_line(tiny_artifact_dir, tmp_path, capsys):
    """Every record fails in the run (each over --max-record-bytes; an input of blank lines only is refused before
    the run since R10-7): exit 1, one line, the counts still written."""
    large = tmp_path / "large.txt"
    large.write_text("the good movie was long\n" * 3)
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(large), "--max-record-bytes", "5"))
    assert code == 1 and "no record was privatized: 3 of 3 failed (too_large 3)" in err, err
    assert len(err.strip().splitlines()) == 1
    summary = json.load(open(tmp_path / "o" / "x-summary.json"))
    assert summary["records"]["out"] == 0 and summary["records"]["failed"] == 3  # the counts are still written


def test_text_field_typos_and_empty_names_are_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a secret line", "id": 1}\n{"text": "the good movie", "id": 2}\n')
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--text-field", "TEXT"))
    assert code == 2 and "did you mean 'text'?" in err and "secret" not in err
    for empty in ("", ",", " "):
        code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--text-field", empty))
        assert code == 2 and "--text-field must name a field" in err
    assert not (tmp_path / "o").exists() or os.listdir(tmp_path / "o") == []


def test_drop_fields_on_plain_text_is_refused(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.txt"
    data.write_text("hello world\n")
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                        "--drop-fields", "id"))
    assert code == 2 and "--drop-fields needs JSONL or Parquet input" in err


@pytest.mark.parametrize("token", ["", "a b", "\t"])
def test_unk_token_is_refused_alike_by_the_cli_the_api_and_the_transform(tiny_artifact_dir, tmp_path, capsys, token):
    data = tmp_path / "in.txt"
    data.write_text("hello qqqzzzx\n")
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--oov-policy", "unk",
                                        "--unk-token", token))
    assert code == 2 and "unk_token must be a non-empty string without whitespace" in err
    for build in (textdp.Privatizer, Privatize):
        with pytest.raises(textdp.TextdpError, match="unk_token must be"):
            build(epsilon=5, artifact=tiny_artifact_dir, oov_policy="unk", unk_token=token)


def test_api_epsilon_beyond_float_and_path_artifacts(tiny_artifact_dir):
    for build in (textdp.Privatizer, Privatize):
        with pytest.raises(textdp.TextdpError, match="got inf"):
            build(epsilon=10 ** 400, artifact=tiny_artifact_dir)
        with pytest.raises(textdp.TextdpError, match="must be a number .int or float., got a Decimal"):
            build(epsilon=decimal.Decimal("10"), artifact=tiny_artifact_dir)
        with pytest.raises(textdp.TextdpError, match="artifact must be a path"):
            build(epsilon=5, artifact=tiny_artifact_dir.encode())
    by_path = textdp.Privatizer(epsilon=5, artifact=pathlib.Path(tiny_artifact_dir))
    assert by_path.privatize(["the movie"], seed=1) == textdp.Privatizer(
        epsilon=5, artifact=tiny_artifact_dir).privatize(["the movie"], seed=1)


@pytest.mark.parametrize("flags, message", [
    (["--max-nw", "nan"], "--max-nw must be a probability"), (["--max-nw", "2"], "--max-nw must be a probability"),
    (["--min-sw", "nan"], "--min-sw must be a finite number"), (["--samples", "1000000000000"], "--samples must be between"),
])
def test_calibrate_targets_and_samples_are_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys, flags, message):
    code, err = _run(capsys, ["calibrate", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--words", "3",
                              "--output", str(tmp_path / "c")] + flags)
    assert code == 2 and message in err


@pytest.mark.parametrize("flag", ["--draws", "--linkage-window", "--records", "--mc-draws"])
def test_audit_sizes_beyond_memory_are_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys, flag):
    code, err = _run(capsys, ["audit", "--artifact", tiny_artifact_dir, "--epsilons", "5",
                              "--output", str(tmp_path / "a"), f"{flag}=9223372036854775807"])
    assert code == 2 and f"{flag} must be between" in err


def test_huge_max_record_bytes_is_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.txt"
    data.write_text("hello world\n")
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data),
                                        "--max-record-bytes", "9223372036854775806"))
    assert code == 2 and "--max-record-bytes must be between 1 and" in err


def test_audit_linkage_that_compares_nothing_is_not_a_success(tiny_artifact_dir, tmp_path, capsys):
    """A local text corpus whose records are all shorter than --linkage-window is refused before the run (round 9,
    R9-14: it used to run every other part first); one the launcher does not read (Parquet) fails after the run,
    exit 1, never "success"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = tmp_path / "short.txt"
    corpus.write_text("the good movie\n" * 200)  # 3 words per record, window 20
    code, err = _run(capsys, ["audit", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--checks", "linkage",
                              "--corpus", str(corpus), "--records", "50", "--output", str(tmp_path / "a")])
    assert code == 2 and "no record of --corpus has at least --linkage-window 20 words (the longest has 3)" in err
    assert not (tmp_path / "a").exists()
    pq.write_table(pa.table({"text": ["the good movie"] * 200}), tmp_path / "short.parquet")
    code, err = _run(capsys, ["audit", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--checks", "linkage",
                              "--corpus", str(tmp_path / "short.parquet"), "--records", "50",
                              "--output", str(tmp_path / "b")])
    assert code == 1 and "linkage compared nothing: no record of --corpus has at least 20 words" in err
    report = open(tmp_path / "b" / "report.html", encoding="utf-8").read()
    assert "Nothing was compared" in report and "give --corpus" not in report


def test_keyed_elements_that_are_not_pairs_become_error_records(tiny_artifact_dir):
    elements = ["SECRETNOTPAIR", "SE", None, ("k", "the good movie"), ["j", "a movie"]]
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        result = pipeline | beam.Create(elements) | Privatize(epsilon=10, artifact=tiny_artifact_dir, keyed=True,
                                                              seed=1)
        reasons = result.errors | beam.Map(lambda e: (e["reason"], "SECRET" in json.dumps(e)))
        assert_that(reasons, equal_to([("not_a_pair", False)] * 3), label="errors")
        assert_that(result.released | beam.combiners.Count.Globally(), equal_to([2]), label="released")


def test_the_epsilon_range_does_not_claim_noise_up_to_its_top():
    """F19: between ~100 and 1e6 nearly every word is released unchanged; the range's help says so."""
    assert "already from about 100 on" in EPSILON_RANGE_HELP and "nearly every word is released unchanged" \
        in EPSILON_RANGE_HELP


@pytest.mark.parametrize("kind", ["fifo", "directory", "not-utf8"])
def test_pair_list_and_word_list_files_are_checked_before_they_are_opened(tiny_artifact_dir, tmp_path, capsys, kind):
    path = tmp_path / "list.txt"
    if kind == "fifo":
        os.mkfifo(path)  # opening it would block until a writer appears: it must not be opened
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"movie good\n\xff\xfe zz\n")
    expected = {"fifo": "is not a regular file", "directory": "is a directory",
                "not-utf8": "is not UTF-8: an invalid byte on line 2 (byte 0 of the line)"}[kind]
    for job, flag, extra in (("audit", "--pair-list", ["--pairs", "1", "--draws", "100"]),
                             ("calibrate", "--word-list", [])):
        code, err = _run(capsys, [job, "--artifact", tiny_artifact_dir, "--epsilons", "5", flag, str(path),
                                  "--output", str(tmp_path / job)] + extra)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
        assert "0xff" not in err and "Traceback" not in err


def test_a_refusal_before_the_run_does_not_say_the_pipeline_failed(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.txt"
    data.write_text("hello world\n")
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                        "--k-threshold", "0"))
    assert code == 2 and err.strip() == "textdp privatize: error: --k-threshold must be >= 1"


# --- mechanism parameters that break a mechanism or make it the identity (red-team F11, F12, F18, F21) ------

def test_an_artifact_of_one_word_is_refused_by_build_index_and_by_every_mechanism(tmp_path, capsys):
    from pipelines.build_index import run as build_index
    from textdp.mechanisms import ALL_MECHANISMS, mechanism_class

    assert build_index(["--output", str(tmp_path / "one"), "--vocab-size", "1"]) == 2
    assert "needs at least 2 words" in capsys.readouterr().err and not (tmp_path / "one").exists()

    class OneWord:  # what a launcher knows of an artifact built elsewhere: its manifest's facts
        vocab_size = 1
        manifest = {"vocab_size": 1}

    for name in ALL_MECHANISMS:
        with pytest.raises(textdp.TextdpError, match="needs at least 2"):
            mechanism_class(name).check_parameters(5.0, OneWord())


def test_annoy_search_k_beyond_a_c_int_is_refused(tiny_artifact_dir):
    for build in (textdp.Privatizer, Privatize):
        with pytest.raises(textdp.TextdpError, match="search_k must be <= 2,147,483,647, got 9,223,372,036,854,775,807"):
            build(epsilon=5, artifact=tiny_artifact_dir, nn="annoy", search_k=2 ** 63 - 1)


def test_truncated_gumbel_refuses_a_one_column_table_and_a_scale_that_makes_it_the_identity(tmp_path, tiny_artifact_dir,
                                                                                          capsys):
    from tests.test_neighbours import copy_artifact, run_neighbours

    one = copy_artifact(tiny_artifact_dir, tmp_path / "k1")
    run_neighbours(one, "--k=1")
    with pytest.raises(textdp.TextdpError, match=r"holds each word alone \(K = 1\).*--k 2"):
        textdp.Privatizer(epsilon=100, artifact=one, mechanism="truncated-gumbel")
    table = copy_artifact(tiny_artifact_dir, tmp_path / "k20")
    run_neighbours(table, "--k=20")
    for identity in ({"gumbel_scale": 1e-300}, {"gumbel_scale": 0.01}, {"gumbel_scale": 1.0, "gumbel_max_distance": 0.1},
                     {"gumbel_scale": 1.0, "gumbel_candidates": 1e-300}):  # second round: G1
        with pytest.raises(textdp.TextdpError, match="every word would be released unchanged"):
            textdp.Privatizer(epsilon=100, artifact=table, mechanism="truncated-gumbel", **identity)
    data = tmp_path / "in.txt"
    data.write_text("the good movie\n")
    code, err = _run(capsys, ["privatize", "--epsilon", "100", "--artifact", table, "--input", str(data), "--output",
                              str(tmp_path / "o" / "x"), "--mechanism", "truncated-gumbel", "--gumbel-scale", "1e-300"])
    assert code == 2 and "every word would be released unchanged" in err
    assert textdp.Privatizer(epsilon=100, artifact=table, mechanism="truncated-gumbel", gumbel_scale=0.4)  # still fine


# --- the second hostile round's findings (G1-G8) ----------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_wide_encodings_are_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys, encoding):
    """G6: read as UTF-8, UTF-16 text is one letter per word with NULs kept as layout (word lengths leak)."""
    data = tmp_path / "wide.txt"
    data.write_bytes("the secret password is swordfish\nmy pin is 4821\n".encode(encoding))
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data)))
    assert code == 2 and "not UTF-8: convert it" in err and "swordfish" not in err
    code, err = _run(capsys, ["audit", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--checks", "inversion",
                              "--corpus", str(data), "--output", str(tmp_path / "a")])
    assert code == 2 and "not UTF-8: convert it" in err


def test_subsampling_that_drops_every_record_is_not_a_success(tiny_artifact_dir, tmp_path, capsys):
    """G2: 0 out because --subsample dropped everything: exit 1 in one line; the headline counts the drops."""
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "the good movie"}\n{"text": "a movie"}\n')
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                        "--subsample", "1e-9"))
    assert code == 1 and "no record was released: --subsample dropped all 2 of 2" in err


def test_linkage_names_the_real_reason_it_compared_nothing(tiny_artifact_dir, tmp_path, capsys):
    """G3: records long enough, but every --linkage-sizes set larger than the pool."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(("the good movie was a movie of the year and the people said it was good " * 2 + "\n") * 30)
    code, err = _run(capsys, ["audit", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--checks", "linkage",
                              "--corpus", str(corpus), "--records", "10", "--output", str(tmp_path / "a")])
    assert code == 1 and "every --linkage-sizes set is larger than the" in err and "give smaller --linkage-sizes" in err


def test_empty_and_repeated_flags_are_refused(tiny_artifact_dir, tmp_path, capsys):
    """G5, G8: `--artifact ''` (an unset variable) used the 400k default silently; a repeated flag kept its last value."""
    data = tmp_path / "in.txt"
    data.write_text("the good movie\n")
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data)) + ["--artifact="])
    assert code == 2 and "--artifact is given 2 times" in err
    code, err = _run(capsys, ["privatize", "--epsilon", "10", "--artifact", "", "--input", str(data), "--output",
                              str(tmp_path / "o" / "y")])
    assert code == 2 and "--artifact is empty" in err
    code, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--epsilon", "5"))
    assert code == 2 and "--epsilon is given 2 times; give it once" in err
    with pytest.raises(textdp.TextdpError, match="artifact is empty"):
        textdp.Privatizer(epsilon=5, artifact="")

