"""The privacy-utility frontier of every registered mechanism: one table, one plot, docs/choosing.md.

For every mechanism the registry holds (``textdp.mechanisms.REGISTRY``; never a hand-written list) at
several epsilons chosen per mechanism (each mechanism's epsilon has its own scale: ``DEFAULT_EPSILONS``
spans readable to unreadable output on GloVe 6B 50d, from benchmarks/results/utility-mechanisms.md and
a probe of CluSanT; a mechanism registered later gets ``FALLBACK_EPSILONS`` until someone chooses), it
measures, each with the project's own commands in subprocesses (the local FnApiRunner):

* utility: IMDb sentiment accuracy at training and test time (benchmarks/utility: TF-IDF logistic
  regression; Wilson interval over test reviews, Student-t interval over repeats, paired bootstrap
  interval of the difference to the baseline), from ``textdp privatize`` runs;
* the privatize job: tokens per second (the run's tokens over the subprocess's wall time, Beam start
  included) and the share of tokens changed (the run's summary);
* the same 3 short fixed sentences (``SENTENCES``), privatized in the same run (3 extra records);
* attacks: ``textdp audit --checks inversion,linkage`` on held-out IMDb reviews (test-split reviews the
  classifier never sees; the attacker's prior from held-out train-split reviews): inversion top-1 /
  top-10 (context-free) and linkage top-1; when the audit's summary has ``contextual_inversion`` (a
  contextual attacker), its top-1 / top-10 too, else "not measured";
* plausible deniability: N_w / S_w from ``textdp calibrate`` at the same epsilons;
* the privacy statement each run recorded (the summary's ``privacy``: ``textdp.mechanisms.statement_of``
  of the mechanism object the run built).

    nice -n 10 python -m benchmarks.frontier --artifact /var/tmp/frontier/glove400k --train 400 --test 400 \\
        --repeats 1 --workdir /var/tmp/frontier/work --resume

Results: benchmarks/results/frontier.json, frontier.md, frontier.png; ``--choosing`` also rewrites
docs/choosing.md from the JSON (benchmarks/utility/frontier_report.py). ``--resume`` reuses the data,
privatize runs, audits and calibrations already in --workdir, so an interrupted run continues.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Dict, List, Optional

import numpy as np

from benchmarks.harness import RESULTS, load_results, machine, write_results
from benchmarks.utility import classify, data, run, stats
from textdp.mechanisms import REGISTRY, mechanism_class

# The 3 short fixed sentences every point privatizes (extra records of the same privatize run).
SENTENCES = (
    "The acting was wonderful and the story kept me interested.",
    "I wanted to leave after twenty minutes because the plot made no sense.",
    "My sister works at the hospital in Boston.",
)
# Benchmark configuration, not library logic: the epsilons at which each mechanism goes from unreadable to
# readable output on the default artifact (GloVe 6B 50d, 391,311 words). The mechanisms themselves come from the
# registry; one without an entry here runs at FALLBACK_EPSILONS and the report says so. truncated-gumbel claims no
# guarantee and derives its Gumbel scale from epsilon only above ~5,647 on this vocabulary (below, it needs
# --gumbel-scale): there its output barely moves with epsilon (its knob is --gumbel-scale, not epsilon).
DEFAULT_EPSILONS = {
    "madlib": (5, 10, 15), "tem": (2, 4, 6), "mahalanobis": (5, 10, 15), "vickrey": (5, 15, 30),
    "truncated-gumbel": (6000, 20000, 100000), "santext": (2, 4, 6), "santext+": (2, 4, 8), "custext": (1, 3, 10),
    "clusant": (20, 35, 50),
}
FALLBACK_EPSILONS = (1, 10, 50)
AUDIT_SEED = 20261128


def parse_epsilon_map(text: str) -> Dict[str, List[float]]:
    """``"madlib:5,10;tem:2,4"`` -> {mechanism: [epsilons]}."""
    out = {}
    for part in (text or "").split(";"):
        if part.strip():
            mechanism, _, values = part.partition(":")
            out[mechanism.strip()] = run.parse_epsilons(values)
    return out


def plan(args) -> Dict[str, List[float]]:
    """{mechanism: epsilons} for this invocation: every registered mechanism (or --mechanisms)."""
    names = list(REGISTRY) if not args.mechanisms else [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    unknown = [m for m in names if m not in REGISTRY]
    if unknown:
        raise SystemExit(f"--mechanisms: not registered: {', '.join(unknown)}")
    chosen = parse_epsilon_map(args.epsilons)
    return {m: sorted(chosen.get(m) or DEFAULT_EPSILONS.get(m) or FALLBACK_EPSILONS) for m in names}


def prepare_inputs(args) -> tuple:
    """The reviews file (train + test subsets + the 3 sentences) and the audit's held-out corpora."""
    input_path = os.path.join(args.workdir, "reviews.jsonl")
    if not (args.resume and os.path.exists(input_path)):
        data.prepare(args.train, args.test, args.data_seed, input_path)
        with open(input_path, "a", encoding="utf-8") as handle:
            for i, sentence in enumerate(SENTENCES):
                handle.write(json.dumps({"id": f"sentence/{i}", "split": "sentence", "label": -1, "text": sentence}) + "\n")
    corpus, prior = os.path.join(args.workdir, "audit-corpus.jsonl"), os.path.join(args.workdir, "audit-prior.jsonl")
    if not (args.resume and os.path.exists(corpus) and os.path.exists(prior)):
        used = {r["id"] for r in data.read_jsonl([input_path])}
        rows = data.read_rows()
        rng = np.random.default_rng(AUDIT_SEED)
        for split, path, count in (("test", corpus, args.audit_pool), ("train", prior, args.audit_prior_reviews)):
            pool = [r for r in rows if r["split"] == split and f"{r['split']}/{r['label']}/{r['id']}" not in used]
            with open(path, "w", encoding="utf-8") as handle:
                for index in np.sort(rng.choice(len(pool), size=min(count, len(pool)), replace=False)):
                    row = pool[int(index)]
                    handle.write(json.dumps({"id": f"{split}/{row['id']}", "text": data.clean_text(row["text"])}) + "\n")
    return input_path, corpus, prior


