"""Deliberately broken mechanisms, for the self-check's tests only (never importable from textdp or
selectable from the command line).

``ShrunkNoiseMadlib``
    Madlib whose noise radius is scaled by 0.7: in effect epsilon / 0.7 = 1.43 epsilon while it
    still claims epsilon * d.
``AlgorithmTwoTEM``
    TEM sampled directly as the paper's Alg. 2 describes it (score -d(w, i) for the words within
    gamma, one bottom element standing for all other words, the exponential mechanism over them,
    then a uniform word if the bottom wins), with the bottom element's weight either as the paper
    has it (``bottom="paper"``: score -gamma + 2 ln|W \\ L(w)| / epsilon) or as MLDP 0.1.2 has it
    (``bottom="mldp"``: 2 ln(|W| / |L(w)|) / epsilon instead, see docs/evaluation.md). The
    exponential mechanism over L(w) and the bottom is sampled as the categorical distribution it
    equals (Gumbel-max and the categorical draw have the same distribution).
``PassThroughPrivatizer``
    a text privatizer that says its OOV policy is ``random`` but releases unknown words unchanged.

The conformance audit's broken variants (``CONFORMANCE_BROKEN``, issue 28): ``DoubleGammaTEM`` (samples with
2 x gamma, claims gamma), ``ShortRadiusMadlib`` (Gamma(n - 1) radius), ``HalfDoubleSanText`` (2 x epsilon for
half the words), ``SwappedVickrey`` (t and 1 - t swapped), ``OtherKCusText`` (groups built on another K).
"""

from __future__ import annotations

import math

import numpy as np

from textdp.mechanisms.custext import CusText
from textdp.mechanisms.madlib import Madlib
from textdp.mechanisms.santext import SanText
from textdp.mechanisms.tem import TEM
from textdp.mechanisms.vickrey import Vickrey
from textdp.search.geometry import distance_row
from textdp.text.privatizer import TextPrivatizer


