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
    code = run_job(name, argv[1:], until_exit=command)
    if command and code >= 128:  # interrupted by a signal: the job cleaned up and said so in one line
        leave_without_waiting(code)
    return code


def leave_without_waiting(code: int) -> None:
    """End the command's process now with ``code`` when threads that are not daemons are still alive (a runner's
    worker thread stopped mid-bundle by the signal): Python's shutdown would wait for them, and an interrupted run
    was seen to hang at exit for minutes after its one-line message. The job has already put the earlier release
    back and removed its temporary files; stdout and stderr are flushed first."""
    import os
    import threading

    lingering = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not lingering:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed console: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
