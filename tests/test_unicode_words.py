"""Issue 24: no character of the input reaches the output as structure unless it is whitespace, a
control, punctuation or a math/currency/modifier symbol that holds no letter or digit. Letters in
disguise (enclosed, squared, parenthesized, fullwidth) are looked up by their NFKC form and released
as vocabulary words; marks and invisible format characters stay in their word; every other symbol
is an unknown word, counted and handled by the OOV policy. Real components throughout: the 5,000-
and 300-word GloVe artifacts, Madlib, TextPrivatizer, textdp.Privatizer, the pipeline on FnApiRunner.
"""

import glob
import json
import unicodedata

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import textdp
from pipelines.privatize import build_pipeline
from textdp.artifact.locate import open_artifact
from textdp.mechanisms import make_mechanism
from textdp.text import word_split
from textdp.text.privatizer import TextPrivatizer
from textdp.text.tokenize import CAPITALIZED, LOWER, UNKNOWN_ID, UPPER, Tokenizer

IDENTITY = 1e6  # Madlib's noise is then far below any word distance: every known word is released as itself
PROPERTY_EXAMPLES = 300  # per OOV policy; docs/privatize.md states this number


def is_structure(char: str) -> bool:
    """The documented structure set, from unicodedata alone (docs/privatize.md)."""
    category = unicodedata.category(char)
    if category[0] == "M" or category == "Cf" or 0x1F3FB <= ord(char) <= 0x1F3FF or char.isalnum():
        return False
    if any(c.isalnum() for c in unicodedata.normalize("NFKC", char)):
        return False
    return char.isspace() or category == "Cc" or category[0] == "P" or category in ("Sm", "Sc", "Sk")


def circled(word: str) -> str:
    """``john`` -> ``ⓙⓞⓗⓝ`` (lowercase ASCII letters only)."""
    return "".join(chr(0x24D0 + ord(c) - 97) for c in word)


def test_no_structure_code_point_hides_a_letter_or_digit():
    """Every code point the tokenizer leaves as structure is in the documented set, and its NFKC form
    holds no letter or digit; the two classes whose NFKC form does (RUPEE SIGN ``Rs``, RIAL SIGN)
    are word material."""
    codes = np.arange(0x110000, dtype=np.uint32)
    structure = np.flatnonzero(word_split.word_kinds(word_split.classify(codes) & ~np.uint32(12)) == 0)
    # (joiner flags cleared: a joiner is structure on its own; word_kinds of the bare classes)
    assert 500 < len(structure) < 5000
    for code in structure.tolist():
        char = chr(code)
        assert not any(c.isalnum() for c in unicodedata.normalize("NFKC", char)), hex(code)
        assert is_structure(char), hex(code)
    listed = [code for code in range(0x110000) if is_structure(chr(code))]
    assert listed == structure.tolist()
    assert 0x20A8 not in listed and 0xFDFC not in listed and 0x24 in listed and 0x2C in listed


@pytest.fixture(scope="module")
def vocab(small_artifact):
    assert all(w in small_artifact.word_to_id for w in ("john", "smith", "lives", "here", "great", "film"))
    return small_artifact.word_to_id


@pytest.mark.parametrize("surface,word,case", [
    ("\u24d9\u24de\u24d7\u24dd", "john", LOWER),            # circled ⓙⓞⓗⓝ
    ("\u24bf\u24de\u24d7\u24dd", "john", CAPITALIZED),      # Ⓙⓞⓗⓝ
    ("\u24bf\u24c4\u24bd\u24c3", "john", UPPER),            # ⒿⓄⒽⓃ
    ("\u24a5\u24aa\u24a3\u24a9", "john", LOWER),            # parenthesized ⒥⒪⒣⒩
    ("\U0001F139\U0001F13E\U0001F137\U0001F13D", "john", UPPER),  # squared 🄹🄾🄷🄽
    ("\uff2a\uff4f\uff48\uff4e", "john", CAPITALIZED),      # fullwidth Ｊｏｈｎ
    ("jo\u200bhn", "john", LOWER),                          # ZWSP inside
    ("\u200dJohn\u200c", "john", CAPITALIZED),              # ZWJ / ZWNJ around
    ("jo\u00adhn", "john", LOWER),                          # soft hyphen
    ("\u202ejohn\u202c", "john", LOWER),                    # bidi override
    ("\ufeffjohn", "john", LOWER),                          # U+FEFF
    ("j\U000E0001o\U000E0068hn", "john", LOWER),            # tag characters inside
    ("\ufb01lm", "film", LOWER),                            # ligature ﬁ
])
def test_letters_in_disguise_are_one_word_looked_up_by_their_nfkc_form(vocab, surface, word, case):
    tokenized = Tokenizer(vocab, None).tokenize(f"{surface} lives")
    assert tokenized.words == [surface, "lives"]
    assert tokenized.ids.tolist() == [vocab[word], vocab["lives"]] and tokenized.cases[0] == case


