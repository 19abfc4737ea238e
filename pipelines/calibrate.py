"""``textdp calibrate``: choose epsilon from plausible-deniability statistics (Beam pipeline).

Feyisetan et al. (WSDM 2020, Sec. 3.2, 4, 4.1): for sampled words w and each epsilon, draw M(w)
``--samples`` times and record N_w = Pr[M(w) = w] and S_w = distinct outputs (for TEM also their
exact values), plus the distances to the k nearest words (Fig. 1). Words are sampled in the
driver (stratified by frequency rank) or read from ``--word-list``; the pipeline spreads them over
workers and writes, under ``--output``:

``per_word.parquet`` (one row per word and epsilon), ``summary.json``, ``hist_n_w.png``,
``hist_s_w.png``, ``means_vs_epsilon.png``, ``knn_distances.png`` and ``report.html``.

The recommendation (the largest epsilon meeting ``--max-nw``/``--min-sw`` for ``--coverage`` of
the words) is printed at the end and is in the report. Beam's own flags (``--runner``,
``--direct_num_workers``, ...) pass through.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import List, Optional

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from pipelines.flags import (
    DEFAULT_WORDS,
    ArtifactOptions,
    CalibrateOptions,
    EpsilonGridOptions,
    MechanismOptions,
    OutputOptions,
    SeedOptions,
    WorkerResourceOptions,
)
from pipelines.jobs import Plan, directory_job_files, run_job
from textdp.artifact import gcs
from textdp.artifact.locate import resolve_artifact, verify_artifact
from textdp.calibration.statistics import MAX_SAMPLES, stratified_word_sample
from textdp.errors import TextdpError
from textdp.mechanisms import artifact_needs
from textdp.outputs import OutputGuard
from transforms.calibration import (
    SUMMARY_FILE,
    TABLE_FILE,
    TABLE_PREFIX,
    CalibrateWords,
    CalibrationConfig,
    WriteCalibrationOutputs,
    parquet_schema,
)
from transforms.io import matched_paths, read_text_file

OUTPUT_FILES = (TABLE_FILE, SUMMARY_FILE, "report.html", "hist_n_w.png", "hist_s_w.png", "means_vs_epsilon.png",
                "knn_distances.png")


def validate(options: PipelineOptions) -> dict:
    """Check the flags and the artifact before anything runs; returns the artifact's manifest."""
    opts = options.view_as(CalibrateOptions)
    mech = options.view_as(MechanismOptions)
    output = options.view_as(OutputOptions).output
    if not output:
        raise TextdpError("--output is required (a directory, local or gs://)")
    gcs.preflight([opts.word_list or ""], writes=False)  # gs:// refused in seconds, not after minutes of retries
    gcs.preflight([output], writes=True)
    mech.validate_mechanism(options.view_as(EpsilonGridOptions).epsilon_grid())
    options.view_as(SeedOptions).validate_seed()
    options.view_as(EpsilonGridOptions).epsilon_grid()
    if opts.words is not None and opts.word_list:
        raise TextdpError("give either --words (a sample) or --word-list (your words), not both")
    if opts.words is not None and opts.words < 1:
        raise TextdpError("--words must be >= 1")
    if not 1 <= opts.samples <= MAX_SAMPLES:  # a worker holds samples x dimension noise values per word
        raise TextdpError(f"--samples must be between 1 and {MAX_SAMPLES:,} (got {opts.samples:,})")
    if not (math.isfinite(opts.max_nw) and opts.max_nw <= 1):
        raise TextdpError("--max-nw must be a probability in [0, 1] (or negative to drop the target)")
    if not math.isfinite(opts.min_sw):
        raise TextdpError("--min-sw must be a finite number of distinct outputs (or negative to drop the target)")
    if not 0 < opts.coverage <= 1:
        raise TextdpError("--coverage must be in (0, 1]")
    if opts.max_nw < 0 and opts.min_sw < 0:
        raise TextdpError("at least one of --max-nw and --min-sw must be a target (>= 0)")
    artifact = options.view_as(ArtifactOptions).artifact
    if artifact and not artifact.startswith("gs://") and not os.path.isdir(artifact):
        raise TextdpError(f"--artifact {artifact!r} is not a directory")
    if opts.word_list and not FileSystems.exists(opts.word_list):
        raise TextdpError(f"--word-list {opts.word_list!r} does not exist")
    manifest = verify_artifact(artifact, needs=artifact_needs(mech.mechanism, mech.nn))
    mech.validate_mechanism(options.view_as(EpsilonGridOptions).epsilon_grid(), artifact, manifest)
    output_guard(options)
    return manifest