class ShrunkNoiseMadlib(Madlib):
    """Madlib with the noise vector scaled by ``factor`` (0.7): claims epsilon, delivers epsilon / factor."""

    def __init__(self, artifact, epsilon, factor=0.7, **kwargs):
        super().__init__(artifact, epsilon, **kwargs)
        self.factor = float(factor)

    def noisy_vectors(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        base = np.asarray(self.artifact.vectors[ids], dtype=np.float64)
        honest = super().noisy_vectors(ids, rng).astype(np.float64)
        return (base + self.factor * (honest - base)).astype(np.float32)


class AlgorithmTwoTEM:
    """TEM by the paper's Alg. 2 over a whole (small) vocabulary, with a choice of bottom-element weight."""

    name = "tem"
    metric = "euclidean"

    def __init__(self, artifact, epsilon, gamma, bottom="paper"):
        if bottom not in ("paper", "mldp"):
            raise ValueError(bottom)
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.gamma = float(gamma)
        self.bottom = bottom
        self._rows = {}

    def token_epsilon0(self, distance: float) -> float:
        """The bound it claims, TEM's: epsilon * min(d, gamma) (what the self-check tests it against)."""
        return self.epsilon * min(float(distance), self.gamma)

    def distribution(self, word_id: int) -> np.ndarray:
        """The output distribution this sampler draws from (closed form of Alg. 2 with this bottom weight)."""
        if word_id not in self._rows:
            row = distance_row(np.asarray(self.artifact.vectors), word_id)
            inside = row < self.gamma
            inside[word_id] = True
            size_in = int(inside.sum())
            size_out = len(row) - size_in
            weights = np.zeros(len(row))
            weights[inside] = np.exp(-0.5 * self.epsilon * row[inside])
            if size_out:
                if self.bottom == "paper":
                    bottom_score = -self.gamma + 2.0 * math.log(size_out) / self.epsilon
                else:
                    bottom_score = -self.gamma + 2.0 * math.log(len(row) / size_in) / self.epsilon
                bottom_weight = math.exp(0.5 * self.epsilon * bottom_score)
                weights[~inside] = bottom_weight / size_out  # the bottom's mass, spread uniformly
            self._rows[word_id] = np.cumsum(weights / weights.sum())
        return np.diff(self._rows[word_id], prepend=0.0)

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        for word in np.unique(ids):
            self.distribution(int(word))
            cumulative = self._rows[int(word)]
            where = np.flatnonzero(ids == word)
            pick = np.searchsorted(cumulative, rng.random(len(where)) * cumulative[-1], side="right")
            out[where] = np.minimum(pick, len(cumulative) - 1)
        return out

    def parameters(self):
        return {"mechanism": self.name, "epsilon": self.epsilon, "gamma": self.gamma, "bottom": self.bottom}

    def privacy_statement(self):
        return {"per_token": f"claims exp({self.epsilon:g} * min(d, {self.gamma:g}))"}


class PassThroughPrivatizer(TextPrivatizer):
    """Claims the ``random`` OOV policy but passes unknown words through unchanged."""

    def _release_ids(self, ids, rng):
        saved = self.oov_policy
        self.oov_policy = "keep"
        try:
            return super()._release_ids(ids, rng)
        finally:
            self.oov_policy = saved


# --- broken variants the conformance audit must flag (issue 28, item 1) ---------------------------------------
# Each keeps the parent's declared law (parameters(), exact_distribution, reference_simulation) and breaks only
# what it releases, as a faulty build or patch would.


class DoubleGammaTEM(TEM):
    """TEM that samples with 2 x gamma while claiming (parameters, exact law) gamma."""

    name = "broken-tem-2gamma"

    def __init__(self, artifact, epsilon, **kwargs):
        super().__init__(artifact, epsilon, **kwargs)
        self._sampler = TEM(artifact, epsilon, gamma=2.0 * self.gamma)

    def privatize_ids(self, ids, rng):
        return self._sampler.privatize_ids(ids, rng)


class ShortRadiusMadlib(Madlib):
    """Madlib whose noise radius is Gamma(n - 1, 1/epsilon) instead of Gamma(n, 1/epsilon)."""

    name = "broken-madlib-gamma-n-1"

    def noisy_vectors(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        base = np.asarray(self.artifact.vectors[ids], dtype=np.float64)
        direction = rng.standard_normal(base.shape)
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        radius = rng.gamma(shape=base.shape[1] - 1, scale=1.0 / self.epsilon, size=(len(ids), 1))
        return (base + direction * radius).astype(np.float32)


class HalfDoubleSanText(SanText):
    """SanText that uses 2 x epsilon for the words of even id (half the vocabulary) while claiming epsilon."""

    name = "broken-santext-2eps-half"

    def __init__(self, artifact, epsilon, **kwargs):
        super().__init__(artifact, epsilon, **kwargs)
        self._double = SanText(artifact, 2.0 * self.epsilon)

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        out = super().privatize_ids(ids, rng)
        even = ids % 2 == 0
        if even.any():
            out[even] = self._double.privatize_ids(ids[even], rng)
        return out


class SwappedVickrey(Vickrey):
    """Vickrey whose rule uses 1 - t where it should use t (and t where 1 - t), claiming t."""

    name = "broken-vickrey-swapped-t"

    def choose(self, points, pair, rng):
        claimed = self.t
        self.t = 1.0 - claimed
        try:
            return super().choose(points, pair, rng)
        finally:
            self.t = claimed


class OtherKCusText(CusText):
    """CusText that claims output sets of K words but samples from the groups built on another K (K + 5)."""

    name = "broken-custext-other-k"

    def __init__(self, artifact, epsilon, k=20, **kwargs):
        super().__init__(artifact, epsilon, k=k, **kwargs)
        self._other = CusText(artifact, epsilon, k=k + 5, **kwargs)

    def privatize_ids(self, ids, rng):
        return self._other.privatize_ids(ids, rng)


CONFORMANCE_BROKEN = (DoubleGammaTEM, ShortRadiusMadlib, HalfDoubleSanText, SwappedVickrey, OtherKCusText)
