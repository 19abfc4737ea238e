"""Shared fixtures: real GloVe artifacts and the IMDb data from ../shared/data.

Everything here is real: artifacts are built from the bundled GloVe 6B 50d vectors, and corpora
come from the IMDb reviews. Nothing is mocked.
"""

import os

import pytest

from benchmarks.harness import IMDB, REPO, SHARED_DATA, read_imdb  # noqa: F401  (one IMDb reader for tests and benchmarks)
from textdp.artifact.embeddings import BUNDLED_GLOVE, EmbeddingSource
from textdp.artifact.locate import open_artifact
from textdp.artifact.store import build_artifact, ensure_default_artifact

SHARED_ART300 = "/tmp/art300"  # the 300-word artifact several test modules read by path (read-only: never write into it)


def pytest_configure(config):
    """Build the shared 300-word artifact at SHARED_ART300 before collection when it is not there (a fresh machine:
    the modules that read it by path would otherwise skip or fail). Built beside it and renamed into place, so two
    sessions starting at once cannot see half of it."""
    if os.path.isfile(os.path.join(SHARED_ART300, "manifest.json")):
        return
    import shutil
    import tempfile

    staging = tempfile.mkdtemp(prefix="art300-", dir=os.path.dirname(SHARED_ART300))
    try:
        build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), os.path.join(staging, "a"), vocab_size=300, trees=5,
                       seed=0)
        try:
            os.rename(os.path.join(staging, "a"), SHARED_ART300)
        except OSError:  # another session put it there first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture(scope="session")
def imdb_rows():
    assert os.path.exists(IMDB), f"test data missing: {IMDB} (tests expect ../shared/data beside the repo)"
    return read_imdb(limit=2000)


@pytest.fixture(scope="session")
def small_artifact_dir(tmp_path_factory):
    """A real artifact: the 5,000 most frequent GloVe 6B 50d words, 10 Annoy trees."""
    path = str(tmp_path_factory.mktemp("artifacts") / "glove5k")
    return build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), path, vocab_size=5000, trees=10, seed=0)


@pytest.fixture(scope="session")
def tiny_artifact_dir(tmp_path_factory):
    """A real artifact of the 300 most frequent GloVe 6B 50d words (5 Annoy trees): fast transform tests."""
    path = str(tmp_path_factory.mktemp("artifacts") / "glove300")
    return build_artifact(EmbeddingSource("bundled", BUNDLED_GLOVE), path, vocab_size=300, trees=5, seed=0)


@pytest.fixture(scope="session")
def small_artifact(small_artifact_dir):
    return open_artifact(small_artifact_dir)


@pytest.fixture(scope="session")
def default_artifact_dir():
    """The full 400k-word default artifact, built once into the user cache (as the product does)."""
    return ensure_default_artifact()


@pytest.fixture(scope="session")
def default_artifact(default_artifact_dir):
    return open_artifact(default_artifact_dir)
