"""The jobs packaged as Dataflow Flex Templates, and their template parameters derived from the code.

The jobs, their flag groups and their required flags are registered once, in ``pipelines/jobs.py``
(the registry the ``textdp`` command uses too). Everything a template needs is computed from there:

* ``metadata(job)``: the ``metadata.json`` given to ``gcloud dataflow flex-template build`` (one
  parameter per flag: name, label, help text, whether it is optional, a regex for typed values);
* ``job_parser(job)``: the parser ``templates/main.py`` uses to turn the launcher's
  ``--name=value`` arguments back into the job's own flags.

A parameter's name is one of the flag's own names (``parameter_name``: ``oov_policy``, ``lambda``),
so that ``--<name>=VALUE`` is accepted by the job's own parser. A flag is required when the registry's
``Job.required`` names it (or argparse marks it
required, for the single-process ``build-index``).
"""

from __future__ import annotations

import argparse
import re
from typing import List, Sequence, Tuple

from pipelines.flags import plain_float, plain_int
from pipelines.jobs import JOBS as _REGISTRY

INT_REGEX = r"^-?[0-9]+$"
FLOAT_REGEX = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
BOOL_REGEX = "^(true|false)$"

# streaming templates beside the batch ones: template name -> the job it runs with Beam's --streaming
# (docs/streaming.md); its metadata is the job's own flags, marked "streaming": true
STREAMING_TEMPLATES = {"privatize-streaming": "privatize"}
# the registry's jobs that are templates (``Job.template``; the ledger's local admin command is not), then the streaming ones
JOBS = dict({name: job for name, job in _REGISTRY.items() if job.template},
            **{name: _REGISTRY[job] for name, job in STREAMING_TEMPLATES.items()})


def base_job(job: str) -> str:
    """The registered job a template runs (a streaming template runs its batch job with --streaming)."""
    return STREAMING_TEMPLATES.get(job, job)


class JobUnavailable(LookupError):
    """The job's flags cannot be read: its module does not exist (yet)."""


def template_dir_name(job: str) -> str:
    return job.replace("-", "_")


def job_parser(job: str) -> Tuple[argparse.ArgumentParser, bool]:
    """The job's flags as one argparse parser (its --help parser), and whether it is a Beam job."""
    from pipelines.jobs import help_parser

    try:
        return help_parser(base_job(job)), JOBS[job].beam
    except ImportError as exc:
        raise JobUnavailable(f"{job}: module {JOBS[job].module} cannot be imported ({exc})") from exc


def flag_actions(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    return [a for a in parser._actions
            if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]


def is_required(action: argparse.Action, required: Sequence[str] = ()) -> bool:
    return bool(action.required) or action.dest in required


def is_boolean(action: argparse.Action) -> bool:
    return isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))


def _label(dest: str) -> str:
    words = dest.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def _regexes(action: argparse.Action) -> List[str]:
    if is_boolean(action):
        return [BOOL_REGEX]
    if action.choices:
        return ["^(" + "|".join(re.escape(str(choice)) for choice in action.choices) + ")$"]
    if action.type is int or action.type is plain_int:
        return [INT_REGEX]
    if action.type is float or action.type is plain_float:  # plain_float: the same rule as FLOAT_REGEX (R8b-8)
        return [FLOAT_REGEX]
    return []


def parameter_name(action: argparse.Action) -> str:
    """The template parameter of a flag: one of the flag's own names without its dashes, in the form
    Dataflow allows (letters, digits, underscores): ``--<dest>`` where the flag has that name
    (``oov_policy``), else its first such name (``lambda``, whose dest is ``lam``). ``--<name>=VALUE``
    is then a flag the job itself accepts. A flag without such a name (only ``--x-y``) is an error:
    give it a ``--x_y`` spelling too."""
    names = [option[2:] for option in action.option_strings
             if option.startswith("--") and re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]*", option[2:])]
    if not names:
        raise ValueError(f"flag {action.option_strings[0]} has no name a template parameter can have "
                         "(letters, digits, underscores): add one, e.g. --x_y beside --x-y")
    return action.dest if action.dest in names else names[0]


def parameters(parser: argparse.ArgumentParser, required: Sequence[str] = ()) -> List[dict]:
    """One Flex Template parameter per flag, in declaration order; ``required``: the dests that are."""
    out = []
    for action in flag_actions(parser):
        name = parameter_name(action)
        entry = {"name": name, "label": _label(name), "helpText": action.help or "",
                 "isOptional": not is_required(action, required)}
        regexes = _regexes(action)
        if regexes:
            entry["regexes"] = regexes
        out.append(entry)
    return out


def metadata(job: str) -> dict:
    """The ``metadata.json`` of the job's Flex Template, derived from its flags."""
    parser, _ = job_parser(job)
    description = JOBS[job].description + (" Streaming: windows over new files or a Pub/Sub subscription."
                                            if job in STREAMING_TEMPLATES else "")
    return {"name": f"textdp {job}", "description": description, "streaming": job in STREAMING_TEMPLATES,
            "parameters": parameters(parser, JOBS[job].required)}
