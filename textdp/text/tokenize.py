"""Reversible word tokenization: split text into words to privatize and the structure around them.

A text is cut into alternating *structure* and *word* pieces; joining the pieces gives back the
text exactly. Only words are privatized; structure is copied to the output unchanged. Every Unicode
code point has a defined treatment (textdp.text.word_split states it class by class); in short:

* A word is a run of letters and/or digits, with inner apostrophes or hyphens (``don't``,
  ``well-known``) and, between digits, inner ``.`` or ``,`` (``3.5``, ``1,000``). **Numbers are
  words**: they are looked up and privatized like any other word, because a number (an age, a
  date, an order id) can identify a person just as a name can. Letter-like symbols and
  compatibility forms (``ⓙⓞⓗⓝ``, ``⒥``, ``🄹``, fullwidth ``ＪＯＨＮ``, ligatures) are letters;
  combining marks and invisible format characters (ZWSP, ZWJ, soft hyphen, bidi controls, tag
  characters) belong to the word they stand in.
* Any other symbol (emoji, Braille, regional indicators, dingbats, private use, unassigned code
  points, lone surrogates) is word material too: a run of them is a word of its own (``great😀``
  is ``great`` + ``😀``), which the vocabulary usually lacks, so the OOV policy decides its release
  and it is counted as an unknown word.
* Structure is only whitespace, controls, punctuation and the math/currency/modifier symbols that
  hold no letter in disguise, even when the vocabulary has an entry for them (GloVe has ``,`` ``.``
  ``(``). So the output reveals the record's layout: its length in words and where its punctuation
  is. The summary states this.
* A word is looked up and cased by its ``normal_form``: itself if ASCII, else its NFKC form without
  format characters (``ⓙⓞⓗⓝ`` and ``jo\u200bhn`` are looked up as ``john``, NFD ``cafe\u0301`` as
  ``café``). A word is copied from the input only when it is its released vocabulary word
  letter for letter (the echo flag compares with the surface), so a disguised word is always
  spelled from the vocabulary.
* Lookup is on the lowercased normal form (GloVe 6B is lowercase; ``’`` is read as ``'``). The released
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
textdp.text.token_batch) and keeps a batch as numpy arrays over the code points of its texts: words are
found by one numpy pass (textdp.text.word_split), each distinct surface word is resolved once (id, case
pattern, split) and remembered in a bounded memo looked up for the whole batch at once
(textdp.text.word_memo), and layout digests and released texts are built for the whole batch. Python
runs per word only for the few words that need it (not seen before and not ASCII, changed words
when few change); new ASCII words, the ones to split included, are resolved with numpy. The
output is byte for byte that of the original word-at-a-time implementation (its word rule and
lookup brought to issue 24's), which tests/test_fast_text_path.py keeps as a frozen reference and
compares on IMDb reviews. Non-ASCII words take the Python path (``_codes``), so ``normal_form`` and
its NFKC run once per distinct non-ASCII word, never for ASCII text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Dict, List, Optional, Sequence

import numpy as np

from textdp.text.casing import CAPITALIZED, LOWER, UPPER, apply_case, case_pattern, is_clitic, lookup_form
from textdp.text.token_batch import Tokenized, TokenizedBatch
from textdp.text.word_memo import WordMemo, different_spans, ranges, word_keys
from textdp.text.word_split import WORD_PATTERN, cut_words, normal_form

UNKNOWN_ID = -1

__all__ = ["LOWER", "CAPITALIZED", "UPPER", "UNKNOWN_ID", "WORD_PATTERN", "Tokenized", "TokenizedBatch",
           "Tokenizer", "apply_case", "case_pattern", "is_clitic", "lookup_form", "vocabulary_words", "word_sequences"]

_JOINER = re.compile(r"(['\u2019\-]|(?<=\d)[.,](?=\d))")
_CLITICS = ("'s", "'re", "'ll", "'ve", "'d", "'m")


def vocabulary_words(words: Sequence[str], ids: np.ndarray) -> List[str]:
    """``[words[i] for i in ids]``, gathered in one step when the vocabulary can (CompactVocabulary)."""
    words_at = getattr(words, "words_at", None)
    return words_at(ids) if words_at is not None else list(map(words.__getitem__, np.asarray(ids).tolist()))


def word_sequences(texts: Sequence[str]) -> List[str]:
    """Each text's words as the tokenizer looks them up (``lookup_form`` of their ``normal_form``: case folded,
    ``’`` read as ``'``, NFKC), one space between, structure (whitespace, punctuation, layout) dropped: two
    texts with the same sequence release the same vocabulary words whatever their case, apostrophes or layout (the
    duplicate-input checks, transforms/io.py). Words are cut by one numpy pass over the batch (``cut_words``);
    Python runs per text (one lower/split/join in C) and per word only in texts holding a non-ASCII character."""
    if not texts:
        return []
    cut = cut_words(texts)
    codes = cut.codes.copy()
    codes[~cut.in_word] = 32  # structure: a space
    codes[cut.text_ends[:-1]] = 10  # the texts' separators: a newline
    codes = np.insert(codes, cut.starts, np.uint32(32))  # a space before every word: touching words stay apart
    joined = codes.tobytes().decode("utf-32-le", "surrogatepass").split("\n")
    return [" ".join(text.lower().split()) if text.isascii() else
            " ".join(lookup_form(normal_form(word)) for word in text.split(" ") if word) for text in joined]


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


_ONE_LETTER_CLITICS = tuple(map(ord, "sdm"))  # 's 'd 'm


def _encodable(key: str) -> bool:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _per_span(flags: np.ndarray, firsts: np.ndarray, count: int) -> np.ndarray:
    """How many of each span's entries have the flag (spans back to back from ``firsts``, none empty)."""
    return np.add.reduceat(flags, firsts) if len(flags) else np.zeros(count, dtype=np.int64)


