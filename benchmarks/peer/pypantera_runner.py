"""Runs INSIDE the separate pyPANTERA virtual environment (pypantera 1.0.2); never imports textdp.

Reads a JSON spec (argv[1]) written by ``bench_mechanisms.py`` and writes a JSON result (argv[2]).
pyPANTERA's package installs as the top-level module ``src``. Its mechanisms read a GloVe text file
through ``utils.vocab.Vocab``; here that loader is replaced, for every mechanism object, by one
dictionary built once from the exported float32 vectors (the same words and values as textdp's
artifact), so the vocabulary is parsed once, not once per object. The mechanisms' own code is only
called, never changed or copied: ``processText`` for one word at a time (pyPANTERA broadcasts a whole
text against the vocabulary in float64, words x |V| x n, so a whole review on 400k words would need
tens of GB), ``noisyEmb`` for the embedding mechanisms, ``pullNoise`` for the noise check. A call that
raises ``ValueError`` (pyPANTERA's CusText does for some words: its float32 probabilities miss
``np.random.choice``'s float64 tolerance on the sum) is counted, its message recorded, and the word
left out of the released tokens; its CPU time stays in the measurement.
"""

import json
import random
import sys
import time

import numpy as np
import src.AbstractTextObfuscationDPMechanism as base_module
from src.EmbeddingPerturbationMechanism.mahalanobis import Mahalanobis
from src.EmbeddingPerturbationMechanism.vickrey import VickreyCMP, VickreyMhl
from src.SamplingPerturbationMechanism.custext import CusText
from src.SamplingPerturbationMechanism.santext import SanText

CLASSES = {"santext": SanText, "custext": CusText, "mahalanobis": Mahalanobis, "vickrey_cmp": VickreyCMP,
           "vickrey_mhl": VickreyMhl}
EMBEDDING = {"mahalanobis", "vickrey_cmp", "vickrey_mhl"}


class PreloadedVocab:
    """Stands in for pyPANTERA's Vocab: the same ``embeddings`` dict (word -> float32 vector)."""

    embeddings = None

    def __init__(self, _path):
        self.embeddings = PreloadedVocab.embeddings


_BUILT = {}


def build(job):
    key = json.dumps({k: job[k] for k in ("mechanism", "params")}, sort_keys=True)
    if key not in _BUILT:
        t0 = time.perf_counter()
        _BUILT[key] = (CLASSES[job["mechanism"]]({"embPath": "preloaded", **job["params"]}), time.perf_counter() - t0)
    return _BUILT[key]


def release(mechanism, kind, word, errors):
    """One released word, or None when pyPANTERA raises (the error message is counted in ``errors``)."""
    try:
        if kind in EMBEDDING:
            return mechanism.processText(mechanism.noisyEmb([word]))
        return mechanism.processText([word])
    except ValueError as exc:
        errors[str(exc)] = errors.get(str(exc), 0) + 1
        return None


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    np.random.seed(spec["seed"])
    random.seed(spec["seed"])
    with open(spec["words_path"], encoding="utf-8") as handle:
        words = json.load(handle)
    vectors = np.load(spec["vectors_path"])
    t0 = time.perf_counter()
    PreloadedVocab.embeddings = {w: np.asarray(v, dtype=np.float32) for w, v in zip(words, vectors)}
    base_module.Vocab = PreloadedVocab
    out = {"pypantera_version": "1.0.2", "numpy_version": np.__version__,
           "vocab_seconds": round(time.perf_counter() - t0, 2), "vocab_size": len(words), "timing": [], "draws": [],
           "noise": []}
    with open(spec["tokens_path"], encoding="utf-8") as handle:
        tokens = json.load(handle)

    for job in spec["timing"]:
        mechanism, setup = build(job)
        count = job["tokens"]
        errors = {}
        cpu0, wall0 = time.process_time(), time.perf_counter()
        released = [release(mechanism, job["mechanism"], word, errors) for word in tokens[:count]]
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        done = [(a, b) for a, b in zip(released, tokens[:count]) if a is not None]
        out["timing"].append({**job, "setup_seconds": round(setup, 2), "cpu_seconds": round(cpu, 3),
                              "wall_seconds": round(wall, 3), "tokens": len(done), "attempted": count,
                              "errors": errors,
                              "changed_fraction": float(np.mean([a != b for a, b in done])) if done else None})
        print(json.dumps(out["timing"][-1]), flush=True)

    for job in spec["draws"]:
        mechanism, _ = build(job)
        t0 = time.perf_counter()
        errors = {}
        released = [release(mechanism, job["mechanism"], job["word"], errors) for _ in range(job["draws"])]
        out["draws"].append({**job, "released": [r for r in released if r is not None], "errors": errors,
                             "wall_seconds": round(time.perf_counter() - t0, 2)})
        print(json.dumps({k: v for k, v in out["draws"][-1].items() if k != "released"}), flush=True)

    for job in spec.get("noise", []):
        mechanism, _ = build(job)
        noise = np.array([mechanism.pullNoise() for _ in range(job["draws"])], dtype=np.float64)
        out["noise"].append({**job, "noise": noise.tolist(), "sigma_loc": np.real(mechanism._sigmaLoc).tolist()})

    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    main()
