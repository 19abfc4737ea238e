"""Runs inside the dp-diffractor 0.2.1 virtual environment (benchmarks/peer/bench_diffractor.py starts it).

    <venv>/bin/python diffractor_runner.py SPEC.json OUT.json

SPEC: words_path / vectors_path (the textdp artifact's words and float32 vectors, exported by
bench_peer.export_vocabulary), texts_path (JSONL: id, text), epsilons, seed, workdir. The library is
only imported and called (never copied). Two things of its public API do not work in 0.2.1 and are
recorded in the output rather than worked around silently:

* ``Diffractor(model_names=[...])`` fetches every name through ``Downloader.fetch``, which accepts only
  its five hosted embedding files (any other name raises ValueError), and ``prepare_custom_embeddings``
  refers to an undefined ``output_name`` (NameError): its "bring your own embeddings" path cannot be
  used as documented. To give it the same GloVe 6B 50d vectors textdp uses, this runner filters them to
  the library's own word list (``diffractor/data/vocab.txt``, as ``prepare_custom_embeddings`` means to),
  writes them in word2vec text format, and replaces ``diffractor.core.ensure_embeddings`` (the one
  function that locates files) by one returning that file. Everything else is the library's code.
* It needs NLTK's ``stopwords`` and ``punkt_tab`` data (downloaded here with ``nltk.download``).
"""

import json
import os
import sys
import time
import traceback


def main(spec_path: str, out_path: str) -> None:
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    out = {"steps": []}
    try:
        run(spec, out)
    except Exception as exc:  # noqa: BLE001  (the reason is the result)
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(out, handle)


def run(spec: dict, out: dict) -> None:
    import nltk
    import numpy as np

    missing = []
    for package in ("stopwords", "punkt_tab"):  # rewrite() needs both: nltk.corpus.stopwords, nltk.word_tokenize
        try:
            nltk.download(package, quiet=True, raise_on_error=True)
            out["steps"].append(f"nltk.download({package!r}): done")
        except Exception as exc:  # noqa: BLE001  (the reason is the result)
            out["steps"].append(f"nltk.download({package!r}) failed: {exc}")
            missing.append(package)
    if missing:
        raise RuntimeError(f"NLTK data {', '.join(missing)} not available (nltk.download failed, see the steps); "
                           "Diffractor.rewrite cannot tokenize or tell stopwords without them")

    import diffractor
    import diffractor.core
    import importlib_resources

    with open(importlib_resources.files("diffractor.data") / "vocab.txt", encoding="utf-8") as handle:
        own_vocab = {line.strip() for line in handle if line.strip()}
    with open(spec["words_path"], encoding="utf-8") as handle:
        words = json.load(handle)
    vectors = np.load(spec["vectors_path"], mmap_mode="r")
    keep = [i for i, w in enumerate(words) if w in own_vocab]
    path = os.path.join(spec["workdir"], "glove-6b-50d-diffractor-filtered.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{len(keep)} {vectors.shape[1]}\n")
        for i in keep:
            handle.write(words[i] + " " + " ".join(f"{x:.6f}" for x in vectors[i]) + "\n")
    out.update({"library_version": diffractor.__version__, "library_vocab": len(own_vocab), "vocab_kept": len(keep)})
    diffractor.core.ensure_embeddings = lambda names=None: [path]  # the only replaced function (see the docstring)

    with open(spec["texts_path"], encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    texts = [r["text"] for r in records]
    started = time.perf_counter()
    config = diffractor.DiffractorConfig(method="geometric", epsilon=float(spec["epsilons"][0]), verbose=False,
                                         seed=int(spec["seed"]))
    with diffractor.Diffractor(config) as engine:
        out["setup_seconds"] = time.perf_counter() - started  # greedy 1-D sort of the word list (faiss)
        tokens = sum(len(nltk.word_tokenize(t.lower())) for t in texts)
        out["tokens"] = tokens
        out["results"] = []
        for eps in spec["epsilons"]:
            t0, c0 = time.perf_counter(), time.process_time()
            released = engine.rewrite(texts, epsilon=float(eps))
            wall = time.perf_counter() - t0
            out["results"].append({"epsilon": eps, "wall_seconds": wall, "parent_cpu_seconds": time.process_time() - c0,
                                   "tokens_per_second": tokens / wall,
                                   "texts": {r["id"]: t for r, t in zip(records, released)}})
            out["steps"].append(f"epsilon {eps}: {tokens} tokens in {wall:.1f} s")
            with open(os.path.join(spec["workdir"], "partial.json"), "w", encoding="utf-8") as handle:
                json.dump(out, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
