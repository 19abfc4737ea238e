"""Docs that run: every fenced shell and Python block of README.md and docs/*.md is run or parsed.

Blocks are found by their fence's language: ``bash``, ``sh``, ``shell`` and ``console`` are shell,
``python`` is Python; every other fence is output or illustration (```text, ```json, ```toml) and is
not executed. A fence without a language is refused: say what it is.

One marker vocabulary, an HTML comment on the line before the fence::

    <!-- docs-test: parse-only (why it cannot run here) -->

A block so marked is not run (a Dataflow or Flink submission, gs://, a Flex Template build, the test
suite itself, an install, hours of benchmark). It is still parsed: a shell block by ``bash -n``, and
every ``textdp <job> ...`` (or ``python -m textdp.pipelines.cli <job> ...``) command in it by that job's
real flag parser (``pipelines.jobs.parse_job_options``, build-index's argparse parser), so a misspelt
flag fails the test; a ``python -m benchmarks.<...>`` command by the benchmark's own argparse parser;
a Python block by ``compile()``.

Every other block runs, in a fresh temporary working directory per doc page holding a copy of
``examples/`` (so the doc's relative paths work as written and pages do not see each other's
outputs), with ``TEXTDP_CACHE_DIR`` the one cache of the session fixture ``docs_cache`` (the default
artifact is built there at most once, by ``ensure_default_artifact``, and every page reuses it) and
``PYTHONPATH`` this checkout. Shell blocks run in ``bash -e -o pipefail`` with ``textdp`` on the PATH
as this checkout's CLI: a Beam job (``JOBS[name].beam``) given without ``--runner`` gets ``--runner FnApiRunner`` appended
(the jobs' default anyway); the command is otherwise the doc's. ``pip install ...`` and
``python -m pip install ...`` are skipped (they would reinstall the package under test) and only parsed:
the README's quick start thus runs its ``textdp privatize`` part. The Python blocks of one page share
state (a later block uses what an earlier one defined, as a reader runs them in turn), so they are
concatenated in page order and run as one program in a subprocess with a timeout.

The counts of blocks run and parsed-only per file are printed (``-s`` shows them) and every
executable block must be one or the other.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python"}
INERT = {"text", "json", "toml", "yaml", "ini", "csv", "html"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>[a-z-]+)\s*\((?P<why>[^)]+)\)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[^`\s]*)\s*$")
BLOCK_TIMEOUT = 240


def doc_files():
    return [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


@dataclass
class Block:
    path: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str  # "" (run) or "parse-only"
    why: str

    @property
    def where(self) -> str:
        return f"{os.path.relpath(self.path, REPO)}:{self.line}"


def blocks_of(path):
    """Every fenced block of a markdown file, with the docs-test marker of the line before it."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, lang = match.group("indent"), match.group("lang").lower()
        end = i + 1
        while end < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[end]):
            end += 1
        assert end < len(lines), f"{path}:{i + 1}: unclosed fence"
        body = textwrap.dedent("\n".join(lines[i + 1:end])) + "\n"
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        kind, why = (marker.group("kind"), marker.group("why")) if marker else ("", "")
        assert kind in ("", "parse-only"), f"{path}:{i}: unknown docs-test marker {kind!r} (the one kind: parse-only)"
        found.append(Block(path, i + 1, lang, body, kind, why))
        i = end + 1
    return found


def all_blocks():
    return [block for path in doc_files() for block in blocks_of(path)]


# --- parsing commands -------------------------------------------------------------------------------


