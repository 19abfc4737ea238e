"""textdp: word-level metric differential privacy for text corpora.

The core library (this package) holds the mechanisms, the vocabulary artifacts and the
accounting. It never imports Apache Beam: the Beam code lives in the sibling packages
``transforms`` and ``pipelines`` and calls into this one.
"""

__version__ = "0.1.0"

from textdp.api import Privatizer  # noqa: E402  (the public Python API: docs/api.md)
from textdp.errors import TextdpError  # noqa: E402
from textdp.errors import (ArtifactError, ArtifactNotFoundError, ParameterError,  # noqa: E402,I100
                           TextdpTypeError, TextdpValueError)

__all__ = ["Privatizer", "TextdpError", "__version__", "ArtifactError", "ArtifactNotFoundError", "ParameterError",
           "TextdpTypeError", "TextdpValueError"]
