"""Beam PTransforms and DoFns that wrap the core library ``textdp``."""
