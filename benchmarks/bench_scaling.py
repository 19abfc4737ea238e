"""Scaling benchmark (issue 17): workers, token batches, the text path, start-up, and the cost of a billion tokens.

    python -m benchmarks.bench_scaling [--reviews 20000] [--madlib-reviews 4000] [--workdir DIR] [--quick]

Everything runs in a plain environment: no thread variable is set by hand (each ``textdp privatize``
is a subprocess whose environment has every ``*_NUM_THREADS`` variable removed), so the numbers
show what a user gets. Parts:

1. **Token batches.** ``TextPrivatizer`` on real IMDb reviews grouped into batches of about N words
   (64 ... 16,384), one BLAS thread: tokens/s per batch size, for Madlib (exact, 400k words) and TEM.
   The exact search streams the whole 80 MB vector matrix once per call, so small batches pay it
   for few words; ``--batch-tokens``'s default is chosen from this table.
2. **Bare mechanisms.** ``privatize_ids`` on the same word ids, at the BLAS threads one local
   worker gets by default (the machine's cores) and at one thread (per core).
3. **The pipeline.** ``textdp privatize`` on IMDb reviews (one line each) with one worker (the
   default local runner) and with two worker processes (``--direct_num_workers 2
   --direct_running_mode multi_processing``). The benchmark watches the workers' progress files
   (``TEXTDP_PROGRESS_DIR``) every 0.1 s: start-up is the time from launching the command to the
   first record processed; steady state is the token rate between 10% and 90% of the tokens, from
   each worker's cumulative counts and the times it wrote them (every half second). TEM's bare
   sampler runs as independent processes on the pipeline's own tokens just before and after each
   epsilon's runs; per core, one-thread runs alternate with one-process bare runs (bare, run, bare,
   ...), each run compared with the bare runs just before and after it, because this machine's speed
   drifts by 10-20% within minutes (``PAIRED_RUNS``); the same on all cores (two worker processes
   against two bare processes at once).
4. **Start-up** of a one-record run with the cached artifact, three times.
5. **Cost of a billion tokens** on Dataflow from the per-vCPU steady-state rates (one SDK process per
   vCPU, one BLAS thread each), next to the public AWS Spark solution's published figure.

Results: benchmarks/results/scaling.{json,md}; the machine and its load are recorded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.harness import REPO, imdb_texts, load_results, machine, write_results
from textdp.allocator import retain_freed_memory
from textdp.artifact.locate import open_artifact, read_manifest
from textdp.mechanisms import make_mechanism
from textdp.progress import read_progress_files
from textdp.text.privatizer import TextPrivatizer

BATCH_SIZES = (64, 256, 1024, 4096, 16384)
AWS = {"reviews": 25_000, "minutes": 15, "vcpus": 16,
       "source": "AWS Solutions 'Text analysis with differential privacy' (Spark on EMR): 25,000 reviews "
                 "in 15 minutes on 16 vCPU, as quoted in issue 17"}


def plain_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["PYTHONPATH"] = REPO
    return env


def texts_to_batches(texts, tokens_per_batch, tokenizer_words):
    batch, size = [], 0
    for text in texts:
        batch.append(text)
        size += tokenizer_words(text)
        if size >= tokens_per_batch:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def batch_sweep(privatizer: TextPrivatizer, texts, max_tokens: int) -> list:
    rows = []
    rng = np.random.default_rng(1)
    for size in BATCH_SIZES:
        done, started = 0, time.perf_counter()
        for batch in texts_to_batches(texts, size, lambda t: t.count(" ") + 1):
            _, stats = privatizer.privatize(batch, rng)
            done += stats["tokens"]
            if done >= max_tokens:
                break
        elapsed = time.perf_counter() - started
        rows.append({"batch_tokens": size, "tokens": done, "seconds": round(elapsed, 2),
                     "tokens_per_s": round(done / elapsed, 1)})
        print(f"  batch {size:>6}: {done / elapsed:,.0f} tokens/s", flush=True)
    return rows


def bare_rate(mechanism, ids: np.ndarray, threads: int) -> float:
    """Tokens/s of ``privatize_ids`` with ``threads`` threads, as a privatize worker runs it: Madlib's exact
    search in its own threads over single-threaded BLAS (TEM uses one thread whatever this says)."""
    rng = np.random.default_rng(2)
    nearest = getattr(mechanism, "nearest", None)
    if hasattr(nearest, "threads"):
        nearest.threads = threads
    with threadpool_limits(limits=1):
        # warm-up: page in the mapped vectors; TEM also builds the dense rows of its costliest words,
        # which a pipeline run of millions of tokens amortizes, so it gets a whole pass first
        mechanism.privatize_ids(ids if getattr(mechanism, "name", "") == "tem" else ids[:2048], rng)
        started = time.perf_counter()
        mechanism.privatize_ids(ids, rng)
        return len(ids) / (time.perf_counter() - started)


# tokens of the pipeline's input for the bare sampler processes (None: all of them; epsilon 5 is ~14 µs a word)
BARE_PROCESS_TOKENS = {10.0: None, 5.0: 1_200_000}
# TEM: pipeline runs interleaved with bare runs (bare, run, bare, run, ..., bare), per core (one-thread runs against
# one bare process) and on all cores (one worker process per core against one bare process per core)
PAIRED_RUNS = {10.0: 3, 5.0: 1}


def _bare_process(artifact_dir: str, mech: str, eps: float, ids_path: str, barrier, queue) -> None:
    """One bare sampler process: one thread, the workers' allocator settings, a warm pass, then a timed one
    started together with the other processes (``barrier``); puts its tokens/s on ``queue``."""
    retain_freed_memory()
    with threadpool_limits(limits=1):
        mechanism = make_mechanism(mech, open_artifact(artifact_dir), eps)
        ids = np.load(ids_path)
        rng = np.random.default_rng()
        mechanism.privatize_ids(ids, rng)  # warm: dense rows of the costliest words, pages of the table
        barrier.wait()
        started = time.perf_counter()
        mechanism.privatize_ids(ids, rng)
        queue.put(len(ids) / (time.perf_counter() - started))


def bare_processes(artifact_dir: str, mech: str, eps: float, ids_path: str, processes: int) -> float:
    """Tokens/s of ``processes`` independent bare samplers running at once (the sum of their rates): what a
    single-threaded mechanism does with that many cores, memory traffic and all."""
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_bare_process, args=(artifact_dir, mech, eps, ids_path, barrier, queue))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    rates = [queue.get(timeout=3600) for _ in workers]
    for worker in workers:
        worker.join()
    return round(float(sum(rates)), 1)


def token_ids(privatizer: TextPrivatizer, texts) -> np.ndarray:
    ids = np.concatenate([privatizer.tokenizer.tokenize(t).ids for t in texts])
    return ids[ids >= 0]


def run_pipeline(workdir: str, name: str, input_path: str, artifact: str, flags: list) -> dict:
    """One ``textdp privatize`` run as a user would start it; start-up and steady state from progress files."""
    watch = tempfile.mkdtemp(prefix=f"watch-{name}-", dir=workdir)
    env = plain_env()
    env["TEXTDP_PROGRESS_DIR"] = watch
    output = os.path.join(workdir, name, "out")
    cmd = [sys.executable, "-m", "pipelines.cli", "privatize", f"--input={input_path}", f"--output={output}",
           f"--artifact={artifact}", "--overwrite"] + flags
    launched = time.time()
    process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    history, first = {}, None  # per worker file: {(time written, cumulative tokens)}

    def sample():
        nonlocal first
        runs = [os.path.join(watch, d) for d in os.listdir(watch)]
        for file_name, record in (read_progress_files(runs[0]).items() if runs else ()):
            if record.get("first") is not None:
                first = record["first"] if first is None else min(first, record["first"])
            if record.get("at") is not None:
                history.setdefault(file_name, set()).add((record["at"], int(record["counts"].get("tokens", 0))))

    while process.poll() is None:
        time.sleep(0.1)
        sample()
    sample()  # the workers' last writes
    out, err = process.communicate()
    ended = time.time()
    if process.returncode != 0:
        raise RuntimeError(f"{name} failed ({process.returncode}): {err[-2000:]}")
    summary = json.load(open(output + "-summary.json", encoding="utf-8"))
    total = summary["tokens"]["total"]
    steady, method = steady_rate(history, total)
    shutil.rmtree(watch, ignore_errors=True)
    result = {"run": name, "flags": flags, "tokens": total, "records": summary["records"]["out"],
              "wall_s": round(ended - launched, 1), "startup_s": None if first is None else round(first - launched, 2),
              "steady_tokens_per_s": None if steady is None else round(steady, 1), "steady_method": method,
              "whole_run_tokens_per_s": round(total / (ended - launched), 1)}
    print(f"  {name}: {result}", flush=True)
    return result


def steady_rate(history: dict, total: int):
    """Tokens/s between 10% and 90% of ``total``, from each worker's timestamped cumulative counts.

    Each worker's count between two of its writes (every half second and at each bundle's end) is
    interpolated linearly; the workers' counts are summed on a 10 ms grid. Returns (rate, method)."""
    series = []
    for points in history.values():
        ordered = sorted(points)
        series.append((np.array([t for t, _ in ordered]), np.array([c for _, c in ordered], dtype=float)))
    if not series or total <= 0:
        return None, None
    start = min(times[0] for times, _ in series)
    stop = max(times[-1] for times, _ in series)
    grid = np.arange(start, stop + 0.01, 0.01)
    counts = sum(np.interp(grid, times, values, left=0.0, right=values[-1]) for times, values in series)
    lo, hi = np.searchsorted(counts, 0.1 * total), np.searchsorted(counts, 0.9 * total)
    if hi >= len(grid) or hi <= lo:
        return None, None
    rate = float((counts[hi] - counts[lo]) / (grid[hi] - grid[lo]))
    return rate, "10% to 90% of the tokens, from the workers' timestamped counts"


