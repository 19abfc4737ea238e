"""The flags of a mechanism the registry does not hold: ``--mechanism package.module:Class`` (or a class given in
``PipelineOptions(flags, mechanism=Class)``), so that its declared ``PARAMETERS`` are flags too.

Beam builds a flag parser from each ``PipelineOptions`` class's ``_add_argparse_args``, which does not see the
command line; the registered mechanisms' flags are therefore declared for every run. A mechanism named by an
import path is known only from the command line, so the command line is scanned for ``--mechanism`` first
(``argv_mechanism``) and, while it is being parsed, ``MechanismOptions`` adds that class's parameters in a group
of their own (``named_mechanism``), exactly as it does for a registered mechanism. ``custom_mechanism`` reads their
values back. How a reference resolves is ``textdp.mechanisms.mechanism_class`` alone.

A parameter flag that Beam's parser or the jobs' already hold (``--extra_package``, ``--experiment``,
``--project``, ...) would stop argparse with a traceback: ``_beam_flag_problem``, registered with
``textdp.mechanisms.add_flag_check``, checks every spelling of every parameter of a mechanism that is not built in
against the option strings of the PipelineOptions classes themselves, so the mechanism (import path, class or
entry point) is refused in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import functools
from typing import Iterable, List, Optional, Sequence, Tuple

from textdp.errors import TextdpError
from textdp.mechanisms import BUILT_IN, add_flag_check, all_parameters, mechanism_class, registered

_IN_FORCE: contextvars.ContextVar = contextvars.ContextVar("textdp_argv_mechanism", default=None)
_JOB_FLAGS_ONLY: contextvars.ContextVar = contextvars.ContextVar("textdp_job_flags_only", default=False)


class MechanismChoices(tuple):
    """``--mechanism``'s choices: the registered names (what ``--help`` and a Flex Template's regex list) and any
    import path ``package.module:Class`` (which ``textdp.mechanisms.mechanism_class`` resolves and checks; a
    template's image holds textdp's own mechanisms only, so its regex does not admit a path)."""

    def __contains__(self, value) -> bool:
        return tuple.__contains__(self, value) or (isinstance(value, str) and ":" in value)


def mechanism_in_argv(argv: Optional[Sequence[str]]) -> Optional[str]:
    """The value of the last ``--mechanism`` in ``argv`` (``--mechanism=X`` or ``--mechanism X``), or None."""
    found = None
    args = list(argv or ())
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            continue
        if arg.startswith("--mechanism="):
            found = arg.split("=", 1)[1]
        elif arg == "--mechanism" and index + 1 < len(args):
            found = args[index + 1]
    return found


@contextlib.contextmanager
def argv_mechanism(argv: Optional[Sequence[str]], strict: bool = False):
    """While inside, ``MechanismOptions`` also declares the flags of the mechanism ``argv`` names when the registry
    does not hold it. ``strict``: refuse (TextdpError, one line) a ``--mechanism`` that does not resolve; else it
    adds nothing here and ``MechanismOptions.validate_mechanism`` refuses it."""
    value = mechanism_in_argv(argv)
    cls = None
    if value and value not in registered():
        try:
            cls = mechanism_class(value)  # its parameters' flags checked against Beam's and the jobs' (below)
        except TextdpError:
            cls = None
            if strict:
                raise
    elif value and strict and value not in BUILT_IN:
        mechanism_class(value)  # an entry point whose class cannot run (e.g. a parameter that is a Beam flag): one line
    token = _IN_FORCE.set(cls)
    try:
        yield cls
    finally:
        _IN_FORCE.reset(token)


@functools.lru_cache(maxsize=8)
def _job_option_strings(classes: tuple) -> Tuple[frozenset, frozenset]:
    """(every option string, every dest) that ``classes`` (the PipelineOptions subclasses: Apache Beam's and the
    jobs') declare, without any mechanism's parameters: what Beam's parser, which builds one parser from all of
    them, would already hold when a mechanism's parameter flags are added."""
    from apache_beam.options import pipeline_options

    parser_class = getattr(pipeline_options, "_BeamArgumentParser", argparse.ArgumentParser)
    strings, dests = set(), set()
    token = _JOB_FLAGS_ONLY.set(True)
    try:
        for cls in {str(c): c for c in classes}.values():
            parser = parser_class(allow_abbrev=False, add_help=False)
            try:
                cls._add_argparse_args(parser)
            except (argparse.ArgumentError, TypeError, ValueError):  # another program's odd options class: skipped
                continue
            for action in parser._actions:
                strings.update(action.option_strings)
                dests.add(action.dest.replace("-", "_").lower())
    finally:
        _JOB_FLAGS_ONLY.reset(token)
    return frozenset(strings), frozenset(dests)


def _beam_flag_problem(param) -> Optional[str]:
    """Why ``param``'s flags cannot be declared beside Apache Beam's and the jobs' own options, or None: one of its
    spellings (``--a-b``, ``--a_b``, its flag aliases) is already an option string (``--extra_package``,
    ``--worker_machine_type``, ``--experiment``, ...), or its name is already an option's dest; argparse would
    stop with a traceback, or two flags would write one value. Registered by ``add_flag_check`` below, so that
    ``textdp.mechanisms`` refuses such a mechanism (import path, class or entry point) in one line."""
    if _JOB_FLAGS_ONLY.get():  # while the set itself is being built (the --mechanism help lists the mechanisms)
        return None
    from apache_beam.options.pipeline_options import PipelineOptions

    # the jobs' option classes are there once pipelines.flags (which imports this module) is; their dests are also
    # textdp.mechanisms.RESERVED_PARAMETER_NAMES, checked without Beam
    strings, dests = _job_option_strings(tuple(PipelineOptions.__subclasses__()))
    kebab = f"--{param.name.replace('_', '-')}"
    for flag in param.flags:
        if flag in strings:
            if flag[2:].replace("_", "-") != kebab[2:]:  # one of its flag aliases
                return f"whose flag alias {flag} is already a flag of every job (Apache Beam's or textdp's)"
            also = f" (as {flag})" if flag != kebab else ""
            return f"which is already the flag {kebab}{also} of every job (Apache Beam's or textdp's)"
    if param.name.replace("-", "_").lower() in dests:
        return f"which is already the option {param.name} of every job (Apache Beam's or textdp's; flag {kebab})"
    return None


add_flag_check(_beam_flag_problem)


def named_mechanism(items: Iterable) -> List[tuple]:
    """The registry's (name, class) pairs, then the unregistered mechanism of the command line being parsed."""
    if _JOB_FLAGS_ONLY.get():
        return []
    items = list(items)
    cls = _IN_FORCE.get()
    if cls is not None and all(other is not cls for _, other in items):
        items.append((cls.name, cls))
    return items


def custom_mechanism(options) -> dict:
    """{public name: value} of the flag parameters that the run's mechanism declares and no registered mechanism
    does (empty for a registered mechanism): from its flags, else from ``PipelineOptions`` keywords, else the
    declared default."""
    reference = options.mechanism
    if isinstance(reference, str) and reference in registered():
        return {}
    known = all_parameters()
    values = options._all_options  # every view's values, and the keywords given
    return {param.name: values.get(param.name, param.default) for param in mechanism_class(reference).PARAMETERS
            if param.cli and param.name not in known}
