"""Helpers the pipeline tests share: run the privatize job on the local runner and read what it wrote."""

from __future__ import annotations

import glob
import json

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.privatize import build_pipeline


def privatize(tmp_path, artifact, *flags, name="out"):
    """Build and run the privatize pipeline on FnApiRunner; return (result, output prefix)."""
    output = str(tmp_path / name)
    argv = ["--runner=FnApiRunner", f"--artifact={artifact}", f"--output={output}", *flags]
    result = build_pipeline(PipelineOptions(argv)).run()
    result.wait_until_finish()
    return result, output


def read_lines(pattern):
    """Every line of the files matching ``pattern``, files in name order."""
    lines = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as handle:
            lines.extend(handle.read().splitlines())
    return lines


def summary_of(output):
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        return json.load(handle)


def errors_of(output):
    """The error records of a run, ordered by source and position."""
    return sorted((json.loads(line) for line in read_lines(f"{output}-errors-*.jsonl")),
                  key=lambda e: (e["source"], e["position"]))
