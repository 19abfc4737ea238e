"""Red-team round 9 findings R9-5, R9-7 and R9-8 (issue 25), on the real components.

The pipeline runs are the real privatize job (or the shipped example script) on the local FnApiRunner with
real GloVe artifacts; the runs that compare released text use ``--oov-policy keep`` or only check pass-through
columns, counts and error records, so no test here is statistical (false-failure rate 0).
"""

from __future__ import annotations

import glob
import gzip
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import REPO
from tests.run_outputs import errors_of, privatize, read_lines, summary_of
from transforms.io import UNSUPPORTED_NUMBER, parse_json_line
from transforms.parquet_io import batch_rows

CANARY = "Zanzibarquux"


# R9-7: JSONL numbers below float64's range -------------------------------------------------------------

def test_jsonl_numbers_below_float64s_range_are_unsupported_number_not_rewritten(tmp_path, small_artifact_dir):
    """R9-7: 1e-400 was released as 0.0 and 2.5e-324 as 5e-324, with no error record. A literal whose float is 0
    or subnormal but is not that float's value is now ``unsupported_number``; zeros and exact subnormals pass."""
    for literal in ("1e-400", "-1E-400", "2.5e-324", "1.23456e-320", "0.0000000000000001e-330"):
        payload, problem = parse_json_line('{"x": %s}' % literal)
        assert payload is None and problem[0] == UNSUPPORTED_NUMBER and "too small" in problem[1], literal
    for literal, value in (("5e-324", 5e-324), ("0.0e-999", 0.0), ("0e5", 0.0), ("-0.0", -0.0),
                           ("2.2250738585072014e-308", 2.2250738585072014e-308), ("1e-300", 1e-300), ("1.5e-320", 1.5e-320)):
        assert parse_json_line('{"x": %s}' % literal) == ({"x": value}, None), literal
    source = tmp_path / "num.jsonl"
    source.write_text('{"text":"the president said","x":1e-400}\n{"text":"the president said","z":2.5e-324}\n'
                      '{"text":"the president said","y":5e-324,"w":0.0e-5}\n', encoding="utf-8")
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=10", "--oov-policy=keep")
    released = [json.loads(line) for line in read_lines(f"{output}-*-of-*.jsonl")]
    assert [(r["y"], r["w"]) for r in released] == [(5e-324, 0.0)]
    assert [(e["position"], e["reason"]) for e in errors_of(output)] == [(1, UNSUPPORTED_NUMBER), (2, UNSUPPORTED_NUMBER)]
    records = summary_of(output)["records"]
    assert (records["in"], records["out"], records["failed"], records["reconciled"]) == (3, 1, 2, True)


# R9-8: Parquet time64[ns] -----------------------------------------------------------------------------

def test_parquet_time64_ns_columns_pass_through_exactly(tmp_path, small_artifact_dir):
    """R9-8: a time64[ns] pass-through column came back as [1000000000, 0] for [1000000001, 7] (datetime.time
    holds microseconds only). Values are now read as integer nanoseconds and written back as time64[ns], at the
    top level and nested in lists and structs; time64[us] is still datetime.time."""
    ns = pa.time64("ns")
    table = pa.table({"text": ["the president said", "our police said", "the first time"],
                      "t64": pa.array([1_000_000_001, 7, None], ns),
                      "times": pa.array([[86_399_999_999_999], [], None], pa.list_(ns)),
                      "pair": pa.array([{"at": 3, "n": 1}, {"at": None, "n": 2}, {"at": 999, "n": 3}],
                                       pa.struct([("at", ns), ("n", pa.int64())])),
                      "us": pa.array([1, 2, 3], pa.time64("us"))})
    source = tmp_path / "in.parquet"
    pq.write_table(table, str(source))
    assert [row["t64"] for row, _ in batch_rows(table.to_batches()[0])] == [1_000_000_001, 7, None]
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=10", "--oov-policy=keep")
    released = pq.read_table(sorted(glob.glob(f"{output}-*-of-*.parquet"))).sort_by("pair")
    assert released.schema.remove_metadata().equals(table.schema.remove_metadata())
    assert released.sort_by([("us", "ascending")]).drop_columns(["text"]).equals(table.drop_columns(["text"]))
    assert errors_of(output) == [] and summary_of(output)["records"]["reconciled"] is True


