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

Speed. The privatizer works on batches (``Tokenizer.tokenize_batch`` -> ``TokenizedBatch``) and
keeps a batch as numpy arrays over the code points of its texts: words are found by one numpy pass
(textdp.word_split), each distinct surface word is resolved once (id, case pattern, split) and
remembered in a bounded memo looked up for the whole batch at once (textdp.word_memo), and layout
digests and released texts are assembled from code point ranges. Python runs per word only for the
few words that need it (not seen before, glued clitics, non-ASCII words to re-case). The output is
byte for byte that of the original word-at-a-time implementation, which
tests/test_fast_text_path.py keeps as a frozen reference and compares on IMDb reviews.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from itertools import accumulate, islice
from json.encoder import encode_basestring  # what json.dumps(..., ensure_ascii=False) uses for strings
from typing import Dict, List, Optional, Sequence

import numpy as np

from textdp.word_memo import WordMemo, different_spans, ranges, word_keys
from textdp.word_split import WORD_PATTERN, cut_words

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
    ``slots`` is always ``[1, 3, 5, ...]``.
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
        edges = np.cumsum([len(piece) for piece in self.pieces])
        text = "".join(self.pieces)
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        return TokenizedBatch(text, codes, np.array([0]), np.array([len(text)]), edges[0:-1:2], edges[1::2],
                              np.asarray(self.ids, dtype=np.int64), np.asarray(self.cases, dtype=np.uint8),
                              np.asarray(self.glued, dtype=bool), np.array([0, len(self.slots)]))

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


# Unicode noncharacters (never meant to occur in text): the first one absent from a batch stands for
# the words when the layout payloads are built
_MARKERS = tuple(map(chr, range(0xFDD0, 0xFDF0))) + tuple(chr(plane + last) for plane in range(0, 0x110000, 0x10000)
                                                      for last in (0xFFFE, 0xFFFF))


