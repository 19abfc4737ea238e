"""``textdp audit``: measure the privacy a release really gives, and catch a broken mechanism (Beam pipeline).

Three parts, each parallel over its own units of work, on the same artifacts and mechanisms as
privatize and calibrate (docs/audit.md explains every number):

1. self-check: an empirical lower bound of the privacy loss for word pairs across distance bands
   (plus ``--pair-list`` pairs and two out-of-vocabulary words), against the guarantee the mechanism
   prints; any pair beyond it is a violation, with a false-alarm rate stated for the whole run;
2. inversion: the Bayes-optimal attacker's top-1 / top-10 recovery of the words of ``--corpus``,
   per epsilon and frequency band, next to the released-word and prior baselines; and a contextual
   attacker (bigram language model, forward-backward over whole records; off with --no-contextual);
3. linkage: how often a released record's likelihood ranks its own source first (top-5) among
   100 / 1,000 / 10,000 original records.

Outputs under ``--output``: ``self_check.parquet``, ``inversion.parquet``, ``linkage.parquet``,
``summary.json``, ``self_check.png``, ``inversion.png``, ``linkage.png`` and ``report.html``.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import List, Optional

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from pipelines.flags import (
    AUDIT_CHECKS,
    DEFAULT_AUDIT_CHECKS,
    DEFAULT_MAX_RECORD_BYTES,
    ArtifactOptions,
    AuditOptions,
    EpsilonGridOptions,
    MechanismOptions,
    OovOptions,
    OutputOptions,
    SeedOptions,
    WorkerResourceOptions,
)
from pipelines.jobs import Plan, directory_job_files, run_job
from textdp.artifact import gcs
from textdp.artifact.locate import check_unk_marker, resolve_artifact, verify_artifact
from textdp.audit.pairs import BANDS, base_word_count, base_words, bound_text
from textdp.audit.selfcheck import planned_tests
from textdp.errors import TextdpError
from textdp.mechanisms import artifact_needs
from textdp.outputs import OutputGuard, refuse_unreadable
from textdp.text.privatizer import check_oov
from transforms.audit_common import AuditConfig
from transforms.audit_conformance import CONFORMANCE_FILE, Conformance
from transforms.audit_outputs import (
    INVERSION_TABLE,
    LINKAGE_TABLE,
    SELF_CHECK_TABLE,
    SUMMARY_FILE,
    WriteAuditOutputs,
    inversion_schema,
    linkage_schema,
    self_check_schema,
)
from transforms.audit_stages import Attacks, SelfCheckStage
from transforms.io import (
    OVERLAP_SHARE,
    infer_format,
    matched_paths,
    read_text_file,
    record_line_digests,
    refuse_skipped_matches,
    refuse_wide_text,
)

OUTPUT_FILES = (f"{SELF_CHECK_TABLE}.parquet", f"{INVERSION_TABLE}.parquet", f"{LINKAGE_TABLE}.parquet", SUMMARY_FILE,
                "report.html", "self_check.png", "inversion.png", "linkage.png", CONFORMANCE_FILE)


@dataclass
class Prepared:
    """Everything the driver decides before the pipeline is built."""

    config: AuditConfig
    checks: tuple
    plan_elements: list
    run_info: dict
    corpus_format: Optional[str]
    text_fields: tuple
    manifest: dict
    conformance_units: tuple = ()  # (index, mechanism reference, epsilon, params, level) per unit (--conformance)


def closed_form(mechanism: str) -> bool:
    """Whether the audit computes the mechanism's posterior exactly (its class's ``AUDIT_KERNEL``: the law
    ``textdp.audit.attacks.kernel_of`` reads from the mechanism object)."""
    from textdp.mechanisms import mechanism_class

    return bool(mechanism_class(mechanism).AUDIT_KERNEL)


def _ints(text: str, flag: str) -> tuple:
    try:
        values = tuple(sorted({int(part) for part in str(text).split(",") if part.strip()}))
    except ValueError:
        raise TextdpError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 2:
        raise TextdpError(f"{flag} must list set sizes of at least 2")
    return values


def read_pair_list(path: str) -> List[tuple]:
    """(line, word, word) for every non-empty line (two words separated by whitespace or a comma)."""
    text = read_text_file("--pair-list", path)
    pairs = []
    for number, line in enumerate(text.split("\n"), start=1):
        parts = [p for p in re.split(r"[\s,]+", line.strip()) if p]
        if not parts:
            continue
        if len(parts) != 2:
            raise TextdpError(f"--pair-list line {number}: expected two words, found {len(parts)}")
        pairs.append((number, parts[0], parts[1]))
    return pairs


def _checks(opts: AuditOptions) -> tuple:
    asked = tuple(dict.fromkeys(part.strip() for part in str(opts.checks).split(",") if part.strip()))
    unknown = [c for c in asked if c not in AUDIT_CHECKS]
    if unknown or not asked:
        raise TextdpError(f"--checks takes some of {', '.join(AUDIT_CHECKS)}, got {opts.checks!r}")
    needs_corpus = [c for c in asked if c != "self-check"]
    if needs_corpus and not opts.corpus:
        if opts.checks != DEFAULT_AUDIT_CHECKS:
            raise TextdpError(f"--checks {','.join(needs_corpus)} needs --corpus (the records to attack)")
        asked = tuple(c for c in asked if c == "self-check")
    return asked


def _format(pattern: str, given: Optional[str], flag: str, text_field: str = "text") -> str:
    fmt = given or infer_format(pattern)
    if fmt is None:
        raise TextdpError(f"cannot infer the format of {flag} {pattern!r} from its extension; give --corpus-format")
    matched = matched_paths(pattern)
    if not matched:
        raise TextdpError(f"no file matches {flag} {pattern!r}")
    refuse_wide_text(flag, matched, fmt, tuple(f.strip() for f in text_field.split(",") if f.strip()))
    return fmt


def prepare_run(options: PipelineOptions) -> Prepared:
    """Check the flags, the artifact, inputs and outputs; plan the self-check. Raises TextdpError."""
    opts = options.view_as(AuditOptions)
    mech = options.view_as(MechanismOptions)
    out = options.view_as(OutputOptions)
    seed = options.view_as(SeedOptions).seed
    if not out.output:
        raise TextdpError("--output is required (a directory, local or gs://)")
    gcs.preflight([opts.corpus or "", opts.prior_corpus or "", opts.pair_list or ""], writes=False)
    gcs.preflight([out.output], writes=True)
    mech.validate_mechanism(options.view_as(EpsilonGridOptions).epsilon_grid())
    options.view_as(SeedOptions).validate_seed()
    check_oov(options.view_as(OovOptions).oov_policy, options.view_as(OovOptions).unk_token)
    epsilons = options.view_as(EpsilonGridOptions).epsilon_grid()
    if not opts.conformance:  # the conformance flags mean nothing without it: refused, never silently ignored
        given = [flag for flag, value, default in (
            ("--conformance-mechanisms", opts.conformance_mechanisms, "all"), ("--conformance-draws", opts.conformance_draws, 0),
            ("--conformance-words", opts.conformance_words, 2), ("--power-repeats", opts.power_repeats, 2)) if value != default]
        if given:
            raise TextdpError(f"{', '.join(given)} applies to --conformance only (add --conformance to run that test)")
    checks = _checks(opts) if not opts.conformance else _conformance_checks(opts)
    # upper ends: beyond them one worker's arrays (draws per word, records, windows) no longer fit in memory
    for value, flag, low, high in ((opts.pairs, "--pairs", 0, 10**5), (opts.draws, "--draws", 2, 10**7),
                                   (opts.records, "--records", 1, 10**7),
                                   (opts.inversion_tokens, "--inversion-tokens", 1, 10**8),
                                   (opts.prior_words, "--prior-words", 1, 10**7), (opts.mc_draws, "--mc-draws", 1, 10**8),
                                   (opts.linkage_window, "--linkage-window", 1, 10**4),
                                   (opts.contextual_candidates, "--contextual-candidates", 10, 1000)):
        if flag == "--contextual-candidates" and opts.no_contextual:
            continue  # refused below with --no-contextual, whatever its value
        if not low <= value <= high:
            # --contextual-candidates below 10 (R8b-6): both top-10 figures of the contextual line would be top-(K+1)
            # of a candidate set of K + 1 words, and its "context-free on the same releases" comparison the same
            why = (": the contextual line's top-10 figures rank K + 1 candidates per word (the K most probable plus the "
                   "released word), so K must hold the context-free attacker's ten best guesses"
                   if flag == "--contextual-candidates" and 0 < value < low else "")
            raise TextdpError(f"{flag} must be between {low:,} and {high:,} (got {value:,}){why}")
    if not 0 < opts.false_alarm_rate < 1:
        raise TextdpError("--false-alarm-rate must be in (0, 1)")
    sizes = _ints(opts.linkage_sizes, "--linkage-sizes")
    artifact = options.view_as(ArtifactOptions).artifact
    if artifact and not artifact.startswith("gs://") and not os.path.isdir(artifact):
        raise TextdpError(f"--artifact {artifact!r} is not a directory")
    corpus_format, text_fields = None, ()
    for flag, pattern in (("--corpus", opts.corpus), ("--prior-corpus", opts.prior_corpus)):
        if pattern:  # a dangling or looping symlink matched: never skipped silently, as privatize's --input
            refuse_skipped_matches(flag, pattern)
            refuse_unreadable(flag, matched_paths(pattern))  # a FIFO, device or directory before any read (R12-2)
    if opts.corpus:
        corpus_format = _format(opts.corpus, opts.corpus_format, "--corpus", opts.corpus_text_field)
        text_fields = () if corpus_format == "text" else tuple(
            f.strip() for f in opts.corpus_text_field.split(",") if f.strip())
    if opts.corpus and "linkage" in checks:
        refuse_short_records(opts.corpus, corpus_format, text_fields, opts.linkage_window)
    if opts.prior_corpus:
        prior_format = _format(opts.prior_corpus, opts.corpus_format or corpus_format, "--prior-corpus",
                               opts.corpus_text_field)
        if opts.corpus:
            refuse_shared_prior(opts.corpus, opts.prior_corpus, text_fields if prior_format == "jsonl" else None)
    if opts.no_contextual and opts.contextual_candidates != PipelineOptions([]).view_as(AuditOptions).contextual_candidates:
        raise TextdpError("--contextual-candidates applies to the contextual attacker, which --no-contextual turns off: "
                          "give one or the other")
    user_pairs = []
    if opts.pair_list:
        user_pairs = read_pair_list(opts.pair_list)
    manifest = verify_artifact(artifact, needs=artifact_needs(mech.mechanism, mech.nn))
    oov = options.view_as(OovOptions)
    spec = mech.validate_mechanism(options.view_as(EpsilonGridOptions).epsilon_grid(), artifact, manifest,
                                   oov.oov_policy, oov.unk_token)  # the run's validated spec (textdp/spec.py)
    check_unk_marker(artifact, oov.oov_policy, oov.unk_token)
    if opts.prior_corpus:
        refuse_prior_without_vocabulary(opts.prior_corpus, prior_format, text_fields, artifact)
    units = conformance_units(opts, spec, artifact, manifest) if opts.conformance else ()
    output_guard(options)  # refusals only: run_job removes an earlier audit's files under the lock (--overwrite)
    vocab_size = int(manifest["vocab_size"])
    pool = min(int(opts.prior_words), vocab_size)  # the attackers' candidate words (the prior's support)
    if "inversion" in checks and not opts.no_contextual and int(opts.contextual_candidates) > pool:  # R11b-6
        raise TextdpError(f"--contextual-candidates {int(opts.contextual_candidates):,} is more than the attackers' "
                          f"{pool:,} candidate words (--prior-words {int(opts.prior_words):,}, a vocabulary of "
                          f"{vocab_size:,}): give at most {pool:,}, or raise --prior-words")
    oov_policy = options.view_as(OovOptions).oov_policy

    # the self-check's plan: every test is counted here, before any draw (Bonferroni over the run)
    plan_elements, band_pair_count, oov_pair_count = [], 0, 0
    if "self-check" in checks:
        bands = [k for k in BANDS if k <= vocab_size - 1]
        if opts.pairs and bands:
            count = base_word_count(opts.pairs, bands)
            rng = np.random.default_rng(None if seed is None else [seed, 1])
            remaining = opts.pairs
            for index, word in enumerate(base_words(vocab_size, count, rng)):
                limit = min(len(bands), remaining)
                remaining -= limit
                band_pair_count += limit
                plan_elements.append(("base", index, int(word), limit))
        plan_elements += [("user", line, a, b) for line, a, b in user_pairs]
        if not opts.no_oov_pairs:
            oov_pair_count = 1 if oov_policy == "unk" else 2
            plan_elements.append(("oov", 0))
        if not plan_elements:
            raise TextdpError("the self-check has no pair to test (--pairs 0, no --pair-list, --no-oov-pairs)")
    pairs_total = band_pair_count + len(user_pairs) + oov_pair_count
    tests = planned_tests(max(pairs_total, 1), len(epsilons))
    config = AuditConfig(
        artifact=spec.artifact, mechanism=spec.mechanism, epsilons=spec.epsilons,
        mechanism_params=spec.params, oov_policy=spec.oov_policy, seed=seed,
        draws=opts.draws, false_alarm_rate=opts.false_alarm_rate, planned_tests=tests, window=opts.linkage_window,
        linkage_sizes=sizes, mc_draws=opts.mc_draws)
    closed = closed_form(mech.mechanism)
    run_info = {
        "checks": list(checks),
        "randomness": (f"fixed seed {seed} (tests/benchmarks only: reproducible)" if seed is not None
                       else "fresh OS entropy in every worker"),
        "self_check": {
            "draws_per_word": opts.draws, "pairs_planned": pairs_total, "band_pairs": band_pair_count,
            "user_pairs": len(user_pairs), "oov_pairs": oov_pair_count, "neighbour_ranks": list(BANDS),
            "bound": ("per pair: " + bound_text(mech.mechanism)
                      + "; unknown words: what --oov-policy claims (0 between two unknown words)"),
            "method": (f"Each pair: {opts.draws:,} releases per word and epsilon, split in halves; the event is chosen "
                       "on one half (outputs w releases more often than w', the prefix with the best bound), its "
                       "probabilities bounded on the other (one-sided Clopper-Pearson at level alpha/2 each); both "
                       f"directions of every pair at every epsilon: {tests} tests at level {opts.false_alarm_rate:g}/"
                       f"{tests} each (Bonferroni), so a correct mechanism shows any violation in this run with "
                       f"probability at most {opts.false_alarm_rate:g}."),
        },
        "prior": (f"word frequencies of the reference corpus {opts.prior_corpus} mixed with 10% of Zipf's law over "
                  f"the vocabulary's ranks, its {opts.prior_words:,} most probable words" if opts.prior_corpus else
                  f"Zipf's law over the vocabulary's rank order (P(rank r) ~ 1/r), first {min(opts.prior_words, vocab_size):,} words"),
        "posterior": ("exact: the mechanism's closed form, normalisers summed over the whole vocabulary"
                      if closed else f"Monte Carlo: {opts.mc_draws:,} releases of prior-drawn words per epsilon "
                                     "(counts), upper bounds of the optimum reported"),
        "likelihood": ("closed form" if closed else
                       "Monte Carlo: (C(x, y) + 1/N) / (n_x + 1) from the prior's draws and one release of every "
                       "distinct word of the pool windows"),
        "corpus_pattern": opts.corpus,
        # the contextual attacker's candidate-set size K (None: --no-contextual or no inversion)
        "contextual_candidates": (None if opts.no_contextual or "inversion" not in checks else int(opts.contextual_candidates)),
    }
    if opts.conformance:
        run_info = {"checks": ["conformance"], "randomness": run_info["randomness"],
                    "conformance_plan": {"units": len(units), "words_per_band": opts.conformance_words,
                                         "draws_per_word": opts.conformance_draws or "per law (50,000 closed form, "
                                                                                      "10,000 reference simulation)",
                                         "power_repeats": opts.power_repeats}}
    return Prepared(config, checks, plan_elements, run_info, corpus_format, text_fields, manifest, units)


def _conformance_checks(opts: AuditOptions) -> tuple:
    """--conformance runs alone: refuse the flags of the other checks, and out-of-range conformance numbers."""
    if opts.checks != DEFAULT_AUDIT_CHECKS or opts.corpus:
        raise TextdpError("--conformance runs the conformance test alone: drop --checks and --corpus (run the other "
                          "checks in another audit)")
    for value, flag, low, high in ((opts.conformance_words, "--conformance-words", 1, 1000),
                                   (opts.power_repeats, "--power-repeats", 1, 100)):
        if not low <= value <= high:
            raise TextdpError(f"{flag} must be between {low:,} and {high:,} (got {value:,})")
    if opts.conformance_draws and not 100 <= opts.conformance_draws <= 10**7:
        raise TextdpError(f"--conformance-draws must be 0 (the default per law) or between 100 and 10,000,000 (got "
                          f"{opts.conformance_draws:,})")
    return ("conformance",)


def _check_declared_law(reference, artifact, epsilon: float, params: dict) -> None:
    """A mechanism that is not built in and declares a closed form (EXACT_LAW): its ``exact_distribution`` rows of
    CONFORMANCE_LAW_PROBES vocabulary ids spread over the ranking must each be a probability distribution (finite,
    non-negative, one per word, summing to 1), else one line before any worker starts (R8b-4: an all-NaN law was
    "inconclusive, p=1"). Rows the workers' sample meets later are checked there too (a FLAG naming the declaration)."""
    from textdp.audit.conformance import declared_law_problem, law_kind
    from textdp.mechanisms import make_mechanism, mechanism_class, probe_ids

    if law_kind(mechanism_class(reference)) != "closed form":
        return
    mechanism = make_mechanism(reference, artifact, epsilon, **params)
    size = int(artifact.vocab_size)
    probes = probe_ids(size)
    probes = probes[np.linspace(0, len(probes) - 1, min(CONFORMANCE_LAW_PROBES, len(probes))).astype(int)]
    problem = declared_law_problem(mechanism, artifact.vectors, probes, size)
    if problem:
        raise TextdpError(f"--conformance-mechanisms {mechanism_class(reference).name!r}: its declared law (EXACT_LAW, "
                          f"exact_distribution) at epsilon {epsilon:g} is not a probability distribution: {problem}; "
                          "fix the declaration (nothing was tested)")


