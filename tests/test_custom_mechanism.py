"""Bring your own mechanism (issue 26, item 3): the three ways to name one, and every refusal.

A user's mechanism is named by an import path (``--mechanism package.module:Class``), given as the class object
(``textdp.Privatizer``, ``transforms.Privatize``, calibrate's and audit's ``build_pipeline``), or registered by an
installed package through the entry point group ``textdp.mechanisms``. Resolution is
``textdp.mechanisms.mechanism_class`` alone. The entry point tests write a real ``<dist>-0.dist-info`` directory
(METADATA + entry_points.txt) into a directory put on ``sys.path``: importlib.metadata discovers it as it
discovers an installed package (no mock). tests/test_registry.py runs the custom mechanism through every job.

Every refusal is one line, ``textdp <job>: error: ...``, exit code 2, before anything runs (no output file);
in Python a ``ParameterError`` (a TextdpError and a ValueError).
"""

from __future__ import annotations

import json
import os
import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

import textdp
from pipelines.cli import main as cli_main
from tests.custom_mechanism import IMPORT_PATH, CappedExponential, Impostor, Nameless
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.errors import ParameterError, TextdpError
from textdp.mechanisms import BUILT_IN, REGISTRY, mechanism_class, mechanism_reference
from textdp.mechanisms.base import Parameter
from transforms import Privatize

RUNNER = ["--runner=FnApiRunner"]
TEXTS = ["the movie was good", "a quiet room near the station"]
DIST = "textdp_byo_example"


def install_entry_point(directory, name: str, target: str) -> None:
    """What pip leaves in site-packages for a package that registers mechanism ``name`` = ``target``."""
    info = directory / f"{DIST}-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[textdp.mechanisms]\n{name} = {target}\n", encoding="utf-8")


@pytest.fixture
def corpus(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return str(source)


def privatize_argv(corpus_path, output, artifact, *extra) -> list:
    return ["privatize", f"--input={corpus_path}", f"--output={output}", "--epsilon=3", f"--artifact={artifact}",
            *extra] + RUNNER


def refused(capsys, argv, *phrases) -> str:
    """Run ``argv``; assert exit 2 with one error line holding ``phrases``; return the line."""
    assert cli_main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"textdp {argv[0]}: error: "), err
    for phrase in phrases:
        assert phrase in err[0], err[0]
    return err[0]


# --- the three ways to name a mechanism ---------------------------------------------------------------------


def test_an_entry_point_registers_a_mechanism_by_name(tmp_path, monkeypatch, corpus, neighbour_artifact_dir,  # noqa: F811
                                                      capsys):
    site = tmp_path / "site"
    site.mkdir()
    assert CappedExponential.name not in REGISTRY
    install_entry_point(site, CappedExponential.name, IMPORT_PATH)
    monkeypatch.syspath_prepend(str(site))
    assert CappedExponential.name in REGISTRY and REGISTRY[CappedExponential.name] is CappedExponential
    assert mechanism_class(CappedExponential.name) is CappedExponential
    assert mechanism_reference(CappedExponential) == CappedExponential.name  # configs carry the name now
    output = str(tmp_path / "out")
    assert cli_main(privatize_argv(corpus, output, neighbour_artifact_dir, f"--mechanism={CappedExponential.name}",
                                   "--distance-cap=2")) == 0
    capsys.readouterr()
    summary = json.load(open(output + "-summary.json", encoding="utf-8"))
    assert summary["mechanism"]["mechanism"] == CappedExponential.name
    assert summary["mechanism"]["distance_cap"] == 2.0
    released = textdp.Privatizer(epsilon=3, mechanism=CappedExponential.name, artifact=neighbour_artifact_dir,
                                 distance_cap=2.0).privatize(TEXTS, seed=1)
    assert [len(t.split(" ")) for t in released] == [len(t.split(" ")) for t in TEXTS]


def test_an_entry_point_that_shadows_a_built_in_is_refused(tmp_path, monkeypatch, corpus, neighbour_artifact_dir,  # noqa: F811
                                                           capsys):
    site = tmp_path / "site"
    site.mkdir()
    built_in = next(iter(BUILT_IN))
    install_entry_point(site, built_in, IMPORT_PATH)
    monkeypatch.syspath_prepend(str(site))
    output = str(tmp_path / "out")
    refused(capsys, privatize_argv(corpus, output, neighbour_artifact_dir, f"--mechanism={built_in}"),
            DIST, f"named {built_in!r}", "built-in")
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]  # nothing ran
    with pytest.raises(ParameterError, match=f"registers a mechanism named {built_in!r}"):
        textdp.Privatizer(epsilon=3, mechanism=built_in, artifact=neighbour_artifact_dir)
    # the flags are still built (from textdp's own mechanisms): --help works, and a Beam pipeline of other code in
    # the same process still parses its options
    assert cli_main(["privatize", "--help"]) == 0 and "--mechanism" in capsys.readouterr().out
    from apache_beam.options.pipeline_options import PipelineOptions

    assert PipelineOptions(["--runner=FnApiRunner"]).get_all_options()["runner"] == "FnApiRunner"