class _AsciiSpans:
    """ASCII code points (``chars``) and their case flags, to describe words that are spans of them."""

    def __init__(self, chars: np.ndarray):
        self.capitals = (chars >= 65) & (chars <= 90)
        self.small = (chars >= 97) & (chars <= 122)
        self.lowered = chars + np.where(self.capitals, np.uint32(32), np.uint32(0))

    def describe(self, word_to_id, starts: np.ndarray, lengths: np.ndarray) -> tuple:
        """(ids, case patterns, echo flags) of the words ``chars[starts[k]:+lengths[k]]`` (none empty):
        ``Tokenizer._describe`` for ASCII words and a vocabulary that spells each word as its key."""
        at = ranges(starts, lengths)
        ids = word_to_id.get_many(_split_words(self.lowered[at], lengths))
        firsts = np.cumsum(lengths) - lengths
        first_capital = self.capitals[starts]
        capitals_after = _per_span(self.capitals[at], firsts, len(starts)) - first_capital
        upper = first_capital & (lengths > 1) & (_per_span(self.small[at], firsts, len(starts)) == 0)
        cases = np.where(upper, UPPER, np.where(first_capital, CAPITALIZED, LOWER))
        echoes = (ids != UNKNOWN_ID) & (upper | (capitals_after == 0))  # apply_case(key, case) == word
        return ids, cases, echoes


