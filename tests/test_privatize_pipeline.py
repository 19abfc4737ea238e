"""The privatize pipeline end to end on the local FnApiRunner: formats, errors, summary, metrics, CLI."""

import glob
import gzip
import json
import logging
import os
import shutil
import sys

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from pipelines.privatize import PrivatizeOptions, build_pipeline, run
from tests.run_outputs import privatize, read_lines, summary_of
from textdp.errors import TextdpError
from textdp.text.tokenize import Tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_TXT = os.path.join(REPO, "examples", "reviews.txt")
EXAMPLE_JSONL = os.path.join(REPO, "examples", "reviews.jsonl")
SECRET = "Zyxwvorthington"  # a marker that must never leak from failed records








def counter(result, name):
    found = result.metrics().query(MetricsFilter().with_namespace("textdp").with_name(name))
    return sum(c.committed for c in found["counters"]), found["distributions"]


def test_text_example_corpus(tmp_path, small_artifact_dir, small_artifact):
    """At epsilon = 1e6 the noise is far below any word distance and ``keep`` passes unknown words, so
    the output must be the input exactly: whitespace, punctuation and case survive the whole pipeline."""
    result, output = privatize(tmp_path, small_artifact_dir, f"--input={EXAMPLE_TXT}", "--epsilon=1e6",
                               "--oov-policy=keep")
    released = read_lines(f"{output}-*-of-*.txt")
    with open(EXAMPLE_TXT, encoding="utf-8") as handle:
        original = handle.read().splitlines()
    assert len(original) == 30 and sorted(released) == sorted(original)
    tokenizer = Tokenizer(small_artifact.word_to_id)

    summary = summary_of(output)
    tokens = sum(len(tokenizer.tokenize(t).slots) for t in original)
    assert summary["records"] == {"in": 30, "out": 30, "failed": 0, "failed_by_reason": {}, "reconciled": True}
    assert summary["tokens"]["total"] == tokens and summary["tokens"]["changed"] == 0
    assert summary["mechanism"] == {"mechanism": "madlib", "epsilon": 1e6, "nn": "exact"}
    assert summary["seed_used"] is False and "operating-system entropy" in summary["privacy"]["seed"]
    assert "one for one" in summary["privacy"]["records"] and "amplification_report" not in summary
    assert summary["artifact"]["vocab_size"] == 5000
    assert "exp(1e+06 * d(w, w'))" in summary["privacy"]["per_token"]
    assert "sum_i d(w_i, w_i')" in summary["privacy"]["per_record"]
    unknown = sum(int((tokenizer.tokenize(t).ids < 0).sum()) for t in original)
    assert unknown > 0 and summary["tokens"]["unknown"] == unknown
    assert "NOT covered" in summary["privacy"]["unknown_words"]
    assert "punctuation" in summary["privacy"]["structure"]
    assert glob.glob(f"{output}-errors-*.jsonl") and read_lines(f"{output}-errors-*.jsonl") == []

    assert counter(result, "records")[0] == 30
    assert counter(result, "tokens")[0] == tokens
    assert counter(result, "changed_tokens")[0] == summary["tokens"]["changed"]
    assert counter(result, "unknown_tokens")[0] == summary["tokens"]["unknown"]
    loads, _ = counter(result, "artifact_loads")
    _, load_ms = counter(result, "artifact_load_ms")
    assert loads == 1 and load_ms[0].committed.count == 1  # one process, one load


def bad_jsonl(tmp_path):
    lines = [
        json.dumps({"id": 1, "title": "Fine", "text": "A good film with a great cast.", "stars": 4}),
        "{\"id\": 2, \"text\": \"" + SECRET + " broken",                          # 2 malformed JSON
        json.dumps({"id": 3, "title": SECRET}),                                   # 3 missing field
        json.dumps({"id": 4, "title": "x", "text": None}),                        # 4 null text
        "",                                                                       # 5 empty
        json.dumps({"id": 6, "title": "x", "text": SECRET * 20}),                 # 6 too large
        json.dumps([SECRET]),                                                     # 7 not an object
        json.dumps({"id": 8, "title": "Boring", "text": "The plot was dull.", "stars": 1}),
    ]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    data += b'{"id": 9, "title": "t", "text": "' + SECRET.encode() + b'\xff\xfe"}\n'  # 9 undecodable
    data += (json.dumps({"id": 10, "title": "Great", "text": "I LOVED it, truly!"}) + "\r\n").encode("utf-8")
    path = tmp_path / "reviews.jsonl"
    path.write_bytes(data)
    return str(path)


