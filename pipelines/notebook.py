"""``calibrate`` and ``audit`` from Python: the jobs' own pipelines, their tables as pandas DataFrames.

    from pipelines.notebook import audit, calibrate
    result = calibrate(epsilons=[5, 10, 20], mechanism="madlib", words=200, samples=500)
    result.table              # per_word.parquet: one row per word and epsilon (N_w, S_w, ...)
    result.recommendation     # summary.json's recommendation (recommended_epsilon, message)
    result.plot()             # the job's PNG plots, as matplotlib figures

Each call runs the job exactly as ``textdp calibrate`` / ``textdp audit`` would (``pipelines.jobs.run_job``:
the same flag parser, the same checks before any worker starts, the same pipeline on the local runner, the
same files) into a temporary directory, reads the outputs into memory and removes the directory (give
``output=`` to keep the files). So there is no second implementation of any statistic, and every keyword is
the job's flag of the same name (``max_nw`` is ``--max-nw``; a list is comma-joined; ``True`` is a bare
switch such as ``no_prune=True``; ``None`` and ``False`` leave the flag out).

Why here and not in ``textdp``: these entry points run Beam pipelines, and the core package never imports
Beam or anything above it (tests/test_layering.py counts deferred imports too). This module is the adapter,
on the ``pipelines`` level. A refusal of the job (what the command prints as ``textdp <job>: error: ...``
and exit code 2) raises ``TextdpValueError`` with that line; a run that fails raises ``TextdpError``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Optional

from pipelines.jobs import EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, run_job
from textdp.errors import TextdpError, TextdpTypeError, TextdpValueError
from textdp.progress import console_write


class _Tee(io.TextIOBase):
    """stderr as it was (the job's progress line stays visible), also kept to find the job's error line."""

    def __init__(self, stream):
        super().__init__()
        self.stream, self.kept = stream, []

    def write(self, text):
        self.kept.append(text)
        if self.stream is not None:  # stderr None (pythonw, a service) or closed: kept only, never an AttributeError
            console_write(text, self.stream)
        return len(text)

    def flush(self):
        pass  # console_write flushes each write

    def isatty(self):
        return bool(getattr(self.stream, "isatty", lambda: False)())


def flag_arguments(flags: dict) -> list:
    """Keywords -> the job's command-line arguments (``max_nw=0.5`` -> ``--max-nw=0.5``)."""
    argv = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            argv.append(f"{flag}={value}")
    return argv


def _run(job: str, output: str, flags: dict, temporary: bool = False) -> None:
    from textdp.mechanisms import mechanism_reference

    if flags.get("mechanism") is not None and not isinstance(flags["mechanism"], str):
        flags = dict(flags, mechanism=mechanism_reference(flags["mechanism"]))  # a Mechanism class: its import path
        if not isinstance(flags["mechanism"], str):
            raise TextdpTypeError(f"{job}: mechanism= must be a name or an import path package.module:Class, or a "
                                  "class importable by that path (the job's workers import it)")
    argv = [f"--output={output}"] + flag_arguments(flags)
    tee = _Tee(sys.stderr)
    saved, sys.stderr = sys.stderr, tee
    try:  # the job's closing lines name files in a directory about to be removed: not shown for a temporary one
        with contextlib.redirect_stdout(io.StringIO()) if temporary else contextlib.nullcontext():
            code = run_job(job, argv)
    finally:
        sys.stderr = saved
    if code == EXIT_OK:
        return
    if code == EXIT_INTERRUPTED:  # Ctrl-C / the notebook's interrupt: the job removed its temporary files
        raise KeyboardInterrupt(f"textdp {job} was interrupted")
    prefix = f"textdp {job}: error: "
    lines = [line for line in "".join(tee.kept).splitlines() if line.startswith(prefix)]
    message = lines[-1][len(prefix):] if lines else f"the {job} job ended with exit code {code}"
    if temporary and code != EXIT_REFUSED:
        message += " (the temporary output directory is removed: give output= to keep a failed run's files)"
    raise (TextdpValueError if code == EXIT_REFUSED else TextdpError)(f"{job}: {message}")


def _outputs(job: str, output: Optional[str], flags: dict, read):
    """Run ``job`` into ``output`` (or a temporary directory, removed afterwards) and ``read`` it."""
    keep = output is not None
    directory = output if keep else tempfile.mkdtemp(prefix=f"textdp-{job}-")
    target = directory if keep else os.path.join(directory, "out")
    try:
        _run(job, target, flags, temporary=not keep)
        return read(target)
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


def _read_png_files(directory: str) -> Dict[str, bytes]:
    images = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".png"):
            with open(os.path.join(directory, name), "rb") as handle:
                images[name[:-4]] = handle.read()
    return images


