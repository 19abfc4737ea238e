"""Every registered mechanism and a custom one, tested from their classes' declarations alone (issue 26, items
1, 2, 3 and 6).

Nothing here names a mechanism or a parameter: the cases come from ``textdp.mechanisms.REGISTRY`` plus the
test-support mechanism of tests/custom_mechanism.py (a user's own class, which textdp reaches by its import path
on the command line and as the class object in Python), and each class's ``PARAMETERS`` (their ``example``
values) and ``EXAMPLE``, so a mechanism added to the registry is tested here without editing this file. For
each mechanism:

* each declared parameter round-trips flag -> template parameter -> Python keyword -> summary key: the
  template metadata of every job with mechanism flags has a parameter of that name; ``--<name>=v`` (the
  template's spelling) and ``--<name-with-hyphens>=v`` (the CLI's) both parse, through the job's own
  parser, into the keyword ``<name>`` of ``mechanism_kwargs()``; ``textdp.Privatizer`` built with that
  keyword reports the value under ``<name>`` in ``parameters()``, the dict the summary writes as its
  ``mechanism`` section (checked against a real summary by the privatize run below). A custom mechanism's
  parameters are no template parameters (a template's parameters are fixed when it is built): flag ->
  keyword -> summary;
* the class's declarations agree with the mechanism it builds: the artifact parts, the nearest-word
  search (``--nn``), the audit's closed-form kernel, the exact law (a probability vector), the
  coverage of the guarantee and the finiteness of its per-token epsilon_0;
* ``--help`` lists the flags in one argument group per mechanism;
* it runs through ``textdp privatize`` (FnApiRunner), ``textdp.Privatizer`` and ``transforms.Privatize``
  on two short records over the 5,000-word fixture with its K=40 neighbour table, and through calibrate and
  audit (their CLI, and their Python entry point ``build_pipeline(PipelineOptions(..., mechanism=<class>))``).

The distributions themselves are tested statistically in each mechanism's own test file; nothing here is
random beyond a word count (deterministic: every word is released as one word).
"""

from __future__ import annotations

import json
import math

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that

import textdp
from pipelines.cli import main as cli_main
from pipelines.flags import MechanismOptions
from pipelines.jobs import help_parser, parse_job_options
from templates import jobs as template_jobs
from tests.custom_mechanism import IMPORT_PATH, CappedExponential
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import ALWAYS_NEEDED, open_artifact
from textdp.audit.attacks import kernel_of
from textdp.audit.pairs import bound_text
from textdp.calibration.statistics import exact_distribution_of
from textdp.mechanisms import REGISTRY, all_parameters, artifact_needs, make_mechanism, users_of
from textdp.mechanisms.base import Mechanism
from textdp.search.geometry import distance_row
from transforms import Privatize

RUNNER = ["--runner=FnApiRunner"]
EPSILON = 3.0
TEXTS = ["the movie was good", "a quiet room near the station"]
JOBS_WITH_MECHANISMS = ("privatize", "calibrate", "audit")
REQUIRED = {"privatize": ["--input=in.txt", "--output=out", "--epsilon=3"], "calibrate": ["--output=out"],
            "audit": ["--output=out"]}
# every registered mechanism, and the test's own (not registered: reached by import path and class object)
MECHANISMS = dict(REGISTRY.items(), **{CappedExponential.name: CappedExponential})
FLAG_CASES = [(name, param.name) for name, cls in MECHANISMS.items() for param in cls.PARAMETERS if param.cli]


def cli_reference(name: str) -> str:
    """How the command line names the mechanism: its registered name, else its import path."""
    return name if name in REGISTRY else IMPORT_PATH


def example_parameters(cls, param=None) -> dict:
    """The class's EXAMPLE, plus ``param``'s example and the parameters it needs that the class takes."""
    own = {p.name for p in cls.PARAMETERS}
    params = dict(cls.EXAMPLE)
    if param is not None:
        params.update((key, value) for key, value in param.example_with if key in own)
        params[param.name] = param.example
    return params


def flag(name: str, value, hyphens: bool = True) -> str:
    return f"--{name.replace('_', '-') if hyphens else name}={value}"


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


# --- declarations ------------------------------------------------------------------------------------


