"""One guard for everything a job writes: no file of the user's is ever overwritten (issue 25).

Every job (privatize, calibrate, audit, neighbours) registers every path it will write (records,
errors, summaries, public summary, diagnostics, reports) and every file it reads with one
``OutputGuard``, which refuses before anything runs (``TextdpError``, one line):

- glob characters (``*?[]{}``) in an output path: Beam's file sinks read an output prefix as a
  pattern when they delete and rename, so ``o/r[12]`` would delete the runs ``o/r1`` and ``o/r2``;
- an output prefix that is a directory or ends with a path separator (``o/`` would write
  ``o/-00000-of-00001.txt``);
- an output that is, or whose sink would delete, a file the run reads, compared by real path
  (``os.path.realpath``: ``./``, absolute paths and symlinks are the same file);
- two outputs of one run that are the same file or delete each other's files;
- an output that already exists, unless ``--overwrite``; files of another run that a sink would delete.

``acquire()`` (called by ``pipelines.jobs.run_job`` just before the pipeline runs) then creates an
exclusive lock file ``<output>.lock`` (``O_CREAT | O_EXCL``) for every local output, checks again that
no output appeared since the check, and ``release()`` removes the locks when the run ends, however it
ends. Two runs on one output: the second is refused, naming the lock file.

gs:// paths: no real path (object names are compared as written), no lock (object stores have no
exclusive create here); glob refusal and existence (through the ``exists``/``match`` functions the
caller passes, Beam's filesystems) apply. Nothing here imports Beam: the file-system access is passed in.
"""

from __future__ import annotations

import fnmatch
import os
import socket
import stat
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from textdp.errors import TextdpError

GLOB_CHARACTERS = "*?[]{}"
LOCK_SUFFIX = ".lock"


def is_remote(path: str) -> bool:
    return "://" in path


def real_path(path: str) -> str:
    """The file ``path`` names: symlinks, ``./`` and relative paths resolved (local); as written (gs://)."""
    return path if is_remote(path) else os.path.realpath(path)


def _real_pattern(pattern: str) -> str:
    """A pattern whose glob characters are all in its last component: its directory resolved."""
    if is_remote(pattern):
        return pattern
    directory, name = os.path.split(pattern)
    return os.path.join(os.path.realpath(directory or "."), name)


