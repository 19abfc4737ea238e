"""One way for every job to declare its flags on Beam's process-wide option parser.

Beam parses the flags of every ``PipelineOptions`` subclass imported in a process with a single
argparse parser, and textdp's jobs share some flags with the same meaning (``--artifact``,
``--output``, ``--nn``, ``--seed``, ...). Declaring such a flag a second time would raise, so each
job declares its flags through :func:`add_flag`, which skips a flag another job already declared.
Shared flags must therefore keep the same ``dest``, type and default in every job; the template
metadata (templates/generate_metadata.py) reads each job's own declarations, so each job keeps
its own help text.
"""


def add_flag(parser, *flags, **kwargs):
    """``parser.add_argument(*flags, **kwargs)`` unless another job already declared the flag."""
    parser.conflict_handler = "resolve"
    for group in getattr(parser, "_action_groups", []):
        group.conflict_handler = "resolve"
    if any(flag in getattr(parser, "_option_string_actions", {}) for flag in flags):
        return
    parser.add_argument(*flags, **kwargs)


def flag_adder(parser):
    """``add(*flags, **kwargs)`` bound to ``parser``, for use inside ``_add_argparse_args``."""
    return lambda *flags, **kwargs: add_flag(parser, *flags, **kwargs)


def job_options(argv, help_parser):
    """The ``PipelineOptions`` of a job's command line, or None after printing ``--help``.

    Values of the job's own flags are checked first by its ``--help`` parser (a clear argparse
    error); every other flag is Beam's and passes through unchanged.
    """
    from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel

    if "-h" in argv or "--help" in argv:
        help_parser().print_help()
        return None
    help_parser().parse_known_args(argv)
    return PipelineOptions(argv)
