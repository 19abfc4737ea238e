"""From an ``--artifact`` value to a manifest, a local directory or a loaded artifact, and the
pre-run check that the artifact can serve the run.

A *location* is what a user gives to ``--artifact``: nothing (``None`` or ``""``: the default
artifact, the bundled GloVe 6B 50d vectors built once into the cache), a local directory, or a
``gs://bucket/prefix`` URL. This module is the layer above ``textdp.artifact.store`` (local directories) and
``textdp.artifact.gcs`` (Cloud Storage); jobs, transforms and tests go through it:

``read_manifest(location)``
    the validated manifest, without loading the artifact or fetching a gs:// one;
``resolve_artifact(location)``
    a local directory (the default artifact is built once, a gs:// artifact fetched once per machine);
``open_artifact(location)``
    a loaded, verified ``Artifact``;
``verify_artifact(location, needs)``
    everything the submitting machine can check cheaply before a pipeline starts, so that a damaged
    or incomplete artifact is one clear error instead of a traceback from inside a worker.
"""

from __future__ import annotations

import os
import shlex
from typing import Dict, Iterable, Optional

import numpy as np

from textdp.artifact import gcs
from textdp.artifact.neighbours import SECTION as NEIGHBOURS_SECTION
from textdp.artifact.store import (
    FORMAT_VERSION,
    MANIFEST,
    Artifact,
    Progress,
    ensure_default_artifact,
    read_directory_manifest,
    stamp_dir,
    stderr_progress,
)
from textdp.artifact.verification import verify_file
from textdp.errors import ArtifactError, ArtifactNotFoundError, TextdpTypeError, TextdpValueError
from textdp.paths import shown
from textdp.text.privatizer import check_unk_token
from textdp.text.tokenize import unreadable_entries
from textdp.version import __version__

# The parts of an artifact a run can use. Every run opens the vocabulary and the vectors (an
# ``Artifact`` loads both), Madlib with ``--nn annoy`` also the Annoy index, TEM the neighbour table.
ARTIFACT_PARTS = ("vocab", "vectors", "annoy", "neighbours")
ALWAYS_NEEDED = ("vocab", "vectors")
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def read_manifest(location: Optional[str], progress: Optional[Progress] = stderr_progress) -> dict:
    """The validated manifest of the artifact at ``location`` (default, local directory or gs:// URL).

    A gs:// manifest is read in place; the default artifact is built first if it does not exist yet.
    """
    if gcs.is_gcs_url(location):
        return gcs.read_remote_manifest(location)
    return read_directory_manifest(_local_directory(location, progress))


def resolve_artifact(location: Optional[str], progress: Optional[Progress] = stderr_progress) -> str:
    """Turn an ``--artifact`` value into a local directory: default, local path or gs:// URL."""
    if gcs.is_gcs_url(location):
        return gcs.fetch_artifact(location, progress=progress)
    return _local_directory(location, progress)


def open_artifact(location: Optional[str] = None, verify: bool = True,
                  progress: Optional[Progress] = stderr_progress) -> Artifact:
    """Resolve and load an artifact (the default one when ``location`` is empty)."""
    return Artifact(resolve_artifact(location, progress), verify=verify)


def check_unk_marker(location: Optional[str], oov_policy: str, unk_token: str) -> None:
    """Before a run with ``--oov-policy unk``: refuse a marker the tokenizer reads as a word of the artifact's
    vocabulary (``textdp.text.privatizer.check_unk_token``). A gs:// artifact is not read here: its workers
    refuse such a marker when they load it (exit 1, one line)."""
    if oov_policy != "unk" or gcs.is_gcs_url(location):
        return
    check_unk_token(unk_token, Artifact(_local_directory(location, None), verify=False).word_to_id)


def _local_directory(location: Optional[str], progress: Optional[Progress]) -> str:
    if not location:
        return ensure_default_artifact(progress)
    if not os.path.isdir(location):
        raise ArtifactNotFoundError(f"{shown(location)} is not a directory (expected a textdp artifact)")
    return location


