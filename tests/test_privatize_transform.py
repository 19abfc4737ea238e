"""``transforms.Privatize`` as a drop-in step: TestPipeline + assert_that on a 300-word real artifact.

Wiring only (outputs, counts, inputs of both kinds, a user pipeline around it); the mechanisms'
distributions are tested in test_madlib.py / test_tem.py, and the transform's distribution against
the Python API's in test_api.py.
"""

import apache_beam as beam
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to, is_not_empty

from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from transforms import Privatize

IDENTITY = 1e6  # far below any distance between words: the release is the input (tests/test_madlib.py)


def _pipeline():
    return test_pipeline.TestPipeline(runner="FnApiRunner")


@pytest.fixture(scope="module")
def words(tiny_artifact_dir):
    return [w for w in open_artifact(tiny_artifact_dir).words if w.isalpha()]


def test_strings_in_strings_out_with_counts(tiny_artifact_dir, words):
    texts = [f"The {words[5]} {words[9]}, {words[20]}!", f"{words[30].upper()} and {words[40]}"]
    with _pipeline() as pipeline:
        result = pipeline | beam.Create(texts) | Privatize(epsilon=IDENTITY, artifact=tiny_artifact_dir)
        assert_that(result.released, equal_to(texts), label="released")
        assert_that(result.errors, equal_to([]), label="errors")
        assert_that(result.stats, equal_to([{"records": 2, "tokens": 7, "changed_tokens": 0, "unknown_tokens": 0,
                                             "failed": 0}]), label="stats")


def test_dict_records_keep_their_other_fields(tiny_artifact_dir, words):
    records = [{"id": 1, "review": f"a {words[3]} {words[4]}", "title": words[7], "stars": 4.5},
               {"id": 2, "review": words[8], "title": f"{words[9]} {words[10]}", "stars": None}]
    with _pipeline() as pipeline:
        result = pipeline | beam.Create(records) | Privatize(epsilon=IDENTITY, artifact=tiny_artifact_dir,
                                                             text_fields=["review", "title"])
        assert_that(result.released, equal_to(records))


def test_bad_records_are_error_records_without_text(tiny_artifact_dir, words):
    """None, bytes, a missing or non-string field, a blank text: error records with a reason code and a
    detail in words, never the text; the good record is released; stats count both."""
    secret = "canary-7734"
    records = [{"review": f"{words[3]} {secret}"}, {"other": secret}, {"review": None}, {"review": 5},
               {"review": "   "}, None, secret.encode("utf-8")]
    with _pipeline() as pipeline:
        result = pipeline | beam.Create(records) | Privatize(epsilon=5, artifact=tiny_artifact_dir,
                                                             text_fields="review")
        assert_that(result.released | beam.Map(lambda r: sorted(r)), equal_to([["review"]]), label="released")
        assert_that(result.errors | beam.Map(lambda e: (e["reason"], e["detail"])), equal_to([
            ("missing_field", "no field 'review'"),
            ("not_a_string", "field 'review' is a null, not a string"),
            ("not_a_string", "field 'review' is a number, not a string"),
            ("empty", "every text field is empty"),
            ("not_an_object", "the record is a null, not an object with text fields"),
            ("not_an_object", "the record is bytes, not an object with text fields")]), label="errors")
        assert_that(result.errors | beam.Map(lambda e: secret in str(e)), equal_to([False] * 6), label="no text")
        assert_that(result.stats | beam.Map(lambda s: (s["records"], s["failed"], s["failed:not_a_string"])),
                    equal_to([(1, 6, 2)]), label="stats")


def test_keyed_records_name_their_source_in_error_records(tiny_artifact_dir, words):
    with _pipeline() as pipeline:
        result = (pipeline | beam.Create([(("a.txt", 1), words[2]), (("a.txt", 2), "")])
                  | Privatize(epsilon=5, artifact=tiny_artifact_dir, keyed=True))
        assert_that(result.errors, equal_to([{"source": "a.txt", "position": 2, "reason": "empty",
                                              "detail": "no text"}]), label="errors")
        assert_that(result.released, is_not_empty(), label="released")


def test_inside_a_users_pipeline(tiny_artifact_dir, words):
    """A user's pipeline: CSV lines parsed to dicts, one column privatized, rows formatted again."""
    import csv

    lines = [f'{i},"{words[i]} {words[i + 1]}",{i * 10}' for i in range(1, 6)]

    def parse(line):
        row = next(csv.reader([line]))
        return {"id": int(row[0]), "comment": row[1], "score": int(row[2])}

    with _pipeline() as pipeline:
        rows = pipeline | "Lines" >> beam.Create(lines) | "Parse" >> beam.Map(parse)
        private = rows | "Privatize" >> Privatize(epsilon=IDENTITY, artifact=tiny_artifact_dir, text_fields=["comment"])
        out = private.released | "Format" >> beam.Map(lambda r: f'{r["id"]},"{r["comment"]}",{r["score"]}')
        assert_that(out, equal_to(lines))