def test_jsonl_bad_records_go_to_the_error_output_without_their_text(tmp_path, small_artifact_dir, caplog):
    caplog.set_level(logging.INFO)  # Beam itself logs whole elements at DEBUG (see docs/privatize.md)
    source = bad_jsonl(tmp_path)
    result, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=8",
                               "--text-field=text,title", "--max-record-bytes=200")
    records = [json.loads(line) for line in read_lines(f"{output}-*-of-*.jsonl")]
    assert sorted(r["id"] for r in records) == [1, 8, 10]
    by_id = {r["id"]: r for r in records}
    assert by_id[1]["stars"] == 4 and by_id[8]["stars"] == 1  # other fields pass through
    assert list(by_id[1]) == ["id", "title", "text", "stars"]  # field order kept
    assert all(isinstance(r["text"], str) and isinstance(r["title"], str) for r in records)

    errors = sorted((json.loads(line) for line in read_lines(f"{output}-errors-*.jsonl")),
                    key=lambda e: e["position"])
    assert [(e["position"], e["reason"]) for e in errors] == [
        (2, "malformed_json"), (3, "missing_field"), (4, "not_a_string"), (5, "empty"), (6, "too_large"),
        (7, "not_an_object"), (9, "undecodable")]
    assert all(e["source"].endswith("reviews.jsonl") and "text" not in e for e in errors)

    summary = summary_of(output)
    assert summary["records"]["in"] == 10 and summary["records"]["out"] == 3 and summary["records"]["failed"] == 7
    assert summary["records"]["reconciled"] is True
    assert summary["text_fields"] == ["text", "title"]
    assert summary["tokens"]["total"] == 18 and summary["tokens"]["changed"] > 0
    everything_written = "".join(open(p, encoding="utf-8").read() for p in glob.glob(f"{output}-*"))
    assert SECRET.lower() not in everything_written.lower()
    assert SECRET.lower() not in caplog.text.lower()
    assert all(SECRET.lower() not in str(m.key).lower() for m in result.metrics().query()["counters"])


def test_keep_failed_text_puts_the_text_in_the_error_output_only(tmp_path, small_artifact_dir):
    source = bad_jsonl(tmp_path)
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=8",
                          "--keep-failed-text", "--max-record-bytes=200")
    errors = [json.loads(line) for line in read_lines(f"{output}-errors-*.jsonl")]
    assert any(SECRET in e.get("text", "") for e in errors)
    assert SECRET not in open(f"{output}-summary.json", encoding="utf-8").read()


def test_parquet_keeps_its_schema_and_passes_other_columns_through(tmp_path, small_artifact_dir):
    schema = pa.schema([("id", pa.int64()), ("body", pa.string()), ("score", pa.float32()),
                        ("tags", pa.list_(pa.string()))])
    table = pa.table({"id": [1, 2, 3], "body": ["A fine movie.", None, "Too long, and SLOW."],
                      "score": [0.5, 0.25, 1.0], "tags": [["a"], [], ["b", "c"]]}, schema=schema)
    source = str(tmp_path / "reviews.parquet")
    pq.write_table(table, source)
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=8", "--text-field=body")
    written = sorted(glob.glob(f"{output}-*-of-*.parquet"))
    assert written and pq.read_schema(written[0]).equals(schema)
    rows = sorted(pq.read_table(written).to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["score"], r["tags"]) for r in rows] == [(1, 0.5, ["a"]), (3, 1.0, ["b", "c"])]
    errors = [json.loads(line) for line in read_lines(f"{output}-errors-*.jsonl")]
    assert [(e["position"], e["reason"]) for e in errors] == [(2, "not_a_string")]
    assert summary_of(output)["records"] == {"in": 3, "out": 2, "failed": 1,
                                             "failed_by_reason": {"not_a_string": 1}, "reconciled": True}


