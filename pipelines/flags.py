"""Every flag of the textdp jobs, declared once, in groups the jobs read with ``options.view_as``.

Beam parses the flags of every ``PipelineOptions`` subclass imported in a process with one
argparse parser, so a flag may be declared by exactly one class. Flags with the same meaning in
several jobs (``--artifact``, ``--output``, ``--mechanism``, ``--seed``, ...) therefore live in a
shared group here; a job that needs a different help text for one of them says so in its
registry entry (``pipelines/jobs.py``, ``help_overrides``), which the job's ``--help`` and its
Flex Template metadata both use. Which flags a job requires is also said there, explicitly.

Groups: ``ArtifactOptions``, ``OutputOptions``, ``MechanismOptions``, ``SeedOptions``,
``WorkerResourceOptions``, ``OovOptions`` (shared); ``PrivatizeOptions`` (privatize's input and text handling),
``AmplifierOptions`` (privatize's LAC stage), ``EpsilonGridOptions`` (the epsilons calibrate and
audit compare), ``CalibrateOptions``, ``NeighbourOptions``, ``AuditOptions``.
"""

from __future__ import annotations

import re

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.custom_flags import MechanismChoices, argv_mechanism, custom_mechanism, named_mechanism  # noqa: I100
from textdp.artifact.neighbours import METRICS
from textdp.calibration.statistics import DEFAULT_SAMPLES
from textdp.mechanisms import (  # noqa: F401
    ALL_MECHANISMS,
    DEFAULT_MECHANISM,
    EPSILON_RANGE_HELP,
    MAX_EPSILON,
    MIN_EPSILON,
    REGISTRY,
    all_parameters,
    artifact_for_checks,
    available_class,
    check_epsilon,
    check_mechanism,
    mechanism_parameters,
    registered,
    users_of,
)
from textdp.mechanisms.base import SEARCH_BATCH_TOKENS, TABLE_BATCH_TOKENS
from textdp.privacy import accounting
from textdp.privacy.statements import VACUOUS_EXPONENT
from textdp.privacy.summary import DEFAULT_MAX_FAILED_FRACTION
from textdp.spec import PrivacySpec
from textdp.text.privatizer import DEFAULT_UNK_TOKEN, OOV_POLICIES
from transforms.amplifier import AmplifierConfig
from transforms.shuffle import DEFAULT_RECORDS_PER_SHARD
from transforms.worker import WorkerConfig

FORMATS = ("text", "jsonl", "parquet")
DEFAULT_MAX_RECORD_BYTES = 1_000_000
MAX_RECORD_BYTES = 1 << 30  # the readers hold a record in memory; beyond 1 GiB their line buffer overflows
DEFAULT_BATCH_RECORDS = 1024
DEFAULT_EPSILONS = "1,2,5,10,20"
DEFAULT_WORDS = 1000
DEFAULT_K = 100
DEFAULT_SHARD_ROWS = 8192


_PLAIN_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_NOT_A_NUMBER = re.compile(r"[+-]?(inf|infinity|nan)", re.IGNORECASE)  # left to the flags' range checks (they name them)


def _plain_type(kind: str, plain, convert, given_types: tuple, wanted: str, underscore: str):
    """An argparse type named ``kind`` that reads only what ``plain(text)`` accepts (then ``convert(text)``); a
    value of ``given_types`` (a default, or ``PipelineOptions(epsilon=0.5)`` from Python) is converted as it is.
    Python's ``float()``/``int()`` also read ``0_5`` as 5, ``1_0`` as 10 and other scripts' digits (``\u0665`` as
    5): a mistyped 0_5 would run at ten times the epsilon meant (round 8, R8b-8). The refusal quotes at most 60
    ASCII-escaped characters of the value, and argparse names the flag in its one line."""

    def parse(text):
        import argparse

        if isinstance(text, given_types) and not isinstance(text, bool):
            return convert(text)
        value = str(text).strip(" \t")
        if plain(value):
            return convert(value)
        raise argparse.ArgumentTypeError(f"invalid {kind} value: {ascii(str(text))[:60]}: {wanted}"
                                         f"{underscore if '_' in value else ''}")

    parse.__name__ = kind  # argparse's own messages for this type still say "float" / "int"
    return parse


