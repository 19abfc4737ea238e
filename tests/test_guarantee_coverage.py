"""What the guarantee covers (issue 24, item 3): every mechanism declares it on itself (the ``coverage``
of its ``privacy_statement()``: all words, a stated subset, or none, with the reason), and the public
summary, the operator's summary and ``textdp.Privatizer.privacy_statement()`` combine that declaration
with the OOV policy and the seed. ``covered_by_guarantee`` is true only when everything is covered.

Real mechanisms over the 5k GloVe artifact with its K=40 neighbour table, and real pipeline runs
(FnApiRunner) for the two mechanisms whose guarantee is not the whole vocabulary.
"""

import json

import pytest

import textdp
from pipelines.privatize import run
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.mechanisms import ALL_MECHANISMS
from textdp.privacy.statements import coverage_statement
from textdp.privacy.summary import build_public_summary, build_summary

# What each mechanism protects, from its own module docstring (not from the code under test):
# Madlib, TEM, Mahalanobis, Vickrey and SanText bound every pair of vocabulary words; truncated-gumbel
# claims nothing; SanText+ (p = 0.3 < 1) protects only its sensitive words; CusText (20-word groups of a
# 5,000-word vocabulary) only pairs of words of the same group.
EXPECTED = {"madlib": "all", "tem": "all", "mahalanobis": "all", "vickrey": "all", "truncated-gumbel": "none",
            "santext": "all", "santext+": "subset", "custext": "subset"}
OOV_POLICIES = ("random", "unk", "keep")
EPSILON = {"truncated-gumbel": 70}  # its scale relation needs epsilon > 62.7 on this vocabulary; 2 elsewhere


def expected_level(mechanism_level, oov_policy, unknown, seed_used):
    if seed_used:
        return "none"
    if oov_policy == "keep" and (unknown is None or unknown > 0) and mechanism_level == "all":
        return "subset"
    return mechanism_level


@pytest.fixture(scope="module")
def privatizers(neighbour_artifact_dir):  # noqa: F811
    assert set(EXPECTED) <= set(ALL_MECHANISMS)  # a mechanism added later asserts its coverage in its own tests
    return {(name, oov): textdp.Privatizer(epsilon=EPSILON.get(name, 2), mechanism=name, artifact=neighbour_artifact_dir, oov_policy=oov)
            for name in ALL_MECHANISMS for oov in OOV_POLICIES}


def _check(privacy, level, oov_policy, unknown, seed_used, mechanism, declared):
    assert privacy["coverage"] == declared  # the mechanism's own declaration, copied as it is
    coverage = privacy["output_coverage"]
    assert coverage["covered"] == level, (mechanism, oov_policy, unknown, seed_used, coverage)
    assert privacy["covered_by_guarantee"] is (level == "all")
    assert ("subset" in coverage) is (level == "subset")
    assert bool(coverage["not_covered"]) is (level != "all")
    reasons = " ".join(coverage["not_covered"])
    assert ("--seed" in reasons) is seed_used
    assert ("--oov-policy keep" in reasons) is (oov_policy == "keep" and unknown != 0)
    if mechanism == "truncated-gumbel":
        assert "no guarantee is claimed" in reasons
    if mechanism == "santext+" and not seed_used:
        assert "sensitive words" in coverage["subset"] and "non-sensitive word is released unchanged" in reasons
    if mechanism == "custext" and not seed_used:
        assert "same group" in coverage["subset"] and "reveals the input word's group" in reasons
    if level == "subset" and oov_policy == "keep" and unknown != 0:
        assert "words in the vocabulary" in coverage["subset"]


