"""``textdp calibrate`` end to end on the local FnApiRunner: table, summary, plots, report, CLI.

Runs use ``--seed`` so that two runs can be compared; nothing here is a statistical test except
the TEM run, whose check (exact N_w against the estimate from 400 draws, per word) uses the exact
binomial interval of probability 1 - 1e-6 each: false-failure rate below 1e-4 for the module.
"""

import json
import os
import struct
import zlib

import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from matplotlib import image as mpimg
from scipy import stats

from pipelines import calibrate
from pipelines.cli import main as cli_main
from textdp.artifact.embeddings import EmbeddingSource
from textdp.artifact.locate import open_artifact
from textdp.artifact.store import build_artifact
from textdp.calibration.report import PLOT_FILES
from textdp.calibration.statistics import K_VALUES

RUNNER = ["--runner", "FnApiRunner"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_pipeline(args):
    result = calibrate.build_pipeline(PipelineOptions(args + RUNNER)).run()
    result.wait_until_finish()
    return result


def assert_valid_png(path):
    """Signature, every chunk's CRC, an IEND chunk, and matplotlib can decode it to pixels."""
    data = open(path, "rb").read()
    assert data[:8] == PNG_SIGNATURE
    pos, kinds = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind!r}"
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    pixels = mpimg.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0  # not a blank image


@pytest.fixture(scope="module")
def madlib_run(small_artifact_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("calib") / "madlib")
    run_pipeline(["--artifact", small_artifact_dir, "--mechanism", "madlib", "--epsilons", "20,2,8",
                  "--words", "12", "--samples", "150", "--seed", "3", "--output", out,
                  "--max-nw", "0.5", "--min-sw", "20", "--coverage", "0.9"])
    return out


def test_outputs_table_and_summary_agree(madlib_run, small_artifact):
    table = pq.read_table(os.path.join(madlib_run, "per_word.parquet")).to_pylist()
    assert len(table) == 12 * 3
    word_ids = sorted({r["word_id"] for r in table})
    assert len(word_ids) == 12
    # stratified by frequency rank: one word in each twelfth of the 5,000 ranks
    assert [w * 12 // 5000 for w in word_ids] == list(range(12))
    for row in table:
        assert row["word"] == small_artifact.words[row["word_id"]] and row["frequency_rank"] == row["word_id"] + 1
        assert row["n_w"] == row["n_w_count"] / 150 and 1 <= row["s_w"] <= 150
        assert row["n_w_exact"] is None and 0 < row["searched_fraction"] <= 1
        knn = [row[f"knn_distance_k{k}"] for k in K_VALUES]
        assert all(a <= b for a, b in zip(knn, knn[1:]))
    summary = json.load(open(os.path.join(madlib_run, "summary.json")))
    assert summary["epsilons"] == [2.0, 8.0, 20.0] and summary["samples"] == 150
    assert "exact nearest word" in summary["nn_statement"]
    assert "fixed seed 3" in summary["randomness"]
    for eps in (2.0, 8.0, 20.0):
        nw = [r["n_w"] for r in table if r["epsilon"] == eps]
        sw = [r["s_w"] for r in table if r["epsilon"] == eps]
        entry = summary["statistics"][f"{eps:g}"]
        assert entry["n_w"]["mean"] == pytest.approx(np.mean(nw)) and entry["n_w"]["max"] == max(nw)
        assert entry["s_w"]["min"] == min(sw) and entry["s_w"]["p50"] == pytest.approx(np.median(sw))
    means = [summary["statistics"][e]["n_w"]["mean"] for e in ("2", "8", "20")]
    assert means == sorted(means)  # less noise, more words kept: the paper's Fig. 3 shape
    knn = summary["knn_distances"]
    assert knn["k"] == list(K_VALUES) and set(knn["percentiles"]) == {"5", "20", "50", "80", "95"}
    median_k1 = np.median([r["knn_distance_k1"] for r in table if r["epsilon"] == 2.0])
    assert knn["percentiles"]["50"][0] == pytest.approx(median_k1)
    rec = summary["recommendation"]
    meeting = [e["epsilon"] for e in rec["per_epsilon"] if e["meets"]]
    assert rec["recommended_epsilon"] == (max(meeting) if meeting else None)
    assert summary["privacy_statement"] is None or "per_token" in summary["privacy_statement"]


def test_plots_are_valid_png_and_the_report_shows_them(madlib_run):
    summary = json.load(open(os.path.join(madlib_run, "summary.json")))
    assert sorted(summary["outputs"]["plots"]) == sorted(PLOT_FILES)
    report = open(os.path.join(madlib_run, "report.html"), encoding="utf-8").read()
    for name in PLOT_FILES:
        assert_valid_png(os.path.join(madlib_run, name))
        assert f'src="{name}"' in report
    assert summary["recommendation"]["message"].split(":")[0] in report
    assert "exact nearest word" in report


def test_same_seed_same_results(madlib_run, small_artifact_dir, tmp_path):
    """With --seed every word has its own generator, so a rerun (any sharding) gives the same table."""
    out = str(tmp_path / "again")
    result = run_pipeline(["--artifact", small_artifact_dir, "--epsilons", "2,8,20", "--words", "12", "--samples",
                           "150", "--seed", "3", "--output", out, "--direct_num_workers", "2"])
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]
                if c.key.metric.namespace == "textdp"}
    assert counters["calibrated_words"] == 12 and counters["draws"] == 12 * 3 * 150 and counters.get("unknown_words", 0) == 0
    key = lambda r: (r["word_id"], r["epsilon"])  # noqa: E731
    first = sorted(pq.read_table(os.path.join(madlib_run, "per_word.parquet")).to_pylist(), key=key)
    second = sorted(pq.read_table(os.path.join(out, "per_word.parquet")).to_pylist(), key=key)
    assert [(r["n_w_count"], r["s_w"]) for r in first] == [(r["n_w_count"], r["s_w"]) for r in second]


