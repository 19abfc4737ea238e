"""CusText of Chen, Mo, Wang, Chen, Nie, Wang and Cui (Findings of ACL 2023).

Customized output sets. The vocabulary is partitioned into groups of K words, greedily in
frequency order (the paper's mapping function f_map, as we read it: its full text was not
reachable from this build's reference index, so this reading is stated here in full): the most frequent word not yet
assigned takes its K nearest words among those not yet assigned (itself included) as a group, and
every word of the group gets that group as its output set. Words are in frequency order in an
artifact (id = rank - 1), so the greedy order is id order. When fewer than K words remain they form
the last, smaller group. The nearest unassigned words are read from the artifact's exact K-nearest
table while the row still holds K unassigned words, and found by a search over the unassigned
words otherwise (float32 scores, the best K + 16 re-ranked in float64: exact up to float32
near-ties, which the paper's definition leaves open anyway).

Distribution sampled (the paper's sampling function f_sample; the normalised scores are also
what pyPANTERA 1.0.2 computes). For an input x with output
set S(x), the scores are the distances normalised to [0, 1] over S(x):
u(x, y) = -(d(x, y) - min_S d(x, .)) / (max_S d(x, .) - min_S d(x, .)) in [-1, 0] (all 0 when the
spread is 0), and

    P(y | x) = exp(epsilon u(x, y) / 2) / sum_{y' in S(x)} exp(epsilon u(x, y') / 2),  y in S(x)

(the exponential mechanism with a utility of range 1). Sampled exactly by one inverse-CDF draw per
token over the K weights, vectorised over the batch.

Guarantee. For two words x, x' of the same group (same output set), every score differs by at most
1, so P[M(x) in O] <= exp(epsilon) P[M(x') in O]: epsilon-indistinguishability within a group. Words
of different groups have disjoint output sets: the released word reveals the input's group, and no
guarantee holds between groups. That is exactly what the privacy statement says.

Where readings differ. pyPANTERA 1.0.2's ``CusText`` gives every word its *own* K nearest words
of the whole vocabulary as its output set (no partition), so two words have different output sets
unless their neighbour lists coincide, and then no finite bound holds between them; it also gives
a word missing from the vocabulary a random Gaussian vector. Its scores are the same normalised
distances. MLDP 0.1.2 does not ship CusText.
"""

from __future__ import annotations

import threading
from typing import Optional, Tuple

import numpy as np

from textdp.artifact.neighbours import METRICS
from textdp.mechanisms.base import Mechanism, Parameter
from textdp.mechanisms.madlib import check_diameter

CUSTEXT_K = Parameter(
    "custext_k", int, 20, label="custext k", argument="k", aliases=("k",), example=8,
    help="size K of each word's output set, 2 to the vocabulary's size (1 releases every word unchanged; a "
         "vocabulary size of 1 modulo K would leave one word alone); default 20")
CUSTEXT_METRIC = Parameter(
    "custext_metric", str, "euclidean", choices=METRICS, label="custext metric", argument="metric",
    aliases=("metric",), example="angular", help="the distance that builds the output sets; default euclidean")

RERANK_MARGIN = 16
_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


_SCORE_LIMIT = float(np.finfo(np.float32).max) / 4.0  # |x|^2 - 2 x.y <= 3 max|x|^2 stays a finite float32