def timed_privatize(args, input_path: str, mechanism: str, epsilon: float, repeat: int) -> dict:
    """run.privatize, with the job's wall time kept next to its output (so --resume still knows its speed)."""
    result = run.privatize(args, input_path, mechanism, epsilon, repeat)
    timing = os.path.join(args.workdir, "runs", f"{mechanism}-eps{epsilon:g}-r{repeat}", "timing.json")
    if result["seconds"] is not None:
        with open(timing, "w", encoding="utf-8") as handle:
            json.dump({"seconds": result["seconds"], "loadavg": os.getloadavg()}, handle)
    elif os.path.exists(timing):
        with open(timing, encoding="utf-8") as handle:
            result["seconds"] = json.load(handle)["seconds"]
    return result


def audit(args, mechanism: str, epsilons: List[float], corpus: str, prior: str) -> dict:
    """One ``textdp audit`` run (inversion and linkage) at every epsilon of the mechanism."""
    out = os.path.join(args.workdir, f"audit-{mechanism}")
    summary_path = os.path.join(out, "summary.json")
    timing_path = os.path.join(args.workdir, f"audit-{mechanism}.timing.json")
    reuse = False
    if args.resume and os.path.exists(summary_path):
        with open(summary_path, encoding="utf-8") as handle:
            done = json.load(handle)
        reuse = sorted(float(e) for e in (done.get("inversion") or {}).get("per_epsilon", {})) == sorted(epsilons)
    if not reuse:
        cmd = [sys.executable, "-m", "pipelines.cli", "audit", "--mechanism", mechanism,
               "--epsilons", ",".join(f"{e:g}" for e in epsilons), "--checks", "inversion,linkage",
               "--corpus", corpus, "--prior-corpus", prior, "--records", str(args.audit_records),
               "--inversion-tokens", str(args.audit_tokens), "--prior-words", str(args.audit_prior_words),
               "--mc-draws", str(args.audit_mc_draws), "--linkage-sizes", args.audit_linkage_sizes,
               "--output", out, "--overwrite", "--seed", str(AUDIT_SEED)]
        if args.artifact:
            cmd += ["--artifact", args.artifact]
        if mechanism_class(mechanism).SEARCHES_NEAREST:
            cmd += ["--nn", args.nn]
        cmd += run.parse_mechanism_flags(args.mechanism_flags).get(mechanism, [])
        if args.workers > 1:
            cmd += ["--direct_num_workers", str(args.workers), "--direct_running_mode", "multi_processing"]
        started = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=run.REPO, env=dict(os.environ, **run.SINGLE_THREAD), stdout=subprocess.DEVNULL)
        with open(timing_path, "w", encoding="utf-8") as handle:
            json.dump({"seconds": time.perf_counter() - started}, handle)
    with open(summary_path, encoding="utf-8") as handle:
        summary = json.load(handle)
    seconds = None
    if os.path.exists(timing_path):
        with open(timing_path, encoding="utf-8") as handle:
            seconds = json.load(handle)["seconds"]
    return {"summary": summary, "seconds": seconds}


