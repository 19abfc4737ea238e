"""Text path benchmark (issue 17): tokenize + lookup, layout, render, and the whole TextPrivatizer
against the bare mechanism, before (the frozen word-at-a-time reference) and after (the batch path).

    python -m benchmarks.bench_text_path [--artifact DIR] [--reviews 2000] [--batch 64] [--repeats 7]

One core: BLAS limited to one thread (environment before numpy loads, and threadpoolctl), one
process, tokens/s = tokens / process CPU seconds. IMDb reviews (../shared/data), cut into batches
of ``--batch`` records as the privatize pipeline does (its default batch is 64 records). Measured:

(a) tokenize + lookup: ``Tokenizer.tokenize_batch`` against the reference ``tokenize`` per text,
    both on the memory-mapped 400k vocabulary the workers use (CompactVocabulary);
(b) layout digests (``TokenizedBatch.layouts`` / ``Tokenized.layout``) and rendering (released
    words from the vocabulary + reassembly; identity release) each alone;
(c) the whole TextPrivatizer (tokenize, layouts for the shuffle, mechanism, render; OOV policy
    ``random``) with TEM at epsilon 5 and 10 and Madlib (exact) at epsilon 10, against the bare
    mechanism's ``privatize_ids`` on the same token ids in the same batches (unknown words replaced
    by uniform draws, as the ``random`` policy does). Madlib runs on the first reviews only (exact
    search on 400k words does ~2,000-8,000 tokens/s, so the text path is noise there).

The machine is shared: runs alternate (bare, after, before) and each figure is the best of
``--repeats``; load averages are recorded. Memory: the word memo's arrays at capacity against a
dict of the whole vocabulary (the per-process cost the compact vocabulary avoids).
Results: benchmarks/results/text_path.json and text_path.md.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import copy
import time
import tracemalloc

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.harness import imdb_texts, machine, write_results
from benchmarks.reference_text_path import FrozenReferenceTextPrivatizer, FrozenReferenceTokenizer
from textdp.artifact.compact_vocab import SharedVocabularyArtifact
from textdp.artifact.store import default_artifact_path
from textdp.mechanisms import make_mechanism
from textdp.text.privatizer import TextPrivatizer
from textdp.text.tokenize import UNKNOWN_ID, Tokenizer

SEED = 20261123
MECHANISMS = (("tem", 5.0, 1), ("tem", 10.0, 1), ("tem", 10.0, 4), ("madlib", 10.0, 1))  # batch: x --batch records
MADLIB_REVIEWS = 40
WARM_REVIEWS = 10000  # reviews after the measured ones, run through the tokenizer first: a memo in steady state


def cpu_best(runs: dict, name: str, work) -> None:
    started = time.process_time()
    work()
    seconds = time.process_time() - started
    runs[name] = min(runs.get(name, float("inf")), seconds)


def warmed(vocabulary, warm_texts, batch_size: int) -> Tokenizer:
    """A tokenizer whose word memo has seen ``warm_texts`` (other reviews than the measured ones)."""
    tokenizer = Tokenizer(vocabulary, vocabulary)
    for start in range(0, len(warm_texts), batch_size):
        tokenizer.tokenize_batch(warm_texts[start:start + batch_size])
    return tokenizer


def copy_of(tokenizer: Tokenizer) -> Tokenizer:
    """The same tokenizer state again (memo and split table copied, vocabulary shared)."""
    twin = Tokenizer(tokenizer.word_to_id, tokenizer.words)
    twin._memo, twin._splits = copy.deepcopy(tokenizer._memo), copy.deepcopy(tokenizer._splits)
    return twin


def text_steps(artifact, texts, warm: Tokenizer, batch_size: int, repeats: int) -> dict:
    """(a) and (b): tokenize, layouts and render alone, after and before."""
    vocabulary = artifact.words
    batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
    reference = FrozenReferenceTokenizer(vocabulary)
    privatizer = TextPrivatizer(None, vocabulary, vocabulary)
    tokenized = [copy_of(warm).tokenize_batch(batch) for batch in batches]
    old = [[reference.tokenize(text) for text in batch] for batch in batches]
    tokens = sum(len(one.ids) for one in tokenized)
    same = [np.maximum(one.ids, 0) for one in tokenized]  # each word released as itself (unknown -> word 0)
    draws = np.random.default_rng(SEED)
    other = [draws.integers(0, len(vocabulary), len(one.ids)) for one in tokenized]  # every word replaced
    runs, load = {}, []
    for _ in range(repeats):
        load.append(os.getloadavg()[0])
        tokenizer, cold = copy_of(warm), Tokenizer(vocabulary, vocabulary)
        cpu_best(runs, "tokenize_after", lambda: [tokenizer.tokenize_batch(batch) for batch in batches])
        cpu_best(runs, "tokenize_cold_after", lambda: [cold.tokenize_batch(batch) for batch in batches])
        cpu_best(runs, "tokenize_before", lambda: [[reference.tokenize(t) for t in batch] for batch in batches])
        cpu_best(runs, "layouts_after", lambda: [one.layouts() for one in tokenized])
        cpu_best(runs, "layouts_before", lambda: [[t.layout() for t in batch] for batch in old])
        for name, released in (("render_same", same), ("render_other", other)):
            cpu_best(runs, f"{name}_after", lambda: [privatizer._render(one, ids)
                                                     for one, ids in zip(tokenized, released)])
            cpu_best(runs, f"{name}_before", lambda: [render_before(batch, ids, vocabulary)
                                                      for batch, ids in zip(old, released)])
    runs["tokenize_cold_before"] = runs["tokenize_before"]
    rows = {}
    for step in ("tokenize", "tokenize_cold", "layouts", "render_same", "render_other"):
        after, before = runs[f"{step}_after"], runs[f"{step}_before"]
        rows[step] = {"tokens_per_s_after": round(tokens / after), "tokens_per_s_before": round(tokens / before),
                      "ns_per_token_after": round(after / tokens * 1e9, 1),
                      "ns_per_token_before": round(before / tokens * 1e9, 1), "speedup": round(before / after, 1)}
    return {"tokens": tokens, "batches": len(batches), "steps": rows, "loadavg_1min": load}


def render_before(batch, ids, vocabulary):
    out, start = [], 0
    for one in batch:
        chunk = ids[start:start + len(one.slots)].tolist()
        start += len(chunk)
        out.append(one.render([vocabulary[i] for i in chunk]))
    return out


class TimedMechanism:
    """A mechanism that adds up the CPU time spent in it, to tell the text path's own time apart."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def privatize_ids(self, ids, rng):
        started = time.process_time()
        released = self.inner.privatize_ids(ids, rng)
        self.seconds += time.process_time() - started
        return released


