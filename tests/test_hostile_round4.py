"""Fourth hostile round (issue 25), the mechanism / bring-your-own findings: N3 (what privatize_ids returns is
checked before anything is released), N2 (a custom parameter named like textdp's or Beam's own flags and keywords),
N4 (a constructor that raises, a class without the methods), N6 (clusant's clusters of one word at a scale that is
the identity), N11 (a module that exits at import), N15 (another package's broken entry_points.txt) and the
mechanism names. Real components: the GloVe fixtures of tests/conftest.py, FnApiRunner through the CLI, a real
dist-info directory on sys.path. The broken classes: tests/broken_custom_mechanisms.py."""

from __future__ import annotations

import argparse
import inspect
import os
import warnings

import numpy as np
import pytest

import textdp
from pipelines.cli import main as cli_main
from tests import broken_custom_mechanisms as broken
from tests.test_custom_mechanism import RUNNER, TEXTS, corpus, privatize_argv  # noqa: F401  (corpus: a fixture)
from textdp.artifact.store import Artifact
from textdp.errors import ParameterError, TextdpError
from textdp.mechanisms import (
    BUILT_IN,
    PROBE_IDS,
    RESERVED_PARAMETER_NAMES,
    all_parameters,
    check_mechanism,
    make_mechanism,
    mechanism_class,
)
from textdp.text.privatizer import TextPrivatizer, released_ids

MODULE = "tests.broken_custom_mechanisms"


def one_line(capsys, argv, code, *phrases) -> str:
    """Run ``argv``; assert exit ``code`` with one error line holding ``phrases``; return the line."""
    assert cli_main(argv) == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"textdp {argv[0]}: error: "), err
    for phrase in phrases:
        assert phrase in err[0], err[0]
    return err[0]


def outputs(tmp_path) -> list:
    return [name for name in os.listdir(tmp_path) if name.startswith("out")]


# --- N3: what a mechanism releases is checked -------------------------------------------------------------------


@pytest.mark.parametrize("cls, phrase", [
    (broken.BadIds, "the id -1, outside the vocabulary's [0, 300)"),
    (broken.TooLargeIds, "the id 300, outside the vocabulary's [0, 300)"),
    (broken.FloatIds, "an array of float64, not of integers"),
    (broken.ShortIds, "an array of shape"),
])
def test_released_ids_outside_the_vocabulary_are_never_released(cls, phrase, tiny_artifact_dir):
    artifact = Artifact(tiny_artifact_dir)
    mechanism = cls(artifact, 3.0)
    privatizer = TextPrivatizer(mechanism, artifact.words, artifact.word_to_id)
    for policy in ("random", "keep"):
        privatizer.oov_policy = policy
        with pytest.raises(TextdpError, match=r"mechanism '%s' \(%s\.%s\): privatize_ids returned" % (
                cls.name, MODULE, cls.__qualname__)) as caught:
            privatizer.privatize(TEXTS, np.random.default_rng(0))
        assert phrase in str(caught.value)
        assert not any(word in str(caught.value) for word in ("movie", "quiet", "station"))


def test_a_list_of_vocabulary_ids_is_accepted(tiny_artifact_dir):
    artifact = Artifact(tiny_artifact_dir)
    out = released_ids(broken.ListIds(artifact, 3.0), np.arange(10), np.random.default_rng(0), artifact.vocab_size)
    assert out.dtype == np.int64 and out.shape == (10,) and 0 <= out.min() and out.max() < artifact.vocab_size


@pytest.mark.parametrize("name, phrase", [("BadIds", "the id -1"), ("FloatIds", "float64"), ("ShortIds", "shape")])
def test_the_launcher_tries_a_custom_mechanism_before_the_run(name, phrase, tmp_path, corpus, tiny_artifact_dir,
                                                              capsys):
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir, f"--mechanism={MODULE}:{name}"),
             2, "privatize_ids returned", phrase)
    assert not outputs(tmp_path)


def test_bad_ids_found_only_in_the_worker_fail_the_run_and_release_nothing(tmp_path, corpus, tiny_artifact_dir,
                                                                           capsys):
    artifact = Artifact(tiny_artifact_dir)
    assert any(artifact.word_to_id.get(word, -1) >= PROBE_IDS for text in TEXTS for word in text.split())
    line = one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir,
                                           f"--mechanism={MODULE}:LateBadIds"),
                    1, "privatize_ids returned the id -1", "nothing was released", "PerturbTokens")
    assert not any(word in line for word in ("movie", "quiet", "station"))
    for name in outputs(tmp_path):  # nothing of the input is released
        if os.path.isfile(tmp_path / name):
            assert "quiet room" not in (tmp_path / name).read_text(encoding="utf-8", errors="replace")


