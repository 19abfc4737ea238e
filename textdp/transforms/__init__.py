"""``textdp.transforms``: textdp's Beam PTransforms and DoFns under the package's own name (issue 27, item 5).

``from textdp.transforms import Privatize`` is the drop-in Beam step. The code lives in the repository's
top-level ``transforms/`` folder; this package is its namespaced name and holds no code of its own: every
submodule is the very same module object (``textdp.transforms.privatize is transforms.privatize``), so
classes, ``isinstance`` checks and Beam's option registry see one copy. The top-level name ``transforms``
stays importable for now and may be deprecated later (docs/api.md).

An adapter on top of the core: ``import textdp`` never imports it (the core has no Beam import;
tests/test_layering.py keeps both rules).
"""

import importlib
import importlib.abc
import importlib.util
import sys

import transforms as _transforms
from transforms import *  # the public names: Privatize, PrivatizeResult

__all__ = list(_transforms.__all__)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``<alias>.x.y`` as the already existing module ``<target>.x.y`` (one module object, two names)."""

    def __init__(self, alias: str, target: str):
        self.alias, self.target = alias, target

    def _target_of(self, fullname: str) -> str:
        return self.target + fullname[len(self.alias):]

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(self.alias + "."):
            return None
        real = importlib.util.find_spec(self._target_of(fullname))
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=real.submodule_search_locations is not None)

    def create_module(self, spec):
        return importlib.import_module(self._target_of(spec.name))

    def exec_module(self, module):  # already executed under its own name
        return None

    def get_code(self, fullname):  # ``python -m textdp.pipelines.cli`` runs the target module's code
        return importlib.util.find_spec(self._target_of(fullname)).loader.get_code(self._target_of(fullname))


def alias_package(alias: str, target: str) -> None:
    """Make ``import <alias>.x`` give module ``<target>.x`` (installed once per alias)."""
    if not any(isinstance(f, _Alias) and f.alias == alias for f in sys.meta_path):
        sys.meta_path.append(_Alias(alias, target))


alias_package(__name__, "transforms")