@pytest.mark.parametrize("mechanism", ALL_MECHANISMS)
def test_every_mechanism_oov_policy_and_seed_states_what_is_covered(privatizers, mechanism):
    """8 mechanisms x 3 OOV policies x seed or not, in the public summary, the operator's summary (with
    and without unknown words in the run) and the API: the coverage is the mechanism's own, narrowed by
    --oov-policy keep and by a seed, and covered_by_guarantee is never true when something is not covered."""
    for oov_policy in OOV_POLICIES:
        privatizer = privatizers[(mechanism, oov_policy)]
        mech = privatizer.mechanism
        declared = mech.privacy_statement()["coverage"]["covered"]
        assert declared == EXPECTED.get(mechanism, declared)
        for seed in (None, 7):
            seed_used = seed is not None
            common = dict(mechanism_parameters=mech.parameters(), mechanism_statement=mech.privacy_statement(),
                          artifact={}, oov_policy=oov_policy, unk_token="<unk>", seed=seed)
            public = build_public_summary(records_out=1, output="o", data_format="text", text_fields=(), **common)
            level = expected_level(declared, oov_policy, None, seed_used)
            _check(public["privacy"], level, oov_policy, None, seed_used, mechanism, mech.privacy_statement()["coverage"])
            assert privatizer.privacy_statement(seed_used) == public["privacy"]  # the API says the same
            for unknown in (0, 3):
                operator = build_summary({"records_in": 1, "records_out": 1, "tokens": 5, "unknown_tokens": unknown},
                                         input_pattern="i", output="o", errors_output="e", data_format="text",
                                         text_fields=(), max_record_bytes=10, **common)
                level = expected_level(declared, oov_policy, unknown, seed_used)
                _check(operator["privacy"], level, oov_policy, unknown, seed_used, mechanism,
                       mech.privacy_statement()["coverage"])


def test_full_coverage_where_the_subset_is_the_whole_vocabulary(neighbour_artifact_dir, tiny_artifact_dir):  # noqa: F811
    """SanText+ with p = 1 sanitizes every word, CusText with one group (K = |V|) is epsilon-DP over the whole
    vocabulary: both then declare 'all', and say nothing is left out."""
    plus = textdp.Privatizer(epsilon=2, mechanism="santext+", artifact=neighbour_artifact_dir, p=1.0)
    one_group = textdp.Privatizer(epsilon=2, mechanism="custext", artifact=tiny_artifact_dir, k=300)
    for privatizer in (plus, one_group):
        statement = privatizer.privacy_statement()
        assert statement["output_coverage"] == {"covered": "all", "not_covered": []} and statement["covered_by_guarantee"]


def test_a_mechanism_that_declares_nothing_is_claimed_to_cover_nothing():
    """A user's own mechanism without a 'coverage' declaration: nothing is claimed (claim less)."""
    coverage = coverage_statement(None, "random", None, False)
    assert coverage["covered"] == "none" and "does not declare" in coverage["not_covered"][0]
    assert coverage_statement({"covered": "most"}, "random", None, False)["covered"] == "none"


@pytest.mark.parametrize("mechanism, level", [("truncated-gumbel", "none"), ("custext", "subset")])
def test_pipeline_summaries_follow_the_mechanism(neighbour_artifact_dir, tmp_path, mechanism, level):  # noqa: F811
    """The real privatize job: both summaries carry the mechanism's coverage, covered_by_guarantee false."""
    path = tmp_path / "in.txt"
    path.write_text("a good movie\nthe plot was thin\n", encoding="utf-8")
    output, public = str(tmp_path / "out" / "run"), str(tmp_path / "public.json")
    assert run([f"--input={path}", f"--output={output}", f"--artifact={neighbour_artifact_dir}",
                "--runner=FnApiRunner", f"--epsilon={EPSILON.get(mechanism, 2)}", f"--mechanism={mechanism}",
                f"--public-summary={public}"]) == 0
    for document in (json.load(open(output + "-summary.json", encoding="utf-8")),
                     json.load(open(public, encoding="utf-8"))):
        assert document["privacy"]["output_coverage"]["covered"] == level
        assert document["privacy"]["covered_by_guarantee"] is False
