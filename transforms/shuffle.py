"""The Amplifier of the LAC framework (lac-research-challenges.txt, Alg. 1): de-link records from authors.

``ShuffleAmplifier`` takes the privatized records (dicts) and, in this order:

1. optionally keeps each record independently with probability q (Poisson sub-sampling, decided
   by ``random.SystemRandom``, i.e. the OS CSPRNG);
2. optionally replaces every released word type used by fewer than K distinct authors with a
   marker (k-threshold). Author identities are read here, before they are dropped;
3. removes the author field and every field listed in ``drop_fields``; every other field stays,
   and the stats name exactly which fields remain;
4. gives every record a 128-bit key from ``os.urandom``, groups the records into buckets by that
   key and permutes each bucket with ``random.SystemRandom().shuffle``. Beam's own ``Reshuffle``
   is not used: it keys records with Python's ``random`` (a Mersenne Twister, predictable from its
   output), and it only redistributes work, it promises no permutation.

Why the order of the output carries no information about the input order: the bucket of a
record is uniform and independent of everything else, and inside a bucket the order is a uniform
permutation. The number of buckets is ceil(records / records_per_bucket), so a corpus of up to
``records_per_bucket`` records gets one bucket and a single uniform permutation. With several
buckets, the order in which they are emitted is decided by the runner (a local runner may emit
them in order of first arrival), so the coarse position of a bucket's first-read record could
follow input order; raise ``records_per_bucket`` if that matters.

The stage also computes what the accounting needs (``stats``: records in and out, how many
authors share each "shape", the word counts of their records, and the remaining fields) without
any raw text. A shape is everything released about a record besides its privatized words: the
word count, the layout (known only from the privatizer's ``shape_field``: without it the counts are
estimated and nothing is claimed) and the fields left unprivatized.

Tokenization of the released text for the k-threshold and the word counts is a minimal reversible
one defined here (runs of letters/digits with inner apostrophes or hyphens, lowercased), to be
unified with ``textdp.tokenize``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections import Counter
from typing import Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from textdp.tokenize import WORD_PATTERN  # the privatizer's notion of a word

DEFAULT_MARKER = "<rare>"
DEFAULT_RECORDS_PER_BUCKET = 50_000
_NAMESPACE = "textdp.shuffle"


# --- plain helpers (no Beam state) ------------------------------------------------------------


def word_types(text: str) -> set:
    """Distinct lowercased words of a released text."""
    return {match.group().lower() for match in WORD_PATTERN.finditer(text)}


def count_words(text: str) -> int:
    return sum(1 for _ in WORD_PATTERN.finditer(text))


def replace_rare_words(text: str, rare, marker: str) -> tuple:
    """(text with every word whose lowercase form is in ``rare`` replaced by ``marker``, replacements)."""
    replaced = 0

    def swap(match):
        nonlocal replaced
        if match.group().lower() in rare:
            replaced += 1
            return marker
        return match.group()

    return WORD_PATTERN.sub(swap, text), replaced


def author_key(record: dict, user_field: str):
    """A hashable key for the record's author; a record without the author field is an error."""
    if user_field not in record or record[user_field] is None:
        raise ValueError(f"a record has no value in the author field {user_field!r}; "
                         "every record needs one when --user-field is set")
    value = record[user_field]
    if isinstance(value, (str, int, float, bool, bytes)):
        return (type(value).__name__, value)
    return ("json", json.dumps(value, sort_keys=True, default=str))


def text_values(record: dict, text_fields: Sequence[str]) -> Iterable[str]:
    for field in text_fields:
        value = record.get(field)
        if isinstance(value, str):
            yield value


def record_words(record: dict, text_fields: Sequence[str]) -> int:
    """Words in a record's released text: an estimate of its privatized words.

    It can differ from the number of privatized word slots (a released word may be punctuation, or
    a clitic glued to the word before), which is why the accounting claims no amplification from
    estimated counts; the exact count comes from the privatizer's shape field (``record_shape_value``).
    """
    return sum(count_words(text) for text in text_values(record, text_fields))


