"""``textdp.Privatizer``: the Python API, on real GloVe artifacts (300 and 5,000 words)."""

import json

import apache_beam as beam
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import textdp
from textdp.artifact.locate import open_artifact
from textdp.errors import TextdpError
from textdp.privacy.summary import build_public_summary

ALPHA = 1e-3  # false-failure rate of the statistical test below
IDENTITY = 1e6


@pytest.fixture(scope="module")
def words(tiny_artifact_dir):
    return [w for w in open_artifact(tiny_artifact_dir).words if w.isalpha()]


def test_privatize_keeps_order_structure_and_case(tiny_artifact_dir, words):
    p = textdp.Privatizer(epsilon=IDENTITY, artifact=tiny_artifact_dir)
    texts = [f"{words[1].capitalize()} {words[2]}, {words[3].upper()}!", "  ", "", f"{words[4]}\n{words[5]}"]
    assert p.privatize(texts) == texts  # at this epsilon the release is the input; blanks come back as they are
    assert p.last_stats == {"tokens": 5, "changed_tokens": 0, "unknown_tokens": 0, "records": 2, "failed": 0}
    noisy = textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir).privatize([" ".join(words[:60])] * 3)
    assert len(noisy) == 3 and all(len(t.split(" ")) == 60 for t in noisy) and noisy[0] != " ".join(words[:60])


def test_bad_input_is_a_clear_error_or_none_never_its_content(tiny_artifact_dir, words):
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    secret = "canary-5521"
    with pytest.raises(TextdpError, match=r"a list of strings; for one text use privatize\(\[text\]\)\[0\]"):
        p.privatize(words[1])
    for bad, kind in ((None, "a null"), (secret.encode(), "bytes"), (7, "a number"), (["x"], "a list")):
        with pytest.raises(TextdpError, match=f"text 1: the record is {kind}, not a string") as info:
            p.privatize([words[1], bad])
        assert secret not in str(info.value)
    out = p.privatize([words[1], None, secret.encode(), words[2]], errors="none")
    assert out[1] is None and out[2] is None and isinstance(out[0], str) and isinstance(out[3], str)
    assert p.last_stats["failed"] == 2 and p.last_stats["records"] == 2
    small = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, max_text_bytes=10)
    with pytest.raises(TextdpError, match="too_large"):
        small.privatize(["x" * 11])
    for kwargs, message in (({"epsilon": float("inf")}, "finite"), ({"epsilon": 0}, "epsilon"),
                            ({"epsilon": 5, "mechanism": "laplace"}, "mechanism"),
                            ({"epsilon": 5, "oov_policy": "drop"}, "oov_policy")):
        with pytest.raises(TextdpError, match=message):
            textdp.Privatizer(artifact=tiny_artifact_dir, **kwargs)
    with pytest.raises(TextdpError, match="seed"):
        p.privatize([words[1]], seed=-1)


def test_seeds_repeat_and_entropy_does_not(tiny_artifact_dir, words):
    texts = [" ".join(words[:50])] * 4
    p = textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir)
    assert p.privatize(texts, seed=3) == textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir).privatize(texts, seed=3)
    assert p.privatize(texts, seed=3) != p.privatize(texts, seed=4)
    # OS entropy: two Privatizers (and two calls) draw different noise; 200 words at epsilon 1 collide
    # with probability far below 1e-12
    assert p.privatize(texts) != textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir).privatize(texts)


def test_privatize_series_keeps_index_name_and_missing_values(tiny_artifact_dir, words):
    p = textdp.Privatizer(epsilon=IDENTITY, artifact=tiny_artifact_dir)
    series = pd.Series([words[1], None, f"{words[2]} {words[3]}", np.nan, pd.NA], index=[10, 20, 30, 40, 50],
                       name="review")
    out = p.privatize_series(series)
    assert list(out.index) == [10, 20, 30, 40, 50] and out.name == "review"
    assert out[10] == words[1] and out[30] == f"{words[2]} {words[3]}"
    assert out[[20, 40, 50]].isna().all()
    frame = pd.DataFrame({"review": [words[5], words[6]], "stars": [1, 2]})
    frame["review"] = p.privatize_series(frame["review"])
    assert frame["review"].tolist() == [words[5], words[6]]
    with pytest.raises(TextdpError, match="pandas Series"):
        p.privatize_series([words[1]])


