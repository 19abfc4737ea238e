"""summary.json, PNG plots and report.html of ``textdp audit`` (same style as calibrate's report).

Rendered in memory with matplotlib's Agg canvas (no pyplot, no display); the caller writes the
bytes wherever the output lives. Nothing here imports Beam.

Files: ``self_check.png`` (lower bound of the privacy loss against the guarantee, per epsilon),
``inversion.png`` (recovery rates against epsilon, with the baselines, and per frequency band),
``linkage.png`` (linkage rates against the set size), ``report.html``.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence

import numpy as np
from matplotlib.figure import Figure

from textdp.audit.attacks import BAND_LABELS, rate_entry
from textdp.calibration.report import _e, _png  # the same HTML escaping and PNG rendering as calibrate's report
from textdp.calibration.report import _fmt as _f

SELF_CHECK_PNG = "self_check.png"
INVERSION_PNG = "inversion.png"
LINKAGE_PNG = "linkage.png"
REPORT = "report.html"

DEFINITIONS = {
    "guarantee (bound)": "what the mechanism promises for two inputs w, w': no set of outputs is more than exp(bound) "
                         "times likelier from w than from w'. For Madlib bound = epsilon * d(w, w'), for TEM "
                         "epsilon * min(d(w, w'), gamma).",
    "lower bound (LCB)": "from draws only: an event E chosen on half of the draws, then a 1 - alpha confidence lower "
                         "bound of ln(P[M(w) in E] / P[M(w') in E]) from the other half (Clopper-Pearson). It is what "
                         "the mechanism provably leaks for that pair, at that confidence.",
    "violation": "a lower bound above the guarantee: the implementation leaks more than it promises. A correct "
                 "mechanism produces any violation in a run with probability at most the stated false-alarm rate.",
    "tightness": "LCB / bound: how much of the promised budget the draws could show being used. Near 1 the test "
                 "would catch a mechanism that leaks more; near 0 it could not.",
    "top-1 / top-10 recovery": "the share of a real corpus's word tokens whose input word the Bayes-optimal attacker "
                               "(knowing the mechanism and the prior) names as its first guess / among its ten "
                               "guesses after seeing the released word.",
    "contextual top-1 / top-10": "the same shares for an attacker that also reads the released word order: a bigram "
                                 "language model trained on public text as the prior of each word given the previous "
                                 "one, forward-backward over each released record, its guesses among the context-free "
                                 "attacker's K most probable words plus the released word. A lower bound on what an "
                                 "attacker with a better language model achieves.",
    "released-word baseline": "the share of tokens released unchanged: what an attacker gets by simply believing the "
                              "released word (N_w averaged over the corpus's words).",
    "word in the prior": "the share of tokens whose word the attacker's prior contains at all: the attacker never "
                         "names another word, so this caps its recovery (a larger --prior-words raises it).",
    "prior baseline": "the share of tokens an attacker names without looking at the release at all: the prior's most "
                      "probable word (top-1) or ten words (top-10).",
    "linkage top-1 / top-5": "given n original records and one released record, the share of released records whose "
                             "source the attacker ranks first / among the first five, by the likelihood of the "
                             "released words under the mechanism (ties broken at random).",
    "structure alone": "the share of released records whose layout (word count, punctuation, case pattern: what "
                       "privatize copies unchanged) differs from every other record in the set: the structure "
                       "alone links those records, whatever the words.",
}


def _by_eps(rows: Sequence[dict]) -> Dict[float, List[dict]]:
    out: Dict[float, List[dict]] = {}
    for row in rows:
        out.setdefault(float(row["epsilon"]), []).append(row)
    return dict(sorted(out.items()))


# --- summaries of linkage ---------------------------------------------------------------------------


def summarise_linkage(rows: Sequence[dict]) -> dict:
    """Per epsilon and set size: expected top-1 / top-5 linkage with 95% intervals, structure-alone share."""
    out = {}
    for eps, group in _by_eps(rows).items():
        sizes: Dict[int, List[dict]] = {}
        for row in group:
            sizes.setdefault(int(row["set_size"]), []).append(row)
        entry = {}
        for size in sorted(sizes):
            part = sizes[size]
            n = len(part)
            entry[str(size)] = {"queries": n,
                                "top1": rate_entry(sum(r["top1"] for r in part), n),
                                "top5": rate_entry(sum(r["top5"] for r in part), n),
                                "structure_alone": rate_entry(sum(1 for r in part if r["structure_unique"]), n),
                                "chance_top1": 1.0 / size, "chance_top5": min(5, size) / size}
        out[f"{eps:g}"] = entry
    return out


# --- plots -------------------------------------------------------------------------------------------------


def self_check_png(rows: Sequence[dict], false_alarm_rate: float) -> bytes:
    """Per epsilon: lower bound of the log-ratio against the guarantee; the diagonal is the guarantee."""
    groups = {eps: [r for r in group if r.get("bound") is not None] for eps, group in _by_eps(rows).items()}
    groups = {eps: group for eps, group in groups.items() if group} or {0.0: []}
    count = len(groups)
    figure = Figure(figsize=(3.4 * count, 3.4), constrained_layout=True)
    for i, (eps, group) in enumerate(groups.items()):
        axis = figure.add_subplot(1, count, i + 1)
        bound = np.array([r["bound"] for r in group], dtype=float)
        lcb = np.array([r["lcb"] if r.get("lcb") is not None else np.nan for r in group], dtype=float)
        bad = np.array([r["verdict"] == "violation" for r in group], dtype=bool)
        top = max(float(np.nanmax(bound)) if len(bound) else 1.0, float(np.nanmax(lcb)) if np.isfinite(lcb).any() else 0.0, 1e-3)
        axis.plot([0, top * 1.05], [0, top * 1.05], "k--", linewidth=1, label="guarantee (LCB = bound)")
        axis.scatter(bound[~bad], lcb[~bad], s=12, color="#4C72B0", label="pass")
        if bad.any():
            axis.scatter(bound[bad], lcb[bad], s=30, color="#C44E52", marker="x", label="VIOLATION")
        axis.set_xlabel("guarantee of the pair (bound)")
        axis.set_title(f"epsilon = {eps:g}")
        if i == 0:
            axis.set_ylabel("lower bound of ln P(E|w)/P(E|w')")
            axis.legend(fontsize=7)
    figure.suptitle(f"Self-check: measured leakage against the guarantee (false-alarm rate {false_alarm_rate:g})")
    return _png(figure)


def inversion_png(inversion: dict, contextual: Optional[dict] = None) -> bytes:
    """Context-free rates (and the contextual attacker's, when given: same axes, extra series) against epsilon."""
    eps = [float(e) for e in inversion]
    contextual = contextual or {}
    figure = Figure(figsize=(11, 4), constrained_layout=True)
    left = figure.add_subplot(1, 2, 1)
    for key, label, style in (("top1", "attacker top-1", "o-"), ("top10", "attacker top-10", "s-"),
                              ("released", "released word (baseline)", "v--"), ("prior_top1", "prior top-1", ":"),
                              ("prior_top10", "prior top-10", "-.")):
        values = [inversion[e]["overall"][key]["rate"] for e in inversion]
        left.plot(eps, values, style, label=label)
    for key, label, style in (("top1", "contextual attacker top-1", "o--"), ("top10", "contextual attacker top-10", "s--")):
        values = [(contextual.get(e) or {}).get("overall", {}).get(key, {}).get("rate") for e in inversion]
        if any(v is not None for v in values):
            left.plot(eps, [np.nan if v is None else v for v in values], style, label=label)
    left.set_xlabel("epsilon")
    left.set_ylabel("share of tokens recovered")
    left.set_ylim(0, 1)
    left.legend(fontsize=8)
    left.set_title("Inversion: all tokens")
    right = figure.add_subplot(1, 2, 2)
    for label in BAND_LABELS:
        values = [inversion[e]["bands"].get(label, {}).get("top1", {}).get("rate") for e in inversion]
        if any(v is not None for v in values):
            line, = right.plot(eps, [np.nan if v is None else v for v in values], "o-", label=label)
            values = [(contextual.get(e) or {}).get("bands", {}).get(label, {}).get("top1", {}).get("rate")
                      for e in inversion]
            if any(v is not None for v in values):
                right.plot(eps, [np.nan if v is None else v for v in values], "o--", color=line.get_color(),
                           label=f"{label}, contextual")
    right.set_xlabel("epsilon")
    right.set_ylabel("top-1 recovery")
    right.set_ylim(0, 1)
    if right.get_legend_handles_labels()[0]:  # no band measured (e.g. too few tokens): no empty legend
        right.legend(fontsize=8, title="input word's frequency rank")
    right.set_title("Inversion by frequency band" + (" (dashed: contextual)" if contextual else ""))
    return _png(figure)


def linkage_png(linkage: dict) -> bytes:
    figure = Figure(figsize=(11, 4), constrained_layout=True)
    for i, key in enumerate(("top1", "top5")):
        axis = figure.add_subplot(1, 2, i + 1)
        for eps, entry in linkage.items():
            sizes = [int(s) for s in entry]
            axis.plot(sizes, [entry[s][key]["rate"] for s in entry], "o-", label=f"epsilon {eps}")
        if linkage:
            entry = next(iter(linkage.values()))
            sizes = [int(s) for s in entry]
            axis.plot(sizes, [entry[s][f"chance_{key}"] for s in entry], "k:", label="chance")
            if i == 0:
                axis.plot(sizes, [entry[s]["structure_alone"]["rate"] for s in entry], "k--",
                          label="structure alone (first epsilon)")
        axis.set_xscale("log")
        axis.set_xlabel("records in the set")
        axis.set_ylabel(f"{'top-1' if key == 'top1' else 'top-5'} linkage rate")
        axis.set_ylim(0, 1.02)
        axis.legend(fontsize=8)
    figure.suptitle("Record linkage from the released words")
    return _png(figure)


# --- HTML -------------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: sans-serif; max-width: 1150px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: right; }
th { background: #eee; } td.l, th.l { text-align: left; }
.box { border: 2px solid #4C72B0; background: #f1f5fb; padding: 0.8em 1.2em; font-size: 1.05em; }
.bad { border-color: #C44E52; background: #fbf1f1; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""


def _rate(entry: Optional[dict]) -> str:
    if not entry or entry.get("rate") is None:
        return "&ndash;"
    low, high = entry["ci95"]
    return f"{entry['rate']:.3f} <small>[{low:.3f}, {high:.3f}]</small>"


def _self_check_html(check: dict) -> str:
    if not check:
        return "<p>Not run.</p>"
    rows = "".join(
        f"<tr><td>{_e(eps)}</td><td>{e['pairs']}</td><td>{e['tests']}</td><td>{e['violations']}</td>"
        f"<td>{e['no_guarantee_leaks']}</td><td>{_f(e['median_tightness'])}</td><td>{_f(e['max_tightness'])}</td>"
        f"<td>{_f(e['max_excess'])}</td></tr>" for eps, e in check["per_epsilon"].items())
    worst = "".join(
        f"<tr><td class='l'>{_e(r['label'])}</td><td>{_f(r['epsilon'])}</td><td>{_e(r['direction'])}</td>"
        f"<td>{_f(r['distance'])}</td><td>{_f(r['bound'])}</td><td>{_f(r['lcb'])}</td><td>{_f(r['excess'])}</td></tr>"
        for r in check["worst_violations"] + check.get("no_guarantee_examples", []))
    worst_table = ("<h3>Pairs beyond their guarantee</h3><table><tr><th class='l'>pair</th><th>epsilon</th>"
                   "<th>direction</th><th>distance</th><th>bound</th><th>LCB</th><th>LCB - bound</th></tr>"
                   f"{worst}</table>") if worst else ""
    return (f"<table><tr><th>epsilon</th><th>pairs</th><th>tests</th><th>violations</th><th>leaks without a guarantee</th>"
            f"<th>median tightness</th><th>max tightness</th><th>max LCB - bound</th></tr>{rows}</table>{worst_table}"
            f"<p>{_e(check['method'])}</p><p>Guarantee of a pair: {_e(check.get('bound', ''))}</p>")


def _inversion_html(inv: dict, contextual: Optional[dict] = None) -> str:
    if not inv:
        return "<p>Not run (not in --checks, or no --corpus given).</p>"
    contextual = contextual or {}
    head = ("<tr><th>epsilon</th><th class='l'>attacker</th><th class='l'>input words</th><th>tokens</th>"
            "<th>attacker top-1</th><th>attacker top-10</th><th>released word</th><th>prior top-1</th>"
            "<th>prior top-10</th><th>word in the prior</th></tr>")
    body = []
    for eps, entry in inv["per_epsilon"].items():
        attackers = [("context-free", entry)]
        if (contextual.get("per_epsilon") or {}).get(eps):
            attackers.append(("contextual", contextual["per_epsilon"][eps]))
        for attacker, part in attackers:
            groups = [("all", {"tokens": part["tokens"], **part["overall"]})] + list(part["bands"].items())
            for label, e in groups:
                body.append(f"<tr><td>{_e(eps)}</td><td class='l'>{_e(attacker)}</td><td class='l'>{_e(label)}</td>"
                            f"<td>{e['tokens']:,}</td>"
                            + "".join(f"<td>{_rate(e.get(k))}</td>" for k in ("top1", "top10", "released", "prior_top1",
                                                                              "prior_top10", "in_prior")) + "</tr>")
    mc = ""
    if inv.get("monte_carlo"):
        mc_rows = "".join(
            f"<tr><td>{_e(eps)}</td><td>{m['training_draws']:,}</td><td>{_f(m['upper_top1'])}</td>"
            f"<td>{_f(m['upper_top10'])}</td></tr>" for eps, m in inv["monte_carlo"].items())
        mc = ("<h3>Monte Carlo error: upper bounds of the Bayes-optimal rates (inputs drawn from the prior, "
              f"probability {1 - inv['monte_carlo_delta']:g})</h3><table><tr><th>epsilon</th><th>draws</th>"
              f"<th>top-1 at most</th><th>top-10 at most</th></tr>{mc_rows}</table>")
    return (f"<p>Prior: {_e(inv['prior'])}. Posterior: {_e(inv['posterior'])}.</p>"
            f"<table>{head}{''.join(body)}</table><p>Rates with 95% Clopper-Pearson intervals.</p>{mc}"
            f"{_contextual_html(contextual)}")


def _contextual_html(contextual: dict) -> str:
    """What the contextual attacker is, and the context-free attacker's rates on the releases it saw."""
    if not contextual:
        return "<p>The contextual attacker was not run (--no-contextual).</p>"
    model = contextual["model"]
    warning = f"<p class='warn'><b>Warning:</b> the contextual attacker: {_e(model['warning'])}.</p>" if model.get("warning") else ""
    same = "".join(f"<tr><td>{_e(eps)}</td><td>{e['tokens']:,}</td><td>{_rate(e['top1'])}</td><td>{_rate(e['top10'])}</td>"
                   f"<td>{_rate(contextual['per_epsilon'][eps]['overall']['top1'])}</td>"
                   f"<td>{_rate(contextual['per_epsilon'][eps]['overall']['top10'])}</td></tr>"
                   for eps, e in contextual["same_releases_context_free"].items())
    return (f"<h3>Contextual attacker</h3>{warning}<p>{_e(contextual['posterior'])}. Language model: order {model['order']}, "
            f"{_e(model['smoothing'])} (discount {_f(model['discount'])}), trained on {model['training_tokens']:,} tokens "
            f"of {_e(model['training_text'])}. Approximation: {_e(model['approximation'])} Its rates are "
            f"{_e(model['bound'])}.</p><p>It attacks whole records (tokens counted: every in-vocabulary word of the "
            "records it attacked), so its rows count other tokens than the context-free rows; on the very same "
            "releases the two attackers score:</p><table><tr><th>epsilon</th><th>tokens</th><th>context-free top-1</th>"
            f"<th>context-free top-10</th><th>contextual top-1</th><th>contextual top-10</th></tr>{same}</table>")


def _linkage_html(link: dict) -> str:
    if not link:
        return "<p>Not run (not in --checks, or no --corpus given).</p>"
    if not link["per_epsilon"]:
        return (f"<p>Nothing was compared: no record of --corpus has at least {link['window_words']} words "
                "(--linkage-window).</p>")
    body = []
    for eps, entry in link["per_epsilon"].items():
        for size, e in entry.items():
            body.append(f"<tr><td>{_e(eps)}</td><td>{int(size):,}</td><td>{e['queries']:,}</td><td>{_rate(e['top1'])}</td>"
                        f"<td>{_rate(e['top5'])}</td><td>{_f(e['chance_top1'])}</td><td>{_rate(e['structure_alone'])}</td></tr>")
    return (f"<p>Likelihood: {_e(link['likelihood'])}; records compared on their first {link['window_words']} words.</p>"
            "<table><tr><th>epsilon</th><th>set size</th><th>queries</th><th>top-1</th><th>top-5</th><th>chance top-1</th>"
            f"<th>structure alone</th></tr>{''.join(body)}</table>")


def render_html(summary: dict, images: Sequence[str]) -> str:
    check = summary.get("self_check") or {}
    bad = check.get("status") in ("violation", "no guarantee")
    facts = [("mechanism", summary["mechanism"]), ("epsilons", ", ".join(f"{e:g}" for e in summary["epsilons"])),
             ("artifact", f"{summary['artifact'].get('path')} ({summary['artifact'].get('vocab_size'):,} words)"),
             ("out-of-vocabulary policy", summary["oov_policy"]), ("randomness", summary["randomness"]),
             ("corpus", json.dumps(summary.get("corpus")) if summary.get("corpus") else "none"),
             ("created (UTC)", summary.get("created_utc", ""))]
    facts_html = "".join(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in facts)
    definitions = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in summary.get("definitions", {}).items())
    img = {name: f'<img src="{_e(name)}" alt="{_e(name)}">' for name in images}
    message = check.get("message", "The self-check was not run.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>textdp audit: {_e(summary['mechanism'])}</title>
<style>{_STYLE}</style></head><body>
<h1>Privacy audit of {_e(summary['mechanism'])}</h1>
<div class="box{' bad' if bad else ''}"><p><b>{_e(message)}</b></p></div>
<h2>Run</h2><table>{facts_html}</table>
<h2>1. Self-check: does the implementation keep its guarantee?</h2>
{img.get(SELF_CHECK_PNG, '')}
{_self_check_html(check)}
<h2>2. Inversion: can an attacker recover the original word?</h2>
{img.get(INVERSION_PNG, '')}
{_inversion_html(summary.get('inversion') or {}, summary.get('contextual_inversion'))}
<h2>3. Record linkage: does a released record point back to its source?</h2>
{img.get(LINKAGE_PNG, '')}
{_linkage_html(summary.get('linkage') or {})}
<h2>Definitions</h2><ul>{definitions}</ul>
<h2>Privacy statement of the mechanism (first epsilon)</h2>
<pre>{_e(json.dumps(summary.get('privacy_statement'), indent=2))}</pre>
</body></html>
"""


def build_report_files(summary: dict, self_check_rows: Sequence[dict]) -> Dict[str, bytes]:
    files: Dict[str, bytes] = {}
    if summary.get("self_check"):
        files[SELF_CHECK_PNG] = self_check_png(self_check_rows, summary["self_check"]["false_alarm_rate"])
    if summary.get("inversion"):
        files[INVERSION_PNG] = inversion_png(summary["inversion"]["per_epsilon"],
                                             (summary.get("contextual_inversion") or {}).get("per_epsilon"))
    if summary.get("linkage") and summary["linkage"].get("per_epsilon"):
        files[LINKAGE_PNG] = linkage_png(summary["linkage"]["per_epsilon"])
    files[REPORT] = render_html(summary, tuple(files)).encode("utf-8")
    return files
