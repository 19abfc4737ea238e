"""ShuffleAmplifier on the local FnApiRunner (one process): fields, sub-sampling, k-threshold, order.

Statistical tests state their false-failure rate; the two-worker order test is in
tests/test_shuffle_multiworker.py (marked slow).
"""

import glob
import json
import os
from collections import Counter, defaultdict

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from scipy import stats

from pipelines.flags import AmplifierOptions
from pipelines.privatize import SHAPE_FIELD
from tests.test_neighbours import angular_artifact_dir, neighbour_artifact_dir  # noqa: F401  (fixtures)
from textdp.privacy import accounting
from textdp.text.tokenize import WORD_PATTERN
from transforms.shuffle import ShuffleAmplifier, count_words, replace_rare_words, word_types

# the word definition of transforms/shuffle.py, restated so the expected outputs below are computed
# independently of the transform's code
WORD = WORD_PATTERN  # a word as the privatizer defines it; the counting below is independent of the stage


def _read_jsonl(pattern):
    return [json.loads(line) for path in sorted(glob.glob(pattern)) for line in open(path, encoding="utf-8")]


def run_amplifier(records, tmp_path, num_shards=1, **kwargs):
    """Run ShuffleAmplifier(**kwargs) on ``records`` with FnApiRunner; return (output records, stats)."""
    out_dir = str(tmp_path / "out")
    os.makedirs(out_dir, exist_ok=True)
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        outputs = pipeline | "Create" >> beam.Create(records) | "Amplify" >> ShuffleAmplifier(**kwargs)
        (outputs["records"] | "RecordsJson" >> beam.Map(json.dumps)
         | "WriteRecords" >> beam.io.WriteToText(os.path.join(out_dir, "records"), num_shards=num_shards))
        (outputs["stats"] | "StatsJson" >> beam.Map(json.dumps)
         | "WriteStats" >> beam.io.WriteToText(os.path.join(out_dir, "stats")))
    return _read_jsonl(os.path.join(out_dir, "records*")), _read_jsonl(os.path.join(out_dir, "stats*"))[0]


def test_no_author_or_dropped_field_survives(imdb_rows, tmp_path):
    rows = [dict(row) for row in imdb_rows]
    out, stats_ = run_amplifier(rows, tmp_path, num_shards=3, user_field="movie_id", drop_fields=["id", "rating"])
    assert len(out) == len(rows)
    assert all(set(record) == {"split", "label", "text"} for record in out)
    assert stats_["removed_fields"] == ["id", "movie_id", "rating"]
    assert stats_["remaining_fields"] == ["label", "split", "text"]
    # the text is released untouched (the stage de-links, it does not edit) and nothing is lost
    assert Counter(r["text"] for r in out) == Counter(r["text"] for r in rows)
    assert stats_["records_in"] == stats_["records_out"] == len(rows)
    assert stats_["authors"] == len({row["movie_id"] for row in rows})


def test_shape_field_gives_the_shapes_and_is_removed(tmp_path):
    """The privatizer's word counts and layouts make the shapes; different layouts never share a group."""
    def shape(words, layout="L"):
        return {"words": words, "layout": layout}

    rows = [{"u": "a", "n": shape(3), "text": "x y z"}, {"u": "a", "n": shape(2), "text": "don't ,"},
            {"u": "b", "n": shape(2), "text": "p q"}, {"u": "c", "n": shape(1), "text": "r"},
            {"u": "d", "n": shape(1, "other"), "text": "s"}]
    out, stats_ = run_amplifier(rows, tmp_path, user_field="u", shape_field="n")
    assert all(set(r) == {"text"} for r in out)
    assert stats_["word_counts"] == "exact, with the layouts, from the privatizer"
    assert stats_["removed_fields"] == ["u"]  # the internal shape field is not reported as a user field
    assert sorted(tuple(s) for s, _ in stats_["shape_counts"]) == [(1,), (1,), (2,), (2, 3)]
    assert sorted(c for _, c in stats_["shape_counts"]) == [1, 1, 1, 1]  # 'c' and 'd' differ in layout
    _, estimated = run_amplifier(rows, tmp_path / "estimated", user_field="u", drop_fields=["n"])
    assert estimated["word_counts"] == "estimated"
    with pytest.raises(Exception, match="shape field 'n' must hold"):
        run_amplifier([{"n": 3, "text": "x y z"}], tmp_path / "bad", shape_field="n")