CONFORMANCE_LAW_PROBES = 8  # rows of a custom closed form checked on the launcher, per epsilon


def conformance_units(opts: AuditOptions, spec, location, manifest: dict) -> tuple:
    """The conformance plan: every (mechanism, epsilon) unit with its parameters and Bonferroni level. Refuses, before
    any worker starts, a mechanism that does not resolve, an artifact that lacks a part one of them reads, a
    parameter or epsilon (or 1.25 x epsilon, the power check's) a mechanism cannot use, and a mechanism that is not
    built in whose constructor raises or whose ``privatize_ids`` returns bad ids there (``trial_build`` at each of
    those epsilons: one construction and one call on 64 ids each, on the launcher)."""
    from textdp.audit.conformance import POWER_FACTOR, law_kind, planned_units
    from textdp.mechanisms import (
        REGISTRY,
        artifact_for_checks,
        check_mechanism,
        mechanism_class,
        mechanism_reference,
        trial_build,
    )

    asked = str(opts.conformance_mechanisms or "all").strip()
    names = list(REGISTRY) if asked == "all" else [part.strip() for part in asked.split(",") if part.strip()]
    if not names:
        raise TextdpError("--conformance-mechanisms names no mechanism")
    run_class = mechanism_class(spec.mechanism)
    references, params = [], {}
    for name in dict.fromkeys(names):
        reference = mechanism_reference(name)  # one-line refusal of a name or path that does not resolve
        own = dict(spec.params) if mechanism_class(reference) is run_class else {}
        if law_kind(mechanism_class(reference)):
            verify_artifact(location, needs=artifact_needs(reference))
            facts = artifact_for_checks(reference, location, manifest)
            for eps in spec.epsilons:
                for value in (eps, POWER_FACTOR * eps):
                    check_mechanism(reference, value, facts, **own)
                    if hasattr(facts, "vectors"):  # one not built in: built and run on a few ids before any output
                        trial_build(reference, facts, value, **own)  # is touched (a worker would fail after --overwrite)
                        _check_declared_law(reference, facts, value, own)
        references.append(reference)
        params[reference] = own
    level = opts.false_alarm_rate / planned_units(references, spec.epsilons)
    return tuple((index, reference, float(eps), tuple(params[reference].items()), level)
                 for index, (reference, eps) in enumerate((r, e) for r in references for e in spec.epsilons))


