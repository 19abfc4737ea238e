"""Streaming vs batch throughput on the local runners, on the same records (issue 29).

    python -m benchmarks.bench_streaming [--records N] [--artifact DIR]

Batch: ``Privatize`` over the records on FnApiRunner. Streaming: the same records as a TestStream through
``ParseMessages`` + ``PrivatizeWindows`` (10 windows) on the BundleBasedDirectRunner in streaming mode, both
local and downloading nothing. Prints records/s for each and the ratio streaming/batch; results are kept in
benchmarks/results/streaming.md with the machine noted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time


def _records(n: int) -> list:
    words = "the cat sat on the mat while a dog ran over the hill and the rain fell".split()
    return [json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(12))}) for i in range(n)]


def run(records: int, artifact: str) -> dict:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from transforms.privatize import Privatize
    from transforms.streaming import ParseMessages, PrivatizeWindows

    lines = _records(records)
    started = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as pipeline:
        _ = (pipeline | beam.Create([json.loads(line) for line in lines])
             | Privatize(epsilon=10, artifact=artifact, text_fields=["text"]))
    batch = time.perf_counter() - started

    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    stream = TestStream().advance_watermark_to(0)
    per_window = max(1, records // 10)
    for start in range(0, records, per_window):
        stream = stream.add_elements([TimestampedValue(("bench", i, lines[i].encode()), 10 * (start // per_window))
                                      for i in range(start, min(records, start + per_window))])
    stream = stream.advance_watermark_to_infinity()
    with tempfile.TemporaryDirectory() as out:
        context = dict(input_pattern="bench", data_format="jsonl", text_fields=("text",), max_record_bytes=10_000,
                       max_failed_fraction=0.1, amplifier_steps=None, warnings=[])
        started = time.perf_counter()
        with beam.Pipeline(options=options) as pipeline:
            _ = (pipeline | stream | beam.ParDo(ParseMessages("jsonl", ("text",), 10_000, False))
                 | PrivatizeWindows(Privatize(epsilon=10, artifact=artifact, text_fields=["text"], keyed=True),
                                    os.path.join(out, "r"), "jsonl", 10, 0, context=context))
        streaming = time.perf_counter() - started
    return {"records": records, "batch_records_per_s": records / batch, "streaming_records_per_s": records / streaming,
            "ratio_streaming_over_batch": batch / streaming, "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--artifact", default="/tmp/art300")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.records, args.artifact), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