def write_input(path: str, texts) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(text.replace("\n", " ").replace("\r", " ") + "\n")
    return path


def earlier_results(results: dict) -> dict:
    """The committed results, when they were measured with the same sizes, artifact and cores."""
    path = os.path.join(REPO, "benchmarks", "results", "scaling.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        earlier = json.load(f)
    same = all(earlier.get(k) == results[k] for k in ("cores", "sizes")) and \
        earlier.get("artifact", {}).get("vocab_size") == results["artifact"].get("vocab_size")
    return earlier if same else {}


def reuse(earlier: dict, results: dict, part: str):
    if earlier.get(part):
        results["reused"]["parts"].append(part)
        print(f"  reused from the earlier run: {part}", flush=True)
        return earlier[part]
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=20_000, help="IMDb reviews for the TEM runs (default 20,000)")
    parser.add_argument("--madlib-reviews", type=int, default=4_000,
                        help="IMDb reviews for the Madlib runs (default 4,000: ~1M tokens, minutes per run on "
                             "2 cores; steady state is reached long before)")
    parser.add_argument("--artifact", default=None, help="artifact with a neighbour table (default: the cached one)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the benchmark itself")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the parts and pipeline runs already in benchmarks/results/scaling.json (same "
                             "sizes) and run only what is missing; the results say which parts were reused and "
                             "the machine's load during the earlier run")
    parser.add_argument("--report-only", action="store_true",
                        help="only re-derive the ratios and rewrite scaling.md from the committed scaling.json")
    args = parser.parse_args(argv)
    if args.report_only:
        results = load_results("scaling")
        aws = results["derived"]["aws_spark"]  # computed from the unrounded words per review when measured
        results["derived"] = dict(derive(results, aws["words_per_review"]), aws_spark=aws)
        write_results("scaling", results, markdown(results))
        print(json.dumps(results["derived"], indent=2))
        return 0
    if args.quick:
        args.reviews, args.madlib_reviews = 400, 100
    info = machine()
    workdir = args.workdir or tempfile.mkdtemp(prefix="textdp-scaling-")
    os.makedirs(workdir, exist_ok=True)
    artifact_dir = args.artifact or open_artifact(None).path
    if "neighbours" not in read_manifest(artifact_dir):
        raise SystemExit(f"{artifact_dir} has no neighbour table: run `textdp neighbours --artifact {artifact_dir}`")
    artifact = open_artifact(artifact_dir)
    texts = imdb_texts(max(args.reviews, args.madlib_reviews))
    cores = os.cpu_count() or 1
    results = {"machine": info, "workdir": workdir, "artifact": artifact.describe(), "cores": cores,
               "sizes": {"reviews": args.reviews, "madlib_reviews": args.madlib_reviews}}
    earlier = earlier_results(results) if args.reuse else {}
    if earlier:
        history = [earlier["machine"]] + earlier.get("reused", {}).get("history", [])
        if "machine" in earlier.get("reused", {}) and earlier["reused"]["machine"] not in history:
            history.append(earlier["reused"]["machine"])
        results["reused"] = {"machine": earlier["machine"], "history": history, "parts": []}

    print("1. token batches (one BLAS thread)", flush=True)
    sweep = reuse(earlier, results, "batch_sweep") or {}
    with threadpool_limits(limits=1 if not sweep else None):
        for mech, eps, max_tokens in () if sweep else (("madlib", 10.0, 40_000), ("tem", 10.0, 400_000)):
            privatizer = TextPrivatizer(make_mechanism(mech, artifact, eps), artifact.words, artifact.word_to_id)
            sweep[f"{mech}-{eps:g}"] = batch_sweep(privatizer, texts[:4000], max_tokens)
    results["batch_sweep"] = sweep

    print("2. bare mechanisms", flush=True)
    retain_freed_memory()  # the allocator every privatize worker gets (textdp/allocator.py)
    bare = reuse(earlier, results, "bare") or {}
    for mech, eps in () if bare else (("madlib", 5.0), ("madlib", 10.0), ("tem", 5.0), ("tem", 10.0)):
        privatizer = TextPrivatizer(make_mechanism(mech, artifact, eps), artifact.words, artifact.word_to_id)
        ids = token_ids(privatizer, texts[:400 if mech == "madlib" else 4000])
        ids = ids[:60_000 if mech == "madlib" else 600_000]
        bare[f"{mech}-{eps:g}"] = {"threads_1": round(bare_rate(privatizer.mechanism, ids, 1), 1),
                                   f"threads_{cores}": round(bare_rate(privatizer.mechanism, ids, cores), 1),
                                   "tokens": int(len(ids))}
        print(f"  {mech} eps {eps:g}: {bare[f'{mech}-{eps:g}']}", flush=True)
    results["bare"] = bare

    print("2b. how one process should use its cores for Madlib's exact search", flush=True)
    threading_rows = reuse(earlier, results, "madlib_threading")
    if not threading_rows:
        privatizer = TextPrivatizer(make_mechanism("madlib", artifact, 10.0), artifact.words, artifact.word_to_id)
        ids = token_ids(privatizer, texts[:200])[:20_000]
        nearest = privatizer.mechanism.nearest
        threading_rows = {}
        nearest.threads = 1
        with threadpool_limits(limits=cores):  # one search thread, a BLAS pool of all cores
            privatizer.mechanism.privatize_ids(ids[:1024], np.random.default_rng(3))
            started = time.perf_counter()
            privatizer.mechanism.privatize_ids(ids, np.random.default_rng(3))
            threading_rows[f"blas_pool_{cores}"] = round(len(ids) / (time.perf_counter() - started), 1)
        for threads in sorted({1, cores}):
            threading_rows[f"search_threads_{threads}"] = round(bare_rate(privatizer.mechanism, ids, threads), 1)
    results["madlib_threading"] = threading_rows
    print(f"  {threading_rows}", flush=True)

    print("3. the pipeline, one and two workers", flush=True)
    tem_input = write_input(os.path.join(workdir, "reviews-tem.txt"), texts[:args.reviews])
    madlib_input = write_input(os.path.join(workdir, "reviews-madlib.txt"), texts[:args.madlib_reviews])
    two = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    done = {r["run"]: r for r in earlier.get("pipeline", [])}
    runs = []
    plan = []
    for mech, eps, path in (("tem", 10.0, tem_input), ("tem", 5.0, tem_input), ("madlib", 10.0, madlib_input),
                            ("madlib", 5.0, madlib_input)):
        flags = [f"--mechanism={mech}", f"--epsilon={eps:g}"]
        plan.append((f"{mech}-{eps:g}-1w", path, flags, dict(mechanism=mech, epsilon=eps, workers=1, threads="default")))
        if eps == 10.0 or mech == "tem":
            # one worker held to one thread: the per-core baseline that two one-thread workers scale from
            plan.append((f"{mech}-{eps:g}-1w-1t", path, flags + ["--blas-threads=1"],
                         dict(mechanism=mech, epsilon=eps, workers=1, threads=1)))
        # two worker processes: every core, for every mechanism (Madlib's int8 search gains more from two
        # processes than from two search threads in one)
        plan.append((f"{mech}-{eps:g}-2w", path, flags + two,
                     dict(mechanism=mech, epsilon=eps, workers=2, threads="default")))
    bare_next = (earlier.get("bare_processes") or {}) if earlier else {}
    tem_ids = None
    for group in ("tem-10", "tem-5", "madlib-10", "madlib-5"):
        members = [item for item in plan if item[0].startswith(group + "-")]
        fresh = [item for item in members if item[0] not in done]
        measure = group.startswith("tem") and fresh
        if measure:  # TEM's bare sampler as processes on the pipeline's own tokens, before and after its runs
            eps = float(group.split("-")[1])
            if tem_ids is None:
                privatizer = TextPrivatizer(make_mechanism("tem", artifact, 10.0), artifact.words, artifact.word_to_id)
                tem_ids = token_ids(privatizer, texts[:args.reviews])
            ids_path = os.path.join(workdir, f"bare-{group}.npy")
            np.save(ids_path, tem_ids[:BARE_PROCESS_TOKENS[eps]])
            row = {"tokens": int(len(tem_ids[:BARE_PROCESS_TOKENS[eps]])), "processes_1": [],
                   f"processes_{cores}": []}

            def bracket():
                for count in (1, cores):
                    row[f"processes_{count}"].append(bare_processes(artifact_dir, "tem", eps, ids_path, count))
                print(f"  bare {group}: {row}", flush=True)

            bracket()
        for name, path, flags, labels in members:
            if name in done:
                runs.append(dict(done[name], **labels))
                results["reused"]["parts"].append(f"pipeline:{name}")
                continue
            runs.append(dict(run_pipeline(workdir, name, path, artifact_dir, flags), **labels))
        if measure:
            bracket()
            # the machine's speed drifts by 10-20% within minutes, so each of these runs is compared with the
            # bare processes measured just before and just after it (the first: the bracket's last)
            for part, suffix, count in (("per_core", "-1w-1t", 1), ("all_cores", "-2w", cores)):
                name, path, flags, labels = next(item for item in members if item[0].endswith(suffix))
                row[part] = {"processes": count, "bare": [row[f"processes_{count}"][-1]], "pipeline": []}
                for index in range(PAIRED_RUNS[eps]):
                    run = run_pipeline(workdir, f"{name}-pair{index + 1}", path, artifact_dir, flags)
                    row[part]["pipeline"].append(run["steady_tokens_per_s"])
                    row[part]["bare"].append(bare_processes(artifact_dir, "tem", eps, ids_path, count))
                    print(f"  {part} {group}: {row[part]}", flush=True)
            bare_next[group] = row
        elif group in bare_next:
            results["reused"]["parts"].append(f"bare_processes:{group}")
    results["pipeline"] = runs
    results["bare_processes"] = bare_next

    print("4. start-up of a one-record run", flush=True)
    startup = reuse(earlier, results, "startup")
    if not startup:
        one = write_input(os.path.join(workdir, "one.txt"), texts[:1])
        startup = [run_pipeline(workdir, f"startup-{i}", one, artifact_dir, ["--epsilon=10"])["startup_s"]
                   for i in range(3)]
    results["startup"] = startup

    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["derived"] = derive(results, float(np.mean([t.count(" ") + 1 for t in texts[:args.reviews]])))
    write_results("scaling", results, markdown(results))
    print(json.dumps(results["derived"], indent=2))
    return 0


