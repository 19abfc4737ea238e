"""Every released word is one word (issue 25, G7 and G8a of the second hostile round).

An artifact holds only vocabulary entries the tokenizer reads as themselves: build-index drops the
others (punctuation, entries with a space, a NUL or a line separator inside, case variants) and counts
them; a hand-edited artifact that holds one is refused before the run; and the unknown-word marker can
be neither invisible nor a vocabulary word. Real GloVe vectors, real runs on the local runner.
"""

import json
import os
import shutil

import numpy as np
import pytest

import textdp
from pipelines.cli import main as cli_main
from textdp.artifact.locate import open_artifact, verify_artifact
from textdp.artifact.store import Artifact
from textdp.artifact.verification import sha256_file
from textdp.errors import ArtifactError, ParameterError
from textdp.text.tokenize import Tokenizer, unreadable_entries

RUNNER = ["--runner", "FnApiRunner"]
NOT_WORDS = ["x y", "a\x00b", "line\u2028sep", '"', ",", "--", "u.s.", "Paris"]


def test_unreadable_entries_are_exactly_the_ones_the_tokenizer_never_reads_as_themselves():
    words = ["the", "they", "'ll", "'s", "n't", "3.5", "well-known", "caf\u00e9", "\U0001F600"] + NOT_WORDS + ["the"]
    bad = [words[i] for i in unreadable_entries(words)]
    assert bad == NOT_WORDS + ["the"]  # a duplicate is never read (the first one is)
    # the clitics are readable after a vocabulary word, as the tokenizer reads "they'll"
    batch = Tokenizer({w: i for i, w in enumerate(words)}).tokenize_batch(["they'll"])
    assert batch.ids.tolist() == [1, 2]
    assert unreadable_entries([]).tolist() == []


