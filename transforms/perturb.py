"""PerturbTokens: the DoFn that privatizes batches of records with a mechanism (inside ``Privatize``).

The heavy, read-only state (the memory-mapped artifact and a reference mechanism) is loaded once
per worker process by ``transforms.worker.WorkerState`` (``Shared`` + one load metric). Each DoFn
instance builds its own ``TextPrivatizer`` from it in ``setup()`` (the exact search keeps a
scratch buffer, so mechanisms are not shared between threads). The DoFn only batches, seeds and
counts: checking a record, taking its texts out and putting the released texts back is
``textdp.text.records``; tokenizing and releasing is ``textdp.text.privatizer``.

Randomness is per DoFn instance and created in ``setup()`` from OS entropy, never in ``__init__``
(which is pickled and copied to every worker: a generator made there would repeat the same noise
on every worker). With ``seed`` set (tests, benchmarks) every text instead gets its own generator
seeded from (seed, the record's key, field), which is reproducible on any runner and any number of
workers and never repeats a stream between records; records without a key (``Privatize`` on a
plain PCollection) are keyed by a hash of their texts, so equal records get equal noise.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import uuid
import zlib
from dataclasses import astuple, dataclass
from typing import Any, Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from textdp.allocator import allocator_settings
from textdp.artifact.compact_vocab import SharedVocabularyArtifact
from textdp.artifact.locate import resolve_artifact
from textdp.mechanisms import make_mechanism, mechanism_reference, statement_of
from textdp.search.nearest import search_threads
from textdp.text.privatizer import DEFAULT_UNK_TOKEN, TextPrivatizer
from textdp.text.records import check_record, record_texts, released_record
from transforms.worker import NAMESPACE, WorkerConfig, WorkerState, blas_threads_in_use, process_loads


@dataclass(frozen=True)
class PerturbConfig:
    """Everything a worker needs to build the privatizer; also the Shared cache tag."""

    artifact: Optional[str]
    mechanism: Any  # a mechanism reference: registered name, import path or Mechanism subclass
    epsilon: float
    # the mechanism's own keyword parameters (textdp.mechanisms.make_mechanism), as sorted (name, value) pairs
    params: Tuple[Tuple[str, Any], ...] = ()
    oov_policy: str = "random"
    unk_token: str = DEFAULT_UNK_TOKEN
    seed: Optional[int] = None
    text_fields: Tuple[str, ...] = ()
    # when set, every released record is a dict carrying {"words": n, "layout": digest} in this field
    # (text input: {"text": released, field: ...}), for the shuffle accounting (transforms/shuffle.py)
    shape_field: Optional[str] = None
    max_text_bytes: Optional[int] = None

    def __post_init__(self):  # a name, import path or class -> its picklable reference (textdp.mechanisms)
        object.__setattr__(self, "mechanism", mechanism_reference(self.mechanism))

    def tag(self) -> str:
        """The Shared cache key: the state depends on the artifact and the mechanism's parameters only."""
        return "textdp-privatizer:" + repr(astuple(self)[:5])

    @staticmethod
    def mechanism_params(**params) -> Tuple[Tuple[str, Any], ...]:
        """``params`` in the hashable form of ``PerturbConfig.params``."""
        return tuple(sorted(params.items()))


class PrivatizerHolder:
    """The per-process state: the artifact (vocabulary memory-mapped like the vectors, so shared by every
    process on the machine) and a reference mechanism that describes the run in the summary."""

    def __init__(self, config: PerturbConfig):
        self.config = config
        self.artifact = SharedVocabularyArtifact(resolve_artifact(config.artifact))
        self.mechanism = self.make_mechanism()  # fails early on bad parameters; describes the run

    def make_mechanism(self):
        config = self.config
        return make_mechanism(config.mechanism, self.artifact, config.epsilon, **dict(config.params))

    def make_privatizer(self) -> TextPrivatizer:
        """A TextPrivatizer with its own mechanism instance, for one DoFn instance (one thread)."""
        return TextPrivatizer(self.make_mechanism(), self.artifact.words, self.artifact.word_to_id,
                              self.config.oov_policy, self.config.unk_token)


