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

Speed. The privatizer works on batches (``Tokenizer.tokenize_batch``, ``TokenizedBatch``): the
texts are cut with numpy (textdp.word_split), each distinct surface word is looked up, cased and,
if needed, split once and remembered in a bounded per-tokenizer memo (word -> id and case), the
layout digests and the re-assembled texts are built from whole-batch arrays. No step runs Python
code per word except for the words that need it (capitalized, glued clitics, words not seen
before). The output is byte for byte the one of the original one-word-at-a-time implementation,
which tests/test_fast_text_path.py keeps as a frozen reference and compares on IMDb reviews.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from itertools import chain, repeat
from json.encoder import encode_basestring  # what json.dumps(..., ensure_ascii=False) uses for strings
from typing import Dict, List, Optional, Sequence

import numpy as np

from textdp.word_split import WORD_PATTERN, split_pieces

LOWER, CAPITALIZED, UPPER = 0, 1, 2
UNKNOWN_ID = -1

__all__ = ["LOWER", "CAPITALIZED", "UPPER", "UNKNOWN_ID", "WORD_PATTERN", "Tokenized", "TokenizedBatch",
           "Tokenizer", "apply_case", "case_pattern", "is_clitic"]

_JOINER = re.compile(r"(['\u2019\-]|(?<=\d)[.,](?=\d))")
_CLITICS = ("'s", "'re", "'ll", "'ve", "'d", "'m")


def case_pattern(word: str) -> int:
    """LOWER, CAPITALIZED or UPPER for one surface word (digits and mixed case count as LOWER)."""
    first = word[:1]
    if not first.isupper():
        return LOWER
    if len(word) > 1 and word.isupper():
        return UPPER
    return CAPITALIZED


def apply_case(word: str, pattern: int) -> str:
    if pattern == UPPER:
        return word.upper()
    if pattern == CAPITALIZED:
        return word[:1].upper() + word[1:]
    return word


def is_clitic(word: str) -> bool:
    word = word.replace("\u2019", "'").lower()
    return word.startswith("'") or word == "n't"


@dataclass
class Tokenized:
    """A text cut into pieces; ``slots[k]`` is the index in ``pieces`` of the k-th word.

    Pieces alternate structure and word, starting and ending with structure (possibly empty), so
    ``slots`` is always ``[1, 3, 5, ...]``; the batch code relies on it.
    """

    pieces: List[str]
    slots: List[int]
    ids: np.ndarray        # vocabulary id per word, UNKNOWN_ID if absent (int64)
    cases: List[int]       # case pattern per word
    glued: List[bool]      # True: this word is a clitic split off the word before it

    @property
    def words(self) -> List[str]:
        return self.pieces[1::2]

    def _as_batch(self) -> "TokenizedBatch":
        return TokenizedBatch([self.pieces], np.asarray(self.ids, dtype=np.int64),
                              np.asarray(self.cases, dtype=np.uint8), np.asarray(self.glued, dtype=bool),
                              np.array([0, len(self.slots)], dtype=np.int64))

    def layout(self) -> str:
        """A digest of everything this text releases besides the identities of its words.

        The structure pieces, where the word slots are, each word's case pattern and which words are
        clitics glued to the word before: two texts with the same layout differ in the output only
        through the privatized words (the shuffle accounting groups records by it). A SHA-256 digest
        (32 hex characters) of ``json.dumps([structure with None at the word slots, cases, glued],
        ensure_ascii=False)``, so no text leaves the privatizer in it.
        """
        return self._as_batch().layouts()[0]

    def render(self, released: Sequence[str], verbatim: Sequence[bool] = ()) -> str:
        """The text with word k replaced by ``released[k]``.

        The word's case pattern is applied unless ``verbatim[k]`` (used for the unknown-word marker).
        """
        flags = np.asarray(verbatim, dtype=bool) if len(verbatim) else None
        return self._as_batch().render(list(released), flags)[0]


