"""CluSanT (textdp/mechanisms/clusant.py): its public clusters, its exact law, its sampler and its guarantee, on the
5,000-word GloVe fixture with its K=40 Euclidean neighbour table; then the CLI (privatize, calibrate,
audit) with the FnApiRunner.

Statistical tests: 3 G-tests of the sampler against the closed form (200,000 draws each) at
significance 1e-4: a correct sampler fails this file with probability below 3e-4. Power: the same
draws are rejected (p < 1e-4) against the law at 1.25 x epsilon and against the law with the two
stages' epsilons swapped (those checks fail only if the sampler is wrong in that way, or by a chance
the test states as below 1e-4 when the alternative is far enough, which the asserted distance shows).
Draws use fixed seeds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import textdp
from pipelines.cli import main as cli_main
from tests.statcheck import g_test
from tests.test_neighbours import neighbour_artifact_dir  # noqa: F401  (fixture)
from textdp.artifact.locate import open_artifact
from textdp.errors import ParameterError, TextdpError
from textdp.mechanisms import ManifestFacts, check_mechanism, make_mechanism
from textdp.mechanisms.clusant import CluSanT, build_clusters, cluster_size
from textdp.mechanisms.custext import build_output_sets
from textdp.mechanisms.exponential import exact_distribution as exponential_law
from textdp.search.geometry import distance_row

ALPHA = 1e-4
DRAWS = 200_000
RUNNER = ["--runner=FnApiRunner"]
# a law concentrated enough to be tested: 100 clusters of 50 words, epsilon 8, K = 4, 30% on the clusters
LAW = {"clusant_clusters": 100, "clusant_scale": 4.0, "clusant_cluster_share": 0.3}


@pytest.fixture(scope="module")
def artifact(neighbour_artifact_dir):  # noqa: F811
    return open_artifact(neighbour_artifact_dir)


@pytest.fixture(scope="module")
def vectors(artifact):
    return np.asarray(artifact.vectors, dtype=np.float64)


def by_formula(vectors, members, word, epsilon, scale, share):
    """P(o | word) written straight from the paper's two stages (a loop over clusters, float64)."""
    e1, e2 = share * epsilon, (1 - share) * epsilon
    groups = [row[row >= 0] for row in members]
    centroids = np.array([vectors[g].mean(axis=0) for g in groups])
    own = next(j for j, g in enumerate(groups) if word in g)
    first = np.exp(-e1 * scale * np.linalg.norm(centroids - centroids[own], axis=1) / 2)
    first /= first.sum()
    probs = np.zeros(len(vectors))
    for j, g in enumerate(groups):
        points = vectors[g]
        diameter = max(np.linalg.norm(points - p, axis=1).max() for p in points)
        d = np.linalg.norm(points - vectors[word], axis=1)
        weights = np.exp(-e2 * d / (2 * diameter)) if diameter > 0 else np.ones(len(g))
        probs[g] = first[j] * weights / weights.sum()
    return probs


# --- the clusters ------------------------------------------------------------------------------------


def test_clusters_are_a_deterministic_partition_of_the_public_vocabulary(artifact, vectors):
    """Every word in exactly one cluster of s = ceil(|V| / C) words (the last smaller), the same clusters
    with or without the neighbour table, equal to CusText's greedy groups of s words; at most C clusters."""
    for requested in (100, 300, 7):
        size = cluster_size(artifact.vocab_size, requested)
        with_table = build_clusters(vectors, size, np.asarray(open_artifact_table(artifact)))
        without = build_clusters(vectors, size, None)
        np.testing.assert_array_equal(with_table["members"], without["members"])
        labels, members = with_table["labels"], with_table["members"]
        assert len(members) <= requested and np.bincount(labels).sum() == artifact.vocab_size
        sizes = (members >= 0).sum(axis=1)
        assert (sizes[:-1] == size).all() and 1 <= sizes[-1] <= size
        for j, row in enumerate(members):
            assert (labels[row[row >= 0]] == j).all()
        set_ids, _, _ = build_output_sets(vectors, size, None)
        for row in members[:5]:
            assert set(set_ids[row[0]][set_ids[row[0]] >= 0]) == set(row[row >= 0])


