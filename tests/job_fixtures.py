"""A test-only job for ``pipelines.jobs.run_job``: a real Beam pipeline whose worker fails or waits.

``prepare`` returns a plan whose pipeline creates a few elements and runs ``Misbehave``: the DoFn
creates a ``beam-temp-*`` folder in the output directory (as Beam's file sinks do while writing),
then, as ``--misbehave-mode`` says, raises an error (a failure that can only happen on a worker) or writes
a marker file and sleeps (so a test can interrupt the process). Registered by the tests only.
"""

from __future__ import annotations

import os
import time
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.jobs import Job, Plan


class MisbehaveOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--misbehave-out-dir", dest="misbehave_out_dir", default=None,
                            help="where the temporary folder goes")
        parser.add_argument("--misbehave-mode", dest="misbehave_mode", choices=("fail", "wait"), default="fail",
                            help="fail or wait")


JOB = Job("misbehave", "tests.job_fixtures", "a job whose worker fails or waits (tests only)",
          groups=(MisbehaveOptions,), required=("misbehave_out_dir",))


class Misbehave(beam.DoFn):
    def __init__(self, out_dir: str, mode: str):
        self.out_dir, self.mode = out_dir, mode

    def process(self, element):
        os.makedirs(os.path.join(self.out_dir, f"beam-temp-test-{uuid.uuid4().hex}"), exist_ok=True)
        if self.mode == "fail":
            raise RuntimeError("worker step failed on purpose")
        with open(os.path.join(self.out_dir, "started"), "w", encoding="utf-8") as handle:
            handle.write("1")
        time.sleep(60)
        yield element


def prepare(options: PipelineOptions) -> Plan:
    opts = options.view_as(MisbehaveOptions)

    def build(progress_dir):
        pipeline = beam.Pipeline(options=options)
        _ = pipeline | beam.Create([1]) | beam.ParDo(Misbehave(opts.misbehave_out_dir, opts.misbehave_mode))
        return pipeline

    return Plan(build=build, report=lambda: ["done"], temp_parents=(opts.misbehave_out_dir,))
