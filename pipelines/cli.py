"""The ``textdp`` command: one subcommand per job of the registry ``pipelines.jobs.JOBS``.

``textdp <job> --help`` is the job's own help; every job runs through ``pipelines.jobs.run_job``
(one error line, one exit-code convention: 0 done, 1 failed while running, 2 refused before
starting, 130 interrupted).
"""

from __future__ import annotations

import logging
import sys

from pipelines.jobs import JOBS, run_job
from textdp.progress import robust_console


def usage() -> str:
    lines = ["usage: textdp <command> [flags]   (textdp <command> --help for its flags)", "", "commands:"]
    lines += [f"  {name:<12} {job.description}" for name, job in JOBS.items()]
    return "\n".join(lines)


class _NoGcpNoise(logging.Filter):
    """Drops the line Beam logs when imported without its GCP extra ("apitools not found, and bigquery client
    libraries are not available despite ..."): the base install has no GCP stack on purpose (setup.py)."""

    def filter(self, record):
        return not str(record.msg).startswith("apitools not found")


def main(argv=None) -> int:
    """The command. ``argv`` None: this process's own command line (``textdp``, ``python -m pipelines.cli``), which
    exits with the code returned: a committed run then ignores terminating signals until it exits (R10-8)."""
    command = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    robust_console()  # stdout/stderr escape what their encoding cannot hold (an accented path on an ASCII console)
    logging.getLogger().addFilter(_NoGcpNoise())
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from textdp.version import __version__

        print(f"textdp {__version__}")
        return 0
    name = argv[0]
    if name not in JOBS:
        print(f"textdp: error: unknown command {name!r}; one of {', '.join(JOBS)}", file=sys.stderr)
        return 2
    return run_job(name, argv[1:], until_exit=command)


if __name__ == "__main__":
    sys.exit(main())