def inversion_rates(section: Optional[dict], epsilon: float) -> Optional[dict]:
    """top-1 / top-10 / released-unchanged rates (with the tokens attacked) of an inversion-shaped section."""
    for eps, entry in ((section or {}).get("per_epsilon") or {}).items():
        if float(eps) == float(epsilon):
            o = entry["overall"]
            rates = {"top1": o["top1"]["rate"], "top10": o["top10"]["rate"], "released": o["released"]["rate"],
                     "in_prior": (o.get("in_prior") or {}).get("rate"),
                     "tokens": entry.get("tokens"), "posterior": section.get("posterior")}
            same = next((v for k, v in (section.get("same_releases_context_free") or {}).items()
                         if float(k) == float(epsilon)), None)
            if same:  # a contextual section: the context-free attacker's rates on the very same releases
                rates["same_releases_context_free"] = {"top1": same["top1"]["rate"], "top10": same["top10"]["rate"],
                                                       "tokens": same["tokens"]}
            return rates
    return None


def linkage_rates(section: Optional[dict], epsilon: float) -> Optional[dict]:
    for eps, entry in ((section or {}).get("per_epsilon") or {}).items():
        if float(eps) == float(epsilon):
            return {str(int(size)): {"top1": e["top1"]["rate"], "queries": e["queries"]} for size, e in entry.items()}
    return None


def point(args, mechanism, epsilon, input_path, order, plain, baseline_model, baseline_correct, boot_rng) -> dict:
    """Utility, speed, changed share and sample sentences of one (mechanism, epsilon) over the repeats."""
    test_texts, test_labels = plain["test"]
    correct = {"training_time": [], "test_time": []}
    runs, samples = [], None
    for repeat in range(args.repeats):
        result = timed_privatize(args, input_path, mechanism, epsilon, repeat)
        private = run.split_records(result["records"], order)
        correct["training_time"].append(classify.correct(classify.fit(*private["train"]), test_texts, test_labels))
        correct["test_time"].append(classify.correct(baseline_model, *private["test"]))
        if samples is None:
            by_id = {r["id"]: r["text"] for r in result["records"]}
            samples = [by_id.get(f"sentence/{i}") for i in range(len(SENTENCES))]
        summary = result["summary"]
        tokens = summary["tokens"]["total"]
        runs.append({"repeat": repeat, "seed": result["seed"], "pipeline_seconds": result["seconds"], "tokens": tokens,
                     "tokens_per_second": tokens / result["seconds"] if result["seconds"] else None,
                     "changed_fraction": summary["tokens"]["changed_fraction"],
                     "unknown_fraction": summary["tokens"]["unknown_fraction"],
                     "training_time_accuracy": float(correct["training_time"][-1].mean()),
                     "test_time_accuracy": float(correct["test_time"][-1].mean()),
                     "records_reconciled": summary["records"]["reconciled"], "records_failed": summary["records"]["failed"]})
        print(f"frontier: {mechanism} eps={epsilon:g} repeat {repeat}: train-time {runs[-1]['training_time_accuracy']:.3f} "
              f"test-time {runs[-1]['test_time_accuracy']:.3f} changed {runs[-1]['changed_fraction']:.3f}", flush=True)
    entry = {"mechanism": mechanism, "epsilon": float(epsilon), "parameters": summary["mechanism"],
             "privacy": {k: summary["privacy"].get(k) for k in ("notion", "per_token", "per_record", "coverage")},
             "runs": runs, "samples": samples,
             "changed_fraction": stats.mean_interval([r["changed_fraction"] for r in runs]),
             "tokens_per_second": stats.mean_interval([r["tokens_per_second"] for r in runs if r["tokens_per_second"]])
             if any(r["tokens_per_second"] for r in runs) else None}
    for setting, rows in correct.items():
        pooled = np.concatenate(rows)
        entry[setting] = {"accuracy": stats.mean_interval([c.mean() for c in rows]),
                          "wilson": stats.wilson_interval(int(pooled.sum()), len(pooled)),
                          "delta_to_baseline": stats.paired_bootstrap_delta(rows, baseline_correct, boot_rng)}
        entry[setting]["within_2_points"] = run.within_margin(entry[setting]["delta_to_baseline"])
    return entry


