"""Beam side of ``textdp calibrate``: shard the per-word statistics, then write table, summary, report.

``CalibrateWords`` turns ``(word or id, stratum)`` elements into one row per word and epsilon
(:class:`textdp.calibration.statistics.WordCalibrator`). Heavy state (the memory-mapped artifact) is loaded
once per worker process behind ``apache_beam.utils.shared.Shared``; the mechanisms, which keep
per-instance scratch buffers, are built per DoFn instance (one thread at a time), and each
instance draws its randomness from a generator created in ``setup()`` from OS entropy. With
``--seed`` (tests and benchmarks only) every word gets ``default_rng([seed, word_id])`` instead, so
results do not depend on how the work was sharded.

``WriteCalibrationOutputs`` gathers the rows (5 epsilons x 1,000 words is a few thousand small
dicts) and writes ``summary.json``, the PNG plots and ``report.html`` through Beam's FileSystems,
so the output directory may be local or gs://.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from textdp.artifact.locate import open_artifact
from textdp.calibration.report import build_report_files
from textdp.calibration.statistics import K_VALUES, WordCalibrator, build_summary
from textdp.mechanisms import make_mechanism, mechanism_reference, statement_of
from textdp.text.tokenize import UNKNOWN_ID, Tokenizer
from transforms.worker import NAMESPACE, WorkerConfig, WorkerState

SUMMARY_FILE = "summary.json"
TABLE_PREFIX = "per_word"
TABLE_FILE = f"{TABLE_PREFIX}.parquet"


@dataclass(frozen=True)
class CalibrationConfig:
    """Everything a worker needs to compute the statistics (picklable, small)."""

    artifact: Optional[str]
    mechanism: Any  # a mechanism reference: registered name, import path or Mechanism subclass
    epsilons: Tuple[float, ...]
    samples: int
    params: Tuple[Tuple[str, Any], ...] = ()  # the mechanism's keyword parameters, sorted (name, value) pairs
    prune: bool = True
    seed: Optional[int] = None

    def __post_init__(self):  # a name, import path or class -> its picklable reference (textdp.mechanisms)
        object.__setattr__(self, "mechanism", mechanism_reference(self.mechanism))

    def artifact_tag(self) -> str:
        """Shared cache key: the artifact alone (every calibration of it shares one loaded copy)."""
        return f"textdp-calibrate-artifact:{self.artifact or '<default>'}"

    def build_mechanisms(self, artifact) -> dict:
        return {eps: make_mechanism(self.mechanism, artifact, eps, **dict(self.params)) for eps in self.epsilons}


def parquet_schema() -> pa.Schema:
    """Schema of per_word.parquet: one row per sampled word and epsilon."""
    fields = [
        ("word_id", pa.int64()), ("word", pa.string()), ("frequency_rank", pa.int64()), ("stratum", pa.int64()),
        ("epsilon", pa.float64()), ("samples", pa.int64()), ("n_w", pa.float64()), ("n_w_count", pa.int64()),
        ("s_w", pa.int64()), ("n_w_exact", pa.float64()), ("s_w_exact", pa.float64()), ("tem_gamma", pa.float64()),
        ("searched_fraction", pa.float64()),
    ]
    fields += [(f"knn_distance_k{k}", pa.float64()) for k in K_VALUES]
    return pa.schema(fields)


def load_artifact(location: Optional[str]):
    """Per-process, read-only, thread-safe: the memory-mapped artifact (with its row norms computed)."""
    artifact = open_artifact(location)
    _ = artifact.sqnorms  # computed once per process, shared by every DoFn instance
    return artifact


def artifact_state(shared_handle, config: CalibrationConfig, worker: Optional[WorkerConfig] = None) -> WorkerState:
    location = config.artifact
    return WorkerState(shared_handle, config.artifact_tag(), lambda: load_artifact(location), worker)


def word_list_id(tokenizer: Tokenizer, line: str) -> int:
    """The vocabulary id of a --word-list line (``tokenizer`` over the artifact's vocabulary): UNKNOWN_ID unless
    the line is exactly one known word. The launcher asks it too (a list with no known word is refused)."""
    ids = tokenizer.tokenize(line).ids
    return int(ids[0]) if len(ids) == 1 else UNKNOWN_ID


class CalibrateWordFn(beam.DoFn):
    """``(word_id | word, stratum)`` -> one row per epsilon; unknown words (word lists) go to 'unknown'.

    Metrics (namespace ``textdp``): calibrated_words, draws, unknown_words, artifact_loads, artifact_load_ms.
    """

    UNKNOWN = "unknown"

    def __init__(self, shared_handle, config: CalibrationConfig, worker: Optional[WorkerConfig] = None):
        self.config = config
        self._state = artifact_state(shared_handle, config, worker)
        self._words = Metrics.counter(NAMESPACE, "calibrated_words")
        self._draws = Metrics.counter(NAMESPACE, "draws")
        self._unknown = Metrics.counter(NAMESPACE, "unknown_words")
        self._calibrator = None
        self._rng = None
        self._tokenizer = None  # for --word-list lines, made on first use (one per DoFn instance)

    def setup(self):
        config = self.config
        artifact = self._state.setup()
        self._calibrator = WordCalibrator(artifact, config.mechanism, config.build_mechanisms(artifact),
                                          samples=config.samples, prune=config.prune)
        self._rng = np.random.default_rng()  # OS entropy, fresh in every worker and DoFn instance

    def finish_bundle(self):
        self._state.progress.flush()

    def _word_id(self, artifact, line: str) -> int:
        """The vocabulary id of a --word-list line as privatize would look its word up (the tokenizer's
        rule: case, apostrophes, Unicode forms); UNKNOWN_ID unless the line is exactly one known word."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(artifact.word_to_id, artifact.words)
        return word_list_id(self._tokenizer, line)

    def process(self, element):
        self._state.report()
        key, stratum = element
        artifact = self._state.value
        if isinstance(key, str):  # a word from --word-list: (line number is the stratum)
            word_id = self._word_id(artifact, key)
            if word_id == UNKNOWN_ID:
                self._unknown.inc()
                yield beam.pvalue.TaggedOutput(self.UNKNOWN, int(stratum))  # the line number, never the word
                return
        else:
            word_id = int(key)
        rng = self._rng if self.config.seed is None else np.random.default_rng([self.config.seed, word_id])
        rows = self._calibrator.calibrate(word_id, rng)
        self._words.inc()
        self._draws.inc(len(rows) * self.config.samples)
        self._state.progress.add(words=1, draws=len(rows) * self.config.samples)
        for row in rows:
            row["stratum"] = int(stratum)
            yield row


class CalibrateWords(beam.PTransform):
    """Spread the words over workers (Reshuffle) and compute their statistics."""

    def __init__(self, shared_handle, config: CalibrationConfig, worker: Optional[WorkerConfig] = None):
        super().__init__()
        self._shared_handle = shared_handle
        self.config = config
        self.worker = worker

    def expand(self, pcoll):
        return (pcoll
                | "SpreadWords" >> beam.Reshuffle()
                | "Statistics" >> beam.ParDo(CalibrateWordFn(self._shared_handle, self.config, self.worker)).with_outputs(
                    CalibrateWordFn.UNKNOWN, main="rows"))


def _write_bytes(path: str, data: bytes, mime_type: str) -> None:
    with FileSystems.create(path, mime_type=mime_type) as handle:
        handle.write(data)


class WriteCalibrationOutputs(beam.DoFn):
    """All rows and the unknown-word line numbers -> summary.json, PNG plots, report.html."""

    def __init__(self, shared_handle, config: CalibrationConfig, output_dir: str, run_info: dict,
                 worker: Optional[WorkerConfig] = None):
        self.config = config
        self.output_dir = output_dir.rstrip("/")
        self.run_info = run_info
        self._state = artifact_state(shared_handle, config, worker)

    def setup(self):
        self._state.setup()

    def process(self, element, unknown_lines):
        rows = sorted(element, key=lambda r: (r["word_id"], r["epsilon"]))
        config, info = self.config, dict(self.run_info)
        artifact = self._state.value
        mechanisms = config.build_mechanisms(artifact)
        words = dict(info["words"])
        words["count"] = len({r["word_id"] for r in rows})
        unknown = sorted(unknown_lines)
        if unknown:
            words["unknown_lines"] = unknown[:100]
            words["unknown_count"] = len(unknown)
            words["description"] += (f"; {len(unknown)} line(s) not in the vocabulary were skipped "
                                     f"(line numbers in summary.json)")
        if not rows:
            raise ValueError("no word could be calibrated (every word of the list is outside the vocabulary)")
        summary = build_summary(
            rows, mechanism=config.mechanism, epsilons=config.epsilons, samples=config.samples,
            artifact_info=artifact.describe(), nn_statement=info["nn_statement"],
            parameters={f"{eps:g}": m.parameters() for eps, m in mechanisms.items()},
            words_info=words, randomness=info["randomness"], max_nw=info["max_nw"], min_sw=info["min_sw"],
            coverage=info["coverage"], privacy_statements={eps: statement_of(m) for eps, m in mechanisms.items()},
            created_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        summary["outputs"] = {"table": TABLE_FILE, "summary": SUMMARY_FILE, "report": "report.html"}
        files = build_report_files(rows, summary)
        summary["outputs"]["plots"] = sorted(name for name in files if name.endswith(".png"))
        for name, data in files.items():
            _write_bytes(f"{self.output_dir}/{name}", data, "image/png" if name.endswith(".png") else "text/html")
        _write_bytes(f"{self.output_dir}/{SUMMARY_FILE}",
                     (json.dumps(summary, indent=2, sort_keys=False) + "\n").encode("utf-8"), "application/json")
        yield summary["recommendation"]["message"]
