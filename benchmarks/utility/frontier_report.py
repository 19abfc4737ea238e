"""Report of the frontier benchmark (benchmarks/frontier.py): frontier.md, frontier.png and docs/choosing.md.

Everything here is a function of the results JSON: no number is typed by hand, so docs/choosing.md cannot
drift from benchmarks/results/frontier.json (tests/test_choosing_doc.py regenerates it and compares).
"""

from __future__ import annotations

import os
from typing import List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHOOSING = os.path.join(REPO, "docs", "choosing.md")
MARGIN = 0.02  # "within 2 points of the baseline", as benchmarks/utility/run.py judges it
LOOSE_MARGIN = 0.05
NOT_MEASURED = "not measured"


def _f(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _acc(setting: dict) -> str:
    w = setting["wilson"]
    return f"{setting['accuracy']['mean']:.3f} [{w['low']:.3f}, {w['high']:.3f}]"


def _inv(rates: Optional[dict]) -> str:
    if rates is None:
        return NOT_MEASURED
    same = rates.get("same_releases_context_free")  # the context-free attacker on the very tokens the contextual one saw
    paired = f" (context-free on the same tokens: {same['top1']:.3f} / {same['top10']:.3f})" if same else ""
    return f"{rates['top1']:.3f} / {rates['top10']:.3f}{paired}"


def linkage_size(payload: dict) -> Optional[str]:
    """The largest linkage set size every attacked point has (the hardest common setting)."""
    sizes = None
    for p in payload["points"]:
        if p.get("linkage"):
            have = {int(s) for s in p["linkage"]}
            sizes = have if sizes is None else sizes & have
    return str(max(sizes)) if sizes else None


def _link(p: dict, size: Optional[str]) -> str:
    if not p.get("linkage") or size not in p["linkage"]:
        return NOT_MEASURED
    return f"{p['linkage'][size]['top1']:.3f}"


def _cost(p: dict) -> str:
    tps = p.get("tokens_per_second")
    return "-" if not tps else f"{tps['mean']:,.0f} ({1e6 / tps['mean']:.1f} us)"


def _calib(p: dict) -> str:
    c = p.get("calibration")
    return "-" if not c else f"{c['n_w_median']:.3f} / {c['s_w_median']:.0f}"


def ordered_points(payload: dict) -> List[dict]:
    names = list(payload["epsilons"])
    return sorted(payload["points"], key=lambda p: (names.index(p["mechanism"]) if p["mechanism"] in names else 99,
                                                    p["epsilon"]))


def attack_of(p: dict) -> tuple:
    """(rates, label) of the inversion the plot and the verdicts use: the stronger of the two attackers measured
    (the higher top-1 rate), so a verdict is judged against the strongest attack the audit found. The contextual
    attacker is not always the stronger: with a bigram model from a few thousand reviews and Monte Carlo emissions
    it recovers fewer words than the context-free one on the very same tokens (docs/evaluation.md)."""
    measured = [(rates, label) for rates, label in ((p.get("inversion"), "context-free"),
                                                     (p.get("contextual_inversion"), "contextual")) if rates]
    return max(measured, key=lambda m: m[0]["top1"]) if measured else (None, "context-free")


def conditions(payload: dict) -> str:
    cfg, base = payload["config"], payload["baseline"]
    audit = cfg.get("audit")
    text = (f"{payload['reviews']['train']:,} train / {payload['reviews']['test']:,} test IMDb reviews (balanced), "
            f"{cfg['repeats']} privatization(s) per point, artifact `{cfg['artifact']}`; baseline accuracy "
            f"{base['accuracy']:.3f} (Wilson 95% [{base['low']:.3f}, {base['high']:.3f}]).")
    if audit:
        text += (f" Attacks: `textdp audit` on {audit['records']:,} held-out test-split reviews (never seen by the "
                 f"classifier; linkage pool {audit['pool']:,}), at most {audit['inversion_tokens']:,} word tokens "
                 f"inverted per epsilon, the attacker's prior from {audit['prior_reviews']:,} held-out train-split "
                 f"reviews ({audit['prior_words']:,} candidate words).")
        cover = [p["inversion"]["in_prior"] for p in payload["points"] if (p.get("inversion") or {}).get("in_prior") is not None]
        if cover:
            low, high = min(cover), max(cover)
            text += (f" Those candidates hold {_f(low)}" + ("" if high - low < 0.0005 else f" to {_f(high)}")
                     + " of the attacked tokens: where the attacker uses the closed form (inversion posterior 'exact' "
                     "in frontier.md) that caps its top-1 rate, so a longer candidate list can raise the rates near it.")
    return text


def decision_table(payload: dict) -> List[str]:
    size = linkage_size(payload)
    lines = ["| mechanism | epsilon | tokens changed | training-time acc. [95%] | test-time acc. [95%] | "
             "inversion top-1 / top-10 (context-free) | contextual inversion top-1 / top-10 | "
             f"linkage top-1 (among {format(int(size), ',') if size else '-'} originals) | N_w / S_w median | tokens/s (us per token) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in ordered_points(payload):
        lines.append(f"| {p['mechanism']} | {p['epsilon']:g} | {p['changed_fraction']['mean']:.3f} | "
                     f"{_acc(p['training_time'])} | {_acc(p['test_time'])} | {_inv(p.get('inversion'))} | "
                     f"{_inv(p.get('contextual_inversion'))} | {_link(p, size)} | {_calib(p)} | {_cost(p)} |")
    return lines


def samples_section(payload: dict) -> List[str]:
    lines = []
    by_mech = {}
    for p in ordered_points(payload):
        by_mech.setdefault(p["mechanism"], []).append(p)
    for mech, points in by_mech.items():
        lines += [f"**{mech}**", "", "```text"]
        for i, sentence in enumerate(payload["sentences"]):
            lines.append(f"original      {sentence}")
            for p in points:
                sample = (p.get("samples") or [None] * 3)[i]
                lines.append(f"{'epsilon ' + format(p['epsilon'], 'g'):<13} {sample if sample is not None else '-'}")
            if i < len(payload["sentences"]) - 1:
                lines.append("")
        lines += ["```", ""]
    return lines


def guarantees_section(payload: dict) -> List[str]:
    """Per mechanism, what its statement (statement_of, as the run's summary recorded it) covers, at its
    middle epsilon."""
    lines = []
    by_mech = {}
    for p in ordered_points(payload):
        by_mech.setdefault(p["mechanism"], []).append(p)
    for mech, points in by_mech.items():
        p = points[len(points) // 2]
        st = p.get("privacy") or {}
        cov = st.get("coverage") or {}
        covered = cov.get("covered", "-")
        more = "".join(f" {key.replace('_', ' ').capitalize()}: {value}." for key, value in cov.items() if key != "covered")
        lines += [f"- **{mech}** (statement at epsilon {p['epsilon']:g}): {st.get('notion', '-')}. Per token: "
                  f"{st.get('per_token', '-')}. Covered: {covered}.{more}"]
    return lines


def verdicts(payload: dict) -> List[str]:
    """'Which mechanism when', from the measured numbers only."""
    base = payload["baseline"]["accuracy"]
    size = linkage_size(payload)
    points = ordered_points(payload)
    label = ("inversion top-1 of the stronger attacker (context-free or contextual)"
             if any(p.get("contextual_inversion") for p in points) else "context-free inversion top-1")
    def most_protective(margin: float) -> dict:
        chosen = {}
        for p in points:
            rates, _ = attack_of(p)
            if p["training_time"]["delta_to_baseline"]["delta"] >= -margin and rates is not None:
                best = chosen.get(p["mechanism"])
                if best is None or rates["top1"] < attack_of(best)[0]["top1"]:
                    chosen[p["mechanism"]] = p
        return chosen

    lines = []
    for margin in (MARGIN, LOOSE_MARGIN):
        chosen = most_protective(margin)
        lines += [f"**Within {margin * 100:.0f} points** of the baseline ({base:.3f}): training-time accuracy at least "
                  f"the baseline minus {margin * 100:.0f} points by its mean (the intervals in the table say how sure "
                  f"that is). Per mechanism, its measured point with the lowest {label} that stays "
                  "within, most protective first:", ""]
        for mech, p in sorted(chosen.items(), key=lambda kv: attack_of(kv[1])[0]["top1"]):
            rates, _ = attack_of(p)
            lines.append(f"- {mech} at epsilon {p['epsilon']:g}: accuracy {p['training_time']['accuracy']['mean']:.3f}, "
                         f"{rates['top1']:.3f} of word tokens recovered top-1 ({rates['top10']:.3f} top-10), "
                         f"{p['changed_fraction']['mean']:.3f} of tokens changed, linkage top-1 {_link(p, size)}.")
        missing = [m for m in payload["epsilons"] if m not in chosen and any(q["mechanism"] == m for q in points)]
        if missing:
            lines.append(f"- never within {margin * 100:.0f} points at the measured epsilons: " + ", ".join(missing) + ".")
        lines.append("")
    lines.pop()
    readable = most_protective(MARGIN)
    protective = [p for p in points if attack_of(p)[0] is not None and attack_of(p)[0]["top1"] <= 0.2]
    if protective:
        best = max(protective, key=lambda p: p["training_time"]["accuracy"]["mean"])
        lines += ["", f"Where an attacker must recover at most 20% of words top-1, the most accurate measured point is "
                      f"{best['mechanism']} at epsilon {best['epsilon']:g}: accuracy "
                      f"{best['training_time']['accuracy']['mean']:.3f} (baseline {base:.3f}), inversion top-1 "
                      f"{attack_of(best)[0]['top1']:.3f}."]
    if size:
        linked = [p for p in readable.values() if p.get("linkage") and p["linkage"][size]["top1"] >= 0.9]
        if linked:
            lines += ["", f"Linkage: at {len(linked)} of the {len(readable)} points within 2 points above, the first words of "
                          f"a released review pick its source out of {int(size):,} originals at least 90% of the time: "
                          "word-level privacy at such an epsilon does not hide which record a release came from."]
    speeds = [p for p in points if p.get("tokens_per_second")]
    if speeds:
        fast = max(speeds, key=lambda p: p["tokens_per_second"]["mean"])
        slow = min(speeds, key=lambda p: p["tokens_per_second"]["mean"])
        lines += ["", f"Cost: from {slow['tokens_per_second']['mean']:,.0f} tokens/s ({slow['mechanism']} at epsilon "
                      f"{slow['epsilon']:g}) to {fast['tokens_per_second']['mean']:,.0f} tokens/s ({fast['mechanism']} "
                      f"at epsilon {fast['epsilon']:g}) per privatize job on this machine, Beam start included."]
    partial_cover = {}
    for p in points:
        covered = ((p.get("privacy") or {}).get("coverage") or {}).get("covered")
        if covered and covered != "all":
            partial_cover.setdefault(p["mechanism"], covered)
    if partial_cover:
        lines += ["", "Read these numbers with the guarantee: the statements of "
                  + ", ".join(f"{m} (covered: {c})" for m, c in partial_cover.items())
                  + " do not cover every pair of words (next section); a low attack rate there is measured, not promised."]
    partial = [m for m in payload["epsilons"] if (payload["points"] and not any(q["mechanism"] == m for q in points))]
    if partial:
        lines += ["", "Not measured in this run: " + ", ".join(partial) + "."]
    return lines


def invocations(payload: dict) -> List[dict]:
    """Every invocation that did part of the work, earliest first (machine, wall time)."""
    return [*payload.get("earlier_invocations", []), {"machine": payload["machine"], "wall_seconds": payload["wall_seconds"]}]


def choosing_doc(payload: dict) -> str:
    """The whole of docs/choosing.md, from the frontier results."""
    m = payload["machine"]
    lines = [
        "# Choosing a mechanism and an epsilon", "",
        "<!-- Generated by benchmarks/utility/frontier_report.py choosing_doc() from benchmarks/results/frontier.json; "
        "do not edit by hand: tests/test_choosing_doc.py checks it. -->", "",
        "Epsilon is not comparable across mechanisms: each has its own scale. Compare them on what an attacker "
        "recovers and what a classifier keeps, measured on the same reviews. This page is generated from one run "
        "of `benchmarks/frontier.py`; the full results, the plot and the machine are in "
        "[benchmarks/results/frontier.md](../benchmarks/results/frontier.md).", "",
        *([] if payload.get("complete", True) else
          ["**Partial results: the run had not finished every mechanism when this page was generated.**", ""]),
        "Conditions: " + conditions(payload), "",
        f"Measured on {m['cpu']}, {m['cores']} cores (shared), in {len(invocations(payload))} invocation(s) of the "
        "benchmark (each resumed the one before, reusing its runs): "
        + "; ".join(f"{e['machine']['date_utc']}, load average at start "
                    f"{', '.join(format(x, '.1f') for x in e['machine']['loadavg_at_start'])}, wall time "
                    f"{e['wall_seconds']:.0f} s" for e in invocations(payload)) + ".", "",
        "## Decision table", "",
        "Accuracy: IMDb sentiment, TF-IDF logistic regression, training time (train on privatized, test on "
        "original) and test time (train on original, test on privatized), with the Wilson 95% interval over test "
        "reviews. Inversion: share of word tokens the Bayes-optimal attacker recovers top-1 / top-10 (context-free: "
        "each word alone; contextual: an attacker that also reads the surrounding words, 'not measured' when the "
        "audit had no such attacker). Linkage: share of released records whose source the attacker ranks first. "
        "N_w: probability a word is released unchanged; S_w: distinct outputs in the draws (textdp calibrate, "
        "medians over sampled vocabulary words). Cost: tokens per second of the privatize job (2 local workers).", "",
        *decision_table(payload), "",
        "## Which mechanism when", "",
        *verdicts(payload), "",
        "## What each guarantee covers", "",
        "From each mechanism's own privacy statement (`textdp.mechanisms.statement_of`, as the run's summary "
        "recorded it); docs/mechanisms.md has the derivations.", "",
        *guarantees_section(payload), "",
        "## The same three sentences", "",
        "Seeded releases (an evaluation, not a private release) of three fixed sentences at each measured epsilon.", "",
        *samples_section(payload),
        "## Re-run", "",
        "<!-- docs-test: parse-only (long benchmark) -->",
        "```sh",
        payload["config"]["command"].replace("python -m benchmarks.frontier", "nice -n 10 python -m benchmarks.frontier"),
        "```", "",
    ]
    return "\n".join(lines)


def markdown(payload: dict, plot_name: str) -> str:
    cfg, m = payload["config"], payload["machine"]
    lines = ["# Privacy-utility frontier of every registered mechanism", "",
             *([] if payload.get("complete", True) else
               ["**Partial results: the run was still going (or was stopped) when this was written.**", ""]),
             conditions(payload), "",
             f"Machine: {m['cpu']}, {m['cores']} cores (nproc), load average at start "
             f"{tuple(round(x, 2) for x in m['loadavg_at_start'])}, at end {tuple(round(x, 2) for x in m['loadavg_at_end'])} "
             f"({m['date_utc']}); wall time {payload['wall_seconds']:.0f} s. Command: `{cfg['command']}`", ""]
    for e in payload.get("earlier_invocations", []):
        lines += [f"Resumed from an earlier invocation ({e['machine']['date_utc']}, wall time {e['wall_seconds']:.0f} s"
                  f"{'' if e['complete'] else ', stopped before the end'}): `{e['command']}`.", ""]
    if payload.get("fallback_epsilons"):
        lines += ["Mechanisms at the fallback epsilons (none chosen for them yet): "
                  + ", ".join(payload["fallback_epsilons"]) + ".", ""]
    lines += ["Intervals: accuracy [Wilson 95% over the test reviews, all repeats pooled]; delta to the baseline "
              "[paired bootstrap 95% over test reviews]. Repeats: "
              f"{cfg['repeats']} (a Student-t interval over repeats is in the JSON when repeats > 1).", "",
              *decision_table(payload), "",
              f"![accuracy against inversion]({plot_name})", "",
              "## Delta to the baseline", "",
              "| mechanism | epsilon | training time delta [95%] | within 2 pts | test time delta [95%] | within 2 pts | "
              "released unchanged (audit) | unknown tokens |", "|---|---|---|---|---|---|---|---|"]
    for p in ordered_points(payload):
        cells = [p["mechanism"], f"{p['epsilon']:g}"]
        for setting in ("training_time", "test_time"):
            d = p[setting]["delta_to_baseline"]
            cells += [f"{d['delta']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]", p[setting]["within_2_points"]]
        cells += [_f((p.get("inversion") or {}).get("released")), _f(p["runs"][0]["unknown_fraction"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Audits and runs", "", "| mechanism | audit s | inversion posterior | epsilon | repeat | seed | "
              "tokens | privatize s | tokens/s |", "|---|---|---|---|---|---|---|---|---|"]
    for p in ordered_points(payload):
        a = payload["mechanisms"].get(p["mechanism"], {}).get("audit") or {}
        for r in p["runs"]:
            lines.append(f"| {p['mechanism']} | {_f(a.get('seconds'), 0)} | {a.get('posterior') or '-'} | "
                         f"{p['epsilon']:g} | {r['repeat']} | {r['seed']} | {r['tokens']:,} | "
                         f"{_f(r['pipeline_seconds'], 0)} | {_f(r['tokens_per_second'], 0)} |")
    lines += ["", "## Samples", "", *samples_section(payload)]
    return "\n".join(lines)


def _panel(ax, payload: dict, rates_of, xlabel: str) -> None:
    """One panel: training-time accuracy against ``rates_of(point)``'s top-1 (None: the point is left out)."""
    base = payload["baseline"]
    ax.axhspan(base["low"], base["high"], color="0.88", label="baseline (Wilson 95%)")
    ax.axhline(base["accuracy"] - MARGIN, color="0.4", lw=1, ls="--", label="baseline - 2 points")
    for i, mech in enumerate(payload["epsilons"]):
        rows = [p for p in ordered_points(payload) if p["mechanism"] == mech and rates_of(p) is not None]
        if not rows:
            continue
        x = [rates_of(p)["top1"] for p in rows]
        y = [p["training_time"]["accuracy"]["mean"] for p in rows]
        err = [[yy - p["training_time"]["wilson"]["low"] for yy, p in zip(y, rows)],
               [p["training_time"]["wilson"]["high"] - yy for yy, p in zip(y, rows)]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=2, color=f"C{i % 10}", label=mech)
        for xi, yi, p in zip(x, y, rows):
            ax.annotate(f"{p['epsilon']:g}", (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_xlim(-0.02, 1.02)
    ax.grid(alpha=0.3)


def plot(payload: dict, path: str) -> None:
    """The frontier: training-time accuracy against inversion top-1, one curve per mechanism. With a contextual
    attacker measured, two panels: against the contextual attacker's rate, and against the stronger of the two
    attackers (``attack_of``: what the verdicts use); else one panel, the context-free attacker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contextual = any(p.get("contextual_inversion") for p in payload["points"])
    fig, axes = plt.subplots(1, 2 if contextual else 1, figsize=(14 if contextual else 8, 5.5), sharey=True,
                             squeeze=False)
    panels = ([(lambda p: p.get("contextual_inversion"), "contextual inversion attack: share of word tokens "
                "recovered top-1"),
               (lambda p: attack_of(p)[0], "the stronger of the context-free and contextual attackers: share "
                "recovered top-1")] if contextual else
              [(lambda p: p.get("inversion"), "context-free inversion attack: share of word tokens recovered top-1")])
    for ax, (rates_of, xlabel) in zip(axes[0], panels):
        _panel(ax, payload, rates_of, xlabel)
    axes[0][0].set_ylabel("IMDb accuracy, training time (Wilson 95%)")
    axes[0][-1].legend(fontsize=7, loc="lower right", ncol=2)
    fig.suptitle(f"Privacy-utility frontier ({payload['reviews']['train']:,}/{payload['reviews']['test']:,} reviews; "
                 "labels: epsilon)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(payload: dict, stem: str, choosing: bool = False) -> None:
    plot(payload, stem + ".png")
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(payload, os.path.basename(stem) + ".png"))
    if choosing:
        with open(CHOOSING, "w", encoding="utf-8") as handle:
            handle.write(choosing_doc(payload))
