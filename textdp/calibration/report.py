"""Plots and the HTML report of a calibration run (the paper's Fig. 1-4 plus the recommendation).

Everything is rendered to bytes in memory with matplotlib's Agg canvas (no pyplot, no global
backend switch, no display needed), so the caller decides where the files go: a local directory
or gs:// through Beam's FileSystems. Nothing here imports Beam.

Files (names fixed so the report and tests can refer to them):
``hist_n_w.png`` / ``hist_s_w.png``
    histograms of N_w and S_w over the sampled words, one panel per epsilon (Fig. 2), with the
    targets drawn as dashed lines;
``means_vs_epsilon.png``
    mean N_w and S_w against epsilon with the worst case and the 5-95 percentile band (Fig. 3-4);
``knn_distances.png``
    percentiles of the distance to the k-th nearest word against k (Fig. 1);
``report.html``
    the recommendation, the run's facts, tables and the four plots.
"""

from __future__ import annotations

import html
import io
import json
from typing import Dict, List, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

HIST_NW = "hist_n_w.png"
HIST_SW = "hist_s_w.png"
MEANS = "means_vs_epsilon.png"
KNN = "knn_distances.png"
REPORT = "report.html"
PLOT_FILES = (HIST_NW, HIST_SW, MEANS, KNN)


def _png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _by_epsilon(rows: Sequence[dict]) -> Dict[float, List[dict]]:
    out: Dict[float, List[dict]] = {}
    for row in rows:
        out.setdefault(float(row["epsilon"]), []).append(row)
    return dict(sorted(out.items()))


def histogram_png(rows: Sequence[dict], key: str, label: str, value_range, target=None, target_label="") -> bytes:
    """One histogram panel per epsilon (Fig. 2); the exact values of a closed form, when present, as an outline."""
    groups = _by_epsilon(rows)
    count = max(len(groups), 1)
    figure = Figure(figsize=(3.2 * count, 3.0), constrained_layout=True)
    bins = np.linspace(value_range[0], value_range[1], 41)
    for i, (eps, group) in enumerate(groups.items()):
        axis = figure.add_subplot(1, count, i + 1)
        values = np.array([r[key] for r in group], dtype=float)
        axis.hist(values, bins=bins, color="#4C72B0", alpha=0.85, label="estimate")
        exact = [r.get(f"{key}_exact") for r in group]
        if all(v is not None for v in exact):
            axis.hist(np.array(exact, dtype=float), bins=bins, histtype="step", color="black", label="exact (closed form)")
        if target is not None:
            axis.axvline(target, color="#C44E52", linestyle="--", label=target_label)
        axis.set_title(f"epsilon = {eps:g}")
        axis.set_xlabel(label)
        if i == 0:
            axis.set_ylabel("words")
            axis.legend(fontsize=7)
    figure.suptitle(f"{label} over the sampled words")
    return _png(figure)


def means_png(statistics: dict, samples: int) -> bytes:
    """Mean N_w and S_w against epsilon with worst case and 5-95 percentile band (Fig. 3-4)."""
    eps = np.array([float(e) for e in statistics])
    figure = Figure(figsize=(10, 3.8), constrained_layout=True)
    for i, (key, label, worst) in enumerate((("n_w", "N_w = Pr[M(w) = w]", "max"),
                                             ("s_w", f"S_w (distinct outputs in {samples} draws)", "min"))):
        axis = figure.add_subplot(1, 2, i + 1)
        stats = [statistics[e][key] for e in statistics]
        axis.fill_between(eps, [s["p5"] for s in stats], [s["p95"] for s in stats], color="#4C72B0", alpha=0.2,
                          label="5th-95th percentile")
        axis.plot(eps, [s["mean"] for s in stats], "o-", color="#4C72B0", label="mean")
        axis.plot(eps, [s[worst] for s in stats], "v--" if worst == "min" else "^--", color="#C44E52",
                  label=f"worst case ({worst})")
        exact_key = f"{key}_exact"
        if all(exact_key in statistics[e] for e in statistics):
            axis.plot(eps, [statistics[e][exact_key]["mean"] for e in statistics], "k:", label="mean, exact (closed form)")
        axis.set_xscale("log")
        axis.set_xticks(eps)
        axis.set_xticklabels([f"{e:g}" for e in eps])
        axis.set_xlabel("epsilon")
        axis.set_ylabel(label)
        axis.legend(fontsize=8)
    figure.suptitle("Plausible-deniability statistics against epsilon")
    return _png(figure)