def unreadable(path: str) -> Optional[str]:
    """Why a local input file cannot be read as one (None: it can; gs:// objects are read by Beam).

    A directory, a pipe, a socket or a device is refused before anything opens it: a job reads its
    input more than once (counting records for the progress line, then privatizing), and opening a
    FIFO would block until a writer appears."""
    if is_remote(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file (give a file pattern such as 'dir/*.txt')"
    if not stat.S_ISREG(mode):
        return ("is not a regular file (a pipe, socket or device; a job reads its input more than once, so "
                "copy it to a file first)")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    return None


def refuse_unreadable(flag: str, paths: Iterable[str]) -> None:
    for path in paths:
        problem = unreadable(path)
        if problem:
            raise TextdpError(f"{flag}: {path} {problem}")


def refuse_glob_characters(flag: str, path: str) -> None:
    found = [c for c in GLOB_CHARACTERS if c in path]
    if found:
        raise TextdpError(f"{flag} {path} contains the glob character{'s' if len(found) > 1 else ''} "
                          f"{' '.join(found)}: output paths may not contain any of {GLOB_CHARACTERS}, because "
                          "Beam's file sinks read them as a pattern when they delete and rename files; choose "
                          "another name")


@dataclass(frozen=True)
class Output:
    """One thing a run writes: its flag, what it is, the pattern of its own files, example file names
    it writes, and the patterns its sink deletes before writing (Beam's ``<prefix>-*-of-N`` files)."""

    flag: str
    what: str
    pattern: str
    samples: Tuple[str, ...]
    sink_globs: Tuple[str, ...] = ()
    single: bool = False  # one file (its pattern is its path)
    label: str = ""  # the path as the user gave it

    def catches(self, path: str) -> bool:
        """Whether this output writes or deletes ``path``."""
        return any(fnmatch.fnmatchcase(path, p) or path == p for p in (self.pattern,) + self.sink_globs)


class OutputGuard:
    """The outputs and inputs of one run, checked together (see the module docstring).

    ``exists(path) -> bool`` and ``match(pattern) -> list of paths`` are the file system (local or gs://).
    """

    def __init__(self, job: str, overwrite: bool, exists: Callable[[str], bool],
                 match: Callable[[str], List[str]]):
        self.job, self.overwrite = job, bool(overwrite)
        self._exists, self._match = exists, match
        self.outputs: List[Output] = []
        self.inputs: List[Tuple[str, str]] = []  # (flag, real path)
        self.lock_targets: Dict[str, str] = {}   # lock file -> flag and path it guards
        self.earlier: List[str] = []
        self._held: List[str] = []
        self._prefixes: Dict[str, str] = {}
        self._earlier_names: Dict[Tuple[str, str], str] = {}

    # --- registering --------------------------------------------------------------------------
    def prefix(self, flag: str, prefix: str) -> str:
        """Check an output prefix (``<prefix>-SSSSS-of-NNNNN.ext`` and the like); returns it resolved."""
        refuse_glob_characters(flag, prefix)
        if prefix.endswith(("/", os.sep)) or (not is_remote(prefix) and os.path.basename(prefix) in ("", ".", "..")):
            raise TextdpError(f"{flag} {prefix} ends with a path separator: it is a file-name prefix, not a "
                              f"directory (e.g. {prefix.rstrip('/' + os.sep) or '.'}/run writes run-00000-of-00001...)")
        if not is_remote(prefix) and os.path.isdir(prefix):
            raise TextdpError(f"{flag} {prefix} is a directory: it is a file-name prefix (e.g. {prefix}/run writes "
                              "run-00000-of-00001... inside it)")
        resolved = _real_pattern(prefix)
        if resolved in self._prefixes:
            raise TextdpError(f"{flag} {prefix} is also {self._prefixes[resolved]}: give each output its own prefix")
        self._prefixes[resolved] = f"{flag} {prefix}"
        self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {prefix}")
        return resolved

    def directory(self, flag: str, path: str, files: Sequence[str] = (), earlier: str = "") -> str:
        """Check an output directory (calibrate, audit, an artifact) and register ``files``, the names the
        job writes in it; ``earlier``: what its files are called in a refusal ("an earlier audit").
        Returns the directory resolved, without a trailing /."""
        refuse_glob_characters(flag, path)
        stripped = path.rstrip("/") or path
        if not is_remote(stripped) and os.path.exists(stripped) and not os.path.isdir(stripped):
            raise TextdpError(f"{flag} {path} is a file, not a directory")
        resolved = real_path(stripped)
        self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {path}")
        for name in files:
            self.file(flag, name, f"{resolved}/{name}", label=path)
        if earlier:
            self._earlier_names[(flag, path)] = earlier
        return resolved

    def sharded(self, flag: str, what: str, prefix: str, shard_template: str, suffix: str,
                samples: Sequence[str], sink_globs: Sequence[str] = (), label: str = "") -> None:
        """Files ``<prefix><shard_template><suffix>`` (``prefix`` as ``prefix()`` returned it); ``samples``
        are example shard parts (``-00000-of-00001``); ``sink_globs`` what the sink deletes before writing."""
        self.outputs.append(Output(flag, what, f"{prefix}{shard_template}{suffix}",
                                   tuple(f"{prefix}{s}{suffix}" for s in samples), tuple(sink_globs),
                                   label=label or prefix))

    def file(self, flag: str, what: str, path: str, lock: bool = False, label: str = "") -> str:
        """One output file (a summary, a report); ``lock``: it gets its own lock file (a path of its own
        flag); ``label``: the flag's value when the file is one of a prefix's (messages group by it)."""
        refuse_glob_characters(flag, path)
        if path.endswith(("/", os.sep)) or (not is_remote(path) and os.path.isdir(path)):
            raise TextdpError(f"{flag} {path} is a directory; give a file path")
        resolved = real_path(path)
        self.outputs.append(Output(flag, what, resolved, (resolved,), (), not label, label or path))
        if lock:
            self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {path}")
        return resolved

    def read(self, flag: str, paths: Iterable[str]) -> None:
        """Files the run reads (matched, not patterns); each must be a readable regular file."""
        paths = list(paths)
        refuse_unreadable(flag, paths)
        self.inputs += [(flag, real_path(p)) for p in paths]

    # --- checking -----------------------------------------------------------------------------
    def check(self) -> List[str]:
        """Every refusal that needs no lock; returns the earlier run's files ``--overwrite`` replaces."""
        for flag, path in self.inputs:
            for out in self.outputs:
                if out.catches(path):
                    raise TextdpError(f"{flag} matches {path}, which this run would overwrite or delete as one of "
                                      f"its outputs ({out.what}, {out.flag}); choose another {out.flag}")
        for i, a in enumerate(self.outputs):
            for b in self.outputs[i + 1:]:
                if any(b.catches(s) for s in a.samples) or any(a.catches(s) for s in b.samples):
                    where = a.flag if a.flag == b.flag else f"{a.flag} and {b.flag}"
                    raise TextdpError(f"{where}: {a.what} ({a.pattern}) and {b.what} ({b.pattern}) would be the "
                                      "same files or delete each other's; give each output its own path")
        self.earlier = self._earlier()
        return self.earlier

    def _earlier(self) -> List[str]:
        own_by_flag: Dict[Tuple[str, str], List[str]] = {}
        for out in self.outputs:
            own = ([out.pattern] if self._exists(out.pattern) else []) if out.single else self._match(out.pattern)
            foreign = sorted({p for g in out.sink_globs for p in self._match(g)} - set(own))
            if foreign:
                raise TextdpError(f"{out.flag} {out.label} shares its prefix with "
                                  f"{len(foreign)} file(s) of another run (e.g. {foreign[0]}), which Beam's file "
                                  f"sink would delete when it writes; choose another {out.flag}")
            own_by_flag.setdefault((out.flag, out.label), []).extend(own)
        singles = {(out.flag, out.label) for out in self.outputs if out.single}
        for (flag, label), own in own_by_flag.items():
            if own and not self.overwrite:
                if (flag, label) in self._earlier_names:
                    raise TextdpError(f"{flag} {label} already holds {self._earlier_names[flag, label]} "
                                      f"({sorted(own)[0]}); give --overwrite to replace it, or choose another {flag}")
                if (flag, label) in singles:
                    raise TextdpError(f"{flag} {label} already exists; give --overwrite to replace it, or choose "
                                      f"another {flag}")
                raise TextdpError(f"{flag} {label} already holds {len(own)} file(s) of an earlier run (e.g. "
                                  f"{sorted(own)[0]}); give --overwrite to replace them all, or choose another {flag}")
        return sorted({p for own in own_by_flag.values() for p in own})

    # --- locking ------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Lock every local output (``<output>.lock``, exclusive create), then check again that no output
        appeared since ``check()``. Raises TextdpError (and holds nothing) if another run holds a lock."""
        try:
            for lock, target in sorted(self.lock_targets.items()):
                if is_remote(lock):
                    continue
                self._create(lock, target)
            if self._earlier() != self.earlier:
                raise TextdpError("the outputs changed since they were checked (another run wrote them meanwhile); "
                                  "nothing was run, run again")
        except BaseException:
            self.release()
            raise

    def _create(self, lock: str, target: str) -> None:
        directory = os.path.dirname(lock) or "."
        try:  # the first write of the run: an output that cannot be written is refused here, before the run
            if not os.path.isdir(directory):
                os.makedirs(directory)
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise TextdpError(f"{target} cannot be written: {directory} is a file, not a directory") from None
            try:
                with open(lock, encoding="utf-8") as existing:
                    holder = existing.read(200).strip().splitlines()[0]
            except (OSError, IndexError, UnicodeDecodeError):
                holder = "holder unknown"
            raise TextdpError(f"{target} is being written by another textdp run (lock file {lock}: {holder}); "
                              f"if no run is writing there, the lock is stale: remove {lock} and run again") from None
        except OSError as exc:  # a file where a directory should be, a read-only directory or file system
            raise TextdpError(f"{target} cannot be written: {directory} is not a writable directory "
                              f"({exc.strerror or type(exc).__name__})") from None
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(f"textdp {self.job}, pid {os.getpid()} on {socket.gethostname()}, since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        self._held.append(lock)

    def release(self) -> None:
        """Remove the lock files this guard created (idempotent)."""
        while self._held:
            lock = self._held.pop()
            try:
                os.remove(lock)
            except FileNotFoundError:
                pass

    @property
    def held(self) -> Tuple[str, ...]:
        return tuple(self._held)


def missing_fields(flag: str, names: Sequence[str], known: Sequence[str], where: str) -> Optional[str]:
    """A one-line refusal for field ``names`` that no record has (``known``: the fields seen ``where``),
    with a "did you mean" for a close name; None if every name is known. Names only, never values."""
    import difflib  # pylint: disable=import-outside-toplevel

    missing = [n for n in names if n not in set(known)]
    if not missing:
        return None
    name = missing[0]
    close = [k for k in known if k.lower() == name.lower()] or difflib.get_close_matches(name, list(known), n=1,
                                                                                          cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"{flag} {name!r}: no such field in {where}{hint}; fields there: "
            f"{', '.join(repr(k) for k in sorted(known)[:20])}{' ...' if len(known) > 20 else ''}")
