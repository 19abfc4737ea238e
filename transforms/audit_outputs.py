"""Beam side of the audit's outputs: Parquet schemas, and the DoFn that writes summary.json, plots, report.html."""

from __future__ import annotations

import time
from typing import Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from textdp.audit.attacks import BAND_LABELS, mcdiarmid_margin, summarise_inversion
from textdp.audit.contextual import log_emission_note, paired_rates
from textdp.audit.report import DEFINITIONS, REPORT, build_report_files, summarise_linkage
from textdp.audit.selfcheck import summarise_self_check
from textdp.mechanisms import statement_of
from transforms.audit_common import AuditConfig, holder_state
from transforms.io import write_json

SUMMARY_FILE = "summary.json"
SELF_CHECK_TABLE = "self_check"
INVERSION_TABLE = "inversion"
LINKAGE_TABLE = "linkage"
MC_DELTA = 0.05  # the Monte Carlo upper bounds hold with probability 1 - MC_DELTA each


def self_check_schema() -> pa.Schema:
    return pa.schema([
        ("pair_id", pa.string()), ("kind", pa.string()), ("band", pa.int64()), ("label", pa.string()),
        ("word_a_id", pa.int64()), ("word_b_id", pa.int64()), ("epsilon", pa.float64()), ("direction", pa.string()),
        ("distance", pa.float64()), ("bound", pa.float64()), ("lcb", pa.float64()), ("estimate", pa.float64()),
        ("excess", pa.float64()), ("tightness", pa.float64()), ("verdict", pa.string()), ("event_size", pa.int64()),
        ("k_w", pa.int64()), ("k_v", pa.int64()), ("draws_per_word", pa.int64()), ("alpha_test", pa.float64()),
    ])


def inversion_schema() -> pa.Schema:
    return pa.schema([
        ("epsilon", pa.float64()), ("band", pa.int64()), ("band_label", pa.string()), ("tokens", pa.int64()),
        ("top1", pa.int64()), ("top10", pa.int64()), ("released", pa.int64()), ("prior_top1", pa.int64()),
        ("prior_top10", pa.int64()), ("in_prior", pa.int64()),
    ])


def linkage_schema() -> pa.Schema:
    return pa.schema([
        ("epsilon", pa.float64()), ("query", pa.int64()), ("set_size", pa.int64()), ("top1", pa.float64()),
        ("top5", pa.float64()), ("structure_unique", pa.bool_()), ("likelihood", pa.string()),
        ("window_words", pa.int64()), ("source_score", pa.float64()),
    ])


def inversion_row(element) -> dict:
    (epsilon, band), counts = element
    return {"epsilon": float(epsilon), "band": int(band), "band_label": BAND_LABELS[int(band)], **counts}


def _write_bytes(path: str, data: bytes, mime_type: str) -> None:
    with FileSystems.create(path, mime_type=mime_type) as handle:
        handle.write(data)


# What a run without the contextual attacker (--no-contextual) says instead of its figures (red team F16).
CONTEXTUAL_CORPUS_FIGURES = ("contextual_records", "contextual_tokens")
CONTEXTUAL_DEFINITIONS = ("contextual top-1 / top-10",)
CONTEXTUAL_SKIPPED = "not run (--no-contextual): this run measured the context-free attacker only"