def _embeddings(tmp_path, words):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "v.npy", rng.normal(size=(len(words), 8)).astype(np.float32))
    (tmp_path / "v.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return ["--embeddings", str(tmp_path / "v.npy"), "--vocab-file", str(tmp_path / "v.txt"), "--trees", "2"]


def test_build_index_drops_entries_that_are_not_one_word_and_counts_them(tmp_path, capsys):
    words = ["the", "ok", "fine", "movie"] + NOT_WORDS
    assert cli_main(["build-index", *_embeddings(tmp_path, words), "--output", str(tmp_path / "art")]) == 0
    assert "dropping 8 entries the tokenizer never reads as one word" in capsys.readouterr().err
    manifest = json.load(open(tmp_path / "art" / "manifest.json"))
    assert manifest["vocab_size"] == 4 and manifest["dropped_entries"]["count"] == 8
    assert manifest["dropped_entries"]["examples"] == NOT_WORDS
    artifact = open_artifact(str(tmp_path / "art"))
    assert artifact.words == ["the", "ok", "fine", "movie"]
    rows = np.load(tmp_path / "v.npy")
    np.testing.assert_array_equal(artifact.vectors, rows[:4])  # each word keeps its own vector


def test_vocab_size_counts_the_words_kept(tmp_path):
    words = ["the", ",", "ok", ".", "fine", "movie", "--", "good"]
    assert cli_main(["build-index", *_embeddings(tmp_path, words), "--vocab-size", "4",
                     "--output", str(tmp_path / "art")]) == 0
    manifest = json.load(open(tmp_path / "art" / "manifest.json"))
    assert open_artifact(str(tmp_path / "art")).words == ["the", "ok", "fine", "movie"]
    assert manifest["dropped_entries"]["count"] == 2  # the ones among the entries read up to the 4th word kept


def test_the_bundled_artifacts_hold_no_entry_that_is_not_a_word(tiny_artifact_dir, small_artifact_dir):
    for directory, size in ((tiny_artifact_dir, 300), (small_artifact_dir, 5000)):
        artifact = Artifact(directory)
        assert artifact.vocab_size == size and len(unreadable_entries(artifact.words)) == 0
        assert json.load(open(os.path.join(directory, "manifest.json")))["dropped_entries"]["count"] > 0


def _hand_edited(tiny_artifact_dir, tmp_path, entry):
    """A copy whose vocab.txt has ``entry`` in place of its last word, the manifest's checksum updated."""
    copy = str(tmp_path / "edited")
    shutil.copytree(tiny_artifact_dir, copy)
    vocab = os.path.join(copy, "vocab.txt")
    words = open(vocab, encoding="utf-8", newline="\n").read().split("\n")[:-1]
    words[-1] = entry
    with open(vocab, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\n".join(words) + "\n")
    manifest = json.load(open(os.path.join(copy, "manifest.json")))
    manifest["files"]["vocab.txt"] = {"sha256": sha256_file(vocab), "bytes": os.path.getsize(vocab)}
    json.dump(manifest, open(os.path.join(copy, "manifest.json"), "w"))
    return copy


@pytest.mark.parametrize("entry", ["x y", "a\x00b", "line\u2028sep", ","])
def test_a_hand_edited_artifact_with_an_entry_that_is_not_a_word_is_refused_before_the_run(tiny_artifact_dir, tmp_path,
                                                                                         capsys, entry):
    edited = _hand_edited(tiny_artifact_dir, tmp_path, entry)
    with pytest.raises(ArtifactError, match="line 300 holds .* an entry the tokenizer never reads as one word"):
        verify_artifact(edited)
    (tmp_path / "in.txt").write_text("the the the the\n")
    code = cli_main(["privatize", "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o" / "x"),
                     "--epsilon", "1", "--artifact", edited, *RUNNER])
    err = capsys.readouterr().err
    assert code == 2 and "never reads as one word" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_local_artifact_of_format_version_1_is_used_when_it_holds_only_words(tiny_artifact_dir, tmp_path):
    """An artifact built before the rule (format 1): used as it is when its vocabulary holds only words, refused
    with the way out when it holds others (GloVe's punctuation, as every GloVe artifact of version 1 does)."""
    words_only = str(tmp_path / "v1")
    shutil.copytree(tiny_artifact_dir, words_only)
    manifest_path = os.path.join(words_only, "manifest.json")
    json.dump(dict(json.load(open(manifest_path)), format_version=1), open(manifest_path, "w"))
    assert verify_artifact(words_only)["format_version"] == 1
    edited = _hand_edited(words_only, tmp_path / "punct", ",")
    with pytest.raises(ArtifactError, match=r"holds ',', an entry the tokenizer never reads.*Rebuild the artifact"):
        verify_artifact(edited)


def test_released_records_of_plain_words_keep_their_word_count(small_artifact_dir, imdb_rows):
    """At epsilon 1 Madlib changes nearly every word, over the whole 5k vocabulary (punctuation-like entries
    included before this rule): every record re-tokenizes into as many words as it had. Deterministic given
    the artifact: no released word can be anything but one word."""
    texts = [" ".join(row["text"].replace("-", " ").replace("'", " ").split()[:60]) for row in imdb_rows[:200]]
    privatizer = textdp.Privatizer(epsilon=1.0, artifact=small_artifact_dir, oov_policy="unk")
    released = privatizer.privatize(texts, seed=3)
    tokenizer = Tokenizer(privatizer.artifact.word_to_id)
    before = tokenizer.tokenize_batch(texts).word_counts
    after = tokenizer.tokenize_batch(released).word_counts
    assert np.array_equal(np.asarray(before), np.asarray(after))
    assert sum(a != b for a, b in zip(texts, released)) > 150  # the releases did change


@pytest.mark.parametrize("marker", ["\x01", "a\u200bb", "\ue000", "\u2028"])
def test_an_invisible_or_control_unknown_marker_is_refused(marker):
    with pytest.raises(ParameterError, match="unk_token must"):
        textdp.Privatizer(epsilon=5, oov_policy="unk", unk_token=marker)


def test_an_unknown_marker_that_is_a_vocabulary_word_is_refused_before_the_run(tiny_artifact_dir, tmp_path, capsys):
    with pytest.raises(ParameterError, match="unk_token 'The' is read as the vocabulary word 'The'"):
        textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, oov_policy="unk", unk_token="The")
    (tmp_path / "in.txt").write_text("the zzqx the\n")
    code = cli_main(["privatize", "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o" / "x"),
                     "--epsilon", "5", "--artifact", tiny_artifact_dir, "--oov-policy", "unk", "--unk-token", "the",
                     *RUNNER])
    err = capsys.readouterr().err
    assert code == 2 and "is read as the vocabulary word" in err and not (tmp_path / "o").exists()
    # not a word of the vocabulary, or not one word at all: accepted
    for marker in ("<unk>", "[UNK]", "zzqx"):
        privatizer = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, oov_policy="unk", unk_token=marker)
        assert privatizer.privatize(["the zzqxy the"])[0].split()[1] == marker
