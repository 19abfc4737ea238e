"""The truncated Gumbel mechanism of BRR (Carvalho, Vasiloudis and Feyisetan, 2021), as far as it can be checked here.

What was available. The BRR paper's text was not reachable from the reference index this build
could search (only its abstract); MLDP 0.1.2's ``TruncatedGumbel`` (which its README attributes
to the paper) was read as a reference. The distribution below is therefore a reading of the
mechanism, stated exactly, and textdp claims NO privacy guarantee for it: the privacy statement
says so, and :meth:`TruncatedGumbel.token_epsilon0` returns inf.

Distribution sampled. For an input word x, let c_0 = x, c_1, c_2, ... be the vocabulary sorted
by distance to x (the exact neighbour table's order). Draw

    k ~ Poisson(mu) conditioned on k <= |W| - 1   (mu = ln(|W| - 1) by default, as in MLDP),

take the candidates c_0..c_k (the input and its k nearest other words), add independent noise
G_i ~ Gumbel(location 0, scale b) conditioned on |G_i| <= Delta to each distance d(x, c_i), and
release the candidate with the smallest d(x, c_i) + G_i. Delta is the vocabulary's diameter (an
upper bound from textdp.privacy.accounting.diameter_bounds) unless given. ``scale`` b is a parameter; when
it is not given it is derived from epsilon by the relation MLDP uses:
a = (epsilon - 2 (1 + ln |W|) / d_min) / 3 and b = 2 Delta / min(W0(2 a Delta), ln(a d_min)),
with d_min the smallest distance between two distinct vectors (from the table) and W0 the
Lambert W function; it has a positive solution only when a d_min > 1, i.e. for large epsilon, and
the constructor refuses otherwise (give ``scale``).

Sampling is exact and vectorised: k by numpy's Poisson sampler with rejection of k > |W| - 1,
the candidates as a prefix of the neighbour table row (a word whose k reaches past the table gets
its k + 1 nearest words by a float64 search of the vocabulary), the truncated Gumbel noise by
inverse CDF. :func:`output_distribution` gives the exact law by numerical integration (tests).

Where readings differ. MLDP 0.1.2 takes the k nearest words *including* the input (so one fewer
candidate), searches them with an approximate faiss IVF index, computes d_min and Delta from the
distances of ONE random word to the others (not the vocabulary's minimum distance and diameter),
and with k = 0 returns the input. Its scale relation gives a negative b whenever 0 < a d_min < 1.

Why no guarantee is claimed. A finite epsilon_0 over the vocabulary would need every word to be
a possible output for every input; with MLDP's reading (k words including the input, k <= |W|-1)
the farthest word from x is never a candidate for x but is released for itself, so no finite
bound exists at all; with ours a finite bound exists but it is governed by P(k = |W| - 1), which is
astronomically small, and the paper's theorem that would give a useful metric bound could not be
checked.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from textdp.mechanisms.base import Mechanism, Parameter
from textdp.mechanisms.madlib import check_diameter

GUMBEL_SCALE = Parameter(
    "gumbel_scale", float, None, low=0.0, low_open=True, label="gumbel scale", argument="scale", aliases=("scale",),
    example=0.4,
    help="scale of the Gumbel noise, a finite number > 0, at least the smallest distance between two words / "
         "ln(|W| / 1e-6) (about 1/20 to 1/27: below, a word changes with probability under 1e-6) and at most 1e9 x the "
         "truncation bound (needed at ordinary "
         "epsilon: see docs/mechanisms.md); default: derived from epsilon by MLDP's BRR relation")
GUMBEL_CANDIDATES = Parameter(
    "gumbel_candidates", float, None, low=0.0, low_open=True, label="gumbel mean_candidates",
    argument="mean_candidates", aliases=("mean_candidates",), example=4.0,
    help="mean number of candidates of the truncated set, at least about 1e-6 (below, a word changes with "
         "probability under 1e-6: at most 1 - exp(-mean), the chance that any other candidate is drawn) "
         "(default: the mechanism's, ln(|W| - 1))")
GUMBEL_MAX_DISTANCE = Parameter(
    "gumbel_max_distance", float, None, low=0.0, low_open=True, label="gumbel max_distance", argument="max_distance",
    aliases=("max_distance",), example=12.0,
    help="largest candidate distance and truncation bound of the noise, at least half the smallest distance "
    "between two words (below, the input always wins) (default: the mechanism's, an upper bound on the vocabulary's "
    "diameter)")


def lambert_w0(x: float) -> float:
    """The principal branch of the Lambert W function for x >= 0 (w e^w = x), by Halley's iteration."""
    if not x >= 0:
        raise ValueError("lambert_w0 is implemented for x >= 0 only")
    w = math.log1p(x)  # within a factor of the root for every x >= 0
    for _ in range(100):
        e = math.exp(w)
        f = w * e - x
        step = f / (e * (w + 1.0) - (w + 2.0) * f / (2.0 * w + 2.0))
        w -= step
        if abs(step) <= 1e-15 * max(1.0, abs(w)):
            break
    return w