def test_fields_released_as_they_are_split_the_accounting_groups(tmp_path):
    """Four 2-word records: two labelled 'a', two 'b'. An 'a' record can only hide among 'a' records."""
    rows = [{"label": label, "text": "one two"} for label in "aabb"]
    _, stats_ = run_amplifier(rows, tmp_path)
    assert stats_["shape_counts"] == [[[2], 2], [[2], 2]]
    _, dropped = run_amplifier(rows, tmp_path / "dropped", drop_fields=["label"])
    assert dropped["shape_counts"] == [[[2], 4]]


def test_missing_author_field_is_an_error_that_shows_no_text(tmp_path):
    secret = "my card number is 4242"
    with pytest.raises(Exception) as info:
        run_amplifier([{"user": "a", "text": "fine"}, {"text": secret}], tmp_path, user_field="user")
    assert "'user'" in str(info.value)
    assert secret not in str(info.value)


def test_subsample_rate_within_binomial_bounds(imdb_rows, tmp_path):
    """Kept ~ Binomial(2000, 0.3). Bounds are the 5e-7 and 1 - 5e-7 quantiles: false-failure rate 1e-6."""
    rows = [{"pos": i, "text": row["text"]} for i, row in enumerate(imdb_rows)]
    rate = 0.3
    out, stats_ = run_amplifier(rows, tmp_path, subsample_rate=rate)
    low = stats.binom.ppf(5e-7, len(rows), rate)
    high = stats.binom.isf(5e-7, len(rows), rate)
    assert low <= len(out) <= high, (len(out), low, high)
    assert stats_["records_in"] == len(rows) and stats_["records_out"] == len(out)
    assert len({r["pos"] for r in out}) == len(out)  # a sample, not draws with repetition


def _expected_k_threshold(rows, k, marker, author_of):
    users_per_type = defaultdict(set)
    for row in rows:
        for word in WORD.findall(row["text"]):
            users_per_type[word.lower()].add(author_of(row))
    rare = {t for t, users in users_per_type.items() if len(users) < k}
    texts = [WORD.sub(lambda m: marker if m.group().lower() in rare else m.group(), row["text"]) for row in rows]
    suppressed = sum(1 for row in rows for word in WORD.findall(row["text"]) if word.lower() in rare)
    return Counter(texts), rare, suppressed


def test_k_threshold_hand_example(tmp_path):
    rows = [{"u": "a", "text": "apple banana"}, {"u": "b", "text": "apple cherry"},
            {"u": "c", "text": "Apple BANANA banana."}]
    out, stats_ = run_amplifier(rows, tmp_path, user_field="u", k_threshold=2, marker="<rare>")
    assert Counter(r["text"] for r in out) == Counter(["apple banana", "apple <rare>", "Apple BANANA banana."])
    assert stats_["rare_word_types"] == 1 and stats_["suppressed_words"] == 1
    out, stats_ = run_amplifier(rows, tmp_path / "k3", user_field="u", k_threshold=3, marker="<rare>")
    assert Counter(r["text"] for r in out) == Counter(["apple <rare>", "apple <rare>", "Apple <rare> <rare>."])
    assert stats_["rare_word_types"] == 2 and stats_["suppressed_words"] == 4


def test_k_threshold_suppresses_exactly_the_rare_types_on_imdb(imdb_rows, tmp_path):
    """Authors = movie_id (several reviews per movie); K = 3 distinct authors."""
    rows = [{"movie_id": row["movie_id"], "text": row["text"]} for row in imdb_rows[:600]]
    expected, rare, suppressed = _expected_k_threshold(rows, 3, "<rare>", lambda r: r["movie_id"])
    out, stats_ = run_amplifier(rows, tmp_path, user_field="movie_id", k_threshold=3)
    assert Counter(r["text"] for r in out) == expected
    assert stats_["rare_word_types"] == len(rare) > 0
    assert stats_["suppressed_words"] == suppressed


def test_k_threshold_without_author_field_counts_records(imdb_rows, tmp_path):
    rows = [{"i": i, "text": row["text"]} for i, row in enumerate(imdb_rows[:300])]
    expected, _, _ = _expected_k_threshold(rows, 2, "<rare>", lambda r: r["i"])
    out, _ = run_amplifier(rows, tmp_path, k_threshold=2)
    assert Counter(r["text"] for r in out) == expected


