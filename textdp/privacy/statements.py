"""The sentences textdp prints about privacy, each built from what the run actually did.

One place for every statement the summary (``textdp/privacy/summary.py``) and the amplification report
(``textdp/privacy/accounting.py``) print, so that a statement exists once and its tests cover every place
it appears. Functions take what the run did (the policy, the Amplifier steps that ran, whether a
seed was used); a count from the raw input is passed only for the operator's summary, never for the
publishable one (``count=None``).
"""

from __future__ import annotations

from typing import Optional, Sequence


def oov_statement(policy: str, unk_token: str, unknown_tokens: Optional[int] = None) -> str:
    """What the out-of-vocabulary policy implies for the guarantee (see textdp/text/privatizer.py).

    ``unknown_tokens`` is a figure of the raw input: given only for the operator's summary.
    """
    count = "" if unknown_tokens is None else f" ({unknown_tokens} in this run)"
    if policy == "random":
        return (f"Words not in the vocabulary{count} were each released as the mechanism's output for a "
                "vocabulary word drawn uniformly at random, independently of the input word. That output has "
                "the same distribution whichever unknown word stood there, so it reveals nothing about which "
                "unknown word it was; compared with any vocabulary word at that position, output probabilities "
                "differ by at most the factor exp(epsilon_0), where epsilon_0 is the mechanism's per-word pure "
                "local-DP bound over the vocabulary that every vocabulary word has too (the amplification "
                "accounting's epsilon_0: the mechanism's own bound at the vocabulary's diameter in the metric of its "
                "guarantee; "
                "a mechanism without such a bound gives no such factor). The layout of a record, including how an unknown compound "
                "was split, is released "
                "as described under 'structure'.")
    if policy == "unk":
        return (f"Words not in the vocabulary{count} were replaced by the marker {unk_token!r}, which does not "
                "depend on the input word: it reveals that an unknown word stood at that position (the "
                "positions of unknown words are released), nothing about which word it was.")
    if policy == "keep":
        return (f"Words not in the vocabulary{count} were released UNCHANGED (--oov-policy keep): those words "
                "are NOT covered by any privacy guarantee, and they are typically the rare words (names, "
                "identifiers) that need protection most.")
    raise ValueError(f"unknown OOV policy {policy!r}")


STRUCTURE_STATEMENT = (
    "Only the identity of each word is protected. Released as they are: whitespace, line breaks and other "
    "control characters, punctuation, and the math, currency and modifier symbols (Unicode Sm, Sc, Sk) between "
    "words; each record's number of words, their positions and each word's case pattern (lower, Capitalized, "
    "UPPER). Numbers count as words and are privatized. A word is a run of letters or digits, possibly joined "
    "by inner apostrophes or hyphens (and '.' or ',' between digits); letters in disguise (circled, "
    "parenthesized, squared, fullwidth) are looked up by their NFKC form and released as vocabulary words, and "
    "combining marks and invisible format characters belong to the word they are in. A run of other symbols "
    "(emoji, Braille, regional indicators, private-use or unassigned characters) is a word of its own, "
    "privatized like any word outside the vocabulary. A "
    "joined word that the vocabulary has (e.g. 'well-known' in GloVe) is one word and is replaced "
    "whole, so its joiner may disappear from the output; one the vocabulary lacks is split into its parts "
    "(\"don't\" -> 'do' + \"n't\", 'foo-bar' -> 'foo' '-' 'bar'), and the joiners between the parts are "
    "released as punctuation: the layout therefore shows where such a compound was not in the vocabulary. "
    "Other fields of JSONL/Parquet records pass through unchanged and are not protected.")


def records_statement(steps: Optional[dict] = None, report_path: Optional[str] = None) -> str:
    """How records were released, from the Amplifier steps that actually ran.

    ``steps`` is None when no Amplifier stage ran, else a dict with ``shuffle`` (bool),
    ``subsample`` (rate or None), ``k_threshold`` (K or None) and ``removed_fields`` (names).
    """
    if not steps:
        return ("Records are released one for one (the output has as many records as were privatized), with "
                "every field they had. Their order may follow the input order (on the local runner it usually "
                "does), so without --shuffle a record's output position can link it to its input position and "
                "its author.")
    parts = []
    removed: Sequence[str] = steps.get("removed_fields") or ()
    if removed:
        parts.append(f"the field{'s' if len(removed) > 1 else ''} {', '.join(removed)} "
                     f"{'were' if len(removed) > 1 else 'was'} removed from every record")
    if steps.get("subsample") is not None:
        parts.append(f"each record was kept independently with probability {steps['subsample']:g} (the others "
                     "are not released)")
    if steps.get("k_threshold") is not None:
        parts.append(f"released words used by fewer than {steps['k_threshold']} distinct authors were replaced "
                     "by a marker")
    if steps.get("shuffle"):
        parts.append("the records were released in a uniformly random order: each record's output file and "
                     "line are uniform and independent of its input position and author")
    else:
        parts.append("no shuffle ran: the output order may follow the input order (on the local runner it "
                     "usually does), so a record's output position can link it to its input position")
    where = f" What amplification (if any) a published theorem gives is in {report_path}." if report_path else ""
    return "An Amplifier stage ran: " + "; ".join(parts) + "." + where


