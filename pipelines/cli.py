"""The ``textdp`` command: one subcommand per job, each handled by its own module's ``run(argv)``.

The flags of every job are declared once, in that job's module (PipelineOptions subclasses for
the Beam jobs), so ``textdp <job> --help`` is always the job's own help.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "build-index": ("pipelines.build_index", "build a vocabulary artifact (vectors + Annoy index) from embeddings"),
    "privatize": ("pipelines.privatize", "privatize a corpus with Madlib or TEM (Beam pipeline)"),
    "neighbours": ("pipelines.neighbours", "pre-compute every word's K nearest neighbours for TEM (Beam pipeline)"),
    "calibrate": ("pipelines.calibrate", "plausible-deniability statistics N_w, S_w to choose epsilon (Beam pipeline)"),
}


def usage() -> str:
    lines = ["usage: textdp <command> [flags]   (textdp <command> --help for its flags)", "", "commands:"]
    lines += [f"  {name:<12} {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from textdp import __version__

        print(f"textdp {__version__}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"textdp: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    result = module.run(argv[1:])
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
