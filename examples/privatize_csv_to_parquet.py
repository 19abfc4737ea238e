"""textdp inside your own Beam pipeline: read a CSV, privatize one column, write Parquet.

    python examples/privatize_csv_to_parquet.py --input examples/reviews.csv --output out/csv-reviews \
        --epsilon 10 [--artifact DIR] [Beam flags, e.g. --runner DataflowRunner ...]

Your pipeline keeps its own reading and writing; textdp adds one step, ``transforms.Privatize``,
which privatizes the ``review`` column (every other column passes through) and hands back three
outputs: the released rows, error rows (reason codes, never the text) and the counts. The artifact
is loaded once per worker process.

The CSV (header ``id,rating,review``, UTF-8, optionally gzipped) is read whole, file by file, by the
csv module, so a quoted field may hold commas, quotes and line breaks. A row that cannot be read (wrong
number of fields, a rating that is not an integer, broken quoting) is not privatized: it goes to the
error output as ``malformed_row`` with its file and line and a reason, never its text, and is counted
in ``records`` and ``failed`` like Privatize's own error rows, so ``records == released + failed``.
Blank lines are not rows.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys

import apache_beam as beam
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from transforms import Privatize

SCHEMA = pa.schema([("id", pa.string()), ("rating", pa.int64()), ("review", pa.string())])
HEADER = ["id", "rating", "review"]
MALFORMED_ROW = "malformed_row"
ERRORS = "errors"
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _error(path: str, line: int, detail: str) -> beam.pvalue.TaggedOutput:
    """An error row as Privatize writes them: where, why, never the text."""
    return beam.pvalue.TaggedOutput(ERRORS, {"source": path, "position": line, "reason": MALFORMED_ROW, "detail": detail})


def _csv_problem(exc: csv.Error) -> str:
    """A fixed phrase for the csv module's error (its messages carry no data, but we never pass text on)."""
    message = str(exc)
    if "end of data" in message:
        return "a quoted field is not closed before the end of the file (the rest of the file was read as that field)"
    if "field larger" in message:
        return f"a field longer than {csv.field_size_limit():,} characters (the csv module's limit)"
    if "NUL" in message:
        return "the row holds a NUL character"
    return "broken quoting: a quote inside an unquoted field, or text after a closing quote"


def parse_rows(path: str, lines) -> "list | object":
    """The rows of one CSV file (``lines``: its text) as typed dicts, and error rows for those that cannot be read."""
    reader = csv.reader(lines, strict=True)
    header_seen, end = False, 0
    while True:
        start = end + 1  # the line the next row starts on
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            end = reader.line_num
            yield _error(path, start, _csv_problem(exc))
            continue
        end = reader.line_num
        if not fields:
            continue  # a blank line
        if not header_seen:
            header_seen = True
            if [name.strip() for name in fields] != HEADER:
                yield _error(path, start, "the first line is not the header id,rating,review: the file was not read")
                return
            continue
        if len(fields) != len(HEADER):
            yield _error(path, start, f"{len(fields)} field(s), expected {len(HEADER)} (id,rating,review)")
            continue
        identifier, rating, review = fields
        if not _INTEGER.fullmatch(rating.strip()) or not -2**63 <= int(rating) < 2**63:
            yield _error(path, start, "the rating is not a 64-bit integer")
            continue
        yield {"id": identifier, "rating": int(rating), "review": review}


class ReadCsv(beam.DoFn):
    """A matched CSV file, read whole -> typed rows, and error rows (tagged ``errors``) for what cannot be read."""

    def process(self, readable_file):
        path, data = readable_file.metadata.path, readable_file.read()  # .gz and other compressions by extension
        try:
            text, bad_line = data.decode("utf-8-sig"), None
        except UnicodeDecodeError as exc:  # read up to the first invalid byte; its line and the rest are an error
            text = data[:exc.start].decode("utf-8-sig")
            text, bad_line = text[:text.rfind("\n") + 1], text.count("\n") + 1
        yield from parse_rows(path, io.StringIO(text, newline=""))
        if bad_line is not None:
            yield _error(path, bad_line, "the file is not UTF-8 from this line on: the rest was not read")


def with_unread(stats: dict, unread: int) -> dict:
    """Privatize's counts plus the rows that never reached it: records == released + failed still holds."""
    counts = dict(stats)
    counts["records"] = counts.get("records", 0) + unread
    counts["failed"] = counts.get("failed", 0) + unread
    if unread:
        counts[f"failed:{MALFORMED_ROW}"] = counts.get(f"failed:{MALFORMED_ROW}", 0) + unread
    return counts


def build(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="CSV file(s) (a glob) with a header line id,rating,review")
    parser.add_argument("--output", required=True, help="output prefix: <output>-SSSSS-of-NNNNN.parquet, "
                                                        "<output>-errors.jsonl, <output>-counts.json")
    parser.add_argument("--epsilon", type=float, default=10.0, help="privacy parameter (default 10)")
    parser.add_argument("--artifact", default=None, help="vocabulary artifact; default: the bundled GloVe one")
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = "FnApiRunner"  # local, in this process

    pipeline = beam.Pipeline(options=options)
    parsed = (pipeline
              | "Match" >> fileio.MatchFiles(args.input)
              | "Open" >> fileio.ReadMatches()
              | "ReadCsv" >> beam.ParDo(ReadCsv()).with_outputs(ERRORS, main="rows"))
    private = parsed.rows | "Privatize" >> Privatize(epsilon=args.epsilon, artifact=args.artifact, text_fields=["review"])
    private.released | "WriteParquet" >> beam.io.WriteToParquet(args.output, SCHEMA, file_name_suffix=".parquet")
    errors = (parsed[ERRORS], private.errors) | "AllErrors" >> beam.Flatten()
    (errors | "ErrorsJson" >> beam.Map(json.dumps)
     | "WriteErrors" >> beam.io.WriteToText(f"{args.output}-errors", file_name_suffix=".jsonl", shard_name_template=""))
    unread = parsed[ERRORS] | "CountUnread" >> beam.combiners.Count.Globally()
    (private.stats | "AddUnread" >> beam.Map(with_unread, beam.pvalue.AsSingleton(unread))
     | "CountsJson" >> beam.Map(json.dumps)
     | "WriteCounts" >> beam.io.WriteToText(f"{args.output}-counts", file_name_suffix=".json", shard_name_template=""))
    return pipeline


def main(argv=None) -> int:
    build(argv).run().wait_until_finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
