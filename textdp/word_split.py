"""Cut a batch of texts into structure and word pieces with numpy instead of the regex engine.

``split_pieces(texts)`` returns, for every text, exactly ``WORD_CAPTURE.split(text)``: the list
``[structure, word, structure, ..., word, structure]`` (first and last structure possibly empty)
where the words are the matches of ``WORD_PATTERN`` (textdp.tokenize). Python's regex engine
spends ~250 ns per word on IMDb reviews; classifying the code points of the whole batch with a
table and marking the word boundaries costs about a quarter of that, most of it the final
``str.split`` that builds the piece strings.

Why the vector rule is the regex. ``WORD_PATTERN`` is ``W+ (J W+)*`` with W = ``[^\\W_]`` (Python:
``str.isalnum()``) and J a joiner: ``'``, ``\u2019`` or ``-`` between two W, or ``.``/``,`` with a
decimal digit (``\\d``: ``str.isdecimal()``) on both sides. Joiners are not W, so a joiner is part
of a word exactly when both of its neighbours are W (digits for ``.``/``,``), and a greedy match
never needs to backtrack: the words are the maximal runs of code points that are W or such a
joiner. The classification table is checked against the regex for every code point by
tests/test_fast_text_path.py.

How. The texts are joined with a separator code point B (never a word character) and encoded to
UTF-32, so that one numpy pass classifies every code point of the batch. A marker M is inserted at
every word start and end, the batch is decoded once and split at B (texts) and at M (pieces). B and
M are Unicode noncharacters; a text that contains either is split with the regex instead.
"""

from __future__ import annotations

import re
from typing import List, Sequence

import numpy as np

WORD_PATTERN = re.compile(r"[^\W_]+(?:(?:['\u2019\-]|(?<=\d)[.,](?=\d))[^\W_]+)*")
WORD_CAPTURE = re.compile(f"({WORD_PATTERN.pattern})")  # split() keeps the words: structure, word, ...

_TEXT_SEPARATOR = "\ufdd0"  # B: noncharacters, not meant to occur in text
_WORD_MARKER = "\ufdd1"     # M
_SEPARATOR_CODE = ord(_TEXT_SEPARATOR)
_MARKER_CODE = ord(_WORD_MARKER)

_WORD, _DIGIT, _JOINS_WORDS, _JOINS_DIGITS = 1, 2, 4, 8
_BMP = 0x10000


def code_point_flags(char: str) -> int:
    """The classification of one code point (the regex's notion of word character and digit)."""
    flags = _WORD if char.isalnum() else 0
    if char.isdecimal():
        flags |= _DIGIT
    if char in "'\u2019-":
        flags |= _JOINS_WORDS
    elif char in ".,":
        flags |= _JOINS_DIGITS
    return flags


def _bmp_table() -> np.ndarray:
    chars = "".join(map(chr, range(_BMP)))
    table = np.fromiter(map(str.isalnum, chars), dtype=np.uint8, count=_BMP)
    table |= np.fromiter(map(str.isdecimal, chars), dtype=np.uint8, count=_BMP) * np.uint8(_DIGIT)
    for char in "'\u2019-":
        table[ord(char)] |= _JOINS_WORDS
    for char in ".,":
        table[ord(char)] |= _JOINS_DIGITS
    return table


_TABLE = _bmp_table()  # 64 KB, built in ~20 ms at import


def classify(codes: np.ndarray) -> np.ndarray:
    """Flags per code point (uint32 array): a table lookup; code points above the BMP (emoji,
    rare scripts: few in real text) one by one, so that no 1 MB table is built in every process."""
    astral = codes >= _BMP
    if not astral.any():
        return _TABLE[codes]
    flags = _TABLE[np.where(astral, 0, codes)]
    positions = np.flatnonzero(astral)
    flags[positions] = [code_point_flags(chr(code)) for code in codes[positions].tolist()]
    return flags


def word_mask(flags: np.ndarray) -> np.ndarray:
    """True for every code point that belongs to a word (the vector form of WORD_PATTERN)."""
    word = (flags & _WORD).astype(bool)
    inside = word.copy()
    if len(flags) > 2:
        digit = (flags & _DIGIT).astype(bool)
        middle = flags[1:-1]
        inside[1:-1] |= (((middle & _JOINS_WORDS) != 0) & word[:-2] & word[2:]) \
            | (((middle & _JOINS_DIGITS) != 0) & digit[:-2] & digit[2:])
    return inside


def split_pieces(texts: Sequence[str]) -> List[List[str]]:
    """``WORD_CAPTURE.split(text)`` for every text, computed for the whole batch at once."""
    if not texts:
        return []
    odd = [i for i, text in enumerate(texts) if _TEXT_SEPARATOR in text or _WORD_MARKER in text]
    if odd:  # a text holding a marker code point: the regex, same result
        out = split_pieces([t for t in texts if _TEXT_SEPARATOR not in t and _WORD_MARKER not in t])
        for i in odd:
            out.insert(i, WORD_CAPTURE.split(texts[i]))
        return out
    joined = _TEXT_SEPARATOR + _TEXT_SEPARATOR.join(texts) + _TEXT_SEPARATOR
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    inside = word_mask(classify(codes))
    # a marker before every code point where word and structure alternate (word starts and ends);
    # the separators around each text are structure, so every text starts and ends with structure
    boundary = np.zeros(len(codes), dtype=bool)  # True: a marker goes before this code point
    np.not_equal(inside[1:], inside[:-1], out=boundary[1:])
    cuts = np.flatnonzero(boundary)
    markers = cuts + np.arange(len(cuts))  # where the markers land in the marked batch
    marked = np.empty(len(codes) + len(cuts), dtype=np.uint32)
    original = np.ones(len(marked), dtype=bool)
    original[markers] = False
    marked[original] = codes
    marked[markers] = _MARKER_CODE
    marked = marked.tobytes().decode("utf-32-le", "surrogatepass")
    return [text.split(_WORD_MARKER) for text in marked[1:-1].split(_TEXT_SEPARATOR)]
