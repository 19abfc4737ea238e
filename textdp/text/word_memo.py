"""A bounded memo from surface words to integers, looked up for a whole batch of words with numpy.

The tokenizer resolves each distinct surface word once (vocabulary id, case pattern, split) and
remembers the result here, so that a batch of words is looked up without a Python object or call
per word: every word of the batch gets a 64-bit key from its code points (``word_keys``: short
ASCII words are packed into the key exactly, others hashed), the keys are found in an
open-addressing table, and a hit on a hashed key is compared code point by code point with the
stored word. A hash collision can therefore never give a word another word's value: a word whose
key is taken by another word is simply not memoized (the caller resolves it every time).

Memory is fixed by ``capacity`` (words): the table (12 bytes per slot, two slots per word), each
word's value, key, offsets and use flag (33 bytes) and its code points (4 bytes each): about 6 MB
for 65,536 words of IMDb-like text, instead of a dict of the whole vocabulary (47 MB for 400k
words, benchmarks/results/text_path.md). When the memo is full its owner calls ``make_room``
(keep the words in use) or ``clear``.
"""

from __future__ import annotations

import numpy as np

_P = np.uint64(0x9E3779B97F4A7C15)
_EMPTY = np.uint64(0)  # no key is 0 (see word_keys)


def _powers(base: np.uint64, count: int) -> np.ndarray:
    powers = np.full(count, base, dtype=np.uint64)
    if count:
        powers[0] = 1
        np.cumprod(powers, out=powers)  # wraps modulo 2**64, as intended
    return powers


_HASHED = np.uint64(1 << 63)  # set in every hashed key, never in a packed one
_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BYTES = np.array([0] + [(1 << (8 * n)) - 1 for n in range(1, 8)] + [(1 << 64) - 1], dtype=np.uint64)