def holder_state(shared_handle, config: PerturbConfig, worker: Optional[WorkerConfig] = None) -> WorkerState:
    """The WorkerState that loads (once per process) the PrivatizerHolder for ``config``."""
    return WorkerState(shared_handle, config.tag(), lambda: PrivatizerHolder(config), worker)


def stream_fingerprint(rng: np.random.Generator, count: int = 8) -> str:
    """SHA-256 of the first ``count`` standard-normal draws ``rng`` will produce (not consumed).

    Madlib's first use of a generator is ``standard_normal`` for the noise directions, so two
    workers with equal fingerprints would add the same noise. A hash, not the draws themselves:
    the draws are the noise of the first released words and must not be published.
    """
    draws = np.random.Generator(copy.deepcopy(rng.bit_generator)).standard_normal(count)
    return hashlib.sha256(draws.tobytes()).hexdigest()


def _key_seed(key, record, text_fields) -> list:
    """Integers identifying a record for seeded runs: its (source, position) key, or a hash of its texts."""
    if isinstance(key, (tuple, list)) and len(key) == 2 and isinstance(key[1], int):
        return [zlib.crc32(str(key[0]).encode("utf-8")), int(key[1])]
    digest = hashlib.sha256(json.dumps(record_texts(record, text_fields), ensure_ascii=False)
                            .encode("utf-8", "surrogatepass")).digest()
    return [int.from_bytes(digest[:8], "big")]


def error_record(key, reason: str, detail: str) -> dict:
    """An error record without the text: where (the key: file and position, if known) and why."""
    if isinstance(key, (tuple, list)) and len(key) == 2:
        return {"source": key[0], "position": key[1], "reason": reason, "detail": detail}
    return {"source": None, "position": None, "reason": reason, "detail": detail}


class PerturbTokens(beam.DoFn):
    """Batches of ``(key, record)`` -> released records, + 'errors', 'stats' and 'diagnostics' outputs.

    Metrics (namespace ``textdp``): records, tokens, changed_tokens, unknown_tokens (figures of the
    raw input: operator diagnostics, see textdp/privacy/summary.py), artifact_loads, artifact_load_ms.
    """

    ERRORS = "errors"
    STATS = "stats"
    DIAGNOSTICS = "diagnostics"

    def __init__(self, shared_handle, config: PerturbConfig, diagnostics: bool = False,
                 worker: Optional[WorkerConfig] = None):
        self.config = config
        self.diagnostics = diagnostics
        self._state = holder_state(shared_handle, config, worker)
        self._records = Metrics.counter(NAMESPACE, "records")
        self._tokens = Metrics.counter(NAMESPACE, "tokens")
        self._changed = Metrics.counter(NAMESPACE, "changed_tokens")
        self._unknown = Metrics.counter(NAMESPACE, "unknown_tokens")
        self._privatizer = None
        self._rng = None
        self._instance = None
        self._stream_fingerprint = None
        self._bundle_reported = False

    def setup(self):
        holder = self._state.setup(own_search_threads=True)
        self._privatizer = holder.make_privatizer()
        self._rng = np.random.default_rng()  # OS entropy, fresh in every worker and DoFn instance
        self._instance = uuid.uuid4().hex
        self._stream_fingerprint = stream_fingerprint(self._rng)

    def start_bundle(self):
        self._bundle_reported = False

    def finish_bundle(self):
        self._state.progress.flush()

    def process(self, batch):
        self._state.report()
        if self.diagnostics and not self._bundle_reported:
            self._bundle_reported = True
            yield beam.pvalue.TaggedOutput(self.DIAGNOSTICS, self._diagnostics())
        fields = self.config.text_fields
        good, texts, seeds = [], [], []
        failed = {}
        for key, record in batch:
            problem = check_record(record, fields, self.config.max_text_bytes)
            if problem:
                failed[problem[0]] = failed.get(problem[0], 0) + 1
                yield beam.pvalue.TaggedOutput(self.ERRORS, error_record(key, *problem))
                continue
            good.append(record)
            record_seed = _key_seed(key, record, fields) if self.config.seed is not None else None
            for index, text in enumerate(record_texts(record, fields)):
                texts.append(text)
                seeds.append(record_seed + [index] if record_seed is not None else None)
        shape_field = self.config.shape_field
        shapes = [] if shape_field else None
        released, stats = self._privatizer.privatize(texts, self._generators(seeds), shapes)
        per_record = max(1, len(fields))
        for index, record in enumerate(good):
            span = slice(index * per_record, (index + 1) * per_record)
            yield released_record(record, fields, released[span], shape_field, shapes[span] if shapes else None)
        self._records.inc(len(good))
        self._tokens.inc(stats["tokens"])
        self._changed.inc(stats["changed_tokens"])
        self._unknown.inc(stats["unknown_tokens"])
        self._state.progress.add(records=len(good) + sum(failed.values()), tokens=stats["tokens"])
        stats = dict(stats, records=len(good), failed=sum(failed.values()),
                     **{f"failed:{reason}": count for reason, count in failed.items()})
        yield beam.pvalue.TaggedOutput(self.STATS, stats)

    def _generators(self, seeds):
        if self.config.seed is None:
            return self._rng
        return [np.random.default_rng([self.config.seed] + seed) for seed in seeds]

    def _diagnostics(self) -> dict:
        state = self._state.state
        return {
            "pid": os.getpid(),
            "dofn_instance": self._instance,
            "holder_id": id(state),
            "holder_load_number": state.load_number,
            "process_loads": process_loads(),
            "load_ms": state.load_ms,
            "blas_threads": blas_threads_in_use(),
            "allocator": allocator_settings(),
            "search_threads": search_threads(),
            "seeded": self.config.seed is not None,
            "noise_stream_sha256": None if self.config.seed is not None else self._stream_fingerprint,
        }