# The argparse type of every float flag (--epsilon, --delta, --author-budget, a mechanism's own float parameters):
# a plain ASCII decimal only (digits 0-9, '.', 'e', '+', '-'; inf/nan are left to the flags' range checks).
plain_float = _plain_type("float", lambda value: _PLAIN_DECIMAL.fullmatch(value) or _NOT_A_NUMBER.fullmatch(value),
                          float, (int, float), "give a plain decimal number, ASCII digits 0-9 with '.', 'e', '+' or '-' only",
                          " (an underscore is not a decimal point: write 0.5, not 0_5)")
# The argparse type of every integer flag (--seed, --k-threshold, --records, a mechanism's own integer parameters):
# plain ASCII digits with an optional sign.
_PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")
plain_int = _plain_type("int", _PLAIN_INTEGER.fullmatch, int, (int,), "give a whole number in ASCII digits 0-9",
                        " (an underscore is no digit separator here: write 10, not 1_0)")


def plain_floats(flag: str, text: str) -> list:
    """Comma-separated ``plain_float`` values of ``flag`` (``--epsilons``); TextdpError, one line, naming the flag."""
    import argparse

    from textdp.errors import TextdpError

    try:
        return [plain_float(part) for part in str(text).split(",") if part.strip()]
    except argparse.ArgumentTypeError as exc:
        raise TextdpError(f"{flag} must be comma-separated numbers: {exc}") from None


def _fields(text: str) -> list:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


class ArtifactOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--artifact", dest="artifact", default=None,
            help="vocabulary artifact: a local directory or a gs:// URL; default: the bundled GloVe 6B 50d artifact "
                 "(400k words), built once into the local cache ($TEXTDP_CACHE_DIR). Checked (manifest, sizes, "
                 "checksums of the files this run uses) before anything runs")


class OutputOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--output", dest="output", default=None, help="where the job writes (local or gs://)")
        parser.add_argument(
            "--overwrite", dest="overwrite", action="store_true", default=False,
            help="replace the files of an earlier run at --output (all of them: shards, errors, summaries, "
                 "reports) before this run starts; without it an --output that holds an earlier run's files is refused")


class MechanismOptions(PipelineOptions):
    """The mechanism and its parameters, generated from the mechanisms' own declarations
    (``textdp.mechanisms.base.Parameter``): one flag per public parameter name, ``--<name>`` (and
    ``--<name-with-hyphens>``), dest = template parameter = Python keyword = summary key, in an
    argparse group per mechanism (a shared parameter in the group of the first mechanism that takes it;
    its help names every mechanism that does). A mechanism named by an import path (or given as a class in
    ``PipelineOptions(..., mechanism=Class)``) adds its own group: ``pipelines/custom_flags.py``."""

    def __init__(self, flags=None, **kwargs):
        with argv_mechanism(flags):  # --mechanism package.module:Class: that class's flags parse too
            super().__init__(flags, **kwargs)

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--mechanism", dest="mechanism", choices=MechanismChoices(registered()), default=DEFAULT_MECHANISM,
            help=f"privacy mechanism (docs/mechanisms.md; default {DEFAULT_MECHANISM}): " + ", ".join(
                cls.summary_line().replace("`", "") if cls else f"{name} (not available in this installation)"
                for name, cls in ((name, available_class(name)) for name in registered()))
            + "; on the command line also the import path package.module:Class of your own Mechanism subclass "
              "(docs/mechanisms.md, 'Bring your own mechanism'; not in a Flex Template, whose image holds textdp's "
              "own mechanisms)")
        placed = set()
        for name, mechanism in named_mechanism(REGISTRY.items()):
            params = [p for p in mechanism.PARAMETERS if p.cli and p.name not in placed]
            if not params:
                continue
            group = parser.add_argument_group(f"--mechanism {name}")
            for param in params:
                placed.add(param.name)
                kwargs = {"dest": param.name, "default": param.default,
                          "help": f"{', '.join(users_of(param.name)) or name}: {param.help}"}
                if param.choices:
                    kwargs["choices"] = param.choices
                else:
                    kwargs["type"] = {float: plain_float, int: plain_int}.get(param.type, param.type)
                group.add_argument(*param.flags, **kwargs)

    def validate_mechanism(self, epsilons, location=None, manifest=None, oov_policy="random", unk_token=DEFAULT_UNK_TOKEN):
        """Refuse, before any worker starts, a flag of another mechanism given a value, and the mechanism's
        parameters at each of ``epsilons`` that it cannot use (its own checks:
        ``textdp.mechanisms.check_mechanism``). With ``manifest`` (what ``verify_artifact`` returned for
        ``location``) also the checks that depend on the vocabulary. Returns the run's validated
        ``textdp.spec.PrivacySpec``, which the job builds its configuration from."""
        from textdp.errors import TextdpError

        own = mechanism_parameters(self.mechanism)  # refuses an unknown or unusable mechanism (one line)
        for name, param in all_parameters().items():
            if param.cli and name not in own and getattr(self, name) != param.default:
                raise TextdpError(f"--{name.replace('_', '-')} applies to --mechanism {', '.join(users_of(name))} only")
        spec = PrivacySpec(self.mechanism, tuple(epsilons), self.mechanism_kwargs(), location, oov_policy, unk_token,
                           epsilon_label="--epsilon")  # the one epsilon rule, the mechanism's checks: once
        if manifest is not None:
            spec.check_artifact(artifact_for_checks(self.mechanism, location, manifest))
        if not isinstance(self.mechanism, str):  # a class given in PipelineOptions(..., mechanism=Class): its import
            self.mechanism = spec.mechanism  # path from here on, so the options serialize (a local class stays itself)
        return spec

    def mechanism_kwargs(self, every: bool = False) -> dict:
        """Keyword arguments (public parameter names) of ``textdp.mechanisms.make_mechanism`` for the chosen
        mechanism only (``every``: those of every mechanism)."""
        values = {name: getattr(self, name) for name, param in all_parameters().items() if param.cli}
        values.update(custom_mechanism(self))  # the parameters of a mechanism not in the registry
        accepted = mechanism_parameters(self.mechanism)
        return values if every else {key: value for key, value in values.items() if key in accepted}


class SeedOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--seed", dest="seed", type=plain_int, default=None,
            help="fixed seed (an integer >= 0) for reproducible tests and benchmarks ONLY: output made with it is not "
                 "private against anyone who knows the seed, and the summary says so. Default: OS entropy")

    def validate_seed(self) -> None:
        from textdp.errors import TextdpError

        if self.seed is not None and self.seed < 0:
            raise TextdpError("--seed must be an integer >= 0")


class WorkerResourceOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--blas-threads", "--blas_threads", dest="blas_threads", type=plain_int, default=0,
            help="BLAS/OpenMP threads per worker process, 0 to 1024; 0 (default): the machine's cores divided by the worker "
                 "processes on it (local runners: --direct_num_workers; Dataflow: 1, as it runs one process per "
                 "vCPU; see docs/scale.md)")
        parser.add_argument(
            "--verbose", dest="verbose", action="store_true", default=False,
            help="show Beam's own log messages and full tracebacks (default: one line per error, progress only)")

    MAX_THREADS = 1024  # threads or processes per machine; more is a typo (1e20 failed after the whole job)

    def validate_resources(self) -> None:
        """--blas-threads, --direct_num_workers and --sdk_worker_parallelism from 0 (automatic) to MAX_THREADS:
        refused before the run (parse_job_options asks every job), never a failure after it."""
        from apache_beam.options.pipeline_options import DirectOptions, PortableOptions

        from textdp.errors import TextdpError

        for flag, value in (("--blas-threads", self.blas_threads),
                            ("--direct_num_workers", self.view_as(DirectOptions).direct_num_workers),
                            ("--sdk_worker_parallelism", self.view_as(PortableOptions).sdk_worker_parallelism)):
            if value is not None and not 0 <= int(value) <= self.MAX_THREADS:
                shown = str(value) if len(str(value)) <= 24 else f"a number of {len(str(value))} digits"
                raise TextdpError(f"{flag} must be an integer from 0 (automatic) to {self.MAX_THREADS}, got {shown}")

    def worker_config(self, progress_dir=None) -> WorkerConfig:
        """Threads per process from the flag, or from the runner and its options
        (``transforms.worker.WorkerConfig.for_options``)."""
        return WorkerConfig.for_options(self, blas_threads=self.blas_threads, progress_dir=progress_dir)


