"""Markdown summary of the peer comparison (benchmarks/results/peer.md)."""

from __future__ import annotations

import json
import os

DIFFRACTOR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "peer-diffractor.json")


def _verdict(result: dict) -> str:
    if result.get("passed") is None:
        return "n/a"
    return ("consistent" if result["passed"] else "**rejected**") + f" (p = {result['p_value']:.3g}, {result['bins']} bins)"


def markdown(payload: dict) -> str:
    m, mldp = payload["machine"], payload["mldp"]
    lines = [
        "# textdp against MLDP (mldp-text 0.1.2): speed and output distributions", "",
        f"Machine: {m['cpu']}, {m['cores']} cores (nproc), load average at start "
        f"{tuple(round(x, 2) for x in m['loadavg_at_start'])}, at end {tuple(round(x, 2) for x in m['loadavg_at_end'])} "
        f"({m['date_utc']}). Every process limited to one BLAS/OpenMP thread; tokens/s = tokens per CPU second "
        f"(one core). Seed {payload['seed']} (benchmark only). Wall time {payload['wall_seconds']:.0f} s. "
        f"Command: `{payload['command']}`", "",
        f"MLDP {mldp['version']} with numpy {mldp['numpy']} in its own virtual environment ({mldp['venv']['path']}, "
        f"not in the repository); {mldp['settings']}. Vocabulary: the same {mldp['vocab_size']:,} GloVe 6B 50d words "
        "and float32 vectors as textdp's artifact. Tokens: the same in-vocabulary IMDb review tokens, in reading order.", "",
        "## Speed (same tokens, same run)", "",
        "| mechanism | epsilon | tokens | MLDP class | MLDP tokens/s | MLDP setup s | textdp tokens/s | textdp / MLDP | "
        "changed (MLDP / textdp) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in payload["speed"]:
        lines.append(f"| {s['mechanism']} | {s['epsilon']:g} | {s['tokens']} | {s['mldp']['class']} | "
                     f"{s['mldp']['tokens_per_cpu_second']:,.1f} | {s['mldp']['setup_seconds']:.1f} | "
                     f"{s['textdp']['tokens_per_cpu_second']:,.0f} | {s['speedup_textdp_over_mldp']:,.0f}x | "
                     f"{s['mldp']['changed_fraction']:.2f} / {s['textdp']['changed_fraction']:.2f} |")
    lines += ["", "textdp's Madlib searches the nearest word exactly; MLDP's MultivariateCalibrated uses an approximate "
              "faiss IVF index (nprobe 50 of 100 lists) and then looks the word up by a linear scan of the vocabulary. "
              "textdp's TEM samples the closed form exactly from a K-nearest table; MLDP's TEM computes all "
              "distances and Gumbel scores in Python for every token.", "",
              "## Distribution checks", "",
              f"Each test rejects at alpha = {payload['alpha']}: a correct implementation fails one test with probability "
              f"{payload['alpha']}, all {payload['false_failure_rate']['tests']} tests together with at most "
              f"{payload['false_failure_rate']['family_at_most']}.", "",
              "Sensitivity: the same test applied to draws made at epsilon x 1.25 (TEM: MLDP's draws against the closed "
              "form at 1.25 epsilon; Madlib: as many textdp draws at 1.25 epsilon as MLDP made, against the reference). "
              "A small p-value there shows the test, at that number of draws, can tell such a difference apart.", "",
              "| mechanism | word | epsilon | reference | MLDP draws | MLDP | textdp draws | textdp | N_w MLDP / textdp / expected "
              "| sensitivity p |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for c in payload["checks"]:
        if c["mechanism"] == "tem":
            ref = f"closed form (gamma MLDP {c['mldp']['gamma']:g}, textdp {c['textdp']['gamma']:.3f})"
            nw = f"{c['mldp']['n_w_observed']:.3f} / {c['textdp']['n_w_observed']:.3f} / {c['textdp']['n_w_expected']:.3f}"
            md, td = c["mldp"]["draws"], c["textdp"]["draws"]
            sens = c["mldp"]["p_value_against_epsilon_x1.25"]
        else:
            ref = "Alg. 1 direct (exact float64 nearest word)"
            nw = f"{c['mldp']['n_w_observed']:.3f} / {c['textdp']['n_w_observed']:.3f} / {c['reference_n_w']:.3f} (reference)"
            md, td = c["mldp"]["draws"][0], c["textdp"]["draws"][0]
            sens = c["sensitivity_p_value"]
        lines.append(f"| {c['mechanism']} | {c['word']} | {c['epsilon']:g} | {ref} | {md} | {_verdict(c['mldp'])} | "
                     f"{td} | {_verdict(c['textdp'])} | {nw} | {'n/a' if sens is None else format(sens, '.2g')} |")
    tem_dev = [c for c in payload["checks"] if c["mechanism"] == "tem"]
    if tem_dev:
        lines += ["", "MLDP's TEM scores the bottom element with 2 ln(|W| / |L(w)|) / epsilon where the paper has "
                  "2 ln|W \\ L(w)| / epsilon, so it under-weights the words outside L(w) by about a factor |L(w)|. "
                  "With gamma from Thm. 4.2 that mass is tiny, so the draws above cannot see it; exactly, from the "
                  "two closed forms:", "",
                  "| word | epsilon | gamma | L(w) size | mass outside L: paper / MLDP | total variation |", "|---|---|---|---|---|---|"]
        for c in tem_dev:
            d = c["mldp"]["bottom_weighting_vs_paper"]
            lines.append(f"| {c['word']} | {c['epsilon']:g} | {c['mldp']['gamma']:g} | {d['size_L']:,} | "
                         f"{d['paper_mass_outside_L']:.2e} / {d['mldp_mass_outside_L']:.2e} | {d['total_variation']:.2e} |")
        lines.append("")
        lines.append("MLDP also rounds gamma to one decimal and uses |W| instead of |W| - 1 in Thm. 4.2; the TEM tests use "
                     "each library's own gamma.")
    lines.append("")
    lines += diffractor_section()
    return "\n".join(lines)


def diffractor_section(path: str = DIFFRACTOR) -> list:
    """1-Diffractor (benchmarks/peer/bench_diffractor.py), from its own results when they are there."""
    if not os.path.exists(path):
        return []
    from benchmarks.peer.bench_diffractor import markdown as diffractor_markdown

    with open(path, encoding="utf-8") as handle:
        body = diffractor_markdown(json.load(handle)).splitlines()
    return ["## " + body[0].lstrip("# "), *body[1:], ""]