def test_the_registry_is_built_from_mechanism_classes():
    assert REGISTRY and all(issubclass(cls, Mechanism) and cls.name == name for name, cls in REGISTRY.items())
    assert all_parameters()  # one declaration per public name (raises on two different ones)
    assert CappedExponential.name not in REGISTRY  # the custom mechanism is reached without registering it


@pytest.mark.parametrize("mechanism, name", FLAG_CASES + [
    (n, p.name) for n, c in MECHANISMS.items() for p in c.PARAMETERS if not p.cli])
def test_every_parameter_declares_a_valid_example(mechanism, name):
    param = MECHANISMS[mechanism].parameter(name)
    assert param.help and param.example is not None and param.example != param.default
    if param.cli:
        param.check(param.example)  # the declared check accepts its own example
        assert param.type in (int, float, str) and (param.type is str) == bool(param.choices)


@pytest.mark.parametrize("mechanism, name", FLAG_CASES)
def test_a_parameter_round_trips_flag_template_keyword_summary(mechanism, name, neighbour_artifact_dir):  # noqa: F811
    cls = MECHANISMS[mechanism]
    param = cls.parameter(name)
    params = example_parameters(cls, param)
    for job in JOBS_WITH_MECHANISMS:
        template_names = [entry["name"] for entry in template_jobs.metadata(job)["parameters"]]
        assert (name in template_names) == (mechanism in REGISTRY), f"{job}'s template and parameter {name!r}"
        for hyphens in (False, True):  # the template's spelling (--name=VALUE) and the CLI's
            argv = REQUIRED[job] + [f"--mechanism={cli_reference(mechanism)}"] + [
                flag(k, v, hyphens) for k, v in params.items()]
            kwargs = parse_job_options(job, argv).view_as(MechanismOptions).mechanism_kwargs()
            assert kwargs[name] == param.example and type(kwargs[name]) is param.type, (job, argv, kwargs)
    privatizer = textdp.Privatizer(epsilon=EPSILON, mechanism=cls, artifact=neighbour_artifact_dir, **kwargs)
    assert privatizer.parameters()[name] == param.example


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_declarations_agree_with_the_mechanism(mechanism, artifact):
    cls = MECHANISMS[mechanism]
    mech = make_mechanism(cls, artifact, EPSILON, **example_parameters(cls))
    assert isinstance(mech, cls) and mech.name == mechanism and mech.parameters()["mechanism"] == mechanism
    # what the run reads, and --nn
    assert artifact_needs(cls) == artifact_needs(cli_reference(mechanism)) == ALWAYS_NEEDED + cls.artifact_parts()
    assert ("neighbours" in artifact_needs(cls)) == cls.NEEDS_NEIGHBOUR_TABLE
    takes_nn = any(p.name == "nn" for p in cls.PARAMETERS)
    assert takes_nn == cls.SEARCHES_NEAREST
    if takes_nn:
        assert "annoy" in artifact_needs(cls, "annoy")
    # the exact law and the audit's kernel exist exactly where declared
    word = 42
    row = distance_row(np.asarray(artifact.vectors), word, metric=getattr(mech, "metric", "euclidean"))
    law = exact_distribution_of(mech, row, word)
    assert (law is not None) == cls.EXACT_LAW
    if law is not None:
        assert law.shape == (artifact.vocab_size,) and np.all(law >= 0) and math.isclose(law.sum(), 1.0, rel_tol=1e-9)
    assert (kernel_of(mech) is not None) == cls.AUDIT_KERNEL
    # the guarantee: covered words, and a finite per-token epsilon_0 exactly when it covers all words
    coverage = mech.privacy_statement()["coverage"]["covered"]
    assert coverage in ("all", "subset", "none")
    assert math.isfinite(mech.token_epsilon0(1.0)) == (coverage == "all")
    assert cls.BOUND_TEXT in bound_text(cls) and cls.BOUND_TEXT in bound_text(cli_reference(mechanism))
    assert cls.BATCH_TOKENS >= 1


@pytest.mark.parametrize("job", JOBS_WITH_MECHANISMS)
def test_help_groups_the_flags_by_mechanism(job):
    groups = {group.title: {action.dest for action in group._group_actions}
              for group in help_parser(job)._action_groups}
    placed = set()
    for name, cls in REGISTRY.items():
        own = {p.name for p in cls.PARAMETERS if p.cli} - placed
        assert groups.get(f"--mechanism {name}", set()) == own
        placed |= own
    assert placed == {name for name, param in all_parameters().items() if param.cli}
    flags_help = {action.dest: action.help for action in help_parser(job)._actions}
    for name in placed:  # each help names every mechanism that takes the flag
        assert flags_help[name].startswith(", ".join(users_of(name)) + ": ")