class PrivatizeOptions(PipelineOptions):
    """``textdp privatize``: its input, epsilon and text handling (output, artifact, mechanism: shared groups)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--input", dest="input", default=None,
            help="input file pattern, local or gs:// (e.g. 'data/*.jsonl', 'gs://bucket/corpus-*.txt.gz')")
        parser.add_argument(
            "--format", dest="format", choices=FORMATS, default=None,
            help="input format text|jsonl|parquet; default: inferred from the input's extension (.txt, "
                 ".jsonl/.ndjson/.json, .parquet, optionally followed by .gz). The output keeps it")
        parser.add_argument(
            "--text-field", "--text_field", dest="text_field", action="append", default=None,
            help="JSONL/Parquet: field to privatize (repeat the flag or separate with commas for several); every "
                 "other field passes through unchanged. Default for JSONL/Parquet: 'text'")
        parser.add_argument(
            "--epsilon", dest="epsilon", type=plain_float, default=None,
            help=f"privacy parameter epsilon, {EPSILON_RANGE_HELP} (per unit of embedding "
                 f"distance; smaller = more private). When epsilon x the artifact's typical nearest-neighbour distance is "
                 f"above {VACUOUS_EXPONENT:g} the guarantee is vacuous and the summary and console say so")
        parser.add_argument(
            "--max-record-bytes", "--max_record_bytes", dest="max_record_bytes", type=plain_int,
            default=DEFAULT_MAX_RECORD_BYTES,
            help="a record larger than this many bytes goes to the error output (reason too_large), not privatized: for "
                 "text and JSONL the bytes of its line as read (after decompression, without the line ending; "
                 "for JSONL the whole line, every field), for Parquet the UTF-8 bytes of its text fields "
                 f"together; default {DEFAULT_MAX_RECORD_BYTES}, at most {MAX_RECORD_BYTES} (1 GiB)")
        parser.add_argument(
            "--keep-failed-text", "--keep_failed_text", dest="keep_failed_text", action="store_true", default=False,
            help="also write the text of failed records into the error output (which must then be protected "
                 "like the input). Default: each error record holds only its source file, position (line or "
                 "row), reason code and a detail with exact numbers about the record (its size in bytes, the "
                 "offset of an invalid byte, the character where JSON parsing failed) and names of text fields "
                 "or Parquet columns. Even so the error output is operator data derived from the raw input: "
                 "do not publish it with the output")
        parser.add_argument(
            "--batch-tokens", "--batch_tokens", dest="batch_tokens", type=plain_int, default=None,
            help=f"target words per perturbation batch (one mechanism call), whatever the records' sizes; default "
                 f"{SEARCH_BATCH_TOKENS} for {', '.join(n for n, c in REGISTRY.items() if c.SEARCHES_NEAREST)} "
                 "(a vocabulary search per word) and "
                 f"{TABLE_BATCH_TOKENS} for the others (measured: benchmarks/results/scaling.md)")
        parser.add_argument(
            "--public-summary", "--public_summary", dest="public_summary", default=None, metavar="PATH",
            help="also write a publishable summary to PATH (local or gs://): the mechanism, its parameters, the "
                 "artifact, the privacy statements and the number of records released, with no figure computed "
                 "from the raw input. <output>-summary.json is the operator's and must not be published")
        parser.add_argument(
            "--diagnostics-output", "--diagnostics_output", dest="diagnostics_output", default=None,
            help="for tests and operations: write one JSON line per bundle with the worker's pid, how often its "
                 "process loaded the artifact, its BLAS threads and a SHA-256 fingerprint of its generator's first "
                 "noise draws (no input text, no noise values) to this prefix")

        parser.add_argument(
            "--max-failed-fraction", "--max_failed_fraction", dest="max_failed_fraction", type=plain_float,
            default=DEFAULT_MAX_FAILED_FRACTION, metavar="F",
            help=f"a run in which more than this share of the records in (0 to 1; blank records left out) goes to the error output exits 1 "
                 f"with one line naming the top reasons; its outputs and summary are still written. Default "
                 f"{DEFAULT_MAX_FAILED_FRACTION:g}: a healthy corpus loses a few records at most, and more usually "
                 "means the input is not what the flags say (another field, format or encoding). 1 never fails on the "
                 "share, but a run that privatized no record at all always exits 1")

    def text_fields(self, data_format: str) -> tuple:
        if data_format == "text":
            return ()
        raw = self.text_field or ["text"]
        return tuple(dict.fromkeys(f.strip() for value in raw for f in value.split(",") if f.strip()))


DEFAULT_WINDOW_SECONDS = 60
DEFAULT_POLL_SECONDS = 10.0


class StreamingOptions(PipelineOptions):
    """``textdp privatize --streaming`` (Beam's own --streaming flag): the unbounded sources and the windows
    (docs/streaming.md; pipelines/streaming.py). A batch run refuses them (``given_without_streaming``)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--input-subscription", "--input_subscription", dest="input_subscription", default=None,
            help="with --streaming: read records from this Pub/Sub subscription, projects/PROJECT/subscriptions/NAME "
                 "(one record per message, in --format text or jsonl; Dataflow) instead of watching --input")
        parser.add_argument(
            "--window-size", "--window_size", dest="window_size", type=plain_int, default=DEFAULT_WINDOW_SECONDS,
            metavar="SECONDS",
            help=f"with --streaming: fixed windows of this many seconds (default {DEFAULT_WINDOW_SECONDS}); each "
                 "window's records, errors and summary are written to their own files when the window closes")
        parser.add_argument(
            "--allowed-lateness", "--allowed_lateness", dest="allowed_lateness", type=plain_int, default=0,
            metavar="SECONDS",
            help="with --streaming: how long after a window's end records for it are still taken (default 0); each "
                 "late record so taken makes a further pane of the window, with its own files and summary. A record "
                 "later than that is not privatized: it is written as an error record (reason late) to "
                 "<output>-late-*-errors.jsonl and counted (metric textdp/late_records)")
        parser.add_argument(
            "--poll-interval", "--poll_interval", dest="poll_interval", type=plain_float, default=DEFAULT_POLL_SECONDS,
            metavar="SECONDS",
            help=f"with --streaming and --input: look for new files matching --input every SECONDS (default "
                 f"{DEFAULT_POLL_SECONDS:g}); each file is read once")
        parser.add_argument(
            "--streaming-stop-after", "--streaming_stop_after", dest="streaming_stop_after", type=plain_float,
            default=None, metavar="SECONDS",
            help="with --streaming and --input: stop watching for new files SECONDS after the start; the open "
                 "windows are then closed and written and the job ends (tests, bounded backfills). Default: watch "
                 "until the job is drained or cancelled")

    def given_without_streaming(self) -> None:
        """A batch run (no --streaming) given any of these flags with a value other than its default is refused in
        one line naming the flag (round 10, R10-6): an operator who forgot --streaming, or whose wrapper dropped it,
        would otherwise believe the Pub/Sub stream or the windows they configured were privatized."""
        from textdp.errors import TextdpError

        for action in StreamingOptions._flag_actions():
            if getattr(self, action.dest) != action.default:
                raise TextdpError(f"{action.option_strings[0]} applies to --streaming runs only: add --streaming, or "
                                  "drop the flag for a batch run")

    @staticmethod
    def _flag_actions():
        import argparse

        parser = argparse.ArgumentParser(add_help=False)
        StreamingOptions._add_argparse_args(parser)
        return parser._actions


