"""The run summaries: the operator's ``<output>-summary.json`` and the publishable ``--public-summary``.

Assembled here from plain dicts (no Beam), so the pipeline's last step and the tests build the
same documents. Neither ever contains input text.

Two documents, because some figures are computed from the raw input. Someone who knows every
other record learns from the exact number of changed tokens whether the target's word was
released unchanged, which the epsilon*d bound does not allow; the per-reason failure counts and the
number of unknown words are data about the input in the same way. The operator needs them (counts
that reconcile, error rates), so the operator's summary keeps them, says so at its top
(``publishable: false``) and lists them in ``raw_data_figures``. The public summary holds only what
the guarantee covers or what anyone can read off the output itself: the mechanism and its
parameters, the artifact, the statements, the number of records released, and the amplification
claims (without the author counts behind them; with an author field, without any figure computed
from per-author word counts: see ``public_amplification``).
"""

from __future__ import annotations

import json
import time
from typing import Dict, Optional, Sequence

from textdp.errors import FIELD_NAME_SHOWN
from textdp.privacy.accounting import unprivatized_fields_statement
from textdp.privacy.statements import (
    FLOATING_POINT_STATEMENT,
    STRUCTURE_STATEMENT,
    coverage_statement,
    errors_statement,
    no_change_warning,
    oov_statement,
    records_statement,
    seed_statement,
    shuffle_claim_statement,
    subsample_statement,
)
from textdp.version import __version__

FAILED_PREFIX = "failed:"

# Error reasons whose record stands for the unread rest of a file (transforms/io.py FILE_REASONS): the
# records after the point where reading stopped were never counted, so such a run is never "reconciled".
FILE_REASONS = ("unreadable_file", "truncated_file", "schema_mismatch")

RAW_DATA_FIGURES = ("records.in", "records.failed", "records.failed_by_reason", "records.dropped",
                    "records.reconciled", "records.files_not_read_to_end", "tokens.total", "tokens.changed", "tokens.changed_fraction",
                    "tokens.unknown", "tokens.unknown_fraction", "privacy.unknown_words",
                    "failure_check.failed_fraction", "failure_check.exceeded", "failure_check.top_reasons")

RAW_DATA_STATEMENT = (
    "This summary is for the operator and must NOT be published with the output: the figures listed in "
    "'figures' are computed from the raw input and are not covered by the privacy guarantee (for example, "
    "with every other record known, the exact number of changed words reveals whether one person's word was "
    "released unchanged). So are the job's Beam counters (namespace 'textdp') and the error output. "
    "Publish the --public-summary document instead.")


def privacy_section(mechanism_statement: dict, oov_policy: str, unk_token: str, unknown_tokens: Optional[int],
                    seed_used: bool, amplifier_steps: Optional[dict] = None,
                    amplification_report: Optional[str] = None) -> dict:
    """The privacy statements that hold for this run's output.

    ``unknown_tokens`` (a raw-input figure) is given for the operator's summary only; the public
    summary passes None and ``output_coverage`` then says what holds for any input. ``coverage`` is the
    mechanism's own declaration (all, a stated subset, none), copied like its other sentences;
    ``output_coverage`` is that declaration narrowed by the OOV policy and the seed
    (``textdp.privacy.statements.coverage_statement``); ``covered_by_guarantee`` is true only when it covers
    everything.
    """
    statement = dict(mechanism_statement)
    statement["unknown_words"] = oov_statement(oov_policy, unk_token, unknown_tokens)
    statement["structure"] = STRUCTURE_STATEMENT
    statement["records"] = records_statement(amplifier_steps, amplification_report)
    statement["failed_records"] = errors_statement()
    statement["seed"] = seed_statement(seed_used)
    statement["numerical_precision"] = FLOATING_POINT_STATEMENT
    statement["output_coverage"] = coverage_statement(mechanism_statement.get("coverage"), oov_policy,
                                                      unknown_tokens, seed_used)
    statement["covered_by_guarantee"] = statement["output_coverage"]["covered"] == "all"
    return statement


