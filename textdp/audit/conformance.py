"""Conformance: do the installed pipeline's releases follow the law each mechanism declares?

For a mechanism, an artifact and a few epsilons, ``run_conformance`` draws releases through the code path
``privatize`` uses (the mechanism object's ``privatize_ids``, which ``PerturbTokens`` and the text privatizer
call, on shuffled batches of the class's ``BATCH_TOKENS`` words) for a stratified sample of input words
(frequency bands by rank), and tests them against the law the mechanism declares:

* ``EXACT_LAW`` (closed form, ``exact_distribution(row, word_id)``): each release o of input w is mapped to
  its randomized probability-integral transform u = F_w(o-) + V p_w(o), the vocabulary ordered by
  decreasing p_w (ties by id), V uniform: under the law u is exactly Uniform(0, 1) whatever the word. The
  u of all words of one epsilon are pooled and binned (deciles plus bins of width down to 1e-6 at both ends,
  so that a missing or extra tail of small probability shows; adjacent bins merged until each expects at
  least 5) and a G-test of goodness of fit is run. A release the law gives probability 0 fails the unit
  outright (it cannot happen under the law).
* ``SEARCHES_NEAREST`` without a closed form, with ``reference_simulation()``: the same number of draws per
  word from the mechanism and from its independent float64 reference simulation
  (textdp.mechanisms.reference); each release becomes the rank of the released word in the input's
  Euclidean distance order (0: the input itself), binned on a log2 scale, and a two-sample G-test of
  homogeneity (2 x bins, pooled over words, bins merged until each column holds 10 draws) and a Mann-Whitney
  test of the same ranks (one degree of freedom: a shift towards nearer or farther words) compare them; the
  unit's p-value is twice the smaller of the two (Bonferroni over the two statistics).
* neither: not tested ("no declared law"), never a pass.

Level and power. Every (mechanism, epsilon) unit with a law is one test at level alpha / tests (Bonferroni
over the run: a conforming installation shows any rejection with probability at most alpha, up to the
chi-square approximation of G). The power check repeats the same test ``power_repeats`` times with releases
drawn at 1.25 x epsilon against the law at epsilon (reference draws of the unit reused); its rejection rate
is the measured power. A unit passes only when it does not reject AND the power check rejected every time;
a non-rejection without that power is "inconclusive" (the test could not have seen a 25 % epsilon error).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from scipy.stats import chi2, mannwhitneyu

FREQUENCY_BANDS = ((0, 100), (100, 1_000), (1_000, 10_000), (10_000, 100_000), (100_000, None))
POWER_FACTOR = 1.25
U_EDGES = np.array(sorted({0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.05, *(i / 10 for i in range(1, 10)), 0.95, 0.99,
                           1 - 1e-3, 1 - 1e-4, 1 - 1e-5, 1 - 1e-6, 1.0}))
MIN_EXPECTED = 5.0  # goodness of fit: least expected draws per bin
MIN_COLUMN = 10  # two-sample: least draws (both samples) per bin
DEFAULT_DRAWS = {"closed form": 50_000, "reference simulation": 10_000}  # per word and epsilon

NOT_TESTED = "not tested: no declared law"


def law_kind(mechanism_or_class) -> str | None:
    """"closed form", "reference simulation" or None: what the mechanism (object or class) declares."""
    cls = mechanism_or_class if isinstance(mechanism_or_class, type) else type(mechanism_or_class)
    if getattr(cls, "EXACT_LAW", False):
        return "closed form"
    if getattr(cls, "SEARCHES_NEAREST", False) and cls.reference_simulation is not _base_reference():
        return "reference simulation"
    return None


def _base_reference():
    from textdp.mechanisms.base import Mechanism

    return Mechanism.reference_simulation


def stratified_words(vocab_size: int, per_band: int, rng: np.random.Generator) -> list[tuple]:
    """(band label, word id) for ``per_band`` distinct words drawn uniformly in every frequency band (rank range)
    the vocabulary reaches; ids are frequency ranks in an artifact."""
    out = []
    for low, high in FREQUENCY_BANDS:
        high = vocab_size if high is None else min(high, vocab_size)
        if low >= high:
            continue
        label = f"{low + 1:,}-{high:,}"
        for word in sorted(rng.choice(np.arange(low, high), size=min(per_band, high - low), replace=False)):
            out.append((label, int(word)))
    return out


def release(mechanism, ids: np.ndarray, rng: np.random.Generator, vocab_size: int) -> np.ndarray:
    """Releases for ``ids`` as privatize produces them: ``privatize_ids`` on shuffled batches of the class's
    ``BATCH_TOKENS`` words (so that words mix in a batch as in text), each batch checked as every release path checks
    it (``textdp.text.privatizer.released_ids``: integer vocabulary ids, one per input id; else TextdpError)."""
    from textdp.text.privatizer import released_ids

    ids = np.asarray(ids, dtype=np.int64)
    order = rng.permutation(len(ids))
    out = np.empty(len(ids), dtype=np.int64)
    batch = max(int(getattr(type(mechanism), "BATCH_TOKENS", 4096)), 1)
    for start in range(0, len(ids), batch):
        where = order[start:start + batch]
        out[where] = released_ids(mechanism, ids[where], rng, vocab_size)
    return out


# --- statistics -------------------------------------------------------------------------------------------------


def g_statistic(observed: np.ndarray, expected: np.ndarray) -> float:
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    mask = observed > 0
    return float(2.0 * np.sum(observed[mask] * np.log(observed[mask] / expected[mask])))


def merged_edges(total: int, edges: np.ndarray = U_EDGES) -> np.ndarray:
    """``edges`` with interior edges dropped, left to right, until every bin expects >= MIN_EXPECTED of
    ``total`` uniform draws (a short last bin joins the previous one)."""
    kept = [edges[0]]
    for edge in edges[1:-1]:
        if (edge - kept[-1]) * total >= MIN_EXPECTED:
            kept.append(edge)
    if len(kept) > 1 and (edges[-1] - kept[-1]) * total < MIN_EXPECTED:
        kept.pop()
    kept.append(edges[-1])
    return np.array(kept)


def uniformity_test(u: np.ndarray) -> dict:
    """G-test of Uniform(0, 1) for the pooled PIT values ``u``."""
    edges = merged_edges(len(u))
    observed = np.histogram(np.clip(u, 0.0, 1.0), bins=edges)[0]
    expected = np.diff(edges) * len(u)
    stat = g_statistic(observed, expected)
    df = len(observed) - 1
    return {"statistic": stat, "df": df, "p_value": float(chi2.sf(stat, df)) if df > 0 else 1.0,
            "bins": len(observed)}


def rank_bins(vocab_size: int) -> np.ndarray:
    """Edges of the rank bins: 0, 1, 2, then powers of two (log2 scale), to the vocabulary size."""
    edges = [0, 1, 2]
    while edges[-1] < vocab_size:
        edges.append(min(edges[-1] * 2, vocab_size))
    return np.array(edges)


def two_sample_test(a: np.ndarray, b: np.ndarray) -> dict:
    """G-test of homogeneity of two binned samples (counts per bin), bins merged left to right until each holds
    MIN_COLUMN draws of both samples together (a merge that depends on the pooled counts only)."""
    groups, current_a, current_b = [], 0, 0
    for x, y in zip(a, b):
        current_a, current_b = current_a + x, current_b + y
        if current_a + current_b >= MIN_COLUMN:
            groups.append((current_a, current_b))
            current_a = current_b = 0
    if current_a + current_b:
        if groups:
            last = groups.pop()
            groups.append((last[0] + current_a, last[1] + current_b))
        else:
            groups.append((current_a, current_b))
    table = np.array(groups, dtype=float).T  # 2 x bins
    if table.shape[1] < 2:
        return {"statistic": 0.0, "df": 0, "p_value": 1.0, "bins": int(table.shape[1])}
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    stat = g_statistic(table.ravel(), expected.ravel())
    df = table.shape[1] - 1
    return {"statistic": stat, "df": df, "p_value": float(chi2.sf(stat, df)), "bins": int(table.shape[1])}


# --- the two kinds of test ----------------------------------------------------------------------------------------


def _row(mechanism, vectors, word: int) -> np.ndarray:
    from textdp.audit.pairs import guarantee_row

    return guarantee_row(mechanism, vectors, word)


def pit_values(law_mechanism, vectors, words: Sequence[int], ids: np.ndarray, released: np.ndarray,
               rng: np.random.Generator):
    """(u values, number of releases the law gives probability 0) of the releases of every word in ``words``."""
    u = np.empty(len(released))
    impossible = 0
    for word in words:
        where = np.flatnonzero(ids == word)
        probs = np.asarray(law_mechanism.exact_distribution(_row(law_mechanism, vectors, word), word), float)
        order = np.lexsort((np.arange(len(probs)), -probs))
        position = np.empty(len(probs), dtype=np.int64)
        position[order] = np.arange(len(probs))
        below = np.concatenate([[0.0], np.cumsum(probs[order])])
        total = below[-1]
        outs = released[where]
        p_out = probs[outs]
        impossible += int(np.count_nonzero(p_out <= 0))
        u[where] = (below[position[outs]] + rng.random(len(outs)) * p_out) / total
    return u, impossible


LAW_TOLERANCE = 1e-6  # a declared row must sum to 1 within this (float64 sums of a vocabulary's probabilities)


def law_problem(probs, vocab_size: int) -> str | None:
    """Why ``probs`` (one row ``exact_distribution`` returned) is not a probability distribution over a vocabulary
    of ``vocab_size`` words, or None: wrong shape or length, not numbers, a value not finite, a negative value, or a
    sum other than 1 (within LAW_TOLERANCE). Round 8, R8b-4: an all-NaN row gave G = 0, p = 1, "inconclusive"."""
    try:
        row = np.asarray(probs, dtype=float)
    except (TypeError, ValueError):
        return f"is not an array of numbers (a {type(probs).__name__})"
    if row.shape != (int(vocab_size),):
        return f"has shape {row.shape}, not ({int(vocab_size)},) (one probability per vocabulary word)"
    bad = int(np.count_nonzero(~np.isfinite(row)))
    if bad:
        return f"holds {bad:,} value(s) that are not finite numbers (NaN or infinite)"
    negative = int(np.count_nonzero(row < 0))
    if negative:
        return f"holds {negative:,} negative value(s)"
    total = float(row.sum())
    if not abs(total - 1.0) <= LAW_TOLERANCE:
        return f"sums to {total:.9g}, not 1 (tolerance {LAW_TOLERANCE:g})"
    return None


def declared_law_problem(mechanism, vectors, words: Sequence[int], vocab_size: int) -> str | None:
    """Why the law ``mechanism`` declares (``exact_distribution``) is not a probability distribution for one of
    ``words``, or None: checked before any release is tested against it, so that a broken declaration is reported
    as such, never as a fit (p = 1) nor as "releases do not follow the declared law"."""
    for word in words:
        try:
            probs = mechanism.exact_distribution(_row(mechanism, vectors, int(word)), int(word))
        except Exception as exc:  # the user's declaration
            return f"exact_distribution raised {type(exc).__name__} for word id {int(word)}"
        problem = law_problem(probs, vocab_size)
        if problem:
            return f"the row of word id {int(word)} {problem}"
    return None


def euclidean_ranks(vectors, words: Sequence[int], ids: np.ndarray, released: np.ndarray) -> np.ndarray:
    """Rank of each released word in its input's Euclidean distance order (0: the input itself)."""
    vectors64 = np.asarray(vectors, dtype=np.float64)
    ranks = np.empty(len(released), dtype=np.int64)
    for word in words:
        where = np.flatnonzero(ids == word)
        diff = vectors64 - vectors64[word]
        row = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        row[word] = -1.0
        position = np.empty(len(row), dtype=np.int64)
        position[np.lexsort((np.arange(len(row)), row))] = np.arange(len(row))
        ranks[where] = position[released[where]]
    return ranks


