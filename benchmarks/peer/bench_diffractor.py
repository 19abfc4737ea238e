"""1-Diffractor (PyPI dp-diffractor 0.2.1, Meisenbacher et al. IWSPA 2024) as a peer: speed and a frontier point.

    nice -n 10 python -m benchmarks.peer.bench_diffractor --artifact /var/tmp/frontier/glove400k \\
        --reviews /var/tmp/frontier/work/reviews.jsonl --epsilons 1,3

1. A separate virtual environment (``--venv``, default ~/.cache/textdp-bench/dp-diffractor-0.2.1) gets
   ``dp-diffractor==0.2.1`` from PyPI (its ``pip freeze`` goes into the results).
2. The textdp artifact's words and vectors (GloVe 6B 50d) are exported (bench_peer.export_vocabulary);
   ``diffractor_runner.py`` (the venv's Python) filters them to the library's own word list and runs its
   geometric mechanism over them (see the runner's docstring for the two parts of its API that do not
   work in 0.2.1 and how the runner passes the vectors in).
3. Speed, in the same run on the same texts: the frontier benchmark's IMDb reviews (``--reviews``, the
   JSONL benchmarks/frontier.py writes), through Diffractor's ``rewrite`` and through
   ``textdp.Privatizer`` (Madlib, exact search, and TEM), each counting tokens by its own tokenizer.
4. A frontier point: IMDb accuracy at training and test time of its releases (benchmarks/utility), the
   same classifier and intervals as benchmarks/frontier.py. No inversion or linkage: ``textdp audit``
   attacks textdp mechanisms only.

What its guarantee covers (from its code and paper): metric DP in the distance |i - j| between positions
in a 1-D ordering of its word list (one greedy nearest-neighbour chain per embedding), per embedding; a
token is released as a uniform choice among the embeddings' candidates. Stopwords (NLTK's English list,
by default) and words outside its list pass through unchanged, with no protection.
Results: benchmarks/results/peer-diffractor.json and .md. Its code is only installed and called.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

from benchmarks.harness import BENCH_CACHE, RESULTS, load_results, machine, write_results
from benchmarks.peer.bench_peer import export_vocabulary
from benchmarks.peer.report import diffractor_markdown as markdown
from benchmarks.utility import classify, data, stats

REQUIREMENTS = ("dp-diffractor==0.2.1",)
DEFAULT_VENV = os.path.join(BENCH_CACHE, "dp-diffractor-0.2.1")
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "diffractor_runner.py")
SEED = 20261128


def ensure_venv(path: str) -> dict:
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
    freeze = subprocess.run([python, "-m", "pip", "freeze"], check=True, capture_output=True, text=True).stdout.split()
    if not any(line.lower().replace("_", "-").startswith("dp-diffractor==0.2.1") for line in freeze):
        subprocess.run([python, "-m", "pip", "install", "--quiet", *REQUIREMENTS], check=True)
        freeze = subprocess.run([python, "-m", "pip", "freeze"], check=True, capture_output=True, text=True).stdout.split()
    return {"path": path, "requirements": list(REQUIREMENTS), "pip_freeze": freeze}


def time_textdp(texts, artifact: str, mechanism: str, epsilon: float) -> dict:
    import textdp

    privatizer = textdp.Privatizer(epsilon=epsilon, mechanism=mechanism, artifact=artifact)
    privatizer.privatize(texts[:5], seed=1)  # load the artifact and warm up
    started = time.perf_counter()
    privatizer.privatize(texts, seed=SEED)
    wall = time.perf_counter() - started
    tokens = privatizer.last_stats.get("tokens") if isinstance(getattr(privatizer, "last_stats", None), dict) else None
    tokens = tokens or sum(len(re.findall(r"\w+", t)) for t in texts)
    return {"mechanism": mechanism, "epsilon": epsilon, "wall_seconds": wall, "tokens": tokens,
            "tokens_per_second": tokens / wall}


def accuracy(records, released: dict) -> dict:
    order = {split: [r["id"] for r in records if r["split"] == split] for split in ("train", "test")}
    plain = {s: ([r["text"] for r in records if r["split"] == s], [r["label"] for r in records if r["split"] == s])
             for s in order}
    base_model = classify.fit(*plain["train"])
    base = classify.correct(base_model, *plain["test"])
    private = {s: ([released[i] for i in ids], plain[s][1]) for s, ids in order.items()}
    train_time = classify.correct(classify.fit(*private["train"]), *plain["test"])
    test_time = classify.correct(base_model, *private["test"])
    rng = np.random.default_rng(SEED)
    return {"baseline": stats.wilson_interval(int(base.sum()), len(base)),
            **{name: {"wilson": stats.wilson_interval(int(c.sum()), len(c)),
                      "delta_to_baseline": stats.paired_bootstrap_delta([c], base, rng)}
               for name, c in (("training_time", train_time), ("test_time", test_time))}}




def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", required=True, help="textdp artifact (TEM needs its neighbour table)")
    parser.add_argument("--reviews", required=True, help="the frontier benchmark's reviews.jsonl")
    parser.add_argument("--epsilons", default="1,3", help="Diffractor epsilons; default 1,3")
    parser.add_argument("--max-texts", type=int, default=0, help="use only the first N reviews (0: all)")
    parser.add_argument("--venv", default=DEFAULT_VENV)
    parser.add_argument("--workdir", default="/var/tmp/frontier/diffractor")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    info = machine()
    os.makedirs(args.workdir, exist_ok=True)
    records = [r for r in data.read_jsonl([args.reviews]) if r["split"] in ("train", "test")]
    if args.max_texts:
        records = records[:args.max_texts]
    texts_path = os.path.join(args.workdir, "texts.jsonl")
    with open(texts_path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in records)
    from textdp.artifact.locate import open_artifact

    paths = export_vocabulary(open_artifact(args.artifact), args.workdir)
    venv = ensure_venv(args.venv)
    spec = {**paths, "texts_path": texts_path, "epsilons": [float(e) for e in args.epsilons.split(",")],
            "seed": SEED, "workdir": args.workdir}
    spec_path, out_path = os.path.join(args.workdir, "spec.json"), os.path.join(args.workdir, "out.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    with open(os.path.join(args.workdir, "runner.log"), "w", encoding="utf-8") as log:
        subprocess.run([os.path.join(args.venv, "bin", "python"), RUNNER, spec_path, out_path], stdout=log,
                       stderr=subprocess.STDOUT, cwd=args.workdir, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(out_path, encoding="utf-8") as handle:
        run = json.load(handle)
    texts = [r["text"] for r in records]
    payload = {"benchmark": "peer-diffractor", "machine": info, "venv": venv, "texts": len(texts),
               "command": " ".join(["python -m benchmarks.peer.bench_diffractor", *sys.argv[1:]])}
    points = []
    for r in run.get("results", []):
        released = r.pop("texts")
        same = [a.lower() == b.lower() for t in records for a, b in
                zip(re.findall(r"\w+", t["text"]), re.findall(r"\w+", released[t["id"]]))]
        points.append({"epsilon": r["epsilon"], "changed_fraction": 1 - float(np.mean(same)),
                       "accuracy": accuracy(records, released),
                       "samples": [released[t["id"]][:200] for t in records[:1]]})
    payload["diffractor"] = run
    payload["points"] = points
    if not run.get("error"):
        payload["textdp"] = [time_textdp(texts, args.artifact, "madlib", 10.0), time_textdp(texts, args.artifact, "tem", 4.0)]
    payload["wall_seconds"] = time.perf_counter() - started
    write_results("peer-diffractor", payload, markdown(payload), results_dir=RESULTS)
    peer = load_results("peer")
    if peer:  # peer.md carries this section too (benchmarks/peer/report.py diffractor_section)
        from benchmarks.peer.report import markdown as peer_markdown

        with open(os.path.join(RESULTS, "peer.md"), "w", encoding="utf-8") as handle:
            handle.write(peer_markdown(peer))
    print(markdown(payload))


if __name__ == "__main__":
    main()