def word_keys(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple:
    """A 64-bit key per span ``codes[starts[k]:ends[k]]`` and whether the key is the word itself.

    Words of at most 8 ASCII code points (most words) are packed into their key, one byte each:
    equal keys are equal words, nothing to verify. Longer or non-ASCII words get a hash with the
    top bit set (never a packed key): sum_t (c_t + 1) P^t mod 2**64 over the word, mixed with its
    length and scrambled by the splitmix64 finalizer; a hit on a hashed key must be verified.
    """
    lengths = ends - starts
    keys = np.empty(len(starts), dtype=np.uint64)
    if not len(starts):
        return keys, np.zeros(0, dtype=bool)
    data = np.zeros(len(codes) + 8, dtype=np.uint8)
    np.minimum(codes, 255, out=data[:len(codes)], casting="unsafe")  # ASCII as is, anything else >= 128
    windows = np.ndarray((len(codes) + 1,), dtype="<u8", buffer=data, strides=(1,))  # 8 bytes from each position
    keys[:] = windows[starts] & _LOW_BYTES[np.minimum(lengths, 8)]
    packed = (lengths <= 8) & (keys & _HIGH_BITS == 0)  # short, and no byte >= 128: ASCII
    hashed = np.flatnonzero(~packed)
    if len(hashed):
        keys[hashed] = _hash(codes, starts[hashed], lengths[hashed]) | _HASHED
    return keys, packed


def _hash(codes: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    firsts = np.cumsum(lengths) - lengths  # where each word starts among the gathered code points
    within = np.arange(int(lengths.sum())) - np.repeat(firsts, lengths)
    with np.errstate(over="ignore"):
        terms = (codes[ranges(starts, lengths)].astype(np.uint64) + np.uint64(1)) * _powers(_P, int(lengths.max()))[within]
        key = np.add.reduceat(terms, firsts)
        key ^= lengths.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
        key ^= key >> np.uint64(30)
        key *= np.uint64(0xBF58476D1CE4E5B9)
        key ^= key >> np.uint64(27)
        key *= np.uint64(0x94D049BB133111EB)
        key ^= key >> np.uint64(31)
    return key


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without a Python loop."""
    ends = np.cumsum(lengths)
    if not len(ends):
        return np.zeros(0, dtype=np.int64)
    shift = np.asarray(starts, dtype=np.int64) - (ends - lengths)
    total = int(ends[-1])
    if total < 1 << 31 and (not len(shift) or (shift.min() >= -(1 << 31) and shift.max() + total < 1 << 31)):
        return np.repeat(shift.astype(np.int32), lengths) + np.arange(total, dtype=np.int32)  # half the traffic
    return np.repeat(shift, lengths) + np.arange(total)


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
    """Code point sequences (words) -> int64 values, for at most ``capacity`` words.

    When full, ``make_room`` keeps the words found since the previous time (the working set,
    at most half the capacity) and forgets the others.
    """

    LONGEST_WORD = 100  # code points; longer words are rare and not worth the pool space

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        bits = max(4, (2 * self.capacity - 1).bit_length())  # at least two slots per word
        self._shift = np.uint64(64 - bits)
        self._mask = (1 << bits) - 1
        self._keys = np.zeros(1 << bits, dtype=np.uint64)
        self._entries = np.zeros(1 << bits, dtype=np.int32)
        self.values = np.zeros(self.capacity, dtype=np.int64)
        self._entry_keys = np.zeros(self.capacity, dtype=np.uint64)
        self._starts = np.zeros(self.capacity, dtype=np.int64)
        self._lengths = np.zeros(self.capacity, dtype=np.int64)
        self._used = np.zeros(self.capacity, dtype=bool)
        self._pool = np.zeros(1 << 12, dtype=np.uint32)
        self._pool_used = 0
        self.count = 0

    def _slots(self, keys: np.ndarray) -> np.ndarray:
        """Home slot of each key: Fibonacci hashing, so that packed keys (zero high bytes) spread too."""
        with np.errstate(over="ignore"):
            return ((keys * _P) >> self._shift).astype(np.int64)

    def nbytes(self) -> int:
        """Bytes of this memo's arrays (the code point pool keeps its largest size)."""
        return sum(a.nbytes for a in (self._keys, self._entries, self.values, self._entry_keys, self._starts,
                                      self._lengths, self._used, self._pool))

    def clear(self) -> None:
        self._keys.fill(0)
        self._used.fill(False)
        self._pool_used = 0
        self.count = 0

    def make_room(self) -> np.ndarray:
        """Keep the entries found since the last call (at most half the capacity), forget the rest.

        Returns the values kept (the caller may need to know which of its side tables they use).
        """
        kept = np.flatnonzero(self._used[:self.count])[:self.capacity // 2]
        keys, values = self._entry_keys[kept], self.values[kept]
        pool, starts, lengths = self._pool[:self._pool_used].copy(), self._starts[kept], self._lengths[kept]
        self.clear()
        self.add_many(keys, pool, starts, lengths, values)
        return values

    def find(self, keys: np.ndarray, packed: np.ndarray, codes: np.ndarray, starts: np.ndarray,
             lengths: np.ndarray) -> np.ndarray:
        """The entry of every word (span of ``codes``) with key ``keys[k]``, -1 where it is not memoized.

        ``packed[k]``: the key is the word itself; other hits are compared code point by code point.
        """
        slot = self._slots(keys)
        stored = self._keys[slot]
        hit = stored == keys
        entry = np.where(hit, self._entries[slot], -1).astype(np.int64)
        pending = np.flatnonzero(~hit & (stored != _EMPTY))
        while len(pending):  # linear probing: the words whose home slot holds another key, one slot further
            slot[pending] = (slot[pending] + 1) & self._mask
            at = slot[pending]
            stored = self._keys[at]
            hit = stored == keys[pending]
            entry[pending[hit]] = self._entries[at[hit]]
            pending = pending[~hit & (stored != _EMPTY)]
        check = np.flatnonzero((entry >= 0) & ~packed)
        if len(check):
            stored = entry[check]
            wrong = check[self._lengths[stored] != lengths[check]]
            same = check[self._lengths[stored] == lengths[check]]
            wrong = np.concatenate((wrong, same[different_spans(codes, starts[same], self._pool,
                                                                self._starts[entry[same]], lengths[same])]))
            entry[wrong] = -1  # a hash collision: another word holds this key
        self._used[entry[entry >= 0]] = True
        return entry

    def add_many(self, keys: np.ndarray, codes: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                 values: np.ndarray) -> None:
        """Remember ``values[k]`` for the word ``codes[starts[k]:+lengths[k]]`` under ``keys[k]`` (distinct keys).

        Words are left out when the memo is full, when their key is taken (by another word: a hash
        collision) or when they are longer than LONGEST_WORD.
        """
        candidates = np.flatnonzero(lengths <= self.LONGEST_WORD)[:self.capacity - self.count]
        slot = self._slots(keys[candidates])
        winners = []
        while len(candidates):  # all candidates probe at once; one winner per empty slot and round
            stored = self._keys[slot]
            empty = np.flatnonzero(stored == _EMPTY)
            _, first = np.unique(slot[empty], return_index=True)
            won = empty[first]
            self._keys[slot[won]] = keys[candidates[won]]
            self._entries[slot[won]] = self.count + len(winners) + np.arange(len(won))  # entries in order won
            winners.extend(candidates[won].tolist())
            going_on = stored != keys[candidates]
            going_on[won] = False
            candidates, slot = candidates[going_on], (slot[going_on] + 1) & self._mask
        if not winners:
            return
        winners = np.array(winners, dtype=np.int64)
        entries = self.count + np.arange(len(winners))
        size = int(lengths[winners].sum())
        if self._pool_used + size > len(self._pool):
            grown = np.zeros(max(2 * len(self._pool), self._pool_used + size), dtype=np.uint32)
            grown[:self._pool_used] = self._pool[:self._pool_used]
            self._pool = grown
        self._pool[self._pool_used:self._pool_used + size] = codes[ranges(starts[winners], lengths[winners])]
        self._starts[entries] = self._pool_used + np.cumsum(lengths[winners]) - lengths[winners]
        self._lengths[entries] = lengths[winners]
        self.values[entries] = values[winners]
        self._entry_keys[entries] = keys[winners]
        self._used[entries] = False
        self._pool_used += size
        self.count += len(winners)
