"""Case patterns and clitics: how a released word takes the case of the word it replaces.

The released word takes the input word's case pattern: lower, Capitalized or UPPER (mixed case
such as ``iPhone`` counts as lower, ``McDonald`` as Capitalized). A clitic (``'s``, ``n't``...)
split off the word before it is glued to it again when released, unless the released word is no
clitic (see textdp.text.tokenize).
"""

from __future__ import annotations

LOWER, CAPITALIZED, UPPER = 0, 1, 2


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


def lookup_form(normal: str) -> str:
    """What a word's ``normal_form`` is looked up by in the vocabulary: lowercased, ``’`` read as ``'``
    (GloVe 6B is lowercase). The one home of that rule: the tokenizer and the duplicate-input checks
    (transforms/io.py, through ``textdp.text.tokenize.word_sequences``) ask it."""
    return normal.lower().replace("\u2019", "'")


def is_clitic(word: str) -> bool:
    word = lookup_form(word)
    return word.startswith("'") or word == "n't"