SHORT_RECORD_SCAN_BYTES = 64 << 20  # the launcher reads at most this much of --corpus to find one long-enough record


def refuse_short_records(corpus: str, corpus_format: str, text_fields: tuple, window: int) -> None:
    """Linkage compares records of at least --linkage-window words: when no record of a local text/JSONL --corpus
    has that many (read up to SHORT_RECORD_SCAN_BYTES, stopping at the first that has), the run would do every other
    part and then fail with "linkage compared nothing" (round 9, R9-14): refused in one line before the run, with
    the longest record's length. Words are counted by textdp's tokenizer, as the audit counts them."""
    import json

    from textdp.text.tokenize import Tokenizer
    from transforms.compressed import open_decompressed

    if corpus_format not in ("text", "jsonl"):
        return
    tokenizer, longest, budget = Tokenizer({}), 0, SHORT_RECORD_SCAN_BYTES
    for path in matched_paths(corpus):
        if "://" in path or not os.path.isfile(path):
            return  # not read here: the run decides
        try:
            with open(path, "rb") as raw:
                for line in open_decompressed(raw, path):
                    budget -= len(line)
                    if budget < 0:
                        return
                    try:
                        text = line.decode("utf-8")
                    except UnicodeDecodeError:  # an error record of the run, not a record
                        continue
                    if corpus_format == "jsonl":
                        try:
                            record = json.loads(text)
                        except ValueError:
                            continue
                        if not isinstance(record, dict):
                            continue
                        texts = [record[f] for f in text_fields if isinstance(record.get(f), str)]
                    else:
                        texts = [text]
                    words = sum(len(tokenizer.tokenize_batch([t]).ids) for t in texts)
                    if words >= window:
                        return
                    longest = max(longest, words)
        except Exception:  # unreadable or damaged: the run reports it
            return
    if longest == 0:  # no record with a word at all: the run's own "yielded no record" refusal says so
        return
    raise TextdpError(f"no record of --corpus has at least --linkage-window {window} words (the longest has {longest}), "
                      f"so linkage would compare nothing after every other part ran: give --linkage-window {max(longest, 1)} "
                      "or smaller, or leave linkage out of --checks")


