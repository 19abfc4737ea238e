"""Find the words of a batch of texts with numpy instead of the regex engine.

``cut_words(texts)`` returns where every word starts and ends, as code point positions in the
texts joined by a separator, together with those code points as a uint32 array: everything the
tokenizer, the layout digests and the renderer need, with no Python object per word.
``split_pieces`` gives the same cut as lists of strings, exactly ``WORD_CAPTURE.split(text)`` per
text (tests compare the two). Python's regex engine spends ~250 ns per word on IMDb reviews; one
numpy pass over the code points of the whole batch costs a tenth.

The rule: every Unicode code point has one treatment (issue 24). Nothing outside the *structure*
set below is ever copied to the output as structure, so no letter can pass through in disguise.

* **Structure** (released as it is): whitespace (``str.isspace``), controls (Cc), punctuation (P*)
  and the math, currency and modifier symbols (Sm, Sc, Sk), except the code points of those
  classes whose NFKC form holds a letter or digit (``\u20a8`` RUPEE SIGN -> ``Rs``, ``\ufdfc`` RIAL
  SIGN: letters) and the emoji skin-tone modifiers ``U+1F3FB..U+1F3FF`` (they attach to their
  emoji, below). tests/test_unicode_words.py checks every structure code point: no NFKC form
  holds a letter or digit.
* **Letter-like** (``W``): ``str.isalnum()``, or a code point whose NFKC form holds a letter or
  digit: enclosed and parenthesized letters ``ⓙ Ⓙ ⒥``, squared ``🄹``, fullwidth, ligatures,
  ``™``... Such words are looked up by their NFKC form (textdp.text.tokenize), never copied.
* **Extenders** (``E``): combining marks (M*), format characters (Cf: ZWJ/ZWNJ, ZWSP, soft
  hyphen, bidi controls, U+FEFF, the tag characters U+E0000..U+E007F) and the skin-tone
  modifiers. An extender belongs to the word of the code point before it (a mark stays with its
  base: NFD ``cafe\u0301`` and Devanagari vowel signs are one word); after structure, or at the
  start, it starts a letter-like word (so a run of only format characters is an unknown word).
* **Other symbols** (``S``): everything else: So (emoji, dingbats, Braille, regional indicators,
  negative squared letters), private use Co, unassigned Cn, lone surrogates Cs. A run of them
  (with its extenders) is a word of its own, usually unknown: ``great😀`` is ``great`` + ``😀``.

A word is a maximal run of letter-like code points (with their extenders) and joiners: ``'``,
``\u2019`` or ``-`` between two of them, or ``.``/``,`` with a decimal digit (``str.isdecimal()``)
on both sides; or a maximal run of other symbols with their extenders. As a regex
(``WORD_PATTERN``, built from the same classification): ``[WE]+(?:J[WE]+)*|S[SE]*``. Joiners are
structure on their own, so a joiner is part of a word exactly when both of its neighbours are
letter-like (digits for ``.``/``,``), and a greedy match never needs to backtrack. The numpy
classification table is checked against a plain ``unicodedata`` classification for every code
point, and ``split_pieces`` against the regex, by tests/test_fast_text_path.py.

How. The texts are joined with a separator (``\x00``: structure, so no word runs from one text into
the next; a text may contain it too, texts are told apart by position) and encoded to UTF-32, so
that one numpy pass classifies every code point of the batch.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

SEPARATOR = "\x00"

_WORD, _DIGIT, _JOINS_WORDS, _JOINS_DIGITS, _SYMBOL, _EXTEND = 1, 2, 4, 8, 16, 32
_BMP = 0x10000
_STRUCTURE_SYMBOLS = ("Sm", "Sc", "Sk")
_SKIN_TONES = range(0x1F3FB, 0x1F400)  # Sk, but part of their emoji: extenders
_JOINER_CHARS, _DIGIT_JOINER_CHARS = "'\u2019-", ".,"


def _nfkc_has_alnum(char: str) -> bool:
    return not unicodedata.is_normalized("NFKC", char) and any(
        c.isalnum() for c in unicodedata.normalize("NFKC", char))


def code_point_flags(char: str) -> int:
    """The treatment of one code point (see the module docstring): letter-like (_WORD), extender,
    other symbol, or structure (0), plus the digit and joiner flags."""
    category = unicodedata.category(char)
    if char.isalnum():
        flags = _WORD
    elif category[0] == "M" or category == "Cf" or ord(char) in _SKIN_TONES:
        flags = _EXTEND
    elif _nfkc_has_alnum(char):
        flags = _WORD
    elif char.isspace() or category == "Cc" or category[0] == "P" or category in _STRUCTURE_SYMBOLS:
        flags = 0
    else:
        flags = _SYMBOL
    if char.isdecimal():
        flags |= _DIGIT
    if char in _JOINER_CHARS:
        flags |= _JOINS_WORDS
    elif char in _DIGIT_JOINER_CHARS:
        flags |= _JOINS_DIGITS
    return flags


def _bmp_table() -> np.ndarray:
    chars = "".join(map(chr, range(_BMP)))
    table = np.fromiter(map(str.isalnum, chars), dtype=np.uint8, count=_BMP)
    table |= np.fromiter(map(str.isdecimal, chars), dtype=np.uint8, count=_BMP) * np.uint8(_DIGIT)
    for code in np.flatnonzero(table == 0).tolist():  # the rest one by one (ASCII letters are the common case)
        table[code] = code_point_flags(chr(code))
    for char in _JOINER_CHARS:
        table[ord(char)] |= _JOINS_WORDS
    for char in _DIGIT_JOINER_CHARS:
        table[ord(char)] |= _JOINS_DIGITS
    return table


_TABLE = _bmp_table()  # 64 KB, built in ~20 ms at import (the ~15k code points that are not alnum one by one)


def classify(codes: np.ndarray) -> np.ndarray:
    """Flags per code point (uint32 array): a table lookup; code points above the BMP (emoji,
    rare scripts: few in real text) one by one, so that no 1 MB table is built in every process."""
    if not len(codes) or codes.max() < _BMP:
        return _TABLE[codes]
    astral = codes >= _BMP
    flags = _TABLE[np.where(astral, 0, codes)]
    positions = np.flatnonzero(astral)
    flags[positions] = list(map(_astral_flags, codes[positions].tolist()))
    return flags


@functools.lru_cache(maxsize=1 << 12)  # emoji repeat: remember the last few thousand
def _astral_flags(code: int) -> int:
    return code_point_flags(chr(code))


_STRUCTURE, _LETTERS, _SYMBOLS = 0, 1, 2  # word kinds per code point


def _joined(flags: np.ndarray, letters: np.ndarray) -> np.ndarray:
    """True at the joiners between two letter-like code points (digits for ``.``/``,``): inner ones only."""
    digit = (flags & _DIGIT).astype(bool)
    middle = flags[1:-1]
    return (((middle & _JOINS_WORDS) != 0) & letters[:-2] & letters[2:]) \
        | (((middle & _JOINS_DIGITS) != 0) & digit[:-2] & digit[2:])


def word_kinds(flags: np.ndarray) -> np.ndarray:
    """Per code point: 0 structure, 1 in a letter-like word, 2 in a symbol word (int8).

    Extenders take the kind of the code point before them (letter-like after structure); joiners
    are letter-like between two letter-like code points (digits for ``.``/``,``).
    """
    kinds = (flags & _WORD).astype(np.int8)
    special = np.flatnonzero(flags >= _SYMBOL)  # symbols and extenders: few in most text
    if len(special):
        kinds[special[(flags[special] & _SYMBOL) != 0]] = _SYMBOLS
        extend = special[(flags[special] & _EXTEND) != 0]
        if len(extend):
            source = np.arange(len(flags))
            source[extend] = 0
            np.maximum.accumulate(source, out=source)  # the last code point before that is no extender
            before = kinds[source[extend]]
            before[(before == _STRUCTURE) | (source[extend] == extend)] = _LETTERS
            kinds[extend] = before
    if len(flags) > 2:
        kinds[1:-1] |= _joined(flags, kinds == _LETTERS)  # a joiner is structure (0) on its own
    return kinds


def _plain_word_mask(flags: np.ndarray) -> np.ndarray:
    """``word_mask`` of code points none of which is a symbol or an extender (most text): booleans suffice."""
    inside = (flags & _WORD).astype(bool)
    if len(flags) > 2:
        inside[1:-1] |= _joined(flags, inside.copy())
    return inside


def word_mask(flags: np.ndarray) -> np.ndarray:
    """True for every code point that belongs to a word (the vector form of WORD_PATTERN)."""
    if not (flags >= _SYMBOL).any():
        return _plain_word_mask(flags)
    return word_kinds(flags) != _STRUCTURE


@dataclass
class WordCut:
    """The words of a batch: ``text`` is the texts joined by SEPARATOR, ``codes`` its code points.

    Text i is ``text[text_starts[i]:text_ends[i]]``; word k is ``text[starts[k]:ends[k]]``, words
    in reading order, ``counts[i]`` of them in text i.
    """

    text: str
    codes: np.ndarray        # uint32
    text_starts: np.ndarray  # int64 code point positions
    text_ends: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray
    in_word: np.ndarray      # bool per code point


def cut_words(texts: Sequence[str]) -> WordCut:
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    text = SEPARATOR.join(texts)
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    text_ends = np.cumsum(lengths + 1) - 1
    text_starts = text_ends - lengths
    flags = classify(codes)
    if not (flags >= _SYMBOL).any():  # no symbol, no extender: words never touch, edges alternate
        inside = np.zeros(len(codes) + 2, dtype=bool)
        inside[1:-1] = in_word = _plain_word_mask(flags)
        edges = np.flatnonzero(inside[1:] != inside[:-1])  # at i: between code points i - 1 and i
        starts, ends = edges[0::2], edges[1::2]
    else:
        kinds = np.zeros(len(codes) + 2, dtype=np.int8)
        kinds[1:-1] = word_kinds(flags)
        edges = np.flatnonzero(kinds[1:] != kinds[:-1])
        starts = edges[kinds[1:][edges] != _STRUCTURE]
        ends = edges[kinds[:-1][edges] != _STRUCTURE]  # a letter word may end where a symbol word starts
        in_word = kinds[1:-1] != _STRUCTURE
    counts = np.diff(np.concatenate(([0], np.searchsorted(starts, text_ends))))
    return WordCut(text, codes, text_starts, text_ends, starts, ends, counts, in_word)


def split_pieces(texts: Sequence[str]) -> List[List[str]]:
    """``WORD_CAPTURE.split(text)`` for every text, from ``cut_words`` (structure, word, ..., structure)."""
    cut = cut_words(texts)
    out, word = [], 0
    for start, end, count in zip(cut.text_starts.tolist(), cut.text_ends.tolist(), cut.counts.tolist()):
        edges = [start]
        for k in range(word, word + count):
            edges += (int(cut.starts[k]), int(cut.ends[k]))
        edges.append(end)
        out.append([cut.text[a:b] for a, b in zip(edges[:-1], edges[1:])])
        word += count
    return out


def normal_form(word: str) -> str:
    """What a word is looked up and cased by: ``word`` itself when it is ASCII, else its NFKC form
    without format characters (Cf, removed first) and without the structure NFKC may add (the
    parentheses of ``⒥``, spaces); joiners stay. ``ⓙⓞⓗⓝ`` -> ``john``, ``Ⓙⓞⓗⓝ`` -> ``John``,
    ``cafe\u0301`` -> ``café``, ``jo\u200bhn`` -> ``john``, a word of only format characters -> ``""``."""
    if word.isascii() or (word.isprintable() and unicodedata.is_normalized("NFKC", word)):
        return word  # no format character (Cf is not printable), and a word holds no structure but joiners
    visible = "".join(c for c in word if unicodedata.category(c) != "Cf")
    normal = unicodedata.normalize("NFKC", visible)
    if normal.isascii() and normal.isalnum():
        return normal
    return "".join(c for c in normal if code_point_flags(c) & ~_DIGIT)


# --- the same rule as a regex (for callers that match released text: transforms/shuffle.py) -------


def _class_of(flag: int, codes: np.ndarray, flags: np.ndarray) -> str:
    """A regex character class of the code points with ``flag`` (as ranges of escapes)."""
    chosen = np.flatnonzero(flags & flag)
    breaks = np.flatnonzero(np.diff(chosen) != 1)
    firsts = np.concatenate((chosen[:1], chosen[breaks + 1]))
    lasts = np.concatenate((chosen[breaks], chosen[-1:]))
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}"
                   for a, b in zip(codes[firsts].tolist(), codes[lasts].tolist()))


@functools.lru_cache(maxsize=1)
def _word_regex() -> str:
    codes = np.arange(0x110000, dtype=np.uint32)
    flags = np.concatenate((_TABLE, [code_point_flags(chr(code)) for code in range(_BMP, 0x110000)]))  # ~0.5 s
    letter = _class_of(_WORD | _EXTEND, codes, flags)
    symbol, extend = _class_of(_SYMBOL, codes, flags), _class_of(_EXTEND, codes, flags)
    joiner = r"(?:['\u2019\-]|(?<=\d)[.,](?=\d))"
    return f"[{letter}]+(?:{joiner}[{letter}]+)*|[{symbol}][{symbol}{extend}]*"


class _LazyPattern:
    """A compiled regex built on first use (building it classifies all 1.1M code points)."""

    def __init__(self, name, make):
        self._name, self._make, self._compiled = name, make, None

    def __getattr__(self, name):  # only for what the instance lacks: the regex's methods and attributes
        if name.startswith("__") or "_make" not in self.__dict__:  # copy/pickle probing a bare instance
            raise AttributeError(name)
        if self._compiled is None:
            self._compiled = re.compile(self._make())
        return getattr(self._compiled, name)

    def __reduce__(self):  # pickled by name: one pattern per process
        return _pattern_named, (self._name,)


WORD_PATTERN = _LazyPattern("WORD_PATTERN", _word_regex)
WORD_CAPTURE = _LazyPattern("WORD_CAPTURE", lambda: f"({_word_regex()})")  # split() keeps words: structure, word, ...


def _pattern_named(name: str) -> _LazyPattern:
    return globals()[name]
