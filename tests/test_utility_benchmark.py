"""The utility benchmark's harness (benchmarks/utility): data subsets, intervals, and one real end-to-end run.

The statistics are checked by coverage on simulated data (false-failure rates stated per test);
the end-to-end test runs the harness on real IMDb reviews with the project's own privatize pipeline
(local FnApiRunner) and the real 5k GloVe artifact with a neighbour table, then re-derives the
reported accuracies from the files the pipeline wrote.
"""

import glob
import json
import os
import re

import numpy as np
import pytest
from scipy import stats as scipy_stats

from benchmarks.utility import classify, data, run, stats
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def imdb_all_rows():
    return data.read_rows()


def test_subset_is_balanced_from_the_right_split_and_reproducible(tmp_path, imdb_all_rows):
    first, again, other = (str(tmp_path / name) for name in ("a.jsonl", "b.jsonl", "c.jsonl"))
    assert data.prepare(31, 20, 5, first) == {"train": 31, "test": 20}
    data.prepare(31, 20, 5, again)
    data.prepare(31, 20, 6, other)
    records = data.read_jsonl([first])
    assert open(first, encoding="utf-8").read() == open(again, encoding="utf-8").read()
    assert {r["id"] for r in records} != {r["id"] for r in data.read_jsonl([other])}
    assert len({r["id"] for r in records}) == 51
    source = {f"{row['split']}/{row['label']}/{row['id']}": row for row in imdb_all_rows}
    for split, count in (("train", 31), ("test", 20)):
        chosen = [r for r in records if r["split"] == split]
        assert len(chosen) == count
        labels = [r["label"] for r in chosen]
        assert labels.count(0) == count // 2 and labels.count(1) == count - count // 2
        for r in chosen:
            row = source[r["id"]]
            assert row["split"] == split and data.LABELS[row["label"]] == r["label"]
            assert r["text"] == row["text"].replace("<br />", "\n") and "<br />" not in r["text"]
    with pytest.raises(ValueError, match="asked for"):
        data.balanced_subset(imdb_all_rows, "test", 10 ** 6, np.random.default_rng(0))


def test_wilson_interval_covers_at_its_level():
    """4,000 binomial(400, 0.82) accuracies: the 95% Wilson interval's coverage must be in [0.93, 0.97]
    (about 6 standard errors of the simulated coverage: false failure < 1e-8); the 80% interval
    must cover about 80%, so the level is really used."""
    rng = np.random.default_rng(11)
    successes = rng.binomial(400, 0.82, size=4000)
    for level, low, high in ((0.95, 0.93, 0.97), (0.80, 0.76, 0.84)):
        covered = [(w["low"] <= 0.82 <= w["high"]) for w in (stats.wilson_interval(int(s), 400, level) for s in successes)]
        assert low <= np.mean(covered) <= high, (level, np.mean(covered))
    one = stats.wilson_interval(329, 400)
    assert one["accuracy"] == pytest.approx(0.8225) and one["low"] < 0.8225 < one["high"] and one["n"] == 400


def test_mean_interval_is_the_student_t_interval_and_covers():
    values = [0.80, 0.83, 0.78]
    got = stats.mean_interval(values)
    half = scipy_stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / np.sqrt(3)
    assert got["mean"] == pytest.approx(np.mean(values))
    assert (got["low"], got["high"]) == (pytest.approx(np.mean(values) - half), pytest.approx(np.mean(values) + half))
    assert stats.mean_interval([0.5])["low"] is None  # one repeat: no interval, never a made-up one
    clipped = stats.mean_interval([0.99, 0.5])  # the t half-width passes 1 and 0: clipped to [0, 1]
    assert clipped["low"] == 0.0 and clipped["high"] == 1.0
    # coverage over 4,000 triples of normal draws: 95% +- 2 points (false failure < 1e-8)
    rng = np.random.default_rng(12)
    draws = rng.normal(0.5, 0.05, size=(4000, 3))
    covered = [(m["low"] <= 0.5 <= m["high"]) for m in map(stats.mean_interval, draws)]
    assert 0.93 <= np.mean(covered) <= 0.97


def test_paired_bootstrap_interval_covers_the_true_difference_and_detects_a_real_one():
    """300 simulated test sets of 500 reviews, baseline right with p = 0.85 and a private model that
    loses 3 points on average through review-level flips: the 95% percentile bootstrap interval
    must cover the true -0.03 in 89%-99% of them (binomial sd of the coverage 1.3 points: false
    failure < 1e-4). And with 2,000 reviews a true 5-point loss must be reported as one."""
    rng = np.random.default_rng(13)
    covered = 0
    for _ in range(300):
        base = rng.random(500) < 0.85
        runs = []
        for _ in range(2):
            # the private model turns a right review wrong w.p. 0.06 and a wrong one right w.p. 0.14
            wrong = base & (rng.random(500) < 0.06)
            right = ~base & (rng.random(500) < 0.14)
            runs.append((base & ~wrong) | right)
        true_delta = -0.85 * 0.06 + 0.15 * 0.14  # -0.03
        d = stats.paired_bootstrap_delta(runs, base, rng, resamples=1000)
        assert d["low"] <= d["delta"] <= d["high"]
        covered += d["low"] <= true_delta <= d["high"]
    assert 0.89 <= covered / 300 <= 0.99, covered
    base = rng.random(2000) < 0.85
    worse = base & (rng.random(2000) > 0.06)  # loses about 5 points
    d = stats.paired_bootstrap_delta([worse], base, rng)
    assert d["high"] < -0.02 and run.within_margin(d) == "no"


