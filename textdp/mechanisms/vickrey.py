"""The Vickrey mechanism of Xu, Aggarwal, Feyisetan and Teissier (PrivateNLP 2021).

With little noise, the word nearest to the noisy point is the input itself, which a reader of the
output can undo. Like a Vickrey auction (the second price is revealed, the first kept private),
the mechanism chooses between the first and the second nearest word to the noisy point with a
tuning parameter t in [0, 1].

Distribution sampled. For a word w, draw the noisy point z of Madlib (``noise="madlib"``:
z = phi(w) + l v) or of the regularized Mahalanobis mechanism (``noise="mahalanobis"``:
z = phi(w) + l S^{1/2} v, see textdp.mechanisms.mahalanobis), v uniform on the unit sphere,
l ~ Gamma(n, 1/epsilon). Let w1, w2 be the nearest and second nearest vocabulary words to z
(Euclidean), at distances d1 <= d2. Release w1 with probability

    p(t, z) = (1 - t) d2 / (t d1 + (1 - t) d2)

and w2 otherwise (the Vickrey selection rule as pyPANTERA 1.0.2 implements it; the paper's
full text was not reachable from this build's reference index, only its abstract, which describes
exactly this balance between the first and second nearest neighbour with a tuning parameter). t = 0 is the underlying mechanism
(always w1); t = 0.5 gives p = d2 / (d1 + d2) in [1/2, 1]; t = 1 always releases w2. (If
t d1 + (1 - t) d2 = 0, which needs z to sit exactly on two words, w1 is released.)

Guarantee. The choice depends only on z and on fresh randomness, so it is post-processing of the
noisy point: the guarantee is the underlying noise's, epsilon * d-privacy with d Euclidean (Madlib
noise) or d_RM (Mahalanobis noise). ``metric_points``/``token_epsilon0`` are the noise's.

Search. With ``nn="exact"`` the two nearest words are exact: on CPUs with AVX-512 VNNI (when the
optional C extension is built) textdp.search.int8_search returns the float64 brute force's answer, skipping
only words provably farther than two words computed exactly; elsewhere the BLAS search of
textdp.search.nearest runs (ranked in float32, the pair ordered in float64).

Where readings differ. pyPANTERA 1.0.2 (``VickreyCMP``, ``VickreyMhl``) implements this rule (its
``p`` is the probability of the nearest word) and then searches the nearest word again to the
chosen word's own vector, which returns the chosen word; its Mahalanobis noise is renormalised
(see textdp.mechanisms.mahalanobis). MLDP 0.1.2's ``VickreyMechanism`` is a different mechanism: it takes the
k = 2 nearest words to z *after removing the input word when it is the nearest* and samples by
softmax(-t * distances) with the vector t = [1, 0]. Dropping the input word depends on the secret
input, so it is not post-processing of z and the paper's proof does not cover it.
"""

from __future__ import annotations

import numpy as np

from textdp.mechanisms.base import SEARCH_BATCH_TOKENS, Mechanism, Parameter
from textdp.mechanisms.madlib import NN, SEARCH_K, Madlib
from textdp.mechanisms.mahalanobis import LAM, Mahalanobis

NOISES = ("madlib", "mahalanobis")

VICKREY_T = Parameter("vickrey_t", float, 0.5, low=0.0, high=1.0, label="vickrey t", argument="t", aliases=("t",),
                      example=0.6,
                      help="threshold t in [0, 1] of the Vickrey rule; default 0.5")
VICKREY_NOISE = Parameter("vickrey_noise", str, "madlib", choices=NOISES, label="vickrey noise", argument="noise",
                          aliases=("noise",), example="mahalanobis",
                          help="the noise added before the two nearest words are found; default madlib")


class _TwoNearestMahalanobis(Mahalanobis):
    """Only for the checks: the Vickrey rule needs two words from the search (lambda checked for both noises)."""

    NEIGHBOURS_NEEDED = 2