def refuse_shared_prior(corpus: str, prior_corpus: str, text_fields: Optional[tuple] = None) -> None:
    """--prior-corpus trains the attackers' prior and the contextual attacker's language model on text that must be
    disjoint from the attacked records (docs/audit.md): a file that both patterns match (the same path, or the same
    real path through a link) is refused in one line, naming the file, never its text."""
    from textdp.outputs import identity, shown

    def real(path: str):  # a local file by its identity (device, inode): a hard link is the same file (R8b-11)
        if "://" in path:
            return path
        return identity(path) or os.path.realpath(path)

    attacked = {real(path): path for path in matched_paths(corpus)}
    shared = sorted((path for path in map(real, matched_paths(prior_corpus)) if path in attacked), key=str)
    if shared or (real(corpus) == real(prior_corpus)):
        name = os.path.basename(attacked[shared[0]]) if shared else os.path.basename(corpus)
        raise TextdpError(f"--prior-corpus and --corpus both read {shown(name)}: the attackers would be trained on the records "
                          "they attack, which overstates what they recover; give --prior-corpus public text disjoint "
                          "from --corpus, or leave it out (the records of --corpus that are not attacked are used)")
    # a copy, a gzip of it, another download, an upper-cased or "> "-quoted copy holding the same records (R9b-5,
    # R10b-2): compared by the words of each record as the tokenizer looks them up (transforms.io._record_keys)
    attacked_lines = record_line_digests(matched_paths(corpus), text_fields=text_fields)
    shared_lines = attacked_lines & record_line_digests(matched_paths(prior_corpus), text_fields=text_fields)
    if len(shared_lines) >= 2 and len(shared_lines) > OVERLAP_SHARE * len(attacked_lines):
        raise TextdpError(f"--prior-corpus holds {len(shared_lines):,} of the {len(attacked_lines):,} distinct records "
                          "of --corpus (a copy or another download of it?): the attackers would be trained on the records "
                          "they attack, which overstates what they recover; give --prior-corpus public text disjoint from "
                          "--corpus, or leave it out")


