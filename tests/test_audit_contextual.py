"""The contextual inversion attacker (textdp/audit/contextual.py) and its place in ``textdp audit``.

Exact checks (no randomness): forward-backward posteriors equal brute-force enumeration over every
input sequence (to 1e-12); the bigram model's probabilities equal hand-computed values; with a model
that has no training bigram (it is the prior) the contextual guesses are the context-free ones.

Statistical checks, on real GloVe words of /tmp/art300 released by the real Madlib mechanism (fixed
seeds; the rates below are for fresh randomness):

* Markov corpus (each word followed by its successor with probability 0.9): the mean per-sequence
  gain of contextual over context-free top-1 (on the same releases, 1,000 independent sequences of
  10 words) must exceed 0.15. A pilot with 20,000 sequences measured 0.32; per-sequence gains lie in
  [-1, 1], so by Hoeffding a correct implementation fails with probability at most
  exp(-1000 * 0.17^2 / 2) < 1e-6.
* i.i.d. corpus (no order structure): the empirical-Bernstein upper confidence bound (delta = 1e-6,
  Maurer & Pontil 2009) of the mean gain over 4,000 sequences must be above -0.01: if the true gain
  is at least -0.01 (pilot: -0.003, the bigram model's estimation noise) this fails with probability
  at most 1e-6.

The audit job runs (local FnApiRunner, /tmp/art300, a small synthetic corpus) assert only what the
run did: the summary's shape, the model entry, the report and the CLI's lines. The module's false-
failure rate is below 3e-6.
"""

import itertools
import json
import math
import os

import numpy as np
import pytest

from pipelines.cli import main as cli_main
from tests.test_calibration_pipeline import assert_valid_png
from tests.test_neighbours import copy_artifact, run_neighbours
from textdp.artifact.locate import open_artifact
from textdp.audit.attacks import CountTable, Prior, fill_guesses
from textdp.audit.contextual import (
    BigramLM,
    contextual_attack,
    merge_bigrams,
    posterior_marginals,
    record_bigrams,
    runs_of,
    table_emission,
)
from textdp.mechanisms import make_mechanism

ART300 = "/tmp/art300"
RUNNER = ["--runner=FnApiRunner"]


def brute_force(log_init, log_trans, log_emit):
    steps, width = log_emit.shape
    marg = np.zeros((steps, width))
    for seq in itertools.product(range(width), repeat=steps):
        weight = log_init[seq[0]] + sum(log_emit[t, s] for t, s in enumerate(seq))
        weight += sum(log_trans[t - 1, seq[t - 1], seq[t]] for t in range(1, steps))
        for t, s in enumerate(seq):
            marg[t, s] += math.exp(weight)
    return marg / marg.sum(axis=1, keepdims=True)


def test_forward_backward_equals_brute_force_enumeration():
    rng = np.random.default_rng(3)
    steps, width = 5, 3
    log_init = np.log(rng.dirichlet(np.ones(width)))
    log_trans = np.log(rng.dirichlet(np.ones(width), size=(steps - 1, width)))  # a different matrix per step
    log_emit = np.log(rng.uniform(0.01, 1.0, size=(steps, width)))
    got = np.exp(posterior_marginals(log_init, log_trans, log_emit))
    np.testing.assert_allclose(got, brute_force(log_init, log_trans, log_emit), rtol=0, atol=1e-12)


def hand_lm():
    """4 words, uniform prior; bigrams c(0,1)=3, c(0,2)=1, c(1,2)=2, c(2,0)=1: n1 = 2, n2 = 1, so D = 1/2."""
    prior = Prior(np.arange(4), np.log(np.full(4, 0.25)), "uniform")
    keys = np.array([0 * 4 + 1, 0 * 4 + 2, 1 * 4 + 2, 2 * 4 + 0])
    return BigramLM.from_counts(keys, np.array([3, 1, 2, 1]), prior, 4, training_tokens=9, source="hand")


