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
    from textdp.errors import TextdpError

    with pytest.raises(TextdpError, match="--user-field needs JSONL or Parquet"):
        _privatize(tmp_path, small_artifact_dir, input_path, "--shuffle", "--user-field=u")


def test_privatize_claims_shuffle_amplification_where_the_theorem_applies(small_artifact, small_artifact_dir,
                                                                           tmp_path):
    """textdp privatize hands the Amplifier each record's exact word count and layout, so the accounting
    can claim Thm. 3.1 when its condition holds: 3,000 one-word lines at epsilon 0.05. Lines whose
    layout differs ("Word." vs "word") are separate groups, and the worst group's bound is the claim."""
    from textdp.privacy import accounting

    words = [w for w in small_artifact.words[200:4900] if w.isalpha()][:3000]
    assert len(words) == 3000
    for name, lines, groups in (("same", [w for w in words[:3000]], [3000]),
                                ("mixed", [w if i % 2 else w.capitalize() + "." for i, w in enumerate(words[:3000])],
                                 [1500, 1500])):
        input_path = tmp_path / f"{name}.txt"
        input_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        output = _privatize(tmp_path / name, small_artifact_dir, input_path, "--epsilon=0.05", "--shuffle",
                            "--mechanism=madlib")
        out = [line.rstrip("\n") for path in glob.glob(output + "-*-of-*.txt") for line in open(path, encoding="utf-8")]
        section = json.load(open(output + "-amplification.json", encoding="utf-8"))
        summary = json.load(open(output + "-summary.json", encoding="utf-8"))
        assert len(out) == 3000 and summary["records"]["reconciled"] and "__textdp_shape__" not in "".join(out)
        assert section["local"]["word_counts"] == "exact, with the layouts, from the privatizer"
        assert section["fields"]["removed"] == []
        shuffle = section["shuffle"]
        assert (shuffle["authors"], shuffle["shape_groups"], shuffle["largest_group_authors"]) == (
            3000, len(groups), max(groups))
        expected = accounting.shuffle_epsilon(section["local"]["token_epsilon0"], min(groups), 1e-6)
        assert shuffle["claimed"] is True and expected.amplified
        assert shuffle["epsilon"] == pytest.approx(expected.epsilon) and shuffle["epsilon"] < section["local"]["token_epsilon0"]
        assert "amplifies the guarantee" in shuffle["statement"]
    # the same corpus at a useful epsilon: the condition fails and nothing is claimed
    output = _privatize(tmp_path / "useful", small_artifact_dir, tmp_path / "same.txt", "--epsilon=10", "--shuffle")
    assert json.load(open(output + "-amplification.json", encoding="utf-8"))["shuffle"]["claimed"] is False


def test_public_summary_has_no_figure_that_depends_on_which_author_wrote_what(small_artifact, small_artifact_dir,
                                                                              tmp_path):
    """Issue 24 item 4: with --user-field the author field is removed from the output, so the per-author word
    counts cannot be read off it, and no public figure may depend on them. The same 3,000 one-word JSONL records
    (epsilon 0.05, --shuffle --subsample 0.5 --k-threshold 2) once with every record by its own author and once
    with two records per author: the operator's reports differ (largest author, sub-sampling formula, and the
    shuffle claim: made for one-word authors, impossible for two-word ones), the public summaries are the same
    apart from the time stamp, the output path and the number of records released (which sub-sampling draws)."""
    words = [w for w in small_artifact.words[200:4900] if w.isalpha()][:3000]
    documents, reports = [], []
    for name, author in (("own", lambda i: f"u{i}"), ("pairs", lambda i: f"u{i // 2}")):
        input_path = tmp_path / f"{name}.jsonl"
        input_path.write_text("".join(json.dumps({"author": author(i), "text": w}) + "\n" for i, w in enumerate(words)),
                              encoding="utf-8")
        public = tmp_path / f"{name}-public.json"
        output = _privatize(tmp_path / name, small_artifact_dir, input_path, "--epsilon=0.05", "--shuffle",
                            "--subsample=0.5", "--user-field=author", "--k-threshold=2", f"--public-summary={public}")
        reports.append(json.load(open(output + "-amplification.json", encoding="utf-8")))
        document = json.load(open(public, encoding="utf-8"))
        for key in ("created_utc", "output", "records_released"):
            document.pop(key)
        documents.append(document)
    own, pairs = reports
    assert (own["local"]["max_words_per_author"], pairs["local"]["max_words_per_author"]) == (1, 2)
    assert own["subsample"]["textbook_epsilon"] != pairs["subsample"]["textbook_epsilon"]
    assert own["shuffle"]["claimed"] is True and pairs["shuffle"]["claimed"] is False  # the raw data decides
    assert documents[0] == documents[1]
    amplification = documents[0]["amplification"]
    assert amplification["shuffle"]["claimed"] is False and amplification["shuffle"]["epsilon"] is None
    assert "withheld" in amplification["shuffle"]["statement"] and "withheld" in amplification["subsample"]["statement"]
    text = json.dumps(documents[0])
    for report in reports:  # no operator figure computed from the authors' word counts reaches the public summary
        for figure in (report["subsample"]["textbook_epsilon"], report["local"]["author_epsilon0"],
                       report["shuffle"]["epsilon"], report["shuffle"]["largest_group_epsilon0"]):
            if figure is not None and figure != report["local"]["token_epsilon0"]:  # that one is public
                assert f"{figure:.6g}" not in text and str(figure) not in text