def open_artifact_table(artifact):
    from textdp.artifact.neighbours import NeighbourTable

    return NeighbourTable.from_artifact(artifact).ids


def test_default_clusters_hold_about_forty_words(artifact):
    mech = make_mechanism("clusant", artifact, 2.0)
    assert mech.parameters()["cluster_words"] == 40 and mech.parameters()["clusters"] == 125
    assert "clusant_clusters" not in mech.parameters()  # derived, not given


# --- the exact law -----------------------------------------------------------------------------------


@pytest.mark.parametrize("word", [3, 777, 4999])
@pytest.mark.parametrize("epsilon, scale, share", [(8.0, 4.0, 0.3), (1.0, 0.0, 0.5), (30.0, 1.0, 1.0)])
def test_exact_law_sums_to_one_and_is_the_paper_formula(artifact, vectors, word, epsilon, scale, share):
    mech = CluSanT(artifact, epsilon, clusters=100, scale=scale, share=share)
    law = mech.exact_distribution(distance_row(vectors, word), word)
    assert abs(law.sum() - 1.0) < 1e-12 and (law >= 0).all()
    np.testing.assert_allclose(law, by_formula(vectors, mech.clusters["members"], word, epsilon, scale, share),
                               rtol=1e-9, atol=1e-300)


def test_one_cluster_is_santext_and_one_word_clusters_are_santext_over_words(artifact, vectors):
    """C = 1: SanText at epsilon_2 / diameter; C = |V|: SanText over the words at epsilon_1 K (the two
    ends the paper spans)."""
    word = 55
    row = distance_row(vectors, word)
    one = CluSanT(artifact, 6.0, clusters=1, share=0.5)
    diameter = one.clusters["diameters"][0]
    np.testing.assert_allclose(one.exact_distribution(row, word), exponential_law(vectors, word, 3.0 / diameter),
                               rtol=1e-9, atol=1e-300)
    singletons = CluSanT(artifact, 6.0, clusters=artifact.vocab_size, scale=2.0, share=0.5)
    assert singletons.parameters()["clusters"] == artifact.vocab_size
    np.testing.assert_allclose(singletons.exact_distribution(row, word), exponential_law(vectors, word, 3.0 * 2.0),
                               rtol=1e-7, atol=1e-300)


# --- the sampler against the closed form --------------------------------------------------------------


@pytest.mark.parametrize("word", [12, 2500])
def test_sampler_matches_the_closed_form_and_the_test_has_power(artifact, vectors, word):
    epsilon = 8.0
    mech = make_mechanism("clusant", artifact, epsilon, **LAW)
    row = distance_row(vectors, word)
    law = mech.exact_distribution(row, word)
    assert (law > 0.005).sum() >= 5  # several likely outputs: the test means something
    released = mech.privatize_ids(np.full(DRAWS, word), np.random.default_rng(word))
    counts = np.bincount(released, minlength=artifact.vocab_size)
    assert g_test(counts, law) > ALPHA
    hotter = make_mechanism("clusant", artifact, 1.25 * epsilon, **LAW).exact_distribution(row, word)
    swapped = make_mechanism("clusant", artifact, epsilon, **dict(LAW, clusant_cluster_share=0.7))
    swapped_law = swapped.exact_distribution(row, word)
    for other in (hotter, swapped_law):
        assert 0.5 * np.abs(other - law).sum() > 0.02  # far enough that 200,000 draws tell them apart
        assert g_test(counts, other) < ALPHA


def test_a_mixed_batch_draws_each_token_from_its_own_law(artifact, vectors):
    """Tokens of many clusters in one call (the batch path: per-cluster rows, chunked word stage): the
    releases of one word inside a mixed batch follow its law."""
    mech = make_mechanism("clusant", artifact, 8.0, **LAW)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, artifact.vocab_size, size=DRAWS)
    ids[::2] = 99
    released = mech.privatize_ids(ids, rng)
    counts = np.bincount(released[ids == 99], minlength=artifact.vocab_size)
    assert g_test(counts, mech.exact_distribution(distance_row(vectors, 99), 99)) > ALPHA


# --- the guarantee, exactly on the law -----------------------------------------------------------------