class OovOptions(PipelineOptions):
    """What happens to words outside the vocabulary (privatize releases them so; audit checks it)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--oov-policy", "--oov_policy", dest="oov_policy", choices=OOV_POLICIES, default="random",
            help="words not in the vocabulary: random (default; the mechanism's release of a vocabulary word drawn "
                 "uniformly at random, covered by the same per-word bound as every word where the mechanism has one), "
                 "unk (the --unk-token marker; shows where unknown words were) or keep (released unchanged and NOT "
                 "covered by the guarantee)")
        parser.add_argument(
            "--unk-token", "--unk_token", dest="unk_token", default=DEFAULT_UNK_TOKEN,
            help="marker written for unknown words with --oov-policy unk; default '<unk>'")


class AmplifierOptions(PipelineOptions):
    """The LAC Amplifier stage of ``textdp privatize`` (docs/lac.md)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--shuffle", dest="shuffle", action="store_true", default=False,
            help="de-link records from their authors before release: drop the author field and the --drop-fields, "
                 "then output the records in a uniformly random order: each record goes to an output file drawn "
                 "uniformly (OS CSPRNG) and each file is written in a uniformly random order. "
                 "<output>-amplification.json reports whether any amplification theorem applies (usually not at "
                 "these epsilons: it says so)")
        parser.add_argument(
            "--user-field", "--user_field", dest="user_field", default=None,
            help="name of the field that identifies a record's author (JSONL/Parquet input). It is used to count "
                 "distinct authors for --k-threshold and to account per author, then removed from the output. "
                 "Without it every record is treated as written by a different person")
        parser.add_argument(
            "--drop-fields", "--drop_fields", dest="drop_fields", default="",
            help="comma-separated fields to remove from every output record (ids, timestamps, anything that links "
                 "a record to a person). Every other field is kept and listed in <output>-amplification.json")
        parser.add_argument(
            "--subsample", dest="subsample", type=plain_float, default=None, metavar="Q",
            help="Poisson sub-sampling: keep each record independently with probability Q in (0, 1] (OS CSPRNG). "
                 "Reduces what is released; no amplification is claimed for it (see docs/lac.md)")
        parser.add_argument(
            "--k-threshold", "--k_threshold", dest="k_threshold", type=plain_int, default=None, metavar="K",
            help="replace every released word used by fewer than K distinct authors (records, without "
                 "--user-field) by a marker. A heuristic: no formal amplification is claimed")
        parser.add_argument(
            "--shuffle-shard-records", "--shuffle_shard_records", dest="shuffle_shard_records", type=plain_int,
            default=DEFAULT_RECORDS_PER_SHARD, metavar="N",
            help=f"with --shuffle: at most about N records per output file (default {DEFAULT_RECORDS_PER_SHARD}); each "
                 "file is shuffled in the memory of one worker, and files are also kept under 64 MiB of text")
        parser.add_argument(
            "--delta", dest="delta", type=plain_float, default=accounting.DEFAULT_DELTA,
            help=f"delta of the (epsilon, delta) shuffle-amplification bound (default {accounting.DEFAULT_DELTA:g}); "
                 f"at most {accounting.MAX_DELTA:g}; the bound is only reported where its theorem's condition holds "
                 "and delta is at most 1/n for the n records (authors) shuffled")

    def amplifier_config(self) -> AmplifierConfig:
        """The flags as the stage's configuration (validated: ValueError naming the flag)."""
        config = AmplifierConfig(
            shuffle=bool(self.shuffle), user_field=self.user_field or None,
            drop_fields=tuple(dict.fromkeys(_fields(self.drop_fields))), subsample=self.subsample,
            k_threshold=self.k_threshold, delta=float(self.delta), records_per_shard=int(self.shuffle_shard_records))
        config.validate()
        return config


