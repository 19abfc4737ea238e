"""Python API benchmark (issue 14): ``textdp.Privatizer`` against the bare mechanism, and its construction.

    python -m benchmarks.bench_api [--reviews 10000] [--madlib-reviews 1000] [--artifact DIR]

1. Construction: ``textdp.Privatizer(epsilon=...)`` with the artifact already in the cache (and its
   files verified once before, as after any earlier run), Madlib and TEM, five times each in fresh
   processes (so nothing is cached in memory): seconds to a ready object.
2. Throughput: ``Privatizer.privatize`` on IMDb reviews against the bare ``privatize_ids`` of a fresh
   mechanism (warmed up on the same 20 reviews as the API) on the same word ids, same threads (the API's default: the
   machine's cores for Madlib's
   exact search; TEM is single-threaded). TEM at epsilon 5 and 10 on 10,000 reviews; Madlib at
   epsilon 10 on 1,000 reviews (its search costs ~0.5 ms per word on 400k words, so steady state is
   reached long before 10,000). The ratio is API tokens/s over bare tokens/s (target >= 0.9).

Results: benchmarks/results/api.{json,md}, with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.harness import REPO, imdb_texts, machine, write_results
from textdp.artifact.locate import open_artifact

CONSTRUCT = ("import time, json, sys; t = time.perf_counter(); import textdp; "
             "p = textdp.Privatizer(epsilon=10, mechanism=sys.argv[1], artifact=sys.argv[2] or None); "
             "print(json.dumps({'seconds': time.perf_counter() - t}))")


def construction(mechanism: str, artifact: str, repeats: int = 5) -> list:
    times = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", CONSTRUCT, mechanism, artifact], cwd=REPO, capture_output=True,
                             text=True, check=True)
        times.append(round(json.loads(out.stdout.strip().splitlines()[-1])["seconds"], 3))
    return times


def throughput(mechanism: str, epsilon: float, texts, artifact: str) -> dict:
    from threadpoolctl import threadpool_limits

    import textdp

    p = textdp.Privatizer(epsilon=epsilon, mechanism=mechanism, artifact=artifact)
    p.privatize(texts[:20])  # warm-up: page in the mapped files
    started = time.perf_counter()
    p.privatize(texts)
    api_seconds = time.perf_counter() - started
    tokens = p.last_stats["tokens"]
    ids = np.concatenate([p._text.tokenizer.tokenize(t).ids for t in texts])
    known = ids[ids >= 0]
    unknown = int((ids < 0).sum())
    # the bare mechanism gets the same words, an unknown word standing for a uniform vocabulary word (the
    # default OOV policy sends those through the mechanism too)
    rng = np.random.default_rng(5)
    bare_ids = ids.copy()
    bare_ids[ids < 0] = rng.integers(0, p.artifact.vocab_size, unknown)
    # a fresh mechanism, warmed up like the API's: TEM keeps state across calls (dense rows for the words
    # that cost most), so measuring the bare draws on the API's warmed mechanism would favour them
    fresh = textdp.Privatizer(epsilon=epsilon, mechanism=mechanism, artifact=artifact)
    warm = np.concatenate([fresh._text.tokenizer.tokenize(t).ids for t in texts[:20]])
    with threadpool_limits(limits=1, user_api="blas"):
        fresh.mechanism.privatize_ids(np.where(warm < 0, 0, warm), rng)
        started = time.perf_counter()
        fresh.mechanism.privatize_ids(bare_ids, rng)
        bare_seconds = time.perf_counter() - started
    result = {"mechanism": mechanism, "epsilon": epsilon, "reviews": len(texts), "tokens": int(tokens),
              "in_vocabulary": int(len(known)), "api_tokens_per_s": round(tokens / api_seconds, 1),
              "bare_tokens_per_s": round(len(bare_ids) / bare_seconds, 1),
              "threads": p.threads if mechanism == "madlib" else 1}
    result["ratio"] = round(result["api_tokens_per_s"] / result["bare_tokens_per_s"], 3)
    print(f"  {result}", flush=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=10_000)
    parser.add_argument("--madlib-reviews", type=int, default=1_000)
    parser.add_argument("--artifact", default=None, help="an artifact with a neighbour table (TEM); default: the cache's")
    args = parser.parse_args(argv)
    info = machine()
    artifact = args.artifact or open_artifact(None).path
    texts = [t.replace("<br />", " ") for t in imdb_texts(args.reviews)]
    results = {"machine": info, "artifact": artifact}
    print("1. construction", flush=True)
    results["construction_s"] = {mech: construction(mech, artifact) for mech in ("madlib", "tem")}
    print(f"  {results['construction_s']}", flush=True)
    print("2. throughput", flush=True)
    results["throughput"] = [throughput("tem", 5.0, texts, artifact), throughput("tem", 10.0, texts, artifact),
                             throughput("madlib", 10.0, texts[:args.madlib_reviews], artifact)]
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    lines = ["# Python API (issue 14)", "",
             f"Machine: {info['cpu']}, {info['cores']} cores; load average at start {info['loadavg_at_start']}, at end "
             f"{results['machine']['loadavg_at_end']}; {info['date_utc']}. `python -m benchmarks.bench_api"
             + (f" --artifact {args.artifact}" if args.artifact else "") + "`.", "",
             "## Construction with a cached artifact (target < 2 s)", "",
             "| mechanism | seconds (5 fresh processes) |", "|---|---|"]
    lines += [f"| {mech} | {', '.join(map(str, times))} |" for mech, times in results["construction_s"].items()]
    lines += ["", "## Privatizer.privatize vs the bare mechanism (target: ratio >= 0.9)", "",
              "| mechanism | epsilon | reviews | tokens | API tokens/s | bare tokens/s | ratio |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['mechanism']} | {r['epsilon']:g} | {r['reviews']:,} | {r['tokens']:,} | {r['api_tokens_per_s']:,.0f} | "
              f"{r['bare_tokens_per_s']:,.0f} | {r['ratio']} |" for r in results["throughput"]]
    write_results("api", results, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