def output_guard(options: PipelineOptions) -> OutputGuard:
    """The run's outputs checked by the one output guard (textdp/outputs.py); run_job locks them with it."""
    out, word_list = options.view_as(OutputOptions), options.view_as(CalibrateOptions).word_list
    guard = OutputGuard("calibrate", out.overwrite, FileSystems.exists, matched_paths)
    guard.directory("--output", out.output, OUTPUT_FILES, earlier="an earlier calibration",
                    others=directory_job_files("calibrate"))
    guard.read("--word-list", [word_list] if word_list else [], pattern=word_list or "")
    artifact = options.view_as(ArtifactOptions).artifact
    if not gcs.is_gcs_url(artifact):  # the artifact's files are inputs: no output may be one of them
        guard.read_directory("--artifact", resolve_artifact(artifact))
    guard.check()
    return guard


def read_word_list(path: str) -> List[tuple]:
    """(word, line number) for every non-empty line; a file that is not UTF-8 is refused by line and
    offset, never by quoting its bytes. Words are looked up as privatize looks them up (the tokenizer's
    rule, in the workers: ``JOHN`` is the vocabulary's ``john``)."""
    text = read_text_file("--word-list", path)
    return [(line.strip(), i) for i, line in enumerate(text.split("\n"), start=1) if line.strip()]


def nn_statement(options: PipelineOptions, manifest: dict) -> str:
    """How the run's draws find their released word, from what the mechanism's class declares
    (``SEARCHES_NEAREST``, ``NEEDS_NEIGHBOUR_TABLE``: what the artifact check uses too) and from
    ``WordCalibrator.prunes_search``, the test the draws themselves use."""
    from textdp.calibration.statistics import WordCalibrator
    from textdp.mechanisms import mechanism_class

    opts = options.view_as(CalibrateOptions)
    mech = options.view_as(MechanismOptions)
    name = mech.mechanism
    cls = mechanism_class(name)
    if not cls.SEARCHES_NEAREST:
        source = (f"reads the artifact's K-nearest neighbour table ({(manifest.get('neighbours') or {}).get('metric', '?')} "
                  "metric)" if cls.NEEDS_NEIGHBOUR_TABLE else "reads no neighbour table or search index")
        return (f"not applicable: --mechanism {name} searches no nearest word; each draw is the mechanism's own "
                f"sampling, as in the privatize job, which {source}")
    if mech.nn == "annoy":
        annoy = manifest.get("annoy") or {}
        return (f"Annoy approximate nearest-word search (index of {annoy.get('trees')} trees, search_k={mech.search_k}), "
                "as the privatize job uses with --nn annoy; its low recall at small epsilon spreads outputs, so "
                "these statistics hold for Annoy, not for exact search")
    words = f"{manifest.get('vocab_size'):,}"
    if WordCalibrator.prunes_search(name, mech.nn, not opts.no_prune):
        return (f"exact nearest word over the {words}-word vocabulary, as the privatize job uses with --nn exact; "
                "each word's draws search only the words that can be nearest (triangle-inequality candidate "
                "pruning, same answers up to float32 near-ties) when those are a small share of the vocabulary, "
                "and every word otherwise (searched_fraction in per_word.parquet)")
    why = "--no-prune was given" if opts.no_prune else f"candidate pruning does not apply to --mechanism {name}"
    return (f"exact nearest-word search over all {words} words for every draw ({why}), as the privatize job uses "
            "with --nn exact")


def _word_list_ids(path: str, elements: List[tuple], location) -> List[int]:
    """The vocabulary id of every --word-list line, looked up as the workers do (``transforms.calibration.word_list_id``,
    privatize's rule: ``The`` and ``  the  `` are ``the``; UNKNOWN_ID for a line that is not exactly one known word).
    Before the run: a word list none of whose lines is one vocabulary word would calibrate nothing; it failed after
    the run. No line quoted."""
    from textdp.artifact.locate import resolve_artifact
    from textdp.artifact.store import Artifact
    from textdp.text.tokenize import UNKNOWN_ID, Tokenizer
    from transforms.calibration import word_list_id

    artifact = Artifact(resolve_artifact(location), verify=False)
    tokenizer = Tokenizer(artifact.word_to_id, artifact.words)
    ids = [word_list_id(tokenizer, line) for line, _ in elements]
    if all(word_id == UNKNOWN_ID for word_id in ids):
        raise TextdpError(f"--word-list {path!r}: none of its {len(elements)} line(s) is one word of the artifact's "
                          f"vocabulary (looked up as privatize looks words up; a line must hold exactly one word), so "
                          "there is nothing to calibrate")
    return ids


def _distinct_words(path: str, elements: List[tuple], location) -> tuple:
    """(the lines to calibrate, the words description): a word listed on several lines (repeated, in another case,
    with spaces around it: one vocabulary id) is calibrated once, from its first line, so that every word weighs
    once in the shares and the recommendation (round 8, R8b-7); the repeating lines are reported by number, as
    the unknown ones are. Lines that are no vocabulary word go on to the workers, which report them."""
    from textdp.text.tokenize import UNKNOWN_ID

    ids = _word_list_ids(path, elements, location)
    first, kept, repeats = {}, [], []
    for (line, number), word_id in zip(elements, ids):
        if word_id != UNKNOWN_ID and word_id in first:
            repeats.append(number)
            continue
        if word_id != UNKNOWN_ID:
            first[word_id] = number
        kept.append((line, number))
    info = {"selection": "word list", "lines": len(elements),
            "description": f"{len(first)} distinct word(s) from the given list of {len(elements)} line(s)"}
    if repeats:
        info["duplicate_lines"] = repeats[:100]
        info["duplicate_count"] = len(repeats)
        info["description"] += (f"; {len(repeats)} line(s) repeating the word of an earlier line (looked up as privatize "
                                "looks words up: case, spaces) were not calibrated again: each word weighs once (line numbers in "
                                "summary.json)")
    return kept, info