class LedgerOptions(PipelineOptions):
    """The exposure ledger of ``textdp privatize``, batch and --streaming (docs/ledger.md)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--ledger", dest="ledger", default=None, metavar="PATH_OR_URL",
            help="record per author (by a keyed hash of the --user-field value, never the value) what this run "
                 "released: a file path (an embedded SQLite ledger; a new one needs --ledger-create) or an SQLAlchemy URL of a "
                 "shared database (postgresql+psycopg://user@host/db; pip install textdp[ledger-postgres]). "
                 "Batch: committed after the run's outputs are written; --streaming: each window decided before its files "
                 "are written and counted from then on (docs/ledger.md). Needs --user-field")
        parser.add_argument(
            "--ledger-key-file", "--ledger_key_file", dest="ledger_key_file", default=None, metavar="PATH",
            help="the operator's secret key for the author hash (at least 16 bytes; default: $TEXTDP_LEDGER_KEY). "
                 "The ledger keeps only its fingerprint and refuses another key")
        parser.add_argument(
            "--author-budget", "--author_budget", dest="author_budget", type=plain_float, default=None, metavar="B",
            help="cap on each author's cumulative epsilon-mass across every run committed to --ledger (epsilon x the "
                 "word tokens released from their records): records that would exceed it go to the error output as "
                 "budget_exhausted, each author's records taken in input order (file, then line or row)")
        parser.add_argument(
            "--ledger-run-id", "--ledger_run_id", dest="ledger_run_id", default=None, metavar="ID",
            help="this run's id in the ledger (default: a new random one); a run id is used once")
        parser.add_argument(
            "--ledger-create", "--ledger_create", dest="ledger_create", action="store_true", default=False,
            help="start a new ledger at --ledger (every author at 0); refused if it already holds one. Without it a "
                 "--ledger that does not exist is refused (a mistyped path would reset every author)")


class EpsilonGridOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--epsilons", dest="epsilons", default=DEFAULT_EPSILONS,
                            help=f"comma-separated epsilons to compare, each in [{MIN_EPSILON:g}, {MAX_EPSILON:g}] "
                                 f"(see --epsilon of textdp privatize); default {DEFAULT_EPSILONS}")

    def epsilon_grid(self) -> tuple:
        from textdp.errors import TextdpError

        values = sorted(set(plain_floats("--epsilons", self.epsilons)))
        if not values:
            raise TextdpError(f"--epsilons must list at least one epsilon, each {EPSILON_RANGE_HELP}")
        return tuple(check_epsilon(value, "--epsilons: each epsilon") for value in values)


class CalibrateOptions(PipelineOptions):
    """``textdp calibrate``: which words, how many draws, the targets."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--words", dest="words", type=plain_int, default=None,
            help=f"number of words to sample, one per equal frequency-rank stratum of the vocabulary; default "
                 f"{DEFAULT_WORDS} (all words if the vocabulary is smaller). Not with --word-list")
        parser.add_argument(
            "--word-list", "--word_list", dest="word_list", default=None,
            help="file (local or gs://) with the words to calibrate, one per line, instead of a sample; words outside "
                 "the vocabulary are skipped and counted by line number")
        parser.add_argument(
            "--samples", dest="samples", type=plain_int, default=DEFAULT_SAMPLES,
            help=f"draws of M(w) per word and epsilon (the paper uses 1,000); default {DEFAULT_SAMPLES}")
        parser.add_argument(
            "--max-nw", "--max_nw", dest="max_nw", type=plain_float, default=0.5,
            help="target: a word may be released unchanged with probability at most this; default 0.5. Give a "
                 "negative value to drop this target")
        parser.add_argument(
            "--min-sw", "--min_sw", dest="min_sw", type=plain_float, default=50.0,
            help="target: at least this many distinct outputs in --samples draws; default 50. Give a negative value "
                 "to drop this target")
        parser.add_argument(
            "--coverage", dest="coverage", type=plain_float, default=0.99,
            help="share of words that must meet both targets; default 0.99")
        parser.add_argument(
            "--no-prune", "--no_prune", dest="no_prune", action="store_true", default=False,
            help="exact Madlib: search the whole vocabulary for every draw instead of only the words that can be "
                 "nearest (same answers, slower; for checking)")


