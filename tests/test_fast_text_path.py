"""The batch text path (numpy word split, memoized lookup, batch layout and render) is byte for byte
the one-word-at-a-time tokenizer and renderer.

``FrozenReference*`` (benchmarks/reference_text_path.py) is a copy of textdp/text/tokenize.py and of TextPrivatizer's
tokenize/release/render steps as they were before the batch path (issue 17), kept here as the
specification: every test compares the current code with it on real IMDb reviews and on
adversarial strings, field by field (pieces, slots, ids, cases, glued, layout digest, rendered text).
Issue 24 changed the word rule (every Unicode class has a treatment, words are looked up by their
NFKC form): the reference's word pattern and lookup were rewritten once to that rule, from
``unicodedata`` alone (``reference_class``, ``reference_normal_form``), independently of
textdp.text.word_split's table; the rest of the reference is unchanged.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from benchmarks.reference_text_path import (
    UNKNOWN_ID,
    WORD_CAPTURE,
    WORD_PATTERN,
    FrozenReferenceTextPrivatizer,
    FrozenReferenceTokenizer,
    frozen_is_clitic,
    reference_class,
)
from tests.conftest import read_imdb
from textdp.artifact.compact_vocab import CompactVocabulary
from textdp.artifact.store import Artifact
from textdp.mechanisms import make_mechanism
from textdp.text import token_batch, word_memo, word_split
from textdp.text import tokenize as tokenize_module
from textdp.text.privatizer import TextPrivatizer
from textdp.text.tokenize import Tokenizer, apply_case, vocabulary_words
from textdp.text.word_memo import WordMemo

# --- the comparisons ------------------------------------------------------------------------------

ADVERSARIAL = [
    "", " ", "   \n\t  ", "\n", "...!?", "don't", "Don't", "DON'T", "don\u2019t", "Don\u2019t", "it's", "It\u2019s",
    "IT'S", "n't", "N'T", "'s", "'", "\u2019", "can't won't ain't shan't", "I'm you're we'll they've she'd",
    "she'd've", "y'all o'clock ma'am rock-'n'-roll", "1990's '90s 90s", "don't-care", "well-known foo-bar-baz",
    "-leading trailing- -both- a--b a-'b", "3.5 1,000 1,000.50 3.5. .5 5. 3..5 3,,5 1.2.3.4 a.b 1.a a.1 U.S.A.",
    "\u0663.\u0665 \u0967,\u0968 \uff11.\uff12", "iPhone McDonald UPPER A I a Ab AB aB X1 1X", "\u00c9COLE \u00e9cole \u00c9cole",
    "na\u00efve caf\u00e9 Stra\u00dfe STRASSE \u00df \u1e9e", "\u0130stanbul \u0130'S \u0130\u0130",
    "\u039f\u0394\u039f\u03a3 \u039f\u0394\u039f\u03a3.\u0391 \u03c3\u03a3",
    "\u01c5ungla \u01c8 \u01c4", "\u216b \u00b2 \u00bd \u2460", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
    "emoji \U0001F600\U0001F44D\U0001F3FD and \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001D400\U0001D401",
    "e\u0301 a\u0301b \u0301 x\u0308y\u0308", "\U00010400\U00010428 \U0001D7CE.\U0001D7CF", "_under_score_ a_b __",
    "tab\tsep quote\"s back\\slash \x00null \x1f\x7f", "\ufdd0 marker \ufdd1 inside\ufdd0word", "\ufeffBOM",
    "x" * 10000, "word " * 2000, "Supercalifragilisticexpialidocious" * 30, "\u2028line\u2029para",
    "It's a DON'T-miss: 10/10, 3.5 stars; the 1,000th viewer's pick\u2026 (\u201cwow\u201d).",
    # issue 24: letters in disguise, marks, format characters, symbols next to letters
    "\u24d9\u24de\u24d7\u24dd \u24bf\u24de\u24d7\u24dd \u24a5\u24aa \U0001F139\U0001F179\U0001F159 "
    "\uff2a\uff4f\uff48\uff4e \ufb01lm",
    "\U0001F1FA\U0001F1F8 \u281a\u2815\u2813\u281d \U000E0041\U000E0042 jo\u200bhn \u200b\u200d \u00ad co\u00adoperate",
    "cafe\u0301 CAFE\u0301 \u0928\u092e\u0938\u094d\u0924\u0947 "
    "\u0645\u064e\u0643\u0652\u062a\u064e\u0628 \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "great\U0001F600! \U0001F44D\U0001F3FD ok \u2122 \u20a8 \ufdfc 1\ufe0f\u20e3 \ue000 \U0010FFFD \u0378 \u2764\ufe0f",
    "do\u200bn't it\u2019\u200ds \u24d3\u24de\u24dd't a-\u0301b \U0001F600-\u0301 \u0301\u0302 x\u202ey\u202c",
]


@pytest.fixture(scope="module")
def default_vocabulary(default_artifact_dir):
    """The default 400k vocabulary, memory-mapped as the workers use it."""
    return CompactVocabulary(os.path.join(default_artifact_dir, "vocab.txt"))


@pytest.fixture(scope="module")
def small_vocabulary(small_artifact_dir):
    """5,000 words: most IMDb words are unknown, so the split and OOV paths run often."""
    return CompactVocabulary(os.path.join(small_artifact_dir, "vocab.txt"))


def assert_same(new, old, text_number):
    assert new.pieces == old.pieces, text_number
    assert new.slots == old.slots, text_number
    assert new.ids.dtype == old.ids.dtype and new.ids.tolist() == old.ids.tolist(), text_number
    assert new.cases == old.cases and all(type(c) is int for c in new.cases), text_number
    assert new.glued == old.glued and all(type(g) is bool for g in new.glued), text_number
    assert new.words == old.words, text_number
    assert new.layout() == old.layout(), text_number


def compare_batch(tokenizer, reference, texts, vocabulary):
    """Tokenize ``texts`` as one batch and one by one; compare with the reference, then render."""
    rng = np.random.default_rng(17)
    mapping = rng.permutation(len(vocabulary))  # a random replacement word for every vocabulary word
    batch = tokenizer.tokenize_batch(texts)
    assert len(batch) == len(texts)
    expected = [reference.tokenize(text) for text in texts]
    layouts = batch.layouts()
    for index, old in enumerate(expected):
        assert_same(batch[index], old, index)
        assert layouts[index] == old.layout(), index
    ids = np.concatenate([old.ids for old in expected]) if expected else np.empty(0, np.int64)
    assert batch.ids.tolist() == ids.tolist()
    if tokenizer.words is not None:  # echo: releasing its own id gives the word back as it stands
        cases = [case for old in expected for case in old.cases]
        spelled = vocabulary_words(vocabulary, np.maximum(ids, 0))
        echoes = [i >= 0 and apply_case(word, case) == surface
                  for i, word, case, surface in zip(ids.tolist(), spelled, cases, batch.words)]
        assert batch.echoes.tolist() == echoes
    assert batch.words == [word for old in expected for word in old.words]
    identity = batch.render(batch.words)
    # rendering the input words gives the texts back, unless a word's case pattern (of its NFKC form,
    # issue 24) re-cases the word itself (the titlecase digraph "\u01c5" is Capitalized: "\u01c4"), or a
    # clitic cut in the normal form leaves a glued part that is no clitic as it stands
    # ("\u24dd't" of "\u24d3\u24de\u24dd't")
    keeps_case = [all(apply_case(w, c) == w and (not g or frozen_is_clitic(w))
                      for w, c, g in zip(old.words, old.cases, old.glued)) for old in expected]
    assert all(keeps_case[index] for index, text in enumerate(texts) if text.isascii())
    assert [one for one, keeps in zip(identity, keeps_case) if keeps] == [t for t, k in zip(texts, keeps_case) if k]
    assert identity == [old.render(old.words) for old in expected]  # ... exactly as before
    replaced = vocabulary_words(vocabulary, mapping[np.maximum(ids, 0)])
    verbatim = rng.random(len(ids)) < 0.2
    start = 0
    rendered, rendered_verbatim = batch.render(replaced), batch.render(replaced, verbatim)
    for index, old in enumerate(expected):
        end = start + len(old.slots)
        assert rendered[index] == old.render(replaced[start:end]), index
        assert rendered_verbatim[index] == old.render(replaced[start:end], verbatim[start:end].tolist()), index
        assert tokenizer.tokenize(texts[index]).render(replaced[start:end]) == rendered[index], index
        start = end
    compare_partial_release(batch, expected, replaced, rng)


def compare_partial_release(batch, expected, replaced, rng):
    """``render_joined`` as the privatizer calls it: most words released as they stand (``original``),
    a few replaced, a few fixed markers; by splicing and by assembling code points alike."""
    count = len(replaced)
    original = rng.random(count) < 0.9
    # the privatizer releases a glued slot as its input word only when that is a clitic as it stands
    # (echo: it spells its vocabulary clitic); a disguised clitic ("\u24dd't", issue 24) is spelled anew
    original &= [not g or frozen_is_clitic(w) for w, g in zip(batch.words, batch.glued.tolist())]
    fixed = {k: "<UNK>" for k in np.flatnonzero(~original & (rng.random(count) < 0.3)).tolist()}
    verbatim = (rng.random(count) < 0.1) | original
    verbatim[list(fixed)] = True
    words = batch.words
    released = [words[k] if original[k] else fixed.get(k, replaced[k]) for k in range(count)]
    gathered = [k for k in range(count) if not original[k] and k not in fixed]
    lengths = np.zeros(count, dtype=np.int64)
    lengths[gathered] = [len(replaced[k]) for k in gathered]
    joined = "".join(replaced[k] for k in gathered)
    start, want = 0, []
    for old in expected:
        end = start + len(old.slots)
        want.append(old.render(released[start:end], verbatim[start:end].tolist()))
        start = end
    for share in (0.0, 1.0):  # assemble every text, splice every text
        batch.SPLICE_SHARE = share
        assert batch.render_joined(joined, lengths, verbatim, original, fixed) == want
    del batch.SPLICE_SHARE


def test_the_code_point_table_is_the_reference_classification():
    """The numpy word rule classifies every Unicode code point as ``reference_class`` (unicodedata)
    does, and marks the decimal digits (regex ``\\d``) and the joiners."""
    kinds = np.array([" WES".index(reference_class(chr(code)) or " ") for code in range(0x110000)])
    digit = np.zeros(0x110000, dtype=bool)
    everything = "".join(map(chr, range(0x110000)))
    digit[[m.start() for m in re.finditer(r"\d", everything)]] = True
    bmp = word_split.classify(np.arange(0x10000, dtype=np.uint32))
    astral = word_split.classify(np.arange(0x10000, 0x110000, dtype=np.uint32))
    flags = np.concatenate([bmp, astral])
    assert np.array_equal((flags & 1) != 0, kinds == 1)
    assert np.array_equal((flags & 32) != 0, kinds == 2)
    assert np.array_equal((flags & 16) != 0, kinds == 3)
    assert np.array_equal((flags & 2) != 0, digit)
    joiners = {ord(c) for c in "'\u2019-.,"}
    assert set(np.flatnonzero(flags & 12).tolist()) == joiners
    assert astral.any() and (kinds[0x10000:] == 1).sum() > 1000  # the astral branch was exercised
    assert word_split.WORD_PATTERN.pattern != WORD_PATTERN.pattern  # two constructions...
    sample = "".join(map(chr, range(0, 0x110000, 97)))
    assert word_split.WORD_CAPTURE.split(sample) == WORD_CAPTURE.split(sample)  # ... of one rule


def test_split_pieces_is_the_regex_split_on_reviews_and_adversarial_text():
    texts = [row["text"] for row in read_imdb(limit=5000)] + ADVERSARIAL + ["a\udc80b \ud800", "\udfff"]
    assert word_split.split_pieces(texts) == [word_split.WORD_CAPTURE.split(text) for text in texts]
    expected = [word_split.WORD_CAPTURE.split(text) for text in texts]
    assert word_split.split_pieces(texts) == expected
    assert [word_split.split_pieces([text])[0] for text in ADVERSARIAL] == expected[5000:5000 + len(ADVERSARIAL)]
    assert word_split.split_pieces([]) == []
    assert word_split.split_pieces(["", ""]) == [[""], [""]]


@pytest.mark.parametrize("spelled", [True, False], ids=["words-given", "lookup-only"])
def test_tokenizer_matches_the_frozen_reference_on_5000_imdb_reviews(default_vocabulary, spelled):
    """With the vocabulary's words given (as the workers build it: ASCII words, split ones included,
    resolved with numpy) and with only a lookup (every new word resolved in Python)."""
    texts = [row["text"] for row in read_imdb(limit=5000)]
    tokenizer = Tokenizer(default_vocabulary, default_vocabulary if spelled else None)
    reference = FrozenReferenceTokenizer(default_vocabulary)
    for start in range(0, len(texts), 250):  # batches as the pipeline sees them, memo warm after the first
        compare_batch(tokenizer, reference, texts[start:start + 250], default_vocabulary)


def test_tokenizer_matches_the_frozen_reference_on_adversarial_text(default_vocabulary, small_vocabulary):
    vocab = {"do": 0, "n't": 1, "it": 2, "'s": 3, "ca": 4, "wo": 5, "well-known": 6, "3.5": 7, "1,000": 8,
             "'": 9, "i": 10, "'m": 11, "foo": 12, "bar": 13, "\u0130": 14, "i\u0307": 15, "caf\u00e9": 16}
    for vocabulary in (default_vocabulary, small_vocabulary, vocab):
        words = vocabulary if not isinstance(vocabulary, dict) else sorted(vocab, key=vocab.get)
        reference = FrozenReferenceTokenizer(vocabulary)
        compare_batch(Tokenizer(vocabulary), reference, ADVERSARIAL, words)
        if not isinstance(vocabulary, dict):  # the workers' configuration: the vocabulary spells its words
            compare_batch(Tokenizer(vocabulary, vocabulary), reference, ADVERSARIAL, words)
        for text in ADVERSARIAL:  # one text at a time (a fresh memo, the single-text entry point)
            assert_same(Tokenizer(vocabulary).tokenize(text), reference.tokenize(text), text[:20])


def test_lone_surrogates_are_unknown_words_and_the_layout_holds_none(default_vocabulary):
    """A lone surrogate is symbol material (issue 24): an unknown word of its own, so it is not in
    the structure and the layout digest (UTF-8) can be computed, as the reference's."""
    text = "bad \udc80 byte a\ud800b"
    new, old = Tokenizer(default_vocabulary).tokenize(text), FrozenReferenceTokenizer(default_vocabulary).tokenize(text)
    assert new.pieces == old.pieces == ["", "bad", " ", "\udc80", " ", "byte", " ", "a", "", "\ud800", "", "b", ""]
    assert new.ids.tolist() == old.ids.tolist() and new.ids[1] == new.ids[4] == UNKNOWN_ID
    assert new.layout() == old.layout()