@pytest.mark.parametrize("surface", [
    "\U0001F179\U0001F159",          # negative squared 🅹🅙 (no NFKC form)
    "\U0001F1FA\U0001F1F8",          # regional indicators 🇺🇸
    "\u281a\u2815\u2813\u281d",      # Braille ⠚⠕⠓⠝ (spells "john")
    "\U000E006A\U000E006F\U000E0068\U000E006E",  # tag characters spelling "john", invisible
    "\u200b\u200d\u2060",            # only format characters
    "\U0001F600",                    # emoji
    "\U0001F44D\U0001F3FD",          # emoji with a skin tone: one word
    "\U0001F468\u200d\U0001F469\u200d\U0001F467",  # ZWJ family: one word
    "\ue000\ue001",                  # private use
    "\u0378",                        # unassigned
    "\u0301",                        # a combining mark after a space
    "\u2122\u00ae",                  # ™ (NFKC "TM") next to ® : ™ is a letter-like word, ® a symbol word
])
def test_other_symbols_are_unknown_words_never_structure(vocab, surface):
    tokenized = Tokenizer(vocab, None).tokenize(f"here {surface} here")
    words = tokenized.words
    assert words[0] == words[-1] == "here" and "".join(words[1:-1]) == surface
    assert tokenized.pieces[0::2] == ["", " ", *[""] * (len(words) - 3), " ", ""]  # nothing of it is structure
    assert all(i == UNKNOWN_ID for i in tokenized.ids.tolist()[1:-1])


