"""Markdown table and plots of a utility run: accuracy against epsilon, and (when the audit benchmark's
results are there) accuracy against the attacks' success at the same epsilons (benchmarks/bench_audit.py)."""

from __future__ import annotations

import json
import os
from typing import Dict, Optional, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SETTINGS = (("training_time", "training time: train on privatized, test on original"),
            ("test_time", "test time: train on original, test on privatized"))
COLOURS = {"madlib": "tab:blue", "tem": "tab:orange"}


AUDIT_RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "audit.json")


def attack_rates(path: str = AUDIT_RESULTS) -> Dict[Tuple[str, float], dict]:
    """(mechanism, epsilon) -> inversion top-1 / top-10 rates and linkage top-1 per set size, from the audit
    benchmark's results (same IMDb test reviews, GloVe 400k), or {} when they are not there."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        runs = json.load(handle).get("runs", [])
    out: Dict[Tuple[str, float], dict] = {}
    for run in runs:
        mechanism = next((a.split("=", 1)[1] for a in run["command"].split() if a.startswith("--mechanism=")), None)
        for eps, entry in ((run.get("inversion") or {}).get("per_epsilon") or {}).items():
            rates = out.setdefault((mechanism, float(eps)), {})
            rates["inversion_top1"] = entry["overall"]["top1"]["rate"]
            rates["inversion_top10"] = entry["overall"]["top10"]["rate"]
            rates["released"] = entry["overall"]["released"]["rate"]
        for eps, entry in ((run.get("linkage") or {}).get("per_epsilon") or {}).items():
            rates = out.setdefault((mechanism, float(eps)), {})
            rates["linkage_top1"] = {int(size): e["top1"]["rate"] for size, e in entry.items()}
    return out


def _rate(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def attack_section(payload: dict, attacks: Dict[Tuple[str, float], dict], plot_name: Optional[str]) -> list:
    """Accuracy next to attack success at the epsilons both benchmarks ran."""
    rows = [r for r in sorted(payload["results"], key=lambda r: (r["mechanism"], r["epsilon"]))
            if (r["mechanism"], float(r["epsilon"])) in attacks]
    if not rows:
        return []
    lines = ["## Accuracy against attack success (textdp audit)", "",
             "The same epsilons attacked by `textdp audit` on 2,000 IMDb test reviews (benchmarks/results/audit.md, "
             "docs/audit.md): the share of word tokens the Bayes-optimal attacker recovers (top-1, top-10), the "
             "share released unchanged, and the share of released records (first 20 words) whose source it ranks "
             "first among 1,000 originals. Read the privacy-utility trade-off along these columns, not epsilon.", "",
             "| mechanism | epsilon | training time acc. | test time acc. | inversion top-1 | inversion top-10 | "
             "released unchanged | linkage top-1 (1,000 records) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = attacks[(r["mechanism"], float(r["epsilon"]))]
        lines.append(f"| {r['mechanism']} | {r['epsilon']:g} | {r['training_time']['accuracy']['mean']:.3f} | "
                     f"{r['test_time']['accuracy']['mean']:.3f} | {_rate(a.get('inversion_top1'))} | "
                     f"{_rate(a.get('inversion_top10'))} | {_rate(a.get('released'))} | "
                     f"{_rate((a.get('linkage_top1') or {}).get(1000))} |")
    if plot_name:
        lines += ["", f"![accuracy against inversion]({plot_name})"]
    return lines + [""]


def attack_plot(payload: dict, attacks: Dict[Tuple[str, float], dict], path: str) -> bool:
    """Training-time accuracy against the inversion top-1 rate, one line per mechanism, points labelled by epsilon."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    drawn = False
    for mech in ("madlib", "tem"):
        rows = sorted((r for r in payload["results"] if r["mechanism"] == mech
                       and (mech, float(r["epsilon"])) in attacks
                       and attacks[(mech, float(r["epsilon"]))].get("inversion_top1") is not None),
                      key=lambda r: r["epsilon"])
        if not rows:
            continue
        x = [attacks[(mech, float(r["epsilon"]))]["inversion_top1"] for r in rows]
        y = [r["training_time"]["accuracy"]["mean"] for r in rows]
        ax.plot(x, y, "o-", color=COLOURS[mech], label=mech)
        for xi, yi, r in zip(x, y, rows):
            ax.annotate(f"{r['epsilon']:g}", (xi, yi), textcoords="offset points", xytext=(4, -10), fontsize=8)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    base = payload["baseline"]
    ax.axhline(base["accuracy"], color="0.3", lw=1, label="baseline")
    ax.set_xlabel("inversion attack: share of word tokens recovered (top-1)")
    ax.set_ylabel("accuracy (training time)")
    ax.set_xlim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Privacy-utility trade-off on IMDb (labels: epsilon)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _interval(acc: dict) -> str:
    if acc["low"] is None:
        return f"{acc['mean']:.3f}"
    return f"{acc['mean']:.3f} [{acc['low']:.3f}, {acc['high']:.3f}]"


