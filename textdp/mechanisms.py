"""Mechanism factory: the one place that turns ``--mechanism`` and its parameters into an object.

Every mechanism offers the same interface (``name``, ``privatize_ids(ids, rng)``,
``parameters()``, ``privacy_statement()``), so the pipeline never needs to know which one runs.
"""

from __future__ import annotations

from typing import Optional

from textdp.errors import TextdpError

MECHANISMS = ("madlib", "tem")


def make_mechanism(name: str, artifact, epsilon: float, nn: str = "exact", search_k: int = -1,
                   gamma: Optional[float] = None, beta: float = 0.001):
    """Build the mechanism ``name`` over a loaded artifact.

    ``nn``/``search_k`` apply to Madlib (nearest-word search); ``gamma``/``beta`` to TEM (gamma
    None means TEM's default from beta, Thm. 4.2 of Carvalho et al.).
    """
    if name == "madlib":
        from textdp.madlib import Madlib  # pylint: disable=import-outside-toplevel

        return Madlib(artifact, epsilon, nn=nn, search_k=search_k)
    if name == "tem":
        try:
            from textdp.tem import TEM  # pylint: disable=import-outside-toplevel
        except ImportError as exc:
            raise TextdpError(
                f"--mechanism tem is not available in this installation (textdp.tem cannot be imported: {exc})"
            ) from None
        return TEM(artifact, epsilon, gamma=gamma, beta=beta)
    raise TextdpError(f"unknown mechanism {name!r}; expected one of {', '.join(MECHANISMS)}")