def test_marks_stay_with_their_base_character(default_artifact):
    """NFD café is one word looked up as café (the 400k vocabulary has it); Devanagari, Arabic and
    Hebrew words with their vowel signs are one word each."""
    vocab = default_artifact.word_to_id
    for surface in ("cafe\u0301", "CAFE\u0301"):
        tokenized = Tokenizer(vocab, None).tokenize(f"({surface})")
        assert tokenized.words == [surface] and tokenized.ids[0] == vocab["caf\u00e9"], surface
    for surface in ("\u0928\u092e\u0938\u094d\u0924\u0947", "\u0645\u064e\u0643\u0652\u062a\u064e\u0628",
                    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd"):  # नमस्ते, مَكْتَب, שָׁלוֹם
        assert Tokenizer(vocab, None).tokenize(f" {surface} ").words == [surface]  # مَكْتَب, שָׁלוֹם


def test_a_disguised_text_has_the_layout_of_its_plain_text(small_artifact):
    """The shuffle stage's shapes (word count, layout digest: structure, case patterns, clitic cuts)
    come from the normal form: a disguise changes none of them, and no shape holds the text."""
    pairs = [("\u24bf\u24de\u24d7\u24dd lives here.", "John lives here."),
             ("\u24d3\u24de\u24dd'\u24e3 go, \u24be\u24e3'\u24e2 ok", "don't go, It's ok"),
             ("\uff2a\uff2f\uff28\uff2e!", "JOHN!"), ("jo\u200bhn \u24a5\u24aa\u24a3\u24a9", "john john")]
    for policy in ("random", "unk"):
        core = privatizer(small_artifact, policy)
        shapes = []
        core.privatize([text for pair in pairs for text in pair], np.random.default_rng(0), shapes)
        assert shapes[0::2] == shapes[1::2], policy
        assert all(len(digest) == 32 and digest.isalnum() for _, digest in shapes)
    tokenized = Tokenizer(small_artifact.word_to_id).tokenize(pairs[1][0])
    assert tokenized.glued == [False, True, False, False, True, False]  # do + n't, it + 's


def test_symbols_next_to_letters_are_separate_words(vocab):
    tokenized = Tokenizer(vocab, None).tokenize("great\U0001F600! \U0001F600film")
    assert tokenized.words == ["great", "\U0001F600", "\U0001F600", "film"]
    assert tokenized.ids.tolist() == [vocab["great"], UNKNOWN_ID, UNKNOWN_ID, vocab["film"]]


def privatizer(artifact, policy, epsilon=IDENTITY):
    return TextPrivatizer(make_mechanism("madlib", artifact, epsilon), artifact.words, artifact.word_to_id,
                          policy, "<unk>")


def test_a_disguised_word_is_spelled_from_the_vocabulary_never_copied(small_artifact):
    """At epsilon 1e6 every known word is released as itself: a plain word is copied from the input
    (echo), a disguised one is written from the vocabulary in its case pattern."""
    text = ("\u24bf\u24de\u24d7\u24dd \u24e2\u24dc\u24d8\u24e3\u24d7 lives here, "
            "jo\u200bhn \u24bf\u24c4\u24bd\u24c3 John")
    for policy in ("random", "unk", "keep"):
        released, stats = privatizer(small_artifact, policy).privatize([text], np.random.default_rng(0))
        assert released == ["John smith lives here, john JOHN John"], policy
        assert stats == {"tokens": 7, "changed_tokens": 0, "unknown_tokens": 0}


def test_unknown_symbol_words_are_counted_and_follow_the_oov_policy(small_artifact):
    text = "here \u281a\u2815\u2813\u281d \U0001F1FA\U0001F1F8 \U000E006A\U000E006F great\U0001F600 \u200b."
    unk, stats = privatizer(small_artifact, "unk").privatize([text], np.random.default_rng(0))
    assert unk == ["here <unk> <unk> <unk> great<unk> <unk>."]
    assert stats == {"tokens": 7, "changed_tokens": 5, "unknown_tokens": 5}
    random, stats = privatizer(small_artifact, "random", 5.0).privatize([text], np.random.default_rng(0))
    assert stats["tokens"] == 7 and stats["unknown_tokens"] == 5
    # vocabulary words (ASCII but for a few punctuation and currency entries: "\u2014", "\xa3") and ASCII structure
    assert all(c.isascii() or is_structure(c) for c in random[0]) and not any(raw in random[0] for raw in RAW)
    kept, _ = privatizer(small_artifact, "keep").privatize([text], np.random.default_rng(0))
    assert kept == [text]  # 'keep' passes unknown words through: the summary says they are not covered


# --- the property: nothing outside the structure set comes from anywhere but the vocabulary --------

UNKNOWN_SAMPLES = ["\U0001F179\U0001F159", "\U0001F1FA\U0001F1F8", "\u281a\u2815\u2813\u281d", "\U000E006A\U000E006F",
                   "\u200b\u200d", "\U0001F600", "\ue000", "\U000E0041", "\u0301", "\u00ad", "\u2764\ufe0f",
                   "\ud800", "\U0010FFFD", "\u0378", "\u0928\u094d"]


def segments(text: str) -> list:
    """The maximal runs of characters outside the structure set."""
    out, run = [], []
    for char in text:
        if is_structure(char):
            if run:
                out.append("".join(run))
            run = []
        else:
            run.append(char)
    return out + (["".join(run)] if run else [])


def made_of(segment: str, fragments: set, longest: int) -> bool:
    """Whether ``segment`` is a concatenation of ``fragments`` (word break, dynamic programming)."""
    ok = [True] + [False] * len(segment)
    for end in range(1, len(segment) + 1):
        ok[end] = any(ok[start] and segment[start:end] in fragments for start in range(max(0, end - longest), end))
    return ok[-1]


@pytest.fixture(scope="module")
def tiny(tiny_artifact_dir):
    artifact = open_artifact(tiny_artifact_dir)
    # the vocabulary is ASCII but for punctuation ("\u2013"), so any other output character is structure
    assert all(c.isascii() or is_structure(c) for word in artifact.words for c in word)
    assert sum(not word.isascii() for word in artifact.words) <= 3
    return artifact


elements = st.one_of(
    st.tuples(st.just("vocabulary"), st.integers(0, 299)),
    st.tuples(st.just("disguised"), st.integers(0, 299)),
    st.tuples(st.just("unknown"), st.sampled_from(UNKNOWN_SAMPLES)),
    # every general category, lone surrogates (Cs) included: hypothesis leaves out only Cs by default
    st.tuples(st.just("any"), st.text(st.characters(exclude_categories=()), max_size=12)),
)


@pytest.mark.parametrize("policy", ["random", "unk"])
@settings(max_examples=PROPERTY_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(elements, max_size=12))
def test_every_released_character_outside_the_structure_set_comes_from_a_vocabulary_word(tiny, policy, parts):
    words = tiny.words
    alpha = [k for k, w in enumerate(words) if w.isalpha() and w.islower()]
    text_parts, fixed_tokens, fixed_unknown, free = [], 0, 0, []
    for kind, value in parts:
        if kind == "vocabulary":
            text_parts.append(words[alpha[value % len(alpha)]])
        elif kind == "disguised":
            text_parts.append(circled(words[alpha[value % len(alpha)]]))
        elif kind == "unknown":
            text_parts.append(value)
            fixed_unknown += 1
        else:
            text_parts.append(value)
            free.append(value)
        fixed_tokens += kind != "any"
    text = " ".join(text_parts)
    core = privatizer(tiny, policy, 10.0)
    released, stats = core.privatize([text], np.random.default_rng(len(text)))
    # released words take their slot's case pattern (lower, Capitalized, UPPER): compare lowercased
    fragments = {piece.lower() for word in list(words) + ["<unk>"] for piece in segments(word)}
    longest = max(map(len, fragments))
    for segment in segments(released[0]):
        assert made_of(segment.lower(), fragments, longest), (ascii(text), ascii(released[0]))
    assert all(is_structure(c) for c in released[0] if not c.isascii())
    hidden = [one for one, (kind, _) in zip(text_parts, parts) if kind in ("disguised", "unknown")]
    assert not any(one in released[0] for one in hidden)
    # counts: every element is one word, the free text as many as it has on its own
    alone = [core.privatize([one], np.random.default_rng(0))[1] for one in free]
    assert stats["tokens"] == fixed_tokens + sum(s["tokens"] for s in alone)
    assert stats["unknown_tokens"] == fixed_unknown + sum(s["unknown_tokens"] for s in alone)


# --- the real entry points ------------------------------------------------------------------------

DISGUISED = ("\u24bf\u24de\u24d7\u24dd \u24e2\u24dc\u24d8\u24e3\u24d7 lives here "
             "\u281a\u2815\u2813\u281d \U000E006A\U000E006F\U000E0068\U000E006E \U0001F179\U0001F159 \u200b\u200d")
RAW = ["\u24bf", "\u24de", "\u24e2", "\u281a", "\U000E006A", "\U0001F179", "\u200b", "\u200d"]


def test_the_pipeline_never_releases_the_disguise_and_counts_the_unknown_words(tmp_path, small_artifact_dir):
    source = tmp_path / "in.txt"
    source.write_text(DISGUISED + "\n" + "cafe\u0301 great\U0001F600\n", encoding="utf-8")
    output = str(tmp_path / "out")
    argv = ["--runner=FnApiRunner", f"--artifact={small_artifact_dir}", f"--output={output}",
            f"--input={source}", "--epsilon=1e6", "--oov-policy=unk"]
    build_pipeline(PipelineOptions(argv)).run().wait_until_finish()
    lines = []
    for path in sorted(glob.glob(f"{output}-*-of-*.txt")):
        with open(path, encoding="utf-8") as handle:
            lines.extend(handle.read().splitlines())
    assert sorted(lines) == sorted(["John smith lives here <unk> <unk> <unk> <unk>", "<unk> great<unk>"])
    assert not any(raw in line for raw in RAW for line in lines)
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    assert summary["tokens"]["total"] == 8 + 3 and summary["tokens"]["unknown"] == 4 + 2  # café: not in 5,000 words
    assert not any(raw in json.dumps(summary, ensure_ascii=False) for raw in RAW)


def test_the_python_api_never_releases_the_disguise(small_artifact_dir):
    p = textdp.Privatizer(epsilon=IDENTITY, artifact=small_artifact_dir, oov_policy="unk")
    assert p.privatize([DISGUISED]) == ["John smith lives here <unk> <unk> <unk> <unk>"]
    assert p.last_stats["tokens"] == 8 and p.last_stats["unknown_tokens"] == 4
    noisy = textdp.Privatizer(epsilon=5.0, artifact=small_artifact_dir)
    for line in noisy.privatize([DISGUISED] * 3):  # random OOV policy: vocabulary words and ASCII structure only
        assert all(c.isascii() or is_structure(c) for c in line) and not any(raw in line for raw in RAW)
    assert noisy.last_stats["tokens"] == 24 and noisy.last_stats["unknown_tokens"] == 12