def markdown(payload: dict, plot_name: str, attacks: Optional[dict] = None,
             attack_plot_name: Optional[str] = None) -> str:
    cfg, m, base = payload["config"], payload["machine"], payload["baseline"]
    lines = [
        "# Utility on IMDb sentiment: Madlib and TEM against the baseline", "",
        *([] if payload.get("complete", True) else
          ["**Partial results: the run was still going (or was stopped) when this was written.**", ""]),
        f"**Configuration:** {cfg['train_reviews']} train / {cfg['test_reviews']} test reviews (balanced, "
        f"data seed {cfg['data_seed']}), privatizations per epsilon: Madlib {cfg['repeats']['madlib']}, TEM "
        f"{cfg['repeats']['tem']}, "
        f"Madlib nearest-word search `{cfg['madlib_nn']}`, TEM gamma from Thm. 4.2 (beta = 0.001), "
        f"artifact: {cfg['artifact']}, OOV policy {cfg['oov_policy']}, "
        f"{'seeded (base seed ' + str(cfg['base_seed']) + ')' if cfg['seeded'] else 'OS entropy'}. "
        f"Classifier: {cfg['classifier']['library']} logistic regression on {cfg['classifier']['features']} "
        "(fixed hyper-parameters, see the JSON).", "",
        f"Machine: {m['cpu']}, {m['cores']} cores (nproc), load average at start "
        f"{tuple(round(x, 2) for x in m['loadavg_at_start'])}, at end {tuple(round(x, 2) for x in m['loadavg_at_end'])} "
        f"({m['date_utc']}); wall time {payload['wall_seconds']:.0f} s. Command: `{cfg['command']}`", "",
        *[f"Resumed from an earlier invocation ({e['machine']['date_utc']}, load average at start "
          f"{tuple(round(x, 2) for x in e['machine']['loadavg_at_start'])}, at end "
          f"{tuple(round(x, 2) for x in e['machine']['loadavg_at_end'])}, wall time {e['wall_seconds']:.0f} s"
          f"{'' if e['complete'] else ', stopped before the end'}): `{e['command']}`; its privatize runs and "
          "calibrations were reused." for e in payload.get("earlier_invocations", [])],
        *([""] if payload.get("earlier_invocations") else []),
        f"**Baseline** (original train, original test): accuracy **{base['accuracy']:.3f}** "
        f"(Wilson 95% interval over the {base['n']} test reviews [{base['low']:.3f}, {base['high']:.3f}]).", "",
        "Accuracy: mean over repeats [Student-t 95% interval over repeats]. Delta: mean accuracy minus the "
        "baseline's [paired bootstrap 95% interval over test reviews, per review the share of repeats that got it "
        "right]. 'Within 2 pts': *yes* when the whole delta interval is above -0.02, *no* when it is wholly below, "
        "*unclear* otherwise (this many test reviews cannot settle it; the mean's side is given).", "",
        "| mechanism | epsilon | changed tokens | training time acc. | delta | within 2 pts | "
        "test time acc. | delta | within 2 pts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ordered = sorted(payload["results"], key=lambda r: (r["mechanism"], r["epsilon"]))
    for r in ordered:
        cells = [r["mechanism"], f"{r['epsilon']:g}", f"{r['changed_fraction']['mean']:.3f}"]
        for setting, _ in SETTINGS:
            s = r[setting]
            d = s["delta_to_baseline"]
            cells += [_interval(s["accuracy"]), f"{d['delta']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]",
                      s["within_2_points"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"![accuracy against epsilon]({plot_name})", ""]
    lines += attack_section(payload, attacks or {}, attack_plot_name)
    calib = payload.get("calibration") or {}
    if calib:
        lines += ["## Plausible deniability at these epsilons (textdp calibrate)", "",
                  *([payload["calibration_note"], ""] if payload.get("calibration_note") else []),
                  "Words: `tem` / `madlib` rows use calibrate's sample of the whole vocabulary (one word per "
                  "frequency-rank stratum, so mostly rare words); `(IMDb words)` rows use distinct words of this "
                  "run's reviews drawn by frequency (the words the text is made of; words outside the vocabulary "
                  "skipped). N_w: probability the word is released unchanged; S_w: distinct outputs in the draws.", "",
                  "| mechanism | epsilon | words x draws | N_w median | N_w p95 | N_w max | S_w min | S_w p5 | S_w median |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for mech, c in calib.items():
            for eps, st in c["statistics"].items():
                nw = st.get("n_w_exact", st["n_w"])
                sw = st.get("s_w_exact", st["s_w"])
                kind = " (exact)" if "n_w_exact" in st else ""
                words = c['words'].get('count', c['words']) if isinstance(c['words'], dict) else c['words']
                lines.append(f"| {mech}{kind} | {eps} | {words} x "
                             f"{c['samples']} | {nw['p50']:.3f} | {nw['p95']:.3f} | {nw['max']:.3f} | {sw['min']:.0f} | "
                             f"{sw['p5']:.0f} | {sw['p50']:.0f} |")
        lines.append("")
    lines += ["## Runs", "", "| mechanism | epsilon | repeat | seed | training time acc. | test time acc. | changed | "
              "unknown | tokens | pipeline s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ordered:
        for run in r["runs"]:
            secs = f"{run['pipeline_seconds']:.0f}" if run["pipeline_seconds"] is not None else "reused"
            lines.append(f"| {r['mechanism']} | {r['epsilon']:g} | {run['repeat']} | {run['seed']} | "
                         f"{run['training_time_accuracy']:.3f} | {run['test_time_accuracy']:.3f} | "
                         f"{run['changed_fraction']:.3f} | {run['unknown_fraction']:.3f} | {run['tokens']:,} | {secs} |")
    lines.append("")
    return "\n".join(lines)


def plot(payload: dict, path: str) -> None:
    base = payload["baseline"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (setting, title) in zip(axes, SETTINGS):
        ax.axhspan(base["low"], base["high"], color="0.85", label="baseline (95% test-set interval)")
        ax.axhline(base["accuracy"], color="0.3", lw=1)
        ax.axhline(base["accuracy"] - 0.02, color="0.3", lw=1, ls="--", label="baseline - 2 points")
        for mech in ("madlib", "tem"):
            rows = sorted((r for r in payload["results"] if r["mechanism"] == mech), key=lambda r: r["epsilon"])
            if not rows:
                continue
            eps = [r["epsilon"] for r in rows]
            mean = [r[setting]["accuracy"]["mean"] for r in rows]
            low = [r[setting]["accuracy"]["low"] if r[setting]["accuracy"]["low"] is not None else m
                   for r, m in zip(rows, mean)]
            high = [r[setting]["accuracy"]["high"] if r[setting]["accuracy"]["high"] is not None else m
                    for r, m in zip(rows, mean)]
            ax.errorbar(eps, mean, yerr=[[m - lo for m, lo in zip(mean, low)], [hi - m for m, hi in zip(mean, high)]],
                        marker="o", capsize=3, color=COLOURS[mech], label=f"{mech} (95% interval over repeats)")
        ax.set_xscale("log")
        ticks = sorted({r["epsilon"] for r in payload["results"]})
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("epsilon")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].set_ylim(0.45, 1.0)
    axes[1].legend(fontsize=8, loc="best")
    cfg = payload["config"]
    fig.suptitle(f"IMDb sentiment, TF-IDF logistic regression: {cfg['train_reviews']} train / {cfg['test_reviews']} "
                 f"test reviews, repeats: Madlib {cfg['repeats']['madlib']}, TEM {cfg['repeats']['tem']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(payload: dict, stem: str, audit_results: str = AUDIT_RESULTS) -> None:
    plot(payload, stem + ".png")
    attacks = attack_rates(audit_results)
    trade_off = stem + "-attacks.png"
    drawn = attack_plot(payload, attacks, trade_off) if attacks else False
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(payload, stem.rsplit("/", 1)[-1] + ".png", attacks,
                              trade_off.rsplit("/", 1)[-1] if drawn else None))
