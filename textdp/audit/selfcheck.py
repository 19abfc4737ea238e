"""The mechanism self-check, assembled: pairs -> draws -> one test per pair, direction and epsilon.

The statistics are in ``textdp.audit.stats`` (event chosen on one half of the draws,
Clopper-Pearson on the other, Bonferroni over the run), the pairs, guarantees and releases in
``textdp.audit.pairs``. This module puts them together the way the Beam job does (there, draws
are made per word in parallel and pairs are tested in parallel; here, in one process for tests and
benchmarks), and summarises the rows into the verdict a report prints.

Every pair is tested in both directions (w against w', then w' against w) at every epsilon: a
violation may show in either. The number of tests ``T = 2 x pairs x epsilons`` is fixed before
any draw, and each test runs at ``false_alarm_rate / T``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

from textdp.audit.pairs import PairSpec, TokenReleaser, guarantee_points, guarantee_row, oov_pair_bound, pair_bound
from textdp.audit.stats import directional_test, per_test_alpha, split_histograms, verdict

DEFAULT_FALSE_ALARM_RATE = 0.001


def planned_tests(pairs: int, epsilons: int) -> int:
    """Every pair, both directions, every epsilon."""
    return 2 * int(pairs) * int(epsilons)


def pair_distance(mechanism, vectors: np.ndarray, a: int, b: int) -> float:
    """d(a, b) in the guarantee's metric (float64)."""
    points = guarantee_points(mechanism, np.asarray(vectors[[int(a), int(b)]]))
    return float(np.sqrt(np.sum((points[0] - points[1]) ** 2))) if a != b else 0.0


def pair_guarantee(spec: PairSpec, mechanism, artifact, oov_policy: str, word_id: Callable) -> tuple:
    """(distance or None, claimed bound) for a pair; ``word_id(token)`` is None for an unknown word."""
    a, b = word_id(spec.a), word_id(spec.b)
    if a is not None and b is not None:
        distance = pair_distance(mechanism, artifact.vectors, a, b)
        return distance, pair_bound(mechanism, distance)
    known = a if a is not None else b
    farthest = None if known is None else float(guarantee_row(mechanism, artifact.vectors, known).max())
    return None, oov_pair_bound(oov_policy, mechanism, farthest)


def test_pair(spec: PairSpec, epsilon: float, halves_a: tuple, halves_b: tuple, draws: int, alpha_test: float,
              distance: Optional[float], bound: float) -> List[dict]:
    """Two rows (a against b, b against a) for one pair at one epsilon."""
    n_first = draws // 2
    n_second = draws - n_first
    rows = []
    for direction, first, second in (("a>b", halves_a, halves_b), ("b>a", halves_b, halves_a)):
        result = directional_test(first, second, n_first, n_second, alpha_test)
        lcb = result["lcb"]
        finite = math.isfinite(bound)
        rows.append({
            "pair_id": spec.pair_id, "kind": spec.kind, "band": spec.band, "label": spec.label,
            "word_a_id": spec.a if isinstance(spec.a, (int, np.integer)) else None,
            "word_b_id": spec.b if isinstance(spec.b, (int, np.integer)) else None,
            "epsilon": float(epsilon), "direction": direction, "distance": distance,
            "bound": bound if finite else None,
            "lcb": lcb if math.isfinite(lcb) else None,
            "estimate": result["estimate"] if math.isfinite(result["estimate"]) else None,
            "excess": (lcb - bound) if finite and math.isfinite(lcb) else None,
            "tightness": (lcb / bound) if finite and bound > 0 and math.isfinite(lcb) else None,
            "verdict": verdict(lcb, bound),
            "event_size": result["event_size"], "k_w": result["k_w"], "k_v": result["k_v"],
            "draws_per_word": int(draws), "alpha_test": float(alpha_test),
        })
    return rows


