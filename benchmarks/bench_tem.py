"""TEM benchmark: the neighbour pipeline on the full 400k x 50 GloVe artifact, then TEM tokens/s.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.bench_tem [--workdir /tmp/tem-bench] [--skip-neighbours]

1. Copies the default artifact (TEXTDP_CACHE_DIR) to a scratch directory, so the shared cache is
   never modified, and runs ``textdp neighbours`` on it with two local worker processes
   (``--direct_num_workers 2 --direct_running_mode multi_processing``): wall time, table bytes.
2. TEM on one core (one process, BLAS limited to one thread) at epsilon 1, 2, 5, 10, 20 with
   Thm. 4.2's gamma (beta = 0.001), on real IMDb review tokens (frequency-weighted, what a corpus
   looks like) and on uniformly drawn vocabulary ids (rare words, the harder case): tokens/s and
   the mean number of rejection rounds and on-the-fly distances per token.
The machine is shared with other engineers: the load average is recorded before and after.
Results: benchmarks/results/tem.json and tem.md. Uses a fixed seed (stated in the results).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

from benchmarks.harness import REPO, imdb_token_ids, machine, write_results
from textdp.artifact.locate import open_artifact
from textdp.artifact.store import default_artifact_path
from textdp.mechanisms.tem import TEM

EPSILONS = (1.0, 2.0, 5.0, 10.0, 20.0)
SEED = 20261122


def run_neighbours(workdir: str, k: int) -> dict:
    source = default_artifact_path()
    target = os.path.join(workdir, "glove400k")
    if os.path.exists(target):
        shutil.rmtree(target)
    os.makedirs(workdir, exist_ok=True)
    shutil.copytree(source, target)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipelines.cli", "neighbours", "--artifact", target, "--k", str(k),
                    "--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
                   check=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the job and its worker processes
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    artifact = open_artifact(target)
    section = artifact.manifest["neighbours"]
    table_bytes = sum(artifact.manifest["files"][section[key]]["bytes"] for key in ("ids_file", "distances_file"))
    return {"artifact": target, "k": k, "metric": section["metric"], "workers": 2, "wall_seconds": round(seconds, 1),
            "cpu_seconds_all_processes": round(cpu, 1), "wall_seconds_if_2_idle_cores": round(cpu / 2, 1),
            "table_bytes": table_bytes, "table_mb": round(table_bytes / 2**20, 1), "fallback_rows": section["fallback_rows"],
            "kth_distance": section["kth_distance"], "loadavg_before": load_before, "loadavg_after": os.getloadavg()}


class CountingRng:
    """Wraps a Generator to count draws: rounds (random) and candidates (integers)."""

    def __init__(self, rng):
        self.rng, self.random_draws, self.candidates = rng, 0, 0

    def random(self, size):
        self.random_draws += int(np.prod(size))
        return self.rng.random(size)

    def integers(self, low, high, size):
        self.candidates += int(np.prod(size))
        return self.rng.integers(low, high, size=size)


def run_tem(artifact_dir: str, tokens: int) -> list:
    artifact = open_artifact(artifact_dir)
    corpus = imdb_token_ids(artifact.word_to_id, tokens)
    uniform = np.random.default_rng(SEED).integers(0, artifact.vocab_size, len(corpus))
    rows = []
    for eps in EPSILONS:
        tem = TEM(artifact, eps)
        tem.privatize_ids(corpus[:20000], np.random.default_rng(SEED))  # warm the page cache
        for name, ids in (("imdb_tokens", corpus), ("uniform_vocabulary", uniform),
                          ("imdb_tokens_rejection_only", corpus)):
            tem = TEM(artifact, eps)  # fresh: dense rows are built during the measured run
            if name.endswith("rejection_only"):  # the table sampler alone, without dense rows
                tem.DENSE_MAX_WORDS = 0
            rng = CountingRng(np.random.default_rng(SEED))
            load = os.getloadavg()
            started = time.process_time()
            wall = time.perf_counter()
            released = tem.privatize_ids(ids, rng)
            cpu = time.process_time() - started
            wall = time.perf_counter() - wall
            rows.append({"epsilon": eps, "gamma": round(tem.gamma, 4), "input": name, "tokens": int(len(ids)),
                         "cpu_seconds": round(cpu, 3), "wall_seconds": round(wall, 3),
                         "tokens_per_cpu_second": round(len(ids) / cpu),
                         "tokens_per_wall_second": round(len(ids) / wall),
                         "changed_fraction": round(float((released != ids).mean()), 4),
                         "candidates_per_token": round(rng.candidates / len(ids), 2),
                         "dense_rows_built": len(tem._dense_rows),
                         "envelope_violations": tem.envelope_violations, "loadavg": load})
            print(rows[-1], flush=True)
    return rows


def markdown(payload: dict) -> str:
    m = payload["machine"]
    lines = ["# TEM benchmark", "", f"Machine: {m['cpu']}, {m['cores']} cores (nproc), numpy {m['numpy']}; "
             f"load average at start {tuple(round(x, 2) for x in m['loadavg_at_start'])} (shared with other engineers). "
             f"Date {m['date_utc']}. Fixed seed {SEED} (benchmark only).", ""]
    nb = payload.get("neighbours")
    if nb:
        lines += ["## Neighbour pipeline (400,000 x 50, euclidean)", "",
                  f"K = {nb['k']}, 2 local worker processes (multi_processing), BLAS 1 thread each: "
                  f"**{nb['wall_seconds']} s wall** ({nb['wall_seconds'] / 60:.1f} min; target <= 15 min) on the shared "
                  f"machine; CPU time of the job and its workers {nb.get('cpu_seconds_all_processes', 'n/a')} s, i.e. "
                  f"about {nb.get('wall_seconds_if_2_idle_cores', 'n/a')} s on 2 otherwise idle cores; "
                  f"table **{nb['table_mb']} MiB** (target <= 1 GB: int32 ids + float32 distances, N x K). "
                  f"Rows needing the float64 fallback: {nb['fallback_rows']}. K-th distance min/median/max: "
                  f"{nb['kth_distance']['min']:.3f} / {nb['kth_distance']['median']:.3f} / {nb['kth_distance']['max']:.3f}. "
                  f"Load average before {tuple(round(x, 2) for x in nb['loadavg_before'])}, after "
                  f"{tuple(round(x, 2) for x in nb['loadavg_after'])}.", ""]
    lines += ["## TEM throughput, one core (target >= 20,000 tokens/s at every epsilon)", "",
              "gamma from Thm. 4.2 with beta = 0.001. tokens/s = tokens / process CPU seconds (one thread); "
              "candidates/token = words whose distance was computed on the fly by the table sampler (rejection rounds that needed one). "
              "Dense rows = frequent input words switched to a dense row during the run (built at run time, cost included); "
              "'rejection_only' disables them.", "",
              "| epsilon | gamma | input | tokens | tokens/s (CPU) | tokens/s (wall) | changed | candidates/token | dense rows | "
              "load avg |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in payload["tem"]:
        lines.append(f"| {r['epsilon']:g} | {r['gamma']:.3f} | {r['input']} | {r['tokens']:,} | {r['tokens_per_cpu_second']:,} | "
                     f"{r['tokens_per_wall_second']:,} | {r['changed_fraction']:.3f} | {r['candidates_per_token']:.1f} | "
                     f"{r.get('dense_rows_built', 0)} | "
                     f"{r['loadavg'][0]:.2f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/tem-bench", help="scratch directory for the artifact copy")
    parser.add_argument("--k", type=int, default=100, help="neighbours per word (default 100)")
    parser.add_argument("--tokens", type=int, default=200000, help="tokens per TEM measurement (default 200,000)")
    parser.add_argument("--skip-neighbours", action="store_true",
                        help="reuse the table already in --workdir (keeps the previous neighbour numbers)")
    args = parser.parse_args(argv)
    payload = {"machine": machine(), "seed": SEED}
    artifact_dir = os.path.join(args.workdir, "glove400k")
    if args.skip_neighbours:
        import json

        previous = os.path.join(REPO, "benchmarks", "results", "tem.json")
        if os.path.exists(previous):
            with open(previous) as handle:
                payload["neighbours"] = json.load(handle).get("neighbours")
    else:
        payload["neighbours"] = run_neighbours(args.workdir, args.k)
        print(payload["neighbours"], flush=True)
    payload["tem"] = run_tem(artifact_dir, args.tokens)
    payload["machine"]["loadavg_at_end"] = os.getloadavg()
    write_results("tem", payload, markdown(payload))


if __name__ == "__main__":
    main()