def boundary_pairs(mech, vectors, count=8):
    """Each of ``count`` words with its nearest word of another cluster (close pairs across a boundary)."""
    labels = mech.clusters["labels"]
    pairs = []
    for word in range(0, len(vectors), len(vectors) // count):
        row = np.where(labels == labels[word], np.inf, distance_row(vectors, word))
        pairs.append((word, int(np.argmin(row))))
    return pairs


@pytest.mark.parametrize("params", [LAW, {}, {"clusant_clusters": 5000, "clusant_scale": 3.0}])
def test_metric_dp_bound_holds_exactly_for_pairs_of_words(artifact, vectors, params):
    """For pairs in one cluster, close pairs across a cluster boundary and far pairs: every output's log
    ratio is within the per-output bound (epsilon_1 K ||mu_a - mu_b|| + epsilon_2 min(1, d / Delta_c(o))),
    the worst within the stated set bound (Delta_min) and within token_epsilon0(d)."""
    epsilon = 4.0
    mech = make_mechanism("clusant", artifact, epsilon, **params)
    labels, members = mech.clusters["labels"], mech.clusters["members"]
    same = [(int(row[0]), int(row[1])) for row in members[:4] if (row >= 0).sum() > 1]
    pairs = same + boundary_pairs(mech, vectors) + [(0, 4999), (17, 3001)]
    laws = {}
    for word in {w for pair in pairs for w in pair}:
        laws[word] = mech.exact_distribution(distance_row(vectors, word), word)
    for x, y in pairs:
        d = float(np.linalg.norm(vectors[x] - vectors[y]))
        log_ratio = np.log(laws[x]) - np.log(laws[y])
        per_output = np.array([mech.pair_bound(x, y, d, labels[o]) for o in range(len(vectors))])
        assert (log_ratio <= per_output + 1e-9).all(), (x, y)
        assert np.abs(log_ratio).max() <= mech.pair_bound(x, y, d) + 1e-9
        assert mech.pair_bound(x, y, d) <= mech.token_epsilon0(d) + 1e-12
        if labels[x] == labels[y]:
            assert mech.pair_bound(x, y, d) <= mech.epsilon2 + 1e-12  # the cluster stage costs nothing


def test_the_bound_is_not_epsilon_times_the_word_distance(artifact, vectors):
    """Why the statement names the centroids: a close pair across a cluster boundary exceeds exp(epsilon d)
    on the fixture, while staying within the stated bound."""
    epsilon = 4.0
    mech = make_mechanism("clusant", artifact, epsilon, **LAW)
    worst = 0.0
    for x, y in boundary_pairs(mech, vectors, count=40):
        d = float(np.linalg.norm(vectors[x] - vectors[y]))
        lx = mech.exact_distribution(distance_row(vectors, x), x)
        ly = mech.exact_distribution(distance_row(vectors, y), y)
        excess = np.abs(np.log(lx) - np.log(ly)).max() - epsilon * d
        worst = max(worst, excess)
    assert worst > 0.1


def test_statement_numbers_come_from_the_run(artifact):
    mech = make_mechanism("clusant", artifact, 5.0, **LAW)
    statement = mech.privacy_statement()
    assert statement["coverage"] == {"covered": "all"}
    e1k = 0.3 * 5.0 * 4.0
    assert f"exp({e1k:g} * ||mu_c(x) - mu_c(x')|| + {0.7 * 5.0:g} * min(1, d(x, x') / {mech.min_diameter:.6g}))" \
        in statement["per_token"]
    assert "100 clusters of 50 words" in statement["notion"] and "K = 4" in statement["notion"]
    params = mech.parameters()
    assert params["epsilon_cluster"] + params["epsilon_word"] == 5.0 and params["clusters"] == 100
    # epsilon_0 over the vocabulary: the cluster stage at the centroids' diameter bound, plus epsilon_2
    assert mech.token_epsilon0(100.0) == pytest.approx(e1k * mech.centroid_diameter + 0.7 * 5.0)


# --- refusals ----------------------------------------------------------------------------------------


def test_refusals(artifact, neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    size = artifact.vocab_size
    with pytest.raises(ParameterError, match="at most the vocabulary's 5,000 words"):
        check_mechanism("clusant", 1.0, artifact, clusant_clusters=size + 1)
    check_mechanism("clusant", 1.0, artifact, clusant_clusters=size)  # one word per cluster is fine
    large = ManifestFacts({"vocab_size": 400_000})  # what a launcher knows of the 400k artifact
    with pytest.raises(ParameterError, match="use 1 or at least 1,195 clusters"):
        check_mechanism("clusant", 1.0, large, clusant_clusters=2)
    for fine in (1, 1195, None):
        check_mechanism("clusant", 1.0, large, clusant_clusters=fine)
    for bad in ({"clusant_clusters": 0}, {"clusant_clusters": 2.5}, {"clusant_scale": -1.0},
                {"clusant_scale": float("inf")}, {"clusant_cluster_share": 1.5}, {"clusant_cluster_share": -0.1}):
        with pytest.raises(ParameterError):
            check_mechanism("clusant", 1.0, None, **bad)
    with pytest.raises(TextdpError, match="clusant clusters"):
        textdp.Privatizer(epsilon=1.0, mechanism="clusant", artifact=neighbour_artifact_dir, clusant_clusters=size + 1)
    source = tmp_path / "in.txt"
    source.write_text("the movie was good\n", encoding="utf-8")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path / 'out'}", "--epsilon=2",
                     "--mechanism=clusant", f"--artifact={neighbour_artifact_dir}", f"--clusant-clusters={size + 1}"]
                    + RUNNER)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("textdp privatize: error:") and "clusant clusters" in err[0]
    assert not list(tmp_path.glob("out*"))


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# --- end to end ----------------------------------------------------------------------------------------


