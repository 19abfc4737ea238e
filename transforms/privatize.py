"""``Privatize``: textdp's privatization step as one PTransform, to drop into any Beam pipeline.

    import apache_beam as beam
    from transforms import Privatize

    result = reviews | Privatize(epsilon=10, text_fields=["review"])   # PCollection of dicts
    result.released   # the records, each text field privatized, every other field unchanged
    result.errors     # error records: reason code and detail, never the text
    result.stats      # one dict: records, tokens, changed_tokens, unknown_tokens, failed, failed:<reason>

Input elements are strings (``text_fields`` empty: each string is a text) or rows whose fields in
``text_fields`` are privatized: dicts, ``beam.Row``s (``beam.io.ReadFromCsv``, ``beam.Select``) or
NamedTuples, each released as the same kind (a Row or NamedTuple PCollection keeps its schema).
With ``keyed=True`` they are ``(key, record)`` pairs instead, the key naming where the record came
from (``textdp privatize`` passes ``(file, line)``): error records then carry it, and seeded runs derive each record's generator from it.

Records are batched to about ``batch_tokens`` words per mechanism call whatever their sizes (the
exact nearest-word search streams the whole vector matrix once per call, so batching by records
would make a batch of short records cost as much as a long one); the artifact is loaded once per
worker process (``transforms.worker``); BLAS threads per process and progress come from ``worker``.

``stats`` and the ``records``/``tokens`` counters are figures of the raw input: operator
diagnostics, not for publication with the output (see textdp/privacy/summary.py).
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam.utils import shared

from textdp.artifact.gcs import is_gcs_url
from textdp.artifact.locate import verify_artifact
from textdp.errors import TextdpValueError
from textdp.mechanisms import DEFAULT_MECHANISM, artifact_for_checks, check_number, default_batch_tokens
from textdp.spec import PrivacySpec
from textdp.text.privatizer import DEFAULT_UNK_TOKEN
from textdp.text.records import as_pair, row_fields
from transforms.perturb import PerturbConfig, PerturbTokens, error_record
from transforms.worker import WorkerConfig

_LOG = logging.getLogger(__name__)


def estimated_tokens(element, text_fields: Sequence[str], keyed: bool) -> int:
    """A cheap estimate of a record's words for batching: spaces + 1 per text (C-level str.count)."""
    record = element[1] if keyed else element
    if isinstance(record, str):
        return record.count(" ") + 1
    fields = row_fields(record)  # a dict, beam.Row or NamedTuple
    if fields is not None:
        return sum(fields[f].count(" ") + 1 for f in text_fields if isinstance(fields.get(f), str)) or 1
    return 1


def _schema_type(element_type):
    """``element_type`` if it is a schema (a beam.Row's RowTypeConstraint or a NamedTuple class), else None."""
    from apache_beam.typehints.row_type import RowTypeConstraint

    if isinstance(element_type, RowTypeConstraint):
        return element_type
    if isinstance(element_type, type) and issubclass(element_type, tuple) and hasattr(element_type, "_fields"):
        return element_type
    return None


class SumCounts(beam.CombineFn):
    """Adds dicts of counts key by key."""

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, element):
        for key, value in element.items():
            accumulator[key] = accumulator.get(key, 0) + value
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


SHAPE_FIELD_TAKEN = "shape_field_taken"  # the record already has a field named shape_field: it is not overwritten


class _ShapeFieldFree(beam.DoFn):
    """``(key, record)`` pairs whose record has no field named ``shape_field`` pass; the others become error
    records ``shape_field_taken`` (and a stats dict counting them), so that the shape never replaces a field."""

    def __init__(self, shape_field: str):
        self.shape_field = shape_field

    def process(self, pair):
        fields = row_fields(pair[1])
        if fields is None or self.shape_field not in fields:
            yield pair
            return
        detail = (f"the record already has a field {self.shape_field!r}, where shape_field would put its shape; "
                  "it is not overwritten: choose a shape_field no record has")
        yield beam.pvalue.TaggedOutput(PerturbTokens.ERRORS, error_record(pair[0], SHAPE_FIELD_TAKEN, detail))
        yield beam.pvalue.TaggedOutput(PerturbTokens.STATS, {"records": 0, "tokens": 0, "changed_tokens": 0,
                                                             "unknown_tokens": 0, "failed": 1,
                                                             f"failed:{SHAPE_FIELD_TAKEN}": 1})