def bare_all_cores(results: dict, key: str) -> float:
    """The bare table's figure for every core: Madlib's exact search runs one thread per core, so its
    measured rate with ``cores`` threads; TEM's sampler is single-threaded (its ``threads_<cores>`` figure is
    only a second, warmer run on one thread), so ``cores`` independent processes: cores x the one-thread rate.
    The larger of the two, so the pipeline is never flattered."""
    row, cores = results["bare"][key], results["cores"]
    return max(row[f"threads_{cores}"], cores * row["threads_1"])


def bare_reference(results: dict, key: str) -> dict:
    """What the pipeline is compared with: the bare sampler processes measured next to the runs when there
    are some (``bare_processes``: their mean before and after), else the bare table."""
    measured = results.get("bare_processes", {}).get(key)
    if measured:
        return {"all_cores": round(float(np.mean(measured[f"processes_{results['cores']}"])), 1),
                "one_core": round(float(np.mean(measured["processes_1"])), 1), "how": "bare processes next to the runs"}
    return {"all_cores": round(bare_all_cores(results, key), 1), "one_core": results["bare"][key]["threads_1"],
            "how": "bare table"}


def paired_ratios(results: dict, key: str, part: str):
    """(ratios, median) of each interleaved pipeline run (``part``: "per_core" or "all_cores") over the mean of
    the bare runs just before and just after it; None when there are none."""
    pairs = results.get("bare_processes", {}).get(key, {}).get(part)
    if not pairs or not pairs["pipeline"]:
        return None
    bare, runs = pairs["bare"], pairs["pipeline"]
    ratios = [round(run / ((bare[i] + bare[i + 1]) / 2), 3) for i, run in enumerate(runs) if run]  # None: too short
    return (ratios, round(float(np.median(ratios)), 3)) if ratios else None  # the verdict sees three decimals