def whole(artifact, texts, warm: Tokenizer, batch_size: int, mechanism: str, epsilon: float, repeats: int) -> dict:
    """(c): TextPrivatizer after and before against the bare mechanism: one mechanism instance for
    all (TEM keeps state: dense rows for frequent words), same ids, same batches, the paths taking
    turns batch by batch so that the machine's load hits them alike."""
    vocabulary = artifact.words
    batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
    tokenizer = copy_of(warm)
    draws = np.random.default_rng(SEED)
    inputs = []
    for batch in batches:  # the ids the mechanism gets under the 'random' OOV policy
        ids = tokenizer.tokenize_batch(batch).ids.copy()
        unknown = ids == UNKNOWN_ID
        ids[unknown] = draws.integers(0, len(vocabulary), int(unknown.sum()))
        inputs.append(ids)
    tokens = int(sum(len(ids) for ids in inputs))
    shared = make_mechanism(mechanism, artifact, epsilon)
    for one in inputs:  # page cache, and TEM's dense rows, before anything is measured
        shared.privatize_ids(one, np.random.default_rng(SEED))
    paths = {"after": None, "after_shapes": [], "before": None, "before_shapes": []}  # name -> shapes argument
    runs, own, load, ratios = {}, {}, [], {}
    for _ in range(repeats):
        load.append(os.getloadavg()[0])
        timed = {name: TimedMechanism(shared) for name in paths}
        privatizers = {name: (TextPrivatizer if name.startswith("after") else FrozenReferenceTextPrivatizer)(
            timed[name], vocabulary, vocabulary, "random") for name in paths}
        for name in ("after", "after_shapes"):
            privatizers[name].tokenizer = copy_of(warm)  # each from the same steady state
        totals = dict.fromkeys(["bare", *paths], 0.0)
        for batch, ids in zip(batches, inputs):
            started = time.process_time()
            shared.privatize_ids(ids, np.random.default_rng(SEED))
            totals["bare"] += time.process_time() - started
            for name, shapes in paths.items():
                started = time.process_time()
                privatizers[name].privatize(batch, np.random.default_rng(SEED), shapes)
                totals[name] += time.process_time() - started
        for name, seconds in totals.items():
            runs[name] = min(runs.get(name, float("inf")), seconds)
            if name != "bare":
                ratios.setdefault(name, []).append(round(totals["bare"] / seconds, 3))
            if name != "bare":
                own[name] = min(own.get(name, float("inf")), seconds - timed[name].seconds)
    row = {"mechanism": mechanism, "epsilon": epsilon, "reviews": len(texts), "tokens": tokens, "repeats": repeats,
           "batch_records": batch_size, "tokens_per_batch": round(tokens / len(batches)), "loadavg_1min": load}
    for name, seconds in runs.items():
        row[f"{name}_tokens_per_s"] = round(tokens / seconds)
    for name in paths:
        row[f"ratio_{name}"] = round(runs["bare"] / runs[name], 3)
        row[f"ratio_per_repeat_{name}"] = ratios[name]
        row[f"text_path_ns_per_token_{name}"] = round(own[name] / tokens * 1e9)  # CPU outside the mechanism
    print(row, flush=True)
    return row


