"""Issue 27, items 4 and 5: an install that fits the use, and namespaced imports.

The base install (``pip install textdp``) has no GCP stack: google-cloud-storage and apache-beam[gcp] are the
``[gcp]`` extra. These tests run the real CLI in subprocesses whose imports of the GCP stack really fail: a
``sitecustomize`` on PYTHONPATH puts a meta-path finder first that raises ModuleNotFoundError for every
``google.*`` module but protobuf (all the base install has under ``google``), ``apitools`` and
``googleapiclient``, exactly as a missing distribution does (Beam tells the two apart: an ImportError that is
not a ModuleNotFoundError makes it log a warning). Nothing in textdp is mocked. The extras themselves are read
from the metadata setuptools writes for the repository (``setup.py egg_info``).
"""

import os
import subprocess
import sys
from importlib.metadata import requires, version

import pytest
from packaging.requirements import Requirement

from benchmarks.harness import REPO

GCP_EXTRA_LINE = "gs:// needs the GCP extra: pip install 'textdp[gcp]'"

BLOCKER = '''
import importlib.abc
import sys

KEPT = ("google.protobuf", "google._upb")  # the base install's only modules under google.


class NoGcpExtra(importlib.abc.MetaPathFinder):
    """An install without textdp[gcp]: its modules cannot be found (tests/test_install_extras.py)."""

    def find_spec(self, fullname, path=None, target=None):
        google = fullname.startswith("google.") and not any(fullname == k or fullname.startswith(k + ".") for k in KEPT)
        if google or fullname.split(".")[0] in ("apitools", "googleapiclient", "google_auth_httplib2"):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


sys.meta_path.insert(0, NoGcpExtra())
'''


@pytest.fixture(scope="module")
def no_gcp_env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("no-gcp")
    (folder / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), REPO]), TEXTDP_CACHE_DIR=str(folder / "cache"))
    env.pop("STORAGE_EMULATOR_HOST", None)
    return env


def _python(code, env, timeout=120):
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


# what the installed ``textdp`` console script runs (setup.py's entry point)
ENTRY_POINT = "import sys; from textdp.pipelines.cli import main; sys.exit(main())"


