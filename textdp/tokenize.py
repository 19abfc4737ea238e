"""Reversible word tokenization: split text into words to privatize and the structure around them.

A text is cut into alternating *structure* and *word* pieces; joining the pieces gives back the
text exactly. Only words are privatized; structure (whitespace, punctuation, symbols, emoji) is
copied to the output unchanged. The rules, chosen for GloVe-style vocabularies:

* A word is a run of letters and/or digits, with inner apostrophes or hyphens (``don't``,
  ``well-known``) and, between digits, inner ``.`` or ``,`` (``3.5``, ``1,000``). **Numbers are
  words**: they are looked up and privatized like any other word, because a number (an age, a
  date, an order id) can identify a person just as a name can.
* Everything else is structure and is released as it is: whitespace, line breaks and pure
  punctuation, even when the vocabulary has an entry for it (GloVe has ``,`` ``.`` ``(``). So the
  output reveals the record's layout: its length in words and where its punctuation is. The
  summary states this.
* Lookup is on the lowercased word (GloVe 6B is lowercase; ``’`` is read as ``'``). The released
  word takes the input word's case pattern: lower, Capitalized or UPPER (mixed case such as
  ``iPhone`` counts as lower, ``McDonald`` as Capitalized).
* A word that is not in the vocabulary but has joiners is split the way the vocabulary was:
  ``don't`` -> ``do`` + ``n't``, ``it's`` -> ``it`` + ``'s`` (clitics glued to the word before),
  otherwise at its joiners (``foo-bar`` -> ``foo`` ``-`` ``bar``, the joiner kept as structure).
  A released clitic slot whose word is not itself a clitic gets a space in front so that words
  do not run together.

What the tokenizer finds unknown is decided by the caller's out-of-vocabulary policy; this module
only marks it (id -1).

Speed. The privatizer works on batches (``Tokenizer.tokenize_batch`` -> ``TokenizedBatch``,
textdp.token_batch) and keeps a batch as numpy arrays over the code points of its texts: words are
found by one numpy pass (textdp.word_split), each distinct surface word is resolved once (id, case
pattern, split) and remembered in a bounded memo looked up for the whole batch at once
(textdp.word_memo), and layout digests and released texts are built for the whole batch. Python
runs per word only for the few words that need it (not seen before and not ASCII, split words,
changed words when few change). The output is byte for byte that of the original word-at-a-time
implementation, which tests/test_fast_text_path.py keeps as a frozen reference and compares on
IMDb reviews.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Dict, List, Optional, Sequence

import numpy as np

from textdp.casing import CAPITALIZED, LOWER, UPPER, apply_case, case_pattern, is_clitic
from textdp.token_batch import Tokenized, TokenizedBatch
from textdp.word_memo import WordMemo, different_spans, ranges, word_keys
from textdp.word_split import WORD_PATTERN, cut_words

UNKNOWN_ID = -1

__all__ = ["LOWER", "CAPITALIZED", "UPPER", "UNKNOWN_ID", "WORD_PATTERN", "Tokenized", "TokenizedBatch",
           "Tokenizer", "apply_case", "case_pattern", "is_clitic", "vocabulary_words"]

_JOINER = re.compile(r"(['\u2019\-]|(?<=\d)[.,](?=\d))")
_CLITICS = ("'s", "'re", "'ll", "'ve", "'d", "'m")


def vocabulary_words(words: Sequence[str], ids: np.ndarray) -> List[str]:
    """``[words[i] for i in ids]``, gathered in one step when the vocabulary can (CompactVocabulary)."""
    words_at = getattr(words, "words_at", None)
    return words_at(ids) if words_at is not None else list(map(words.__getitem__, np.asarray(ids).tolist()))


_ASCII_JOINERS = tuple(map(ord, "'-.,"))


def _split_words(codes: np.ndarray, lengths: np.ndarray) -> List[str]:
    """The words ``codes`` holds back to back (``lengths`` code points each) as strings: one decode."""
    if not len(lengths):
        return []
    marked = np.empty(len(codes) + len(lengths), dtype=np.uint32)
    after = np.cumsum(lengths) + np.arange(len(lengths))  # a newline after each word
    keep = np.ones(len(marked), dtype=bool)
    keep[after] = False
    marked[keep] = codes
    marked[after] = 10
    return marked.tobytes().decode("utf-32-le", "surrogatepass").split("\n")[:-1]


class Tokenizer:
    """Cuts text into pieces and looks words up in a vocabulary (``word -> id`` mapping).

    ``word_to_id`` needs only ``get(word, default)`` (a dict, or textdp.compact_vocab's
    CompactVocabulary, whose ``get_many`` looks many words up at once). Each distinct surface word
    is resolved once and remembered in a WordMemo of at most ``MEMO_WORDS`` words (when full it
    keeps the words in use and forgets the others): as ``(id + 1) * 8 + echo * 4 + case`` for one
    word, or ``-1 - r`` for a word cut into parts, entry r of the split table. ``echo``: the word is
    its vocabulary word in its own case pattern (``apply_case(words[id], case) == word``), so
    releasing its own id gives it back unchanged (known only when ``words`` is given). Not for
    concurrent use: one instance per thread (TextPrivatizer has one per DoFn instance).
    """

    MEMO_WORDS = 1 << 16

    def __init__(self, word_to_id: Dict[str, int], words: Optional[Sequence[str]] = None):
        self.word_to_id = word_to_id
        self.words = words  # id -> word, to know which words a release of their own id gives back as they are
        self._memo: Optional[WordMemo] = None
        self._splits = _Splits()

    def tokenize(self, text: str) -> Tokenized:
        return self.tokenize_batch([text])[0]

    def state_bytes(self) -> int:
        """Private memory of this tokenizer's memo and split table (numpy arrays)."""
        return (self._memo.nbytes() if self._memo is not None else 0) + self._splits.nbytes()

    def tokenize_batch(self, texts: Sequence[str]) -> TokenizedBatch:
        cut = cut_words(texts)
        values = self._values(cut)
        bounds = np.concatenate(([0], np.cumsum(cut.counts))).astype(np.int64)
        starts, ends = cut.starts, cut.ends
        ids, cases, glued = (values >> 3) - 1, (values & 3).astype(np.uint8), np.zeros(len(values), dtype=bool)
        echoes = (values & 4).astype(bool)
        split = np.flatnonzero(values < 0)
        if len(split):  # replace each split word by its parts
            table = self._splits.arrays()
            entries = -1 - values[split]
            sizes = np.ones(len(values), dtype=np.int64)
            sizes[split] = table.sizes[entries]
            before = np.concatenate(([0], np.cumsum(sizes)))  # new index of each word (and of the end)
            targets = ranges(before[split], sizes[split])
            parts = ranges(table.starts[entries], sizes[split])
            word_starts = np.repeat(starts[split], sizes[split])
            ids, cases, glued, echoes, starts, ends = (np.repeat(a, sizes) for a in (ids, cases, glued, echoes, starts,
                                                                                    ends))
            ids[targets], cases[targets], glued[targets] = table.ids[parts], table.cases[parts], table.glued[parts]
            echoes[targets] = table.echoes[parts]
            starts[targets] = word_starts + table.offsets[parts]
            ends[targets] = word_starts + table.offsets[parts] + table.lengths[parts]
            bounds = before[bounds]
            later = targets[table.offsets[parts] > 0]  # parts after the first: a joiner (or nothing) before them
            cut.in_word[ranges(ends[later - 1], starts[later] - ends[later - 1])] = False
        return TokenizedBatch(cut.text, cut.codes, cut.text_starts, cut.text_ends, starts, ends, ids, cases,
                              glued, bounds, cut.in_word, echoes)

    def _values(self, cut) -> np.ndarray:
        """The memo value of every word of the batch, resolving (and memoizing) the ones not seen yet."""
        if self._memo is None or self._memo.capacity != self.MEMO_WORDS:
            self._memo = WordMemo(self.MEMO_WORDS)
            self._splits = _Splits()
        memo = self._memo
        if memo.count >= memo.capacity:
            if len(self._splits) > memo.capacity:  # the split table only grows: start both over
                memo.clear()
                self._splits = _Splits()
            else:
                memo.make_room()  # keeps the words in use (split entries stay valid)
        codes, starts, ends = cut.codes, cut.starts, cut.ends
        lengths = ends - starts
        keys, packed = word_keys(codes, starts, ends)
        entries = memo.find(keys, packed, codes, starts, lengths)
        values = memo.values[np.maximum(entries, 0)]
        missing = np.flatnonzero(entries < 0)
        if not len(missing):
            return values
        unique_keys, first, inverse = np.unique(keys[missing], return_index=True, return_inverse=True)
        firsts, inverse = missing[first], inverse.reshape(-1)
        resolved = self._resolve(cut, starts[firsts], lengths[firsts])
        memo.add_many(unique_keys, codes, starts[firsts], lengths[firsts], resolved)
        values[missing] = resolved[inverse]
        # a word whose hashed key another word of the batch has too: resolved on its own
        hashed = ~packed[missing]
        missing, model = missing[hashed], firsts[inverse][hashed]
        same_length = lengths[missing] == lengths[model]
        odd = np.concatenate((missing[~same_length], missing[same_length][different_spans(
            codes, starts[missing[same_length]], codes, starts[model[same_length]], lengths[missing[same_length]])]))
        if len(odd):
            values[odd] = self._codes([cut.text[a:b] for a, b in zip(starts[odd].tolist(), ends[odd].tolist())])
        return values

    def _resolve(self, cut, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Memo values of the words ``cut.codes[starts[k]:+lengths[k]]``: ASCII words with numpy
        (when the vocabulary spells every word as its key, so that echo is a case question), the
        others and the words to split word by word (``_codes``)."""
        codes = cut.codes
        chars = codes[ranges(starts, lengths)]
        firsts = np.cumsum(lengths) - lengths  # where each word starts in ``chars``

        def per_word(flags):  # how many code points of each word have the flag
            return np.add.reduceat(flags, firsts) if len(chars) else np.zeros(len(starts), dtype=np.int64)

        ascii_words = per_word(chars >= 128) == 0
        if not (self.words is self.word_to_id and hasattr(self.word_to_id, "get_many")):
            ascii_words[:] = False  # a vocabulary of unknown spelling: the general path
        values = np.zeros(len(starts), dtype=np.int64)
        fast = np.flatnonzero(ascii_words)
        if len(fast):
            capitals = (chars >= 65) & (chars <= 90)
            small = (chars >= 97) & (chars <= 122)
            lowered = chars + np.where(capitals, np.uint32(32), np.uint32(0))
            keys = _split_words(lowered, lengths)
            ids = self.word_to_id.get_many([keys[k] for k in fast.tolist()])
            first_capital = capitals[firsts[fast]]
            capitals_after = per_word(capitals)[fast] - first_capital
            upper = first_capital & (lengths[fast] > 1) & (per_word(small)[fast] == 0)
            cases = np.where(upper, UPPER, np.where(first_capital, CAPITALIZED, LOWER))
            echoes = (ids != UNKNOWN_ID) & (upper | (capitals_after == 0))  # apply_case(key, case) == word
            values[fast] = (ids + 1) * 8 + echoes * 4 + cases
            joined = per_word(np.isin(chars, _ASCII_JOINERS))[fast] > 0  # inside a word: always a joiner
            slow = np.concatenate((np.flatnonzero(~ascii_words), fast[(ids == UNKNOWN_ID) & joined]))  # to split
        else:
            slow = np.arange(len(starts))
        if len(slow):
            text = cut.text
            values[slow] = self._codes([text[a:a + n] for a, n in zip(starts[slow].tolist(), lengths[slow].tolist())])
        return values

    def _ids(self, words: List[str]) -> np.ndarray:
        """Vocabulary ids of surface words (looked up lowercased, ``’`` read as ``'``)."""
        keys = [word.lower().replace("\u2019", "'") for word in words]
        get_many = getattr(self.word_to_id, "get_many", None)
        if get_many is not None:
            return get_many(keys)
        return np.fromiter((self.word_to_id.get(key, UNKNOWN_ID) for key in keys), dtype=np.int64, count=len(keys))

    def _describe(self, words: List[str]) -> tuple:
        """(ids, case patterns, echo flags) of surface words; echo: ``apply_case(words[id], case) == word``."""
        ids = self._ids(words)
        cases = np.fromiter(map(case_pattern, words), dtype=np.int64, count=len(words))
        echoes = np.zeros(len(words), dtype=np.int64)
        known = np.flatnonzero(ids != UNKNOWN_ID)
        if self.words is not None and len(known):
            spelled = vocabulary_words(self.words, ids[known])
            echoes[known] = [apply_case(v, c) == words[k] for k, v, c in zip(known.tolist(), spelled,
                                                                              cases[known].tolist())]
        return ids, cases, echoes

    def _codes(self, words: List[str]) -> np.ndarray:
        """Memo values for surface words: their id, echo flag and case pattern, or their split entry."""
        ids, cases, echoes = self._describe(words)
        values = (ids + 1) * 8 + echoes * 4 + cases
        splitting = [k for k in np.flatnonzero(ids == UNKNOWN_ID).tolist() if _JOINER.search(words[k])]
        if splitting:
            for k, entry in zip(splitting, self._split([words[k] for k in splitting])):
                values[k] = -1 - entry
        return values

    def _split(self, words: List[str]) -> List[int]:
        """Unknown words with joiners: a clitic split if the vocabulary has the word before the
        clitic (``don't`` -> ``do`` + ``n't``), else a split at every joiner (``foo-bar`` -> ``foo``
        ``-`` ``bar``). Adds each to the split table; returns their entries."""
        cuts = []
        for word in words:
            normal = word.lower().replace("\u2019", "'")
            cut = None
            if normal.endswith("n't") and len(normal) > 3:
                cut = len(normal) - 3
            else:
                apostrophe = normal.rfind("'")
                if apostrophe > 0 and normal[apostrophe:] in _CLITICS:
                    cut = apostrophe
            cuts.append(cut if cut is not None and len(normal) == len(word) else None)
        clitic = [k for k, cut in enumerate(cuts) if cut is not None]
        heads = self._ids([words[k][:cuts[k]] for k in clitic])
        for k, head in zip(clitic, heads.tolist()):
            if head == UNKNOWN_ID:
                cuts[k] = None
        pieces = [[word[:cut], "", word[cut:]] if cut is not None else _JOINER.split(word)  # joiners: structure
                  for word, cut in zip(words, cuts)]
        parts = [part for one in pieces for part in one[0::2]]
        ids, cases, echoes = (column.tolist() for column in self._describe(parts))
        sizes, offsets, glued = [], [], []
        for one, cut in zip(pieces, cuts):
            sizes.append(len(one) // 2 + 1)
            offsets.append(0)
            offsets.extend(list(accumulate(len(piece) for piece in one[:-1]))[1::2])
            glued.extend((False, True) if cut is not None else [False] * sizes[-1])
        return self._splits.add(sizes, offsets, list(map(len, parts)), ids, cases, glued, echoes)


@dataclass
class _SplitArrays:
    starts: np.ndarray   # first part of each entry
    sizes: np.ndarray    # parts per entry
    offsets: np.ndarray  # per part: code points from the start of the word
    lengths: np.ndarray
    ids: np.ndarray
    cases: np.ndarray
    glued: np.ndarray
    echoes: np.ndarray


class _Splits:
    """The parts of the words the memo knows to be cut (one entry per distinct surface word), in
    arrays that grow by doubling, so that a batch reads them without converting anything."""

    def __init__(self):
        self._entries, self._parts = 0, 0
        self._per_entry = np.zeros((2, 64), dtype=np.int64)  # start, size
        self._per_part = np.zeros((6, 256), dtype=np.int64)  # offset, length, id, case, glued, echo

    def __len__(self) -> int:
        return self._entries

    def nbytes(self) -> int:
        return self._per_entry.nbytes + self._per_part.nbytes

    def add(self, sizes, offsets, lengths, ids, cases, glued, echoes) -> List[int]:
        """Add entries of ``sizes[e]`` parts each (the part columns flat, in order); returns their numbers."""
        count, parts = len(sizes), len(offsets)
        while self._entries + count > self._per_entry.shape[1]:
            self._per_entry = np.concatenate((self._per_entry, np.zeros_like(self._per_entry)), axis=1)
        while self._parts + parts > self._per_part.shape[1]:
            self._per_part = np.concatenate((self._per_part, np.zeros_like(self._per_part)), axis=1)
        sizes = np.asarray(sizes, dtype=np.int64)
        self._per_entry[0, self._entries:self._entries + count] = self._parts + np.cumsum(sizes) - sizes
        self._per_entry[1, self._entries:self._entries + count] = sizes
        self._per_part[:, self._parts:self._parts + parts] = (offsets, lengths, ids, cases, glued, echoes)
        self._entries += count
        self._parts += parts
        return list(range(self._entries - count, self._entries))

    def arrays(self) -> _SplitArrays:
        entry, part = self._per_entry[:, :self._entries], self._per_part[:, :self._parts]
        return _SplitArrays(entry[0], entry[1], part[0], part[1], part[2], part[3].astype(np.uint8),
                            part[4].astype(bool), part[5].astype(bool))
