"""The notebook-friendly API (issue 27, item 2): progress bars, ``privatize_frame``, ``preview`` and the Python
entry points of calibrate and audit (``pipelines.notebook``), on real artifacts built from the GloVe vectors and
the local FnApiRunner. Nothing is mocked.

Statistical tests and their false-failure rates:
* ``test_preview_attack_figure_is_the_bayes_attackers_rate``: the observed top-1 recovery of n tokens against the
  exact expected rate (computed here by hand over every output of the vocabulary), Hoeffding bound at 1e-6;
* ``test_preview_moves_the_right_way_with_epsilon``: Madlib at epsilon 1 against 60, margins of several tens of
  standard deviations (false-failure rate below 1e-9).
* ``test_audit_returns_tables_summary_and_plots``: no self-check violation for TEM, a correct mechanism (the
  audit's own false-alarm rate, 0.001 per run).
Every other test is deterministic (seeded runs compared with seeded runs, or refusals).
"""

import io
import json
import math
import os
import pickle
import sys
import tempfile

import numpy as np
import pandas as pd
import pytest
from matplotlib import image as mpimg

import textdp
from pipelines.cli import main as cli_main
from pipelines.notebook import AuditResult, CalibrationResult, audit, calibrate, flag_arguments
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture: 5k words with a K=40 table)
from textdp.audit.attacks import kernel_of
from textdp.errors import ArtifactError, ParameterError, TextdpError, TextdpTypeError, TextdpValueError
from textdp.text.tokenize import Tokenizer

RUNNER = dict(runner="FnApiRunner")
TEXTS = ["The movie was a good one, with great acting.", "The plot was thin but the music was nice.",
         "I would not watch it again.", "A quiet room near the station and friendly staff."]
RAW_MARKERS = ("movie", "plot", "station")  # words of TEXTS that must never reach stderr


@pytest.fixture(scope="module")
def tiny(tiny_artifact_dir):
    return textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir, progress=False)


# --- 1. progress -------------------------------------------------------------------------------------------------


def test_progress_bar_counts_texts_and_never_shows_them(tiny_artifact_dir, capsys):
    p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)
    p.privatize(TEXTS, progress=True)
    err = capsys.readouterr().err
    assert "textdp privatize" in err and "4/4" in err and "100%" in err
    assert not any(word in err.lower() for word in RAW_MARKERS)


def test_progress_is_silent_when_stderr_is_not_a_terminal(tiny_artifact_dir, capsys):
    p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)  # progress=None: automatic
    assert not sys.stderr.isatty()  # pytest captures stderr: not a terminal
    p.privatize(TEXTS)
    p.privatize_series(pd.Series(TEXTS))
    assert capsys.readouterr().err == ""


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_automatic_in_a_terminal(tiny_artifact_dir, monkeypatch):
    p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)  # a real stream that says it is a terminal
    p.privatize(TEXTS)
    assert "textdp privatize" in terminal.getvalue() and "4/4" in terminal.getvalue()


def test_progress_switched_off_on_the_constructor_and_per_call(tiny_artifact_dir, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    quiet = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir, progress=False)
    quiet.privatize(TEXTS)
    quiet.privatize_frame(pd.DataFrame({"t": TEXTS}), columns=["t"])
    assert terminal.getvalue() == ""
    quiet.privatize(TEXTS, progress=True)  # a call may ask for it
    assert "4/4" in terminal.getvalue()
    loud = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir, progress=True)
    before = terminal.getvalue()
    loud.privatize(TEXTS, progress=False)  # and may switch it off
    assert terminal.getvalue() == before
    assert pickle.loads(pickle.dumps(quiet)).progress is False  # the setting survives a pickle


@pytest.mark.parametrize("bad", ["yes", 1, 0.5])
def test_progress_must_be_true_false_or_none(tiny_artifact_dir, tiny, bad):
    with pytest.raises(TextdpTypeError, match="progress must be True, False or None"):
        textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir, progress=bad)
    with pytest.raises(TextdpTypeError, match="progress must be"):
        tiny.privatize(TEXTS, progress=bad)


