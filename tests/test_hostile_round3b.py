"""Run-time, parameter and API variants found by the third hostile round (issue 25; the findings are
numbered F3-F18 in the round's report): each has a defined outcome -- an error record, a one-line
refusal before the run (exit 2), or a warning on the console and in the summary. Real runs on the local
runner (FnApiRunner) and the real GloVe artifacts of tests/conftest.py; nothing is mocked."""

import glob
import json
import threading

import numpy as np
import pytest

import textdp
from pipelines.cli import main as cli_main

RUNNER = ["--runner", "FnApiRunner"]


def _run(capsys, args):
    code = cli_main(args + ([] if args[0] == "build-index" else RUNNER))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _privatize(tmp_path, artifact, *args, epsilon="10"):
    return ["privatize", "--epsilon", epsilon, "--artifact", artifact, "--output", str(tmp_path / "o" / "x"),
            "--seed", "1", *args]


def _summary(tmp_path):
    with open(tmp_path / "o" / "x-summary.json") as handle:
        return json.load(handle)


def _lines(pattern):
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as handle:
            out += [line for line in handle.read().splitlines() if line]
    return out


# --- F12: a record without its --user-field author is an error record, the job goes on ------------------


def test_a_record_without_its_author_is_an_error_record_under_shuffle(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text('{"u": "a", "text": "the city"}\n{"u": "b", "text": "he said"}\n'
                    '{"text": "SECRETCANARY was"}\n{"u": null, "text": "it was SECRETCANARY"}\n'
                    '{"u": "a", "text": "they were"}\n')
    code, out, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                             "--user-field", "u", "--max-failed-fraction", "1"))
    assert code == 0, err
    summary = _summary(tmp_path)
    records = summary["records"]
    assert (records["in"], records["out"], records["failed"]) == (5, 3, 2)
    assert records["failed_by_reason"] == {"missing_author": 2}
    errors = [json.loads(line) for line in _lines(str(tmp_path / "o" / "x-errors-*.jsonl"))]
    assert sorted((e["position"], e["reason"]) for e in errors) == [(3, "missing_author"), (4, "missing_author")]
    assert "absent" in errors[0]["detail"] + errors[1]["detail"] and "null" in errors[0]["detail"] + errors[1]["detail"]
    released = [json.loads(line) for line in _lines(str(tmp_path / "o" / "x-*-of-*.jsonl"))]
    assert len(released) == 3 and all("u" not in r for r in released)
    assert "SECRETCANARY" not in out + err + json.dumps(summary) + json.dumps(errors)


# --- F7 / F8: the Python API never hangs on a re-entrant call and refuses a 0-d array ---------------------


def _in_thread(function, seconds=120):
    """Runs ``function`` in a daemon thread; fails (instead of hanging the suite) if it does not return."""
    result = {}

    def target():
        try:
            result["value"] = function()
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call did not return within {seconds} s (deadlock)"
    return result


def test_a_generator_that_uses_the_same_privatizer_does_not_deadlock(tiny_artifact_dir):
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    texts = ["the city", "he said"]
    result = _in_thread(lambda: p.privatize(p.privatize([t], seed=1)[0] for t in texts))
    assert "error" not in result, result.get("error")
    assert len(result["value"]) == 2 and all(isinstance(text, str) for text in result["value"])
    # the Privatizer is still usable afterwards, from another thread too (the lock was released)
    assert len(_in_thread(lambda: p.privatize(["it was"]))["value"]) == 1

    class Sneaky(str):  # a str whose method calls the Privatizer while a call is running on this thread
        def strip(self, *args):
            return p.privatize(["the city"])[0]

    result = _in_thread(lambda: p.privatize([Sneaky("he said")]))
    assert isinstance(result.get("error"), textdp.TextdpError), result
    assert "called again from inside a call of the same Privatizer" in str(result["error"])
    assert len(_in_thread(lambda: p.privatize(["it was"]))["value"]) == 1


def test_a_0d_array_and_byte_buffers_are_refused_naming_the_kind(tiny_artifact_dir):
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    with pytest.raises(textdp.TextdpError, match="not a 0-d numpy array") as caught:
        p.privatize(np.array("the SECRETCANARY city"))
    assert isinstance(caught.value, TypeError) and "SECRETCANARY" not in str(caught.value)
    for buffer in (bytearray(b"the city"), memoryview(b"the city")):
        with pytest.raises(textdp.TextdpError, match=f"not a {type(buffer).__name__}"):
            p.privatize(buffer)
    assert len(p.privatize(np.array(["the city", "he said"]))) == 2  # a 1-d array is a list of texts


