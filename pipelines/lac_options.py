"""Flags and wiring for the LAC Amplifier stage of ``textdp privatize`` (see docs/lac.md).

Into any pipeline that holds privatized records (dicts)::

    options = pipeline_options.view_as(AmplifierOptions)
    token_eps0, diameter = local_token_epsilon0(mechanism, artifact, oov_policy)
    records, amplification = apply_amplifier(records, options, token_eps0, text_fields=[...])

``amplification`` is a PCollection with one dict: the summary's "amplification" section. Into the
privatize pipeline (payloads: str for text, dict for JSONL/Parquet), ``amplify_privatized`` does
it all, with epsilon_0 computed on a worker from the mechanism the privatize workers loaded.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.options import flag_adder
from textdp import accounting
from transforms.shuffle import DEFAULT_MARKER, DEFAULT_RECORDS_PER_BUCKET, ShuffleAmplifier

# the field in which textdp privatize's workers hand each record's word count and layout digest to the
# Amplifier's accounting; it never reaches the output (an input field of that name is overwritten)
SHAPE_FIELD = "__textdp_shape__"

def _fields(text: str) -> list:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


class AmplifierOptions(PipelineOptions):
    """The Amplifier's flags; the single source of truth for their names, defaults and help."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add = flag_adder(parser)
        add(
            "--shuffle", action="store_true", default=False,
            help="de-link records from their authors before release: drop the author field and the "
                 "--drop-fields, then output the records in a uniformly random order (keys from the OS "
                 "CSPRNG, not Python's random). <output>-amplification.json reports whether any amplification "
                 "theorem applies (usually not at these epsilons: it says so)")
        add(
            "--user-field", default=None,
            help="name of the field that identifies a record's author (JSONL/Parquet input). It is used to "
                 "count distinct authors for --k-threshold and to account per author, then removed from "
                 "the output. Without it every record is treated as written by a different person")
        add(
            "--drop-fields", default="",
            help="comma-separated fields to remove from every output record (ids, timestamps, anything "
                 "that links a record to a person). Every other field is kept and listed in <output>-amplification.json")
        add(
            "--subsample", type=float, default=None, metavar="Q",
            help="Poisson sub-sampling: keep each record independently with probability Q in (0, 1] "
                 "(OS CSPRNG). Reduces what is released; no amplification is claimed for it (see docs/lac.md)")
        add(
            "--k-threshold", type=int, default=None, metavar="K",
            help="replace every released word used by fewer than K distinct authors (records, without "
                 "--user-field) by a marker. A heuristic: no formal amplification is claimed")
        add(
            "--delta", type=float, default=accounting.DEFAULT_DELTA,
            help=f"delta of the (epsilon, delta) shuffle-amplification bound (default {accounting.DEFAULT_DELTA:g}); "
                 "the bound is only reported where its theorem's condition holds")

    def amplifier_requested(self) -> bool:
        """True if any Amplifier step was asked for (the stage runs only then)."""
        return bool(self.shuffle or self.subsample is not None or self.k_threshold is not None
                    or self.user_field or _fields(self.drop_fields))

    def validate_amplifier(self) -> None:
        """Clear errors for impossible combinations (raise ValueError naming the flag)."""
        if self.subsample is not None and not 0 < self.subsample <= 1:
            raise ValueError("--subsample must be in (0, 1]")
        if self.k_threshold is not None and self.k_threshold < 1:
            raise ValueError("--k-threshold must be >= 1")
        if not 0 < self.delta < 1:
            raise ValueError("--delta must be in (0, 1)")


