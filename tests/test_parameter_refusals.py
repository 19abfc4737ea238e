"""Parameters that would make a mechanism release its input unchanged or break its arithmetic are
refused up front, by the mechanism's own check (``textdp.mechanisms.check_mechanism``), at every entry
point: the CLI (exit 2, one line, before any worker starts), ``textdp.Privatizer`` and
``transforms.Privatize`` (TextdpError at construction). Every value inside the documented ranges works:
each mechanism runs at both ends of the epsilon range and at its parameters' extreme values on the 5k
fixture artifact (with its K=40 neighbour table). The Flex Template parameters are flags of their jobs,
and the --lambda help says what the code does.

Statistical test: SanText+ at epsilon 500 (where its sampler used to find an empty envelope) against its
closed form, two G-tests at significance 1e-5: a correct sampler fails this file with probability below
2e-5. Draws use fixed seeds.
"""

from __future__ import annotations

import glob
import math
import os
import warnings

import numpy as np
import pytest

import textdp
from pipelines.flags import plain_float, plain_int
from pipelines.jobs import JOBS, help_parser, parse_job_options, run_job
from templates import jobs as template_jobs
from tests.statcheck import g_test
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.errors import TextdpError
from textdp.mechanisms import ALL_MECHANISMS, MAX_EPSILON, MIN_EPSILON, REGISTRY, make_mechanism
from textdp.mechanisms.exponential import exact_distribution
from textdp.mechanisms.mahalanobis import Mahalanobis
from textdp.mechanisms.santext import SanText, rarest_ids
from transforms.privatize import Privatize

ALPHA = 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


# --- the CLI: exit 2 and one line before any worker starts -------------------------------------------

PRIVATIZE_REFUSALS = [
    (["--mechanism", "truncated-gumbel", "--gumbel-scale", "inf"], "gumbel scale must be a finite number"),
    (["--mechanism", "truncated-gumbel", "--gumbel-scale", "1e308"], "above 1e+09 x the truncation bound"),
    (["--mechanism", "truncated-gumbel", "--gumbel-scale", "1", "--gumbel-candidates", "5000"],
     "mean_candidates must be in (0, 4,999]"),
    (["--mechanism", "truncated-gumbel"], "below the range of the BRR scale relation"),  # epsilon 5: needs > 57
    (["--mechanism", "custext", "--custext-k", "1"], "custext k must be >= 2"),
    (["--mechanism", "custext", "--custext-k", "4999"], "leaves the last of the vocabulary's 5,000 words alone"),
    (["--mechanism", "custext", "--custext-k", "5001"], "at most the vocabulary's 5,000 words"),
    (["--nn", "annoy", "--search-k", "0"], "search_k must be -1 (Annoy's default) or >= 1"),
    (["--nn", "annoy", "--search-k", "5"], ">= 10 (1 word(s) x 10 Annoy trees"),
    (["--nn", "annoy", "--search-k", "-5"], "search_k must be -1"),
    (["--mechanism", "vickrey", "--nn", "annoy", "--search-k", "15"], ">= 20 (2 word(s) x 10 Annoy trees"),
    (["--mechanism", "santext+", "--santext-p", "0"], "santext p must be > 0"),
    (["--mechanism", "santext+", "--sensitive-fraction", "0.0001"], "selects no word of this vocabulary"),
    (["--mechanism", "mahalanobis", "--lambda", "nan"], "lambda must be a finite number"),
    (["--mechanism", "vickrey", "--vickrey-t", "1.5"], "vickrey t must be <= 1"),
    (["--mechanism", "tem", "--beta", "1"], "beta must be < 1"),
    (["--mechanism", "tem", "--gamma", "inf"], "gamma must be a finite number"),
    (["--lambda", "5"], "--lam applies to --mechanism mahalanobis, vickrey only"),  # another mechanism's flag
]


def _privatize(tmp_path, artifact_dir, flags, epsilon="5"):
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n")
    return run_job("privatize", ["--input", str(source), "--output", str(tmp_path / "out"), "--artifact",
                                 artifact_dir, "--epsilon", epsilon] + flags)