# --- the pre-run check --------------------------------------------------------------------------


class ArtifactNeeds(tuple):
    """The parts of an artifact a run reads (a tuple of ``ARTIFACT_PARTS``) and the mechanism that reads them,
    so that a refusal names the mechanism of the run, not another one."""

    mechanism: Optional[str] = None

    def __new__(cls, parts: Iterable[str], mechanism: Optional[str] = None):
        needs = super().__new__(cls, parts)
        needs.mechanism = mechanism
        return needs


def verify_artifact(location: Optional[str], needs: Iterable[str] = ALWAYS_NEEDED,
                    progress: Optional[Progress] = stderr_progress) -> dict:
    """Check, before any pipeline starts, that the artifact at ``location`` can serve a run that
    reads the parts ``needs`` (see ``ARTIFACT_PARTS``; the vocabulary and vectors are always
    included). Returns the manifest; raises ``ArtifactError`` with one line naming the artifact and
    the file.

    Always: the manifest exists, is valid JSON of a textdp artifact of a known format version, and
    lists every file of the parts needed (TEM without a neighbour table is told to run
    ``textdp neighbours``). A local artifact (the default one included, built first if missing):
    each of those files exists with the recorded size and SHA-256 -- hashed only when the file
    changed since it was last verified (``textdp.artifact.verification``) -- and the .npy headers of the
    vectors and the neighbour table have the manifest's shapes. A gs:// artifact: each object
    exists with the recorded size, read from object metadata without downloading it; the workers
    verify the SHA-256 when they fetch the artifact.
    """
    wanted = tuple(dict.fromkeys(ALWAYS_NEEDED + tuple(needs)))
    unknown = [part for part in wanted if part not in ARTIFACT_PARTS]
    if unknown:
        raise ValueError(f"unknown artifact part(s) {unknown} (expected some of {', '.join(ARTIFACT_PARTS)})")
    if gcs.is_gcs_url(location):
        manifest = gcs.read_remote_manifest(location)
        if manifest.get("format_version") != FORMAT_VERSION:
            raise ArtifactError(f"{shown(location)} was built by an older textdp (format version {manifest.get('format_version')}) "
                                "whose vocabulary may hold entries that are not words (punctuation): rebuild it with "
                                "`textdp build-index` and upload it again")
        files = _needed_files(manifest, wanted, location, getattr(needs, "mechanism", None))
        gcs.check_remote_files(location, files)
        return manifest
    directory = _local_directory(location, progress)
    manifest = read_directory_manifest(directory)
    files = _needed_files(manifest, wanted, location or directory, getattr(needs, "mechanism", None))
    stamps = stamp_dir()
    for name, entry in files.items():
        verify_file(os.path.join(directory, name), entry, stamps)
    _check_array_shapes(directory, manifest, wanted)
    _check_vocabulary(directory, manifest, stamps)
    return manifest


def _check_vocabulary(directory: str, manifest: dict, stamps: str) -> None:
    """Refuse a local artifact whose vocabulary holds an entry the tokenizer never reads as itself (an
    artifact edited by hand: build-index never writes one, ``textdp.artifact.store``). Its checksum was just
    verified, so the result is remembered per vocabulary SHA-256 and textdp version (a stamp file beside the verification stamps):
    ~2 s once for a 400,000-word vocabulary, nothing after."""
    sha = manifest["files"][manifest["vocab"]].get("sha256", "")
    stamp = os.path.join(os.path.dirname(os.path.abspath(stamps)), "vocabulary-checked", f"{__version__}-{sha}")
    if sha and os.path.exists(stamp):
        return
    with open(os.path.join(directory, manifest["vocab"]), encoding="utf-8", newline="\n") as handle:
        words = handle.read().split("\n")
    if words and words[-1] == "":
        words.pop()
    bad = unreadable_entries(words)
    if len(bad):
        raise ArtifactError(
            f"{shown(os.path.join(directory, manifest['vocab']))} line {int(bad[0]) + 1} holds {words[bad[0]]!r}, an entry the tokenizer "
            f"never reads as one word ({len(bad):,} such entries; punctuation, spaces or control characters inside, a "
            "duplicate or case variant): released, it would change a record's structure. Rebuild the artifact with "
            "`textdp build-index` (this textdp drops them)")
    try:
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        with open(stamp, "w", encoding="utf-8") as handle:
            handle.write("ok\n")
    except OSError:  # a read-only cache only costs the check next time
        pass


