"""CluSanT of Awon, Lu, Potka and Thomo (NAACL 2025): an exponential mechanism over clusters of words,
then an exponential mechanism within the chosen cluster.

Sources. The paper's full text was not reachable from this build's reference index (only its abstract:
token clustering, a cluster embedding parameterised to trade privacy for utility, and a metric-LDP
sanitization whose extreme parameter values give SanText and CusText). The two-stage law below is
read from a public copy of the authors' replication code (read, not copied) and derived here in full;
where that code and a clean metric-DP statement disagree, we keep the stated guarantee (see "Where
readings differ").

Clusters (public, deterministic). The vocabulary V is partitioned into clusters of
s = ceil(|V| / C) words (C = ``clusant_clusters``; default: clusters of about 40 words,
C = ceil(|V| / 40)), greedily: the most frequent word not yet assigned takes its s nearest unassigned
words (itself included), Euclidean distance between the vectors; the last cluster keeps what remains.
This is CusText's greedy partition (``textdp.mechanisms.custext.build_output_sets``, the one implementation of
it), so the clusters depend on the artifact's public vectors and frequency order only, never on input
text, and involve no randomness (no seed is needed). The number of clusters is ceil(|V| / s) <= C
(``parameters()["clusters"]`` reports it). For each cluster j: its centroid mu_j (the mean of its
vectors, float64) and its diameter Delta_j = max d(y, y') over its members (float64).

The law. Epsilon is split: epsilon_1 = share * epsilon for the cluster stage and
epsilon_2 = (1 - share) * epsilon for the word stage (share = ``clusant_cluster_share``, default 0.5);
K = ``clusant_scale`` (the paper's cluster-embedding scale: the cluster embedding is K mu_j). For an
input word w in cluster a = c(w):

    P1(j | a)    = exp(-epsilon_1 K ||mu_a - mu_j|| / 2) / sum_l exp(-epsilon_1 K ||mu_a - mu_l|| / 2)
    P2(o | w, j) = exp(-epsilon_2 d(w, o) / (2 Delta_j)) / sum_{y in C_j} exp(-epsilon_2 d(w, y) / (2 Delta_j)),  o in C_j
                   (uniform over C_j when Delta_j = 0: one word, or identical vectors)
    P(o | w)     = P1(c(o) | c(w)) * P2(o | w, c(o))

(the exponential mechanism with utility -||K mu_a - K mu_j|| and sensitivity 1 over clusters, then
the exponential mechanism with utility -d(w, o) and sensitivity Delta_j over the chosen cluster).
Sampled exactly: one inverse-CDF draw over the C cluster weights (computed once per distinct input
cluster of a batch), then one over the s word weights of the chosen cluster (distances in float64 from
the vectors, by differences, as ``textdp.calibration.statistics.distance_row`` computes them).

Guarantee (derived here). For any words x, x' and any output word o, with d Euclidean:
  stage 1: P1(j | c(x)) <= exp(epsilon_1 K ||mu_c(x) - mu_c(x')||) P1(j | c(x')) (triangle inequality in
           the exponent and in the normaliser; 0 when x and x' share a cluster);
  stage 2: P2(o | x, j) <= exp(epsilon_2 min(1, d(x, x') / Delta_j)) P2(o | x', j): the exponent and the
           normaliser each move by at most epsilon_2 d(x, x') / (2 Delta_j); and for any input the
           utilities over C_j span at most Delta_j, so every weight lies in [exp(-epsilon_2 / 2), 1] times
           the largest and the ratio is at most exp(epsilon_2) whatever the inputs (1 when Delta_j = 0).
So for every output set O:

    P[M(x) in O] <= exp(epsilon_1 K ||mu_c(x) - mu_c(x')|| + epsilon_2 min(1, d(x, x') / Delta_min)) P[M(x') in O]

with Delta_min the smallest positive cluster diameter (the term is 0 when no cluster has one). This is
epsilon-metric local DP for the metric rho(x, x') = share K ||mu_c(x) - mu_c(x')|| + (1 - share)
min(1, d(x, x') / Delta_min), finite for every pair: coverage "all". It is NOT epsilon * d(x, x') in the
word distance: two close words on either side of a cluster boundary can have distant centroids
(tests/test_clusant.py shows such a pair on the fixture). As a function of d(x, x') alone (what the
audit and the accounting use, ``token_epsilon0``): ||mu_a - mu_b|| <= R_a + d(x, x') + R_b <= d + 2 R
(R the largest distance from a centroid to a member of its cluster) and <= D_mu (an upper bound on the
centroids' diameter: the sum of the two largest distances from their mean), so

    epsilon_0(d) = epsilon_1 K min(D_mu, d + 2 R) + epsilon_2 min(1, d / Delta_min).

Special cases. One cluster (C = 1): SanText at epsilon_2 / Delta (the vocabulary's diameter). Clusters
of one word (C = |V|): SanText over the words at epsilon_1 K. epsilon_1 K large: the input's own cluster
is chosen almost surely, which approaches CusText (a word stays in its group; the per-pair bound grows
with epsilon_1 K and says so). epsilon_1 K = 0: the cluster is uniform.

Cost. The clusters are built once per worker process and (artifact, s) and cached in the process: the
greedy partition costs what CusText's does at K = s (it reads the artifact's Euclidean neighbour table
when present, whose rows serve every cluster of at most K words; without one, a search per cluster:
64 s of CPU for the 400k default artifact at the default s = 40, measured), plus the float64 diameters
(|V| s n multiply-adds). A batch costs C n per distinct input cluster (the cluster weights) plus s n
per token (the word weights); 65,536 Zipf tokens took 0.9 s of CPU on the 400k artifact. Few large
clusters on a large vocabulary are refused: the partition's working arrays hold |V| x s cells
(``MAX_BUILD_CELLS``).

Where readings differ. The replication code uses the same epsilon in both stages (its total budget is
then 2 epsilon in our terms: share 0.5 at twice the epsilon); here epsilon is the total and is split.
It picks each cluster's seed word at random (unseeded) and takes |V| // C words per cluster, which can
make more than C clusters; we use frequency-order seeds (deterministic) and ceil(|V| / C) words. Its
clusters come from LLM-generated candidate lists of named entities; here from the artifact's
vocabulary. Its metric variant uses sensitivity 1 in the cluster stage and the chosen cluster's
diameter in the word stage, as here; a cluster of one word (diameter 0) divides by zero there, and is
uniform (its one word) here.
"""

