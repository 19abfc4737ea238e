"""Mechanism factory: the one place that turns a mechanism name and its parameters into an object.

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
    ``diameter_bounds(mechanism.metric_points(artifact.vectors)).upper`` (textdp.accounting
    ``mechanism_token_epsilon0`` does exactly that).
``token_epsilon0(diameter_upper) -> float``
    the pure local-DP epsilon_0 of one released token over the finite vocabulary, given an upper
    bound on the vocabulary's diameter in that metric: Madlib epsilon*diam, TEM
    epsilon*min(diam, gamma), Mahalanobis and Vickrey epsilon*diam_metric, SanText epsilon*diam,
    SanText+ inf when p < 1 (a kept non-sensitive word reveals itself), CusText epsilon with a
    single output set and inf otherwise (groups have disjoint outputs), truncated-gumbel inf (no
    guarantee claimed). inf means "no finite bound is claimed", never "unknown but fine".

``MECHANISMS`` lists the names the pipelines offer today; ``ALL_MECHANISMS`` every name the
factory builds (the pipelines' flags for the new ones are wired separately).
"""

from __future__ import annotations

import importlib
import math
import numbers

from textdp.errors import ParameterError, TextdpError

MECHANISMS = ("madlib", "tem")  # offered by the pipelines' --mechanism today
ALL_MECHANISMS = ("madlib", "tem", "mahalanobis", "vickrey", "truncated-gumbel", "santext", "santext+", "custext")

# name -> (module, class, {keyword: default}, fixed keywords)
_SPECS = {
    "madlib": ("textdp.madlib", "Madlib", {"nn": "exact", "search_k": -1}, {}),
    "tem": ("textdp.tem", "TEM", {"gamma": None, "beta": 0.001}, {}),
    "mahalanobis": ("textdp.mahalanobis", "Mahalanobis", {"lam": 0.2, "nn": "exact", "search_k": -1}, {}),
    "vickrey": ("textdp.vickrey", "Vickrey", {"t": 0.5, "noise": "madlib", "lam": 0.2, "nn": "exact", "search_k": -1}, {}),
    "truncated-gumbel": ("textdp.truncated_gumbel", "TruncatedGumbel",
                         {"scale": None, "mean_candidates": None, "max_distance": None}, {}),
    "santext": ("textdp.santext", "SanText", {"plus": False, "sensitive_fraction": 0.9, "p": 0.3, "sensitive_ids": None}, {}),
    "santext+": ("textdp.santext", "SanText", {"sensitive_fraction": 0.9, "p": 0.3, "sensitive_ids": None}, {"plus": True}),
    "custext": ("textdp.custext", "CusText", {"k": 20, "metric": "euclidean"}, {}),
}
_ALIASES = {"lambda": "lam"}

# The one epsilon range of every mechanism and entry point (CLI flags, calibrate's and audit's
# --epsilons, textdp.Privatizer, transforms.Privatize). Lower bound: Madlib's noise has magnitude
# ~ dimension / epsilon and the nearest-word search holds the noisy point in float32 (largest value
# 3.4e38): at epsilon 1e-37 (50 dimensions) the cast overflows ("points must be finite"); 1e-30
# leaves a margin of 1e6 for 300-dimensional embeddings and Mahalanobis's stretched noise (every
# mechanism ran at 1e-30 and 1e6 on the 5k fixture, as tests/test_parameter_refusals.py does; the
# vector mechanisms and CusText also on the 400k artifact, which has no neighbour table in this build). Upper bound: at 1e6 Madlib's noise is already far below any distance between words,
# so a larger value would only hide that the output is the input.
MIN_EPSILON = 1e-30
MAX_EPSILON = 1e6
EPSILON_RANGE_HELP = (f"a finite number in [{MIN_EPSILON:g}, {MAX_EPSILON:g}]: below {MIN_EPSILON:g} the noise of the "
                      "nearest-word mechanisms overflows the float32 search; a larger epsilon than "
                      f"{MAX_EPSILON:g} changes nothing, since already from about 100 on the noise is far below the "
                      "distance between words and nearly every word is released unchanged (the run warns)")


def check_number(value, what: str, low=None, high=None, low_open: bool = False, high_open: bool = False,
                 integer: bool = False) -> float:
    """``value`` as a float (an int if ``integer``), or ParameterError in one line naming ``what``.

    Refuses booleans, non-numbers, NaN and infinities, and values outside [low, high] (open ends
    where said)."""
    kind = "an integer" if integer else "a finite number"
    wanted = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, wanted) or type(value).__name__ == "bool_":
        raise ParameterError(f"{what} must be {kind}, got a {type(value).__name__}")
    number = int(value) if integer else float(value)
    if not integer and not math.isfinite(number):
        raise ParameterError(f"{what} must be {kind}, got {number!r}")
    if low is not None and (number < low or (low_open and number == low)):
        raise ParameterError(f"{what} must be {'>' if low_open else '>='} {low:g}, got {number:g}")
    if high is not None and (number > high or (high_open and number == high)):
        raise ParameterError(f"{what} must be {'<' if high_open else '<='} {high:g}, got {number:g}")
    return number