def check_score_range(vectors: np.ndarray, metric: str = "euclidean", rows: int = 65536) -> None:
    """Refuse vectors on which the output sets' float32 search scores (|x|^2 - 2 x.y) overflow: a squared norm
    above float32's largest value / 4 (vectors beyond about 9e18 in length, e.g. one coordinate scaled by 1e20)
    makes them inf or NaN, and the groups would be built from NaN (with numpy's raw overflow warnings). Angular
    points are unit vectors, always in range. ParameterError, one line (before the run, and when built)."""
    from textdp.errors import ParameterError

    if metric == "angular":
        return
    largest = 0.0
    for start in range(0, len(vectors), rows):
        block = np.asarray(vectors[start:start + rows], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            sq = np.einsum("ij,ij->i", block, block)
        if len(sq):
            top = float(np.max(sq)) if np.isfinite(sq).all() else float("inf")
            largest = max(largest, top)
    if not largest <= _SCORE_LIMIT:
        raise ParameterError(f"custext cannot build its output sets on this artifact: its largest squared vector norm "
                             f"({largest:.3g}) is above {_SCORE_LIMIT:.3g}, where float32 distance scores overflow; "
                             "rebuild the artifact from vectors on a usual scale (e.g. divide them by a constant)")


def build_output_sets(points: np.ndarray, k: int, table_ids: Optional[np.ndarray] = None
                      ) -> Tuple[np.ndarray, np.ndarray, dict]:
    """Greedy partition of the vocabulary into output sets of ``k`` words (see the module docstring).

    ``points``: the metric's points (N x n; Euclidean distances between them are the metric).
    ``table_ids``: the exact K-nearest table of the same metric (row-major, word itself first), or None.
    Returns (set_ids int32 N x k, padded with -1 in the last group when it is smaller; set_distances
    float32 N x k, d(x, set member), inf in the padding; statistics).
    """
    n_words = len(points)
    if not 1 <= k <= n_words:
        raise ValueError(f"K must be in 1..{n_words}")
    points32 = np.ascontiguousarray(points, dtype=np.float32)
    sqnorms = np.einsum("ij,ij->i", points32, points32)
    assigned = np.zeros(n_words, dtype=bool)
    set_ids = np.full((n_words, k), -1, dtype=np.int32)
    set_d = np.full((n_words, k), np.inf, dtype=np.float32)
    # the unassigned words as a compact copy (ids, points, squared norms), compacted again once an
    # eighth of it has been assigned: a search then reads one contiguous block
    pool_ids = np.arange(n_words)
    pool_points, pool_sq = points32, sqnorms
    pool_stale = 0
    from_table = searched = 0
    for word in range(n_words):
        if assigned[word]:
            continue
        group = None
        if table_ids is not None:
            row = np.asarray(table_ids[word], dtype=np.int64)
            free = row[~assigned[row]]
            if len(free) >= k:
                group = free[:k]
                from_table += 1
        if group is None:
            if pool_stale > len(pool_ids) // 8:
                keep = ~assigned[pool_ids]
                pool_ids, pool_points, pool_sq = pool_ids[keep], pool_points[keep], pool_sq[keep]
                pool_stale = 0
            scores = pool_sq - 2.0 * (pool_points @ points32[word])
            scores[assigned[pool_ids]] = np.inf
            free_count = len(pool_ids) - int(np.isinf(scores).sum())
            take = min(k + RERANK_MARGIN, free_count)
            if take < len(pool_ids):
                near = pool_ids[np.argpartition(scores, take - 1)[:take]]
            else:
                near = pool_ids
            near = near[~assigned[near]]
            diff = points32[near].astype(np.float64) - points32[word].astype(np.float64)
            exact = np.sqrt(np.einsum("ij,ij->i", diff, diff))
            exact[near == word] = -1.0  # the word itself first
            order = np.lexsort((near, exact))
            group = near[order[:k]]
            searched += 1
        assigned[group] = True
        pool_stale += len(group)
        set_ids[group, :len(group)] = group
        members = points32[group].astype(np.float64)
        for row in range(0, len(group), 64):  # pairwise distances within the group, 64 rows at a time
            diff = members[None, :, :] - members[row:row + 64, None, :]
            dist = np.sqrt(np.einsum("abn,abn->ab", diff, diff))
            dist[np.arange(len(dist)), row + np.arange(len(dist))] = 0.0
            set_d[group[row:row + 64], :len(group)] = dist
    stats = {"groups": int(from_table + searched), "groups_from_table": int(from_table),
             "groups_searched": int(searched)}
    return set_ids, set_d, stats


class CusText(Mechanism):
    """CusText over an artifact: ``privatize_ids(ids, rng)``; output sets built once per (artifact, K, metric)."""

    name = "custext"
    DESCRIPTION = "exponential mechanism over each word's output set of --custext-k words"
    PARAMETERS = (CUSTEXT_K, CUSTEXT_METRIC)
    EXACT_LAW = True
    CHECKS_READ_ARRAYS = True  # the output sets' float32 scores must be finite (check_score_range)
    BOUND_TEXT = "none claimed across output sets (token_epsilon0 is infinite for a vocabulary of several sets)"

    @classmethod
    def check_special(cls, epsilon, artifact=None, k: int = 20, **_others) -> None:
        """Refuse a K CusText cannot use (the declared check made it an integer).

        K = 1 makes every word its own group: released unchanged. With the vocabulary known: K above
        its size cannot be partitioned, and a size of 1 modulo K leaves the last group a single word,
        released unchanged (K = |V| is allowed: one group, the exponential mechanism over everything)."""
        from textdp.errors import ParameterError

        k = int(k)
        if k < 2:
            raise ParameterError(f"custext k must be >= 2 (k = {k}: every word is its own output set, released "
                                 "unchanged)")
        if artifact is not None and getattr(artifact, "vectors", None) is not None:
            check_score_range(artifact.vectors, _others.get("metric", "euclidean"))
        if artifact is not None:
            size = int(artifact.vocab_size)
            if k > size:
                raise ParameterError(f"custext k must be at most the vocabulary's {size:,} words, got {k:,}")
            if size % k == 1:
                raise ParameterError(f"custext k = {k:,} leaves the last of the vocabulary's {size:,} words alone in "
                                     "its output set (released unchanged): choose another k")

    def __init__(self, artifact, epsilon: float, k: int = 20, metric: str = "euclidean", batch: int = 65536):
        from textdp.artifact.neighbours import NeighbourTable, metric_points

        type(self).check_parameters(epsilon, artifact, k=k, metric=metric)
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.k = int(k)
        self.metric = metric
        self.batch = int(batch)
        self.vocab_size = int(artifact.vocab_size)
        self._metric_points = metric_points
        files = artifact.manifest.get("files", {})
        vectors_sha = files.get(artifact.manifest.get("vectors"), {}).get("sha256")
        key = (getattr(artifact, "path", id(artifact)), vectors_sha, self.k, metric, self.vocab_size)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
            if cached is None:
                table_ids = None
                if artifact.manifest.get("neighbours"):
                    table = NeighbourTable.from_artifact(artifact)
                    if table.metric == metric:
                        table_ids = table.ids
                cached = build_output_sets(metric_points(artifact.vectors, metric), self.k, table_ids)
                _CACHE[key] = cached
        self.set_ids, self.set_distances, self.build_stats = cached

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id: one inverse-CDF draw over the input's output set."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            probs = self.probabilities(chunk)
            cumulative = np.cumsum(probs, axis=1)
            draw = rng.random(len(chunk)) * cumulative[:, -1]
            column = np.minimum((cumulative <= draw[:, None]).sum(axis=1), self.k - 1)
            members = self.set_ids[chunk]
            out[start:start + len(chunk)] = members[np.arange(len(chunk)), column]
        return out

    def probabilities(self, ids: np.ndarray) -> np.ndarray:
        """P(set member | x) for each input (B x K, 0 on the padding of a smaller last group)."""
        dist = self.set_distances[np.asarray(ids, dtype=np.int64)].astype(np.float64)
        valid = np.isfinite(dist)
        low = np.where(valid, dist, np.inf).min(axis=1, keepdims=True)
        high = np.where(valid, dist, -np.inf).max(axis=1, keepdims=True)
        spread = high - low
        score = np.where(spread > 0, -(dist - low) / np.where(spread > 0, spread, 1.0), 0.0)
        weight = np.where(valid, np.exp(0.5 * self.epsilon * score), 0.0)  # in [exp(-eps/2), 1]: no underflow
        return weight / weight.sum(axis=1, keepdims=True)

    def groups(self) -> int:
        return int(self.build_stats["groups"])

    # the guarantee -----------------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """The points of the metric that builds the output sets (the guarantee itself does not use a metric)."""
        return self._metric_points(vectors, self.metric, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """epsilon when one output set holds the whole vocabulary (K >= |V|), else inf: words of different
        groups have disjoint outputs, so no finite pure-LDP bound holds over the vocabulary."""
        check_diameter(diameter_upper)
        return self.epsilon if self.groups() == 1 else float("inf")

    def parameters(self) -> dict:
        return {"mechanism": self.name, "epsilon": self.epsilon, "custext_k": self.k, "custext_metric": self.metric,
                "metric": self.metric,
                "output_sets": self.groups(), "output_sets_from_table": self.build_stats["groups_from_table"]}

    def exact_distribution(self, row: np.ndarray, word_id: int) -> np.ndarray:
        """The input's output-set weights, 0 outside its set (``row`` is not needed)."""
        probs = np.zeros(len(row))
        members = self.set_ids[word_id]
        weights = self.probabilities(np.array([word_id]))[0]
        probs[members[members >= 0]] = weights[members >= 0]
        return probs

    def group_sizes(self) -> dict:
        """{words in a group: number of such groups}, read from the output sets (a smaller last group included)."""
        row_sizes = np.count_nonzero(np.asarray(self.set_ids) >= 0, axis=1)
        sizes, words = np.unique(row_sizes, return_counts=True)
        return {int(size): int(count) // int(size) for size, count in zip(sizes, words)}

    def privacy_statement(self) -> dict:
        e, groups = self.epsilon, self.groups()
        sizes = sorted(self.group_sizes().items(), reverse=True)
        partition = " and ".join(f"{count:,} group{'' if count == 1 else 's'} of {size:,} word{'' if size == 1 else 's'}"
                                 for size, count in sizes)
        return {
            "notion": (f"epsilon-indistinguishability within customized output sets (CusText): the vocabulary is "
                       f"partitioned into {partition} (greedy in frequency order, "
                       f"{self.metric} distance); a word is replaced by a word of its own group"),
            "covered": "any two words of the same group",
            "per_token": f"for any words x, x' of the same group and any output set O: P[M(x) in O] <= exp({e:g}) * P[M(x') in O]",
            "not_covered": ("words of different groups have disjoint outputs: the released word reveals the group of the "
                            "input word, and no guarantee holds between groups" if groups > 1 else
                            "none: one group holds the whole vocabulary"),
            "per_record": (f"two records whose words are position by position in the same groups: exp({e:g} * the number of "
                           "positions where they differ); records whose words fall in different groups somewhere: none"),
            "sampling": "exact: one inverse-CDF draw over the K weights of the input's output set",
            "coverage": ({"covered": "subset", "subset": "any two words of the same group (each word against the words "
                                                          "of its own output set)",
                          "reason": ("custext: words of different groups have disjoint outputs, so the released word "
                                     "reveals the input word's group")}
                         if groups > 1 else {"covered": "all"}),
        }