def refuse_prior_without_vocabulary(pattern: str, data_format: str, text_fields, artifact: str) -> None:
    """A --prior-corpus in which no word is a vocabulary word (another language, an id-only or wrongly tokenised
    file) is refused in one line before the run (R11b-3: the prior stage found it after the other checks had run,
    exit 1 "the pipeline failed"). Its local files are read as the duplicate checks read them until the first
    vocabulary word (``transforms.io.any_record_word``); a gs:// file or artifact, or no answer within the check's
    budget, lets the run go on (its prior stage says so)."""
    from textdp.artifact.compact_vocab import CompactVocabulary
    from textdp.outputs import shown
    from transforms.io import any_record_word

    paths = matched_paths(pattern)
    if not paths or gcs.is_gcs_url(artifact):
        return
    vocabulary = CompactVocabulary(os.path.join(resolve_artifact(artifact), "vocab.txt"))
    if any_record_word(paths, data_format, text_fields, vocabulary.__contains__) is False:
        raise TextdpError(f"--prior-corpus {shown(pattern)}: no word of its {len(paths)} file(s) is a word of the "
                          "artifact's vocabulary (another language, or ids only?), so it gives the attackers no prior: "
                          "give public text in the vocabulary's language, or leave --prior-corpus out")


def output_guard(options: PipelineOptions) -> OutputGuard:
    """The run's outputs checked by the one output guard (textdp/outputs.py); run_job locks them with it."""
    opts, out = options.view_as(AuditOptions), options.view_as(OutputOptions)
    guard = OutputGuard("audit", out.overwrite, FileSystems.exists, matched_paths)
    guard.directory("--output", out.output, OUTPUT_FILES, earlier="an earlier audit",
                    others=directory_job_files("audit"))
    for flag, pattern in (("--corpus", opts.corpus), ("--prior-corpus", opts.prior_corpus),
                          ("--pair-list", opts.pair_list)):
        guard.read(flag, matched_paths(pattern) if pattern else [], pattern=pattern or "")
    artifact = options.view_as(ArtifactOptions).artifact
    if not gcs.is_gcs_url(artifact):  # the artifact's files are inputs: no output may be one of them
        guard.read_directory("--artifact", resolve_artifact(artifact))
    guard.check()
    return guard


