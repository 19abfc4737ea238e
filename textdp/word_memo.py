"""A bounded memo from surface words to integers, looked up for a whole batch of words with numpy.

The tokenizer resolves each distinct surface word once (vocabulary id, case pattern, split) and
remembers the result here, so that a batch of words is looked up without a Python object or call
per word: every word of the batch gets a 64-bit key from its code points (a polynomial hash
computed from prefix sums, ``word_keys``), the keys are found in an open-addressing table, and
every hit is then compared code point by code point with the stored word. A hash collision can
therefore never give a word another word's value: a word whose key is taken by another word is
simply not memoized (the caller resolves it itself every time).

Memory is fixed by ``capacity`` (words): the table (12 bytes per slot, two slots per word), the
values and offsets (20 bytes per word) and the stored code points (4 bytes each): about 5 MB for
65,536 words of IMDb-like text, instead of a dict of the whole vocabulary (~60 MB for 400k words).
When the memo is full it is cleared by its owner.
"""

from __future__ import annotations

import numpy as np

_MULTIPLIER = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
_P = np.uint64(_MULTIPLIER)
_P_INVERSE = np.uint64(pow(_MULTIPLIER, -1, 1 << 64))
_EMPTY = np.uint64(0)  # no key is 0 (see word_keys)


def _powers(base: np.uint64, count: int) -> np.ndarray:
    powers = np.full(count, base, dtype=np.uint64)
    if count:
        powers[0] = 1
        np.cumprod(powers, out=powers)  # wraps modulo 2**64, as intended
    return powers


def word_keys(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A 64-bit key per span ``codes[starts[k]:ends[k]]``, equal for equal code point sequences.

    sum_t (c_t + 1) P^(t - start) mod 2**64, from prefix sums over the whole batch (the factor
    P^-start makes it independent of where the word stands), mixed with the length and scrambled
    by the splitmix64 finalizer.
    """
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(codes) + 1, dtype=np.uint64)
        np.cumsum((codes.astype(np.uint64) + np.uint64(1)) * _powers(_P, len(codes)), out=prefix[1:])
        key = (prefix[ends] - prefix[starts]) * _powers(_P_INVERSE, len(codes) + 1)[starts]
        key ^= (ends - starts).astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
        key ^= key >> np.uint64(30)
        key *= np.uint64(0xBF58476D1CE4E5B9)
        key ^= key >> np.uint64(27)
        key *= np.uint64(0x94D049BB133111EB)
        key ^= key >> np.uint64(31)
    key[key == _EMPTY] = 1
    return key


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without a Python loop."""
    ends = np.cumsum(lengths)
    if not len(ends):
        return np.zeros(0, dtype=np.int64)
    return np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths) + np.arange(int(ends[-1]))


def different_spans(first: np.ndarray, first_starts: np.ndarray, second: np.ndarray, second_starts: np.ndarray,
                    lengths: np.ndarray) -> np.ndarray:
    """Indices k where ``first[first_starts[k]:+lengths[k]] != second[second_starts[k]:+lengths[k]]``."""
    if not len(lengths):
        return np.zeros(0, dtype=np.int64)
    positions = ranges(first_starts, lengths)
    shift = np.repeat(np.asarray(second_starts, dtype=np.int64) - first_starts, lengths)
    unequal = np.flatnonzero(first[positions] != second[positions + shift])
    if not len(unequal):
        return unequal
    return np.unique(np.searchsorted(np.cumsum(lengths), unequal, side="right"))


class WordMemo:
    """Code point sequences (words) -> int64 values, for at most ``capacity`` words."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        bits = max(4, (2 * self.capacity - 1).bit_length())  # at least two slots per word
        self._shift = np.uint64(64 - bits)
        self._mask = (1 << bits) - 1
        self._keys = np.zeros(1 << bits, dtype=np.uint64)
        self._entries = np.zeros(1 << bits, dtype=np.int32)
        self.values = np.zeros(self.capacity, dtype=np.int64)
        self._starts = np.zeros(self.capacity, dtype=np.int64)
        self._lengths = np.zeros(self.capacity, dtype=np.int64)
        self._pool = np.zeros(1 << 12, dtype=np.uint32)
        self._pool_used = 0
        self.count = 0

    def clear(self) -> None:
        self._keys.fill(0)
        self._pool_used = 0
        self.count = 0

    def find(self, keys: np.ndarray, codes: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The entry of every word (span of ``codes``) with key ``keys[k]``, -1 where it is not memoized."""
        entry = np.full(len(keys), -1, dtype=np.int64)
        slot = (keys >> self._shift).astype(np.int64)
        pending = np.arange(len(keys))
        while len(pending):  # linear probing, all pending words one slot further per round
            at = slot[pending]
            stored = self._keys[at]
            hit = stored == keys[pending]
            entry[pending[hit]] = self._entries[at[hit]]
            pending = pending[~hit & (stored != _EMPTY)]
            slot[pending] = (slot[pending] + 1) & self._mask
        found = np.flatnonzero(entry >= 0)
        hits = entry[found]
        wrong = found[self._lengths[hits] != lengths[found]]
        same_length = found[self._lengths[hits] == lengths[found]]
        wrong = np.concatenate((wrong, same_length[different_spans(
            codes, starts[same_length], self._pool, self._starts[entry[same_length]], lengths[same_length])]))
        entry[wrong] = -1  # a key collision: another word holds this key
        return entry

    LONGEST_WORD = 100  # code points; longer words are rare and not worth the pool space

    def add(self, key: int, word: np.ndarray, value: int) -> bool:
        """Remember ``value`` for the code points ``word`` under ``key``; False if not (full, the key
        is taken by another word, or the word is longer than LONGEST_WORD)."""
        if self.count >= self.capacity or len(word) > self.LONGEST_WORD:
            return False
        slot = int(np.uint64(key) >> self._shift)
        while self._keys[slot] != _EMPTY:
            if int(self._keys[slot]) == key:
                return False
            slot = (slot + 1) & self._mask
        if self._pool_used + len(word) > len(self._pool):
            grown = np.zeros(max(2 * len(self._pool), self._pool_used + len(word)), dtype=np.uint32)
            grown[:self._pool_used] = self._pool[:self._pool_used]
            self._pool = grown
        entry = self.count
        self._pool[self._pool_used:self._pool_used + len(word)] = word
        self._starts[entry] = self._pool_used
        self._lengths[entry] = len(word)
        self.values[entry] = value
        self._pool_used += len(word)
        self._keys[slot] = key
        self._entries[slot] = entry
        self.count += 1
        return True