def local_token_epsilon0(mechanism, artifact, oov_policy: str = "random") -> tuple:
    """(token epsilon_0, diameter bounds) for a mechanism over an artifact, computed from the vectors.

    ``mechanism`` is any object with ``parameters()`` (Madlib, TEM). Three passes over the vectors
    (about a second for 400k x 50). The diameter is taken in the mechanism's metric: Madlib's is
    Euclidean; TEM's may be ``angular`` (Euclidean between unit directions, so at most 2).
    """
    params = mechanism.parameters()
    metric = params.get("metric", "euclidean")
    vectors = artifact.vectors
    if metric != "euclidean":
        from textdp.neighbours import metric_points  # pylint: disable=import-outside-toplevel

        vectors = metric_points(vectors, metric)
    bounds = accounting.diameter_bounds(vectors)
    if metric == "angular" and bounds.upper > 2.0:  # unit vectors: no two are farther apart than 2
        bounds = dataclasses.replace(bounds, upper=2.0, method=bounds.method + "; 2 for unit directions")
    eps0 = accounting.token_epsilon0(params["mechanism"], params["epsilon"], bounds.upper,
                                     gamma=params.get("gamma"), oov_policy=oov_policy)
    return eps0, bounds


def amplification_section(stats: dict, token_eps0: float, *, shuffled: bool, delta: float,
                          subsample_rate: Optional[float], k_threshold: Optional[int],
                          diameter: Optional[dict] = None) -> dict:
    """The summary's "amplification" section from the stage's ``stats`` and the local epsilon_0."""
    shapes = [(tuple(shape), count) for shape, count in stats["shape_counts"]]
    report = accounting.amplification_report(
        token_eps0, shapes, shuffled=shuffled, delta=delta, subsample_rate=subsample_rate,
        k_threshold=k_threshold, per_author=stats["per_author"],
        exact_word_counts=stats["word_counts"] != "estimated")
    report["local"]["word_counts"] = stats["word_counts"]
    if diameter is not None:
        report["local"]["vocabulary_diameter"] = diameter
    report["records"] = {"in": stats["records_in"], "out": stats["records_out"],
                         "dropped_by_subsampling": stats["records_in"] - stats["records_out"]}
    unprotected = sorted(set(stats["remaining_fields"]) - set(stats["text_fields"]))
    report["fields"] = {
        "removed": stats["removed_fields"], "remaining": stats["remaining_fields"],
        "released_unprivatized": unprotected,
        "statement": ("the privacy statements cover the privatized text fields only; "
                      + (f"the field{'s' if len(unprotected) > 1 else ''} {', '.join(unprotected)} "
                         f"{'are' if len(unprotected) > 1 else 'is'} released as it stands, with no guarantee, "
                         "and can link records to people or split them into smaller groups"
                         if unprotected else "no other field remains")),
    }
    if k_threshold is not None:
        report["k_threshold"].update(rare_word_types=stats["rare_word_types"],
                                     suppressed_words=stats["suppressed_words"])
    report["order"] = ("records are output in a uniformly random order (128-bit keys from os.urandom, "
                       "buckets permuted with random.SystemRandom)" if shuffled else
                       "records are output in the runner's order, linked to their input position")
    return report


def apply_amplifier(records, options: AmplifierOptions, token_eps0: float,
                    text_fields: Sequence[str] = ("text",), marker: str = DEFAULT_MARKER,
                    records_per_bucket: int = DEFAULT_RECORDS_PER_BUCKET, diameter: Optional[dict] = None,
                    shape_field: Optional[str] = None, label: str = "Amplifier"):
    """Apply ``ShuffleAmplifier`` as the flags say; returns (records, amplification section PCollection).

    ``shape_field``: a field in which the privatizer stored each record's shape,
    ``{"words": number of privatized words, "layout": digest of everything else the text releases}``
    (``PerturbTokens`` with ``PerturbConfig(shape_field=...)`` writes it; removed before output).
    Without it the counts are estimated from the released text, the layouts are unknown, and no
    shuffle amplification is claimed.
    """
    options.validate_amplifier()
    outputs = records | label >> ShuffleAmplifier(
        user_field=options.user_field, drop_fields=_fields(options.drop_fields),
        subsample_rate=options.subsample, k_threshold=options.k_threshold, text_fields=text_fields,
        marker=marker, records_per_bucket=records_per_bucket, shuffle=bool(options.shuffle),
        shape_field=shape_field)
    shuffled, delta, rate, k = bool(options.shuffle), float(options.delta), options.subsample, options.k_threshold
    section = outputs["stats"] | f"{label}Accounting" >> beam.Map(
        lambda stats: amplification_section(stats, token_eps0, shuffled=shuffled, delta=delta,
                                            subsample_rate=rate, k_threshold=k, diameter=diameter))
    return outputs["records"], section