def test_a_full_memo_starts_over_without_changing_the_output(monkeypatch, small_vocabulary):
    clears = []
    clear = WordMemo.clear
    monkeypatch.setattr(WordMemo, "clear", lambda memo: (clears.append(memo.count), clear(memo)))
    texts = [row["text"] for row in read_imdb(limit=300)]
    tokenizer = Tokenizer(small_vocabulary)
    tokenizer.MEMO_WORDS = 50
    reference = FrozenReferenceTokenizer(small_vocabulary)
    for start in range(0, len(texts), 30):
        compare_batch(tokenizer, reference, texts[start:start + 30], small_vocabulary)
        assert tokenizer._memo.count <= 50
    assert len(clears) >= 10 and set(clears) == {50}


@pytest.mark.parametrize("colliding", ["every word", "hashed words"])
def test_hash_collisions_never_give_a_word_another_words_id(monkeypatch, default_vocabulary, colliding):
    """Words get one of two keys (every word, or every word the memo hashes: longer than 8 code
    points or not ASCII): lookups must still give each word its own id, case and split."""
    def two_keys(lengths):
        return np.where(lengths % 2 == 0, np.uint64(7), np.uint64((1 << 63) | 5)).astype(np.uint64)

    if colliding == "every word":
        monkeypatch.setattr(tokenize_module, "word_keys", lambda codes, starts, ends: (
            two_keys(ends - starts), np.zeros(len(starts), dtype=bool)))
    else:
        monkeypatch.setattr(word_memo, "_hash", lambda codes, starts, lengths: two_keys(lengths))
    texts = [row["text"] for row in read_imdb(limit=60)] + ADVERSARIAL[:40]
    tokenizer, reference = Tokenizer(default_vocabulary), FrozenReferenceTokenizer(default_vocabulary)
    for start in range(0, len(texts), 20):  # the memo holds one word per key; later batches hit and miss
        compare_batch(tokenizer, reference, texts[start:start + 20], default_vocabulary)
    memo = tokenizer._memo
    assert memo.count == 2 if colliding == "every word" else memo.count > 1000


