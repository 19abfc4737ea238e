"""Helpers shared by the benchmarks: machine description and IMDb tokens."""

import csv
import gzip
import json
import os
import platform
import re
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMDB = os.path.join(os.path.dirname(REPO), "shared", "data", "imdb_50k.csv.gz")
RESULTS = os.path.join(REPO, "benchmarks", "results")


def machine() -> dict:
    """What the numbers were measured on, including how busy the machine was."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
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

        info["blas"] = [{k: v for k, v in lib.items() if k in ("internal_api", "version", "architecture")}
                        for lib in threadpool_info()]
    except ImportError:
        pass
    return info


def imdb_texts(limit: int, split: str = None):
    with gzip.open(IMDB, "rt", encoding="utf-8", newline="") as handle:
        out = []
        for row in csv.DictReader(handle):
            if split and row["split"] != split:
                continue
            out.append(row["text"])
            if len(out) >= limit:
                break
    return out


def imdb_token_ids(word_to_id, limit_tokens: int, reviews: int = 3000):
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


def write_results(name: str, payload: dict, markdown: str) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as handle:
        json.dump(payload, handle, indent=2, default=float)
        handle.write("\n")
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as handle:
        handle.write(markdown)
