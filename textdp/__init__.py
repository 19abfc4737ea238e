"""textdp: word-level metric differential privacy for text corpora.

The core library (this package) holds the mechanisms, the vocabulary artifacts and the
accounting, in wings that import only downward (README "Project layout", tests/test_layering.py). It
never imports Apache Beam: the Beam code lives in the repository's ``transforms`` and ``pipelines``
folders and calls into this one; ``textdp.transforms`` and ``textdp.pipelines`` are the same modules
under the package's name (adapters that ``import textdp`` never loads).
"""

from textdp.api import Privatizer  # the public Python API: docs/api.md
from textdp.errors import (
                           ArtifactError,
                           ArtifactNotFoundError,
                           ParameterError,
                           TextdpAttributeError,
                           TextdpError,
                           TextdpTypeError,
                           TextdpValueError,
                           TextdpWarning,
)
from textdp.version import __version__

__all__ = ["Privatizer", "TextdpError", "__version__", "ArtifactError", "ArtifactNotFoundError", "ParameterError",
           "TextdpAttributeError", "TextdpTypeError", "TextdpValueError", "TextdpWarning"]
