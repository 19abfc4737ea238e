"""The one table sampler's speed through TEM, SanText and SanText+ on the 400k GloVe artifact, one core.

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.bench_table_sampler --artifact DIR [--tokens 200000] [--label after]

``DIR`` is a copy of the default artifact with a neighbour table (``textdp neighbours --artifact DIR --k 100``,
as benchmarks/bench_tem.py builds it). Tokens: real IMDb review words in reading order (the first ``--tokens``
in-vocabulary tokens of up to 20,000 reviews). Each row: a fresh mechanism (dense rows are built during the
measured run, cost included), process CPU seconds of one ``privatize_ids`` call, tokens per CPU second, and
the load average. Prints one JSON object per row; run it once on the code before a change (PYTHONPATH=<old
checkout>) and once after, and compare (benchmarks/results/table_sampler.md). Fixed seed (benchmark only).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks.harness import imdb_token_ids
from textdp.artifact.locate import open_artifact
from textdp.mechanisms.santext import SanText
from textdp.mechanisms.tem import TEM

SEED = 20261125
# (mechanism, epsilon, largest token count): SanText+ at epsilon 8 runs ~1,000 tokens/s, so it gets fewer tokens
CASES = [("tem", e, None) for e in (1.0, 2.0, 5.0, 10.0, 20.0)] + [("santext", e, None) for e in (1.0, 3.0)] \
    + [("santext+", 1.0, None), ("santext+", 3.0, None), ("santext+", 8.0, 20_000)]


def build(artifact, name: str, epsilon: float):
    if name == "tem":
        return TEM(artifact, epsilon)
    return SanText(artifact, epsilon, plus=(name == "santext+"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--label", default="")
    parser.add_argument("--only", default=None, help="comma-separated mechanism names")
    args = parser.parse_args(argv)
    artifact = open_artifact(args.artifact)
    corpus = imdb_token_ids(artifact.word_to_id, args.tokens, reviews=20_000)
    only = set(args.only.split(",")) if args.only else None
    build(artifact, "tem", 10.0).privatize_ids(corpus[:20000], np.random.default_rng(SEED))  # warm the page cache
    for name, epsilon, most in CASES:
        if only and name not in only:
            continue
        ids = corpus[:most] if most else corpus
        mech = build(artifact, name, epsilon)
        load = os.getloadavg()[0]
        started, wall = time.process_time(), time.perf_counter()
        released = mech.privatize_ids(ids, np.random.default_rng(SEED))
        cpu, wall = time.process_time() - started, time.perf_counter() - wall
        print(json.dumps({"label": args.label, "mechanism": name, "epsilon": epsilon, "tokens": len(ids),
                          "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
                          "tokens_per_cpu_second": round(len(ids) / cpu),
                          "changed": round(float((released != ids).mean()), 4), "loadavg": round(load, 2),
                          "code": __import__("textdp").__file__}), flush=True)


if __name__ == "__main__":
    main()
