"""Flags of the LAC Amplifier stage of ``textdp privatize`` (see docs/lac.md).

The flags become an ``AmplifierConfig`` (transforms/amplifier.py), which is all the stage reads;
the accounting arithmetic is in textdp/accounting.py.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.options import flag_adder
from textdp import accounting
from transforms.amplifier import AmplifierConfig
from transforms.shuffle import DEFAULT_RECORDS_PER_SHARD

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
                 "--drop-fields, then output the records in a uniformly random order: each record goes to an "
                 "output file drawn uniformly (OS CSPRNG) and each file is written in a uniformly random order. "
                 "<output>-amplification.json reports whether any amplification theorem applies (usually not "
                 "at these epsilons: it says so)")
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
            "--shuffle-shard-records", "--shuffle_shard_records", dest="shuffle_shard_records", type=int,
            default=DEFAULT_RECORDS_PER_SHARD, metavar="N",
            help=f"with --shuffle: at most about N records per output file (default {DEFAULT_RECORDS_PER_SHARD}); "
                 "each file is shuffled in the memory of one worker, and files are also kept under 64 MiB of text")
        add(
            "--delta", type=float, default=accounting.DEFAULT_DELTA,
            help=f"delta of the (epsilon, delta) shuffle-amplification bound (default {accounting.DEFAULT_DELTA:g}); "
                 "the bound is only reported where its theorem's condition holds")

    def amplifier_config(self) -> AmplifierConfig:
        """The flags as the stage's configuration (validated: ValueError naming the flag)."""
        config = AmplifierConfig(
            shuffle=bool(self.shuffle), user_field=self.user_field or None,
            drop_fields=tuple(dict.fromkeys(_fields(self.drop_fields))), subsample=self.subsample,
            k_threshold=self.k_threshold, delta=float(self.delta), records_per_shard=int(self.shuffle_shard_records))
        config.validate()
        return config

    def amplifier_requested(self) -> bool:
        """True if any Amplifier step was asked for (the stage runs only then)."""
        return self.amplifier_config().requested()