def knn_png(knn: dict) -> bytes:
    """Percentiles of the distance to the k-th nearest word against k (Fig. 1)."""
    figure = Figure(figsize=(6, 4), constrained_layout=True)
    axis = figure.add_subplot(1, 1, 1)
    for p, values in knn["percentiles"].items():
        axis.plot(knn["k"], values, "o-", label=f"{p}th percentile")
    axis.set_xscale("log")
    axis.set_xlabel("k")
    axis.set_ylabel("distance to the k-th nearest word")
    axis.set_title(f"k-NN distances ({knn['words']} sampled words)")
    axis.legend(fontsize=8)
    return _png(figure)


def render_plots(rows: Sequence[dict], summary: dict) -> Dict[str, bytes]:
    """All four PNGs, keyed by file name."""
    targets = summary["recommendation"]["targets"]
    samples = int(summary["samples"])
    return {
        HIST_NW: histogram_png(rows, "n_w", "N_w", (0.0, 1.0), targets.get("max_nw"), "max N_w target"),
        HIST_SW: histogram_png(rows, "s_w", "S_w", (0.0, float(samples)), targets.get("min_sw"), "min S_w target"),
        MEANS: means_png(summary["statistics"], samples),
        KNN: knn_png(summary["knn_distances"]),
    }