# --max-failed-fraction's default: a healthy corpus loses a few records at most (a blank line, an oversized or
# malformed one); when more than a tenth fail, the input is usually not what the flags say (another field,
# format or encoding), and an output missing a tenth of the corpus should not pass for a finished run.
DEFAULT_MAX_FAILED_FRACTION = 0.1
TOP_REASONS = 3  # reasons named in the failure line
# error reasons that are no failure of the input: records withheld on purpose by the exposure ledger's author budget
# (docs/ledger.md) are left out of the failed share like blank records
WITHHELD_REASONS = ("budget_exhausted",)


def failed_fraction(records: dict) -> float:
    """Failed records / records in, blank records (``empty``: a blank line between paragraphs, a record with an
    empty text) left out of both: they hold nothing to privatize and are counted in the error output as ever. A
    file-level error record (an unreadable file) may stand for records that were never counted in, so the
    denominator is at least out + failed + dropped; 0.0 for an input of blank records only."""
    blank = sum(records.get("failed_by_reason", {}).get(reason, 0) for reason in ("empty",) + WITHHELD_REASONS)
    total = max(records["in"], records["out"] + records["failed"] + records.get("dropped", 0)) - blank
    return (records["failed"] - blank) / total if total > 0 else 0.0


def failure_check(records: dict, max_failed_fraction: float) -> dict:
    """Whether the run's failed share exceeds ``max_failed_fraction``, or nothing at all was privatized (never a
    success, whatever the threshold); with the top reasons (codes and counts: never text)."""
    fraction = failed_fraction(records)
    nothing = records["out"] == 0 and records["failed"] > 0
    counted = {reason: count for reason, count in records["failed_by_reason"].items()
               if reason != "empty" and reason not in WITHHELD_REASONS}
    reasons = sorted(counted.items(), key=lambda item: (-item[1], item[0]))[:TOP_REASONS]  # blanks: not counted
    return {"max_failed_fraction": max_failed_fraction, "failed_fraction": fraction,
            "exceeded": fraction > max_failed_fraction or nothing,
            "top_reasons": {reason: count for reason, count in reasons}}


def failure_line(records: dict, check: dict) -> str:
    """The one line of a run whose failure check failed: counts and reason codes, never text."""
    reasons = ", ".join(f"{reason} {count}" for reason, count in check["top_reasons"].items())
    more = len([r for r in records["failed_by_reason"] if r != "empty"]) - len(check["top_reasons"])
    reasons += f", and {more} other reason{'s' if more > 1 else ''}" if more > 0 else ""
    reasons = reasons or "none (every failed record is blank)"
    blank = records.get("failed_by_reason", {}).get("empty", 0)
    counted = (f"{records['failed'] - blank} of {records['in'] - blank} non-blank records failed" if blank
               else f"{records['failed']} of {records['in']} records failed")
    return (f"{counted} ({check['failed_fraction']:.1%}, above --max-failed-fraction "
            f"{check['max_failed_fraction']:g}); top reasons: {reasons}")


def _record_counts(counts: Dict[str, int]) -> dict:
    records_in = int(counts.get("records_in", 0))
    records_out = int(counts.get("records_out", 0))
    records_failed = int(counts.get("records_failed", 0))
    records_dropped = int(counts.get("records_dropped", 0))  # by an amplification stage (sub-sampling)
    failed_by_reason = {key[len(FAILED_PREFIX):]: int(value) for key, value in sorted(counts.items())
                        if key.startswith(FAILED_PREFIX)}
    files_not_read_to_end = sum(failed_by_reason.get(reason, 0) for reason in FILE_REASONS)
    records = {
        "in": records_in,
        "out": records_out,
        "failed": records_failed,
        "failed_by_reason": failed_by_reason,
        "reconciled": records_in == records_out + records_failed + records_dropped and not files_not_read_to_end,
    }
    if files_not_read_to_end:
        records["files_not_read_to_end"] = files_not_read_to_end
    if "records_dropped" in counts:
        records["dropped"] = records_dropped
    return records


