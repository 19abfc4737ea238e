"""The textdp jobs: one registry for the command line and the Flex Templates, and one ``run_job()``.

``JOBS`` says, for every job, where its code is, which flag groups it reads (``pipelines/flags.py``),
which flags it requires, and which shared flags it describes in its own words. The ``textdp``
command (``pipelines/cli.py``) and the template tools (``templates/jobs.py``) both read it.

``run_job(name, argv)`` owns everything around a job's pipeline, the same way for every job:

1. ``--help``; then parsing, where an argument that neither textdp nor Beam defines is refused with
   a "did you mean" hint (Beam itself would only log "Discarding unparseable args" and run on,
   releasing a misspelled ``--text-field`` unprivatized), and missing required flags are refused;
2. the job's own checks before anything starts (``module.prepare(options)``: flag values, the
   artifact's manifest, sizes and checksums, inputs and outputs);
3. the run, on an explicit local runner unless ``--runner`` is given (Beam's default would first
   try to download a runner binary), with progress for local runs and Beam's own log noise hidden
   unless ``--verbose``;
4. the end: the job's report lines, or exactly one line ``textdp <job>: error: ...`` on stderr, the
   run's temporary ``beam-temp-*`` directories removed after a failure, Ctrl-C or SIGTERM (what
   ``timeout``, systemd, ``docker stop`` and schedulers send: handled like Ctrl-C, one line), and the
   run's output locks released however it ends.

Exit codes, the same for every job: 0 done; 2 refused before anything ran (bad flags, bad
artifact, bad input or output); 1 failed while running; 130 interrupted (Ctrl-C); 143 terminated
(SIGTERM). A terminating signal that arrives once the run is committed (its report judged it a
success, --overwrite's earlier files about to be removed) no longer stops it: the run ends with exit 0
and one line saying the signal came after the run completed; the command (``textdp``, ``python -m
pipelines.cli``) then ignores such signals until the process exits (round 10, R10-8).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import importlib
import logging
import os
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_HUNG_UP = 0, 1, 2, 130, 143, 129
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")


@dataclass(frozen=True)
class Job:
    """A job: its module, flag groups (names of classes in pipelines/flags.py), required flags (dests)."""

    name: str
    module: str
    description: str
    groups: Tuple[str, ...] = ()
    required: Tuple[str, ...] = ()
    help_overrides: Dict[str, str] = field(default_factory=dict)
    beam: bool = True  # False: a single-process job whose module has its own argparse parser (build_parser)
    # a required flag that another flag can stand in for (privatize --streaming: --input-subscription for --input)
    instead: Dict[str, str] = field(default_factory=dict)
    # False: not packaged as a Dataflow Flex Template (templates/jobs.py), e.g. an operator's local admin command
    template: bool = True


def _mechanisms() -> str:
    """The registered mechanisms, from the registry (textdp/mechanisms/__init__.py), for the job descriptions."""
    from textdp.mechanisms import registered

    names = list(registered())
    return f"any of the {len(names)} registered mechanisms ({', '.join(names)}) or your own Mechanism class"


JOBS: Dict[str, Job] = {job.name: job for job in (
    Job("build-index", "pipelines.build_index",
        "Build a vocabulary artifact (vectors + Annoy index) from embeddings.", beam=False),
    Job("privatize", "pipelines.privatize",
        f"Privatize a text corpus word by word with metric differential privacy: {_mechanisms()}.",
        groups=("PrivatizeOptions", "OovOptions", "OutputOptions", "ArtifactOptions", "MechanismOptions", "SeedOptions",
                "AmplifierOptions", "LedgerOptions", "WorkerResourceOptions", "StreamingOptions"),
        required=("input", "output", "epsilon"), instead={"input": "input_subscription"},
        help_overrides={"output": "output prefix, local or gs://: writes <output>-SSSSS-of-NNNNN.<ext>, "
                                  "<output>-errors-SSSSS.jsonl, <output>-summary.json (and with the Amplifier "
                                  "<output>-amplification.json)"}),
    Job("ledger", "pipelines.ledger",
        "Show or settle an exposure ledger: its runs and each author's cumulative epsilon-mass (aggregated).",
        beam=False, template=False),
    Job("neighbours", "pipelines.neighbours",
        "Pre-compute every vocabulary word's nearest neighbours (the TEM table) into an artifact.",
        groups=("ArtifactOptions", "NeighbourOptions", "WorkerResourceOptions"),
        help_overrides={"artifact": "artifact to add the table to: a local directory or a gs:// URL; default: the "
                                    "bundled GloVe 50d artifact in the textdp cache (TEXTDP_CACHE_DIR). With gs:// "
                                    "any runner works (Dataflow included): the workers fetch the artifact, and the "
                                    "table's two files and then the new manifest are uploaded next to it when the "
                                    "job ends"}),
    Job("calibrate", "pipelines.calibrate",
        "Plausible-deniability statistics N_w and S_w per epsilon, to choose epsilon.",
        groups=("OutputOptions", "ArtifactOptions", "MechanismOptions", "EpsilonGridOptions", "CalibrateOptions",
                "SeedOptions", "WorkerResourceOptions"),
        required=("output",),
        help_overrides={"output": "output directory, local or gs:// (created if missing): per_word.parquet, "
                                  "summary.json, the PNG plots and report.html",
                        "seed": "fixed seed (an integer >= 0) for tests and benchmarks ONLY (word sample and draws); "
                                "the summary records it. Default: OS entropy"}),
    Job("audit", "pipelines.audit",
        "Measure the privacy a release really gives: mechanism self-check, inversion and record linkage attacks.",
        groups=("OutputOptions", "ArtifactOptions", "MechanismOptions", "EpsilonGridOptions", "AuditOptions",
                "OovOptions", "SeedOptions", "WorkerResourceOptions"),
        required=("output",),
        help_overrides={"output": "output directory, local or gs:// (created if missing): self_check.parquet, "
                                  "inversion.parquet, linkage.parquet, summary.json, the PNG plots and report.html",
                        "oov_policy": "the out-of-vocabulary policy to audit, as privatize applies it: random "
                                      "(default), unk or keep (the self-check reports keep as leaking without a "
                                      "guarantee)",
                        "seed": "fixed seed (an integer >= 0) for tests and benchmarks ONLY (pairs, draws, corpus "
                                "sample); the summary records it. Default: OS entropy"}),
)}


def directory_job_files(other_than: str) -> List[Tuple[str, Tuple[str, ...]]]:
    """("the files of a <job> run", its OUTPUT_FILES) for every job other than ``other_than`` whose --output is
    a directory of named files: a directory holding them is not this job's to replace (textdp/outputs.py)."""
    found = []
    for job in JOBS.values():
        if job.name != other_than and job.beam and "output" in job.required:
            files = getattr(importlib.import_module(job.module), "OUTPUT_FILES", None)
            if files:
                found.append((f"the files of a {job.name} run", tuple(files)))
    return found


