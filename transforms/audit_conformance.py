"""Beam side of ``textdp audit --conformance``: one unit of work per (mechanism, epsilon), parallel, then one
writer for ``conformance.json`` and ``summary.json``.

A unit runs ``textdp.audit.conformance.run_unit`` on the worker's memory-mapped artifact: the mechanism is
built by the same factory privatize uses and its releases come from its ``privatize_ids``, the call the
PerturbTokens DoFn makes.
"""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from textdp.audit.conformance import message_lines, run_unit, summarize
from transforms.audit_common import NAMESPACE, AuditConfig, holder_state
from transforms.audit_outputs import SUMMARY_FILE

CONFORMANCE_FILE = "conformance.json"


class ConformanceUnitFn(beam.DoFn):
    """(index, mechanism reference, epsilon, params, level) -> the unit's result row."""

    def __init__(self, shared_handle, config: AuditConfig, options: dict, worker=None):
        self.config = config
        self.options = dict(options)
        self._state = holder_state(shared_handle, config, worker)
        self._units = Metrics.counter(NAMESPACE, "conformance_units")

    def setup(self):
        self._state.setup(own_search_threads=True)

    def finish_bundle(self):
        self._state.progress.flush()

    def process(self, element):
        self._state.report()
        index, reference, epsilon, params, level = element
        rng = self.config.rng("conformance", index, float(epsilon))  # OS entropy unless --seed (tests)
        row = run_unit(reference, self._state.value.artifact, float(epsilon), dict(params),
                       words_per_band=self.options["words_per_band"], draws=self.options["draws"] or None,
                       level=level, power_repeats=self.options["power_repeats"], rng=rng)
        self._units.inc()
        self._state.progress.add(draws=int(row.get("draws", 0)))
        yield index, row


class WriteConformance(beam.DoFn):
    """All rows (side input) -> ``conformance.json`` (every unit) and ``summary.json`` (verdicts, method)."""

    def __init__(self, output: str, false_alarm_rate: float, run_info: dict):
        self.output = output
        self.false_alarm_rate = float(false_alarm_rate)
        self.run_info = dict(run_info)

    def process(self, _, rows: list[tuple]):
        result = summarize([row for _, row in sorted(rows, key=lambda pair: pair[0])], self.false_alarm_rate)
        summary = {**self.run_info, "checks": ["conformance"], "conformance": {
            key: result[key] for key in ("verdicts", "flagged", "declaration_broken", "tests", "false_alarm_rate", "method")}}
        summary["conformance"]["message"] = message_lines(result)
        for name, payload in ((CONFORMANCE_FILE, result), (SUMMARY_FILE, summary)):
            with FileSystems.create(f"{self.output}/{name}", mime_type="application/json") as handle:
                handle.write(json.dumps(payload, indent=2, sort_keys=True, default=str).encode("utf-8"))
        yield result["flagged"]


class Conformance(beam.PTransform):
    """Units -> rows -> the written report."""

    def __init__(self, shared_handle, config: AuditConfig, options: dict, output: str, run_info: dict, worker=None):
        super().__init__()
        self._shared_handle = shared_handle
        self.config = config
        self.options = options
        self.output = output
        self.run_info = run_info
        self.worker = worker

    def expand(self, units):
        rows = (units
                | "SpreadUnits" >> beam.Reshuffle()
                | "TestUnit" >> beam.ParDo(ConformanceUnitFn(self._shared_handle, self.config, self.options,
                                                             self.worker)))
        return (units.pipeline
                | "ConformanceTrigger" >> beam.Create([None])
                | "WriteConformance" >> beam.ParDo(WriteConformance(self.output, self.config.false_alarm_rate,
                                                                    self.run_info), beam.pvalue.AsList(rows)))