class PrivatizeResult(NamedTuple):
    """The outputs of ``Privatize``: ``released``, ``errors``, ``stats`` (one dict), ``batch_stats``, ``diagnostics``."""

    released: beam.PCollection
    errors: beam.PCollection
    batch_stats: beam.PCollection
    stats: beam.PCollection
    diagnostics: beam.PCollection


class Privatize(beam.PTransform):
    """Privatize strings or dict records word by word (see the module docstring).

    Keyword arguments mirror ``textdp privatize``'s flags: ``epsilon``, ``mechanism`` (a registered name, an
    import path ``package.module:Class`` or a ``Mechanism`` subclass, as ``RunInference`` takes a handler),
    ``artifact`` (directory or gs://; None: the bundled GloVe artifact), ``text_fields``, ``oov_policy``, ``unk_token``, ``seed`` (tests
    only: not private),
    ``max_text_bytes``, ``batch_tokens``; any other keyword is a parameter of the mechanism
    by its public name, the same as its flag (``nn``, ``search_k`` for Madlib; ``gamma``, ``beta`` for TEM;
    ``lam``; ``vickrey_t``; ``custext_k``; ...: the ``PARAMETERS`` its class declares).
    ``warnings``: what the trial release of a mechanism that is not built in showed (``PrivacySpec.check_artifact``:
    e.g. it released every trial word as itself), one line each, also logged once at construction (``log_warnings``
    False: the caller reports them, as the jobs do in their console and summaries).
    ``shape_field`` is for the LAC Amplifier. ``worker``: BLAS threads per process and
    progress (default: from the pipeline's options, ``transforms.worker.WorkerConfig.for_options``).
    ``redistribute``: spread the batches over all workers (a ``Reshuffle`` of whole batches) before
    they are privatized; for inputs that arrive on few workers, such as files read whole. Shuffling
    batches instead of records moves one element per ~``batch_tokens`` words through the shuffle.
    """

    def __init__(self, epsilon: float, mechanism=DEFAULT_MECHANISM, artifact: Optional[str] = None,
                 text_fields: Sequence[str] = (), oov_policy: str = "random", unk_token: str = DEFAULT_UNK_TOKEN,
                 seed: Optional[int] = None, max_text_bytes: Optional[int] = None,
                 batch_tokens: Optional[int] = None, shape_field: Optional[str] = None, keyed: bool = False,
                 diagnostics: bool = False, worker: Optional[WorkerConfig] = None, redistribute: bool = False,
                 label: Optional[str] = None, log_warnings: bool = True, **mechanism_params):
        super().__init__(label)
        # Everything a worker would otherwise fail on is refused here, as textdp.Privatizer refuses it (one
        # TextdpError line): the spec (mechanism, its parameters, epsilon, OOV policy), the run's integers, the text
        # fields, and a local artifact with the parts the mechanism reads (a gs:// one is read by the workers).
        spec = PrivacySpec(mechanism, (epsilon,), mechanism_params, artifact, oov_policy, unk_token)  # validated once
        if seed is not None:
            check_number(seed, "seed", low=0, integer=True)
        if max_text_bytes is not None:
            check_number(max_text_bytes, "max_text_bytes", low=1, integer=True)
        if batch_tokens is None:
            batch_tokens = default_batch_tokens(spec.mechanism)
        check_number(batch_tokens, "batch_tokens", low=1, integer=True)
        if isinstance(text_fields, str):
            text_fields = [text_fields]
        text_fields = list(text_fields)
        if not all(isinstance(name, str) and name.strip() for name in text_fields):
            raise TextdpValueError("text_fields must be non-empty field names (strings)")
        repeated = sorted({name for name in text_fields if text_fields.count(name) > 1})
        if repeated:  # the field would go through the mechanism twice and its words be counted twice (round 7 F5)
            raise TextdpValueError(f"text_fields names {', '.join(map(repr, repeated))} more than once; name each field once")
        if shape_field is not None:
            if not isinstance(shape_field, str) or not shape_field.strip():
                raise TextdpValueError("shape_field must be a non-empty field name (a string) or None")
            taken = text_fields or ["text"]  # plain strings are released as {"text": ..., shape_field: ...}
            if shape_field in taken:
                raise TextdpValueError(f"shape_field {shape_field!r} is a field that holds the released text; choose "
                                       "a name no record has (e.g. '__shape__')")
        found = []  # the launcher's trial of a mechanism that is not built in (PrivacySpec.check_artifact; R10-9)
        if not is_gcs_url(spec.artifact):
            found = spec.check_artifact(artifact_for_checks(spec.mechanism, spec.artifact,
                                                            verify_artifact(spec.artifact, needs=spec.needs())))
        self.warnings = tuple(found)
        for line in self.warnings if log_warnings else ():  # one line each, never text; the jobs print their own
            _LOG.warning("textdp Privatize: %s", line)
        self.config = PerturbConfig(artifact=spec.artifact, mechanism=spec.mechanism, epsilon=spec.epsilon,
                                    params=spec.params, oov_policy=spec.oov_policy,
                                    unk_token=spec.unk_token, seed=None if seed is None else int(seed),
                                    text_fields=tuple(text_fields), shape_field=shape_field,
                                    max_text_bytes=None if max_text_bytes is None else int(max_text_bytes))
        self.batch_tokens = int(batch_tokens)
        self.keyed = bool(keyed)
        self.diagnostics = bool(diagnostics)
        self.redistribute = bool(redistribute)
        self.worker = worker
        self.shared_handle = shared.Shared()  # also used by the summary and the Amplifier of textdp privatize

    def expand(self, records):
        fields, keyed = self.config.text_fields, self.keyed
        schema = _schema_type(records.element_type)
        worker = self.worker or WorkerConfig.for_options(records.pipeline.options)
        if not keyed:
            records = records | "Key" >> beam.Map(lambda record: (None, record))
        else:  # anything but a (key, record) pair becomes an error record, never a failed job
            records = records | "Pairs" >> beam.Map(as_pair)
        clashes = None
        if self.config.shape_field is not None:  # a record that already has the field: an error record, never overwritten
            split = records | "ShapeFieldFree" >> beam.ParDo(_ShapeFieldFree(self.config.shape_field)).with_outputs(
                PerturbTokens.ERRORS, PerturbTokens.STATS, main="free")
            records, clashes = split.free, split
        batches = (records
                   | "Batch" >> beam.BatchElements(
                       min_batch_size=self.batch_tokens, max_batch_size=self.batch_tokens,
                       element_size_fn=lambda element: estimated_tokens(element, fields, True)))
        if self.redistribute:  # spread whole batches over the workers: one shuffled element per batch, not per record
            batches = batches | "Redistribute" >> beam.Reshuffle()
        outputs = (batches
                   | "Perturb" >> beam.ParDo(PerturbTokens(self.shared_handle, self.config, self.diagnostics,
                                                           worker)).with_outputs(
                       PerturbTokens.ERRORS, PerturbTokens.STATS, PerturbTokens.DIAGNOSTICS, main="released"))
        released = outputs.released
        if schema is not None and fields and not keyed and self.config.shape_field is None:
            released.element_type = schema  # Rows / NamedTuples out as they came in: downstream keeps the schema
        batch_stats, errors = outputs[PerturbTokens.STATS], outputs[PerturbTokens.ERRORS]
        if clashes is not None:
            batch_stats = (batch_stats, clashes[PerturbTokens.STATS]) | "AllBatchStats" >> beam.Flatten()
            errors = (errors, clashes[PerturbTokens.ERRORS]) | "AllErrors" >> beam.Flatten()
        sum_stats = beam.CombineGlobally(SumCounts())
        if not isinstance(records.windowing.windowfn, beam.window.GlobalWindows):  # windowed (streaming): one per window
            sum_stats = sum_stats.without_defaults()
        stats = batch_stats | "SumStats" >> sum_stats
        return PrivatizeResult(released, errors, batch_stats, stats,
                               outputs[PerturbTokens.DIAGNOSTICS])
