"""``textdp privatize --mechanism tem`` end to end on real IMDb reviews (FnApiRunner), with the table
made by ``textdp neighbours`` on the 5k GloVe artifact."""

import glob
import json

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.privatize import build_pipeline
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.errors import TextdpError
from textdp.mechanisms.tem import gamma_from_beta


def write_jsonl(rows, path):
    with open(path, "w", encoding="utf-8") as handle:
        for number, row in enumerate(rows):
            handle.write(json.dumps({"n": number, "label": row["label"], "text": row["text"]}) + "\n")
    return str(path)


def privatize(tmp_path, artifact_dir, corpus, *flags):
    output = str(tmp_path / "out")
    argv = ["--runner=FnApiRunner", f"--artifact={artifact_dir}", f"--input={corpus}", f"--output={output}",
            "--mechanism=tem", *flags]
    build_pipeline(PipelineOptions(argv)).run().wait_until_finish()
    with open(f"{output}-summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    released = []
    for path in sorted(glob.glob(f"{output}-*-of-*.jsonl")):
        with open(path, encoding="utf-8") as handle:
            released += [json.loads(line) for line in handle]
    return summary, released


def test_tem_privatizes_a_real_corpus(tmp_path, imdb_rows, neighbour_artifact_dir):  # noqa: F811
    """300 IMDb reviews at epsilon 5 (gamma from beta): every record comes out, fields other than
    the text pass through, most tokens change (5k vocabulary, P(self) is moderate) but not all,
    and the summary states TEM's parameters and guarantee."""
    rows = imdb_rows[:300]
    corpus = write_jsonl(rows, tmp_path / "imdb.jsonl")
    summary, released = privatize(tmp_path, neighbour_artifact_dir, corpus, "--epsilon=5")
    assert summary["records"]["in"] == 300 and summary["records"]["out"] == 300 and summary["records"]["reconciled"]
    assert sorted(r["n"] for r in released) == list(range(300))
    assert all(r["label"] == rows[r["n"]]["label"] for r in released)
    mech = summary["mechanism"]
    assert mech["mechanism"] == "tem" and mech["epsilon"] == 5.0 and mech["neighbour_k"] == 40
    assert mech["gamma"] == pytest.approx(gamma_from_beta(5.0, 5000, 0.001))
    privacy = summary["privacy"]
    assert "exp(5 * d(w, w'))" in privacy["per_token"] and "min(d(w, w')" in privacy["per_token_cap"]
    tokens = summary["tokens"]
    assert tokens["total"] > 30000 and 0.05 < tokens["changed"] / tokens["total"] < 0.95
    changed_texts = sum(r["text"] != rows[r["n"]]["text"] for r in released)
    assert changed_texts > 250


def test_tem_with_given_gamma_and_missing_table(tmp_path, imdb_rows, neighbour_artifact_dir, small_artifact_dir):  # noqa: F811
    corpus = write_jsonl(imdb_rows[:20], tmp_path / "imdb.jsonl")
    summary, released = privatize(tmp_path, neighbour_artifact_dir, corpus, "--epsilon=2", "--gamma=1.5")
    assert summary["mechanism"]["gamma"] == 1.5 and len(released) == 20
    # refused when the pipeline is built, before any worker starts
    with pytest.raises(TextdpError, match="needs a neighbour table.*textdp neighbours --artifact"):
        privatize(tmp_path / "x", small_artifact_dir, corpus, "--epsilon=2")
