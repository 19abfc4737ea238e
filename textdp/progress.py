"""Progress of a long local job: workers count, the launching process shows the total.

A local Beam runner runs the pipeline inside ``pipeline.run()`` and reports its metrics only at the
end, so a 20-minute job would be silent. Instead every worker (DoFn instance) keeps a small
``ProgressFile`` in a directory the launcher chose: cumulative counts (``records``, ``tokens``,
``words``, ``rows``, ...), rewritten atomically at most every ``interval`` seconds (half a second: a
few hundred bytes) and at the end of each bundle, with the time they were written (``at``). The
launcher's ``ProgressMonitor`` thread sums the files and prints one line: in a terminal it is
rewritten in place every 2 seconds; in a log (not a terminal) it is a plain line every 30 seconds. Counts only, never text. Runners on
other machines (Dataflow, Flink) have
their own progress pages; there no directory is given and the workers write nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from typing import Callable, Dict, Optional, TextIO

# --- console writes: the one place a line reaches stdout or stderr (round 7, F12/F13) -------------------------------


def usable_stream(stream) -> bool:
    """False for a stream a line cannot go to: None (stderr closed with ``2>&-``, pythonw, a daemon) or closed."""
    if stream is None or not hasattr(stream, "write"):
        return False
    try:
        return not stream.closed
    except (AttributeError, ValueError):
        return True


def console_text(text: str, stream) -> str:
    """``text`` as ``stream``'s encoding can hold it: what it cannot (an accented path on an ASCII or Latin-1
    console) is written as a backslash escape, never a UnicodeEncodeError."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return text.encode(encoding, "backslashreplace").decode(encoding, "replace")
    except LookupError:  # an encoding name Python does not know: ASCII holds every escape
        return text.encode("ascii", "backslashreplace").decode("ascii")


def console_write(text: str, stream=None) -> bool:
    """Write ``text`` to ``stream`` (default: sys.stderr at the time of the call) and flush; never raises. Nothing
    is written to a None or closed stream, or when the write fails (a closed pipe, a full disk): a line on the
    console is never worth failing a run whose output is written. True when it was written."""
    stream = sys.stderr if stream is None else stream
    if not usable_stream(stream):
        return False
    try:
        stream.write(console_text(text, stream))
        stream.flush()
        return True
    except (OSError, ValueError, AttributeError):
        return False


def console_print(line: str, stream=None) -> bool:
    """``console_write`` of one line (``print`` that never raises); stdout unless ``stream`` is given."""
    return console_write(line + "\n", sys.stdout if stream is None else stream)


def robust_console() -> None:
    """The command's start: stdout and stderr write what their encoding cannot hold as backslash escapes (so every
    ``print`` of the jobs is safe on an ASCII console), where the streams allow it."""
    for stream in (sys.stdout, sys.stderr):
        if usable_stream(stream) and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError, AttributeError, TypeError):
                pass


class ProgressFile:
    """A worker's cumulative counts in ``<directory>/<pid>-<uuid>.json`` (rewritten, never appended)."""

    def __init__(self, directory: Optional[str], interval: float = 0.5):
        self.directory = directory
        self.interval = float(interval)
        self.counts: Dict[str, int] = {}
        self.first: Optional[float] = None  # wall-clock time of the first count (start-up measurements)
        self._written = 0.0
        self._path = os.path.join(directory, f"{os.getpid()}-{uuid.uuid4().hex}.json") if directory else None

    def add(self, **counts: int) -> None:
        if not self._path:
            return
        if self.first is None:
            self.first = time.time()
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + int(value)
        if time.monotonic() - self._written >= self.interval:
            self.flush()

    def flush(self) -> None:
        if not self._path or not self.counts:
            return
        temporary = f"{self._path}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump({"counts": self.counts, "first": self.first, "at": time.time()}, handle)
            os.replace(temporary, self._path)
        except OSError:  # the launcher removed the directory (the job is ending): nothing to report to
            return
        self._written = time.monotonic()


def read_totals(directory: str) -> Dict[str, int]:
    """The sum of every worker's counts in ``directory``."""
    return read_progress(directory)[0]


def read_progress_files(directory: str) -> Dict[str, dict]:
    """Each worker's last written record, by file name: ``{"counts": {...}, "first": t, "at": t}``."""
    records: Dict[str, dict] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return records
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                records[name] = json.load(handle)
        except (OSError, ValueError):
            continue  # being replaced right now: read next time
    return records


def read_progress(directory: str):
    """(the sum of every worker's counts, the earliest time any worker counted something or None)."""
    totals: Dict[str, int] = {}
    first = None
    for record in read_progress_files(directory).values():
        for key, value in record.get("counts", {}).items():
            totals[key] = totals.get(key, 0) + int(value)
        if record.get("first") is not None:
            first = record["first"] if first is None else min(first, record["first"])
    return totals, first


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _number(value: float) -> str:
    if value >= 10_000_000:
        return f"{value / 1e6:.0f}M"
    if value >= 1_000_000:
        return f"{value / 1e6:.1f}M"
    return f"{int(value):,}"