def test_privacy_statement_is_the_public_summarys(tiny_artifact_dir):
    p = textdp.Privatizer(epsilon=4, artifact=tiny_artifact_dir, oov_policy="unk")
    public = build_public_summary(records_out=1, output="o", data_format="text", text_fields=(),
                                  mechanism_parameters=p.mechanism.parameters(),
                                  mechanism_statement=p.mechanism.privacy_statement(), artifact={},
                                  oov_policy="unk", unk_token="<unk>", seed=None)
    assert p.privacy_statement() == public["privacy"]
    assert "exp(4 * d(w, w'))" in p.privacy_statement()["per_token"]
    assert "marker '<unk>'" in p.privacy_statement()["unknown_words"]


def test_api_and_pipeline_release_the_same_distribution(small_artifact_dir, tmp_path):
    """The API and the Privatize transform are one code path: the released words for "good" repeated
    3,000 times (epsilon 5, 5,000-word artifact) follow the same distribution. Two-sample chi-square
    test of homogeneity over the outputs with at least 20 draws in all (+ one "other" bin); false-failure
    rate ALPHA = 1e-3."""
    from transforms import Privatize

    n = 3000
    api = textdp.Privatizer(epsilon=5, artifact=small_artifact_dir).privatize(["good"] * n)
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        released = (pipeline | beam.Create(["good"] * n)
                    | Privatize(epsilon=5, artifact=small_artifact_dir, batch_tokens=256)).released
        released | beam.io.WriteToText(str(tmp_path / "released"))
    via_pipeline = [line.rstrip("\n") for path in tmp_path.glob("released*") for line in open(path, encoding="utf-8")]
    assert len(via_pipeline) == n
    counts = {}
    for word in api + via_pipeline:
        counts[word] = counts.get(word, 0) + 1
    top = [w for w, c in counts.items() if c >= 20]
    table = np.array([[sample.count(w) for w in top] + [sum(x not in top for x in sample)]
                      for sample in (api, via_pipeline)])
    table = table[:, table.sum(axis=0) > 0]
    assert len(top) >= 3
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_repr_names_the_parameters(tiny_artifact_dir):
    text = repr(textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir))
    assert text.startswith("Privatizer(") and "'epsilon': 3.0" not in text and "epsilon=3.0" in text
    assert json.loads(json.dumps(textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir).parameters()))


def test_a_long_list_is_privatized_in_bounded_batches(tiny_artifact_dir, words):
    """A list of any length goes to the mechanism in calls of about ``batch_tokens`` words (memory stays
    bounded, as in the pipeline); batching does not change what a seeded run releases, and the counts of
    all batches add up."""
    texts = [" ".join(words[i % 40:i % 40 + 30]) for i in range(200)]  # 200 texts of 30 words: 6,000 words
    p = textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir, batch_tokens=100)
    calls = []
    draw = p.mechanism.privatize_ids
    p.mechanism.privatize_ids = lambda ids, rng: calls.append(len(ids)) or draw(ids, rng)  # a spy on the real one
    released = p.privatize(texts)
    assert len(released) == 200 and all(len(t.split(" ")) == 30 for t in released)
    assert sum(calls) == 6000 and p.last_stats["tokens"] == 6000 and p.last_stats["records"] == 200
    # ~100 words per call (estimated from the length, so within a small factor), never the whole list
    assert len(calls) >= 6000 // 300 and max(calls) <= 300
    whole = textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir)  # default: 65,536 words per call
    assert p.privatize(texts, seed=7) == whole.privatize(texts, seed=7)
    with pytest.raises(TextdpError, match="batch_tokens"):
        textdp.Privatizer(epsilon=1.0, artifact=tiny_artifact_dir, batch_tokens=0)
