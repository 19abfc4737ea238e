"""Round-6 hostile findings fixed on branch fix6a (issue 25): F12 (a Privatizer inherited through fork shares its
noise generator), F4 (an artifact whose scale makes an ordinary epsilon the identity) and F3 (a custom mechanism that
changes no word). Real runs: real multiprocessing (fork), the local runner, real GloVe fixtures."""

import multiprocessing as mp
import os

import pytest

import textdp

TEXT = " ".join(["the was our and"] * 12)  # 48 vocabulary words


def _release_in_child(queue):
    queue.put(_PRIVATIZER.privatize([TEXT])[0])


_PRIVATIZER = None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method")
def test_forked_children_draw_their_own_noise(tiny_artifact_dir):
    """F12: a module-level Privatizer used by processes forked from this one (multiprocessing's fork start method)
    must not reuse the parent's generator state: two children's first releases, and the parent's own next release,
    differ. Statistics: at epsilon 1 over the 300-word GloVe artifact each of the 48 words is released nearly
    uniformly (noise norm ~50 against neighbour distances ~4); even granting each word a chance of 1/2 of
    coinciding, two independent releases are equal with probability at most 2**-48 per pair, so this test fails by
    chance with probability below 3 * 2**-48 (~1e-14). Under the bug every pair is equal with probability 1."""
    global _PRIVATIZER
    _PRIVATIZER = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, progress=False)
    context = mp.get_context("fork")
    queue = context.Queue()
    children = [context.Process(target=_release_in_child, args=(queue,)) for _ in range(2)]
    for child in children:
        child.start()
    releases = [queue.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    parent = _PRIVATIZER.privatize([TEXT])[0]
    assert len(set(releases + [parent])) == 3, "a forked child released the same noise as another process"


def test_a_seed_is_reproducible_in_every_process(tiny_artifact_dir):
    """The documented policy: ``seed=`` (tests only, not private) gives the same release in a forked child as in the
    parent: the seed, not the process, decides the noise."""
    global _PRIVATIZER
    _PRIVATIZER = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, progress=False)
    context = mp.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=lambda q: q.put(_PRIVATIZER.privatize([TEXT], seed=7)[0]), args=(queue,))
    child.start()
    released = queue.get(timeout=120)
    child.join(timeout=60)
    assert released == _PRIVATIZER.privatize([TEXT], seed=7)[0]


# --- F4: epsilon on the artifact's own scale -----------------------------------------------------------------------

import glob  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402

from pipelines.cli import main as cli_main  # noqa: E402
from tests.custom_mechanism import CappedExponential  # noqa: E402
from textdp.artifact.store import artifact_neighbour_distance, neighbour_distance  # noqa: E402

RUNNER = ["--runner=FnApiRunner"]
WORDS = ("alice was cold and the waiter forgot our drinks so we left early to find another place with good food "
         "at last").split()


def _quantized_artifact(tmp_path) -> str:
    """20 real words x 8 dimensions of round(127 * N(0, 1)) integers: a GloVe-format file as an int8-quantized export
    writes it (the round-6 repro), built with build-index."""
    rng = np.random.default_rng(5)
    source = tmp_path / "q127.txt"
    source.write_text("".join(f"{w} " + " ".join(str(int(v)) for v in np.round(127 * rng.standard_normal(8))) + "\n"
                              for w in WORDS[:20]), encoding="utf-8")
    out = str(tmp_path / "a_q127")
    assert cli_main(["build-index", f"--embeddings={source}", f"--output={out}"]) == 0
    return out


def _run(tmp_path, artifact, *flags, text="alice was cold and the waiter forgot our drinks\n"):
    source = tmp_path / "in.txt"
    source.write_text(text, encoding="utf-8")
    output = f"{tmp_path}/o/p"
    code = cli_main(["privatize", f"--input={source}", f"--output={output}", f"--artifact={artifact}",
                     f"--public-summary={tmp_path}/o/pub.json", *flags] + RUNNER)
    summary = json.load(open(f"{output}-summary.json", encoding="utf-8"))
    public = json.load(open(f"{tmp_path}/o/pub.json", encoding="utf-8"))
    released = "".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob(f"{output}-*-of-*.txt")))
    return code, summary, public, released


