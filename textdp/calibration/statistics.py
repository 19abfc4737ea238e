"""Plausible-deniability statistics for choosing epsilon (Feyisetan et al., WSDM 2020, Sec. 3.2, 4, 4.1).

For a mechanism M and an input word w the paper looks at two statistics of the output
distribution of M(w):

``N_w = Pr[M(w) = w]``
    how often the word is released unchanged (small is good for privacy). Estimated, as in the
    paper, by the share of ``samples`` independent draws that return w.
``S_w``
    the (effective) support of M(w): how many different words it releases (large is good). The
    paper estimates it by the number of distinct words among ``samples`` draws, so S_w is always
    read together with the number of draws (at most ``samples``).

For a mechanism whose output distribution is known in closed form (its class declares ``EXACT_LAW``
and gives ``exact_distribution``), the exact values are reported next to the estimates
(:func:`exact_distribution_of`); every other mechanism is estimated by sampling through its own
``privatize_ids`` only. The exact values: ``n_w_exact = P(w)`` and ``s_w_exact = E[distinct words in samples draws] =
sum_i 1 - (1 - p_i)^samples``, the expectation of the very estimator used for S_w (so the two are
directly comparable, and the exact one has no sampling error).

The paper's Fig. 1 (distance from each word to its k-th nearest word) comes from one row of
distances per sampled word, which also serves the exact candidate pruning below and TEM's closed
form. Choosing epsilon follows Sec. 4.1: fix worst-case targets (N_w at most x, S_w at least y for
a share c of the words) and take the largest epsilon that meets them (:func:`recommend`).

Nothing here imports Beam; ``transforms/calibration.py`` shards :class:`WordCalibrator` over words.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from textdp.search.geometry import distance_row
from textdp.search.nearest import ExactNearest
from textdp.text.privatizer import released_ids

K_VALUES = (1, 5, 10, 20, 50, 100, 200, 500, 1000)  # Fig. 1 of the paper
DISTANCE_PERCENTILES = (5, 20, 50, 80, 95)  # Fig. 1 of the paper
SUMMARY_PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
DEFAULT_SAMPLES = 1000  # draws per word and epsilon, as in the paper


# --- which words ------------------------------------------------------------------------------


def stratified_word_sample(vocab_size: int, count: int, rng: np.random.Generator):
    """``count`` word ids spread over the frequency ranks: one uniform draw per rank stratum.

    Artifacts keep words in frequency order (id = rank - 1), so cutting ``[0, vocab_size)`` into
    ``count`` equal strata and drawing one id from each gives a sample of the whole vocabulary
    whose frequent, middle and rare parts are all represented in proportion (a plain uniform
    sample could miss the few thousand frequent words entirely). Every sampled word stands for
    the same number of vocabulary words, so shares of sampled words estimate shares of the
    vocabulary. Returns ``(ids, strata)``; all words when ``count >= vocab_size``.
    """
    if vocab_size < 1:
        raise ValueError("the vocabulary is empty")
    if count < 1:
        raise ValueError("the number of words to sample must be >= 1")
    if count >= vocab_size:
        ids = np.arange(vocab_size, dtype=np.int64)
        return ids, ids.copy()
    edges = np.floor(np.linspace(0, vocab_size, count + 1)).astype(np.int64)
    ids = rng.integers(edges[:-1], edges[1:])  # edges strictly increase because count < vocab_size
    return ids.astype(np.int64), np.arange(count, dtype=np.int64)


# --- distances --------------------------------------------------------------------------------


def knn_distances(row: np.ndarray, word_id: int, ks: Sequence[int] = K_VALUES) -> np.ndarray:
    """Distance from the word to its k-th nearest other word, for each k (NaN when k >= |W|)."""
    others = np.delete(row, word_id)
    out = np.full(len(ks), np.nan)
    valid = [i for i, k in enumerate(ks) if 1 <= k <= len(others)]
    if valid:
        kth = np.array([ks[i] - 1 for i in valid])
        part = np.partition(others, kth)
        out[valid] = part[kth]
    return out


# --- estimators and exact values ---------------------------------------------------------------


def empirical_statistics(outputs: np.ndarray, word_id: int):
    """The paper's estimators from draws of M(w): (count of M(w) = w, number of distinct outputs)."""
    outputs = np.asarray(outputs)
    return int(np.count_nonzero(outputs == word_id)), int(len(np.unique(outputs)))


