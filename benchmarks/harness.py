"""The one harness every benchmark uses: data paths, the IMDb loader, ``machine()``, ``write_results()``.

Every benchmark runs from the repository root as a module, ``python -m benchmarks.<name>`` (or
``python -m benchmarks.<package>.<name>``), so ``import textdp`` resolves to this checkout and no
benchmark edits ``sys.path``. Results go to ``benchmarks/results/<name>.json`` and ``<name>.md``
through :func:`write_results`, with :func:`machine` (CPU, cores, load average at start and end,
BLAS) in the payload, because the machine is shared and a number without its load is not a number.

The IMDb reader is the one the tests use too (``tests/conftest.py`` imports :func:`read_imdb`), so
tests and benchmarks read the same rows in the same order.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import platform
import re
import time
from typing import List, Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
IMDB = os.path.join(SHARED_DATA, "imdb_50k.csv.gz")
RESULTS = os.path.join(REPO, "benchmarks", "results")
BENCH_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "textdp-bench")
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                     "BLIS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def single_thread() -> None:
    """Limit BLAS/OpenMP to one thread in this process and its children: call before numpy is used
    (the benchmarks measure tokens per core, and spinning BLAS threads inflate CPU time)."""
    os.environ.update(SINGLE_THREAD_ENV)


# --- data ------------------------------------------------------------------------------------------


def read_imdb(limit: Optional[int] = None, split: Optional[str] = None, path: str = IMDB) -> List[dict]:
    """IMDb rows as dicts (split, id, label, rating, movie_id, text), in file order.

    ``split`` keeps only ``train`` or ``test`` rows; ``limit`` stops after that many kept rows.
    """
    rows = []
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if split and row["split"] != split:
                continue
            rows.append(row)
            if limit and len(rows) >= limit:
                break
    return rows


def imdb_texts(limit: int, split: Optional[str] = None) -> List[str]:
    return [row["text"] for row in read_imdb(limit, split)]


def imdb_token_ids(word_to_id, limit_tokens: int, reviews: int = 3000) -> np.ndarray:
    """Ids of real IMDb review words (lowercased, in-vocabulary), in reading order."""
    ids = []
    for text in imdb_texts(reviews):
        for word in re.findall(r"[a-z0-9']+", text.lower().replace("<br />", " ")):
            i = word_to_id.get(word)
            if i is not None:
                ids.append(i)
                if len(ids) >= limit_tokens:
                    return np.array(ids, dtype=np.int64)
    return np.array(ids, dtype=np.int64)


# --- machine and results ---------------------------------------------------------------------------


def machine() -> dict:
    """What the numbers were measured on, including how busy the machine was at the start."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "loadavg_at_start": os.getloadavg(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [{k: v for k, v in lib.items() if k in ("internal_api", "version", "architecture", "num_threads")}
                        for lib in threadpool_info()]
    except ImportError:
        pass
    return info


def write_results(name: str, payload: dict, markdown: Optional[str] = None, results_dir: str = RESULTS) -> str:
    """Write ``<results_dir>/<name>.json`` (and ``<name>.md`` when given); returns the path stem.

    Adds the load average at the end to ``payload['machine']`` when the payload has one.
    """
    if isinstance(payload.get("machine"), dict) and "loadavg_at_end" not in payload["machine"]:
        payload["machine"]["loadavg_at_end"] = os.getloadavg()
    os.makedirs(results_dir, exist_ok=True)
    stem = os.path.join(results_dir, name)
    with open(stem + ".json", "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, default=float)
        handle.write("\n")
    if markdown is not None:
        with open(stem + ".md", "w", encoding="utf-8") as handle:
            handle.write(markdown)
    return stem


def load_results(name: str, results_dir: str = RESULTS) -> Optional[dict]:
    """The committed ``<name>.json``, or None."""
    path = os.path.join(results_dir, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
