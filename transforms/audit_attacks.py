"""Beam side of the inversion and linkage attacks (arithmetic in ``textdp.audit.attacks``/``audit_corpus``).

Stages, each parallel over its own unit of work:

* ``EncodeRecordFn``: records -> word keys and layout (numbers only), ordered by a keyed hash;
  the ``Top`` combiner keeps the planned records; ``plan_corpus`` picks evaluated records, tokens,
  linkage pool and queries (one small singleton).
* closed-form mechanisms: ``LogNormalizersFn`` computes ln Z_w for every word the attacks need
  (the prior's support and the pool windows' words), in chunks of words, for every epsilon at once.
* Monte Carlo mechanisms: ``McDrawsFn`` releases words drawn from the prior (the inversion table) and
  the pool windows' tokens (the linkage table), in chunks; ``BuildTables`` merges them per epsilon.
* ``InvertFn``: a chunk of evaluated tokens at one epsilon -> releases -> the attacker's guesses ->
  success counts per frequency band (summed per epsilon and band).
* ``CountBigramsFn`` / ``training_bigrams``: the contextual attacker's training text (the reference
  corpus, or the records of ``--corpus`` after the evaluated ones) -> sparse bigram counts, merged by
  ``MergeBigrams`` into one ``BigramLM`` (``textdp.audit.contextual``).
* ``ContextualFn``: a chunk of whole evaluated records at one epsilon -> releases -> candidate sets
  from the context-free posterior -> forward-backward under the bigram model -> success counts per
  band (with the context-free attacker's on the same releases).
* ``LinkFn``: a chunk of queries at one epsilon -> released windows -> likelihood of every pool
  record -> the expected top-k success in each nested set, and whether the layout alone is unique.
"""

from __future__ import annotations

import math
from typing import Dict

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from textdp.audit.attacks import (
    TOP_K,
    CountTable,
    KernelPosterior,
    Prior,
    fill_guesses,
    inversion_outcomes,
    kernel_of,
    linkage_success,
    log_normalizers,
    rank_band,
    structure_unique,
)
from textdp.audit.contextual import (
    BigramLM,
    contextual_attack,
    kernel_emission,
    merge_bigrams,
    record_bigrams,
    runs_of,
    table_emission,
)
from textdp.audit.corpus import LogZLookup, encode_record, kernel_log_likelihood, linkage_scores, nested_order, record_key, release_keys
from textdp.audit.pairs import TokenReleaser
from textdp.text.tokenize import Tokenizer
from transforms.audit_common import NAMESPACE, AuditConfig, holder_state

TOKEN_CHUNK = 4000
QUERY_CHUNK = 50
WORD_CHUNK = 512
DRAW_CHUNK = 20000
CONTEXT_CHUNK = 1000  # vocabulary tokens of whole records per contextual work item


class _TokenizingFn(beam.DoFn):
    """Common to the DoFns that tokenize records: the shared artifact's tokenizer and the record's text."""

    def __init__(self, shared_handle, config: AuditConfig, text_fields):
        self.config = config
        self.text_fields = tuple(text_fields)
        self._state = holder_state(shared_handle, config)
        self._tokenizer = None

    def setup(self):
        self._tokenizer = Tokenizer(self._state.setup().artifact.word_to_id)

    def _text(self, payload) -> str:
        if isinstance(payload, dict):
            return "\n".join(str(payload[field]) for field in self.text_fields if isinstance(payload.get(field), str))
        return payload


class EncodeRecordFn(_TokenizingFn):
    """(source, position, payload) -> (order key, word keys, layout int); payload text from ``text_field``."""

    def __init__(self, shared_handle, config: AuditConfig, text_fields):
        super().__init__(shared_handle, config, text_fields)
        self._records = Metrics.counter(NAMESPACE, "audit_records_encoded")

    def process(self, record):
        source, position, payload = record
        ids, layout = encode_record(self._tokenizer, self._text(payload))
        self._records.inc()
        yield record_key(self.config.seed, source, position), ids, layout


