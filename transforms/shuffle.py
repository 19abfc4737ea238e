"""The Amplifier of the LAC framework (lac-research-challenges.txt, Alg. 1): de-link records from authors.

``ShuffleAmplifier`` takes the privatized records (dicts) and, in this order:

1. optionally keeps each record independently with probability q (Poisson sub-sampling, decided
   by ``random.SystemRandom``, i.e. the OS CSPRNG);
2. optionally replaces every released word type used by fewer than K distinct authors with a
   marker (k-threshold). Author identities are read here, before they are dropped;
3. removes the author field and every field listed in ``drop_fields``; every other field stays,
   and the stats name exactly which fields remain;
4. with ``shuffle``, places every record in one of S output shards chosen uniformly at random
   (a 128-bit key from ``os.urandom``), S fixed from the number and size of the records before any
   record is placed, and puts each shard's records in a uniformly random order
   (``random.SystemRandom().shuffle``). Beam's own ``Reshuffle`` is not used: it keys records with
   Python's ``random`` (a Mersenne Twister, predictable from its output), and it only redistributes
   work, it promises no permutation.

Why a record's output position carries no information about its input position or author: the
output is the shards written as files ``-00000-of-S`` ... in shard order, each in its shuffled order.
Given the shard sizes, every assignment of records to shards with those sizes is equally likely
(the keys are independent and uniform), and every order within a shard is equally likely, so the
concatenated output is a uniformly random permutation of the records whatever the runner does:
a record's file and line are uniform over the output and independent of the input order. The
positions are fixed by the shard key and the shuffle inside the shard, never by the order in
which a runner emits or writes shards (``WriteShuffledShards`` in transforms/shard_writer.py
writes each shard to its own named file). A shard is held in memory by one worker, so S is
chosen to keep shards under ``records_per_shard`` records and ``bytes_per_shard`` bytes; empty
shards are written as empty files, so the file count is S.

The stage also computes what the accounting needs (``stats``: records in and out, how many
authors share each "shape", the word counts of their records, and the remaining fields) without
any raw text. A shape is everything released about a record besides its privatized words: the
word count, the layout (known only from the privatizer's ``shape_field``: without it the counts are
estimated and nothing is claimed) and the fields left unprivatized.

The k-threshold and the word counts find the released text's words with the privatizer's own word
rule (``textdp.text.tokenize.WORD_PATTERN``, every Unicode class as textdp.text.word_split states it),
lowercased.
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

from textdp.privacy import accounting
from textdp.text.records import author_identity, without_fields
from textdp.text.tokenize import WORD_PATTERN  # the privatizer's notion of a word

DEFAULT_MARKER = "<rare>"
DEFAULT_RECORDS_PER_SHARD = 20_000
DEFAULT_BYTES_PER_SHARD = 64 << 20
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
    return author_identity(record[user_field])  # 1 and 1.0 are one author, "1" another (docs/lac.md)


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
    """The privatizer's ``{"words": n, "layout": digest}`` for a record (see textdp.text.tokenize.Tokenized.layout)."""
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


def shard_count(records: int, size: int, records_per_shard: int, bytes_per_shard: int) -> int:
    """Number of output shards: enough to keep each under both limits on average (at least 1)."""
    return max(1, math.ceil(int(records) / records_per_shard), math.ceil(int(size) / bytes_per_shard))


def record_size(record) -> int:
    """A cheap estimate of a record's size in bytes (its string values), to size the shards."""
    if isinstance(record, str):
        return len(record) + 1
    return sum(len(v) if isinstance(v, str) else 8 for v in record.values()) + 8 * len(record)


# put once in every shard so that empty shards exist too (never a record: records are dicts or str)
_EMPTY_SHARD_MARK = None


class AssignRandomShard(beam.DoFn):
    """Keys a record by a uniform shard in [0, S): a 128-bit key from os.urandom, reduced mod S."""

    def process(self, record, shards):
        key = int.from_bytes(os.urandom(16), "big")
        yield key % int(shards), record  # bias of the modulo: below S / 2^128


class PermuteShard(beam.DoFn):
    """(shard, records) -> (shard, S, records in a uniformly random order) (random.SystemRandom)."""

    def __init__(self):
        super().__init__()
        self._random = None
        self.shards = Metrics.counter(_NAMESPACE, "shuffle_shards")

    def setup(self):
        self._random = random.SystemRandom()

    def process(self, keyed, shards):
        index, values = keyed
        records = [value for value in values if value is not _EMPTY_SHARD_MARK]
        self._random.shuffle(records)
        self.shards.inc()
        yield int(index), int(shards), records


