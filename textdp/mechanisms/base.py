"""The mechanism interface: what every mechanism class declares once, and the rest of textdp asks.

A mechanism is one class (``Mechanism`` subclass). Its class attributes and classmethods say
everything the CLI, the Flex Templates, ``textdp.Privatizer``, ``transforms.Privatize``, the summary,
calibrate and audit need to know, so that none of them keeps a list of mechanism names:

``name``
    the registry name (``--mechanism NAME``); a variant is its own subclass with its own name
    (``SanTextPlus``, ``"santext+"``, is ``SanText`` with ``plus=True``).
``PARAMETERS``
    a tuple of ``Parameter``: ONE public name per parameter, used identically as the CLI flag
    (``--<name>``, and ``--<name with hyphens>``), the Flex Template parameter, the Python keyword of
    ``Privatizer``/``Privatize``/``make_mechanism`` and the key of ``parameters()`` in the summary;
    its type, default, simple range/choice check and help text. Two mechanisms that share a
    parameter (``nn`` of Madlib, Mahalanobis and Vickrey) declare the same ``Parameter`` object.
``artifact_parts(**params)``
    the artifact parts a run reads beyond the vocabulary and vectors (``"neighbours"``, ``"annoy"``).
``SEARCHES_NEAREST``
    whether a draw searches the vocabulary for the nearest word to a noisy point.
``BATCH_TOKENS``
    words per mechanism call when the user gives none.
``EXACT_LAW``
    whether ``exact_distribution(row, word_id)`` gives the closed-form release law (else the law is
    known only through the mechanism's own sampling, a reference simulation).
``AUDIT_KERNEL``
    whether ``audit_kernel()`` gives the law as ``exp(-scale * min(d, cap)) / Z`` (the audit's exact
    posterior); calibrate's and audit's other needs: ``CALIBRATE_PRUNED_SEARCH``,
    ``calibration_fields()``, ``exact_label()``, ``BOUND_TEXT``.
``privacy_statement()["coverage"]``
    what the guarantee covers (all words, a stated subset, none).
``EPSILON_D_BOUND``
    whether the per-word bound is exp(epsilon x d(w, w')), d the embedding distance (the exposure ledger's
    statement then says "loss at most B x max d"; any other bound gets the epsilon-mass form). Default False.

Simple range and choice checks come from the declarations (``check_parameters``); checks that need
the vocabulary or relate parameters stay methods (``check_special``); the number and epsilon rules are
``textdp.mechanisms.check_number`` and ``check_epsilon``. Nothing here imports Beam.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from textdp.errors import ParameterError

SEARCH_BATCH_TOKENS = 4096  # words per call for mechanisms that search the vocabulary for every word
TABLE_BATCH_TOKENS = 65_536  # words per call for the others (sampled from tables: cheap per word)



# The one epsilon range of every mechanism and entry point (CLI flags, calibrate's and audit's
# --epsilons, textdp.Privatizer, transforms.Privatize). Lower bound: Madlib's noise has magnitude
# ~ dimension / epsilon and the nearest-word search holds the noisy point in float32 (largest value
# 3.4e38): at epsilon 1e-37 (50 dimensions) the cast overflows ("points must be finite"); 1e-30
# leaves a margin of 1e6 for 300-dimensional embeddings and Mahalanobis's stretched noise (every
# mechanism ran at 1e-30 and 1e6 on the 5k fixture, as tests/test_parameter_refusals.py does; the
# vector mechanisms and CusText also on the 400k artifact, which has no neighbour table in this build). Upper bound: at 1e6 Madlib's noise
# is already far below any distance between words,
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
    shown = (lambda x: f"{int(x):,}") if integer else (lambda x: f"{x:g}")  # noqa: E731  (2,147,483,647, not 2.14748e+09)
    wanted = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, wanted) or type(value).__name__ == "bool_":
        raise ParameterError(f"{what} must be {kind}, got a {type(value).__name__}")
    number = int(value) if integer else float(value)
    if not integer and not math.isfinite(number):
        raise ParameterError(f"{what} must be {kind}, got {number!r}")
    if low is not None and (number < low or (low_open and number == low)):
        raise ParameterError(f"{what} must be {'>' if low_open else '>='} {shown(low)}, got {shown(number)}")
    if high is not None and (number > high or (high_open and number == high)):
        raise ParameterError(f"{what} must be {'<' if high_open else '<='} {shown(high)}, got {shown(number)}")
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


@dataclass(frozen=True)
class Parameter:
    """One parameter of a mechanism, declared once.

    ``name``: the public name (flag ``--name``/``--name-with-hyphens``, template parameter, Python
    keyword, summary key). ``type``: float, int or str (``list`` for a Python-only parameter).
    ``default``: None means "derived by the mechanism" (then None is accepted). ``low``/``high``
    (``low_open``/``high_open``) or ``choices``: the simple check. ``label``: how refusals name it
    (default ``name``). ``argument``: the mechanism constructor's keyword when it differs (the class's
    own business; no caller sees it). ``aliases``: older spellings still accepted as keywords (and as
    flags when ``flag_aliases``). ``cli``: False for a parameter only Python can give (a list of ids).
    ``example``: a valid value other than the default, with the other parameters it needs to show in
    ``parameters()`` (``example_with``, by public name; those a mechanism does not take are ignored):
    what tests/test_registry.py sends through flag, template, keyword and summary for every mechanism.
    """

    name: str
    type: type
    default: Any
    help: str
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    choices: Tuple[str, ...] = ()
    label: Optional[str] = None
    argument: Optional[str] = None
    aliases: Tuple[str, ...] = ()
    flag_aliases: Tuple[str, ...] = ()
    cli: bool = True
    example: Any = None
    example_with: Tuple[Tuple[str, Any], ...] = ()

    @property
    def keyword(self) -> str:
        """The constructor's keyword for this parameter."""
        return self.argument or self.name

    @property
    def what(self) -> str:
        return self.label or self.name

    @property
    def flags(self) -> Tuple[str, ...]:
        """The CLI spellings: ``--a-b`` and ``--a_b`` (one when the name has no underscore), then aliases."""
        names = [f"--{self.name.replace('_', '-')}", f"--{self.name}"]
        names += [f"--{alias}" for alias in self.flag_aliases]
        return tuple(dict.fromkeys(names))

    def check(self, value) -> None:
        """The declared check (ParameterError); None passes when the default is None (derived)."""
        if value is None and self.default is None:
            return
        if self.choices:
            if value not in self.choices:
                wanted = " or ".join(repr(c) for c in self.choices) if len(self.choices) == 2 else \
                    "one of " + ", ".join(repr(c) for c in self.choices)
                raise ParameterError(f"{self.what} must be {wanted}, got {value!r}")
            return
        if self.type in (int, float):
            check_number(value, self.what, self.low, self.high, self.low_open, self.high_open,
                         integer=self.type is int)