def test_bigram_model_equals_hand_computed_values():
    lm = hand_lm()
    assert lm.discount == 0.5
    p = np.exp(lm.log_prob(np.arange(4)[:, None], np.arange(4)[None, :]))
    # P(b | 0) = max(c - 1/2, 0) / 4 + (1/2 * 2 / 4) * 1/4
    np.testing.assert_allclose(p[0], [0.0625, 0.6875, 0.1875, 0.0625], atol=1e-15)
    # P(b | 1) = max(c - 1/2, 0) / 2 + (1/2 * 1 / 2) * 1/4
    np.testing.assert_allclose(p[1], [0.0625, 0.0625, 0.8125, 0.0625], atol=1e-15)
    np.testing.assert_allclose(p[3], [0.25] * 4, atol=1e-15)  # a history never seen: the prior
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-15)
    assert lm.describe(7)["order"] == 2 and lm.describe(7)["candidates_K"] == 7


def test_contextual_guesses_equal_the_brute_force_posterior_ranking():
    """Full candidate sets (all 4 words): the attacker's ranking is the exact HMM posterior's."""
    lm = hand_lm()
    emit = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1], [0.05, 0.15, 0.5, 0.3], [0.2, 0.2, 0.2, 0.4]])  # P(o | w)
    outputs = np.array([0, 3, 2, 3, 1])
    ranked = np.array([np.argsort(-emit[:, o], kind="stable") for o in outputs])  # the context-free ranking (uniform prior)
    trans = np.log(np.exp(lm.log_prob(np.arange(4)[:, None], np.arange(4)[None, :])))
    exact = brute_force(np.log(np.full(4, 0.25)), np.repeat(trans[None], 4, axis=0), np.log(emit[:, outputs].T))

    def emission(cands, outs):
        return np.log(emit[cands, outs[:, None]])

    guesses = contextual_attack(lm, ranked, outputs, [(0, 5)], emission, k=4)
    for t in range(5):
        np.testing.assert_allclose(exact[t, guesses[t]], np.sort(exact[t])[::-1], atol=1e-12)


def test_runs_split_at_unknown_words():
    assert runs_of(np.array([3, 4, -9, 5, -2, -3, 6, 7, 8])) == [(0, 2), (3, 4), (6, 9)]
    keys, counts = record_bigrams(np.array([3, 4, -9, 5, 3, 4]), 10)
    assert dict(zip(keys.tolist(), counts.tolist())) == {34: 2, 53: 1}
    merged = merge_bigrams([(keys, counts), (np.array([34, 99]), np.array([1, 5]))])
    assert dict(zip(merged[0].tolist(), merged[1].tolist())) == {34: 3, 53: 1, 99: 5}


# --- statistical: Markov and i.i.d. corpora over real GloVe words, released by Madlib --------------------


def chain(words, count, length, rng, follow):
    """``count`` sequences: the next word is the current one's successor with probability ``follow``, else uniform."""
    size = len(words)
    out = np.empty((count, length), np.int64)
    state = rng.integers(0, size, count)
    for t in range(length):
        out[:, t] = state
        state = np.where(rng.random(count) < follow, (state + 1) % size, rng.integers(0, size, count))
    return words[out]


def per_sequence_gain(follow, sequences, seed):
    artifact = open_artifact(ART300)
    vocab = artifact.vocab_size
    rng = np.random.default_rng(seed)
    words = np.sort(rng.choice(vocab, 40, replace=False))
    train = chain(words, 2000, 10, rng, follow)  # public text, disjoint from the attacked sequences
    ids, counts = np.unique(train, return_counts=True)
    prior = Prior.from_counts(ids, counts, None, "training text")
    lm = BigramLM.from_counts(*merge_bigrams([record_bigrams(r, vocab) for r in train]), prior, vocab, train.size, "train")
    mechanism = make_mechanism("madlib", artifact, 6.0)
    draws = prior.sample(100000, rng)
    table = CountTable(draws, mechanism.privatize_ids(draws, rng), vocab)
    test = chain(words, sequences, 10, rng, follow)
    tokens = test.ravel()
    outputs = mechanism.privatize_ids(tokens, rng)
    distinct, inverse = np.unique(outputs, return_inverse=True)
    ranked = fill_guesses(table.guesses(prior, k=20), distinct, prior.top(20), k=20)[inverse.reshape(-1)]
    guesses = contextual_attack(lm, ranked, outputs, [(i * 10, i * 10 + 10) for i in range(sequences)],
                                table_emission(table))
    context_free = (ranked[:, 0] == tokens).reshape(sequences, 10).mean(axis=1)
    contextual = (guesses[:, 0] == tokens).reshape(sequences, 10).mean(axis=1)
    return contextual - context_free, lm, prior, ranked, outputs, table