def _figures(images: Dict[str, bytes]) -> dict:
    """The job's PNG plots as matplotlib figures (pixel for pixel the files the command writes)."""
    from matplotlib import image as mpimg
    from matplotlib.figure import Figure

    figures = {}
    for name, data in images.items():
        pixels = mpimg.imread(io.BytesIO(data), format="png")
        height, width = pixels.shape[:2]
        figure = Figure(figsize=(width / 100, height / 100), dpi=100)
        axes = figure.add_axes((0, 0, 1, 1))
        axes.imshow(pixels)
        axes.set_axis_off()
        figures[name] = figure
    return figures


def _kind(value) -> str:
    """The kind of ``value`` in a message: its type's name (pandas.DataFrame, bytes, dict, ...), never its content."""
    cls = type(value)
    module = cls.__module__.split(".")[0]
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _strings(values, name: str, what: str) -> list:
    """The items of ``values`` (a list or tuple, or a pandas Series: what the docstrings promise) as a list of str,
    missing values (None, NaN, pandas' NA) left out. TextdpTypeError naming the kind of a container or item that is
    neither (a DataFrame, a dict, a set, bytes, a number, a Decimal), never its content: a dict would have given its
    keys, bytes their byte values, a DataFrame its column names."""
    if isinstance(values, (str, os.PathLike)):  # (the callers took these as a path already)
        raise TextdpTypeError(f"{name}= is a path here, not {_kind(values)}")
    series = type(values).__module__.startswith("pandas") and type(values).__name__ == "Series"
    if not (isinstance(values, (list, tuple)) or series):
        raise TextdpTypeError(f"{name}= takes a path or a list of {what} (a str or os.PathLike path; a list, tuple or "
                              f"pandas Series of str), not a {_kind(values)}")
    out = []
    for position, item in enumerate(values.tolist() if series else values):
        if item is None or (isinstance(item, float) and item != item) or _is_pandas_missing(item):
            continue
        if not isinstance(item, str):
            raise TextdpTypeError(f"{name}= holds a {_kind(item)} at position {position:,}; each item is a str "
                                  f"({what[:-1]})")
        out.append(item)
    return out


def _is_pandas_missing(item) -> bool:
    cls = type(item)
    return cls.__module__.startswith("pandas") and cls.__name__ in ("NAType", "NaTType")


