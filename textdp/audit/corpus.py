"""The audited corpus: records as word ids, the records and tokens the attacks use, and releases of
record windows under the run's out-of-vocabulary policy.

A record is tokenized exactly as the privatize job tokenizes it (``textdp.text.tokenize``). It is kept
only as numbers: the vocabulary id of each word slot, a negative key for a word outside the
vocabulary (derived from the word by SHA-256, never printed), and a 63-bit integer from its layout
digest (what a privatized record releases besides its words: structure, case pattern, word count).
No text leaves this module.

Plan. Records are ordered by a keyed hash of their position (a uniform random order, fixed by the
seed when one is given); the first ``records`` are the *evaluated* records: their in-vocabulary
tokens are the inversion attack's targets (a uniform sample of ``inversion_tokens`` of them when
there are more), and those with at least ``window`` words are the linkage *queries*. The linkage
*pool* is every planned record with at least ``window`` words (queries included); a query's set of
size n is its own source and n - 1 other pool records in a random order. The contextual attacker
(``textdp.audit.contextual``) attacks whole evaluated records, taken in the same random order until
they hold ``inversion_tokens`` vocabulary words; without ``--prior-corpus`` its language model is
trained on the records after the evaluated ones (order key above ``eval_key_max``), never on them.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from textdp.audit.attacks import CountTable, Kernel
from textdp.audit.pairs import text_key
from textdp.text.tokenize import UNKNOWN_ID, Tokenizer

UNK_MARKER_KEY = text_key("<unk>", {})


def record_key(seed: Optional[int], source: str, position: int) -> int:
    """A uniform pseudo-random order of records (keyed by the seed; a fresh key when none)."""
    salt = str(seed) if seed is not None else ""
    digest = hashlib.sha256(f"{salt}\0{source}\0{position}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def encode_record(tokenizer: Tokenizer, text: str) -> tuple:
    """(word keys: vocabulary id or a negative key per word slot, layout as an int)."""
    tokenized = tokenizer.tokenize(text)
    ids = np.array(tokenized.ids, dtype=np.int64)
    unknown = np.flatnonzero(ids == UNKNOWN_ID)
    if len(unknown):
        words = tokenized.words
        ids[unknown] = [text_key(words[i].lower(), {}) for i in unknown]
    return ids, int(tokenized.layout()[:15], 16)


@dataclass
class CorpusPlan:
    """What the attacks run on (numbers only)."""

    eval_tokens: np.ndarray        # in-vocabulary word ids of the evaluated records (sampled)
    eval_token_total: int          # in-vocabulary tokens in the evaluated records before sampling
    eval_unknown_tokens: int       # word slots outside the vocabulary in the evaluated records
    eval_records: int
    pool_windows: np.ndarray       # P x window word keys of the pool records
    pool_layouts: np.ndarray       # P layout integers
    query_rows: np.ndarray         # pool rows that are queries (evaluated records with a full window)
    records_read: int
    window: int
    eval_sequences: tuple = ()     # word keys of whole evaluated records (the contextual attacker's targets)
    eval_key_max: Optional[int] = None  # largest order key of an evaluated record (later records are not attacked)

    def window_vocab_words(self) -> np.ndarray:
        keys = self.pool_windows.ravel()
        return np.unique(keys[keys >= 0])

    def describe(self) -> dict:
        return {"records_planned": int(self.records_read), "evaluated_records": int(self.eval_records),
                "inversion_tokens": int(len(self.eval_tokens)),
                "inversion_tokens_available": int(self.eval_token_total),
                "evaluated_unknown_tokens": int(self.eval_unknown_tokens),
                "linkage_pool_records": int(len(self.pool_windows)),
                "linkage_queries": int(len(self.query_rows)), "linkage_window_words": int(self.window),
                "contextual_records": int(len(self.eval_sequences)),
                "contextual_tokens": int(sum(int((s >= 0).sum()) for s in self.eval_sequences))}


def plan_corpus(records: Sequence[tuple], evaluated: int, window: int, inversion_tokens: Optional[int],
                rng: np.random.Generator) -> CorpusPlan:
    """``records``: (order key, word keys, layout) for the planned records (any order)."""
    ordered = sorted(records, key=lambda r: r[0])
    chosen = ordered[:evaluated]
    keys = [np.asarray(r[1], dtype=np.int64) for r in chosen]
    all_keys = np.concatenate(keys) if keys else np.empty(0, np.int64)
    vocab_tokens = all_keys[all_keys >= 0]
    sample = vocab_tokens
    sequences, taken = [], 0  # whole records, in the random order, until they hold inversion_tokens vocabulary words
    for ids in keys:
        if inversion_tokens is not None and taken >= inversion_tokens:
            break
        if (ids >= 0).any():
            sequences.append(ids)
            taken += int((ids >= 0).sum())
    if inversion_tokens is not None and len(vocab_tokens) > inversion_tokens:
        sample = vocab_tokens[np.sort(rng.choice(len(vocab_tokens), inversion_tokens, replace=False))]
    windows, layouts, queries = [], [], []
    for index, (_, ids, layout) in enumerate(ordered):
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) >= window:
            if index < evaluated:
                queries.append(len(windows))
            windows.append(ids[:window])
            layouts.append(layout)
    return CorpusPlan(
        eval_tokens=sample, eval_token_total=int(len(vocab_tokens)),
        eval_unknown_tokens=int((all_keys < 0).sum()), eval_records=len(chosen),
        pool_windows=np.array(windows, dtype=np.int64).reshape(len(windows), window),
        pool_layouts=np.array(layouts, dtype=np.int64), query_rows=np.array(queries, dtype=np.int64),
        records_read=len(ordered), window=int(window), eval_sequences=tuple(sequences),
        eval_key_max=int(chosen[-1][0]) if chosen else None)


def release_keys(mechanism, keys: np.ndarray, oov_policy: str, vocab_size: int, rng: np.random.Generator,
                 release_ids=None) -> np.ndarray:
    """Release word keys as the privatize job does (``TextPrivatizer._release``): vocabulary words by the
    mechanism; unknown words by policy -- ``random``: M(u) for a uniform vocabulary word u; ``unk``: the
    marker; ``keep``: the word itself (its key). ``release_ids(ids, rng)`` defaults to the mechanism's."""
    keys = np.asarray(keys, dtype=np.int64)
    release_ids = release_ids or mechanism.privatize_ids
    known = keys >= 0
    out = keys.copy()
    if oov_policy == "random":
        inputs = keys.copy()
        if (~known).any():
            inputs[~known] = rng.integers(0, vocab_size, size=int((~known).sum()))
        return release_ids(inputs, rng) if len(inputs) else out
    if known.any():
        out[known] = release_ids(keys[known], rng)
    if oov_policy == "unk":
        out[~known] = UNK_MARKER_KEY
    return out


