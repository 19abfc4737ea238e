"""Confidence intervals for accuracies: over repeated privatizations, and over the test reviews.

Two sources of uncertainty matter and are reported separately:
* privatization randomness: the accuracy over ``repeats`` independent privatizations, as a
  Student-t 95% interval of the mean (the papers' "95% confidence interval over 5 trials"); with
  two or three repeats it is wide by construction;
* the finite test set: a Wilson 95% interval for one accuracy, and a paired bootstrap interval
  of the difference to the baseline (resampling test reviews; both models are scored on the same
  reviews, so most of the test-set noise cancels in the difference).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats


def mean_interval(values: Sequence[float], level: float = 0.95) -> dict:
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return {"mean": mean, "low": None, "high": None, "n": int(len(values))}
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    # accuracies and fractions live in [0, 1]; a t-interval from two repeats can reach past that
    return {"mean": mean, "low": max(0.0, mean - half), "high": min(1.0, mean + half), "n": int(len(values))}


def wilson_interval(successes: int, total: int, level: float = 0.95) -> dict:
    z = float(stats.norm.ppf(0.5 + level / 2))
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return {"accuracy": p, "low": centre - half, "high": centre + half, "n": int(total)}


def paired_bootstrap_delta(correct_runs: Sequence[np.ndarray], correct_baseline: np.ndarray,
                           rng: np.random.Generator, resamples: int = 2000, level: float = 0.95) -> dict:
    """Mean accuracy over runs minus the baseline's, with a bootstrap interval over test reviews."""
    runs = np.asarray(correct_runs, dtype=float).mean(axis=0)  # per review: share of runs correct
    base = np.asarray(correct_baseline, dtype=float)
    diff = runs - base
    n = len(diff)
    draws = rng.integers(0, n, size=(resamples, n))
    boot = diff[draws].mean(axis=1)
    low, high = np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2])
    return {"delta": float(diff.mean()), "low": float(low), "high": float(high), "resamples": resamples}