class CountPriorWordsFn(_TokenizingFn):
    """Reference-corpus records -> (word id, count) for its vocabulary words."""

    def process(self, record):
        ids = self._tokenizer.tokenize(self._text(record[2])).ids
        words, counts = np.unique(ids[ids >= 0], return_counts=True)
        for word, count in zip(words.tolist(), counts.tolist()):
            yield word, count


class CountBigramsFn(_TokenizingFn):
    """Reference-corpus records -> (bigram keys, counts, vocabulary tokens) per record (the contextual LM's text)."""

    def __init__(self, shared_handle, config: AuditConfig, text_fields, vocab_size: int):
        super().__init__(shared_handle, config, text_fields)
        self.vocab_size = int(vocab_size)

    def process(self, record):
        ids = np.asarray(self._tokenizer.tokenize(self._text(record[2])).ids, dtype=np.int64)
        keys, counts = record_bigrams(ids, self.vocab_size)
        yield keys, counts, int((ids >= 0).sum())


def attacked(key: int, plan) -> bool:
    """Whether the record of order key ``key`` is among the evaluated (attacked) ones: at or below ``eval_key_max``."""
    return plan.eval_key_max is not None and key <= plan.eval_key_max


def duplicate_key(record, seed, text_fields):
    """A --corpus record (source, position, payload) -> (its order key, an 8-byte digest of its duplicate key):
    what it releases as the batch job's duplicate-input check compares records (``transforms.io.line_key``,
    asked, not re-implemented: a JSONL object's text fields, or a text line), b"" when nothing is released."""
    import hashlib
    import json

    from transforms.io import line_key

    source, position, payload = record
    if isinstance(payload, dict):
        line, fields = json.dumps(payload, ensure_ascii=False), tuple(text_fields)
    else:
        line, fields = str(payload), None
    found = line_key(line.encode("utf-8", "surrogatepass"), fields)
    return record_key(seed, source, position), hashlib.blake2b(found, digest_size=8).digest() if found else b""


def attacked_duplicate_key(pair, plan):
    """(order key, duplicate key) -> the duplicate key, for an attacked record."""
    if attacked(pair[0], plan) and pair[1]:
        yield pair[1]


def copy_of_attacked(pair, plan, attacked_keys):
    """(order key, duplicate key) -> the order key of a record that is not attacked but releases what an attacked
    record does (an exact copy: left out of the contextual attacker's training text, R10b-4)."""
    if not attacked(pair[0], plan) and pair[1] and pair[1] in attacked_keys:
        yield pair[0]


def training_bigrams(encoded, plan, vocab_size: int, left_out=frozenset()):
    """An encoded --corpus record (order key, word keys, layout) -> its bigrams when it is not attacked (its
    order key is above every evaluated record's) and is no copy of an attacked record (its order key not in
    ``left_out``: ``copy_of_attacked``), else nothing."""
    key, ids, _ = encoded
    if attacked(key, plan) or key in left_out:
        return
    ids = np.asarray(ids, dtype=np.int64)
    keys, counts = record_bigrams(ids, vocab_size)
    yield keys, counts, int((ids >= 0).sum())


class MergeBigrams(beam.CombineFn):
    """(keys, counts, tokens) per record -> one sparse table and the token total (compacted as it grows)."""

    COMPACT = 2_000_000

    def create_accumulator(self):
        return [], 0, 0

    def add_input(self, accumulator, element):
        parts, size, tokens = accumulator
        keys, counts, count = element
        parts.append((np.asarray(keys, dtype=np.int64), np.asarray(counts, dtype=np.int64)))
        size += len(keys)
        if size > self.COMPACT and len(parts) > 1:
            merged = merge_bigrams(parts)
            parts, size = [merged], len(merged[0])
        return parts, size, tokens + int(count)

    def merge_accumulators(self, accumulators):
        accumulators = list(accumulators)
        merged = merge_bigrams([part for parts, _, _ in accumulators for part in parts])
        return [merged], len(merged[0]), sum(tokens for _, _, tokens in accumulators)

    def extract_output(self, accumulator):
        parts, _, tokens = accumulator
        keys, counts = merge_bigrams(parts)
        return keys, counts, tokens


