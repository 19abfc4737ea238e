"""textdp: word-level metric differential privacy for text corpora.

The core library (this package) holds the mechanisms, the vocabulary artifacts and the
accounting. It never imports Apache Beam: the Beam code lives in the sibling packages
``transforms`` and ``pipelines`` and calls into this one.
"""

from textdp.api import Privatizer  # the public Python API: docs/api.md
from textdp.errors import (ArtifactError, ArtifactNotFoundError, ParameterError, TextdpError, TextdpTypeError,
                           TextdpValueError)
from textdp.version import __version__

__all__ = ["Privatizer", "TextdpError", "__version__", "ArtifactError", "ArtifactNotFoundError", "ParameterError",
           "TextdpTypeError", "TextdpValueError"]