@pytest.mark.parametrize("low, high, mean, verdict", [
    (-0.019, 0.01, 0.0, "yes"), (-0.02, 0.01, 0.0, "yes"), (-0.05, -0.021, -0.03, "no"),
    (-0.03, 0.01, -0.01, "unclear (mean within)"), (-0.04, -0.01, -0.025, "unclear (mean outside)")])
def test_within_two_points_needs_the_whole_interval_on_one_side(low, high, mean, verdict):
    assert run.within_margin({"delta": mean, "low": low, "high": high}) == verdict


@pytest.mark.slow
def test_harness_runs_the_real_pipeline_and_reports_what_it_measured(tmp_path, neighbour_artifact_dir):  # noqa: F811
    """The harness end to end on 40 + 40 real reviews: TEM and Madlib through `textdp privatize` (local
    FnApiRunner), calibration through `textdp calibrate`, results as JSON, Markdown and plot; every
    reported accuracy re-derived here from the pipeline's own output files; --resume reuses runs."""
    workdir, results = str(tmp_path / "work"), str(tmp_path / "results")
    argv = ["--artifact", neighbour_artifact_dir, "--train", "40", "--test", "40", "--repeats", "2",
            "--tem-epsilons", "0.5", "--madlib-epsilons", "10000", "--workers", "1", "--workdir", workdir,
            "--results-dir", results, "--calibrate-words", "6", "--calibrate-samples", "40", "--name", "u",
            "--calibrate-sample", "vocabulary,corpus"]
    run.main(argv)
    payload = json.load(open(os.path.join(results, "u.json"), encoding="utf-8"))
    assert payload["complete"] and payload["reviews"] == {"train": 40, "test": 40}
    assert os.path.getsize(os.path.join(results, "u.png")) > 10_000
    markdown = open(os.path.join(results, "u.md"), encoding="utf-8").read()

    original = data.read_jsonl([os.path.join(workdir, "reviews.jsonl")])
    train = [r for r in original if r["split"] == "train"]
    test = [r for r in original if r["split"] == "test"]
    baseline_model = classify.fit([r["text"] for r in train], [r["label"] for r in train])
    baseline = classify.correct(baseline_model, [r["text"] for r in test], [r["label"] for r in test]).mean()
    assert payload["baseline"]["accuracy"] == pytest.approx(baseline)

    points = {(p["mechanism"], p["epsilon"]): p for p in payload["results"]}
    assert set(points) == {("tem", 0.5), ("madlib", 10000.0)}
    seeds = set()
    for (mechanism, epsilon), point in points.items():
        assert f"| {mechanism} | {epsilon:g} |" in markdown
        assert len(point["runs"]) == 2
        for entry in point["runs"]:
            seeds.add(entry["seed"])
            assert entry["records_reconciled"] and entry["records_failed"] == 0
            prefix = os.path.join(workdir, "runs", f"{mechanism}-eps{epsilon:g}-r{entry['repeat']}", "reviews")
            private = {r["id"]: r for r in data.read_jsonl(sorted(glob.glob(prefix + "-*-of-*.jsonl")))}
            assert set(private) == {r["id"] for r in original}
            assert all(private[r["id"]]["label"] == r["label"] for r in original)
            model = classify.fit([private[r["id"]]["text"] for r in train], [r["label"] for r in train])
            assert entry["training_time_accuracy"] == pytest.approx(
                classify.correct(model, [r["text"] for r in test], [r["label"] for r in test]).mean())
            assert entry["test_time_accuracy"] == pytest.approx(classify.correct(
                baseline_model, [private[r["id"]]["text"] for r in test], [r["label"] for r in test]).mean())
            summary = json.load(open(prefix + "-summary.json", encoding="utf-8"))
            assert summary["mechanism"]["epsilon"] == epsilon and summary["tokens"]["total"] == entry["tokens"]
            changed_records = sum(private[r["id"]]["text"] != r["text"] for r in original)
            if mechanism == "tem":  # epsilon 0.5 on 5,000 words: nearly every word replaced
                assert entry["changed_fraction"] > 0.9 and changed_records == 80
            else:  # epsilon 10,000: Madlib's noise radius is about 0.005, only unknown words change
                assert entry["changed_fraction"] <= entry["unknown_fraction"] + 0.005
    assert len(seeds) == 4  # one independent seed per (mechanism, epsilon, repeat)
    assert set(payload["calibration"]) == {"tem", "madlib", "tem (IMDb words)", "madlib (IMDb words)"}
    for key, calib in payload["calibration"].items():
        mechanism = key.split()[0]
        assert calib["samples"] == 40 and set(calib["statistics"]) == {f"{e:g}" for m, e in points if m == mechanism}
        assert f"| {key}" in markdown
    corpus_words = open(os.path.join(workdir, "calibration-corpus-words.txt"), encoding="utf-8").read().split()
    review_words = {w.lower() for r in original for w in re.findall(r"\w[\w'-]*", r["text"])}
    assert len(corpus_words) == len(set(corpus_words)) == 6 and set(corpus_words) <= review_words
    # TEM at 0.5 on 5k words: a word is almost never released unchanged
    assert payload["calibration"]["tem"]["statistics"]["0.5"]["n_w_exact"]["max"] < 0.05

    run.main(argv + ["--resume"])  # nothing re-privatized, the same numbers
    again = json.load(open(os.path.join(results, "u.json"), encoding="utf-8"))
    assert all(entry["pipeline_seconds"] is None for p in again["results"] for entry in p["runs"])
    assert [p["training_time"] for p in again["results"]] == [p["training_time"] for p in payload["results"]]
    assert [e["wall_seconds"] for e in again["earlier_invocations"]] == [payload["wall_seconds"]]
    assert "Resumed from an earlier invocation" in open(os.path.join(results, "u.md"), encoding="utf-8").read()
    # a calibration is reused only for the same epsilons and draws (another epsilon list re-runs it)
    tem_calibration = os.path.join(workdir, "calibrate-tem", "summary.json")
    assert run.calibration_matches(tem_calibration, [0.5], 40)
    assert not run.calibration_matches(tem_calibration, [0.5, 1.0], 40)
    assert not run.calibration_matches(tem_calibration, [0.5], 41)