def self_check(pairs: Sequence[PairSpec], releasers: Dict[float, TokenReleaser], mechanisms: Dict[float, object],
               artifact, draws: int, false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
               seed: Optional[int] = None, oov_policy: str = "random") -> List[dict]:
    """Run the whole self-check in this process (tests, benchmarks); the Beam job does the same in parallel.

    Draws of a token are made once per epsilon and shared by every pair it belongs to.
    """
    if draws < 2:
        raise ValueError("at least 2 draws per word (one per half)")
    alpha_test = per_test_alpha(false_alarm_rate, planned_tests(len(pairs), len(releasers)))
    rows: List[dict] = []
    for epsilon in sorted(releasers):
        releaser, mechanism = releasers[epsilon], mechanisms[epsilon]
        cache: dict = {}

        def halves(token, releaser=releaser, epsilon=epsilon, cache=cache):
            key = (type(token).__name__, token)
            if key not in cache:
                rng = token_rng(seed, token, epsilon)
                cache[key] = split_histograms(releaser.release(token, draws, rng))
            return cache[key]

        for spec in pairs:
            distance, bound = pair_guarantee(spec, mechanism, artifact, oov_policy, releaser.word_id)
            rows.extend(test_pair(spec, epsilon, halves(spec.a), halves(spec.b), draws, alpha_test, distance, bound))
    return rows


def token_rng(seed: Optional[int], token, epsilon: float) -> np.random.Generator:
    """OS entropy, or (tests and benchmarks only) a generator fixed by the seed, the token and epsilon."""
    if seed is None:
        return np.random.default_rng()
    digest = hashlib.sha256(f"{type(token).__name__}:{token}".encode("utf-8")).digest()
    token_part = int.from_bytes(digest[:8], "big")
    return np.random.default_rng([int(seed), token_part, int(round(float(epsilon) * 1e6))])


# --- summary ----------------------------------------------------------------------------------------


def summarise_self_check(rows: Iterable[dict], false_alarm_rate: float, tests: int) -> dict:
    """Per epsilon and overall: pairs tested, violations, pairs without a guarantee, closeness to the bound."""
    rows = list(rows)
    by_eps: Dict[float, List[dict]] = {}
    for row in rows:
        by_eps.setdefault(float(row["epsilon"]), []).append(row)
    per_eps = {}
    violations = []
    unguarded = []
    for eps in sorted(by_eps):
        group = by_eps[eps]
        tight = [r["tightness"] for r in group if r.get("tightness") is not None]
        bad = [r for r in group if r["verdict"] == "violation"]
        open_ = [r for r in group if r["verdict"] == "no guarantee"]
        violations += bad
        unguarded += open_
        per_eps[f"{eps:g}"] = {
            "pairs": len({r["pair_id"] for r in group}),
            "tests": len(group),
            "violations": len(bad),
            "no_guarantee_leaks": len(open_),
            "max_excess": max((r["excess"] for r in group if r.get("excess") is not None), default=None),
            "median_tightness": float(np.median(tight)) if tight else None,
            "max_tightness": float(np.max(tight)) if tight else None,
        }
    worst = sorted(violations, key=lambda r: -(r["excess"] or 0.0))[:20]
    if violations:
        status = "violation"
        message = (f"VIOLATION: {len(violations)} test(s) found an event whose probability ratio provably "
                   f"exceeds the mechanism's guarantee (each test at level {false_alarm_rate:g}/{tests}; a correct "
                   f"mechanism shows any violation in this run with probability at most {false_alarm_rate:g}). "
                   "The worst pairs are listed below: this implementation does not deliver the guarantee it "
                   "prints.")
    elif unguarded:
        status = "no guarantee"
        message = (f"NO GUARANTEE: {len(unguarded)} test(s) tell two inputs apart where the run claims no bound "
                   "(e.g. --oov-policy keep releases unknown words unchanged); no claimed guarantee was violated.")
    else:
        status = "pass"
        message = (f"Pass: no tested pair exceeded its guarantee ({len(rows)} tests; a correct mechanism would "
                   f"raise a false alarm with probability at most {false_alarm_rate:g}). A pass is evidence, not "
                   "proof: see how close the lower bounds come to the guarantee (tightness) for the test's power.")
    return {"status": status, "message": message, "false_alarm_rate": float(false_alarm_rate),
            "planned_tests": int(tests), "tests_run": len(rows), "per_epsilon": per_eps,
            "worst_violations": [_brief(r) for r in worst],
            "no_guarantee_examples": [_brief(r) for r in unguarded[:10]]}


def _brief(row: dict) -> dict:
    keys = ("pair_id", "label", "epsilon", "direction", "distance", "bound", "lcb", "excess", "k_w", "k_v")
    return {k: row.get(k) for k in keys}