def test_rare_word_replacement_is_reversible_when_nothing_is_rare():
    text = "Don't  panic -- it's 3.5 well-known\nlines!"
    assert replace_rare_words(text, set(), "<rare>") == (text, 0)
    assert word_types(text) == {"don't", "panic", "it's", "3.5", "well-known", "lines"}  # as the privatizer cuts them
    assert count_words(text) == 6


def test_output_order_uncorrelated_with_input_order_one_process(tmp_path):
    """Spearman rank correlation of input vs output position over 2,000 records, several buckets.

    Under a uniform permutation the test's p-value is uniform: failing when p < 1e-4 gives a
    false-failure rate of 1e-4. The control run without --shuffle shows the test has power.
    """
    rows = [{"pos": i, "text": f"word{i}"} for i in range(2000)]
    out, _ = run_amplifier(rows, tmp_path, records_per_shard=300)
    positions = [r["pos"] for r in out]
    assert sorted(positions) == list(range(2000))
    assert stats.spearmanr(range(len(positions)), positions).pvalue >= 1e-4
    control, _ = run_amplifier(rows, tmp_path / "control", shuffle=False)
    control_positions = [r["pos"] for r in control]
    assert stats.spearmanr(range(len(control_positions)), control_positions).statistic > 0.5


def test_amplifier_options_and_report_section(imdb_rows, tmp_path):
    """Flags parse, every flag has help; the report computed from the stage's stats (textdp.privacy.accounting,
    no Beam) reconciles counts and carries no raw text."""
    parser_help = {action.dest: action.help for action in _amplifier_actions()}
    for dest in ("shuffle", "user_field", "drop_fields", "subsample", "k_threshold", "delta", "shuffle_shard_records"):
        assert parser_help.get(dest), dest
    argv = ["--shuffle", "--user-field", "movie_id", "--drop-fields", "id,rating", "--subsample", "0.5",
            "--k-threshold", "2", "--delta", "1e-7"]
    amp = PipelineOptions(argv).view_as(AmplifierOptions).amplifier_config()
    assert (amp.shuffle, amp.user_field, amp.drop_fields, amp.subsample, amp.k_threshold, amp.delta) == (
        True, "movie_id", ("id", "rating"), 0.5, 2, 1e-7)
    rows = [dict(row) for row in imdb_rows[:400]]
    out, stats_ = run_amplifier(rows, tmp_path, user_field=amp.user_field, drop_fields=amp.drop_fields,
                                subsample_rate=amp.subsample, k_threshold=amp.k_threshold)
    report = accounting.amplification_section(stats_, 282.0, shuffled=True, delta=amp.delta, subsample_rate=0.5,
                                              k_threshold=2, seed_used=False)
    raw = json.dumps(report)
    assert report["records"]["in"] == 400 and report["records"]["out"] == len(out)
    assert report["records"]["dropped_by_subsampling"] == 400 - len(out)
    assert report["fields"]["remaining"] == ["label", "split", "text"]
    assert report["fields"]["released_unprivatized"] == ["label", "split"]
    assert report["shuffle"]["claimed"] is False and report["shuffle"]["delta"] == 1e-7
    assert report["subsample"]["claimed"] is False and report["k_threshold"]["claimed"] is False
    phrases = {" ".join(words[i:i + 6]) for words in (row["text"].split() for row in rows)
               for i in range(len(words) - 5)}
    assert not [phrase for phrase in phrases if phrase in raw]  # no six consecutive words of any review


def test_options_validation():
    with pytest.raises(ValueError, match="--subsample"):
        PipelineOptions(["--subsample", "1.5"]).view_as(AmplifierOptions).amplifier_config()
    with pytest.raises(ValueError, match="--k-threshold"):
        PipelineOptions(["--k-threshold", "0"]).view_as(AmplifierOptions).amplifier_config()
    with pytest.raises(ValueError, match="--shuffle-shard-records"):
        PipelineOptions(["--shuffle-shard-records", "0"]).view_as(AmplifierOptions).amplifier_config()
    assert not PipelineOptions([]).view_as(AmplifierOptions).amplifier_config().requested()
    assert PipelineOptions(["--shuffle"]).view_as(AmplifierOptions).amplifier_config().requested()
    with pytest.raises(ValueError, match="cannot also be dropped"):
        ShuffleAmplifier(drop_fields=["text"])