def errors_statement() -> str:
    return ("Records that could not be processed are not privatized and are absent from the output. The error "
            "output is operator data derived from the raw input, not for publication: each entry names the "
            "source file, the record's position (line or row), a reason code and a detail (e.g. the record's "
            "size in bytes, the offset of an invalid byte, the JSON error and its column); it contains the "
            "record's text only when --keep-failed-text was given (then it must be protected like the input).")


SEED_STATEMENT = ("A fixed --seed was used: the noise is reproducible by anyone who knows the seed, so this "
                  "output must NOT be treated as private. Seeds are for tests and benchmarks.")

FLOATING_POINT_STATEMENT = (
    "The guarantee is proven for the ideal, real-number mechanism. This implementation samples with float64 "
    "arithmetic and 53-bit uniform random numbers: an output whose probability is below about 2^-53 (~1e-16) "
    "of the total may never be drawn, and ratios between the probabilities of such rare outputs are not "
    "guaranteed to follow the bound exactly (Mironov, 'On significance of the least significant bits for "
    "differential privacy', CCS 2012). Only vocabulary words are released, never noisy vectors or scores.")


def seed_statement(seed_used: bool) -> str:
    return SEED_STATEMENT if seed_used else "No seed was used: noise came from operating-system entropy."


COVERAGE_LEVELS = ("all", "subset", "none")
UNDECLARED_COVERAGE = {"covered": "none", "reason": "the mechanism does not declare what its guarantee covers "
                                                     "(its privacy_statement() has no 'coverage'), so nothing is claimed"}


def coverage_statement(mechanism_coverage: Optional[dict], oov_policy: str, unknown_tokens: Optional[int],
                       seed_used: bool) -> dict:
    """What the guarantee covers in this output: the mechanism's own declaration (the ``coverage`` of its
    ``privacy_statement()``: all words, a stated subset, or none, with the reason), narrowed by the OOV policy
    and the seed.

    Returns ``{"covered": "all"|"subset"|"none", "subset": ... (only for "subset"), "not_covered": [reasons]}``.
    ``unknown_tokens`` is a raw-input figure (operator's summary only); None means "any input".
    """
    declared = mechanism_coverage if isinstance(mechanism_coverage, dict) else UNDECLARED_COVERAGE
    level = declared.get("covered")
    if level not in COVERAGE_LEVELS:
        declared, level = UNDECLARED_COVERAGE, "none"
    subset = declared.get("subset") if level == "subset" else None
    reasons = [declared["reason"]] if level != "all" and declared.get("reason") else []
    if oov_policy == "keep" and (unknown_tokens is None or unknown_tokens > 0):
        count = "may be" if unknown_tokens is None else f"were ({unknown_tokens} in this run)"
        reasons.append(f"words outside the vocabulary {count} released unchanged (--oov-policy keep)")
        if level == "all":
            level, subset = "subset", "words in the vocabulary"
        elif level == "subset":
            subset = f"{subset}; and only words in the vocabulary"
    if seed_used:
        reasons.append("a fixed --seed was used: anyone who knows it can reproduce the noise")
        level, subset = "none", None
    coverage = {"covered": level}
    if subset is not None:
        coverage["subset"] = subset
    coverage["not_covered"] = reasons
    return coverage


def shuffle_claim_statement(epsilon: float, delta: float, theorem: str, unit: str) -> str:
    """The claimed shuffle amplification, with the restriction under which it holds (docs/lac.md): neighbouring
    inputs differ only in the privatized words of one record or author, and each one hides only among those whose
    released shape is the same."""
    return (f"shuffling amplifies the guarantee to ({epsilon:.6g}, {delta:g})-DP for every {unit} ({theorem}), "
            f"against a change of that {unit}'s privatized words only: each {unit} hides among the {unit}s whose "
            "released shape is the same (word counts, layout and unprivatized fields, which are released as they are "
            "and not protected), and words are only ever swapped within that shape.")