def progress_line(job: str, totals: Dict[str, int], elapsed: float, unit: str, total: Optional[int],
                  rate_of: str, recent_rate: Optional[float], startup: Optional[float] = None) -> str:
    """e.g. ``textdp privatize: 1,200 / 5,000 records (24%), 310,000 tokens, 9,800 tokens/s, ~6 min left``."""
    done = totals.get(unit, 0)
    parts = [f"{_number(done)} / {_number(total)} {unit} ({100.0 * done / total:.0f}%)" if total
             else f"{_number(done)} {unit}"]
    parts += [f"{_number(value)} {key}" for key, value in sorted(totals.items()) if key != unit]
    rate = recent_rate if recent_rate is not None else (totals.get(rate_of, 0) / elapsed if elapsed > 0 else 0.0)
    if rate > 0:
        parts.append(f"{_number(rate)} {rate_of}/s")
    unit_rate = done / elapsed if elapsed > 0 else 0.0
    if total and 0 < done < total and unit_rate > 0:
        parts.append(f"about {_duration((total - done) / unit_rate)} left")
    if startup is not None:
        parts.append(f"first {unit[:-1] if unit.endswith('s') else unit} after {startup:.1f} s")
    parts.append(f"{_duration(elapsed)} elapsed")
    return f"textdp {job}: " + ", ".join(parts)


class ProgressMonitor:
    """A daemon thread printing ``progress_line`` from the files in ``directory`` until ``stop()``.

    ``unit`` is the count the job's size is measured in (``records``, ``rows``, ``words``), ``total``
    its known size (None: no percentage and no time left), ``rate_of`` the count whose rate is shown.
    """

    def __init__(self, directory: str, job: str, unit: str, total: Optional[int] = None, rate_of: Optional[str] = None,
                 stream: Optional[TextIO] = None, tty_interval: float = 2.0, log_interval: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.directory = directory
        self.job = job
        self.unit = unit
        self.total = total
        self.rate_of = rate_of or unit
        self.stream = stream or sys.stderr  # None (stderr closed): the monitor counts but writes nothing
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = tty_interval if self.tty else log_interval
        if os.environ.get("TEXTDP_PROGRESS_INTERVAL"):  # seconds between lines (tests, impatient operators)
            self.interval = float(os.environ["TEXTDP_PROGRESS_INTERVAL"])
        self.clock = clock
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = clock()
        self._started_wall = time.time()
        self._last = None  # (time, rate_of count) of the previous line, for the recent rate
        self.lines = 0
        self.startup: Optional[float] = None  # seconds from start() to the first count of any worker

    def start(self) -> "ProgressMonitor":
        self._started = self.clock()
        self._started_wall = time.time()
        self._thread = threading.Thread(target=self._loop, name="textdp-progress", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.print_line()

    def print_line(self, final: bool = False) -> Optional[str]:
        totals, first = read_progress(self.directory)
        if first is not None:
            self.startup = max(0.0, first - self._started_wall)
        if not totals and not final:
            return None
        now = self.clock()
        count = totals.get(self.rate_of, 0)
        recent = None
        if self._last is not None and now > self._last[0]:
            recent = (count - self._last[1]) / (now - self._last[0])
        self._last = (now, count)
        line = progress_line(self.job, totals, now - self._started, self.unit, self.total, self.rate_of,
                             None if final else recent, self.startup if final else None)
        if self.tty:
            console_write("\r\x1b[2K" + line + ("\n" if final else ""), self.stream)
        else:
            console_write(line + "\n", self.stream)
        self.lines += 1
        return line

    def stop(self, final_line: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if final_line and (self.lines or read_totals(self.directory)):
            self.print_line(final=True)
        elif self.tty and self.lines:
            console_write("\n", self.stream)


# --- a progress bar for calls of the Python API (textdp.Privatizer), issue 27 item 2 ------------------------


class _NoBar:
    """What ``progress_bar`` returns when no bar is shown: same calls, nothing printed."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, count: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where stderr is not a terminal but a bar is still seen)."""
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel.zmqshell" not in sys.modules:
        return False
    ipython = getattr(shell, "get_ipython", lambda: None)()
    return type(ipython).__name__ == "ZMQInteractiveShell"


def wants_progress(setting: Optional[bool]) -> bool:
    """``True``/``False`` as given; ``None`` (automatic): in a notebook, or when stderr is a terminal."""
    if setting is not None:
        return bool(setting)
    return in_notebook() or bool(getattr(sys.stderr, "isatty", lambda: False)())


def progress_bar(setting: Optional[bool], total: int, unit: str, desc: str):
    """A ``tqdm.auto`` bar of ``total`` ``unit``s (a widget in a notebook with ipywidgets, text on stderr
    otherwise), or a silent stand-in when ``wants_progress(setting)`` is False or tqdm is not installed (then
    ``setting=True`` was refused earlier, by the caller). Counts only: no text is ever passed to it."""
    if not wants_progress(setting) or not usable_stream(sys.stderr):  # stderr closed or None: no bar to show
        return _NoBar()
    try:
        from tqdm.std import tqdm
    except ImportError:
        return _NoBar()
    if in_notebook():
        try:  # the widget needs ipywidgets; without it tqdm.auto warns and falls back to the text bar anyway
            import ipywidgets  # noqa: F401
            from tqdm.auto import tqdm
        except ImportError:
            pass
    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, disable=False, dynamic_ncols=True)