class JobRefused(Exception):
    """Raised before anything ran: the one-line message is the whole story (exit 2)."""


# --- flags ------------------------------------------------------------------------------------------


def option_classes(job: Job) -> list:
    from pipelines import flags

    return [getattr(flags, group) if isinstance(group, str) else group for group in job.groups]


# --help's sections: the section of each flag group (pipelines/flags.py), a few flags placed by their meaning
# instead, and the order of the sections (each mechanism's own parameters follow the mechanism's section)
INPUT_OUTPUT, MECHANISM, AMPLIFIER, RUNNER = ("input and output", "mechanism and its parameters",
                                              "LAC Amplifier: de-linking, shuffle, sub-sampling (docs/lac.md)",
                                              "runner and workers")
STREAMING = "streaming (--streaming: unbounded sources, windows; docs/streaming.md)"
LEDGER = "exposure ledger and author budget (docs/ledger.md)"
HELP_SECTIONS = {"PrivatizeOptions": INPUT_OUTPUT, "OutputOptions": INPUT_OUTPUT, "ArtifactOptions": MECHANISM,
                 "MechanismOptions": MECHANISM, "SeedOptions": MECHANISM, "OovOptions": MECHANISM,
                 "EpsilonGridOptions": MECHANISM, "CalibrateOptions": "calibration",
                 "NeighbourOptions": "neighbour table",
                 "AuditOptions": "audit checks and attacks", "AmplifierOptions": AMPLIFIER,
                 "WorkerResourceOptions": RUNNER, "StreamingOptions": STREAMING, "LedgerOptions": LEDGER}
HELP_SECTION_OF_FLAG = {"epsilon": MECHANISM, "batch_tokens": RUNNER, "diagnostics_output": RUNNER}
FIRST_IN_SECTION = ("input", "format", "text_field", "output", "overwrite", "mechanism", "epsilon", "epsilons",
                    "artifact")
HELP_SECTION_ORDER = (INPUT_OUTPUT, MECHANISM, "calibration", "neighbour table", "audit checks and attacks", AMPLIFIER,
                      LEDGER, STREAMING, RUNNER)
RUNNER_NOTE = ("Beam's own flags (--runner, --direct_num_workers, --direct_running_mode, --project, --region, "
               "--temp_location, ...) are accepted too")


class OneSpellingFormatter(argparse.HelpFormatter):
    """Shows each flag once: ``--text-field``, not also its underscore spelling ``--text_field`` (still accepted)."""

    def _format_action_invocation(self, action):
        shown = [o for o in action.option_strings if not (o.startswith("--") and "_" in o
                                                          and "--" + o[2:].replace("_", "-") in action.option_strings)]
        if len(shown) < len(action.option_strings):
            action = copy.copy(action)
            action.option_strings = shown
        return super()._format_action_invocation(action)