class AmplificationSection(beam.DoFn):
    """The stage's stats -> the "amplification" section, written to ``path`` as JSON and emitted.

    epsilon_0 comes from the very mechanism and artifact the privatize workers loaded (the same
    ``Shared`` holder, so nothing is loaded twice in a process).
    """

    def __init__(self, shared_handle, config, path: Optional[str], *, shuffled: bool, delta: float,
                 subsample_rate: Optional[float], k_threshold: Optional[int]):
        super().__init__()
        self._shared_handle = shared_handle
        self.config = config
        self.path = path
        self.kwargs = dict(shuffled=shuffled, delta=delta, subsample_rate=subsample_rate, k_threshold=k_threshold)
        self._holder = None

    def setup(self):
        from transforms.perturb import load_holder  # pylint: disable=import-outside-toplevel

        self._holder = load_holder(self._shared_handle, self.config)

    def process(self, stats):
        token_eps0, diameter = local_token_epsilon0(self._holder.mechanism, self._holder.artifact,
                                                    self.config.oov_policy)
        section = amplification_section(stats, token_eps0, diameter=diameter.to_dict(), **self.kwargs)
        if self.path:
            from transforms.io import write_json  # pylint: disable=import-outside-toplevel

            write_json(self.path, section)
        yield section


def amplify_privatized(released, options, config, shared_handle, data_format: str, text_fields: Sequence[str],
                       section_path: Optional[str] = None, label: str = "Amplifier"):
    """The Amplifier inside ``textdp privatize``: returns (payloads, records dropped by sub-sampling).

    ``released`` holds privatized payloads (str for text input, dict for JSONL/Parquet); the
    result holds payloads of the same kind. The section goes to ``section_path`` (JSON). The second
    PCollection has one number, for the summary's reconciliation of record counts.
    """
    amp = options.view_as(AmplifierOptions)
    amp.validate_amplifier()
    if data_format == "text" and amp.user_field:
        raise ValueError("--user-field needs JSONL or Parquet input (plain-text lines have no author field)")
    shape_field = config.shape_field
    if data_format == "text":
        text_fields = ("text",)
    if data_format == "text" and not shape_field:
        records = released | f"{label}Wrap" >> beam.Map(lambda text: {"text": text})
    else:  # PerturbTokens with a shape field already emits {"text": ..., shape_field: ...} for text input
        records = released
    outputs = records | label >> ShuffleAmplifier(
        user_field=amp.user_field, drop_fields=_fields(amp.drop_fields), subsample_rate=amp.subsample,
        k_threshold=amp.k_threshold, text_fields=tuple(text_fields), shuffle=bool(amp.shuffle),
        shape_field=shape_field)
    (outputs["stats"]
     | f"{label}Section" >> beam.ParDo(AmplificationSection(
         shared_handle, config, section_path, shuffled=bool(amp.shuffle), delta=float(amp.delta),
         subsample_rate=amp.subsample, k_threshold=amp.k_threshold)))
    dropped = outputs["stats"] | f"{label}Dropped" >> beam.Map(lambda s: s["records_in"] - s["records_out"])
    payloads = outputs["records"]
    if data_format == "text":
        payloads = payloads | f"{label}Unwrap" >> beam.Map(lambda record: record["text"])
    return payloads, dropped
