"""The LAC Amplifier inside the privatize pipeline: one way to run it, and its amplification report.

``Amplify`` takes privatized payloads (str for text input, dict for JSONL/Parquet, each carrying
the privatizer's shape in ``AmplifierConfig.shape_field``), runs ``ShuffleAmplifier`` as the
configuration says, and returns:

* ``records``: the released records (payloads of the input's kind), when no shuffle ran;
* ``shards``: with ``shuffle``, the output shards in their shuffled order, for
  ``transforms.shard_writer.WriteShuffledShards`` (the only writer that keeps that order);
* ``dropped``: one number, the records removed by sub-sampling (for the summary's reconciliation);
* ``section``: one dict, the amplification report (``textdp.privacy.accounting.amplification_section``),
  also written as JSON to ``report_path``.

The accounting arithmetic lives in ``textdp/privacy/accounting.py`` (no Beam); epsilon_0 is computed on a
worker from the very mechanism and artifact the privatize workers loaded (the same ``Shared``
holder, so nothing is loaded twice in a process).
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import apache_beam as beam

from textdp.privacy import accounting
from textdp.privacy.statements import unbounded_epsilon0_reason
from textdp.text.records import check_author
from transforms.shuffle import DEFAULT_BYTES_PER_SHARD, DEFAULT_MARKER, DEFAULT_RECORDS_PER_SHARD, ShuffleAmplifier


@dataclass(frozen=True)
class AmplifierConfig:
    """What the Amplifier does (the flags of docs/lac.md), independent of how they were given."""

    shuffle: bool = False
    user_field: Optional[str] = None
    drop_fields: Tuple[str, ...] = ()
    subsample: Optional[float] = None
    k_threshold: Optional[int] = None
    delta: float = accounting.DEFAULT_DELTA
    records_per_shard: int = DEFAULT_RECORDS_PER_SHARD
    bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD

    def requested(self) -> bool:
        """True if any Amplifier step was asked for (the stage runs only then)."""
        return bool(self.shuffle or self.subsample is not None or self.k_threshold is not None
                    or self.user_field or self.drop_fields)

    def validate(self) -> None:
        """Clear errors for impossible values (ValueError naming the flag)."""
        if self.subsample is not None and not 0 < self.subsample <= 1:
            raise ValueError("--subsample must be in (0, 1]")
        if self.k_threshold is not None and self.k_threshold < 1:
            raise ValueError("--k-threshold must be >= 1")
        if not 0 < self.delta <= accounting.MAX_DELTA:
            raise ValueError(f"--delta must be in (0, {accounting.MAX_DELTA:g}]: an (epsilon, delta) guarantee allows a "
                             f"record to be released as it is with probability about delta (default {accounting.DEFAULT_DELTA:g})")
        if self.records_per_shard < 1:
            raise ValueError("--shuffle-shard-records must be >= 1")

    def steps(self) -> dict:
        """The steps that run, for the summary's records statement (textdp.privacy.statements.records_statement)."""
        removed = list(dict.fromkeys(([self.user_field] if self.user_field else []) + list(self.drop_fields)))
        return {"shuffle": self.shuffle, "subsample": self.subsample, "k_threshold": self.k_threshold,
                "removed_fields": removed}


class SplitAuthorless(beam.PTransform):
    """Read records ``(source, position, payload)`` -> {'records', 'errors'}: a record whose ``user_field``
    author is absent or null becomes an error record ``missing_author`` (counted, the job goes on) instead of
    failing the whole shuffle at its end. The error record carries the payload only with ``keep_text``."""

    def __init__(self, user_field: str, keep_text: bool = False, label: Optional[str] = None):
        super().__init__(label)
        self.user_field = user_field
        self.keep_text = bool(keep_text)

    def expand(self, records):
        user_field, keep_text = self.user_field, self.keep_text

        def split(item):
            from transforms.io import error_record

            problem = check_author(item[2], user_field)
            if problem is None:
                yield item
            else:
                text = json.dumps(item[2], sort_keys=True, default=str) if keep_text else None
                yield beam.pvalue.TaggedOutput("errors", error_record(item[0], item[1], *problem, text=text))

        outputs = records | "CheckAuthor" >> beam.FlatMap(split).with_outputs("errors", main="records")
        return {"records": outputs.records, "errors": outputs.errors}


