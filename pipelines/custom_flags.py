"""The flags of a mechanism the registry does not hold: ``--mechanism package.module:Class`` (or a class given in
``PipelineOptions(flags, mechanism=Class)``), so that its declared ``PARAMETERS`` are flags too.

Beam builds a flag parser from each ``PipelineOptions`` class's ``_add_argparse_args``, which does not see the
command line; the registered mechanisms' flags are therefore declared for every run. A mechanism named by an
import path is known only from the command line, so the command line is scanned for ``--mechanism`` first
(``argv_mechanism``) and, while it is being parsed, ``MechanismOptions`` adds that class's parameters in a group
of their own (``named_mechanism``), exactly as it does for a registered mechanism. ``custom_mechanism`` reads their
values back. How a reference resolves is ``textdp.mechanisms.mechanism_class`` alone.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterable, List, Optional, Sequence

from textdp.errors import TextdpError
from textdp.mechanisms import all_parameters, mechanism_class, registered

_IN_FORCE: contextvars.ContextVar = contextvars.ContextVar("textdp_argv_mechanism", default=None)


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
            cls = mechanism_class(value)
            _refuse_beam_flags(cls)
        except TextdpError:
            cls = None
            if strict:
                raise
    token = _IN_FORCE.set(cls)
    try:
        yield cls
    finally:
        _IN_FORCE.reset(token)


def _refuse_beam_flags(cls) -> None:
    """Refuse (TextdpError, one line) a parameter of ``cls`` whose flag is one Beam or another options class already
    declares (``--project``, ``--region``, ``--num-workers``, ...): argparse would stop with a traceback. textdp's
    own flags and keywords are refused for every entry point by ``textdp.mechanisms`` (RESERVED_PARAMETER_NAMES)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    taken = {name.replace("-", "_").lower() for name in PipelineOptions([]).get_all_options(drop_default=False)}
    for param in cls.PARAMETERS:
        if param.cli and param.name.lower() in taken and not any(param is p for p in all_parameters().values()):
            raise TextdpError(f"mechanism {cls.name!r} declares a parameter {param.name!r}, which is already the flag "
                              f"--{param.name.replace('_', '-')} of every job (Apache Beam's or textdp's): rename it")


def named_mechanism(items: Iterable) -> List[tuple]:
    """The registry's (name, class) pairs, then the unregistered mechanism of the command line being parsed."""
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
    _refuse_beam_flags(mechanism_class(reference))
    values = options._all_options  # every view's values, and the keywords given
    return {param.name: values.get(param.name, param.default) for param in mechanism_class(reference).PARAMETERS
            if param.cli and param.name not in known}