def expected_distinct(probabilities: np.ndarray, samples: int) -> float:
    """E[number of distinct outputs in ``samples`` independent draws] = sum_i 1 - (1 - p_i)^samples."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        missed = np.exp(samples * np.log1p(-p))  # (1 - p)^samples, accurate for tiny p
    return float(np.sum(1.0 - missed))


def distinct_count_deviation(probabilities: np.ndarray, samples: int, failure_rate: float, runs: int = 1) -> float:
    """t such that P(|mean distinct - E[distinct]| >= t) <= failure_rate, for the mean over ``runs``
    independent estimates of ``samples`` draws each (Bernstein, rigorous).

    The indicators "word i was drawn at least once" are negatively associated (balls into bins,
    Dubhashi & Ranjan 1998), also across independent runs, so Bernstein's inequality for
    independent [0, 1] variables applies to their sum with the variance bound
    runs * sum_i q_i (1 - q_i), q_i = (1 - p_i)^samples. Used by the tests to say how far an S_w
    estimate may fall from its expectation.
    """
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        q = np.exp(samples * np.log1p(-p))
    variance = runs * float(np.sum(q * (1.0 - q)))
    log_term = math.log(2.0 / failure_rate)
    # solve t^2 / (2 (variance + t/3)) = log_term for the deviation t of the sum over runs
    total = log_term / 3.0 + math.sqrt((log_term / 3.0) ** 2 + 2.0 * variance * log_term)
    return total / runs


def exact_distribution_of(mech, row: np.ndarray, word_id: int) -> Optional[np.ndarray]:
    """The exact output distribution of ``mech`` for input ``word_id`` over the vocabulary, or None: the
    mechanism's own ``exact_distribution`` (``row`` holds d(w, .) in the mechanism's metric, from
    :func:`distance_row`, itself exactly 0). None for the mechanisms without a closed form (their
    statistics are estimated by sampling)."""
    exact = getattr(mech, "exact_distribution", None)
    return None if exact is None else exact(row, word_id)


# --- exact nearest-word search with candidate pruning ------------------------------------------


FULL_FRACTION = {"blas": 0.5, "int8": 0.12}  # largest share of the vocabulary worth a pruned (BLAS) search


class CandidatePrunedSearch:
    """Exact nearest vocabulary word for noisy points drawn around one word w.

    Why it is exact: let z = phi(w) + noise be a noisy point, l = |z - phi(w)|, and r the distance
    from z to the closest of a few "seed" words (w itself and its nearest neighbours), so r <= l.
    The word u nearest to z satisfies |z - u| <= r, hence by the triangle inequality
    d(w, u) <= |z - phi(w)| + |z - u| <= l + r. Only words inside that ball around w can win, so
    searching them with the blocked BLAS brute force (:class:`ExactNearest` with ``search="blas"``)
    gives the same answer as searching the whole vocabulary. The ball is widened by a small slack
    (``slack_abs`` plus a relative ``slack_rel``) so that words within float32 rounding of the winner
    are still searched: the result equals plain exact search up to float32 near-ties (BLAS ranks in
    float32; the full search, int8-prefiltered on CPUs with AVX-512 VNNI, ranks in float64).

    Why it helps: one distance row per word (already needed for Fig. 1) sorts the vocabulary by
    d(w, .) once; at large epsilon (small noise) the ball holds a tiny share of the vocabulary.
    At small epsilon the ball covers most of it and the plain full search is used instead
    (``full_fraction``): one pass over the distance row detects that before anything is sorted,
    so the pruning costs next to nothing where it cannot help. By default the share is 0.5 when the
    full search is BLAS and 0.12 when it is the int8 search (``ExactNearest.search_method()``), which
    scans a row ~4x faster than the BLAS prefix search (benchmarks/results/madlib.md).
    """

    def __init__(self, vectors: np.ndarray, sqnorms: np.ndarray, word_id: int, row: np.ndarray,
                 seeds: int = 16, group_size: int = 128, full_fraction: float | None = None,
                 slack_abs: float = 1e-2, slack_rel: float = 1e-4):
        self.vectors = vectors
        self.sqnorms = sqnorms
        self.word_id = int(word_id)
        self.row = row
        self.order = None  # the vocabulary sorted by distance to w, made on first use (large noise never needs it)
        self.sorted_distances = None
        self.base = np.asarray(vectors[word_id], dtype=np.float64)
        seeds = max(1, min(seeds, len(row)))
        seed_ids = np.argpartition(row, seeds - 1)[:seeds] if seeds < len(row) else np.arange(len(row))
        if self.word_id not in seed_ids:  # only when `seeds` or more other words sit exactly on w
            seed_ids = np.concatenate([[self.word_id], seed_ids[:-1]])
        self.seed_vectors = np.asarray(vectors[seed_ids], dtype=np.float64)
        self.group_size = int(group_size)
        self.full_fraction = None if full_fraction is None else float(full_fraction)
        self.slack_abs = float(slack_abs)
        self.slack_rel = float(slack_rel)
        self.searched_rows = 0  # vocabulary rows scanned, summed over queries (for reports)
        self.queries = 0

    def candidate_radius(self, points: np.ndarray) -> np.ndarray:
        """Per point: the radius around w outside which no word can be the nearest one."""
        z = np.asarray(points, dtype=np.float64)
        to_word = np.linalg.norm(z - self.base, axis=1)
        to_seeds = np.sqrt(np.maximum(
            (z * z).sum(1)[:, None] - 2.0 * z @ self.seed_vectors.T + (self.seed_vectors ** 2).sum(1)[None, :], 0.0))
        best_seed = np.minimum(to_seeds.min(axis=1), to_word)
        return (to_word + best_seed) * (1.0 + self.slack_rel) + self.slack_abs

    def query(self, points: np.ndarray, full_search) -> np.ndarray:
        """Nearest word ids for ``points`` (noisy vectors around w); ``full_search`` is the fallback."""
        points = np.asarray(points, dtype=np.float32)
        n_vocab = len(self.vectors)
        radius = self.candidate_radius(points)
        fraction = self.full_fraction
        if fraction is None:
            method = getattr(full_search, "search_method", None)
            fraction = FULL_FRACTION[method() if method else "blas"]
        limit = int(fraction * n_vocab)
        if np.count_nonzero(self.row <= radius.min()) > limit:  # large noise: no group can be pruned
            self.searched_rows += n_vocab * len(points)
            self.queries += len(points)
            return full_search.query(points)
        if self.order is None:
            self.order = np.argsort(self.row, kind="stable")
            self.sorted_distances = self.row[self.order]
        by_radius = np.argsort(radius)
        counts = np.searchsorted(self.sorted_distances, radius, side="right")
        pruned_max = int(counts[counts <= limit].max()) if (counts <= limit).any() else 0
        if pruned_max:
            prefix_ids = self.order[:pruned_max]
            prefix_vectors = np.ascontiguousarray(self.vectors[prefix_ids])
            prefix_sqnorms = np.ascontiguousarray(self.sqnorms[prefix_ids])
        out = np.empty(len(points), dtype=np.int64)
        unpruned = []
        for start in range(0, len(points), self.group_size):
            group = by_radius[start:start + self.group_size]
            needed = int(counts[group].max())
            if needed > limit:
                unpruned.append(group)
            else:
                # BLAS: an int8 index per prefix would cost more than the search it speeds up
                local = ExactNearest(prefix_vectors[:needed], prefix_sqnorms[:needed], search="blas").query(points[group])
                out[group] = prefix_ids[local]
                self.searched_rows += needed * len(group)
        if unpruned:  # one full search for all of them: large batches keep BLAS efficient
            rest = np.concatenate(unpruned)
            out[rest] = full_search.query(points[rest])
            self.searched_rows += n_vocab * len(rest)
        self.queries += len(points)
        return out


# --- one word, every epsilon ---------------------------------------------------------------------


MAX_SAMPLES = 100_000  # draws per word at most: the paper draws 1,000; 100,000 x 300 dimensions is 240 MB of noise per word


class WordCalibrator:
    """Statistics for one word at every epsilon: the unit of work the Beam job shards.

    ``mechanisms`` maps epsilon to a mechanism object of textdp.mechanisms (any registered mechanism),
    built once per worker. Mechanisms other than Madlib are sampled through their own
    ``privatize_ids``; the exact N_w and S_w are added where a closed form exists
    (:func:`exact_distribution_of`). For Madlib the draws use the mechanism's own noise (``noisy_vectors``) and its own
    nearest-neighbour method; with ``nn='exact'`` and ``prune=True`` the exact search is
    restricted to the words that can win (:class:`CandidatePrunedSearch`, same answers).
    Sampling all ``samples`` draws for a word and epsilon is one vectorised call.
    """

    def __init__(self, artifact, mechanism: str, mechanisms: Dict[float, object], samples: int = DEFAULT_SAMPLES,
                 prune: bool = True, ks: Sequence[int] = K_VALUES):
        from textdp.mechanisms import mechanism_class

        mechanism_class(mechanism)  # any mechanism reference; TextdpError (a ValueError) if unknown
        if samples < 1:
            raise ValueError("samples must be >= 1")
        self.artifact = artifact
        self.mechanism = mechanism
        self.mechanisms = dict(sorted(mechanisms.items()))
        self.samples = int(samples)
        self.prune = bool(prune)
        self.ks = tuple(ks)
        # Madlib is Euclidean; a TEM table may be angular. The distance row (TEM's closed form and
        # the k-NN distances) is taken in the mechanism's own metric.
        metrics = {getattr(m, "metric", "euclidean") for m in self.mechanisms.values()}
        if len(metrics) != 1:
            raise ValueError("all mechanisms of one calibration must share a metric")
        self.metric = metrics.pop()

    @staticmethod
    def prunes_search(mechanism: str, nn: Optional[str], prune: bool) -> bool:
        """Whether the draws of ``mechanism`` restrict their exact search to the words that can be nearest
        (:class:`CandidatePrunedSearch`): Madlib's noise with ``nn='exact'`` and ``prune``; every other
        mechanism runs its own ``privatize_ids`` (the class's ``CALIBRATE_PRUNED_SEARCH``). Calibrate's report
        states exactly this."""
        from textdp.mechanisms import mechanism_class

        return mechanism_class(mechanism).CALIBRATE_PRUNED_SEARCH and bool(prune) and nn == "exact"

    def _draws(self, mech, word_id: int, row: np.ndarray, rng: np.random.Generator, search_state: dict):
        ids = np.full(self.samples, word_id, dtype=np.int64)
        if self.prunes_search(self.mechanism, getattr(mech, "nn", None), self.prune):
            if "search" not in search_state:
                search_state["search"] = CandidatePrunedSearch(
                    self.artifact.vectors, self.artifact.sqnorms, word_id, row)
            search = search_state["search"]
            before = search.searched_rows
            outputs = search.query(mech.noisy_vectors(ids, rng), mech.nearest)
            return outputs, (search.searched_rows - before) / (self.samples * len(self.artifact.vectors))
        searched = 1.0 if getattr(mech, "nn", None) == "exact" else float("nan")
        return released_ids(mech, ids, rng, len(self.artifact.vectors)), searched

    def calibrate(self, word_id: int, rng: np.random.Generator) -> List[dict]:
        """One row per epsilon (plain Python values, ready for Parquet)."""
        word_id = int(word_id)
        row = distance_row(self.artifact.vectors, word_id, metric=self.metric)
        knn = knn_distances(row, word_id, self.ks)
        knn_columns = {f"knn_distance_k{k}": (None if math.isnan(d) else float(d)) for k, d in zip(self.ks, knn)}
        search_state: dict = {}
        rows = []
        for epsilon, mech in self.mechanisms.items():
            outputs, searched = self._draws(mech, word_id, row, rng, search_state)
            same, distinct = empirical_statistics(outputs, word_id)
            record = {
                "word_id": word_id,
                "word": self.artifact.words[word_id],
                "frequency_rank": word_id + 1,
                "epsilon": float(epsilon),
                "samples": self.samples,
                "n_w": same / self.samples,
                "n_w_count": same,
                "s_w": distinct,
                "n_w_exact": None,
                "s_w_exact": None,
                "tem_gamma": None,
                "searched_fraction": None if math.isnan(searched) else float(searched),
            }
            probs = exact_distribution_of(mech, row, word_id)
            if probs is not None:
                record.update(n_w_exact=float(probs[word_id]), s_w_exact=expected_distinct(probs, self.samples))
            record.update(mech.calibration_fields() if hasattr(mech, "calibration_fields") else {})
            record.update(knn_columns)
            rows.append(record)
        return rows


# --- summaries and the recommendation --------------------------------------------------------------


def describe_values(values: Iterable[float], percentiles: Sequence[int] = SUMMARY_PERCENTILES) -> dict:
    """min, percentiles, max and mean of a statistic over words (None values are skipped)."""
    arr = np.array([v for v in values if v is not None], dtype=np.float64)
    if arr.size == 0:
        return {"count": 0}
    out = {"count": int(arr.size), "min": float(arr.min())}
    out.update({f"p{p}": float(np.percentile(arr, p)) for p in percentiles})
    out.update({"max": float(arr.max()), "mean": float(arr.mean())})
    return out


def summarise_statistics(rows: Sequence[dict]) -> Dict[str, dict]:
    """Per epsilon (keyed by its string form): distribution of N_w, S_w and the exact TEM values."""
    by_eps: Dict[float, List[dict]] = {}
    for row in rows:
        by_eps.setdefault(float(row["epsilon"]), []).append(row)
    out = {}
    for eps in sorted(by_eps):
        group = by_eps[eps]
        entry = {"words": len(group),
                 "n_w": describe_values(r["n_w"] for r in group),
                 "s_w": describe_values(r["s_w"] for r in group)}
        if any(r.get("n_w_exact") is not None for r in group):
            entry["n_w_exact"] = describe_values(r.get("n_w_exact") for r in group)
            entry["s_w_exact"] = describe_values(r.get("s_w_exact") for r in group)
        searched = [r.get("searched_fraction") for r in group if r.get("searched_fraction") is not None]
        if searched:
            entry["mean_searched_fraction"] = float(np.mean(searched))
        out[f"{eps:g}"] = entry
    return out


def knn_distance_percentiles(rows: Sequence[dict], ks: Sequence[int] = K_VALUES,
                             percentiles: Sequence[int] = DISTANCE_PERCENTILES) -> dict:
    """Fig. 1: percentiles over sampled words of the distance to the k-th nearest word, per k."""
    per_word = {}
    for row in rows:
        per_word.setdefault(row["word_id"], row)
    table = {}
    for p in percentiles:
        table[str(p)] = []
    kept_k = []
    for k in ks:
        values = [r.get(f"knn_distance_k{k}") for r in per_word.values()]
        values = np.array([v for v in values if v is not None], dtype=np.float64)
        if values.size == 0:
            continue
        kept_k.append(int(k))
        for p in percentiles:
            table[str(p)].append(float(np.percentile(values, p)))
    return {"k": kept_k, "percentiles": table, "words": len(per_word),
            "definition": ("distance (the mechanism's metric: Euclidean for Madlib, the neighbour table's for TEM) "
                           "from a sampled word to its k-th nearest other vocabulary word")}


def recommend(rows: Sequence[dict], max_nw: Optional[float] = 0.5, min_sw: Optional[float] = 50,
              coverage: float = 0.99, use_exact: bool = False, exact_label: str = "exact TEM values") -> dict:
    """The largest epsilon whose worst-case targets hold for at least ``coverage`` of the words.

    A word meets the targets at epsilon when N_w <= max_nw and S_w >= min_sw (a target set to
    None is not checked). Larger epsilon means less noise, so N_w grows with epsilon. S_w usually
    shrinks, but not always at very small epsilon: when the noise dwarfs every distance in the
    embedding, the nearest word to a noisy point is one of the "hub" words on the outside of the
    vocabulary's cloud, whatever the input, and S_w falls again. So a smaller epsilon can fail a
    S_w target that a larger one meets; the recommendation is still the largest epsilon meeting
    the targets (the issue's rule) and the message names the smaller epsilons that fail and why.
    ``use_exact`` judges TEM by its exact values instead of the estimates.
    """
    if not 0 < coverage <= 1:
        raise ValueError("coverage must be in (0, 1]")
    if max_nw is None and min_sw is None:
        raise ValueError("give at least one target (max_nw or min_sw)")
    nw_key, sw_key = ("n_w_exact", "s_w_exact") if use_exact else ("n_w", "s_w")
    by_eps: Dict[float, List[dict]] = {}
    for row in rows:
        by_eps.setdefault(float(row["epsilon"]), []).append(row)
    per_eps = []
    for eps in sorted(by_eps):
        group = by_eps[eps]
        nw = np.array([r[nw_key] for r in group], dtype=np.float64)
        sw = np.array([r[sw_key] for r in group], dtype=np.float64)
        nw_ok = nw <= max_nw if max_nw is not None else np.ones(len(group), bool)
        sw_ok = sw >= min_sw if min_sw is not None else np.ones(len(group), bool)
        share = float(np.mean(nw_ok & sw_ok))
        per_eps.append({"epsilon": eps, "words": len(group), "share_meeting": share,
                        "share_nw_ok": float(np.mean(nw_ok)), "share_sw_ok": float(np.mean(sw_ok)),
                        "worst_n_w": float(nw.max()), "worst_s_w": float(sw.min()),
                        "meets": share >= coverage})
    meeting = [e["epsilon"] for e in per_eps if e["meets"]]
    recommended = max(meeting) if meeting else None
    smaller_failing = [e for e in per_eps if recommended is not None and e["epsilon"] < recommended and not e["meets"]]
    targets = []
    if max_nw is not None:
        targets.append(f"N_w <= {max_nw:g}")
    if min_sw is not None:
        targets.append(f"S_w >= {min_sw:g}")
    target_text = " and ".join(targets) + f" for at least {coverage:.4g} of the words"
    basis = exact_label if use_exact else "estimates from sampling"
    if recommended is None:
        message = (f"No tested epsilon meets {target_text} (judged on {basis}): test other epsilons "
                   "(usually smaller ones) or relax the targets.")
    else:
        message = f"Recommended epsilon: {recommended:g}, the largest tested epsilon meeting {target_text} (judged on {basis})."
        if recommended == per_eps[-1]["epsilon"]:
            message += " It is the largest epsilon tested: larger ones may meet the targets too."
    if smaller_failing:
        detail = ", ".join(f"{e['epsilon']:g} (share meeting {e['share_meeting']:.3f}; N_w ok {e['share_nw_ok']:.3f}, "
                           f"S_w ok {e['share_sw_ok']:.3f})" for e in smaller_failing)
        message += (f" Note: smaller epsilon(s) {detail} fail. At very small epsilon the noise dwarfs the embedding's "
                    "distances and outputs concentrate on a few 'hub' words, which lowers S_w; near a threshold it "
                    "can also be sampling noise.")
    return {"recommended_epsilon": recommended, "targets": {"max_nw": max_nw, "min_sw": min_sw, "coverage": coverage},
            "basis": basis, "per_epsilon": per_eps, "smaller_epsilons_failing": [e["epsilon"] for e in smaller_failing],
            "message": message}


DEFINITIONS = {
    "N_w": "Pr[M(w) = w], the probability that a word is released unchanged; estimated as the share of the "
           "draws of M(w) that return w (small is private).",
    "S_w": "the number of distinct words among the draws of M(w), the paper's estimate of the effective "
           "support of M(w) (large is private); never more than the number of draws.",
    "n_w_exact": "P(w) from the mechanism's closed form, for a mechanism that has one (its exact_distribution; "
                 "TEM: P(i) ~ exp(-epsilon * min(d(w,i), gamma) / 2)); empty otherwise.",
    "s_w_exact": "the expected number of distinct words in the same number of draws, "
                       "sum_i 1 - (1 - P(i))^samples: the exact expectation of the S_w estimate.",
    "coverage": "the share of sampled words for which both targets must hold; the sampled words stand for "
                "the vocabulary (stratified by frequency rank) or for the given word list.",
    "k-NN distance": "distance from a sampled word to its k-th nearest other vocabulary word (Fig. 1), in the "
                     "mechanism's metric (Euclidean for Madlib).",
}


def build_summary(rows: Sequence[dict], *, mechanism, epsilons: Sequence[float], samples: int,
                  artifact_info: dict, nn_statement: str, parameters: dict, words_info: dict, randomness: str,
                  max_nw: Optional[float], min_sw: Optional[float], coverage: float,
                  privacy_statements: Dict[float, dict], created_utc: str = "") -> dict:
    """summary.json: per epsilon the distribution of N_w and S_w, Fig. 1 percentiles, the recommendation."""
    use_exact = bool(rows) and all(r.get("n_w_exact") is not None for r in rows)
    from textdp.mechanisms import mechanism_class

    cls = mechanism_class(mechanism)  # any mechanism reference; the summary shows its class's name
    label = cls.exact_label()
    recommendation = recommend(rows, max_nw=max_nw, min_sw=min_sw, coverage=coverage, use_exact=use_exact,
                               exact_label=label)
    chosen = recommendation["recommended_epsilon"]
    return {
        "job": "calibrate",
        "created_utc": created_utc,
        "mechanism": cls.name,
        "parameters": parameters,
        "nn_statement": nn_statement,
        "artifact": artifact_info,
        "epsilons": [float(e) for e in sorted(epsilons)],
        "samples": int(samples),
        "words": words_info,
        "randomness": randomness,
        "statistics": summarise_statistics(rows),
        "knn_distances": knn_distance_percentiles(rows),
        "recommendation": recommendation,
        "privacy_statement": privacy_statements.get(chosen) if chosen is not None else None,
        "definitions": DEFINITIONS,
    }