def test_contextual_beats_context_free_on_ordered_text():
    gain, *_ = per_sequence_gain(0.9, 1000, seed=11)
    assert gain.mean() > 0.15, gain.mean()  # pilot: 0.32; Hoeffding false-failure < 1e-6 (module docstring)


def test_no_worse_than_context_free_on_iid_text():
    gain, lm, prior, _, outputs, _ = per_sequence_gain(0.0, 4000, seed=12)
    delta, n = 1e-6, len(gain)
    y = (gain + 1.0) / 2.0  # in [0, 1]
    ucb = y.mean() + math.sqrt(2 * y.var(ddof=1) * math.log(2 / delta) / n) + 7 * math.log(2 / delta) / (3 * (n - 1))
    assert 2 * ucb - 1 > -0.01, (gain.mean(), 2 * ucb - 1)
    # exact: a model without a training bigram is the prior, and the contextual attacker ranks as the context-free
    # posterior prior(w) P(o | w) does (here over the whole support, with a continuous emission: no ties)
    empty = BigramLM.from_counts(np.empty(0, np.int64), np.empty(0, np.int64), prior, lm.vocab_size, 0, "none")
    emit = np.random.default_rng(1).normal(size=(lm.vocab_size, lm.vocab_size))

    def emission(cands, outs):
        return emit[cands, outs[:, None]]

    outs = outputs[:500]
    score = prior.log_prob[None, :] + emit[prior.support][:, outs].T
    ranked = prior.support[np.argsort(-score, axis=1)]
    guesses = contextual_attack(empty, ranked, outs, [(0, 250), (250, 500)], emission)
    np.testing.assert_array_equal(guesses, ranked[:, :10])


# --- the audit job -----------------------------------------------------------------------------------------