def evaluate(args, save) -> dict:
    grid = plan(args)
    input_path, corpus, prior = prepare_inputs(args)
    original = data.read_jsonl([input_path])
    order = {split: [r["id"] for r in original if r["split"] == split] for split in ("train", "test")}
    plain = run.split_records(original, order)
    baseline_model = classify.fit(*plain["train"])
    baseline_correct = classify.correct(baseline_model, *plain["test"])
    baseline = stats.wilson_interval(int(baseline_correct.sum()), len(baseline_correct))
    print(f"frontier: baseline accuracy {baseline['accuracy']:.4f}", flush=True)
    boot_rng = np.random.default_rng(args.seed)
    part = {"baseline": baseline, "sentences": list(SENTENCES), "points": [], "mechanisms": {}, "complete": False,
            "reviews": {"train": len(plain["train"][0]), "test": len(plain["test"][0])},
            "epsilons": {m: list(e) for m, e in grid.items()},
            "fallback_epsilons": [m for m in grid if m not in DEFAULT_EPSILONS and m not in parse_epsilon_map(args.epsilons)]}
    for mechanism, epsilons in grid.items():
        points = [point(args, mechanism, e, input_path, order, plain, baseline_model, baseline_correct, boot_rng)
                  for e in epsilons]
        info = {"title": mechanism_class(mechanism).title(), "description": mechanism_class(mechanism).DESCRIPTION}
        if not args.skip_audit:
            result = audit(args, mechanism, epsilons, corpus, prior)
            summ = result["summary"]
            info["audit"] = {"seconds": result["seconds"], "posterior": (summ.get("inversion") or {}).get("posterior"),
                             "linkage_likelihood": (summ.get("linkage") or {}).get("likelihood"),
                             "contextual_measured": "contextual_inversion" in summ}
            for p in points:
                p["inversion"] = inversion_rates(summ.get("inversion"), p["epsilon"])
                p["contextual_inversion"] = inversion_rates(summ.get("contextual_inversion"), p["epsilon"])
                p["linkage"] = linkage_rates(summ.get("linkage"), p["epsilon"])
        cal = run.calibration(args, mechanism, epsilons, "vocabulary")
        if cal:
            info["calibration"] = {"words": cal["words"], "samples": cal["samples"]}
            for p in points:
                st = next((v for k, v in cal["statistics"].items() if float(k) == p["epsilon"]), None)
                if st:
                    nw, sw = st.get("n_w_exact", st["n_w"]), st.get("s_w_exact", st["s_w"])
                    p["calibration"] = {"n_w_median": nw["p50"], "n_w_p95": nw["p95"], "s_w_median": sw["p50"],
                                        "s_w_p5": sw["p5"], "exact": "n_w_exact" in st}
        part["mechanisms"][mechanism] = info
        part["points"] += points
        save(part)
    part["complete"] = True
    return part


