"""What the self-check draws and compares: word pairs across distance bands, their guarantee, and
releases of single words exactly as the privatize job makes them.

Pairs. Base words are drawn one per equal frequency-rank stratum of the vocabulary (as calibrate
samples words); each base word w is paired with the word at each of the neighbour ranks of
``BANDS`` (its 1st, 10th, 100th, ... nearest word in the mechanism's metric), so every run covers
close pairs (where the guarantee epsilon * d is small and a broken noise scale shows first) and far
ones (where a truncation such as TEM's gamma matters). Users add their own pairs; two generated
words outside the vocabulary check the out-of-vocabulary policy.

The guarantee of a pair. For two vocabulary words: the mechanism's own per-token bound at their
distance, ``mechanism.token_epsilon0(d)`` where the mechanism offers it (its epsilon_0 for a
vocabulary of diameter d is exactly its bound for two words at distance d), else Madlib's
``epsilon * d`` and TEM's ``epsilon * min(d, gamma)``; the distance is taken in the metric of the
guarantee (``mechanism.metric_points``, or TEM's table metric). For unknown words, what the
privatize job claims for its OOV policy (``textdp.text.privatizer``):

``random``  an unknown word is released as M(u), u uniform over the vocabulary: two unknown words
            have the same output distribution (bound 0); against a vocabulary word w the bound is
            ``B(max_u d(u, w))`` (the mixture argument of text_privatizer, taken at w's largest
            distance, which the distance row gives exactly).
``unk``     every unknown word becomes the same marker: two unknown words have bound 0; against a
            vocabulary word nothing is claimed (the marker shows an unknown word stood there, which
            the layout accounting covers), so such pairs are not planned.
``keep``    the word is released unchanged: no guarantee (bound inf); the check still measures what
            leaks and reports it as "no guarantee".

Releases. A vocabulary word is released by the mechanism's ``privatize_ids``, except plain exact
Madlib, whose draws go through calibrate's exact candidate pruning (same answers, much faster at
large epsilon; a subclass that overrides ``privatize_ids`` is always drawn through it). An unknown
word goes through ``TextPrivatizer`` with the run's OOV policy, one one-word text per draw, the very
code the privatize job runs. Outputs become integer keys: vocabulary ids, or a negative key derived
from the released text (a marker, or a word passed through) by SHA-256.

Nothing here imports Beam.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from textdp.calibration.statistics import CandidatePrunedSearch, stratified_word_sample
from textdp.mechanisms.madlib import Madlib
from textdp.search.geometry import distance_row
from textdp.text.privatizer import OOV_POLICIES, TextPrivatizer, released_ids

BANDS = (1, 10, 100, 1000, 10000)  # neighbour ranks of the partner words
DRAW_CHUNK = 4096  # draws per vectorised call (bounds memory; progress is reported between chunks)
Token = Union[int, str]  # a vocabulary id, or a word (a string) that may be outside the vocabulary


# --- the metric and the guarantee ----------------------------------------------------------------


def guarantee_metric(mechanism) -> str:
    """'euclidean' or 'angular': the metric of the mechanism's guarantee (TEM: its table's)."""
    return getattr(mechanism, "metric", "euclidean")


def guarantee_points(mechanism, vectors: np.ndarray) -> np.ndarray:
    """Rows of points whose Euclidean distances are the guarantee's metric (float64)."""
    convert = getattr(mechanism, "metric_points", None)
    if convert is not None:
        return np.asarray(convert(vectors), dtype=np.float64)
    metric = guarantee_metric(mechanism)
    if metric == "euclidean":
        return np.asarray(vectors, dtype=np.float64)
    from textdp.artifact.neighbours import metric_points

    return metric_points(vectors, metric, dtype=np.float64)


def guarantee_row(mechanism, vectors: np.ndarray, word_id: int) -> np.ndarray:
    """d(w, .) in the guarantee's metric for every vocabulary word (float64, itself exactly 0)."""
    if getattr(mechanism, "metric_points", None) is None:
        return distance_row(vectors, word_id, metric=guarantee_metric(mechanism))
    points = guarantee_points(mechanism, vectors)
    diff = points - points[word_id]
    row = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    row[word_id] = 0.0
    return row