# --- 2. privatize_frame -----------------------------------------------------------------------------------------


def _frame():
    return pd.DataFrame({"id": [10, 20, 30, 40, 50], "title": ["good movie", None, "thin plot", "nice", "bad"],
                         "review": TEXTS + [float("nan")], "stars": [5, 3, 1, 4, 2]},
                        index=pd.Index(["a", "b", "c", "d", "e"], name="key"))


def test_privatize_frame_privatizes_the_columns_and_keeps_everything_else(tiny):
    frame = _frame()
    original = frame.copy()
    out = tiny.privatize_frame(frame, columns=["review", "title"], seed=3)
    pd.testing.assert_frame_equal(frame, original)  # the input is not modified
    assert list(out.columns) == list(frame.columns) and out.index.equals(frame.index)
    pd.testing.assert_series_equal(out["id"], frame["id"])
    pd.testing.assert_series_equal(out["stars"], frame["stars"])
    for column in ("review", "title"):  # each column exactly as privatize_series makes it (same seed)
        pd.testing.assert_series_equal(out[column], tiny.privatize_series(frame[column], seed=3))
    assert out["review"].isna().tolist() == [False] * 4 + [True]  # missing stays missing
    assert out["title"].isna().tolist() == [False, True, False, False, False]
    tiny.privatize_frame(frame, columns=["review", "title"])
    assert tiny.last_stats["records"] == 8  # counts summed over both columns


def test_privatize_frame_accepts_one_column_label(tiny):
    out = tiny.privatize_frame(_frame(), columns="review", seed=1)
    pd.testing.assert_series_equal(out["review"], tiny.privatize_series(_frame()["review"], seed=1))


def test_privatize_frame_errors_policy_names_column_and_position_never_the_value(tiny):
    frame = pd.DataFrame({"t": [None, "good movie", 12345, b"secretbytes", "nice plot"]})
    with pytest.raises(TextdpTypeError) as info:
        tiny.privatize_frame(frame, columns=["t"])
    assert "column 't'" in str(info.value) and "text 2:" in str(info.value)  # the row, the missing value counted
    assert "12345" not in str(info.value) and "secretbytes" not in str(info.value)
    out = tiny.privatize_frame(frame, columns=["t"], errors="none")
    assert out["t"].isna().tolist() == [True, False, True, True, False]
    assert tiny.last_stats["failed"] == 2


@pytest.mark.parametrize("columns, error, message", [
    ([], TextdpValueError, "at least one column"),
    (["nope"], TextdpValueError, "no column 'nope'"),
    (["review", "review"], TextdpValueError, "named twice"),
])
def test_privatize_frame_refuses_bad_columns(tiny, columns, error, message):
    with pytest.raises(error, match=message):
        tiny.privatize_frame(_frame(), columns=columns)


def test_privatize_frame_refuses_what_is_not_a_frame_and_doubled_labels(tiny):
    with pytest.raises(TextdpTypeError, match="takes a pandas DataFrame"):
        tiny.privatize_frame(pd.Series(TEXTS), columns=["x"])
    with pytest.raises(TextdpTypeError, match="takes a pandas DataFrame"):
        tiny.privatize_frame({"t": TEXTS}, columns=["t"])
    doubled = pd.DataFrame([["a b", "c d"]], columns=["t", "t"])
    with pytest.raises(TextdpValueError, match="several columns named 't'"):
        tiny.privatize_frame(doubled, columns=["t"])


# --- 4. preview --------------------------------------------------------------------------------------------------