def build_pipeline(options: PipelineOptions, progress_dir: Optional[str] = None,
                   prepared: Optional[Prepared] = None) -> beam.Pipeline:
    """The audit pipeline for ``options`` (not yet run)."""
    prepared = prepared or prepare_run(options)
    opts = options.view_as(AuditOptions)
    config = prepared.config
    worker = options.view_as(WorkerResourceOptions).worker_config(progress_dir)
    output = options.view_as(OutputOptions).output.rstrip("/")
    if not output.startswith("gs://"):
        os.makedirs(output, exist_ok=True)
    handle = shared.Shared()
    pipeline = beam.Pipeline(options=options)
    checks = prepared.checks
    if "conformance" in checks:
        _ = (pipeline
             | "ConformancePlan" >> beam.Create(list(prepared.conformance_units), reshuffle=False)
             | "Conformance" >> Conformance(handle, config, {"words_per_band": opts.conformance_words,
                                                             "draws": opts.conformance_draws,
                                                             "power_repeats": opts.power_repeats},
                                            output, prepared.run_info, worker))
        return pipeline

    def empty(label):
        return pipeline | label >> beam.Create([])

    if "self-check" in checks:
        check_rows = (pipeline
                      | "SelfCheckPlan" >> beam.Create(prepared.plan_elements, reshuffle=False)
                      | "SelfCheck" >> SelfCheckStage(handle, config, worker))
        _ = check_rows | "WriteSelfCheck" >> beam.io.WriteToParquet(
            f"{output}/{SELF_CHECK_TABLE}", self_check_schema(), file_name_suffix=".parquet", num_shards=1,
            shard_name_template="")
    else:
        check_rows = empty("NoSelfCheck")
    if opts.corpus and ({"inversion", "linkage"} & set(checks)):
        attacks = pipeline | "Attacks" >> Attacks(
            handle, config, worker, corpus=opts.corpus, corpus_format=prepared.corpus_format,
            text_fields=prepared.text_fields, max_record_bytes=DEFAULT_MAX_RECORD_BYTES, records=opts.records,
            inversion_tokens=opts.inversion_tokens, prior_corpus=opts.prior_corpus, prior_words=opts.prior_words,
            vocab_size=int(prepared.manifest["vocab_size"]), closed_form=closed_form(config.mechanism),
            run_inversion="inversion" in checks, run_linkage="linkage" in checks,
            contextual=prepared.run_info.get("contextual_candidates"))
        inversion_rows, linkage_rows = attacks["inversion"], attacks["linkage"]
        contextual_rows, language_model = attacks["contextual"], attacks["language_model"]
        monte_carlo, corpus, read_counts = attacks["monte_carlo"], attacks["corpus"], attacks["read_counts"]
        if "inversion" in checks:
            _ = inversion_rows | "WriteInversion" >> beam.io.WriteToParquet(
                f"{output}/{INVERSION_TABLE}", inversion_schema(), file_name_suffix=".parquet", num_shards=1,
                shard_name_template="")
        if "linkage" in checks:
            _ = linkage_rows | "WriteLinkage" >> beam.io.WriteToParquet(
                f"{output}/{LINKAGE_TABLE}", linkage_schema(), file_name_suffix=".parquet", num_shards=1,
                shard_name_template="")
    else:
        inversion_rows, linkage_rows = empty("NoInversion"), empty("NoLinkage")
        monte_carlo, corpus, read_counts = empty("NoMonteCarlo"), empty("NoCorpus"), empty("NoReadCounts")
        contextual_rows, language_model = empty("NoContextual"), empty("NoLanguageModel")
    _ = (pipeline
         | "ReportTrigger" >> beam.Create([None])
         | "Report" >> beam.ParDo(WriteAuditOutputs(handle, config, output, prepared.run_info, worker),
                                  beam.pvalue.AsList(check_rows), beam.pvalue.AsList(inversion_rows),
                                  beam.pvalue.AsList(linkage_rows), beam.pvalue.AsList(monte_carlo),
                                  beam.pvalue.AsList(corpus), beam.pvalue.AsList(read_counts),
                                  beam.pvalue.AsList(contextual_rows), beam.pvalue.AsList(language_model)))
    return pipeline