def released_fingerprint(record: dict, removed: frozenset, text_fields: Sequence[str]) -> str:
    """A digest of the fields released as they are (all but the removed and the text fields).

    Records that differ in such a field can be told apart whatever their text, so the accounting
    groups authors by it; only the digest leaves this function, never a value.
    """
    kept = {k: v for k, v in without_fields(record, removed).items() if k not in text_fields}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def _drop_fields(record: dict, removed: frozenset) -> dict:
    return without_fields(record, removed)  # a key in another Unicode form of a removed name too (R8-14)


def _build_stats(_, records_in, records_out, shapes, fields, rare_types, suppressed, removed, per_author,
                 text_fields, shape_field, word_types=0):
    stats = accounting.amplifier_stats(records_in, records_out, shapes, fields, rare_types, suppressed, removed,
                                       per_author, text_fields, shape_field)
    stats["word_types"] = int(word_types)  # distinct word types counted by the k-threshold (0 without it)
    return stats


# --- the PTransform --------------------------------------------------------------------------------


class ShuffleAmplifier(beam.PTransform):
    """De-links privatized records (dicts) from their authors; returns {'records', 'stats'} (+ 'shards').

    With ``shuffle``, ``shards`` holds one ``(index, S, records)`` per output shard, the records in
    their output order; ``WriteShuffledShards`` writes each as the file ``-index-of-S`` so that the
    output order is exactly that uniform permutation. ``records`` holds the same records with no
    order promised (for callers that do not write files).

    ``stats`` is a PCollection with one dict (see ``_build_stats``): counts that reconcile
    (records_in - records_out were dropped by sub-sampling), the shapes for the accounting, and the
    exact list of fields that remain in the output.
    """

    def __init__(self, user_field: Optional[str] = None, drop_fields: Sequence[str] = (),
                 subsample_rate: Optional[float] = None, k_threshold: Optional[int] = None,
                 text_fields: Sequence[str] = ("text",), marker: str = DEFAULT_MARKER,
                 records_per_shard: int = DEFAULT_RECORDS_PER_SHARD,
                 bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD, shuffle: bool = True,
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
        if records_per_shard < 1 or bytes_per_shard < 1:
            raise ValueError("records_per_shard and bytes_per_shard must be >= 1")
        self.subsample_rate = subsample_rate
        self.k_threshold = None if k_threshold is None else int(k_threshold)
        self.marker = marker
        self.records_per_shard = int(records_per_shard)
        self.bytes_per_shard = int(bytes_per_shard)

    def expand(self, records):
        from apache_beam.pvalue import AsList, AsSingleton

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
        type_count = None
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
            per_type = type_sets | "AuthorsPerType" >> beam.CombineGlobally(CountSetMembers())
            rare = per_type | "RareTypes" >> beam.Map(lambda counts: frozenset(t for t, c in counts.items() if c < k))
            rare_count = rare | "CountRare" >> beam.Map(len)
            type_count = per_type | "CountTypes" >> beam.Map(len)  # every type rare: every word was masked
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
        outputs = {}
        if self.shuffle:
            per_shard, per_bytes = self.records_per_shard, self.bytes_per_shard
            size = (records | "RecordSizes" >> beam.Map(record_size)
                    | "TotalSize" >> beam.CombineGlobally(sum))
            shards = (records_out | "ShardCount" >> beam.Map(
                lambda n, size_: shard_count(n, size_, per_shard, per_bytes), AsSingleton(size)))
            every_shard = shards | "EveryShard" >> beam.FlatMap(lambda s: ((i, _EMPTY_SHARD_MARK) for i in range(s)))
            keyed = records | "AssignRandomShard" >> beam.ParDo(AssignRandomShard(), AsSingleton(shards))
            outputs["shards"] = ((keyed, every_shard)
                                 | "WithEmptyShards" >> beam.Flatten()
                                 | "GroupShards" >> beam.GroupByKey()
                                 | "PermuteShards" >> beam.ParDo(PermuteShard(), AsSingleton(shards)))
            outputs["records"] = outputs["shards"] | "ShardRecords" >> beam.FlatMap(lambda shard: shard[2])
        else:  # sub-sampling / k-threshold / dropping only: order left to the runner
            outputs["records"] = records

        pipeline = records.pipeline
        zero = pipeline | "Zero" >> beam.Create([0])
        stats = (pipeline
                 | "StatsSeed" >> beam.Create([None])
                 | "BuildStats" >> beam.Map(
                     _build_stats, AsSingleton(records_in), AsSingleton(records_out), AsList(shapes),
                     AsList(fields), AsSingleton(rare_count if rare_count is not None else zero),
                     AsSingleton(suppressed if suppressed is not None else zero),
                     sorted(removed), bool(user_field), list(text_fields), shape_field,
                     AsSingleton(type_count if type_count is not None else zero)))
        outputs["stats"] = stats
        return outputs
