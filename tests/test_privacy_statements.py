"""Every privacy sentence textdp prints is derived from what the run did (issue 12).

Each test runs ``textdp privatize`` (FnApiRunner, the 5,000-word artifact) or the statement builders
and checks a sentence against the run's own behaviour; each names the finding of issue 12 it covers.
"""

import glob
import json
import os
import re

import pytest

from pipelines.privatize import run
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.privacy import accounting
from textdp.privacy.statements import FLOATING_POINT_STATEMENT, STRUCTURE_STATEMENT, oov_statement, records_statement
from textdp.privacy.summary import RAW_DATA_FIGURES
from textdp.text.tokenize import Tokenizer


def _privatize(tmp_path, artifact_dir, lines, *flags, name="in.txt"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = str(tmp_path / "out" / "run")
    assert run([f"--input={path}", f"--output={output}", f"--artifact={artifact_dir}", "--runner=FnApiRunner",
                *flags]) == 0
    summary = json.load(open(output + "-summary.json", encoding="utf-8"))
    try:
        report = json.load(open(output + "-amplification.json", encoding="utf-8"))
    except FileNotFoundError:
        report = None
    released = [line.rstrip("\n") for p in sorted(glob.glob(output + "-*-of-*.txt")) for line in open(p, encoding="utf-8")]
    return output, summary, report, released


def test_unk_records_are_never_grouped_with_vocabulary_records(small_artifact, small_artifact_dir, tmp_path):
    """Finding 1: with --oov-policy unk the marker shows where a word was unknown, so a record that appears
    as '<unk>' can only hide among records that also do. 3,000 one-word lines at epsilon 0.05, 1,000 of
    them unknown words: two shape groups (2,000 and 1,000), and the claim is the worse group's."""
    words = [w for w in small_artifact.words[200:4900] if w.isalpha()][:2000]
    unknown = [f"zq{i}xj" for i in range(1000)]
    lines = [w for pair in zip(words[:1000], unknown) for w in pair] + words[1000:]
    _, summary, report, released = _privatize(tmp_path, small_artifact_dir, lines, "--epsilon=0.05",
                                              "--oov-policy=unk", "--shuffle")
    assert released.count("<unk>") == 1000 and summary["records"]["reconciled"]
    shuffle = report["shuffle"]
    assert (shuffle["authors"], shuffle["shape_groups"], shuffle["largest_group_authors"]) == (3000, 2, 2000)
    expected = accounting.shuffle_epsilon(report["local"]["token_epsilon0"], 1000, 1e-6)
    assert shuffle["claimed"] and shuffle["epsilon"] == pytest.approx(expected.epsilon)
    # with the random policy nothing marks the unknown positions: one group, as the proof allows
    _, _, report, _ = _privatize(tmp_path / "random", small_artifact_dir, lines, "--epsilon=0.05", "--shuffle")
    assert report["shuffle"]["shape_groups"] == 1


def test_statements_follow_the_amplifier_steps_that_ran(small_artifact_dir, tmp_path):
    """Finding 3: '--subsample 0.9' alone does not shuffle, and nothing may say it did."""
    lines = [f"line {i} of the corpus" for i in range(60)]
    _, summary, report, _ = _privatize(tmp_path, small_artifact_dir, lines, "--epsilon=5", "--subsample=0.9")
    records = summary["privacy"]["records"]
    assert "random order" not in records and "no shuffle ran" in records and "probability 0.9" in records
    assert "random order" not in report["order"] and report["order"] == accounting.UNSHUFFLED_ORDER_STATEMENT
    assert "shuffle" not in report
    _, summary, report, _ = _privatize(tmp_path / "s", small_artifact_dir, lines, "--epsilon=5", "--shuffle")
    assert "uniformly random order" in summary["privacy"]["records"] and "probability" not in summary["privacy"]["records"]
    assert report["order"] == accounting.SHUFFLE_ORDER_STATEMENT


def test_public_summary_holds_no_raw_input_figures(small_artifact_dir, tmp_path):
    """Finding 4: the operator's summary says it is not publishable and lists every raw-data figure it
    holds; --public-summary holds none of them (no token or failure counts, no count inside a statement)."""
    lines = ["A good movie", "zzqxw qqxzv were here", "", "the plot was thin"]
    public = str(tmp_path / "public.json")
    output, summary, _, released = _privatize(tmp_path, small_artifact_dir, lines, "--epsilon=5",
                                              f"--public-summary={public}", "--max-failed-fraction=1")  # 1 of 4 fails
    assert summary["publishable"] is False and summary["public_summary"] == public
    assert summary["raw_data_figures"]["figures"] == [
        f for f in RAW_DATA_FIGURES if f not in ("records.dropped", "records.files_not_read_to_end")]
    assert "must NOT be published" in summary["raw_data_figures"]["statement"]
    for figure in summary["raw_data_figures"]["figures"]:  # the list names figures that exist
        section, key = figure.split(".")
        assert key in summary[section], figure
    assert summary["tokens"]["unknown"] == 2 and summary["records"]["failed"] == 1
    document = json.load(open(public, encoding="utf-8"))
    assert document["publishable"] is True and document["records_released"] == len(released) == 3
    assert set(document) >= {"mechanism", "artifact", "privacy", "oov_policy", "seed_used"}
    assert not {"records", "tokens", "input", "errors_output", "raw_data_figures"} & set(document)
    assert document["privacy"]["unknown_words"] == oov_statement("random", "<unk>", None)
    assert "(2 in this run)" in summary["privacy"]["unknown_words"]
    keys = set()
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            keys |= set(node)
            stack.extend(node.values())
    assert not {"changed", "changed_fraction", "unknown", "failed", "failed_by_reason", "in", "total"} & keys
    text = json.dumps(document)
    assert "zzqxw" not in text and "plot" not in text


def test_public_summary_with_the_amplifier_keeps_the_claims_not_the_author_counts(imdb_rows, small_artifact_dir,
                                                                                  tmp_path):
    rows = [{"user": row["movie_id"], "text": row["text"][:200]} for row in imdb_rows[:80]]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    public = str(tmp_path / "public.json")
    output = str(tmp_path / "out")
    assert run([f"--input={path}", f"--output={output}", f"--artifact={small_artifact_dir}", "--runner=FnApiRunner",
                "--epsilon=5", "--shuffle", "--user-field=user", f"--public-summary={public}"]) == 0
    document = json.load(open(public, encoding="utf-8"))
    amplification = document["amplification"]
    assert amplification["shuffle"]["claimed"] is False and "no amplification claimed" in amplification["shuffle"]["statement"]
    assert amplification["fields"]["removed"] == ["user"]
    assert not {"authors", "shape_groups", "largest_group_authors"} & set(amplification["shuffle"])
    assert "records" not in amplification


def test_no_shuffle_statement_does_not_promise_a_random_order(small_artifact_dir, tmp_path):
    """Finding 5: without the Amplifier, the output order may follow the input order, and the summary
    says so (the review saw 47 of 49 lines at their input position on the local runner)."""
    lines = [f"record number {i}" for i in range(49)]
    _, summary, _, _ = _privatize(tmp_path, small_artifact_dir, lines, "--epsilon=5")
    statement = summary["privacy"]["records"]
    assert statement == records_statement(None)
    assert "may follow the input order" in statement and "--shuffle" in statement
    assert "no particular order" not in statement


def test_structure_statement_describes_how_joined_words_are_released():
    """Finding 6: a joined word the vocabulary has is one slot (its hyphen can disappear); one it lacks is
    split and its joiners are released as structure. The statement says exactly that."""
    tokenizer = Tokenizer({"well-known": 0, "foo": 1, "bar": 2, "do": 3, "n't": 4})
    known, split, clitic = (tokenizer.tokenize(t) for t in ("well-known", "foo-bar", "don't"))
    assert known.words == ["well-known"] and known.pieces == ["", "well-known", ""]
    assert split.words == ["foo", "bar"] and "-" in split.pieces  # the hyphen is structure
    assert clitic.words == ["do", "n't"]
    assert known.render(["movie"]) == "movie"  # the in-vocabulary hyphen disappears with the word
    for phrase in ("'well-known' in GloVe) is one word and is replaced whole", "its joiner may disappear",
                   "'foo-bar' -> 'foo' '-' 'bar'", "released as punctuation",
                   "shows where such a compound was not in the vocabulary"):
        assert phrase in STRUCTURE_STATEMENT, phrase
    assert "punctuation, symbols" not in STRUCTURE_STATEMENT  # the old, too-broad sentence


def test_structure_statement_names_exactly_what_the_tokenizer_releases_as_structure():
    """Issue 24: the sentence follows the tokenizer's Unicode rule (textdp/text/word_split.py): what it calls
    structure is structure, and what it calls a word (disguised letters, emoji, Braille) is a word."""
    from textdp.text.word_split import split_pieces

    cases = {"structure": ["\t", "\x01", ",", "\u00bf", "+", "\u2211", "$", "\u20ac", "^", "\u00b4"],
             "word": ["\u24d9\u24de", "\U0001F600", "\u2801\u2803", "\U0001F1EB\U0001F1F7", "\ue000", "jo\u200bhn"]}
    for kind, samples in cases.items():
        for sample in samples:
            pieces = split_pieces([f"a {sample} b"])[0]
            assert (sample in pieces[1::2]) == (kind == "word"), (kind, sample, pieces)
    for phrase in ("control characters", "punctuation", "math, currency and modifier symbols (Unicode Sm, Sc, Sk)",
                   "looked up by their NFKC form", "emoji, Braille, regional indicators",
                   "privatized like any word outside the vocabulary"):
        assert phrase in STRUCTURE_STATEMENT, phrase


def test_both_reports_state_the_seed_and_the_floating_point_caveat(small_artifact_dir, tmp_path):
    """Finding 8: a --seed run is not private and says so in the summary AND the amplification report;
    both carry the floating-point caveat; an unseeded run says where its noise came from."""
    lines = [f"line {i} of the corpus" for i in range(30)]
    _, summary, report, _ = _privatize(tmp_path, small_artifact_dir, lines, "--epsilon=5", "--shuffle", "--seed=7")
    for document in (summary["privacy"], report):
        assert "must NOT be treated as private" in document["seed"]
        assert document["numerical_precision"] == FLOATING_POINT_STATEMENT
    assert summary["privacy"]["covered_by_guarantee"] is False
    _, summary, report, _ = _privatize(tmp_path / "u", small_artifact_dir, lines, "--epsilon=5", "--shuffle")
    for document in (summary["privacy"], report):
        assert "operating-system entropy" in document["seed"] and "NOT" not in document["seed"]
    assert summary["privacy"]["covered_by_guarantee"] is True


def test_random_oov_statement_is_what_the_privatizer_does():
    """Finding 1: the random-policy sentence names the mechanism's release of a uniform word, not a uniform word."""
    statement = oov_statement("random", "<unk>", None)
    assert "mechanism's output for a vocabulary word drawn uniformly at random" in statement
    assert "exp(epsilon_0)" in statement and "reveals nothing" in statement
    assert not any(ch.isdigit() for ch in statement.replace("epsilon_0", ""))
    assert "(5 in this run)" in oov_statement("random", "<unk>", 5)


def _docs_example_public_summary():
    docs = open(os.path.join(os.path.dirname(__file__), "..", "docs", "privatize.md"), encoding="utf-8").read()
    block = re.search(r"<!-- example-public-summary -->\s*```json\n(.*?)\n```", docs, re.S)
    assert block, "docs/privatize.md lost its example public summary"
    return json.loads(block.group(1))


def _key_paths(node, prefix=""):
    if not isinstance(node, dict):
        return {prefix}
    paths = set()
    for key, value in node.items():
        paths |= _key_paths(value, f"{prefix}.{key}" if prefix else key)
    return paths


def test_docs_example_public_summary_matches_a_run(small_artifact_dir, tmp_path):
    """Issue 12 ("re-generated and quoted"): the public summary quoted in docs/privatize.md is what the
    JSONL quick start writes: the same keys, the same parameters, and each quoted statement the start of
    the run's own sentence (the docs cut long statements at "...")."""
    quoted = _docs_example_public_summary()
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "reviews.jsonl")
    output, public = str(tmp_path / "out" / "reviews-jsonl"), str(tmp_path / "public.json")
    assert run([f"--input={example}", f"--output={output}", f"--artifact={small_artifact_dir}", "--runner=FnApiRunner",
                "--epsilon=10", f"--public-summary={public}"]) == 0
    document = json.load(open(public, encoding="utf-8"))
    assert _key_paths(document) == _key_paths(quoted)
    for key in ("publishable", "records_released", "mechanism", "oov_policy", "seed_used", "text_fields", "format",
                "warnings"):
        assert document[key] == quoted[key], key
    for key, sentence in quoted["privacy"].items():
        if isinstance(sentence, str):
            assert document["privacy"][key].startswith(sentence.removesuffix(" ...")), key
        else:
            assert document["privacy"][key] == sentence, key