def help_parser(name: str) -> argparse.ArgumentParser:
    """The job's flags as one argparse parser (its --help; the templates' parameters), help overrides applied.
    Its --help shows the flags in sections (``HELP_SECTIONS``), each flag once (``OneSpellingFormatter``)."""
    job = JOBS[name]
    if not job.beam:
        return importlib.import_module(job.module).build_parser()
    module = importlib.import_module(job.module)
    required = " ".join(f"--{dest.replace('_', '-')} {dest.upper()}" for dest in job.required)
    parser = argparse.ArgumentParser(
        prog=f"textdp {name}", description=(module.__doc__ or job.description).split("\n\n")[0].replace("``", ""),
        usage=f"textdp {name} {required} [flags]".replace("  ", " "), formatter_class=OneSpellingFormatter,
        epilog="Any other argument is refused. Exit codes: 0 done, 1 failed while running, 2 refused before "
               "starting, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).")
    section_of = {}
    for cls in option_classes(job):
        before = len(parser._actions)
        cls._add_argparse_args(parser)
        for action in parser._actions[before:]:
            section_of[action.dest] = HELP_SECTION_OF_FLAG.get(action.dest, HELP_SECTIONS.get(cls.__name__, RUNNER))
    for action in parser._actions:
        if action.dest in job.help_overrides:
            action.help = job.help_overrides[action.dest]
        if action.dest in job.required and action.help and "required" not in action.help:
            action.help += " (required)"
    _sections(parser, section_of)
    hidden = [o for a in parser._actions for o in a.option_strings
              if "_" in o and "--" + o[2:].replace("_", "-") in a.option_strings]
    if hidden:
        parser.epilog = (f"Each flag of several words is also accepted with underscores instead of hyphens "
                         f"({hidden[0]}). {parser.epilog}")
    return parser


def _sections(parser: argparse.ArgumentParser, section_of: Dict[str, str]) -> None:
    """Moves the flags of the parser's plain options list into their --help sections (a flag that a flag group
    already put in an argparse group of its own, a mechanism's parameters, stays there); display only."""
    loose = parser._optionals._group_actions
    groups = {title: parser.add_argument_group(title, RUNNER_NOTE if title == RUNNER else None)
              for title in HELP_SECTION_ORDER if title in section_of.values()}
    first = {dest: index for index, dest in enumerate(FIRST_IN_SECTION)}
    for action in sorted(loose, key=lambda a: first.get(a.dest, len(first))):  # stable: the rest keep their order
        if action.dest in section_of:
            groups[section_of[action.dest]]._group_actions.append(action)
            loose.remove(action)

    def rank(group) -> tuple:
        title = group.title or ""
        if title.startswith("--mechanism "):  # a mechanism's own parameters: after the mechanism's section
            return (HELP_SECTION_ORDER.index(MECHANISM), 1)
        return (HELP_SECTION_ORDER.index(title), 0) if title in HELP_SECTION_ORDER else (-1, 0)

    parser._action_groups.sort(key=rank)  # a stable sort: the rest keep order


def _accepted_parser(job: Job) -> argparse.ArgumentParser:
    """Every flag the job accepts: Beam's own options (the parser Beam itself builds, from the
    PipelineOptions subclasses Beam defines) and the job's flag groups."""
    from apache_beam.options import pipeline_options

    parser_class = getattr(pipeline_options, "_BeamArgumentParser", argparse.ArgumentParser)
    parser = parser_class(allow_abbrev=False)
    parser.error = _refuse
    beams = [c for c in pipeline_options.PipelineOptions.__subclasses__() if c.__module__.startswith("apache_beam.")]
    for cls in {str(c): c for c in beams + option_classes(job)}.values():
        cls._add_argparse_args(parser)
    return parser


def unknown_arguments(name: str, argv: Sequence[str]) -> List[str]:
    """The arguments of ``argv`` that neither Beam nor job ``name`` accepts."""
    _, unknown = _accepted_parser(JOBS[name]).parse_known_args(list(argv))
    return unknown


def _refuse(message: str):
    raise JobRefused(message)


def _suggestion(argument: str, parser: argparse.ArgumentParser) -> str:
    flag = argument.split("=", 1)[0]
    known = [option for action in parser._actions for option in action.option_strings]
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_job_options(name: str, argv: Sequence[str]):
    """``PipelineOptions`` for the job, or ``JobRefused``: unknown arguments, bad values, missing flags. A
    ``--mechanism package.module:Class`` that does not resolve is refused first (TextdpError); one that does
    adds its class's parameter flags (``pipelines/custom_flags.py``)."""
    if JOBS[name].beam and any(str(arg).startswith("--mechanism") for arg in argv):
        from pipelines.custom_flags import argv_mechanism

        with argv_mechanism(argv, strict=True):
            return _parse_job_options(name, argv)
    return _parse_job_options(name, argv)


