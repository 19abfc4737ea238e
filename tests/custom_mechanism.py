"""A mechanism that is not textdp's: what a user writes to bring their own (docs/mechanisms.md, "Bring your own
mechanism"), used by tests/test_registry.py and tests/test_custom_mechanism.py.

``CappedExponential`` releases, for a word w, a word o of the whole vocabulary V with

    P(o | w) = exp(-epsilon * min(d(w, o), cap) / 2) / sum_{o' in V} exp(-epsilon * min(d(w, o'), cap) / 2)

(d: Euclidean distance between embeddings; ``distance_cap`` = cap, None = no cap). It is the exponential
mechanism with utility -min(d(w, o), cap); min(., cap) is 1-Lipschitz with values in [0, cap], so the utility
changes by at most min(d(w, w'), cap) between two inputs w, w', and the exponential mechanism's argument gives
P[M(w) in O] <= exp(epsilon * min(d(w, w'), cap)) * P[M(w') in O] for every output set O (metric local DP,
never worse than epsilon * cap for any pair). Sampling is exact: one pass over the vocabulary per distinct input
word of a batch, then an inverse-CDF draw per token (fine for the test artifacts; a real one would use a table).

Nothing in textdp names this class: it is reached through an import path
(``--mechanism tests.custom_mechanism:CappedExponential``), the class object, or an entry point.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.mechanisms.base import SEARCH_BATCH_TOKENS, Mechanism, Parameter
from textdp.mechanisms.madlib import check_diameter

IMPORT_PATH = "tests.custom_mechanism:CappedExponential"

DISTANCE_CAP = Parameter(
    "distance_cap", float, None, low=0.0, low_open=True, example=2.0,
    help="capped-exponential: distances above this count as this (a floor under every word's weight); default: "
         "no cap")


class CappedExponential(Mechanism):
    """The exponential mechanism over the whole vocabulary with a capped Euclidean distance (module docstring)."""

    name = "capped-exponential"
    DESCRIPTION = "exponential mechanism over the whole vocabulary, distances capped (a test's own mechanism)"
    PARAMETERS = (DISTANCE_CAP,)
    EXACT_LAW = True
    AUDIT_KERNEL = True
    BATCH_TOKENS = SEARCH_BATCH_TOKENS
    BOUND_TEXT = "epsilon * min(d(w, w'), cap), Euclidean"

    def __init__(self, artifact, epsilon: float, distance_cap=None):
        self.check_parameters(epsilon, artifact, distance_cap=distance_cap)
        self.epsilon = float(epsilon)
        self.cap = None if distance_cap is None else float(distance_cap)
        self.vectors = np.asarray(artifact.vectors, dtype=np.float64)
        self.vocab_size = int(artifact.vocab_size)
        self.sqnorms = np.einsum("ij,ij->i", self.vectors, self.vectors)

    def _log_weights(self, distances: np.ndarray) -> np.ndarray:
        capped = distances if self.cap is None else np.minimum(distances, self.cap)
        return -0.5 * self.epsilon * capped

    def _rows(self, word_ids: np.ndarray) -> np.ndarray:
        """d(w, .) for each id (float64, a word's distance to itself exactly 0)."""
        block = self.vectors[word_ids]
        sq = self.sqnorms[word_ids][:, None] + self.sqnorms[None, :] - 2.0 * block @ self.vectors.T
        rows = np.sqrt(np.maximum(sq, 0.0))
        rows[np.arange(len(word_ids)), word_ids] = 0.0
        return rows

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError("word ids out of range for this artifact")
        out = np.empty(len(ids), dtype=np.int64)
        unique, inverse = np.unique(ids, return_inverse=True)
        uniforms = rng.random(len(ids))
        for start in range(0, len(unique), 256):
            chunk = unique[start:start + 256]
            log_w = self._log_weights(self._rows(chunk))
            weights = np.exp(log_w - log_w.max(axis=1, keepdims=True))
            cdf = np.cumsum(weights, axis=1)
            cdf /= cdf[:, -1:]
            for offset in range(len(chunk)):
                where = np.flatnonzero(inverse == start + offset)
                picked = np.searchsorted(cdf[offset], uniforms[where], side="right")
                out[where] = np.minimum(picked, self.vocab_size - 1)
        return out

    def exact_distribution(self, row, word_id: int) -> np.ndarray:
        log_w = self._log_weights(np.asarray(row, dtype=np.float64))
        probs = np.exp(log_w - log_w.max())
        return probs / probs.sum()

    def audit_kernel(self):
        return (0.5 * self.epsilon, math.inf if self.cap is None else self.cap, "euclidean")

    def metric_points(self, vectors) -> np.ndarray:
        return np.asarray(vectors, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        diameter = check_diameter(diameter_upper)
        return self.epsilon * (diameter if self.cap is None else min(diameter, self.cap))

    def parameters(self) -> dict:
        return {"mechanism": self.name, "epsilon": self.epsilon, "metric": "euclidean", "distance_cap": self.cap}

    def privacy_statement(self) -> dict:
        e = self.epsilon
        bound = f"{e:g} * d(x, x')" if self.cap is None else f"{e:g} * min(d(x, x'), {self.cap:g})"
        return {
            "notion": "metric local differential privacy on word embeddings, Euclidean distance (capped exponential)",
            "per_token": f"for any words x, x' and any output set O: P[M(x) in O] <= exp({bound}) * P[M(x') in O]",
            "per_record": "a record with words x_1..x_l versus x_1'..x_l': the sum over i of the per-token exponents",
            "covered": "every vocabulary word",
            "sampling": "exact: inverse-CDF draws from the closed form over the whole vocabulary",
            "coverage": {"covered": "all"},
        }


# --- classes the refusal tests name by import path (tests/test_custom_mechanism.py) ----------------------------


class Nameless(CappedExponential):
    """A mechanism whose class forgot its name: refused (a summary could not say what ran)."""

    name = ""


class Impostor(CappedExponential):
    """A different class under a built-in's name: refused (a summary would name the wrong mechanism)."""

    name = "madlib"


class NotAMechanism:
    """Has a name, but is no Mechanism subclass: refused."""

    name = "not-a-mechanism"


class NameTaker(CappedExponential):
    """CappedExponential that, while an --overwrite run's earlier files are set aside (a ``.textdp-earlier-*`` folder
    is in $TEXTDP_TEST_TAKE_DIR), makes a directory at the path $TEXTDP_TEST_TAKE_NAME: something taking a name of the
    release during the run (tests/test_hostile_round11.py, R11-5). Otherwise exactly CappedExponential."""

    name = "name-taker"

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import glob
        import os

        folder, name = os.environ.get("TEXTDP_TEST_TAKE_DIR"), os.environ.get("TEXTDP_TEST_TAKE_NAME")
        if folder and name and glob.glob(os.path.join(glob.escape(folder), ".textdp-earlier-*")):
            os.makedirs(name, exist_ok=True)
        return super().privatize_ids(ids, rng)


class Interrupter(CappedExponential):
    """CappedExponential that, while an --overwrite run's earlier files are set aside (a ``.textdp-earlier-*`` folder
    in $TEXTDP_TEST_TAKE_DIR), sends its own process SIGINT once: a Ctrl-C during the run (R11-8's first signal)."""

    name = "interrupter"
    sent = False

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import glob
        import os
        import signal

        folder = os.environ.get("TEXTDP_TEST_TAKE_DIR")
        if folder and not Interrupter.sent and glob.glob(os.path.join(glob.escape(folder), ".textdp-earlier-*")):
            Interrupter.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return super().privatize_ids(ids, rng)
