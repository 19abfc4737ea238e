"""The reversible tokenizer: exact round trips on real reviews, case patterns, and the word rules."""

import numpy as np

from textdp.text.tokenize import CAPITALIZED, LOWER, UNKNOWN_ID, UPPER, Tokenizer, apply_case, case_pattern


def test_round_trip_is_exact_on_real_reviews(imdb_rows, small_artifact):
    """Joining the pieces, or rendering the original words back, gives every review byte for byte."""
    tokenizer = Tokenizer(small_artifact.word_to_id)
    for row in imdb_rows[:500]:
        text = row["text"]
        tokenized = tokenizer.tokenize(text)
        assert "".join(tokenized.pieces) == text
        assert tokenized.render(tokenized.words) == text
        assert len(tokenized.ids) == len(tokenized.slots) == len(tokenized.cases)


def test_whitespace_and_punctuation_are_structure_even_when_in_the_vocabulary(small_artifact):
    vocab = dict(small_artifact.word_to_id)  # an artifact holds no punctuation entry; a vocabulary given by hand may
    assert "," not in vocab
    vocab.update({",": len(vocab), ".": len(vocab) + 1, "(": len(vocab) + 2})  # GloVe's own source has these
    text = "Well,  (really)...\n\tno!"
    tokenized = Tokenizer(vocab).tokenize(text)
    assert tokenized.words == ["Well", "really", "no"]
    assert tokenized.render(["a", "b", "c"]) == "A,  (b)...\n\tc!"


def test_numbers_are_words_and_are_privatized(small_artifact):
    """Numbers (with inner . or , between digits) are words; unknown ones fall back to their digit runs."""
    vocab = {"in": 0, "1999": 1, "3.5": 2, "1,000": 3}
    tokenized = Tokenizer(vocab).tokenize("In 1999 it cost 3.5 dollars, or 1,000 cents.")
    assert tokenized.words == ["In", "1999", "it", "cost", "3.5", "dollars", "or", "1,000", "cents"]
    assert tokenized.ids.tolist()[:5] == [0, 1, UNKNOWN_ID, UNKNOWN_ID, 2]
    real = Tokenizer(small_artifact.word_to_id).tokenize("In 1999 it cost 3.25")
    assert real.words == ["In", "1999", "it", "cost", "3", "25"]  # "3.25" is not among the 5k words
    assert real.ids[1] == small_artifact.word_to_id["1999"]


def test_case_patterns():
    assert [case_pattern(w) for w in ["word", "Word", "WORD", "I", "iPhone", "McDonald", "1999", "A1"]] == \
        [LOWER, CAPITALIZED, UPPER, CAPITALIZED, LOWER, CAPITALIZED, LOWER, UPPER]
    assert apply_case("film", UPPER) == "FILM"
    assert apply_case("film", CAPITALIZED) == "Film"
    assert apply_case("film", LOWER) == "film"


def test_lookup_is_lowercase_and_release_takes_the_input_case():
    tokenizer = Tokenizer({"movie": 0, "great": 1})
    tokenized = tokenizer.tokenize("GREAT Movie great")
    assert tokenized.ids.tolist() == [1, 0, 1]
    assert tokenized.render(["bad", "film", "okay"]) == "BAD Film okay"


def test_contractions_split_like_the_vocabulary(small_artifact):
    """GloVe has "do" + "n't" and "it" + "'s", not "don't" / "it's": unknown contractions are split so."""
    vocab = small_artifact.word_to_id
    assert "don't" not in vocab and "n't" in vocab and "'s" in vocab
    tokenizer = Tokenizer(vocab)
    tokenized = tokenizer.tokenize("I Don't think it\u2019s bad")
    assert tokenized.words == ["I", "Do", "n't", "think", "it", "\u2019s", "bad"]
    assert tokenized.ids[2] == vocab["n't"] and tokenized.ids[5] == vocab["'s"]
    assert tokenized.glued == [False, False, True, False, False, True, False]
    # a released clitic stays glued; a released ordinary word gets a space so words do not run together
    assert tokenized.render(["we", "do", "n't", "say", "that", "'s", "good"]) == "We Don't say that's good"
    assert tokenized.render(["we", "make", "not", "say", "that", "is", "good"]) == "We Make not say that is good"


def test_hyphenated_words_are_looked_up_whole_then_split(small_artifact):
    vocab = small_artifact.word_to_id
    assert Tokenizer({"well-known": 7}).tokenize("Well-known").ids.tolist() == [7]
    tokenized = Tokenizer(vocab).tokenize("film-house")
    assert "film-house" not in vocab
    assert tokenized.words == ["film", "house"]  # the hyphen stays as structure
    assert tokenized.render(["a", "b"]) == "a-b"


def test_unknown_words_get_unknown_id_and_unicode_letters_are_words():
    tokenizer = Tokenizer({"café": 0})
    tokenized = tokenizer.tokenize("Café naïve_x \U0001F600 zzzq")
    assert tokenized.words == ["Café", "naïve", "x", "\U0001F600", "zzzq"]  # "_" is structure, the emoji a word
    assert tokenized.ids.tolist() == [0, UNKNOWN_ID, UNKNOWN_ID, UNKNOWN_ID, UNKNOWN_ID]
    assert tokenized.ids.dtype == np.int64


def test_empty_and_structure_only_text():
    tokenizer = Tokenizer({})
    for text in ["", "   ", "...!?", "\n"]:
        tokenized = tokenizer.tokenize(text)
        assert tokenized.words == [] and tokenized.render([]) == text


def test_layout_is_everything_but_the_words(small_artifact):
    """Texts with the same layout differ in the output only through their words; any other difference
    (case pattern, punctuation, spacing, a clitic split because a word is unknown) changes the layout."""
    tokenizer = Tokenizer(small_artifact.word_to_id)

    def layout(text):
        return tokenizer.tokenize(text).layout()

    same = layout("Good movie, really.\n")
    assert same == layout("Bad film, truly.\n") == layout("Zzqx qqq, ww.\n")  # unknown words too
    for other in ("good movie, really.\n", "Good movie really.\n", "Good  movie, really.\n",
                  "Good movie, really!\n", "Good movie, really.", "Good movie, REALLY.\n", "Good movie, it's.\n"):
        assert layout(other) != same, other
    assert len(same) == 32 and "movie" not in same


def test_layout_of_a_released_review_template_equals_the_input_layout(imdb_rows, small_artifact):
    """Re-rendering a real review with other in-vocabulary lowercase words keeps its layout."""
    tokenizer = Tokenizer(small_artifact.word_to_id)
    words = [w for w in small_artifact.words[100:400] if w.isalpha()]
    rng = np.random.default_rng(3)
    checked = 0
    for row in imdb_rows[:1000]:
        tokenized = tokenizer.tokenize(row["text"])
        if any(tokenized.glued):  # a glued clitic slot filled by a non-clitic gets a space: a different text
            continue
        other = tokenized.render([words[i] for i in rng.integers(0, len(words), len(tokenized.slots))])
        assert tokenizer.tokenize(other).layout() == tokenized.layout()
        checked += 1
    assert checked > 100