@pytest.mark.parametrize("job", JOBS_WITH_MECHANISMS)
def test_help_shows_a_custom_mechanisms_flags_in_its_own_group(job, capsys):
    """``--mechanism package.module:Class --help`` adds the class's flag group, as a registered mechanism has;
    without it the group is absent (the flags of an unknown class cannot be listed)."""
    own = [p for p in CappedExponential.PARAMETERS if p.cli]
    assert cli_main([job, f"--mechanism={IMPORT_PATH}", "--help"]) == 0
    shown = capsys.readouterr().out
    assert f"--mechanism {CappedExponential.name}:" in shown
    assert all(param.flags[0] in shown for param in own)
    assert cli_main([job, "--help"]) == 0
    plain = capsys.readouterr().out
    assert f"--mechanism {CappedExponential.name}:" not in plain and not any(p.flags[0] in plain for p in own)


@pytest.mark.parametrize("mechanism, name", [(n, p.name) for n, c in MECHANISMS.items() for p in c.PARAMETERS
                                             if not p.cli])
def test_a_python_only_parameter_is_a_keyword_and_no_flag(mechanism, name, artifact):
    """A parameter only Python can give (a list of ids) is no flag or template parameter of any job, and
    the keyword of that name builds the mechanism (its summary shows what it chose, e.g. a count)."""
    for job in JOBS_WITH_MECHANISMS:
        assert name not in [entry["name"] for entry in template_jobs.metadata(job)["parameters"]]
        assert name not in {action.dest for action in help_parser(job)._actions}
    cls = MECHANISMS[mechanism]
    param = cls.parameter(name)
    default = make_mechanism(cls, artifact, EPSILON, **example_parameters(cls))
    given = make_mechanism(cls, artifact, EPSILON, **example_parameters(cls, param))
    assert given.parameters() != default.parameters()