def derive(results: dict, words_per_review: float) -> dict:
    """The target ratios. "The pipeline on all cores" is the faster of the runs that use every core: one
    worker with its default threads (Madlib's exact search runs one thread per core) and two worker
    processes (TEM's sampler is single-threaded, so one worker uses one core); it is compared with the
    bare mechanism on all cores. Also one worker held to one thread against the bare rate on one thread
    (per core), and one worker with its default threads against all cores.

    The bare reference: for TEM, the mean of the independent bare sampler processes measured on the
    pipeline's own tokens just before and just after its runs (``bare_processes``: one process, and one
    per core at once), since the sampler is single-threaded and this machine's speed drifts by 10-20%
    over half an hour; for Madlib, the bare table (``bare_all_cores``: its threaded search on all cores)."""
    runs = {r["run"]: r for r in results["pipeline"]}
    cores = results["cores"]

    def steady(name):
        run = runs.get(name)
        return run["steady_tokens_per_s"] if run and run["steady_tokens_per_s"] else None

    def ratio(a, b):
        return round(a / b, 2) if a and b else None

    derived = {"speedup_2_workers": {}, "pipeline_over_bare": {}, "per_vcpu": {}, "billion_tokens_vcpu_hours": {}}
    for mech in ("madlib", "tem"):
        for eps in (5.0, 10.0):
            key = f"{mech}-{eps:g}"
            one, one_t, two = steady(f"{key}-1w"), steady(f"{key}-1w-1t"), steady(f"{key}-2w")
            if two:
                # with interleaved runs, every run of a configuration counts: the median of each (the machine drifts)
                paired = results.get("bare_processes", {}).get(key, {})
                twos = [two] + [x for x in paired.get("all_cores", {}).get("pipeline", []) if x]
                one_ts = [one_t] + [x for x in paired.get("per_core", {}).get("pipeline", []) if x] if one_t else []
                derived["speedup_2_workers"][key] = {
                    "over_one_worker_default": ratio(two, one),
                    "over_one_worker_one_thread": ratio(float(np.median(twos)), float(np.median(one_ts)) if one_ts
                                                        else None),
                    "runs": {"two_workers": twos, "one_worker_one_thread": one_ts},
                    "method": "median of every run of each configuration" if len(twos) > 1 else "one run each"}
            reference = bare_reference(results, key)
            everything, one_core = reference["all_cores"], reference["one_core"]
            candidates = [(rate, run) for rate, run in ((one, f"{key}-1w"), (two, f"{key}-2w")) if rate]
            best_rate, best_run = max(candidates) if candidates else (None, None)
            per_core, all_cores = paired_ratios(results, key, "per_core"), paired_ratios(results, key, "all_cores")
            derived["pipeline_over_bare"][key] = {
                "all_cores_over_bare_all_cores": all_cores[1] if all_cores else ratio(best_rate, everything),
                "all_cores_run": f"{key}-2w" if all_cores else best_run,
                "one_worker_over_bare_all_cores": ratio(one, everything),
                "one_worker_one_thread_over_bare_one_thread": per_core[1] if per_core else ratio(one_t, one_core),
                "method": ("median over interleaved runs, each over the bare processes just before and after it"
                           if per_core else "the run over the bare reference"),
                "per_core_ratios": per_core[0] if per_core else None,
                "all_cores_ratios": all_cores[0] if all_cores else None,
                "bracketed": {"one_worker_one_thread": ratio(one_t, one_core),
                              "all_cores": ratio(best_rate, everything)},
                "bare_reference": reference}
        two = steady(f"{mech}-10-2w")
        if two:
            runs_of_two = derived["speedup_2_workers"].get(f"{mech}-10", {}).get("runs", {}).get("two_workers") or [two]
            per_vcpu = float(np.median(runs_of_two)) / cores  # one process per vCPU, one thread each: as on Dataflow
            derived["per_vcpu"][f"{mech}-10"] = round(per_vcpu, 1)
            derived["billion_tokens_vcpu_hours"][f"{mech}-10"] = round(1e9 / per_vcpu / 3600, 1)
    words = words_per_review
    aws_tokens = AWS["reviews"] * words
    aws_per_vcpu = aws_tokens / (AWS["minutes"] * 60 * AWS["vcpus"])
    derived["aws_spark"] = dict(AWS, words_per_review=round(float(words), 1), per_vcpu=round(aws_per_vcpu, 1),
                                billion_tokens_vcpu_hours=round(1e9 / aws_per_vcpu / 3600, 1))
    derived["startup_s"] = results["startup"]
    return derived