def test_any_mechanism_can_join_the_grid_with_its_flags():
    """Issue 15: the utility benchmark takes every mechanism (--grid) with its own flags."""
    import argparse

    from benchmarks.utility.run import parse_grid, parse_mechanism_flags, pipeline_command

    assert parse_grid("mahalanobis:5,10; santext:1;") == [("mahalanobis", 5.0), ("mahalanobis", 10.0), ("santext", 1.0)]
    flags = "vickrey:--vickrey-t=0.5 --lambda=0.2;custext:--custext-k=20"
    assert parse_mechanism_flags(flags) == {"vickrey": ["--vickrey-t=0.5", "--lambda=0.2"], "custext": ["--custext-k=20"]}
    args = argparse.Namespace(artifact=None, nn="exact", workers=1, mechanism_flags=flags)
    cmd = pipeline_command(args, "in.jsonl", "out/r", "vickrey", 5.0, 3)
    assert cmd[cmd.index("--mechanism") + 1] == "vickrey" and cmd[-2:] == ["--vickrey-t=0.5", "--lambda=0.2"]
    assert "--nn" in cmd and "--nn" not in pipeline_command(args, "in.jsonl", "out/r", "custext", 5.0, 3)


def test_report_puts_attack_success_next_to_accuracy(tmp_path):
    """With the audit benchmark's results, the utility report joins them by (mechanism, epsilon)."""
    from benchmarks.utility import report

    rate = lambda r: {"rate": r}  # noqa: E731
    audit = {"runs": [{"command": "textdp audit --mechanism=tem --epsilons=4,6", "inversion": {"per_epsilon": {
        "4": {"overall": {"top1": rate(0.41), "top10": rate(0.62), "released": rate(0.38)}},
        "6": {"overall": {"top1": rate(0.93), "top10": rate(0.95), "released": rate(0.94)}}}},
        "linkage": {"per_epsilon": {"4": {"1000": {"top1": rate(0.8)}}}}}]}
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(audit), encoding="utf-8")
    attacks = report.attack_rates(str(path))
    assert attacks[("tem", 4.0)] == {"inversion_top1": 0.41, "inversion_top10": 0.62, "released": 0.38,
                                     "linkage_top1": {1000: 0.8}}
    acc = lambda m: {"accuracy": {"mean": m}}  # noqa: E731
    payload = {"baseline": {"accuracy": 0.86}, "results": [
        {"mechanism": "tem", "epsilon": 4.0, "training_time": acc(0.815), "test_time": acc(0.76)},
        {"mechanism": "tem", "epsilon": 5.0, "training_time": acc(0.847), "test_time": acc(0.838)},
        {"mechanism": "tem", "epsilon": 6.0, "training_time": acc(0.856), "test_time": acc(0.854)}]}
    lines = report.attack_section(payload, attacks, "u-attacks.png")
    table = [line for line in lines if line.startswith("| tem")]
    assert table == ["| tem | 4 | 0.815 | 0.760 | 0.410 | 0.620 | 0.380 | 0.800 |",
                     "| tem | 6 | 0.856 | 0.854 | 0.930 | 0.950 | 0.940 | - |"]
    assert report.attack_plot(payload, attacks, str(tmp_path / "u-attacks.png"))
    assert (tmp_path / "u-attacks.png").stat().st_size > 1000
    assert report.attack_rates(str(tmp_path / "missing.json")) == {}
