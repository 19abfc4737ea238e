"""The run summary ``<output>-summary.json``: counts, parameters and the privacy statement that holds.

Assembled here from plain dicts (no Beam), so the pipeline's last step and the tests build the
same document. It never contains input text: only counts, parameters and file locations.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

from textdp import __version__

FAILED_PREFIX = "failed:"

# Error reasons whose record stands for the unread rest of a file (transforms/io.py FILE_REASONS): the
# records after the point where reading stopped were never counted, so such a run is never "reconciled".
FILE_REASONS = ("unreadable_file", "truncated_file", "schema_mismatch")


def oov_statement(policy: str, unk_token: str, unknown_tokens: int) -> str:
    """What the out-of-vocabulary policy implies for the guarantee."""
    if policy == "random":
        return (f"{unknown_tokens} word(s) not in the vocabulary were each replaced by a vocabulary word drawn "
                "uniformly at random, independently of the input word: the released word reveals nothing "
                "about the original one (only that a word stood at that position).")
    if policy == "unk":
        return (f"{unknown_tokens} word(s) not in the vocabulary were replaced by the marker {unk_token!r}, which "
                "does not depend on the input word: it reveals only that an unknown word stood at that position.")
    if policy == "keep":
        return (f"{unknown_tokens} word(s) not in the vocabulary were released UNCHANGED (--oov-policy keep): "
                "those words are NOT covered by any privacy guarantee, and they are typically the rare words "
                "(names, identifiers) that need protection most.")
    raise ValueError(f"unknown OOV policy {policy!r}")


STRUCTURE_STATEMENT = (
    "Only word identity is protected. Whitespace, line breaks, punctuation and symbols are released "
    "unchanged, and so are each record's number of words, their positions and their case pattern "
    "(lower, Capitalized, UPPER); numbers count as words and are privatized. Other fields of "
    "JSONL/Parquet records pass through unchanged and are not protected.")

ONE_FOR_ONE_STATEMENT = (
    "Records are released one for one (the output has as many records as were privatized), in no "
    "particular order but with every field they had.")


def amplifier_statement(report_path: str) -> str:
    return ("An Amplifier stage ran: the author field and the --drop-fields were removed, records were "
            "released in a uniformly random order and, with --subsample, only a random subset of them. "
            f"Which fields remain and what amplification (if any) a published theorem gives are in {report_path}.")

ERRORS_STATEMENT = (
    "Records that could not be processed are not privatized and are absent from the output; the error "
    "output lists their file and position and the reason, and contains their text only when "
    "--keep-failed-text was given (then it must be protected like the input).")


def privacy_section(mechanism_statement: dict, oov_policy: str, unk_token: str, unknown_tokens: int,
                    seed_used: bool, amplification_report: Optional[str] = None) -> dict:
    statement = dict(mechanism_statement)
    statement["unknown_words"] = oov_statement(oov_policy, unk_token, unknown_tokens)
    statement["structure"] = STRUCTURE_STATEMENT
    statement["records"] = (amplifier_statement(amplification_report) if amplification_report
                            else ONE_FOR_ONE_STATEMENT)
    statement["failed_records"] = ERRORS_STATEMENT
    statement["covered_by_guarantee"] = oov_policy != "keep" or unknown_tokens == 0
    if seed_used:
        statement["seed"] = ("A fixed --seed was used: the noise is reproducible by anyone who knows the seed, "
                             "so this output must NOT be treated as private. Seeds are for tests and benchmarks.")
    return statement


def build_summary(counts: Dict[str, int], *, input_pattern: str, output: str, errors_output: str,
                  data_format: str, text_fields, mechanism_parameters: dict, mechanism_statement: dict,
                  artifact: dict, oov_policy: str, unk_token: str, seed: Optional[int],
                  max_record_bytes: int, amplification_report: Optional[str] = None,
                  extra: Optional[dict] = None) -> dict:
    """The summary document for one run, from the counters combined in the pipeline."""
    records_in = int(counts.get("records_in", 0))
    records_out = int(counts.get("records_out", 0))
    records_failed = int(counts.get("records_failed", 0))
    records_dropped = int(counts.get("records_dropped", 0))  # by an amplification stage (sub-sampling)
    tokens = int(counts.get("tokens", 0))
    changed = int(counts.get("changed_tokens", 0))
    unknown = int(counts.get("unknown_tokens", 0))
    failed_by_reason = {key[len(FAILED_PREFIX):]: int(value) for key, value in sorted(counts.items())
                        if key.startswith(FAILED_PREFIX)}
    files_not_read_to_end = sum(failed_by_reason.get(reason, 0) for reason in FILE_REASONS)
    summary = {
        "textdp_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "input": input_pattern,
        "format": data_format,
        "text_fields": list(text_fields) if text_fields else None,
        "output": output,
        "errors_output": errors_output,
        "records": {
            "in": records_in,
            "out": records_out,
            "failed": records_failed,
            "failed_by_reason": failed_by_reason,
            "reconciled": (records_in == records_out + records_failed + records_dropped
                           and not files_not_read_to_end),
        },
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
                                   amplification_report),
    }
    if files_not_read_to_end:
        summary["records"]["files_not_read_to_end"] = files_not_read_to_end
    if "records_dropped" in counts:
        summary["records"]["dropped"] = records_dropped
    if amplification_report:
        summary["amplification_report"] = amplification_report
    if extra:
        summary.update(extra)
    return summary
