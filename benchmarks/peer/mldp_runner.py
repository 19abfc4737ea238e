"""Runs INSIDE the separate MLDP virtual environment (mldp-text 0.1.2, numpy<2); never imports textdp.

Reads a JSON spec (argv[1]) written by ``bench_peer.py``, builds a gensim ``KeyedVectors`` from the
vocabulary and vectors exported from a textdp artifact (the exact float32 values, no text
round-trip), hands it to MLDP's mechanism classes (``MultivariateCalibrated``, ``TEM``, ``Mahalanobis``,
``VickreyMechanism``, ``TruncatedGumbel``) through their public constructor arguments (``embedding_matrix``, ``vocab``, ``dim``) and calls
their public
``replace_word``. It times the same tokens textdp privatizes, draws repeatedly for a few check words
(for the distribution tests done by ``bench_peer.py``), and writes a JSON result (argv[2]).
"""

import json
import random
import sys
import time

import mldp_text
import numpy as np
from gensim.models import KeyedVectors


def keyed_vectors(words, vectors):
    kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype=np.float32)
    kv.add_vectors(words, vectors)
    return kv


_BUILT = {}
CLASSES = {"multivariate_calibrated": "MultivariateCalibrated", "tem": "TEM", "mahalanobis": "Mahalanobis",
           "vickrey": "VickreyMechanism", "truncated_gumbel": "TruncatedGumbel"}


def build(name, epsilon, kv, vocab, dim, params=None):
    """One MLDP mechanism per (class, epsilon, parameters), reused by the timing and the check draws."""
    params = params or {}
    key = (name, epsilon, json.dumps(params, sort_keys=True))
    if key not in _BUILT:
        cls = getattr(mldp_text, CLASSES[name])
        t0 = time.perf_counter()
        _BUILT[key] = (cls(epsilon=epsilon, embedding_matrix=kv, dim=dim, vocab=vocab, **params),
                       time.perf_counter() - t0)
    return _BUILT[key]


def describe(mechanism):
    """The numbers an MLDP object derived at construction (truncated Gumbel: its noise scale and distances)."""
    out = {}
    for attr in ("b", "a", "min_inter_dist", "max_inter_dist", "lambd"):
        if hasattr(mechanism, attr):
            value = getattr(mechanism, attr)
            out[attr] = float(np.real(value))
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    np.random.seed(spec["seed"])
    random.seed(spec["seed"])
    with open(spec["words_path"], encoding="utf-8") as handle:
        words = json.load(handle)
    vectors = np.ascontiguousarray(np.load(spec["vectors_path"]), dtype=np.float32)
    started = time.perf_counter()
    kv = keyed_vectors(words, vectors)
    vocab = set(words)
    out = {"mldp_text_version": mldp_text.__version__, "numpy_version": np.__version__,
           "keyed_vectors_seconds": round(time.perf_counter() - started, 2), "vocab_size": len(kv),
           "timing": [], "draws": []}
    with open(spec["tokens_path"], encoding="utf-8") as handle:
        tokens = json.load(handle)

    for job in spec["timing"]:
        mechanism, setup_seconds = build(job["mechanism"], job["epsilon"], kv, vocab, vectors.shape[1], job.get("params"))
        count = job["tokens"]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        released = [mechanism.replace_word(word) for word in tokens[:count]]
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        out["timing"].append({**job, "setup_seconds": round(setup_seconds, 2), "cpu_seconds": round(cpu, 3),
                              "derived": describe(mechanism),
                              "wall_seconds": round(wall, 3), "tokens": count,
                              "changed_fraction": float(np.mean([a != b for a, b in zip(released, tokens[:count])]))})
        print(json.dumps(out["timing"][-1]), flush=True)

    for job in spec["draws"]:
        mechanism, _ = build(job["mechanism"], job["epsilon"], kv, vocab, vectors.shape[1], job.get("params"))
        t0 = time.perf_counter()
        released = [mechanism.replace_word(job["word"]) for _ in range(job["draws"])]
        out["draws"].append({**job, "released": released, "wall_seconds": round(time.perf_counter() - t0, 2)})
        print(json.dumps({k: v for k, v in out["draws"][-1].items() if k != "released"}), flush=True)

    out["constructions"] = []
    for job in spec.get("constructions", []):  # the same class built again after reseeding: what changes
        random.seed(job["seed"])
        np.random.seed(job["seed"])
        cls = getattr(mldp_text, CLASSES[job["mechanism"]])
        mechanism = cls(epsilon=job["epsilon"], embedding_matrix=kv, dim=vectors.shape[1], vocab=vocab,
                        **job.get("params", {}))
        out["constructions"].append({**job, "derived": describe(mechanism)})
        print(json.dumps(out["constructions"][-1]), flush=True)

    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    main()