def _needed_files(manifest: dict, parts: tuple, where: str, mechanism: Optional[str] = None) -> Dict[str, dict]:
    """File name -> manifest entry for every file of ``parts``; refuses a part the artifact lacks, naming the
    ``mechanism`` that needs it when known (``ArtifactNeeds``)."""
    names = [manifest["vocab"], manifest["vectors"]]
    if "annoy" in parts:
        info = manifest.get("annoy")
        if not isinstance(info, dict) or not info.get("file"):
            raise ArtifactError(f"--nn annoy needs an Annoy index and the artifact {shown(where)} has none; rebuild it "
                                "with `textdp build-index` or use --nn exact")
        names.append(info["file"])
    if "neighbours" in parts:
        info = manifest.get(NEIGHBOURS_SECTION)
        if not isinstance(info, dict) or not info.get("ids_file") or not info.get("distances_file"):
            command = f"textdp neighbours --artifact {shlex.quote(shown(where))}"
            who = (f"--mechanism {mechanism} (it samples from each word's K nearest words)" if mechanism
                   else "this run")
            raise ArtifactError(f"{who} needs a neighbour table and the artifact {shown(where)} has none; run "
                                f"`{command}` first (docs/tem.md)")
        names += [info["ids_file"], info["distances_file"]]
    files = {}
    for name in names:
        if not isinstance(name, str) or name != os.path.basename(name) or name in ("", ".", "..", MANIFEST):
            raise ArtifactError(f"{shown(where)}/{MANIFEST} names an invalid file {name!r}")
        if name not in manifest["files"]:
            raise ArtifactError(f"{shown(where)}/{MANIFEST} lists no size and checksum for {name} (incomplete artifact)")
        files[name] = manifest["files"][name]
    return files


def _check_array_shapes(directory: str, manifest: dict, parts: tuple) -> None:
    """The .npy headers (a few hundred bytes each) agree with the manifest: what a worker would
    otherwise find only after loading the artifact."""
    rows = int(manifest["vocab_size"])
    expected = [(manifest["vectors"], np.float32, (rows, int(manifest["dimension"])))]
    if "neighbours" in parts:
        info = manifest[NEIGHBOURS_SECTION]
        k = int(info.get("k", -1))
        expected += [(info["ids_file"], np.int32, (rows, k)), (info["distances_file"], np.float32, (rows, k))]
    for name, dtype, shape in expected:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                read_header = _NPY_HEADER_READERS.get(version)
                if read_header is None:
                    raise ValueError(f"unsupported .npy format version {version}")
                found_shape, fortran_order, found_dtype = read_header(handle)
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{shown(path)} is not a readable .npy file ({type(exc).__name__})") from None
        if tuple(found_shape) != shape or found_dtype != np.dtype(dtype) or fortran_order:
            raise ArtifactError(f"{shown(path)}: expected a row-major {np.dtype(dtype).name} array of shape {shape}, "
                                f"found {found_dtype} {tuple(found_shape)}{' column-major' if fortran_order else ''}")


def artifact_location(value) -> Optional[str]:
    """An ``artifact`` argument of the Python entry points as a string: None (the default artifact), a
    path (str or os.PathLike, e.g. pathlib.Path) or a gs:// URL; anything else is a TextdpError."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if value is not None and not isinstance(value, str):
        raise TextdpTypeError(f"artifact must be a path or gs:// URL (str or os.PathLike), not {type(value).__name__}")
    if value is not None and not value.strip():  # an unset shell variable: never a silent switch to the default
        raise TextdpValueError("artifact is empty; leave it out (None) for the bundled default")
    return value