def pair_bound(mechanism, distance: float) -> float:
    """The mechanism's claimed bound on ln(P[M(w) in E] / P[M(w') in E]) for two words at ``distance``."""
    distance = float(distance)
    own = getattr(mechanism, "token_epsilon0", None)
    if own is not None:
        return float(own(distance))
    return math.inf


def bound_text(mechanism) -> str:
    """How the guarantee of a pair is computed, for the report (the class's ``BOUND_TEXT``; ``mechanism``: any
    mechanism reference)."""
    from textdp.mechanisms import available_class

    cls = available_class(mechanism)
    specific = cls.BOUND_TEXT if cls is not None else "as the mechanism states it"
    return f"the mechanism's own per-token bound at the pair's distance (token_epsilon0(d)): {specific}"


def oov_pair_bound(policy: str, mechanism, other_max_distance: Optional[float]) -> float:
    """The claimed bound for a pair with at least one unknown word (see the module docstring).

    ``other_max_distance``: None when both words are unknown, else the largest distance from the
    vocabulary word of the pair to any vocabulary word.
    """
    if policy not in OOV_POLICIES:
        raise ValueError(f"unknown OOV policy {policy!r}")
    if policy == "keep":
        return math.inf
    if other_max_distance is None:
        return 0.0
    if policy == "unk":
        return math.inf
    return pair_bound(mechanism, other_max_distance)


# --- pairs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairSpec:
    """One pair to test. ``a``/``b`` are vocabulary ids or words; ``label`` is safe to print."""

    pair_id: str
    a: Token
    b: Token
    kind: str  # "band", "user" or "oov"
    band: Optional[int] = None  # neighbour rank of b from a (band pairs)
    label: str = ""