def _parse_job_options(name: str, argv: Sequence[str]):
    from apache_beam.options.pipeline_options import PipelineOptions

    job = JOBS[name]
    job_parser = help_parser(name)
    unknown = unknown_arguments(name, argv)
    if unknown:
        first = unknown[0]
        if first.startswith("-"):
            raise JobRefused(f"unrecognized argument {first.split('=', 1)[0]}{_suggestion(first, job_parser)}; "
                             f"see `textdp {name} --help` (nothing was run)")
        raise JobRefused(f"unexpected argument {first[:40]!r} (every textdp argument is a --flag); "
                         f"see `textdp {name} --help` (nothing was run)")
    own = [action for action in job_parser._actions
           if action.option_strings and not isinstance(action, argparse._HelpAction)]
    checker = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for action in own:  # the job's own flags: values checked with argparse's messages, the rest ignored
        kwargs = {"dest": action.dest, "default": action.default}
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            kwargs["action"] = "store_true" if isinstance(action, argparse._StoreTrueAction) else "store_false"
        else:
            kwargs.update(type=action.type, choices=action.choices, nargs=action.nargs)
            if isinstance(action, argparse._AppendAction):
                kwargs["action"] = "append"
        checker.add_argument(*action.option_strings, **kwargs)
    checker.error = _refuse  # type: ignore[assignment]
    values, _ = checker.parse_known_args(list(argv))
    for action in own:  # a flag given twice keeps only its last value, silently: refused (append flags excepted)
        if isinstance(action, argparse._AppendAction):
            continue
        given = [arg for arg in argv if arg.split("=", 1)[0] in action.option_strings]
        if len(given) > 1:
            raise JobRefused(f"{action.option_strings[0]} is given {len(given)} times; give it once")
        if given and action.default is None and getattr(values, action.dest, None) == "":  # e.g. an unset $VARIABLE
            raise JobRefused(f"{action.option_strings[0]} is empty; give a value or leave the flag out")
    missing = [dest for dest in job.required if getattr(values, dest, None) in (None, "", [])
               and getattr(values, job.instead.get(dest, ""), None) in (None, "", [])]
    if missing:
        flags_ = ", ".join("--" + dest.replace("_", "-") for dest in missing)
        raise JobRefused(f"missing required flag{'s' if len(missing) > 1 else ''} {flags_}; see `textdp {name} --help`")
    options = PipelineOptions(list(argv))
    from pipelines.flags import WorkerResourceOptions

    options.view_as(WorkerResourceOptions).validate_resources()  # thread/process counts: before anything runs
    return options


# --- running ---------------------------------------------------------------------------------------


def _with_local_runner(options):
    """Beam's default DirectRunner first tries to download the Prism runner; run locally on FnApiRunner."""
    from apache_beam.options.pipeline_options import StandardOptions

    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = "FnApiRunner"
    return standard.runner


def preflight_runner(options) -> None:
    """The runner's own needs, refused in one line before anything starts (textdp/artifact/gcs.py): DataflowRunner
    needs the GCP extra, credentials and a gs:// --temp_location; --dry_run applies to it only."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions, TestOptions

    from textdp.artifact import gcs

    cloud = options.view_as(GoogleCloudOptions)
    gcs.preflight_runner(options.view_as(StandardOptions).runner, dry_run=options.view_as(TestOptions).dry_run,
                         temp_location=cloud.temp_location, staging_location=cloud.staging_location)


# runners that start a job service from a download (Beam's own caches) unless given one: where it comes from
RUNNER_DOWNLOADS = {"PrismRunner": ("the Prism runner binary", "github.com", "--prism_location"),
                    "FlinkRunner": ("the Flink job-server jar", "repo.maven.apache.org", "--flink_job_server_jar"),
                    "SparkRunner": ("the Spark job-server jar", "repo.maven.apache.org", "--spark_job_server_jar")}


def _reachable(host: str, seconds: float = 5.0) -> bool:
    import socket

    try:
        socket.create_connection((host, 443), timeout=seconds).close()
        return True
    except OSError:
        return False


def _refuse_unstartable_runner(options) -> None:
    """A portable runner that cannot start is refused in one line before anything is touched (round 6 F15):
    PortableRunner without --job_endpoint, and Prism/Flink/Spark runners whose binary or job-server jar is
    neither given as a local file, nor in Beam's cache, nor downloadable (its host unreachable now)."""
    from apache_beam.options.pipeline_options import PortableOptions, StandardOptions

    runner = (options.view_as(StandardOptions).runner or "").split(".")[-1]
    if options.view_as(PortableOptions).job_endpoint:  # a running job service: asked when the job is submitted
        return
    if runner == "PortableRunner":
        raise JobRefused("--runner PortableRunner needs --job_endpoint (the address of a running job service, e.g. "
                         "localhost:8099); or name the runner (FlinkRunner, SparkRunner, PrismRunner)")
    if runner not in RUNNER_DOWNLOADS:
        return
    what, host, flag = RUNNER_DOWNLOADS[runner]
    given = getattr(options.view_as(StandardOptions), flag[2:], None) or options.get_all_options().get(flag[2:])
    if given:
        if "://" in str(given) or os.path.isfile(str(given)):
            return
        raise JobRefused(f"{flag} {given} is not a file")
    if runner == "PrismRunner":
        cache = os.path.expanduser("~/.apache_beam/cache/prism/bin")
        cached = os.path.isdir(cache) and any(name.startswith("prism") for name in os.listdir(cache))
    else:
        cache = options.get_all_options().get("jar_cache_dir") or os.path.expanduser("~/.apache_beam/cache/jars")
        kind = runner[:-len("Runner")].lower()
        cached = os.path.isdir(cache) and any(kind in name and name.endswith(".jar") for name in os.listdir(cache))
    if not cached and not _reachable(host):
        raise JobRefused(f"--runner {runner} needs {what}, which is not in Beam's cache and cannot be downloaded "
                         f"({host} is not reachable from here): give {flag} (a local file) or --job_endpoint, or run "
                         "with --runner FnApiRunner")


