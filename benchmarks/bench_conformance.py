"""``textdp audit --conformance`` for every registered mechanism on a 20,000-word artifact (issue 28, item 1).

Target: all registered mechanisms at the run's epsilons in <= 10 minutes on 2 cores. One
``python -m pipelines.cli audit --conformance`` run (FnApiRunner, ``--direct_num_workers 2
--direct_running_mode multi_processing``), timed from outside, with the workers' CPU seconds (children's
rusage) and the load average before and after (the machine is shared). Default sizes: 2 words per frequency
band (ranks 1-100, 101-1,000, 1,001-10,000, 10,001-20,000: 8 words), 50,000 draws per word for a closed form,
10,000 per word and side for a reference simulation, 2 power repeats at 1.25 x epsilon.

The artifact: ``textdp.artifact.store.build_artifact`` with vocab_size=20000 (bundled GloVe 6B 50d), then the
neighbours job (euclidean, K = 100), built once under --workdir.

    python -m benchmarks.bench_conformance --workdir /var/tmp/conformance-bench

Results: benchmarks/results/conformance.json and conformance.md (with the run's per-unit rows).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from benchmarks.harness import REPO, machine, write_results

EPSILONS = "2,5,10"
TARGET_MINUTES = 10.0


def build(workdir: str) -> str:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.neighbours import build_pipeline
    from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource
    from textdp.artifact.store import build_artifact

    path = os.path.join(workdir, "glove20k-k100")
    manifest = os.path.join(path, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as handle:
            built = "neighbours" in json.load(handle)
    else:
        built = False
    if not built:
        build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), path, vocab_size=20000, trees=10, seed=0)
        build_pipeline(PipelineOptions(["--runner=FnApiRunner", f"--artifact={path}", "--k=100",
                                        "--metric=euclidean", "--shard-rows=5000"])).run().wait_until_finish()
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/var/tmp/conformance-bench")
    parser.add_argument("--epsilons", default=EPSILONS)
    parser.add_argument("--seed", type=int, default=None, help="fixed seed (reproducible); default OS entropy")
    parser.add_argument("--extra", nargs="*", default=[], help="more flags for the audit run")
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    info = machine()
    started = time.time()
    artifact = build(args.workdir)
    build_seconds = time.time() - started
    output = os.path.join(args.workdir, "run")
    command = [sys.executable, "-m", "pipelines.cli", "audit", f"--artifact={artifact}", f"--output={output}",
               "--overwrite", "--conformance", f"--epsilons={args.epsilons}", "--runner=FnApiRunner",
               "--direct_num_workers=2", "--direct_running_mode=multi_processing", *args.extra]
    if args.seed is not None:
        command.append(f"--seed={args.seed}")
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    process = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.time() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    if process.returncode != 0:
        sys.stderr.write(process.stderr[-4000:])
        return process.returncode
    with open(os.path.join(output, "conformance.json"), encoding="utf-8") as handle:
        result = json.load(handle)
    payload = {"machine": info, "artifact": artifact, "artifact_build_seconds": build_seconds,
               "command": command[1:], "wall_seconds": wall, "cpu_seconds": cpu,
               "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
               "target_minutes": TARGET_MINUTES, "met": wall <= TARGET_MINUTES * 60, "result": result,
               "printed": process.stdout.splitlines()}
    write_results("conformance", payload, markdown(payload))
    print("\n".join(payload["printed"]))
    print(f"wall {wall:.0f} s, CPU {cpu:.0f} s")
    return 0


def markdown(payload: dict) -> str:
    info, result = payload["machine"], payload["result"]
    overrun = payload['wall_seconds'] / 60 - payload['target_minutes']
    lines = [
        "# Conformance audit: every registered mechanism on a 20,000-word artifact",
        "",
        ("`python -m benchmarks.bench_conformance` (issue 28, item 1): one `textdp audit --conformance` run, FnApiRunner, "
        "2 worker processes."),
        "",
        (f"Machine: {info['cpu']}, {info['cores']} cores (nproc), Python {info['python']}, numpy {info['numpy']}, "
        f"{info['date_utc']}; load average {payload['loadavg_before'][0]:.1f} before, "
        f"{payload['loadavg_after'][0]:.1f} after (the machine is shared with other jobs)."),
        "",
        (f"**Wall time {payload['wall_seconds'] / 60:.1f} min** (target <= {payload['target_minutes']:g} min: "
        f"{'met' if payload['met'] else 'NOT met, by ' + format(overrun, '.1f') + ' min'}); "
        f"worker CPU {payload['cpu_seconds'] / 60:.1f} min. Artifact build (once, not timed in the target): "
        f"{payload['artifact_build_seconds']:.0f} s."),
        "",
        result["method"] + ".",
        "",
        "| mechanism | epsilon | law | status | p-value | G (df) | draws | power at 1.25 x eps | impossible | unit seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        if row["law"] == "none":
            lines.append(f"| {row['mechanism']} | {row['epsilon']:g} | none | {row['status']} | | | | | |")
            continue
        lines.append(f"| {row['mechanism']} | {row['epsilon']:g} | {row['law']} | {row['status']} | "
                     f"{row['p_value']:.3g} | {row['statistic']:.1f} ({row['df']}) | {row['draws']:,} | "
                     f"{row['power_rejections']}/{row['power_repeats']} | {row['impossible_releases']} | "
                     f"{row.get('seconds', float('nan')):.0f} |")
    seconds: dict = {}
    for row in result["rows"]:
        seconds[row["mechanism"]] = seconds.get(row["mechanism"], 0.0) + row.get("seconds", 0.0)
    lines += ["", "Verdicts: " + ", ".join(f"{k}: {v}" for k, v in result["verdicts"].items()), "",
              "Worker seconds per mechanism (sum over its epsilons, wall time inside the unit, on the shared cores): "
              + ", ".join(f"{k} {v:.0f}" for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