def subsample_statement(rate: float, textbook_epsilon: Optional[float], withheld: Optional[str] = None) -> str:
    """Why Poisson sub-sampling is not claimed. ``textbook_epsilon`` None: the figure is withheld (``withheld``
    says why, e.g. it comes from per-author word counts that the output does not show)."""
    figure = (f"ln(1 + q(e^eps - 1)) = {textbook_epsilon:.6g}" if textbook_epsilon is not None else
              f"ln(1 + q(e^eps - 1)) (its value is withheld here: {withheld})")
    return (f"records were kept independently with probability {rate:g}. The bound {figure} (Li, Qardaji, Su 2012, "
            "Thm. 1) needs a mechanism that is eps-DP when one record is added or removed, with an output that hides "
            "whether a record was sampled; a released locally privatized record shows that it was sampled and eps_0 "
            "is a guarantee for replacing a record's words, not for removing it. No amplification is claimed for "
            "sub-sampling: it reduces how much is released.")


def unbounded_epsilon0_reason(oov_policy: str, mechanism_coverage: Optional[dict]) -> str:
    """Why a run's per-word epsilon_0 is inf: --oov-policy keep, else the mechanism's own declaration."""
    if oov_policy == "keep":
        return "--oov-policy keep releases words outside the vocabulary unchanged"
    reason = (mechanism_coverage or {}).get("reason") if isinstance(mechanism_coverage, dict) else None
    return reason or "the mechanism claims no finite bound over the whole vocabulary"


# --- parameters that make the mechanism, in effect, the identity (round 6: F4, F3) ---------------------------------
# One home for the launcher's "this run protects nothing" warnings (pipelines/privatize.py and pipelines/streaming.py
# call ``run_warnings``) and for the end-of-run one (``no_change_warning``, in the operator's summary).

VACUOUS_EXPONENT = 100.0  # exp(epsilon * d) above e^100 between a word and its nearest neighbour protects nothing


def scale_section(epsilon: float, distance: Optional[dict]) -> dict:
    """The run's epsilon on the artifact's own scale: ``epsilon * d``, d the artifact's typical nearest-neighbour
    distance (``textdp.artifact.store.neighbour_distance``), the exponent of the bound exp(epsilon * d) between a
    word and its nearest neighbour. For the summary (a figure of the artifact and the flags, none of the input)."""
    if distance is None:
        return {"neighbour_distance": None, "epsilon_times_neighbour_distance": None,
                "statement": "the artifact records no typical neighbour distance (a remote artifact built before it was "
                             "recorded): epsilon could not be related to its scale; rebuild it with build-index"}
    d = float(distance["median"])
    exponent = float(epsilon) * d
    return {"neighbour_distance": d, "epsilon_times_neighbour_distance": exponent,
            "statement": (f"epsilon {epsilon:g} x the artifact's typical nearest-neighbour distance {d:.4g} = "
                          f"{exponent:.4g}: a word and its nearest neighbour are told apart by at most the factor "
                          f"exp({exponent:.4g})")}


def scale_warnings(epsilon: float, distance: Optional[dict]) -> list:
    """One line when epsilon is vacuous on this artifact's scale: epsilon * (typical nearest-neighbour distance) above
    VACUOUS_EXPONENT. Without the figure (a remote artifact built before it was recorded), epsilon itself against
    VACUOUS_EXPONENT, as for distances of 1."""
    if distance is None:
        if epsilon > VACUOUS_EXPONENT:
            return [f"epsilon {epsilon:g} is above {VACUOUS_EXPONENT:g}: the bound exp(epsilon * d) exceeds "
                    f"e^{VACUOUS_EXPONENT:g} even for words at distance 1, so it protects nothing, and nearly every "
                    "word is released unchanged"]
        return []
    exponent = float(epsilon) * float(distance["median"])
    if exponent <= VACUOUS_EXPONENT:
        return []
    return [f"epsilon {epsilon:g} x the artifact's typical nearest-neighbour distance {float(distance['median']):.4g} "
            f"= {exponent:.4g} is above {VACUOUS_EXPONENT:g}: the bound exp(epsilon * d) exceeds e^{VACUOUS_EXPONENT:g} "
            "even between a word and its nearest neighbour, so it protects nothing, and nearly every word is released "
            "unchanged (choose epsilon on this artifact's scale)"]