def test_the_class_object_goes_through_the_api_and_pickles_as_its_import_path(neighbour_artifact_dir):  # noqa: F811
    privatizer = textdp.Privatizer(epsilon=3, mechanism=CappedExponential, artifact=neighbour_artifact_dir,
                                   distance_cap=1.5)
    assert privatizer.parameters()["mechanism"] == CappedExponential.name
    assert privatizer.parameters()["distance_cap"] == 1.5
    copy = pickle.loads(pickle.dumps(privatizer))
    assert copy.parameters() == privatizer.parameters()
    assert mechanism_reference(CappedExponential) == IMPORT_PATH
    statement = privatizer.privacy_statement()
    assert "exp(3 * min(d(x, x'), 1.5))" in statement["per_token"]  # its own statement, said to be its own:
    assert "tests.custom_mechanism.CappedExponential is not one of textdp's built-in" in statement["statement_source"]


def test_a_class_that_cannot_be_imported_is_carried_as_itself(neighbour_artifact_dir):  # noqa: F811
    """A class defined in a function has no import path: the transform's config carries the class (Beam pickles
    it), and the run releases with it."""

    class Local(CappedExponential):
        name = "local-capped"

    assert mechanism_reference(Local) is Local
    transform = Privatize(epsilon=3, mechanism=Local, artifact=neighbour_artifact_dir, seed=1, distance_cap=1.0)
    assert transform.config.mechanism is Local
    with test_pipeline.TestPipeline(runner="FnApiRunner") as pipeline:
        result = pipeline | beam.Create(TEXTS) | transform
        counts = result.released | beam.Map(lambda text: len(text.split(" ")))
        assert_that(counts, equal_to([len(t.split(" ")) for t in TEXTS]))


def test_the_custom_parameter_is_checked_like_a_built_in_ones(tmp_path, corpus, neighbour_artifact_dir,  # noqa: F811
                                                               capsys):
    """Its declared range (distance_cap > 0) refuses a bad flag before the run, and a bad keyword in Python."""
    output = str(tmp_path / "out")
    refused(capsys, privatize_argv(corpus, output, neighbour_artifact_dir, f"--mechanism={IMPORT_PATH}",
                                   "--distance-cap=-1"), "distance_cap must be > 0")
    with pytest.raises(ParameterError, match="distance_cap must be > 0"):
        textdp.Privatizer(epsilon=3, mechanism=CappedExponential, artifact=neighbour_artifact_dir, distance_cap=0)
    with pytest.raises(ParameterError, match="distance_cap must be > 0"):
        Privatize(epsilon=3, mechanism=CappedExponential, artifact=neighbour_artifact_dir, distance_cap=-2.0)
    with pytest.raises(ParameterError, match="epsilon must be"):
        textdp.Privatizer(epsilon=0, mechanism=CappedExponential, artifact=neighbour_artifact_dir)
    # a registered mechanism's flag does not apply to it; its own flag does not exist without it
    refused(capsys, privatize_argv(corpus, output, neighbour_artifact_dir, f"--mechanism={IMPORT_PATH}",
                                   "--gamma=3"), "--gamma applies to --mechanism")
    refused(capsys, privatize_argv(corpus, output, neighbour_artifact_dir, "--distance-cap=2"),
            "unrecognized argument --distance-cap")
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]


# --- refusals of the reference itself ---------------------------------------------------------------------


REFUSED_PATHS = [
    ("tests.no_such_module:Mechanism", "cannot be imported (ModuleNotFoundError"),
    ("tests.custom_mechanism:NoSuchClass", "cannot be imported (AttributeError"),
    ("tests.custom_mechanism:NotAMechanism", "is not a subclass of textdp.mechanisms.base.Mechanism"),
    ("tests.custom_mechanism:DISTANCE_CAP", "is not a subclass of textdp.mechanisms.base.Mechanism"),
    ("tests.custom_mechanism:Nameless", "has no usable name"),
    ("tests.custom_mechanism:Impostor", "is named 'madlib', the name of a different registered mechanism"),
    ("no-such-mechanism", "unknown mechanism 'no-such-mechanism'"),
]