class NeighbourOptions(PipelineOptions):
    """``textdp neighbours``: the table's size and metric."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--k", dest="k", type=plain_int, default=DEFAULT_K,
            help=f"neighbours stored per word, the word itself included (default {DEFAULT_K}); larger K makes TEM "
                 "faster at middle epsilons and the table bigger: N x K x 8 bytes")
        parser.add_argument(
            "--metric", dest="metric", choices=METRICS, default="euclidean",
            help="distance between embeddings: euclidean (default) or angular (chord between directions, "
                 "sqrt(2 - 2 cos)); TEM's privacy statement is in this metric")
        parser.add_argument(
            "--shard-rows", "--shard_rows", dest="shard_rows", type=plain_int, default=DEFAULT_SHARD_ROWS,
            help=f"vocabulary rows per work item (default {DEFAULT_SHARD_ROWS}); smaller spreads work over more workers")


DEFAULT_AUDIT_CHECKS = "self-check,inversion,linkage"
AUDIT_CHECKS = ("self-check", "inversion", "linkage")


class AuditOptions(PipelineOptions):
    """``textdp audit``: the self-check's pairs and draws, the attacks' corpus, prior and sizes."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--checks", dest="checks", default=DEFAULT_AUDIT_CHECKS,
            help=f"comma-separated parts to run: {', '.join(AUDIT_CHECKS)}; default all (inversion and linkage "
                 "need --corpus; without it only the self-check runs)")
        parser.add_argument(
            "--pairs", dest="pairs", type=plain_int, default=50,
            help="self-check: word pairs across distance bands (a sampled word with its 1st, 10th, 100th, 1,000th "
                 "and 10,000th nearest word); default 50")
        parser.add_argument(
            "--draws", dest="draws", type=plain_int, default=20000,
            help="self-check: releases drawn per word and epsilon, split in two halves (one chooses the event, the "
                 "other measures it); default 20,000. More draws find smaller violations")
        parser.add_argument(
            "--pair-list", "--pair_list", dest="pair_list", default=None,
            help="self-check: file (local or gs://) with more pairs to test, two words per line separated by "
                 "whitespace or a comma; a word outside the vocabulary tests the --oov-policy")
        parser.add_argument(
            "--no-oov-pairs", "--no_oov_pairs", dest="no_oov_pairs", action="store_true", default=False,
            help="self-check: skip the pairs of two generated out-of-vocabulary words that check --oov-policy")
        parser.add_argument(
            "--false-alarm-rate", "--false_alarm_rate", dest="false_alarm_rate", type=plain_float, default=0.001,
            help="self-check: probability that a correct mechanism is reported as violating its guarantee anywhere "
                 "in the run (split over all tests, Bonferroni); default 0.001")
        parser.add_argument(
            "--corpus", dest="corpus", default=None,
            help="inversion and linkage: the records to attack, a file pattern (local or gs://) of text (one record "
                 "per line), JSONL or Parquet, as privatize reads them")
        parser.add_argument(
            "--corpus-format", "--corpus_format", dest="corpus_format", choices=FORMATS, default=None,
            help="format of --corpus and --prior-corpus: text|jsonl|parquet; default: from the extension")
        parser.add_argument(
            "--corpus-text-field", "--corpus_text_field", dest="corpus_text_field", default="text",
            help="JSONL/Parquet: the field(s) holding the text, comma-separated; default 'text'")
        parser.add_argument(
            "--records", dest="records", type=plain_int, default=2000,
            help="records of --corpus attacked (a uniform sample): their words are inverted and they are the "
                 "linkage queries; default 2,000")
        parser.add_argument(
            "--inversion-tokens", "--inversion_tokens", dest="inversion_tokens", type=plain_int, default=100000,
            help="at most this many word tokens of those records are inverted per epsilon (a uniform sample); "
                 "default 100,000 (rates to about +-0.3 points)")
        parser.add_argument(
            "--prior-corpus", "--prior_corpus", dest="prior_corpus", default=None,
            help="the attacker's public prior: word frequencies of this reference corpus (same format flags), mixed "
                 "with Zipf's law over the vocabulary's ranks (weight 0.1) so that words it lacks keep some probability. "
                 "Default: Zipf's law over the vocabulary's rank order alone")
        parser.add_argument(
            "--prior-words", "--prior_words", dest="prior_words", type=plain_int, default=50000,
            help="the prior keeps its this many most probable words (the attacker's candidates); default 50,000. "
                 "Closed-form mechanisms cost one pass over the vocabulary per candidate")
        parser.add_argument(
            "--no-contextual", "--no_contextual", dest="no_contextual", action="store_true", default=False,
            help="inversion: skip the contextual attacker (a bigram language model over the released word order, "
                 "forward-backward over each record; summary key contextual_inversion)")
        parser.add_argument(
            "--contextual-candidates", "--contextual_candidates", dest="contextual_candidates", type=plain_int, default=50,
            help="inversion: the contextual attacker considers, per word, the K most probable inputs under the "
                 "context-free posterior plus the released word (10 to 1,000: its top-10 must be the context-free attacker's ten "
                 "best guesses); default 50")
        parser.add_argument(
            "--mc-draws", "--mc_draws", dest="mc_draws", type=plain_int, default=200000,
            help="mechanisms without a closed form (Madlib): releases of prior-drawn words per epsilon from which "
                 "the attacker's posterior is estimated; default 200,000")
        parser.add_argument(
            "--linkage-window", "--linkage_window", dest="linkage_window", type=plain_int, default=20,
            help="linkage compares records on their first this many words (records with fewer are left out); "
                 "default 20")
        parser.add_argument(
            "--linkage-sizes", "--linkage_sizes", dest="linkage_sizes", default="100,1000,10000",
            help="comma-separated sizes of the sets of original records; default 100,1000,10000 (a size larger "
                 "than the corpus's usable records is skipped)")
        parser.add_argument(
            "--conformance", dest="conformance", action="store_true", default=False,
            help="run the conformance test instead of the other checks: releases drawn as privatize draws them, "
                 "tested against each mechanism's declared law (closed form, or an independent reference "
                 "simulation), with a power check at 1.25 x epsilon (docs/audit.md, 'Conformance')")
        parser.add_argument(
            "--conformance-mechanisms", "--conformance_mechanisms", dest="conformance_mechanisms", default="all",
            help="conformance: comma-separated mechanisms (registered names or import paths package.module:Class); "
                 "default all: every registered mechanism. The one named by --mechanism takes the run's mechanism "
                 "flags, the others their defaults")
        parser.add_argument(
            "--conformance-draws", "--conformance_draws", dest="conformance_draws", type=plain_int, default=0,
            help="conformance: releases per sampled word and epsilon; default 0: 50,000 for a closed form, 10,000 "
                 "(each, mechanism and reference) for a reference simulation")
        parser.add_argument(
            "--conformance-words", "--conformance_words", dest="conformance_words", type=plain_int, default=2,
            help="conformance: input words sampled per frequency band (ranks 1-100, -1,000, -10,000, -100,000, "
                 "beyond); default 2")
        parser.add_argument(
            "--power-repeats", "--power_repeats", dest="power_repeats", type=plain_int, default=2,
            help="conformance: repetitions of the power check (releases at 1.25 x epsilon); default 2")
