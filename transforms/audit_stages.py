"""The audit's two composite stages: ``SelfCheckStage`` and ``Attacks`` (inversion and linkage).

``Attacks`` reads the corpus, keeps a uniform sample of its records (``Top`` over a keyed hash),
plans the attacks (``textdp.audit.corpus.plan_corpus``), builds the prior, then either the exact
normalisers (closed-form mechanisms) or the Monte Carlo tables (the others), and runs the inversion
and linkage work items in parallel. Its outputs: inversion rows (per epsilon and frequency band),
linkage rows (per query, epsilon and set size), the Monte Carlo facts, the corpus plan's
description and the reading counts.
"""

from __future__ import annotations

from typing import Optional

import apache_beam as beam
import numpy as np

from textdp.audit.attacks import Prior
from textdp.audit.corpus import plan_corpus
from transforms.audit_attacks import (
    CONTEXT_CHUNK,
    DRAW_CHUNK,
    QUERY_CHUNK,
    TOKEN_CHUNK,
    WORD_CHUNK,
    ConcatPairs,
    ContextualFn,
    CountBigramsFn,
    CountPriorWordsFn,
    EncodeRecordFn,
    InvertFn,
    LinkFn,
    LogNormalizersFn,
    McDrawsFn,
    MergeBigrams,
    attacked_duplicate_key,
    build_language_model,
    chunks,
    copy_of_attacked,
    duplicate_key,
    table_from,
    training_bigrams,
)
from transforms.audit_common import AuditConfig
from transforms.audit_outputs import inversion_row, monte_carlo_info
from transforms.audit_selfcheck import SelfCheck as SelfCheckStage  # noqa: F401  (re-exported for the pipeline)
from transforms.io import ReadRecords
from transforms.privatize import SumCounts


def _plan(selected, config: AuditConfig, records: int, inversion_tokens: int):
    return plan_corpus([(key, ids, layout) for key, ids, layout in selected], records, config.window,
                       inversion_tokens, config.rng("plan"))


def _normaliser_words(plan, prior: Prior, with_prior: bool, with_pool: bool):
    """The words whose normaliser the attacks need: the prior's support (inversion), the pool's words (linkage)."""
    words = prior.support if with_prior else np.empty(0, np.int64)
    if with_pool:
        words = np.union1d(words, plan.window_vocab_words())
    for _, chunk in chunks(words, WORD_CHUNK):
        yield chunk


def _mc_elements(plan, config: AuditConfig, inversion: bool, linkage: bool):
    for eps in config.epsilons:
        if inversion:
            full, rest = divmod(config.mc_draws, DRAW_CHUNK)
            sizes = [DRAW_CHUNK] * full + ([rest] if rest else [])
            for index, size in enumerate(sizes):
                yield "inversion", float(eps), index, size
        if linkage:  # one release of every distinct pool word (the prior's draws add to frequent ones)
            for index, chunk in chunks(plan.window_vocab_words(), DRAW_CHUNK):
                yield "linkage", float(eps), index, chunk


def _token_items(plan, config: AuditConfig):
    for eps in config.epsilons:
        for index, chunk in chunks(plan.eval_tokens, TOKEN_CHUNK):
            yield float(eps), index, chunk


def _sequence_items(plan, config: AuditConfig):
    """Whole evaluated records in chunks of about CONTEXT_CHUNK vocabulary tokens, for every epsilon."""
    groups, current, size = [], [], 0
    for keys in plan.eval_sequences:
        current.append(keys)
        size += int((keys >= 0).sum())
        if size >= CONTEXT_CHUNK:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    for eps in config.epsilons:
        for index, group in enumerate(groups):
            yield float(eps), index, group


def _query_items(plan, config: AuditConfig):
    for eps in config.epsilons:
        for index, chunk in chunks(plan.query_rows, QUERY_CHUNK):
            yield float(eps), index, chunk


PRIOR_RANK_SHARE = 0.1  # share of Zipf's rank prior mixed into a reference corpus's frequencies


def _prior_from_counts(pairs, prior_words: int, source: str, vocab_size: int) -> Prior:
    if not pairs:
        raise ValueError("--prior-corpus holds no vocabulary word")
    ids = np.array([p[0] for p in pairs], dtype=np.int64)
    counts = np.array([p[1] for p in pairs], dtype=np.float64)
    return Prior.from_counts(ids, counts, prior_words, source, vocab_size=vocab_size, rank_share=PRIOR_RANK_SHARE)