def test_the_api_refuses_a_mechanism_with_bad_ids(tiny_artifact_dir):
    with pytest.raises(TextdpError, match="privatize_ids returned the id -1"):
        textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir, mechanism=broken.LateBadIds).privatize(TEXTS)


# --- N2: a custom parameter cannot be one of textdp's (or Beam's) own flags and keywords ------------------------


@pytest.mark.parametrize("cls, phrase", [
    (broken.SeedClash, "'seed', which is textdp's own flag and keyword --seed"),
    (broken.RunnerClash, "'runner'"),
    (broken.UnkClash, "--unk-token"),
    (broken.HyphenClash, "parameter named 'search-k'"),
])
def test_a_custom_parameter_named_like_a_core_flag_is_refused(cls, phrase, tmp_path, corpus, tiny_artifact_dir,
                                                              capsys):
    with pytest.raises(ParameterError, match="parameter") as caught:
        mechanism_class(cls)
    assert phrase in str(caught.value)
    with pytest.raises(ParameterError):  # in Python too: never silently taken by the mechanism (seed=3)
        textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir, mechanism=cls, seed=3)
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir,
                                    f"--mechanism={MODULE}:{cls.__qualname__}"), 2, phrase)
    assert not outputs(tmp_path)


def test_a_custom_parameter_named_like_a_beam_flag_is_refused_on_the_command_line(tmp_path, corpus,
                                                                                   tiny_artifact_dir, capsys):
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir,
                                    f"--mechanism={MODULE}:BeamClash"), 2, "'num_workers'", "--num-workers")


def test_the_reserved_names_cover_every_job_flag_and_api_keyword():
    """RESERVED_PARAMETER_NAMES (a hand list: textdp.mechanisms cannot import the jobs or the API) is checked here
    against what it stands for: every dest of textdp's own job flags and every keyword of Privatizer and
    transforms.Privatize that is not a registered mechanism's parameter."""
    from apache_beam.options.pipeline_options import PipelineOptions

    import pipelines.flags as flags
    from transforms import Privatize

    params = {key for name, param in all_parameters().items() for key in (name,) + param.aliases}
    names = set()
    for obj in vars(flags).values():
        if isinstance(obj, type) and issubclass(obj, PipelineOptions) and obj.__module__ == flags.__name__:
            parser = argparse.ArgumentParser()
            obj._add_argparse_args(parser)
            names |= {action.dest for action in parser._actions if action.dest != "help"}
    for function in (textdp.Privatizer.__init__, Privatize.__init__):
        names |= {name for name, p in inspect.signature(function).parameters.items()
                  if name != "self" and p.kind is not p.VAR_KEYWORD}
    assert names - params - RESERVED_PARAMETER_NAMES == set()
    assert not RESERVED_PARAMETER_NAMES & params  # a mechanism may still reuse a registered Parameter


# --- N4: construction and methods, before the run ---------------------------------------------------------------


def test_a_constructor_that_raises_is_found_before_the_run(tmp_path, corpus, tiny_artifact_dir, capsys):
    line = one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir,
                                           f"--mechanism={MODULE}:InitBoom"),
                    2, "mechanism 'rt-initboom'", "could not be built: RuntimeError: boom in init")
    assert "second line" not in line and not outputs(tmp_path)
    with pytest.raises(TextdpError, match="could not be built: RuntimeError: boom in init$"):
        textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir, mechanism=broken.InitBoom)
    with pytest.raises(TextdpError, match="could not be built"):
        make_mechanism(broken.InitBoom, Artifact(tiny_artifact_dir), 3.0)


def test_a_class_without_the_methods_is_refused_when_resolved(tmp_path, corpus, tiny_artifact_dir, capsys):
    with pytest.raises(ParameterError, match="does not implement privatize_ids, metric_points"):
        mechanism_class(broken.Half)
    with pytest.raises(ParameterError, match="does not implement privatize_ids"):
        textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir, mechanism=broken.Half)
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir, f"--mechanism={MODULE}:Half"),
             2, "does not implement privatize_ids")


