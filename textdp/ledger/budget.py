"""Epsilon-mass and the admission rule, in exact arithmetic (docs/ledger.md, "Epsilon-mass").

An author's epsilon-mass in a run is epsilon times the number of word tokens released in their records (every
word the privatizer released, unknown words under --oov-policy random or unk included). Epsilon and the budget are
taken as the decimals they print as (``repr``: 0.1 is 1/10, not the binary float just above it), and masses are
summed and compared as exact fractions: "withheld exactly when the cap would be exceeded" holds with no rounding
(ten tokens at epsilon 0.1 fit a budget of 1), and two workers (or a retry) decide the same.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Dict, Iterable, List, Sequence, Tuple

Mass = Fraction


def exact(value: float) -> Fraction:
    """A float as the decimal it prints as (its shortest round-trip repr), exactly."""
    return Fraction(repr(float(value)))


def mass_of(epsilon: float, tokens: int) -> Fraction:
    return exact(epsilon) * int(tokens)


def as_pair(mass: Fraction) -> Tuple[int, int]:
    """A mass as (numerator, denominator): exact through JSON, pickling and side inputs."""
    return mass.numerator, mass.denominator


def from_pair(pair) -> Fraction:
    return Fraction(int(pair[0]), int(pair[1]))


def admit(spent: Fraction, budget, masses: Sequence[Fraction]) -> List[bool]:
    """Which of an author's records (``masses`` in the run's deterministic order) are released: each record in
    turn while spent + its mass stays <= ``budget`` (None: no cap). A record that does not fit is withheld and
    the next, smaller one may still fit (first-fit in order). Pure: the same inputs decide the same."""
    cap = None if budget is None else exact(budget)
    decided, total = [], Fraction(spent)
    for mass in masses:
        fits = cap is None or total + mass <= cap
        decided.append(fits)
        if fits:
            total += mass
    return decided


def spent_by_author(rows: Iterable[Tuple[str, float, int]]) -> Dict[str, Fraction]:
    """(author hash, epsilon, tokens) ledger rows -> each author's cumulative mass, exact."""
    spent: Dict[str, Fraction] = {}
    for author, epsilon, tokens in rows:
        spent[author] = spent.get(author, Fraction(0)) + mass_of(epsilon, tokens)
    return spent


def _quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by the nearest-rank rule (a value that occurs), of sorted ``values``."""
    import math

    index = max(0, min(len(values) - 1, math.ceil(q * len(values)) - 1))
    return values[index]


def mass_distribution(cumulative: Iterable[Fraction], budget=None) -> dict:
    """The distribution over authors of their cumulative mass (the operator's summary; nothing per author):
    authors, min, median, p95 (nearest rank), max and, with a budget, how many are at the cap (mass >= budget)."""
    masses = [Fraction(m) for m in cumulative]
    values = sorted(float(m) for m in masses)
    if not values:
        return {"authors": 0}
    out = {"authors": len(values), "min": values[0], "median": _quantile(values, 0.5), "p95": _quantile(values, 0.95),
           "max": values[-1]}
    if budget is not None:
        cap = exact(budget)
        out["at_cap"] = sum(1 for m in masses if m >= cap)
    return out
