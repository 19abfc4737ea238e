"""Benchmark of the privatize pipeline: throughput against the bare mechanism, and worker memory.

Throughput. The same IMDb reviews (../shared/data/imdb_50k.csv.gz, one review per line) are
privatized (a) by the whole pipeline on the local FnApiRunner with one in-process worker, end to
end (read, tokenize, batch, Madlib, write, summary; artifact load included), and (b) by the bare
mechanism: ``Madlib.privatize_ids`` on the ids of exactly the in-vocabulary tokens the pipeline
releases, in one call. Both use Madlib with exact search on the default 400k-word artifact, in
this process, with BLAS limited to one thread (environment variables set before numpy loads, and
threadpoolctl). With --repeats the runs alternate (bare, pipeline, bare, pipeline) so that load
from other users of the machine hits both alike. Target: pipeline >= 80% of the bare mechanism's tokens/s.

Memory. Worker processes that each load the default artifact through ``PrivatizerHolder`` (as a
Beam worker does) and privatize a few reviews, so every vector page is touched. Each reports its
proportional set size (PSS, /proc/<pid>/smaps_rollup) before loading and after, while all of them
are alive. Shared pages (the memory-mapped vectors in the page cache) are split between the
processes by PSS, private pages are not. Target: two processes < 1.3x the memory of one.

    python -m benchmarks.bench_pipeline     # 2,000 reviews, one pair -> benchmarks/results/pipeline.json
    python -m benchmarks.bench_pipeline --reviews 400 --repeats 2 --output /tmp/pipeline-400.json   # quicker check
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported, here and in every subprocess

import argparse
import glob
import json
import subprocess
import sys
import tempfile
import time

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.harness import REPO, machine, read_imdb, write_results
from benchmarks.harness import RESULTS as RESULTS_DIR

RESULTS = os.path.join(RESULTS_DIR, "pipeline.json")
EPSILON = 10.0
NOTES = [
    "Throughput: 'ratio' = bare seconds / pipeline seconds for the same in-vocabulary tokens (the pipeline's "
    "time is end to end: Beam start-up, artifact load, read, tokenize, batch, Madlib, write, summary). "
    "The machine is shared (2 cores, load average 4-9 during the runs), so single runs vary by tens of "
    "percent; 'ratio_best_of_each' compares the best run of each, the fairest figure under contention.",
    "Memory: 'artifact_pss' is each process's PSS after loading and using the artifact minus its PSS "
    "before (Python, numpy and Beam imported), summed over the processes; 'total_pss' is the processes' "
    "whole PSS. The vectors and the vocabulary are memory-mapped and shared; what each process keeps "
    "privately is ~11 MB of vocabulary index arrays, the 1.6 MB squared norms and the exact search's "
    "16 MB block buffer. The interpreter and Beam themselves (~105 MB per process) are not shared, so the "
    "whole-process ratio is well above 1.3 and cannot reach it by sharing the artifact.",
]


def read_reviews(count: int) -> list:
    return [" ".join(row["text"].split()) for row in read_imdb(count)]  # one review per line


# --- throughput ----------------------------------------------------------------------------------

def run_pipeline(corpus: str, out_dir: str) -> dict:
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.privatize import build_pipeline

    output = os.path.join(out_dir, "released")
    started = time.perf_counter()
    pipeline = build_pipeline(PipelineOptions([
        f"--input={corpus}", f"--output={output}", f"--epsilon={EPSILON}", "--nn=exact",
        # one search thread, as the bare run (the worker's default would split the search over every core)
        "--blas-threads=1", "--runner=FnApiRunner", "--direct_num_workers=1"]))
    pipeline.run().wait_until_finish()
    seconds = time.perf_counter() - started
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    for path in glob.glob(f"{output}*"):
        os.remove(path)
    return {"seconds": seconds, "tokens": summary["tokens"]["total"], "unknown": summary["tokens"]["unknown"],
            "records": summary["records"]}


def run_bare(mechanism, known_ids: np.ndarray) -> float:
    started = time.perf_counter()
    mechanism.privatize_ids(known_ids, np.random.default_rng())
    return time.perf_counter() - started


def throughput(reviews: int, repeats: int = 2) -> dict:
    from textdp.artifact.locate import open_artifact
    from textdp.mechanisms.madlib import Madlib
    from textdp.text.privatizer import word_ids
    from textdp.text.tokenize import Tokenizer

    texts = read_reviews(reviews)
    artifact = open_artifact(None)
    ids = word_ids(Tokenizer(artifact.word_to_id), texts)
    known = ids[ids >= 0]
    mechanism = Madlib(artifact, EPSILON, nn="exact")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "reviews.txt")
        with open(corpus, "w", encoding="utf-8") as handle:
            handle.write("\n".join(texts) + "\n")
        for _ in range(repeats):
            bare = run_bare(mechanism, known)
            pipe = run_pipeline(corpus, tmp)
            assert pipe["tokens"] == len(ids) and pipe["tokens"] - pipe["unknown"] == len(known)
            runs.append({"bare_seconds": bare, "pipeline_seconds": pipe["seconds"],
                         "bare_known_tokens_per_s": len(known) / bare,
                         "pipeline_known_tokens_per_s": len(known) / pipe["seconds"],
                         "pipeline_all_tokens_per_s": len(ids) / pipe["seconds"],
                         "ratio": bare / pipe["seconds"], "loadavg_after": list(os.getloadavg())})
    best_bare = min(r["bare_seconds"] for r in runs)
    best_pipe = min(r["pipeline_seconds"] for r in runs)
    return {"reviews": len(texts), "tokens": int(len(ids)), "known_tokens": int(len(known)),
            "unknown_tokens": int(len(ids) - len(known)), "runs": runs,
            "ratio_best_of_each": best_bare / best_pipe,
            "ratio_mean": float(np.mean([r["ratio"] for r in runs])),
            "target": ">= 0.80", "met": best_bare / best_pipe >= 0.8}


# --- memory --------------------------------------------------------------------------------------

def pss_kib() -> int:
    with open("/proc/self/smaps_rollup", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError("no Pss line in /proc/self/smaps_rollup")


def memory_worker(sync_dir: str, index: int, count: int, artifact: str) -> None:
    """One worker: import, PSS, load the holder, privatize, wait for the others, PSS, report."""
    import apache_beam  # noqa: F401

    from transforms.perturb import PerturbConfig, PrivatizerHolder

    before = pss_kib()
    holder = PrivatizerHolder(PerturbConfig(artifact=artifact, mechanism="madlib", epsilon=EPSILON))
    holder.make_privatizer().privatize(read_reviews(20), np.random.default_rng())
    loaded = pss_kib()  # alone or not: the others may still be loading
    open(os.path.join(sync_dir, f"ready-{index}"), "w").close()
    while len(glob.glob(os.path.join(sync_dir, "ready-*"))) < count:
        time.sleep(0.05)
    together = pss_kib()
    with open(os.path.join(sync_dir, f"result-{index}.json"), "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "pss_before_kib": before, "pss_loaded_kib": loaded,
                   "pss_all_loaded_kib": together}, handle)
    open(os.path.join(sync_dir, f"measured-{index}"), "w").close()
    while len(glob.glob(os.path.join(sync_dir, "measured-*"))) < count:
        time.sleep(0.05)


def memory_run(count: int, artifact: str) -> dict:
    with tempfile.TemporaryDirectory() as sync_dir:
        # run as a module from the repository, so the worker imports benchmarks.harness like the parent
        procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.bench_pipeline", "--memory-worker", sync_dir,
                                   str(i), str(count), artifact], cwd=REPO)
                 for i in range(count)]
        for proc in procs:
            if proc.wait(timeout=600) != 0:
                raise RuntimeError("memory worker failed")
        workers = [json.load(open(os.path.join(sync_dir, f"result-{i}.json"), encoding="utf-8"))
                   for i in range(count)]
    total = sum(w["pss_all_loaded_kib"] for w in workers)
    artifact = sum(w["pss_all_loaded_kib"] - w["pss_before_kib"] for w in workers)
    return {"processes": count, "workers": workers, "total_pss_mib": total / 1024,
            "artifact_pss_mib": artifact / 1024}


def memory() -> dict:
    """One process, then two, on a private copy of the default artifact.

    The copy matters: PSS splits a shared page between all processes mapping it, and on a shared
    machine other people's processes map the default artifact in the cache too.
    """
    import shutil

    from textdp.artifact.locate import read_manifest
    from textdp.artifact.store import ensure_default_artifact

    source = ensure_default_artifact()
    manifest = read_manifest(source)
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "artifact")
        os.makedirs(copy)
        for name in ("manifest.json", manifest["vocab"], manifest["vectors"]):  # what Madlib exact reads
            shutil.copyfile(os.path.join(source, name), os.path.join(copy, name))
        one, two = memory_run(1, copy), memory_run(2, copy)
    return {"artifact_copy_of": source, "one": one, "two": two,
            "ratio_total_pss": two["total_pss_mib"] / one["total_pss_mib"],
            "ratio_artifact_pss": two["artifact_pss_mib"] / one["artifact_pss_mib"],
            "target": "< 1.3 (two processes vs one)",
            "met_artifact": two["artifact_pss_mib"] / one["artifact_pss_mib"] < 1.3,
            "met_total": two["total_pss_mib"] / one["total_pss_mib"] < 1.3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=2000, help="IMDb reviews to privatize (default 2000)")
    parser.add_argument("--repeats", type=int, default=1, help="bare/pipeline run pairs (default 1)")
    parser.add_argument("--skip-throughput", action="store_true", help="only measure memory")
    parser.add_argument("--output", default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument("--memory-worker", nargs=4, metavar=("SYNC_DIR", "INDEX", "COUNT", "ARTIFACT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        sync_dir, index, count, artifact = args.memory_worker
        with threadpool_limits(1):
            memory_worker(sync_dir, int(index), int(count), artifact)
        return 0
    notes = list(NOTES)
    if args.reviews < 2000 and not args.skip_throughput:
        notes.append(f"{args.reviews} reviews rather than 2,000: exact Madlib on 400k words runs at ~500-950 "
                     "tokens/s on one contended core, so the full 480k tokens take about 9 minutes per run.")
    results = {"benchmark": "privatize pipeline vs bare Madlib (exact, 400k GloVe 50d), and worker memory",
               "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine_before": machine(), "epsilon": EPSILON, "notes": notes}
    with threadpool_limits(1):
        if not args.skip_throughput:
            results["throughput"] = throughput(args.reviews, args.repeats)
        results["memory"] = memory()
    results["machine_after"] = machine()
    name = os.path.splitext(os.path.basename(args.output))[0]
    write_results(name, results, results_dir=os.path.dirname(os.path.abspath(args.output)))
    print(json.dumps({k: v for k, v in results.items() if k in ("throughput", "memory")}, indent=2)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
