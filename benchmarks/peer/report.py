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
    with open(path, encoding="utf-8") as handle:
        body = diffractor_markdown(json.load(handle)).splitlines()
    return ["## " + body[0].lstrip("# "), *body[1:], ""]

def diffractor_markdown(payload: dict) -> str:
    m = payload["machine"]
    lines = ["# 1-Diffractor (dp-diffractor 0.2.1) as a peer", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, load average at start "
             f"{tuple(round(x, 2) for x in m['loadavg_at_start'])} ({m['date_utc']}); wall time "
             f"{payload['wall_seconds']:.0f} s. Command: `{payload['command']}`", ""]
    run = payload.get("diffractor") or {}
    if run.get("error"):
        lines += [f"**Diffractor did not run here:** `{run['error']}`", "", "Steps before it:", "",
                  *[f"- {s}" for s in run.get("steps", [])], ""]
    else:
        lines += [f"Vectors: the textdp artifact's GloVe 6B 50d, filtered to Diffractor's own word list: "
                  f"{run.get('vocab_kept', 0):,} of its {run.get('library_vocab', 0):,} words. Setup (its 1-D sort): "
                  f"{run.get('setup_seconds', 0):.0f} s. Texts: {payload['texts']:,} IMDb reviews.", "",
                  "| library | mechanism | epsilon | tokens (own tokenizer) | wall s | tokens/s |", "|---|---|---|---|---|---|"]
        for r in run.get("results", []):
            lines.append(f"| dp-diffractor 0.2.1 | geometric | {r['epsilon']:g} | {run['tokens']:,} | "
                         f"{r['wall_seconds']:.1f} | {r['tokens_per_second']:,.0f} |")
        for r in payload.get("textdp", []):
            lines.append(f"| textdp (Privatizer, 1 process) | {r['mechanism']} | {r['epsilon']:g} | {r['tokens']:,} | "
                         f"{r['wall_seconds']:.1f} | {r['tokens_per_second']:,.0f} |")
        if payload.get("points"):
            lines += ["", "Frontier points (same reviews and classifier as benchmarks/results/frontier.md; Wilson 95%; "
                      "no inversion/linkage: textdp audit attacks textdp mechanisms only):", "",
                      "| epsilon | changed (word share) | training-time acc. | test-time acc. |", "|---|---|---|---|"]
            for p in payload["points"]:
                cells = [f"{p['epsilon']:g}", f"{p['changed_fraction']:.3f}"]
                for s in ("training_time", "test_time"):
                    w = p["accuracy"][s]["wilson"]
                    cells.append(f"{w['accuracy']:.3f} [{w['low']:.3f}, {w['high']:.3f}]")
                lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "From its code (0.2.1): `Diffractor(model_names=[...])` fetches every name through `Downloader.fetch`, "
              "which accepts only its five hosted embedding files, and `prepare_custom_embeddings` refers to an undefined "
              "`output_name`, so its documented bring-your-own-embeddings path fails; the runner gives it textdp's "
              "GloVe vectors by replacing `diffractor.core.ensure_embeddings` only. `rewrite` sends every token to a "
              "multiprocessing pool (`starmap`, one call per token), and needs NLTK's `stopwords` and `punkt_tab` data "
              "(downloaded from raw.githubusercontent.com at run time).",
              "", "What its guarantee covers: metric DP in |i - j| over positions in a 1-D ordering of its word "
              "list, per embedding; NLTK English stopwords and words outside its list pass through unchanged "
              "(no protection), so its changed share is bounded by the share of non-stopword listed words.", ""]
    return "\n".join(lines)