class WriteAuditOutputs(beam.DoFn):
    """One element (ignored) and the run's results as side inputs -> summary.json, plots, report.html."""

    def __init__(self, shared_handle, config: AuditConfig, output_dir: str, run_info: dict, worker=None):
        self.config = config
        self.output_dir = output_dir.rstrip("/")
        self.run_info = run_info
        self._state = holder_state(shared_handle, config, worker)

    def setup(self):
        self._state.setup()

    def process(self, _, self_check_rows, inversion_rows, linkage_rows, monte_carlo, corpus, read_counts,
                contextual_rows=(), language_model=()):
        config, info = self.config, self.run_info
        artifact = self._state.value.artifact
        mechanisms = {eps: config.build_mechanism(artifact, eps) for eps in config.epsilons}
        summary = {
            "job": "audit", "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "mechanism": mechanisms[config.epsilons[0]].name, "epsilons": list(config.epsilons),
            "parameters": {f"{eps:g}": m.parameters() for eps, m in mechanisms.items()},
            "artifact": artifact.describe(), "oov_policy": config.oov_policy, "randomness": info["randomness"],
            "checks": info["checks"],
        }
        if "self-check" in info["checks"]:
            rows = sorted(self_check_rows, key=lambda r: (r["epsilon"], r["pair_id"], r["direction"]))
            check = summarise_self_check(rows, config.false_alarm_rate, config.planned_tests)
            check.update(info["self_check"])
            summary["self_check"] = check
        contextual_ran = bool(language_model)  # the contextual attacker ran (not --no-contextual)
        if corpus:
            described = dict(corpus[0])
            described.update(read_counts[0] if read_counts else {})
            if not contextual_ran:  # no figure of an attack that did not run (F16)
                for key in CONTEXTUAL_CORPUS_FIGURES:
                    described.pop(key, None)
            summary["corpus"] = described
        if "inversion" in info["checks"] and corpus:
            inversion = {"prior": info["prior"], "posterior": info["posterior"],
                         "per_epsilon": summarise_inversion(inversion_rows)}
            if monte_carlo:
                inversion["monte_carlo_delta"] = MC_DELTA
                inversion["monte_carlo"] = {
                    f"{eps:g}": {"training_draws": int(draws),
                                 "upper_top1": min(1.0, rates[1] + mcdiarmid_margin(draws, MC_DELTA)),
                                 "upper_top10": min(1.0, rates[10] + mcdiarmid_margin(draws, MC_DELTA)),
                                 "in_sample_top1": rates[1], "in_sample_top10": rates[10]}
                    for eps, draws, rates in sorted(monte_carlo)}
                inversion["monte_carlo_note"] = (
                    "the attacker's posterior is estimated from releases of prior-drawn words; its measured rates "
                    "are lower bounds of the Bayes-optimal attacker's (in expectation); the upper bounds above hold "
                    f"with probability {1 - MC_DELTA:g} for inputs drawn from the prior (plug-in estimate plus "
                    "McDiarmid's margin sqrt(ln(1/delta) / 2S))")
            summary["inversion"] = inversion
            if contextual_ran:
                summary["contextual_inversion"] = contextual_summary(info, language_model[0], contextual_rows)
            else:
                summary["contextual_inversion_skipped"] = CONTEXTUAL_SKIPPED
        if "linkage" in info["checks"] and corpus:
            summary["linkage"] = {"likelihood": info["likelihood"], "window_words": config.window,
                                  "per_epsilon": summarise_linkage(linkage_rows)}
        summary["privacy_statement"] = statement_of(mechanisms[config.epsilons[0]])  # with whose it is, if not textdp's
        summary["definitions"] = {term: text for term, text in DEFINITIONS.items()
                                  if contextual_ran or term not in CONTEXTUAL_DEFINITIONS}
        summary["outputs"] = {"summary": SUMMARY_FILE, "report": REPORT}
        files = build_report_files(summary, self_check_rows)
        summary["outputs"]["plots"] = sorted(name for name in files if name.endswith(".png"))
        for name, data in files.items():
            _write_bytes(f"{self.output_dir}/{name}", data, "image/png" if name.endswith(".png") else "text/html")
        write_json(f"{self.output_dir}/{SUMMARY_FILE}", summary)
        yield summary.get("self_check", {}).get("status", "done")


def contextual_summary(info: dict, model: dict, rows) -> dict:
    """summary["contextual_inversion"]: the shape of summary["inversion"] (prior, posterior, per_epsilon), the
    language model, and the context-free attacker's rates on the very releases the contextual one saw."""
    closed = info["posterior"].startswith("exact")
    return {"prior": info["prior"],
            "posterior": ("forward-backward over each run of released in-vocabulary words: a bigram language model as "
                          f"the transition prior, emissions {log_emission_note(closed)}, over {model['candidates_K']} "
                          "candidates per position plus the released word"),
            "model": model,
            "per_epsilon": summarise_inversion(rows),
            "same_releases_context_free": paired_rates(rows)}


def monte_carlo_info(element) -> Optional[tuple]:
    """(epsilon, draws, in-sample rates) from an inversion CountTable."""
    (kind, epsilon), table = element
    if kind != "inversion":
        return None
    return float(epsilon), table.total, table.in_sample_rates((1, 10))
