"""Mechanism registry and factory: the one place that turns a mechanism reference and its parameters into an
object.

A mechanism reference is a registered name (a built-in one of ``BUILT_IN``, or one an installed package
registers through the entry point group ``textdp.mechanisms``), an import path ``package.module:Class`` or a
``Mechanism`` subclass; ``mechanism_class`` resolves every one of them and refuses the rest in one line, and
``mechanism_reference`` gives the picklable form configurations carry (docs/mechanisms.md, "Bring your own
mechanism").

The contract every mechanism keeps (Madlib, TEM, Mahalanobis, Vickrey, TruncatedGumbel, SanText,
SanText+, CusText), so that the pipeline never needs to know which one runs:

``name``
    the mechanism's name as the factory knows it (``"santext+"`` for SanText with ``plus=True``).
``privatize_ids(ids, rng) -> ids``
    one released vocabulary id per input id, independent draws, vectorised over the batch (never a
    Python loop per token, apart from Annoy's one-query-at-a-time C++ calls). ``rng`` is a
    ``numpy.random.Generator`` made by the caller (from OS entropy in a worker's ``setup()``).
``parameters() -> dict``
    the parameters that define the distribution, JSON-ready, with ``"mechanism": name``.
``privacy_statement() -> dict``
    what holds for a released token and a record, derived from the parameters: at least
    ``notion``, ``per_token`` and ``per_record``; mechanisms that protect only some words or pairs
    (SanText+, CusText) also say exactly which (``covered``, ``not_covered``), and a mechanism
    whose guarantee textdp cannot check (truncated-gumbel) says that none is claimed.
``metric_points(vectors) -> points``
    maps embedding rows (any block of them: it works row by row) to the points whose EUCLIDEAN
    distances are the metric of the mechanism's guarantee: the vectors themselves (Madlib,
    Vickrey over Madlib noise, SanText, truncated-gumbel), the table's metric points (TEM: the
    directions for an angular table), S^{-1/2} phi for Mahalanobis (and Vickrey over Mahalanobis
    noise). The diameter a caller passes to ``token_epsilon0`` must be measured on these points:
    ``diameter_bounds(mechanism.metric_points(artifact.vectors)).upper`` (textdp.privacy.accounting
    ``mechanism_token_epsilon0`` does exactly that).
``token_epsilon0(diameter_upper) -> float``
    the pure local-DP epsilon_0 of one released token over the finite vocabulary, given an upper
    bound on the vocabulary's diameter in that metric: Madlib epsilon*diam, TEM
    epsilon*min(diam, gamma), Mahalanobis and Vickrey epsilon*diam_metric, SanText epsilon*diam,
    SanText+ inf when p < 1 (a kept non-sensitive word reveals itself), CusText epsilon with a
    single output set and inf otherwise (groups have disjoint outputs), truncated-gumbel inf (no
    guarantee claimed). inf means "no finite bound is claimed", never "unknown but fine".

The interface itself (names, parameter declarations, artifact needs, exact law, ...) is declared on
each class: ``textdp.mechanisms.base.Mechanism``. This module is the registry built from those
classes, and the functions every entry point uses to check and build a mechanism by name.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Dict, Iterator, NamedTuple, Optional, Tuple

from textdp.errors import ParameterError, TextdpError
from textdp.mechanisms.base import (  # noqa: F401
    EPSILON_RANGE_HELP,
    MAX_EPSILON,
    MIN_EPSILON,
    REQUIRED_METHODS,
    Mechanism,  # (the rules live with the interface)
    Parameter,
    check_epsilon,
    check_number,
)

# The registry: one line per built-in mechanism, its name and its class's import path, in the order --help
# and the docs list them. Imported on demand, as a Python entry point is (name = module:Class); the class's
# own ``name`` must be the same (checked on import). Everything else about a mechanism is on its class.
BUILT_IN = {
    "madlib": "textdp.mechanisms.madlib:Madlib",
    "tem": "textdp.mechanisms.tem:TEM",
    "mahalanobis": "textdp.mechanisms.mahalanobis:Mahalanobis",
    "vickrey": "textdp.mechanisms.vickrey:Vickrey",
    "truncated-gumbel": "textdp.mechanisms.truncated_gumbel:TruncatedGumbel",
    "santext": "textdp.mechanisms.santext:SanText",
    "santext+": "textdp.mechanisms.santext:SanTextPlus",
    "custext": "textdp.mechanisms.custext:CusText",
    "clusant": "textdp.mechanisms.clusant:CluSanT",
}
ALL_MECHANISMS: Tuple[str, ...] = tuple(BUILT_IN)
DEFAULT_MECHANISM = "madlib"  # what every entry point runs when no mechanism is named

ENTRY_POINT_GROUP = "textdp.mechanisms"  # other installed packages register mechanisms here: name = "module:Class"
REFERENCE_HELP = ("a registered name, an import path 'package.module:Class' or a textdp.mechanisms.base.Mechanism "
                  "subclass")


def _entry_points() -> Dict[str, str]:
    """{name: "module:Class"} of the mechanisms installed packages register (group ``textdp.mechanisms``), read
    with importlib.metadata once per ``sys.path`` (a scan costs milliseconds; a path added later is read then).
    One that takes a built-in's name is left out here and refused by ``mechanism_class``."""
    return _scan_entry_points(tuple(sys.path))[0]


