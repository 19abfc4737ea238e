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

- a name that is not UTF-8 (argv's undecodable bytes arrive as surrogate escapes; Beam encodes every
  path as UTF-8 and would fail after the run) or a file name this run would create (a shard, a lock,
  Beam's ``beam-temp-<name>-<32 hex>`` folder, the run record) longer than the file system's NAME_MAX;
- an output inside a directory the run reads whole (the artifact) or that textdp owns (the cache);
- an output at the name of a lock file or run record this run creates.

Only textdp's own files are ever replaced (``--overwrite``): when a run ends, every local output flag
that wrote files leaves a run record (``<prefix>.textdp-run.json`` for a prefix, ``<dir>/textdp-run.json``
for a directory) listing the names of the files it wrote. A later run recognizes an existing file at one
of its names as an earlier run's only when the record there lists it; any other file (a user's own
``summary.json`` or ``report.html`` in a project directory, a hand-made ``<output>-errors-00007.jsonl``) is
refused with one line naming it, with --overwrite or without, and never called "an earlier run". Files
an older textdp wrote before records existed are refused the same way (claim less: move them). The
public summary keeps its own test (``replaceable``: only an earlier public summary). gs:// outputs get
no record and no such test (an object store has no exclusive create here; see below).

``acquire()`` (called by ``pipelines.jobs.run_job`` just before the pipeline runs) then creates an
exclusive lock file ``<output>.lock`` (``O_CREAT | O_EXCL``) for every local output, then one lock
``<directory>/.textdp.lock`` for every directory the run writes files in, checks again that no output
appeared since the check, and ``release()`` removes the locks when the run ends, however it ends. Why a
directory lock: Beam's sinks delete by glob (``<prefix>-*-of-*``, ``<prefix>-errors-*``), so runs with
different prefixes overlap (``o/q`` deletes the files of ``o/q-errors``), and one run's public summary
can be another's operator summary; which name sets overlap is a question about glob patterns that a
per-name lock cannot answer for every pair. Every file a run writes or deletes is in the directories of
its outputs (no pattern crosses a ``/``, real paths are compared), so one lock per directory makes any
two runs whose files could meet exclude each other, at the price that two runs into one directory no
longer run at once (use two directories). Two runs on one output or one directory: the second is
refused at once, naming the lock file and its holder. A lock holds a holder line (job, pid, host, time) and
an identity line (boot id, PID-namespace id, the process's start time: ``process_identity``). It is stale
only when provably dead: this host name, this boot, this PID namespace, and the pid is gone or is a process
started at another time; then it is removed (atomically renamed away, then checked to be the file that was
read) and ``notes`` says so. Anything else (another host, boot or namespace: containers sharing a volume
and a host name; an empty or cut lock; an older textdp's lock) is refused with what to check and how to
remove it; a file at a lock's name that is not in textdp's lock format (``poetry.lock``) is the user's:
refused without quoting it. A lock that cannot be written whole (disk full) is removed, one line.
``release()`` removes only a lock that still holds what this run wrote. ``remove_earlier(delete)`` takes the earlier run's
files away (``--overwrite``) once the locks are held: local ones are moved into a hidden folder ``.textdp-earlier-*``
next to them, removed by ``commit_earlier()`` when the run succeeded and put back by ``restore_earlier()`` when it
failed (the new partial files removed first; those of a run that finished but was judged failed, e.g. above
--max-failed-fraction, are kept in a hidden folder ``.textdp-failed-*`` for the user to read), so a late failure never
destroys the earlier release (round 6 F14); a process killed with SIGKILL leaves them in ``.textdp-earlier-*``.
``write_records()`` writes the run records before the locks go.

gs:// paths: no real path (object names are compared as written), no lock (object stores have no
exclusive create here); glob refusal and existence (through the ``exists``/``match`` functions the
caller passes, Beam's filesystems) apply. Nothing here imports Beam: the file-system access is passed in.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from textdp.errors import FIELD_NAME_SHOWN, TextdpError  # the field-name rule lives in errors (R9-6: the public summary uses it)
from textdp.paths import _is_control, is_remote, shown  # noqa: F401  (the one path printer, on the floor: R11-4)

GLOB_CHARACTERS = "*?[]{}"
LOCK_SUFFIX = ".lock"
DIRECTORY_LOCK = ".textdp.lock"  # one per directory a run writes files in (see the module docstring)
RUN_RECORD_SUFFIX = ".textdp-run.json"  # <prefix>.textdp-run.json: the files a run at <prefix> wrote
DIRECTORY_RUN_RECORD = "textdp-run.json"  # <dir>/textdp-run.json: the files a run into <dir> wrote
RECORD_KEY = "textdp_run_record"
EARLIER_FOLDER_PREFIX = ".textdp-earlier-"  # --overwrite: the earlier run's files wait here until the run ends
FAILED_FOLDER_PREFIX = ".textdp-failed-"  # --overwrite: a finished run judged failed keeps its files here
NAME_MAX = 255  # bytes in one file name (Linux, macOS); the directory's own limit is asked where it exists


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
            raise TextdpError(f"{flag}: {shown(path)} {problem}")


def refuse_tilde(flag: str, path: str) -> None:
    """A local output path starting with ``~`` (``--output=~/x``: the shell expands no tilde after ``=``) would
    create a directory literally named ``~`` in the working directory (F16): refused, never expanded silently."""
    if not is_remote(path) and path.startswith("~"):
        raise TextdpError(f"{flag} {shown(path)} starts with ~, which the shell did not expand (it does not after "
                          f"{flag}=): this run would create a directory named ~ here; give the full path (e.g. "
                          f"{flag} {os.path.expanduser(path.split('/', 1)[0])}/...)")


def refuse_control_characters(flag: str, path: str) -> None:
    """A control character in an output path (a newline from a pasted value or a ``"$(...)"``, ESC) is always a
    mistake: it would be in the file names and would split (or, with terminal escapes, rewrite) the console lines that
    name them, so a name could forge a line such as ``records: ...`` (round 8, R8-7). Refused in one line, the path shown
    with escapes."""
    found = sorted({c for c in path if _is_control(c)})
    if found:
        raise TextdpError(f"{flag} {shown(path)} contains the control character{'s' if len(found) > 1 else ''} "
                          f"{' '.join(repr(c)[1:-1] for c in found)}: output paths may not contain control characters "
                          "(a newline, a carriage return, ESC...); choose another name")


def refuse_glob_characters(flag: str, path: str) -> None:
    refuse_control_characters(flag, path)
    refuse_tilde(flag, path)
    found = [c for c in GLOB_CHARACTERS if c in path]
    if found:
        raise TextdpError(f"{flag} {path} contains the glob character{'s' if len(found) > 1 else ''} "
                          f"{' '.join(found)}: output paths may not contain any of {GLOB_CHARACTERS}, because "
                          "Beam's file sinks read them as a pattern when they delete and rename files; choose "
                          "another name")


SYSTEM_PLACES = ("/dev", "/proc", "/sys")  # pseudo file systems: never a place for a release (round 7 F4)


def refuse_system_place(flag: str, given: str, resolved: str) -> None:
    """An output prefix under /dev, /proc or /sys (``--output /dev/null``: "discard it"), or at an existing
    file that is not a regular one (a device, a FIFO, a socket): refused in one line (round 7 F4)."""
    if is_remote(resolved):
        return
    place = next((p for p in SYSTEM_PLACES if resolved == p or resolved.startswith(p + "/")), None)
    if place is not None:
        raise TextdpError(f"{flag} {shown(given)} is under {place}, a system folder, not a place for the run's "
                          "files (to check a run without writing anything, use --dry-run); choose another " + flag)
    try:
        mode = os.stat(given).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise TextdpError(f"{flag} {shown(given)} is an existing file that is not a regular file (a device, FIFO or "
                          f"socket); it is a file-name prefix (to write nothing, use --dry-run); choose another {flag}")


escaped = shown  # the name fix8b gave it (output paths): one function


def restore_command(folder: str, directory: str, names: Iterable[str]) -> str:
    """The shell command that moves every file of ``folder`` (named ``names``) back into ``directory`` and removes
    the folder, safe to paste (R11-1): each path shell-quoted (a space, ``$(...)`` or ``;`` in a directory name is
    part of the name, never code), ``--`` before the paths, and the globs that match the names there: ``*`` for
    names without a leading dot, ``.[!.]*`` for names with one (a release at ``--output dir/.rel``; ``*`` alone
    skips them)."""
    import shlex

    quoted_folder, quoted_directory = shlex.quote(shown(folder)), shlex.quote(shown(directory))
    globs = [glob for glob, wanted in (("*", any(not n.startswith(".") for n in names)),
                                       (".[!.]*", any(n.startswith(".") for n in names))) if wanted] or ["*"]
    sources = " ".join(f"{quoted_folder}/{glob}" for glob in globs)
    return f"mv -- {sources} {quoted_directory}/ && rmdir -- {quoted_folder}"


def refuse_undecodable(flag: str, path: str) -> None:
    """A name with bytes that are not UTF-8 is refused: Beam encodes every path as UTF-8 (its string
    coder), so the run would fail after the job with UnicodeEncodeError, its records left without a summary."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise TextdpError(f"{flag} {shown(path)} has bytes that are not UTF-8 in its name: Beam writes every "
                          "file name as UTF-8 and cannot use it; rename it (or choose another name)") from None


def name_max(directory: str) -> int:
    """The longest file name (bytes) the file system at ``directory`` (or its nearest existing parent) takes."""
    while directory and not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    try:
        return int(os.pathconf(directory or ".", "PC_NAME_MAX"))
    except (OSError, ValueError):
        return NAME_MAX


def refuse_long_name(flag: str, label: str, path: str, what: str) -> None:
    """``path``'s last component longer than its directory takes: refused before the run."""
    if is_remote(path):
        return
    name = os.path.basename(path)
    length, limit = len(os.fsencode(name)), name_max(os.path.dirname(path))
    if length > limit:
        raise TextdpError(f"{flag} {shown(label)} is too long: this run would create {what} named "
                          f"{shown(name[:24])}... of {length} bytes, above the file system's limit of {limit} bytes "
                          f"per file name (NAME_MAX); choose a shorter {flag}")


def _record_document(path: str) -> Optional[dict]:
    """A textdp run record's JSON document; None when ``path`` is not one (or is absent)."""
    try:
        with open(path, "rb") as handle:
            content = json.loads(handle.read(1 << 22).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(content, dict) or content.get(RECORD_KEY) != 1 or not isinstance(content.get("files"), list):
        return None
    return content


def read_record(path: str) -> Optional[List[str]]:
    """The file names a run record lists; None when ``path`` is not a textdp run record (or is absent)."""
    content = _record_document(path)
    return None if content is None else [name for name in content["files"] if isinstance(name, str)]


def read_record_flag(path: str) -> Optional[str]:
    """The output flag a run record was written for (``--output``, ``--diagnostics-output``...); None when ``path``
    is not a run record or names none."""
    flag = (_record_document(path) or {}).get("flag")
    return flag if isinstance(flag, str) else None


def read_attached(path: str) -> List[str]:
    """The files a run record says belong to its release outside its own names (the public summary: an
    absolute path); [] when there are none or ``path`` is not a run record."""
    found = (_record_document(path) or {}).get("attached", [])
    return [name for name in found if isinstance(name, str) and os.path.isabs(name)] if isinstance(found, list) else []


def public_summary_output(path: str) -> Optional[str]:
    """The ``output`` a local public summary file names (``"publishable": true``, as ``public_summary`` writes);
    None when it is not one, names none, or cannot be read."""
    try:
        with open(path, "rb") as handle:
            document = json.loads(handle.read(1 << 24).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(document, dict) or document.get("publishable") is not True:
        return None
    described = document.get("output")
    return described if isinstance(described, str) else None


def another_release(path: str, output: str, release_of: Callable[[str], Tuple[str, str]]) -> Optional[str]:
    """Whose public summary the local file ``path`` is: None when it is not a public summary or it is the one of
    this release (``--output output``), else the ``--output`` prefix of the other release it describes. The one
    test of both the public-summary rule and --overwrite's handling of a run record's ``attached`` file (R10-1).

    ``release_of(described output) -> (its --output prefix, the name of one file of that release that the release's
    run record lists)``. The file is this release's only when its own ``output`` names this release: the same
    prefix or the same real path, or (an --output once given relative to another directory) a prefix of the same
    name whose member file this release's run record lists, while the prefix it names, resolved from here, is no
    other release's (no run record of its own there). A run record's ``attached`` entry is never proof: the file at
    that path may since have become another release's public summary (one fixed publishing path)."""
    described = public_summary_output(path) if not is_remote(path) else None
    if described is None:
        return None
    prefix, member = release_of(described)
    if prefix == output:
        return None
    if is_remote(prefix) or is_remote(output):
        return prefix
    if os.path.realpath(prefix) == os.path.realpath(output):
        return None
    own = read_record(real_path(output) + RUN_RECORD_SUFFIX) or ()
    if member and os.path.basename(prefix) == os.path.basename(output) and member in own \
            and read_record(real_path(prefix) + RUN_RECORD_SUFFIX) is None:
        return None  # this release, its --output once given relative to another directory
    return prefix


def refuse_public_of_another_release(public: str, paths: Iterable[str], output: str,
                                     release_of: Callable[[str], Tuple[str, str]]) -> None:
    """The public-summary rule of both jobs (round 7 F9, R9b-9, R10-1): an existing public summary at ``public``
    that is another release's (``another_release``) is refused in one line, with --overwrite or without, so that
    release keeps its publishable document; ``paths``: the public summary files at that place. The batch and
    streaming jobs both ask this rule (the batch job with --overwrite: without it the guard refuses any existing
    file)."""
    for path in sorted(paths):
        prefix = another_release(path, output, release_of)
        if prefix is not None:
            raise TextdpError(f"--public-summary {shown(public)}: {shown(path)} is the public summary of another "
                              f"release (its output is {shown(prefix)}, not --output {shown(output)}); a run never "
                              "replaces another release's public summaries, with --overwrite or without: choose "
                              "another --public-summary")


def _is_public_summary_file(path: str) -> bool:
    from textdp.privacy.summary import is_public_summary

    try:
        with open(path, "rb") as handle:
            return is_public_summary(handle.read(1 << 24))
    except OSError:
        return False


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
        self._made_dirs: List[str] = []  # folders acquire() created for the locks, deepest first
        self._aside: Dict[str, str] = {}  # directory -> its hidden folder holding the earlier run's files
        self._moved: List[Tuple[str, str]] = []  # (earlier file, where it was moved aside)
        self.unrestored: List[Tuple[str, str]] = []  # restore_earlier: (earlier file, where it still is) (R11-5)
        self._held: List[str] = []
        self._contents: Dict[str, bytes] = {}  # lock -> what this run wrote in it (release() checks it is still that)
        self._prefixes: Dict[str, str] = {}
        self._earlier_names: Dict[Tuple[str, str], str] = {}
        self.records: Dict[str, Tuple[str, str]] = {}  # flag -> (its run record, the flag's value)
        self.directory_locks: Dict[str, str] = {}  # <dir>/.textdp.lock -> what it guards (set by check())
        self._inside: List[Tuple[str, str, str]] = []  # (flag, real directory, what): no output may be in it
        self._attach: Dict[str, str] = {}  # flag -> the flag whose run record lists its file (--public-summary)
        self._earlier_attached: Dict[str, List[str]] = {}  # record flag -> attached files its earlier record lists
        # prefix flag -> release_of (refuse_public_of_another_release): whose public summary an attached file is
        self._release_of: Dict[str, Callable[[str], Tuple[str, str]]] = {}

    # --- registering --------------------------------------------------------------------------
    def prefix(self, flag: str, prefix: str, release_of: Optional[Callable[[str], Tuple[str, str]]] = None) -> str:
        """Check an output prefix (``<prefix>-SSSSS-of-NNNNN.ext`` and the like); returns it resolved.
        ``release_of``: how a public summary names the release of such a prefix (``another_release``); without it
        no file its run record lists as ``attached`` is taken as the release's own."""
        refuse_undecodable(flag, prefix)
        refuse_glob_characters(flag, prefix)
        if prefix.endswith(("/", os.sep)) or (not is_remote(prefix) and os.path.basename(prefix) in ("", ".", "..")):
            raise TextdpError(f"{flag} {prefix} ends with a path separator: it is a file-name prefix, not a "
                              f"directory (e.g. {prefix.rstrip('/' + os.sep) or '.'}/run writes run-00000-of-00001...)")
        if not is_remote(prefix) and os.path.isdir(prefix):
            raise TextdpError(f"{flag} {prefix} is a directory: it is a file-name prefix (e.g. {prefix}/run writes "
                              "run-00000-of-00001... inside it)")
        resolved = _real_pattern(prefix)
        refuse_system_place(flag, prefix, resolved)
        if resolved + LOCK_SUFFIX == os.path.join(os.path.dirname(resolved), DIRECTORY_LOCK):  # a prefix '.textdp'
            raise TextdpError(f"{flag} {prefix}: the file-name prefix {DIRECTORY_LOCK[:-len(LOCK_SUFFIX)]} is textdp's "
                              f"own name (its lock file would be {DIRECTORY_LOCK}, the lock textdp keeps for the "
                              "whole directory); choose another prefix")
        if resolved in self._prefixes:
            raise TextdpError(f"{flag} {prefix} is also {self._prefixes[resolved]}: give each output its own prefix")
        self._prefixes[resolved] = f"{flag} {prefix}"
        if release_of is not None:
            self._release_of[flag] = release_of
        self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {prefix}")
        if not is_remote(resolved):
            self.records.setdefault(flag, (resolved + RUN_RECORD_SUFFIX, prefix))
            refuse_long_name(flag, prefix, resolved + LOCK_SUFFIX, "its lock file")
            refuse_long_name(flag, prefix, resolved + RUN_RECORD_SUFFIX, "its run record")
        return resolved

    def directory(self, flag: str, path: str, files: Sequence[str] = (), earlier: str = "",
                  others: Sequence[Tuple[str, Sequence[str]]] = ()) -> str:
        """Check an output directory (calibrate, audit, an artifact) and register ``files``, the names the
        job writes in it; ``earlier``: what its files are called in a refusal ("an earlier audit");
        ``others``: (what, files) of the other jobs that write such directories ("a calibration"): a
        directory holding one of their own files is refused, --overwrite or not (this run would leave
        them next to its own summary). Returns the directory resolved, without a trailing /."""
        refuse_undecodable(flag, path)
        refuse_glob_characters(flag, path)
        stripped = path.rstrip("/") or path
        if not is_remote(stripped) and os.path.exists(stripped) and not os.path.isdir(stripped):
            raise TextdpError(f"{flag} {path} is a file, not a directory")
        resolved = real_path(stripped)
        self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {path}")
        refuse_long_name(flag, path, resolved + LOCK_SUFFIX, "its lock file")
        if files and not is_remote(resolved):
            self.records.setdefault(flag, (f"{resolved}/{DIRECTORY_RUN_RECORD}", path))
        for name in files:
            self.file(flag, name, f"{resolved}/{name}", label=path)
        if earlier:
            self._earlier_names[(flag, path)] = earlier
        if others:
            self._others[(flag, path)] = (resolved, tuple((what, tuple(f for f in names if f not in files))
                                                          for what, names in others))
        return resolved

    def sharded(self, flag: str, what: str, prefix: str, shard_template: str, suffix: str,
                samples: Sequence[str], sink_globs: Sequence[str] = (), label: str = "",
                temporary: str = "") -> None:
        """Files ``<prefix><shard_template><suffix>`` (``prefix`` as ``prefix()`` returned it); ``samples``
        are example shard parts (``-00000-of-00001``); ``sink_globs`` what the sink deletes before writing;
        ``temporary``: the name part a writer puts before a shard's name while writing it (its length counts)."""
        self.outputs.append(Output(flag, what, f"{prefix}{shard_template}{suffix}",
                                   tuple(f"{prefix}{s}{suffix}" for s in samples), tuple(sink_globs),
                                   label=label or prefix))
        sink = os.path.basename(prefix) + shard_template.split("[", 1)[0].rstrip("-")  # Beam's sink prefix
        refuse_long_name(flag, label or prefix, os.path.join(os.path.dirname(prefix), f"beam-temp-{sink}-{'0' * 32}"),
                         "Beam's temporary folder")
        for sample in samples[:1] if temporary else ():
            refuse_long_name(flag, label or prefix, os.path.join(os.path.dirname(prefix), temporary +
                                                                 os.path.basename(f"{prefix}{sample}{suffix}")),
                             "a temporary file of the shuffle writer")

    def file(self, flag: str, what: str, path: str, lock: bool = False, label: str = "",
             replaceable: Optional[Callable[[str], bool]] = None, replaceable_what: str = "",
             attach_to: str = "") -> str:
        """One output file (a summary, a report); ``lock``: it gets its own lock file (a path of its own
        flag); ``label``: the flag's value when the file is one of a prefix's (messages group by it);
        ``replaceable(path)``: whether an existing file there is one --overwrite may replace
        (``replaceable_what`` names it in the refusal); ``attach_to``: the flag whose run record lists this file
        as part of its release (``attached``), so that the next --overwrite of that release replaces it too."""
        refuse_undecodable(flag, path)
        refuse_glob_characters(flag, path)
        if path.endswith(("/", os.sep)) or (not is_remote(path) and os.path.isdir(path)):
            raise TextdpError(f"{flag} {path} is a directory; give a file path")
        resolved = _real_pattern(path)  # its folder resolved, not the name: a symlink there is refused (R11-3)
        refuse_system_place(flag, path, real_path(path))  # a public summary under /dev/shm is gone at reboot (R8-15)
        self.outputs.append(Output(flag, what, resolved, (resolved,), (), not label, label or path, replaceable,
                                   replaceable_what))
        refuse_long_name(flag, label or path, resolved, what)
        if lock:
            self.lock_targets.setdefault(resolved + LOCK_SUFFIX, f"{flag} {path}")
            refuse_long_name(flag, path, resolved + LOCK_SUFFIX, "its lock file")
        if attach_to:
            self._attach[flag] = attach_to
        return resolved

    def read(self, flag: str, paths: Iterable[str], pattern: str = "") -> None:
        """Files the run reads (matched, not patterns); each must be a readable regular file. ``pattern``:
        the pattern they were matched from (the run matches it again: it may not match a lock of the run)."""
        paths = list(paths)
        for path in ([pattern] if pattern else []) + paths:
            refuse_undecodable(flag, path)
        refuse_unreadable(flag, paths)
        seen: Dict[Tuple[int, int], str] = {}
        for path in paths:
            self.inputs.append((flag, real_path(path)))
            found = identity(path)
            if found is not None:
                self.identities.setdefault(found, (flag, path))
            if pattern and found is not None:  # one file matched twice (a symlink, a hard link): read twice (F1)
                if found in seen:
                    raise TextdpError(f"{flag} matches one file twice: {shown(seen[found])} and {shown(path)} are the "
                                      "same file (a symlink or hard link), so each of its records would be released "
                                      f"twice with fresh noise (two releases of a record compose); narrow {flag} to "
                                      "name each file once")
                seen[found] = path
        if pattern:
            self.input_patterns.append((flag, pattern))

    def read_directory(self, flag: str, directory: str) -> None:
        """Every regular file under a local directory the run reads (an artifact); gs:// ones are not
        written by a local run's outputs, so nothing is registered for them."""
        if is_remote(directory) or not os.path.isdir(directory):
            return
        self.inside(flag, directory, f"the {flag} it reads")
        files = [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]
        self.read(flag, [f for f in files if os.path.isfile(f)])

    def read_place_holding(self, path: str) -> Optional[Tuple[str, str]]:
        """(flag, what) of a directory the run reads (``inside``) that holds the local ``path``, else None: a file the
        run writes outside the guard's outputs (the ledger) asks this (R12-4)."""
        real = os.path.realpath(path)
        for flag, directory, what in self._inside:
            if real == directory or real.startswith(directory.rstrip("/") + "/"):
                return flag, what
        return None

    def inside(self, flag: str, directory: str, what: str) -> None:
        """No output of the run may be ``directory`` or inside it (an artifact, the textdp cache)."""
        if not is_remote(directory):
            self._inside.append((flag, os.path.realpath(directory), what))

    # --- checking -----------------------------------------------------------------------------
    def check(self) -> List[str]:
        """Every refusal that needs no lock; returns the earlier run's files ``--overwrite`` replaces."""
        from textdp.artifact.store import cache_dir

        self.inside("the textdp cache", cache_dir(), "textdp's cache (TEXTDP_CACHE_DIR)")
        for flag, path in self.inputs:
            for out in self.outputs:
                if out.catches(path):
                    raise TextdpError(f"{flag} matches {shown(path)}, which this run would overwrite or delete as one of "
                                      f"its outputs ({out.what}, {out.flag}); choose another {out.flag}")
        self._check_places()
        self._refuse_recorded_inputs()
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
                    raise TextdpError(f"{flag} {shown(name)} is the same file as {shown(path)} (a hard link or another name of "
                                      f"it), which this run would overwrite or delete as one of its outputs "
                                      f"({out.what}, {out.flag}); choose another {out.flag}")
        for i, a in enumerate(self.outputs):
            for b in self.outputs[i + 1:]:
                if any(b.catches(s) for s in a.samples) or any(a.catches(s) for s in b.samples):
                    where = a.flag if a.flag == b.flag else f"{a.flag} and {b.flag}"
                    raise TextdpError(f"{where}: {a.what} ({a.pattern}) and {b.what} ({b.pattern}) would be the "
                                      "same files or delete each other's; give each output its own path")
        self._refuse_leftover_earlier(unlocked=True)
        self.earlier = self._earlier()
        return self.earlier

    def _check_places(self) -> None:
        """Outputs inside a directory the run reads whole, at a lock's or record's name, or with too long a
        name; inputs at a record's name. Sets ``directory_locks``."""
        local = [out for out in self.outputs if not is_remote(out.pattern)]
        for out in local:
            for flag, directory, what in self._inside:
                if out.pattern == directory or out.pattern.startswith(directory.rstrip("/") + "/"):
                    raise TextdpError(f"{out.flag} {shown(out.label)} is inside {flag} {shown(directory)}: a run never "
                                      f"writes into {what} ({out.what} would go there); choose another {out.flag}")
            for sample in out.samples:
                refuse_long_name(out.flag, out.label, sample, out.what)
        self.directory_locks = {}
        for out in local:
            directory = os.path.dirname(out.pattern)
            target = self.directory_locks.get(os.path.join(directory, DIRECTORY_LOCK))
            if target is None:
                self.directory_locks[os.path.join(directory, DIRECTORY_LOCK)] = (
                    f"the directory {directory} (where {out.flag} {out.label} writes)")
        made = [(lock, f"the lock file this run holds for {target} while it runs")
                for lock, target in list(self.lock_targets.items()) + list(self.directory_locks.items())]
        made += [(record, f"the run record this run writes for {flag} {label}")
                 for flag, (record, label) in self.records.items()]
        for out in self.outputs:
            for path, what in made:
                if out.catches(path):
                    raise TextdpError(f"{out.flag} {shown(out.label)}: {path} is {what}, not a file this run can "
                                      f"write {out.what} to; choose another {out.flag}")
        for flag, path in self.inputs:
            for made_path, what in made:
                if path == made_path:
                    raise TextdpError(f"{flag} matches {shown(path)}, which is {what}; choose another {flag}")

    def _refuse_recorded_inputs(self) -> None:
        """An input that an earlier run's record lists as textdp's own output (its release shards, error
        records, summaries, public summary) or that is a run record: refused (round 7 F3: a glob sweeping them
        in would release them as records). Only ``--input`` (the records privatize releases): audit's --corpus may
        well be a release, and an artifact directory holds the neighbours job's run record."""
        cache: Dict[str, Tuple[set, set]] = {}
        for flag, path in self.inputs:
            if is_remote(path) or flag != "--input":
                continue
            directory = os.path.dirname(path)
            if directory not in cache:
                names, attached = set(), set()
                for record in glob.glob(glob.escape(directory) + "/*" + RUN_RECORD_SUFFIX) + \
                        [os.path.join(directory, DIRECTORY_RUN_RECORD)]:
                    listed = read_record(record)
                    if listed is None:
                        continue
                    names |= set(listed) | {os.path.basename(record)}
                    attached |= {real_path(a) for a in read_attached(record)}
                cache[directory] = (names, attached)
            names, _ = cache[directory]
            attached = set().union(*(a for _, a in cache.values()))
            if os.path.basename(path) in names or path in attached:
                raise TextdpError(f"{flag} matches {shown(path)}, a file an earlier textdp run wrote (a run record in "
                                  f"{shown(directory)} lists it as its output), which would be read as records; "
                                  f"narrow {flag} (e.g. '*.txt') or move the earlier run's files")

    def _refuse_leftover_earlier(self, unlocked: bool = False) -> None:
        """A hidden ``.textdp-earlier-*`` folder holding files at this run's names: an --overwrite run was
        killed (SIGKILL, OOM, power) before it could put the earlier release back. Refused with where the
        release is and how to restore it (never restored automatically: which of the files at the names are
        whose cannot be proven after a crash). Round 7 F1. The release's public summary, elsewhere (its run record
        lists it as ``attached``), may wait in a folder of its own directory: every such folder is named, each with
        its ``mv`` (round 8, R8-13). ``unlocked`` (before this run holds the locks, so that this refusal comes
        before one about the killed run's files at the names): a directory whose lock a live run holds is skipped
        (its folder is that run's; ``acquire`` refuses it by the lock)."""
        wanted: Dict[str, List[Tuple[str, Callable[[str], bool]]]] = {}  # directory -> (flag label, name test)
        for out in self.outputs:
            if not is_remote(out.pattern):
                wanted.setdefault(os.path.dirname(out.pattern), []).append(
                    (f"{out.flag} {shown(out.label)}", lambda path, out=out: out.catches(path)))
        for flag, (record, label) in self.records.items():
            for attached in read_attached(record):
                wanted.setdefault(os.path.dirname(attached), []).append(
                    (f"{flag} {shown(label)} (its release's public summary)",
                     lambda path, attached=attached: os.path.basename(path) == os.path.basename(attached)))
        found = []  # (what, folder, directory, files in it, an example)
        for directory in sorted(wanted):
            lock = os.path.join(directory, DIRECTORY_LOCK)
            if unlocked and os.path.lexists(lock) and lock_holder(lock)[0] != "stale":
                continue
            for folder in sorted(glob.glob(glob.escape(directory) + "/" + EARLIER_FOLDER_PREFIX + "*")):
                if not os.path.isdir(folder) or os.path.islink(folder):
                    continue
                try:
                    names = sorted(os.listdir(folder))
                except OSError:
                    continue
                match = next(((what, n) for n in names for what, test in wanted[directory]
                              if test(os.path.join(directory, n))), None)
                if match is not None:
                    found.append((match[0], folder, directory, len(names), match[1], names))
        if not found:
            return
        what, folder, _, count, example, _ = found[0]
        restore = "; ".join(restore_command(f, d, names) for _, f, d, _, _, names in found)
        more = (f" and {len(found) - 1} more such folder(s) of the same release ("
                + ", ".join(shown(f) for _, f, _, _, _, _ in found[1:]) + ")") if len(found) > 1 else ""
        raise TextdpError(f"{what}: {shown(folder)} holds an earlier release ({count} file(s), e.g. {shown(example)}) "
                          f"that an --overwrite run moved aside and could not put back (it was killed){more}; restore "
                          f"it with: {restore} (after removing the killed run's files at those names), or delete the "
                          "folder(s) if not wanted; then run again")

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
                if is_remote(path) or (os.path.isfile(path) and not os.path.isdir(path) and not os.path.islink(path)):
                    continue
                kind = ("is a symbolic link (the run would write through it, elsewhere: R11-3)" if os.path.islink(path)
                        else "is a directory" if os.path.isdir(path) else "is not a regular file")
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

    def _recorded(self) -> Dict[str, Optional[List[str]]]:
        """flag -> the names its run record lists (None: no record there); a file at a record's name that is
        not a record is refused (it is the user's)."""
        found: Dict[str, Optional[List[str]]] = {}
        for flag, (record, label) in self.records.items():
            names = read_record(record)
            if names is None and os.path.lexists(record):
                raise TextdpError(f"{flag} {shown(label)}: {record} is not a textdp run record, and this run would "
                                  f"write its run record there; a run never replaces a file it did not write: move "
                                  f"it, or choose another {flag}")
            found[flag] = names
        return found

    def _refuse_foreign(self, out: Output, own: List[str], recorded: Dict[str, Optional[List[str]]]) -> None:
        """An existing file at one of ``out``'s names that no run record lists is the user's: refused."""
        if out.flag not in recorded or is_remote(out.pattern):
            return
        names = set(recorded[out.flag] or ())
        for path in sorted(own):
            if os.path.basename(path) not in names:
                record = self.records[out.flag][0]
                why = (f"the run record {record} does not list it" if recorded[out.flag] is not None else
                       f"there is no textdp run record {record} listing it")
                raise TextdpError(f"{out.flag} {shown(out.label)}: {path} was not written by a textdp run ({why}), and "
                                  f"a run never replaces a file it did not write, with --overwrite or without: move "
                                  f"it, or choose another {out.flag}")

    def _earlier(self) -> List[str]:
        self._refuse_non_files()
        recorded = self._recorded()
        own_by_flag: Dict[Tuple[str, str], List[str]] = {}
        for out in self.outputs:
            own = ([out.pattern] if self._exists(out.pattern) else []) if out.single else self._match(out.pattern)
            foreign = sorted({p for g in out.sink_globs for p in self._match(g)} - set(own))
            if foreign:
                raise TextdpError(f"{out.flag} {out.label} shares its prefix with "
                                  f"{len(foreign)} file(s) of another run (e.g. {foreign[0]}), which Beam's file "
                                  f"sink would delete when it writes; choose another {out.flag}")
            self._refuse_foreign(out, own, recorded)
            if own and self.overwrite and out.replaceable is not None and not out.replaceable(own[0]):
                raise TextdpError(f"{out.flag} {own[0]} exists and is not {out.replaceable_what}: --overwrite "
                                  f"replaces only that; choose another {out.flag}")
            own_by_flag.setdefault((out.flag, out.label), []).extend(own)
        for flag, (record, label) in self.records.items():  # the earlier release's public summary (round 7 F8)
            attached = [a for a in read_attached(record) if os.path.isfile(a) and not os.path.islink(a)
                        and _is_public_summary_file(a) and self._own_attached(flag, label, a)]
            self._earlier_attached[flag] = attached
            for path in attached:
                self.lock_targets.setdefault(path + LOCK_SUFFIX, f"{flag} {label} (its earlier public summary)")
                own_by_flag.setdefault((flag, label), []).append(path)
        singles = {(out.flag, out.label) for out in self.outputs if out.single}
        for (flag, label), own in own_by_flag.items():
            theirs = read_record_flag(self.records[flag][0]) if own and flag in self.records else None
            if theirs is not None and theirs != flag:  # another kind of output: --overwrite never replaces it (R8-10)
                raise TextdpError(f"{flag} {label}: the files at that prefix are an earlier run's {theirs} (its run "
                                  f"record {shown(self.records[flag][0])} says so), not an earlier {flag}'s: {flag} "
                                  f"never replaces them, with --overwrite or without; choose another {flag}")
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

    def _own_attached(self, flag: str, label: str, path: str) -> bool:
        """Whether the public summary at ``path``, which ``flag``'s earlier run record lists as ``attached``, is
        still that release's (``another_release``): one that is now another release's is left in place, never
        moved aside nor removed, and ``notes`` says so (R10-1)."""
        release_of = self._release_of.get(flag)
        if release_of is None:  # a job that attaches no public summary to this flag's release
            return False
        other = another_release(path, label, release_of)
        if other is None:
            return True
        note = (f"{flag} {shown(label)}: its earlier run record lists {shown(path)} as its public summary, but that "
                f"file is now the public summary of another release (its output is {shown(other)}): left in place")
        if note not in self.notes:
            self.notes.append(note)
        return False

    # --- locking ------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Lock every local output (``<output>.lock``, exclusive create), then check again that no output
        appeared since ``check()``. Raises TextdpError (and holds nothing) if another run holds a lock."""
        try:
            for lock, target in sorted(self.lock_targets.items()) + sorted(self.directory_locks.items()):
                if is_remote(lock):
                    continue
                self._create(lock, target)
            self._refuse_leftover_earlier()  # under the locks: a running --overwrite's folder is not a leftover
            if self._earlier() != self.earlier:
                raise TextdpError("the outputs changed since they were checked (another run wrote them meanwhile); "
                                  "nothing was run, run again")
        except BaseException:
            self.release()
            raise

    def _create(self, lock: str, target: str) -> None:
        directory = os.path.dirname(lock) or "."
        content = _lock_content(self.job)
        try:  # the first write of the run: an output that cannot be written is refused here, before the run
            if not os.path.isdir(directory):
                missing, parent = [], directory
                while parent and not os.path.isdir(parent):  # the folders this run makes: removed if left empty
                    missing.append(parent)
                    parent = os.path.dirname(parent)
                self._made_dirs.extend(missing)  # deepest first (before: makedirs may fail halfway, ENAMETOOLONG)
                os.makedirs(directory)
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise TextdpError(f"{target} cannot be written: {directory} is a file, not a directory") from None
            verdict, holder, stale = lock_holder(lock)
            if verdict == "foreign":  # poetry.lock, Cargo.lock...: the user's file, never quoted nor removed
                flag = re.search(r"--[\w-]+", target)
                raise TextdpError(f"a file that is not textdp's lock is at {lock}: choose another "
                                  f"{flag.group(0) if flag else 'output'}") from None
            if stale is not None and _remove_stale_lock(lock, stale):
                self.notes.append(f"removed the stale lock file {lock} ({holder}: that process no longer runs on "
                                  "this host)")
                return self._create(lock, target)
            if verdict == "alive":
                raise TextdpError(f"{target} is being written by another textdp run (lock file {lock}: {holder}); "
                                  f"if no run is writing there, the lock is stale: remove {lock} and run again") from None
            raise TextdpError(f"{target} may be written by another textdp run (lock file {lock}: {holder}; {verdict}); "
                              f"check that no textdp run writes there (another container, host or boot), then "
                              f"remove {lock} and run again") from None
        except OSError as exc:  # a file where a directory should be, a read-only directory or file system
            if exc.errno == errno.ENAMETOOLONG:
                raise TextdpError(f"{target} cannot be written: its lock file name {lock} is too long for the file "
                                  "system; choose a shorter name") from None
            raise TextdpError(f"{target} cannot be written: {directory} is not a writable directory "
                              f"({exc.strerror or type(exc).__name__})") from None
        try:  # disk full, a quota, EIO: the partial lock is removed (it would refuse every later run)
            with os.fdopen(handle, "wb") as out:
                out.write(content)
        except OSError as exc:
            try:
                os.remove(lock)
            except OSError:
                pass
            raise TextdpError(f"{target} cannot be written: its lock file {lock} could not be written "
                              f"({exc.strerror or type(exc).__name__})") from None
        self._held.append(lock)
        self._contents[lock] = content
        return None

    def remove_earlier(self, delete: Callable[[List[str]], None]) -> List[str]:
        """--overwrite: take the earlier run's files (``self.earlier``, checked again under the locks by
        ``acquire``) away from their names before the run. Local files are moved aside (renamed, same file
        system) into a hidden folder ``.textdp-earlier-*`` next to them: ``commit_earlier()`` removes them once
        the run succeeded, ``restore_earlier()`` puts them back after a failure. gs:// files are deleted here
        (an object store has no rename: copy+delete is not atomic, so a failed run leaves none of them). Never a
        directory (refused by ``check``). Returns what was taken away; idempotent."""
        present = [p for p in self.earlier if (self._exists(p) if is_remote(p) else os.path.isfile(p))]
        local = [p for p in present if not is_remote(p)]
        try:
            for path in local:
                directory = os.path.dirname(path)
                aside = self._aside.get(directory)
                if aside is None:
                    aside = tempfile.mkdtemp(prefix=EARLIER_FOLDER_PREFIX, dir=directory)
                    self._aside[directory] = aside
                target = os.path.join(aside, os.path.basename(path))
                os.rename(path, target)
                self._moved.append((path, target))
        except OSError as exc:
            self.restore_earlier()
            why = exc.strerror or type(exc).__name__
            raise TextdpError(f"--overwrite could not move the earlier run's files aside ({why}); nothing was run, "
                              "they are where they were") from None
        remote = [p for p in present if is_remote(p)]
        if remote:
            delete(remote)
        self.earlier = []
        return present

    @property
    def set_aside(self) -> Tuple[str, ...]:
        """The earlier run's files moved aside by ``remove_earlier`` and not yet removed or put back."""
        return tuple(path for path, _ in self._moved)

    keep_on_commit: Optional[Callable[[str, str], Optional[str]]] = None  # (aside path, its folder) -> where to keep

    def commit_earlier(self) -> List[str]:
        """The run succeeded: the earlier run's files moved aside are removed (with their hidden folders), but for
        those ``keep_on_commit`` gives a place to keep (the job's rule: privatize keeps an earlier ledger release file,
        R12-3), moved there when that name is free. Returns one note per file kept."""
        notes = []
        for directory, aside in self._aside.items():
            keep = self.keep_on_commit
            for name in sorted(os.listdir(aside)) if keep is not None and os.path.isdir(aside) else []:
                path = os.path.join(aside, name)
                try:
                    target = keep(path, directory)
                    if target and not os.path.lexists(target):
                        os.replace(path, target)
                        notes.append(f"kept the earlier release's {name} as {shown(target)} (it re-counts that run "
                                     "in a ledger restored from a backup; docs/ledger.md)")
                except OSError:
                    continue
            shutil.rmtree(aside, ignore_errors=True)
        self._aside, self._moved = {}, []
        return notes

    def restore_earlier(self, keep: bool = False) -> Optional[List[str]]:
        """The run failed: the files now at this run's local output names are removed (a partial run) or, with
        ``keep`` (a run that finished but was judged a failure: its error records and summary say why), moved
        into a hidden folder ``.textdp-failed-*`` next to them; then the earlier run's files moved aside are put
        back; ``unrestored`` lists (name, where it still is) for an earlier file whose name something else took
        meanwhile (a directory, a link), never silently. Returns None when nothing was set aside, else the folders that
        keep this run's files."""
        if not self._moved:
            return None
        kept: Dict[str, str] = {}
        for out in self.outputs:
            if is_remote(out.pattern):
                continue
            found = ([out.pattern] if os.path.isfile(out.pattern) else []) if out.single else \
                glob.glob(glob.escape(os.path.dirname(out.pattern)) + "/" + os.path.basename(out.pattern))
            for path in found:
                try:
                    if not os.path.isfile(path) or os.path.islink(path):
                        continue
                    if keep:
                        directory = os.path.dirname(path)
                        if directory not in kept:
                            kept[directory] = tempfile.mkdtemp(prefix=FAILED_FOLDER_PREFIX, dir=directory)
                        os.rename(path, os.path.join(kept[directory], os.path.basename(path)))
                    else:
                        os.remove(path)
                except OSError:
                    pass
        self.unrestored = []  # its name was taken meanwhile (a directory, a link): named, never said put back
        for path, target in reversed(self._moved):
            try:
                if os.path.lexists(path) and (os.path.isdir(path) or os.path.islink(path)):
                    raise IsADirectoryError(path)  # os.replace would put a file into a directory's place or a link's
                os.replace(target, path)
            except OSError:
                self.unrestored.append((path, target))
        for aside in self._aside.values():
            try:
                os.rmdir(aside)  # empty unless a file could not be put back: then it stays, for the user
            except OSError:
                pass
        self._aside, self._moved = {}, []
        return sorted(kept.values())

    def write_records(self) -> None:
        """When the run ends (however it ends, locks still held): each local output flag's run record, the
        names of the files now at its names (every one this run's or an earlier textdp run's: any other was
        refused before the run); a record listing nothing is removed."""
        if not self._held:
            return
        for flag, (record, _) in self.records.items():
            names = set()
            for out in self.outputs:
                if out.flag != flag or is_remote(out.pattern):
                    continue
                found = ([out.pattern] if os.path.isfile(out.pattern) else []) if out.single else \
                    glob.glob(glob.escape(os.path.dirname(out.pattern)) + "/" + os.path.basename(out.pattern))
                names |= {os.path.basename(p) for p in found if os.path.isfile(p)}
            attached = {out.pattern for out in self.outputs if self._attach.get(out.flag) == flag and out.single
                        and not is_remote(out.pattern) and os.path.isfile(out.pattern)}
            attached |= {p for p in self._earlier_attached.get(flag, ()) if os.path.isfile(p)}  # put back after a failure
            try:
                if not names:
                    if read_record(record) is not None:
                        os.remove(record)
                    continue
                temporary = f"{record}.tmp-{os.getpid()}"
                with open(temporary, "w", encoding="utf-8") as handle:
                    json.dump({RECORD_KEY: 1, "job": self.job, "flag": flag, "files": sorted(names),
                               "attached": sorted(attached),
                               "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, handle, indent=1)
                    handle.write("\n")
                os.replace(temporary, record)
            except OSError:  # the run's own outcome is reported; without a record, --overwrite refuses its files
                try:  # a record cut by a full disk is not left behind
                    os.remove(f"{record}.tmp-{os.getpid()}")
                except OSError:
                    pass
                continue

    def release(self) -> None:
        """Remove the lock files this guard created and that still hold what it wrote (idempotent): a lock at
        the same name that is another run's (ours was removed as stale by mistake, or by hand) is left alone."""
        while self._held:
            lock = self._held.pop()
            try:
                with open(lock, "rb") as existing:
                    mine = existing.read(LOCK_MAX_BYTES) == self._contents.get(lock)
                if mine:
                    os.remove(lock)
            except OSError:
                pass
        for directory in self._made_dirs:  # folders this run made that hold nothing (a refused run): round 9, R9-15
            try:
                os.rmdir(directory)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    break  # not empty (the run wrote there): its parents are not empty either
                continue  # never made: makedirs stopped above it (missing, or a name too long to make)
        self._made_dirs = []

    @property
    def held(self) -> Tuple[str, ...]:
        return tuple(self._held)


LOCK_MAX_BYTES = 1024
_LOCK_HOLDER = re.compile(r"textdp [\w-]+, pid (\d+) on (\S+)(?:, since \S+)?\Z")
_LOCK_IDENTITY = re.compile(r"textdp-lock 2 boot=(\S*) pidns=(\S*) start=(\S*) token=([0-9a-f]+)\Z")


def _read_proc(path: str) -> str:
    try:
        with open(path, "r", encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22), "" if unknown."""
    stat_line = _read_proc(f"/proc/{pid}/stat")
    fields = stat_line[stat_line.rfind(")") + 2:].split() if ")" in stat_line else []
    return fields[19] if len(fields) > 19 else ""


def process_identity(pid: Optional[int] = None) -> Tuple[str, str, str]:
    """(boot id, PID-namespace id, start time) of ``pid`` (this process by default): what tells a process
    apart across reboots, containers and hosts sharing a name; "" where the system does not say (no /proc)."""
    pid = os.getpid() if pid is None else pid
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        namespace = ""
    return _read_proc("/proc/sys/kernel/random/boot_id"), namespace, _start_time(pid)


def _lock_content(job: str) -> bytes:
    """A lock's content: the holder line people read, then the identity line the stale rule reads."""
    boot, namespace, start = process_identity()
    return (f"textdp {job}, pid {os.getpid()} on {socket.gethostname()}, since "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
            f"textdp-lock 2 boot={boot} pidns={namespace} start={start} token={os.urandom(8).hex()}\n"
            ).encode("utf-8")


def lock_holder(lock: str) -> Tuple[str, str, Optional[Tuple[int, int, bytes]]]:
    """(verdict, holder line, stale) of an existing lock file. verdict: "foreign" (not textdp's lock format:
    the holder is never quoted), "alive" (its process runs), "stale" (provably dead: this host, this boot,
    this PID namespace, and the pid is gone or is another process: stale is (st_dev, st_ino, content)), or
    the reason textdp cannot tell (an empty or cut lock, another host, boot or PID namespace, an older lock)."""
    try:
        with open(lock, "rb") as existing:
            info = os.fstat(existing.fileno())
            content = existing.read(LOCK_MAX_BYTES)
    except OSError:
        return "it cannot be read", "holder unknown", None
    if not content:  # a crash between create and write (the write is one call): cannot tell whose
        return "the lock is empty", "holder unknown", None
    try:
        lines = content.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return "foreign", "", None
    found = _LOCK_HOLDER.match(lines[0])
    if not found:
        return "foreign", "", None
    holder = lines[0]
    identity = _LOCK_IDENTITY.match(lines[1]) if len(lines) > 1 else None
    if identity is None:
        return "a lock without a process identity (cut, or of an older textdp)", holder, None
    if found.group(2) != socket.gethostname():
        return "held on another host", holder, None
    boot, namespace, _ = process_identity()
    if not boot or not namespace or identity.group(1) != boot:
        return "held before a reboot, or the boot cannot be told", holder, None
    if identity.group(2) != namespace:
        return "held in another PID namespace (a container?)", holder, None
    pid = int(found.group(1))
    if pid <= 0 or pid == os.getpid():
        return "alive", holder, None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "stale", holder, (info.st_dev, info.st_ino, content)
    except (OSError, OverflowError):  # alive (another user's process) or cannot tell
        pass
    started = _start_time(pid)
    if identity.group(3) and started and started != identity.group(3):  # the pid was reused
        return "stale", holder, (info.st_dev, info.st_ino, content)
    return "alive", holder, None


def _remove_stale_lock(lock: str, stale: Tuple[int, int, bytes]) -> bool:
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
    with a "did you mean" for a close name; also a name that has a twin among ``known`` differing only by surrounding
    whitespace (R11-2: the flag's names are stripped, so the twin would be released raw). None if every name is known
    and has no such twin. Names only, never values (a twin's name is the flag's own name, padded)."""
    import difflib

    for name in names:  # R11-2: a field's name is read from the flag stripped, so a padded twin cannot be named
        if any(k != name and k.strip() == name.strip() and k.strip() for k in set(known)):
            return (f"{flag} {name!r}: {where} also has a field named {name.strip()!r} with other whitespace "
                    "around it; a field name is read from the flag without its surrounding whitespace, so that field "
                    "cannot be named and would be released as it is: rename it in the input")
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


MAX_FIELDS_SHOWN = 10
