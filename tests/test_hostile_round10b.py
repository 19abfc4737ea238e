"""Red-team round-10 findings R10-1 and R10-8 (issue 25), fixed on branch fix10b.

Real runs of the CLI on the local runner (FnApiRunner) over the real GloVe test artifact; nothing is mocked. No test
here is statistical (only files, exit codes and console lines are compared).
"""

from __future__ import annotations

import glob
import json
import os

from pipelines.cli import main as cli_main
from tests.test_hostile_round6b import _input
from textdp.outputs import EARLIER_FOLDER_PREFIX, FAILED_FOLDER_PREFIX, read_attached

RUNNER = "--runner=FnApiRunner"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(artifact, *args) -> int:
    return cli_main(["privatize", "--epsilon=10", f"--artifact={artifact}", RUNNER, *args])


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


# --- R10-1: an attached public summary that is now another release's -------------------------------------------


def _two_releases_one_publishing_path(tmp_path, artifact) -> tuple:
    """Release p with --public-summary pub.json, pub.json moved away (published), then release q with the same
    --public-summary: pub.json is q's, and p's run record still lists it as ``attached``."""
    source, out = _input(tmp_path), tmp_path / "f"
    p, q, pub = str(out / "p"), str(out / "q"), str(out / "pub.json")
    assert _run(artifact, f"--input={source}", f"--output={p}", f"--public-summary={pub}") == 0
    os.rename(pub, str(tmp_path / "published-p.json"))
    assert _run(artifact, f"--input={source}", f"--output={q}", f"--public-summary={pub}") == 0
    assert read_attached(f"{p}.textdp-run.json") == [pub] and read_attached(f"{q}.textdp-run.json") == [pub]
    assert json.loads(_read(pub))["output"].startswith(q + "-")
    return source, p, q, pub


def test_overwrite_leaves_an_attached_public_summary_that_is_now_another_releases(tmp_path, tiny_artifact_dir,
                                                                                  capsys):
    """R10-1: `--overwrite` of p (no --public-summary) used to move aside and delete pub.json, although it had become
    q's public summary (its "output" names q). Now it stays byte-identical, the console says so in one line, the run
    succeeds, and p's new run record no longer attaches it (so later runs of p leave it alone too)."""
    source, p, q, pub = _two_releases_one_publishing_path(tmp_path, tiny_artifact_dir)
    before = _read(pub)
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={p}", "--overwrite") == 0
    err = capsys.readouterr().err
    assert _read(pub) == before
    said = [line for line in err.splitlines() if "left in place" in line]
    assert len(said) == 1 and "is now the public summary of another release" in said[0] and q in said[0], err
    assert read_attached(f"{p}.textdp-run.json") == [] and read_attached(f"{q}.textdp-run.json") == [pub]
    assert not glob.glob(str(tmp_path / "f" / f"{EARLIER_FOLDER_PREFIX}*"))
    assert not glob.glob(str(tmp_path / "f" / f"{FAILED_FOLDER_PREFIX}*"))


def test_overwrite_with_the_public_summary_of_another_release_is_refused_though_attached(tmp_path,
                                                                                        tiny_artifact_dir, capsys):
    """R10-1 variant: `--overwrite --public-summary pub.json` for p, whose run record attaches pub.json but pub.json
    is now q's: refused before the run in one line (exit 2), every file byte-identical (it used to replace q's public
    summary with p's)."""
    source, p, q, pub = _two_releases_one_publishing_path(tmp_path, tiny_artifact_dir)
    before = {path: _read(path) for path in glob.glob(str(tmp_path / "f" / "*"))}
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", f"--output={p}", "--overwrite", f"--public-summary={pub}") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is the public summary of another release" in err, err
    assert {path: _read(path) for path in glob.glob(str(tmp_path / "f" / "*"))} == before


def test_overwrite_still_replaces_its_own_public_summary_given_relative_to_another_directory(
        tmp_path, tiny_artifact_dir, monkeypatch, capsys):
    """The rule still knows a release's own public summary when its --output was given relative to another
    working directory (the summary's "output" is that relative path): --overwrite from elsewhere replaces it, with
    --public-summary (exit 0, now naming the new path) and without (moved aside and removed)."""
    source = _input(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert _run(tiny_artifact_dir, f"--input={source}", "--output=o/p", "--public-summary=o/pub.json") == 0
    pub = str(tmp_path / "work" / "o" / "pub.json")
    assert json.loads(_read(pub))["output"].startswith("o/p-")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert _run(tiny_artifact_dir, f"--input={source}", "--output=work/o/p", "--overwrite",
                "--public-summary=work/o/pub.json") == 0
    assert "left in place" not in capsys.readouterr().err
    assert json.loads(_read(pub))["output"].startswith("work/o/p-")
    monkeypatch.chdir(tmp_path / "work")
    assert _run(tiny_artifact_dir, f"--input={source}", "--output=o/p", "--overwrite") == 0
    assert not os.path.exists(pub) and not glob.glob(str(tmp_path / "work" / "o" / f"{EARLIER_FOLDER_PREFIX}*"))