# --- F5 / F6: parameter values that make a mechanism the identity are refused by the one 1e-6 rule ---------


@pytest.fixture(scope="module")
def table_artifact_dir(tiny_artifact_dir, tmp_path_factory):
    """The 300-word artifact with a 20-nearest neighbour table (truncated-gumbel and santext+ need one)."""
    from tests.test_neighbours import copy_artifact, run_neighbours

    table = copy_artifact(tiny_artifact_dir, tmp_path_factory.mktemp("k20") / "art")
    run_neighbours(table, "--k=20")
    return table


def _words(n=200):
    return " ".join(["the city was good and he said it was not"] * (n // 10))


def test_gumbel_candidates_that_make_it_the_identity_are_refused_by_the_identity_rule(table_artifact_dir, tmp_path,
                                                                                       capsys):
    from textdp.mechanisms.truncated_gumbel import TruncatedGumbel

    assert TruncatedGumbel.MIN_CANDIDATES == pytest.approx(1e-6, rel=1e-6)
    data = tmp_path / "in.txt"
    data.write_text("the city was good\n")
    for mean in ("1e-9", "9.9e-7", "1e-15"):
        code, _, err = _run(capsys, _privatize(tmp_path, table_artifact_dir, "--input", str(data), "--mechanism",
                                               "truncated-gumbel", "--gumbel-candidates", mean, epsilon="50"))
        assert code == 2 and "every word would be released unchanged" in err and "below 1e-06" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    with pytest.raises(textdp.TextdpError, match="mean_candidates 5e-07 .*below 1e-06"):
        textdp.Privatizer(epsilon=50, artifact=table_artifact_dir, mechanism="truncated-gumbel",
                          gumbel_candidates=5e-7)
    # just above the rule it is accepted; at mean 0.5 words do change (seeded, so deterministic: each of the
    # 2,000 words changes with probability >= (1 - e^-0.5) / (1 + e^(d / 1)) > 0.002 for its nearest word
    # at d < 5, so all unchanged would have probability < e^-4 even unseeded)
    assert textdp.Privatizer(epsilon=50, artifact=table_artifact_dir, mechanism="truncated-gumbel",
                             gumbel_candidates=1.1e-6)
    p = textdp.Privatizer(epsilon=50, artifact=table_artifact_dir, mechanism="truncated-gumbel",
                          gumbel_candidates=0.5, gumbel_scale=1.0)
    text = _words(2000)
    assert p.privatize([text], seed=3)[0] != text


def test_santext_plus_p_below_the_identity_rule_is_refused(table_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.txt"
    data.write_text("the city was good\n")
    for p in ("1e-300", "9e-7"):
        code, _, err = _run(capsys, _privatize(tmp_path, table_artifact_dir, "--input", str(data), "--mechanism",
                                               "santext+", "--sensitive-fraction", "0.004", "--santext-p", p,
                                               epsilon="1"))
        assert code == 2 and "every non-sensitive word would be released unchanged" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    with pytest.raises(textdp.TextdpError, match="santext p 1e-07 is below 1e-06"):
        textdp.Privatizer(epsilon=1, artifact=table_artifact_dir, mechanism="santext+", santext_p=1e-7)
    assert textdp.Privatizer(epsilon=1, artifact=table_artifact_dir, mechanism="santext+", santext_p=1e-6)


# --- F4: Mahalanobis noise on vectors with no usable covariance is refused before the run -----------------

WORDS20 = "the city was good he said it not and a of to in is that for on with as at".split()


def _build(tmp_path, name, rows, capsys):
    source = tmp_path / f"{name}.txt"
    source.write_text("".join(f"{w} {' '.join(f'{x:g}' for x in row)}\n" for w, row in zip(WORDS20, rows)))
    out = str(tmp_path / name)
    code, _, err = _run(capsys, ["build-index", "--embeddings", str(source), "--output", out, "--trees", "2"])
    assert code == 0, err
    return out


def test_mahalanobis_noise_without_a_usable_covariance_is_refused_before_the_run(tmp_path, capsys):
    same = _build(tmp_path, "same", [[1.0] * 8] * 20, capsys)  # zero variance
    line = _build(tmp_path, "line", [[float(i)] + [1.0] * 7 for i in range(20)], capsys)  # covariance of rank 1
    data = tmp_path / "in.txt"
    data.write_text("the city was good\n")
    cases = [(same, ["--mechanism", "mahalanobis"], "mahalanobis noise on this artifact: the vectors have zero variance"),
             (same, ["--mechanism", "vickrey", "--vickrey-noise", "mahalanobis"],
              "vickrey's mahalanobis noise on this artifact: the vectors have zero variance"),
             (line, ["--mechanism", "mahalanobis", "--lambda", "1"], "the regularized covariance is singular")]
    for artifact, flags, message in cases:
        code, _, err = _run(capsys, _privatize(tmp_path, artifact, "--input", str(data), *flags))
        assert code == 2 and message in err and "pipeline failed" not in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    with pytest.raises(textdp.TextdpError, match="zero variance"):
        textdp.Privatizer(epsilon=10, artifact=same, mechanism="mahalanobis")
    # what the noise can use still runs: Madlib noise on the same vectors, lambda < 1 on the rank-1 covariance
    for artifact, flags in ((same, ["--mechanism", "vickrey"]), (line, ["--mechanism", "mahalanobis", "--lambda", "0.5"])):
        code, _, err = _run(capsys, _privatize(tmp_path, artifact, "--input", str(data), *flags, "--overwrite"))
        assert code == 0, err


# --- F3: build-index --trees / --seed beyond Annoy's C int are refused in one line before reading ------------


def test_build_index_trees_and_seed_beyond_a_c_int_are_refused_before_reading(tmp_path, capsys):
    missing = str(tmp_path / "not-there.txt")  # never read: the refusal comes first
    for flag, value, message in (("--trees", "100000000000", "--trees must be an integer from 1 to 2,147,483,647"),
                                 ("--trees", "0", "--trees must be an integer from 1"),
                                 ("--seed", "99999999999999999999", "--seed must be an integer from 0 to 2,147,483,647"),
                                 ("--seed", "2147483648", "--seed must be an integer from 0"),
                                 ("--seed", "-1", "--seed must be an integer from 0")):
        code, _, err = _run(capsys, ["build-index", "--embeddings", missing, "--output", str(tmp_path / "a"),
                                     flag, value])
        assert code == 2 and message in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "a").exists()
    source = tmp_path / "ok.txt"
    source.write_text("".join(f"{w} {i} 1 2\n" for i, w in enumerate(WORDS20)))
    code, _, err = _run(capsys, ["build-index", "--embeddings", str(source), "--output", str(tmp_path / "a"),
                                 "--trees", "2", "--seed", "2147483647"])
    assert code == 0, err
    with open(tmp_path / "a" / "manifest.json") as handle:
        assert json.load(handle)["annoy"]["seed"] == 2147483647


# --- F17: worker thread/process counts beyond sane bounds are refused before the run ------------------------


def test_blas_threads_and_worker_counts_beyond_bounds_are_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.txt"
    data.write_text("the city was good\n")
    words = tmp_path / "words.txt"
    words.write_text("city\n")
    jobs = {"privatize": _privatize(tmp_path, tiny_artifact_dir, "--input", str(data)),
            "calibrate": ["calibrate", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--samples", "5",
                          "--word-list", str(words), "--output", str(tmp_path / "o" / "cal")]}
    for job, args in jobs.items():
        for flag, value in (("--blas-threads", "100000000000000000000"), ("--blas-threads", "-1"),
                            ("--blas-threads", "1025"), ("--direct_num_workers", "100000000000")):
            code, _, err = _run(capsys, args + [flag, value])
            assert code == 2 and f"{flag} must be an integer from 0 (automatic) to 1024" in err, (job, err)
            assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    code, _, err = _run(capsys, jobs["privatize"] + ["--blas-threads", "1024"])  # the bound itself runs
    assert code == 0, err


# --- F16: a calibrate --word-list with no vocabulary word is refused before the run --------------------------


def test_calibrate_word_list_without_a_vocabulary_word_is_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    out = tmp_path / "cal"
    for content in ("SECRETCANARY\nzzzz\n", "   \n\t\nthe city\n"):  # the second: one line of two words
        words = tmp_path / "words.txt"
        words.write_text(content)
        code, _, err = _run(capsys, ["calibrate", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--samples",
                                     "5", "--word-list", str(words), "--output", str(out)])
        assert code == 2 and "is one word of the artifact's vocabulary" in err and "pipeline failed" not in err, err
        assert "SECRETCANARY" not in err and len(err.strip().splitlines()) == 1
        assert not out.exists()  # nothing written, not even an empty directory
    words.write_text("SECRETCANARY\nCity\n")  # one line is a vocabulary word (looked up as privatize does): it runs
    code, _, err = _run(capsys, ["calibrate", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--samples", "5",
                                 "--word-list", str(words), "--output", str(out)])
    assert code == 0, err


# --- F18: a --k-threshold that masks every word warns on the console and in both summaries ----------------


def test_a_k_threshold_above_the_authors_warns_that_every_word_was_masked(tiny_artifact_dir, tmp_path, capsys):
    from transforms.amplifier import k_threshold_warnings

    data = tmp_path / "in.jsonl"
    data.write_text('{"u": "a", "text": "the city"}\n{"u": "b", "text": "the city"}\n{"u": "a", "text": "he said"}\n')
    public = tmp_path / "o" / "public.json"
    code, out, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                             "--user-field", "u", "--k-threshold", "3", "--public-summary",
                                             str(public)))
    assert code == 0, err
    expected = "--k-threshold 3 is above the number of distinct authors (--user-field values) of this run"
    assert expected in out + err
    assert any(expected in w for w in _summary(tmp_path)["warnings"])
    with open(public) as handle:
        assert any(expected in w for w in json.load(handle)["warnings"])
    released = [json.loads(line)["text"] for line in _lines(str(tmp_path / "o" / "x-*-of-*.jsonl"))]
    # the warning is true: no word is left, only markers (and punctuation a released vocabulary word such as "'s"
    # brings: the stage masks the word part, the apostrophe is structure; seen once as "'<rare> <rare>")
    assert released and all(not any(c.isalnum() for c in text.replace("<rare>", "")) for text in released), released
    # K = 1 masks nothing and says nothing
    code, out, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                             "--user-field", "u", "--k-threshold", "1", "--overwrite"))
    # (the run may still say it changed no vocabulary word: on three records that is chance, and a warning of its own)
    assert code == 0 and "--k-threshold" not in out + err
    assert not [w for w in _summary(tmp_path)["warnings"] if "k-threshold" in w or "fewer than" in w]
    # every word type below K though K is within the authors: the other warning (the stage's own counts)
    stats = {"records_out": 4, "authors": 4, "per_author": False, "word_types": 6, "rare_word_types": 6}
    assert "every word type was used by fewer than 2 distinct authors (each record" in k_threshold_warnings(2, stats)[0]
    assert k_threshold_warnings(2, dict(stats, rare_word_types=5)) == []


