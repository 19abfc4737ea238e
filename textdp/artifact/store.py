"""Local artifact directories: build them, read and write their manifest, verify and memory-map them.

This is the bottom layer of artifact handling and knows nothing of gs:// (``textdp.artifact.gcs`` fetches
remote artifacts into local directories with it, and ``textdp.artifact.locate`` turns an ``--artifact``
value -- a directory, a gs:// URL or nothing for the default -- into a manifest, a local directory
or a loaded ``Artifact``).

An artifact is a directory holding everything a worker needs to privatize text:

``manifest.json``
    format version, embedding source, dimension, vocabulary size, metric, Annoy parameters and
    seed, and the SHA-256 and size of every other file. Later stages (the TEM neighbour table) add
    their own section and files.
``vocab.txt``
    the words, one per line, in frequency order; the line number is the word id. Only entries the
    tokenizer reads as themselves (``textdp.text.tokenize.unreadable_entries``): an embedding's other
    entries (GloVe's punctuation ``,`` ``--``, ``u.s.``, entries with spaces or control characters)
    are dropped at build time and counted in the manifest's ``dropped_entries``, since they can
    never be an input word and, released, would change a record's structure (format version 2).
``vectors.npy``
    float32, row-major (C order), one row per word: a worker memory-maps it, so row gathers and
    BLAS read straight from the page cache that every process on the machine shares.
``index.ann``
    an Annoy index (euclidean) built from the vectors alone with a fixed seed. It is a pure
    function of the embedding, so using it for nearest-neighbour search is post-processing and
    keeps the privacy guarantee; only utility depends on its recall.

Files are written once and never rewritten in place: a build goes to a temporary sibling
directory that is renamed into place, and adding files to an artifact writes new files and then
atomically replaces ``manifest.json``. Loading checks the format version, sizes and SHA-256 of
every file it uses and refuses a mismatch with a message that names the file; a verification
stamp in the cache spares re-hashing a file that has not changed since (``textdp.artifact.verification``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional

import numpy as np

from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource, load_embeddings
from textdp.artifact.verification import file_entry, verify_file
from textdp.errors import ArtifactError, ArtifactNotFoundError
from textdp.paths import shown
from textdp.text.tokenize import unreadable_entries
from textdp.version import __version__

FORMAT_VERSION = 2  # 2: the vocabulary holds only entries the tokenizer reads as themselves
# Version 1 (before that rule) is still read: a local one whose vocabulary happens to hold only words is used as
# it is and any other is refused with the way out (textdp.artifact.locate.verify_artifact); a gs:// one is refused (its
# vocabulary is not read before the run).
READS_VERSIONS = (1, 2)
ARTIFACT_KIND = "textdp-vocabulary"
MANIFEST = "manifest.json"
VOCAB_FILE = "vocab.txt"
VECTORS_FILE = "vectors.npy"
ANNOY_FILE = "index.ann"
DEFAULT_TREES = 50
DEFAULT_SEED = 0

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """Default progress sink for long one-off work (building an artifact)."""
    print(f"[textdp] {message}", file=sys.stderr, flush=True)


# --- building --------------------------------------------------------------------------------


def build_artifact(
    source: EmbeddingSource,
    output: str,
    vocab_size: Optional[int] = None,
    trees: int = DEFAULT_TREES,
    seed: int = DEFAULT_SEED,
    progress: Optional[Progress] = None,
) -> str:
    """Build an artifact directory at ``output`` (which must not exist) and return its path."""
    import annoy

    say = progress or (lambda _msg: None)
    if trees < 1:
        raise ValueError("trees must be >= 1")
    output = os.path.abspath(output)
    if os.path.exists(output):
        raise ArtifactError(f"{output} already exists; artifacts are never overwritten, choose a new directory")
    os.makedirs(os.path.dirname(output), exist_ok=True)
    started = time.perf_counter()
    words, vectors, dropped = _readable_embeddings(source, vocab_size, say)
    n, dim = vectors.shape
    if n < 2:  # every mechanism releases a word other than the input's, so it needs a second one
        raise ArtifactError(f"an artifact needs at least 2 words to privatize anything; the source gave {n}")
    with staged_directory(output, prefix=f".{os.path.basename(output)}.tmp-") as staging:
        say(f"writing {n:,} words x {dim} dimensions")
        with open(os.path.join(staging, VOCAB_FILE), "w", encoding="utf-8", newline="\n") as handle:
            handle.write("\n".join(words))
            handle.write("\n")
        np.save(os.path.join(staging, VECTORS_FILE), vectors)
        say(f"building Annoy index ({trees} trees, seed {seed})")
        index = annoy.AnnoyIndex(dim, "euclidean")
        index.set_seed(seed)
        for i in range(n):
            index.add_item(i, vectors[i])
        index.build(trees, n_jobs=-1)
        index.save(os.path.join(staging, ANNOY_FILE))
        index.unload()
        say("computing checksums")
        manifest = {
            "format_version": FORMAT_VERSION,
            "kind": ARTIFACT_KIND,
            "textdp_version": __version__,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": source.to_json(),
            "dimension": int(dim),
            "vocab_size": int(n),
            "metric": "euclidean",
            "dtype": "float32",
            "vocab": VOCAB_FILE,
            "vectors": VECTORS_FILE,
            "annoy": {"file": ANNOY_FILE, "metric": "euclidean", "trees": int(trees), "seed": int(seed)},
            "files": {name: file_entry(os.path.join(staging, name)) for name in (VOCAB_FILE, VECTORS_FILE, ANNOY_FILE)},
            "dropped_entries": dropped,
            "neighbour_distance": neighbour_distance(vectors),
        }
        _write_json(os.path.join(staging, MANIFEST), manifest)
    say(f"artifact ready at {output} in {time.perf_counter() - started:.1f}s")
    return output


NEIGHBOUR_SAMPLE = 128  # words whose nearest other word is looked up, evenly spaced over the vocabulary


def neighbour_distance(vectors: np.ndarray, sample: int = NEIGHBOUR_SAMPLE, block: int = 65536) -> dict:
    """The artifact's typical nearest-neighbour distance: the median, over ``sample`` words evenly spaced over the
    vocabulary (deterministic), of the Euclidean distance to the word's nearest other word (exact, in blocks). It
    relates epsilon to the artifact's own scale (``textdp.privacy.statements.scale_warnings``): the bound
    exp(epsilon * d) between a word and its nearest neighbour. Recorded in the manifest at build time
    (``neighbour_distance``); computed the same way from the vectors for an artifact built before. Cost: sample x
    vocabulary x dimension multiply-adds (~2.5e9 for 128 words of the 400k x 50 default: one to three seconds)."""
    n = len(vectors)
    chosen = np.unique(np.linspace(0, n - 1, num=min(sample, n)).round().astype(np.int64))
    queries = np.asarray(vectors[chosen], dtype=np.float64)
    query_sq = (queries ** 2).sum(axis=1)
    best = np.full(len(chosen), np.inf)
    for start in range(0, n, block):
        part = np.asarray(vectors[start:start + block], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            dist = query_sq[:, None] - 2.0 * (queries @ part.T) + (part ** 2).sum(axis=1)[None, :]
        own = (chosen >= start) & (chosen < start + len(part))
        dist[np.flatnonzero(own), chosen[own] - start] = np.inf  # a word is not its own neighbour
        best = np.fmin(best, np.fmin.reduce(dist, axis=1))  # fmin: a NaN (inf - inf) never wins
    median = float(np.sqrt(max(float(np.median(best)), 0.0)))
    return {"median": median, "sample": int(len(chosen)), "metric": "euclidean",
            "rule": "median over evenly spaced words of the Euclidean distance to the nearest other word"}


def artifact_neighbour_distance(directory: Optional[str], manifest: dict) -> Optional[dict]:
    """``neighbour_distance`` of a verified artifact: the manifest's figure, or for an artifact built before it was
    recorded, the same figure computed from the vectors of its local ``directory`` (memory-mapped); None for an
    artifact without it whose files are not on this machine (``directory`` None: a gs:// artifact)."""
    figure = manifest.get("neighbour_distance")
    if isinstance(figure, dict) and isinstance(figure.get("median"), (int, float)):
        return figure
    if directory is None:
        return None
    return dict(neighbour_distance(Artifact(directory, verify=False).vectors), computed="at check time")


def _readable_embeddings(source: EmbeddingSource, vocab_size: Optional[int], say: Progress):
    """(words, vectors, dropped) of the source's first ``vocab_size`` entries that the tokenizer reads as
    themselves (all of them when None), reading further into the source to make up for the ones dropped.
    ``dropped``: {"count", "examples" (the first 20, a public vocabulary's entries), "rule"}."""
    limit = vocab_size
    while True:
        words, vectors = load_embeddings(source, limit, progress=say)
        bad = unreadable_entries(words)
        kept = len(words) - len(bad)
        if vocab_size is None or kept >= vocab_size or len(words) < limit:  # enough, or the source is exhausted
            break
        limit = vocab_size + 2 * len(bad) + 16
    keep = np.ones(len(words), dtype=bool)
    keep[bad] = False
    take = np.flatnonzero(keep)[:vocab_size]
    last = int(take[-1]) + 1 if vocab_size is not None and len(take) == vocab_size else len(words)  # entries read
    bad = bad[bad < last]
    if len(bad):
        say(f"dropping {len(bad):,} entries the tokenizer never reads as one word (punctuation, abbreviations "
            "with a final dot, spaces or control characters inside, case/NFKC variants): they can never be an "
            "input word and, released, would change a record's structure")
    dropped = {"count": int(len(bad)), "examples": [words[i] for i in bad[:20]],
               "rule": "entries the tokenizer does not read as themselves (textdp.text.tokenize.unreadable_entries)"}
    return [words[i] for i in take], np.ascontiguousarray(vectors[take]), dropped


@contextlib.contextmanager
def staged_directory(final: str, prefix: str):
    """A new sibling directory of ``final`` to fill; renamed to ``final`` in one step if the block
    succeeds, removed if it fails. Readers therefore see a complete directory or none."""
    staging = tempfile.mkdtemp(prefix=prefix, dir=os.path.dirname(final))
    try:
        os.chmod(staging, 0o755)  # mkdtemp makes it private; an artifact is shared read-only
        yield staging
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def add_files(artifact_dir: str, files: Dict[str, str], section: str, content: dict) -> dict:
    """Move new files into an artifact and record them under ``manifest[section]``.

    ``files`` maps a file name inside the artifact to a finished file on the same filesystem.
    Existing files are never replaced; the manifest is replaced atomically (write + rename).
    """
    manifest = read_directory_manifest(artifact_dir)
    for name, src in files.items():
        dest = os.path.join(artifact_dir, name)
        if os.path.exists(dest) or name in manifest["files"]:
            raise ArtifactError(f"{shown(dest)} already exists; artifact files are never overwritten")
        entry = file_entry(src)
        os.rename(src, dest)
        manifest["files"][name] = entry
    manifest[section] = content
    _write_json(os.path.join(artifact_dir, MANIFEST), manifest)
    return manifest


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


# --- loading ---------------------------------------------------------------------------------


def parse_manifest(raw: bytes, where: str) -> dict:
    """Validate the bytes of a ``manifest.json`` read from ``where`` (a path or URL, for messages)."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ArtifactError(f"{shown(where)} is not valid JSON (corrupted artifact?)") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != ARTIFACT_KIND:
        raise ArtifactError(f"{shown(where)} does not describe a textdp vocabulary artifact")
    if manifest.get("format_version") not in READS_VERSIONS:
        raise ArtifactError(
            f"{shown(where)} has format version {manifest.get('format_version')!r}; this textdp reads version "
            f"{' or '.join(map(str, READS_VERSIONS))}")
    for key in ("dimension", "vocab_size", "files", "vocab", "vectors"):
        if key not in manifest:
            raise ArtifactError(f"{shown(where)} lacks the field {key!r}")
    if not isinstance(manifest["files"], dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("bytes"), int)
            for entry in manifest["files"].values()):
        raise ArtifactError(f"{shown(where)}: 'files' must map every file name to its sha256 and bytes")
    return manifest


def read_directory_manifest(artifact_dir: str) -> dict:
    """The validated manifest of the local artifact directory ``artifact_dir``.

    Code that works on a local directory it holds (this module, ``textdp.artifact.gcs``, the neighbour
    table's writer) calls it; everything else reads a manifest through
    ``textdp.artifact.locate.read_manifest``, which takes any ``--artifact`` value.
    """
    path = os.path.join(artifact_dir, MANIFEST)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise ArtifactNotFoundError(f"{shown(artifact_dir)} is not a textdp artifact: {MANIFEST} is missing") from None
    except IsADirectoryError:
        raise ArtifactError(f"{shown(path)} is a directory, not a manifest") from None
    return parse_manifest(raw, path)


class Artifact:
    """A loaded, verified vocabulary artifact whose large files are memory-mapped.

    Only the files actually used are read and checksummed: the vocabulary and vectors on open,
    the Annoy index and other tables the first time they are asked for. Thread-safe.
    """

    def __init__(self, path: str, verify: bool = True):
        self.path = os.path.abspath(path)
        self.manifest = read_directory_manifest(self.path)
        self.dimension = int(self.manifest["dimension"])
        self.vocab_size = int(self.manifest["vocab_size"])
        self._verify = verify
        self._lock = threading.Lock()
        self._verified: set = set()
        self._annoy = None
        self._word_to_id = None
        self._sqnorms = None
        self.words: List[str] = self._load_words()
        self.vectors: np.ndarray = self._load_vectors()

    # files ------------------------------------------------------------------------------------
    def file_path(self, name: str) -> str:
        """Absolute path of an artifact file after checking its size and SHA-256 (once per process; a
        file unchanged since an earlier check is not re-hashed, see ``textdp.artifact.verification``)."""
        entry = self.manifest["files"].get(name)
        if entry is None:
            raise ArtifactError(f"{shown(self.path)}: {MANIFEST} lists no file {name!r}")
        path = os.path.join(self.path, name)
        with self._lock:
            if name in self._verified or not self._verify:
                return path
            verify_file(path, entry, stamp_dir())
            self._verified.add(name)
        return path

    def _load_words(self) -> List[str]:
        with open(self.file_path(self.manifest["vocab"]), encoding="utf-8", newline="\n") as handle:
            words = handle.read().split("\n")
        if words and words[-1] == "":
            words.pop()
        if len(words) != self.vocab_size:
            raise ArtifactError(f"{shown(self.path)}: vocabulary has {len(words)} words, manifest says {self.vocab_size}")
        return words

    def _load_vectors(self) -> np.ndarray:
        path = self.file_path(self.manifest["vectors"])
        try:
            vectors = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            raise ArtifactError(f"{shown(path)} is not a readable .npy file ({type(exc).__name__})") from None
        if vectors.shape != (self.vocab_size, self.dimension) or vectors.dtype != np.float32 or not vectors.flags.c_contiguous:
            raise ArtifactError(
                f"{shown(path)}: expected a row-major float32 matrix of shape {(self.vocab_size, self.dimension)}, "
                f"found {vectors.dtype} {vectors.shape}")
        return vectors

    # derived, lazily ----------------------------------------------------------------------------
    @property
    def word_to_id(self) -> Dict[str, int]:
        if self._word_to_id is None:
            with self._lock:
                if self._word_to_id is None:
                    self._word_to_id = {w: i for i, w in enumerate(self.words)}
        return self._word_to_id

    @property
    def sqnorms(self) -> np.ndarray:
        """Squared Euclidean norm of every row (float32), for the expanded-distance search."""
        if self._sqnorms is None:
            with self._lock:
                if self._sqnorms is None:
                    self._sqnorms = _row_sqnorms(self.vectors)
        return self._sqnorms

    @property
    def annoy_index(self):
        """The memory-mapped Annoy index (loaded and verified on first use)."""
        if self._annoy is None:
            import annoy

            info = self.manifest.get("annoy")
            if not info:
                raise ArtifactError(f"{shown(self.path)} has no Annoy index")
            path = self.file_path(info["file"])
            with self._lock:
                if self._annoy is None:
                    index = annoy.AnnoyIndex(self.dimension, info.get("metric", "euclidean"))
                    index.load(path, prefault=False)  # mmap; pages are shared between processes
                    if index.get_n_items() != self.vocab_size:
                        raise ArtifactError(f"{shown(path)} holds {index.get_n_items()} items, expected {self.vocab_size}")
                    self._annoy = index
        return self._annoy

    def ids_of(self, words) -> np.ndarray:
        """Word ids for known words (KeyError for unknown ones)."""
        lookup = self.word_to_id
        return np.fromiter((lookup[w] for w in words), dtype=np.int64)

    def identity(self) -> str:
        """The artifact's identity: its manifest's checksums of the vocabulary and the vectors (``artifact_identity``)."""
        return artifact_identity(self.manifest)

    def describe(self) -> dict:
        """Facts about the artifact for summaries and reports."""
        return {
            "path": display_path(self.path),
            "source": self.manifest.get("source"),
            "vocab_size": self.vocab_size,
            "dimension": self.dimension,
            "metric": self.manifest.get("metric", "euclidean"),
            "annoy": self.manifest.get("annoy"),
        }


def artifact_identity(manifest: dict) -> str:
    """The identity of an artifact's words and distances: the SHA-256 of its vocabulary and of its vectors, from its
    manifest ("<vocab sha256>/<vectors sha256>"). Two artifacts with one identity have the same words at the same
    distances; a copy with scaled vectors (other distances) has another (the ledger's statement, round 10b R10b-6)."""
    files = manifest.get("files") or {}
    return "/".join(str((files.get(manifest.get(part) or default) or {}).get("sha256"))
                    for part, default in (("vocab", "vocab.txt"), ("vectors", "vectors.npy")))


def display_path(path: str) -> str:
    """``path`` with the home directory written ``~`` (``~/.cache/textdp/...``), as summaries and reports show an
    artifact: the same text as the docs, and without the operator's home directory. Other paths as they are."""
    home = os.path.expanduser("~").rstrip(os.sep)
    if not home or not isinstance(path, str) or "://" in path:
        return path
    if path == home or path.startswith(home + os.sep):
        return "~" + path[len(home):]
    return path


def _row_sqnorms(vectors: np.ndarray, block: int = 65536) -> np.ndarray:
    out = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), block):
        part = np.asarray(vectors[start:start + block], dtype=np.float32)
        out[start:start + len(part)] = np.einsum("ij,ij->i", part, part)
    return out


# --- the cache and the default artifact ------------------------------------------------------


def cache_dir() -> str:
    """Where textdp keeps the default artifact, fetched remote artifacts and verification stamps."""
    explicit = os.environ.get("TEXTDP_CACHE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "textdp")


def stamp_dir() -> str:
    """Where verification stamps live (``textdp.artifact.verification``): one small file per verified file."""
    return os.path.join(cache_dir(), "verified")


def default_artifact_path() -> str:
    return os.path.join(cache_dir(), "artifacts", f"{BUNDLED_GLOVE}-v{FORMAT_VERSION}-t{DEFAULT_TREES}-s{DEFAULT_SEED}")


def ensure_default_artifact(progress: Optional[Progress] = stderr_progress) -> str:
    """Build the bundled GloVe 50d artifact once into the user cache and return its path.

    Concurrent callers (several worker processes on one machine) serialise on a file lock, so
    the artifact is built once; later calls return at once.
    """
    from filelock import FileLock

    path = default_artifact_path()
    if os.path.exists(os.path.join(path, MANIFEST)):
        return path
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = FileLock(path + ".lock")
        lock.acquire()
    except OSError as exc:  # unwritable, or a file where a directory should be
        raise ArtifactError(f"the textdp cache {shown(cache_dir())} cannot hold the default artifact "
                            f"({exc.strerror or type(exc).__name__}): set TEXTDP_CACHE_DIR to a writable "
                            "directory, or give --artifact") from None
    try:
        if os.path.exists(os.path.join(path, MANIFEST)):
            return path
        if progress:
            progress(f"building the default artifact ({BUNDLED_GLOVE}, one time only) into {shown(path)}")
        build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), path, progress=progress)
    finally:
        lock.release()
    return path