def is_dry_run(options) -> bool:
    from apache_beam.options.pipeline_options import TestOptions

    return bool(options.view_as(TestOptions).dry_run) and not is_local(options)


def is_local(options) -> bool:
    from apache_beam.options.pipeline_options import StandardOptions

    return (options.view_as(StandardOptions).runner or "FnApiRunner").split(".")[-1] in LOCAL_RUNNERS


def _quiet_beam(verbose: bool) -> None:
    """Beam's own warnings ("Discarding unparseable args", "No semi_persistent_directory") are noise to a
    user; they stay visible with --verbose."""
    level = logging.INFO if verbose else logging.CRITICAL  # a failure is reported by run_job in one line
    logging.getLogger("apache_beam").setLevel(level)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@dataclass
class Plan:
    """What a job's ``prepare()`` returns: how to build its pipeline and what it will touch.

    ``build(progress_dir)`` returns the pipeline. ``temp_parents``: directories in which the run's
    sinks may create ``beam-temp-*`` folders (removed after a failure). ``progress``: (unit, total,
    rate_of) for the progress line, or None. ``report()`` returns the lines printed after success.
    ``guard``: the run's ``textdp.outputs.OutputGuard``, whose output locks are held while it runs.
    """

    build: object
    report: object
    temp_parents: Tuple[str, ...] = ()
    progress: Optional[Tuple[str, Optional[int], str]] = None
    guard: object = None
    settle: object = None  # settle(stage): after the run however it ended (the exposure ledger: pipelines/ledger.py)
    abandon: object = None  # abandon(): the run was refused before anything ran: undo what prepare() made (lines)


def _abandon(name: str, plan: Optional[Plan]) -> None:
    """A run refused after its job's ``prepare()``: what prepare() made is undone (``Plan.abandon``)."""
    if plan is not None and plan.abandon is not None:
        for note in plan.abandon() or []:
            print(f"textdp {name}: {note}", file=sys.stderr)


def _temp_folders(parents: Sequence[str]) -> set:
    from apache_beam.io.filesystems import FileSystems

    found = set()
    for parent in parents:
        try:
            for match in FileSystems.match([FileSystems.join(parent, "beam-temp-*")]):
                found |= {m.path for m in match.metadata_list}
        except Exception:
            continue
        if "://" not in parent and os.path.isdir(parent):
            found |= {os.path.join(parent, name) for name in os.listdir(parent)
                      if name.startswith(("beam-temp-", ".textdp-tmp-"))}  # the shuffle writer's too
    return found


def _remove_temp_folders(paths) -> None:
    from apache_beam.io.filesystems import FileSystems

    for path in paths:
        try:
            if "://" not in path:
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
            else:
                FileSystems.delete([path])
        except Exception:
            continue


def _one_line(exc: BaseException, ran: bool = True) -> str:
    """A failure as one line: the error's own (textdp) message, or its type and the first line of Beam's
    message, which names the failing step. Textdp never puts input text in an exception."""
    from textdp.errors import TextdpError

    if isinstance(exc, (TextdpError, JobRefused)):
        return str(exc)
    for inner in (exc.__cause__, exc.__context__):
        if isinstance(inner, TextdpError):
            return str(inner)
    message = str(exc).strip().splitlines()
    text = message[0] if message else ""
    if not ran:  # refused while checking: nothing ran, so nothing "failed"
        return text[:300] or type(exc).__name__
    return f"the pipeline failed: {type(exc).__name__}: {text[:300]}".rstrip(": ")