# --- F14: a field-name refusal never lists a key that looks like data -------------------------------------


def test_field_name_refusals_list_only_identifier_like_names_at_most_ten(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    keys = {"text": "the city", "SECRETCANARY@mail.com": "x", "user id with spaces SECRET2": 1, "id": 3}
    keys.update({f"f{i:02d}": i for i in range(12)})
    data.write_text(json.dumps(keys) + "\n")
    for flag, name in (("--drop-fields", "SECRETCANARY@mail.co"), ("--user-field", "usr"), ("--text-field", "txt")):
        extra = ["--shuffle"] if flag != "--text-field" else []
        code, _, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), *extra, flag, name))
        assert code == 2 and "no such field" in err, err
        assert "SECRETCANARY@mail.com" not in err and "SECRET2" not in err  # keys that look like data: never shown
        listed = ", ".join(f"'f{i:02d}'" for i in range(10))  # sorted, the first 10 identifier-like names
        assert f"fields there: {listed} and 6 other field(s)" in err  # 16 keys: 4 identifier-like, 2 data-like not shown
        assert len(err.strip().splitlines()) == 1
    data.write_text('{"text": "the city", "id": 1}\n')  # a near miss among identifier-like names still gets its hint
    code, _, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                           "--drop-fields", "idd"))
    assert code == 2 and "did you mean 'id'?" in err and "fields there: 'id', 'text'" in err and " other field" not in err