def write_corpus(path, records, vocab):
    with open(path, "w", encoding="utf-8") as handle:
        for row in records:
            handle.write(" ".join(vocab[i] for i in row) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctx")
    vocab = open(os.path.join(ART300, "vocab.txt"), encoding="utf-8").read().split("\n")
    artifact = open_artifact(ART300)
    alphabetic = np.array([i for i in range(artifact.vocab_size) if vocab[i].isalpha()])
    rng = np.random.default_rng(5)
    words = np.sort(rng.choice(alphabetic, 60, replace=False))
    corpus = write_corpus(root / "corpus.txt", chain(words, 600, 12, rng, 0.9), vocab)
    prior = write_corpus(root / "prior.txt", chain(words, 400, 12, rng, 0.9), vocab)
    artifact_dir = copy_artifact(ART300, root / "art300")  # /tmp/art300 is shared and read-only
    run_neighbours(artifact_dir, "--k=40", "--metric=euclidean")
    return root, corpus, prior, artifact_dir


def run_audit(root, name, artifact_dir, corpus, *extra):
    out = str(root / name)
    code = cli_main(["audit", f"--artifact={artifact_dir}", "--epsilons=4,8", "--checks=inversion", f"--corpus={corpus}",
                     "--records=200", "--inversion-tokens=1500", "--seed=3", f"--output={out}", *extra] + RUNNER)
    assert code == 0
    return out, json.load(open(f"{out}/summary.json", encoding="utf-8"))


def shape(value):
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__ if value is not None else "float"


def test_audit_reports_the_contextual_attacker(corpora, capsys):
    root, corpus, prior, artifact_dir = corpora
    out, summary = run_audit(root, "tem", artifact_dir, corpus, "--mechanism=tem", f"--prior-corpus={prior}",
                             "--prior-words=1000", "--contextual-candidates=30")
    printed = capsys.readouterr().out
    inversion, contextual = summary["inversion"], summary["contextual_inversion"]
    assert set(contextual["per_epsilon"]) == set(inversion["per_epsilon"]) == {"4", "8"}
    for eps in ("4", "8"):  # the very shape of summary["inversion"]
        got, ref = contextual["per_epsilon"][eps], inversion["per_epsilon"][eps]
        assert shape(got["overall"]) == shape(ref["overall"])
        assert all(shape(band) == shape(next(iter(ref["bands"].values()))) for band in got["bands"].values())
        assert set(got) == set(ref)
        assert got["tokens"] == 1500 == sum(b["tokens"] for b in got["bands"].values())  # 125 whole records of 12
        same = contextual["same_releases_context_free"][eps]
        assert same["tokens"] == got["tokens"]
        overall = got["overall"]
        assert overall["top1"]["rate"] <= overall["top10"]["rate"] <= overall["in_prior"]["rate"]
        line = (f"contextual inversion at epsilon {eps}: top-1 {overall['top1']['rate']:.3f}, top-10 "
                f"{overall['top10']['rate']:.3f} of 1,500 tokens in whole records (context-free on the same releases: "
                f"top-1 {same['top1']['rate']:.3f}, top-10 {same['top10']['rate']:.3f}); bigram model from 4,800 "
                "training tokens, 30 candidates per word: a lower bound for an attacker with a better language model")
        assert line in printed
    model = contextual["model"]
    assert model["order"] == 2 and model["candidates_K"] == 30
    assert model["training_tokens"] == 400 * 12 and "reference corpus" in model["training_text"]
    assert "exact" in inversion["posterior"] and "closed form" in contextual["posterior"]
    html = open(f"{out}/report.html", encoding="utf-8").read()
    assert "<td class='l'>contextual</td>" in html and "<td class='l'>context-free</td>" in html
    assert "Contextual attacker" in html and "4,800 tokens" in html
    assert_valid_png(f"{out}/inversion.png")


def test_audit_trains_on_the_records_it_does_not_attack(corpora):
    """Without --prior-corpus the model learns from the 400 records after the 200 evaluated ones (Monte Carlo law),
    less the copies of attacked records (R10b-4: the chain corpus repeats records): every record left out is one
    whose text occurs more than once in the corpus."""
    from collections import Counter

    root, corpus, _, artifact_dir = corpora
    _, summary = run_audit(root, "madlib", artifact_dir, corpus, "--mechanism=madlib", "--mc-draws=20000")
    model = summary["contextual_inversion"]["model"]
    lines = Counter(open(corpus, encoding="utf-8").read().splitlines())
    repeated = sum(n for n in lines.values() if n > 1)
    assert 0 <= model["copies_left_out"] <= repeated
    assert model["training_tokens"] == (400 - model["copies_left_out"]) * 12 and "not attacked" in model["training_text"]
    assert model["candidates_K"] == 50
    assert "Monte Carlo" in summary["contextual_inversion"]["posterior"]


def test_no_contextual_switches_it_off(corpora, capsys):
    root, corpus, _, artifact_dir = corpora
    out, summary = run_audit(root, "off", artifact_dir, corpus, "--mechanism=madlib", "--mc-draws=5000",
                             "--no-contextual")
    assert "contextual_inversion" not in summary and "inversion" in summary
    assert "contextual inversion" not in capsys.readouterr().out
    assert "The contextual attacker was not run (--no-contextual)." in open(f"{out}/report.html", encoding="utf-8").read()


def test_contextual_candidates_out_of_range_is_refused(corpora, capsys):
    root, corpus, _, artifact_dir = corpora
    code = cli_main(["audit", f"--artifact={artifact_dir}", "--epsilons=4", "--checks=inversion", f"--corpus={corpus}",
                     "--mechanism=madlib", "--contextual-candidates=0", f"--output={root / 'bad'}"] + RUNNER)
    assert code == 2
    assert "--contextual-candidates must be between 10 and 1,000" in capsys.readouterr().err