def poisson_pmf(mean: float, maximum: int) -> np.ndarray:
    """P(k) for k = 0..maximum of Poisson(mean), from log k! as a running sum of logs (float64)."""
    k = np.arange(maximum + 1, dtype=np.float64)
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(k[1:]))])
    return np.exp(k * math.log(mean) - mean - log_factorial)


def scale_from_epsilon(epsilon: float, vocab_size: int, min_distance: float, max_distance: float) -> float:
    """MLDP's relation between epsilon and the Gumbel scale b (see the module docstring); ValueError if none."""
    if not min_distance > 0:
        raise ValueError("the smallest distance between two words must be > 0")
    a = (epsilon - 2.0 * (1.0 + math.log(vocab_size)) / min_distance) / 3.0
    if not a * min_distance > 1.0:
        raise ValueError(
            f"epsilon {epsilon:g} is below the range of the BRR scale relation for this vocabulary (it needs "
            f"epsilon > {2.0 * (1.0 + math.log(vocab_size)) / min_distance + 3.0 / min_distance:.4g}); give the Gumbel "
            "scale explicitly")
    w = lambert_w0(2.0 * a * max_distance)
    return 2.0 * max_distance / min(w, math.log(a * min_distance))


def truncated_gumbel_noise(size, scale: float, bound: float, rng: np.random.Generator) -> np.ndarray:
    """Gumbel(0, scale) conditioned on |G| <= bound, by inverse CDF (F(g) = exp(-exp(-g / scale)))."""
    low = math.exp(-math.exp(bound / scale)) if bound / scale < 700 else 0.0
    high = math.exp(-math.exp(-bound / scale))
    u = low + rng.random(size) * (high - low)
    u = np.clip(u, np.nextafter(0.0, 1.0), np.nextafter(1.0, 0.0))
    return np.clip(-scale * np.log(-np.log(u)), -bound, bound)