# --- F15: an input in another format than the one given (or inferred) -----------------------------------


def test_an_input_in_the_wrong_format_is_refused_or_warned_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text("the SECRETCANARY city\nhe said\n\nit was\n")
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text('{"id": 2, "text": "it was SECRETCANARY"}\n{"id": 3, "text": "the city"}\n')
    # plain text read as JSONL (given, or inferred from a .jsonl name): refused, no line quoted
    named = tmp_path / "plain.jsonl"
    named.write_text(plain.read_text())
    for args in (["--input", str(plain), "--format", "jsonl"], ["--input", str(named)]):
        code, _, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, *args))
        assert code == 2 and "is not JSONL: none of its first 3 non-blank line(s) is JSON or starts like it" in err, err
        assert "SECRETCANARY" not in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    # a Parquet file given as text or JSONL: named as such (it was "UTF-16 ... or binary")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": ["the city"]}), parquet)
    for fmt in ("text", "jsonl"):
        code, _, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(parquet), "--format", fmt))
        assert code == 2 and "is a Parquet file (it starts with PAR1)" in err, err
    # audit's --corpus-format takes the same check (it ran, then failed with "no record to attack")
    code, _, err = _run(capsys, ["audit", "--artifact", tiny_artifact_dir, "--epsilons", "5", "--seed", "1",
                                 "--output", str(tmp_path / "o" / "audit"), "--checks", "inversion", "--corpus",
                                 str(plain), "--records", "5", "--corpus-format", "jsonl"])
    assert code == 2 and "is not JSONL" in err and not (tmp_path / "o").exists(), err
    # JSONL read as plain text: the user said so (--format text); it runs, with a warning on the console and in
    # both summaries (the keys would be privatized as words), naming no line and no path
    public = tmp_path / "o" / "public.json"
    code, out, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(jsonl), "--format", "text",
                                             "--public-summary", str(public)))
    expected = "--input is read as plain text, but the first 2 non-blank lines of one of its files are all JSON objects"
    assert code == 0 and expected in err and expected in out, err
    assert any(expected in w for w in _summary(tmp_path)["warnings"])
    with open(public) as handle:
        assert any(expected in w for w in json.load(handle)["warnings"])
    # the right formats say nothing
    for args in (["--input", str(jsonl)], ["--input", str(plain)]):
        # (epsilon 1: at 10 the tiny fixture's four words come out unchanged and the run says so, a warning of its own)
        code, out, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, *args, "--overwrite", epsilon="1"))
        assert code == 0 and "WARNING" not in out + err, err