def report_lines(output: str) -> List[str]:
    import json

    with FileSystems.open(f"{output}/{SUMMARY_FILE}") as handle:
        summary = json.loads(handle.read().decode("utf-8"))
    corpus = summary.get("corpus")
    if corpus is not None and not (corpus.get("evaluated_records") and corpus.get("inversion_tokens_available")):
        unreadable = corpus.get("records_unreadable", 0)
        raise TextdpError(f"--corpus yielded no record to attack ({corpus.get('records_read', 0):,} read, "
                          f"{unreadable:,} unreadable, no word in the others): the inversion and linkage results in {output} are "
                          "empty; check --corpus, --corpus-format and --corpus-text-field")
    if "linkage" in summary.get("checks", ()) and not (summary.get("linkage") or {}).get("per_epsilon"):
        pool = (corpus or {}).get("linkage_pool_records", 0)
        why = (f"no record of --corpus has at least {(corpus or {}).get('linkage_window_words')} words (give a smaller "
               "--linkage-window)" if not pool else
               f"every --linkage-sizes set is larger than the {pool:,} records long enough to compare (give smaller "
               "--linkage-sizes)")
        raise TextdpError(f"linkage compared nothing: {why}; the other results are in {output}")
    lines = list((summary.get("conformance") or {}).get("message", []))
    if summary.get("self_check"):
        lines.append(summary["self_check"]["message"])
    inversion = (summary.get("inversion") or {}).get("per_epsilon") or {}
    contextual = summary.get("contextual_inversion") or {}
    for eps, entry in inversion.items():
        overall = entry["overall"]
        lines.append(f"inversion at epsilon {eps}: top-1 {overall['top1']['rate']:.3f}, top-10 "
                     f"{overall['top10']['rate']:.3f} (released word itself {overall['released']['rate']:.3f}) "
                     f"of {entry['tokens']:,} tokens")
        lines += contextual_lines(contextual, eps)
    if (contextual.get("model") or {}).get("warning"):  # an untrained contextual attacker (F9): said once
        lines.append(f"WARNING: contextual attacker: {contextual['model']['warning']}")
    if summary.get("contextual_inversion_skipped"):  # --no-contextual (F16): said, not left to be guessed
        lines.append(f"contextual attacker: {summary['contextual_inversion_skipped']}")
    linkage = (summary.get("linkage") or {}).get("per_epsilon") or {}
    for eps, entry in linkage.items():
        parts = ", ".join(f"{int(size):,}: {e['top1']['rate']:.3f}" for size, e in entry.items())
        lines.append(f"linkage top-1 at epsilon {eps} by set size: {parts}")
    flagged = (summary.get("conformance") or {}).get("flagged") or []
    broken = (summary.get("conformance") or {}).get("declaration_broken") or []
    if flagged:  # an installation that does not release what its mechanisms declare: the run is not a success
        releases = [name for name in flagged if name not in broken]
        why = ("releases do not follow the declared law" if not broken else "; ".join(part for part in (
            f"{', '.join(broken)}: the declared law is not a probability distribution, nothing was tested against it",
            f"{', '.join(releases)}: releases do not follow the declared law" if releases else "") if part))
        raise TextdpError(f"conformance: {', '.join(flagged)} flagged ({why}); the tests and their p-values are in "
                          f"{output}/{CONFORMANCE_FILE}")
    lines.append(f"report: {output}/{CONFORMANCE_FILE}" if "conformance" in summary.get("checks", ()) else
                 f"report: {output}/report.html")
    return lines


