"""Strict JSON for the documents textdp writes (summaries, run records), Beam-free; in the mechanisms wing, whose
``_check_declared_epsilon`` is its first user (every wing above and transforms/ may import it).

``strict_json`` is the one conversion every summary goes through before ``json.dumps(..., allow_nan=False)``
(``transforms.io.write_json`` uses it): non-finite floats are written as strings and numpy scalars as the Python
numbers they hold. ``json_problem`` says which key of a document would still fail that dump, so that a launcher
can refuse a mechanism whose ``parameters()`` or ``privacy_statement()`` cannot be written before any worker runs
(round 8, R8-9)."""

from __future__ import annotations

import json
import math
from typing import Optional


def strict_json(value):
    """``value`` with every non-finite float written as a string ("inf", "-inf", "nan"), and every numpy scalar
    as the Python number it holds: JSON has no Infinity or NaN, and a summary must parse with any JSON reader
    (an epsilon_0 of a run that keeps unknown words is unbounded, for instance)."""
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        value = item()  # a numpy scalar (np.float32 epsilon, np.int64 count): the number it holds
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: strict_json(entry) for key, entry in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(entry) for entry in value]
    return value


def dumps_strict(document, **kwargs) -> str:
    """``json.dumps`` of ``document`` after ``strict_json``, with ``allow_nan=False``: what a summary writer writes."""
    return json.dumps(strict_json(document), allow_nan=False, **kwargs)


def json_problem(document, where: str = "") -> Optional[str]:
    """None when ``dumps_strict(document)`` succeeds; else where it fails, e.g. "key 'notes' holds a set"
    (the first such key, by a depth-first walk; the value itself is never shown)."""
    try:
        dumps_strict(document)
        return None
    except (TypeError, ValueError, RecursionError):
        pass
    return _first_problem(strict_json(document), where) or (f"key {where!r} cannot be written" if where
                                                              else "it cannot be written as JSON")


def _first_problem(value, where: str) -> Optional[str]:
    if isinstance(value, dict):
        for key, entry in value.items():
            path = f"{where}.{key}" if where and isinstance(key, str) else (str(key) if not where else f"{where}.{key!r}")
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                return f"key {path!r} is a {type(key).__name__}, which JSON cannot write as a key"
            problem = _first_problem(entry, path)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for index, entry in enumerate(value):
            problem = _first_problem(entry, f"{where}[{index}]")
            if problem:
                return problem
        return None
    try:
        json.dumps(value, allow_nan=False)
        return None
    except (TypeError, ValueError):
        return f"key {where!r} holds a {type(value).__name__}, which JSON cannot write"