def build_language_model(merged, prior: Prior, vocab_size: int, source: str) -> BigramLM:
    keys, counts, tokens = merged
    return BigramLM.from_counts(keys, counts, prior, vocab_size, tokens, source)


class _Worker(beam.DoFn):
    """Common setup: the artifact holder (shared per process), a generator, mechanisms per epsilon."""

    def __init__(self, shared_handle, config: AuditConfig, worker=None):
        self.config = config
        self._state = holder_state(shared_handle, config, worker)
        self._holder = None
        self._rng = None
        self._cache: Dict = {}

    def setup(self):
        self._holder = self._state.setup(own_search_threads=self.config.searches_nearest)
        self._rng = self.config.rng()  # OS entropy (a seed only for tests and benchmarks)
        self._cache = {}

    def start_bundle(self):
        if self._state.state is not None:
            self._state.report()

    def finish_bundle(self):
        self._state.progress.flush()

    def count(self, **counts) -> None:
        self._state.progress.add(**counts)

    def mechanism(self, epsilon: float):
        key = ("mechanism", epsilon)
        if key not in self._cache:
            self._cache[key] = self.config.build_mechanism(self._holder.artifact, epsilon)
        return self._cache[key]

    def releaser(self) -> TokenReleaser:
        artifact = self._holder.artifact
        return TokenReleaser(lambda: None, artifact, oov_policy=self.config.oov_policy, prune=self.config.prune)

    def rng_for(self, *parts) -> np.random.Generator:
        return self._rng if self.config.seed is None else self.config.rng(*parts)


class LogNormalizersFn(_Worker):
    """A chunk of word ids -> (ids, ln Z matrix: one column per epsilon), for closed-form mechanisms."""

    def process(self, ids):
        kernels = [kernel_of(self.mechanism(eps)) for eps in self.config.epsilons]
        metric = kernels[0].metric
        values = log_normalizers(self._holder.points(metric, np.float32), ids, kernels,
                                 points64=self._holder.points(metric, np.float64))
        self.count(normalised_words=len(ids))
        yield np.asarray(ids, dtype=np.int64), values


class McDrawsFn(_Worker):
    """(kind, epsilon, chunk index, payload) -> ((table, epsilon), (inputs, outputs)).

    ``inversion``: payload = number of inputs to draw from the prior (side input); their releases
    estimate the inversion attacker's posterior, and (with ``linkage``) also feed the linkage
    likelihood table. ``linkage``: payload = distinct words of the pool windows, one release each,
    so every pool word has at least one draw. Draws are independent of every evaluated release.
    """

    def __init__(self, shared_handle, config: AuditConfig, worker=None, linkage: bool = False):
        super().__init__(shared_handle, config, worker)
        self.linkage = linkage

    def process(self, element, prior):
        kind, epsilon, index, payload = element
        rng = self.rng_for("mc", kind, epsilon, index)
        if kind == "inversion":
            inputs = prior.sample(int(payload), rng)
        else:
            inputs = np.asarray(payload, dtype=np.int64)
        outputs = self.releaser().release_many(self.mechanism(epsilon), inputs, rng)
        self.count(draws=len(inputs))
        yield (kind, float(epsilon)), (inputs, outputs)
        if kind == "inversion" and self.linkage:
            yield ("linkage", float(epsilon)), (inputs, outputs)