def test_privatize_cli_end_to_end(neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    source = tmp_path / "in.txt"
    texts = ["the movie was good", "a quiet room near the station", "qqzzxv unknown words here"]
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = str(tmp_path / "out")
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=6", "--mechanism=clusant",
                     f"--artifact={neighbour_artifact_dir}", "--clusant-clusters=100", "--clusant-scale=4",
                     "--clusant-cluster-share=0.3"] + RUNNER) == 0
    capsys.readouterr()
    summary = read_json(output + "-summary.json")
    assert summary["records"]["in"] == summary["records"]["out"] == 3
    assert summary["mechanism"]["clusant_clusters"] == 100 and summary["mechanism"]["clusters"] == 100
    assert summary["privacy"]["coverage"] == {"covered": "all"}
    assert "exp(7.2 * ||mu_c(x) - mu_c(x')||" in summary["privacy"]["per_token"]
    released = [line for path in sorted(tmp_path.glob("out-*")) if "summary" not in path.name
                for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(len(line.split(" ")) for line in released) == sorted(len(t.split(" ")) for t in texts)
    assert not any("qqzzxv" in line for line in released)


def test_calibrate_and_audit_run_clusant(neighbour_artifact_dir, tmp_path, capsys):  # noqa: F811
    flags = ["--mechanism=clusant", "--clusant-clusters=100", "--clusant-scale=4", "--clusant-cluster-share=0.3"]
    cal = str(tmp_path / "cal")
    assert cli_main(["calibrate", f"--artifact={neighbour_artifact_dir}", "--words=3", "--samples=200",
                     "--epsilons=4,8", f"--output={cal}"] + flags + RUNNER) == 0
    summary = read_json(f"{cal}/summary.json")
    assert summary["mechanism"] == "clusant" and "n_w_exact" in summary["statistics"]["8"]
    with open(f"{cal}/report.html", encoding="utf-8") as report:
        assert "N_w exact (CluSanT closed form)" in report.read()
    audit = str(tmp_path / "audit")
    assert cli_main(["audit", f"--artifact={neighbour_artifact_dir}", "--epsilons=4", "--checks=self-check",
                     "--pairs=5", "--draws=4000", "--seed=3", f"--output={audit}"] + flags + RUNNER) == 0
    capsys.readouterr()
    check = read_json(f"{audit}/summary.json")["self_check"]
    assert check["status"] == "pass", check.get("worst_violations")
    assert check["tests_run"] == check["planned_tests"] > 0
