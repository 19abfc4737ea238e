"""Distances and diameters over the vocabulary's vectors: the geometry every mechanism, calibrate, the audit and
the accounting measure with (float64, blocked so that memory stays small on a 400k vocabulary)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


def _metric_rows(rows: np.ndarray, metric: str) -> np.ndarray:
    rows = np.array(rows, dtype=np.float64, ndmin=2)
    if metric == "angular":  # the chord between directions, as in textdp.artifact.neighbours
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        norms[norms == 0] = 1.0
        rows /= norms[:, None]
    elif metric != "euclidean":
        raise ValueError(f"unknown metric {metric!r}")
    return rows


def distance_row(vectors: np.ndarray, word_id: int, block_rows: int = 65536, metric: str = "euclidean") -> np.ndarray:
    """Distance (float64) from word ``word_id`` to every vocabulary word; itself exactly 0.

    Euclidean between the vectors (Madlib's metric), or ``angular`` (the chord between their
    directions, a TEM table may use it). Computed from differences (not the expanded
    ``|x|^2 - 2x.y + |y|^2`` form) in float64, so close pairs keep their precision; blocked so
    memory stays small on a 400k vocabulary.
    """
    base = _metric_rows(vectors[word_id], metric)[0]
    out = np.empty(len(vectors), dtype=np.float64)
    for start in range(0, len(vectors), block_rows):
        diff = _metric_rows(vectors[start:start + block_rows], metric) - base
        out[start:start + len(diff)] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    out[word_id] = 0.0
    return out


@dataclass(frozen=True)
class DiameterBounds:
    """Lower and upper bounds on the vocabulary's Euclidean diameter max_{w,w'} ||phi(w) - phi(w')||.

    ``lower`` is the length of an actual pair (found by two farthest-point passes), so the true
    diameter is in [lower, upper]. ``upper`` is r1 + r2, the two largest distances to the centroid
    c of distinct words: by the triangle inequality ||a - b|| <= ||a - c|| + ||c - b||. The exact
    diameter needs all N^2/2 pairs (8e10 for 400k words); the bound costs three passes.
    """

    lower: float
    upper: float
    method: str = "upper: sum of the two largest distances to the centroid; lower: farthest-point pair"

    def to_dict(self) -> dict:
        return asdict(self)


def _distances_to(vectors: np.ndarray, point: np.ndarray, block: int) -> np.ndarray:
    out = np.empty(len(vectors), dtype=np.float64)
    for start in range(0, len(vectors), block):
        rows = np.asarray(vectors[start:start + block], dtype=np.float64)
        out[start:start + len(rows)] = np.sqrt(((rows - point) ** 2).sum(axis=1))
    return out


def diameter_bounds(vectors: np.ndarray, block: int = 65536) -> DiameterBounds:
    """Bounds on the diameter of the rows of ``vectors`` (N x n, any float dtype, may be a memmap)."""
    n = len(vectors)
    if n < 2:
        raise ValueError("a vocabulary needs at least 2 words to have a diameter")
    total = np.zeros(vectors.shape[1], dtype=np.float64)
    for start in range(0, n, block):
        total += np.asarray(vectors[start:start + block], dtype=np.float64).sum(axis=0)
    centroid = total / n
    to_centroid = _distances_to(vectors, centroid, block)
    top_two = np.partition(to_centroid, n - 2)[n - 2:]
    upper = float(top_two.sum())
    far = int(np.argmax(to_centroid))
    first = _distances_to(vectors, np.asarray(vectors[far], dtype=np.float64), block)
    other = int(np.argmax(first))
    second = _distances_to(vectors, np.asarray(vectors[other], dtype=np.float64), block)
    lower = float(max(first.max(), second.max()))
    return DiameterBounds(lower=lower, upper=max(upper, lower))