def _textdp(args, env, timeout=300):
    return subprocess.run([sys.executable, "-c", ENTRY_POINT] + args, cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_the_gcp_stack_is_really_missing_in_the_subprocess(no_gcp_env):
    done = _python("import importlib\n"
                   "for name in ('google.cloud.storage', 'google.auth', 'google.api_core', 'apache_beam.io.gcp.gcsio',\n"
                   "             'apache_beam.io.gcp.gcsfilesystem', 'google.cloud.dataflow', 'apitools'):\n"
                   "    try:\n"
                   "        importlib.import_module(name)\n"
                   "        print('present', name)\n"
                   "    except ImportError:\n"
                   "        print('missing', name)\n"
                   "import google.protobuf, apache_beam\n", no_gcp_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [f"missing {name}" for name in (
        "google.cloud.storage", "google.auth", "google.api_core", "apache_beam.io.gcp.gcsio",
        "apache_beam.io.gcp.gcsfilesystem", "google.cloud.dataflow", "apitools")]


def test_the_core_and_the_python_api_run_without_gcp_and_without_beam(no_gcp_env, tiny_artifact_dir):
    done = _python("import sys, textdp\n"
                   f"p = textdp.Privatizer(epsilon=10, artifact={tiny_artifact_dir!r})\n"
                   "out = p.privatize(['the film was good', 'a long day'], seed=1)\n"
                   "assert len(out) == 2 and all(isinstance(t, str) for t in out), out\n"
                   "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('apache_beam', 'transforms', "
                   "'pipelines') or m.startswith(('textdp.transforms', 'textdp.pipelines', 'google.cloud.', 'google.auth')))\n"
                   "print(loaded)\n", no_gcp_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # import textdp loads neither Beam nor the adapter packages
    done = _python("import sys, textdp.pipelines.cli\nprint([m for m in sys.modules if m.startswith('apache_beam')])",
                   no_gcp_env)
    assert done.stdout.strip() == "[]", done.stderr  # the command quiets Beam's import noise before Beam loads


def test_the_quick_start_runs_without_gcp(no_gcp_env, tiny_artifact_dir, tmp_path):
    """README's quick start through the console script's entry point (with the small test artifact instead of the
    391k-word default) on an install whose GCP modules cannot be imported: it runs, and Beam's import-time warning
    about the missing GCP stack ("apitools not found ...") is not shown."""
    done = _textdp(["privatize", "--input", "examples/reviews.txt", "--output", str(tmp_path / "out" / "reviews"),
                    "--epsilon", "10", "--artifact", tiny_artifact_dir], no_gcp_env)
    assert done.returncode == 0, done.stderr
    assert "records: 30 in, 30 out, 0 failed" in done.stdout
    assert "Traceback" not in done.stderr and "apitools" not in done.stderr and "GCSFileSystem" not in done.stderr
    with open(tmp_path / "out" / "reviews-00000-of-00001.txt", encoding="utf-8") as handle:
        assert len(handle.read().splitlines()) == 30


@pytest.mark.parametrize("overrides, extra, line", [
    ({"--input": "gs://textdp-bucket/reviews.txt"}, [], GCP_EXTRA_LINE),
    ({"--output": "gs://textdp-bucket/out/reviews"}, [], GCP_EXTRA_LINE),
    ({"--artifact": "gs://textdp-bucket/artifact"}, [], GCP_EXTRA_LINE),
    ({}, ["--runner", "DataflowRunner", "--temp_location", "gs://textdp-bucket/tmp"],
     "--runner DataflowRunner needs the GCP extra: pip install 'textdp[gcp]'"),
    ({}, ["--runner", "DataflowRunner", "--dry_run=True"],
     "--runner DataflowRunner needs the GCP extra: pip install 'textdp[gcp]'"),
])
def test_gcs_and_dataflow_without_the_extra_are_refused_in_one_line(no_gcp_env, tiny_artifact_dir, tmp_path, overrides,
                                                                      extra, line):
    flags = {"--input": "examples/reviews.txt", "--output": str(tmp_path / "out" / "reviews"),
             "--artifact": tiny_artifact_dir, "--epsilon": "10", **overrides}
    done = _textdp(["privatize"] + [x for pair in flags.items() for x in pair] + extra, no_gcp_env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"textdp privatize: error: {line}"]
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_namespaced_imports_are_the_same_modules():
    import pipelines.cli
    import pipelines.privatize
    import textdp.pipelines
    import textdp.pipelines.privatize
    import textdp.transforms
    import textdp.transforms.privatize
    import transforms
    import transforms.privatize

    assert textdp.transforms.Privatize is transforms.Privatize is transforms.privatize.Privatize
    assert textdp.transforms.privatize is transforms.privatize  # one module object: one class, one option registry
    assert textdp.pipelines.privatize is pipelines.privatize
    assert textdp.pipelines.main is pipelines.cli.main
    from textdp.pipelines.cli import main
    from textdp.transforms import PrivatizeResult

    assert main is pipelines.cli.main and PrivatizeResult is transforms.PrivatizeResult
    with pytest.raises(ModuleNotFoundError):
        import textdp.transforms.no_such_module


def test_python_m_textdp_pipelines_cli_is_the_command():
    done = subprocess.run([sys.executable, "-m", "textdp.pipelines.cli", "--version"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    from textdp.version import __version__

    assert done.stdout.strip() == f"textdp {__version__}"


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    """The requirements setuptools records for this repository: {"": base, "gcp": ..., "pandas": ..., "test": ...}."""
    base = tmp_path_factory.mktemp("egg")
    done = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(base)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with open(base / "textdp.egg-info" / "requires.txt", encoding="utf-8") as handle:
        sections, current = {"": []}, ""
        for line in handle.read().splitlines():
            if line.startswith("["):
                current = line.strip("[]")
                sections[current] = []
            elif line.strip():
                sections[current].append(Requirement(line))
    with open(base / "textdp.egg-info" / "entry_points.txt", encoding="utf-8") as handle:
        sections["entry_points"] = handle.read()
    return sections


def test_the_base_install_has_no_gcp_stack_and_the_extras_have_it(declared):
    base = {req.name: req for req in declared[""]}
    assert not [name for name in base if name.startswith("google")]
    assert base["apache-beam"].extras == set() and str(base["apache-beam"].specifier) == "==2.77.0"
    gcp = {req.name: req for req in declared["gcp"]}
    assert gcp["apache-beam"].extras == {"gcp"} and gcp["apache-beam"].specifier == base["apache-beam"].specifier
    assert "google-cloud-storage" in gcp
    test = {str(req) for req in declared["test"]}
    assert {str(req) for req in declared["gcp"] + declared["pandas"]} <= test  # the suite needs both extras
    assert "textdp = textdp.pipelines.cli:main" in declared["entry_points"]


def test_the_pandas_extra_is_what_beam_supports(declared):
    """Beam's own metadata says which pandas its dataframe layer (ReadFromCsv) supports: the extra allows no more."""
    (pandas,) = declared["pandas"]
    beams = [Requirement(r) for r in requires("apache-beam") if r.startswith("pandas") and 'extra == "dataframe"' in r]
    assert beams, "Beam no longer declares a pandas range for its dataframe extra"
    for candidate in ("2.2.0", "2.3.3", "2.4.0", "2.5.0", "3.0.0", "3.1.0"):
        if pandas.specifier.contains(candidate):
            assert beams[0].specifier.contains(candidate), f"[pandas] allows {candidate}, which Beam does not support"
    assert pandas.specifier.contains(version("pandas")), "the installed pandas is outside the [pandas] extra"


def test_every_requirement_is_bounded(declared):
    for section, reqs in declared.items():
        if section == "entry_points":
            continue
        unbounded = [str(req) for req in reqs if not any(spec.operator in ("==", "<", "<=", "~=")
                                                         for spec in req.specifier)]
        assert not unbounded, f"[{section or 'base'}] requirements without an upper bound or pin: {unbounded}"


def test_the_template_image_gets_every_requirements_file_and_the_gcp_extra():
    """setup.py reads every requirements*.txt (the extras): the image's wheel build needs them all copied, and its
    workers need the [gcp] extra (gs:// and Dataflow)."""
    with open(os.path.join(REPO, "templates", "Dockerfile"), encoding="utf-8") as handle:
        dockerfile = handle.read()
    files = sorted(name for name in os.listdir(REPO) if name.startswith("requirements") and name.endswith(".txt"))
    assert {"requirements.txt", "requirements-gcp.txt", "requirements-pandas.txt", "requirements-test.txt"} <= set(files)
    copies = [line for line in dockerfile.splitlines() if line.startswith("COPY requirements.txt")]
    assert len(copies) == 2 and all(set(files) <= set(line.split()) for line in copies), copies
    assert "-r requirements.txt -r requirements-gcp.txt" in dockerfile
    with open(os.path.join(REPO, "MANIFEST.in"), encoding="utf-8") as handle:
        assert set(files) <= set(handle.read().split())  # the sdist too


def test_no_module_imports_the_gcp_stack_at_import_time():
    """Every import of google.* (but protobuf) or apache_beam.io.gcp in textdp/, transforms/ and pipelines/ sits inside
    a function, so the base install imports every module; the refusals above cover the functions that need them."""
    import ast

    def module_level_imports(node):  # every import not inside a function (classes, try and if blocks included)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.module or ""
        for child in ast.iter_child_nodes(node):
            yield from module_level_imports(child)

    found = []
    for folder in ("textdp", "transforms", "pipelines"):
        for dirpath, _, files in os.walk(os.path.join(REPO, folder)):
            for name in (f for f in files if f.endswith(".py")):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read(), path)
                found += [f"{os.path.relpath(path, REPO)}: {n}" for n in module_level_imports(tree)
                          if (n.startswith("google.") and not n.startswith("google.protobuf"))
                          or n.startswith("apache_beam.io.gcp")]
    assert not found, found