# The methods every mechanism implements (the base class has none of them): a class without one is refused when
# it is resolved (textdp.mechanisms._custom), not inside a worker.
REQUIRED_METHODS = ("privatize_ids", "metric_points", "token_epsilon0", "parameters", "privacy_statement")


class Mechanism:
    """Base of every mechanism (see the module docstring). Subclasses implement ``__init__(artifact,
    epsilon, **keywords)``, ``privatize_ids(ids, rng)``, ``metric_points``, ``token_epsilon0``,
    ``parameters`` and ``privacy_statement``; everything else has a default here."""

    name: str = ""
    DESCRIPTION: str = ""  # one line for --mechanism's help
    TITLE: str = ""  # how reports name it (default: its name)
    PARAMETERS: Tuple[Parameter, ...] = ()
    NEEDS_NEIGHBOUR_TABLE = False  # samples from the artifact's K-nearest table
    SEARCHES_NEAREST = False  # searches the nearest word to a noisy point (then --nn chooses the search)
    BATCH_TOKENS = TABLE_BATCH_TOKENS
    EXACT_LAW = False  # exact_distribution gives the closed-form law; else only the mechanism's sampling
    AUDIT_KERNEL = False  # audit_kernel gives the law as exp(-scale min(d, cap)) / Z
    CALIBRATE_PRUNED_SEARCH = False  # calibrate restricts the exact search to the words that can be nearest
    CHECKS_READ_ARRAYS = False  # check_special reads the artifact's arrays (not only its manifest)
    # A parameter value that makes a mechanism release every word unchanged except with probability below this
    # is refused (check_special): the run would be the identity. One rule for every mechanism that applies it.
    IDENTITY_CHANGE = 1e-6
    BOUND_TEXT = "as the mechanism states it"  # the per-token bound of a pair, for the audit's report
    EPSILON_D_BOUND = False  # per-word bound exp(epsilon * d(w, w')), d the embedding distance (the ledger's statement)
    FIXED: dict = {}  # constructor keywords a variant always has (SanText+: plus=True)
    EXAMPLE: dict = {}  # parameters (public names) that run it at an ordinary epsilon on a small vocabulary

    # --- declarations -----------------------------------------------------------------------------
    @classmethod
    def parameter(cls, name: str) -> Parameter:
        for param in cls.PARAMETERS:
            if name in (param.name,) + param.aliases:
                return param
        raise KeyError(name)

    @classmethod
    def defaults(cls) -> dict:
        """{public name: default} of every declared parameter."""
        return {param.name: param.default for param in cls.PARAMETERS}

    @classmethod
    def artifact_parts(cls, **params) -> tuple:
        """Parts of the artifact a run reads beyond the vocabulary and the vectors."""
        parts = ("neighbours",) if cls.NEEDS_NEIGHBOUR_TABLE else ()
        if cls.SEARCHES_NEAREST and params.get("nn", "exact") == "annoy":
            parts += ("annoy",)
        return parts

    @classmethod
    def check_parameters(cls, epsilon, artifact=None, **keywords) -> None:
        """Refuse (ParameterError) an epsilon or parameter this mechanism cannot use, without loading
        anything: the one epsilon rule, each declared parameter's check, then ``check_special``.
        ``keywords`` are the constructor's keywords; ``artifact`` (optional) adds the checks that need
        the vocabulary."""
        check_epsilon(epsilon)
        for param in cls.PARAMETERS:
            if param.keyword in keywords:
                param.check(keywords[param.keyword])
        size = getattr(artifact, "vocab_size", None)
        if size is not None and int(size) < 2:  # an artifact built elsewhere, or by an older textdp
            raise ParameterError(f"the vocabulary holds {int(size)} word(s): --mechanism {cls.name} needs at least 2")
        cls.check_special(epsilon, artifact, **keywords)

    @classmethod
    def check_special(cls, epsilon, artifact=None, **keywords) -> None:
        """Checks beyond a parameter's own range: ones that need the vocabulary or relate parameters."""

    @classmethod
    def summary_line(cls) -> str:
        """``name (description; what it needs)`` for --mechanism's help."""
        needs = "; needs the artifact's neighbour table (`textdp neighbours`)" if cls.NEEDS_NEIGHBOUR_TABLE else ""
        return f"{cls.name} ({cls.DESCRIPTION}{needs})"

    @classmethod
    def title(cls) -> str:
        return cls.TITLE or cls.name

    @classmethod
    def exact_label(cls) -> str:
        """How calibrate names the exact statistics of its closed form."""
        return f"exact {cls.name} values (closed form)"

    # --- instance defaults ------------------------------------------------------------------------
    def input_ids(self, ids):
        """``ids`` as an int64 array, every id a word of this mechanism's vocabulary (``vocab_size``); ValueError
        otherwise. The first step of every ``privatize_ids``."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        size = getattr(self, "vocab_size", None)
        if size is None:
            size = int(self.artifact.vocab_size)
        if len(ids) and (ids.min() < 0 or ids.max() >= size):
            raise ValueError("word ids out of range for this artifact")
        return ids

    def exact_distribution(self, row, word_id: int):
        """The exact output distribution for input ``word_id`` (``row``: d(w, .) in the mechanism's
        metric, itself 0), or None when the law is known only by sampling (``EXACT_LAW`` False)."""
        return None

    def audit_kernel(self):
        """(scale, cap, metric) with P(o | w) = exp(-scale * min(d(w, o), cap)) / Z_w, or None."""
        return None

    def reference_simulation(self):
        """``release(ids, rng) -> ids``: an independent simulation of the release law from the declared
        ``parameters()`` (plain numpy float64, exact search; textdp.mechanisms.reference), which the conformance
        audit compares with ``privatize_ids``; None when the mechanism declares none (then, without
        ``EXACT_LAW``, the conformance audit reports it as not tested)."""
        return None

    def calibration_fields(self) -> dict:
        """Extra columns of calibrate's rows (TEM: its gamma)."""
        return {}
