"""Balanced IMDb subsets for the utility benchmark, written as one JSONL file.

The utility experiment of both papers trains a sentiment classifier on IMDb reviews (Maas et al.,
2011). This module draws ``train`` reviews from the train split and ``test`` reviews from the test
split, half positive and half negative in each, with a fixed seed, so every run of the benchmark
(and every mechanism and epsilon inside it) sees exactly the same reviews. Train and test go into
one file with a ``split`` field: one privatize run then serves both settings.

The original release keeps HTML line breaks (``<br /><br />``); they are markup, not words, so they
become newlines here (otherwise ``br`` would be privatized and counted as a word).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Dict, List

import numpy as np

from benchmarks.harness import IMDB, REPO, read_imdb  # noqa: F401  (REPO: re-exported for run.py)

LABELS = {"neg": 0, "pos": 1}


def clean_text(text: str) -> str:
    return text.replace("<br />", "\n")


def read_rows(path: str = IMDB) -> List[dict]:
    return read_imdb(path=path)


def balanced_subset(rows: List[dict], split: str, count: int, rng: np.random.Generator) -> List[dict]:
    """``count`` rows of ``split`` (half per label, the odd one positive), drawn without replacement."""
    chosen: List[dict] = []
    for label, want in (("neg", count // 2), ("pos", count - count // 2)):
        pool = [row for row in rows if row["split"] == split and row["label"] == label]
        if want > len(pool):
            raise ValueError(f"asked for {want} {split}/{label} reviews, the data has {len(pool)}")
        for index in np.sort(rng.choice(len(pool), size=want, replace=False)):
            chosen.append(pool[int(index)])
    return chosen


def prepare(train: int, test: int, seed: int, out_path: str, source: str = IMDB) -> Dict[str, int]:
    """Write the subset to ``out_path`` (JSONL: id, split, label, text); return counts per split."""
    rows = read_rows(source)
    rng = np.random.default_rng(seed)
    counts = {}
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        for split, count in (("train", train), ("test", test)):
            subset = balanced_subset(rows, split, count, rng)
            counts[split] = len(subset)
            for row in subset:
                record = {"id": f"{row['split']}/{row['label']}/{row['id']}", "split": row["split"],
                          "label": LABELS[row["label"]], "text": clean_text(row["text"])}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return counts


def read_jsonl(paths) -> List[dict]:
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Write a balanced IMDb train/test subset as JSONL.")
    parser.add_argument("--train", type=int, default=400, help="train-split reviews (half per label); default 400")
    parser.add_argument("--test", type=int, default=400, help="test-split reviews (half per label); default 400")
    parser.add_argument("--seed", type=int, default=8, help="seed of the subset draw; default 8")
    parser.add_argument("--output", required=True, help="JSONL file to write")
    args = parser.parse_args(argv)
    print(prepare(args.train, args.test, args.seed, args.output))


if __name__ == "__main__":
    main()