def test_preview_rows_samples_and_changed_share_are_those_of_privatize(neighbour_artifact_dir):  # noqa: F811
    p = textdp.Privatizer(epsilon=10, artifact=neighbour_artifact_dir, progress=False)
    table = p.preview(TEXTS, epsilons=[5, 15], mechanisms=["madlib", "santext"], examples=2, seed=4)
    assert [(r.mechanism, r.epsilon) for r in table.itertuples()] == [
        ("madlib", 5.0), ("madlib", 15.0), ("santext", 5.0), ("santext", 15.0)]
    assert {"sample_1", "sample_2", "changed_share", "median_n_w", "median_s_w", "calibration_basis",
            "attack_top1", "attack_basis"} <= set(table.columns) and "sample_3" not in table.columns
    for row in table.itertuples():
        other = textdp.Privatizer(epsilon=row.epsilon, mechanism=row.mechanism, artifact=neighbour_artifact_dir,
                                  progress=False)
        released = other.privatize(TEXTS, seed=4)
        assert [row.sample_1, row.sample_2] == released[:2]
        assert row.changed_share == other.last_stats["changed_tokens"] / other.last_stats["tokens"]
    assert table.calibration_basis[0].startswith("1,000 draws") and table.calibration_basis[2].startswith("exact law")
    assert table.attack_basis[0].startswith("Monte Carlo") and table.attack_basis[2].startswith("exact posterior")


def _distances(vectors, ids):
    diff = vectors[None, :, :] - vectors[ids][:, None, :]
    return np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))  # float64, ids x vocabulary


def test_preview_calibration_figures_are_the_exact_law(neighbour_artifact_dir):  # noqa: F811
    p = textdp.Privatizer(epsilon=4, mechanism="santext", artifact=neighbour_artifact_dir, progress=False)
    table = p.preview(TEXTS, seed=2)  # fewer than 30 distinct words: all of them are calibrated
    ids = np.unique([i for t in TEXTS for i in Tokenizer(p.artifact.word_to_id).tokenize(t).ids if i >= 0])
    kernel = kernel_of(p.mechanism)
    vectors = np.asarray(p.artifact.vectors, dtype=np.float64)
    dist = _distances(vectors, ids)
    dist[np.arange(len(ids)), ids] = 0.0
    weights = np.exp(-kernel.scale * np.minimum(dist, kernel.cap))
    probs = weights / weights.sum(axis=1, keepdims=True)  # SanText's law P(o | w), by hand
    n_w = probs[np.arange(len(ids)), ids]
    s_w = (1.0 - (1.0 - probs) ** 1000).sum(axis=1)  # expected distinct outputs in 1,000 draws
    assert table.median_n_w[0] == pytest.approx(np.median(n_w), rel=1e-4)
    assert table.median_s_w[0] == pytest.approx(np.median(s_w), rel=1e-4)
    assert f"over {len(ids)} word(s)" in table.calibration_basis[0]


def test_preview_attack_figure_is_the_bayes_attackers_rate(neighbour_artifact_dir):  # noqa: F811
    """The exact expected top-1 rate of the Bayes attacker with the texts' word frequencies as prior, summed
    over every output of the vocabulary here; the observed rate over n tokens is a mean of independent
    Bernoulli draws with those means: |observed - expected| <= sqrt(ln(2/1e-6) / 2n) fails with probability
    below 1e-6 (Hoeffding)."""
    texts = TEXTS * 60  # 2,000 tokens at most are attacked: all of these (about 40 x 60)
    p = textdp.Privatizer(epsilon=3, mechanism="santext", artifact=neighbour_artifact_dir, progress=False)
    table = p.preview(texts, examples=0)
    tokens = np.array([i for t in texts for i in Tokenizer(p.artifact.word_to_id).tokenize(t).ids if i >= 0])
    assert len(tokens) <= 2000 and f"{len(tokens):,} token(s)" in table.attack_basis[0]
    support, counts = np.unique(tokens, return_counts=True)
    kernel = kernel_of(p.mechanism)
    vectors = np.asarray(p.artifact.vectors, dtype=np.float64)
    dist = _distances(vectors, support)
    dist[np.arange(len(support)), support] = 0.0
    log_w = -kernel.scale * np.minimum(dist, kernel.cap)
    log_p = log_w - np.log(np.exp(log_w).sum(axis=1, keepdims=True))  # ln P(o | w), rows = support
    guess = np.argmax(np.log(counts)[:, None] + log_p, axis=0)  # the Bayes guess for every output o
    success = np.array([np.exp(log_p[k])[guess == k].sum() for k in range(len(support))])
    expected = float((success * counts).sum() / counts.sum())
    margin = math.sqrt(math.log(2 / 1e-6) / (2 * len(tokens)))
    assert abs(table.attack_top1[0] - expected) <= margin, (table.attack_top1[0], expected, margin)


