"""Utility of privatized text on IMDb sentiment: Madlib and TEM at several epsilon against the baseline.

The papers' experiment (Feyisetan et al. WSDM 2020 Sec. 5.2; Carvalho et al. Sec. 5), with a
logistic-regression classifier on word n-gram TF-IDF instead of their neural models:

* baseline: train on original train reviews, test on original test reviews;
* training time: train on privatized train reviews, test on the original test reviews;
* test time: train on the original train reviews, test on privatized test reviews.

Every privatization is one run of the project's own pipeline (``textdp privatize``, the local
FnApiRunner, in a subprocess) over one JSONL file holding the train and test subsets; each
(mechanism, epsilon, repeat) is an independent privatization with its own seed (recorded; a
seeded output is not private, which is fine for an evaluation). The changed-token fraction comes
from each run's summary. Runs are kept in ``--workdir`` and reused with ``--resume``, so a long
full-size run can be stopped and continued.

    nice -n 19 python -m benchmarks.utility.run --train 400 --test 400 --repeats 2 \
        --tem-epsilons 2,3,4,5,6 --madlib-epsilons 5,10 --artifact DIR_WITH_NEIGHBOUR_TABLE

Results: benchmarks/results/<name>.json, <name>.md and <name>.png (accuracy against epsilon).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time
import zlib
from collections import Counter
from typing import Dict, List, Optional

import numpy as np

from benchmarks.harness import RESULTS, load_results, machine, write_results
from benchmarks.utility import classify, data, stats
from textdp.mechanisms import mechanism_class
from textdp.text.tokenize import WORD_PATTERN

REPO = data.REPO
SINGLE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ACCURACY_MARGIN = 0.02  # "within 2 points of the baseline"


def within_margin(delta: dict) -> str:
    """Is the accuracy within 2 points of the baseline? Judged on the paired bootstrap interval of the
    difference: 'yes' / 'no' when the whole interval is on one side of -0.02, else 'unclear' (with
    the side the mean falls on): a small test set cannot settle it."""
    if delta["low"] >= -ACCURACY_MARGIN:
        return "yes"
    if delta["high"] < -ACCURACY_MARGIN:
        return "no"
    return "unclear (mean within)" if delta["delta"] >= -ACCURACY_MARGIN else "unclear (mean outside)"


def parse_samples(text: str) -> List[str]:
    samples = [x.strip() for x in text.split(",") if x.strip()]
    unknown = sorted(set(samples) - {"vocabulary", "corpus"})
    if unknown:
        raise SystemExit(f"--calibrate-sample: unknown value(s) {', '.join(unknown)} (vocabulary, corpus)")
    return samples


def parse_epsilons(text: str) -> List[float]:
    return [float(x) for x in text.split(",") if x.strip()] if text else []


def parse_grid(text: str) -> List[tuple]:
    """``"mahalanobis:5,10;santext:1,2"`` -> [(mechanism, epsilon), ...] in the order given."""
    grid = []
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        mechanism, _, epsilons = part.partition(":")
        grid += [(mechanism.strip(), e) for e in parse_epsilons(epsilons)]
    return grid


def parse_mechanism_flags(text: str) -> Dict[str, List[str]]:
    """``"vickrey:--vickrey-t=0.5 --lambda=0.2;custext:--custext-k=20"`` -> {mechanism: [flags]}."""
    flags = {}
    for part in (text or "").split(";"):
        if part.strip():
            mechanism, _, values = part.partition(":")
            flags[mechanism.strip()] = values.split()
    return flags


def pipeline_command(args, input_path: str, prefix: str, mechanism: str, epsilon: float, seed: Optional[int]) -> list:
    cmd = [sys.executable, "-m", "pipelines.cli", "privatize", "--input", input_path, "--output", prefix,
           "--format", "jsonl", "--mechanism", mechanism, "--epsilon", f"{epsilon:g}", "--runner", "FnApiRunner",
           "--overwrite"]
    if args.artifact:
        cmd += ["--artifact", args.artifact]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if mechanism_class(mechanism).SEARCHES_NEAREST:  # --nn chooses the nearest-word search of these
        cmd += ["--nn", args.nn]
    cmd += parse_mechanism_flags(args.mechanism_flags).get(mechanism, [])
    if args.workers > 1:
        cmd += ["--direct_num_workers", str(args.workers), "--direct_running_mode", "multi_processing"]
    return cmd


def privatize(args, input_path: str, mechanism: str, epsilon: float, repeat: int) -> dict:
    """One privatize pipeline run (or the one kept from before with --resume): records and summary."""
    prefix = os.path.join(args.workdir, "runs", f"{mechanism}-eps{epsilon:g}-r{repeat}", "reviews")
    summary_path = prefix + "-summary.json"
    # one seed per (base seed, mechanism, epsilon, repeat), unrelated between points
    seed = None if args.fresh_entropy else zlib.crc32(f"{args.seed}/{mechanism}/{epsilon:g}/{repeat}".encode()) & 0x7FFFFFFF
    seconds = None
    if not (args.resume and os.path.exists(summary_path)):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        for stale in glob.glob(prefix + "-*"):
            os.remove(stale)
        started = time.perf_counter()
        subprocess.run(pipeline_command(args, input_path, prefix, mechanism, epsilon, seed), check=True, cwd=REPO,
                       env=dict(os.environ, **SINGLE_THREAD), stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
    with open(summary_path, encoding="utf-8") as handle:
        summary = json.load(handle)
    records = data.read_jsonl(sorted(glob.glob(prefix + "-*-of-*.jsonl")))
    return {"records": records, "summary": summary, "seconds": seconds, "seed": seed}


def split_records(records: List[dict], order: Dict[str, List[str]]) -> Dict[str, tuple]:
    """(texts, labels) per split, in the original order of ids (pipeline output order is not kept)."""
    by_id = {r["id"]: r for r in records}
    out = {}
    for split, ids in order.items():
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise RuntimeError(f"{len(missing)} {split} records missing from a privatized output")
        out[split] = ([by_id[i]["text"] for i in ids], [by_id[i]["label"] for i in ids])
    return out


def corpus_word_list(records: List[dict], count: int, seed: int, path: str) -> str:
    """``count`` distinct lowercase words of the reviews, drawn without replacement with probability
    proportional to their frequency (so mostly the words the reviews are made of), one per line."""
    counts = Counter(m.group().lower() for r in records for m in WORD_PATTERN.finditer(r["text"]))
    words = sorted(counts)
    weights = np.array([counts[w] for w in words], dtype=float)
    chosen = np.random.default_rng(seed).choice(len(words), size=min(count, len(words)), replace=False,
                                                p=weights / weights.sum())
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(words[i] + "\n" for i in sorted(chosen))
    return path


def calibration_matches(summary_path: str, epsilons: List[float], samples: int) -> bool:
    """Can --resume reuse this calibration? Only if it exists and was run at these epsilons and draws."""
    if not os.path.exists(summary_path):
        return False
    with open(summary_path, encoding="utf-8") as handle:
        summary = json.load(handle)
    return sorted(map(float, summary["epsilons"])) == sorted(epsilons) and int(summary["samples"]) == samples


def calibration(args, mechanism: str, epsilons: List[float], sample: str = "vocabulary",
                records: Optional[List[dict]] = None) -> Optional[dict]:
    """N_w / S_w percentiles per epsilon from a small ``textdp calibrate`` run (if asked for).

    ``sample``: ``vocabulary`` (calibrate's stratified sample of the whole vocabulary) or ``corpus``
    (words of the benchmark's reviews, drawn by frequency: what this task's text is made of)."""
    if args.calibrate_words <= 0 or not epsilons:
        return None
    out_dir = os.path.join(args.workdir, f"calibrate-{mechanism}" + ("-corpus" if sample == "corpus" else ""))
    summary_path = os.path.join(out_dir, "summary.json")
    if not (args.resume and calibration_matches(summary_path, epsilons, args.calibrate_samples)):
        if sample == "corpus":
            words = ["--word-list", corpus_word_list(records, args.calibrate_words, args.seed,
                                                     os.path.join(args.workdir, "calibration-corpus-words.txt"))]
        else:
            words = ["--words", str(args.calibrate_words)]
        cmd = [sys.executable, "-m", "pipelines.cli", "calibrate", "--mechanism", mechanism,
               "--epsilons", ",".join(f"{e:g}" for e in epsilons), *words,
               "--samples", str(args.calibrate_samples), "--output", out_dir, "--seed", str(args.seed),
               "--runner", "FnApiRunner", "--overwrite"]
        cmd += parse_mechanism_flags(args.mechanism_flags).get(mechanism, [])
        if mechanism_class(mechanism).SEARCHES_NEAREST:
            cmd += ["--nn", args.nn]
        if args.artifact:
            cmd += ["--artifact", args.artifact]
        if args.workers > 1:
            cmd += ["--direct_num_workers", str(args.workers), "--direct_running_mode", "multi_processing"]
        subprocess.run(cmd, check=True, cwd=REPO, env=dict(os.environ, **SINGLE_THREAD), stdout=subprocess.DEVNULL)
    with open(summary_path, encoding="utf-8") as handle:
        summary = json.load(handle)
    keep = ("min", "p1", "p5", "p50", "p95", "p99", "max", "mean")
    per_eps = {}
    for eps, entry in summary["statistics"].items():
        per_eps[eps] = {key: {k: v for k, v in entry[key].items() if k in keep}
                        for key in ("n_w", "s_w", "n_w_exact", "s_w_exact") if key in entry}
    return {"words": summary["words"], "samples": summary["samples"], "statistics": per_eps, "sample": sample,
            "recommendation": summary.get("recommendation", {}).get("message")}


def evaluate(args, checkpoint=None) -> dict:
    input_path = os.path.join(args.workdir, "reviews.jsonl")
    if not (args.resume and os.path.exists(input_path)):
        data.prepare(args.train, args.test, args.data_seed, input_path, source=args.data)
    original = data.read_jsonl([input_path])
    order = {split: [r["id"] for r in original if r["split"] == split] for split in ("train", "test")}
    plain = split_records(original, order)
    train_texts, train_labels = plain["train"]
    test_texts, test_labels = plain["test"]

    baseline_model = classify.fit(train_texts, train_labels)
    baseline_correct = classify.correct(baseline_model, test_texts, test_labels)
    baseline = stats.wilson_interval(int(baseline_correct.sum()), len(baseline_correct))
    print(f"baseline accuracy {baseline['accuracy']:.4f}", flush=True)
    boot_rng = np.random.default_rng(args.seed)

    # TEM first: it is cheap, so an interrupted run still has its whole curve
    grid = [("tem", e) for e in parse_epsilons(args.tem_epsilons)] + \
           [("madlib", e) for e in parse_epsilons(args.madlib_epsilons)] + parse_grid(args.grid)
    results = []
    for mechanism, epsilon in grid:
        runs, correct_train_time, correct_test_time = [], [], []
        repeats = {"madlib": args.madlib_repeats, "tem": args.tem_repeats}.get(mechanism) or args.repeats
        for repeat in range(repeats):
            run = privatize(args, input_path, mechanism, epsilon, repeat)
            private = split_records(run["records"], order)
            model = classify.fit(*private["train"])
            c_train_time = classify.correct(model, test_texts, test_labels)
            c_test_time = classify.correct(baseline_model, *private["test"])
            correct_train_time.append(c_train_time)
            correct_test_time.append(c_test_time)
            summary = run["summary"]
            runs.append({"repeat": repeat, "seed": run["seed"], "pipeline_seconds": run["seconds"],
                         "training_time_accuracy": float(c_train_time.mean()),
                         "test_time_accuracy": float(c_test_time.mean()),
                         "changed_fraction": summary["tokens"]["changed_fraction"],
                         "unknown_fraction": summary["tokens"]["unknown_fraction"],
                         "tokens": summary["tokens"]["total"], "records_reconciled": summary["records"]["reconciled"],
                         "records_failed": summary["records"]["failed"]})
            print(f"{mechanism} eps={epsilon:g} repeat {repeat}: train-time {runs[-1]['training_time_accuracy']:.4f} "
                  f"test-time {runs[-1]['test_time_accuracy']:.4f} changed {runs[-1]['changed_fraction']:.3f} "
                  f"({'reused' if run['seconds'] is None else format(run['seconds'], '.0f') + ' s'})", flush=True)
        entry = {"mechanism": mechanism, "epsilon": epsilon, "parameters": summary["mechanism"], "runs": runs,
                 "changed_fraction": stats.mean_interval([r["changed_fraction"] for r in runs])}
        for setting, correct in (("training_time", correct_train_time), ("test_time", correct_test_time)):
            interval = stats.mean_interval([c.mean() for c in correct])
            delta = stats.paired_bootstrap_delta(correct, baseline_correct, boot_rng)
            entry[setting] = {"accuracy": interval, "delta_to_baseline": delta,
                              "within_2_points": within_margin(delta)}
        results.append(entry)
        if checkpoint:  # partial results after every point, so an interrupted run still leaves numbers
            checkpoint({"baseline": baseline, "results": results, "calibration": {}, "complete": False,
                        "reviews": {"train": len(train_texts), "test": len(test_texts)}})

    calib = {}
    for sample in parse_samples(args.calibrate_sample):
        for m in dict.fromkeys(mm for mm, _ in grid):
            key = m if sample == "vocabulary" else f"{m} (IMDb words)"
            calib[key] = calibration(args, m, sorted({e for mm, e in grid if mm == m}), sample, original)
    return {"baseline": baseline, "results": results, "calibration": {m: c for m, c in calib.items() if c},
            "complete": True, "reviews": {"train": len(train_texts), "test": len(test_texts)}}


def config_of(args) -> dict:
    return {"train_reviews": args.train, "test_reviews": args.test, "data_seed": args.data_seed,
            "repeats": {"madlib": args.madlib_repeats or args.repeats, "tem": args.tem_repeats or args.repeats},
            "madlib_epsilons": parse_epsilons(args.madlib_epsilons),
            "calibration": {"words": args.calibrate_words, "draws": args.calibrate_samples,
                            "samples": parse_samples(args.calibrate_sample)} if args.calibrate_words > 0 else None,
            "tem_epsilons": parse_epsilons(args.tem_epsilons), "madlib_nn": args.nn,
            "grid": parse_grid(args.grid), "mechanism_flags": parse_mechanism_flags(args.mechanism_flags),
            "artifact": args.artifact or "default bundled GloVe 6B 50d (400k words)", "workers": args.workers,
            "seeded": not args.fresh_entropy, "base_seed": None if args.fresh_entropy else args.seed,
            "oov_policy": "random (the pipeline default)", "runner": "FnApiRunner (local)",
            "classifier": classify.describe(),
            "data": f"IMDb (Maas et al. 2011), {os.path.relpath(args.data, data.REPO)}; balanced subsets of the train and test "
                    "splits; <br /> turned into newlines", "command": " ".join(["python -m benchmarks.utility.run", *sys.argv[1:]])}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--train", type=int, default=400, help="train-split reviews, half per label (paper: 12,500); default 400")
    add("--test", type=int, default=400, help="test-split reviews, half per label (paper: 12,500); default 400")
    add("--repeats", type=int, default=2, help="independent privatizations per mechanism and epsilon (paper: 5)")
    add("--madlib-repeats", type=int, default=None, help="repeats for Madlib only (default: --repeats)")
    add("--tem-repeats", type=int, default=None, help="repeats for TEM only (default: --repeats)")
    add("--madlib-epsilons", default="5,10", help="comma-separated Madlib epsilons (empty: none); default 5,10")
    add("--tem-epsilons", default="2,3,4,5,6",
        help="comma-separated TEM epsilons (empty: none); default 2,3,4,5,6 (on GloVe 400k 50d with Thm. 4.2's "
             "gamma, TEM goes from changing almost every word at 2 to few at 6)")
    add("--grid", default="",
        help="more mechanisms and their epsilons, e.g. 'mahalanobis:5,10;santext:1,2,3' (any --mechanism of "
             "textdp privatize; see docs/mechanisms.md)")
    add("--mechanism-flags", default="",
        help="flags per mechanism for privatize and calibrate, e.g. 'vickrey:--vickrey-t=0.5;custext:--custext-k=20'")
    add("--nn", choices=("exact", "annoy"), default="exact",
        help="nearest-word search of madlib, mahalanobis and vickrey; default exact")
    add("--artifact", default=None,
        help="vocabulary artifact directory; TEM needs one with a neighbour table (textdp neighbours). "
             "Default: the bundled GloVe 6B 50d artifact in the cache")
    add("--workers", type=int, default=2, help="local Beam worker processes per privatize run; default 2")
    add("--seed", type=int, default=8, help="base seed of the privatize runs and the bootstrap; default 8")
    add("--fresh-entropy", action="store_true", help="privatize with OS entropy instead of seeds (not reproducible)")
    add("--data", default=data.IMDB,
        help="the IMDb reviews, imdb_50k.csv.gz (columns review, sentiment, split; docs/evaluation.md); default "
             "../shared/data/imdb_50k.csv.gz beside the repository")
    add("--data-seed", type=int, default=8, help="seed of the review subset draw; default 8")
    add("--workdir", default="/tmp/textdp-utility", help="scratch directory for data, runs and calibration")
    add("--resume", action="store_true", help="reuse the data file, runs and calibrations already in --workdir")
    add("--calibrate-words", type=int, default=0,
        help="also run textdp calibrate on this many words per mechanism at the same epsilons (0: skip)")
    add("--calibrate-samples", type=int, default=1000, help="draws per word for --calibrate-words; default 1000")
    add("--calibrate-sample", default="vocabulary",
        help="which words to calibrate, comma-separated: vocabulary (calibrate's stratified sample of the whole "
             "vocabulary, mostly rare words) and/or corpus (distinct words of the reviews drawn by frequency); "
             "default vocabulary")
    add("--name", default="utility", help="results file name (without extension); default utility")
    add("--results-dir", default=RESULTS, help="where to write <name>.json/.md/.png; default benchmarks/results")
    add("--report-only", action="store_true", help="only rewrite <name>.md and <name>.png from <name>.json")
    args = parser.parse_args(argv)
    from benchmarks.utility import report

    if args.report_only:
        report.write(load_results(args.name, args.results_dir), os.path.join(args.results_dir, args.name))
        return

    info = machine()
    started = time.perf_counter()
    os.makedirs(args.results_dir, exist_ok=True)
    stem = os.path.join(args.results_dir, args.name)

    earlier = []  # with --resume, the invocations that did the reused work (their machine, load and time)
    if args.resume and os.path.exists(stem + ".json"):
        with open(stem + ".json", encoding="utf-8") as handle:
            previous = json.load(handle)
        earlier = previous.get("earlier_invocations", []) + [
            {"machine": previous["machine"], "wall_seconds": previous["wall_seconds"],
             "command": previous["config"]["command"], "complete": previous.get("complete", True)}]

    def save(part: dict) -> None:
        payload = {"benchmark": "utility", "machine": dict(info), "config": config_of(args), **part,
                   "wall_seconds": round(time.perf_counter() - started, 1), "earlier_invocations": earlier}
        payload["machine"]["loadavg_at_end"] = os.getloadavg()
        write_results(args.name, payload, results_dir=args.results_dir)
        report.write(payload, stem)

    save(evaluate(args, checkpoint=save))
    print(f"results: {stem}.{{json,md,png}}")


if __name__ == "__main__":
    main()