def test_cli_word_list_unknown_words_and_printed_recommendation(small_artifact_dir, tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("movie\nqzxv-not-a-word\n\ngood\n", encoding="utf-8")
    out = str(tmp_path / "list")
    code = cli_main(["calibrate", "--artifact", small_artifact_dir, "--word-list", str(words), "--epsilons", "5",
                     "--samples", "50", "--min-sw", "-1", "--max-nw", "0.9", "--output", out] + RUNNER)
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["recommendation"]["message"] in printed
    assert summary["words"]["count"] == 2 and summary["words"]["unknown_count"] == 1
    assert summary["words"]["unknown_lines"] == [2]
    assert summary["recommendation"]["targets"]["min_sw"] is None
    for name in ("summary.json", "report.html"):  # an unknown word is named by its line only
        assert "qzxv" not in open(os.path.join(out, name), encoding="utf-8").read()
    table = pq.read_table(os.path.join(out, "per_word.parquet")).to_pylist()
    assert sorted(r["word"] for r in table) == ["good", "movie"]


def test_cli_errors_and_help(capsys, tmp_path):
    assert cli_main(["calibrate", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--artifact", "--mechanism", "--epsilons", "--words", "--word-list", "--samples", "--nn",
                 "--output", "--max-nw", "--min-sw", "--coverage", "--seed", "--no-prune"):
        assert flag in text
    assert cli_main(["calibrate", "--words", "3"] + RUNNER) == 2
    assert "missing required flag --output" in capsys.readouterr().err
    assert cli_main(["calibrate", "--output", str(tmp_path), "--epsilons", "1,x"] + RUNNER) == 2
    assert "--epsilons" in capsys.readouterr().err
    assert cli_main(["calibrate", "--output", str(tmp_path), "--words", "3", "--word-list", "w.txt"] + RUNNER) == 2


def test_tem_without_neighbour_table_is_refused_before_running(small_artifact_dir, tmp_path, capsys):
    assert cli_main(["calibrate", "--artifact", small_artifact_dir, "--mechanism", "tem", "--output",
                     str(tmp_path / "x")] + RUNNER) == 2
    assert "textdp neighbours" in capsys.readouterr().err


def test_annoy_statistics_and_statement(small_artifact):
    """--nn annoy runs Madlib with the artifact's Annoy index (no pruning, searched_fraction None),
    and the report's statement says the statistics hold for Annoy."""
    from textdp.calibration.statistics import WordCalibrator
    from textdp.mechanisms.madlib import Madlib

    calibrator = WordCalibrator(small_artifact, "madlib", {50.0: Madlib(small_artifact, 50.0, nn="annoy")}, samples=200)
    (row,) = calibrator.calibrate(10, np.random.default_rng(1))
    assert row["searched_fraction"] is None and 1 <= row["s_w"] <= 200
    assert row["n_w"] > 0.5  # tiny noise: Annoy finds the word itself (its recall is high at large epsilon)
    opts = PipelineOptions(["--nn", "annoy", "--search-k", "500"]).view_as(calibrate.CalibrateOptions)
    statement = calibrate.nn_statement(opts, small_artifact.manifest)
    assert "Annoy" in statement and "search_k=500" in statement and "10 trees" in statement


def test_options_coexist_with_the_other_jobs():
    """Beam parses every PipelineOptions subclass in one parser; shared flags must not clash."""
    import pipelines.privatize  # noqa: F401

    options = PipelineOptions(["--output", "x", "--epsilons", "1,2", "--nn", "annoy"])
    values = options.get_all_options()
    assert values["output"] == "x" and values["epsilons"] == "1,2" and values["nn"] == "annoy"
    assert options.view_as(calibrate.CalibrateOptions).samples == 1000


@pytest.fixture(scope="module")
def tem_artifact_dir(tmp_path_factory):
    from textdp.artifact.neighbours import TableWriter, brute_force_knn

    root = tmp_path_factory.mktemp("tem_pipeline")
    points = np.random.default_rng(8).uniform(-4, 4, (800, 3))
    np.save(root / "v.npy", points.astype(np.float32))
    (root / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(len(points))), encoding="utf-8")
    path = build_artifact(EmbeddingSource("npy", str(root / "v.npy"), str(root / "vocab.txt")), str(root / "a"),
                          trees=2)
    artifact = open_artifact(path)
    ids, dist = brute_force_knn(np.asarray(artifact.vectors, dtype=np.float64), np.arange(800), 32)
    writer = TableWriter(path, 800, 32, "euclidean")
    writer.write_block(0, ids.astype(np.int32), dist.astype(np.float32))
    writer.finish({})
    return path


def test_tem_run_reports_exact_values(tem_artifact_dir, tmp_path):
    """Exact N_w lies in the binomial interval of each word's estimate (1e-6 per word and epsilon)."""
    out = str(tmp_path / "tem")
    run_pipeline(["--artifact", tem_artifact_dir, "--mechanism", "tem", "--epsilons", "2,10", "--words", "10",
                  "--samples", "400", "--output", out])
    table = pq.read_table(os.path.join(out, "per_word.parquet")).to_pylist()
    assert len(table) == 20
    for row in table:
        assert row["n_w_exact"] is not None and row["s_w_exact"] is not None and row["tem_gamma"] > 0
        lo, hi = stats.binom.interval(1 - 1e-6, 400, row["n_w_exact"])
        assert lo <= row["n_w_count"] <= hi
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert "n_w_exact" in summary["statistics"]["2"] and "s_w_exact" in summary["statistics"]["10"]
    assert summary["recommendation"]["basis"] == "exact TEM values"
    assert "not applicable" in summary["nn_statement"] and "fresh OS entropy" in summary["randomness"]
    report = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert "TEM closed form" in report
    for name in PLOT_FILES:
        assert_valid_png(os.path.join(out, name))


def test_without_seed_runs_use_fresh_randomness(small_artifact_dir, tmp_path):
    """Two unseeded runs on the same words must not repeat each other's draws. Identical
    (N_w count, S_w) pairs for all 6 words x 2 epsilons by chance have probability far below 1e-9
    (S_w alone, from 300 draws at epsilon 3, varies over tens of values)."""
    words = tmp_path / "w.txt"
    words.write_text("film\nactor\nplot\nbad\nsix\nlater\n", encoding="utf-8")
    tables = []
    for name in ("a", "b"):
        out = str(tmp_path / name)
        run_pipeline(["--artifact", small_artifact_dir, "--word-list", str(words), "--epsilons", "3,8",
                      "--samples", "300", "--output", out])
        rows = sorted(pq.read_table(os.path.join(out, "per_word.parquet")).to_pylist(),
                      key=lambda r: (r["word_id"], r["epsilon"]))
        tables.append([(r["n_w_count"], r["s_w"]) for r in rows])
        assert "fresh OS entropy" in json.load(open(os.path.join(out, "summary.json")))["randomness"]
    assert len(tables[0]) == 12 and tables[0] != tables[1]


def test_word_list_is_looked_up_as_privatize_looks_words_up(tiny_artifact_dir, tmp_path, capsys):
    """Issue 25 item 10: ``JOHN``-style lines are the vocabulary's lowercase words (the tokenizer's rule)."""
    words = tmp_path / "words.txt"
    words.write_text("PEOPLE\nGood\n", encoding="utf-8")
    out = str(tmp_path / "cased")
    assert cli_main(["calibrate", "--artifact", tiny_artifact_dir, "--word-list", str(words), "--epsilons", "5",
                     "--samples", "20", "--seed", "1", "--output", out] + RUNNER) == 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["words"]["count"] == 2 and not summary["words"].get("unknown_count")
    table = pq.read_table(os.path.join(out, "per_word.parquet")).to_pylist()
    assert sorted(r["word"] for r in table) == ["good", "people"]


def test_word_list_not_utf8_is_refused_by_line_without_quoting_bytes(tiny_artifact_dir, tmp_path, capsys):
    words = tmp_path / "words.bin"
    words.write_bytes(b"movie\nfoo\xb5bar\n")
    code = cli_main(["calibrate", "--artifact", tiny_artifact_dir, "--word-list", str(words), "--epsilons", "5",
                     "--output", str(tmp_path / "bin")] + RUNNER)
    err = capsys.readouterr().err
    assert code == 2
    assert "line 2" in err and "not UTF-8" in err
    assert "0xb5" not in err and "foo" not in err and "\\xb5" not in err
    assert len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "bin" / "summary.json")


def test_word_list_with_no_vocabulary_word_fails_in_one_line(tiny_artifact_dir, tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("qqqzzx\nzzyqqk\n", encoding="utf-8")
    code = cli_main(["calibrate", "--artifact", tiny_artifact_dir, "--word-list", str(words), "--epsilons", "5",
                     "--samples", "20", "--output", str(tmp_path / "none")] + RUNNER)
    err = capsys.readouterr().err
    assert code == 2  # refused before the run (third hostile round, F16); it used to fail after it at exit 1
    assert "none of its 2 line(s) is one word of the artifact's vocabulary" in err
    assert "qqqzzx" not in err and len(err.strip().splitlines()) == 1
