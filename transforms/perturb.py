"""PerturbTokens: the DoFn that privatizes batches of records with a mechanism.

The heavy, read-only state (the memory-mapped artifact, the mechanism, the tokenizer) is loaded
once per worker process: ``setup()`` acquires it from an ``apache_beam.utils.shared.Shared`` handle
that holds one ``PrivatizerHolder``, so every DoFn instance (thread) of the process uses the same
object, and the artifact's memory map is shared with the other processes through the page cache.

Randomness is per DoFn instance and created in ``setup()`` from OS entropy, never in ``__init__``
(which is pickled and copied to every worker: a generator made there would repeat the same noise
on every worker). With ``seed`` set (tests, benchmarks) every text instead gets its own generator
seeded from (seed, file, position, field), which is reproducible on any runner and any number
of workers and still never repeats a stream between records.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
import time
import uuid
import zlib
from dataclasses import astuple, dataclass
from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from textdp.compact_vocab import SharedVocabularyArtifact
from textdp.locate import resolve_artifact
from textdp.mechanisms import make_mechanism
from textdp.text_privatizer import TextPrivatizer

NAMESPACE = "textdp"

_PROCESS_LOADS = 0  # how many times this process has loaded a holder (diagnostics: must stay 1)
_PROCESS_LOADS_LOCK = threading.Lock()


@dataclass(frozen=True)
class PerturbConfig:
    """Everything a worker needs to build the privatizer; also the Shared cache tag."""

    artifact: Optional[str]
    mechanism: str
    epsilon: float
    nn: str = "exact"
    search_k: int = -1
    gamma: Optional[float] = None
    beta: float = 0.001
    oov_policy: str = "random"
    unk_token: str = "<unk>"
    seed: Optional[int] = None
    text_fields: Tuple[str, ...] = ()
    # when set, every released record is a dict carrying {"words": n, "layout": digest} in this field
    # (text input: {"text": released, field: ...}), for the shuffle accounting (transforms/shuffle.py)
    shape_field: Optional[str] = None


class PrivatizerHolder:
    """The per-process state: the artifact (and a reference mechanism for the summary's statement).

    The artifact's vectors and vocabulary are memory-mapped, so a second process on the same
    machine adds little more than its own small index arrays (see benchmarks/bench_pipeline.py).
    It is read-only and shared by every DoFn instance (thread) of the process. Mechanisms are not
    shared: the exact search keeps a scratch buffer, so each DoFn instance gets its own mechanism
    from ``make_privatizer()`` (cheap: it only references the artifact's arrays).
    """

    def __init__(self, config: PerturbConfig):
        global _PROCESS_LOADS  # pylint: disable=global-statement
        started = time.perf_counter()
        self.config = config
        # the vocabulary is memory-mapped like the vectors: shared by every process on the machine
        self.artifact = SharedVocabularyArtifact(resolve_artifact(config.artifact))
        self.mechanism = self._make_mechanism()  # fails early on bad parameters; describes the run
        self.load_ms = (time.perf_counter() - started) * 1000.0
        with _PROCESS_LOADS_LOCK:
            _PROCESS_LOADS += 1
            self.load_number = _PROCESS_LOADS
        self._reported = False
        self._report_lock = threading.Lock()

    def _make_mechanism(self):
        config = self.config
        return make_mechanism(config.mechanism, self.artifact, config.epsilon, nn=config.nn,
                              search_k=config.search_k, gamma=config.gamma, beta=config.beta)

    def make_privatizer(self) -> TextPrivatizer:
        """A TextPrivatizer with its own mechanism instance, for one DoFn instance (one thread)."""
        return TextPrivatizer(self._make_mechanism(), self.artifact.words, self.artifact.word_to_id,
                              self.config.oov_policy, self.config.unk_token)

    def claim_load_report(self) -> bool:
        """True exactly once per holder: the first bundle that sees it reports the load metrics."""
        with self._report_lock:
            if self._reported:
                return False
            self._reported = True
            return True


def load_holder(shared_handle, config: PerturbConfig) -> PrivatizerHolder:
    return shared_handle.acquire(lambda: PrivatizerHolder(config), tag=astuple(config))


def record_shape(text_shapes) -> dict:
    """One record's shape from its text fields' (words, layout) pairs, in field order."""
    layouts = "/".join(layout for _, layout in text_shapes)
    layout = layouts if len(text_shapes) == 1 else hashlib.sha256(layouts.encode("ascii")).hexdigest()[:32]
    return {"words": int(sum(words for words, _ in text_shapes)), "layout": layout}


def stream_fingerprint(rng: np.random.Generator, count: int = 8) -> str:
    """SHA-256 of the first ``count`` standard-normal draws ``rng`` will produce (not consumed).

    Madlib's first use of a generator is ``standard_normal`` for the noise directions, so two
    workers with equal fingerprints would add the same noise. A hash, not the draws themselves:
    the draws are the noise of the first released words and must not be published.
    """
    draws = np.random.Generator(copy.deepcopy(rng.bit_generator)).standard_normal(count)
    return hashlib.sha256(draws.tobytes()).hexdigest()


class PerturbTokens(beam.DoFn):
    """Batches of ``(source, position, payload)`` -> privatized payloads (+ 'stats', 'diagnostics').

    Metrics (namespace ``textdp``): counters records, tokens, changed_tokens, unknown_tokens,
    artifact_loads (one per load, i.e. one per worker process), distribution artifact_load_ms.
    """

    STATS = "stats"
    DIAGNOSTICS = "diagnostics"

    def __init__(self, shared_handle, config: PerturbConfig, diagnostics: bool = False):
        self._shared_handle = shared_handle
        self.config = config
        self.diagnostics = diagnostics
        self._records = Metrics.counter(NAMESPACE, "records")
        self._tokens = Metrics.counter(NAMESPACE, "tokens")
        self._changed = Metrics.counter(NAMESPACE, "changed_tokens")
        self._unknown = Metrics.counter(NAMESPACE, "unknown_tokens")
        self._loads = Metrics.counter(NAMESPACE, "artifact_loads")
        self._load_ms = Metrics.distribution(NAMESPACE, "artifact_load_ms")
        self._holder = None
        self._privatizer = None
        self._rng = None
        self._instance = None
        self._stream_fingerprint = None
        self._bundle_reported = False

    def setup(self):
        self._holder = load_holder(self._shared_handle, self.config)
        self._privatizer = self._holder.make_privatizer()
        self._rng = np.random.default_rng()  # OS entropy, fresh in every worker and DoFn instance
        self._instance = uuid.uuid4().hex
        self._stream_fingerprint = stream_fingerprint(self._rng)

    def start_bundle(self):
        self._bundle_reported = False

    def process(self, batch):
        holder = self._holder
        if holder.claim_load_report():
            self._loads.inc()
            self._load_ms.update(int(round(holder.load_ms)))
        if self.diagnostics and not self._bundle_reported:
            self._bundle_reported = True
            yield beam.pvalue.TaggedOutput(self.DIAGNOSTICS, self._diagnostics(holder))

        fields = self.config.text_fields
        texts, seeds = [], []
        for source, position, payload in batch:
            if fields:
                for index, field in enumerate(fields):
                    texts.append(payload[field])
                    seeds.append((source, position, index))
            else:
                texts.append(payload)
                seeds.append((source, position, 0))
        shape_field = self.config.shape_field
        shapes = [] if shape_field else None
        released, stats = self._privatizer.privatize(texts, self._generators(seeds), shapes)

        at = 0
        for _source, _position, payload in batch:
            if fields:
                out = dict(payload)
                for field in fields:
                    out[field] = released[at]
                    at += 1
                if shape_field:
                    out[shape_field] = record_shape(shapes[at - len(fields):at])
                yield out
            elif shape_field:
                yield {"text": released[at], shape_field: record_shape(shapes[at:at + 1])}
                at += 1
            else:
                yield released[at]
                at += 1
        self._records.inc(len(batch))
        self._tokens.inc(stats["tokens"])
        self._changed.inc(stats["changed_tokens"])
        self._unknown.inc(stats["unknown_tokens"])
        yield beam.pvalue.TaggedOutput(self.STATS, stats)

    def _generators(self, seeds):
        if self.config.seed is None:
            return self._rng
        return [np.random.default_rng([self.config.seed, zlib.crc32(source.encode("utf-8")), position, index])
                for source, position, index in seeds]

    def _diagnostics(self, holder) -> dict:
        return {
            "pid": os.getpid(),
            "dofn_instance": self._instance,
            "holder_id": id(holder),
            "holder_load_number": holder.load_number,
            "process_loads": _PROCESS_LOADS,
            "load_ms": holder.load_ms,
            "seeded": self.config.seed is not None,
            "noise_stream_sha256": None if self.config.seed is not None else self._stream_fingerprint,
        }


class WriteSummary(beam.DoFn):
    """The combined counts -> ``<output>-summary.json`` (+ the public summary), as the pipeline's last step.

    It asks the same per-process holder as PerturbTokens for the mechanism's parameters and privacy
    statement, so the summaries describe exactly the mechanism that ran. The operator's summary keeps
    the raw-data figures (marked as such); the public one, written only when ``public_path`` is
    given, holds none (textdp/summary.py).
    """

    def __init__(self, shared_handle, config: PerturbConfig, summary_path: str, context: dict,
                 public_path: Optional[str] = None):
        self._shared_handle = shared_handle
        self.config = config
        self.summary_path = summary_path
        self.public_path = public_path
        self.context = context
        self._holder = None

    def setup(self):
        self._holder = load_holder(self._shared_handle, self.config)

    def process(self, counts, amplification=()):
        from textdp.summary import build_public_summary, build_summary  # pylint: disable=import-outside-toplevel
        from transforms.io import write_json  # pylint: disable=import-outside-toplevel

        mechanism = self._holder.mechanism
        common = dict(mechanism_parameters=mechanism.parameters(), mechanism_statement=mechanism.privacy_statement(),
                      artifact=self._holder.artifact.describe(), oov_policy=self.config.oov_policy,
                      unk_token=self.config.unk_token, seed=self.config.seed)
        summary = build_summary(counts, public_summary=self.public_path, **common, **self.context)
        write_json(self.summary_path, summary)
        if self.public_path:
            context = self.context
            public = build_public_summary(
                records_out=summary["records"]["out"], output=context["output"], data_format=context["data_format"],
                text_fields=context["text_fields"], amplifier_steps=context.get("amplifier_steps"),
                amplification=amplification[0] if amplification else None, **common)
            write_json(self.public_path, public)
        yield self.summary_path