def _fmt(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _verdict(value, target, higher=True):
    if value is None:
        return "n/a"
    met = value >= target if higher else value <= target
    return f"**{value:g}** ({'met' if met else 'missed'})"


def markdown(results: dict) -> str:
    d, m = results["derived"], results["machine"]
    lines = ["# Scaling: workers, token batches, start-up, cost (issue 17)", "",
             f"Machine: {m['cpu']}, {results['cores']} cores, Python {m['python']}, numpy {m['numpy']}; "
             f"load average at start {tuple(round(x, 2) for x in m['loadavg_at_start'])}, at end "
             f"{tuple(round(x, 2) for x in m['loadavg_at_end'])}; {m['date_utc']}. "
             "No thread variable set by hand. Produced by `python -m benchmarks.bench_scaling`.", ""]
    if results.get("reused"):
        runs = results["reused"].get("history") or [results["reused"]["machine"]]
        when = "; ".join(f"{e['date_utc']} (load average at start {tuple(round(x, 2) for x in e['loadavg_at_start'])}, "
                         f"at end {tuple(round(x, 2) for x in e['loadavg_at_end'])})" for e in runs)
        lines += [f"Parts reused from earlier runs of this benchmark (`--reuse`; same machine, sizes and artifact; "
                  f"runs started {when}): {', '.join(results['reused']['parts']) or 'none'}.", ""]
    lines += ["## Token batches (TextPrivatizer, one BLAS thread, tokens/s)", "",
              "| batch (words) | " + " | ".join(results["batch_sweep"]) + " |",
              "|---|" + "---|" * len(results["batch_sweep"])]
    for i, size in enumerate(BATCH_SIZES):
        lines.append(f"| {size:,} | " + " | ".join(_fmt(rows[i]['tokens_per_s']) for rows in results["batch_sweep"].values()) + " |")
    lines += ["", "## Bare mechanisms (tokens/s)", "",
              f"| mechanism | 1 thread | {results['cores']} threads in one process | all cores |",
              "|---|---|---|---|"]
    all_cores = f"threads_{results['cores']}"
    for key, row in results["bare"].items():
        lines.append(f"| {key} | {_fmt(row['threads_1'])} | {_fmt(row[all_cores])} | "
                     f"{_fmt(bare_all_cores(results, key))} |")
    lines += ["", "Measured in this process with the allocator settings every worker gets (`textdp/allocator.py`), "
              "after a warm-up (TEM: a whole pass, so the dense rows of its costliest words are built, as a long "
              "pipeline run has them). Madlib's exact search runs one thread per core; TEM's sampler is "
              "single-threaded, so its second column is only another run on one thread and its all-cores "
              "figure is cores x the one-thread rate; the targets use the processes measured below when there are "
              "some (\"Bare references used\")."]
    if results.get("bare_processes"):
        lines += ["", "## TEM's bare sampler as independent processes, on the pipeline's tokens (tokens/s)", "",
                  "Measured just before and just after each epsilon's pipeline runs (spawned processes, one thread "
                  "each, the workers' allocator settings, a warm pass, then a timed pass started together); the "
                  "targets for TEM use the mean of the two.", "",
                  "| mechanism | tokens per process | 1 process (before, after) | "
                  f"{results['cores']} processes at once, summed (before, after) |", "|---|---|---|---|"]
        for key, row in results["bare_processes"].items():
            many = row[f"processes_{results['cores']}"]
            lines.append(f"| {key} | {row['tokens']:,} | {', '.join(_fmt(x) for x in row['processes_1'])} | "
                         f"{', '.join(_fmt(x) for x in many)} |")
        paired = [(key, part, row[part]) for key, row in results["bare_processes"].items()
                  for part in ("per_core", "all_cores") if row.get(part)]
        if paired:
            lines += ["", "## TEM: pipeline runs between bare runs (tokens/s)", "",
                      "Bare, run, bare, run, ..., bare: each run over the mean of the bare runs just before and after "
                      "it, so that the machine's drift (10-20% within minutes) falls on both; the targets for TEM use "
                      "the median of these ratios. Per core: one worker held to one thread (`--blas-threads=1`) "
                      "against one bare process; all cores: one worker process per core against one bare process per "
                      "core, at once.", "",
                      "| mechanism | | bare | pipeline | ratios |", "|---|---|---|---|---|"]
            for key, part, pairs in paired:
                ratios = (paired_ratios(results, key, part) or ([],))[0]
                lines.append(f"| {key} | {part.replace('_', ' ')} | {', '.join(_fmt(x) for x in pairs['bare'])} | "
                             f"{', '.join(_fmt(x) for x in pairs['pipeline'])} | "
                             f"{', '.join(f'{x:.3f}' for x in ratios)} |")
            lines += ["", "For comparison, the runs of the pipeline table below over the mean of the bare processes "
                      "before and after all of that epsilon's runs (the earlier method), per core / all cores: " +
                      "; ".join(f"{key} {_fmt(d['pipeline_over_bare'][key]['bracketed']['one_worker_one_thread'], 2)} / "
                                f"{_fmt(d['pipeline_over_bare'][key]['bracketed']['all_cores'], 2)}"
                                for key in dict.fromkeys(key for key, _, _ in paired)) + "."]
    lines += ["", "## One process, all cores: Madlib's exact search (epsilon 10, tokens/s)", "",
              "| way | tokens/s |", "|---|---|"]
    lines += [f"| {way} | {_fmt(rate)} |" for way, rate in results["madlib_threading"].items()]
    lines += ["", "## The pipeline (`textdp privatize`, local runner)", "",
              "| run | workers | threads per worker | tokens | wall (s) | start-up (s) | steady tokens/s | whole-run tokens/s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results["pipeline"]:
        lines.append(f"| {r['run']} | {r.get('workers', '')} | {r.get('threads', 'default')} | {r['tokens']:,} | "
                     f"{r['wall_s']} | {r['startup_s']} | {_fmt(r['steady_tokens_per_s'])} | "
                     f"{_fmt(r['whole_run_tokens_per_s'])} |")
    lines += ["", "`default` threads: the `--blas-threads` default, cores / worker processes (2 for one worker, 1 for "
              "two on this machine).", "", "## Targets", "",
              "| target | madlib | tem |", "|---|---|---|"]
    sp, pb = d["speedup_2_workers"], d["pipeline_over_bare"]

    def cell(table, key, field, target=None):
        value = table.get(key, {}).get(field)
        return _verdict(value, target) if target is not None else _fmt(value, 2)

    targets = (  # (row label, table, field, target or None), each for epsilon 10 and 5
        ("2 workers / 1 worker held to one thread, steady state (TEM: medians of all their runs) (>= 1.7)",
         sp, "over_one_worker_one_thread", 1.7),
        ("the pipeline on all cores ({runs}) / bare on all cores (TEM: median of the interleaved runs) (>= 0.80)",
         pb, "all_cores_over_bare_all_cores", 0.8),
        ("1 worker, one thread / bare on one thread (per core; TEM: median of the interleaved runs) (>= 0.80)",
         pb, "one_worker_one_thread_over_bare_one_thread", 0.8),
        ("1 worker with its default threads / bare on all cores", pb, "one_worker_over_bare_all_cores", None))
    for label, table, field, target in targets:
        for eps in ("10", "5"):
            runs = " / ".join(str(pb[f"{m}-{eps}"]["all_cores_run"]) for m in ("madlib", "tem"))
            lines.append(f"| epsilon {eps}: {label.format(runs=runs)} | "
                         + " | ".join(cell(table, f"{m}-{eps}", field, target) for m in ("madlib", "tem")) + " |")
    lines += ["", "Bare references used: " + "; ".join(
        f"{key} {_fmt(row['bare_reference']['all_cores'])} on all cores, {_fmt(row['bare_reference']['one_core'])} "
        f"on one ({row['bare_reference']['how']})" for key, row in pb.items()) + "."]
    lines += ["", "\"The pipeline on all cores\" is the faster of one worker with its default threads and two worker "
              "processes. One TEM worker uses one core whatever its threads (the sampler is single-threaded), so "
              "TEM needs one worker process per core to use a machine: `--direct_num_workers=<cores> "
              "--direct_running_mode=multi_processing` locally, which Dataflow does by itself (one SDK process per "
              "vCPU)."]
    lines += ["", f"Start-up of a one-record run with the cached artifact, to the first record processed (target <= 5 s): "
              f"{', '.join('n/a' if x is None else f'{x:g} s' for x in d['startup_s'])}.", "",
              "## A billion tokens on Dataflow", "",
              "| | tokens/s per vCPU | vCPU-hours per billion tokens |", "|---|---|---|"]
    for key in d["per_vcpu"]:
        lines.append(f"| textdp {key} (two one-thread workers on two cores, steady state (median of their runs), "
                     f"per core) | "
                     f"{_fmt(d['per_vcpu'][key])} | {_fmt(d['billion_tokens_vcpu_hours'][key], 1)} |")
    a = d["aws_spark"]
    lines += [f"| AWS Spark solution ({a['words_per_review']} words per IMDb review) | {_fmt(a['per_vcpu'])} | "
              f"{_fmt(a['billion_tokens_vcpu_hours'], 1)} |", "", f"AWS figure: {a['source']}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
