"""``textdp.transforms``: textdp's Beam PTransforms and DoFns under the package's own name (issue 27, item 5).

``from textdp.transforms import Privatize`` is the drop-in Beam step. The code lives in the repository's
top-level ``transforms/`` folder; this package is its namespaced name and holds no code of its own: every
submodule is the very same module object (``textdp.transforms.privatize is transforms.privatize``), so
classes, ``isinstance`` checks and Beam's option registry see one copy. The top-level name ``transforms``
stays importable for now and may be deprecated later (docs/api.md).

An adapter on top of the core: ``import textdp`` never imports it (the core has no Beam import;
tests/test_layering.py keeps both rules).
"""

import transforms as _transforms
from textdp._alias import alias_package
from transforms import Privatize, PrivatizeResult  # noqa: F401  (the public names, as transforms/__all__ lists them)

__all__ = list(_transforms.__all__)

alias_package(__name__, "transforms")