def _refuse_shadowing() -> None:
    """Refuse every resolution while an installed package registers a built-in's name: a run could not tell which
    of the two the user means. (The flags and --help are still built, from the built-in ones, so that the refusal
    is this one line and not a parse error, and a Beam pipeline of other code in the process still parses.)"""
    problem = _scan_entry_points(tuple(sys.path))[1]
    if problem:
        raise ParameterError(problem)


@functools.lru_cache(maxsize=8)
def _scan_entry_points(_path: tuple) -> Tuple[Dict[str, str], Optional[str]]:
    from importlib.metadata import distributions

    found: Dict[str, str] = {}
    problem = None
    seen = set()
    for dist in distributions():  # one distribution at a time: another package's broken metadata is skipped
        try:
            dist_name = dist.metadata["Name"] or "an installed package"
        except Exception:  # unreadable METADATA
            dist_name = "an installed package"
        key = re.sub(r"[-_.]+", "-", str(dist_name)).lower()
        if key in seen and dist_name != "an installed package":
            continue  # the same distribution found again further down sys.path: the first one wins, as importlib's
        seen.add(key)
        try:
            points = [point for point in dist.entry_points if point.group == ENTRY_POINT_GROUP]
        except Exception as exc:  # a malformed entry_points.txt
            where = getattr(dist, "_path", None)
            warnings.warn(f"textdp: skipped the entry points of {dist_name}{f' ({where})' if where else ''}: its "
                          f"entry_points.txt cannot be read ({type(exc).__name__}); fix or uninstall it", stacklevel=2)
            continue
        for point in points:
            if point.name.lower() in BUILT_IN:  # a built-in's name, or one that differs from it only by case
                problem = problem or (f"{dist_name} registers a mechanism named {point.name!r} (entry point group "
                                      f"{ENTRY_POINT_GROUP}), which is the name of textdp's built-in mechanism "
                                      f"{point.name.lower()!r}{' but for case' if point.name not in BUILT_IN else ''}; "
                                      "rename or uninstall it")
                continue
            if not usable_name(point.name):
                problem = problem or (f"{dist_name} registers a mechanism named {point.name!r} (entry point group "
                                      f"{ENTRY_POINT_GROUP}); {NAME_RULE}: rename or uninstall it")
                continue
            found.setdefault(point.name, point.value)
    return found, problem


# What a mechanism's name may be: it is a flag value, a file-name part of reports and a summary key.
_NAME = re.compile(r"[a-z0-9][a-z0-9_+.-]{0,63}")
NAME_RULE = ("a mechanism name is 1-64 lowercase letters, digits and _ + . -, starting with a letter or digit, "
             "without '..'")


