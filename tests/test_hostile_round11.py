"""Red-team round 11 findings on textdp privatize (the real CLI on the local FnApiRunner, real files)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from pipelines.cli import main as cli_main
from textdp.outputs import EARLIER_FOLDER_PREFIX

RUNNER = "--runner=FnApiRunner"


@pytest.mark.parametrize("directory,name", [("rel $(touch PWNED) x; echo", "p"), ("My Releases", "p"), ("plain", ".rel")])
def test_r11_1_the_restore_command_is_safe_to_paste_and_restores_the_release(directory, name, tmp_path,
                                                                             tiny_artifact_dir, capsys):
    """The `mv` a refusal gives for a leftover `.textdp-earlier-*` folder had its paths unquoted: a directory named
    with `$(...)` or `;` ran code when pasted, one with a space moved the wrong things, and a release named with a
    leading dot (`--output dir/.rel`) was not matched by `*`. Now each path is shell-quoted, `--` ends the options,
    and `.[!.]*` is added where the folder holds dot-files: run through a real shell (in tmp_path as the current
    directory), the command puts back every file byte for byte, runs nothing, and the next run goes on."""
    out_dir = tmp_path / directory
    out_dir.mkdir()
    source = tmp_path / "in.txt"
    source.write_text("the cat sat\na dog ran\n", encoding="utf-8")
    output = out_dir / name
    argv = ["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", f"--artifact={tiny_artifact_dir}",
            RUNNER]
    assert cli_main(argv) == 0
    files = [p for p in glob.glob(glob.escape(str(out_dir)) + "/*") + glob.glob(glob.escape(str(out_dir)) + "/.*")
             if not p.endswith(".textdp-run.json") and EARLIER_FOLDER_PREFIX not in p]
    before = {p: open(p, "rb").read() for p in files}
    assert before
    folder = out_dir / f"{EARLIER_FOLDER_PREFIX}abc123"  # what a killed --overwrite run leaves
    folder.mkdir()
    for path in before:
        shutil.move(path, folder / os.path.basename(path))
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "restore it with: mv -- " in err[0], err
    restore = err[0].split("restore it with: ", 1)[1].split(" (after removing", 1)[0]
    done = subprocess.run(restore, shell=True, cwd=tmp_path, executable="/bin/bash", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "PWNED").exists() and not os.path.exists(out_dir / "PWNED")
    assert {p: open(p, "rb").read() for p in before} == before and not folder.exists()
    assert cli_main(argv + ["--overwrite"]) == 0