def config_of(args) -> dict:
    return {"train_reviews": args.train, "test_reviews": args.test, "repeats": args.repeats, "data_seed": args.data_seed,
            "artifact": args.artifact or "default bundled GloVe 6B 50d", "nn": args.nn, "workers": args.workers,
            "mechanism_flags": run.parse_mechanism_flags(args.mechanism_flags), "base_seed": args.seed,
            "audit": None if args.skip_audit else {
                "records": args.audit_records, "pool": args.audit_pool, "prior_reviews": args.audit_prior_reviews,
                "inversion_tokens": args.audit_tokens, "prior_words": args.audit_prior_words,
                "mc_draws": args.audit_mc_draws, "linkage_sizes": args.audit_linkage_sizes, "seed": AUDIT_SEED},
            "calibration": {"words": args.calibrate_words, "draws": args.calibrate_samples} if args.calibrate_words else None,
            "classifier": classify.describe(), "runner": "FnApiRunner (local)", "oov_policy": "random (the pipeline default)",
            "command": " ".join(["python -m benchmarks.frontier", *sys.argv[1:]])}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--artifact", default=None, help="vocabulary artifact with a neighbour table (textdp neighbours); default bundled")
    add("--mechanisms", default="", help="comma-separated subset of the registered mechanisms; default: all registered")
    add("--epsilons", default="", help="epsilons per mechanism, e.g. 'madlib:5,10,15;tem:2,4,6'; default DEFAULT_EPSILONS")
    add("--mechanism-flags", default="",
        help="flags per mechanism for privatize, audit and calibrate, e.g. 'vickrey:--vickrey-t=0.5'")
    add("--nn", choices=("exact", "annoy"), default="exact", help="nearest-word search of the mechanisms that search")
    add("--train", type=int, default=400, help="train-split reviews (half per label); default 400")
    add("--test", type=int, default=400, help="test-split reviews (half per label); default 400")
    add("--repeats", type=int, default=1, help="privatizations per mechanism and epsilon; default 1")
    add("--data-seed", type=int, default=8, help="seed of the review subset; default 8")
    add("--seed", type=int, default=8, help="base seed of the privatize runs, calibrate and the bootstrap; default 8")
    add("--workers", type=int, default=2, help="local Beam worker processes per run; default 2")
    add("--audit-records", type=int, default=300, help="held-out records the audit attacks; default 300")
    add("--audit-pool", type=int, default=1000, help="held-out test-split reviews (the linkage pool); default 1000")
    add("--audit-prior-reviews", type=int, default=2000, help="held-out train-split reviews (attacker's prior); default 2000")
    add("--audit-tokens", type=int, default=10000, help="word tokens inverted per epsilon; default 10,000")
    add("--audit-prior-words", type=int, default=3000, help="attacker's candidate words; default 3,000")
    add("--audit-mc-draws", type=int, default=30000, help="audit Monte Carlo draws (no closed form); default 30,000")
    add("--audit-linkage-sizes", default="100,1000", help="linkage set sizes; default 100,1000")
    add("--skip-audit", action="store_true", help="no attacks (inversion/linkage columns 'not measured')")
    add("--calibrate-words", type=int, default=20, help="words per mechanism for textdp calibrate (0: skip); default 20")
    add("--calibrate-samples", type=int, default=300, help="draws per word for calibrate; default 300")
    add("--workdir", default="/var/tmp/frontier/work", help="scratch directory; default /var/tmp/frontier/work")
    add("--resume", action="store_true", help="reuse data, runs, audits and calibrations already in --workdir")
    add("--name", default="frontier", help="results name; default frontier")
    add("--results-dir", default=RESULTS, help="where to write <name>.json/.md/.png; default benchmarks/results")
    add("--report-only", action="store_true", help="only rewrite <name>.md/.png (and with --choosing the doc) from the JSON")
    add("--choosing", action="store_true", help="also write docs/choosing.md from the results")
    args = parser.parse_args(argv)
    from benchmarks.utility import frontier_report as report

    stem = os.path.join(args.results_dir, args.name)
    if args.report_only:
        payload = load_results(args.name, args.results_dir)
        report.write(payload, stem, choosing=args.choosing)
        return
    # the helpers of benchmarks/utility/run.py read these attributes
    helper_args = SimpleNamespace(**vars(args), fresh_entropy=False, calibrate_sample="vocabulary")
    info = machine()
    started = time.perf_counter()
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.results_dir, exist_ok=True)
    earlier = []
    if args.resume and os.path.exists(stem + ".json"):
        with open(stem + ".json", encoding="utf-8") as handle:
            previous = json.load(handle)
        earlier = previous.get("earlier_invocations", []) + [
            {"machine": previous["machine"], "wall_seconds": previous["wall_seconds"],
             "command": previous["config"]["command"], "complete": previous.get("complete", True)}]

    def save(part: dict) -> None:
        payload = {"benchmark": "frontier", "machine": dict(info), "config": config_of(args), **part,
                   "wall_seconds": round(time.perf_counter() - started, 1), "earlier_invocations": earlier}
        payload["machine"]["loadavg_at_end"] = os.getloadavg()
        write_results(args.name, payload, results_dir=args.results_dir)
        report.write(payload, stem, choosing=args.choosing and payload.get("complete", False))

    save(evaluate(helper_args, save))
    print(f"results: {stem}.{{json,md,png}}")


if __name__ == "__main__":
    main()
