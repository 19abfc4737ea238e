"""textdp inside your own Beam pipeline: read a CSV, privatize one column, write Parquet.

    python examples/privatize_csv_to_parquet.py --input examples/reviews.csv --output out/csv-reviews \
        --epsilon 10 [--artifact DIR] [Beam flags, e.g. --runner DataflowRunner ...]

Your pipeline keeps its own reading and writing; textdp adds one step, ``transforms.Privatize``,
which privatizes the ``review`` column (every other column passes through) and hands back three
outputs: the released rows, error rows (reason codes, never the text) and the counts. The artifact
is loaded once per worker process. The CSV must have one row per line (quoted commas are fine,
line breaks inside a field are not: for those, read with a CSV-aware source).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from transforms import Privatize

SCHEMA = pa.schema([("id", pa.string()), ("rating", pa.int64()), ("review", pa.string())])


def parse_row(line: str) -> dict:
    """One CSV line (id,rating,review) -> a dict with typed fields."""
    identifier, rating, review = next(csv.reader([line]))
    return {"id": identifier, "rating": int(rating), "review": review}


def build(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="CSV file with a header line id,rating,review")
    parser.add_argument("--output", required=True, help="output prefix: <output>-SSSSS-of-NNNNN.parquet, "
                                                        "<output>-errors.jsonl, <output>-counts.json")
    parser.add_argument("--epsilon", type=float, default=10.0, help="privacy parameter (default 10)")
    parser.add_argument("--artifact", default=None, help="vocabulary artifact; default: the bundled GloVe one")
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = "FnApiRunner"  # local, in this process

    pipeline = beam.Pipeline(options=options)
    rows = (pipeline
            | "ReadCsv" >> beam.io.ReadFromText(args.input, skip_header_lines=1)
            | "Parse" >> beam.Map(parse_row))
    private = rows | "Privatize" >> Privatize(epsilon=args.epsilon, artifact=args.artifact, text_fields=["review"])
    private.released | "WriteParquet" >> beam.io.WriteToParquet(args.output, SCHEMA, file_name_suffix=".parquet")
    (private.errors | "ErrorsJson" >> beam.Map(json.dumps)
     | "WriteErrors" >> beam.io.WriteToText(f"{args.output}-errors", file_name_suffix=".jsonl", shard_name_template=""))
    (private.stats | "CountsJson" >> beam.Map(json.dumps)
     | "WriteCounts" >> beam.io.WriteToText(f"{args.output}-counts", file_name_suffix=".json", shard_name_template=""))
    return pipeline


def main(argv=None) -> int:
    build(argv).run().wait_until_finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
