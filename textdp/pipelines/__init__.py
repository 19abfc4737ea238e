"""``textdp.pipelines``: textdp's jobs under the package's own name (issue 27, item 5).

``textdp.pipelines.cli.main(argv)`` is the ``textdp`` command, ``textdp.pipelines.privatize.run(argv)`` one job
(``build_pipeline(options) -> beam.Pipeline`` and ``run(argv)`` per job module). The code lives in the
repository's top-level ``pipelines/`` folder; every ``textdp.pipelines.<module>`` is the very same module
object as ``pipelines.<module>`` (see ``textdp.transforms``). The top-level name ``pipelines`` stays importable
for now and may be deprecated later (docs/api.md).

An adapter on top of the core: ``import textdp`` never imports it. Importing it does not import Beam (the jobs
import Beam when they run), so the ``textdp`` command can quiet Beam's import-time warnings first.
"""

from pipelines.cli import main
from pipelines.jobs import JOBS, run_job
from textdp._alias import alias_package

__all__ = ["JOBS", "main", "run_job"]

alias_package(__name__, "pipelines")
