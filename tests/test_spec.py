"""``textdp.spec.PrivacySpec``: one validated object for mechanism + parameters + epsilon + artifact + OOV policy
(issue 26, item 2). The entry points build it, so a bad value is refused by the same rule, with the same
message, whichever way it comes in: textdp.Privatizer, transforms.Privatize, the privatize command line."""

from __future__ import annotations

import pickle

import pytest

import textdp
from pipelines.cli import main as cli_main
from tests.custom_mechanism import IMPORT_PATH, CappedExponential
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.errors import ParameterError, TextdpError
from textdp.spec import PrivacySpec
from transforms import Privatize

BAD = [  # (keywords of the spec, the phrase the Python refusals hold, the phrase of the command line's)
    ({"epsilon": 0.0}, "epsilon must be a finite number in [1e-30, 1e+06]", "--epsilon must be a finite number"),
    ({"epsilon": float("nan")}, "epsilon must be a finite number in [1e-30, 1e+06]", "--epsilon must be a finite"),
    ({"epsilon": 3.0, "distance_cap": -1.0}, "distance_cap must be > 0", "distance_cap must be > 0"),
    ({"epsilon": 3.0, "oov_policy": "drop"}, "oov_policy must be one of", "--oov-policy/--oov_policy: invalid choice"),
]


def spec_of(keywords: dict) -> PrivacySpec:
    keywords = dict(keywords)
    epsilon, oov = keywords.pop("epsilon"), keywords.pop("oov_policy", "random")
    return PrivacySpec(CappedExponential, (epsilon,), keywords, None, oov)


def test_a_spec_keeps_a_picklable_reference_and_public_names():
    spec = PrivacySpec(IMPORT_PATH, 3, {"distance_cap": 2})
    assert spec.mechanism == IMPORT_PATH and spec.name == CappedExponential.name
    assert spec.epsilons == (3.0,) and spec.epsilon == 3.0 and spec.keywords() == {"distance_cap": 2}
    assert spec.needs() == ("vocab", "vectors")
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert PrivacySpec(CappedExponential, (3.0,), {"distance_cap": 2}) == spec  # the class resolves to its path
    grid = PrivacySpec("madlib", (1.0, 5.0))
    with pytest.raises(ParameterError, match="2 epsilons, not one"):
        _ = grid.epsilon


@pytest.mark.parametrize("keywords, phrase, cli_phrase", BAD, ids=["zero", "nan", "cap", "oov"])
def test_every_entry_point_refuses_by_the_specs_one_rule(keywords, phrase, cli_phrase, neighbour_artifact_dir,  # noqa: F811
                                                         tmp_path, capsys):
    """Python: the spec's message itself; the command line: one line, exit 2 (argparse refuses a value outside a
    flag's choices before the spec is built)."""
    with pytest.raises(TextdpError) as direct:
        spec_of(keywords)
    assert phrase in str(direct.value)
    given = dict(keywords)
    epsilon = given.pop("epsilon")
    for build in (lambda: textdp.Privatizer(epsilon, CappedExponential, neighbour_artifact_dir, **given),
                  lambda: Privatize(epsilon, CappedExponential, neighbour_artifact_dir, **given)):
        with pytest.raises(TextdpError) as caught:
            build()
        assert str(caught.value) == str(direct.value)  # the same rule and message, not a copy of it
    source = tmp_path / "in.txt"
    source.write_text("a good movie\n", encoding="utf-8")
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in given.items()]
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path / 'out'}", f"--epsilon={epsilon}",
                     f"--mechanism={IMPORT_PATH}", f"--artifact={neighbour_artifact_dir}", *flags,
                     "--runner=FnApiRunner"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and cli_phrase in err[0], err
