"""Overhead of the LAC Amplifier stage (ShuffleAmplifier) on IMDb-sized records, local FnApiRunner.

1. Stage alone: the same pipeline (Create -> [stage] -> JSON -> WriteToText) runs without the stage
   and with it in two configurations; the overhead is the difference of medians.
2. Privatize rows: the whole ``textdp privatize`` pipeline as in benchmarks/bench_pipeline.py
   (Madlib, epsilon 10, exact search, default 400k artifact, FnApiRunner, one worker) on IMDb
   reviews as JSONL with all their fields, without and with ``--shuffle --user-field movie_id
   --drop-fields id``, interleaved.

    python -m benchmarks.bench_shuffle [--records 2000] [--repeats 5] [--privatize-reviews 200]

Writes benchmarks/results/shuffle.json and shuffle.md (with the machine and its load average,
since other work shares the machine).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy loads: spinning BLAS threads on a busy machine inflate CPU time

import argparse
import json
import statistics
import tempfile
import time

import apache_beam as beam

from benchmarks.harness import machine, read_imdb, write_results
from textdp.search.geometry import diameter_bounds
from transforms.shuffle import ShuffleAmplifier

VARIANTS = {
    "baseline (no stage)": None,
    "shuffle, --user-field movie_id, --drop-fields id": dict(user_field="movie_id", drop_fields=["id"]),
    "shuffle + --k-threshold 5 + --subsample 0.5": dict(user_field="movie_id", drop_fields=["id"],
                                                        k_threshold=5, subsample_rate=0.5),
}


def run_once(rows: list, stage_kwargs, out_dir: str) -> tuple:
    """(wall seconds, CPU seconds of this process): FnApiRunner runs the pipeline in-process."""
    started, cpu_started = time.perf_counter(), time.process_time()
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        records = pipeline | "Create" >> beam.Create(rows)
        if stage_kwargs is not None:
            records = (records | "Amplify" >> ShuffleAmplifier(**stage_kwargs))["records"]
        (records | "Json" >> beam.Map(json.dumps)
         | "Write" >> beam.io.WriteToText(os.path.join(out_dir, "out"), num_shards=1))
    return time.perf_counter() - started, time.process_time() - cpu_started


PRIVATIZE_VARIANTS = {
    "privatize": [],
    "privatize --shuffle --user-field movie_id --drop-fields id": ["--shuffle", "--user-field=movie_id",
                                                                   "--drop-fields=id"],
}


def privatize_benchmark(reviews: int, repeats: int) -> list:
    """Median CPU and wall seconds of the privatize pipeline without and with the Amplifier."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.privatize import build_pipeline

    work = tempfile.mkdtemp(prefix="bench-shuffle-")
    corpus = os.path.join(work, "reviews.jsonl")
    with open(corpus, "w", encoding="utf-8") as handle:
        for row in read_imdb(reviews):
            handle.write(json.dumps(row) + "\n")
    walls = {name: [] for name in PRIVATIZE_VARIANTS}
    cpus = {name: [] for name in PRIVATIZE_VARIANTS}
    for repeat in range(repeats):
        for index, (name, flags) in enumerate(PRIVATIZE_VARIANTS.items()):
            output = os.path.join(work, f"out-{repeat}-{index}")
            started, cpu_started = time.perf_counter(), time.process_time()
            pipeline = build_pipeline(PipelineOptions([
                f"--input={corpus}", f"--output={output}", "--text-field=text", "--epsilon=10", "--nn=exact",
                "--runner=FnApiRunner", "--direct_num_workers=1", *flags]))
            pipeline.run().wait_until_finish()
            walls[name].append(time.perf_counter() - started)
            cpus[name].append(time.process_time() - cpu_started)
    return [{"variant": name, "wall_s": walls[name], "cpu_s": cpus[name],
             "median_wall_s": statistics.median(walls[name]), "median_cpu_s": statistics.median(cpus[name])}
            for name in PRIVATIZE_VARIANTS]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000, help="IMDb records per run (default 2000)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs per variant, interleaved across variants; medians are reported (default 5)")
    parser.add_argument("--privatize-reviews", type=int, default=200,
                        help="IMDb reviews for the privatize rows (0 skips them; default 200)")
    parser.add_argument("--privatize-repeats", type=int, default=2, help="runs per privatize variant (default 2)")
    args = parser.parse_args(argv)
    info = dict(machine(), beam=beam.__version__)
    rows = read_imdb(args.records)
    walls = {name: [] for name in VARIANTS}
    cpus = {name: [] for name in VARIANTS}
    run_once(rows, None, tempfile.mkdtemp())  # warm-up: imports and first-pipeline costs
    for _ in range(args.repeats):  # interleaved, so that load changes hit every variant alike
        for name, kwargs in VARIANTS.items():
            with tempfile.TemporaryDirectory() as out_dir:
                wall, cpu = run_once(rows, kwargs, out_dir)
            walls[name].append(wall)
            cpus[name].append(cpu)
    results = [{"variant": name, "wall_s": walls[name], "cpu_s": cpus[name],
                "median_wall_s": statistics.median(walls[name]), "median_cpu_s": statistics.median(cpus[name])}
               for name in VARIANTS]
    base = results[0]
    for row in results:
        row["cpu_overhead_s"] = row["median_cpu_s"] - base["median_cpu_s"]
        row["wall_overhead_s"] = row["median_wall_s"] - base["median_wall_s"]
        row["cpu_overhead_ms_per_record"] = 1000.0 * row["cpu_overhead_s"] / args.records

    privatize_rows = privatize_benchmark(args.privatize_reviews, args.privatize_repeats) \
        if args.privatize_reviews else []

    from textdp.artifact.locate import open_artifact

    artifact = open_artifact(None)
    started = time.perf_counter()
    bounds = diameter_bounds(artifact.vectors)
    diameter_s = time.perf_counter() - started
    info["loadavg_at_end"] = os.getloadavg()
    report = {"benchmark": "shuffle amplifier overhead", "records": args.records, "repeats": args.repeats,
              "runner": "FnApiRunner (one process)", "machine": info, "results": results,
              "diameter_bounds_400k": {"seconds": diameter_s, **bounds.to_dict()},
              "privatize_rows": privatize_rows}
    lines = [
        "# Shuffle amplifier overhead",
        "",
        f"{args.records} IMDb records (all fields), local FnApiRunner in one process, median of {args.repeats} "
        "interleaved runs after one warm-up run.",
        f"Machine: {info['cpu']}, nproc {info['cores']}, load average {info['loadavg_at_start'][0]:.2f} at start, "
        f"{info['loadavg_at_end'][0]:.2f} at end (shared machine), {info['date_utc']}.",
        "",
        "CPU time (this process: FnApiRunner runs in it) is the headline; wall time moves with the other work",
        "on the machine.",
        "",
        "| variant | median CPU (s) | CPU overhead (s) | CPU overhead per record (ms) | median wall (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in results:
        lines.append(f"| {row['variant']} | {row['median_cpu_s']:.2f} | {row['cpu_overhead_s']:.2f} | "
                     f"{row['cpu_overhead_ms_per_record']:.2f} | {row['median_wall_s']:.2f} |")
    lines += ["",
              f"Vocabulary diameter bounds for the accounting (400k x 50 GloVe): {diameter_s:.2f} s, "
              f"[{bounds.lower:.3f}, {bounds.upper:.3f}].",
              "",
              ]
    if privatize_rows:
        lines += ["## On the privatize pipeline",
                  "",
                  f"{args.privatize_reviews} IMDb reviews (JSONL, all fields), Madlib epsilon 10, exact search, default "
                  f"400k artifact, FnApiRunner with one worker, {args.privatize_repeats} interleaved runs per variant.",
                  "",
                  "| variant | median CPU (s) | median wall (s) | CPU overhead vs plain |",
                  "| --- | ---: | ---: | ---: |"]
        base_cpu = privatize_rows[0]["median_cpu_s"]
        for row in privatize_rows:
            lines.append(f"| {row['variant']} | {row['median_cpu_s']:.1f} | {row['median_wall_s']:.1f} | "
                         f"{100.0 * (row['median_cpu_s'] - base_cpu) / base_cpu:+.1f}% |")
    lines.append("")
    write_results("shuffle", report, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
