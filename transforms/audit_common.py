"""What every stage of ``textdp audit`` shares: the run's configuration, the per-process artifact
holder, mechanisms, random generators and the progress lines printed during long runs.

Heavy state (the memory-mapped artifact and the metric's points) is loaded once per worker process
behind ``apache_beam.utils.shared.Shared``; mechanisms are built per DoFn instance (cheap, and
some keep per-instance scratch state). Generators come from OS entropy in ``setup()``; with
``--seed`` (tests, benchmarks only) every unit of work gets its own generator derived from the
seed and the unit's identity, so results do not depend on how the work was sharded.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np

from textdp.locate import open_artifact
from textdp.mechanisms import make_mechanism

NAMESPACE = "textdp.audit"
PROGRESS_SECONDS = 20.0  # a progress line at least this often while a stage is working


@dataclass(frozen=True)
class AuditConfig:
    """Everything a worker needs (picklable, small)."""

    artifact: Optional[str]
    mechanism: str
    epsilons: Tuple[float, ...]
    mechanism_params: Tuple[Tuple[str, object], ...] = ()
    oov_policy: str = "random"
    seed: Optional[int] = None
    # self-check
    draws: int = 20000
    false_alarm_rate: float = 0.001
    planned_tests: int = 1
    prune: bool = True
    # inversion and linkage
    window: int = 20
    linkage_sizes: Tuple[int, ...] = (100, 1000, 10000)
    mc_draws: int = 200000
    progress_seconds: float = PROGRESS_SECONDS

    def artifact_tag(self) -> str:
        return f"textdp-audit-artifact:{self.artifact or '<default>'}"

    def build_mechanism(self, artifact, epsilon: float):
        return make_mechanism(self.mechanism, artifact, epsilon, **dict(self.mechanism_params))

    def rng(self, *parts) -> np.random.Generator:
        """Fresh OS entropy, or a generator fixed by the seed and ``parts`` (tests, benchmarks)."""
        if self.seed is None:
            return np.random.default_rng()
        digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
        return np.random.default_rng([int(self.seed), int.from_bytes(digest[:8], "big")])


class AuditHolder:
    """Per process, read-only, thread-safe after construction: the artifact and derived points."""

    def __init__(self, location: Optional[str]):
        started = time.perf_counter()
        self.artifact = open_artifact(location)
        _ = self.artifact.sqnorms
        self._points: Dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()
        self.load_ms = (time.perf_counter() - started) * 1000.0

    def points(self, metric: str, dtype=np.float64) -> np.ndarray:
        """The metric's points for the whole vocabulary (computed once per process and dtype)."""
        key = (metric, np.dtype(dtype).name)
        with self._lock:
            if key not in self._points:
                from textdp.neighbours import metric_points  # pylint: disable=import-outside-toplevel

                self._points[key] = metric_points(np.asarray(self.artifact.vectors), metric, dtype=dtype)
            return self._points[key]


def acquire_holder(shared_handle, config: AuditConfig) -> AuditHolder:
    return shared_handle.acquire(lambda: AuditHolder(config.artifact), tag=config.artifact_tag())


class Progress:
    """Prints ``textdp audit: <stage>: <done> of <planned> <unit> ...`` to stderr at least every
    ``interval`` seconds while work is under way (a daemon thread), from each worker process.

    Only counts are printed: never a word, a record or any input text.
    """

    def __init__(self, stage: str, unit: str, planned: Optional[int], interval: float = PROGRESS_SECONDS):
        self.stage = stage
        self.unit = unit
        self.planned = planned
        self.interval = float(interval)
        self.done = 0
        self._started = time.monotonic()
        self._active = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "Progress":
        if self._thread is None and self.interval > 0:
            self._thread = threading.Thread(target=self._run, name=f"textdp-audit-progress-{self.stage}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def add(self, count: int) -> None:
        with self._lock:
            self.done += int(count)

    def working(self, active: bool) -> None:
        with self._lock:
            self._active += 1 if active else -1

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        planned = f" of {self.planned:,} planned in the whole run" if self.planned else ""
        return (f"textdp audit: {self.stage}: {self.done:,} {self.unit} done by this worker (pid {os.getpid()})"
                f"{planned}, {rate:,.0f}/s, {elapsed:,.0f} s")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                active = self._active > 0
            if active:
                print(self.line(), file=sys.stderr, flush=True)