def shell_commands(code: str):
    """The simple commands of a shell block, as argument lists: continuation lines joined, comments dropped,
    split at ``&&``, ``||``, ``;``, ``|`` and ``&``; leading variable assignments, ``nice -n N`` and
    ``timeout N`` removed."""
    text = code.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current = []
        for token in lexer:
            if token in ("&&", "||", ";", "|", "&", ";;"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    out = []
    for words in commands:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        while words and words[0] in ("nice", "timeout"):
            words = words[1:]
            if words[:1] == ["-n"]:
                words = words[2:]
            elif words and re.match(r"^-?\d", words[0]):
                words = words[1:]
        if words:
            out.append(words)
    return out


def textdp_argv(words):
    """``[job, flags...]`` of a textdp command, or None."""
    if words[0] == "textdp":
        return words[1:]
    if words[0] in ("python", "python3") and words[1:3] in (["-m", "pipelines.cli"], ["-m", "textdp.pipelines.cli"]):
        return words[3:]
    return None


def parse_textdp(argv) -> None:
    """The job's real flag parser, as ``textdp`` runs it before anything starts; AssertionError if it refuses."""
    from pipelines.jobs import JOBS, JobRefused, parse_job_options

    assert argv, "textdp without a command"
    name, flags = argv[0], argv[1:]
    assert name in JOBS, f"unknown textdp command {name!r}"
    if "--help" in flags or "-h" in flags:
        return
    if not JOBS[name].beam:
        import importlib

        parser = importlib.import_module(JOBS[name].module).build_parser()
        try:
            parser.parse_args(flags)
        except SystemExit as exc:
            raise AssertionError(f"textdp {name} refuses its flags: {' '.join(flags)}") from exc
        return
    try:
        parse_job_options(name, flags)
    except JobRefused as exc:
        raise AssertionError(f"textdp {name}: {exc}") from exc


def parse_benchmark(words) -> bool:
    """``python -m benchmarks.<module> ...``: the module's argparse parser, built by running its ``main`` with
    ``--help``-free arguments up to ``parse_args`` (argparse errors exit 2). True when it was one."""
    if words[0] not in ("python", "python3") or words[1:2] != ["-m"] or not words[2].startswith("benchmarks."):
        return False
    import argparse
    import importlib

    module = importlib.import_module(words[2])
    parsed = {}

    class Parsed(Exception):
        pass

    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        parsed["args"] = original(self, args, namespace)
        raise Parsed

    argparse.ArgumentParser.parse_args = capture
    try:
        module.main(words[3:])
    except Parsed:
        pass
    except SystemExit as exc:
        raise AssertionError(f"{words[2]} refuses its flags: {' '.join(words[3:])}") from exc
    finally:
        argparse.ArgumentParser.parse_args = original
    assert "args" in parsed, f"{words[2]}.main did not parse its arguments"
    return True


def parse_shell(block: Block) -> int:
    """bash -n, then every textdp and benchmark command's real parser; returns how many commands were parsed."""
    code = console_code(block) if block.lang == "console" else block.code
    result = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True)
    assert result.returncode == 0, f"{block.where}: bash -n: {result.stderr}"
    parsed = 0
    for words in shell_commands(code):
        argv = textdp_argv(words)
        if argv is not None:
            parse_textdp(argv)
            parsed += 1
        elif parse_benchmark(words):
            parsed += 1
    return parsed


def console_code(block: Block) -> str:
    return "\n".join(line[2:] for line in block.code.splitlines() if line.startswith("$ ")) + "\n"


# --- running ----------------------------------------------------------------------------------------

TEXTDP_SCRIPT = """#!/bin/bash
# textdp of this checkout; a Beam job without --runner gets --runner FnApiRunner (the docs test)
extra=()
case " $* " in
  *" --runner"*|*" --help "*|*" -h "*) ;;
  *) case " {beam_jobs} " in *" $1 "*) extra=(--runner FnApiRunner) ;; esac ;;
esac
exec "{python}" -m pipelines.cli "$@" "${{extra[@]}}"
"""

PYTHON_SCRIPT = """#!/bin/bash
# python, except 'python -m pip install ...': skipped (it would reinstall the package under test)
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "docs-test: skipped: python $*" >&2; exit 0; fi
exec "{python}" "$@"
"""

PIP_SCRIPT = """#!/bin/bash
echo "docs-test: skipped: pip $*" >&2
"""


@pytest.fixture(scope="session")
def docs_cache():
    """The one textdp cache of the session: the default artifact built there at most once (ensure_default_artifact:
    under a file lock, reused when it is there), so no doc page builds it again."""
    from textdp.artifact.store import ensure_default_artifact

    path = ensure_default_artifact()
    return os.path.dirname(os.path.dirname(path))  # <cache>/artifacts/<name>


@pytest.fixture(scope="session")
def docs_bin(tmp_path_factory):
    from pipelines.jobs import JOBS

    beam_jobs = " ".join(name for name, job in JOBS.items() if job.beam)  # build-index and ledger take no --runner
    directory = tmp_path_factory.mktemp("docs-bin")
    for name, script in (("textdp", TEXTDP_SCRIPT), ("python", PYTHON_SCRIPT), ("python3", PYTHON_SCRIPT), ("pip", PIP_SCRIPT)):
        path = directory / name
        path.write_text(script.format(python=sys.executable, beam_jobs=beam_jobs))
        path.chmod(0o755)
    return str(directory)