from __future__ import annotations

import threading
from typing import Optional

import numpy as np

from textdp.mechanisms.base import Mechanism, Parameter
from textdp.mechanisms.madlib import check_diameter

DEFAULT_CLUSTER_WORDS = 40  # words per cluster when clusant_clusters is not given

CLUSANT_CLUSTERS = Parameter(
    "clusant_clusters", int, None, low=1, label="clusant clusters", argument="clusters", example=100,
    help="number C of clusters, 1 to the vocabulary's size: clusters of ceil(|V| / C) words built greedily "
         f"from the public vectors (at most C clusters); default: clusters of about {DEFAULT_CLUSTER_WORDS} words")
CLUSANT_SCALE = Parameter(
    "clusant_scale", float, 1.0, low=0.0, high=1e6, label="clusant scale", argument="scale", example=2.0,
    help="the cluster-embedding scale K: clusters are chosen with weights exp(-epsilon_1 K ||mu_a - mu_j|| / 2) "
         "(0: a uniform cluster; large: the input's own cluster, like CusText); default 1")
CLUSANT_CLUSTER_SHARE = Parameter(
    "clusant_cluster_share", float, 0.5, low=0.0, high=1.0, label="clusant cluster share", argument="share",
    example=0.25,
    help="the share of epsilon spent on choosing the cluster (epsilon_1 = share * epsilon); the rest, "
         "epsilon_2, chooses the word within it; default 0.5")

