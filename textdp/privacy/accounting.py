"""Privacy accounting for the LAC pipeline: what the Localizer guarantees, and what amplification adds.

Pure arithmetic, no Beam. Every number here comes from a named, published result, and every
function that returns an amplified epsilon also says whether that result's hypotheses hold.

1. Local guarantee (the Localizer). Madlib and TEM are epsilon*d-private (metric DP): a token costs
   ``epsilon * d(w, w')`` and a record of words w_1..w_l costs ``epsilon * sum_i d(w_i, w_i')``
   (Feyisetan et al. 2020; Carvalho et al., Thm. 4.1). Records are compared word for word, so
   only records with the same number of words are neighbours: the word count (and the punctuation
   and layout, which privatize copies) is released as it is.
2. Pure local DP over a finite vocabulary. d(w, w') <= diam(W), so every token is
   ``epsilon_0 = epsilon * diam(W)``-LDP, and a record of l words ``l * epsilon_0``-LDP (basic
   composition). For TEM every score is -min(d(w, i), gamma), which lies in [-gamma, 0]; the
   proof of Thm. 4.1 (Eq. 4.2, two factors exp(epsilon/2 * sensitivity)) then gives sensitivity
   <= min(d(w, w'), gamma). Lemma 4.1 itself only states d(w, w'); the gamma cap follows from the
   score range, so TEM's token epsilon_0 is ``epsilon * min(diam(W), gamma)``.
3. Poisson sub-sampling: an epsilon-DP mechanism (neighbours: one record added or removed) run on
   a sample that keeps each record independently with probability q is
   ``ln(1 + q (e^epsilon - 1))``-DP (Li, Qardaji and Su 2012, Thm. 1; Balle, Barthe and Gaboardi
   2018). Its hypothesis does not hold for released locally privatized records, so
   ``amplification_report`` reports the number but does not claim it (see docs/lac.md).
4. Shuffling: Feldman, McMillan and Talwar, "Hiding Among the Clones" (FOCS 2021), Thm. 3.1.
   See ``shuffle_epsilon``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from textdp.privacy.statements import FLOATING_POINT_STATEMENT, seed_statement, shuffle_claim_statement, subsample_statement
from textdp.search.geometry import DiameterBounds, diameter_bounds  # noqa: F401  (accounting's bound on the diameter)

DEFAULT_DELTA = 1e-6
# The largest --delta accepted: an (epsilon, delta) guarantee lets a record be released as it is with probability
# about delta, so delta must be far below 1/n; above 1e-3 it is at most 1/n only for runs of at most 1,000 records,
# and a delta above 1/n for the run's n withholds the claim (``amplification_report``; docs/lac.md).
MAX_DELTA = 1e-3
# groups of authors: {word counts: authors}, or a list of (word counts, authors) pairs
ShapeCounts = Union[Dict[Tuple[int, ...], int], Iterable[Tuple[Tuple[int, ...], int]]]


# --- 1 and 2: the local guarantee -----------------------------------------------------------


def token_guarantee(epsilon: float, distance: float) -> float:
    """Metric-DP cost of one token: epsilon * d(w, w')."""
    _check_epsilon(epsilon)
    return float(epsilon) * float(distance)


def record_guarantee(epsilon: float, distances: Iterable[float]) -> float:
    """Metric-DP cost of a record against a same-length record: epsilon * sum_i d(w_i, w_i')."""
    _check_epsilon(epsilon)
    return float(epsilon) * float(sum(distances))


def mechanism_token_epsilon0(mechanism, vectors: np.ndarray, oov_policy: str = "random"):
    """epsilon_0 of one token for any mechanism object of textdp.mechanisms, and the diameter used.

    The diameter is measured in the metric of the mechanism's own guarantee:
    ``diameter_bounds(mechanism.metric_points(vectors)).upper`` (Euclidean for Madlib, the table's
    metric for TEM, d_RM for Mahalanobis, ...), then ``mechanism.token_epsilon0(diameter)``. An
    out-of-vocabulary word released by the ``random`` or ``unk`` policy carries no information about the
    word (epsilon 0), so it does not raise the bound; ``keep`` releases the word itself, so inf.
    Returns (epsilon_0, DiameterBounds).
    """
    bounds = diameter_bounds(_MetricRows(mechanism, vectors))
    if mechanism.parameters().get("metric") == "angular" and bounds.upper > 2.0:  # unit directions: at most 2 apart
        bounds = dataclasses.replace(bounds, upper=2.0, method=bounds.method + "; 2 for unit directions")
    if oov_policy == "keep":
        return math.inf, bounds
    return float(mechanism.token_epsilon0(bounds.upper)), bounds


class _MetricRows:
    """Row blocks of ``mechanism.metric_points(vectors)`` without materialising the whole mapped matrix."""

    def __init__(self, mechanism, vectors):
        self.mechanism, self.vectors = mechanism, vectors
        self.shape = vectors.shape

    def __len__(self):
        return len(self.vectors)

    def __getitem__(self, item):
        if isinstance(item, (int, np.integer)):  # one row: map it as a 1-row block
            return self.mechanism.metric_points(np.asarray(self.vectors[item:item + 1]))[0]
        return self.mechanism.metric_points(np.asarray(self.vectors[item]))


def record_epsilon0(token_eps0: float, tokens: int) -> float:
    """Basic composition: a record (or an author's records) of ``tokens`` words is tokens*eps0-LDP."""
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    return 0.0 if tokens == 0 else float(token_eps0) * int(tokens)


# --- 3: Poisson sub-sampling ----------------------------------------------------------------


def poisson_subsampling_epsilon(epsilon: float, rate: float) -> float:
    """ln(1 + q (e^epsilon - 1)): Li, Qardaji and Su (2012), Thm. 1; Balle et al. (2018), Thm. 8.

    Hypothesis: the mechanism run on the sample is epsilon-DP for neighbouring datasets that differ
    by one record added or removed, and the output does not reveal which records were sampled.
    Special cases: q = 1 gives epsilon; q -> 0 gives 0; for small epsilon it is about q*epsilon.
    Computed with log1p/expm1 so that large epsilon does not overflow.
    """
    if not 0 < rate <= 1:
        raise ValueError("the sub-sampling rate must be in (0, 1]")
    if epsilon < 0:
        raise ValueError("epsilon must be >= 0")
    if math.isinf(epsilon):
        return math.inf
    if epsilon > 700:  # e^epsilon overflows: ln(q e^eps (1 - e^-eps) + 1) = eps + ln q + ln(1 - e^-eps + e^-eps/q)
        return epsilon + math.log(rate) + math.log1p(-math.exp(-epsilon) + math.exp(-epsilon) / rate)
    return math.log1p(rate * math.expm1(epsilon))


# --- 4: shuffling -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShuffleBound:
    """The result of Feldman-McMillan-Talwar Thm. 3.1 for (epsilon_0, n, delta)."""

    epsilon0: float
    n: int
    delta: float
    condition_max_epsilon0: float  # the theorem applies when epsilon0 <= this
    valid: bool                    # the theorem's condition holds
    epsilon: Optional[float]       # the shuffled (epsilon, delta)-DP epsilon, None if not valid
    amplified: bool                # valid and epsilon < epsilon0

    def to_dict(self) -> dict:
        return asdict(self)


def shuffle_condition(n: int, delta: float) -> float:
    """Largest epsilon_0 for which the closed form is claimed: ln(n / (16 ln(4/delta))).

    Thm. 3.1 as published states ``epsilon_0 <= ln(n / (16 ln(2/delta)))``; the authors' reference
    implementation (apple/ml-shuffling-amplification, ``closedformanalysis``) checks the stricter
    ``ln(n / (16 ln(4/delta)))``. We require the stricter one, which implies the other.
    Returns -inf when n is too small for any epsilon_0.
    """
    _check_delta(delta)
    inner = n / (16.0 * math.log(4.0 / delta))
    return math.log(inner) if inner > 0 else -math.inf


def shuffle_epsilon(epsilon0: float, n: int, delta: float = DEFAULT_DELTA) -> ShuffleBound:
    """Amplification by shuffling, Feldman, McMillan and Talwar, FOCS 2021, Thm. 3.1.

    Setting: n users, each report produced by an epsilon_0-DP local randomizer (pure, replacement
    neighbours), the reports released in a uniformly random order. Then for delta in [0, 1] with
    epsilon_0 <= ln(n / (16 ln(2/delta))) the shuffled output is (epsilon, delta)-DP with

        epsilon <= ln(1 + (e^e0 - 1)/(e^e0 + 1) * (8 sqrt(e^e0 ln(4/delta)) / sqrt(n) + 8 e^e0 / n)).

    The authors' reference implementation evaluates the factor (e^e0 - 1)/(e^e0 + 1) =
    (1 - e^-e0)/(1 + e^-e0) as (1 - e^-e0)/(1 + e^(-e0 - ln(1 + a + c))), with a and c the two
    terms in the bracket, which is slightly larger. We return the larger of the two values and
    check the stricter validity condition (``shuffle_condition``), so the number is never below
    either reading of the theorem. Asymptotically epsilon = O((1 - e^-e0) sqrt(e^e0 ln(1/delta) / n))
    (the paper's abstract); for e0 -> 0 it tends to 0.
    """
    if epsilon0 < 0:
        raise ValueError("epsilon0 must be >= 0")
    if n < 1:
        raise ValueError("n must be >= 1")
    limit = shuffle_condition(n, delta)
    if not epsilon0 <= limit:
        return ShuffleBound(float(epsilon0), int(n), float(delta), limit, False, None, False)
    e0 = float(epsilon0)
    a = 8.0 * math.sqrt(math.exp(e0) * math.log(4.0 / delta)) / math.sqrt(n)
    c = 8.0 * math.exp(e0) / n
    stated = math.log1p(math.tanh(e0 / 2.0) * (a + c))  # (e^x - 1)/(e^x + 1) = tanh(x/2)
    reference = math.log1p(-math.expm1(-e0) / (1.0 + math.exp(-e0 - math.log1p(a + c))) * (a + c))
    epsilon = max(stated, reference)
    return ShuffleBound(e0, int(n), float(delta), limit, True, epsilon, epsilon < e0)


# --- the summary section ----------------------------------------------------------------------


def _groups(shape_counts) -> list:
    items = shape_counts.items() if isinstance(shape_counts, dict) else shape_counts
    return [(tuple(shape), int(count)) for shape, count in items]


def shuffle_by_shape(token_eps0: float, shape_counts: ShapeCounts, delta: float = DEFAULT_DELTA) -> dict:
    """Apply Thm. 3.1 to each group of authors whose released data has the same shape.

    Everything about an author's records except the privatized words is released as it is: the
    word counts, the layout (punctuation, spacing, case patterns) and the fields that are not
    privatized. So an author can only hide among the authors whose records look the same in all of
    that (``shape_counts``: one entry per such group, the sorted word counts of the group's records
    and the group's number of authors; one record per author when there is no author field; two
    groups may have the same word counts and differ in layout or other fields). Within a group of n_s authors each author's data
    is (total words * token_eps0)-LDP,
    and the theorem is applied with that n_s and epsilon_0. The guarantee for everyone is the worst
    group's.
    """
    groups = []
    for shape, count in _groups(shape_counts):
        tokens = int(sum(shape))
        bound = shuffle_epsilon(record_epsilon0(token_eps0, tokens), int(count), delta)
        groups.append((shape, count, bound))
    authors = int(sum(count for _, count, _ in groups))
    amplified_authors = int(sum(count for _, count, bound in groups if bound.amplified))
    worst = None
    if groups and all(bound.amplified for _, _, bound in groups):
        worst = max(bound.epsilon for _, _, bound in groups)
    largest = max(groups, key=lambda g: g[1]) if groups else None
    return {
        "theorem": "Feldman, McMillan, Talwar, Hiding Among the Clones (FOCS 2021), Thm. 3.1",
        "delta": delta,
        "authors": authors,
        "shape_groups": len(groups),
        "largest_group_authors": int(largest[1]) if largest else 0,
        "largest_group_epsilon0": largest[2].epsilon0 if largest else None,
        "largest_group_condition_max_epsilon0": largest[2].condition_max_epsilon0 if largest else None,
        "authors_with_amplification": amplified_authors,
        "epsilon": worst,
        "claimed": worst is not None,
    }


def amplification_report(token_eps0: float, shape_counts: ShapeCounts, *,
                         shuffled: bool, delta: float = DEFAULT_DELTA,
                         subsample_rate: Optional[float] = None,
                         k_threshold: Optional[int] = None, per_author: bool = False,
                         exact_word_counts: bool = True, epsilon0_reason: Optional[str] = None) -> dict:
    """The honest "amplification" section: local guarantee, then what each Amplifier step adds.

    Plain statements accompany every number; no number is claimed unless a theorem gives it for
    these parameters. ``exact_word_counts`` False (counts estimated from the released text) also
    withholds the shuffle claim: the theorem's epsilon_0 and groups depend on the exact counts.
    ``epsilon0_reason``: why ``token_eps0`` is inf when it is (``statements.unbounded_epsilon0_reason``).
    """
    max_tokens = max((sum(shape) for shape, _ in _groups(shape_counts)), default=0)
    local_eps0 = record_epsilon0(token_eps0, max_tokens)
    unit = "author" if per_author else "record"
    article = "an" if per_author else "a"
    if math.isinf(token_eps0):
        local = (f"no finite pure local-DP bound is claimed for a released word (epsilon_0 = inf: "
                 f"{epsilon0_reason or 'no finite bound over the vocabulary'}), so none for {article} {unit} either.")
    else:
        local = (f"every released word is {token_eps0:.6g}-LDP over the vocabulary (pure local DP: the mechanism's "
                 f"bound for two words as far apart as the vocabulary's diameter bound); {article} {unit} of l words "
                 f"is l x that (at most {local_eps0:.6g} here).")
    report = {
        "local": {
            "token_epsilon0": token_eps0,
            f"max_words_per_{unit}": int(max_tokens),
            f"{unit}_epsilon0": local_eps0,
            "statement": local + " Word counts and layout are released as they are.",
        },
    }
    if shuffled:
        shuffle = shuffle_by_shape(token_eps0, shape_counts, delta)
        shuffle["delta_at_most_one_over_n"] = bool(delta * shuffle["authors"] <= 1)
        if shuffle["claimed"] and not shuffle["delta_at_most_one_over_n"]:
            n = shuffle["authors"]
            shuffle["claimed"] = False
            shuffle["statement"] = (
                f"no amplification claimed: the theorem would give ({shuffle['epsilon']:.6g}, {delta:g})-DP, but "
                f"delta = {delta:g} is above 1/n = 1/{n:,} for the {n:,} {unit}{'' if n == 1 else 's'} shuffled; "
                f"such a guarantee allows about delta x n = {delta * n:.3g} {unit}s to be released as they are, so it "
                "protects no one (choose --delta at most 1/n, ideally far below it; the default is "
                f"{DEFAULT_DELTA:g}). The guarantee is the local one above.")
            shuffle["epsilon"] = None
        elif shuffle["claimed"] and not exact_word_counts:
            shuffle["claimed"] = False
            shuffle["statement"] = (
                f"no amplification claimed: with the estimated word counts the theorem would give "
                f"({shuffle['epsilon']:.6g}, {delta:g})-DP, but its epsilon_0 and groups need the exact number "
                "of privatized words per record, which this run did not record.")
            shuffle["epsilon"] = None
        elif shuffle["claimed"]:
            shuffle["statement"] = shuffle_claim_statement(shuffle["epsilon"], delta, shuffle["theorem"], unit)
        else:
            shuffle["statement"] = (
                f"no amplification claimed: the theorem needs epsilon_0 <= ln(n / (16 ln(4/delta))) and a "
                f"result below epsilon_0 for every group of {unit}s with the same shape (word counts, layout, unprivatized fields); "
                "it holds for "
                f"{shuffle['authors_with_amplification']} of {shuffle['authors']} {unit}s (the largest group has "
                f"{shuffle['largest_group_authors']} {unit}{'' if shuffle['largest_group_authors'] == 1 else 's'}, epsilon_0 "
                f"{_fmt(shuffle['largest_group_epsilon0'])}, "
                f"limit {_fmt(shuffle['largest_group_condition_max_epsilon0'])}). The shuffle still removes the "
                f"link between {unit}s and output positions, but the guarantee is the local one above.")
        report["shuffle"] = shuffle
    if subsample_rate is not None:
        formula = poisson_subsampling_epsilon(local_eps0, subsample_rate)
        report["subsample"] = {
            "rate": subsample_rate,
            "textbook_epsilon": formula,
            "claimed": False,
            "statement": subsample_statement(subsample_rate, formula),
        }
    if k_threshold is not None:
        report["k_threshold"] = {
            "k": int(k_threshold),
            "claimed": False,
            "statement": (f"released words used by fewer than {int(k_threshold)} distinct {unit}s were replaced by "
                          "a marker. This is a heuristic with no formal amplification: no theorem implemented "
                          "here covers it (Li, Qardaji and Su 2012 analyse a different, sampling-based "
                          "k-anonymization)."),
        }
    return report


# --- the Amplifier's accounting, as textdp privatize reports it -------------------------------------

SHUFFLE_ORDER_STATEMENT = (
    "records are output in a uniformly random order: each record gets an output file chosen uniformly at "
    "random (os.urandom) among a number of files fixed before any record is placed, and each file's records "
    "are written in a uniformly random order (random.SystemRandom), so a record's output file and line are "
    "uniform and independent of its input position and author")
UNSHUFFLED_ORDER_STATEMENT = (
    "no shuffle ran: records are output in the runner's order, which may follow the input order (on the local "
    "runner it usually does), so a record's output position can link it to its input position")


def amplifier_stats(records_in: int, records_out: int, shapes, fields, rare_types: int, suppressed: int,
                    removed: Sequence[str], per_author: bool, text_fields: Sequence[str],
                    shape_field: Optional[str]) -> dict:
    """What the Amplifier stage hands to the accounting: counts, shapes and fields, never text.

    ``shapes``: (shape, authors) pairs, a shape being the tuple of (words, layout) pairs of an
    author's records; only the word counts are kept here (the layouts only split the groups).
    """
    return {
        "word_counts": "exact, with the layouts, from the privatizer" if shape_field else "estimated",
        "text_fields": list(text_fields),
        "records_in": int(records_in),
        "records_out": int(records_out),
        "authors": int(sum(count for _, count in shapes)),
        "per_author": bool(per_author),
        "shape_counts": sorted([[w for w, _ in shape], int(count)] for shape, count in shapes),
        "removed_fields": sorted(set(removed) - {shape_field}),
        "remaining_fields": sorted(fields),
        "rare_word_types": int(rare_types),
        "suppressed_words": int(suppressed),
    }


def unprivatized_fields_statement(names: Sequence[str], hidden: int = 0) -> str:
    """The sentence on the fields released as they stand: ``names`` listed, and ``hidden`` more counted without their
    names (the public summary shows only identifier-like names, R9-6)."""
    parts = ([f"the field{'s' if len(names) > 1 else ''} {', '.join(names)}"] if names else []) + (
        [f"{hidden} field{'s' if hidden > 1 else ''} whose name{'s are' if hidden > 1 else ' is'} not shown"] if hidden else [])
    if not parts:
        return "the privacy statements cover the privatized text fields only; no other field remains"
    plural = len(names) + hidden > 1
    return ("the privacy statements cover the privatized text fields only; " + " and ".join(parts)
            + f" {'are released as they stand' if plural else 'is released as it stands'}, with no guarantee, "
            "and can link records to people or split them into smaller groups")


def amplification_section(stats: dict, token_eps0: float, *, shuffled: bool, delta: float,
                          subsample_rate: Optional[float], k_threshold: Optional[int],
                          seed_used: bool, diameter: Optional[dict] = None,
                          epsilon0_reason: Optional[str] = None) -> dict:
    """The amplification report from the Amplifier's ``stats`` (``amplifier_stats``) and epsilon_0.

    Every sentence in it is derived from what the stage did: the order statement from whether
    the shuffle ran, the sub-sampling and k-threshold parts only when they ran.
    """
    shapes = [(tuple(shape), count) for shape, count in stats["shape_counts"]]
    report = amplification_report(
        token_eps0, shapes, shuffled=shuffled, delta=delta, subsample_rate=subsample_rate,
        k_threshold=k_threshold, per_author=stats["per_author"],
        exact_word_counts=stats["word_counts"] != "estimated", epsilon0_reason=epsilon0_reason)
    report["local"]["word_counts"] = stats["word_counts"]
    if diameter is not None:
        report["local"]["vocabulary_diameter"] = diameter
    report["records"] = {"in": stats["records_in"], "out": stats["records_out"],
                         "dropped_by_subsampling": stats["records_in"] - stats["records_out"]}
    unprotected = sorted(set(stats["remaining_fields"]) - set(stats["text_fields"]))
    report["fields"] = {
        "removed": stats["removed_fields"], "remaining": stats["remaining_fields"],
        "released_unprivatized": unprotected,
        "statement": unprivatized_fields_statement(unprotected),
    }
    if k_threshold is not None:
        report["k_threshold"].update(rare_word_types=stats["rare_word_types"],
                                     suppressed_words=stats["suppressed_words"])
    report["order"] = SHUFFLE_ORDER_STATEMENT if shuffled else UNSHUFFLED_ORDER_STATEMENT
    report["seed"] = seed_statement(seed_used) + (
        " The shuffle and sub-sampling never use the seed (they draw from os.urandom)." if seed_used else "")
    report["numerical_precision"] = FLOATING_POINT_STATEMENT
    return report


def _fmt(value) -> str:
    return "none" if value is None else f"{value:.6g}"


def _check_epsilon(epsilon: float) -> None:
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
