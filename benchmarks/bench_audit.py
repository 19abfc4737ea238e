"""``textdp audit`` on the full GloVe 6B 50d vocabulary (400,000 words), 2 local worker processes.

Targets (issue 16):
  * self-check, Madlib: 50 pairs x 20,000 draws per word in <= 15 minutes on 2 cores;
  * self-check, TEM: 100 pairs x 100,000 draws per word in <= 5 minutes;
  * inversion and linkage on 2,000 IMDb reviews at 5 epsilons in <= 30 minutes (each mechanism).

Every part is one ``python -m pipelines.cli audit`` run (FnApiRunner, ``--direct_num_workers 2
--direct_running_mode multi_processing``), timed from outside; the workers' CPU seconds (children's
rusage) are recorded too, so that a run on a busy machine can be read as "wall time if the 2 cores
had been ours" (CPU seconds / 2; contention inflates CPU time too, so this is still conservative).
The machine is shared: the load average before and after each part is recorded.

Data: 10,000 IMDb test reviews (the corpus; the audit attacks a uniform sample of 2,000 of them and
uses all 10,000 as the linkage pool) and 10,000 IMDb train reviews (the attacker's reference
corpus for the prior), ``<br />`` turned into newlines, drawn with a fixed seed.

    python -m benchmarks.bench_audit --artifact /var/tmp/audit-bench/glove400k-k100 \
        --parts selfcheck-tem,selfcheck-madlib,attacks-tem,attacks-madlib --workdir /var/tmp/audit-bench/runs

The artifact needs the TEM neighbour table (``textdp neighbours --k 100``, see benchmarks/bench_tem.py).
Results: benchmarks/results/audit.json and audit.md; the runs' reports stay in --workdir.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

from benchmarks.harness import REPO, RESULTS, machine, write_results
from benchmarks.utility.data import clean_text, read_rows

SEED = 20261123
PARTS = {
    "selfcheck-tem": {"target_minutes": 5, "args": ["--mechanism=tem", "--epsilons=4", "--pairs=100",
                                                     "--draws=100000", "--checks=self-check"]},
    "selfcheck-madlib": {"target_minutes": 15, "args": ["--mechanism=madlib", "--epsilons=10", "--pairs=50",
                                                         "--draws=20000", "--checks=self-check"]},
    "attacks-tem": {"target_minutes": 30, "args": ["--mechanism=tem", "--epsilons=2,3,4,6,8", "--records=2000",
                                                    "--checks=inversion,linkage"]},
    "attacks-madlib": {"target_minutes": 30, "args": ["--mechanism=madlib", "--epsilons=5,10,12.5,15,20",
                                                       "--records=2000", "--checks=inversion,linkage"]},
    # for docs/audit.md: the self-check at every epsilon of docs/evaluation.md (TEM; Madlib's is the run above)
    "selfcheck-tem-docs": {"target_minutes": None, "args": ["--mechanism=tem", "--epsilons=2,3,4,6,8", "--pairs=50",
                                                             "--draws=20000", "--checks=self-check"]},
}


def write_corpora(workdir: str, reviews: int) -> tuple:
    rows = read_rows()
    rng = np.random.default_rng(SEED)
    paths = []
    for split, name in (("test", "corpus.jsonl"), ("train", "prior.jsonl")):
        pool = [row for row in rows if row["split"] == split]
        chosen = np.sort(rng.choice(len(pool), size=reviews, replace=False))
        path = os.path.join(workdir, name)
        with open(path, "w", encoding="utf-8") as handle:
            for index in chosen:
                row = pool[int(index)]
                handle.write(json.dumps({"id": f"{split}/{row['id']}", "text": clean_text(row["text"])}) + "\n")
        paths.append(path)
    return tuple(paths)


def run_part(name: str, artifact: str, workdir: str, corpus: str, prior: str) -> dict:
    out = os.path.join(workdir, name)
    if os.path.exists(out):
        shutil.rmtree(out)
    args = [sys.executable, "-m", "pipelines.cli", "audit", f"--artifact={artifact}", f"--output={out}",
            f"--seed={SEED}", "--direct_num_workers=2", "--direct_running_mode=multi_processing"] + PARTS[name]["args"]
    if "attacks" in name:
        args += [f"--corpus={corpus}", f"--prior-corpus={prior}"]
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise RuntimeError(f"{name} failed: {process.stderr[-2000:]}")
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    summary = json.load(open(os.path.join(out, "summary.json"), encoding="utf-8"))
    target = PARTS[name]["target_minutes"]
    result = {"part": name, "command": " ".join(["textdp"] + args[3:]), "wall_seconds": round(seconds, 1),
              "cpu_seconds_all_processes": round(cpu, 1), "wall_seconds_if_2_idle_cores": round(cpu / 2, 1),
              "target_minutes": target, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
              "output": out, "stdout": process.stdout.strip().splitlines()}
    if target:
        result["target_met_measured"] = seconds <= target * 60
        result["target_met_if_idle"] = cpu / 2 <= target * 60
    if summary.get("self_check"):
        check = summary["self_check"]
        result["self_check"] = {k: check[k] for k in ("status", "planned_tests", "tests_run", "per_epsilon")}
        rows = [r for r in _parquet(os.path.join(out, "self_check.parquet"))]
        vocabulary = ({r["word_a_id"] for r in rows} | {r["word_b_id"] for r in rows}) - {None}
        result["self_check"]["vocabulary_words_drawn"] = len(vocabulary)
    for key in ("inversion", "linkage", "corpus"):
        if summary.get(key):
            result[key] = summary[key]
    return result


def _parquet(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def markdown(payload: dict) -> str:
    lines = ["# textdp audit benchmark", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores, {payload['machine']['date_utc']}. "
             "The machine is shared with other engineers: a load average above 2 means the 2 cores were contended "
             "and wall times are inflated; the last column is the workers' CPU seconds / 2, what the wall time "
             "would have been with both cores to ourselves.", "",
             f"Artifact: `{payload['artifact']}` (GloVe 6B 50d, 400,000 words, K = 100 neighbour table). Seed "
             f"{SEED} (reproducible).", "",
             "| part | configuration | wall | load avg before / after | target | met (measured / idle estimate) | CPU s / 2 |",
             "|---|---|---|---|---|---|---|"]
    for r in payload["runs"]:
        target = f"{r['target_minutes']} min" if r["target_minutes"] else "-"
        met = (f"{'yes' if r['target_met_measured'] else 'NO'} / {'yes' if r['target_met_if_idle'] else 'NO'}"
               if r["target_minutes"] else "-")
        config = " ".join(a for a in r["command"].split() if a.startswith(("--mechanism", "--epsilons", "--pairs",
                                                                              "--draws", "--records", "--checks")))
        lines.append(f"| {r['part']} | `{config}` | {r['wall_seconds'] / 60:.1f} min | "
                     f"{r['loadavg_before'][0]:.1f} / {r['loadavg_after'][0]:.1f} | {target} | {met} | "
                     f"{r['wall_seconds_if_2_idle_cores'] / 60:.1f} min |")
    for r in payload["runs"]:
        lines += ["", f"## {r['part']}", "", "```", *r["stdout"], "```"]
        if r.get("self_check"):
            check = r["self_check"]
            drawn = check.get("vocabulary_words_drawn", check.get("words_drawn"))
            lines.append(f"\nSelf-check: {check['status']}, {check['tests_run']} tests, {drawn} distinct vocabulary "
                         "words drawn (and the generated out-of-vocabulary words).\n")
            lines += ["| epsilon | pairs | violations | median tightness | max tightness |", "|---|---|---|---|---|"]
            for eps, e in check["per_epsilon"].items():
                lines.append(f"| {eps} | {e['pairs']} | {e['violations']} | {_f(e['median_tightness'])} | "
                             f"{_f(e['max_tightness'])} |")
        if r.get("inversion"):
            lines += ["", f"Inversion ({r['inversion']['posterior']}; prior: {r['inversion']['prior']}):", "",
                      "| epsilon | tokens | top-1 | top-10 | released word | prior top-1 | word in the prior |",
                      "|---|---|---|---|---|---|---|"]
            for eps, e in r["inversion"]["per_epsilon"].items():
                o = e["overall"]
                lines.append(f"| {eps} | {e['tokens']:,} | {o['top1']['rate']:.3f} | {o['top10']['rate']:.3f} | "
                             f"{o['released']['rate']:.3f} | {o['prior_top1']['rate']:.3f} | {o['in_prior']['rate']:.3f} |")
            for eps, m in (r["inversion"].get("monte_carlo") or {}).items():
                lines.append(f"\nMonte Carlo at epsilon {eps}: {m['training_draws']:,} draws; the Bayes-optimal top-1 "
                             f"rate for prior-drawn inputs is at most {m['upper_top1']:.3f}, top-10 at most "
                             f"{m['upper_top10']:.3f} (probability 0.95).")
        if r.get("linkage"):
            lines += ["", f"Linkage ({r['linkage']['likelihood']}, first {r['linkage']['window_words']} words):", "",
                      "| epsilon | set size | queries | top-1 | top-5 | structure alone |", "|---|---|---|---|---|---|"]
            for eps, entry in r["linkage"]["per_epsilon"].items():
                for size, e in entry.items():
                    lines.append(f"| {eps} | {int(size):,} | {e['queries']:,} | {e['top1']['rate']:.3f} | "
                                 f"{e['top5']['rate']:.3f} | {e['structure_alone']['rate']:.3f} |")
    return "\n".join(lines) + "\n"


def _f(value):
    return "-" if value is None else f"{value:.2f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", required=True, help="a copy of the 400k artifact with its neighbour table")
    parser.add_argument("--workdir", default="/var/tmp/audit-bench/runs", help="corpora and run outputs")
    parser.add_argument("--parts", default="selfcheck-tem,selfcheck-madlib,attacks-tem,attacks-madlib",
                        help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--reviews", type=int, default=10000, help="reviews per corpus (test and train)")
    parser.add_argument("--merge", action="store_true", help="keep earlier parts in results/audit.json")
    parser.add_argument("--markdown-only", action="store_true",
                        help="re-render audit.md from audit.json and copy the runs' plots into benchmarks/results")
    args = parser.parse_args(argv)
    if args.markdown_only:
        payload = json.load(open(os.path.join(RESULTS, "audit.json"), encoding="utf-8"))
        for run in payload["runs"]:
            table = os.path.join(run["output"], "self_check.parquet")
            if run.get("self_check") and os.path.exists(table):
                rows = _parquet(table)
                vocabulary = ({r["word_a_id"] for r in rows} | {r["word_b_id"] for r in rows}) - {None}
                run["self_check"].pop("words_drawn", None)
                run["self_check"]["vocabulary_words_drawn"] = len(vocabulary)
            for plot in ("self_check.png", "inversion.png", "linkage.png"):
                source = os.path.join(run["output"], plot)
                if os.path.exists(source) and run["part"] in PARTS:  # not the kept record of an earlier run
                    shutil.copyfile(source, os.path.join(RESULTS, f"audit-{run['part']}-{plot}"))
        # the machine's load at the end is the last run's (not the time of this re-rendering)
        payload["machine"].setdefault("loadavg_at_end", payload["runs"][-1]["loadavg_after"])
        write_results("audit", payload, markdown(payload))
        return
    os.makedirs(args.workdir, exist_ok=True)
    corpus, prior = write_corpora(args.workdir, args.reviews)
    previous = []
    if args.merge and os.path.exists(os.path.join(RESULTS, "audit.json")):
        previous = json.load(open(os.path.join(RESULTS, "audit.json"), encoding="utf-8"))["runs"]
    payload = {"machine": machine(), "artifact": args.artifact, "seed": SEED, "runs": []}
    wanted = [p for p in args.parts.split(",") if p]
    for name in wanted:
        print(f"bench_audit: {name} ...", file=sys.stderr, flush=True)
        payload["runs"].append(run_part(name, args.artifact, args.workdir, corpus, prior))
        print(f"bench_audit: {name}: {payload['runs'][-1]['wall_seconds']:.0f} s", file=sys.stderr, flush=True)
        runs = [r for r in previous if r["part"] not in wanted] + payload["runs"]
        write_results("audit", {**payload, "runs": runs}, markdown({**payload, "runs": runs}))


if __name__ == "__main__":
    main()