def memory(artifact, texts) -> dict:
    """Private memory of the lookup: the word memo at capacity, against a dict of the vocabulary."""
    tokenizer = Tokenizer(artifact.words, artifact.words)
    for start in range(0, len(texts), 256):
        tokenizer.tokenize_batch(texts[start:start + 256])
    memo = tokenizer._memo
    tracemalloc.start()
    vocabulary_dict = {word: i for i, word in enumerate(artifact.words)}
    dict_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del vocabulary_dict
    return {"memo_capacity_words": memo.capacity, "memo_words_after_reviews": memo.count, "reviews": len(texts),
            "memo_mib": round(tokenizer.state_bytes() / 2**20, 2),
            "vocabulary_dict_mib": round(dict_bytes / 2**20, 1), "vocabulary_words": len(artifact.words)}


def markdown(payload: dict) -> str:
    m = payload["machine"]
    steps = payload["text_steps"]
    lines = ["# Text path benchmark (issue 17)", "",
             f"Machine: {m['cpu']}, {m['cores']} cores (nproc), Python {m['python']}, numpy {m['numpy']}; "
             f"load average at start {tuple(round(x, 2) for x in m['loadavg_at_start'])}, at the end "
             f"{tuple(round(x, 2) for x in payload['loadavg_at_end'])} (2 cores shared with other engineers: "
             "every figure is the best of the repeats). Date {m['date_utc']}. One core, BLAS one thread, "
             "tokens/s = tokens / process CPU seconds.".replace("{m['date_utc']}", m["date_utc"]), "",
             f"Artifact: `{payload['artifact']}` ({payload['artifact_note']}). IMDb reviews: the first "
             f"{payload['reviews']:,}, {steps['tokens']:,} words, in batches of {payload['batch']} records "
             "(the pipeline's default batch). Before = the word-at-a-time implementation kept as a frozen "
             "reference in tests/test_fast_text_path.py; after = the batch path; the test proves both give "
             f"the same bytes. 'Steady state': the tokenizer's word memo has first seen {payload['warm_reviews']:,} "
             "other reviews, so the measured reviews still bring new words (about 2% of tokens) as a long "
             "stream does; every repeat starts from that same state.", "",
             "## (a), (b) The steps alone", "",
             "| step | before tokens/s | after tokens/s | before ns/token | after ns/token | speed-up |",
             "|---|---|---|---|---|---|"]
    names = {"tokenize": "tokenize + lookup (steady state: memo warmed on other reviews)",
             "tokenize_cold": "tokenize + lookup (cold: empty memo, first pass)", "layouts": "layout digests",
             "render_same": "render, every word released as itself (the privatizer's render step)",
             "render_other": "render, every word replaced by a random vocabulary word"}
    for step, row in steps["steps"].items():
        lines.append(f"| {names[step]} | {row['tokens_per_s_before']:,} | {row['tokens_per_s_after']:,} | "
                     f"{row['ns_per_token_before']} | {row['ns_per_token_after']} | {row['speedup']}x |")
    lines += ["", "## (c) The whole TextPrivatizer against the bare mechanism (target: after >= 80% of bare)", "",
              "Two settings: *privatize* (the default pipeline: no layout digests) and *+ shapes* (with the "
              "Amplifier, the privatizer also writes each record's layout digest for the shuffle accounting).", "",
              "| mechanism | epsilon | batch (records / tokens) | bare tokens/s | setting | after tokens/s | "
              "before tokens/s | after / bare | before / bare | text path ns/token after | before |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in payload["whole"]:
        for label, name in (("", "privatize"), ("_shapes", "+ shapes")):
            lines.append(
                f"| {row['mechanism']} | {row['epsilon']:g} | {row['batch_records']} / {row['tokens_per_batch']:,} | "
                f"{row['bare_tokens_per_s']:,} | "
                f"{name} | {row[f'after{label}_tokens_per_s']:,} | {row[f'before{label}_tokens_per_s']:,} | "
                f"**{row[f'ratio_after{label}']:.2f}** | {row[f'ratio_before{label}']:.2f} | "
                f"{row[f'text_path_ns_per_token_after{label}']} | {row[f'text_path_ns_per_token_before{label}']} |")
    mem = payload["memory"]
    lines += ["", "## Memory per worker process (lookup state)", "",
              f"The word memo (surface word -> id and case, verified code point by code point) holds at most "
              f"{mem['memo_capacity_words']:,} words (when full it keeps the words in use and forgets the others): "
              f"{mem['memo_mib']} MiB of arrays (memo and split table) after "
              f"{mem['reviews']:,} reviews (it then held {mem['memo_words_after_reviews']:,} words), "
              f"one per Tokenizer (one per DoFn instance). A dict of the whole {mem['vocabulary_words']:,}-word "
              f"vocabulary would cost {mem['vocabulary_dict_mib']} MiB per process (measured with tracemalloc); the "
              "vocabulary itself stays memory-mapped and shared (CompactVocabulary).", ""]
    lines += [f"- {note}" for note in payload["notes"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", default=None, help="artifact with a TEM neighbour table "
                        "(default: the default artifact, which must have one)")
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64, help="records per batch (the pipeline's default: 64)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    path = args.artifact or default_artifact_path()
    artifact = SharedVocabularyArtifact(path)
    if "neighbours" not in artifact.manifest:
        parser.error(f"{path} has no TEM neighbour table: run `textdp neighbours` on a copy and pass --artifact")
    payload = {"benchmark": "text path: tokenize + lookup, layout, render, whole TextPrivatizer vs bare mechanism",
               "machine": machine(), "artifact": path, "reviews": args.reviews, "batch": args.batch, "seed": SEED,
               "warm_reviews": WARM_REVIEWS,
               "artifact_note": (f"{artifact.vocab_size:,} words, GloVe 6B 50d, K = "
                                 f"{artifact.manifest['neighbours']['k']} neighbour table; vocab and vectors "
                                 f"sha256 {artifact.manifest['files'][artifact.manifest['vocab']]['sha256'][:12]}... / "
                                 f"{artifact.manifest['files'][artifact.manifest['vectors']]['sha256'][:12]}...")}
    everything = imdb_texts(args.reviews + WARM_REVIEWS)
    texts, warm_texts = everything[:args.reviews], everything[args.reviews:]
    with threadpool_limits(1):
        warm = warmed(artifact.words, warm_texts, args.batch)
        payload["text_steps"] = text_steps(artifact, texts, warm, args.batch, args.repeats)
        print(payload["text_steps"], flush=True)
        payload["whole"] = []
        for mechanism, epsilon, times in MECHANISMS:
            subset = texts[:MADLIB_REVIEWS] if mechanism == "madlib" else texts
            repeats = 3 if mechanism == "madlib" or epsilon < 10 else args.repeats
            payload["whole"].append(whole(artifact, subset, warm, args.batch * times, mechanism, epsilon, repeats))
        payload["memory"] = memory(artifact, everything)
    payload["loadavg_at_end"] = os.getloadavg()
    payload["notes"] = [
        "Ratios are bare CPU seconds / TextPrivatizer CPU seconds, best of the repeats each, the paths taking "
        "turns batch by batch; 'text path ns/token' is the TextPrivatizer's CPU time outside the mechanism's "
        "privatize_ids per token (best repeat). TEM at epsilon 5 and Madlib spend microseconds per token in "
        "the mechanism, so the text path hardly shows there; TEM at epsilon 10 (~1.3 us/token) is the case "
        "the text path limited.",
        f"Madlib: the first {MADLIB_REVIEWS} reviews only (exact search on 400k words).",
        "Batches: the pipeline's default (64 records) and four times that, for TEM at epsilon 10: the text "
        "path has a fixed cost per batch (a few hundred microseconds of numpy calls and new words to look "
        "up), so larger batches (issue 17, item 2: batches by tokens) lower its cost per token. The ratio of "
        "each repeat is in text_path.json (ratio_per_repeat_*).",
        "The frozen reference looks words up in the same memory-mapped vocabulary (CompactVocabulary), as the "
        "workers did before."]
    write_results("text_path", payload, markdown(payload))
    print(markdown(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