def contextual_lines(contextual: dict, eps: str) -> List[str]:
    """The contextual attacker's line at one epsilon, beside the context-free one's on the same releases."""
    entry = (contextual.get("per_epsilon") or {}).get(eps)
    if not entry or not entry["tokens"]:
        return []
    overall, same = entry["overall"], contextual["same_releases_context_free"][eps]
    model = contextual["model"]
    return [f"contextual inversion at epsilon {eps}: top-1 {overall['top1']['rate']:.3f}, top-10 "
            f"{overall['top10']['rate']:.3f} of {entry['tokens']:,} tokens in whole records (context-free on the same "
            f"releases: top-1 {same['top1']['rate']:.3f}, top-10 {same['top10']['rate']:.3f}); bigram model from "
            f"{model['training_tokens']:,} training tokens, {model['candidates_K']} candidates per word: a lower bound "
            "for an attacker with a better language model"]


def prepare(options: PipelineOptions) -> Plan:
    """``run_job``'s entry: every check, then the plan (pipeline builder, progress, report)."""
    prepared = prepare_run(options)
    output = options.view_as(OutputOptions).output.rstrip("/")
    # no total: pairs share words (drawn once), so the number of draws is known only as the run goes
    return Plan(build=lambda progress_dir: build_pipeline(options, progress_dir, prepared),
                report=lambda: report_lines(output), temp_parents=(output,), progress=("draws", None, "draws"),
                guard=output_guard(options))


def help_parser():
    from pipelines.jobs import help_parser as job_help

    return job_help("audit")


def run(argv=None) -> int:
    return run_job("audit", argv)


if __name__ == "__main__":
    sys.exit(run())
