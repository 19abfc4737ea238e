"""Every benchmark runs as ``python -m benchmarks.<name>``: each module must import and have a ``main``.

A benchmark is run by hand, rarely, so a broken import (bench_text_path still imported a module that
the harness refactor had removed) would otherwise go unnoticed until someone needs its numbers. The
modules are imported in a separate interpreter because some set thread variables at import.
"""

import glob
import os
import subprocess
import sys

from tests.conftest import REPO


def _benchmark_modules():
    paths = sorted(glob.glob(os.path.join(REPO, "benchmarks", "bench_*.py"))
                   + glob.glob(os.path.join(REPO, "benchmarks", "peer", "bench_*.py"))
                   + glob.glob(os.path.join(REPO, "benchmarks", "utility", "run.py")))
    return [os.path.relpath(path, REPO)[:-3].replace(os.sep, ".") for path in paths]


def test_every_benchmark_module_imports_and_has_a_main():
    modules = _benchmark_modules()
    assert len(modules) >= 10 and "benchmarks.bench_text_path" in modules and "benchmarks.bench_scaling" in modules
    script = ("import importlib, sys\n"
              "missing = [m for m in sys.argv[1:] if not callable(getattr(importlib.import_module(m), 'main', None))]\n"
              "print('no main:', missing) if missing else None\n"
              "sys.exit(1 if missing else 0)\n")
    done = subprocess.run([sys.executable, "-c", script, *modules], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
