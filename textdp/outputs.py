"""One guard for everything a job writes: no file of the user's is ever overwritten (issue 25).

Every job (privatize, calibrate, audit, neighbours) registers every path it will write (records,
errors, summaries, public summary, diagnostics, reports) and every file it reads with one
``OutputGuard``, which refuses before anything runs (``TextdpError``, one line):

- glob characters (``*?[]{}``) in an output path: Beam's file sinks read an output prefix as a
  pattern when they delete and rename, so ``o/r[12]`` would delete the runs ``o/r1`` and ``o/r2``;
- an output prefix that is a directory or ends with a path separator (``o/`` would write
  ``o/-00000-of-00001.txt``);
- an output that is, or whose sink would delete, a file the run reads (inputs, word lists, the
  artifact's files), compared by real path (``os.path.realpath``: ``./``, absolute paths and symlinks
  are the same file) and by identity (``st_dev``, ``st_ino``: a hard link is the same file);
- an input pattern that matches a lock file this run creates (it would be read as a record);
- a directory, or anything but a regular file, at an output's name: a run never deletes a directory;
- two outputs of one run that are the same file or delete each other's files;
- an output that already exists, unless ``--overwrite``; files of another run that a sink would delete;
  an existing file that ``--overwrite`` may not replace (``replaceable``: the public summary replaces
  only an earlier public summary); an output directory holding another job's files (``others``).

``acquire()`` (called by ``pipelines.jobs.run_job`` just before the pipeline runs) then creates an
exclusive lock file ``<output>.lock`` (``O_CREAT | O_EXCL``) for every local output, checks again that
no output appeared since the check, and ``release()`` removes the locks when the run ends, however it
ends. Two runs on one output: the second is refused, naming the lock file. A lock whose holder is a
process of this host that no longer runs is stale: it is removed (atomically renamed away, then
checked to be the file that was read) and ``notes`` says so. ``remove_earlier(delete)`` removes the
earlier run's files (``--overwrite``) once the locks are held.

gs:// paths: no real path (object names are compared as written), no lock (object stores have no
exclusive create here); glob refusal and existence (through the ``exists``/``match`` functions the
caller passes, Beam's filesystems) apply. Nothing here imports Beam: the file-system access is passed in.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from textdp.errors import TextdpError

GLOB_CHARACTERS = "*?[]{}"
LOCK_SUFFIX = ".lock"


def is_remote(path: str) -> bool:
    return "://" in path


def identity(path: str) -> Optional[Tuple[int, int]]:
    """(st_dev, st_ino) of a local file (symlinks followed): two names with one identity are one file."""
    if is_remote(path):
        return None
    try:
        result = os.stat(path)
    except OSError:
        return None
    return (result.st_dev, result.st_ino)


def pattern_matches(pattern: str, path: str) -> bool:
    """Whether a file pattern (local, as Beam matches it: ``*`` and ``?`` never cross a ``/``, ``**`` does)
    matches ``path``; both as real paths (the pattern's directories resolved where they exist)."""
    if is_remote(pattern) != is_remote(path):
        return False
    if not is_remote(pattern):
        pattern = _real_pattern(pattern)
        path = real_path(path)
    if "**" in pattern:
        return fnmatch.fnmatchcase(path, pattern)
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, parts))


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
    # an existing file --overwrite may replace (None: any earlier file at the name), and what that is called
    replaceable: Optional[Callable[[str], bool]] = field(default=None, compare=False)
    replaceable_what: str = ""

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
        self.identities: Dict[Tuple[int, int], Tuple[str, str]] = {}  # (st_dev, st_ino) -> (flag, path)
        self.input_patterns: List[Tuple[str, str]] = []  # (flag, pattern as given)
        self.notes: List[str] = []  # what the guard did that the user should know (a stale lock removed)
        self._others: Dict[Tuple[str, str], Tuple[str, Tuple[Tuple[str, Tuple[str, ...]], ...]]] = {}
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

    def directory(self, flag: str, path: str, files: Sequence[str] = (), earlier: str = "",
                  others: Sequence[Tuple[str, Sequence[str]]] = ()) -> str:
        """Check an output directory (calibrate, audit, an artifact) and register ``files``, the names the
        job writes in it; ``earlier``: what its files are called in a refusal ("an earlier audit");
        ``others``: (what, files) of the other jobs that write such directories ("a calibration"): a
        directory holding one of their own files is refused, --overwrite or not (this run would leave
        them next to its own summary). Returns the directory resolved, without a trailing /."""
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
        if others:
            self._others[(flag, path)] = (resolved, tuple((what, tuple(f for f in names if f not in files))
                                                          for what, names in others))
        return resolved

    def sharded(self, flag: str, what: str, prefix: str, shard_template: str, suffix: str,
                samples: Sequence[str], sink_globs: Sequence[str] = (), label: str = "") -> None:
        """Files ``<prefix><shard_template><suffix>`` (``prefix`` as ``prefix()`` returned it); ``samples``
        are example shard parts (``-00000-of-00001``); ``sink_globs`` what the sink deletes before writing."""
        self.outputs.append(Output(flag, what, f"{prefix}{shard_template}{suffix}",
                                   tuple(f"{prefix}{s}{suffix}" for s in samples), tuple(sink_globs),
                                   label=label or prefix))

    def file(self, flag: str, what: str, path: str, lock: bool = False, label: str = "",
             replaceable: Optional[Callable[[str], bool]] = None, replaceable_what: str = "") -> str:
        """One output file (a summary, a report); ``lock``: it gets its own lock file (a path of its own
        flag); ``label``: the flag's value when the file is one of a prefix's (messages group by it);
        ``replaceable(path)``: whether an existing file there is one --overwrite may replace
        (``replaceable_what`` names it in the refusal)."""
        refuse_glob_characters(flag, path)
        if path.endswith(("/", os.sep)) or (not is_remote(path) and os.path.isdir(path)):
            raise TextdpError(f"{flag} {path} is a directory; give a file path")
        resolved = real_path(path)
        self.outputs.append(Output(flag, what, resolved, (resolved,), (), not label, label or path, replaceable,
                                   replaceable_what))
        if lock:
            self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {path}")
        return resolved

    def read(self, flag: str, paths: Iterable[str], pattern: str = "") -> None:
        """Files the run reads (matched, not patterns); each must be a readable regular file. ``pattern``:
        the pattern they were matched from (the run matches it again: it may not match a lock of the run)."""
        paths = list(paths)
        refuse_unreadable(flag, paths)
        for path in paths:
            self.inputs.append((flag, real_path(path)))
            found = identity(path)
            if found is not None:
                self.identities.setdefault(found, (flag, path))
        if pattern:
            self.input_patterns.append((flag, pattern))

    def read_directory(self, flag: str, directory: str) -> None:
        """Every regular file under a local directory the run reads (an artifact); gs:// ones are not
        written by a local run's outputs, so nothing is registered for them."""
        if is_remote(directory) or not os.path.isdir(directory):
            return
        files = [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]
        self.read(flag, [f for f in files if os.path.isfile(f)])

    # --- checking -----------------------------------------------------------------------------
    def check(self) -> List[str]:
        """Every refusal that needs no lock; returns the earlier run's files ``--overwrite`` replaces."""
        for flag, path in self.inputs:
            for out in self.outputs:
                if out.catches(path):
                    raise TextdpError(f"{flag} matches {path}, which this run would overwrite or delete as one of "
                                      f"its outputs ({out.what}, {out.flag}); choose another {out.flag}")
        for flag, pattern in self.input_patterns:
            for lock, target in sorted(self.lock_targets.items()):
                if pattern_matches(pattern, lock):
                    raise TextdpError(f"{flag} {pattern} matches {lock}, the lock file this run creates for {target} "
                                      f"while it runs, which would be read as a record; narrow {flag} (e.g. "
                                      f"'*.txt') or choose another {target.split()[0]}")
        for out in self.outputs:
            for path in self._at_names(out):
                found = identity(path)
                if found is not None and found in self.identities:
                    flag, name = self.identities[found]
                    raise TextdpError(f"{flag} {name} is the same file as {path} (a hard link or another name of "
                                      f"it), which this run would overwrite or delete as one of its outputs "
                                      f"({out.what}, {out.flag}); choose another {out.flag}")
        for i, a in enumerate(self.outputs):
            for b in self.outputs[i + 1:]:
                if any(b.catches(s) for s in a.samples) or any(a.catches(s) for s in b.samples):
                    where = a.flag if a.flag == b.flag else f"{a.flag} and {b.flag}"
                    raise TextdpError(f"{where}: {a.what} ({a.pattern}) and {b.what} ({b.pattern}) would be the "
                                      "same files or delete each other's; give each output its own path")
        self.earlier = self._earlier()
        return self.earlier

    def _at_names(self, out: Output) -> List[str]:
        """Everything that exists at ``out``'s names (its own pattern and what its sink deletes): local
        directories and other non-files included (the file system's ``match`` lists files only)."""
        found = set()
        for pattern in (out.pattern,) + out.sink_globs:
            if is_remote(pattern):
                found |= set(self._match(pattern)) if not out.single else (
                    {pattern} if self._exists(pattern) else set())
            elif out.single:
                found |= {pattern} if os.path.lexists(pattern) else set()
            else:
                found |= set(glob.glob(glob.escape(os.path.dirname(pattern)) + "/" + os.path.basename(pattern)))
        return sorted(found)

    def _refuse_non_files(self) -> None:
        for out in self.outputs:
            for path in self._at_names(out):
                if is_remote(path) or (os.path.isfile(path) and not os.path.isdir(path)):
                    continue
                kind = "is a directory" if os.path.isdir(path) else "is not a regular file"
                raise TextdpError(f"{out.flag} {out.label}: {path} {kind}, where this run writes {out.what}; a run "
                                  f"never deletes a directory or replaces anything but a file of an earlier run: "
                                  f"move it, or choose another {out.flag}")
        for (flag, label), (directory, others) in self._others.items():
            for what, names in others:
                present = [f"{directory}/{n}" for n in names if self._exists(f"{directory}/{n}")]
                if present:
                    raise TextdpError(f"{flag} {label} holds {what} (e.g. {present[0]}), whose files this {self.job} "
                                      f"run would not replace (--overwrite replaces only the files of an earlier "
                                      f"{self.job}); choose another {flag}")

    def _earlier(self) -> List[str]:
        self._refuse_non_files()
        own_by_flag: Dict[Tuple[str, str], List[str]] = {}
        for out in self.outputs:
            own = ([out.pattern] if self._exists(out.pattern) else []) if out.single else self._match(out.pattern)
            foreign = sorted({p for g in out.sink_globs for p in self._match(g)} - set(own))
            if foreign:
                raise TextdpError(f"{out.flag} {out.label} shares its prefix with "
                                  f"{len(foreign)} file(s) of another run (e.g. {foreign[0]}), which Beam's file "
                                  f"sink would delete when it writes; choose another {out.flag}")
            if own and self.overwrite and out.replaceable is not None and not out.replaceable(own[0]):
                raise TextdpError(f"{out.flag} {own[0]} exists and is not {out.replaceable_what}: --overwrite "
                                  f"replaces only that; choose another {out.flag}")
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
            holder, stale = _lock_holder(lock)
            if stale and _remove_stale_lock(lock, stale):
                self.notes.append(f"removed the stale lock file {lock} ({holder}: that process no longer runs on "
                                  "this host)")
                return self._create(lock, target)
            raise TextdpError(f"{target} is being written by another textdp run (lock file {lock}: {holder}); "
                              f"if no run is writing there, the lock is stale: remove {lock} and run again") from None
        except OSError as exc:  # a file where a directory should be, a read-only directory or file system
            raise TextdpError(f"{target} cannot be written: {directory} is not a writable directory "
                              f"({exc.strerror or type(exc).__name__})") from None
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(f"textdp {self.job}, pid {os.getpid()} on {socket.gethostname()}, since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        self._held.append(lock)
        return None

    def remove_earlier(self, delete: Callable[[List[str]], None]) -> List[str]:
        """--overwrite: remove the earlier run's files (``self.earlier``, checked again under the locks by
        ``acquire``) that still exist, with ``delete`` (the file system's); never a directory (refused by
        ``check``). Returns what was removed; idempotent."""
        removed = [p for p in self.earlier if (self._exists(p) if is_remote(p) else os.path.isfile(p))]
        if removed:
            delete(removed)
        self.earlier = []
        return removed

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


def _lock_holder(lock: str) -> Tuple[str, Optional[Tuple[int, int, str]]]:
    """The holder line of a lock file, and (st_dev, st_ino, content) when it names a process of this host
    that no longer runs (a stale lock; None when alive, elsewhere or unreadable)."""
    try:
        with open(lock, "rb") as existing:
            info = os.fstat(existing.fileno())
            content = existing.read(200)
        holder = content.decode("utf-8").strip().splitlines()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return "holder unknown", None
    found = re.match(r"textdp [\w-]+, pid (\d+) on (\S+), since ", holder)
    if not found or found.group(2) != socket.gethostname():
        return holder, None
    pid = int(found.group(1))
    if pid <= 0 or pid == os.getpid():
        return holder, None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return holder, (info.st_dev, info.st_ino, content)
    except (OSError, OverflowError):  # alive (another user's process) or cannot tell
        return holder, None
    return holder, None


def _remove_stale_lock(lock: str, stale: Tuple[int, int, str]) -> bool:
    """Rename the stale lock away (atomic), then check that what moved is the file that was read: a run
    that replaced the lock in between gets its lock back (link: never over a newer one). True if removed."""
    aside = f"{lock}.stale-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(lock, aside)
    except OSError:
        return False
    info = os.stat(aside)
    if (info.st_dev, info.st_ino) != stale[:2]:
        try:
            os.link(aside, lock)
        except OSError:
            pass
        os.remove(aside)
        return False
    os.remove(aside)
    return True


def missing_fields(flag: str, names: Sequence[str], known: Sequence[str], where: str) -> Optional[str]:
    """A one-line refusal for field ``names`` that no record has (``known``: the fields seen ``where``),
    with a "did you mean" for a close name; None if every name is known. Names only, never values."""
    import difflib  # pylint: disable=import-outside-toplevel

    missing = [n for n in names if n not in set(known)]
    if not missing:
        return None
    name = missing[0]
    # keys can be data ({"alice@x.com": ...}): only names that look like identifiers are shown, at most 10
    shown = sorted(k for k in set(known) if FIELD_NAME_SHOWN.fullmatch(k))
    close = [k for k in shown if k.lower() == name.lower()] or difflib.get_close_matches(name, shown, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    others = len(set(known)) - min(len(shown), MAX_FIELDS_SHOWN)
    listed = ", ".join(repr(k) for k in shown[:MAX_FIELDS_SHOWN]) or "none shown"
    more = f" and {others} other field(s) (a name that does not look like an identifier is never shown)" if others else ""
    return f"{flag} {name!r}: no such field in {where}{hint}; fields there: {listed}{more}"


FIELD_NAME_SHOWN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,40}")
MAX_FIELDS_SHOWN = 10
