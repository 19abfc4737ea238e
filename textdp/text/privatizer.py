"""Privatize whole texts with any mechanism: tokenize, release every word, put the text back together.

This is the Beam-free core of the privatize pipeline (``transforms.perturb.PerturbTokens`` calls it
on batches of records) and of its benchmark. A batch of texts becomes one array of word ids and
one call to the mechanism, so the vector work is done once per batch, not once per word; the
texts are cut, looked up, described (layout digests) and put back together as a batch too
(``Tokenizer.tokenize_batch``; benchmarks/bench_text_path.py measures each step).

Out-of-vocabulary (OOV) policy, for words the vocabulary does not have:

``random`` (default)
    release the mechanism's output for a vocabulary word drawn uniformly at random,
    independently of the input word: ``M(u)`` with ``u ~ Uniform(W)``. Its output distribution is
    the mixture ``Q(S) = (1/|W|) sum_u P[M(u) in S]``, the same for every unknown word, so the
    released word carries no information about *which* unknown word stood there. It is also
    covered by the per-token bound that the accounting uses: for any vocabulary word w and any
    output set S, each term satisfies ``P[M(u) in S] <= exp(eps0) P[M(w) in S]`` with
    ``eps0 = epsilon * sup_u d(u, w) <= epsilon * diam(W)`` (``epsilon * min(diam(W), gamma)`` for
    TEM), because M is epsilon*d-private; averaging over u gives ``Q(S) <= exp(eps0) P[M(w) in S]``,
    and the same argument gives ``P[M(w) in S] <= exp(eps0) Q(S)``. So an unknown word is
    indistinguishable from any vocabulary word at the pure local-DP level eps0, the bound every
    vocabulary word already has, and from any other unknown word exactly (ratio 1). A plain
    uniform draw would not be: at small epsilon a word's Madlib output is far from uniform (e.g.
    probability ~0.02 on one word against 1/400,000), which breaks the eps0 bound.
``unk``
    release a fixed marker (``<unk>`` unless configured). The marker shows that an unknown word
    stood there, so the positions of unknown words are part of what a record releases besides its
    words: they are added to the record's layout digest (``shapes``), so that the shuffle
    accounting only groups records with unknown words at the same positions.
``keep``
    release the word unchanged. Those words are NOT covered by any guarantee: this releases
    exactly the rare words (names, ids) that need protection most. The summary says so.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from textdp.errors import ParameterError, TextdpError
from textdp.text.tokenize import UNKNOWN_ID, TokenizedBatch, Tokenizer

OOV_POLICIES = ("random", "unk", "keep")
DEFAULT_UNK_TOKEN = "<unk>"


def check_oov(policy, unk_token) -> None:
    """The out-of-vocabulary settings every entry point accepts (CLI, textdp.Privatizer, transforms.Privatize,
    and the workers): a known policy, a marker other than the default only with the policy ``unk`` (with ``random``
    or ``keep`` it would be ignored without a word, and the user who gave it expects to see it), and a marker that
    is a non-empty string without whitespace (an empty marker would erase the word, one with a space would add
    words: either changes the released layout that the structure statement describes) that holds a word character
    (a marker of punctuation only, "...", would erase the word the same way). ParameterError (a TextdpError and a ValueError), one line."""
    if policy not in OOV_POLICIES:
        raise ParameterError(f"oov_policy must be one of {', '.join(OOV_POLICIES)}, got {policy!r}")
    if not isinstance(unk_token, str) or not unk_token or any(char.isspace() for char in unk_token):
        raise ParameterError("unk_token must be a non-empty string without whitespace")
    if policy != "unk" and unk_token != DEFAULT_UNK_TOKEN:  # a marker given but never used: the user expected it
        raise ParameterError(f"unk_token {DEFAULT_UNK_TOKEN!r} is the only marker oov_policy {policy!r} accepts: the marker is "
                             "used only with oov_policy 'unk' (--oov-policy unk); give that policy or drop the marker")
    if any(unicodedata.category(char).startswith("C") for char in unk_token):
        raise ParameterError("unk_token must be printable: no control, format, private-use, unassigned or surrogate "
                             "characters (they are released as structure or are invisible, so a reader would miscount words)")
    if not Tokenizer({}).tokenize_batch([unk_token]).ids.size:  # "...", "-": read as punctuation, no word
        raise ParameterError(f"unk_token {unk_token!r} holds no word character: the tokenizer reads it as punctuation, "
                             "so an unknown word would vanish from the word count; choose a marker such as <unk>")


def check_unk_token(unk_token: str, word_to_id) -> None:
    """Refuse a marker that the tokenizer does not read as exactly one word outside the vocabulary: one read as a
    vocabulary word (``--unk-token the``) makes an unknown word look exactly like a released ``the``; one read as
    several words (``the-the``, ``of/and``, ``unk.unk``) releases each unknown word as several words (which may be
    vocabulary words) and changes the word count the structure statement says is kept. ParameterError, one line."""
    batch = Tokenizer(word_to_id).tokenize_batch([unk_token])
    if len(batch.ids) > 1:
        known = int((np.asarray(batch.ids) >= 0).sum())
        raise ParameterError(f"unk_token {unk_token!r} is read as {len(batch.ids)} words ({known} of them vocabulary words), "
                             "not one: each unknown word would be released as several words; choose a marker that is "
                             "one word outside the vocabulary, such as <unk>")
    if len(batch.ids) == 1 and int(batch.ids[0]) >= 0:
        raise ParameterError(f"unk_token {unk_token!r} is read as the vocabulary word {batch.words[0]!r}: an unknown "
                             "word would look like a released one; choose a marker that is not a word, such as <unk>")
    scripts = sorted({script for script in map(_letter_script, unk_token) if script})
    if len(scripts) > 1:
        raise ParameterError(f"unk_token {unk_token!r} mixes {' and '.join(scripts)} letters, the way a look-alike of a "
                             "word is made: a reader could take the marker for a released word; choose a marker in one "
                             "script, such as <unk>")
    if len(batch.ids) == 1:
        word = batch.words[0]
        seen = "".join(LOOKALIKES.get(char, char) for char in unicodedata.normalize("NFKC", word))
        for form in dict.fromkeys((seen, seen.lower())):
            if form != word and form in word_to_id:
                raise ParameterError(f"unk_token {unk_token!r} looks like the vocabulary word {form!r} (it differs only "
                                     "by look-alike letters): an unknown word would look like a released one; choose a "
                                     "marker that is not a word, such as <unk>")


# Cyrillic and Greek letters drawn like a Latin one (Unicode's confusables for the Latin alphabet, the common part):
# an --unk-token made of them reads as a vocabulary word (check_unk_token).
LOOKALIKES = {**dict(zip("аеорсухіјѕһԁԛԝӏАВЕКМНОРСТХІЈЅ", "aeopcyxijshdqwlABEKMHOPCTXIJS")),
              **dict(zip("οαντικρυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "oavtikpyxABEZHIKMNOPTYX"))}


def _letter_script(char: str) -> Optional[str]:
    """LATIN, CYRILLIC, GREEK... for a letter (the first word of its Unicode name), None for any other character."""
    if not char.isalpha():
        return None
    name = unicodedata.name(char, "")
    return name.split(" ", 1)[0] if name else None


_UNK_MARK = -2


def released_ids(mechanism, ids, rng, vocab_size: int) -> np.ndarray:
    """``mechanism.privatize_ids(ids, rng)``, checked: the one call every release path makes (the text path, the
    API's figures, calibrate, audit). The result must be an array of integers, one per input id, each a
    vocabulary id in [0, vocab_size): textdp's own negative ids (keep the input word, the unk marker) and float
    ids must never come from a mechanism, or the input would be released verbatim. Else TextdpError naming the
    mechanism's class and what was wrong (never the words). Cost: one dtype test and one min/max pass over the
    batch's ids (a few microseconds per 4,096 ids, against milliseconds for the draw itself)."""
    cls = type(mechanism)
    try:
        out = mechanism.privatize_ids(ids, rng)
    except Exception as exc:
        if cls.__module__.startswith("textdp.mechanisms."):  # textdp's own code: its messages never quote words
            raise
        # Code textdp did not write receives the record's word ids: its message may quote the words, so only the
        # exception's type is relayed (one line, from None: no cause whose message a runner would log).
        raise TextdpError(f"the custom mechanism {getattr(cls, 'name', '')!r} ({cls.__module__}.{cls.__qualname__}) raised "
                          f"{type(exc).__name__} in privatize_ids; its message is not shown (it may quote the record's "
                          "words): run the class on test ids to see it") from None
    what = f"mechanism {getattr(cls, 'name', '')!r} ({cls.__module__}.{cls.__qualname__}): privatize_ids returned"
    if not isinstance(out, np.ndarray):
        try:
            out = np.asarray(out)
        except Exception:  # an object numpy cannot read
            raise TextdpError(f"{what} a {type(out).__name__}, not an array of vocabulary ids") from None
    if out.dtype.kind not in "iu" or isinstance(out, np.ma.MaskedArray):
        raise TextdpError(f"{what} an array of {out.dtype}, not of integers (one vocabulary id per input id)")
    if out.shape != (len(ids),):
        raise TextdpError(f"{what} an array of shape {out.shape} for {len(ids):,} input ids (one id per input id)")
    if len(out):
        low, high = int(out.min()), int(out.max())
        if low < 0 or high >= int(vocab_size):
            bad = low if low < 0 else high
            raise TextdpError(f"{what} the id {bad:,}, outside the vocabulary's [0, {int(vocab_size):,}); "
                              "nothing was released")
    return out.astype(np.int64, copy=False)


class TextPrivatizer:
    """Releases texts word by word with ``mechanism`` over the vocabulary ``words``."""

    def __init__(self, mechanism, words: Sequence[str], word_to_id: Dict[str, int],
                 oov_policy: str = "random", unk_token: str = DEFAULT_UNK_TOKEN):
        check_oov(oov_policy, unk_token)
        if oov_policy == "unk":
            check_unk_token(unk_token, word_to_id)
        self.mechanism = mechanism
        self.words = words
        self.tokenizer = Tokenizer(word_to_id, words)
        self.oov_policy = oov_policy
        self.unk_token = unk_token

    def privatize(self, texts: Sequence[str],
                  rng: Union[np.random.Generator, Sequence[np.random.Generator]],
                  shapes: Optional[List[Tuple[int, str]]] = None) -> tuple:
        """Return (released texts, stats) for ``texts``.

        ``rng`` is one generator for the whole batch (one mechanism call), or one generator per
        text (seeded, reproducible runs: each text then gets its own call and its own stream).
        ``stats`` counts ``tokens`` (words released), ``changed_tokens`` (released word differs
        from the input word, compared lowercase), ``unknown_tokens`` (words not in the vocabulary).
        ``shapes``: a list to which (number of privatized words, layout digest) is appended per
        text: what the text releases besides its words (for the shuffle accounting). The digest is
        ``Tokenized.layout()``, extended with the positions of unknown words when the policy
        releases them visibly (``unk``, ``keep``).
        """
        batch = self.tokenizer.tokenize_batch(texts)
        if shapes is not None:
            shapes.extend(zip(batch.word_counts.tolist(), self._layouts(batch)))
        if isinstance(rng, np.random.Generator):
            released, stats = self._release_ids(batch.ids, rng)
        else:
            rng = list(rng)
            if len(rng) != len(texts):
                raise ValueError(f"{len(rng)} random generators for {len(texts)} texts")
            released = np.empty(len(batch.ids), dtype=np.int64)
            stats = {"tokens": 0, "changed_tokens": 0, "unknown_tokens": 0}
            bounds = batch.bounds.tolist()
            for index, one_rng in enumerate(rng):
                start, end = bounds[index], bounds[index + 1]
                released[start:end], one = self._release_ids(batch.ids[start:end], one_rng)
                for key, value in one.items():
                    stats[key] += value
        return self._render(batch, released), stats

    def _layouts(self, batch: TokenizedBatch) -> List[str]:
        layouts = batch.layouts()
        if self.oov_policy == "random":  # M(uniform word): nothing shows which positions were unknown
            return layouts
        unknown = np.flatnonzero(batch.ids == UNKNOWN_ID)
        if not len(unknown):
            return layouts
        texts = np.searchsorted(batch.bounds, unknown, side="right") - 1
        marks: Dict[int, List[int]] = {}
        for text, position in zip(texts.tolist(), (unknown - batch.bounds[texts]).tolist()):
            marks.setdefault(text, []).append(position)
        for text, positions in marks.items():
            mark = ",".join(map(str, positions))
            layouts[text] = hashlib.sha256(f"{layouts[text]}/unknown:{mark}".encode("ascii")).hexdigest()[:32]
        return layouts

    def _release_ids(self, ids: np.ndarray, rng: np.random.Generator) -> tuple:
        """Released ids (UNKNOWN_ID: keep the input word, _UNK_MARK: the marker) and the stats."""
        known = ids != UNKNOWN_ID
        unknown = int(len(ids) - known.sum())
        released = np.full(len(ids), UNKNOWN_ID, dtype=np.int64)
        if self.oov_policy == "random":
            # an unknown word is released as M(u) for a uniform vocabulary word u (see the module docstring)
            inputs = ids
            if unknown:
                inputs = ids.copy()
                inputs[~known] = rng.integers(0, len(self.words), size=unknown)
            if len(inputs):
                released = released_ids(self.mechanism, inputs, rng, len(self.words))
        else:
            if known.any():
                released[known] = released_ids(self.mechanism, ids[known], rng, len(self.words))
            if unknown and self.oov_policy == "unk":
                released[~known] = _UNK_MARK
        # an unknown word counts as changed unless kept ('keep' releases UNKNOWN_ID there: equal to its id)
        changed = int(len(ids) - np.count_nonzero(released == ids))
        return released, {"tokens": int(len(ids)), "changed_tokens": changed, "unknown_tokens": unknown}

    def _render(self, batch: TokenizedBatch, released: np.ndarray) -> List[str]:
        """Released texts: vocabulary words for ids >= 0; UNKNOWN_ID keeps the input word and
        _UNK_MARK gives the marker, both verbatim (no case pattern applied).

        A word released as its own id that its vocabulary word in its case pattern spells exactly
        (``batch.echoes``; most words at large epsilon) is copied from the input instead: the same
        text, without a trip through the vocabulary. That holds for glued clitics too: a glued slot's
        input word is a clitic (``'s``, ``n't``), so released as itself it needs no space in front.
        """
        original = released == UNKNOWN_ID
        if batch.echoes is not None:
            original |= (released == batch.ids) & batch.echoes
        fixed = dict.fromkeys(np.flatnonzero(released == _UNK_MARK).tolist(), self.unk_token)
        gather = ~original & (released >= 0)
        words, gathered = joined_words(self.words, released[gather])
        lengths = np.zeros(len(released), dtype=np.int64)
        lengths[gather] = gathered
        verbatim = released < 0
        return batch.render_joined(words, lengths, verbatim if verbatim.any() else None, original, fixed)


def joined_words(words: Sequence[str], ids: np.ndarray) -> Tuple[str, np.ndarray]:
    """``("".join(words[i] for i in ids), length of each)``, in one gather when the vocabulary can."""
    gather = getattr(words, "joined_words", None)
    if gather is not None:
        return gather(ids)
    chosen = list(map(words.__getitem__, np.asarray(ids).tolist()))
    return "".join(chosen), np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))


def word_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> np.ndarray:
    """All word ids of ``texts`` in order (UNKNOWN_ID for OOV words): the bare-mechanism input."""
    return tokenizer.tokenize_batch(texts).ids