_COLLECTED = {}


def _keep(named):
    """Store (name, values) here: a module-level function is pickled by reference, so the in-process
    FnApiRunner writes into this module's dict (a closure would carry a copy of it)."""
    _COLLECTED[named[0]] = named[1]


def test_redistributed_batches_release_the_same_records(tiny_artifact_dir, words):
    """``redistribute=True`` (what ``textdp privatize`` uses: a Reshuffle of whole batches) changes where
    batches run, not what they release: seeded keyed records in several batches, one error record."""
    records = [(("r.txt", i), f"{words[i]} {words[i + 1]} {words[i + 2]}") for i in range(1, 41)]
    records.append((("r.txt", 41), ""))
    for redistribute in (False, True):
        with _pipeline() as pipeline:
            result = (pipeline | beam.Create(records)
                      | Privatize(epsilon=3, artifact=tiny_artifact_dir, keyed=True, seed=11, batch_tokens=7,
                                  redistribute=redistribute))
            for name in ("released", "errors", "stats"):
                _ = (getattr(result, name) | f"All{name}" >> beam.combiners.ToList()
                     | f"Name{name}" >> beam.Map(lambda values, key=(redistribute, name): (key, values))
                     | f"Keep{name}" >> beam.Map(_keep))
    for name in ("released", "errors", "stats"):
        assert sorted(map(repr, _COLLECTED[(True, name)])) == sorted(map(repr, _COLLECTED[(False, name)])), name
    assert len(_COLLECTED[(True, "released")]) == 40 and len(_COLLECTED[(True, "errors")]) == 1
    assert _COLLECTED[(True, "stats")][0]["changed_tokens"] > 0  # epsilon 3: words were replaced


def test_bad_parameters_fail_at_construction():
    for kwargs, message in (({"epsilon": float("inf")}, "epsilon"), ({"epsilon": 0}, "epsilon"),
                            ({"epsilon": 5, "oov_policy": "drop"}, "oov_policy"),
                            ({"epsilon": 5, "batch_tokens": 0}, "batch_tokens")):
        with pytest.raises(ValueError, match=message):
            Privatize(**kwargs)


def test_the_example_pipeline_runs(tiny_artifact_dir, tmp_path):
    """examples/privatize_csv_to_parquet.py, as a user runs it: 30 CSV rows -> 30 Parquet rows with the
    same ids and ratings, each review with the same number of words; the counts file reconciles."""
    import csv
    import json
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from tests.conftest import REPO
    from textdp.text.tokenize import Tokenizer

    output = str(tmp_path / "csv-reviews")
    result = subprocess.run([sys.executable, "examples/privatize_csv_to_parquet.py", "--input",
                             "examples/reviews.csv", "--output", output, "--epsilon", "10",
                             "--artifact", tiny_artifact_dir], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(f"{REPO}/examples/reviews.csv", encoding="utf-8", newline="") as handle:
        source = {row["id"]: row for row in csv.DictReader(handle)}
    rows = [row for path in sorted(tmp_path.glob("csv-reviews-*.parquet")) for row in pq.read_table(path).to_pylist()]
    assert sorted(r["id"] for r in rows) == sorted(source) and len(rows) == 30
    tokenizer = Tokenizer(open_artifact(tiny_artifact_dir).word_to_id)
    for row in rows:
        assert row["rating"] == int(source[row["id"]]["rating"])
        assert len(tokenizer.tokenize(row["review"]).slots) >= 1
    counts = json.loads(open(f"{output}-counts.json", encoding="utf-8").read())
    assert counts["records"] == 30 and counts["failed"] == 0
    assert open(f"{output}-errors.jsonl", encoding="utf-8").read() == ""


def test_batch_size_defaults_by_how_the_mechanism_draws(neighbour_artifact_dir):  # noqa: F811
    """Mechanisms that search the vocabulary per word batch 4,096 words per call; table-sampled ones
    65,536 (docs/scale.md: TEM runs faster end to end with large calls); an explicit value wins."""
    art = neighbour_artifact_dir  # the table-sampled ones need its neighbour table (refused without one)
    assert Privatize(epsilon=10, artifact=art).batch_tokens == 4096
    assert Privatize(epsilon=10, mechanism="vickrey", artifact=art).batch_tokens == 4096
    assert Privatize(epsilon=5, mechanism="tem", artifact=art).batch_tokens == 65_536
    assert Privatize(epsilon=5, mechanism="santext", artifact=art).batch_tokens == 65_536
    assert Privatize(epsilon=5, mechanism="tem", batch_tokens=100, artifact=art).batch_tokens == 100
