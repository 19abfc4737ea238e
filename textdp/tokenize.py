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
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np

LOWER, CAPITALIZED, UPPER = 0, 1, 2
UNKNOWN_ID = -1

WORD_PATTERN = re.compile(r"[^\W_]+(?:(?:['\u2019\-]|(?<=\d)[.,](?=\d))[^\W_]+)*")
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
    """A text cut into pieces; ``slots[k]`` is the index in ``pieces`` of the k-th word."""

    pieces: List[str]
    slots: List[int]
    ids: np.ndarray        # vocabulary id per word, UNKNOWN_ID if absent (int64)
    cases: List[int]       # case pattern per word
    glued: List[bool]      # True: this word is a clitic split off the word before it

    @property
    def words(self) -> List[str]:
        return [self.pieces[s] for s in self.slots]

    def layout(self) -> str:
        """A digest of everything this text releases besides the identities of its words.

        The structure pieces, where the word slots are, each word's case pattern and which words are
        clitics glued to the word before: two texts with the same layout differ in the output only
        through the privatized words (the shuffle accounting groups records by it). A SHA-256 digest
        (32 hex characters), so no text leaves the privatizer in it.
        """
        slot_set = set(self.slots)
        structure = [None if i in slot_set else piece for i, piece in enumerate(self.pieces)]
        payload = json.dumps([structure, list(self.cases), [bool(g) for g in self.glued]], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]

    def render(self, released: Sequence[str], verbatim: Sequence[bool] = ()) -> str:
        """The text with word k replaced by ``released[k]``.

        The word's case pattern is applied unless ``verbatim[k]`` (used for the unknown-word marker).
        """
        pieces = list(self.pieces)
        for k, slot in enumerate(self.slots):
            word = released[k] if verbatim and verbatim[k] else apply_case(released[k], self.cases[k])
            if self.glued[k] and not is_clitic(released[k]):
                word = " " + word
            pieces[slot] = word
        return "".join(pieces)


class Tokenizer:
    """Cuts text into pieces and looks words up in a vocabulary (``word -> id`` mapping)."""

    def __init__(self, word_to_id: Dict[str, int]):
        self.word_to_id = word_to_id

    def _lookup(self, word: str) -> int:
        return self.word_to_id.get(word.lower().replace("\u2019", "'"), UNKNOWN_ID)

    def tokenize(self, text: str) -> Tokenized:
        pieces: List[str] = []
        slots: List[int] = []
        ids: List[int] = []
        glued: List[bool] = []
        last = 0
        for match in WORD_PATTERN.finditer(text):
            pieces.append(text[last:match.start()])
            last = match.end()
            word = match.group()
            word_id = self._lookup(word)
            if word_id != UNKNOWN_ID or not _JOINER.search(word):
                self._add_word(pieces, slots, ids, glued, word, word_id, False)
            else:
                self._add_split(pieces, slots, ids, glued, word)
        pieces.append(text[last:])
        cases = [case_pattern(pieces[s]) for s in slots]
        return Tokenized(pieces, slots, np.asarray(ids, dtype=np.int64), cases, glued)

    @staticmethod
    def _add_word(pieces, slots, ids, glued, word, word_id, is_glued):
        slots.append(len(pieces))
        pieces.append(word)
        ids.append(word_id)
        glued.append(is_glued)

    def _add_split(self, pieces, slots, ids, glued, word):
        """An unknown word with joiners: clitic split if the vocabulary has it, else at joiners."""
        normal = word.lower().replace("\u2019", "'")
        cut = None
        if normal.endswith("n't") and len(normal) > 3:
            cut = len(normal) - 3
        else:
            apostrophe = normal.rfind("'")
            if apostrophe > 0 and normal[apostrophe:] in _CLITICS:
                cut = apostrophe
        if cut is not None and len(normal) == len(word) and self._lookup(word[:cut]) != UNKNOWN_ID:
            head, clitic = word[:cut], word[cut:]
            self._add_word(pieces, slots, ids, glued, head, self._lookup(head), False)
            pieces.append("")
            self._add_word(pieces, slots, ids, glued, clitic, self._lookup(clitic), True)
            return
        parts = _JOINER.split(word)  # word, joiner, word, ..., word: joiners become structure
        for i, part in enumerate(parts):
            if i % 2:
                pieces.append(part)
            else:
                self._add_word(pieces, slots, ids, glued, part, self._lookup(part), False)
