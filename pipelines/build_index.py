"""``textdp build-index``: turn an embedding source into a vocabulary artifact.

This job is a single process (reading vectors and building an Annoy index do not shard); the
TEM neighbour table, which does, is the separate Beam job ``textdp neighbours``.
"""

from __future__ import annotations

import argparse
import sys

from textdp.artifact.embeddings import BUNDLED_GLOVE, parse_source
from textdp.artifact.store import DEFAULT_SEED, DEFAULT_TREES, build_artifact, stderr_progress
from textdp.errors import TextdpError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="textdp build-index", description=__doc__.splitlines()[0].replace("`", ""))
    parser.add_argument("--embeddings", default=BUNDLED_GLOVE,
                        help=f"embedding source: {BUNDLED_GLOVE!r} (bundled GloVe 6B 50d, the default), a GloVe "
                             "text file (word v1 ... vn), a word2vec/fastText text file (with its 'count dim' "
                             "header; .gz accepted), or a .npy matrix together with --vocab-file")
    parser.add_argument("--vocab-file", "--vocab_file", default=None,
                        help="one word per line, line i naming row i of the .npy matrix given to --embeddings")
    parser.add_argument("--output", required=True,
                        help="new artifact directory (must not exist; a gs:// URL uploads the finished artifact)")
    parser.add_argument("--vocab-size", "--vocab_size", type=int, default=None,
                        help="keep only the N most frequent words (the first N of the source); default: all")
    parser.add_argument("--trees", type=int, default=DEFAULT_TREES,
                        help=f"number of Annoy trees, 1 to 2^31 - 1 (more: better recall, bigger index); default {DEFAULT_TREES}")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"Annoy build seed, 0 to 2^31 - 1, recorded in the manifest; default {DEFAULT_SEED}")
    return parser


C_INT_MAX = 2 ** 31 - 1  # Annoy's trees and seed are C ints

help_parser = build_parser  # the same name as the Beam jobs' --help parsers (templates read it)


def run(argv=None) -> int:
    parser = build_parser()

    def refuse(message: str):  # one line, exit 2, as every textdp job (pipelines/jobs.py)
        print(f"textdp build-index: error: {message}; see `textdp build-index --help`", file=sys.stderr)
        raise SystemExit(2)

    parser.error = refuse
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:  # Annoy takes both as a C int: a larger value was a traceback (OverflowError) after reading the vectors
        if not 1 <= args.trees <= C_INT_MAX:
            refuse(f"--trees must be an integer from 1 to {C_INT_MAX:,} (Annoy's limit), got {args.trees}")
        if not 0 <= args.seed <= C_INT_MAX:
            refuse(f"--seed must be an integer from 0 to {C_INT_MAX:,} (Annoy's limit), got {args.seed}")
    except SystemExit as exc:
        return int(exc.code)
    try:
        source = parse_source(args.embeddings, args.vocab_file)
        if args.output.startswith("gs://"):
            from textdp.artifact import gcs

            path = gcs.build_and_upload(source, args.output, vocab_size=args.vocab_size, trees=args.trees,
                                        seed=args.seed, progress=stderr_progress)
        else:
            path = build_artifact(source, args.output, vocab_size=args.vocab_size, trees=args.trees,
                                  seed=args.seed, progress=stderr_progress)
    except (TextdpError, ValueError, OSError) as exc:
        print(f"textdp build-index: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the build writes into a staging directory: nothing half-built remains
        print("textdp build-index: interrupted; nothing was written", file=sys.stderr)
        return 130
    print(f"artifact written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