def usable_name(name) -> bool:
    """Whether ``name`` is a mechanism name (``NAME_RULE``)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name


# A mechanism parameter's name is a flag of every job, a keyword of textdp.Privatizer and transforms.Privatize and
# a summary key: it cannot be one of theirs. These are the jobs' own flags' dests (privatize, calibrate, audit,
# neighbours: pipelines/flags.py) and the keywords of Privatizer and Privatize; tests/test_hostile_round4.py checks
# this list against the parsers and the signatures. (The command line also checks Beam's own flags:
# pipelines/custom_flags.py.)
RESERVED_PARAMETER_NAMES = frozenset("""
    artifact batch_tokens blas_threads checks conformance conformance_draws conformance_mechanisms conformance_words
    corpus corpus_format corpus_text_field coverage delta diagnostics
    diagnostics_output draws drop_fields epsilon epsilons false_alarm_rate format input inversion_tokens k_threshold
    keep_failed_text keyed label linkage_sizes linkage_window max_failed_fraction max_nw max_record_bytes
    max_text_bytes mc_draws mechanism mechanism_params min_sw no_oov_pairs no_prune oov_policy output overwrite
    pair_list pairs power_repeats prior_corpus prior_words progress public_summary records redistribute runner samples seed
    shape_field shard_rows shuffle shuffle_shard_records subsample text_field text_fields threads unk_token
    user_field verbose word_list words worker help experiment experiments
    allowed_lateness input_subscription poll_interval streaming_stop_after window_size streaming
    author_budget ledger ledger_key_file ledger_run_id ledger_create contextual_candidates no_contextual log_warnings
    """.split())
PARAMETER_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

# Checks a front end adds on the flags a parameter becomes, which this package cannot see: pipelines/custom_flags.py
# adds one against every option string of Apache Beam's and the jobs' parsers (Beam is not imported here). Each takes
# a Parameter and returns why its flags cannot be (a sentence part), or None; ``_check_interface`` runs them for
# every mechanism that is not built in (import path, class object, entry point).
FLAG_CHECKS: list = []


def add_flag_check(check) -> None:
    """Run ``check(parameter) -> Optional[str]`` on every flag parameter of a mechanism that is not built in."""
    if check not in FLAG_CHECKS:
        FLAG_CHECKS.append(check)


def _normal(name: str) -> str:
    return name.replace("-", "_").lower()


def registered() -> Dict[str, str]:
    """{name: "module:Class"} of every registered mechanism: the built-in ones, then the entry points'."""
    return {**BUILT_IN, **_entry_points()}


