"""Custom mechanisms that break the "Bring your own mechanism" contract (docs/mechanisms.md), from the fourth
hostile round (issue 25: N2, N3, N4, N11 and the mechanism-name items), for tests/test_hostile_round4.py. Each is
a small subclass of tests.custom_mechanism.CappedExponential (a real, working mechanism) with one thing wrong;
they are reached by import path (``tests.broken_custom_mechanisms:BadIds``) or as class objects."""

from __future__ import annotations

import numpy as np

from tests.custom_mechanism import CappedExponential
from textdp.mechanisms import probe_ids
from textdp.mechanisms.base import Mechanism, Parameter

# --- N3: what privatize_ids returns ------------------------------------------------------------------------------


class BadIds(CappedExponential):
    """Returns -1 for every word: textdp's own 'keep the input word' marker (a common 'no result' sentinel)."""

    name = "rt-badids"

    def privatize_ids(self, ids, rng):
        return np.full(len(ids), -1, dtype=np.int64)


class TooLargeIds(CappedExponential):
    """Returns |V| (one past the last vocabulary id)."""

    name = "rt-toolarge"

    def privatize_ids(self, ids, rng):
        return np.full(len(ids), self.vocab_size, dtype=np.int64)


class FloatIds(CappedExponential):
    """Returns float ids (truncated by a cast they would name other words)."""

    name = "rt-float"

    def privatize_ids(self, ids, rng):
        return np.asarray(ids, dtype=np.float64) + 0.7


class ShortIds(CappedExponential):
    """Returns one id fewer than it was given."""

    name = "rt-short"

    def privatize_ids(self, ids, rng):
        return np.asarray(ids)[:-1] if len(ids) > 1 else np.asarray(ids)[:0]


class ListIds(CappedExponential):
    """Returns a Python list of valid ids: accepted (an array of integers once read)."""

    name = "rt-list"

    def privatize_ids(self, ids, rng):
        return [int(i) for i in CappedExponential.privatize_ids(self, ids, rng)]


# --- N2: parameters named like textdp's own flags and keywords --------------------------------------------------


class SeedClash(CappedExponential):
    name = "rt-seed"
    PARAMETERS = (Parameter("seed", int, None, help="clash with --seed", low=0, example=3),)

    def __init__(self, artifact, epsilon, seed=None):
        CappedExponential.__init__(self, artifact, epsilon)


class RunnerClash(CappedExponential):
    name = "rt-runner"
    PARAMETERS = (Parameter("runner", str, None, help="clash with Beam's --runner", example="x"),)

    def __init__(self, artifact, epsilon, runner=None):
        CappedExponential.__init__(self, artifact, epsilon)


class UnkClash(CappedExponential):
    name = "rt-unk"
    PARAMETERS = (Parameter("unk_token", str, None, help="clash with --unk-token", example="x"),)

    def __init__(self, artifact, epsilon, unk_token=None):
        CappedExponential.__init__(self, artifact, epsilon)


class HyphenClash(CappedExponential):
    """The hyphen spelling of Madlib's registered search_k."""

    name = "rt-hyphen"
    PARAMETERS = (Parameter("search-k", int, None, help="hyphen spelling of search_k", low=1, example=3),)

    def __init__(self, artifact, epsilon, **_keywords):
        CappedExponential.__init__(self, artifact, epsilon)


class BeamClash(CappedExponential):
    """A Beam flag (--num-workers) that textdp does not declare itself."""

    name = "rt-beam"
    PARAMETERS = (Parameter("num_workers", int, None, help="clash with Beam's --num-workers", low=1, example=2),)

    def __init__(self, artifact, epsilon, num_workers=None):
        CappedExponential.__init__(self, artifact, epsilon)


# --- N4: construction and missing methods -----------------------------------------------------------------------


class InitBoom(CappedExponential):
    name = "rt-initboom"
    PARAMETERS = ()

    def __init__(self, artifact, epsilon):
        raise RuntimeError("boom in init\nsecond line")


class Half(Mechanism):
    """A Mechanism subclass with a name and a constructor but none of the methods."""

    name = "rt-half"

    def __init__(self, artifact, epsilon):
        self.check_parameters(epsilon, artifact)


# --- mechanism names --------------------------------------------------------------------------------------------


class Multiline(CappedExponential):
    name = "rt\nmulti line"


class SlashName(CappedExponential):
    name = "../../evil"


class CaseVariant(CappedExponential):
    name = "Madlib"


class LateBadIds(CappedExponential):
    """Releases properly the ids a launcher tries (textdp.mechanisms.probe_ids) and -1 for the others: found
    only in the worker, where the run must fail rather than release."""

    name = "rt-latebad"

    def privatize_ids(self, ids, rng):
        out = CappedExponential.privatize_ids(self, ids, rng)
        out[~np.isin(np.asarray(ids), probe_ids(self.vocab_size))] = -1
        return out