@dataclass
class TokenizedBatch:
    """Texts cut into pieces, with the words of all texts in flat arrays.

    ``pieces[i]`` alternates structure and word for text i, like ``Tokenized.pieces``; the words
    of text i are ``ids[bounds[i]:bounds[i + 1]]`` (and the same range of ``cases`` and ``glued``).
    """

    pieces: List[List[str]]
    ids: np.ndarray     # int64, UNKNOWN_ID for words not in the vocabulary
    cases: np.ndarray   # uint8 case pattern per word
    glued: np.ndarray   # bool: a clitic split off the word before it
    bounds: np.ndarray  # int64, len(pieces) + 1

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, index: int) -> Tokenized:
        start, end = int(self.bounds[index]), int(self.bounds[index + 1])
        return Tokenized(self.pieces[index], list(range(1, 2 * (end - start), 2)), self.ids[start:end].copy(),
                         self.cases[start:end].tolist(), self.glued[start:end].tolist())

    @property
    def word_counts(self) -> np.ndarray:
        return np.diff(self.bounds)

    @property
    def words(self) -> List[str]:
        """The surface words of all texts, in order."""
        return list(chain.from_iterable(pieces[1::2] for pieces in self.pieces))

    def layouts(self) -> List[str]:
        """``Tokenized.layout()`` of every text: the same JSON payload, built without json.dumps.

        ``json.dumps([structure, cases, glued], ensure_ascii=False)`` is, byte for byte,
        ``[[s0, null, s1, null, ...], [c0, c1, ...], [g0, ...]]`` with ``", "`` between items and
        every structure string written by ``encode_basestring``. The case digits come from one
        batch array and a text without glued clitics has an all-``false`` list.
        """
        count = len(self.ids)
        digits = np.empty((count, 3), dtype=np.uint8)
        digits[:, 0] = self.cases + np.uint8(48)  # "0", "1", "2"
        digits[:, 1] = 44                          # ","
        digits[:, 2] = 32                          # " "
        digits = digits.tobytes()
        glued_before = np.concatenate(([0], np.cumsum(self.glued)))
        bounds = self.bounds.tolist()
        has_glued = (glued_before[self.bounds[1:]] > glued_before[self.bounds[:-1]]).tolist()
        out = []
        for index, pieces in enumerate(self.pieces):
            start, end = bounds[index], bounds[index + 1]
            if has_glued[index]:
                glued = json.dumps(self.glued[start:end].tolist()).encode("ascii")
            else:
                glued = b"[" + (b"false, " * (end - start))[:-2] + b"]"
            payload = b"".join((b"[[", ", null, ".join(map(encode_basestring, pieces[0::2])).encode("utf-8"), b"], [",
                                digits[3 * start:max(3 * end - 2, 3 * start)], b"], ", glued, b"]"))
            out.append(hashlib.sha256(payload).hexdigest()[:32])
        return out

    def render(self, released: List[str], verbatim: Optional[np.ndarray] = None) -> List[str]:
        """Every text with its words replaced by ``released`` (one string per word of the batch).

        As ``Tokenized.render``: each word takes its case pattern unless ``verbatim`` is True for
        it, and a glued clitic slot whose released word is not a clitic gets a space in front.
        """
        if len(released) != len(self.ids):
            raise ValueError(f"{len(released)} released words for {len(self.ids)} word slots")
        words = list(released)
        cases, keep_case = self.cases, verbatim if verbatim is not None else np.zeros(len(words), dtype=bool)
        for k in np.flatnonzero((cases == UPPER) & ~keep_case).tolist():
            words[k] = words[k].upper()
        for k in np.flatnonzero((cases == CAPITALIZED) & ~keep_case).tolist():
            word = words[k]
            words[k] = word[:1].upper() + word[1:]
        for k in np.flatnonzero(self.glued).tolist():
            if not is_clitic(released[k]):
                words[k] = " " + words[k]
        bounds = self.bounds.tolist()
        out = []
        for index, pieces in enumerate(self.pieces):
            filled = pieces.copy()
            filled[1::2] = words[bounds[index]:bounds[index + 1]]
            out.append("".join(filled))
        return out


_SPLIT = -1          # memo code of a word that is cut into several (see Tokenizer._split)
_NOT_SEEN = 1 << 62  # memo miss