BATCH_CHECK_MIN_SHARE = 0.2  # the batch check judges a mechanism that changed at least this share of the trial's ids
BATCH_CHECK_RATIO = 4  # ... and warns when one batch of the run's size changed under a quarter of that share


def trial_warnings(trial) -> list:
    """The launcher's trial release (``textdp.mechanisms.trial_build``, a mechanism that is not built in; a
    ``textdp.mechanisms.Trial`` or None): one line when it changed none of its probe ids (the mechanism acts as the
    identity at these settings), else one line when some quarter of the vocabulary's frequency ranking had every
    probe id released as itself in every one of its releases while other probes changed."""
    if trial is None or trial.probes <= 0:
        return []
    if trial.changed == 0:
        return [f"the mechanism released each of the {trial.probes} vocabulary words of the launcher's trial as itself: "
                "at these settings it acts as the identity, and the guarantee it declares is not what the output shows"]
    found = []
    alone = trial.changed / trial.probes
    if trial.batch_changed >= 0 and alone >= BATCH_CHECK_MIN_SHARE and trial.batch_changed < alone / BATCH_CHECK_RATIO:
        found.append(f"the launcher's trial changed {alone:.0%} of its {trial.probes} vocabulary words released alone, but "
                     f"{trial.batch_changed:.1%} of the same words in one batch of {trial.batch:,} (the run's batch size): the "
                     "mechanism may act as the identity on large batches, where the guarantee it declares would not be "
                     "what the output shows")
    if not trial.silent_bands:
        return found
    from textdp.mechanisms import TRIAL_BAND_NAMES, TRIAL_RETRIES

    bands = "; ".join(f"the {TRIAL_BAND_NAMES[band]} quarter (frequency ranks "
                      f"{low + 1:,} to {high + 1:,}: {count} words)" for band, count, low, high in trial.silent_bands)
    return found + [f"the launcher's trial changed {trial.changed} of its {trial.probes} vocabulary words, but released every "
            f"trial word of {bands} as itself in all {1 + TRIAL_RETRIES} of its releases: the mechanism may act as the "
            "identity on that part of the vocabulary (e.g. a table built for some words only), where the guarantee it "
            "declares would not be what the output shows"]


def run_warnings(spec, location: Optional[str], manifest: dict, artifact=None) -> tuple:
    """(warnings, scale section) of a run, before any worker starts: ``scale_warnings`` on the artifact's figure, and
    for a mechanism that is not built in ``trial_warnings`` from one trial release over ``artifact`` (loaded here
    when not given)."""
    from textdp.artifact.gcs import is_gcs_url
    from textdp.artifact.locate import resolve_artifact
    from textdp.artifact.store import Artifact, artifact_neighbour_distance
    from textdp.mechanisms import built_in, trial_build

    remote = location is not None and is_gcs_url(location)
    distance = artifact_neighbour_distance(None if remote else resolve_artifact(location), manifest)
    warnings = scale_warnings(spec.epsilon, distance)
    if not built_in(spec.mechanism_class):
        if artifact is None or not hasattr(artifact, "vectors"):
            artifact = Artifact(resolve_artifact(location), verify=False)
        warnings += trial_warnings(trial_build(spec.mechanism, artifact, spec.epsilon, **spec.keywords()))
    return warnings, scale_section(spec.epsilon, distance)


def no_change_warning(tokens: int, changed: int, unknown: int, oov_policy: str, public: bool = False) -> list:
    """One line when the run released every vocabulary word of its input as itself. Exact from the run's counters:
    an unknown word counts as changed under the random and unk policies (it is replaced) and as unchanged under keep,
    so the vocabulary words changed are ``changed - unknown`` (random, unk) or ``changed`` (keep). ``public``: the
    sentence without the count (a figure of the raw input), for the publishable summary."""
    known = int(tokens) - int(unknown)
    known_changed = int(changed) - (int(unknown) if oov_policy != "keep" else 0)
    if known <= 0 or known_changed > 0:
        return []
    if public:
        return ["this run changed no vocabulary word: every word of the input that the vocabulary has was released as "
                "itself (the guarantee's formula holds, but at these settings the mechanism acted as the identity on "
                "this input: the released vocabulary words are the input's)"]
    return [f"this run changed no vocabulary word: all {known:,} words of the input that the vocabulary has were "
            "released as themselves (the guarantee's formula holds, but at these settings the mechanism acted as the "
            "identity on this input)"]