def k_threshold_warnings(k_threshold: Optional[int], stats: dict) -> list:
    """A warning when the k-threshold replaced every word by the marker: K above the run's distinct authors (no
    word type can reach K), or every word type counted below K. No figure of the data is named (the public
    summary carries it too)."""
    if k_threshold is None or not stats.get("records_out"):
        return []
    who = "authors (--user-field values)" if stats.get("per_author") else "authors (each record is its own author)"
    if k_threshold > stats.get("authors", 0):
        return [f"--k-threshold {k_threshold} is above the number of distinct {who} of this run: no word type can be "
                "used by that many, so every word was replaced by the marker and the release carries no word"]
    if stats.get("word_types") and stats.get("rare_word_types") == stats["word_types"]:
        return [f"--k-threshold {k_threshold}: every word type was used by fewer than {k_threshold} distinct {who}, "
                "so every word was replaced by the marker and the release carries no word"]
    return []


class AmplificationSection(beam.DoFn):
    """The stage's stats -> the amplification report, written to ``path`` as JSON and emitted."""

    def __init__(self, shared_handle, perturb_config, amplifier: AmplifierConfig, path: Optional[str]):
        super().__init__()
        from transforms.perturb import holder_state

        self.perturb_config = perturb_config
        self.amplifier = amplifier
        self.path = path
        self._state = holder_state(shared_handle, perturb_config)

    def setup(self):
        self._state.setup()

    def process(self, stats):
        amp = self.amplifier
        holder = self._state.value
        token_eps0, diameter = accounting.mechanism_token_epsilon0(
            holder.mechanism, holder.artifact.vectors, self.perturb_config.oov_policy)
        section = accounting.amplification_section(
            stats, token_eps0, shuffled=amp.shuffle, delta=amp.delta, subsample_rate=amp.subsample,
            k_threshold=amp.k_threshold, seed_used=self.perturb_config.seed is not None,
            diameter=diameter.to_dict(), epsilon0_reason=unbounded_epsilon0_reason(
                self.perturb_config.oov_policy, holder.mechanism.privacy_statement().get("coverage")))
        warnings = k_threshold_warnings(amp.k_threshold, stats)
        if warnings:  # WriteSummary adds them to both summaries' warnings; textdp privatize prints them
            section["warnings"] = warnings
        if self.path:
            from transforms.io import write_json

            write_json(self.path, section)
        yield section


class Amplify(beam.PTransform):
    """Privatized payloads -> {'records' or 'shards', 'dropped', 'section'} (see the module docstring)."""

    def __init__(self, amplifier: AmplifierConfig, perturb_config, shared_handle, data_format: str,
                 text_fields: Sequence[str], report_path: Optional[str] = None, label: Optional[str] = None):
        super().__init__(label)
        amplifier.validate()
        if data_format == "text" and amplifier.user_field:
            raise ValueError("--user-field needs JSONL or Parquet input (plain-text lines have no author field)")
        if not perturb_config.shape_field:
            raise ValueError("the Amplifier needs the privatizer's shapes (PerturbConfig.shape_field)")
        same = unicodedata.normalize("NFKC", perturb_config.unk_token).casefold() == DEFAULT_MARKER.casefold()
        if amplifier.k_threshold is not None and perturb_config.oov_policy == "unk" and same:
            raise ValueError(f"--unk-token {perturb_config.unk_token} is the --k-threshold marker {DEFAULT_MARKER}: an "
                             "unknown word would look like a suppressed rare one; choose another --unk-token, such as <unk>")
        self.amplifier = amplifier
        self.perturb_config = perturb_config
        self.shared_handle = shared_handle
        self.data_format = data_format
        self.text_fields = ("text",) if data_format == "text" else tuple(text_fields)
        self.report_path = report_path

    def expand(self, released):
        amp = self.amplifier
        outputs = released | "Shuffle" >> ShuffleAmplifier(
            user_field=amp.user_field, drop_fields=amp.drop_fields, subsample_rate=amp.subsample,
            k_threshold=amp.k_threshold, text_fields=self.text_fields, shuffle=amp.shuffle,
            shape_field=self.perturb_config.shape_field, records_per_shard=amp.records_per_shard,
            bytes_per_shard=amp.bytes_per_shard)
        section = outputs["stats"] | "Accounting" >> beam.ParDo(AmplificationSection(
            self.shared_handle, self.perturb_config, amp, self.report_path))
        dropped = outputs["stats"] | "Dropped" >> beam.Map(lambda s: s["records_in"] - s["records_out"])
        result = {"dropped": dropped, "section": section, "shards": outputs.get("shards")}
        records = outputs["records"]
        if self.data_format == "text":  # PerturbTokens wrapped lines as {"text": ..., shape_field: ...}
            records = records | "Unwrap" >> beam.Map(lambda record: record["text"])
        result["records"] = records
        return result