def _texts_file(texts, directory: str, name: str) -> str:
    """A list, tuple or pandas Series of texts -> a JSONL file of ``{"text": ...}`` records (missing values left
    out); anything else refused (``_strings``)."""
    path = os.path.join(directory, f"{name}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        for text in _strings(texts, name, "texts"):
            handle.write(json.dumps({"text": text}) + "\n")
    return path


@dataclass
class CalibrationResult:
    """What ``textdp calibrate`` wrote: ``table`` (per_word.parquet), ``summary`` (summary.json), the plots."""

    table: object  # pandas.DataFrame
    summary: dict
    images: Dict[str, bytes] = field(repr=False)
    output: Optional[str] = None  # the directory, when output= was given

    @property
    def recommendation(self) -> dict:
        return self.summary["recommendation"]

    @property
    def recommended_epsilon(self) -> Optional[float]:
        return self.recommendation["recommended_epsilon"]

    def plot(self) -> dict:
        """name -> matplotlib Figure: hist_n_w, hist_s_w, means_vs_epsilon, knn_distances."""
        return _figures(self.images)

    def __repr__(self) -> str:
        return (f"CalibrationResult({len(self.table)} rows, mechanism {self.summary.get('mechanism')!r}: "
                f"{self.recommendation['message']})")


@dataclass
class AuditResult:
    """What ``textdp audit`` wrote: ``tables`` (self_check, inversion, linkage: the parts that ran), ``summary``
    (summary.json) and the plots."""

    tables: dict  # name -> pandas.DataFrame
    summary: dict
    images: Dict[str, bytes] = field(repr=False)
    output: Optional[str] = None

    @property
    def table(self):
        """The self-check table (one row per pair and epsilon) when it ran, else the first table there is."""
        return self.tables.get("self_check", next(iter(self.tables.values()), None))

    def plots(self) -> dict:
        """name -> matplotlib Figure: self_check, inversion, linkage (the parts that ran)."""
        return _figures(self.images)

    def __repr__(self) -> str:
        return f"AuditResult(tables {sorted(self.tables)}, mechanism {self.summary.get('mechanism')!r})"


def calibrate(epsilons, mechanism: str = "madlib", artifact: Optional[str] = None, *, words: Optional[int] = None,
              word_list=None, samples: Optional[int] = None, seed: Optional[int] = None,
              output: Optional[str] = None, overwrite: bool = False, **flags) -> CalibrationResult:
    """``textdp calibrate`` from Python. ``word_list``: a path (str or os.PathLike), or a list, tuple or pandas
    Series of words (str; written to a temporary file, one per line; missing values left out); anything else
    (bytes, a dict, a DataFrame, a number) is refused with TextdpTypeError naming its kind. Any other keyword is
    the job's flag of the same name (``max_nw``, ``min_sw``, ``coverage``, ``nn``, ``no_prune``, the mechanism's
    parameters, ``runner``, ...)."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="textdp-calibrate-words-") as scratch:
        if word_list is not None and not isinstance(word_list, (str, os.PathLike)):
            words_path = os.path.join(scratch, "words.txt")
            with open(words_path, "w", encoding="utf-8") as handle:
                handle.write("\n".join(_strings(word_list, "word_list", "words")) + "\n")
            word_list = words_path
        arguments = dict(epsilons=epsilons, mechanism=mechanism, artifact=artifact, words=words,
                         word_list=word_list and os.fspath(word_list), samples=samples, seed=seed, overwrite=overwrite,
                         **flags)

        def read(directory):
            with open(os.path.join(directory, "summary.json"), encoding="utf-8") as handle:
                summary = json.load(handle)
            table = pd.read_parquet(os.path.join(directory, "per_word.parquet"))
            return CalibrationResult(table, summary, _read_png_files(directory), output)

        return _outputs("calibrate", output, arguments, read)


def audit(epsilons, mechanism: str = "madlib", artifact: Optional[str] = None, *, corpus=None, prior_corpus=None,
          seed: Optional[int] = None, output: Optional[str] = None, overwrite: bool = False, **flags) -> AuditResult:
    """``textdp audit`` from Python. ``corpus`` / ``prior_corpus``: a path (str or os.PathLike; any format the job
    reads) or a list, tuple or pandas Series of texts (str; written to a temporary JSONL file; missing values left
    out); anything else (a dict, a DataFrame, bytes, a Decimal) is refused with TextdpTypeError naming its kind.
    Any other keyword is the job's flag of the same name (``checks``, ``pairs``, ``draws``, ``records``, ``inversion_tokens``,
    ``mc_draws``, ``prior_words``, ``linkage_sizes``, ``oov_policy``, the mechanism's parameters, ...)."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="textdp-audit-corpus-") as scratch:
        if corpus is not None and not isinstance(corpus, (str, os.PathLike)):
            corpus = _texts_file(corpus, scratch, "corpus")
            flags.setdefault("corpus_format", "jsonl")
        if prior_corpus is not None and not isinstance(prior_corpus, (str, os.PathLike)):
            prior_corpus = _texts_file(prior_corpus, scratch, "prior_corpus")
        arguments = dict(epsilons=epsilons, mechanism=mechanism, artifact=artifact, corpus=corpus and os.fspath(corpus),
                         prior_corpus=prior_corpus and os.fspath(prior_corpus), seed=seed, overwrite=overwrite, **flags)

        def read(directory):
            with open(os.path.join(directory, "summary.json"), encoding="utf-8") as handle:
                summary = json.load(handle)
            tables = {}
            for name in ("self_check", "inversion", "linkage"):
                path = os.path.join(directory, f"{name}.parquet")
                if os.path.exists(path):
                    tables[name] = pd.read_parquet(path)
            return AuditResult(tables, summary, _read_png_files(directory), output)

        return _outputs("audit", output, arguments, read)