def record_shape_value(record: dict, shape_field: str) -> dict:
    """The privatizer's ``{"words": n, "layout": digest}`` for a record (see textdp.tokenize.Tokenized.layout)."""
    value = record.get(shape_field)
    words = value.get("words") if isinstance(value, dict) else None
    if (not isinstance(words, int) or isinstance(words, bool) or words < 0
            or not isinstance(value.get("layout"), str)):
        raise ValueError(f"the shape field {shape_field!r} must hold {{'words': a non-negative integer, "
                         "'layout': a string}} written by the privatizer")
    return value


# --- DoFns --------------------------------------------------------------------------------------


class PoissonSubsample(beam.DoFn):
    """Keeps each record independently with probability ``rate`` (OS CSPRNG)."""

    def __init__(self, rate: float):
        super().__init__()
        if not 0 < rate <= 1:
            raise ValueError("the sub-sampling rate must be in (0, 1]")
        self.rate = float(rate)
        self.kept = Metrics.counter(_NAMESPACE, "subsample_kept")
        self.dropped = Metrics.counter(_NAMESPACE, "subsample_dropped")
        self._random = None

    def setup(self):
        self._random = random.SystemRandom()

    def process(self, record):
        if self._random.random() < self.rate:
            self.kept.inc()
            yield record
        else:
            self.dropped.inc()


class UnionSets(beam.CombineFn):
    """Union of sets (an author's word types; the field names of all records)."""

    def create_accumulator(self):
        return set()

    def add_input(self, accumulator, element):
        accumulator |= element
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = set()
        for accumulator in accumulators:
            merged |= accumulator
        return merged

    def extract_output(self, accumulator):
        return accumulator