def test_layouts_without_a_free_marker_take_the_piece_by_piece_path(monkeypatch, small_vocabulary):
    """The layout payloads stand a marker code point for the words; a batch holding every candidate
    is written piece by piece instead, with the same digests."""
    monkeypatch.setattr(token_batch, "_MARKERS", ("\ufdd0", "\ufdd1", "\ufdd2", "\ufdd3"))
    texts = ADVERSARIAL[:40] + ['He said "don\'t"\ufdd0 and\\ left.\n', "\ufdd1it's 3.5\ufdd1"]
    assert "\ufdd0" in "".join(texts) and "\ufdd1" in "".join(texts)
    reference = FrozenReferenceTokenizer(small_vocabulary)
    compare_batch(Tokenizer(small_vocabulary), reference, texts + ["\ufdd2"], small_vocabulary)  # one free
    compare_batch(Tokenizer(small_vocabulary), reference, texts, small_vocabulary)  # the last two are free


@pytest.mark.parametrize("policy,epsilon", [("random", 8.0), ("unk", 8.0), ("keep", 8.0), ("random", 300.0),
                                            ("keep", 300.0)])
def test_privatizer_matches_the_frozen_reference_for_every_oov_policy(small_artifact_dir, policy, epsilon):
    """Same mechanism (Madlib on the 5,000-word artifact), same seeds: the same released texts,
    stats and shapes as the reference, with one generator per batch and one per text. At epsilon
    300 almost every word comes back as it was (the renderer copies those from the input)."""
    artifact = Artifact(small_artifact_dir)
    vocabulary = CompactVocabulary(os.path.join(small_artifact_dir, "vocab.txt"))
    texts = [row["text"] for row in read_imdb(limit=150)] + ADVERSARIAL
    marker = "<UNK>" if policy == "unk" else "<unk>"  # a marker other than the default needs policy unk
    new = TextPrivatizer(make_mechanism("madlib", artifact, epsilon), vocabulary, vocabulary, policy, marker)
    old = FrozenReferenceTextPrivatizer(make_mechanism("madlib", artifact, epsilon), vocabulary, vocabulary, policy,
                                        marker)
    unchanged = 0
    with threadpool_limits(1):  # the exact search on a shared 2-core machine
        for start in range(0, len(texts), 50):
            chunk = texts[start:start + 50]
            new_shapes, old_shapes = [], []
            released, stats = new.privatize(chunk, np.random.default_rng(start), new_shapes)
            assert (released, stats) == old.privatize(chunk, np.random.default_rng(start), old_shapes)
            assert new_shapes == old_shapes
            if start == 0 and epsilon < 100:
                assert released != chunk and stats["changed_tokens"] > 0  # the mechanism did replace words
            unchanged += sum(a == b for a, b in zip(released, chunk))
            seeded = [np.random.default_rng([5, start, i]) for i in range(len(chunk))]
            again = [np.random.default_rng([5, start, i]) for i in range(len(chunk))]
            assert new.privatize(chunk, seeded) == old.privatize(chunk, again)
    assert (unchanged > len(texts) // 4) == (epsilon > 100 and policy == "keep")  # whole texts come back as they were


def test_vocabulary_words_gathers_the_words_of_ids(small_artifact_dir, small_artifact):
    vocabulary = CompactVocabulary(os.path.join(small_artifact_dir, "vocab.txt"))
    ids = np.random.default_rng(3).integers(0, len(vocabulary), 5000)
    ids[:3] = [len(vocabulary) - 1, 0, len(vocabulary) - 1]
    expected = [vocabulary[i] for i in ids.tolist()]
    assert vocabulary.words_at(ids) == expected == vocabulary_words(vocabulary, ids)
    assert vocabulary_words(list(small_artifact.words), ids) == expected
    assert vocabulary.words_at(np.empty(0, np.int64)) == []


def test_get_many_is_get_for_every_word(default_vocabulary):
    """The batch lookup of the compact vocabulary answers as ``get`` does, word by word."""
    words = [default_vocabulary[i] for i in range(0, len(default_vocabulary), 389)] + ["", "not-a-word-xyz", "the\nend", "caf\u00e9",
                                                                       "\u0130", "THE", "the ", "\u00e9t\u00e9"]
    expected = [default_vocabulary.get(word, -1) for word in words]
    assert default_vocabulary.get_many(words).tolist() == expected
    assert default_vocabulary.get_many([w for w in words if "\n" not in w]).tolist() == [
        e for w, e in zip(words, expected) if "\n" not in w]
    assert sum(e >= 0 for e in expected) > 1000 and default_vocabulary.get_many([]).tolist() == []