def test_preview_moves_the_right_way_with_epsilon(small_artifact_dir):
    """Madlib at epsilon 1 changes nearly every word and at 60 nearly none (each figure over ~200 tokens or
    30 words x 1,000 draws: the margins below are tens of standard deviations)."""
    p = textdp.Privatizer(epsilon=10, artifact=small_artifact_dir, progress=False)
    low, high = p.preview(TEXTS * 5, epsilons=[1, 60]).itertuples()
    assert low.changed_share > 0.9 and high.changed_share < 0.2
    assert low.median_n_w < 0.05 < 0.8 < high.median_n_w
    assert low.median_s_w > 100 > 5 > high.median_s_w
    assert low.attack_top1 < 0.5 < 0.8 < high.attack_top1


def test_preview_is_fast_on_a_5k_artifact(neighbour_artifact_dir):  # noqa: F811
    import time

    p = textdp.Privatizer(epsilon=10, artifact=neighbour_artifact_dir, progress=False)
    started = time.monotonic()
    p.preview(TEXTS * 10, epsilons=[5, 10, 20], mechanisms=["madlib", "tem"])
    assert time.monotonic() - started < 60  # ~10 s at load average 15 on 2 cores; a few seconds alone


def test_preview_refusals(tiny, tiny_artifact_dir):
    with pytest.raises(TextdpTypeError, match="takes a list of strings"):
        tiny.preview("one text")
    with pytest.raises(TextdpTypeError, match="not a dict"):
        tiny.preview({"a": "good movie"})
    with pytest.raises(TextdpTypeError, match="text 1"):
        tiny.preview(["good", None])
    with pytest.raises(ParameterError):
        tiny.preview(TEXTS, epsilons=[0])
    with pytest.raises(TextdpValueError):
        tiny.preview(TEXTS, mechanisms=["no-such-mechanism"])
    with pytest.raises(ArtifactError, match="neighbour table"):
        tiny.preview(TEXTS, mechanisms=["tem"])  # the tiny artifact has no table
    with pytest.raises(TextdpError, match="words"):
        tiny.preview(TEXTS, words=0)
    with pytest.raises(TextdpValueError, match="seed must be"):
        tiny.preview(TEXTS, seed="1")
    assert tiny.preview(pd.Series(TEXTS + [None])).shape[0] == 1  # a Series: missing values are not texts
    empty = tiny.preview(["", "  "])  # no word at all: the figures say so instead of inventing a number
    assert empty.changed_share[0] is None and empty.attack_top1[0] is None
    assert empty.calibration_basis[0] == "no vocabulary word in the texts"


# --- 3. calibrate and audit from Python ------------------------------------------------------------------------


def _pixels(data):
    return mpimg.imread(io.BytesIO(data), format="png")


