"""Every mechanism is selectable everywhere a mechanism is (issue 15): ``textdp privatize``, ``textdp
calibrate``, the ``Privatize`` transform and ``textdp.Privatizer``, each run describing itself with
its own privacy statement. Distributions are tested per mechanism in test_santext.py, test_custext.py,
test_truncated_gumbel.py and test_mahalanobis_vickrey.py; here the wiring (5,000-word artifact with
a K=40 neighbour table, FnApiRunner)."""

import json

import pytest

import textdp
from pipelines.cli import main as cli_main
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.mechanisms import ALL_MECHANISMS, make_mechanism

RUNNER = ["--runner=FnApiRunner"]
FLAGS = {"madlib": [], "tem": [], "mahalanobis": ["--lambda=0.5"], "vickrey": ["--vickrey-t=0.6"],
         "truncated-gumbel": ["--gumbel-scale=0.5"], "santext": [], "santext+": ["--santext-p=0.4"],
         "custext": ["--custext-k=8"]}
PARAMS = {"madlib": {}, "tem": {}, "mahalanobis": {"lam": 0.5}, "vickrey": {"t": 0.6},
          "truncated-gumbel": {"scale": 0.5}, "santext": {}, "santext+": {"p": 0.4}, "custext": {"k": 8}}


def test_every_mechanism_has_flags_here():
    assert set(FLAGS) <= set(ALL_MECHANISMS)  # a mechanism not listed runs at its defaults


@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
def test_privatize_with_every_mechanism(mechanism, neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\nA quiet room, near the station.\n", encoding="utf-8")
    output = str(tmp_path / "out")
    public = str(tmp_path / "public.json")
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=3", f"--mechanism={mechanism}",
                     f"--artifact={neighbour_artifact_dir}", f"--public-summary={public}"] + FLAGS.get(mechanism, []) + RUNNER) == 0
    summary = json.load(open(output + "-summary.json", encoding="utf-8"))
    expected = make_mechanism(mechanism, open_artifact(neighbour_artifact_dir), 3.0, **PARAMS.get(mechanism, {}))
    assert summary["mechanism"] == json.loads(json.dumps(expected.parameters()))
    for key, sentence in expected.privacy_statement().items():
        assert summary["privacy"][key] == sentence
    assert json.load(open(public, encoding="utf-8"))["mechanism"]["mechanism"] == mechanism
    assert summary["records"] == {"in": 2, "out": 2, "failed": 0, "failed_by_reason": {}, "reconciled": True}
    capsys.readouterr()


@pytest.mark.parametrize("mechanism", ["mahalanobis", "santext", "custext"])
def test_calibrate_and_the_python_api_with_the_new_mechanisms(mechanism, neighbour_artifact_dir, tmp_path):  # noqa: F811
    out = str(tmp_path / "cal")
    assert cli_main(["calibrate", f"--artifact={neighbour_artifact_dir}", f"--mechanism={mechanism}", "--words=4",
                     "--samples=60", "--epsilons=2,8", f"--output={out}"] + FLAGS[mechanism] + RUNNER) == 0
    summary = json.load(open(f"{out}/summary.json", encoding="utf-8"))
    assert summary["mechanism"] == mechanism and summary["words"]["count"] == 4
    p = textdp.Privatizer(epsilon=3, mechanism=mechanism, artifact=neighbour_artifact_dir, **PARAMS[mechanism])
    released = p.privatize(["the movie was good"])
    assert len(released[0].split(" ")) == 4 and p.parameters()["mechanism"] == mechanism


def test_a_parameter_of_another_mechanism_is_refused(neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    source = tmp_path / "in.txt"
    source.write_text("a line\n", encoding="utf-8")
    argv = ["privatize", f"--input={source}", f"--output={tmp_path}/o", "--epsilon=3",
            f"--artifact={neighbour_artifact_dir}"] + RUNNER
    assert cli_main(argv + ["--mechanism=madlib", "--gamma=3"]) == 2
    assert "--gamma applies to --mechanism tem only" in capsys.readouterr().err
    assert cli_main(argv + ["--mechanism=santext", "--nn=annoy"]) == 2
    assert "--nn applies to --mechanism madlib, mahalanobis, vickrey only" in capsys.readouterr().err
    assert cli_main(argv + ["--mechanism=vickrey", "--vickrey-t=1.5"]) == 2
    assert "vickrey t must be <= 1, got 1.5" in capsys.readouterr().err
    from transforms import Privatize

    with pytest.raises(textdp.TextdpError, match="parameter 'gamma' does not apply to mechanism 'madlib'"):
        Privatize(epsilon=3, mechanism="madlib", gamma=2.0, artifact=neighbour_artifact_dir)