def truncated_poisson(mean: float, maximum: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson(mean) conditioned on <= maximum (rejection: redraw the few above it)."""
    k = rng.poisson(mean, size)
    over = np.flatnonzero(k > maximum)
    while len(over):
        k[over] = rng.poisson(mean, len(over))
        over = over[k[over] > maximum]
    return k


class TruncatedGumbel(Mechanism):
    """BRR's truncated Gumbel selection over an artifact with a Euclidean neighbour table (see the module docstring)."""

    name = "truncated-gumbel"
    DESCRIPTION = "truncated Gumbel selection among the nearest words; no guarantee claimed"
    PARAMETERS = (GUMBEL_SCALE, GUMBEL_CANDIDATES, GUMBEL_MAX_DISTANCE)
    NEEDS_NEIGHBOUR_TABLE = True
    BOUND_TEXT = "none claimed"
    EXAMPLE = {"gumbel_scale": 0.5}  # the scale derived from epsilon needs epsilon > ~60 on a 5k vocabulary

    CHECKS_READ_ARRAYS = True  # the scale checks need the neighbour table's smallest distance and the diameter
    MIN_BOUND_TO_SCALE = 1e-9  # below it the inverse-CDF noise is quantized (1e-12: ~1e4 values), then 0 or NaN
    # A given scale this far below the smallest gap between words makes the mechanism the identity: a
    # difference of two Gumbel(0, b) is logistic(b), so another word beats the input with probability at
    # most about |W| exp(-gap / b); refused when that is below IDENTITY_CHANGE (gap / b > ln(|W| / 1e-6)).
    # (IDENTITY_CHANGE = 1e-6: Mechanism's one rule.)
    # A word can change only if some other candidate is drawn (k >= 1): probability at most 1 - exp(-mean).
    # The same IDENTITY_CHANGE rule refuses a mean that keeps it below 1e-6 (mean < -ln(1 - 1e-6) ~ 1.0e-6).
    MIN_CANDIDATES = -math.log1p(-Mechanism.IDENTITY_CHANGE)

    @classmethod
    def check_special(cls, epsilon, artifact=None, scale: Optional[float] = None,
                      mean_candidates: Optional[float] = None, max_distance: Optional[float] = None,
                      **_others) -> None:
        """Refuse (ParameterError) what would break the sampler or release the input unchanged (the declared
        checks refused a non-finite or non-positive scale, candidate mean or bound); with the artifact (its
        neighbour table's smallest distance and the diameter): an epsilon below the BRR scale relation's range
        when the scale is derived, a mean above |W| - 1 (the truncated Poisson's rejection would not end), and
        a scale above 1e9 x the truncation bound (the inverse-CDF noise collapses to 0 or NaN: the input
        always wins)."""
        if artifact is not None:
            cls.resolve(epsilon, artifact, scale, mean_candidates, max_distance)

    @classmethod
    def resolve(cls, epsilon, artifact, scale=None, mean_candidates=None, max_distance=None) -> dict:
        """The parameters over ``artifact`` (scale derived from epsilon when not given); ParameterError if
        they cannot be used (see ``check_parameters``)."""
        from textdp.artifact.neighbours import NeighbourTable
        from textdp.errors import ParameterError
        from textdp.search.geometry import diameter_bounds

        vocab_size = int(artifact.vocab_size)
        if vocab_size < 2:
            raise ParameterError("the vocabulary must hold at least 2 words")
        table = NeighbourTable.from_artifact(artifact)
        if table.metric != "euclidean":
            raise ParameterError("the truncated Gumbel mechanism uses Euclidean distance; the neighbour table is "
                                 f"{table.metric!r}")
        mean = math.log(vocab_size - 1) if mean_candidates is None else float(mean_candidates)
        if not 0 < mean <= vocab_size - 1:
            raise ParameterError(f"gumbel mean_candidates must be in (0, {vocab_size - 1:,}] (|W| - 1 for this "
                                 f"vocabulary), got {mean:g}")
        bound = diameter_bounds(artifact.vectors).upper if max_distance is None else float(max_distance)
        if table.k < 2:
            raise ParameterError(f"the neighbour table holds each word alone (K = {table.k}): the truncated Gumbel "
                                 "mechanism needs K >= 2 (rebuild it with `textdp neighbours --k 2` or more)")
        distances = np.asarray(table.distances)
        positive = distances[:, 1:][distances[:, 1:] > 0]
        min_distance = float(positive.min()) if len(positive) else float("nan")
        if scale is None:
            try:
                scale = scale_from_epsilon(float(epsilon), vocab_size, min_distance, bound)
            except ValueError as exc:
                raise ParameterError(str(exc)) from None
            source = "derived from epsilon by MLDP's BRR relation"
        else:
            scale, source = float(scale), "given"
            ratio = math.log(vocab_size / cls.IDENTITY_CHANGE)
            if min_distance / scale > ratio:
                raise ParameterError(
                    f"the Gumbel scale {scale:.4g} is below 1/{ratio:.3g} of the smallest distance between two words "
                    f"({min_distance:.4g}): a word would be released as another with probability below "
                    f"{cls.IDENTITY_CHANGE:g}, so every word would be released unchanged")
        if bound < min_distance / 2:  # every score lies within +-bound of its distance: the input (0) always wins
            raise ParameterError(
                f"the truncation bound {bound:.4g} is below half the smallest distance between two words "
                f"({min_distance:.4g}): the noise could never let another word beat the input, so every word would be "
                "released unchanged")
        if -math.expm1(-mean) < cls.IDENTITY_CHANGE:  # P(k >= 1) = 1 - exp(-mean) bounds any change
            raise ParameterError(
                f"gumbel mean_candidates {mean:.4g} is below {cls.MIN_CANDIDATES:.7g}: another candidate is drawn, so a "
                f"word can be released as another, with probability at most 1 - exp(-mean) = {-math.expm1(-mean):.4g}, "
                f"below {cls.IDENTITY_CHANGE:g}, so every word would be released unchanged")
        if not (math.isfinite(scale) and scale > 0 and bound / scale >= cls.MIN_BOUND_TO_SCALE):
            raise ParameterError(f"the Gumbel scale {scale:.4g} is above {1 / cls.MIN_BOUND_TO_SCALE:g} x the truncation "
                                 f"bound {bound:.4g}: the noise would be rounded to nothing and every word released "
                                 "unchanged")
        return {"table": table, "mean_candidates": mean, "max_distance": bound, "min_distance": min_distance,
                "scale": scale, "scale_source": source}

    def __init__(self, artifact, epsilon: float, scale: Optional[float] = None, mean_candidates: Optional[float] = None,
                 max_distance: Optional[float] = None, batch: int = 8192):
        type(self).check_parameters(epsilon, None, scale=scale, mean_candidates=mean_candidates,
                                    max_distance=max_distance)
        resolved = type(self).resolve(epsilon, artifact, scale, mean_candidates, max_distance)
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.vocab_size = int(artifact.vocab_size)
        self.batch = int(batch)
        self.table = resolved["table"]
        self.k_table = self.table.k
        self.mean_candidates = resolved["mean_candidates"]
        self.max_distance = resolved["max_distance"]
        self.min_distance = resolved["min_distance"]
        self.scale = resolved["scale"]
        self.scale_source = resolved["scale_source"]
        self._vectors = np.asarray(artifact.vectors)
        self._table_ids = np.asarray(self.table.ids)
        self._table_distances = np.asarray(self.table.distances)
        self.fallbacks = 0  # tokens whose k reached past the table

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id (independent draws), vectorised per batch."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            out[start:start + len(chunk)] = self._sample(chunk, rng)
        return out

    def _sample(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        k = truncated_poisson(self.mean_candidates, self.vocab_size - 1, len(ids), rng)
        out = np.empty(len(ids), dtype=np.int64)
        inside = np.flatnonzero(k < self.k_table)  # candidates c_0..c_k all in the table row
        if len(inside):
            width = int(k[inside].max()) + 1
            cand = np.take(self._table_ids, ids[inside], axis=0)[:, :width].astype(np.int64)
            dist = np.take(self._table_distances, ids[inside], axis=0)[:, :width].astype(np.float64)
            dist[:, 0] = 0.0
            score = dist + truncated_gumbel_noise(dist.shape, self.scale, self.max_distance, rng)
            score[np.arange(width)[None, :] > k[inside, None]] = np.inf
            out[inside] = cand[np.arange(len(inside)), np.argmin(score, axis=1)]
        for i in np.flatnonzero(k >= self.k_table):  # k past the table: probability ~0 for Poisson(ln |W|)
            self.fallbacks += 1
            out[i] = self._sample_search(int(ids[i]), int(k[i]), rng)
        return out

    def _sample_search(self, word: int, k: int, rng: np.random.Generator) -> int:
        from textdp.search.geometry import distance_row

        row = distance_row(self._vectors, word)
        order = np.lexsort((np.arange(len(row)), np.arange(len(row)) != word, row))[:k + 1]
        score = row[order] + truncated_gumbel_noise(len(order), self.scale, self.max_distance, rng)
        return int(order[np.argmin(score)])

    # the guarantee -----------------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        return np.asarray(vectors, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """inf: textdp claims no pure-LDP bound for this mechanism (see the module docstring)."""
        check_diameter(diameter_upper)
        return math.inf

    def parameters(self) -> dict:
        return {"mechanism": self.name, "epsilon": self.epsilon, "gumbel_scale": self.scale,
                "scale_source": self.scale_source, "gumbel_candidates": self.mean_candidates,
                "gumbel_max_distance": self.max_distance,
                "min_distance": self.min_distance, "neighbour_k": self.k_table}

    def privacy_statement(self) -> dict:
        return {
            "notion": "none claimed by textdp",
            "per_token": ("no guarantee is claimed: the BRR paper's theorem could not be checked in this build, and no "
                          "finite pure local-DP bound over the vocabulary is computed for this mechanism"),
            "per_record": "no guarantee is claimed",
            "mechanism": (f"candidates: the input and its k nearest other words, k ~ Poisson({self.mean_candidates:.4g}) "
                          f"truncated to <= {self.vocab_size - 1}; each distance plus Gumbel(0, {self.scale:.4g}) noise "
                          f"truncated to [-{self.max_distance:.4g}, {self.max_distance:.4g}]; the smallest noisy distance "
                          f"wins (epsilon {self.epsilon:g} only sets the scale, {self.scale_source})"),
            "coverage": {"covered": "none",
                         "reason": ("truncated-gumbel: no guarantee is claimed (the BRR paper's theorem could not be "
                                    "checked in this build)")},
        }


def output_distribution(sorted_distances: np.ndarray, scale: float, bound: float, mean: float, maximum: int,
                        k_limit: Optional[int] = None, grid: int = 40001,
                        others_pmf: Optional[np.ndarray] = None) -> np.ndarray:
    """Exact law of the released candidate index (0 = the input) for one input, by numerical integration.

    ``sorted_distances``: d(x, c_0 = x) = 0, d(x, c_1) <= ... (the table order). P(index j) =
    sum_{k >= j} P(k) * P(c_j has the smallest noisy distance among c_0..c_k), with
    P(c_j wins | k) = integral f(g) prod_{i != j, i <= k} S(d_j + g - d_i) dg, f and S the density and
    survival function of the truncated Gumbel noise. Candidate counts beyond ``k_limit`` (default: the
    length of ``sorted_distances`` - 1) must carry negligible Poisson mass; their share is returned
    unassigned (the result then sums to slightly less than 1). ``others_pmf`` replaces the truncated
    Poisson law of k (the number of other candidates) by an explicit one (index = k), e.g. MLDP's.
    """
    d = np.asarray(sorted_distances, dtype=np.float64)
    k_limit = len(d) - 1 if k_limit is None else min(int(k_limit), len(d) - 1)
    if others_pmf is None:
        pk = poisson_pmf(mean, maximum)
    else:
        pk = np.asarray(others_pmf, dtype=np.float64)
    pk = pk / pk.sum()
    g = np.linspace(-bound, bound, grid)
    low, high = math.exp(-math.exp(bound / scale)) if bound / scale < 700 else 0.0, math.exp(-math.exp(-bound / scale))
    z = g / scale
    density = np.exp(-(z + np.exp(-z))) / scale / (high - low)

    def log_survival(t):
        t = np.clip(t, -bound, bound)
        cdf = np.exp(-np.exp(-t / scale))
        with np.errstate(divide="ignore"):  # survival 0 at the upper bound: log 0 = -inf is right
            return np.log(np.maximum(high - cdf, 0.0) / (high - low))

    weights = np.full(grid, g[1] - g[0])
    weights[0] = weights[-1] = 0.5 * (g[1] - g[0])
    log_prod = np.zeros((k_limit + 1, grid))
    probs = np.zeros(k_limit + 1)
    for k in range(k_limit + 1):
        if k > 0:  # add candidate k: it competes with every earlier one, and they with it
            log_prod[:k] += log_survival(d[:k, None] + g[None, :] - d[k])
            log_prod[k] = log_survival(d[k] + g[None, :] - d[:k, None]).sum(axis=0)
        with np.errstate(under="ignore"):
            win = (np.exp(log_prod[:k + 1]) * density * weights).sum(axis=1)
        probs[:k + 1] += pk[k] * win / max(win.sum(), 1e-300)  # renormalise the quadrature per k
    return probs
