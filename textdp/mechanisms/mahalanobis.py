"""The regularized Mahalanobis mechanism of Xu, Aggarwal, Feyisetan and Teissier (PrivateNLP 2020).

Source. The paper's full text was not reachable from the reference index this build could search
(its abstract was); the equations below are written out in full from the two public
implementations read as references (MLDP 0.1.2, pyPANTERA 1.0.2), which agree on them except where
noted at the end, and from the abstract (elliptical noise shaped by the regularized covariance).

Madlib's spherical noise ignores how the embedding is spread: a word in a sparse region keeps
itself unless the noise is huge. Xu et al. shape the noise by the embedding's covariance.

Distribution sampled. Let Sigma be the covariance of the vocabulary's vectors (rows of the
artifact, population covariance) and Sigma~ = Sigma / (tr(Sigma) / n) its normalisation to mean
variance 1 per dimension (trace n). For ``lam`` in [0, 1] the regularized matrix is
S = lam * Sigma~ + (1 - lam) * I_n (the paper's regularized Mahalanobis norm
||x||_RM = sqrt(x^T S^{-1} x)). For a word w the noisy point is

    z = phi(w) + l * S^{1/2} v,  v uniform on the unit sphere,  l ~ Gamma(n, 1/epsilon)

(Madlib's noise mapped by S^{1/2}), whose density is proportional to
exp(-epsilon * ||S^{-1/2} (z - phi(w))||); the released word is the vocabulary word nearest to z
in Euclidean distance (exact search, or Annoy). ``lam = 0`` is Madlib exactly.

Guarantee. epsilon * d_RM-privacy with d_RM(w, w') = ||S^{-1/2} (phi(w) - phi(w'))||: for any words
w, w' and output set O, P[M(w) in O] <= exp(epsilon d_RM(w, w')) P[M(w') in O] (the density ratio
of z is bounded by the triangle inequality of the norm; the nearest-word step is post-processing).
:meth:`Mahalanobis.metric_points` maps vectors to S^{-1/2} phi, where this metric is Euclidean, so a
caller gets the diameter for :meth:`token_epsilon0` from ``diameter_bounds(metric_points(vectors))``.

Where readings differ. pyPANTERA 1.0.2 (``Mahalanobis.pullNoise``) normalises S^{1/2} v back to
unit length before scaling by l: its noise has Euclidean norm Gamma(n, 1/epsilon) and a direction
skewed towards S's main axes, which is neither the density above nor Madlib's, so the paper's
proof does not cover it (docs/evaluation.md). MLDP 0.1.2 normalises Sigma by the variance of all
entries of the matrix (``np.var`` over every coordinate, which adds the spread of the column
means) where we use the mean per-dimension variance, and recomputes ``sqrtm`` for every token;
its noise is otherwise the distribution above.
"""

from __future__ import annotations

import numpy as np

from textdp.errors import ParameterError
from textdp.mechanisms.base import Parameter
from textdp.mechanisms.madlib import Madlib, check_diameter, sample_noise

LAM = Parameter(
    "lam", float, 0.2, low=0.0, high=1.0, label="lambda", aliases=("lambda",), flag_aliases=("lambda",), example=0.5,
    example_with=(("vickrey_noise", "mahalanobis"),),
    help="regularization lambda in [0, 1] of the covariance, S = lambda * Sigma~ + (1 - lambda) * I (0: Madlib's "
         "spherical noise, 1: noise shaped by the embedding's covariance alone); default 0.2 (vickrey: with "
         "--vickrey-noise mahalanobis)")