@dataclass
class TokenizedBatch:
    """Texts cut into words, as arrays over the code points of the texts joined by a separator.

    Text i is ``text[text_starts[i]:text_ends[i]]``; word k is ``text[starts[k]:ends[k]]`` (parts
    of a split word are words), with ``ids[k]``, ``cases[k]`` and ``glued[k]``; the words of text i
    are ``bounds[i]`` to ``bounds[i + 1]``. Everything between words is structure.
    """

    text: str
    codes: np.ndarray        # uint32 code points of ``text``
    text_starts: np.ndarray  # int64
    text_ends: np.ndarray
    starts: np.ndarray       # int64, one per word
    ends: np.ndarray
    ids: np.ndarray          # int64, UNKNOWN_ID for words not in the vocabulary
    cases: np.ndarray        # uint8 case pattern
    glued: np.ndarray        # bool: a clitic split off the word before it
    bounds: np.ndarray       # int64, one more than the number of texts
    in_word: Optional[np.ndarray] = None  # bool per code point, if known (else derived from the words)
    echoes: Optional[np.ndarray] = None   # bool per word: releasing its own id gives it back as it is

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @property
    def word_counts(self) -> np.ndarray:
        return np.diff(self.bounds)

    def pieces(self, index: int) -> List[str]:
        first, last = int(self.bounds[index]), int(self.bounds[index + 1])
        edges = np.empty(2 * (last - first) + 2, dtype=np.int64)
        edges[0], edges[-1] = self.text_starts[index], self.text_ends[index]
        edges[1:-1:2], edges[2:-1:2] = self.starts[first:last], self.ends[first:last]
        edges = edges.tolist()
        return [self.text[a:b] for a, b in zip(edges[:-1], edges[1:])]

    def __getitem__(self, index: int) -> Tokenized:
        first, last = int(self.bounds[index]), int(self.bounds[index + 1])
        return Tokenized(self.pieces(index), list(range(1, 2 * (last - first), 2)), self.ids[first:last].copy(),
                         self.cases[first:last].tolist(), self.glued[first:last].tolist())

    @property
    def words(self) -> List[str]:
        """The surface words of all texts, in order."""
        text = self.text
        return [text[a:b] for a, b in zip(self.starts.tolist(), self.ends.tolist())]

    def layouts(self) -> List[str]:
        """``Tokenized.layout()`` of every text: the same JSON payload, built without json.dumps.

        ``json.dumps([structure, cases, glued], ensure_ascii=False)`` is, byte for byte,
        ``[[s0, null, s1, null, ...], [c0, c1, ...], [g0, ...]]`` with ``", "`` between items and
        every structure string written by ``encode_basestring``, which escapes code point by code
        point. So the whole batch, words replaced by one marker code point and texts separated by
        another, is escaped in one call and the word markers replaced by ``", null, "``; the case
        digits and the glued flags are written for the whole batch from its arrays.
        """
        if not len(self):
            return []
        markers = list(islice((m for m in _MARKERS if m not in self.text), 2))  # two code points no text has
        structures = self._json_structures(*markers) if len(markers) == 2 else None
        digits = np.empty((len(self.ids), 3), dtype=np.uint8)
        digits[:, 0] = self.cases + np.uint8(48)  # "0", "1", "2"
        digits[:, 1:] = (44, 32)                   # ", "
        digits = digits.tobytes()
        glued = (self.glued.astype(np.uint8) + np.uint8(48)).tobytes().replace(b"0", b"false, ").replace(b"1", b"true, ")
        glued_at = (7 * self.bounds - np.concatenate(([0], np.cumsum(self.glued)))[self.bounds]).tolist()
        bounds = self.bounds.tolist()
        out = []
        for index in range(len(self)):
            first, last = bounds[index], bounds[index + 1]
            if structures is not None:
                structure = structures[index]
            else:
                structure = ", null, ".join(map(encode_basestring, self.pieces(index)[0::2])).encode("utf-8")[1:-1]
            payload = b"".join((b'[["', structure, b'"], [', digits[3 * first:max(3 * last - 2, 3 * first)], b"], [",
                                glued[glued_at[index]:max(glued_at[index + 1] - 2, glued_at[index])], b"]]"))
            out.append(hashlib.sha256(payload).hexdigest()[:32])
        return out

    def _json_structures(self, word_marker: str, text_marker: str) -> List[bytes]:
        """Per text, its structure pieces as JSON strings joined by ``", null, "``, without the outer quotes.

        Every code point gives at most one: ``word_marker`` where a word starts, itself if it is
        structure (the separator between texts becomes ``text_marker``), nothing inside a word.
        """
        keep = self._structure_mask()
        keep[self.starts] = True
        units = self.codes.copy()
        units[self.starts] = ord(word_marker)
        units[self.text_ends[:-1]] = ord(text_marker)
        marked = units[keep].tobytes().decode("utf-32-le", "surrogatepass")
        escaped = encode_basestring(marked)[1:-1].replace(word_marker, '", null, "')
        return escaped.encode("utf-8").split(text_marker.encode("utf-8"))

    def _structure_mask(self) -> np.ndarray:
        """True for every code point outside the words (a new array)."""
        if self.in_word is not None:
            return ~self.in_word
        depth = np.zeros(len(self.codes) + 1, dtype=np.int8)  # +1 where a word starts, -1 where one ends
        depth[self.starts] = 1
        depth[self.ends] -= 1
        return np.cumsum(depth[:-1], dtype=np.int8) <= 0

    def render(self, released: Sequence[str], verbatim: Optional[np.ndarray] = None) -> List[str]:
        """Every text with its words replaced by ``released`` (one string per word of the batch).

        As ``Tokenized.render``: each word takes its case pattern unless ``verbatim`` is True for
        it, and a glued clitic slot whose released word is not a clitic gets a space in front.
        """
        lengths = np.fromiter(map(len, released), dtype=np.int64, count=len(released))
        return self.render_joined("".join(released), lengths, verbatim)

    def render_joined(self, words: str, lengths: np.ndarray, verbatim: Optional[np.ndarray] = None,
                      original: Optional[np.ndarray] = None, fixed: Optional[Dict[int, str]] = None) -> List[str]:
        """``render`` with the released words given as one string and their lengths (code points).

        ``original[k]``: word k is released as the input word itself; ``fixed[k]``: as that string.
        Both are verbatim (no case pattern applied), as are the words with ``verbatim[k]``.
        Texts none of whose words changes come back as they went in; when few words change they
        are spliced into the input text by text, otherwise every text is assembled from code point
        ranges (both give the same text).
        """
        count = len(self.ids)
        if len(lengths) != count:
            raise ValueError(f"{len(lengths)} released words for {count} word slots")
        fixed = fixed or {}
        keep_case = np.zeros(count, dtype=bool) if verbatim is None else np.array(verbatim, dtype=bool)
        if original is None or not original.any():
            original = np.zeros(count, dtype=bool)
        changed = ~original | self.glued  # a glued clitic may need a space in front
        changed[list(fixed)] = True
        keep_case |= original
        if np.count_nonzero(changed) <= count * self.SPLICE_SHARE:
            return self._splice(np.flatnonzero(changed), words, lengths, keep_case, original, fixed)
        word_codes = np.frombuffer(words.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        source = len(self.codes) + np.cumsum(lengths) - lengths  # in codes + word_codes + extra_codes
        length = np.array(lengths, dtype=np.int64)
        source[original] = self.starts[original]
        length[original] = self.ends[original] - self.starts[original]
        joined = np.concatenate((self.codes, word_codes))
        special = self._special_words(joined, source, length, keep_case, fixed)
        if special:
            slots = np.fromiter(special, dtype=np.int64, count=len(special))
            extra = "".join(special.values())
            extra_lengths = np.fromiter(map(len, special.values()), dtype=np.int64, count=len(special))
            source[slots] = len(joined) + np.cumsum(extra_lengths) - extra_lengths
            length[slots] = extra_lengths
            keep_case[slots] = True
            joined = np.concatenate((joined, np.frombuffer(extra.encode("utf-32-le", "surrogatepass"), np.uint32)))
        return self._assemble(np.arange(len(self)), joined, source, length, keep_case)

    SPLICE_SHARE = 0.125  # up to this share of changed words, splicing in Python beats assembling in numpy

    def _splice(self, changed, words, lengths, keep_case, original, fixed) -> List[str]:
        """Every text, with each changed word (slot in ``changed``) cut out and its release put in,
        word by word in Python: ``Tokenized.render``'s rules applied to the few words that change."""
        offsets = (np.cumsum(lengths) - lengths)[changed].tolist()
        owners = (np.searchsorted(self.bounds, changed, side="right") - 1).tolist()
        starts, ends = self.starts[changed].tolist(), self.ends[changed].tolist()
        cases, glued, text = self.cases[changed].tolist(), self.glued[changed].tolist(), self.text
        keep, inputs = keep_case[changed].tolist(), original[changed].tolist()
        out = [text[a:b] for a, b in zip(self.text_starts.tolist(), self.text_ends.tolist())]
        at = 0
        while at < len(changed):
            index, pieces = owners[at], []
            position = int(self.text_starts[index])
            while at < len(changed) and owners[at] == index:
                k = int(changed[at])
                if k in fixed:
                    released = fixed[k]
                elif inputs[at]:
                    released = text[starts[at]:ends[at]]
                else:
                    released = words[offsets[at]:offsets[at] + int(lengths[k])]
                word = released if keep[at] or k in fixed else apply_case(released, cases[at])
                if glued[at] and not is_clitic(released):
                    word = " " + word
                pieces += (text[position:starts[at]], word)
                position = ends[at]
                at += 1
            pieces.append(text[position:int(self.text_ends[index])])
            out[index] = "".join(pieces)
        return out

    def _assemble(self, texts: np.ndarray, joined, source, length, keep_case) -> List[str]:
        """Texts ``texts`` put together from code point ranges: per text structure, word, structure,
        ..., word, structure; structure from the input, word k from ``joined[source[k]:+length[k]]``."""
        if not len(texts):
            return []
        counts = self.word_counts[texts]
        words = ranges(self.bounds[texts], counts)
        has_words = counts > 0
        before = self.ends[np.maximum(words - 1, 0)]  # structure before a word starts after the previous word...
        firsts = np.cumsum(counts) - counts
        before[firsts[has_words]] = self.text_starts[texts[has_words]]  # ... or where its text starts
        last = self.text_starts[texts]
        last[has_words] = self.ends[self.bounds[texts[has_words] + 1] - 1]
        text_of = np.repeat(np.arange(len(texts)), counts)
        word_segment = 2 * np.arange(len(words)) + text_of + 1
        final = 2 * (firsts + counts) + np.arange(len(texts))
        starts, sizes = np.empty(final[-1] + 1, dtype=np.int64), np.empty(final[-1] + 1, dtype=np.int64)
        starts[word_segment - 1], sizes[word_segment - 1] = before, self.starts[words] - before
        starts[word_segment], sizes[word_segment] = source[words], length[words]
        starts[final], sizes[final] = last, self.text_ends[texts] - last
        out = joined[ranges(starts, sizes)]
        at = np.concatenate(([0], np.cumsum(sizes)))  # where each segment starts in ``out``
        _recase_ascii(out, at[word_segment], self.cases[words], length[words], keep_case[words])
        released = out.tobytes().decode("utf-32-le", "surrogatepass")
        return [released[a:b] for a, b in zip(at[final - 2 * counts].tolist(), at[final + 1].tolist())]

    def _special_words(self, joined, source, length, keep_case, fixed) -> Dict[int, str]:
        """The words that need Python: glued slots whose word is no clitic (a space in front),
        ``fixed`` words, and words to re-case that are not ASCII. Returns slot -> final string."""
        def word(k):
            return fixed[k] if k in fixed else joined[source[k]:source[k] + length[k]].tobytes().decode(
                "utf-32-le", "surrogatepass")

        cases = self.cases
        special = {}
        glued = np.flatnonzero(self.glued)
        glued = glued[~_ascii_clitics(joined, source[glued], length[glued])]  # those need a look
        for k in sorted(set(glued.tolist()) | set(fixed)):
            released = word(k)
            spaced = self.glued[k] and not is_clitic(released)
            if spaced or k in fixed:
                cased = released if keep_case[k] or k in fixed else apply_case(released, int(cases[k]))
                special[k] = " " + cased if spaced else cased
        recase = np.flatnonzero((cases != LOWER) & ~keep_case & (length > 0))
        if len(recase):
            first = joined[source[recase]]
            upper = cases[recase] == UPPER
            non_ascii = first >= 128
            if upper.any():
                whole = np.maximum.reduceat(joined[ranges(source[recase[upper]], length[recase[upper]])],
                                            np.concatenate(([0], np.cumsum(length[recase[upper]])[:-1])))
                non_ascii[upper] = whole >= 128
            for k in recase[non_ascii].tolist():
                if k not in special:
                    special[k] = apply_case(word(k), int(cases[k]))
        return special

def _recase_ascii(out: np.ndarray, at: np.ndarray, cases: np.ndarray, length: np.ndarray, keep_case: np.ndarray) -> None:
    """Apply CAPITALIZED and UPPER in place to the words at ``at`` in ``out`` left to re-case:
    ASCII a-z -> A-Z (the others were re-cased in Python)."""
    for pattern in (CAPITALIZED, UPPER):
        slots = np.flatnonzero((cases == pattern) & ~keep_case & (length > 0))
        if not len(slots):
            continue
        positions = at[slots] if pattern == CAPITALIZED else ranges(at[slots], length[slots])
        letters = out[positions]
        lower = (letters >= 97) & (letters <= 122)
        out[positions[lower]] -= 32


_APOSTROPHES = (39, 0x2019)


def _ascii_clitics(codes: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``is_clitic`` for words (spans of ``codes``) made of ASCII and ``’`` only; False for the others.

    For such words ``is_clitic`` is: the first code point is an apostrophe, or the word is ``n't``
    in any case (``’`` read as ``'``).
    """
    if not len(starts) or not len(codes):
        return np.zeros(len(starts), dtype=bool)
    chars = codes[ranges(starts, lengths)]
    others = np.concatenate(([0], np.cumsum((chars >= 128) & (chars != 0x2019))))  # other code points so far
    ends = np.cumsum(lengths)
    plain = (others[ends] == others[ends - lengths]) & (lengths > 0)
    first = codes[np.minimum(starts, len(codes) - 1)]
    clitic = np.isin(first, _APOSTROPHES)
    three = np.flatnonzero(lengths == 3)
    if len(three):
        a, b, c = (codes[starts[three] + i] for i in range(3))
        clitic[three] |= np.isin(a, (78, 110)) & np.isin(b, _APOSTROPHES) & np.isin(c, (84, 116))
    return plain & clitic


def _vocabulary_words(words: Sequence[str], ids: np.ndarray) -> List[str]:
    words_at = getattr(words, "words_at", None)
    return words_at(ids) if words_at is not None else [words[i] for i in ids.tolist()]


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
    CompactVocabulary). Each distinct surface word is resolved once and remembered in a WordMemo
    of at most ``MEMO_WORDS`` words (cleared when full): as ``(id + 1) * 8 + echo * 4 + case`` for
    one word, or ``-1 - r`` for a word cut into parts, entry r of the split table. ``echo``: the
    word is its vocabulary word in its own case pattern (``apply_case(words[id], case) == word``),
    so releasing its own id gives it back unchanged (known only when ``words`` is given). Not for
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
            spelled = _vocabulary_words(self.words, ids[known])
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