MAX_BUILD_CELLS = 1 << 27  # |V| x s cells of the greedy partition's working arrays (8 bytes each: 1 GiB)
STAGE2_ELEMENTS = 1 << 21  # float64 elements of one gathered (tokens x cluster words x dimension) block
_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def cluster_size(vocab_size: int, clusters: Optional[int]) -> int:
    """Words per cluster s = ceil(|V| / C) (C default: ceil(|V| / DEFAULT_CLUSTER_WORDS))."""
    if clusters is None:
        clusters = -(-vocab_size // DEFAULT_CLUSTER_WORDS)
    return -(-int(vocab_size) // int(clusters))


def build_clusters(vectors: np.ndarray, size: int, table_ids=None) -> dict:
    """The public clusters of a vocabulary: CusText's greedy partition into groups of ``size`` words
    (textdp.mechanisms.custext.build_output_sets), as members (C x size, -1 padded), labels (|V|), and per cluster
    its float64 centroid, diameter and radius (largest distance from the centroid to a member)."""
    from textdp.mechanisms.custext import build_output_sets

    if size >= len(vectors):  # one cluster: the whole vocabulary, nothing to search
        members, stats = np.arange(len(vectors), dtype=np.int64)[None, :], {"groups": 1}
    else:
        set_ids, _, stats = build_output_sets(vectors, size, table_ids)
        seeds = np.flatnonzero(set_ids[:, 0] == np.arange(len(set_ids)))  # a group's row starts with its seed
        members = np.ascontiguousarray(set_ids[seeds], dtype=np.int64)
        del set_ids
    labels = np.full(len(vectors), -1, dtype=np.int64)
    for j, row in enumerate(members):
        labels[row[row >= 0]] = j
    if (labels < 0).any():
        raise AssertionError("the greedy partition left a word without a cluster")
    count = len(members)
    centroids = np.zeros((count, vectors.shape[1]))
    diameters = np.zeros(count)
    radii = np.zeros(count)
    for j, row in enumerate(members):
        points = np.asarray(vectors[row[row >= 0]], dtype=np.float64)
        centroids[j] = points.mean(axis=0)
        radii[j] = np.sqrt(((points - centroids[j]) ** 2).sum(axis=1)).max()
        step = max(1, STAGE2_ELEMENTS // (len(points) * points.shape[1]))
        for first in range(0, len(points) if len(points) > 1 else 0, step):  # float64 differences, bounded memory
            diff = points[None, :, :] - points[first:first + step, None, :]
            diameters[j] = max(diameters[j], np.sqrt(np.einsum("abn,abn->ab", diff, diff)).max())
    return {"members": members, "sizes": (members >= 0).sum(axis=1), "labels": labels, "centroids": centroids,
            "diameters": diameters, "radii": radii, "stats": stats}


class CluSanT(Mechanism):
    """CluSanT over an artifact (see the module docstring): clusters built once per process and (artifact, s)."""

    name = "clusant"
    TITLE = "CluSanT"
    DESCRIPTION = "exponential mechanism over clusters of words, then over the words of the chosen cluster"
    PARAMETERS = (CLUSANT_CLUSTERS, CLUSANT_SCALE, CLUSANT_CLUSTER_SHARE)
    EXACT_LAW = True
    BOUND_TEXT = "epsilon_1 K min(D_mu, d + 2 R) + epsilon_2 min(1, d / Delta_min), Euclidean"

    @classmethod
    def check_special(cls, epsilon, artifact=None, clusters: Optional[int] = None, scale: float = 1.0,
                      share: float = 0.5, **_others) -> None:
        """More clusters than words cannot be built (known only with the vocabulary); clusters of one word whose
        cluster stage keeps every word (the identity: ``IDENTITY_CHANGE``, ``identity_gap``) are refused."""
        from textdp.errors import ParameterError

        if clusters is None or artifact is None:
            return
        size = int(artifact.vocab_size)
        if int(clusters) > size:
            raise ParameterError(f"clusant clusters must be at most the vocabulary's {size:,} words, got {int(clusters):,}")
        if cluster_size(size, clusters) == 1 and hasattr(artifact, "vectors"):
            cls.check_identity(float(epsilon) * float(share) * float(scale), artifact)
        words = cluster_size(size, clusters)
        if 1 < int(clusters) and words * size > MAX_BUILD_CELLS:
            least = -(-size // (MAX_BUILD_CELLS // size))
            raise ParameterError(f"clusant clusters = {int(clusters):,} makes clusters of {words:,} words, which the greedy "
                                 f"partition of {size:,} words cannot build in memory ({size:,} x {words:,} cells); "
                                 f"use 1 or at least {least:,} clusters")

    # Clusters of one word (C = |V|): the word stage cannot change the word, so only the cluster stage can. A word
    # w leaves its cluster with probability sum_{j != w} P1(j | w) <= (|V| - 1) exp(-epsilon_1 K g / 2), g the
    # smallest distance between two words (the centroids are the vectors). Refused when that bound is below
    # IDENTITY_CHANGE, Mechanism's one rule: every word would be released unchanged. g is computed exactly, in
    # float64 blocks, for vocabularies of at most IDENTITY_CHECK_WORDS words (|V|^2 d / 2 multiply-adds: ~0.1 s
    # at 5,000 words); a larger one is read from the artifact's Euclidean neighbour table when it has one, else
    # not checked (the refusal needs a gap known exactly).
    IDENTITY_CHECK_WORDS = 20_000
    CHECKS_READ_ARRAYS = True  # the identity check reads the vectors (clusters of one word only)

    @classmethod
    def identity_gap(cls, artifact) -> Optional[float]:
        """The smallest Euclidean distance between two words of ``artifact`` (a lower bound, rounding taken
        off), or None when it is not known cheaply (see IDENTITY_CHECK_WORDS)."""
        size = int(artifact.vocab_size)
        if size > cls.IDENTITY_CHECK_WORDS:
            if not (artifact.manifest or {}).get("neighbours"):
                return None
            from textdp.artifact.neighbours import NeighbourTable

            table = NeighbourTable.from_artifact(artifact)
            if table.metric != "euclidean" or table.k < 2:
                return None
            return float(np.asarray(table.distances)[:, 1:].min())
        vectors = np.asarray(artifact.vectors, dtype=np.float64)
        sq = np.einsum("ij,ij->i", vectors, vectors)
        tolerance = 1e-9 * float(sq.max()) if len(sq) else 0.0  # float64 rounding of |a|^2 + |b|^2 - 2 a.b
        smallest = np.inf
        for start in range(0, size, 1024):
            block = sq[start:start + 1024, None] + sq[None, :] - 2.0 * (vectors[start:start + 1024] @ vectors.T)
            block[np.arange(block.shape[0]), np.arange(start, start + block.shape[0])] = np.inf
            smallest = min(smallest, float(block.min()))
        return float(np.sqrt(max(smallest - tolerance, 0.0)))

    @classmethod
    def check_identity(cls, cluster_scale: float, artifact) -> None:
        """Refuse (ParameterError) clusters of one word at an epsilon_1 K (``cluster_scale``) that releases every
        word unchanged except with probability below IDENTITY_CHANGE (see IDENTITY_CHECK_WORDS)."""
        import math

        from textdp.errors import ParameterError

        gap = cls.identity_gap(artifact)
        if gap is None or gap <= 0:
            return
        size = int(artifact.vocab_size)
        log_change = math.log(size - 1) - 0.5 * cluster_scale * gap  # log of the bound (|V| - 1) exp(-e1 K g / 2)
        if log_change < math.log(cls.IDENTITY_CHANGE):
            shown = f"{math.exp(log_change):.3g}" if math.exp(log_change) > 0 else f"e^{log_change:.4g}"
            raise ParameterError(
                f"clusant with clusters of one word ({size:,} clusters) at epsilon_1 K = {cluster_scale:.4g} "
                f"(clusant cluster share x epsilon x clusant scale) releases a word as another with probability at "
                f"most {shown}, below {cls.IDENTITY_CHANGE:g} (the smallest distance between two "
                "words is {:.4g}): every word would be released unchanged; use fewer clusters or a smaller scale or "
                "share".format(gap))

    def __init__(self, artifact, epsilon: float, clusters: Optional[int] = None, scale: float = 1.0,
                 share: float = 0.5, batch: int = 65536):
        from textdp.artifact.neighbours import NeighbourTable

        type(self).check_parameters(epsilon, artifact, clusters=clusters, scale=scale, share=share)
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.requested_clusters = None if clusters is None else int(clusters)
        self.scale = float(scale)
        self.share = float(share)
        self.epsilon1 = self.share * self.epsilon
        self.epsilon2 = self.epsilon - self.epsilon1
        self.batch = int(batch)
        self.vocab_size = int(artifact.vocab_size)
        self.size = cluster_size(self.vocab_size, self.requested_clusters)
        files = artifact.manifest.get("files", {})
        vectors_sha = files.get(artifact.manifest.get("vectors"), {}).get("sha256")
        key = (getattr(artifact, "path", id(artifact)), vectors_sha, self.size, self.vocab_size)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
            if cached is None:
                table_ids = None
                if artifact.manifest.get("neighbours"):
                    table = NeighbourTable.from_artifact(artifact)
                    if table.metric == "euclidean":
                        table_ids = table.ids
                cached = build_clusters(np.asarray(artifact.vectors), self.size, table_ids)
                _CACHE[key] = cached
        self.clusters = cached
        self.count = len(cached["members"])
        centroids = cached["centroids"]
        self._centroid_sq = np.einsum("ij,ij->i", centroids, centroids)
        positive = cached["diameters"][cached["diameters"] > 0]
        self.min_diameter = float(positive.min()) if len(positive) else 0.0
        spread = np.sqrt(((centroids - centroids.mean(axis=0)) ** 2).sum(axis=1))
        self.centroid_diameter = float(np.sort(spread)[-2:].sum()) if self.count > 1 else 0.0
        self.max_radius = float(cached["radii"].max())

    # --- the two stages ---------------------------------------------------------------------------------
    def cluster_probabilities(self, clusters: np.ndarray) -> np.ndarray:
        """P1(. | a) for each cluster a (rows), over the C clusters, in float64."""
        clusters = np.asarray(clusters, dtype=np.int64)
        centroids = self.clusters["centroids"]
        squared = (self._centroid_sq[clusters][:, None] + self._centroid_sq[None, :]
                   - 2.0 * (centroids[clusters] @ centroids.T))
        dist = np.sqrt(np.maximum(squared, 0.0))
        dist[np.arange(len(clusters)), clusters] = 0.0
        log_w = -0.5 * self.epsilon1 * self.scale * dist  # <= 0, itself 0: no overflow
        weights = np.exp(log_w - log_w.max(axis=1, keepdims=True))
        return weights / weights.sum(axis=1, keepdims=True)

    def word_probabilities(self, distances: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """P2(member | w, j) for rows of d(w, member of j) (inf on the padding), j = ``chosen``."""
        diameters = self.clusters["diameters"][chosen]
        valid = np.isfinite(distances)
        nearest = np.where(valid, distances, np.inf).min(axis=1, keepdims=True)
        positive = diameters > 0
        spread = np.where(valid, distances - nearest, 0.0)
        exponent = np.where(positive[:, None], -0.5 * self.epsilon2 * spread / np.where(positive, diameters, 1.0)[:, None],
                            0.0)
        weights = np.where(valid, np.exp(exponent), 0.0)  # in [exp(-epsilon_2 / 2), 1]: no underflow to an empty row
        return weights / weights.sum(axis=1, keepdims=True)

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id: a cluster by inverse CDF, then a word of it by inverse CDF."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        labels, members = self.clusters["labels"], self.clusters["members"]
        vectors = self.artifact.vectors
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            own, inverse = np.unique(labels[chunk], return_inverse=True)
            order = np.argsort(inverse, kind="stable")
            bounds = np.searchsorted(inverse[order], np.arange(len(own) + 1))
            chosen = np.empty(len(chunk), dtype=np.int64)
            rows = max(1, STAGE2_ELEMENTS // self.count)  # cluster weights of this many input clusters at a time
            for first in range(0, len(own), rows):
                cumulative = np.cumsum(self.cluster_probabilities(own[first:first + rows]), axis=1)
                for row, cluster in enumerate(range(first, min(first + rows, len(own)))):
                    at = order[bounds[cluster]:bounds[cluster + 1]]
                    pick = np.searchsorted(cumulative[row], rng.random(len(at)) * cumulative[row, -1], side="right")
                    chosen[at] = np.minimum(pick, self.count - 1)
            step = max(1, STAGE2_ELEMENTS // (self.size * vectors.shape[1]))
            for begin in range(0, len(chunk), step):
                words, picked = chunk[begin:begin + step], chosen[begin:begin + step]
                group = members[picked]
                query = np.asarray(vectors[words], dtype=np.float64)
                diff = np.asarray(vectors[np.maximum(group, 0)], dtype=np.float64) - query[:, None, :]
                dist = np.where(group >= 0, np.sqrt(np.einsum("bsn,bsn->bs", diff, diff)), np.inf)
                dist[group == words[:, None]] = 0.0
                cumulative = np.cumsum(self.word_probabilities(dist, picked), axis=1)
                draw = rng.random(len(words)) * cumulative[:, -1]
                column = np.minimum((cumulative <= draw[:, None]).sum(axis=1), self.size - 1)
                column = np.minimum(column, self.clusters["sizes"][picked] - 1)
                out[start + begin:start + begin + len(words)] = group[np.arange(len(words)), column]
        return out

    # --- the exact law ----------------------------------------------------------------------------------
    def exact_distribution(self, row: np.ndarray, word_id: int) -> np.ndarray:
        """P(o | w) = P1(c(o) | c(w)) P2(o | w, c(o)) over the vocabulary (``row``: d(w, .), itself 0)."""
        row = np.asarray(row, dtype=np.float64)
        members = self.clusters["members"]
        first = self.cluster_probabilities(np.array([self.clusters["labels"][word_id]]))[0]
        dist = np.where(members >= 0, row[np.maximum(members, 0)], np.inf)
        second = self.word_probabilities(dist, np.arange(self.count))
        probs = np.zeros(len(row))
        valid = members >= 0
        probs[members[valid]] = (first[:, None] * second)[valid]
        return probs

    def pair_bound(self, x: int, y: int, distance: float, output_cluster: Optional[int] = None) -> float:
        """The exponent of the per-token bound for words ``x``, ``y`` at ``distance`` (module docstring): over
        every output when ``output_cluster`` is None (Delta_min), for outputs in that cluster otherwise."""
        labels, centroids = self.clusters["labels"], self.clusters["centroids"]
        first = self.epsilon1 * self.scale * float(np.linalg.norm(centroids[labels[x]] - centroids[labels[y]]))
        diameter = self.min_diameter if output_cluster is None else float(self.clusters["diameters"][output_cluster])
        second = self.epsilon2 * min(1.0, float(distance) / diameter) if diameter > 0 else 0.0
        return first + second

    # --- the guarantee's metric ---------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """Euclidean: the vectors themselves (token_epsilon0 is a bound for any two words at a distance)."""
        return np.asarray(vectors, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """epsilon_1 K min(D_mu, d + 2 R) + epsilon_2 min(1, d / Delta_min): a bound for any two words at
        Euclidean distance at most d (the vocabulary's diameter: epsilon_0 of one token)."""
        d = check_diameter(diameter_upper)
        first = self.epsilon1 * self.scale * min(self.centroid_diameter, d + 2.0 * self.max_radius)
        second = self.epsilon2 * min(1.0, d / self.min_diameter) if self.min_diameter > 0 else 0.0
        return first + second

    # --- reporting ----------------------------------------------------------------------------------------
    def parameters(self) -> dict:
        params = {"mechanism": self.name, "epsilon": self.epsilon, "metric": "euclidean",
                  "clusant_scale": self.scale, "clusant_cluster_share": self.share,
                  "epsilon_cluster": self.epsilon1, "epsilon_word": self.epsilon2,
                  "clusters": self.count, "cluster_words": self.size}
        if self.requested_clusters is not None:
            params["clusant_clusters"] = self.requested_clusters
        return params

    def privacy_statement(self) -> dict:
        e1, e2, k = self.epsilon1, self.epsilon2, self.scale
        dmin = self.min_diameter
        second = f"{e2:g} * min(1, d(x, x') / {dmin:.6g})" if dmin > 0 else "0"
        last = self.count * self.size - self.vocab_size
        sizes = (f"{self.count:,} clusters of {self.size:,} words" if last == 0 else
                 f"{self.count - 1:,} clusters of {self.size:,} words and 1 of {self.size - last:,}")
        return {
            "notion": (f"metric local differential privacy (CluSanT): the vocabulary is partitioned into {sizes} "
                       "(greedy in frequency order, Euclidean distance, from the public vectors only); a cluster is "
                       f"drawn with epsilon_1 = {e1:g} over the distances between the clusters' centroids scaled by "
                       f"K = {k:g}, then a word of it with epsilon_2 = {e2:g} over d(x, y) / the cluster's diameter"),
            "per_token": (f"for any words x, x' and any output set O: P[M(x) in O] <= exp({e1 * k:g} * ||mu_c(x) - "
                          f"mu_c(x')|| + {second}) * P[M(x') in O], mu_c the centroid of a word's cluster, d Euclidean; "
                          f"as a function of d(x, x') alone: exp({e1 * k:g} * min({self.centroid_diameter:.6g}, d + "
                          f"{2 * self.max_radius:.6g}) + {second})"),
            "per_record": ("a record with words x_1..x_l versus x_1'..x_l': the sum over positions of the per-token "
                           "exponents"),
            "covered": "every vocabulary word (a finite bound for every pair)",
            "metric_note": ("the bound is not epsilon * d(x, x'): two close words in different clusters are bounded "
                            "through the distance between their clusters' centroids"),
            "sampling": ("exact: one inverse-CDF draw over the cluster weights, then one over the chosen cluster's "
                         "word weights (float64)"),
            "coverage": {"covered": "all"},
        }