def test_an_unreadable_file_becomes_an_error_record(tmp_path, small_artifact_dir):
    """A corrupt Parquet file among good ones: the job finishes, the file is one error record, and the
    summary does not call the counts reconciled (the file's records were never counted)."""
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(pa.table({"text": ["A good film.", "Bad."]}), str(folder / "a.parquet"))
    (folder / "b.parquet").write_bytes(b"PAR1 this is not a parquet file")
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={folder}/*.parquet", "--epsilon=3")
    errors = [json.loads(line) for line in read_lines(f"{output}-errors-*.jsonl")]
    assert [(os.path.basename(e["source"]), e["position"], e["reason"]) for e in errors] == \
        [("b.parquet", 1, "unreadable_file")]
    assert summary_of(output)["records"] == {"in": 3, "out": 2, "failed": 1, "failed_by_reason": {"unreadable_file": 1},
                                             "reconciled": False, "files_not_read_to_end": 1}


def test_gzipped_text_and_seeded_runs_are_reproducible(tmp_path, small_artifact_dir):
    source = str(tmp_path / "reviews.txt.gz")
    with open(EXAMPLE_TXT, "rb") as raw, gzip.open(source, "wb") as packed:
        shutil.copyfileobj(raw, packed)
    runs = []
    for name in ("first", "second"):
        _, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=5", "--seed=11",
                              "--batch-records=4", name=name)
        runs.append(sorted(read_lines(f"{output}-*-of-*.txt")))
        summary = summary_of(output)
        assert summary["seed_used"] is True and summary["seed"] == 11 and "NOT" in summary["privacy"]["seed"]
    assert len(runs[0]) == 30 and runs[0] == runs[1]


def test_oov_policy_keep_is_stated_in_the_summary(tmp_path, small_artifact_dir):
    source = tmp_path / "names.txt"
    source.write_text("The Qwzrtplk met a Vbnxcqwe.\n", encoding="utf-8")
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={source}", "--epsilon=1000000",
                          "--oov-policy=keep")
    assert read_lines(f"{output}-*-of-*.txt") == ["The Qwzrtplk met a Vbnxcqwe."]
    summary = summary_of(output)
    assert summary["tokens"]["unknown"] == 2
    assert "NOT covered" in summary["privacy"]["unknown_words"]
    assert summary["privacy"]["covered_by_guarantee"] is False


def test_build_pipeline_returns_an_unrun_pipeline_and_beam_flags_pass_through(tmp_path, small_artifact_dir):
    """The same command line targets Flink or Dataflow: Beam's flags reach Beam untouched.

    (A Dataflow pipeline object is not constructed here: that contacts GCS, and tests run offline.)
    """
    output = str(tmp_path / "never")
    ours = [f"--input={EXAMPLE_JSONL}", f"--output={output}", "--epsilon=3", f"--artifact={small_artifact_dir}"]
    options = PipelineOptions(ours + ["--runner=FlinkRunner", "--flink_master=localhost:8081", "--parallelism=4"])
    pipeline = build_pipeline(options)
    assert isinstance(pipeline, beam.Pipeline) and type(pipeline.runner).__name__ == "FlinkRunner"
    assert options.get_all_options()["parallelism"] == 4
    assert options.view_as(PrivatizeOptions).text_field is None  # JSONL default field: text
    labels = {t.full_label for t in pipeline.transforms_stack[0].parts}
    assert {"Read", "Privatize", "Write", "WriteErrors", "WriteSummary"} <= labels
    assert not glob.glob(f"{output}*")

    dataflow = PipelineOptions(ours + ["--runner=DataflowRunner", "--project=some-project",
                                       "--region=europe-west1", "--num_workers=7", "--epsilon=4"])
    assert dataflow.view_as(StandardOptions).runner == "DataflowRunner"
    assert dataflow.view_as(GoogleCloudOptions).project == "some-project"
    assert dataflow.get_all_options()["num_workers"] == 7
    assert dataflow.view_as(PrivatizeOptions).epsilon == 4.0


@pytest.mark.parametrize("flags, message", [
    (["--epsilon=1"], "--input is required"),
    ([f"--input={EXAMPLE_TXT}"], "--epsilon is required"),
    ([f"--input={EXAMPLE_TXT}", "--epsilon=0"], r"--epsilon must be a finite number in \[1e-30, 1e\+06\]"),
    (["--input=/nowhere/none-*.txt", "--epsilon=1"], "no file matches"),
    ([f"--input={REPO}/setup.py", "--epsilon=1"], "cannot infer the format"),
    ([f"--input={EXAMPLE_TXT}", "--epsilon=1", "--text-field=x"], "JSONL and Parquet"),
    ([f"--input={EXAMPLE_TXT}", "--epsilon=1", "--artifact=/no/such/artifact"], "not a directory"),
])
def test_clear_errors_for_bad_flags(tmp_path, flags, message):
    with pytest.raises(TextdpError, match=message):
        build_pipeline(PipelineOptions([f"--output={tmp_path}/x", *flags]))


def test_tem_fails_clearly_when_unavailable(tmp_path, small_artifact, monkeypatch):
    """An installation without textdp.mechanisms.tem (simulated by blocking the import) gets a clear error,
    both when the flags are checked and from the mechanism factory."""
    from textdp.mechanisms import make_mechanism

    monkeypatch.setitem(sys.modules, "textdp.mechanisms.tem", None)  # "import textdp.mechanisms.tem" now raises ImportError
    with pytest.raises(TextdpError, match="--mechanism tem is not available"):
        build_pipeline(PipelineOptions([f"--input={EXAMPLE_TXT}", f"--output={tmp_path}/x", "--epsilon=1",
                                        "--mechanism=tem"]))
    with pytest.raises(TextdpError, match="--mechanism tem is not available"):
        make_mechanism("tem", small_artifact, 1.0)


def test_cli_privatizes_and_prints_where_the_output_is(tmp_path, small_artifact_dir, capsys):
    output = str(tmp_path / "cli")
    code = run([f"--input={EXAMPLE_JSONL}", f"--output={output}", "--epsilon=10",
                f"--artifact={small_artifact_dir}", "--runner=FnApiRunner"])
    printed = capsys.readouterr().out
    assert code == 0
    exact = f"{output}-{'[0-9]' * 5}-of-{'[0-9]' * 5}.jsonl"
    assert f"summary: {output}-summary.json" in printed and f"output:  {exact}" in printed
    assert "records: 30 in, 30 out, 0 failed" in printed
    assert run(["--input=/nowhere/*.txt", f"--output={output}", "--epsilon=1"]) == 2
    assert run(["--help"]) == 0 and "--oov-policy" in capsys.readouterr().out


def test_annoy_search_through_the_pipeline(tmp_path, small_artifact_dir):
    _, output = privatize(tmp_path, small_artifact_dir, f"--input={EXAMPLE_JSONL}", "--epsilon=5", "--nn=annoy",
                          "--search-k=200")
    records = [json.loads(line) for line in read_lines(f"{output}-*-of-*.jsonl")]
    assert sorted(r["id"] for r in records) == [f"r{i:03d}" for i in range(1, 31)]
    summary = summary_of(output)
    assert summary["mechanism"] == {"mechanism": "madlib", "epsilon": 5.0, "nn": "annoy", "search_k": 200}
    assert "Annoy-approximate" in summary["privacy"]["nearest_neighbour"]


def test_threads_of_one_process_share_the_artifact_but_not_the_search_buffer(small_artifact_dir, imdb_rows):
    """Beam runs several DoFn instances (threads) per process: they share the holder's artifact, but
    each gets its own mechanism, because the exact search writes into a scratch buffer. Running two
    threads at once must give exactly the sequential results (seeded per text)."""
    import threading

    import numpy as np

    from transforms.perturb import PerturbConfig, PrivatizerHolder

    holder = PrivatizerHolder(PerturbConfig(artifact=small_artifact_dir, mechanism="madlib", epsilon=8.0))
    first, second = holder.make_privatizer(), holder.make_privatizer()
    assert first.mechanism.artifact is second.mechanism.artifact is holder.artifact
    assert first.mechanism.nearest is not second.mechanism.nearest
    texts = [row["text"] for row in imdb_rows[:40]]

    def generators(offset):
        return [np.random.default_rng([offset, i]) for i in range(len(texts))]

    expected = {k: first.privatize(texts, generators(k))[0] for k in (1, 2)}
    got = {}
    workers = [threading.Thread(target=lambda k=k, p=p: got.__setitem__(k, p.privatize(texts, generators(k))[0]))
               for k, p in ((1, first), (2, second))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert got == expected
