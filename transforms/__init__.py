"""Beam PTransforms and DoFns of textdp. ``from transforms import Privatize`` is the drop-in step."""

from transforms.privatize import Privatize, PrivatizeResult  # noqa: F401

__all__ = ["Privatize", "PrivatizeResult"]