def test_an_epsilon_that_is_vacuous_on_the_artifacts_scale_is_warned_and_the_figure_stated(tmp_path, capsys):
    """F4: on an artifact whose vectors are x127 (nearest neighbours ~300 apart) Madlib at epsilon 1 released every word
    unchanged with no warning. The manifest now records the typical nearest-neighbour distance; epsilon x that figure
    (~300 > 100) is warned in one line on the console and in both summaries, and the operator summary states it.
    The run's own counters then show no vocabulary word changed: said in both summaries and on the console.
    Statistics: Madlib's noise norm in 8 dimensions at epsilon 1 is Gamma(8, 1); a word changes only when it exceeds
    half the smallest neighbour distance (> 60 here), probability below 1e-20 per word, so the 'changed no vocabulary
    word' assertion fails by chance with probability below 1e-18."""
    artifact = _quantized_artifact(tmp_path)
    manifest = json.load(open(f"{artifact}/manifest.json", encoding="utf-8"))
    figure = manifest["neighbour_distance"]["median"]
    assert figure > 100
    capsys.readouterr()
    code, summary, public, released = _run(tmp_path, artifact, "--epsilon=1")
    out = capsys.readouterr()
    assert code == 0 and released == "alice was cold and the waiter forgot our drinks\n"
    scale = summary["epsilon_scale"]
    assert scale["neighbour_distance"] == figure and scale["epsilon_times_neighbour_distance"] == figure
    phrase = f"epsilon 1 x the artifact's typical nearest-neighbour distance {figure:.4g} = {figure:.4g} is above 100"
    assert phrase in out.err and out.err.count("WARNING:") == 1  # before the run: one line, the scale
    assert any(phrase in w for w in summary["warnings"]) and any(phrase in w for w in public["warnings"])
    nothing = "this run changed no vocabulary word"
    assert f"WARNING: {nothing}: all 9 words" in out.out
    assert any(w.startswith(f"{nothing}: all 9 words") for w in summary["warnings"])
    assert [w for w in public["warnings"] if nothing in w] and not any("9" in w for w in public["warnings"] if nothing in w)


def test_an_ordinary_epsilon_on_glove_is_not_warned(tiny_artifact_dir, tmp_path, capsys):
    """The figure replaces the fixed 'epsilon > 100' rule without warning ordinary GloVe runs: epsilon 10 on the
    300-word GloVe 50d artifact (typical neighbour distance ~2.2, figure ~22) runs with no warning, and states it.
    Statistics: Madlib's noise norm at epsilon 10 in 50 dimensions is ~5, twice the neighbour distance: the chance
    that all 48 words come back unchanged is far below 1e-12."""
    code, summary, public, _ = _run(tmp_path, tiny_artifact_dir, "--epsilon=10", text=TEXT + "\n")
    assert code == 0 and summary["warnings"] == [] and public["warnings"] == []
    assert 10 < summary["epsilon_scale"]["epsilon_times_neighbour_distance"] < 100
    assert "WARNING" not in capsys.readouterr().err


def test_an_artifact_built_before_the_figure_gets_it_computed_the_same_way(tiny_artifact_dir, tmp_path):
    """Old artifacts (no ``neighbour_distance`` in the manifest) are handled: the launcher computes the same figure
    from the vectors (the same deterministic sample); a remote one without it falls back to epsilon against 100."""
    from textdp.artifact.store import Artifact
    from textdp.privacy.statements import scale_warnings

    manifest = json.load(open(f"{tiny_artifact_dir}/manifest.json", encoding="utf-8"))
    old = {key: value for key, value in manifest.items() if key != "neighbour_distance"}
    computed = artifact_neighbour_distance(tiny_artifact_dir, old)
    assert computed["median"] == manifest["neighbour_distance"]["median"]
    assert computed["median"] == neighbour_distance(Artifact(tiny_artifact_dir).vectors)["median"]
    assert artifact_neighbour_distance(None, old) is None  # a gs:// artifact: no local vectors
    assert scale_warnings(500, None) and not scale_warnings(50, None)


# --- F3: a custom mechanism that changes nothing ------------------------------------------------------------------


class Ident(CappedExponential):
    """A user's mechanism that releases every word unchanged (a noise scale mis-set)."""

    name = "r6-ident"

    def privatize_ids(self, ids, rng):
        return np.asarray(ids, dtype=np.int64).copy()


def test_a_custom_mechanism_that_changes_no_word_is_warned_on_trial_and_after_the_run(tiny_artifact_dir, tmp_path,
                                                                                       capsys):
    """F3: the launcher's trial release (64 ids, ``trial_build``) changed none: one WARNING line before the run, in both
    summaries; and the run's counters show no vocabulary word changed: said on the console and in both summaries.
    Deterministic (the mechanism is the identity)."""
    capsys.readouterr()
    code, summary, public, released = _run(tmp_path, tiny_artifact_dir, "--epsilon=10",
                                           "--mechanism=tests.test_hostile_round6a:Ident", text=TEXT + "\n")
    out = capsys.readouterr()
    assert code == 0 and released == TEXT + "\n"
    trial = "released each of the 64 vocabulary words of the launcher's trial as itself"
    assert trial in out.err and any(trial in w for w in summary["warnings"]) and any(trial in w for w in public["warnings"])
    assert "WARNING: this run changed no vocabulary word: all 48 words" in out.out
    assert any("this run changed no vocabulary word" in w for w in public["warnings"])


def test_the_no_change_warning_counts_vocabulary_words_only():
    """The end-of-run sentence is exact from the counters: unknown words count as changed under random/unk, not keep."""
    from textdp.privacy.statements import no_change_warning

    assert no_change_warning(10, 4, 4, "random") and no_change_warning(10, 4, 4, "unk")
    assert not no_change_warning(10, 5, 4, "random")
    assert no_change_warning(10, 0, 4, "keep") and not no_change_warning(10, 1, 4, "keep")
    assert not no_change_warning(4, 4, 4, "random")  # no vocabulary word in the input: nothing to say
