"""The version of textdp (one place: the package, the manifests and the summaries read it here)."""

__version__ = "0.1.0"
