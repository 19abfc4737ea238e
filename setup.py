"""Packaging for textdp. Dependencies are read from requirements*.txt (the single place they are pinned)."""

import os
import re

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _requirements(name):
    """The requirements listed in ``name``, following ``-r other.txt`` includes (as pip does)."""
    found = []
    with open(os.path.join(HERE, name), encoding="utf-8") as handle:
        for line in handle:
            line = line.split("#")[0].strip()
            if line.startswith("-r "):
                found += [req for req in _requirements(line[3:].strip()) if req not in found]
            elif line and line not in found:
                found.append(line)
    return found


setup(
    name="textdp",
    version=re.search(r'__version__ = "([^"]+)"', open(os.path.join(HERE, "textdp", "version.py"), encoding="utf-8").read()).group(1),
    description="Word-level metric differential privacy for text corpora, as Apache Beam pipelines",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["textdp", "textdp.*", "transforms", "transforms.*", "pipelines", "pipelines.*"]),
    install_requires=_requirements("requirements.txt"),
    # The base install runs locally without the GCP stack; [gcp]: gs:// and Dataflow; [pandas]: pandas Beam supports;
    # [test]: everything the test suite needs, both extras included (requirements-test.txt includes their files).
    extras_require={"gcp": _requirements("requirements-gcp.txt"), "pandas": _requirements("requirements-pandas.txt"),
                    "ledger-postgres": _requirements("requirements-ledger-postgres.txt"),
                    "test": _requirements("requirements-test.txt")},
    entry_points={"console_scripts": ["textdp = textdp.pipelines.cli:main"]},
    # The int8-prefiltered exact nearest-word search (textdp/search/int8_search.py). Optional: without a C
    # compiler the install still succeeds and the exact search falls back to BLAS (textdp/search/nearest.py).
    ext_modules=[Extension("textdp._top2", ["textdp/_top2.c"], extra_compile_args=["-O3"], optional=True)],
)