class Vickrey(Mechanism):
    """The Vickrey rule over Madlib or Mahalanobis noise; ``privatize_ids(ids, rng) -> released ids``."""

    name = "vickrey"
    DESCRIPTION = "first or second nearest word by the Vickrey rule"
    PARAMETERS = (VICKREY_T, VICKREY_NOISE, LAM, NN, SEARCH_K)
    SEARCHES_NEAREST = True
    BATCH_TOKENS = SEARCH_BATCH_TOKENS
    BOUND_TEXT = "epsilon * d(w, w') in the metric of its noise"
    CHECKS_READ_ARRAYS = True  # Mahalanobis noise: the covariance of the artifact's vectors must be usable

    @classmethod
    def check_special(cls, epsilon, artifact=None, nn: str = "exact", search_k: int = -1, noise: str = "madlib",
                      lam: float = 0.2, **_others) -> None:
        """The noise's search check: two words needed from an Annoy search; Mahalanobis noise: a usable covariance."""
        super(Mahalanobis, _TwoNearestMahalanobis).check_special(epsilon, artifact, nn=nn, search_k=search_k)
        if noise == "mahalanobis":
            Mahalanobis.check_artifact_covariance(artifact, lam, name="vickrey's mahalanobis")

    def __init__(self, artifact, epsilon: float, t: float = 0.5, noise: str = "madlib", lam: float = 0.2,
                 nn: str = "exact", search_k: int = -1, batch: int = 1024):
        type(self).check_parameters(epsilon, artifact, t=t, noise=noise, lam=lam, nn=nn, search_k=search_k)
        self.artifact = artifact
        self.t = float(t)
        self.noise = noise
        self.batch = int(batch)
        if noise == "madlib":
            self.base = Madlib(artifact, epsilon, nn=nn, search_k=search_k, batch=batch)
        else:
            self.base = Mahalanobis(artifact, epsilon, lam=lam, nn=nn, search_k=search_k, batch=batch)
        self.EPSILON_D_BOUND = self.base.EPSILON_D_BOUND  # post-processing of its noise's bound
        self.epsilon = self.base.epsilon
        self.nn = nn
        self.search_k = int(search_k)

    def two_nearest(self, points: np.ndarray) -> np.ndarray:
        """(B x 2) ids of the nearest and second nearest words to each point (exact, or Annoy)."""
        if self.nn == "exact":
            return self.base.nearest.query_two(points)
        index = self.artifact.annoy_index
        out = np.empty((len(points), 2), dtype=np.int64)
        for i, point in enumerate(np.asarray(points, dtype=np.float32).tolist()):  # Annoy answers one query at a time
            found = index.get_nns_by_vector(point, 2, search_k=self.search_k)
            if len(found) < 2:
                raise RuntimeError("Annoy returned fewer than two neighbours")
            out[i] = found
        return out

    def choose(self, points: np.ndarray, pair: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The Vickrey rule for noisy ``points`` and their (nearest, second) ``pair`` of word ids."""
        points = np.asarray(points, dtype=np.float64)
        vectors = np.asarray(self.artifact.vectors[pair.ravel()], dtype=np.float64).reshape(len(pair), 2, -1)
        diff = vectors - points[:, None, :]
        dist = np.sqrt(np.einsum("bkn,bkn->bk", diff, diff))
        d1, d2 = dist[:, 0], dist[:, 1]
        denominator = self.t * d1 + (1.0 - self.t) * d2
        p_first = np.divide((1.0 - self.t) * d2, denominator, out=np.ones(len(points)), where=denominator > 0)
        first = rng.random(len(points)) < p_first
        return np.where(first, pair[:, 0], pair[:, 1])

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id (independent draws), vectorised per batch."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            points = self.base.noisy_vectors(chunk, rng)
            out[start:start + len(chunk)] = self.choose(points, self.two_nearest(points), rng)
        return out

    def reference_simulation(self):
        """Plain float64 simulation from ``parameters()``: the declared noise, the exact two nearest words, the rule."""
        from textdp.mechanisms.reference import noise_then_nearest, regularized_root

        params = self.parameters()
        root = (regularized_root(self.artifact.vectors, float(params["lam"]))
                if params["vickrey_noise"] == "mahalanobis" else None)
        return noise_then_nearest(self.artifact.vectors, float(params["epsilon"]), root=root,
                                  vickrey_t=float(params["vickrey_t"]))

    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """The underlying noise's metric points (Euclidean: the vectors; Mahalanobis: S^{-1/2} phi)."""
        return self.base.metric_points(vectors)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """The underlying noise's epsilon * diam (diameter of ``metric_points(vectors)``): the rule is post-processing."""
        return self.base.token_epsilon0(diameter_upper)

    def parameters(self) -> dict:
        params = {"mechanism": self.name, "epsilon": self.epsilon, "vickrey_t": self.t, "vickrey_noise": self.noise,
                  "nn": self.nn}
        if self.noise == "mahalanobis":
            params["lam"] = self.base.lam
        if self.nn == "annoy":
            params["search_k"] = self.search_k
        return params

    def privacy_statement(self) -> dict:
        statement = dict(self.base.privacy_statement())
        statement["selection"] = (
            f"Vickrey rule with t = {self.t:g}: the nearest word to the noisy point is released with probability "
            "(1 - t) d2 / (t d1 + (1 - t) d2), the second nearest otherwise; the rule uses only the noisy point and "
            "fresh randomness (post-processing), so the guarantee above is unchanged")
        statement["nearest_neighbour"] = (
            f"the two {'exact' if self.nn == 'exact' else 'Annoy-approximate'} nearest vocabulary words to the noisy "
            "vector: post-processing of a fixed index built from the embedding alone")
        return statement