class WriteSummary(beam.DoFn):
    """The combined counts -> ``<output>-summary.json`` (+ the public summary), as the pipeline's last step.

    It asks the same per-process holder as PerturbTokens for the mechanism's parameters and privacy
    statement, so the summaries describe exactly the mechanism that ran. The operator's summary keeps
    the raw-data figures (marked as such); the public one, written only when ``public_path`` is
    given, holds none (textdp/privacy/summary.py).
    """

    def __init__(self, shared_handle, config: PerturbConfig, summary_path: str, context: dict,
                 public_path: Optional[str] = None, worker: Optional[WorkerConfig] = None):
        self.config = config
        self.summary_path = summary_path
        self.public_path = public_path
        self.context = context
        self._state = holder_state(shared_handle, config, worker)

    def setup(self):
        self._state.setup()

    def process(self, counts, amplification=()):
        from textdp.privacy.summary import build_public_summary, build_summary
        from transforms.io import write_json

        holder = self._state.value
        mechanism = holder.mechanism
        common = dict(mechanism_parameters=mechanism.parameters(), mechanism_statement=statement_of(mechanism),
                      artifact=holder.artifact.describe(), oov_policy=self.config.oov_policy,
                      unk_token=self.config.unk_token, seed=self.config.seed,
                      warnings=list(self.context.get("warnings") or [])
                      + [w for section in amplification for w in section.get("warnings", [])])  # the run's own
        context = {key: value for key, value in self.context.items() if key != "warnings"}
        summary = build_summary(counts, public_summary=self.public_path, **common, **context)
        write_json(self.summary_path, summary)
        if self.public_path:
            public = build_public_summary(
                records_out=summary["records"]["out"], output=context["output"], data_format=context["data_format"],
                text_fields=context["text_fields"], amplifier_steps=context.get("amplifier_steps"),
                amplification=amplification[0] if amplification else None, tokens=summary["tokens"], **common)
            write_json(self.public_path, public)
        yield self.summary_path