def page_dir(tmp_path_factory, path) -> str:
    directory = tmp_path_factory.mktemp("docs-" + os.path.splitext(os.path.basename(path))[0].lower())
    shutil.copytree(os.path.join(REPO, "examples"), directory / "examples")
    return str(directory)


def environment(docs_cache, docs_bin):
    env = dict(os.environ)
    env.update(TEXTDP_CACHE_DIR=docs_cache, PYTHONPATH=REPO, PATH=docs_bin + os.pathsep + env.get("PATH", ""),
               MPLBACKEND="Agg", OPENBLAS_NUM_THREADS=env.get("OPENBLAS_NUM_THREADS", "1"))
    env.pop("TEXTDP_PROGRESS_DIR", None)
    return env


def run(command, cwd, env, where, stdin=None):
    try:
        result = subprocess.run(command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                                timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{where}: still running after {BLOCK_TIMEOUT} s") from exc
    assert result.returncode == 0, (f"{where}: exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}"
                                    f"\n--- stderr\n{result.stderr[-3000:]}")
    return result


PAGES = [os.path.relpath(path, REPO) for path in doc_files()]


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs_or_is_parsed(page, docs_cache, docs_bin, tmp_path_factory):
    """Runs the page's shell blocks one by one and its Python blocks as one program, in page order of each kind;
    parses the parse-only ones; fails on a fence without a language. Prints the counts."""
    path = os.path.join(REPO, page)
    blocks = blocks_of(path)
    bare = [block.where for block in blocks if block.lang == ""]
    assert not bare, f"fences without a language (use ```text for output): {bare}"
    unknown = [f"{block.where} ({block.lang})" for block in blocks if block.lang not in SHELL | PYTHON | INERT]
    assert not unknown, f"fences of an unknown language: {unknown}"
    stray = [block.where for block in blocks if block.marker and block.lang not in SHELL | PYTHON]
    assert not stray, f"docs-test markers on blocks that are not executable: {stray}"
    cwd = page_dir(tmp_path_factory, path)
    env = environment(docs_cache, docs_bin)
    counts = {"run": 0, "parse-only": 0, "commands parsed": 0}
    python_parts = []
    for block in blocks:
        if block.lang in SHELL:
            counts["commands parsed"] += parse_shell(block)  # also the ones that run: bash -n and the flags
            if block.marker == "parse-only":
                counts["parse-only"] += 1
                continue
            code = console_code(block) if block.lang == "console" else block.code
            run(["bash", "-e", "-o", "pipefail", "-c", code], cwd, env, block.where)
            counts["run"] += 1
        elif block.lang in PYTHON:
            compile(block.code, block.where, "exec")
            if block.marker == "parse-only":
                counts["parse-only"] += 1
                continue
            python_parts.append(f"# --- {block.where}\nprint({block.where!r}, file=__import__('sys').stderr)\n{block.code}")
            counts["run"] += 1
    if python_parts:
        program = os.path.join(cwd, "docs_blocks.py")
        with open(program, "w", encoding="utf-8") as handle:
            handle.write("\n".join(python_parts))
        run([sys.executable, program], cwd, env, f"{page} (Python blocks)")
    executable = [block for block in blocks if block.lang in SHELL | PYTHON]
    assert counts["run"] + counts["parse-only"] == len(executable)
    print(f"\n{page}: {counts['run']} blocks run, {counts['parse-only']} parse-only, "
          f"{counts['commands parsed']} textdp/benchmark commands parsed, {len(blocks) - len(executable)} output blocks")


def test_the_marker_vocabulary_is_one_kind_with_a_reason():
    """Every docs-test comment in the docs is ``<!-- docs-test: parse-only (reason) -->`` before an executable fence."""
    bad = []
    for path in doc_files():
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        for number, line in enumerate(lines, 1):
            if "docs-test" in line:
                nxt = FENCE.match(lines[number]) if number < len(lines) else None
                if not MARKER.match(line) or not nxt or nxt.group("lang") not in SHELL | PYTHON:
                    bad.append(f"{os.path.relpath(path, REPO)}:{number}")
    assert not bad, f"docs-test comments not of the form '<!-- docs-test: parse-only (why) -->' before a fence: {bad}"


def test_a_misspelt_flag_fails_the_parse():
    """The parse-only check is real: a misspelt flag or a missing required flag is refused by the job's parser."""
    parse_textdp(["privatize", "--input", "a.txt", "--output", "out/a", "--epsilon", "10"])
    with pytest.raises(AssertionError, match="did you mean --epsilon"):
        parse_textdp(["privatize", "--input", "a.txt", "--output", "out/a", "--epsilom", "10"])
    with pytest.raises(AssertionError, match="missing required"):
        parse_textdp(["calibrate", "--epsilons", "1,2"])
    with pytest.raises(AssertionError, match="refuses its flags"):
        parse_textdp(["build-index", "--output", "x", "--vocab-sise", "5"])
    block = Block("x.md", 1, "bash", "textdp privatize --runner=DataflowRunner --input=gs://b/x --output=gs://b/y \\\n"
                  "  --epsilon=10 --tempp_location=gs://b/tmp\n", "parse-only", "needs Dataflow")
    with pytest.raises(AssertionError, match="unrecognized argument --tempp_location"):
        parse_shell(block)
    assert parse_benchmark(["python", "-m", "benchmarks.utility.run", "--train", "10"])
    with pytest.raises(AssertionError, match="refuses its flags"):
        parse_benchmark(["python", "-m", "benchmarks.utility.run", "--trian", "10"])


def test_no_job_help_has_a_backtick():
    """``textdp <job> --help`` and ``textdp --help`` are plain text: no markdown backticks."""
    from pipelines.jobs import JOBS

    env = dict(os.environ, PYTHONPATH=REPO)
    for argv in [["--help"]] + [[name, "--help"] for name in JOBS]:
        result = subprocess.run([sys.executable, "-m", "pipelines.cli", *argv], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "`" not in result.stdout, f"textdp {' '.join(argv)}: " + next(
            line for line in result.stdout.splitlines() if "`" in line)


def test_summaries_show_an_artifact_under_home_as_tilde(monkeypatch, tmp_path):
    """An artifact path under the home directory is written ``~/...`` in summaries and reports (``describe()``), as
    docs/privatize.md's example public summary shows it; other paths, gs:// URLs and a look-alike prefix unchanged."""
    from textdp.artifact.store import display_path

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = str(tmp_path / "home")
    assert display_path(home + "/.cache/textdp/artifacts/a") == "~/.cache/textdp/artifacts/a"
    assert display_path(home) == "~"
    assert display_path(home + "-other/a") == home + "-other/a"
    assert display_path("/var/tmp/a") == "/var/tmp/a"
    assert display_path("gs://bucket" + home + "/a") == "gs://bucket" + home + "/a"


def test_the_documented_public_summary_shows_the_default_artifact_as_its_summary_does(docs_cache):
    """docs/privatize.md's example public summary names the default artifact as a run in the default cache writes it."""
    import json

    from textdp.artifact.locate import open_artifact
    from textdp.artifact.store import ensure_default_artifact

    with open(os.path.join(REPO, "docs", "privatize.md"), encoding="utf-8") as handle:
        text = handle.read()
    example = json.loads(text.split("<!-- example-public-summary -->\n```json\n", 1)[1].split("```", 1)[0])
    described = open_artifact(ensure_default_artifact()).describe()["path"]
    if os.path.realpath(docs_cache) == os.path.realpath(os.path.expanduser("~/.cache/textdp")):
        assert described == example["artifact"]["path"]
    assert described.startswith("~/") or not os.path.abspath(described).startswith(os.path.expanduser("~") + os.sep)


def test_the_mechanism_rows_name_every_registered_mechanism():
    """docs/privatize.md's and docs/calibration.md's ``--mechanism`` rows list the registry's mechanisms (no more "Madlib or
    TEM"): every built-in name, in backticks, so a mechanism added to the registry fails here until the rows name it."""
    from textdp.mechanisms import BUILT_IN

    for page in ("privatize.md", "calibration.md"):
        with open(os.path.join(REPO, "docs", page), encoding="utf-8") as handle:
            row = next(line for line in handle if line.startswith("| `--mechanism` |") or line.startswith("| `--mechanism NAME` |"))
        missing = [name for name in BUILT_IN if f"`{name}`" not in row]
        assert not missing, f"docs/{page}'s --mechanism row does not name {missing}"