def check_epsilon(epsilon, what: str = "epsilon") -> float:
    """The one epsilon rule: a finite number (not a boolean) in [MIN_EPSILON, MAX_EPSILON]."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or type(epsilon).__name__ == "bool_":
        raise ParameterError(f"{what} must be a number (int or float), got a {type(epsilon).__name__}")
    try:
        value = float(epsilon)
    except OverflowError:  # an int beyond float range (10**400)
        value = math.inf
    if not (math.isfinite(value) and MIN_EPSILON <= value <= MAX_EPSILON):
        raise ParameterError(f"{what} must be {EPSILON_RANGE_HELP}; got {value:g}")
    return value


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
    this machine's cache first (checksums verified, as a worker does)."""
    if not getattr(mechanism_class(name), "CHECKS_READ_ARRAYS", False):
        return ManifestFacts(manifest)
    from textdp.locate import resolve_artifact  # pylint: disable=import-outside-toplevel
    from textdp.store import Artifact  # pylint: disable=import-outside-toplevel

    return Artifact(resolve_artifact(location), verify=False)


def mechanism_class(name: str):
    """The class of mechanism ``name`` (imported on demand)."""
    if name not in _SPECS:
        raise TextdpError(f"unknown mechanism {name!r}; expected one of {', '.join(ALL_MECHANISMS)}")
    module_name, class_name = _SPECS[name][:2]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TextdpError(f"--mechanism {name} is not available in this installation ({module_name} cannot be "
                          f"imported: {exc})") from None
    return getattr(module, class_name)


def check_mechanism(name: str, epsilon, artifact=None, **params) -> dict:
    """Refuse, without building anything, an epsilon or parameter that mechanism ``name`` cannot use:
    one that would make it release its input unchanged or break its arithmetic. Every entry point
    calls this (CLI flags, calibrate's and audit's epsilons, textdp.Privatizer, transforms.Privatize);
    the constructors run the same check (the mechanism class's ``check_parameters``).

    ``artifact``: None (checks that need no vocabulary), or a loaded artifact (vocabulary size,
    Annoy trees, the neighbour table's smallest distance: the checks that depend on them too).
    Returns the resolved keyword parameters (see ``make_mechanism``). Raises ParameterError.
    """
    fixed, kwargs = _resolve(name, params)
    mechanism_class(name).check_parameters(epsilon, artifact, **fixed, **kwargs)
    return kwargs


def mechanism_parameters(name: str) -> dict:
    """The keyword parameters (and their defaults) that mechanism ``name`` takes."""
    if name not in _SPECS:
        raise TextdpError(f"unknown mechanism {name!r}; expected one of {', '.join(ALL_MECHANISMS)}")
    return dict(_SPECS[name][2])


def make_mechanism(name: str, artifact, epsilon: float, **params):
    """Build the mechanism ``name`` over a loaded artifact with its own keyword parameters.

    Madlib: ``nn``, ``search_k``. TEM: ``gamma`` (None: Thm. 4.2 from ``beta``), ``beta``.
    Mahalanobis: ``lam`` (or ``lambda``), ``nn``, ``search_k``. Vickrey: ``t``, ``noise``
    (``madlib``/``mahalanobis``), ``lam``, ``nn``, ``search_k``. truncated-gumbel: ``scale``,
    ``mean_candidates``, ``max_distance``. SanText: ``plus``, ``sensitive_fraction``, ``p``,
    ``sensitive_ids`` (``santext+`` is SanText with ``plus=True``). CusText: ``k``, ``metric``.

    A keyword of another mechanism is accepted only at its default value (callers that pass one set
    of flags to every mechanism keep working); any other value, or an unknown keyword, is an error.
    """
    fixed, kwargs = _resolve(name, params)
    return mechanism_class(name)(artifact, epsilon, **fixed, **kwargs)


def _resolve(name: str, params: dict):
    """(fixed keywords, the keyword parameters of mechanism ``name`` among ``params``); see make_mechanism."""
    if name not in _SPECS:
        raise TextdpError(f"unknown mechanism {name!r}; expected one of {', '.join(ALL_MECHANISMS)}")
    _, _, accepted, fixed = _SPECS[name]
    known_elsewhere = {}
    for spec in _SPECS.values():
        for key, default in spec[2].items():
            known_elsewhere.setdefault(key, default)
    kwargs = {}
    for key, value in params.items():
        key = _ALIASES.get(key, key)
        if key in fixed:
            if value != fixed[key]:
                raise TextdpError(f"mechanism {name!r} always has {key}={fixed[key]!r}")
            continue
        if key in accepted:
            kwargs[key] = value
        elif key in known_elsewhere:
            if value is not None and value != known_elsewhere[key]:
                raise TextdpError(f"parameter {key!r} does not apply to mechanism {name!r} (its parameters: "
                                  f"{', '.join(accepted) or 'none'})")
        else:
            raise TextdpError(f"unknown parameter {key!r} for mechanism {name!r}")
    return dict(fixed), kwargs
