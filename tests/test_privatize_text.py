"""TextPrivatizer (Beam-free core of the pipeline): mechanism fidelity, OOV policies, case, counts."""

import numpy as np
import pytest
from scipy import stats

from textdp.madlib import Madlib
from textdp.mechanisms import make_mechanism
from textdp.errors import TextdpError
from textdp.text_privatizer import TextPrivatizer

ALPHA = 1e-3  # false-failure rate of each statistical test below


def privatizer(artifact, epsilon=5.0, policy="random", unk="<unk>"):
    mechanism = make_mechanism("madlib", artifact, epsilon)
    return TextPrivatizer(mechanism, artifact.words, artifact.word_to_id, policy, unk)


def test_pipeline_core_releases_words_with_the_mechanism_distribution(small_artifact):
    """Tokenize -> privatize -> render must not bias Madlib: the released words for "good" repeated
    2,000 times follow the same distribution as 2,000 bare ``Madlib.privatize_ids`` draws.

    Two-sample chi-square test of homogeneity over the most frequent outputs (+ one "other" bin, each
    bin with an expected count >= 5); false-failure rate ALPHA = 0.001.
    """
    n = 2000
    text_core = privatizer(small_artifact, epsilon=5.0)
    released, counts = text_core.privatize([" ".join(["good"] * n)], np.random.default_rng(1))
    via_text = released[0].split(" ")
    assert counts == {"tokens": n, "changed_tokens": sum(w != "good" for w in via_text), "unknown_tokens": 0}
    bare_ids = Madlib(small_artifact, 5.0).privatize_ids(np.full(n, small_artifact.word_to_id["good"]),
                                                         np.random.default_rng(2))
    bare = [small_artifact.words[i] for i in bare_ids]
    categories = {}
    for word in via_text + bare:
        categories[word] = categories.get(word, 0) + 1
    top = [w for w, c in sorted(categories.items(), key=lambda kv: -kv[1]) if c >= 20]
    table = np.array([[sum(w == t for w in sample) for t in top] + [sum(w not in top for w in sample)]
                      for sample in (via_text, bare)])
    table = table[:, table.sum(axis=0) > 0]
    assert len(top) >= 3, "epsilon should make the output vary"
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_random_oov_replacement_is_uniform_over_the_vocabulary(small_artifact):
    """Unknown words become uniform vocabulary draws: chi-square goodness of fit over 25 equal id bins
    (8,000 draws, 320 expected per bin); false-failure rate ALPHA = 0.001."""
    core = privatizer(small_artifact, policy="random")
    text = " ".join(["zzqxw", "Qqxzv"] * 4000)
    released, counts = core.privatize([text], np.random.default_rng(3))
    assert counts["unknown_tokens"] == 8000 and counts["changed_tokens"] == 8000
    ids = np.array([small_artifact.word_to_id[w.lower()] for w in released[0].split(" ")])
    histogram = np.bincount(ids * 25 // small_artifact.vocab_size, minlength=25)
    assert stats.chisquare(histogram).pvalue > ALPHA


def test_unk_marker_is_written_verbatim_and_keep_passes_words_through(small_artifact):
    text = "The ZZQXW was Qqxzv"
    unk, counts = privatizer(small_artifact, epsilon=1e6, policy="unk", unk="[?]").privatize(
        [text], np.random.default_rng(0))
    assert unk == ["The [?] was [?]"] and counts["unknown_tokens"] == 2 and counts["changed_tokens"] == 2
    kept, counts = privatizer(small_artifact, epsilon=1e6, policy="keep").privatize([text], np.random.default_rng(0))
    assert kept == [text] and counts["unknown_tokens"] == 2 and counts["changed_tokens"] == 0


def test_huge_epsilon_returns_the_text_unchanged_with_its_case(small_artifact):
    """At epsilon = 1e6 the noise (mean norm 50/eps) is far below any distance between words."""
    texts = ["The GOOD movie, I think.", "Nothing  here!\tReally?"]
    released, counts = privatizer(small_artifact, epsilon=1e6).privatize(texts, np.random.default_rng(0))
    assert released == texts
    assert counts == {"tokens": 8, "changed_tokens": 0, "unknown_tokens": 0}


def test_per_text_generators_make_runs_reproducible(small_artifact):
    core = privatizer(small_artifact, epsilon=3.0)
    texts = ["the film was long and slow", "a great story with good actors"]
    first, _ = core.privatize(texts, [np.random.default_rng([7, 1]), np.random.default_rng([7, 2])])
    again, _ = core.privatize(texts, [np.random.default_rng([7, 1]), np.random.default_rng([7, 2])])
    other, _ = core.privatize(texts, [np.random.default_rng([8, 1]), np.random.default_rng([8, 2])])
    assert first == again and first != other


def test_factory_names_and_unknown_mechanism(small_artifact):
    assert make_mechanism("madlib", small_artifact, 2.0).parameters()["epsilon"] == 2.0
    with pytest.raises(TextdpError, match="unknown mechanism"):
        make_mechanism("laplace", small_artifact, 2.0)
    with pytest.raises(ValueError, match="OOV policy"):
        privatizer(small_artifact, policy="drop")


def test_compact_vocabulary_matches_the_artifact_word_list(small_artifact):
    """The page-cache-shared vocabulary the workers use: same words, same ids, unknowns absent."""
    from textdp.compact_vocab import SharedVocabularyArtifact  # pylint: disable=import-outside-toplevel

    shared_words = SharedVocabularyArtifact(small_artifact.path)
    words = shared_words.words
    assert len(words) == len(small_artifact.words) == 5000
    assert list(words) == small_artifact.words
    assert all(words.get(w) == i for i, w in enumerate(small_artifact.words))
    assert words.get("zzqxwv") is None and "zzqxwv" not in words and "the" in words
    assert words.private_bytes() < 200_000
    text = "The film's ending wasn't GOOD, 1999."
    core = TextPrivatizer(make_mechanism("madlib", shared_words, 4.0), words, shared_words.word_to_id)
    reference = privatizer(small_artifact, epsilon=4.0)
    assert core.privatize([text], np.random.default_rng(5)) == reference.privatize([text], np.random.default_rng(5))


def test_summary_reconciliation_and_policy_statements():
    from textdp.summary import build_summary  # pylint: disable=import-outside-toplevel

    common = dict(input_pattern="in.txt", output="out-*", errors_output="out-errors-*", data_format="text",
                  text_fields=(), mechanism_parameters={"mechanism": "madlib"}, mechanism_statement={"per_token": "x"},
                  artifact={}, unk_token="<unk>", max_record_bytes=10)
    ok = build_summary({"records_in": 5, "records_out": 3, "records_failed": 1, "failed:empty": 1,
                        "records_dropped": 1, "tokens": 10, "changed_tokens": 4}, oov_policy="unk", seed=None, **common)
    assert ok["records"] == {"in": 5, "out": 3, "failed": 1, "failed_by_reason": {"empty": 1}, "reconciled": True,
                             "dropped": 1}
    assert ok["tokens"]["changed_fraction"] == 0.4 and "'<unk>'" in ok["privacy"]["unknown_words"]
    broken = build_summary({"records_in": 5, "records_out": 3}, oov_policy="random", seed=3, **common)
    assert broken["records"]["reconciled"] is False
    assert broken["seed_used"] is True and "NOT" in broken["privacy"]["seed"]