# --- F9: transforms.Privatize refuses at construction what a worker would fail on ----------------------------


@pytest.mark.parametrize("keywords, message", [
    ({"seed": -1}, "seed must be >= 0"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"seed": "7"}, "seed must be an integer"),
    ({"seed": True}, "seed must be an integer"),
    ({"max_text_bytes": "10"}, "max_text_bytes must be an integer"),
    ({"max_text_bytes": 0}, "max_text_bytes must be >= 1"),
    ({"batch_tokens": "5"}, "batch_tokens must be an integer"),
    ({"batch_tokens": 0.5}, "batch_tokens must be an integer"),
    ({"gamma": 1.0}, "parameter 'gamma' does not apply to mechanism 'madlib'"),
    ({"text_fields": [1]}, "text_fields must be non-empty field names"),
    ({"text_fields": [""]}, "text_fields must be non-empty field names"),
    ({"mechanism": "tem"}, "needs a neighbour table"),
])
def test_privatize_transform_refuses_at_construction_what_a_worker_would_fail_on(tiny_artifact_dir, keywords, message):
    """Each of these used to construct and then fail on a worker (a traceback), or send every record to the error
    output; now it is one TextdpError line when the pipeline is built, as textdp.Privatizer refuses it."""
    from transforms import Privatize

    with pytest.raises(textdp.TextdpError, match=message):
        Privatize(**dict({"epsilon": 5, "artifact": tiny_artifact_dir}, **keywords))


def test_privatize_transform_refuses_a_missing_artifact_at_construction(tmp_path):
    from transforms import Privatize

    with pytest.raises(textdp.TextdpError, match="not a directory|no such"):
        Privatize(epsilon=5, artifact=str(tmp_path / "nope"))