# R9-5: the shipped example reads CSV as CSV -----------------------------------------------------------

def test_the_example_reads_quoted_line_breaks_and_routes_malformed_rows_without_their_text(tiny_artifact_dir, tmp_path):
    """R9-5: examples/privatize_csv_to_parquet.py read CSV line by line: a quoted review with a line break
    crashed it with the review text in the traceback (and beam-temp folders left), or, when the continuation
    line parsed, released half the review verbatim in the pass-through ``id`` column. Now each file is read by
    the csv module: the multi-line review is one row (its id and rating kept), and rows that cannot be read
    (field count, a rating that is not an integer, broken quoting, a header that is not id,rating,review, bytes that are not UTF-8) are
    ``malformed_row`` error rows with file and line but no text; the counts reconcile; exit 0, nothing left over."""
    first = tmp_path / "a.csv"
    first.write_text("id,rating,review\n"
                     '1,5,"the president said our police"\n'
                     f'2,4,"his company said\n{CANARY} has HIV,5,the first time"\n'
                     f"4,{CANARY}\n"
                     f"5,{CANARY} 7,the first time\n"
                     f'6,5,"the first"{CANARY} time\n'
                     "\n"
                     '7,3,"the police, said ""our"" president"\n', encoding="utf-8")
    with gzip.open(tmp_path / "b.csv.gz", "wt", encoding="utf-8", newline="") as handle:
        handle.write(f"name,review\n{CANARY},the first time\n")
    (tmp_path / "c.csv").write_bytes(b"id,rating,review\n8,2,the first time\n9,2,bad \xff " + CANARY.encode() + b"\n")
    output = str(tmp_path / "out" / "r")
    result = subprocess.run([sys.executable, "examples/privatize_csv_to_parquet.py", "--input", str(tmp_path / "*.csv*"),
                             "--output", output, "--epsilon", "10", "--artifact", tiny_artifact_dir],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert CANARY not in result.stdout + result.stderr
    rows = pq.read_table(sorted(glob.glob(f"{output}-*.parquet"))).to_pylist()
    assert sorted((row["id"], row["rating"]) for row in rows) == [("1", 5), ("2", 4), ("7", 3), ("8", 2)]
    reviews = [row["review"] for row in sorted(rows, key=lambda row: row["id"])]
    assert [len(review.split()) for review in reviews] == [5, 8, 5, 3] and reviews[1].count("\n") == 1  # one row, words kept
    error_text = open(f"{output}-errors.jsonl", encoding="utf-8").read()
    assert CANARY not in error_text
    errors = sorted((json.loads(line) for line in error_text.splitlines()), key=lambda e: (e["source"], e["position"]))
    assert [(e["source"].rsplit("/", 1)[-1], e["position"], e["reason"]) for e in errors] == [
        ("a.csv", 5, "malformed_row"), ("a.csv", 6, "malformed_row"), ("a.csv", 7, "malformed_row"),
        ("b.csv.gz", 1, "malformed_row"), ("c.csv", 3, "malformed_row")]
    assert [e["detail"].split(" ")[0] for e in errors] == ["2", "the", "broken", "the", "the"]
    counts = json.loads(open(f"{output}-counts.json", encoding="utf-8").read())
    assert (counts["records"], counts["failed"], counts["failed:malformed_row"]) == (9, 5, 5) == (len(rows) + 5, 5, 5)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "r-00000-of-00001.parquet", "r-counts.json", "r-errors.jsonl"]
