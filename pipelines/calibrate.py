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

import argparse
import json
import os
import sys
from typing import List

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared
import numpy as np

from textdp.calibration import DEFAULT_SAMPLES, MECHANISMS, stratified_word_sample
from textdp.locate import read_manifest
from pipelines.options import add_flag as _add, job_options
from textdp.errors import TextdpError
from transforms.calibration import (TABLE_PREFIX, CalibrateWords, CalibrationConfig, WriteCalibrationOutputs,
                                    parquet_schema)

DEFAULT_EPSILONS = "1,2,5,10,20"
DEFAULT_WORDS = 1000


class CalibrateOptions(PipelineOptions):
    """Flags of ``textdp calibrate`` (the single source of truth)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        _add(parser, "--artifact", dest="artifact", default=None,
             help="vocabulary artifact directory or gs:// URL; default: the bundled GloVe 6B 50d artifact (400k "
                  "words), built once into the local cache. TEM needs its neighbour table (textdp neighbours)")
        _add(parser, "--mechanism", dest="mechanism", choices=MECHANISMS, default="madlib",
             help="mechanism to calibrate: madlib (default) or tem (also reports exact N_w and S_w from TEM's "
                  "closed form)")
        _add(parser, "--epsilons", dest="epsilons", default=DEFAULT_EPSILONS,
             help=f"comma-separated epsilons to compare; default {DEFAULT_EPSILONS}")
        _add(parser, "--words", dest="words", type=int, default=None,
             help=f"number of words to sample, one per equal frequency-rank stratum of the vocabulary; "
                  f"default {DEFAULT_WORDS} (all words if the vocabulary is smaller). Not with --word-list")
        _add(parser, "--word-list", "--word_list", dest="word_list", default=None,
             help="file (local or gs://) with the words to calibrate, one per line, instead of a sample; words "
                  "outside the vocabulary are skipped and counted by line number")
        _add(parser, "--samples", dest="samples", type=int, default=DEFAULT_SAMPLES,
             help=f"draws of M(w) per word and epsilon (the paper uses 1,000); default {DEFAULT_SAMPLES}")
        _add(parser, "--nn", dest="nn", choices=("exact", "annoy"), default="exact",
             help="Madlib nearest-word search, as in the privatize job: exact (default) or annoy. Calibrate "
                  "with the method you will privatize with; the report says which was used")
        _add(parser, "--search-k", "--search_k", dest="search_k", type=int, default=-1,
             help="Annoy search_k for --nn annoy (-1: trees * n, Annoy's default)")
        _add(parser, "--beta", dest="beta", type=float, default=0.001,
             help="TEM: gamma from Thm. 4.2 of Carvalho et al. with this beta; default 0.001")
        _add(parser, "--output", dest="output", default=None,
             help="output directory, local or gs:// (created if missing); required")
        _add(parser, "--max-nw", "--max_nw", dest="max_nw", type=float, default=0.5,
             help="target: a word may be released unchanged with probability at most this; default 0.5. "
                  "Give a negative value to drop this target")
        _add(parser, "--min-sw", "--min_sw", dest="min_sw", type=float, default=50.0,
             help="target: at least this many distinct outputs in --samples draws; default 50. Give a negative "
                  "value to drop this target")
        _add(parser, "--coverage", dest="coverage", type=float, default=0.99,
             help="share of words that must meet both targets; default 0.99")
        _add(parser, "--no-prune", "--no_prune", dest="no_prune", action="store_true", default=False,
             help="exact Madlib: search the whole vocabulary for every draw instead of only the words that can "
                  "be nearest (same answers, slower; for checking)")
        _add(parser, "--seed", dest="seed", type=int, default=None,
             help="fixed seed for tests and benchmarks ONLY (word sample and draws); the summary records it. "
                  "Default: OS entropy")


def parse_epsilons(text: str) -> tuple:
    try:
        values = sorted({float(part) for part in str(text).split(",") if part.strip()})
    except ValueError:
        raise TextdpError(f"--epsilons must be comma-separated numbers, got {text!r}") from None
    if not values or any(not (v > 0 and np.isfinite(v)) for v in values):
        raise TextdpError("--epsilons must list at least one finite epsilon > 0")
    return tuple(values)


def validate(opts: CalibrateOptions) -> None:
    if not opts.output:
        raise TextdpError("--output is required (a directory, local or gs://)")
    if opts.words is not None and opts.word_list:
        raise TextdpError("give either --words (a sample) or --word-list (your words), not both")
    if opts.words is not None and opts.words < 1:
        raise TextdpError("--words must be >= 1")
    if opts.samples < 1:
        raise TextdpError("--samples must be >= 1")
    if not 0 < opts.coverage <= 1:
        raise TextdpError("--coverage must be in (0, 1]")
    if opts.max_nw < 0 and opts.min_sw < 0:
        raise TextdpError("at least one of --max-nw and --min-sw must be a target (>= 0)")
    if opts.mechanism == "tem" and opts.nn != "exact":
        raise TextdpError("--nn applies to Madlib only (TEM samples from its neighbour table)")
    if opts.artifact and not opts.artifact.startswith("gs://") and not os.path.isdir(opts.artifact):
        raise TextdpError(f"--artifact {opts.artifact!r} is not a directory")
    if opts.word_list and not FileSystems.exists(opts.word_list):
        raise TextdpError(f"--word-list {opts.word_list!r} does not exist")


def read_word_list(path: str) -> List[tuple]:
    """(word, line number) for every non-empty line."""
    with FileSystems.open(path) as handle:
        text = handle.read().decode("utf-8")
    return [(line.strip(), i) for i, line in enumerate(text.split("\n"), start=1) if line.strip()]


def nn_statement(opts: CalibrateOptions, manifest: dict) -> str:
    if opts.mechanism == "tem":
        return ("not applicable: TEM samples exactly from its closed-form distribution using the artifact's "
                f"K-nearest neighbour table ({(manifest.get('neighbours') or {}).get('metric', '?')} metric)")
    if opts.nn == "annoy":
        annoy = manifest.get("annoy") or {}
        return (f"Annoy approximate nearest word (index of {annoy.get('trees')} trees, search_k={opts.search_k}), "
                "as the privatize job uses with --nn annoy; its low recall at small epsilon spreads outputs, so "
                "these statistics hold for Annoy, not for exact search")
    pruning = ("searching only the words that can be nearest (triangle-inequality candidate pruning, "
               "same answers)" if not opts.no_prune else "searching every word for every draw")
    return (f"exact nearest word (blocked brute force over {manifest.get('vocab_size'):,} words, {pruning}), "
            "as the privatize job uses with --nn exact")


def build_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """The calibration pipeline for ``options`` (not yet run)."""
    opts = options.view_as(CalibrateOptions)
    validate(opts)
    epsilons = parse_epsilons(opts.epsilons)
    manifest = read_manifest(opts.artifact)  # the driver only needs sizes and names
    vocab_size = int(manifest["vocab_size"])
    if opts.mechanism == "tem" and not manifest.get("neighbours"):
        raise TextdpError("--mechanism tem needs the artifact's neighbour table: run "
                          f"`textdp neighbours --artifact {opts.artifact or '<default artifact>'}` first")
    if opts.word_list:
        elements = read_word_list(opts.word_list)
        if not elements:
            raise TextdpError(f"--word-list {opts.word_list!r} holds no words")
        words_info = {"selection": "word list", "description": f"{len(elements)} word(s) from the given list"}
    else:
        count = opts.words or DEFAULT_WORDS
        rng = np.random.default_rng(None if opts.seed is None else [opts.seed, 0])
        ids, strata = stratified_word_sample(vocab_size, count, rng)
        elements = [(int(i), int(s)) for i, s in zip(ids, strata)]
        words_info = {"selection": "stratified by frequency rank",
                      "description": (f"{len(elements)} word(s), one drawn uniformly from each of {len(elements)} "
                                      f"equal frequency-rank strata of the {vocab_size:,}-word vocabulary")}
    config = CalibrationConfig(artifact=opts.artifact, mechanism=opts.mechanism, epsilons=epsilons,
                               samples=opts.samples, nn=opts.nn, search_k=opts.search_k, beta=opts.beta,
                               prune=not opts.no_prune, seed=opts.seed)
    run_info = {
        "words": words_info,
        "nn_statement": nn_statement(opts, manifest),
        "randomness": (f"fixed seed {opts.seed} (tests/benchmarks only: reproducible, not private against anyone "
                       "who knows it)" if opts.seed is not None else "fresh OS entropy in every worker"),
        "max_nw": opts.max_nw if opts.max_nw >= 0 else None,
        "min_sw": opts.min_sw if opts.min_sw >= 0 else None,
        "coverage": opts.coverage,
    }
    output = opts.output.rstrip("/")
    if not output.startswith("gs://"):
        os.makedirs(output, exist_ok=True)
    handle = shared.Shared()
    pipeline = beam.Pipeline(options=options)
    results = (pipeline
               | "Words" >> beam.Create(elements, reshuffle=False)
               | "Calibrate" >> CalibrateWords(handle, config))
    rows = results.rows
    _ = rows | "WriteTable" >> beam.io.WriteToParquet(
        f"{output}/{TABLE_PREFIX}", parquet_schema(), file_name_suffix=".parquet", num_shards=1,
        shard_name_template="")
    unknown = results.unknown | "UnknownLines" >> beam.combiners.ToList()
    _ = (rows
         | "Gather" >> beam.combiners.ToList()
         | "Report" >> beam.ParDo(WriteCalibrationOutputs(handle, config, output, run_info),
                                  beam.pvalue.AsSingleton(unknown)))
    return pipeline


def help_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="textdp calibrate", description=__doc__.split("\n\n")[0],
        epilog="Beam's own flags (--runner, --direct_num_workers, ...) are accepted too.")
    CalibrateOptions._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


def run(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = job_options(argv, help_parser)
    if options is None:
        return 0
    try:
        pipeline = build_pipeline(options)
    except (TextdpError, ValueError) as exc:
        print(f"textdp calibrate: error: {exc}", file=sys.stderr)
        return 2
    result = pipeline.run()
    result.wait_until_finish()
    output = options.view_as(CalibrateOptions).output.rstrip("/")
    with FileSystems.open(f"{output}/summary.json") as handle:
        summary = json.loads(handle.read().decode("utf-8"))
    print(summary["recommendation"]["message"])
    print(f"report: {output}/report.html")
    return 0


if __name__ == "__main__":
    sys.exit(run())