def regularized_covariance(vectors: np.ndarray, lam: float, block: int = 65536) -> np.ndarray:
    """S = lam * Sigma / (tr(Sigma)/n) + (1 - lam) * I, from the rows of ``vectors`` (float64, n x n)."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError("lambda must be in [0, 1]")
    count, dim = vectors.shape
    if count < 2:
        raise ValueError("the covariance needs at least two vectors")
    total = np.zeros(dim)
    outer = np.zeros((dim, dim))
    for start in range(0, count, block):
        rows = np.asarray(vectors[start:start + block], dtype=np.float64)
        total += rows.sum(axis=0)
        outer += rows.T @ rows
    mean = total / count
    sigma = outer / count - np.outer(mean, mean)
    sigma = 0.5 * (sigma + sigma.T)
    scale = np.trace(sigma) / dim
    if not scale > ZERO_VARIANCE * np.trace(outer) / count / dim:  # rounding error of E[x^2] - E[x]^2 at most
        raise ValueError(ZERO_VARIANCE_TEXT)
    return lam * (sigma / scale) + (1.0 - lam) * np.eye(dim)


# A total variance at most this share of the mean square is zero in float64 (cancellation in E[x^2] - E[x]^2
# leaves ~1e-16 of it): every vector (nearly) the same, so the noise cannot be shaped by their covariance.
ZERO_VARIANCE = 1e-12
ZERO_VARIANCE_TEXT = ("the vectors have zero variance (every word has the same vector, up to rounding): their "
                      "covariance cannot shape the noise")


def check_covariance(vectors: np.ndarray, lam: float, block: int = 65536) -> None:
    """ValueError if ``regularized_covariance(vectors, lam)`` or its powers would fail, without building the
    covariance unless lam = 1 (below 1 the identity part keeps S positive definite: only the variance
    matters, the diagonal's sum, O(count x dim))."""
    if float(lam) >= 1.0:
        symmetric_powers(regularized_covariance(vectors, float(lam), block))
        return
    count, dim = vectors.shape
    if count < 2:
        raise ValueError("the covariance needs at least two vectors")
    total, square = np.zeros(dim), 0.0
    for start in range(0, count, block):
        rows = np.asarray(vectors[start:start + block], dtype=np.float64)
        total += rows.sum(axis=0)
        square += float(np.einsum("ij,ij->", rows, rows))
    mean_square = square / count / dim
    if not mean_square - float(total @ total) / count ** 2 / dim > ZERO_VARIANCE * mean_square:
        raise ValueError(ZERO_VARIANCE_TEXT)


def symmetric_powers(matrix: np.ndarray):
    """(S^{1/2}, S^{-1/2}) of a symmetric positive definite matrix, by its eigendecomposition."""
    values, vecs = np.linalg.eigh(matrix)
    if values.min() <= 1e-12 * max(values.max(), 1.0):
        raise ValueError("the regularized covariance is singular: use lambda < 1")
    root = (vecs * np.sqrt(values)) @ vecs.T
    inverse_root = (vecs / np.sqrt(values)) @ vecs.T
    return 0.5 * (root + root.T), 0.5 * (inverse_root + inverse_root.T)


class Mahalanobis(Madlib):
    """Madlib with elliptical noise l * S^{1/2} v (see the module docstring); ``privatize_ids(ids, rng)``."""

    name = "mahalanobis"
    DESCRIPTION = "Madlib with noise shaped by the embedding's regularized covariance"
    PARAMETERS = Madlib.PARAMETERS + (LAM,)
    CALIBRATE_PRUNED_SEARCH = False  # calibrate runs its own privatize_ids
    BOUND_TEXT = "epsilon * d(w, w') in the Mahalanobis metric of the mechanism"
    EPSILON_D_BOUND = False  # epsilon * d_RM, not the embedding distance
    CHECKS_READ_ARRAYS = True  # the covariance must be usable (not zero variance; not singular at lambda 1)

    @classmethod
    def check_special(cls, epsilon, artifact=None, lam: float = 0.2, **others) -> None:
        """Madlib's search check, then, with the artifact's vectors, a covariance the noise can use: refused
        before the run (it failed on a worker) when the vectors have zero variance or, at lambda 1, when their
        covariance is singular."""
        super().check_special(epsilon, artifact, **others)
        cls.check_artifact_covariance(artifact, lam)

    @classmethod
    def check_artifact_covariance(cls, artifact, lam: float, name: str = "mahalanobis") -> None:
        """ParameterError if the artifact's vectors (when ``artifact`` has them) give no usable covariance."""
        vectors = getattr(artifact, "vectors", None)
        if vectors is not None:
            try:
                check_covariance(vectors, lam)
            except ValueError as exc:
                raise ParameterError(f"{name} noise on this artifact: {exc}") from None

    def __init__(self, artifact, epsilon: float, lam: float = 0.2, nn: str = "exact", search_k: int = -1,
                 batch: int = 1024):
        type(self).check_parameters(epsilon, artifact, lam=lam, nn=nn, search_k=search_k)
        super().__init__(artifact, epsilon, nn=nn, search_k=search_k, batch=batch)
        self.lam = float(lam)
        self.covariance = regularized_covariance(artifact.vectors, self.lam)
        self.root, self.inverse_root = symmetric_powers(self.covariance)

    def noise(self, count: int, dim: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` draws of l * S^{1/2} v (float64)."""
        return sample_noise(count, dim, self.epsilon, rng) @ self.root  # S^{1/2} is symmetric: rows x S^{1/2}

    def noisy_vectors(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        base = np.asarray(self.artifact.vectors[ids], dtype=np.float64)
        return (base + self.noise(len(ids), base.shape[1], rng)).astype(np.float32)

    def reference_simulation(self):
        """Plain float64 simulation from ``parameters()``: Madlib's noise mapped by S^{1/2} (covariance recomputed
        with np.cov), exact nearest word."""
        from textdp.mechanisms.reference import noise_then_nearest, regularized_root

        params = self.parameters()
        return noise_then_nearest(self.artifact.vectors, float(params["epsilon"]),
                                  root=regularized_root(self.artifact.vectors, float(params["lam"])))

    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """S^{-1/2} phi for each row: Euclidean distances between these points are d_RM (the guarantee's metric)."""
        return np.asarray(vectors, dtype=np.float64) @ self.inverse_root

    def token_epsilon0(self, diameter_upper: float) -> float:
        """epsilon * diam_RM, with ``diameter_upper`` a bound on the diameter of ``metric_points(vectors)``
        (the vocabulary in the regularized Mahalanobis metric, not the Euclidean one)."""
        return self.epsilon * check_diameter(diameter_upper)

    def parameters(self) -> dict:
        params = super().parameters()
        params["mechanism"] = self.name
        params["lam"] = self.lam
        params["covariance"] = "population covariance of the artifact's vectors, divided by its mean variance"
        return params

    def privacy_statement(self) -> dict:
        e, lam = self.epsilon, self.lam
        statement = super().privacy_statement()
        statement.update({
            "notion": ("metric differential privacy (d_chi-privacy) on word embeddings, regularized Mahalanobis "
                       f"distance d_RM(w, w') = ||S^-1/2 (phi(w) - phi(w'))||, S = {lam:g} * Sigma~ + {1 - lam:g} * I "
                       "(Sigma~: the embedding's covariance scaled to mean variance 1)"),
            "per_token": (f"for any words w, w' and any output set O: P[M(w) in O] <= exp({e:g} * d_RM(w, w')) * "
                          "P[M(w') in O]"),
            "per_record": f"a record with words w_1..w_l versus w_1'..w_l': exp({e:g} * sum_i d_RM(w_i, w_i'))",
        })
        return statement
