"""The mechanism factory and the interface every mechanism keeps (names, parameters, statements,
metric_points and token_epsilon0), on the real 5k GloVe artifact with a K=40 neighbour table."""

import json
import math

import numpy as np
import pytest

from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.errors import TextdpError
from textdp.mechanisms import ALL_MECHANISMS, make_mechanism, mechanism_parameters
from textdp.privacy import accounting

OWN_PARAMS = {"madlib": {}, "tem": {}, "mahalanobis": {"lam": 0.3}, "vickrey": {"t": 0.4},
              "truncated-gumbel": {"scale": 0.7}, "santext": {}, "santext+": {"p": 0.5}, "custext": {"k": 10}}


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


@pytest.mark.parametrize("name", ALL_MECHANISMS)
def test_every_mechanism_keeps_the_interface(artifact, name):
    mech = make_mechanism(name, artifact, 3.0, **OWN_PARAMS.get(name, {}))  # a mechanism not listed: its defaults
    assert mech.name == name
    ids = np.random.default_rng(0).integers(0, artifact.vocab_size, 3000)
    first = mech.privatize_ids(ids, np.random.default_rng(7))
    assert first.dtype == np.int64 and first.shape == ids.shape
    assert ((first >= 0) & (first < artifact.vocab_size)).all()
    # seeded: repeatable from the same state (a table sampler adapts to the words it has seen -- dense rows for
    # frequent ones -- which changes how it uses the generator, never its law: a fresh instance repeats itself)
    again = make_mechanism(name, artifact, 3.0, **OWN_PARAMS.get(name, {}))
    np.testing.assert_array_equal(first, again.privatize_ids(ids, np.random.default_rng(7)))
    params = mech.parameters()
    assert params["mechanism"] == name and params["epsilon"] == 3.0
    json.dumps(params)
    statement = mech.privacy_statement()
    assert {"notion", "per_token", "per_record"} <= set(statement)
    points = mech.metric_points(artifact.vectors[:5])
    assert points.shape == (5, artifact.dimension)
    eps0, bounds = accounting.mechanism_token_epsilon0(mech, artifact.vectors)
    assert eps0 == mech.token_epsilon0(bounds.upper)
    assert accounting.mechanism_token_epsilon0(mech, artifact.vectors, oov_policy="keep")[0] == math.inf
    with pytest.raises(ValueError):
        mech.token_epsilon0(-1.0)


def test_epsilon0_rules(artifact):
    diam = 10.0
    expected = {"madlib": 30.0, "mahalanobis": 30.0, "vickrey": 30.0, "santext": 30.0,
                "truncated-gumbel": math.inf, "santext+": math.inf, "custext": math.inf}
    for name, value in expected.items():
        assert make_mechanism(name, artifact, 3.0, **OWN_PARAMS[name]).token_epsilon0(diam) == value, name
    tem = make_mechanism("tem", artifact, 3.0, gamma=2.5)
    assert tem.token_epsilon0(diam) == 7.5 == 3.0 * min(diam, 2.5)


def test_madlib_and_tem_use_their_own_metric(artifact):
    madlib = make_mechanism("madlib", artifact, 2.0)
    np.testing.assert_array_equal(madlib.metric_points(artifact.vectors[:4]), np.asarray(artifact.vectors[:4], np.float64))
    eps0, bounds = accounting.mechanism_token_epsilon0(madlib, artifact.vectors)
    assert bounds.upper == pytest.approx(accounting.diameter_bounds(artifact.vectors).upper)
    assert eps0 == pytest.approx(2.0 * bounds.upper)
    mahalanobis = make_mechanism("mahalanobis", artifact, 2.0, **{"lambda": 0.9})
    _, mbounds = accounting.mechanism_token_epsilon0(mahalanobis, artifact.vectors)
    direct = accounting.diameter_bounds(mahalanobis.metric_points(artifact.vectors))
    assert mbounds.upper == pytest.approx(direct.upper) and mbounds.upper != pytest.approx(bounds.upper, rel=1e-3)


def test_parameters_are_checked(artifact):
    assert mechanism_parameters("vickrey") == {"vickrey_t": 0.5, "vickrey_noise": "madlib", "lam": 0.2, "nn": "exact",
                                               "search_k": -1}
    # the flags every pipeline passes today, at their defaults, are accepted by any mechanism
    for name in ALL_MECHANISMS:
        make_mechanism(name, artifact, 2.0, nn="exact", search_k=-1, gamma=None, beta=0.001,
                       **({"scale": 1.0} if name == "truncated-gumbel" else {}))
    with pytest.raises(TextdpError, match="does not apply to mechanism 'santext'"):
        make_mechanism("santext", artifact, 2.0, gamma=3.0)
    with pytest.raises(TextdpError, match="unknown parameter 'lamda'"):
        make_mechanism("mahalanobis", artifact, 2.0, lamda=0.5)
    with pytest.raises(TextdpError, match="unknown mechanism"):
        make_mechanism("laplace", artifact, 2.0)
    assert make_mechanism("santext+", artifact, 2.0).name == "santext+"  # the variant is its own class (SanTextPlus)
    with pytest.raises(TextdpError, match="unknown parameter 'plus'"):
        make_mechanism("santext", artifact, 2.0, plus=True)
    with pytest.raises(TextdpError, match="always has plus=True"):
        make_mechanism("santext+", artifact, 2.0, plus=False)