class ConcatPairs(beam.CombineFn):
    """Concatenate (inputs, outputs) arrays."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, element):
        accumulator.append(element)
        return accumulator

    def merge_accumulators(self, accumulators):
        return [part for accumulator in accumulators for part in accumulator]

    def extract_output(self, accumulator):
        if not accumulator:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return (np.concatenate([a for a, _ in accumulator]), np.concatenate([b for _, b in accumulator]))


def _log_z_lookups(normalizers, epsilons) -> Dict[float, LogZLookup]:
    ids = np.concatenate([chunk_ids for chunk_ids, _ in normalizers]) if normalizers else np.empty(0, np.int64)
    values = np.concatenate([chunk for _, chunk in normalizers]) if normalizers else np.empty((0, len(epsilons)))
    return {eps: LogZLookup(ids, values[:, k]) for k, eps in enumerate(epsilons)}


class InvertFn(_Worker):
    """(epsilon, chunk index, token ids) -> ((epsilon, band), success counts) for the bands present."""

    def process(self, element, prior: Prior, normalizers, tables):
        epsilon, index, tokens = element
        tokens = np.asarray(tokens, dtype=np.int64)
        mechanism = self.mechanism(epsilon)
        rng = self.rng_for("invert", epsilon, index)
        outputs = self.releaser().release_many(mechanism, tokens, rng)
        self.count(draws=len(tokens))
        prior_top = prior.top(TOP_K)
        kernel = kernel_of(mechanism)
        distinct, inverse = np.unique(outputs, return_inverse=True)
        if kernel is not None:
            posterior = self._posterior(epsilon, kernel, prior, normalizers)
            guesses = posterior.top_guesses(distinct)[inverse.reshape(-1)]
        else:
            known = self._table_guesses(epsilon, prior, tables)
            guesses = fill_guesses(known, distinct, prior_top)[inverse.reshape(-1)]
        self.count(inverted_tokens=len(tokens))
        outcomes = inversion_outcomes(tokens, outputs, guesses, prior_top, prior)
        bands = rank_band(tokens)
        for band in np.unique(bands):
            mask = bands == band
            counts = {key: int(value[mask].sum()) for key, value in outcomes.items()}
            counts["tokens"] = int(mask.sum())
            yield (float(epsilon), int(band)), counts

    def _posterior(self, epsilon, kernel, prior, normalizers) -> KernelPosterior:
        key = ("posterior", epsilon, id(normalizers))
        if key not in self._cache:
            lookup = _log_z_lookups(normalizers, self.config.epsilons)[epsilon]
            points = self._holder.points(kernel.metric, np.float64)
            self._cache[key] = KernelPosterior(points, prior, lookup(prior.support), kernel)
        return self._cache[key]

    def _table_guesses(self, epsilon, prior, tables) -> dict:
        key = ("guesses", epsilon, id(tables))
        if key not in self._cache:
            self._cache[key] = tables[("inversion", float(epsilon))].guesses(prior)
        return self._cache[key]


class ContextualFn(InvertFn):
    """(epsilon, chunk index, whole records' word keys) -> ((epsilon, band), success counts) of the contextual
    attacker, with ``cf_top1`` / ``cf_top10``: the context-free attacker's on the same releases."""

    def __init__(self, shared_handle, config: AuditConfig, worker=None, candidates: int = 50):
        super().__init__(shared_handle, config, worker)
        self.candidates = int(candidates)

    def process(self, element, prior: Prior, normalizers, tables, lm: BigramLM):
        epsilon, index, sequences = element
        pieces, runs, start = [], [], 0
        for keys in sequences:
            keys = np.asarray(keys, dtype=np.int64)
            for low, high in runs_of(keys):
                pieces.append(keys[low:high])
                runs.append((start, start + high - low))
                start += high - low
        if not pieces:
            return
        tokens = np.concatenate(pieces)
        mechanism = self.mechanism(epsilon)
        rng = self.rng_for("contextual", epsilon, index)
        outputs = self.releaser().release_many(mechanism, tokens, rng)
        self.count(draws=len(tokens))
        prior_top = prior.top(TOP_K)
        kernel = kernel_of(mechanism)
        distinct, inverse = np.unique(outputs, return_inverse=True)
        inverse = inverse.reshape(-1)
        if kernel is not None:
            posterior = self._posterior(epsilon, kernel, prior, normalizers)
            ranked = posterior.top_guesses(distinct, k=self.candidates)[inverse]
            emission = kernel_emission(posterior)
        else:
            key = ("guesses", epsilon, id(tables), self.candidates)
            if key not in self._cache:
                self._cache[key] = tables[("inversion", float(epsilon))].guesses(prior, k=self.candidates)
            ranked = fill_guesses(self._cache[key], distinct, prior.top(self.candidates), k=self.candidates)[inverse]
            emission = table_emission(tables[("inversion", float(epsilon))])
        guesses = contextual_attack(lm, ranked, outputs, runs, emission, k=TOP_K)
        self.count(contextual_tokens=len(tokens))
        outcomes = inversion_outcomes(tokens, outputs, guesses, prior_top, prior)
        outcomes["cf_top1"] = ranked[:, 0] == tokens
        outcomes["cf_top10"] = (ranked[:, :TOP_K] == tokens[:, None]).any(axis=1)
        bands = rank_band(tokens)
        for band in np.unique(bands):
            mask = bands == band
            counts = {name: int(value[mask].sum()) for name, value in outcomes.items()}
            counts["tokens"] = int(mask.sum())
            yield (float(epsilon), int(band)), counts


class LinkFn(_Worker):
    """(epsilon, chunk index, query rows) -> one row per query with its linkage success per set size."""

    def process(self, element, plan, normalizers, tables):
        epsilon, index, rows = element
        config = self.config
        artifact = self._holder.artifact
        mechanism = self.mechanism(epsilon)
        kernel = kernel_of(mechanism)
        if kernel is not None:
            key = ("link-z", epsilon, id(normalizers))
            if key not in self._cache:
                self._cache[key] = _log_z_lookups(normalizers, config.epsilons)[epsilon]
            log_likelihood = kernel_log_likelihood(self._holder.points(kernel.metric, np.float64), kernel,
                                                   self._cache[key])
            basis = "closed form"
        else:
            log_likelihood = tables[("linkage", float(epsilon))].log_likelihood
            basis = "Monte Carlo estimate"
        windows = plan.pool_windows
        releaser = self.releaser()
        for row in np.asarray(rows, dtype=np.int64):
            rng = self.rng_for("link", epsilon, int(row))
            released = release_keys(mechanism, windows[row], config.oov_policy, artifact.vocab_size, rng,
                                    release_ids=lambda ids, g: releaser.release_many(mechanism, ids, g))
            scores = linkage_scores(windows, released, config.oov_policy, artifact.vocab_size, log_likelihood)
            order = nested_order(rng, len(windows), int(row))
            success = linkage_success(scores, int(row), order, config.linkage_sizes)
            unique = structure_unique(plan.pool_layouts, int(row), order, config.linkage_sizes)
            self.count(draws=len(released), linkage_queries=1)
            for size, by_k in success.items():
                yield {"epsilon": float(epsilon), "query": int(row), "set_size": int(size),
                       "top1": float(by_k[1]), "top5": float(by_k[5]), "structure_unique": bool(unique[size]),
                       "likelihood": basis, "window_words": int(config.window),
                       "source_score": float(scores[row]) if math.isfinite(scores[row]) else None}


def chunks(array: np.ndarray, size: int):
    array = np.asarray(array)
    for index, start in enumerate(range(0, len(array), size)):
        yield index, array[start:start + size]


def table_from(element, vocab_size: int):
    (kind, epsilon), (inputs, outputs) = element
    return (kind, epsilon), CountTable(inputs, outputs, vocab_size)
