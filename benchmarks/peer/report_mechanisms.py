"""Markdown summary of the five-mechanism peer comparison (benchmarks/results/peer_mechanisms.md)."""

from __future__ import annotations

PEER_CLASSES = {
    ("mahalanobis", "mldp"): "Mahalanobis (lambd 0.2)", ("mahalanobis", "pypantera"): "Mahalanobis (lam 0.2)",
    ("vickrey", "mldp"): "VickreyMechanism (defaults k=2, t=[1,0])", ("vickrey", "pypantera"): "VickreyCMP (t 0.5)",
    ("truncated-gumbel", "mldp"): "TruncatedGumbel", ("santext", "pypantera"): "SanText",
    ("custext", "pypantera"): "CusText (k 20, euclidean)",
}


def _verdict(result) -> str:
    if not result or result.get("passed") is None:
        return "n/a"
    return ("consistent" if result["passed"] else "**rejected**") + f" (p = {result['p_value']:.3g}, {result['draws']} draws)"


def _fmt(value, digits=0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def markdown(payload: dict) -> str:
    m = payload["machine"]
    envs = payload["environments"]
    lines = [
        "# The five added mechanisms against MLDP and pyPANTERA: speed and exactness", "",
        f"Machine: {m['cpu']}, {m['cores']} cores (nproc), load average at start "
        f"{tuple(round(x, 2) for x in m['loadavg_at_start'])}, at end {tuple(round(x, 2) for x in m['loadavg_at_end'])} "
        f"({m['date_utc']}). The machine is shared with other work: the load average counts it. Every process is "
        "limited to one BLAS/OpenMP thread; tokens/s = tokens per CPU second of the measuring process (one core). "
        f"Seed {payload['seed']} (benchmark only). Wall time {payload['wall_seconds']:.0f} s. Command: `{payload['command']}`", "",
        "Environments (outside the repository): " + "; ".join(
            f"{name}: {env.get('path')} ({'installed' if env.get('installed', 'error' not in env) else 'NOT installed'}"
            + (f", error: {env['error'][-300:]!r}" if env.get("error") else "") + ")" for name, env in envs.items()) + ".",
        "Vocabulary: the same 400,000 GloVe 6B 50d words and float32 vectors in all three libraries. Tokens: the same "
        "in-vocabulary IMDb review tokens in reading order (each library gets a prefix of the same list). The libraries "
        "are called one word at a time through their public API (MLDP `replace_word`; pyPANTERA `processText` on a "
        "one-word text: it broadcasts a whole text against the vocabulary in float64, so a full review on 400k words "
        "would need tens of GB).", "",
        "## Speed (same tokens, same run)", "",
        "| mechanism | epsilon | textdp tokens/s | textdp tokens | MLDP class: tokens/s | pyPANTERA class: tokens/s | "
        "textdp / fastest peer | changed (textdp) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["speed"]:
        t = r["textdp"]
        cells = []
        for lib in ("mldp", "pypantera"):
            if lib not in r["peers"]:
                cells.append("no implementation")
                continue
            peer = r["peers"][lib]
            label = PEER_CLASSES.get((r["mechanism"], lib), "")
            if peer is None:
                cells.append("not measured")
                continue
            failed = sum(peer.get("errors", {}).values())
            note = f"; **{failed} of {peer['attempted']} calls raised** {next(iter(peer['errors']))!r}" if failed else ""
            cells.append(f"{label}: {peer['tokens_per_cpu_second']:,.1f} ({peer['tokens']} tokens{note})")
        speed = r["speedup_over_fastest_peer"]
        lines.append(f"| {r['mechanism']} | {r['epsilon']:g} | {t['tokens_per_cpu_second']:,.0f} | {t['tokens']:,} x "
                     f"{t['passes']} | {cells[0]} | {cells[1]} | {'—' if speed is None else f'{speed:,.0f}x'} | "
                     f"{t['changed_fraction']:.2f} |")
    cs = payload.get("custext_output_sets")
    if cs:
        lines += ["", f"CusText's output sets for K = 20 on 400k words are built once per artifact and K (then cached "
                      f"in the process): {cs['seconds']:.1f} s, {cs['groups']:,} groups ({cs['groups_from_table']:,} read "
                      f"from the neighbour table, {cs['groups_searched']:,} by a search of the unassigned words). That "
                      "setup is not in the tokens/s above."]
    tg = [r for r in payload["speed"] if r["mechanism"] == "truncated-gumbel"]
    if tg:
        lines += ["", "Truncated Gumbel: textdp ran with the noise scale b that MLDP derived for the same epsilon ("
                  + ", ".join(f"epsilon {r['epsilon']:g}: b = {r['textdp']['parameters']['scale']:.4g}" for r in tg)
                  + "), so both add the same noise; textdp claims no guarantee for this mechanism (see "
                    "textdp/mechanisms/truncated_gumbel.py)."]
    lines += ["", "Mahalanobis and Vickrey search the nearest (two nearest) of 400,000 words exactly for every token; MLDP "
              "searches an approximate faiss IVF index (nprobe 50 of 100 lists) and, for Mahalanobis, recomputes a 50x50 "
              "matrix square root and scans the vocabulary to name the word for every token; pyPANTERA computes every "
              "distance in float64 for every token."]
    for r in payload["speed"]:
        search = r["textdp"].get("two_nearest_search")
        if r["mechanism"] != "vickrey" or not search:
            continue
        mldp = (r["peers"].get("mldp") or {}).get("tokens_per_cpu_second")
        blas = search["blas"]["tokens_per_cpu_second"]
        versus = f" ({blas / mldp:.1f}x MLDP)" if mldp else ""
        if search["method"] == "int8":
            lines += ["", f"Vickrey at epsilon {r['epsilon']:g}: the two nearest words came from the int8-prefiltered "
                          f"exact search (textdp/search/int8_search.py, kernel {search['kernel']}): it computed the float64 "
                          f"distance of {search['exact_distances_per_token_median']:,.0f} words per token (median; p99 "
                          f"{search['exact_distances_per_token_p99']:,.0f}, max {search['exact_distances_per_token_max']:,}) "
                          f"of {search['vocabulary']:,} and skipped the others by a proven bound; its index takes "
                          f"{search['build_seconds']:.1f} s to build once per worker (not in tokens/s). The BLAS search, which "
                          f"runs where the CPU has no AVX-512 VNNI or the C extension is not built: {blas:,.0f} tokens/s{versus}."]
        else:
            lines += ["", f"Vickrey at epsilon {r['epsilon']:g}: the two nearest words came from the BLAS search "
                          f"({blas:,.0f} tokens/s in its own measurement{versus})."]
    lines += ["",
              "## Exactness on the 400k vocabulary", "",
              f"Chi-square goodness of fit in distance bins (as benchmarks/peer/bench_peer.py), alpha = {payload['alpha']} "
              "per test; the power check runs the same test against the distribution at 1.25 x epsilon (the truncated "
              "Gumbel: at scale / 1.25), where a small p-value shows that the draws can tell that difference apart.", "",
              "| mechanism | word | epsilon | textdp | textdp vs 1.25x | peer |", "|---|---|---|---|---|---|"]
    for c in payload["checks"]:
        power = c.get("textdp_against_1.25_epsilon") or c.get("textdp_against_scale/1.25")
        peer = []
        if "pypantera" in c:
            peer.append(f"pyPANTERA: {_verdict(c['pypantera'])}")
        if "mldp" in c:
            peer.append(f"MLDP against its own reading (noise on squared distances, k including the input, b = "
                        f"{c['mldp']['b']:.3g}): {_verdict(c['mldp'])}")
        if "mldp_against_unsquared_distances" in c:
            peer.append(f"MLDP against the same with plain distances: {_verdict(c['mldp_against_unsquared_distances'])}")
        lines.append(f"| {c['mechanism']} | {c['word']} | {c['epsilon']:g} | {_verdict(c['textdp'])} | "
                     f"p = {power['p_value']:.2g} | {'; '.join(peer) or '—'} |")
    lines += ["", "Mahalanobis and Vickrey have no closed form; their exactness is tested against direct simulations on "
              "the 5k-word fixture (tests/test_mahalanobis_vickrey.py).", "", "## Deviations of the public implementations", ""]
    ev = payload.get("evidence", {})
    if "pypantera_mahalanobis_noise" in ev:
        e = ev["pypantera_mahalanobis_noise"]
        lines.append(f"- pyPANTERA `Mahalanobis.pullNoise` (epsilon {e['epsilon']:g}, lambda {e['lambda']:g}, "
                     f"{e['draws']} draws): whitened by its own S^-1/2, the noise norm should be Gamma(n, 1/epsilon) "
                     f"(KS p = {e['ks_p_whitened_norm_pypantera']:.2g}); its Euclidean norm is (KS p = "
                     f"{e['ks_p_euclidean_norm_pypantera']:.2g}) because it renormalises S^1/2 v to unit length. textdp's "
                     f"whitened noise: KS p = {e['ks_p_whitened_norm_textdp']:.2g}. (S^1/2: largest difference between the "
                     f"two libraries {e['max_abs_difference_S_half_pypantera_vs_textdp']:.1e}.)")
    if "mldp_mahalanobis_scaling" in ev:
        e = ev["mldp_mahalanobis_scaling"]
        lines.append(f"- MLDP `Mahalanobis` scales the covariance by the variance of all matrix entries "
                     f"({e['variance_of_all_entries (MLDP)']:.5f}) instead of the mean per-dimension variance "
                     f"({e['mean_per_dimension_variance']:.5f}): ratio {e['ratio']:.4f}.")
    if "mldp_truncated_gumbel_constructions" in ev:
        cons = ev["mldp_truncated_gumbel_constructions"]
        lines.append("- MLDP `TruncatedGumbel` derives its noise scale from the distances of ONE random word: built five "
                     "times at epsilon 10 with different seeds (the benchmark passes the one-word distances, because "
                     "MLDP's own random.sample on dict keys raises TypeError on Python >= 3.11) it gets b = "
                     + ", ".join(f"{c['b']:.4g}" for c in cons)
                     + " (min distance " + ", ".join(f"{c['min_inter_dist']:.3g}" for c in cons) + "; max "
                     + ", ".join(f"{c['max_inter_dist']:.3g}" for c in cons) + "). The vocabulary's smallest distance "
                     f"between two distinct vectors is {ev['exact_min_distance_and_diameter']['min_distance']:.3g} and "
                     f"its diameter at most {ev['exact_min_distance_and_diameter']['diameter_upper']:.3g}.")
    if "pypantera_custext_output_sets" in ev:
        e = ev["pypantera_custext_output_sets"]
        lines.append(f"- pyPANTERA `CusText` gives each word its own 20 nearest words as output set: for {e['words']:,} "
                     f"IMDb words, {e['pairs_with_different_output_sets']:,} of {e['pairs']:,} pairs (x, y in x's set) "
                     f"({e['share']:.1%}) have different output sets, so no finite bound holds between them; the paper's "
                     "sets partition the vocabulary.")
    if "mldp_vickrey_self_share" in payload:
        e = payload["mldp_vickrey_self_share"]
        lines.append(f"- MLDP `VickreyMechanism` drops the input word when it is the nearest to the noisy point: at epsilon "
                     f"{e['epsilon']:g} it released '{e['word']}' itself in {e['mldp_released_input_share']:.1%} of "
                     f"{e['mldp_draws']} draws, while the nearest word to the same mechanism's noisy point is the input in "
                     f"{e['madlib_nearest_is_input_share']:.1%} of textdp's draws: the choice depends on the secret input, "
                     "so it is not post-processing of the noisy point.")
    lines.append("")
    return "\n".join(lines)