def _elements(options: PipelineOptions, vocab_size: int):
    opts = options.view_as(CalibrateOptions)
    seed = options.view_as(SeedOptions).seed
    if opts.word_list:
        elements = read_word_list(opts.word_list)
        if not elements:
            raise TextdpError(f"--word-list {opts.word_list!r} holds no words")
        return _distinct_words(opts.word_list, elements, options.view_as(ArtifactOptions).artifact)
    count = opts.words or DEFAULT_WORDS
    rng = np.random.default_rng(None if seed is None else [seed, 0])
    ids, strata = stratified_word_sample(vocab_size, count, rng)
    elements = [(int(i), int(s)) for i, s in zip(ids, strata)]
    return elements, {"selection": "stratified by frequency rank",
                      "description": (f"{len(elements)} word(s), one drawn uniformly from each of {len(elements)} "
                                      f"equal frequency-rank strata of the {vocab_size:,}-word vocabulary")}


def build_pipeline(options: PipelineOptions, progress_dir: Optional[str] = None,
                   manifest: Optional[dict] = None, elements=None) -> beam.Pipeline:
    """The calibration pipeline for ``options`` (not yet run)."""
    manifest = manifest or validate(options)
    opts = options.view_as(CalibrateOptions)
    mech = options.view_as(MechanismOptions)
    seed = options.view_as(SeedOptions).seed
    epsilons = options.view_as(EpsilonGridOptions).epsilon_grid()
    elements, words_info = elements or _elements(options, int(manifest["vocab_size"]))
    spec = mech.validate_mechanism(epsilons, options.view_as(ArtifactOptions).artifact)  # textdp/spec.py
    config = CalibrationConfig(artifact=spec.artifact, mechanism=spec.mechanism, epsilons=spec.epsilons,
                               samples=opts.samples, params=spec.params, prune=not opts.no_prune, seed=seed)
    worker = options.view_as(WorkerResourceOptions).worker_config(progress_dir)
    run_info = {
        "words": words_info,
        "nn_statement": nn_statement(options, manifest),
        "randomness": (f"fixed seed {seed} (tests/benchmarks only: reproducible, not private against anyone "
                       "who knows it)" if seed is not None else "fresh OS entropy in every worker"),
        "max_nw": opts.max_nw if opts.max_nw >= 0 else None,
        "min_sw": opts.min_sw if opts.min_sw >= 0 else None,
        "coverage": opts.coverage,
    }
    output = options.view_as(OutputOptions).output.rstrip("/")
    if not output.startswith("gs://"):
        os.makedirs(output, exist_ok=True)
    handle = shared.Shared()
    pipeline = beam.Pipeline(options=options)
    results = (pipeline
               | "Words" >> beam.Create(elements, reshuffle=False)
               | "Calibrate" >> CalibrateWords(handle, config, worker))
    rows = results.rows
    _ = rows | "WriteTable" >> beam.io.WriteToParquet(
        f"{output}/{TABLE_PREFIX}", parquet_schema(), file_name_suffix=".parquet", num_shards=1,
        shard_name_template="")
    unknown = results.unknown | "UnknownLines" >> beam.combiners.ToList()
    _ = (rows
         | "Gather" >> beam.combiners.ToList()
         | "Report" >> beam.ParDo(WriteCalibrationOutputs(handle, config, output, run_info, worker),
                                  beam.pvalue.AsSingleton(unknown)))
    return pipeline


def prepare(options: PipelineOptions) -> Plan:
    manifest = validate(options)
    elements = _elements(options, int(manifest["vocab_size"]))
    output = options.view_as(OutputOptions).output.rstrip("/")

    def report() -> List[str]:
        with FileSystems.open(f"{output}/{SUMMARY_FILE}") as handle:
            summary = json.loads(handle.read().decode("utf-8"))
        return [summary["recommendation"]["message"], f"report: {output}/report.html"]

    return Plan(build=lambda progress_dir: build_pipeline(options, progress_dir, manifest, elements), report=report,
                temp_parents=(output,), progress=("words", len(elements[0]), "draws"),
                guard=output_guard(options))


def help_parser():
    from pipelines.jobs import help_parser as job_help

    return job_help("calibrate")


def run(argv=None) -> int:
    return run_job("calibrate", argv)


if __name__ == "__main__":
    sys.exit(run())