@pytest.mark.parametrize("job", ["privatize", "calibrate", "audit"])
@pytest.mark.parametrize("reference, phrase", REFUSED_PATHS, ids=[p for p, _ in REFUSED_PATHS])
def test_a_mechanism_reference_that_does_not_resolve_is_refused_in_one_line(job, reference, phrase, tmp_path, corpus,
                                                                            neighbour_artifact_dir, capsys):  # noqa: F811
    output = str(tmp_path / "out")
    argv = (privatize_argv(corpus, output, neighbour_artifact_dir, f"--mechanism={reference}") if job == "privatize"
            else [job, f"--artifact={neighbour_artifact_dir}", f"--mechanism={reference}", f"--output={output}"]
            + RUNNER)
    refused(capsys, argv, phrase)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]  # nothing ran, nothing written


@pytest.mark.parametrize("reference, phrase", [
    (dict, "is not a subclass of textdp.mechanisms.base.Mechanism"),
    (3, "not a int"),
    (None, "not a NoneType"),
    (Nameless, "has no usable name"),
    (Impostor, "the name of a different registered mechanism"),
    ("tests.no_such_module:Mechanism", "cannot be imported"),
])
def test_every_python_entry_point_refuses_an_unusable_mechanism(reference, phrase, neighbour_artifact_dir):  # noqa: F811
    from transforms.audit_common import AuditConfig
    from transforms.calibration import CalibrationConfig

    builders = [
        lambda: textdp.Privatizer(epsilon=3, mechanism=reference, artifact=neighbour_artifact_dir),
        lambda: Privatize(epsilon=3, mechanism=reference, artifact=neighbour_artifact_dir),
        lambda: CalibrationConfig(artifact=neighbour_artifact_dir, mechanism=reference, epsilons=(3.0,), samples=10),
        lambda: AuditConfig(artifact=neighbour_artifact_dir, mechanism=reference, epsilons=(3.0,)),
    ]
    for build in builders:
        with pytest.raises(ParameterError, match=phrase) as caught:
            build()
        assert isinstance(caught.value, TextdpError) and "\n" not in str(caught.value)


def test_a_custom_parameter_that_reuses_a_registered_name_with_another_meaning_is_refused():
    """One public name means one thing in every flag and summary: a class that declares its own ``nn`` is refused;
    one that reuses the registered declaration is accepted."""
    from textdp.mechanisms.madlib import Madlib

    class OwnNn(CappedExponential):
        name = "own-nn"
        PARAMETERS = (Parameter("nn", str, "fast", choices=("fast", "slow"), help="a different nn"),)

    class SharedNn(CappedExponential):
        name = "shared-nn"
        PARAMETERS = (Madlib.parameter("nn"),)

    with pytest.raises(ParameterError, match="declares a parameter 'nn' of its own"):
        mechanism_class(OwnNn)
    assert mechanism_class(SharedNn) is SharedNn


def g_test_p_value(draws: np.ndarray, law: np.ndarray) -> float:
    """G-test of ``draws`` against ``law``: cells with at least 5 expected draws, the rest pooled into one."""
    from scipy import stats

    top = np.flatnonzero(law * len(draws) >= 5)
    observed = np.bincount(draws, minlength=len(law)).astype(float)
    expected = law * len(draws)
    if len(top) < len(law):  # pool the small cells (at least 5 expected together, else into the smallest kept)
        rest = np.setdiff1d(np.arange(len(law)), top)
        observed = np.append(observed[top], observed[rest].sum())
        expected = np.append(expected[top], expected[rest].sum())
        if expected[-1] < 5:
            observed[-2:] = [observed[-2:].sum(), 0]
            expected[-2:] = [expected[-2:].sum(), 0]
            observed, expected = observed[:-1], expected[:-1]
    assert len(observed) >= 20  # a spread law: the test has many cells
    seen = observed > 0
    g = 2.0 * np.sum(observed[seen] * np.log(observed[seen] / expected[seen]))
    return float(stats.chi2.sf(g, len(observed) - 1))


def test_the_custom_law_is_the_one_it_samples(neighbour_artifact_dir):  # noqa: F811
    """The test mechanism is exact: its draws follow its closed form (G-test at false-failure rate 1e-4), and the
    same test tells the capped law from the uncapped one (power check: the uncapped law is rejected)."""
    from textdp.artifact.locate import open_artifact
    from textdp.search.geometry import distance_row

    artifact = open_artifact(neighbour_artifact_dir)
    word = 7
    row = distance_row(np.asarray(artifact.vectors), word)
    capped = CappedExponential(artifact, 4.0, distance_cap=3.0)
    draws = capped.privatize_ids(np.full(40_000, word), np.random.default_rng(5))
    assert g_test_p_value(draws, capped.exact_distribution(row, word)) > 1e-4
    uncapped = CappedExponential(artifact, 4.0).exact_distribution(row, word)
    assert g_test_p_value(draws, uncapped) < 1e-6
