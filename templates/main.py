"""Flex Template entry point: launch one textdp job from the template launcher's parameters.

The launcher runs this file (``FLEX_TEMPLATE_PYTHON_PY_FILE``) with one ``--name=value`` argument
per template parameter plus Dataflow's own options. The job is named by the image
(``TEXTDP_JOB``, set at ``docker build``) or by ``--textdp_job=NAME`` for a local try. This file:

1. maps each parameter (named after one of the flag's names, e.g. ``oov_policy``, ``lambda``;
   ``templates.jobs.parameter_name``) back to the job's own flag, and ``true``/``false`` to a switch's presence or absence;
2. expands ``{today}`` and ``{yesterday}`` (UTC, ``YYYY-MM-DD``, or ``{yesterday:%Y/%m/%d}``) in
   values, so a nightly Cloud Scheduler job with a fixed request body reads a dated input prefix;
3. makes the workers use this same image (``TEXTDP_WORKER_IMAGE``) unless ``sdk_container_image``
   is given;
4. builds the job's pipeline and submits it without waiting: the launcher must exit once the
   job is created.

``build-index`` is a single process, not a Beam pipeline; its template runs it on one Dataflow
worker (a one-element pipeline), so the launcher has a job to hand over and the build gets a
worker-sized machine (``worker_machine_type``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import re
import sys
from typing import List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from templates.jobs import JOBS, STREAMING_TEMPLATES, flag_actions, is_boolean, job_parser  # noqa: E402

JOB_ARG = "--textdp_job="
WORKER_IMAGE_ENV = "TEXTDP_WORKER_IMAGE"
_DATE = re.compile(r"\{(today|yesterday)(?::([^{}]+))?\}")


def expand_dates(value: str, now: datetime.datetime) -> str:
    """Replace ``{today}``/``{yesterday}`` (optionally ``{today:%Y/%m/%d}``) by UTC dates."""
    def replace(match):
        day = now.date() - datetime.timedelta(days=1 if match.group(1) == "yesterday" else 0)
        return day.strftime(match.group(2) or "%Y-%m-%d")

    return _DATE.sub(replace, value)


class TemplateArgumentError(ValueError):
    pass


def to_job_argv(job: str, argv: List[str], now: Optional[datetime.datetime] = None) -> Tuple[List[str], List[str]]:
    """Split launcher arguments into (the job's own flags, everything else), normalised for argparse."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    parser, _ = job_parser(job)
    actions = {}
    for action in flag_actions(parser):
        actions[action.dest] = action
        for option in action.option_strings:
            actions[option.lstrip("-")] = action
    job_argv, other = [], []
    for arg in argv:
        name, has_value, value = arg[2:].partition("=") if arg.startswith("--") else ("", False, "")
        action = actions.get(name)
        if action is None:
            other.append(arg)
            continue
        long_flags = [o for o in action.option_strings if o.startswith("--")]
        flag = f"--{action.dest}" if f"--{action.dest}" in long_flags else long_flags[0]
        if is_boolean(action):
            switch = value.strip().lower() if has_value else "true"
            if switch not in ("true", "false"):
                raise TemplateArgumentError(f"parameter {action.dest} takes true or false")
            if (switch == "true") == isinstance(action, argparse._StoreTrueAction):
                job_argv.append(flag)
            continue
        if not has_value:
            raise TemplateArgumentError(f"parameter {action.dest} needs a value (--{action.dest}=VALUE)")
        job_argv.append(f"{flag}={expand_dates(value, now)}")
    return job_argv, other


def _with_worker_image(other: List[str]) -> List[str]:
    image = os.environ.get(WORKER_IMAGE_ENV)
    if image and not any(a.startswith(("--sdk_container_image", "--worker_harness_container_image")) for a in other):
        return other + [f"--sdk_container_image={image}"]
    return other


def _run_build_index(argv: List[str]) -> None:
    from pipelines import build_index

    if build_index.run(argv) != 0:
        raise RuntimeError("textdp build-index failed; its error is in this worker's log")


def build_index_pipeline(job_argv: List[str], options):
    """A one-element pipeline whose single worker runs ``textdp build-index`` (output must be gs://)."""
    import apache_beam as beam

    outputs = [a.split("=", 1)[1] for a in job_argv if a.startswith("--output=")]
    if not outputs or not outputs[0].startswith("gs://"):
        raise TemplateArgumentError("build-index as a template needs output=gs://... (a worker's disk is discarded)")
    pipeline = beam.Pipeline(options=options)
    _ = pipeline | "Start" >> beam.Create([job_argv]) | "BuildAndUpload" >> beam.Map(_run_build_index)
    return pipeline


def launch(job: str, argv: List[str], now: Optional[datetime.datetime] = None):
    """Build and submit the job's pipeline; returns the runner's result without waiting for it."""
    from apache_beam.options.pipeline_options import PipelineOptions

    if job not in JOBS:
        raise TemplateArgumentError(f"unknown textdp job {job!r}; one of {sorted(JOBS)}")
    job_argv, other = to_job_argv(job, argv, now)
    other = _with_worker_image(other)
    if job in STREAMING_TEMPLATES:  # the streaming template: its job with Beam's --streaming
        other = other + ["--streaming"]
    if job == "build-index":
        pipeline = build_index_pipeline(job_argv, PipelineOptions(other))
    else:
        module = importlib.import_module(JOBS[job].module)
        pipeline = module.build_pipeline(PipelineOptions(job_argv + other))
    return pipeline.run()


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    job = os.environ.get("TEXTDP_JOB", "")
    for arg in list(argv):
        if arg.startswith(JOB_ARG):
            job = arg[len(JOB_ARG):]
            argv.remove(arg)
    if not job:
        print("textdp template: no job named (TEXTDP_JOB in the image, or --textdp_job=NAME)", file=sys.stderr)
        return 2
    from textdp.errors import TextdpError

    try:
        launch(job, argv)
    except (TextdpError, ValueError, LookupError) as exc:
        print(f"textdp template {job}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