class Attacks(beam.PTransform):
    """PBegin -> {'inversion', 'contextual', 'language_model', 'linkage', 'monte_carlo', 'corpus', 'read_counts'}.

    ``contextual``: the contextual attacker's candidate-set size K, or None (not run)."""

    def __init__(self, shared_handle, config: AuditConfig, worker, *, corpus: str, corpus_format: str, text_fields,
                 max_record_bytes: int, records: int, inversion_tokens: int, prior_corpus: Optional[str],
                 prior_words: int, vocab_size: int, closed_form: bool, run_inversion: bool, run_linkage: bool,
                 contextual: Optional[int] = None):
        super().__init__()
        self._handle = shared_handle
        self.config = config
        self.worker = worker
        self.corpus, self.corpus_format, self.text_fields = corpus, corpus_format, tuple(text_fields)
        self.max_record_bytes = max_record_bytes
        self.records, self.inversion_tokens = records, inversion_tokens
        self.prior_corpus, self.prior_words, self.vocab_size = prior_corpus, prior_words, vocab_size
        self.closed_form, self.run_inversion, self.run_linkage = closed_form, run_inversion, run_linkage
        self.contextual = contextual if run_inversion else None

    def expand(self, pbegin):
        config, handle, worker = self.config, self._handle, self.worker
        read = pbegin | "ReadCorpus" >> ReadRecords(self.corpus, self.corpus_format, self.text_fields,
                                                     self.max_record_bytes)
        # a few more than the largest set: records shorter than the window are left out of the pool
        wanted = max(self.records, int(max(config.linkage_sizes) * 1.05) + 10 if self.run_linkage else 0)
        encoded = read["records"] | "Encode" >> beam.ParDo(EncodeRecordFn(handle, config, self.text_fields))
        plan = (encoded
                | "Sample" >> beam.combiners.Top.Of(wanted, key=lambda element: element[0], reverse=True)
                | "Plan" >> beam.Map(_plan, config, self.records, self.inversion_tokens))
        read_counts = (
            (read["counts"] | "RecordsRead" >> beam.Map(lambda pair: {"records_read": int(pair[1])}),
             read["errors"] | "RecordsFailed" >> beam.Map(lambda _: {"records_unreadable": 1}))
            | "AllReadCounts" >> beam.Flatten()
            | "SumReadCounts" >> beam.CombineGlobally(SumCounts()))
        if self.prior_corpus:
            prior_read = pbegin | "ReadPriorCorpus" >> ReadRecords(self.prior_corpus, self.corpus_format,
                                                                    self.text_fields, self.max_record_bytes)
            source = f"word frequencies of the reference corpus {self.prior_corpus}"
            prior_records = prior_read["records"]
            prior = (prior_records
                     | "CountPriorWords" >> beam.ParDo(CountPriorWordsFn(handle, config, self.text_fields))
                     | "SumPriorWords" >> beam.CombinePerKey(sum)
                     | "GatherPrior" >> beam.combiners.ToList()
                     | "Prior" >> beam.Map(_prior_from_counts, self.prior_words, source, self.vocab_size))
        else:
            prior_records = None
            prior = (pbegin | "PriorSeed" >> beam.Create([None])
                     | "Prior" >> beam.Map(lambda _, v, n: Prior.by_rank(v, n), self.vocab_size, self.prior_words))
        prior_side = beam.pvalue.AsSingleton(prior)
        empty = pbegin | "Nothing" >> beam.Create([])
        if self.closed_form:
            normalizers = (plan
                           | "NormaliserWords" >> beam.FlatMap(_normaliser_words, prior_side, self.run_inversion,
                                                             self.run_linkage)
                           | "SpreadWords" >> beam.Reshuffle()
                           | "Normalisers" >> beam.ParDo(LogNormalizersFn(handle, config, worker)))
            normalizer_side = beam.pvalue.AsList(normalizers)
            tables_side = beam.pvalue.AsDict(empty)
            monte_carlo = empty
        else:
            tables = (plan
                      | "McItems" >> beam.FlatMap(_mc_elements, config, self.run_inversion, self.run_linkage)
                      | "SpreadMc" >> beam.Reshuffle()
                      | "McDraws" >> beam.ParDo(McDrawsFn(handle, config, worker, linkage=self.run_linkage),
                                               prior_side)
                      | "GatherDraws" >> beam.CombinePerKey(ConcatPairs())
                      | "Tables" >> beam.Map(table_from, self.vocab_size))
            tables_side = beam.pvalue.AsDict(tables)
            normalizer_side = beam.pvalue.AsList(empty)
            monte_carlo = (tables | "McFacts" >> beam.Map(monte_carlo_info)
                           | "McInversionOnly" >> beam.Filter(lambda fact: fact is not None))
        if self.run_inversion:
            inversion = (plan
                         | "TokenItems" >> beam.FlatMap(_token_items, config)
                         | "SpreadTokens" >> beam.Reshuffle()
                         | "Invert" >> beam.ParDo(InvertFn(handle, config, worker), prior_side, normalizer_side,
                                                  tables_side)
                         | "SumBands" >> beam.CombinePerKey(SumCounts())
                         | "InversionRows" >> beam.Map(inversion_row))
        else:
            inversion = pbegin | "NoInversion" >> beam.Create([])
        if self.contextual:
            contextual, language_model = self._contextual(encoded, plan, prior_records, prior_side, normalizer_side,
                                                          tables_side, read["records"])
        else:
            contextual, language_model = pbegin | "NoContextual" >> beam.Create([]), empty
        if self.run_linkage:
            linkage = (plan
                       | "QueryItems" >> beam.FlatMap(_query_items, config)
                       | "SpreadQueries" >> beam.Reshuffle()
                       | "Link" >> beam.ParDo(LinkFn(handle, config, worker), beam.pvalue.AsSingleton(plan),
                                              normalizer_side, tables_side))
        else:
            linkage = pbegin | "NoLinkage" >> beam.Create([])
        corpus = plan | "DescribeCorpus" >> beam.Map(lambda p: p.describe())
        return {"inversion": inversion, "contextual": contextual, "language_model": language_model,
                "linkage": linkage, "monte_carlo": monte_carlo, "corpus": corpus,
                "read_counts": read_counts}

    def _contextual(self, encoded, plan, prior_records, prior_side, normalizer_side, tables_side, records):
        """The contextual attacker: its bigram model from the reference corpus (or the records of --corpus that
        are not attacked, less every exact copy of an attacked one), then whole evaluated records inverted by
        forward-backward."""
        config, handle, worker = self.config, self._handle, self.worker
        left_out = None
        if prior_records is not None:
            bigrams = prior_records | "CountBigrams" >> beam.ParDo(CountBigramsFn(handle, config, self.text_fields,
                                                                          self.vocab_size))
            source = f"the reference corpus {self.prior_corpus}"
        else:
            # a corpus with repeated records: a record that is not attacked but releases what an attacked one does
            # (the duplicate-input check's key) is left out of the training text, and counted (R10b-4)
            plan_side = beam.pvalue.AsSingleton(plan)
            keyed = records | "DuplicateKeys" >> beam.Map(duplicate_key, config.seed, self.text_fields)
            attacked_keys = (keyed | "AttackedDuplicateKeys" >> beam.FlatMap(attacked_duplicate_key, plan_side)
                             | "AttackedKeySet" >> beam.combiners.ToSet())
            left_out = (keyed
                        | "CopiesOfAttacked" >> beam.FlatMap(copy_of_attacked, plan_side,
                                                             beam.pvalue.AsSingleton(attacked_keys))
                        | "LeftOutSet" >> beam.combiners.ToSet())
            bigrams = encoded | "CountBigrams" >> beam.FlatMap(training_bigrams, plan_side, self.vocab_size,
                                                                beam.pvalue.AsSingleton(left_out))
            source = (f"the records of {self.corpus} that are not attacked, less every exact copy of an attacked record "
                      "(compared as the duplicate-input check compares records: copies_left_out), so disjoint from the "
                      "evaluated records")
        language_model = (bigrams
                          | "MergeBigrams" >> beam.CombineGlobally(MergeBigrams())
                          | "LanguageModel" >> beam.Map(build_language_model, prior_side, self.vocab_size, source))
        contextual = (plan
                      | "SequenceItems" >> beam.FlatMap(_sequence_items, config)
                      | "SpreadSequences" >> beam.Reshuffle()
                      | "Contextual" >> beam.ParDo(ContextualFn(handle, config, worker, self.contextual), prior_side,
                                                   normalizer_side, tables_side, beam.pvalue.AsSingleton(language_model))
                      | "SumContextualBands" >> beam.CombinePerKey(SumCounts())
                      | "ContextualRows" >> beam.Map(inversion_row))
        described = language_model | "DescribeModel" >> beam.Map(lambda lm, k: lm.describe(k), self.contextual)
        if left_out is not None:  # how many copies of attacked records the training text left out
            described = described | "CopiesLeftOut" >> beam.Map(
                lambda model, keys: dict(model, copies_left_out=len(keys)), beam.pvalue.AsSingleton(left_out))
        return contextual, described