class Tokenizer:
    """Cuts text into pieces and looks words up in a vocabulary (``word -> id`` mapping).

    ``word_to_id`` needs only ``get(word, default)`` (a dict, or textdp.artifact.compact_vocab's
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
        split = np.flatnonzero(values < 0)
        glued = np.zeros(len(values), dtype=bool)  # no split word: nothing is glued
        if len(split):  # replace each split word by its parts (memo values of the parts: never negative)
            table = self._splits.arrays()
            entries = -1 - values[split]
            sizes = np.ones(len(values), dtype=np.int64)
            sizes[split] = table.sizes[entries]
            before = np.concatenate(([0], np.cumsum(sizes)))  # new index of each word (and of the end)
            targets = ranges(before[split], sizes[split])
            parts = ranges(table.starts[entries], sizes[split])
            word_starts = np.repeat(starts[split], sizes[split])
            values, starts, ends = np.repeat(values, sizes), np.repeat(starts, sizes), np.repeat(ends, sizes)
            values[targets] = (table.ids[parts] + 1) * 8 + table.echoes[parts] * 4 + table.cases[parts]
            starts[targets] = word_starts + table.offsets[parts]
            ends[targets] = starts[targets] + table.lengths[parts]
            glued = np.zeros(len(values), dtype=bool)  # the expanded length; only parts after a clitic cut are glued
            glued[targets] = table.glued[parts]
            bounds = before[bounds]
            later = targets[table.offsets[parts] > 0]  # parts after the first: a joiner (or nothing) before them
            cut.in_word[ranges(ends[later - 1], starts[later] - ends[later - 1])] = False
        ids, cases, echoes = (values >> 3) - 1, (values & 3).astype(np.uint8), (values & 4).astype(bool)
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
        """Memo values of the words ``cut.codes[starts[k]:+lengths[k]]``: ASCII words with numpy, the
        ones to split included (when the vocabulary spells every word as its key, so that echo is a
        case question), the others word by word (``_codes``)."""
        codes = cut.codes
        chars = codes[ranges(starts, lengths)]
        firsts = np.cumsum(lengths) - lengths  # where each word starts in ``chars``
        ascii_words = _per_span(chars >= 128, firsts, len(starts)) == 0
        if not (self.words is self.word_to_id and hasattr(self.word_to_id, "get_many")):
            ascii_words[:] = False  # a vocabulary of unknown spelling: the general path
        values = np.zeros(len(starts), dtype=np.int64)
        fast = np.flatnonzero(ascii_words)
        if len(fast):
            spans = _AsciiSpans(chars)
            ids, cases, echoes = spans.describe(self.word_to_id, firsts[fast], lengths[fast])
            values[fast] = (ids + 1) * 8 + echoes * 4 + cases
            joined = _per_span(np.isin(chars, _ASCII_JOINERS), firsts, len(starts))[fast] > 0  # always a joiner
            to_split = fast[(ids == UNKNOWN_ID) & joined]
            if len(to_split):
                values[to_split] = self._split_ascii(spans, firsts[to_split], lengths[to_split])
        slow = np.flatnonzero(~ascii_words)
        if len(slow):
            text = cut.text
            values[slow] = self._codes([text[a:a + n] for a, n in zip(starts[slow].tolist(), lengths[slow].tolist())])
        return values

    def _split_ascii(self, spans: "_AsciiSpans", starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """``_split`` for ASCII words (spans of ``spans``) with numpy: memo values of their split entries.

        The same rules: a clitic cut (``n't``, or the last apostrophe before ``'s 're 'll 've 'd 'm``)
        when the vocabulary has the word before it, else a cut at every joiner (``'`` and ``-``, ``.``
        and ``,`` between digits), the joiner left as structure.
        """
        lowered, count = spans.lowered, len(starts)
        at = ranges(starts, lengths)  # the words' code points, word after word
        inside = lowered[at]
        owner = np.repeat(np.arange(count), lengths)
        position = at - starts[owner]  # within its word
        apostrophe = np.full(count, -1, dtype=np.int64)
        marks = np.flatnonzero(inside == 39)
        np.maximum.at(apostrophe, owner[marks], position[marks])  # the last apostrophe of each word

        def char(offset, valid):  # the code point at ``offset`` from each word's start (0 where not valid)
            return np.where(valid, lowered[np.where(valid, starts + offset, 0)], 0)

        nt = (lengths > 3) & (apostrophe == lengths - 2) & (char(lengths - 3, lengths > 3) == 110) \
            & (char(lengths - 1, lengths > 3) == 116)  # ends with n't
        suffix = lengths - apostrophe
        after = char(apostrophe + 1, apostrophe >= 0)
        second = char(apostrophe + 2, (apostrophe >= 0) & (suffix == 3))
        clitic = (apostrophe > 0) & (((suffix == 2) & np.isin(after, _ONE_LETTER_CLITICS))
                                     | ((suffix == 3) & (((after == 114) & (second == 101))       # 're
                                                         | ((after == 108) & (second == 108))    # 'll
                                                         | ((after == 118) & (second == 101)))))  # 've
        cut_at = np.where(nt, lengths - 3, np.where(clitic, apostrophe, -1))
        candidates = np.flatnonzero(cut_at > 0)
        if len(candidates):  # a clitic cut only when the vocabulary has the word before the clitic
            heads = self.word_to_id.get_many(_split_words(lowered[ranges(starts[candidates], cut_at[candidates])],
                                                          cut_at[candidates]))
            cut_at[candidates[heads == UNKNOWN_ID]] = -1
        clitic_cut = cut_at > 0
        # joiners of the other words: ' and - anywhere inside, . and , between digits
        digit = (inside >= 48) & (inside <= 57)
        previous_digit = np.concatenate(([False], digit[:-1])) & (position > 0)
        next_digit = np.concatenate((digit[1:], [False])) & (position < lengths[owner] - 1)
        joiner = (np.isin(inside, (39, 45)) | (np.isin(inside, (44, 46)) & previous_digit & next_digit)) \
            & ~clitic_cut[owner]
        joiner_word, joiner_at = owner[joiner], position[joiner]
        # parts: each word's start, then after each joiner (or at the clitic cut); in order
        cuts = np.flatnonzero(clitic_cut)
        part_word = np.concatenate((np.arange(count), joiner_word, cuts))
        part_start = np.concatenate((np.zeros(count, dtype=np.int64), joiner_at + 1, cut_at[cuts]))
        order = np.lexsort((part_start, part_word))
        part_word, part_start = part_word[order], part_start[order]
        sizes = np.bincount(part_word, minlength=count)
        following = np.concatenate((part_start[1:], [0]))
        last = np.concatenate((part_word[1:] != part_word[:-1], [True]))
        # a part ends where its word does, at the clitic, or at the joiner before the next part
        part_end = np.where(last, lengths[part_word], following - np.where(clitic_cut[part_word], 0, 1))
        glued = clitic_cut[part_word] & (part_start > 0)
        ids, cases, echoes = spans.describe(self.word_to_id, starts[part_word] + part_start, part_end - part_start)
        entries = self._splits.add(sizes, part_start, part_end - part_start, ids, cases, glued, echoes)
        return -1 - np.asarray(entries, dtype=np.int64)

    def _ids(self, words: List[str], normals: Optional[List[str]] = None) -> np.ndarray:
        """Vocabulary ids of surface words (looked up by their ``normal_form``, lowercased, ``’`` read as ``'``)."""
        normals = list(map(normal_form, words)) if normals is None else normals
        keys = list(map(lookup_form, normals))
        keys = [key if key.isascii() or _encodable(key) else "" for key in keys]  # a lone surrogate: unknown
        get_many = getattr(self.word_to_id, "get_many", None)
        if get_many is not None:
            ids = get_many(keys)
        else:
            ids = np.fromiter((self.word_to_id.get(key, UNKNOWN_ID) for key in keys), dtype=np.int64, count=len(keys))
        if "" in keys:  # a word of only format characters: unknown, whatever the vocabulary holds
            ids[[k for k, key in enumerate(keys) if not key]] = UNKNOWN_ID
        return ids

    def _describe(self, words: List[str]) -> tuple:
        """(ids, case patterns, echo flags) of surface words; echo: ``apply_case(words[id], case) == word``.

        The id and the case pattern come from the word's ``normal_form`` (``Ⓙⓞⓗⓝ`` is ``john``,
        Capitalized); echo compares with the surface itself, so a disguised word is never echoed:
        its release is spelled from the vocabulary, not copied from the input."""
        normals = list(map(normal_form, words))
        ids = self._ids(words, normals)
        cases = np.fromiter(map(case_pattern, normals), dtype=np.int64, count=len(words))
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
        ``-`` ``bar``). The clitic is found in the word's normal form when that has the word's length
        (``ⓓⓞⓝ'ⓣ`` is cut as ``don't``). Adds each to the split table; returns their entries."""
        cuts = []
        for word in words:
            normal = lookup_form(normal_form(word))  # disguised words are cut alike (issue 24)
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


def unreadable_entries(words: Sequence[str]) -> np.ndarray:
    """Indices of the vocabulary entries that the tokenizer never reads as themselves (sorted).

    An entry is readable when a text holding only it is read as one word with its own id, or, for a
    clitic (``'ll``, ``'s``), when it follows a vocabulary word (``they'll``) and is read as that word's glued
    clitic with its own id. The others -- punctuation (``,`` ``--``), entries with spaces, control or
    line-separator characters inside, abbreviations with a final dot (``u.s.``), case or NFKC
    variants of another entry -- can never be an input word, and if released they change the
    record's structure (a word becomes punctuation, one word becomes two), so an artifact holds none
    of them (``textdp.artifact.store.build_artifact`` drops them; ``textdp.artifact.locate.verify_artifact`` refuses an
    artifact that holds any). ~1.3 s for GloVe's 400,000 entries.
    """
    words = list(words)
    if not words:
        return np.zeros(0, dtype=np.int64)
    word_to_id: Dict[str, int] = {}
    for index, word in enumerate(words):
        word_to_id.setdefault(word, index)
    tokenizer = Tokenizer(word_to_id)
    own = np.arange(len(words))
    batch = tokenizer.tokenize_batch(words)
    counts = np.asarray(batch.word_counts)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ids = np.asarray(batch.ids)
    readable = (counts == 1) & (ids[np.minimum(first, max(len(ids) - 1, 0))] == own) if len(ids) else counts < 0
    clitics = np.flatnonzero(~readable & np.array([word[:1] in ("'", "\u2019") for word in words]))
    heads = np.flatnonzero(readable & np.array([word.isalpha() for word in words]))
    if len(clitics) and len(heads):  # a clitic is cut off only a word the vocabulary holds
        glued = tokenizer.tokenize_batch([words[heads[0]] + words[i] for i in clitics])
        counts = np.asarray(glued.word_counts)
        second = np.cumsum(counts) - 1
        ok = (counts == 2) & (np.asarray(glued.ids)[second] == clitics) & np.asarray(glued.glued)[second]
        readable[clitics[ok]] = True
    return np.flatnonzero(~readable)
