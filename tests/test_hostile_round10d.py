"""Round-10 findings R10-9, R10b-8 and R10b-4, each on the real component (the local Beam runner FnApiRunner, the real
300-word GloVe artifact, real files, the real CLI); nothing is mocked."""

from __future__ import annotations

import logging
import warnings

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

import textdp
from tests.custom_mechanism import CappedExponential

RUNNER = "--runner=FnApiRunner"
TEXT = "the president said our police were in his company"
TRIAL = "released each of the 64 vocabulary words of the launcher's trial as itself"


class Ident(CappedExponential):
    """A user's mechanism that releases every word unchanged (R10-9's repro)."""

    name = "r10d-ident"

    def privatize_ids(self, ids, rng):
        return np.asarray(ids, dtype=np.int64).copy()


# --- R10-9: the API and the transform ask the launcher's trial ------------------------------------------------------


def test_r10_9_an_identity_custom_mechanism_is_warned_by_the_privatizer_and_in_its_statement(tiny_artifact_dir):
    """textdp.Privatizer runs the launcher's trial (PrivacySpec.check_artifact) for a mechanism that is not built in:
    a TextdpWarning at construction, and privacy_statement() carries the trial's line in "warnings" beside
    covered_by_guarantee, as the CLI's summaries do. Deterministic (the mechanism is the identity)."""
    with pytest.warns(textdp.TextdpWarning) as caught:
        p = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, mechanism=Ident)
    assert any(TRIAL in str(w.message) for w in caught)
    assert p.privatize([TEXT] * 3) == [TEXT] * 3  # what the trial said: the identity
    statement = p.privacy_statement()
    assert any(TRIAL in line for line in statement["warnings"])
    assert not any("president" in str(w.message) for w in caught)


def test_r10_9_a_built_in_mechanism_gets_no_trial_and_no_warning(tiny_artifact_dir):
    """The built-in fast path: no trial, no TextdpWarning, no "warnings" entry (the statement equals the public
    summary's privacy section, tests/test_api.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", textdp.TextdpWarning)
        p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)
    assert "warnings" not in p.privacy_statement() and p._trial_warnings == ()


def test_r10_9_a_changing_custom_mechanism_is_not_warned(tiny_artifact_dir):
    """A custom mechanism that changes words (CappedExponential at epsilon 1 on GloVe: the trial changes most of its
    64 ids; a false alarm would need no change in all 64, probability far below 1e-9) is not warned."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", textdp.TextdpWarning)
        p = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, mechanism=CappedExponential)
    assert "warnings" not in p.privacy_statement()


def test_r10_9_the_transform_logs_the_trial_once_and_exposes_it(tiny_artifact_dir, caplog):
    """transforms.Privatize: one WARNING log line per trial line at construction (no raw text), ``warnings`` holds
    them; the pipeline still runs (a warning, not a refusal) on FnApiRunner."""
    from transforms import Privatize

    with caplog.at_level(logging.WARNING, logger="transforms.privatize"):
        transform = Privatize(epsilon=1, artifact=tiny_artifact_dir, mechanism=Ident)
    lines = [r.getMessage() for r in caplog.records if r.name == "transforms.privatize"]
    assert len(lines) == 1 and TRIAL in lines[0] and "president" not in lines[0]
    assert len(transform.warnings) == 1 and TRIAL in transform.warnings[0]
    with beam.Pipeline(argv=[RUNNER]) as pipeline:
        result = pipeline | beam.Create([TEXT]) | transform
        assert_that(result.released, equal_to([TEXT]))
