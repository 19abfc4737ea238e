"""The sentences of ``textdp calibrate`` say what the run did (issue 24, item 5): the nearest-word sentence of
the report for every mechanism, checked against what the calibrator's draws did, and the refusal of an artifact
without a neighbour table naming the run's own mechanism. Real 5k GloVe artifacts, the local runner."""

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import calibrate
from pipelines.cli import main as cli_main
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.mechanisms import artifact_needs

RUNNER = ["--runner", "FnApiRunner"]


@pytest.mark.parametrize("mechanism", ["tem", "santext", "santext+", "truncated-gumbel"])
def test_a_missing_neighbour_table_names_the_mechanism_that_needs_it(small_artifact_dir, tmp_path, capsys, mechanism):
    """Issue 24 item 5: the refusal names the run's own mechanism (it said '--mechanism tem' for all of them)."""
    assert cli_main(["calibrate", "--artifact", small_artifact_dir, "--mechanism", mechanism, "--output",
                     str(tmp_path / "x")] + RUNNER) == 2
    err = capsys.readouterr().err
    assert f"--mechanism {mechanism} (it samples from each word's K nearest words) needs a neighbour table" in err
    assert "textdp neighbours" in err and (mechanism == "tem" or "--mechanism tem " not in err)


def test_nn_statement_says_what_the_draws_of_each_mechanism_do(neighbour_artifact_dir):  # noqa: F811
    """Issue 24 item 5: calibrate's nearest-word sentence for every mechanism, checked against what the
    calibrator's draws actually did for one word (searched_fraction: the share of the vocabulary searched,
    None when no nearest-word search ran). Madlib with pruning searches a small share at a large epsilon;
    Mahalanobis and Vickrey search every word; the table-sampled mechanisms and CusText search nothing."""
    from textdp.calibration.statistics import WordCalibrator
    from textdp.mechanisms import ALL_MECHANISMS, make_mechanism

    artifact = open_artifact(neighbour_artifact_dir)
    for mechanism in ALL_MECHANISMS:
        epsilon = 70.0 if mechanism == "truncated-gumbel" else 50.0  # its scale relation needs epsilon > 62.7
        for no_prune in (False, True):
            flags = ["--mechanism", mechanism] + (["--no-prune"] if no_prune else [])
            statement = calibrate.nn_statement(PipelineOptions(flags).view_as(calibrate.CalibrateOptions),
                                               artifact.manifest)
            mech = make_mechanism(mechanism, artifact, epsilon)
            calibrator = WordCalibrator(artifact, mechanism, {epsilon: mech}, samples=50, prune=not no_prune)
            (row,) = calibrator.calibrate(100, np.random.default_rng(0))
            searched = row["searched_fraction"]
            assert ("searches no nearest word" in statement) is (searched is None), (mechanism, statement)
            assert ("search only the words that can be nearest" in statement) is (
                searched is not None and searched < 0.5), (mechanism, no_prune, searched, statement)
            assert ("over all 5,000 words for every draw" in statement) is (searched == 1.0), (mechanism, statement)
            if searched is None:
                assert "nearest word" not in statement.replace("searches no nearest word", "")
                assert ("neighbour table" in statement and "no neighbour table" not in statement) is (
                    "neighbours" in artifact_needs(mechanism))
