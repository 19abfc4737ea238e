"""The tokenizer's output: texts cut into words and structure, their layout digests, their release.

``TokenizedBatch`` holds a batch of texts as numpy arrays over the code points of the texts joined
by a separator (where each word starts and ends, its id, case pattern and glued flag); ``Tokenized``
is one text as lists (``Tokenizer.tokenize``). Both compute the layout digest and put a text back
together with released words by the same code, so they agree byte for byte with each other and
with the original word-at-a-time implementation (tests/test_fast_text_path.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import islice
from json.encoder import encode_basestring  # what json.dumps(..., ensure_ascii=False) uses for strings
from typing import Dict, List, Optional, Sequence

import numpy as np

from textdp.text.casing import CAPITALIZED, LOWER, UPPER, apply_case, is_clitic
from textdp.text.word_memo import ranges


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


# Unicode noncharacters (never meant to occur in text): the first two absent from a batch stand for
# the words and for the breaks between texts when the layout payloads are built
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
        are spliced into the input, text by text, otherwise every text is assembled from code point
        ranges (both give the same text).
        """
        count = len(self.ids)
        if len(lengths) != count:
            raise ValueError(f"{len(lengths)} released words for {count} word slots")
        fixed = fixed or {}
        keep_case = np.zeros(count, dtype=bool) if verbatim is None else np.array(verbatim, dtype=bool)
        if original is None or not original.any():
            original = np.zeros(count, dtype=bool)
        # a glued slot needs a look (a space in front unless its released word is a clitic), except when
        # it is released as its input word, which is always a clitic (Tokenizer._split glues only those)
        changed = ~original
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