class CountSetMembers(beam.CombineFn):
    """In how many of the input sets each member occurs (authors per word type): a dict member -> count.

    One Counter per bundle, merged: the per-element work is a C-level ``Counter.update``. The result
    holds every word type of the released text, which is small next to the corpus.
    """

    def create_accumulator(self):
        return Counter()

    def add_input(self, accumulator, element):
        accumulator.update(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = Counter()
        for accumulator in accumulators:
            merged.update(accumulator)
        return merged

    def extract_output(self, accumulator):
        return dict(accumulator)


class ReplaceRareWords(beam.DoFn):
    """Replaces words whose type is in the side input ``rare`` (a frozenset of types) by a marker."""

    def __init__(self, text_fields: Sequence[str], marker: str):
        super().__init__()
        self.text_fields = tuple(text_fields)
        self.marker = marker
        self.suppressed = Metrics.counter(_NAMESPACE, "k_threshold_suppressed_words")

    def process(self, record, rare):
        if not rare:
            yield record, 0
            return
        out = dict(record)
        total = 0
        for field in self.text_fields:
            value = out.get(field)
            if isinstance(value, str):
                out[field], replaced = replace_rare_words(value, rare, self.marker)
                total += replaced
        self.suppressed.inc(total)
        yield out, total


class AssignRandomBucket(beam.DoFn):
    """Keys a record by a 128-bit key from os.urandom, reduced to one of ceil(total/per_bucket) buckets."""

    def __init__(self, records_per_bucket: int):
        super().__init__()
        self.records_per_bucket = int(records_per_bucket)

    def process(self, record, total):
        buckets = max(1, math.ceil(int(total) / self.records_per_bucket))
        key = int.from_bytes(os.urandom(16), "big")
        yield key % buckets, record  # bias of the modulo: below buckets / 2^128


class PermuteBucket(beam.DoFn):
    """Emits a bucket's records in a uniformly random order (random.SystemRandom().shuffle)."""

    def __init__(self):
        super().__init__()
        self._random = None
        self.buckets = Metrics.counter(_NAMESPACE, "shuffle_buckets")

    def setup(self):
        self._random = random.SystemRandom()

    def process(self, keyed):
        _, records = keyed
        records = list(records)
        self._random.shuffle(records)
        self.buckets.inc()
        yield from records


def released_fingerprint(record: dict, removed: frozenset, text_fields: Sequence[str]) -> str:
    """A digest of the fields released as they are (all but the removed and the text fields).

    Records that differ in such a field can be told apart whatever their text, so the accounting
    groups authors by it; only the digest leaves this function, never a value.
    """
    kept = {k: v for k, v in record.items() if k not in removed and k not in text_fields}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def _drop_fields(record: dict, removed: frozenset) -> dict:
    return {key: value for key, value in record.items() if key not in removed}


def _build_stats(_, records_in, records_out, shapes, fields, rare_types, suppressed, removed, per_author,
                 text_fields, shape_field):
    return {
        "word_counts": "exact, with the layouts, from the privatizer" if shape_field else "estimated",
        "text_fields": list(text_fields),
        "records_in": int(records_in),
        "records_out": int(records_out),
        "authors": int(sum(count for _, count in shapes)),
        "per_author": per_author,
        "shape_counts": sorted([[w for w, _ in shape], int(count)] for shape, count in shapes),
        "removed_fields": sorted(set(removed) - {shape_field}),
        "remaining_fields": sorted(fields),
        "rare_word_types": int(rare_types),
        "suppressed_words": int(suppressed),
    }


# --- the PTransform --------------------------------------------------------------------------------


class ShuffleAmplifier(beam.PTransform):
    """De-links privatized records (dicts) from their authors; returns {'records', 'stats'}.

    ``stats`` is a PCollection with one dict (see ``_build_stats``): counts that reconcile
    (records_in - records_out were dropped by sub-sampling), the shapes for the accounting, and the
    exact list of fields that remain in the output.
    """

    def __init__(self, user_field: Optional[str] = None, drop_fields: Sequence[str] = (),
                 subsample_rate: Optional[float] = None, k_threshold: Optional[int] = None,
                 text_fields: Sequence[str] = ("text",), marker: str = DEFAULT_MARKER,
                 records_per_bucket: int = DEFAULT_RECORDS_PER_BUCKET, shuffle: bool = True,
                 shape_field: Optional[str] = None, label: Optional[str] = None):
        super().__init__(label)
        self.shape_field = shape_field or None
        self.shuffle = bool(shuffle)
        self.user_field = user_field or None
        self.drop_fields = tuple(dict.fromkeys(f for f in drop_fields if f))
        self.removed = frozenset(self.drop_fields + ((self.user_field,) if self.user_field else ())
                                 + ((self.shape_field,) if self.shape_field else ()))
        self.text_fields = tuple(text_fields)
        clash = self.removed.intersection(self.text_fields)
        if clash:
            raise ValueError(f"text field(s) {sorted(clash)} cannot also be dropped")
        if subsample_rate is not None and not 0 < subsample_rate <= 1:
            raise ValueError("--subsample must be in (0, 1]")
        if k_threshold is not None and int(k_threshold) < 1:
            raise ValueError("--k-threshold must be >= 1")
        if records_per_bucket < 1:
            raise ValueError("records_per_bucket must be >= 1")
        self.subsample_rate = subsample_rate
        self.k_threshold = None if k_threshold is None else int(k_threshold)
        self.marker = marker
        self.records_per_bucket = int(records_per_bucket)

    def expand(self, records):
        from apache_beam.pvalue import AsList, AsSingleton  # pylint: disable=import-outside-toplevel

        text_fields, user_field, shape_field = self.text_fields, self.user_field, self.shape_field
        records_in = records | "CountIn" >> beam.combiners.Count.Globally()
        if self.subsample_rate is not None and self.subsample_rate < 1:
            records = records | "PoissonSubsample" >> beam.ParDo(PoissonSubsample(self.subsample_rate))

        removed = self.removed

        def record_shape(r):  # what is released about a record besides its privatized words
            fingerprint = released_fingerprint(r, removed, text_fields)
            if not shape_field:  # the layout is not known: the accounting will claim nothing
                return (record_words(r, text_fields), fingerprint)
            value = record_shape_value(r, shape_field)
            layout = hashlib.sha256(f"{fingerprint}/{value['layout']}".encode("utf-8")).hexdigest()[:16]
            return (int(value["words"]), layout)

        if user_field:
            shapes = (records
                      | "AuthorRecordShapes" >> beam.Map(lambda r: (author_key(r, user_field), record_shape(r)))
                      | "GroupByAuthor" >> beam.GroupByKey()
                      | "AuthorShape" >> beam.Map(lambda kv: (tuple(sorted(kv[1])), 1)))
        else:
            shapes = records | "RecordShape" >> beam.Map(lambda r: ((record_shape(r),), 1))
        shapes = shapes | "CountShapes" >> beam.CombinePerKey(sum)

        rare_count = None
        suppressed = None
        if self.k_threshold is not None:
            types_of = lambda r: frozenset().union(*map(word_types, text_values(r, text_fields)))  # noqa: E731
            if user_field:  # the union of each author's types, then each author counts once per type
                type_sets = (records
                             | "AuthorTypes" >> beam.Map(lambda r: (author_key(r, user_field), types_of(r)))
                             | "UnionPerAuthor" >> beam.CombinePerKey(UnionSets())
                             | "DropAuthor" >> beam.Values())
            else:  # every record is its own author
                type_sets = records | "RecordTypes" >> beam.Map(types_of)
            k = self.k_threshold
            rare = (type_sets
                    | "AuthorsPerType" >> beam.CombineGlobally(CountSetMembers())
                    | "RareTypes" >> beam.Map(lambda counts: frozenset(t for t, c in counts.items() if c < k)))
            rare_count = rare | "CountRare" >> beam.Map(len)
            replaced = records | "ReplaceRare" >> beam.ParDo(ReplaceRareWords(text_fields, self.marker),
                                                             AsSingleton(rare))
            suppressed = (replaced | "SuppressedCounts" >> beam.Map(lambda pair: pair[1])
                          | "SumSuppressed" >> beam.CombineGlobally(sum))
            records = replaced | "DropCounts" >> beam.Map(lambda pair: pair[0])

        records = records | "DropFields" >> beam.Map(_drop_fields, removed)
        fields = (records
                  | "FieldNames" >> beam.Map(lambda r: frozenset(r))
                  | "UnionFields" >> beam.CombineGlobally(UnionSets())
                  | "FieldList" >> beam.FlatMap(sorted))
        records_out = records | "CountOut" >> beam.combiners.Count.Globally()
        if not self.shuffle:  # sub-sampling / k-threshold / dropping only: order left to the runner
            shuffled = records
        else:
            shuffled = (records
                        | "AssignRandomBucket" >> beam.ParDo(AssignRandomBucket(self.records_per_bucket),
                                                             AsSingleton(records_out))
                        | "GroupBuckets" >> beam.GroupByKey()
                        | "PermuteBuckets" >> beam.ParDo(PermuteBucket()))

        pipeline = records.pipeline
        zero = pipeline | "Zero" >> beam.Create([0])
        stats = (pipeline
                 | "StatsSeed" >> beam.Create([None])
                 | "BuildStats" >> beam.Map(
                     _build_stats, AsSingleton(records_in), AsSingleton(records_out), AsList(shapes),
                     AsList(fields), AsSingleton(rare_count if rare_count is not None else zero),
                     AsSingleton(suppressed if suppressed is not None else zero),
                     sorted(removed), bool(user_field), list(text_fields), shape_field))
        return {"records": shuffled, "stats": stats}
