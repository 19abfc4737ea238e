"""The Amplifier inside ``textdp privatize`` (FnApiRunner, the 5,000-word artifact, IMDb records)."""

import glob
import json
from collections import Counter

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.privatize import build_pipeline, help_parser


def _privatize(tmp_path, artifact_dir, input_path, *flags):
    output = str(tmp_path / "out")
    argv = ["--runner=FnApiRunner", f"--artifact={artifact_dir}", f"--output={output}", f"--input={input_path}",
            "--epsilon=5", *flags]
    build_pipeline(PipelineOptions(argv)).run().wait_until_finish()
    return output


def test_privatize_with_shuffle_drops_fields_and_reconciles(imdb_rows, small_artifact_dir, tmp_path):
    rows = imdb_rows[:300]
    input_path = tmp_path / "reviews.jsonl"
    with open(input_path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    output = _privatize(tmp_path, small_artifact_dir, input_path, "--text-field=text", "--shuffle",
                        "--user-field=movie_id", "--drop-fields=id,rating", "--subsample=0.5", "--k-threshold=2")
    out = [json.loads(line) for path in glob.glob(output + "-*-of-*.jsonl") for line in open(path, encoding="utf-8")]
    assert out and all(set(record) == {"split", "label", "text"} for record in out)
    summary = json.load(open(output + "-summary.json", encoding="utf-8"))
    section = json.load(open(output + "-amplification.json", encoding="utf-8"))
    assert summary["records"]["out"] == len(out) == section["records"]["out"]
    assert summary["records"]["dropped"] == section["records"]["dropped_by_subsampling"] == 300 - len(out)
    assert summary["records"]["reconciled"] is True
    assert summary["amplification_report"] == output + "-amplification.json"
    assert "random order" in summary["privacy"]["records"] and "one for one" not in summary["privacy"]["records"]
    assert section["fields"]["remaining"] == ["label", "split", "text"]
    assert section["shuffle"]["claimed"] is False
    assert Counter(r["label"] for r in out).keys() <= {"pos", "neg"}


def test_privatize_help_lists_the_amplifier_flags():
    text = help_parser().format_help()
    for flag in ("--shuffle", "--user-field", "--drop-fields", "--subsample", "--k-threshold", "--delta"):
        assert flag in text


def test_user_field_with_plain_text_is_a_clear_error(small_artifact_dir, tmp_path):
    input_path = tmp_path / "lines.txt"
    input_path.write_text("a line\n", encoding="utf-8")
    with pytest.raises(ValueError, match="--user-field needs JSONL or Parquet"):
        _privatize(tmp_path, small_artifact_dir, input_path, "--shuffle", "--user-field=u")