@pytest.mark.parametrize("flags, message", PRIVATIZE_REFUSALS, ids=[" ".join(f) for f, _ in PRIVATIZE_REFUSALS])
def test_privatize_refuses_parameters_before_any_worker(tmp_path, neighbour_artifact_dir, capfd,  # noqa: F811
                                                        flags, message):
    assert _privatize(tmp_path, neighbour_artifact_dir, flags) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("textdp privatize: error: ") and message in err[0], err
    assert "movie" not in err[0]
    assert not glob.glob(str(tmp_path / "out*"))  # nothing was written: no worker ran


@pytest.mark.parametrize("epsilon", ["1e-300", "9e-31", "0", "-1", "inf", "nan", "1.1e6", "1e300"])
def test_privatize_refuses_epsilon_outside_the_one_range(tmp_path, neighbour_artifact_dir, capfd, epsilon):  # noqa: F811
    assert _privatize(tmp_path, neighbour_artifact_dir, [], epsilon=epsilon) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--epsilon must be a finite number in [1e-30, 1e+06]" in err[0], err


@pytest.mark.parametrize("job", ["calibrate", "audit"])
def test_calibrate_and_audit_refuse_epsilons_outside_the_range(tmp_path, neighbour_artifact_dir, capfd, job):  # noqa: F811
    code = run_job(job, ["--artifact", neighbour_artifact_dir, "--output", str(tmp_path / "out"),
                         "--epsilons", "1,1e-300"])
    assert code == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--epsilons: each epsilon must be a finite number in [1e-30" in err[0], err
    assert not os.path.exists(tmp_path / "out")


def test_calibrate_runs_the_vocabulary_checks_before_any_worker(tmp_path, neighbour_artifact_dir, capfd):  # noqa: F811
    code = run_job("calibrate", ["--artifact", neighbour_artifact_dir, "--output", str(tmp_path / "out"),
                                 "--mechanism", "vickrey", "--nn", "annoy", "--search-k", "3", "--epsilons", "5"])
    assert code == 2
    assert ">= 20 (2 word(s) x 10 Annoy trees" in capfd.readouterr().err


# --- Python entry points: TextdpError at construction --------------------------------------------------

PYTHON_REFUSALS = [
    ({"epsilon": True}, "epsilon must be a number .int or float., got a bool"),
    ({"epsilon": 1e300}, "epsilon must be a finite number in [1e-30, 1e+06]"),
    ({"epsilon": 1e-300}, "epsilon must be a finite number in [1e-30, 1e+06]"),
    ({"epsilon": "5"}, "epsilon must be a number .int or float., got a str"),
    ({"epsilon": float("nan")}, "epsilon must be a finite number"),
    ({"epsilon": 5, "mechanism": "custext", "k": 1}, "custext k must be >= 2"),
    ({"epsilon": 5, "mechanism": "custext", "k": True}, "custext k must be an integer"),
    ({"epsilon": 5, "mechanism": "custext", "k": 2.5}, "custext k must be an integer"),
    ({"epsilon": 5, "mechanism": "truncated-gumbel", "scale": float("inf")}, "gumbel scale must be a finite number"),
    ({"epsilon": 5, "mechanism": "truncated-gumbel", "scale": True}, "gumbel scale must be a finite number"),
    ({"epsilon": 5, "nn": "annoy", "search_k": 0}, "search_k must be -1"),
    ({"epsilon": 5, "mechanism": "mahalanobis", "lam": True}, "lambda must be a finite number"),
    ({"epsilon": 5, "mechanism": "santext+", "p": 0}, "santext p must be > 0"),
]


@pytest.mark.parametrize("kwargs, message", PYTHON_REFUSALS, ids=[repr(k) for k, _ in PYTHON_REFUSALS])
def test_privatizer_and_transform_refuse_at_construction(tiny_artifact_dir, kwargs, message):
    with pytest.raises(TextdpError, match=message.replace("[", r"\[").replace("(", r"\(").replace("+", r"\+")) as api:
        textdp.Privatizer(artifact=tiny_artifact_dir, **kwargs)
    assert "\n" not in str(api.value)
    with pytest.raises(TextdpError, match=message.replace("[", r"\[").replace("(", r"\(").replace("+", r"\+")):
        Privatize(artifact=tiny_artifact_dir, **kwargs)


def test_the_vocabulary_checks_run_when_the_artifact_is_loaded(artifact):
    """Without the artifact only the checks that need none run; building the mechanism runs the rest."""
    with pytest.raises(TextdpError, match="leaves the last of the vocabulary's 5,000 words alone"):
        make_mechanism("custext", artifact, 5.0, k=4999)
    with pytest.raises(TextdpError, match="below the range of the BRR scale relation"):
        make_mechanism("truncated-gumbel", artifact, 5.0)
    with pytest.raises(TextdpError, match=r">= 20 \(2 word\(s\) x 10 Annoy trees"):
        make_mechanism("vickrey", artifact, 5.0, nn="annoy", search_k=19)


# --- every documented value works ----------------------------------------------------------------------

EXTREMES = [
    ("madlib", {}), ("madlib", {"nn": "annoy", "search_k": 10}),
    ("tem", {"beta": 1e-12}), ("tem", {"beta": 0.999}), ("tem", {"gamma": 0.0}), ("tem", {"gamma": 1e300}),
    ("mahalanobis", {"lam": 0.0}), ("mahalanobis", {"lam": 1.0}), ("mahalanobis", {"nn": "annoy", "search_k": 10}),
    ("vickrey", {"t": 0.0}), ("vickrey", {"t": 1.0}), ("vickrey", {"noise": "mahalanobis", "lam": 1.0}),
    ("vickrey", {"nn": "annoy", "search_k": 20}),
    ("truncated-gumbel", {"scale": "smallest"}), ("truncated-gumbel", {"scale": 1.0, "mean_candidates": 4999}),
    ("truncated-gumbel", {"scale": "smallest", "max_distance": "smallest"}),
    ("santext", {}), ("santext+", {"p": 1.0, "sensitive_fraction": 1.0}), ("santext+", {"p": 1e-6, "sensitive_fraction": 0.0002}),
    ("custext", {"k": 2}), ("custext", {"k": 5000}),
]


def declared_extremes(listed):
    """A registered mechanism not listed above runs at its defaults and with each declared numeric
    parameter at each closed end of its declared range (from the class's declarations alone)."""
    cases = []
    for name, cls in REGISTRY.items():
        if name in {n for n, _ in listed}:
            continue
        cases.append((name, {}))
        for param in cls.PARAMETERS:
            if param.cli and param.type in (int, float):
                cases += [(name, {param.name: param.type(end)}) for end, is_open in
                          ((param.low, param.low_open), (param.high, param.high_open)) if end is not None and not is_open]
    return cases


EXTREMES = EXTREMES + declared_extremes(EXTREMES)


@pytest.mark.parametrize("epsilon", [MIN_EPSILON, 1.0, MAX_EPSILON])
@pytest.mark.parametrize("name, params", EXTREMES, ids=[f"{n}-{p}" for n, p in EXTREMES])
def test_every_mechanism_works_at_the_ends_of_its_documented_ranges(artifact, name, params, epsilon):
    ids = np.arange(0, artifact.vocab_size, 50)
    if "smallest" in params.values():  # truncated-gumbel's smallest scale: 1/60 of the smallest gap between words
        from textdp.mechanisms.truncated_gumbel import TruncatedGumbel

        gap = TruncatedGumbel.resolve(1.0, artifact, scale=1.0)["min_distance"]
        smallest = {"scale": gap / math.log(artifact.vocab_size / TruncatedGumbel.IDENTITY_CHANGE) * 1.001,
                    "max_distance": gap / 2}
        params = {key: smallest[key] if value == "smallest" else value for key, value in params.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow, underflow to NaN or invalid value on the way
        mechanism = make_mechanism(name, artifact, epsilon, **params)
        released = mechanism.privatize_ids(ids, np.random.default_rng(7))
    assert released.shape == ids.shape and released.dtype.kind == "i"
    assert ((released >= 0) & (released < artifact.vocab_size)).all()


def test_the_mechanism_list_is_covered_at_its_extremes():
    assert {name for name, _ in EXTREMES} == set(ALL_MECHANISMS)


# --- SanText+ at large epsilon: robust, and still its exact law ----------------------------------------

@pytest.mark.parametrize("word_id", [22, 152])  # "be", "old": laws with 2-3 likely words at epsilon 500
def test_santext_plus_samples_its_exact_law_at_epsilon_500(artifact, word_id):
    """Frequent (non-sensitive) words, always sanitized (p = 1) into the rarest 90%: at epsilon 500
    exp(-250 d) underflows to 0 for every sensitive word, which used to empty the sampler's envelope.
    The weights are now relative to the nearest allowed word; the draws follow the closed form (and are
    told apart from the law at 1.25 x epsilon: the test has power)."""
    epsilon = 500.0
    mech = SanText(artifact, epsilon, plus=True, p=1.0, sensitive_fraction=0.9)
    released = mech.privatize_ids(np.full(20_000, word_id), np.random.default_rng(word_id))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    allowed = rarest_ids(artifact.vocab_size, 0.9)
    exact = exact_distribution(artifact.vectors, word_id, epsilon, allowed)
    assert (exact > 0.01).sum() >= 2  # a law with more than one likely word, so the test means something
    assert g_test(counts, exact) > ALPHA
    assert g_test(counts, exact_distribution(artifact.vectors, word_id, 1.25 * epsilon, allowed)) < ALPHA


# --- --lambda: the help says what the code does --------------------------------------------------------

def test_lambda_help_matches_the_covariance_the_code_builds(artifact):
    """S = lambda * Sigma~ + (1 - lambda) * I: lambda 0 is Madlib's spherical noise (S = I), lambda 1 the
    embedding's own (normalised) covariance, which is not spherical."""
    help_text = next(a.help for a in help_parser("privatize")._actions if a.dest == "lam")
    assert "0: Madlib's spherical noise" in help_text
    assert "1: noise shaped by the embedding's covariance alone" in help_text
    spherical = Mahalanobis(artifact, 5.0, lam=0.0)
    np.testing.assert_allclose(spherical.covariance, np.eye(artifact.dimension), atol=1e-12)
    np.testing.assert_allclose(spherical.root, np.eye(artifact.dimension), atol=1e-9)
    shaped = Mahalanobis(artifact, 5.0, lam=1.0)
    values = np.linalg.eigvalsh(shaped.covariance)
    assert values.max() / values.min() > 2  # elliptical
    np.testing.assert_allclose(np.trace(shaped.covariance), artifact.dimension, rtol=1e-9)


# --- Flex Template parameters are flags of their jobs ---------------------------------------------------

def _valid_value(action):
    if action.choices:
        return str(list(action.choices)[-1]), list(action.choices)[-1]
    if action.type is int or action.type is plain_int:
        return "3", 3
    if action.type is float or action.type is plain_float:
        return "0.5", 0.5
    return "gs://bucket/some-path", "gs://bucket/some-path"


@pytest.mark.parametrize("job", sorted(name for name, job in JOBS.items() if job.template))
def test_every_template_parameter_is_accepted_by_its_job(job):
    """For every parameter of the job's generated metadata, ``--<name>=VALUE`` (a switch as ``--<name>``:
    templates/main.py turns ``true`` into it) goes through the job's own parser, the one ``textdp <job>``
    uses, and lands in the flag's option."""
    parser = help_parser(job)
    by_name = {}
    for action in template_jobs.flag_actions(parser):
        for option in action.option_strings:
            by_name[option.lstrip("-")] = action
    required = [a for a in template_jobs.flag_actions(parser) if template_jobs.is_required(a, JOBS[job].required)]
    for parameter in template_jobs.metadata(job)["parameters"]:
        name = parameter["name"]
        action = by_name.get(name)
        assert action is not None, f"{job}: template parameter {name!r} is not a flag of the job"
        if template_jobs.is_boolean(action):
            argv, expected = [f"--{name}"], not action.default
        else:
            text, expected = _valid_value(action)
            argv = [f"--{name}={text}"]
            if action.nargs is None and isinstance(action.default, list) or type(action).__name__ == "_AppendAction":
                expected = [text]
        others = [f"{r.option_strings[0]}={_valid_value(r)[0]}" for r in required if r is not action]
        if JOBS[job].beam:
            options = parse_job_options(job, argv + others)
            value = options.get_all_options(retain_unknown_options=False)[action.dest]
        else:
            value = getattr(parser.parse_args(argv + others), action.dest)
        assert value == expected, f"{job}: --{name} landed as {value!r}, expected {expected!r}"
