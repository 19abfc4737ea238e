"""Embedding sources: every format loads real GloVe rows exactly; every defect names file and line."""

import gzip

import numpy as np
import pytest

from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource, load_embeddings, parse_source
from textdp.errors import EmbeddingFormatError


@pytest.fixture(scope="module")
def glove_head():
    """The 200 most frequent real GloVe 6B 50d words and vectors, from the bundled package."""
    return load_embeddings(EmbeddingSource("bundled", BUNDLED_GLOVE), vocab_size=200)


def _write_text(path, words, vectors, header=False):
    with open(path, "w", encoding="utf-8") as handle:
        if header:
            handle.write(f"{len(words)} {vectors.shape[1]}\n")
        for word, row in zip(words, vectors):
            handle.write(word + " " + " ".join(repr(float(x)) for x in row) + "\n")


def test_bundled_is_real_glove_in_frequency_order_and_row_major():
    words, vectors = load_embeddings(EmbeddingSource("bundled", BUNDLED_GLOVE))
    assert len(words) == 400_000 and vectors.shape == (400_000, 50)
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous
    assert words[:5] == ["the", ",", ".", "of", "to"]
    # GloVe's own neighbourhood structure: 'king' is much closer to 'queen' than to 'banana'.
    index = {w: i for i, w in enumerate(words)}
    d = lambda a, b: np.linalg.norm(vectors[index[a]] - vectors[index[b]])  # noqa: E731
    assert d("king", "queen") < 0.6 * d("king", "banana")


def test_vocab_size_keeps_most_frequent(glove_head):
    words, vectors = load_embeddings(EmbeddingSource("bundled", BUNDLED_GLOVE), vocab_size=50)
    assert words == glove_head[0][:50]
    np.testing.assert_array_equal(vectors, glove_head[1][:50])


@pytest.mark.parametrize("header,compress", [(False, False), (True, False), (False, True), (True, True)])
def test_text_formats_round_trip(tmp_path, glove_head, header, compress):
    words, vectors = glove_head
    path = tmp_path / ("vecs.txt" + (".gz" if compress else ""))
    plain = tmp_path / "plain.txt"
    _write_text(plain, words, vectors, header=header)
    if compress:
        path.write_bytes(gzip.compress(plain.read_bytes()))
    else:
        path = plain
    source = parse_source(str(path))
    assert source.kind == ("word2vec-text" if header else "glove-text")
    got_words, got = load_embeddings(source)
    assert got_words == words
    np.testing.assert_array_equal(got, vectors)
    got_words, got = load_embeddings(source, vocab_size=10)
    assert got_words == words[:10] and got.shape == (10, 50)


def test_npy_with_vocabulary(tmp_path, glove_head):
    words, vectors = glove_head
    np.save(tmp_path / "m.npy", np.asfortranarray(vectors))  # column-major input is accepted
    (tmp_path / "v.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    got_words, got = load_embeddings(parse_source(str(tmp_path / "m.npy"), str(tmp_path / "v.txt")))
    assert got_words == words and got.flags.c_contiguous
    np.testing.assert_array_equal(got, vectors)


def _expect(tmp_path, text, message, line=None, name="bad.txt"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    with pytest.raises(EmbeddingFormatError) as err:
        load_embeddings(parse_source(str(path)))
    assert err.value.path == str(path)
    assert err.value.line == line
    assert message in str(err.value)
    assert str(path) in str(err.value)
    return err.value


def test_defects_name_file_and_line(tmp_path):
    _expect(tmp_path, "a 1 2\nb 3 4\na 5 6\n", "duplicate word (first seen on line 1)", line=3)
    _expect(tmp_path, "a 1 2\nb 3 4 5\n", "expected a word and 2 values, found 3", line=2)
    _expect(tmp_path, "a 1 2\nb nan 4\n", "NaN or infinite", line=2)
    _expect(tmp_path, "a 1 2\nb 3 inf\n", "NaN or infinite", line=2)
    _expect(tmp_path, "a 1 2\nb 3 x\n", "not a number", line=2)
    _expect(tmp_path, "", "empty file")
    _expect(tmp_path, b"a 1 2\n\xff\xfe 3 4\n", "not valid UTF-8", line=2)
    _expect(tmp_path, "a 1 2\nb 3", "truncated", line=2)
    _expect(tmp_path, "3 2\na 1 2\nb 3 4\n", "header declares 3 words but 2 were found", name="w2v.txt")


def test_defects_in_npy_sources(tmp_path):
    np.save(tmp_path / "m.npy", np.array([[1.0, 2.0], [np.nan, 0.0]], dtype=np.float32))
    (tmp_path / "v.txt").write_text("a\nb\n")
    with pytest.raises(EmbeddingFormatError, match="NaN or infinite value in row 1"):
        load_embeddings(parse_source(str(tmp_path / "m.npy"), str(tmp_path / "v.txt")))
    np.save(tmp_path / "ok.npy", np.ones((3, 2), dtype=np.float32))
    (tmp_path / "short.txt").write_text("a\nb\n")
    with pytest.raises(EmbeddingFormatError, match="truncated") as err:
        load_embeddings(parse_source(str(tmp_path / "ok.npy"), str(tmp_path / "short.txt")))
    assert err.value.line == 3
    (tmp_path / "dup.txt").write_text("a\nb\na\n")
    with pytest.raises(EmbeddingFormatError, match="duplicate") as err:
        load_embeddings(parse_source(str(tmp_path / "ok.npy"), str(tmp_path / "dup.txt")))
    assert err.value.line == 3
    (tmp_path / "trunc.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:-5])
    with pytest.raises(EmbeddingFormatError, match="trunc.npy"):
        load_embeddings(parse_source(str(tmp_path / "trunc.npy"), str(tmp_path / "dup.txt")))
    with pytest.raises(EmbeddingFormatError, match="needs --vocab-file"):
        parse_source(str(tmp_path / "ok.npy"))
    with pytest.raises(EmbeddingFormatError, match="no such file"):
        parse_source(str(tmp_path / "missing.txt"))
