"""The architecture, kept by a test: the top-level folders and textdp's wings import only downward, and no
folder holds an import cycle (issue 26, item 4).

Every import counts, also those inside functions: a deferred import that runs back up is still a
dependency that runs back up.

Top-level folders, lowest first: ``textdp`` (the core: no Beam), ``transforms`` (Beam PTransforms and
DoFns over the core), ``pipelines`` (the jobs and their flags), ``templates`` (Flex Templates over the
jobs); ``benchmarks`` may use any of those; ``tests`` may use anything, and nothing imports tests.

The adapter packages ``textdp.transforms`` and ``textdp.pipelines`` (issue 27, item 5) are the namespaced names of
``transforms`` and ``pipelines``: they live inside ``textdp/`` but form their own layer on top of the jobs, outside
the core's rules (they import Beam through what they re-export). Nothing in textdp, transforms or pipelines imports
them, so ``import textdp`` never loads Beam; templates, benchmarks and tests may.

textdp's wings, lowest first (a module may import its own wing and the ones below):

* the floor: ``errors``, ``version``, ``progress``, ``allocator``, ``paths`` (the one path printer), ``_alias`` (the
  adapters' module names) and the C extension ``_top2``;
* ``text``: words (tokenizer, case, batches), records, the text privatizer that runs any mechanism object;
* ``search``: nearest-word search (exact, int8-prefiltered, Annoy), distances and diameters;
* ``artifact``: the vocabulary artifact, its neighbour table, where it lives (local, cache, gs://);
* ``mechanisms``: the interface, the registry and one module per mechanism;
* ``privacy``: accounting, the privacy statements and the summaries;
* ``calibration``: N_w / S_w statistics and calibrate's report;
* ``audit``: pairs, self-check, attacks, statistics, corpus audit, its report;
* ``ledger``: the exposure ledger (keyed author hashes, epsilon-mass, the SQLAlchemy store, its statements);
* the top: ``api`` (textdp.Privatizer), ``spec`` (the validated run specification), ``outputs`` (the jobs'
  output guard: it knows where the artifact cache is) and the package's ``__init__``.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Set

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ["textdp", "transforms", "pipelines", "templates", "benchmarks", "tests"]
ADAPTERS = ("textdp.transforms", "textdp.pipelines")  # namespaced names of transforms/ and pipelines/: a layer of their own
LAYERS = FOLDERS[:3] + ["adapter"] + FOLDERS[3:]
FOLDER_MAY_IMPORT = {
    "textdp": set(),
    "transforms": {"textdp"},
    "pipelines": {"textdp", "transforms"},
    "adapter": {"textdp", "transforms", "pipelines"},
    "templates": {"textdp", "transforms", "pipelines", "adapter"},
    "benchmarks": {"textdp", "transforms", "pipelines", "templates", "adapter"},
    "tests": {"textdp", "transforms", "pipelines", "templates", "benchmarks", "adapter"},
}


def _folder(module: str) -> str:
    """The layer a module belongs to: its top-level folder, or ``adapter`` for textdp.transforms/pipelines."""
    return "adapter" if any(module == a or module.startswith(a + ".") for a in ADAPTERS) else module.split(".")[0]
FLOOR = {"textdp.errors", "textdp.version", "textdp.progress", "textdp.allocator", "textdp._top2",
         "textdp._alias", "textdp.paths"}  # _alias: the adapter packages' module aliases (no Beam)
WINGS = ["text", "search", "artifact", "mechanisms", "privacy", "calibration", "audit", "ledger"]
TOP = {"textdp", "textdp.api", "textdp.spec", "textdp.outputs"}


def _modules() -> Dict[str, str]:
    found = {}
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, REPO)
                if name.endswith(".py"):
                    found[rel[:-3].replace(os.sep, ".").removesuffix(".__init__")] = path
                elif name.endswith(".c"):  # a C extension: a module without Python imports
                    found[rel[:-2].replace(os.sep, ".")] = ""
    return found


MODULES = _modules()


def _resolve(name: str):
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: str) -> Set[str]:
    if not path:
        return set()
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    deps = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                target = _resolve(f"{node.module}.{alias.name}") or _resolve(node.module)
                if target:
                    deps.add(target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name)
                if target:
                    deps.add(target)
    return deps


GRAPH = {module: _imports(path) - {module} for module, path in MODULES.items()}


def _level(module: str) -> int:
    """textdp's layer of ``module``: 0 the floor, 1.. the wings in order, then the top."""
    if module in FLOOR:
        return 0
    if module in TOP:
        return len(WINGS) + 1
    parts = module.split(".")
    assert len(parts) >= 2 and parts[1] in WINGS, f"{module} is in no wing: add it to one (or to the floor)"
    return WINGS.index(parts[1]) + 1


def test_every_core_module_sits_in_a_wing_or_on_the_floor():
    for module in MODULES:
        if _folder(module) == "textdp":
            _level(module)


@pytest.mark.parametrize("folder", LAYERS)
def test_folders_import_only_downward(folder):
    wrong = sorted(f"{module} -> {dep}" for module, deps in GRAPH.items() if _folder(module) == folder
                   for dep in deps if _folder(dep) != folder and _folder(dep) not in FOLDER_MAY_IMPORT[folder])
    assert not wrong, "imports that run back up:\n" + "\n".join(wrong)


def test_the_adapter_packages_exist_and_nothing_below_them_imports_them():
    assert set(ADAPTERS) <= set(MODULES)
    assert all(_folder(a) == "adapter" for a in ADAPTERS) and _folder("textdp.api") == "textdp"
    assert "adapter" not in FOLDER_MAY_IMPORT["textdp"] | FOLDER_MAY_IMPORT["transforms"] | FOLDER_MAY_IMPORT["pipelines"]


def test_core_wings_import_only_their_own_wing_or_below():
    wrong = sorted(f"{module} -> {dep}" for module, deps in GRAPH.items() if _folder(module) == "textdp"
                   for dep in deps if _folder(dep) == "textdp" and _level(dep) > _level(module))
    assert not wrong, "imports that run back up a wing:\n" + "\n".join(wrong)


def test_the_core_never_imports_beam():
    for module, path in MODULES.items():
        if _folder(module) == "textdp" and path:
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
            names += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
            assert not any(name.split(".")[0] == "apache_beam" for name in names), module


def _cycles(graph: Dict[str, Set[str]]):
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components, iterative over the small graph
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[current])
                if low[current] == index[current]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("folder", LAYERS)
def test_no_import_cycle_in_any_folder(folder):
    inside = {m: {d for d in deps if _folder(d) == folder} for m, deps in GRAPH.items() if _folder(m) == folder}
    assert not _cycles(inside), f"import cycles in {folder}/: {_cycles(inside)}"