# --- N11: a module that exits at import -------------------------------------------------------------------------


def test_a_module_that_exits_at_import_is_refused_in_one_line(tmp_path, monkeypatch, corpus, tiny_artifact_dir,
                                                              capsys):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "exits_at_import_r4.py").write_text("raise SystemExit(0)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(mods))
    with pytest.raises(ParameterError, match=r"cannot be imported \(SystemExit: 0\)"):
        mechanism_class("exits_at_import_r4:X")
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir,
                                    "--mechanism=exits_at_import_r4:X"), 2, "SystemExit")


# --- N15: another package's broken entry points -----------------------------------------------------------------


@pytest.mark.parametrize("group", ["textdp.mechanisms", "other.group"])
def test_a_broken_entry_points_file_of_another_package_is_skipped(group, tmp_path, monkeypatch, corpus,
                                                                  tiny_artifact_dir, capsys):
    site = tmp_path / "site"
    info = site / "badpkg_r4-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: badpkg_r4\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{group}]\nthis line has no equals sign\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        released = textdp.Privatizer(epsilon=3, artifact=tiny_artifact_dir).privatize(TEXTS, seed=1)
    assert len(released) == 2
    assert [str(w.message) for w in caught if "badpkg_r4" in str(w.message)]
    assert cli_main(privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir)) == 0
    capsys.readouterr()


# --- mechanism names ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls, phrase", [
    (broken.Multiline, "no usable name"), (broken.SlashName, "no usable name"), (broken.CaseVariant, "no usable name"),
])
def test_a_mechanism_name_must_be_a_safe_name(cls, phrase):
    with pytest.raises(ParameterError, match=phrase):
        mechanism_class(cls)


def test_an_entry_point_named_like_a_built_in_but_for_case_is_refused(tmp_path, monkeypatch, corpus,
                                                                     tiny_artifact_dir, capsys):
    site = tmp_path / "site"
    info = site / "casepkg_r4-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: casepkg_r4\nVersion: 0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[textdp.mechanisms]\nMadlib = tests.custom_mechanism:CappedExponential\n",
                                           encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    assert "Madlib" not in textdp.mechanisms.registered()
    with pytest.raises(ParameterError, match="casepkg_r4 registers a mechanism named 'Madlib'.*but for case"):
        mechanism_class("madlib")
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir), 2, "casepkg_r4", "but for case")


# --- N6: clusant that would be the identity ---------------------------------------------------------------------


def test_clusant_with_one_word_clusters_at_a_huge_scale_is_refused(tmp_path, corpus, tiny_artifact_dir, capsys):
    artifact = Artifact(tiny_artifact_dir)
    size = artifact.vocab_size
    for scale, share in ((1e6, 1.0), (1000.0, 0.5)):
        with pytest.raises(ParameterError, match="clusters of one word.*every word would be released unchanged"):
            check_mechanism("clusant", 10, artifact, clusant_clusters=size, clusant_scale=scale,
                            clusant_cluster_share=share)
    check_mechanism("clusant", 10, artifact, clusant_clusters=size)  # the default scale changes words
    mechanism = make_mechanism("clusant", artifact, 10, clusant_clusters=size)
    ids = np.arange(size)
    assert (mechanism.privatize_ids(ids, np.random.default_rng(0)) != ids).any()
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir, "--mechanism=clusant",
                                    f"--clusant-clusters={size}", "--clusant-scale=1e6", "--clusant-cluster-share=1"),
             2, "every word would be released unchanged")
    assert not outputs(tmp_path) and BUILT_IN["clusant"]


def test_an_entry_point_class_gets_the_same_interface_checks(tmp_path, monkeypatch, corpus, tiny_artifact_dir,
                                                             capsys):
    site = tmp_path / "site"
    info = site / "seedpkg_r4-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: seedpkg_r4\nVersion: 0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[textdp.mechanisms]\nrt-seed = {MODULE}:SeedClash\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ParameterError, match="'seed', which is textdp's own flag"):
        mechanism_class("rt-seed")
    one_line(capsys, privatize_argv(corpus, str(tmp_path / "out"), tiny_artifact_dir, "--mechanism=rt-seed"),
             2, "'seed', which is textdp's own flag")
    assert cli_main(privatize_argv(corpus, str(tmp_path / "out2"), tiny_artifact_dir)) == 0  # other runs go on
    capsys.readouterr()