class Tokenizer:
    """Cuts text into pieces and looks words up in a vocabulary (``word -> id`` mapping).

    ``word_to_id`` needs only ``get(word, default)`` (a dict, or textdp.compact_vocab's
    CompactVocabulary). Each distinct surface word is resolved once and remembered: as a code
    ``(id + 1) * 4 + case`` (one word), or ``_SPLIT`` with its parts kept apart. The memo holds at
    most ``MEMO_WORDS`` words (about 100 bytes each) and starts over when full, so that a worker's
    private memory stays small whatever the vocabulary size; one instance per thread.
    """

    MEMO_WORDS = 1 << 16

    def __init__(self, word_to_id: Dict[str, int]):
        self.word_to_id = word_to_id
        self._codes: Dict[str, int] = {}
        self._splits: Dict[str, tuple] = {}

    def tokenize(self, text: str) -> Tokenized:
        return self.tokenize_batch([text])[0]

    def tokenize_batch(self, texts: Sequence[str]) -> TokenizedBatch:
        pieces = split_pieces(texts)
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)) // 2
        bounds = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        words = list(chain.from_iterable(one[1::2] for one in pieces))
        codes = self._codes_of(words)
        split = np.flatnonzero(codes == _SPLIT)
        if len(split):
            return self._with_splits(pieces, words, codes, split, bounds)
        return TokenizedBatch(pieces, (codes >> 2) - 1, (codes & 3).astype(np.uint8),
                              np.zeros(len(codes), dtype=bool), bounds)

    def _codes_of(self, words: List[str]) -> np.ndarray:
        memo = self._codes
        if len(memo) > self.MEMO_WORDS:
            memo.clear()
            self._splits.clear()
        codes = np.fromiter(map(memo.get, words, repeat(_NOT_SEEN)), dtype=np.int64, count=len(words))
        missing = np.flatnonzero(codes == _NOT_SEEN)
        if len(missing):
            missed = [words[k] for k in missing.tolist()]
            new = {word: self._code(word) for word in set(missed)}
            memo.update(new)
            codes[missing] = list(map(new.__getitem__, missed))
        return codes

    def _lookup(self, word: str) -> int:
        return self.word_to_id.get(word.lower().replace("\u2019", "'"), UNKNOWN_ID)

    def _code(self, word: str) -> int:
        word_id = self._lookup(word)
        if word_id != UNKNOWN_ID or not _JOINER.search(word):
            return (word_id + 1) * 4 + case_pattern(word)
        self._splits[word] = self._split(word)
        return _SPLIT

    def _split(self, word: str) -> tuple:
        """An unknown word with joiners: clitic split if the vocabulary has it, else at joiners.

        Returns (pieces word, structure, word, ..., word; ids; cases; glued) for its parts.
        """
        normal = word.lower().replace("\u2019", "'")
        cut = None
        if normal.endswith("n't") and len(normal) > 3:
            cut = len(normal) - 3
        else:
            apostrophe = normal.rfind("'")
            if apostrophe > 0 and normal[apostrophe:] in _CLITICS:
                cut = apostrophe
        if cut is not None and len(normal) == len(word) and self._lookup(word[:cut]) != UNKNOWN_ID:
            parts = [word[:cut], "", word[cut:]]
            glued = [False, True]
        else:
            parts = _JOINER.split(word)  # word, joiner, word, ..., word: joiners become structure
            glued = [False] * (len(parts) // 2 + 1)
        words = parts[0::2]
        return (parts, [self._lookup(part) for part in words], [case_pattern(part) for part in words], glued)

    def _with_splits(self, pieces, words, codes, split, bounds) -> TokenizedBatch:
        """The batch with every ``_SPLIT`` word replaced by its parts (words and structure)."""
        parts = [self._splits.get(words[k]) or self._split(words[k]) for k in split.tolist()]
        sizes = np.ones(len(codes), dtype=np.int64)
        sizes[split] = [len(part[1]) for part in parts]
        before = np.concatenate(([0], np.cumsum(sizes)))  # new index of each old word (and of the end)
        ids = np.repeat((codes >> 2) - 1, sizes)
        cases = np.repeat(codes & 3, sizes).astype(np.uint8)
        glued = np.zeros(len(ids), dtype=bool)
        targets = np.concatenate([np.arange(before[k], before[k + 1]) for k in split.tolist()])
        ids[targets] = list(chain.from_iterable(part[1] for part in parts))
        cases[targets] = list(chain.from_iterable(part[2] for part in parts))
        glued[targets] = list(chain.from_iterable(part[3] for part in parts))
        texts = (np.searchsorted(bounds, split, side="right") - 1).tolist()
        local = (split - bounds[texts]).tolist()
        pieces = list(pieces)
        position = 0
        while position < len(texts):  # rebuild the pieces of each text that holds split words
            text, rebuilt, taken = texts[position], [], 0
            old = pieces[text]
            while position < len(texts) and texts[position] == text:
                slot = 2 * local[position] + 1
                rebuilt.extend(old[taken:slot])
                rebuilt.extend(parts[position][0])
                taken = slot + 1
                position += 1
            rebuilt.extend(old[taken:])
            pieces[text] = rebuilt
        return TokenizedBatch(pieces, ids, cases, glued, before[bounds])
