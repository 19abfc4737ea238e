"""The jobs packaged as Dataflow Flex Templates, and their template parameters derived from the code.

Each job's flags are declared once, in its pipeline module (a PipelineOptions subclass, or the
argparse parser of ``build-index``). Everything a template needs is computed from there:

* ``metadata(job)``: the ``metadata.json`` given to ``gcloud dataflow flex-template build`` (one
  parameter per flag: name, label, help text, whether it is optional, a regex for typed values);
* ``job_parser(job)``: the parser ``templates/main.py`` uses to turn the launcher's
  ``--name=value`` arguments back into the job's own flags.

A parameter's name is the flag's ``dest`` (``oov_policy``), the form Dataflow uses for pipeline
options. A flag is required when argparse says so, or, for PipelineOptions classes (where
``required=True`` cannot be used, since every worker parses every options class), when its help
text ends with "; required" -- the convention of ``PrivatizeOptions``.
"""

from __future__ import annotations

import argparse
import importlib
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple


@dataclass(frozen=True)
class TemplateJob:
    """Where a job's flags live: ``module`` and an attribute that is a PipelineOptions subclass or a
    function returning an ``argparse.ArgumentParser``."""

    module: str
    flags: str
    description: str


JOBS: Dict[str, TemplateJob] = {
    "privatize": TemplateJob("pipelines.privatize", "PrivatizeOptions",
                             "Privatize a text corpus word by word with metric differential privacy (Madlib or TEM)."),
    "neighbours": TemplateJob("pipelines.neighbours", "NeighbourOptions",
                              "Pre-compute every vocabulary word's nearest neighbours (the TEM table) into an artifact."),
    "calibrate": TemplateJob("pipelines.calibrate", "CalibrateOptions",
                             "Plausible-deniability statistics N_w and S_w per epsilon, to choose epsilon."),
    "build-index": TemplateJob("pipelines.build_index", "build_parser",
                               "Build a vocabulary artifact (vectors + Annoy index) from embeddings and upload it to gs://."),
}

PROJECT_MODULES = ("pipelines.", "transforms.", "textdp.")
REQUIRED_SUFFIX = re.compile(r";\s*required\s*\.?\s*$", re.IGNORECASE)
INT_REGEX = r"^-?[0-9]+$"
FLOAT_REGEX = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
BOOL_REGEX = "^(true|false)$"


class JobUnavailable(LookupError):
    """The job's flags cannot be read: its module or options class does not exist (yet)."""


def template_dir_name(job: str) -> str:
    return job.replace("-", "_")


def _extra_options_classes(module, primary) -> List[type]:
    """Project PipelineOptions classes a job module uses besides its own (e.g. a shared stage's flags).

    Found as module-level names, so a job that imports another stage's options class to read its
    flags gets that class's parameters in its template too.
    """
    from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel

    extra = []
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, PipelineOptions) and value is not primary
                and value.__module__.startswith(PROJECT_MODULES) and value not in extra):
            extra.append(value)
    return sorted(extra, key=lambda cls: (cls.__module__, cls.__name__))


def job_parser(job: str) -> Tuple[argparse.ArgumentParser, bool]:
    """The job's flags as one argparse parser, and whether they come from PipelineOptions classes."""
    spec = JOBS[job]
    try:
        module = importlib.import_module(spec.module)
    except ImportError as exc:
        raise JobUnavailable(f"{job}: module {spec.module} cannot be imported ({exc})") from exc
    source = getattr(module, spec.flags, None)
    if source is None:
        raise JobUnavailable(f"{job}: {spec.module}.{spec.flags} does not exist")
    from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel

    if isinstance(source, type) and issubclass(source, PipelineOptions):
        parser = argparse.ArgumentParser(prog=f"textdp {job}", add_help=False)
        for cls in [source] + _extra_options_classes(module, source):
            cls._add_argparse_args(parser)  # pylint: disable=protected-access
        return parser, True
    parser = source()
    if not isinstance(parser, argparse.ArgumentParser):
        raise JobUnavailable(f"{job}: {spec.module}.{spec.flags}() did not return an argparse parser")
    return parser, False


def flag_actions(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    return [a for a in parser._actions  # pylint: disable=protected-access
            if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]  # pylint: disable=protected-access


def is_required(action: argparse.Action) -> bool:
    return bool(action.required) or bool(REQUIRED_SUFFIX.search(action.help or ""))


def is_boolean(action: argparse.Action) -> bool:
    return isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))  # pylint: disable=protected-access


def _label(dest: str) -> str:
    words = dest.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def _regexes(action: argparse.Action) -> List[str]:
    if is_boolean(action):
        return [BOOL_REGEX]
    if action.choices:
        return ["^(" + "|".join(re.escape(str(choice)) for choice in action.choices) + ")$"]
    if action.type is int:
        return [INT_REGEX]
    if action.type is float:
        return [FLOAT_REGEX]
    return []


def parameters(parser: argparse.ArgumentParser) -> List[dict]:
    """One Flex Template parameter per flag, in declaration order."""
    out = []
    for action in flag_actions(parser):
        entry = {"name": action.dest, "label": _label(action.dest), "helpText": action.help or "",
                 "isOptional": not is_required(action)}
        regexes = _regexes(action)
        if regexes:
            entry["regexes"] = regexes
        out.append(entry)
    return out


def metadata(job: str) -> dict:
    """The ``metadata.json`` of the job's Flex Template, derived from its flags."""
    parser, _ = job_parser(job)
    return {"name": f"textdp {job}", "description": JOBS[job].description, "streaming": False,
            "parameters": parameters(parser)}