def build_summary(counts: Dict[str, int], *, input_pattern: str, output: str, errors_output: str,
                  data_format: str, text_fields, mechanism_parameters: dict, mechanism_statement: dict,
                  artifact: dict, oov_policy: str, unk_token: str, seed: Optional[int],
                  max_record_bytes: int, amplifier_steps: Optional[dict] = None,
                  amplification_report: Optional[str] = None, public_summary: Optional[str] = None,
                  warnings: Sequence[str] = (), extra: Optional[dict] = None,
                  max_failed_fraction: Optional[float] = None, scale: Optional[dict] = None) -> dict:
    """The operator's summary for one run, from the counters combined in the pipeline. With
    ``max_failed_fraction`` (privatize's flag) also ``failure_check``: the threshold and whether it was exceeded."""
    tokens = int(counts.get("tokens", 0))
    changed = int(counts.get("changed_tokens", 0))
    unknown = int(counts.get("unknown_tokens", 0))
    summary = {
        "textdp_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "publishable": False,
        "raw_data_figures": {"statement": RAW_DATA_STATEMENT, "figures": None},  # filled in below
        "public_summary": public_summary,
        "input": input_pattern,
        "format": data_format,
        "text_fields": list(text_fields) if text_fields else None,
        "output": output,
        "errors_output": errors_output,
        "records": _record_counts(counts),
        "tokens": {
            "total": tokens,
            "changed": changed,
            "changed_fraction": (changed / tokens) if tokens else 0.0,
            "unknown": unknown,
            "unknown_fraction": (unknown / tokens) if tokens else 0.0,
        },
        "mechanism": mechanism_parameters,
        "artifact": artifact,
        "oov_policy": oov_policy,
        "unk_token": unk_token if oov_policy == "unk" else None,
        "max_record_bytes": max_record_bytes,
        "seed_used": seed is not None,
        "seed": seed,
        "privacy": privacy_section(mechanism_statement, oov_policy, unk_token, unknown, seed is not None,
                                   amplifier_steps, amplification_report),
        "warnings": list(warnings) + no_change_warning(tokens, changed, unknown, oov_policy),
    }
    if scale is not None:  # epsilon on the artifact's own scale (textdp.privacy.statements.scale_section)
        summary["epsilon_scale"] = scale
    if max_failed_fraction is not None:
        summary["failure_check"] = failure_check(summary["records"], max_failed_fraction)
    summary["raw_data_figures"]["figures"] = [
        figure for figure in RAW_DATA_FIGURES if figure.split(".")[1] in summary.get(figure.split(".")[0], {})]
    if amplification_report:
        summary["amplification_report"] = amplification_report
    if extra:
        summary.update(extra)
    return summary


AUTHOR_FIGURES_WITHHELD = (
    "these figures come from how many words each author wrote (with --user-field), and the author field is "
    "removed from the output, so they cannot be read off the output: they are figures of the raw input, kept in "
    "the operator's amplification report")


