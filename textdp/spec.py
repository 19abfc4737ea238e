"""``PrivacySpec``: what a run releases with, in one object, validated once (issue 26, item 2).

A spec holds the mechanism (a reference: registered name, import path or Mechanism subclass, kept in the
picklable form ``textdp.mechanisms.mechanism_reference`` gives), its parameters by their public names, the
epsilon(s), the artifact's location and the out-of-vocabulary policy. Building one checks everything that can
be checked without loading the artifact, with the one epsilon rule (``textdp.mechanisms.check_epsilon``), each
declared parameter's check and the mechanism's own (``check_mechanism``), and the OOV policy
(``textdp.text.privatizer.check_oov``); a refusal is one ``TextdpError`` line (``ParameterError`` for the
mechanism and epsilon). ``textdp.Privatizer``, ``transforms.Privatize`` and the jobs' ``MechanismOptions``
(privatize, calibrate, audit) build their spec and take the mechanism, parameters and epsilons from it, so none
re-checks them in its own way. Checks that need the vocabulary run later, once the artifact is known
(``check_artifact``).

Why a module of its own and not textdp/mechanisms/__init__.py: the registry knows mechanisms; a spec also holds the
artifact and the text policy (textdp/artifact/locate.py, textdp/text/privatizer.py), which the registry need not import.
textdp has no user-facing case policy (the tokenizer's case rule is fixed), so the spec has no field for one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from textdp.errors import ParameterError
from textdp.mechanisms import (
    DEFAULT_MECHANISM,
    check_epsilon,
    check_mechanism,
    make_mechanism,
    mechanism_class,
    mechanism_reference,
    trial_build,
)
from textdp.text.privatizer import DEFAULT_UNK_TOKEN


@dataclass(frozen=True)
class PrivacySpec:
    """Mechanism reference + parameters (public names) + epsilons + artifact + OOV policy, validated on construction.

    ``epsilons``: one epsilon (privatize, the API, the transform) or a grid (calibrate, audit); a number is taken
    as a grid of one. ``params``: a mapping or (name, value) pairs; kept as sorted pairs of the public names the
    mechanism takes (parameters of other mechanisms at their defaults, as the jobs' flags pass them, are dropped).
    ``epsilon_label``: how a refused epsilon is named (``--epsilon`` on the command line)."""

    mechanism: Any = DEFAULT_MECHANISM
    epsilons: Tuple[float, ...] = ()
    params: Tuple[Tuple[str, Any], ...] = ()
    artifact: Optional[str] = None
    oov_policy: str = "random"
    unk_token: str = DEFAULT_UNK_TOKEN
    epsilon_label: str = field(default="epsilon", compare=False, repr=False)

    def __post_init__(self):
        from textdp.artifact.locate import artifact_location
        from textdp.text.privatizer import check_oov

        reference = mechanism_reference(self.mechanism)  # refuses an unknown or unusable mechanism
        given = self.epsilons if isinstance(self.epsilons, (tuple, list)) else (self.epsilons,)
        if not given:
            raise ParameterError(f"{self.epsilon_label} is required")
        epsilons = tuple(check_epsilon(value, self.epsilon_label) for value in given)  # the one epsilon rule
        params = dict(self.params.items() if hasattr(self.params, "items") else self.params)
        public: dict = {}
        for epsilon in epsilons:  # each declared parameter's check and the mechanism's own, at every epsilon
            public = check_mechanism(reference, epsilon, None, **params)
        check_oov(self.oov_policy, self.unk_token)
        object.__setattr__(self, "mechanism", reference)
        object.__setattr__(self, "epsilons", epsilons)
        object.__setattr__(self, "params", tuple(sorted(public.items())))
        object.__setattr__(self, "artifact", artifact_location(self.artifact))

    # --- what the run uses ----------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The epsilon of a one-epsilon spec."""
        if len(self.epsilons) != 1:
            raise ParameterError(f"this spec has {len(self.epsilons)} epsilons, not one")
        return self.epsilons[0]

    @property
    def mechanism_class(self) -> type:
        return mechanism_class(self.mechanism)

    @property
    def name(self) -> str:
        """The mechanism's name, as summaries show it."""
        return self.mechanism_class.name

    def keywords(self) -> dict:
        """The mechanism's parameters by public name (``make_mechanism``'s keywords)."""
        return dict(self.params)

    def needs(self) -> tuple:
        """The artifact parts the run reads (``textdp.artifact.locate.artifact_needs``)."""
        from textdp.mechanisms import artifact_needs

        return artifact_needs(self.mechanism, self.keywords().get("nn", "exact"))

    def check_artifact(self, artifact) -> list:
        """The checks that need the vocabulary (its size, the neighbour table, ...), at every epsilon; with a loaded
        artifact, a mechanism that is not built in is also built once and run on a few ids (``trial_build``).
        Returns what that trial showed (``textdp.privacy.statements.trial_warnings``: e.g. the mechanism released
        every trial word as itself), one line each; [] for a built-in mechanism or without a loaded artifact. The one
        trial the jobs' launcher, ``textdp.Privatizer`` and ``transforms.Privatize`` ask (round 10, R10-9)."""
        from textdp.privacy.statements import trial_warnings

        for epsilon in self.epsilons:
            check_mechanism(self.mechanism, epsilon, artifact, **self.keywords())
        if hasattr(artifact, "vectors"):  # a loaded artifact: a mechanism that is not built in is built once here
            return trial_warnings(trial_build(self.mechanism, artifact, self.epsilons[0], **self.keywords()))
        return []

    def make(self, artifact, epsilon: Optional[float] = None):
        """The mechanism over a loaded artifact, at ``epsilon`` (default: the spec's one epsilon)."""
        return make_mechanism(self.mechanism, artifact, self.epsilon if epsilon is None else epsilon,
                              **self.keywords())