# --- every mechanism through privatize, the API and the transform ---------------------------------------


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_privatize_and_the_api_run_every_mechanism(mechanism, neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    """The CLI by name or import path, the API with the class object: the same summary's mechanism section."""
    cls = MECHANISMS[mechanism]
    params = example_parameters(cls)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    output = str(tmp_path / "out")
    argv = ["privatize", f"--input={source}", f"--output={output}", f"--epsilon={EPSILON:g}",
            f"--mechanism={cli_reference(mechanism)}", f"--artifact={neighbour_artifact_dir}"] + [
                flag(k, v) for k, v in params.items()] + RUNNER
    assert cli_main(argv) == 0
    capsys.readouterr()
    summary = json.load(open(output + "-summary.json", encoding="utf-8"))
    assert summary["mechanism"]["mechanism"] == mechanism  # the class's name, also for an import path
    # a mechanism that is not textdp's says its statement is its own (not derived or tested by textdp)
    assert ("statement_source" in summary["privacy"]) == (mechanism not in REGISTRY)
    privatizer = textdp.Privatizer(epsilon=EPSILON, mechanism=cls, artifact=neighbour_artifact_dir, **params)
    expected = dict(privatizer.parameters())
    expected.pop("oov_policy")
    assert summary["mechanism"] == json.loads(json.dumps(expected))  # the summary's keys are the public names
    assert summary["records"]["in"] == summary["records"]["out"] == len(TEXTS)
    released = privatizer.privatize(TEXTS)
    assert [len(text.split(" ")) for text in released] == [len(text.split(" ")) for text in TEXTS]


def _word_counts(expected):
    def check(actual):
        assert sorted(len(text.split(" ")) for text in actual) == sorted(expected)
    return check


def test_the_transform_runs_every_mechanism(neighbour_artifact_dir):  # noqa: F811
    counts = [len(text.split(" ")) for text in TEXTS]
    with test_pipeline.TestPipeline(runner="FnApiRunner") as pipeline:
        texts = pipeline | beam.Create(TEXTS)
        for name, cls in MECHANISMS.items():  # the class object, as RunInference takes a handler
            result = texts | f"Privatize {name}" >> Privatize(epsilon=EPSILON, mechanism=cls,
                                                              artifact=neighbour_artifact_dir, seed=1,
                                                              **example_parameters(cls))
            assert_that(result.released, _word_counts(counts), label=f"released {name}")
            assert_that(result.errors, _word_counts([]), label=f"errors {name}")


def run_python_entry(module, argv, cls) -> None:
    """A job's Python entry point with the mechanism given as the class object (Beam style: an object in the
    pipeline options), its parameters as keywords: ``build_pipeline(PipelineOptions(argv, mechanism=cls, ...))``."""
    options = PipelineOptions(argv + RUNNER, mechanism=cls, **example_parameters(cls))
    module.build_pipeline(options).run().wait_until_finish()


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_calibrate_reports_the_exact_law_where_the_class_declares_one(mechanism, neighbour_artifact_dir,  # noqa: F811
                                                                       tmp_path, capsys):
    """calibrate runs every mechanism (CLI: by name or import path; Python: the class); exact N_w and S_w appear
    exactly for the classes that declare an exact law, and the report names the mechanism's own closed form (not
    another mechanism's)."""
    from pipelines import calibrate

    cls = MECHANISMS[mechanism]
    common = [f"--artifact={neighbour_artifact_dir}", "--words=2", "--samples=40", f"--epsilons={EPSILON:g}",
              "--max-nw=1", "--min-sw=-1"]  # targets every epsilon meets: the summary states the recommended one's law
    out = str(tmp_path / "cal")
    argv = ["calibrate", f"--mechanism={cli_reference(mechanism)}", f"--output={out}"] + common
    assert cli_main(argv + [flag(k, v) for k, v in example_parameters(cls).items()] + RUNNER) == 0
    capsys.readouterr()
    run_python_entry(calibrate, common + [f"--output={tmp_path / 'py'}"], cls)
    for directory in (out, str(tmp_path / "py")):
        summary = json.load(open(f"{directory}/summary.json", encoding="utf-8"))
        assert summary["mechanism"] == mechanism
        assert ("statement_source" in summary["privacy_statement"]) == (mechanism not in REGISTRY)
        assert ("n_w_exact" in summary["statistics"][f"{EPSILON:g}"]) == cls.EXACT_LAW
        assert summary["parameters"][f"{EPSILON:g}"] == json.loads(json.dumps(
            make_mechanism(cls, open_artifact(neighbour_artifact_dir), EPSILON, **example_parameters(cls)).parameters()))
    report = open(f"{out}/report.html", encoding="utf-8").read()
    assert (f"N_w exact ({cls.title()} closed form)" in report) == cls.EXACT_LAW
    others = {other.title() for name, other in MECHANISMS.items() if name != mechanism} - {cls.title()}
    assert not any(f"({title} closed form)" in report for title in others)


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_audit_runs_every_mechanism(mechanism, neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    """audit's self-check runs every mechanism (CLI: by name or import path; Python: the class): bounds from its
    token_epsilon0, draws from its privatize_ids; no mechanism shows a violation, and a mechanism whose guarantee
    covers every word passes while one that covers a subset or none reports that no guarantee is claimed."""
    from pipelines import audit

    cls = MECHANISMS[mechanism]
    common = [f"--artifact={neighbour_artifact_dir}", "--epsilons=8", "--pairs=3", "--draws=1000",
              "--no-oov-pairs", "--seed=2", "--checks=self-check"]
    out = str(tmp_path / "audit")
    argv = ["audit", f"--mechanism={cli_reference(mechanism)}", f"--output={out}"] + common
    assert cli_main(argv + [flag(k, v) for k, v in example_parameters(cls).items()] + RUNNER) == 0
    capsys.readouterr()
    run_python_entry(audit, common + [f"--output={tmp_path / 'py'}"], cls)
    coverage = make_mechanism(cls, open_artifact(neighbour_artifact_dir), 8.0,
                              **example_parameters(cls)).privacy_statement()["coverage"]["covered"]
    for directory in (out, str(tmp_path / "py")):
        summary = json.load(open(f"{directory}/summary.json", encoding="utf-8"))
        assert summary["mechanism"] == mechanism
        assert ("statement_source" in summary["privacy_statement"]) == (mechanism not in REGISTRY)
        check = summary["self_check"]
        assert check["per_epsilon"]["8"]["violations"] == 0
        assert (check["status"] == "pass") == (coverage == "all"), check["status"]
