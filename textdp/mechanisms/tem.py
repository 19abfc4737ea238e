"""The Truncated Exponential Mechanism (TEM) of Carvalho et al. (tem-carvalho.txt, Alg. 2/3).

Closed form of its output distribution and the choice of gamma (Thm. 4.2). Draws come from the one
exact table sampler (textdp.mechanisms.table_sampler) with cap = gamma.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from textdp.errors import ParameterError
from textdp.mechanisms.base import Mechanism, Parameter
from textdp.mechanisms.table_sampler import TableSampler, forward_to_sampler

DEFAULT_BETA = 0.001

GAMMA = Parameter("gamma", float, None, low=0.0, example=2.5,
                  help="truncation radius gamma >= 0; default: from --beta (Thm. 4.2 of Carvalho et al.)")
BETA = Parameter("beta", float, DEFAULT_BETA, low=0.0, high=1.0, low_open=True, high_open=True, example=0.01,
                 help="probability mass allowed outside the gamma-ball when gamma is derived, in (0, 1); default 0.001")


def gamma_from_beta(epsilon: float, vocab_size: int, beta: float = DEFAULT_BETA) -> float:
    """Truncation threshold of Thm. 4.2: gamma = (2/epsilon) ln((1-beta)(|W|-1)/beta).

    With this gamma, TEM releases a word within distance gamma of the input with probability at
    least 1 - beta (the smallest gamma for which the theorem's bound holds).
    """
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")
    if not 0 < beta < 1:
        raise ValueError("beta must be in (0, 1)")
    if vocab_size < 2:
        raise ValueError("the vocabulary must hold at least 2 words")
    return (2.0 / epsilon) * math.log((1.0 - beta) * (vocab_size - 1) / beta)


def output_distribution(distances_to_all_words: np.ndarray, epsilon: float, gamma: float,
                        self_id: Optional[int] = None) -> np.ndarray:
    """TEM's exact output distribution for one input word: P(i) ~ exp(-epsilon * min(d(w,i), gamma) / 2).

    ``distances_to_all_words`` holds d(w, i) for every vocabulary word i (1-D), or one such row
    per input word (2-D, normalised row by row). ``self_id`` (an int, or one per row for 2-D
    input) is the input word's own id: its distance is forced to exactly 0, because distances
    recomputed in float32 put a word slightly away from itself. Computed in float64 with the
    largest weight factored out, so no weight underflows to an all-zero row.
    """
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")
    if not gamma >= 0:
        raise ValueError("gamma must be >= 0")
    dist = np.array(distances_to_all_words, dtype=np.float64, copy=True)
    if dist.ndim not in (1, 2):
        raise ValueError("distances must be 1-D (one word) or 2-D (one row per word)")
    if self_id is not None:
        if dist.ndim == 1:
            dist[int(self_id)] = 0.0
        else:
            dist[np.arange(len(dist)), np.asarray(self_id, dtype=np.int64)] = 0.0
    if np.isnan(dist).any() or (dist < 0).any():
        raise ValueError("distances must be non-negative numbers")
    log_weight = -0.5 * epsilon * np.minimum(dist, gamma)
    log_weight -= log_weight.max(axis=-1, keepdims=True)
    weight = np.exp(log_weight)
    return weight / weight.sum(axis=-1, keepdims=True)


# --- the sampler -------------------------------------------------------------------------------


class TEM(Mechanism):
    """TEM over a vocabulary artifact with a K-nearest neighbour table.

    Target. For input w (id), with d(w, w) = 0, the table's distances for the K nearest words
    T(w) and distances computed on the fly (float64, the table's metric) for every other word,
    P(i) = f(i) / Z with f(i) = exp(-epsilon * min(d(w, i), gamma) / 2). This is exactly the
    output distribution of the paper's Alg. 2: an item of L(w) wins with probability proportional
    to exp(epsilon/2 * -d), and the bottom element (score -gamma + 2 ln|W \\ L(w)| / epsilon) wins
    with probability proportional to |W \\ L(w)| exp(-epsilon gamma / 2), spread uniformly
    (Gumbel-max = exponential mechanism; paper Sec. 4, "equivalent to Algorithm 2").

    Sampling. Exactly, from the K-nearest table, by the one table sampler
    (textdp.mechanisms.table_sampler, whose docstring holds the exactness argument) with cap = gamma (the
    floor c = exp(-epsilon gamma / 2) of every word beyond gamma is the bottom element spread uniformly)
    and every word allowed. TEM keeps its own tuning of that sampler: a dense row for an input word after
    ``DENSE_AFTER_CANDIDATES`` on-the-fly distances, and no per-call round budget (the input itself has
    shifted weight 1, so E / Z <= M_T + |V| u is bounded, and the dense rows take over the costly words). Nothing depends on epsilon or
    gamma except a handful of exp() per
    token, so one table serves every epsilon.
    """

    name = "tem"
    DESCRIPTION = "truncated exponential mechanism"
    PARAMETERS = (GAMMA, BETA)
    NEEDS_NEIGHBOUR_TABLE = True
    EXACT_LAW = True
    AUDIT_KERNEL = True
    BOUND_TEXT = "epsilon * min(d(w, w'), gamma) (Carvalho et al., Thm. 4.1; the scores are clipped at gamma)"
    EPSILON_D_BOUND = True  # exp(epsilon * min(d, gamma)) <= exp(epsilon * d)
    DENSE_AFTER = 1_000_000  # on-the-fly distances for one input word before it gets a dense row
    # the table sampler's knobs, read and set through the mechanism (tests, benchmarks)
    DENSE_AFTER_CANDIDATES = forward_to_sampler("DENSE_AFTER_CANDIDATES")
    DENSE_MAX_WORDS = forward_to_sampler("DENSE_MAX_WORDS")
    MAX_ROUNDS_TOTAL = forward_to_sampler("MAX_ROUNDS_TOTAL")
    _dense_rows = forward_to_sampler("_dense_rows")
    envelope_violations = forward_to_sampler("envelope_violations")

    TITLE = "TEM"

    @classmethod
    def exact_label(cls) -> str:
        return f"exact {cls.TITLE} values"

    @classmethod
    def check_special(cls, epsilon, artifact=None, gamma=None, beta=DEFAULT_BETA, **keywords) -> None:
        """A beta so close to 1 that the derived gamma is not positive ((1 - beta)(|W| - 1) <= beta): refused, with
        the vocabulary's size (the launcher knows it from the manifest), before any worker fails on it."""
        size = getattr(artifact, "vocab_size", None)
        if gamma is None and size is not None and int(size) >= 2 and beta is not None and 0 < beta < 1:
            derived = gamma_from_beta(float(epsilon), int(size), float(beta))
            if not derived > 0:
                raise ParameterError(f"beta {beta:g} leaves no truncation: with {int(size):,} words the derived gamma is "
                                     f"{derived:.3g} (it needs (1 - beta)(|W| - 1) > beta, i.e. beta < "
                                     f"{(int(size) - 1) / int(size):.7g}); give a smaller --beta or a --gamma")

    def __init__(self, artifact, epsilon: float, gamma: Optional[float] = None,
                 beta: float = DEFAULT_BETA, batch: int = 8192):
        from textdp.artifact.neighbours import NeighbourTable, metric_points

        type(self).check_parameters(epsilon, artifact, gamma=gamma, beta=beta)
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.vocab_size = int(artifact.vocab_size)
        if gamma is None:
            self.beta: Optional[float] = float(beta)
            self.gamma = gamma_from_beta(self.epsilon, self.vocab_size, self.beta)
        else:
            if not gamma >= 0:
                raise ValueError("gamma must be >= 0")
            self.beta = None
            self.gamma = float(gamma)
        self.table = NeighbourTable.from_artifact(artifact)
        self.metric = self.table.metric
        self.k = self.table.k
        self.batch = int(batch)
        self._metric_points = metric_points
        self.sampler = TableSampler(artifact.vectors, self.table.ids, self.table.distances, self.epsilon,
                                    cap=self.gamma, metric=self.metric, dense_after=self.DENSE_AFTER,
                                    give_up_factor=None)

    def distances(self, ids: np.ndarray, others: np.ndarray) -> np.ndarray:
        """float64 metric distance between ``ids[i]`` and ``others[i]`` (elementwise): the distance
        TEM's target uses for words outside the table."""
        return self.sampler.distances(ids, others)

    # sampling ------------------------------------------------------------------------------------
    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id (independent draws)."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            out[start:start + len(chunk)] = self.sampler.sample(chunk, rng)
        return out

    # the guarantee's metric ------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """Points whose Euclidean distances are the guarantee's metric (the table's metric): the vectors,
        or their directions for ``angular`` (row-wise, float64)."""
        return self._metric_points(vectors, self.metric, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """Pure local-DP epsilon_0 of one token: epsilon * min(diam, gamma), ``diameter_upper`` in the
        table's metric (of ``metric_points(vectors)``). The scores are clipped at gamma, so no two words
        are more than exp(epsilon gamma) apart whatever their distance (Carvalho et al., Lemma 4.1)."""
        from textdp.mechanisms.madlib import check_diameter

        return self.epsilon * min(check_diameter(diameter_upper), self.gamma)

    # the exact law ---------------------------------------------------------------------------------
    def exact_distribution(self, row: np.ndarray, word_id: int) -> np.ndarray:
        """The closed form: P(i) ~ exp(-epsilon d(w, i) / 2) within gamma, exp(-epsilon gamma / 2) beyond."""
        return output_distribution(row, self.epsilon, self.gamma, self_id=word_id)

    def audit_kernel(self):
        return 0.5 * self.epsilon, float(self.gamma), self.metric

    def calibration_fields(self) -> dict:
        return {"tem_gamma": float(self.gamma)}

    # reporting -------------------------------------------------------------------------------------
    def parameters(self) -> dict:
        params = {"mechanism": self.name, "epsilon": self.epsilon, "gamma": self.gamma,
                  "metric": self.metric, "neighbour_k": self.k}
        if self.beta is not None:
            params["beta"] = self.beta
            params["gamma_source"] = "Thm. 4.2 of Carvalho et al. from beta"
        else:
            params["gamma_source"] = "given"
        return params

    def privacy_statement(self) -> dict:
        """What holds for a released token and record (Carvalho et al., Thm. 4.1 / Lemma 4.1)."""
        e, g = self.epsilon, self.gamma
        metric = "Euclidean distance" if self.metric == "euclidean" else "angular (chord) distance"
        return {
            "notion": f"metric differential privacy (d_chi-privacy) on word embeddings, {metric}",
            "per_token": f"for any words w, w' and any output set S: P[M(w) in S] <= exp({e:g} * d(w, w')) * P[M(w') in S]",
            "per_token_cap": (
                f"the scores are clipped at gamma = {g:g}, so any two words are also bounded by "
                f"exp({e:g} * {g:g}) = exp({e * g:g}): P[M(w) in S] <= exp({e:g} * min(d(w, w'), {g:g})) * P[M(w') in S]"),
            "per_record": f"a record with words w_1..w_l versus w_1'..w_l': exp({e:g} * sum_i min(d(w_i, w_i'), {g:g}))",
            "utility": (f"with probability >= 1 - beta a released word is within gamma of the input (Thm. 4.2, beta={self.beta:g})"
                        if self.beta is not None else "gamma was given explicitly"),
            "sampling": "exact sampling of the closed-form output distribution from the K-nearest table (rejection sampling)",
            "coverage": {"covered": "all"},
        }
