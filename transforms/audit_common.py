"""What every stage of ``textdp audit`` shares: the run's configuration, the per-process artifact
holder, mechanisms and random generators.

Heavy state (the memory-mapped artifact and the metric's points) is loaded once per worker process
behind ``apache_beam.utils.shared.Shared`` (``transforms.worker.WorkerState``, which also sizes the
BLAS threads and keeps the progress file the launcher reads); mechanisms are built per DoFn instance
(cheap, and some keep per-instance scratch state). Generators come from OS entropy in ``setup()``; with
``--seed`` (tests, benchmarks only) every unit of work gets its own generator derived from the
seed and the unit's identity, so results do not depend on how the work was sharded.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

from textdp.artifact.locate import open_artifact
from textdp.mechanisms import make_mechanism, mechanism_reference
from transforms.worker import WorkerConfig, WorkerState

NAMESPACE = "textdp"


@dataclass(frozen=True)
class AuditConfig:
    """Everything a worker needs (picklable, small)."""

    artifact: Optional[str]
    mechanism: object  # a mechanism reference: registered name, import path or Mechanism subclass
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

    def __post_init__(self):  # a name, import path or class -> its picklable reference (textdp.mechanisms)
        object.__setattr__(self, "mechanism", mechanism_reference(self.mechanism))

    @property
    def searches_nearest(self) -> bool:
        """Whether draws run textdp's exact nearest-word search (then the worker sizes its threads)."""
        from textdp.mechanisms import mechanism_class

        return (mechanism_class(self.mechanism).SEARCHES_NEAREST
                and dict(self.mechanism_params).get("nn", "exact") == "exact")

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
        self.artifact = open_artifact(location)
        _ = self.artifact.sqnorms
        self._points: Dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    def points(self, metric: str, dtype=np.float64) -> np.ndarray:
        """The metric's points for the whole vocabulary (computed once per process and dtype)."""
        key = (metric, np.dtype(dtype).name)
        with self._lock:
            if key not in self._points:
                from textdp.artifact.neighbours import metric_points

                self._points[key] = metric_points(np.asarray(self.artifact.vectors), metric, dtype=dtype)
            return self._points[key]


def holder_state(shared_handle, config: AuditConfig, worker: Optional[WorkerConfig] = None) -> WorkerState:
    """The per-process holder behind ``Shared``, BLAS threads and the progress file (transforms.worker)."""
    location = config.artifact
    return WorkerState(shared_handle, config.artifact_tag(), lambda: AuditHolder(location), worker)
