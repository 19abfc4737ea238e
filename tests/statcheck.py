"""Statistical checks shared by the mechanism tests (G-tests with pooled small cells)."""

import numpy as np
from scipy.stats import chi2


def g_test(counts: np.ndarray, probs: np.ndarray, min_expected: float = 20.0) -> float:
    """p-value of a G-test of ``counts`` (per outcome) against ``probs``; cells expected below
    ``min_expected`` are pooled into one cell."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    expected = probs / probs.sum() * counts.sum()
    big = expected >= min_expected
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    keep = expected > 0
    if (observed[~keep] > 0).any():
        return 0.0  # an outcome of probability 0 was observed
    observed, expected = observed[keep], expected[keep]
    if len(observed) < 2:
        return 1.0
    nonzero = observed > 0
    stat = 2.0 * (observed[nonzero] * np.log(observed[nonzero] / expected[nonzero])).sum()
    return float(chi2.sf(stat, len(observed) - 1))


def two_sample_g(a: np.ndarray, b: np.ndarray, size: int, min_pooled: float = 20.0) -> float:
    """p-value of a G-test that two samples of outcome ids (0..size-1) share one distribution; outcomes
    with fewer than ``min_pooled`` draws in both samples together are pooled into one cell."""
    ca = np.bincount(a, minlength=size).astype(np.float64)
    cb = np.bincount(b, minlength=size).astype(np.float64)
    total = ca + cb
    big = total >= min_pooled
    table = np.array([np.append(ca[big], ca[~big].sum()), np.append(cb[big], cb[~big].sum())])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    nonzero = table > 0
    stat = 2.0 * (table[nonzero] * np.log(table[nonzero] / expected[nonzero])).sum()
    return float(chi2.sf(stat, table.shape[1] - 1))
