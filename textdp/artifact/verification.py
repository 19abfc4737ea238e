"""Size and SHA-256 checks of artifact files, and the stamps that spare re-hashing an unchanged file.

Every run checks the artifact files it uses before it starts, and every worker process again when
it loads them. Hashing the default artifact's vocabulary and vectors (83 MB) takes 0.15 s, with
its Annoy index (410 MB) 0.6 s, on a busy 2-core machine with the files in the page cache
(benchmarks/results/verify.md). So a successful check leaves a *verification stamp*, and the next
check of the same, unchanged file reads the stamp instead of the file (under a millisecond).

A stamp is a small JSON file in a stamp directory (``<cache>/verified/``, see
``textdp.artifact.store.stamp_dir``), one per verified file, named after the SHA-256 of the file's real
path and written atomically (a temporary file renamed over it). It records the real path, the
device, inode, size, ``mtime_ns`` and ``ctime_ns`` seen when the file was hashed, and the SHA-256
found. A check skips hashing only if the file's current ``os.stat`` matches *every one* of those
fields and the recorded SHA-256 is the one the manifest expects; otherwise the file is hashed
again (and, if it passes, stamped again). A stamp is never trusted for a file whose stat changed.

What that means for a file changed in place:

* Every change made through the file system -- ``write(2)``, a store through a writable memory
  map, ``truncate``, copying or renaming another file over it, and then putting the old mtime
  back with ``touch -d``/``os.utime`` -- changes the inode, the size or ``ctime``. The kernel sets
  ``ctime`` to the current time on every write and on every ``utime`` call, and no system call
  sets it to a chosen value, so corruption that preserves mtime (and size) is still re-hashed
  and refused.
* Not seen until the stamp is removed: a change that bypasses the inode's timestamps -- bit rot
  on the storage medium, writes to the raw block device, a file system that does not keep ctime
  (some FUSE and network mounts), a snapshot restored underneath the file system, or a change
  whose new ctime comes out identical to the old one (a clock set back by root, a file server
  with coarse timestamps or a skewed clock). Delete ``<cache>/verified/`` to force a full
  re-hash; a gs:// artifact's files are also hashed as they are downloaded.
* Writes racing with the check: a file is stamped only if its stat did not change while it was
  hashed and its ``ctime`` is at least ``STAMP_MIN_AGE_NS`` (2 s, the coarsest common file-system
  timestamp granularity) older than the moment hashing began. A later write then necessarily gets a
  later ``ctime``, even within one timestamp tick. The price: a file changed less than 2 s before
  its check is hashed again next time.

A stamp directory that cannot be written (read-only cache) only costs time: the files are hashed
every time, as without stamps.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
import uuid
from typing import Optional

from textdp.errors import ArtifactError, ArtifactNotFoundError
from textdp.paths import shown

STAMP_MIN_AGE_NS = 2_000_000_000
_STAT_FIELDS = ("dev", "ino", "size", "mtime_ns", "ctime_ns")


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entry(path: str) -> dict:
    """The manifest's record of a finished file: its SHA-256 and size."""
    return {"sha256": sha256_file(path), "bytes": os.path.getsize(path)}


def verify_file(path: str, entry: dict, stamp_dir: Optional[str] = None) -> None:
    """Refuse ``path`` unless it has the size and SHA-256 of its manifest ``entry``.

    With ``stamp_dir`` the hash is skipped when a stamp vouches for the file's exact current state,
    and a passing file is stamped. Raises ``ArtifactError`` naming the file.
    """
    began = time.time_ns()  # before the first stat: see the racy-write rule in the module docstring
    try:
        before = os.stat(path)
    except FileNotFoundError:
        raise ArtifactNotFoundError(f"{shown(path)} is missing (incomplete artifact)") from None
    if not stat.S_ISREG(before.st_mode):
        raise ArtifactError(f"{shown(path)} is not a regular file (damaged artifact)")
    expected_bytes, expected_sha = int(entry["bytes"]), entry["sha256"]
    if before.st_size != expected_bytes:
        raise ArtifactError(
            f"{shown(path)} has {before.st_size} bytes but the manifest records {expected_bytes} (truncated or corrupted)")
    real = os.path.realpath(path)
    stamp = stamp_path(stamp_dir, real) if stamp_dir else None
    if stamp and _stamp_vouches(stamp, real, before, expected_sha):
        return
    if sha256_file(path) != expected_sha:
        raise ArtifactError(f"{shown(path)} fails its SHA-256 check (corrupted artifact); rebuild or re-fetch it")
    if stamp and _stat_state(os.stat(path)) == _stat_state(before) and before.st_ctime_ns < began - STAMP_MIN_AGE_NS:
        _write_stamp(stamp, {"path": real, "sha256": expected_sha, **_stat_state(before)})


def stamp_path(stamp_dir: str, path: str) -> str:
    """The stamp file of the file at ``path`` (one per real path)."""
    real = os.path.realpath(path)
    return os.path.join(stamp_dir, hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:40] + ".json")


def _stat_state(result: os.stat_result) -> dict:
    return {"dev": result.st_dev, "ino": result.st_ino, "size": result.st_size,
            "mtime_ns": result.st_mtime_ns, "ctime_ns": result.st_ctime_ns}


def _stamp_vouches(stamp: str, real: str, current: os.stat_result, expected_sha: str) -> bool:
    try:
        with open(stamp, encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.get("path") != real or recorded.get("sha256") != expected_sha:
        return False
    state = _stat_state(current)
    return all(recorded.get(field) == state[field] for field in _STAT_FIELDS)


def _write_stamp(stamp: str, record: dict) -> None:
    tmp = f"{stamp}.tmp-{uuid.uuid4().hex}"
    try:
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record, handle, sort_keys=True)
        os.replace(tmp, stamp)
    except OSError:  # a read-only cache: the next check hashes again, nothing worse
        try:
            os.remove(tmp)
        except OSError:
            pass