def base_words(vocab_size: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` base words, one per equal frequency-rank stratum (``stratified_word_sample``)."""
    ids, _ = stratified_word_sample(vocab_size, count, rng)
    return ids


def base_word_count(pairs: int, bands: Sequence[int] = BANDS) -> int:
    """Base words needed for ``pairs`` band pairs (every base word takes every band)."""
    return max(1, math.ceil(pairs / len(bands)))


def band_pairs(base_index: int, word_id: int, row: np.ndarray, bands: Sequence[int], limit: int,
               words: Sequence[str]) -> List[PairSpec]:
    """The pairs of one base word: its partner at each neighbour rank (at most ``limit`` pairs)."""
    others = len(row) - 1
    out = []
    wanted = [k for k in bands if 1 <= k <= others][:max(limit, 0)]
    if not wanted:
        return out
    masked = row.copy()
    masked[word_id] = -1.0  # the word itself sorts first, before any neighbour (even at distance 0)
    order = np.argpartition(masked, max(wanted))
    kth = order[:max(wanted) + 1]
    kth = kth[np.lexsort((kth, masked[kth]))]  # ranks 0 (the word) .. max(wanted), ties by id
    for k in wanted:
        partner = int(kth[k])
        out.append(PairSpec(pair_id=f"b{base_index}-r{k}", a=int(word_id), b=partner, kind="band", band=int(k),
                            label=f"{words[word_id]} / {words[partner]} (neighbour rank {k})"))
    return out


def generated_unknown_words(word_to_id: Dict[str, int], count: int = 2) -> List[str]:
    """``count`` made-up words that the tokenizer reads as one word each and the vocabulary lacks."""
    out = []
    i = 0
    while len(out) < count:
        word = f"zqxj{i}audit"
        if word not in word_to_id:
            out.append(word)
        i += 1
    return out


def oov_pairs(policy: str, word_to_id: Dict[str, int], vocab_word: int) -> List[PairSpec]:
    """Two generated unknown words, and (except for ``unk``, which claims nothing there) one of them
    against a vocabulary word."""
    first, second = generated_unknown_words(word_to_id, 2)
    pairs = [PairSpec("oov-oov", first, second, "oov", label="two generated words outside the vocabulary")]
    if policy != "unk":
        pairs.append(PairSpec("oov-vocab", first, int(vocab_word), "oov",
                              label="a generated word outside the vocabulary / a vocabulary word"))
    return pairs


# --- releases -----------------------------------------------------------------------------------------


def text_key(text: str, word_to_id: Dict[str, int]) -> int:
    """Vocabulary id of a released word, or a negative key for any other released text."""
    word_id = word_to_id.get(text.lower())
    if word_id is not None:
        return int(word_id)
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return -1 - (int.from_bytes(digest[:8], "big") >> 2)


@dataclass
class TokenReleaser:
    """Independent releases of one token at one epsilon, as the privatize job would make them.

    ``build_mechanism()`` returns a fresh mechanism object (TEM keeps per-word dense rows, at most a
    few per object, so every token gets its own object; building one costs about a millisecond).
    ``privatizer_class`` is ``TextPrivatizer`` (tests substitute a broken one).
    """

    build_mechanism: Callable[[], object]
    artifact: object
    oov_policy: str = "random"
    prune: bool = True
    privatizer_class: type = TextPrivatizer
    chunk: int = DRAW_CHUNK
    draws_done: int = field(default=0, init=False)

    def _is_plain_exact_madlib(self, mechanism) -> bool:
        return (isinstance(mechanism, Madlib) and type(mechanism).privatize_ids is Madlib.privatize_ids
                and getattr(mechanism, "nn", None) == "exact")

    def word_id(self, token: Token) -> Optional[int]:
        if isinstance(token, (int, np.integer)):
            return int(token)
        return self.artifact.word_to_id.get(str(token).lower())

    def release(self, token: Token, count: int, rng: np.random.Generator,
                progress: Optional[Callable[[int], None]] = None) -> np.ndarray:
        """``count`` independent releases of ``token`` as integer keys."""
        mechanism = self.build_mechanism()
        word_id = self.word_id(token)
        out = np.empty(count, dtype=np.int64)
        if word_id is None:
            draw = self._unknown_drawer(mechanism, str(token))
        elif self.prune and self._is_plain_exact_madlib(mechanism):
            draw = self._pruned_madlib_drawer(mechanism, word_id)
        else:
            def draw(n, generator):
                return released_ids(mechanism, np.full(n, word_id, dtype=np.int64), generator, len(self.artifact.words))
        for start in range(0, count, self.chunk):
            n = min(self.chunk, count - start)
            out[start:start + n] = draw(n, rng)
            self.draws_done += n
            if progress is not None:
                progress(n)
        return out

    def _pruned_madlib_drawer(self, mechanism, word_id: int):
        vectors = self.artifact.vectors
        search = CandidatePrunedSearch(vectors, self.artifact.sqnorms, word_id, distance_row(vectors, word_id))

        def draw(n, generator):
            noisy = mechanism.noisy_vectors(np.full(n, word_id, dtype=np.int64), generator)
            return search.query(noisy, mechanism.nearest)
        return draw

    def release_many(self, mechanism, ids: np.ndarray, rng: np.random.Generator, prune_min: int = 1000) -> np.ndarray:
        """One release per vocabulary id of ``ids`` (a batch of many words). For plain exact Madlib the
        words that occur at least ``prune_min`` times are drawn through the candidate pruning (same
        answers, faster for frequent words at large epsilon); everything else by ``privatize_ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=np.int64)
        rest = np.ones(len(ids), dtype=bool)
        if self.prune and self._is_plain_exact_madlib(mechanism) and len(ids) >= prune_min:
            words, counts = np.unique(ids, return_counts=True)
            for word in words[counts >= prune_min]:
                where = np.flatnonzero(ids == word)
                draw = self._pruned_madlib_drawer(mechanism, int(word))
                for start in range(0, len(where), self.chunk):
                    part = where[start:start + self.chunk]
                    out[part] = draw(len(part), rng)
                rest[where] = False
        if rest.any():
            out[rest] = released_ids(mechanism, ids[rest], rng, len(self.artifact.words))
        self.draws_done += len(ids)
        return out

    def _unknown_drawer(self, mechanism, word: str):
        privatizer = self.privatizer_class(mechanism, self.artifact.words, self.artifact.word_to_id,
                                           oov_policy=self.oov_policy)
        word_to_id = self.artifact.word_to_id

        def draw(n, generator):
            released, _ = privatizer.privatize([word] * n, generator)
            return np.array([text_key(text, word_to_id) for text in released], dtype=np.int64)
        return draw