def public_amplification(section: dict) -> dict:
    """The claims of an amplification section with only figures the output shows or the parameters give.

    Without an author field every record is its own author: the shuffle's groups and epsilon_0, and the
    sub-sampling formula's largest record, come from the released records' word counts and layouts. With
    one (``--user-field``, the section's ``max_words_per_author``) they come from each author's word count,
    which the output does not show (the author field is removed): the public summary then withholds the
    shuffle claim and the sub-sampling figure, saying why (``AUTHOR_FIGURES_WITHHELD``), so that no public
    figure depends on how records are assigned to authors.
    """
    per_author = "max_words_per_author" in section["local"]
    unit = "author" if per_author else "record"
    public = {"local": {key: section["local"][key] for key in ("token_epsilon0", "vocabulary_diameter")
                        if key in section["local"]}}
    if "shuffle" in section:
        shuffle = section["shuffle"]
        claimed = bool(shuffle["claimed"]) and not per_author
        public["shuffle"] = {
            "theorem": shuffle["theorem"], "delta": shuffle["delta"], "claimed": claimed,
            "epsilon": shuffle["epsilon"] if claimed else None,
            "statement": (shuffle_claim_statement(shuffle["epsilon"], shuffle["delta"], shuffle["theorem"], unit)
                          if claimed else
                          "no amplification claimed in this summary: whether the theorem applies to every group of "
                          "authors whose released shape is the same, and its epsilon, are withheld: "
                          f"{AUTHOR_FIGURES_WITHHELD}. The guarantee to publish is the local one."
                          if per_author else
                          shuffle["statement"] if not shuffle.get("delta_at_most_one_over_n", True) else
                          "no amplification claimed: the theorem's condition does not hold for every group of "
                          "records whose released shape is the same; the guarantee is the local one."),
        }
    if "subsample" in section:
        subsample = section["subsample"]
        public["subsample"] = {
            "rate": subsample["rate"], "claimed": subsample["claimed"],
            "statement": (subsample_statement(subsample["rate"], None, AUTHOR_FIGURES_WITHHELD) if per_author
                          else subsample["statement"])}
    if "k_threshold" in section:
        public["k_threshold"] = {key: section["k_threshold"][key] for key in ("k", "claimed", "statement")}
    public["fields"] = public_fields(section["fields"])
    public["order"] = section["order"]
    public["seed"] = section["seed"]
    public["numerical_precision"] = section["numerical_precision"]
    return public


def public_fields(fields: dict) -> dict:
    """The operator report's field lists with only identifier-like names (``textdp.errors.FIELD_NAME_SHOWN``, the rule
    of the console refusals): a JSONL key can be data (a pivot's "John Smith has HIV"), so every other name is counted
    (``..._not_shown``), never listed, and the statement says "1 field whose name is not shown" (round 9, R9-6)."""
    public: dict = {}
    for key in ("removed", "remaining", "released_unprivatized"):
        names = list(fields[key])
        public[key] = [name for name in names if FIELD_NAME_SHOWN.fullmatch(name)]
        public[f"{key}_not_shown"] = len(names) - len(public[key])
    public["statement"] = unprivatized_fields_statement(public["released_unprivatized"],
                                                        public["released_unprivatized_not_shown"])
    return public


def build_public_summary(*, records_out: int, output: str, data_format: str, text_fields,
                         mechanism_parameters: dict, mechanism_statement: dict, artifact: dict, oov_policy: str,
                         unk_token: str, seed: Optional[int], amplifier_steps: Optional[dict] = None,
                         amplification: Optional[dict] = None, warnings: Sequence[str] = (),
                         tokens: Optional[dict] = None) -> dict:
    """The publishable summary: only what the guarantee covers or the output itself shows. ``tokens``: the operator
    summary's token counts, read only to say (without any count) when the run changed no vocabulary word."""
    document = {
        "textdp_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "publishable": True,
        "contents": ("the mechanism, its parameters, the vocabulary artifact and the privacy statements for the "
                     "released output, and the number of records released (which the output shows); no figure "
                     "computed from the raw input"),
        "output": output,
        "format": data_format,
        "text_fields": list(text_fields) if text_fields else None,
        "records_released": int(records_out),
        "mechanism": mechanism_parameters,
        "artifact": artifact,
        "oov_policy": oov_policy,
        "unk_token": unk_token if oov_policy == "unk" else None,
        "seed_used": seed is not None,
        "privacy": privacy_section(mechanism_statement, oov_policy, unk_token, None, seed is not None,
                                   amplifier_steps, None),
        "warnings": list(warnings) + (no_change_warning(tokens["total"], tokens["changed"], tokens["unknown"],
                                                         oov_policy, public=True) if tokens else []),
    }
    if amplification is not None:
        document["amplification"] = public_amplification(amplification)
    return document


def is_public_summary(data: bytes) -> bool:
    """Whether ``data`` is a public summary (a JSON document with ``"publishable": true``, as
    ``public_summary`` writes): the only existing file ``--public-summary --overwrite`` replaces."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(document, dict) and document.get("publishable") is True
