"""What every textdp DoFn does on a worker: share heavy state, size its BLAS threads, report progress.

One helper for the three kinds of per-process state the jobs load (the privatizer's artifact and
mechanism, calibrate's artifact, the neighbour job's vector points), in the pattern of Beam's
RunInference model handlers: a loader function, an ``apache_beam.utils.shared.Shared`` handle so
that every DoFn instance (thread) of a process gets the same object, and one pair of metrics in
one namespace (``textdp``: ``artifact_loads``, one per load, i.e. one per worker process;
``artifact_load_ms``, how long it took).

BLAS threads. numpy's BLAS starts one thread per core in every process, so N worker processes on
N cores would run N x N busy threads and slow each other down (issue 17: 3.1x slower with two
local workers). ``WorkerConfig`` carries the number of threads each process may use, decided at
submission from how many worker processes share a machine (``pipelines/flags.py``,
``--blas-threads``); ``setup()`` applies it with threadpoolctl before any BLAS call.

Memory. ``setup()`` also keeps freed memory in the process (``textdp.allocator``): without it glibc
hands a batch's temporaries back to the OS and the next batch page-faults them in again, which made
one of two local TEM workers 1.65x slower than the other (issue 17).

Progress. With a ``progress_dir`` (local runs), each DoFn instance counts its work into a
``textdp.progress.ProgressFile`` that the launching process reads.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from apache_beam.metrics import Metrics

from textdp.allocator import retain_freed_memory
from textdp.progress import ProgressFile

NAMESPACE = "textdp"

_PROCESS_LOADS = 0  # how many times this process has loaded shared state (diagnostics: one per kind of state)
_PROCESS_LOADS_LOCK = threading.Lock()
_BLAS_LOCK = threading.Lock()
_BLAS_LIMIT = None  # the threadpoolctl limiter of this process (kept alive: the limit holds while it exists)


@dataclass(frozen=True)
class WorkerConfig:
    """Per-process resources, decided when the job is submitted.

    ``blas_threads``: threads for BLAS/OpenMP pools in each worker process; 0 means "the cores of the
    worker's machine divided by ``processes_per_machine``", resolved on the worker itself.
    """

    blas_threads: int = 0
    processes_per_machine: int = 1
    progress_dir: Optional[str] = None

    def threads(self) -> int:
        if self.blas_threads and self.blas_threads > 0:
            return int(self.blas_threads)
        return max(1, (os.cpu_count() or 1) // max(1, int(self.processes_per_machine)))

    @classmethod
    def for_options(cls, options, blas_threads: int = 0, progress_dir: Optional[str] = None) -> "WorkerConfig":
        """The configuration for a pipeline's options: ``blas_threads`` if > 0, else from how many worker
        processes share a machine (``processes_per_machine``)."""
        if blas_threads and blas_threads > 0:
            return cls(blas_threads=int(blas_threads), progress_dir=progress_dir)
        processes = processes_per_machine(options)
        if processes is None:  # one process per core: one thread each, whatever the machine
            return cls(blas_threads=1, progress_dir=progress_dir)
        return cls(blas_threads=0, processes_per_machine=processes, progress_dir=progress_dir)


def processes_per_machine(options) -> Optional[int]:
    """How many SDK worker processes share one machine for these pipeline options; None: one per core.

    Local runners: ``--direct_num_workers`` (threads or processes: either way they share the cores;
    0 means one per core). Dataflow: one SDK process per vCPU (None), or one per VM with the
    experiment ``no_use_multiple_sdk_containers``. Portable runners (Flink, Spark):
    ``--sdk_worker_parallelism`` (0: one per core).
    """
    from apache_beam.options.pipeline_options import DebugOptions, DirectOptions, PortableOptions, StandardOptions

    runner = (options.view_as(StandardOptions).runner or "FnApiRunner").split(".")[-1]
    if runner in ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner"):
        workers = options.view_as(DirectOptions).direct_num_workers
        workers = 1 if workers is None else int(workers)
        return workers if workers > 0 else None
    if runner in ("DataflowRunner", "TestDataflowRunner"):
        experiments = options.view_as(DebugOptions).experiments or []
        return 1 if "no_use_multiple_sdk_containers" in experiments else None
    parallelism = options.view_as(PortableOptions).sdk_worker_parallelism or 0
    return int(parallelism) if int(parallelism) > 0 else None


def limit_blas_threads(threads: int) -> int:
    """Limit this process's BLAS and OpenMP thread pools to ``threads`` (threadpoolctl). Idempotent."""
    global _BLAS_LIMIT
    from threadpoolctl import threadpool_limits

    with _BLAS_LOCK:
        if _BLAS_LIMIT is None or _BLAS_LIMIT[0] != threads:
            _BLAS_LIMIT = (threads, threadpool_limits(limits=int(threads)))
    return threads


def blas_threads_in_use() -> Optional[int]:
    """The BLAS pool size of this process as threadpoolctl reports it (diagnostics, tests)."""
    from threadpoolctl import threadpool_info

    pools = [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]
    return max(pools) if pools else None


class LoadedState:
    """Shared per-process state: ``value`` (read-only), how long it took to load, its load number."""

    def __init__(self, loader: Callable[[], Any]):
        global _PROCESS_LOADS
        started = time.perf_counter()
        self.value = loader()
        self.load_ms = (time.perf_counter() - started) * 1000.0
        with _PROCESS_LOADS_LOCK:
            _PROCESS_LOADS += 1
            self.load_number = _PROCESS_LOADS
        self._reported = False
        self._lock = threading.Lock()

    def claim_report(self) -> bool:
        """True exactly once: the first bundle that sees this state reports the load metrics."""
        with self._lock:
            if self._reported:
                return False
            self._reported = True
            return True


def process_loads() -> int:
    return _PROCESS_LOADS


class WorkerState:
    """Used by a DoFn: ``setup()`` in the DoFn's setup, ``report()`` inside a bundle, ``progress`` to count."""

    def __init__(self, shared_handle, tag: str, loader: Callable[[], Any], worker: Optional[WorkerConfig] = None):
        self._shared_handle = shared_handle
        self.tag = tag
        self._loader = loader
        self.worker = worker  # None: leave this process's BLAS threads as they are (a helper step of a job)
        self._loads = Metrics.counter(NAMESPACE, "artifact_loads")
        self._load_ms = Metrics.distribution(NAMESPACE, "artifact_load_ms")
        self.state: Optional[LoadedState] = None
        self.progress = ProgressFile(None)

    def setup(self, own_search_threads: bool = False) -> Any:
        """Load (once per process) and size the process's threads. ``own_search_threads``: the DoFn's
        heavy work is textdp's exact nearest-word search, which then runs its own threads over
        single-threaded BLAS calls (textdp.search.nearest.set_search_threads) instead of a BLAS pool."""
        if self.worker is not None:
            retain_freed_memory()  # batches reuse their temporaries' pages (textdp/allocator.py)
            if own_search_threads:
                from textdp.search.nearest import set_search_threads

                set_search_threads(self.worker.threads())
                limit_blas_threads(1)
            else:
                limit_blas_threads(self.worker.threads())
        loader = self._loader
        self.state = self._shared_handle.acquire(lambda: LoadedState(loader), tag=self.tag)
        self.progress = ProgressFile(self.worker.progress_dir if self.worker else None)
        return self.state.value

    @property
    def value(self) -> Any:
        return self.state.value

    def report(self) -> None:
        """Record the load metrics once per loaded state (metrics only count inside a bundle)."""
        if self.state is not None and self.state.claim_report():
            self._loads.inc()
            self._load_ms.update(int(round(self.state.load_ms)))