def unknown_log_likelihood(oov_policy: str, inputs: np.ndarray, outputs: np.ndarray, vocab_size: int) -> np.ndarray:
    """ln P(y | x) at positions where x is unknown (negative key), as the attacker models it: ``random``
    -ln N (the mixture over uniform inputs, approximated as uniform); ``unk`` 0 if y is the marker;
    ``keep`` 0 if y is x itself; -inf otherwise."""
    if oov_policy == "random":
        return np.full(np.shape(inputs), -math.log(vocab_size))
    expected = np.full(np.shape(inputs), UNK_MARKER_KEY) if oov_policy == "unk" else np.asarray(inputs)
    return np.where(np.asarray(outputs) == expected, 0.0, -np.inf)


def linkage_scores(windows: np.ndarray, released: np.ndarray, oov_policy: str, vocab_size: int,
                   vocab_log_likelihood) -> np.ndarray:
    """``sum_j ln P(released_j | window_j)`` for every pool window (rows of ``windows``).

    ``vocab_log_likelihood(inputs, outputs)`` gives ln P(o | x) for vocabulary inputs (arrays of equal
    shape); outputs that are not vocabulary words (a marker, a kept word) have probability 0 there.
    """
    windows = np.asarray(windows, dtype=np.int64)
    outputs = np.broadcast_to(np.asarray(released, dtype=np.int64)[None, :], windows.shape)
    scores = np.zeros(windows.shape)
    known = windows >= 0
    vocab_out = outputs >= 0
    both = known & vocab_out
    if both.any():
        scores[both] = vocab_log_likelihood(windows[both], outputs[both])
    scores[known & ~vocab_out] = -np.inf
    if (~known).any():
        scores[~known] = unknown_log_likelihood(oov_policy, windows[~known], outputs[~known], vocab_size)
    return scores.sum(axis=1)


def kernel_log_likelihood(points64: np.ndarray, kernel: Kernel, log_z_lookup):
    """ln P(o | x) = -s min(d(x, o), cap) - ln Z_x (``log_z_lookup(ids)`` gives ln Z_x)."""
    def log_likelihood(inputs, outputs):
        diff = points64[outputs] - points64[inputs]
        dist = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        return -kernel.scale * np.minimum(dist, kernel.cap) - log_z_lookup(inputs)
    return log_likelihood


def table_log_likelihood(table: CountTable):
    return table.log_likelihood


class LogZLookup:
    """ln Z per word for one epsilon, from (ids, values) arrays."""

    def __init__(self, ids: np.ndarray, values: np.ndarray):
        order = np.argsort(ids)
        self.ids = np.asarray(ids, dtype=np.int64)[order]
        self.values = np.asarray(values, dtype=np.float64)[order]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        if len(ids) and not (self.ids[pos] == ids).all():
            raise KeyError("a word without its normaliser (it should have been planned)")
        return self.values[pos]


def nested_order(rng: np.random.Generator, pool_size: int, source: int) -> np.ndarray:
    """The other pool rows in a uniform random order (the sets are nested prefixes of it)."""
    others = np.delete(np.arange(pool_size), source)
    return rng.permutation(others)


def largest_set(sizes: Sequence[int], pool_size: int) -> List[int]:
    return [int(n) for n in sizes if 1 <= n <= pool_size]
