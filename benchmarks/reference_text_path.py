"""The text path as it was before the batch path (issue 17): the specification the fast path is tested against.

``FrozenReference*`` is a copy of textdp/text/tokenize.py and of TextPrivatizer's tokenize/release/render steps
as they were before the batch path, kept as the specification: tests/test_fast_text_path.py compares the
current code with it on real IMDb reviews and on adversarial strings, field by field, and
benchmarks/bench_text_path.py measures the speed-up over it. Issue 24 changed the word rule (every Unicode
class has a treatment, words are looked up by their NFKC form): the reference's word pattern and lookup
were rewritten once to that rule, from ``unicodedata`` alone (``reference_class``,
``reference_normal_form``), independently of textdp's word_split table; the rest is unchanged.

It lives here, not in tests/, so that benchmarks never import tests (tests import benchmarks' readers
and this reference; the layering test keeps that one direction).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np

# --- the word rule of issue 24, from unicodedata alone (the reference's notion of a word) ----------


def reference_class(char: str) -> str:
    """"W" letter-like, "E" extender (marks, format characters, skin tones), "S" other symbol, "" structure."""
    category = unicodedata.category(char)
    if char.isalnum():
        return "W"
    if category[0] == "M" or category == "Cf" or 0x1F3FB <= ord(char) <= 0x1F3FF:
        return "E"
    if any(c.isalnum() for c in unicodedata.normalize("NFKC", char)):
        return "W"
    if char.isspace() or category == "Cc" or category[0] == "P" or category in ("Sm", "Sc", "Sk"):
        return ""
    return "S"


def _reference_classes() -> Dict[str, str]:
    """Regex character classes (ranges) of every code point by ``reference_class``."""
    ranges: Dict[str, list] = {"W": [], "E": [], "S": [], "": []}
    previous, start = None, 0
    for code in range(0x110001):
        kind = reference_class(chr(code)) if code < 0x110000 else None
        if kind != previous:
            if previous is not None:
                ranges[previous].append((start, code - 1))
            previous, start = kind, code
    return {kind: "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in spans) for kind, spans in ranges.items()}


_CLASSES = _reference_classes()
_JOINER_PATTERN = r"(?:['\u2019\-]|(?<=\d)[.,](?=\d))"
WORD_PATTERN = re.compile(f"[{_CLASSES['W']}{_CLASSES['E']}]+(?:{_JOINER_PATTERN}[{_CLASSES['W']}{_CLASSES['E']}]+)*"
                          f"|[{_CLASSES['S']}][{_CLASSES['S']}{_CLASSES['E']}]*")
WORD_CAPTURE = re.compile(f"({WORD_PATTERN.pattern})")


def reference_normal_form(word: str) -> str:
    """NFKC of the word without format characters, without the structure NFKC may add (joiners stay)."""
    if word.isascii():
        return word
    normal = unicodedata.normalize("NFKC", "".join(c for c in word if unicodedata.category(c) != "Cf"))
    return "".join(c for c in normal if reference_class(c) or c in "'\u2019-.,")


# --- frozen reference: textdp/text/tokenize.py before issue 17 (edited only for issue 24's word rule) ---

LOWER, CAPITALIZED, UPPER = 0, 1, 2
UNKNOWN_ID = -1

_JOINER = re.compile(r"(['\u2019\-]|(?<=\d)[.,](?=\d))")
_CLITICS = ("'s", "'re", "'ll", "'ve", "'d", "'m")


def frozen_case_pattern(word: str) -> int:
    first = word[:1]
    if not first.isupper():
        return LOWER
    if len(word) > 1 and word.isupper():
        return UPPER
    return CAPITALIZED


def frozen_apply_case(word: str, pattern: int) -> str:
    if pattern == UPPER:
        return word.upper()
    if pattern == CAPITALIZED:
        return word[:1].upper() + word[1:]
    return word


def frozen_is_clitic(word: str) -> bool:
    word = word.replace("\u2019", "'").lower()
    return word.startswith("'") or word == "n't"


@dataclass
class FrozenReferenceTokenized:
    pieces: List[str]
    slots: List[int]
    ids: np.ndarray
    cases: List[int]
    glued: List[bool]

    @property
    def words(self) -> List[str]:
        return [self.pieces[s] for s in self.slots]

    def layout(self) -> str:
        slot_set = set(self.slots)
        structure = [None if i in slot_set else piece for i, piece in enumerate(self.pieces)]
        payload = json.dumps([structure, list(self.cases), [bool(g) for g in self.glued]], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]

    def render(self, released: Sequence[str], verbatim: Sequence[bool] = ()) -> str:
        pieces = list(self.pieces)
        for k, slot in enumerate(self.slots):
            word = released[k] if verbatim and verbatim[k] else frozen_apply_case(released[k], self.cases[k])
            if self.glued[k] and not frozen_is_clitic(released[k]):
                word = " " + word
            pieces[slot] = word
        return "".join(pieces)


class FrozenReferenceTokenizer:
    def __init__(self, word_to_id: Dict[str, int]):
        self.word_to_id = word_to_id

    def _lookup(self, word: str) -> int:
        key = reference_normal_form(word).lower().replace("\u2019", "'")
        if not key or any(0xD800 <= ord(c) < 0xE000 for c in key):  # only format characters; a lone surrogate
            return UNKNOWN_ID
        return self.word_to_id.get(key, UNKNOWN_ID)

    def tokenize(self, text: str) -> FrozenReferenceTokenized:
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
        cases = [frozen_case_pattern(reference_normal_form(pieces[s])) for s in slots]
        return FrozenReferenceTokenized(pieces, slots, np.asarray(ids, dtype=np.int64), cases, glued)

    @staticmethod
    def _add_word(pieces, slots, ids, glued, word, word_id, is_glued):
        slots.append(len(pieces))
        pieces.append(word)
        ids.append(word_id)
        glued.append(is_glued)

    def _add_split(self, pieces, slots, ids, glued, word):
        normal = reference_normal_form(word).lower().replace("\u2019", "'")  # issue 24: in the normal form
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
        parts = _JOINER.split(word)
        for i, part in enumerate(parts):
            if i % 2:
                pieces.append(part)
            else:
                self._add_word(pieces, slots, ids, glued, part, self._lookup(part), False)


# --- frozen reference: TextPrivatizer.privatize before issue 17 (do not edit) ---------------------

_UNK_MARK = -2


class FrozenReferenceTextPrivatizer:
    def __init__(self, mechanism, words, word_to_id, oov_policy="random", unk_token="<unk>"):
        self.mechanism, self.words, self.oov_policy, self.unk_token = mechanism, words, oov_policy, unk_token
        self.tokenizer = FrozenReferenceTokenizer(word_to_id)

    def privatize(self, texts, rng, shapes=None):
        tokenized = [self.tokenizer.tokenize(text) for text in texts]
        if shapes is not None:
            shapes.extend((len(one.slots), self._layout(one)) for one in tokenized)
        if isinstance(rng, np.random.Generator):
            return self._release(tokenized, rng)
        outputs: List[str] = []
        totals = {"tokens": 0, "changed_tokens": 0, "unknown_tokens": 0}
        for one, one_rng in zip(tokenized, rng):
            released, stats = self._release([one], one_rng)
            outputs.extend(released)
            for key, value in stats.items():
                totals[key] += value
        return outputs, totals

    def _layout(self, one):
        layout = one.layout()
        if self.oov_policy == "random":
            return layout
        unknown = np.flatnonzero(one.ids == UNKNOWN_ID)
        if not len(unknown):
            return layout
        marks = ",".join(map(str, unknown.tolist()))
        return hashlib.sha256(f"{layout}/unknown:{marks}".encode("ascii")).hexdigest()[:32]

    def _release(self, tokenized, rng):
        lengths = [len(t.slots) for t in tokenized]
        ids = np.concatenate([t.ids for t in tokenized]) if tokenized else np.empty(0, np.int64)
        known = ids != UNKNOWN_ID
        unknown = int(len(ids) - known.sum())
        released = np.full(len(ids), UNKNOWN_ID, dtype=np.int64)
        if self.oov_policy == "random":
            inputs = ids.copy()
            if unknown:
                inputs[~known] = rng.integers(0, len(self.words), size=unknown)
            if len(inputs):
                released = self.mechanism.privatize_ids(inputs, rng)
        else:
            if known.any():
                released[known] = self.mechanism.privatize_ids(ids[known], rng)
            if unknown and self.oov_policy == "unk":
                released[~known] = _UNK_MARK
        changed = int((released[known] != ids[known]).sum()) + (unknown if self.oov_policy != "keep" else 0)
        words = self.words
        outputs: List[str] = []
        start = 0
        for one, length in zip(tokenized, lengths):
            chunk = released[start:start + length].tolist()
            start += length
            if self.oov_policy == "random" or min(chunk, default=0) >= 0:
                outputs.append(one.render([words[i] for i in chunk]))
                continue
            originals = one.words
            surface = [words[i] if i >= 0 else (originals[k] if i == UNKNOWN_ID else self.unk_token)
                       for k, i in enumerate(chunk)]
            outputs.append(one.render(surface, verbatim=[i < 0 for i in chunk]))
        return outputs, {"tokens": int(len(ids)), "changed_tokens": changed, "unknown_tokens": unknown}