class _Interrupts(list):
    """The signals a run received (in order), and whether the run is committed: from ``commit()`` on, a signal
    is noted in ``late`` and no longer interrupts (R10-8: the status must say what is on disk)."""

    def __init__(self):
        super().__init__()
        self.committed = False
        self.late: list = []
        self.held = False  # the run's bookkeeping or put-back is being done: a signal waits for its end
        self.pending = False  # a signal arrived while held

    def commit(self) -> None:
        self.committed = True  # one store: a signal handled before it interrupts, one handled after is late

    def hold(self) -> None:
        self.held = True

    def unhold(self) -> None:
        """End of the bookkeeping: a signal that arrived during it interrupts now (KeyboardInterrupt)."""
        self.held = False
        if self.pending and not self.committed:
            self.pending = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def _noting_interrupts(noted: _Interrupts, until_exit: bool = False):
    """Ctrl-C and SIGTERM as a KeyboardInterrupt, but noted first: a local runner running the DoFn in this
    process reports it as its own error ("RuntimeError: KeyboardInterrupt [while running ...]"), and the
    exit code says which signal it was (130 or 143). Once the run is committed (``noted.commit()``) a signal is
    only noted (``noted.late``); with ``until_exit`` (the command's own process) a committed run leaves these
    signals ignored when it returns, so that none arriving before the process exits turns its 0 into 130/143."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if noted.committed:  # the release is complete on disk: the run finishes normally (R10-8)
            noted.late.append(signum)
            return
        noted.append(signum)
        if noted.held:  # never inside the run's bookkeeping (it left a hidden folder and stale locks): just after it
            noted.pending = True
            return
        signal.default_int_handler(signal.SIGINT, frame)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) + _termination_signals():
        try:
            previous[signum] = signal.signal(signum, handler)
        except (OSError, ValueError):  # a signal this platform does not let Python catch
            continue
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_IGN if until_exit and noted.committed else old)


# Signals whose default action does not end the process (or that cannot be caught), and the synchronous faults (a
# handler for a real SIGSEGV would run again forever): left alone by _termination_signals.
_NOT_TERMINATING = frozenset({"SIGCHLD", "SIGCLD", "SIGCONT", "SIGURG", "SIGWINCH", "SIGTSTP", "SIGTTIN", "SIGTTOU",
                              "SIGSTOP", "SIGKILL"})
_FAULTS = frozenset({"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGIOT", "SIGTRAP", "SIGSYS", "SIGEMT"})


def signal_name(signum: int) -> str:
    """SIGQUIT..., or SIGRTMIN+n for a real-time signal that has no name of its own."""
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        low = getattr(signal, "SIGRTMIN", None)
        return f"SIGRTMIN+{int(signum) - int(low)}" if low is not None and signum > low else f"signal {int(signum)}"


def _termination_signals() -> tuple:
    """Every other catchable signal whose default action ends the process and that this process does not ignore
    (Ctrl-\\, SIGUSR1/2, SIGALRM, SIGXCPU, SIGPWR, SIGVTALRM, SIGPROF, SIGIO, SIGSTKFLT, the real-time signals...;
    not SIGINT/SIGTERM/SIGHUP, handled on their own, nor one this process ignores, such as Python's SIGPIPE and
    SIGXFSZ): handled like SIGTERM, so that --overwrite puts the earlier release back (round 7 F14; round 8 R8-1
    found the list of five names missing SIGPWR, SIGVTALRM, SIGSTKFLT, SIGIO and the real-time signals)."""
    import signal

    found = []
    for signum in sorted(int(s) for s in signal.valid_signals()):
        name = signal_name(signum)
        if name in _NOT_TERMINATING or name in _FAULTS or signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            continue
        try:
            if signal.getsignal(signum) != signal.SIG_IGN:  # one the process ignores stays ignored
                found.append(signum)
        except (OSError, ValueError):
            continue
    return tuple(found)


def _interruption(name: str, noted: list, what: str) -> int:
    """The one line and the exit code of a run stopped by Ctrl-C (130), SIGTERM (143) or SIGHUP (129: the
    terminal or ssh session closed)."""
    import signal

    if signal.SIGHUP in noted:
        print(f"textdp {name}: hung up (SIGHUP){what}", file=sys.stderr)
        return EXIT_HUNG_UP
    other = [signum for signum in noted if signum not in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    if other:
        print(f"textdp {name}: terminated ({signal_name(other[0])}){what}", file=sys.stderr)
        return 128 + int(other[0])
    terminated = signal.SIGTERM in noted
    print(f"textdp {name}: {'terminated (SIGTERM)' if terminated else 'interrupted'}{what}", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


@contextlib.contextmanager
def _progress(name: str, plan: Plan, directory: Optional[str]):
    monitor = None
    if directory and plan.progress:
        from textdp.progress import ProgressMonitor

        unit, total, rate_of = plan.progress
        monitor = ProgressMonitor(directory, name, unit, total, rate_of).start()
    try:
        yield
    finally:
        if monitor is not None:
            monitor.stop(final_line=True)


PROGRESS_INTERVAL_RANGE = (0.1, 86400.0)  # seconds between progress lines (TEXTDP_PROGRESS_INTERVAL)


def check_environment() -> None:
    """The environment settings a job reads (TEXTDP_PROGRESS_INTERVAL, TEXTDP_PROGRESS_DIR), checked before
    anything runs or is removed: a bad one is a one-line refusal (JobRefused, exit 2)."""
    interval = os.environ.get("TEXTDP_PROGRESS_INTERVAL")
    if interval:
        low, high = PROGRESS_INTERVAL_RANGE
        try:
            seconds = float(interval)
        except ValueError:
            seconds = float("nan")
        if not low <= seconds <= high:  # nan, inf, 0, negative, 1e-300 (a busy loop)
            raise JobRefused(f"TEXTDP_PROGRESS_INTERVAL={interval[:40]!r} is not a number of seconds from {low:g} "
                             f"to {high:g}: set it so, or unset it (30 seconds; 2 on a terminal)")
    base = os.environ.get("TEXTDP_PROGRESS_DIR")
    if base and not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):
        raise JobRefused(f"TEXTDP_PROGRESS_DIR={base[:200]!r} is not a writable directory: create it, or unset it")


def run_job(name: str, argv: Optional[Sequence[str]] = None, until_exit: bool = False) -> int:
    """Run job ``name`` with command-line ``argv``; returns the exit code (see the module docstring).
    ``until_exit``: the caller is the command's process and exits with the code returned (pipelines/cli.py): once
    the run is committed, terminating signals stay ignored until then."""
    interrupted = _Interrupts()
    if not JOBS[name].beam:  # a single-process job (build-index) handles its own signals
        return _run_job(name, argv, interrupted)
    with _noting_interrupts(interrupted, until_exit):
        return _run_job(name, argv, interrupted)


def _run_job(name: str, argv: Optional[Sequence[str]], interrupted: list) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    job = JOBS[name]
    if not job.beam:  # a single-process job (build-index) handles its own signals
        return _run_prepared(name, argv, interrupted, job)
    state = {"opened": False}
    try:  # the job's modules take seconds to import on a loaded machine: Ctrl-C or SIGTERM there is one line too
        return _run_prepared(name, argv, interrupted, job, state)
    except KeyboardInterrupt:  # what escapes _run_prepared's own handling before it opened anything (round 9, R9-13)
        if state["opened"]:
            raise
        return _interruption(name, interrupted, " before the run started; nothing was written")


def _run_prepared(name: str, argv: List[str], interrupted: list, job, state: Optional[dict] = None) -> int:
    if "-h" in argv or "--help" in argv:
        with contextlib.ExitStack() as scope:
            if job.beam and any(arg.startswith("--mechanism") for arg in argv):  # its own flags' group too
                from pipelines.custom_flags import argv_mechanism

                scope.enter_context(argv_mechanism(argv))
            help_parser(name).print_help()
        return EXIT_OK
    module = importlib.import_module(job.module)
    if not job.beam:
        return module.run(argv)
    verbose = "--verbose" in argv
    _quiet_beam(verbose)
    from textdp.errors import TextdpError  # not needed for --help

    say = lambda message: print(f"textdp {name}: error: {message}", file=sys.stderr)  # noqa: E731
    plan, progress_dir = None, None
    try:
        options = parse_job_options(name, argv)
        check_environment()  # every environment setting the run reads, before anything is read or written
        _with_local_runner(options)
        preflight_runner(options)  # Dataflow: the GCP extra, credentials, --temp_location; in seconds
        plan = module.prepare(options)
        _refuse_unstartable_runner(options)  # after the job's own checks (they name the flags); before any lock or file
        before = _temp_folders(plan.temp_parents)  # other runs' temporary folders are never touched
        if plan.guard is not None:  # <output>.lock for every output, held until the run ends (textdp/outputs.py)
            plan.guard.acquire()
            for note in plan.guard.notes:
                print(f"textdp {name}: {note}", file=sys.stderr)
    except KeyboardInterrupt:  # e.g. while the default artifact builds (its staging folder is removed)
        if plan is not None and plan.guard is not None:
            plan.guard.release()
        return _interruption(name, interrupted, " before the run started; nothing was written")
    except (JobRefused, TextdpError, ValueError, LookupError) as exc:
        if plan is not None and plan.guard is not None:
            plan.guard.release()
        say(_one_line(exc, ran=False))
        _abandon(name, plan)
        return EXIT_REFUSED
    if state is not None:
        state["opened"] = True  # from here on _run_prepared reports every interruption itself
    stage = "build"  # "build": nothing ran or was removed; "removed": --overwrite moved files aside; "run"
    finished = False  # the pipeline ran to its end: the locks stay held until the report judged it
    try:
        if is_local(options):  # TEXTDP_PROGRESS_DIR: a directory of one's own to watch (benchmarks); emptied after
            base = os.environ.get("TEXTDP_PROGRESS_DIR")
            progress_dir = tempfile.mkdtemp(prefix="textdp-progress-", dir=base or None)
        earlier = plan.guard is not None and bool(plan.guard.earlier)
        pipeline = plan.build(progress_dir)  # everything that can be checked is, before an earlier file goes
        if plan.guard is not None and not is_dry_run(options):  # --overwrite: the earlier files (if the build
            from apache_beam.io.filesystems import FileSystems

            plan.guard.remove_earlier(FileSystems.delete)  # did not move them aside); a dry run touches nothing
            stage = "removed" if earlier else stage
        with _progress(name, plan, progress_dir):
            stage = "run"
            pipeline.run().wait_until_finish()
        finished = True
    except BaseException as exc:
        interrupted.hold()  # R11-8: a second signal (Ctrl-C twice, SIGINT then SIGTERM) never stops the put-back
        _remove_temp_folders(_temp_folders(plan.temp_parents) - before)
        back = _put_back(plan)  # --overwrite: the earlier release returns to its names (round 6 F14)
        if interrupted or isinstance(exc, KeyboardInterrupt):  # a local runner may wrap it in its own error
            return _interruption(name, interrupted, "; the run's temporary files were removed" + back)
        if not isinstance(exc, Exception):
            raise
        if verbose:
            traceback.print_exc()
        if stage == "build":  # refused while building the job: nothing ran, nothing was removed
            say(_one_line(exc, ran=False))
            return EXIT_REFUSED
        if stage == "removed":  # cannot happen by design (the monitor's setting is checked first); said plainly
            say(f"{_one_line(exc, ran=False)} (nothing ran{back or '; --overwrite had removed the earlier files'})")
            return EXIT_FAILED
        say(_one_line(exc) + back + ("" if verbose else " (--verbose shows the traceback)"))
        return EXIT_FAILED
    finally:
        interrupted.hold()  # a signal in here interrupts at the report's start, where the release is put back
        if progress_dir:
            shutil.rmtree(progress_dir, ignore_errors=True)
        if plan.guard is not None:  # the run record (the files this run wrote: --overwrite's list), then the locks
            if stage != "build":  # a refusal while building wrote nothing: the earlier record stays as it was
                plan.guard.write_records()
        if plan.settle is not None:  # commits what the run wrote, or frees what it reserved; never raises
            for note in plan.settle(stage):
                print(f"textdp {name}: {note}", file=sys.stderr)
        if plan.guard is not None and not finished:
            plan.guard.release()
        if stage == "build" and not finished:  # refused (or interrupted) while building: nothing ran
            _abandon(name, plan)
    try:
        if is_dry_run(options):  # Beam built and validated the job graph and returned: nothing ran or was written
            from apache_beam.options.pipeline_options import StandardOptions

            print(f"textdp {name}: dry run: {options.view_as(StandardOptions).runner} built and validated the job "
                  "graph; no job was submitted and no output file was written")
            return EXIT_OK
        try:  # a run can finish and still have done nothing that was asked (e.g. no record to audit)
            interrupted.unhold()
            lines = plan.report()
            interrupted.commit()  # the commit point: a signal from here on no longer stops the run (R10-8)
        except (TextdpError, KeyboardInterrupt) as exc:
            interrupted.hold()  # R11-8: a signal now waits until the earlier release is back and the line is said
            back = _put_back(plan, keep=isinstance(exc, TextdpError))  # the run finished: its files say why it failed
            if back and plan.guard is not None:
                plan.guard.write_records()
            if isinstance(exc, KeyboardInterrupt):
                return _interruption(name, interrupted, back)
            say(str(exc) + back)
            return EXIT_FAILED
        kept = []
        if plan.guard is not None:
            kept = plan.guard.commit_earlier() or []  # the run succeeded: the earlier run's files moved aside are removed
        from textdp.progress import console_print

        for line in lines:  # the release is committed: a console that cannot take a line never makes it exit 1
            console_print(line)
        for note in kept:
            console_print(f"textdp {name}: {note}", sys.stderr)
        if interrupted.late:  # what is on disk is the completed run: exit 0 says so (R10-8)
            console_print(f"textdp {name}: {signal_name(interrupted.late[0])} arrived after the run completed "
                          "(its files are written as reported above): not interrupted, exit 0", sys.stderr)
        return EXIT_OK
    finally:
        if plan.guard is not None:
            plan.guard.release()


def _put_back(plan: Plan, keep: bool = False) -> str:
    """After a failure: the earlier run's files that --overwrite moved aside are put back at their names, and this
    run's files removed (``keep``: a run that finished, judged failed, keeps them in a hidden folder next to them;
    textdp/outputs.py ``restore_earlier``); what to add to the one line."""
    if plan is None or plan.guard is None or not plan.guard.set_aside:
        return ""
    try:
        kept = plan.guard.restore_earlier(keep=keep)
    except Exception:  # never hides the failure itself; the hidden folder .textdp-earlier-* still holds them
        return "; the earlier run's files could not all be put back: see the .textdp-earlier-* folder"
    if kept is None:
        return ""
    unrestored = plan.guard.unrestored
    if unrestored:  # R11-5: never "put back" when one was not
        from textdp.outputs import shown

        name, where = unrestored[0]
        more = f" and {len(unrestored) - 1} more" if len(unrestored) > 1 else ""
        return (f"; the earlier run's files were put back except {len(unrestored)}: {shown(name)}{more} could not be "
                f"(something else now has its name), so that file is still at {shown(where)}: move the thing at its "
                "name away, then move it back")
    if kept:  # the names the line gave above now hold the earlier run's files again (round 9, R9-2)
        return (f"; the earlier run's files were put back at those names (--overwrite replaces them only when a run "
                f"succeeds), so this run's files named above (its error records and summary) are now in "
                f"{', '.join(kept)}")
    return "; the earlier run's files were put back (--overwrite replaces them only when a run succeeds)"