# --- HTML ------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: right; }
th { background: #eee; } td.l, th.l { text-align: left; }
.rec { border: 2px solid #4C72B0; background: #f1f5fb; padding: 0.8em 1.2em; font-size: 1.1em; }
.ok { color: #1b7a1b; font-weight: bold; } .no { color: #b22222; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
code { background: #f4f4f4; padding: 0 3px; }
"""


def _e(value) -> str:
    return html.escape(str(value))


def _fmt(value, digits=3) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return _e(value)


def _statistics_table(statistics: dict, key: str, title: str) -> str:
    cols = ["min", "p1", "p5", "p25", "p50", "p75", "p95", "p99", "max", "mean"]
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = []
    for eps, entry in statistics.items():
        if key not in entry:
            continue
        cells = "".join(f"<td>{_fmt(entry[key].get(c))}</td>" for c in cols)
        body.append(f"<tr><td>{_e(eps)}</td>{cells}</tr>")
    if not body:
        return ""
    return f"<h3>{_e(title)}</h3><table><tr><th>epsilon</th>{head}</tr>{''.join(body)}</table>"


def render_html(summary: dict, plot_files: Sequence[str] = PLOT_FILES) -> str:
    """The single page a privacy engineer reads: recommendation first, then the evidence."""
    rec = summary["recommendation"]
    targets = rec["targets"]
    rows = []
    for entry in rec["per_epsilon"]:
        verdict = '<span class="ok">meets</span>' if entry["meets"] else '<span class="no">fails</span>'
        rows.append(
            f"<tr><td>{entry['epsilon']:g}</td><td>{entry['words']}</td><td>{entry['share_meeting']:.4f}</td>"
            f"<td>{entry['share_nw_ok']:.4f}</td><td>{entry['share_sw_ok']:.4f}</td>"
            f"<td>{entry['worst_n_w']:.3g}</td><td>{entry['worst_s_w']:.4g}</td><td>{verdict}</td></tr>")
    facts = [
        ("mechanism", summary["mechanism"]),
        ("nearest-neighbour search", summary.get("nn_statement", "n/a")),
        ("artifact", f"{summary['artifact'].get('path')} ({summary['artifact'].get('vocab_size'):,} words, "
                     f"{summary['artifact'].get('dimension')} dimensions)"),
        ("epsilons", ", ".join(f"{float(e):g}" for e in summary["epsilons"])),
        ("draws per word and epsilon", summary["samples"]),
        ("words", summary["words"]["description"]),
        ("randomness", summary["randomness"]),
        ("created (UTC)", summary.get("created_utc", "")),
    ]
    facts_html = "".join(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in facts)
    knn = summary["knn_distances"]
    knn_head = "".join(f"<th>k={k}</th>" for k in knn["k"])
    knn_rows = "".join(f"<tr><td>{_e(p)}th</td>" + "".join(f"<td>{v:.3f}</td>" for v in values) + "</tr>"
                       for p, values in knn["percentiles"].items())
    definitions = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in summary.get("definitions", {}).items())
    images = {name: f'<img src="{_e(name)}" alt="{_e(name)}">' for name in plot_files}
    statistics = summary["statistics"]
    from textdp.mechanisms import available_class

    cls = available_class(summary["mechanism"])
    title = cls.title() if cls is not None else summary["mechanism"]  # how the mechanism's class names itself
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>textdp calibration: choosing epsilon</title>
<style>{_STYLE}</style></head><body>
<h1>Choosing epsilon for {_e(summary['mechanism'])}: plausible-deniability statistics</h1>
<div class="rec"><p><b>{_e(rec['message'])}</b></p>
<p>Targets: N_w &le; {_fmt(targets.get('max_nw'))}, S_w &ge; {_fmt(targets.get('min_sw'))} for at least
{_fmt(targets.get('coverage'), 4)} of the sampled words (judged on {_e(rec['basis'])}).</p></div>
<h2>Run</h2><table>{facts_html}</table>
<h2>Targets per epsilon</h2>
<table><tr><th>epsilon</th><th>words</th><th>share meeting both</th><th>share N_w ok</th><th>share S_w ok</th>
<th>worst N_w</th><th>worst S_w</th><th>verdict</th></tr>{''.join(rows)}</table>
<p>A word meets the targets when both hold for it. With {summary['words']['count']} sampled words a coverage
of {_fmt(targets.get('coverage'), 4)} allows {int((1 - float(targets.get('coverage'))) * summary['words']['count'] + 1e-9)}
failing word(s). Estimates from {summary['samples']} draws have sampling error (N_w: standard error
at most {0.5 / max(summary['samples'], 1) ** 0.5:.3f}); read results near a target with that in mind.</p>
<h2>Distributions over words (Fig. 2)</h2>
{images.get(HIST_NW, '')}
{images.get(HIST_SW, '')}
{_statistics_table(statistics, 'n_w', 'N_w (estimate)')}
{_statistics_table(statistics, 's_w', 'S_w (estimate: distinct outputs)')}
{_statistics_table(statistics, 'n_w_exact', f'N_w exact ({title} closed form)')}
{_statistics_table(statistics, 's_w_exact', f'S_w exact: expected distinct outputs ({title} closed form)')}
<h2>Average and worst case against epsilon (Fig. 3-4)</h2>
{images.get(MEANS, '')}
<h2>Distances to the k nearest words (Fig. 1)</h2>
{images.get(KNN, '')}
<table><tr><th>percentile</th>{knn_head}</tr>{knn_rows}</table>
<h2>Definitions</h2><ul>{definitions}</ul>
<h2>Privacy statement of the mechanism (at the recommended epsilon)</h2>
<pre>{_e(json.dumps(summary.get('privacy_statement'), indent=2))}</pre>
</body></html>
"""


def build_report_files(rows: Sequence[dict], summary: dict) -> Dict[str, bytes]:
    """Every report file (PNGs, report.html) as bytes, keyed by file name."""
    files = render_plots(rows, summary)
    files[REPORT] = render_html(summary, tuple(files)).encode("utf-8")
    return files