def _binned_ranks(ranks: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.histogram(ranks, bins=rank_bins(vocab_size))[0]


# --- one unit: a mechanism at one epsilon ---------------------------------------------------------------------


def run_unit(reference, artifact, epsilon: float, params: dict | None = None, words_per_band: int = 2,
             draws: int | None = None, level: float = 1e-3, power_repeats: int = 2,
             rng: np.random.Generator | None = None) -> dict:
    """The conformance test of mechanism ``reference`` (any mechanism reference) at ``epsilon``: a result row."""
    from textdp.mechanisms import make_mechanism, mechanism_class

    started = time.perf_counter()
    rng = rng or np.random.default_rng()
    params = dict(params or {})
    cls = mechanism_class(reference)
    kind = law_kind(cls)
    row = {"mechanism": cls.name, "epsilon": float(epsilon), "law": kind or "none", "level": float(level)}
    if kind is None:
        row.update(status=NOT_TESTED, rejected=False)
        return row
    draws = int(draws or DEFAULT_DRAWS[kind])
    mechanism = make_mechanism(reference, artifact, epsilon, **params)
    vocab_size = int(artifact.vocab_size)
    sample = stratified_words(vocab_size, words_per_band, rng)
    words = [w for _, w in sample]
    ids = np.repeat(np.array(words, dtype=np.int64), draws)
    vectors = artifact.vectors

    if kind == "closed form":
        def test(drawn_by, released):
            u, impossible = pit_values(mechanism, vectors, words, ids, released, rng)
            result = uniformity_test(u)
            result["impossible_releases"] = impossible
            result["rejected"] = bool(impossible > 0 or result["p_value"] < level)
            return result
    else:
        reference_ranks = euclidean_ranks(vectors, words, ids, mechanism.reference_simulation()(ids, rng))
        reference_counts = _binned_ranks(reference_ranks, vocab_size)

        def test(drawn_by, released):
            ranks = euclidean_ranks(vectors, words, ids, released)
            result = two_sample_test(_binned_ranks(ranks, vocab_size), reference_counts)
            # a second statistic, one degree of freedom, for a shift towards nearer or farther words (the radius,
            # the rule): Mann-Whitney on the same ranks; the unit's p-value is Bonferroni over the two
            shift = float(mannwhitneyu(ranks, reference_ranks, method="asymptotic").pvalue)
            result.update(g_p_value=result["p_value"], shift_p_value=shift,
                          p_value=min(1.0, 2.0 * min(result["p_value"], shift)), impossible_releases=0)
            result["rejected"] = bool(result["p_value"] < level)
            return result

    if kind == "closed form":
        broken = declared_law_problem(mechanism, vectors, words, vocab_size)
        if broken:  # nothing to test against: FLAG naming the declaration, not the releases (R8b-4)
            row.update(words=len(words), bands=sorted({b for b, _ in sample}), draws_per_word=0, draws=0,
                       statistic=None, df=None, p_value=None, bins=0, impossible_releases=0, rejected=True,
                       power_epsilon=POWER_FACTOR * float(epsilon), power_repeats=0, power_rejections=0,
                       power=None, status="FLAG", declaration_broken=f"declared law is not a probability "
                       f"distribution: {broken}", parameters=_plain(mechanism.parameters()),
                       seconds=time.perf_counter() - started)
            return row
    main = test(mechanism, release(mechanism, ids, rng, vocab_size))
    power_hits = 0
    power_epsilon = POWER_FACTOR * float(epsilon)
    louder = make_mechanism(reference, artifact, power_epsilon, **params)
    for _ in range(int(power_repeats)):
        power_hits += int(test(louder, release(louder, ids, rng, vocab_size))["rejected"])
    power = power_hits / power_repeats if power_repeats else float("nan")
    if main["rejected"]:
        status = "FLAG"
    elif power_repeats and power_hits == power_repeats:
        status = "pass"
    else:
        status = "inconclusive"
    row.update(
        words=len(words), bands=sorted({b for b, _ in sample}), draws_per_word=draws, draws=len(ids),
        statistic=main["statistic"], df=main["df"], p_value=main["p_value"], bins=main["bins"],
        impossible_releases=main["impossible_releases"], rejected=main["rejected"],
        power_epsilon=power_epsilon, power_repeats=int(power_repeats), power_rejections=power_hits, power=power,
        status=status, parameters=_plain(mechanism.parameters()), seconds=time.perf_counter() - started)
    return row


def _plain(params: dict) -> dict:
    return {str(k): (v if isinstance(v, (str, int, float, bool)) or v is None else str(v)) for k, v in params.items()}


def planned_units(references: Sequence, epsilons: Sequence[float]) -> int:
    """The number of tests the run makes (Bonferroni's divisor): mechanisms with a declared law x epsilons."""
    from textdp.mechanisms import mechanism_class

    return max(1, sum(len(epsilons) for ref in references if law_kind(mechanism_class(ref))))


def run_conformance(mechanism=None, artifact=None, epsilons: Sequence[float] = (2.0, 10.0), params=None,
                    words_per_band: int = 2, draws: int | None = None, false_alarm_rate: float = 1e-3,
                    power_repeats: int = 2, seed: int | None = None) -> dict:
    """Conformance of ``mechanism`` (a reference, or a list of them; None: every registered mechanism) on
    ``artifact`` (a loaded artifact or a location; None: the default) at ``epsilons``: every unit's row and a
    verdict. ``params``: {reference: {parameter: value}} or, for a single mechanism, its parameters."""
    from textdp.artifact.locate import open_artifact
    from textdp.mechanisms import REGISTRY

    if mechanism is None:
        references = list(REGISTRY)
    elif isinstance(mechanism, (list, tuple)):
        references = list(mechanism)
    else:
        references = [mechanism]
        params = {mechanism: params} if params and not _keyed(params, references) else params
    if artifact is None or isinstance(artifact, str):
        artifact = open_artifact(artifact)
    params = params or {}
    level = false_alarm_rate / planned_units(references, epsilons)
    rows = []
    for index, reference in enumerate(references):
        for eps in epsilons:
            rng = np.random.default_rng(None if seed is None else [int(seed), index, round(float(eps) * 1e6)])
            rows.append(run_unit(reference, artifact, float(eps), params.get(reference, {}), words_per_band, draws,
                                 level, power_repeats, rng))
    return summarize(rows, false_alarm_rate)


def _keyed(params: dict, references) -> bool:
    return any(key in params for key in references if isinstance(key, (str, type)))


def summarize(rows: list[dict], false_alarm_rate: float) -> dict:
    """The run's verdict from its unit rows: flagged, passed, inconclusive and untested mechanisms."""
    by_mechanism: dict[str, list[dict]] = {}
    for row in rows:
        by_mechanism.setdefault(row["mechanism"], []).append(row)
    verdicts = {}
    for name, units in by_mechanism.items():
        statuses = {u["status"] for u in units}
        if "FLAG" in statuses:
            verdicts[name] = "FLAG"
        elif statuses == {NOT_TESTED}:
            verdicts[name] = NOT_TESTED
        elif statuses == {"pass"}:
            verdicts[name] = "pass"
        else:
            verdicts[name] = "inconclusive"
    tests = sum(1 for r in rows if r["status"] != NOT_TESTED)
    return {
        "rows": rows, "verdicts": verdicts, "tests": tests, "false_alarm_rate": false_alarm_rate,
        "flagged": sorted(n for n, v in verdicts.items() if v == "FLAG"),
        "declaration_broken": sorted({r["mechanism"] for r in rows if r.get("declaration_broken")}),
        "method": (f"{tests} G-tests at level {false_alarm_rate:g}/{max(tests, 1)} each (Bonferroni): a conforming "
                   f"installation is flagged with probability at most {false_alarm_rate:g} (chi-square approximation "
                   f"of G); power: the same test on releases drawn at {POWER_FACTOR:g} x epsilon"),
    }


def message_lines(result: dict) -> list[str]:
    """One line per mechanism, for the job's report."""
    lines = [f"conformance: {result['method']}"]
    for name, verdict in result["verdicts"].items():
        units = [r for r in result["rows"] if r["mechanism"] == name]
        if verdict == NOT_TESTED:
            lines.append(f"conformance {name}: {NOT_TESTED} (neither a closed form nor a reference simulation)")
            continue
        parts = ", ".join(f"eps {u['epsilon']:g}: FLAG ({u['declaration_broken']}; nothing was tested)"
                          if u.get("declaration_broken") else
                          f"eps {u['epsilon']:g}: {u['status']} (p={u['p_value']:.2g}, power at {POWER_FACTOR:g}x "
                          f"{u['power_rejections']}/{u['power_repeats']}"
                          + (f", {u['impossible_releases']} impossible releases" if u["impossible_releases"] else "")
                          + ")" for u in units)
        lines.append(f"conformance {name}: {verdict} ({units[0]['law']}) -- {parts}")
    return lines