def test_docs_example_amplification_report_matches_a_run(imdb_rows, small_artifact_dir, tmp_path):
    """Issue 12 ("re-generated and quoted"): the amplification report quoted in docs/lac.md has the keys a
    run with the same flags writes, and each quoted sentence starts the run's own (numbers that depend on
    the corpus and the vocabulary are compared only where they do not: the theorem, delta, the claims)."""
    docs = open(os.path.join(os.path.dirname(__file__), "..", "docs", "lac.md"), encoding="utf-8").read()
    block = re.search(r"<!-- example-amplification-report -->\s*```json\n(.*?)\n```", docs, re.S)
    assert block, "docs/lac.md lost its example amplification report"
    quoted = json.loads(block.group(1))
    rows = [{k: row[k] for k in ("id", "movie_id", "rating", "label", "split")} | {"text": row["text"][:300]}
            for row in imdb_rows[:80]]
    path = tmp_path / "reviews.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    output = str(tmp_path / "out" / "reviews")
    assert run([f"--input={path}", f"--output={output}", f"--artifact={small_artifact_dir}", "--runner=FnApiRunner",
                "--epsilon=10", "--shuffle", "--user-field=movie_id", "--drop-fields=id", "--k-threshold=5"]) == 0
    report = json.load(open(output + "-amplification.json", encoding="utf-8"))
    assert _key_paths(report) == _key_paths(quoted)
    for section, key in (("shuffle", "theorem"), ("shuffle", "delta"), ("shuffle", "claimed"), ("k_threshold", "k"),
                         ("k_threshold", "claimed"), ("fields", "removed"), ("fields", "remaining"),
                         ("fields", "released_unprivatized"), ("local", "word_counts")):
        assert report[section][key] == quoted[section][key], (section, key)
    assert report["seed"] == quoted["seed"]
    fixed_text = [(report["order"], quoted["order"]), (report["numerical_precision"], quoted["numerical_precision"]),
                  (report["fields"]["statement"], quoted["fields"]["statement"])]
    for sentence, quote in fixed_text:
        assert sentence.startswith(quote.removesuffix(" ...")), quote
    # statements with corpus-dependent numbers: the same words around the numbers
    number = re.compile(r"-?\d[\d.e+,-]*")
    for section in ("local", "shuffle", "k_threshold"):
        words = number.sub("#", report[section]["statement"])
        assert words.startswith(number.sub("#", quoted[section]["statement"].removesuffix(" ..."))), section