def test_token_epsilon0_uses_the_mechanism_metric(neighbour_artifact_dir, angular_artifact_dir):  # noqa: F811
    """epsilon_0 of a TEM token: epsilon * min(diameter, gamma), the diameter measured in the table's
    metric (Euclidean; angular: chords between unit directions, at most 2)."""
    from textdp.artifact.locate import open_artifact
    from textdp.mechanisms import make_mechanism

    for directory, metric in ((neighbour_artifact_dir, "euclidean"), (angular_artifact_dir, "angular")):
        artifact = open_artifact(directory)
        tem = make_mechanism("tem", artifact, 1.0, gamma=100.0)
        eps0, bounds = accounting.mechanism_token_epsilon0(tem, artifact.vectors)
        assert tem.parameters()["metric"] == metric and eps0 == pytest.approx(min(bounds.upper, 100.0))
        assert 1.0 < bounds.lower <= bounds.upper and (bounds.upper <= 2.0 if metric == "angular" else bounds.upper > 5.0)
        assert accounting.mechanism_token_epsilon0(tem, artifact.vectors, "keep")[0] == float("inf")


def test_section_from_stats_alone():
    stats_ = {"records_in": 3, "records_out": 3, "authors": 3, "per_author": False, "text_fields": ["text"],
              "word_counts": "estimated",
              "shape_counts": [[[2], 3]], "removed_fields": [], "remaining_fields": ["text"],
              "rare_word_types": 0, "suppressed_words": 0}
    section = accounting.amplification_section(stats_, 0.5, shuffled=True, delta=1e-6, subsample_rate=None,
                                               k_threshold=None, seed_used=False)
    assert section["shuffle"]["claimed"] is False  # 3 records cannot hide anyone
    assert section["fields"]["released_unprivatized"] == []
    assert "subsample" not in section and "k_threshold" not in section


def _amplifier_actions():
    import argparse

    parser = argparse.ArgumentParser()
    AmplifierOptions._add_argparse_args(parser)
    return [a for a in parser._actions if a.dest != "help"]


def test_amplify_for_text_payloads_writes_the_section(small_artifact_dir, imdb_rows, tmp_path):
    """The privatize wiring: Privatize's text payloads in, str records out, the section file written
    by a worker, with epsilon_0 from the real Madlib on the 5,000-word artifact."""
    from transforms import Privatize
    from transforms.amplifier import AmplifierConfig, Amplify

    texts = [row["text"] for row in imdb_rows[:200]]
    section_path = str(tmp_path / "amplification.json")
    privatize = Privatize(epsilon=5.0, artifact=small_artifact_dir, shape_field=SHAPE_FIELD)
    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        released = pipeline | beam.Create(texts) | privatize
        amplified = released.released | Amplify(AmplifierConfig(shuffle=True, subsample=0.5), privatize.config,
                                                privatize.shared_handle, "text", (), section_path)
        amplified["records"] | "W1" >> beam.io.WriteToText(str(tmp_path / "out"))
        amplified["dropped"] | beam.Map(str) | "W2" >> beam.io.WriteToText(str(tmp_path / "dropped"))
    out = [line.rstrip("\n") for path in glob.glob(str(tmp_path / "out*")) for line in open(path, encoding="utf-8")]
    assert 0 < len(out) < len(texts) and all(isinstance(line, str) and SHAPE_FIELD not in line for line in out)
    assert int(open(glob.glob(str(tmp_path / "dropped*"))[0]).read()) == len(texts) - len(out)
    section = json.load(open(section_path, encoding="utf-8"))
    assert section["records"] == {"in": 200, "out": len(out), "dropped_by_subsampling": 200 - len(out)}
    diameter = section["local"]["vocabulary_diameter"]
    assert section["local"]["token_epsilon0"] == pytest.approx(5.0 * diameter["upper"])
    assert section["shuffle"]["claimed"] is False and section["subsample"]["claimed"] is False
    assert section["local"]["word_counts"] == "exact, with the layouts, from the privatizer"