def test_calibrate_returns_what_the_command_writes(small_artifact_dir, tmp_path):
    flags = dict(epsilons=[4, 20], mechanism="madlib", artifact=small_artifact_dir, words=8, samples=120, seed=6,
                 min_sw=10, coverage=0.9)
    result = calibrate(**flags, **RUNNER)
    assert isinstance(result, CalibrationResult) and result.output is None
    out = str(tmp_path / "cli")
    assert cli_main(["calibrate", f"--output={out}", "--runner=FnApiRunner"] + flag_arguments(flags)) == 0
    cli_table = pd.read_parquet(f"{out}/per_word.parquet")
    key = ["word_id", "epsilon"]
    pd.testing.assert_frame_equal(result.table.sort_values(key).reset_index(drop=True),
                                  cli_table.sort_values(key).reset_index(drop=True))
    cli_summary = json.load(open(f"{out}/summary.json", encoding="utf-8"))
    assert result.recommendation == cli_summary["recommendation"]
    assert result.recommended_epsilon == cli_summary["recommendation"]["recommended_epsilon"]
    assert set(result.table["epsilon"]) == {4.0, 20.0} and len(result.table) == 16
    figures = result.plot()
    assert sorted(figures) == ["hist_n_w", "hist_s_w", "knn_distances", "means_vs_epsilon"]
    for name, figure in figures.items():  # the figure shows the command's PNG pixel for pixel
        shown = np.asarray(figure.axes[0].images[0].get_array())
        assert np.array_equal(shown, _pixels(open(f"{out}/{name}.png", "rb").read()))


def test_calibrate_word_list_from_python_and_output_kept(small_artifact_dir, tmp_path):
    out = str(tmp_path / "kept")
    result = calibrate([8], artifact=small_artifact_dir, word_list=["good", "movie", "zzqqxxv"], samples=50, seed=1,
                       output=out, **RUNNER)
    assert sorted(result.table["word"]) == ["good", "movie"] and result.output == out
    assert os.path.exists(f"{out}/report.html")
    assert result.summary["words"]["unknown_count"] == 1


def _temporary_dirs(prefix):
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(prefix)}


def test_calibrate_refusal_is_a_value_error_with_the_jobs_line_and_leaves_nothing(small_artifact_dir, capsys):
    before = _temporary_dirs("textdp-calibrate-")
    with pytest.raises(TextdpValueError, match=r"^calibrate: --samples must be between 1 and"):
        calibrate([5], artifact=small_artifact_dir, samples=0, **RUNNER)
    with pytest.raises(TextdpValueError, match="is not a directory"):
        calibrate([5], artifact=str(small_artifact_dir) + "-missing", **RUNNER)
    assert _temporary_dirs("textdp-calibrate-") == before


def test_audit_returns_tables_summary_and_plots(neighbour_artifact_dir, imdb_rows, tmp_path):  # noqa: F811
    corpus = pd.Series([row["text"] for row in imdb_rows[:60]] + [None])
    result = audit([6], mechanism="tem", artifact=neighbour_artifact_dir, corpus=corpus, pairs=5, draws=2000,
                   records=40, inversion_tokens=800, prior_words=2000, linkage_sizes=[10, 40], seed=3, **RUNNER)
    assert isinstance(result, AuditResult)
    assert sorted(result.tables) == ["inversion", "linkage", "self_check"]
    assert result.table is result.tables["self_check"] and len(result.table) > 0
    assert result.summary["mechanism"] == "tem" and result.summary["self_check"]["per_epsilon"]["6"]["violations"] == 0
    assert set(result.tables["inversion"]["epsilon"]) == {6.0}
    assert sorted(result.plots()) == ["inversion", "linkage", "self_check"]
    for name, figure in result.plots().items():
        assert np.array_equal(np.asarray(figure.axes[0].images[0].get_array()), _pixels(result.images[name]))


def test_audit_refusal(small_artifact_dir):
    with pytest.raises(TextdpValueError, match=r"^audit: "):
        audit([5], artifact=small_artifact_dir, checks="nothing", **RUNNER)
    with pytest.raises(TextdpTypeError, match="a path or a list of texts"):
        audit([5], artifact=small_artifact_dir, corpus=42, **RUNNER)


def test_flag_arguments():
    assert flag_arguments({"max_nw": 0.5, "epsilons": [1, 2.5], "no_prune": True, "seed": None, "overwrite": False}) \
        == ["--max-nw=0.5", "--epsilons=1,2.5", "--no-prune"]