def _import_class(path: str, what: str):
    """The object at import path ``module:Attribute`` (TextdpError naming ``what`` if it does not import)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ParameterError(f"{what}: {path!r} is not an import path 'package.module:Class'")
    try:
        target = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  #  (ImportError, an error raised by the module,
        # SystemExit of a script module that parses its argv at import, ...)
        raise ParameterError(f"{what}: {path!r} cannot be imported ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    return target


def mechanism_class(reference) -> type:
    """The class of mechanism ``reference``: a registered name (built-in or entry point), an import path
    ``package.module:Class`` or a Mechanism subclass. The one place a reference is resolved; TextdpError in
    one line for an unknown name, a path that does not import, an object that is no Mechanism subclass, a
    custom class without a name or whose name is a different registered mechanism's (raised as ParameterError,
    a TextdpError and a ValueError, like every refused parameter)."""
    _refuse_shadowing()
    return _class_of(reference)


def _class_of(reference) -> type:
    """``mechanism_class`` without the check of the installed entry points (the registry's own lookups)."""
    if isinstance(reference, type):
        return _custom(reference, f"mechanism {reference.__module__}.{reference.__qualname__}")
    if not isinstance(reference, str):
        raise ParameterError(f"a mechanism is {REFERENCE_HELP}, not a {type(reference).__name__}")
    names = registered()
    if reference in names:
        path = names[reference]
        if reference in BUILT_IN:
            module_name = path.split(":")[0]
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise ParameterError(f"--mechanism {reference} is not available in this installation ({module_name} "
                                  f"cannot be imported: {exc})") from None
            cls = getattr(module, path.split(":")[1])
            if not (isinstance(cls, type) and issubclass(cls, Mechanism) and cls.name == reference):
                raise TypeError(f"{path} is not the Mechanism class named {reference!r}")
            return cls
        cls = _import_class(path, f"mechanism {reference!r} (entry point group {ENTRY_POINT_GROUP})")
        if not (isinstance(cls, type) and issubclass(cls, Mechanism) and cls.name == reference):
            raise ParameterError(f"mechanism {reference!r} (entry point group {ENTRY_POINT_GROUP}): {path} is not a "
                              f"Mechanism subclass named {reference!r}")
        _check_interface(cls, f"mechanism {reference!r} (entry point group {ENTRY_POINT_GROUP}, {path})")
        return cls
    if ":" in reference:
        return _custom(_import_class(reference, "mechanism"), f"mechanism {reference}")
    raise ParameterError(f"unknown mechanism {reference!r}; expected one of {', '.join(names)}, or an import path "
                      "'package.module:Class' of a Mechanism subclass")


def _check_interface(cls, what: str) -> None:
    """Refuse (ParameterError) a class that is not built in and lacks a method of the interface, or declares a
    parameter whose name is not a keyword or is one of textdp's own flags and keywords (RESERVED_PARAMETER_NAMES).
    Checked for an import path, a class object and an entry point alike."""
    missing = [method for method in REQUIRED_METHODS
               if not callable(getattr(cls, method, None)) or getattr(getattr(cls, method), "__isabstractmethod__", False)]
    if missing or getattr(cls, "__abstractmethods__", None):
        raise ParameterError(f"{what} does not implement {', '.join(missing or sorted(cls.__abstractmethods__))} "
                             "(docs/mechanisms.md, 'Bring your own mechanism': the methods a mechanism implements)")
    for param in cls.PARAMETERS:
        if not isinstance(param.name, str) or not PARAMETER_NAME.fullmatch(param.name):
            raise ParameterError(f"{what} declares a parameter named {param.name!r}: a parameter name is a Python "
                                 "keyword and a flag, lowercase letters, digits and '_' starting with a letter")
        clash = [key for key in (param.name,) + tuple(param.aliases) + tuple(param.flag_aliases)
                 if _normal(key) in RESERVED_PARAMETER_NAMES]
        if clash:
            raise ParameterError(f"{what} declares a parameter {clash[0]!r}, which is textdp's own flag and keyword "
                                 f"--{_normal(clash[0]).replace('_', '-')} (a run could not tell them apart): rename it")
        for check in FLAG_CHECKS if param.cli else ():
            problem = check(param)
            if problem:
                raise ParameterError(f"{what} declares a parameter {param.name!r}, {problem}: rename it")


def _custom(cls, what: str) -> type:
    """``cls`` if it is a Mechanism subclass that can run beside the registered ones (see mechanism_class)."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)) or cls is Mechanism:
        raise ParameterError(f"{what} is not a subclass of textdp.mechanisms.base.Mechanism")
    if not usable_name(cls.name):
        raise ParameterError(f"{what} has no usable name {cls.name!r} (its class attribute name): {NAME_RULE}")
    if cls.name.lower() in BUILT_IN and cls.name not in BUILT_IN:
        raise ParameterError(f"{what} is named {cls.name!r}, the name of a built-in mechanism but for case")
    _check_interface(cls, what)
    if cls.name in registered() and _class_of(cls.name) is not cls:
        raise ParameterError(f"{what} is named {cls.name!r}, the name of a different registered mechanism; give it "
                          "a name of its own")
    known = all_parameters()
    for param in cls.PARAMETERS:
        other = {_normal(key): name for name in known for key in (name,) + known[name].aliases}
        if _normal(param.name) in other and known.get(param.name) is not param:
            raise ParameterError(f"{what} declares a parameter {param.name!r} of its own, but the registered "
                              f"mechanisms {', '.join(users_of(other[_normal(param.name)]))} already use that name "
                              "(a flag and summary key mean one thing): rename it or reuse their Parameter")
        if param.cli and known.get(param.name, param) is not param:
            raise ParameterError(f"{what} declares a parameter {param.name!r} of its own, but the registered "
                              f"mechanisms {', '.join(users_of(param.name))} already use that name (a flag and "
                              "summary key mean one thing): rename it or reuse their Parameter")
    return cls


def mechanism_reference(reference):
    """The picklable reference a config carries for ``reference``: the name of a registered mechanism, the import
    path of an importable class, else the class itself (resolved, hence checked, by ``mechanism_class``)."""
    cls = mechanism_class(reference)
    if cls.name in registered() and mechanism_class(cls.name) is cls:
        return cls.name
    if isinstance(reference, str):
        return reference
    path = f"{cls.__module__}:{cls.__qualname__}"
    if "<" not in path and cls.__module__ != "__main__":
        try:
            if _import_class(path, "") is cls:
                return path
        except ParameterError:
            pass
    return cls


def mechanism_name(reference) -> str:
    """The name summaries and reports show for ``reference``: its class's ``name``."""
    return mechanism_class(reference).name


def statement_of(mechanism) -> dict:
    """The privacy statement a summary copies from ``mechanism``: its ``privacy_statement()``, and for a mechanism
    that is not one of textdp's built-in ones a ``statement_source`` saying whose sentences they are (textdp
    states a user's guarantee as the class declares it; it neither derived nor tested it)."""
    statement = dict(mechanism.privacy_statement())
    cls = type(mechanism)
    if cls.name not in BUILT_IN or available_class(cls.name) is not cls:
        statement["statement_source"] = (
            f"the mechanism's own: {cls.__module__}.{cls.__qualname__} is not one of textdp's built-in mechanisms; "
            "its guarantee is stated as the class declares it, not derived or tested by textdp")
    return statement


def available_class(name: str) -> Optional[type]:
    """The class of mechanism ``name``, or None when this installation cannot import it."""
    try:
        return _class_of(name)
    except TextdpError:
        return None


class _Registry(Mapping):
    """{name: class} of every registered mechanism this installation can import (read-only, on demand)."""

    def __getitem__(self, name: str) -> type:
        if name not in registered():
            raise KeyError(name)
        return _class_of(name)

    def __contains__(self, name) -> bool:
        return name in registered()

    def __iter__(self) -> Iterator[str]:
        return (name for name in registered() if available_class(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def get(self, name, default=None):
        return available_class(name) if name in registered() else default


REGISTRY = _Registry()


def all_parameters() -> Dict[str, Parameter]:
    """{public name: Parameter} over every registered mechanism (a shared parameter is declared by one
    object; two different declarations under one name are a programming error)."""
    out: Dict[str, Parameter] = {}
    for cls in REGISTRY.values():
        for param in cls.PARAMETERS:
            if out.setdefault(param.name, param) is not param:
                raise TypeError(f"parameter {param.name!r} is declared twice with different declarations")
    return out


def users_of(name: str) -> Tuple[str, ...]:
    """The registered mechanisms that take parameter ``name``."""
    return tuple(mech for mech, cls in REGISTRY.items() if any(p.name == name for p in cls.PARAMETERS))


class ManifestFacts:
    """What a launcher knows of an artifact from its verified manifest alone (vocabulary size, Annoy
    trees): enough for every vocabulary check but the truncated Gumbel mechanism's."""

    def __init__(self, manifest: dict):
        self.manifest = manifest
        self.vocab_size = int(manifest["vocab_size"])


def artifact_for_checks(name: str, location, manifest: dict):
    """The artifact as ``check_mechanism`` needs it in a launcher, after ``verify_artifact`` returned
    ``manifest``: the manifest's facts, or, for a mechanism whose checks read the artifact's arrays
    (``CHECKS_READ_ARRAYS``: truncated-gumbel reads the neighbour table's smallest distance), the
    artifact itself, memory-mapped from its local directory. A gs:// artifact is then fetched into
    this machine's cache first (checksums verified, as a worker does). The artifact itself too for a mechanism that
    is not built in: ``PrivacySpec.check_artifact`` builds it once (``trial_build``)."""
    cls = mechanism_class(name)
    if built_in(cls) and not getattr(cls, "CHECKS_READ_ARRAYS", False):  # one not built in is built once (trial_build)
        return ManifestFacts(manifest)
    from textdp.artifact.locate import resolve_artifact
    from textdp.artifact.store import Artifact

    return Artifact(resolve_artifact(location), verify=False)


def check_mechanism(name: str, epsilon, artifact=None, **params) -> dict:
    """Refuse, without building anything, an epsilon or parameter that mechanism ``name`` cannot use:
    one that would make it release its input unchanged or break its arithmetic. Every entry point
    calls this (CLI flags, calibrate's and audit's epsilons, textdp.Privatizer, transforms.Privatize);
    the constructors run the same check (the mechanism class's ``check_parameters``).

    ``artifact``: None (checks that need no vocabulary), or a loaded artifact (vocabulary size,
    Annoy trees, the neighbour table's smallest distance: the checks that depend on them too).
    Returns the resolved keyword parameters by public name (see ``make_mechanism``). Raises ParameterError.
    """
    cls, public = _resolve(name, params)
    cls.check_parameters(epsilon, artifact, **_constructor_keywords(cls, public))
    check_table_metric(cls, artifact)
    return public


def check_table_metric(cls, artifact) -> None:
    """A mechanism whose class declares the neighbour-table metric it is defined on (``TABLE_METRIC``, e.g.
    "euclidean"; None: any) is refused (ParameterError, one line) on an artifact whose table has another one,
    from the manifest alone (a launcher's ``ManifestFacts`` or a loaded artifact): before any worker starts."""
    wanted = getattr(cls, "TABLE_METRIC", None)
    manifest = getattr(artifact, "manifest", None)
    if wanted is None or not isinstance(manifest, dict):
        return
    section = manifest.get("neighbours")
    metric = section.get("metric") if isinstance(section, dict) else None
    if metric is not None and metric != wanted:
        raise ParameterError(f"--mechanism {cls.name} is defined on {wanted} distance; the artifact's neighbour table "
                             f"is {metric!r}: build one with `textdp neighbours --metric {wanted}`")


def mechanism_parameters(name: str) -> dict:
    """The parameters (public names) and their defaults that mechanism ``name`` takes."""
    return mechanism_class(name).defaults()


def accepted_keywords(name: str) -> Tuple[str, ...]:
    """Every keyword mechanism ``name`` takes: its public parameter names and their older spellings."""
    return tuple(key for param in mechanism_class(name).PARAMETERS for key in (param.name,) + param.aliases)


def artifact_parts(name: str, **params) -> tuple:
    """The artifact parts beyond vocabulary and vectors that mechanism ``name`` reads with ``params``."""
    return mechanism_class(name).artifact_parts(**params)


def make_mechanism(name: str, artifact, epsilon: float, **params):
    """Build the mechanism ``name`` over a loaded artifact with its own parameters, by their public
    names (``PARAMETERS`` of the class; older keyword spellings in a declaration's ``aliases`` too:
    ``lambda``, ``t``, ``k``, ...).

    A parameter of another mechanism is accepted only at its default value (callers that pass one set
    of flags to every mechanism keep working); any other value, or an unknown keyword, is an error.
    A mechanism that is not one of textdp's built-in ones and whose constructor raises anything but a TextdpError
    is refused in one line, "mechanism X could not be built: <ExceptionType>: <first line>" (TextdpError); so is one
    whose ``parameters()["epsilon"]`` is not the epsilon it was built with (``_check_declared_epsilon``).
    """
    cls, public = _resolve(name, params)
    keywords = _constructor_keywords(cls, public)
    check_table_metric(cls, artifact)
    if built_in(cls):
        return cls(artifact, epsilon, **cls.FIXED, **keywords)
    try:
        mechanism = cls(artifact, epsilon, **cls.FIXED, **keywords)
    except TextdpError:
        raise
    except Exception as exc:  # the user's constructor
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise TextdpError(f"mechanism {cls.name!r} ({cls.__module__}.{cls.__qualname__}) could not be built: "
                          f"{type(exc).__name__}: {first}") from None
    _check_declared_epsilon(mechanism, epsilon)  # what the summaries print and the ledger counts
    return mechanism


def built_in(cls) -> bool:
    """Whether ``cls`` is one of textdp's built-in mechanisms (trusted: never built on a launcher to check it)."""
    return cls.name in BUILT_IN and available_class(cls.name) is cls


PROBE_IDS = 64  # vocabulary ids a launcher releases once with a mechanism that is not built in, before the run


def probe_ids(size: int):
    """The ids of ``trial_build``'s trial in a vocabulary of ``size`` words: PROBE_IDS ids evenly spaced over the
    whole frequency ranking, from the most frequent word (0) to the rarest (size - 1), so that a mechanism that is
    right on the frequent words only (a table built for the top N, an index offset) is seen (round 7, F6); every id
    when the vocabulary is smaller. Deterministic: one launcher's trial is another's."""
    import numpy as np

    if size <= PROBE_IDS:
        return np.arange(max(0, size), dtype=np.int64)
    return np.unique(np.round(np.linspace(0, size - 1, PROBE_IDS)).astype(np.int64))


TRIAL_BAND_NAMES = ("most frequent", "second most frequent", "third most frequent", "rarest")
TRIAL_BANDS = len(TRIAL_BAND_NAMES)  # the trial's probe ids, in frequency-rank order, are judged in bands (quarters)
TRIAL_RETRIES = 15  # a band the trial left unchanged is released this many times more before it is reported
TRIAL_FALSE_ALARM = 1e-6  # a band is reported only when, changing as often as the others, it would show no change
#                           in all 1 + TRIAL_RETRIES releases with a probability below this


class Trial(NamedTuple):
    """What ``trial_build``'s trial release showed: ``changed`` of ``probes`` ids released as another id, and the
    bands (quarters of the frequency ranking) whose probe ids were all released as themselves in 1 + TRIAL_RETRIES
    releases while other probes changed: ``silent_bands`` holds (band index 0..TRIAL_BANDS-1, probe ids in it,
    lowest rank, highest rank)."""

    probes: int
    changed: int
    silent_bands: tuple = ()
    batch: int = 0  # the ids of one more release at the mechanism's own batch size (BATCH_TOKENS): the probes tiled
    batch_changed: float = -1.0  # the share of those released as another id (-1: not run)


def trial_build(reference, artifact, epsilon: float, **params) -> Optional[Trial]:
    """Build a mechanism that is not one of textdp's built-in ones once over the loaded ``artifact`` and release
    PROBE_IDS vocabulary ids spread over the whole vocabulary (``probe_ids``) through
    ``textdp.text.privatizer.released_ids`` (integer ids, one per input, each in the vocabulary), so that a
    constructor that raises or a ``privatize_ids`` that returns something else is refused on the launcher in one line
    (TextdpError), not in a worker. Built-in mechanisms are trusted and not built here. Cost: one construction of the
    user's class and one call on 64 ids, on the launcher (and one more on a band's ids per silent band).
    Returns the ``Trial`` (None for a built-in mechanism): ``changed`` 0 means the mechanism acted as the identity
    on every probe; a silent band, that it changed other probes but none of a quarter of the vocabulary even in
    1 + TRIAL_RETRIES releases (a mechanism right on part of the vocabulary only: round 7, F6), judged only when the
    other bands changed so often that a band like them would show no change with probability below
    TRIAL_FALSE_ALARM at the rate the other bands showed (so a mechanism that rarely changes anything, a large
    epsilon, is left to the scale warning, and one whose words all change alike is seldom reported)
    (``textdp.privacy.statements.trial_warnings``)."""
    import numpy as np

    from textdp.text.privatizer import released_ids

    if built_in(mechanism_class(reference)):
        return None
    mechanism = make_mechanism(reference, artifact, epsilon, **params)
    size = int(artifact.vocab_size)
    probe = probe_ids(size)
    rng = np.random.default_rng()
    try:
        changed = released_ids(mechanism, probe, rng, size) != probe
        silent = []
        bands = list(enumerate(np.array_split(np.arange(len(probe)), TRIAL_BANDS))) if len(probe) >= 2 * TRIAL_BANDS else []
        quiet = [(band, positions) for band, positions in bands if not changed[positions].any()]
        others = np.concatenate([positions for band, positions in bands if changed[positions].any()] or [np.arange(0)])
        rate = float(changed[others].mean()) if len(others) else 0.0  # the change rate of the bands that changed
        for band, positions in quiet:
            # judged only when a band changing as often as the others would show no change in all its releases with
            # probability below TRIAL_FALSE_ALARM: a mechanism that rarely changes anything (a large epsilon) is
            # the scale warning's case, not this one
            if (1.0 - rate) ** (len(positions) * (1 + TRIAL_RETRIES)) >= TRIAL_FALSE_ALARM:
                continue
            again = np.tile(probe[positions], TRIAL_RETRIES)
            if not (released_ids(mechanism, again, rng, size) != again).any():
                silent.append((band, len(positions), int(probe[positions[0]]), int(probe[positions[-1]])))
        # the run calls privatize_ids with BATCH_TOKENS ids: a mechanism right on 64 ids only is seen (round 9, R9-12)
        batch, batch_changed = int(getattr(type(mechanism), "BATCH_TOKENS", 0) or 0), -1.0
        if batch > len(probe):
            tiled = np.resize(probe, batch)
            batch_changed = float(np.mean(released_ids(mechanism, tiled, rng, size) != tiled))
        return Trial(int(len(probe)), int(np.count_nonzero(changed)), tuple(silent), batch, batch_changed)
    except TextdpError:
        raise
    except Exception as exc:  # the user's privatize_ids
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        cls = type(mechanism)
        raise TextdpError(f"mechanism {cls.name!r} ({cls.__module__}.{cls.__qualname__}) failed on the "
                          f"{len(probe)} vocabulary ids of the launcher's trial: {type(exc).__name__}: {first}") from None


def _check_declared_epsilon(mechanism, epsilon: float) -> None:
    """A mechanism that is not built in must report, in ``parameters()["epsilon"]``, the epsilon it was built with:
    the summaries print it and the exposure ledger counts it (round 8, R8b-1: a class reporting epsilon / 1000 let
    every author spend 1000 times the budget; R8b-2: a missing or NaN value failed only after the whole job ran).
    Its ``parameters()`` and privacy statement must also be writable as strict JSON after the summaries' own
    conversion (``textdp.mechanisms.jsonsafe``: numpy scalars become numbers; R8-9: a set failed at WriteSummary after the job).
    TextdpError, one line, on the launcher."""
    import math

    cls = type(mechanism)
    what = f"mechanism {getattr(cls, 'name', '')!r} ({cls.__module__}.{cls.__qualname__})"
    try:
        parameters = mechanism.parameters()
    except Exception as exc:
        raise TextdpError(f"{what}: parameters() raised {type(exc).__name__}") from None
    if not isinstance(parameters, Mapping) or "epsilon" not in parameters:
        raise TextdpError(f"{what}: parameters() must return a mapping with the key 'epsilon' (the summaries print it "
                          "and the exposure ledger counts it)")
    value = parameters["epsilon"]
    try:
        number = float(value) if not isinstance(value, (bool, str, bytes)) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or number != float(epsilon):
        shown = f"{number:g}" if math.isfinite(number) else f"a {type(value).__name__} that is not a finite number"
        raise TextdpError(f"{what}: parameters()['epsilon'] is {shown}, not the epsilon {float(epsilon):g} it was built "
                          "with: the summaries and the exposure ledger would count another epsilon than the one it runs at")
    from textdp.mechanisms.jsonsafe import json_problem  # round 8, R8-9: both documents are fixed now; the summaries write them

    try:
        statement = statement_of(mechanism)
    except Exception as exc:
        raise TextdpError(f"{what}: privacy_statement() raised {type(exc).__name__}") from None
    for method, document in (("parameters()", parameters), ("privacy_statement()", statement)):
        problem = json_problem(document)
        if problem:
            raise TextdpError(f"{what}: {method} cannot be written to the summaries as JSON: {problem} (use str, int, "
                              "float, bool, None, list and dict with str keys)")


def _constructor_keywords(cls, public: dict) -> dict:
    return {cls.parameter(key).keyword: value for key, value in public.items()}


def _resolve(name: str, params: dict):
    """(class, {public name: value} of mechanism ``name`` among ``params``); see make_mechanism."""
    cls = mechanism_class(name)
    name = cls.name
    fixed = cls.FIXED
    elsewhere = {}
    for other in REGISTRY.values():
        for param in other.PARAMETERS:
            for key in (param.name,) + param.aliases:
                elsewhere.setdefault(key, param)
    public = {}
    for key, value in params.items():
        if key in fixed:
            if value != fixed[key]:
                raise TextdpError(f"mechanism {name!r} always has {key}={fixed[key]!r}")
            continue
        try:
            param = cls.parameter(key)
        except KeyError:
            param = None
        if param is not None:
            if param.name in public and key != param.name:
                continue  # the public name wins over an older spelling given too
            public[param.name] = value
        elif key in elsewhere:
            other = elsewhere[key]
            if value is not None and value != other.default:
                raise TextdpError(f"parameter {other.name!r} does not apply to mechanism {name!r} (its parameters: "
                                  f"{', '.join(p.name for p in cls.PARAMETERS) or 'none'})")
        else:
            raise TextdpError(f"unknown parameter {key!r} for mechanism {name!r}")
    return cls, public


def default_batch_tokens(mechanism) -> int:
    """Words per mechanism call when the user gives none: the class's ``BATCH_TOKENS``.

    Mechanisms that search the whole vocabulary for every word (Madlib, Mahalanobis, Vickrey) cost
    ~0.5 ms per word, so 4,096 words already amortise the per-call work (benchmarks/results/scaling.md:
    flat from 4,096 on) and keep a batch to seconds. The table-sampled mechanisms (TEM, SanText, CusText,
    the truncated Gumbel) cost ~1-20 µs per word, where the per-call work of the text path and the
    sampler shows: TEM at epsilon 10, 20,000 IMDb reviews, one worker on one thread ran the whole job in
    13.2-14.5 s at 4,096 words per call and 11.0-11.2 s at 65,536 (3.4 s of it start-up).
    """
    return mechanism_class(mechanism).BATCH_TOKENS


def artifact_needs(mechanism="", nn: str = "exact") -> tuple:
    """The parts of the artifact a privatize or calibrate run with this mechanism reads: what the mechanism's
    class declares (``Mechanism.artifact_parts``) beyond the vocabulary and vectors."""
    from textdp.artifact.locate import ALWAYS_NEEDED, ArtifactNeeds

    cls = mechanism_class(mechanism or DEFAULT_MECHANISM)  # any mechanism reference (TextdpError if unknown)
    return ArtifactNeeds(ALWAYS_NEEDED + cls.artifact_parts(nn=nn), cls.name)
