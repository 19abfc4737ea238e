"""The checks batch and --streaming privatize share before any worker starts (pipelines/privatize.py and
pipelines/streaming.py both ask this module, so the two jobs cannot drift apart)."""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.flags import (
    MAX_RECORD_BYTES,
    AmplifierOptions,
    ArtifactOptions,
    MechanismOptions,
    OovOptions,
    PrivatizeOptions,
    SeedOptions,
)
from textdp.artifact.locate import check_unk_marker, verify_artifact
from textdp.errors import TextdpError
from textdp.mechanisms import artifact_needs
from textdp.text.privatizer import check_oov


def check_fields_and_artifact(options: PipelineOptions, data_format: str, record_formats: str) -> tuple:
    """The checks batch and --streaming privatize share (pipelines/streaming.py asks this one): the text, author and
    dropped fields against the format (``record_formats``: the formats that have fields, for the messages), the
    artifact and the mechanism on it, the unknown-word marker. (text_fields, amplifier, artifact, manifest, spec)."""
    opts, mech = options.view_as(PrivatizeOptions), options.view_as(MechanismOptions)
    text_fields = opts.text_fields(data_format)
    amplifier = options.view_as(AmplifierOptions).amplifier_config()
    if data_format == "text" and amplifier.user_field:
        raise TextdpError(f"--user-field needs {record_formats} input (plain-text lines have no author field)")
    if data_format == "text" and amplifier.drop_fields:
        raise TextdpError(f"--drop-fields needs {record_formats} input (plain-text lines have no fields to drop)")
    if any(not name.strip() for name in (opts.text_field or [])) or (data_format != "text" and not text_fields):
        raise TextdpError("--text-field must name a field (it is empty)")
    named = [f.strip() for value in (opts.text_field or []) for f in value.split(",") if f.strip()]
    if len(named) != len(set(named)):
        twice = sorted({f for f in named if named.count(f) > 1})
        raise TextdpError(f"--text-field names {', '.join(map(repr, twice))} more than once (each field is privatized "
                          "once: name it once)")
    if set(amplifier.drop_fields) & set(text_fields) or amplifier.user_field in text_fields:
        raise TextdpError("a text field cannot also be the author field or a dropped field")
    artifact = options.view_as(ArtifactOptions).artifact
    if artifact and not artifact.startswith("gs://") and not os.path.isdir(artifact):
        raise TextdpError(f"--artifact {artifact!r} is not a directory")
    manifest = verify_artifact(artifact, needs=artifact_needs(mech.mechanism, mech.nn))
    spec = mech.validate_mechanism((opts.epsilon,), artifact, manifest)  # checks that depend on the vocabulary
    check_unk_marker(artifact, options.view_as(OovOptions).oov_policy, options.view_as(OovOptions).unk_token)
    return text_fields, amplifier, artifact, manifest, spec


def check_run_flags(options: PipelineOptions) -> None:
    """The flag values batch and --streaming privatize check first: epsilon's range and the mechanism's own checks,
    the seed, the unknown-word policy, record and batch sizes, --max-failed-fraction."""
    opts = options.view_as(PrivatizeOptions)
    options.view_as(MechanismOptions).validate_mechanism((opts.epsilon,))
    options.view_as(SeedOptions).validate_seed()
    check_oov(options.view_as(OovOptions).oov_policy, options.view_as(OovOptions).unk_token)
    if not 1 <= opts.max_record_bytes <= MAX_RECORD_BYTES or (opts.batch_tokens is not None and opts.batch_tokens < 1):
        raise TextdpError(f"--max-record-bytes must be between 1 and {MAX_RECORD_BYTES:,} and --batch-tokens >= 1")
    if not 0 <= opts.max_failed_fraction <= 1:
        raise TextdpError(f"--max-failed-fraction must be a number from 0 to 1, got {opts.max_failed_fraction:g}")
