"""Two names for one module: ``textdp.transforms.x`` is the module ``transforms.x`` (issue 27, item 5).

The adapter packages ``textdp.transforms`` and ``textdp.pipelines`` install this finder so that every submodule
of theirs is the already existing module of the top-level folder, not a second copy: one class, one
``isinstance``, one Beam option registry. No Beam import here (the floor): ``textdp.pipelines`` uses it without
importing Beam, so the ``textdp`` command can silence Beam's import-time noise before Beam loads.
"""

import importlib
import importlib.abc
import importlib.util
import sys


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``<alias>.x.y`` as the module ``<target>.x.y`` (one module object, two names)."""

    def __init__(self, alias: str, target: str):
        self.alias, self.target = alias, target

    def _target_of(self, fullname: str) -> str:
        return self.target + fullname[len(self.alias):]

    def find_spec(self, fullname, path=None, target=None):  # importlib's finder interface
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
