"""The multivariate mechanism of Feyisetan et al. (WSDM 2020, Alg. 1 and Sec. 2.6): "Madlib".

For a word w with embedding phi(w) in R^n, draw a direction v uniformly on the unit sphere
(a standard normal vector, normalised) and a magnitude l ~ Gamma(shape=n, scale=1/epsilon); the
noisy point phi(w) + l*v has density proportional to exp(-epsilon * ||z - phi(w)||), and the
released word is the vocabulary word nearest to it. The guarantee is epsilon*d-privacy (d the
Euclidean distance between embeddings): for any words w, w' and output set S,
P[M(w) in S] <= exp(epsilon * d(w, w')) P[M(w') in S]; a record of words w_1..w_l costs
epsilon * sum_i d(w_i, w_i'). The nearest-word step is post-processing, so it may be exact or
approximate (Annoy) without changing the guarantee.

Everything here is vectorised over a batch of token ids.
"""

from __future__ import annotations

import numpy as np

from textdp.errors import ParameterError
from textdp.mechanisms.base import SEARCH_BATCH_TOKENS, Mechanism, Parameter
from textdp.search.nearest import make_nearest

NN = Parameter(
    "nn", str, "exact", choices=("exact", "annoy"), example="annoy",
    help="nearest-word search, exact (brute force, default) or annoy (approximate, faster; same guarantee, lower "
         "utility at small epsilon)")
SEARCH_K = Parameter(
    "search_k", int, -1, example=400, example_with=(("nn", "annoy"),), high=2 ** 31 - 1,
    help="Annoy search_k for --nn annoy: -1 (trees * n, Annoy's default) or at least the words needed (1; vickrey 2) "
         "times the artifact's trees, so that Annoy always returns them")


def sample_noise(count: int, dim: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """``count`` draws of Madlib noise in R^dim (float64): uniform direction x Gamma(dim, 1/eps)."""
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")
    direction = rng.standard_normal((count, dim))
    norms = np.linalg.norm(direction, axis=1, keepdims=True)
    norms[norms == 0] = 1.0  # probability zero, guards the division
    magnitude = rng.gamma(shape=dim, scale=1.0 / epsilon, size=(count, 1))
    return direction / norms * magnitude


def check_diameter(diameter_upper: float) -> float:
    """A diameter bound must be a number >= 0 (inf is allowed and gives epsilon_0 = inf)."""
    value = float(diameter_upper)
    if not value >= 0:
        raise ValueError("diameter_upper must be >= 0")
    return value


class Madlib(Mechanism):
    """Madlib over a vocabulary artifact: ``privatize_ids(ids, rng) -> released ids``."""

    name = "madlib"
    DESCRIPTION = "multivariate Laplace noise on the embedding, nearest word"
    PARAMETERS = (NN, SEARCH_K)
    SEARCHES_NEAREST = True
    BATCH_TOKENS = SEARCH_BATCH_TOKENS
    CALIBRATE_PRUNED_SEARCH = True
    EPSILON_D_BOUND = True  # exp(epsilon * d(w, w')), the embedding distance
    BOUND_TEXT = "epsilon * d(w, w'), Euclidean"
    NEIGHBOURS_NEEDED = 1  # words the search must return per noisy point

    @classmethod
    def check_special(cls, epsilon, artifact=None, nn: str = "exact", search_k: int = -1, **_others) -> None:
        """search_k against the Annoy tree count (``artifact``, optional, gives it)."""
        search_k = int(search_k)  # an integer: the declared check ran first
        # Annoy gathers candidates until it holds search_k of them, an item at most once per tree, so
        # search_k >= needed x trees guarantees the words needed; 0 and negatives other than -1 find none
        trees = ((getattr(artifact, "manifest", None) or {}).get("annoy") or {}).get("trees")
        least = cls.NEIGHBOURS_NEEDED * int(trees or 1)
        if nn == "annoy" and search_k != -1 and search_k < least:
            why = f"{cls.NEIGHBOURS_NEEDED} word(s) x {trees} Annoy trees" if trees else "the words needed"
            raise ParameterError(f"search_k must be -1 (Annoy's default) or >= {least} ({why}: fewer may return "
                                 f"too few words), got {search_k}")

    def __init__(self, artifact, epsilon: float, nn: str = "exact", search_k: int = -1,
                 batch: int = 1024):
        type(self).check_parameters(epsilon, artifact, nn=nn, search_k=search_k)
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.nn = nn
        self.search_k = int(search_k)
        self.batch = int(batch)
        self.nearest = make_nearest(artifact, nn, search_k)

    def noisy_vectors(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        base = np.asarray(self.artifact.vectors[ids], dtype=np.float64)
        return (base + sample_noise(len(ids), base.shape[1], self.epsilon, rng)).astype(np.float32)

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id (a fresh, independent draw for each)."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            out[start:start + len(chunk)] = self.nearest.query(self.noisy_vectors(chunk, rng))
        return out

    def reference_simulation(self):
        """Plain float64 simulation from ``parameters()``: uniform direction, Gamma(n, 1/epsilon) radius, exact nearest."""
        from textdp.mechanisms.reference import noise_then_nearest

        return noise_then_nearest(self.artifact.vectors, float(self.parameters()["epsilon"]))

    # the guarantee's metric ------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """Points whose Euclidean distances are the guarantee's metric: the embedding itself (row-wise)."""
        return np.asarray(vectors, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """Pure local-DP epsilon_0 of one released token over the vocabulary: epsilon * diam, with
        ``diameter_upper`` an upper bound on the Euclidean diameter of the embedding (of
        ``metric_points(vectors)``): any two words are at most diam apart, so the metric bound
        exp(epsilon d(w, w')) is at most exp(epsilon diam)."""
        return self.epsilon * check_diameter(diameter_upper)

    def parameters(self) -> dict:
        params = {"mechanism": self.name, "epsilon": self.epsilon, "nn": self.nn}
        if self.nn == "annoy":
            params["search_k"] = self.search_k
        return params

    def privacy_statement(self) -> dict:
        """What holds for a released token and record (independent of the nn method)."""
        e = self.epsilon
        return {
            "notion": "metric differential privacy (d_chi-privacy) on word embeddings, Euclidean distance",
            "per_token": f"for any words w, w' and any output set S: P[M(w) in S] <= exp({e:g} * d(w, w')) * P[M(w') in S]",
            "per_record": f"a record with words w_1..w_l versus w_1'..w_l': exp({e:g} * sum_i d(w_i, w_i'))",
            "nearest_neighbour": (
                f"the released word is the {'exact' if self.nn == 'exact' else 'Annoy-approximate'} nearest "
                "vocabulary word to the noisy vector: post-processing of a fixed index built from the embedding "
                "alone, so it does not weaken the guarantee"),
            "coverage": {"covered": "all"},
        }