def test_an_unbounded_epsilon0_names_the_mechanisms_reason_in_the_report(neighbour_artifact_dir, tmp_path):  # noqa: F811
    """Issue 24 item 6: truncated-gumbel claims no guarantee, so its per-word epsilon_0 is inf; the real
    job's amplification report says no finite bound is claimed, with the mechanism's own reason, instead
    of 'every released word is inf-LDP ... from epsilon x the vocabulary diameter bound'."""
    lines = [f"line {i} of the corpus" for i in range(20)]
    _, summary, report, _ = _privatize(tmp_path, neighbour_artifact_dir, lines, "--epsilon=70",
                                       "--mechanism=truncated-gumbel", "--shuffle")
    local = report["local"]["statement"]
    assert report["local"]["token_epsilon0"] == "inf"  # how the report writes it (docs/lac.md)
    assert local.startswith("no finite pure local-DP bound is claimed for a released word")
    assert summary["privacy"]["output_coverage"]["not_covered"][0] in local  # the mechanism's own reason
    assert "inf-LDP" not in local and "diameter" not in local
    _, _, report, _ = _privatize(tmp_path / "keep", neighbour_artifact_dir, lines, "--epsilon=5", "--shuffle",
                                 "--oov-policy=keep")
    assert "--oov-policy keep releases words outside the vocabulary unchanged" in report["local"]["statement"]


def test_public_shuffle_claim_is_the_operators_sentence_with_its_restriction():
    """Issue 24 item 6: without an author field the public summary repeats the claimed shuffle sentence of
    the operator's report, restriction included (only words swapped within the same released shape)."""
    from textdp.privacy.summary import public_amplification

    stats = accounting.amplifier_stats(10 ** 6, 10 ** 6, [(((5, "layout"),), 10 ** 6)], ["text"], 0, 0, [], False,
                                       ["text"], "__shape__")
    section = accounting.amplification_section(stats, 0.001, shuffled=True, delta=1e-6, subsample_rate=None,
                                               k_threshold=None, seed_used=False)
    assert section["shuffle"]["claimed"] is True
    public = public_amplification(section)["shuffle"]
    assert public["claimed"] is True and public["statement"] == section["shuffle"]["statement"]
    assert "privatized words only" in public["statement"] and "released shape is the same" in public["statement"]
