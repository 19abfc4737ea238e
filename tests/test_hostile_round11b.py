"""Red-team 11b's ledger finding R11b-4, end to end on real processes (``python -m pipelines.cli``), real SQLite
ledgers and the 300-word artifact: a ledger restored from a backup older than its last commit forgot the runs
committed since, and their authors' budget was silently exceeded.

* the rollback check: every commit raises the ledger's commit count and records the run in ``<ledger>.textdp-seq``
  beside an SQLite ledger; a run on a ledger copied back from a backup is refused in one line naming the missing
  release file and ``textdp ledger reconcile --release``; ``ledger status`` warns (exit 1) and lists the lost run;
* ``textdp ledger reconcile --release <output>-ledger.json`` re-commits the lost run (its authors' mass counted as
  its first commit did; a second time changes nothing), after which the author is withheld at the budget;
* a release file of another key, a damaged one, one glob matching nothing: refused, nothing counted;
* the documented limit: with the ``.textdp-seq`` file restored or deleted too, no run is refused, but ``ledger
  status --release`` still tells the run is not counted.

Admission is deterministic (exact arithmetic) and no mechanism's output is compared: no test here is statistical.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.test_hostile_round9l import cli
from tests.test_ledger import ART300, KEY, write_corpus

pytestmark = pytest.mark.skipif(not os.path.isdir(ART300), reason="the 300-word artifact /tmp/art300 is not built here")
OTHER_KEY = b"another-ledger-key-0123456789abcdef"


def _privatize(tmp_path, inputs, output, ledger, *extra):
    return cli(["privatize", "--input", inputs, "--output", output, "--ledger", ledger, "--epsilon", 1,
                "--user-field", "author", "--ledger-key-file", tmp_path / "key", "--artifact", ART300,
                "--runner", "FnApiRunner", *extra])


def _ledger(tmp_path, action, ledger, *extra, key="key"):
    return cli(["ledger", action, "--ledger", ledger, "--ledger-key-file", tmp_path / key, *extra])


def _created_and_backed_up(tmp_path, output, budget) -> str:
    """Run 1 (author "a", 5 words) creates <tmp>/L.sqlite with ``budget``; the backup <tmp>/L.bak is taken."""
    (tmp_path / "key").write_bytes(KEY)
    write_corpus(tmp_path / "in1.jsonl", [("a", 5)])
    ledger = str(tmp_path / "L.sqlite")
    code, _, err = _privatize(tmp_path, tmp_path / "in1.jsonl", output, ledger, "--ledger-create", "--author-budget",
                              budget)
    assert code == 0, err
    shutil.copy(ledger, tmp_path / "L.bak")
    return ledger


def _restored(tmp_path):
    """The repro: run 1 creates the ledger (budget 10), the backup is taken, run 2 brings author 16777217 to 10,
    the backup is copied back over the ledger. Returns (ledger, run 2's release file, run 2's run id)."""
    (tmp_path / "key").write_bytes(KEY)
    write_corpus(tmp_path / "in1.jsonl", [("a", 5)])
    with open(tmp_path / "in2.jsonl", "w", encoding="utf-8") as handle:  # author 16777217: 2 records x 5 words
        for i in range(2):
            handle.write(json.dumps({"author": 16777217, "id": str(i), "text": "the of and to a"}) + "\n")
    ledger = str(tmp_path / "L13.sqlite")
    code, _, err = _privatize(tmp_path, tmp_path / "in1.jsonl", tmp_path / "o" / "bk1" / "r", ledger,
                              "--ledger-create", "--author-budget", 10)
    assert code == 0, err
    shutil.copy(ledger, tmp_path / "L13.bak")  # the nightly backup
    code, out, err = _privatize(tmp_path, tmp_path / "in2.jsonl", tmp_path / "o" / "bk2" / "r", ledger)
    assert code == 0 and "1 at the budget" in out + err, out + err
    shutil.copy(tmp_path / "L13.bak", ledger)  # damaged; restored from the backup, as told
    release = str(tmp_path / "o" / "bk2" / "r-ledger.json")
    with open(release, encoding="utf-8") as handle:
        document = json.load(handle)
    assert document["ledger_seq"] == 2 and document["ledger_id"], document  # stamped at its commit
    return ledger, release, document["run_id"]


def test_a_restored_ledger_is_refused_then_reconcile_release_recounts_and_the_author_is_withheld(tmp_path):
    """R11b-4 repro: after the restore the run is refused in one line (exit 2, nothing written) naming the lost
    release file and `reconcile --release`; status warns (exit 1); reconcile --release re-commits the lost run
    (a second time: "already", nothing changed); then the author's two records are withheld at the budget."""
    ledger, release, run_id = _restored(tmp_path)
    out3 = tmp_path / "o" / "bk3" / "r"
    code, out, err = _privatize(tmp_path, tmp_path / "in2.jsonl", out3, ledger)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "went back in time" in lines[0], err
    assert f"--release <output>-ledger.json` ({release})" in lines[0] and "nothing ran" in lines[0], err
    assert not os.path.exists(out3.parent) or not os.listdir(out3.parent)

    code, out, err = _ledger(tmp_path, "status", ledger)
    assert code == 1 and "WARNING" in out and f"missing: run {run_id} (commit 2)" in out, out + err
    assert "max 5;" in out, out  # what the restored ledger counts: author 16777217 is not in it

    code, out, err = _ledger(tmp_path, "reconcile", ledger, "--release", str(tmp_path / "o" / "*" / "r-ledger.json"))
    assert code == 0 and f"run {run_id} re-committed from {release}: 2 record(s) of 1 author(s)" in out, out + err
    assert "already in the ledger, committed: nothing changed" in out and "WARNING" not in out, out  # bk1's
    code, out, err = _ledger(tmp_path, "reconcile", ledger, "--release", release)
    assert code == 0 and f"run {run_id} ({release}) is already in the ledger" in out, out + err
    code, out, err = _ledger(tmp_path, "status", ledger)
    assert code == 0 and "runs: 2 committed" in out and "max 10; 1 at the budget 10" in out and "WARNING" not in out, out

    code, out, err = _privatize(tmp_path, tmp_path / "in2.jsonl", out3, ledger)
    assert "0 record(s) of 1 author(s) released, 2 withheld (budget_exhausted)" in out + err, out + err
    with open(f"{out3}-summary.json", encoding="utf-8") as handle:
        assert json.load(handle)["ledger"]["records_withheld"] == 2


def test_a_release_file_of_another_key_or_damaged_is_refused_and_nothing_counted(tmp_path):
    """reconcile --release refuses (exit 2, one line each, nothing counted): a file made with another key, a
    truncated file, a file whose entries were edited (its totals no longer agree), a glob matching no file."""
    ledger, release, run_id = _restored(tmp_path)
    with open(release, encoding="utf-8") as handle:
        document = json.load(handle)
    other = tmp_path / "other-ledger.json"
    other.write_text(json.dumps(dict(document, key_fingerprint="0" * 32)))
    truncated = tmp_path / "cut-ledger.json"
    truncated.write_text(open(release, encoding="utf-8").read()[:200])
    edited = tmp_path / "edited-ledger.json"
    document["entries"][0][1] = 1  # fewer tokens than the section says it released
    edited.write_text(json.dumps(document))
    for bad, why in ((other, "made with another ledger key"), (truncated, "cannot be read as JSON"),
                     (edited, "is damaged"), (tmp_path / "none*-ledger.json", "matches no file")):
        code, out, err = _ledger(tmp_path, "reconcile", ledger, "--release", bad)
        assert code == 2 and why in err and len(err.strip().splitlines()) == 1, (bad, out, err)
    code, out, err = _ledger(tmp_path, "status", ledger)
    assert code == 1 and "runs: 1 committed" in out and f"missing: run {run_id}" in out, out + err
    (tmp_path / "other.key").write_bytes(OTHER_KEY)
    code, out, err = _ledger(tmp_path, "reconcile", ledger, "--release", release, key="other.key")
    assert code == 2 and "another key" in err, err  # the ledger itself refuses another key


def test_the_limit_a_seq_file_restored_too_is_not_detected_but_status_release_tells(tmp_path):
    """docs/ledger.md's limit: with <ledger>.textdp-seq deleted together with the restore, nothing remembers the
    lost commit, so status does not warn; given the release file, status says it is NOT in the ledger (its commit
    was the ledger's commit 2, the ledger is at 1), exit 1."""
    ledger, release, run_id = _restored(tmp_path)
    os.remove(ledger + ".textdp-seq")
    code, out, err = _ledger(tmp_path, "status", ledger)
    assert code == 0 and "WARNING" not in out, out + err
    code, out, err = _ledger(tmp_path, "status", ledger, "--release", release)
    assert code == 1 and f"NOT in the ledger: run {run_id} is unknown to it (its commit was the ledger's commit 2; " \
                         "the ledger is at 1" in out, out + err


def test_a_ledger_named_like_its_seq_file_is_refused(tmp_path):
    """--ledger X.textdp-seq would be taken for another ledger's sequence file: refused in one line (exit 2)."""
    (tmp_path / "key").write_bytes(KEY)
    write_corpus(tmp_path / "in1.jsonl", [("a", 5)])
    code, out, err = _privatize(tmp_path, tmp_path / "in1.jsonl", tmp_path / "o" / "r", str(tmp_path / "L.textdp-seq"),
                                "--ledger-create", "--author-budget", 10)
    assert code == 2 and ".textdp-seq" in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists(tmp_path / "L.textdp-seq")


def test_a_backup_copied_over_the_ledger_while_a_run_runs_is_said_not_silent(tmp_path):
    """A backup copied over the ledger between a run's reservation and its commit keeps the ledger's identity, so
    the run is unknown there: the launcher commits nothing and says so in one line naming `reconcile --release`
    (exit non-zero); then reconcile --release counts it."""
    import time

    from tests.test_hostile_round9l import cli as run_cli

    ledger = _created_and_backed_up(tmp_path, tmp_path / "o1" / "r", 10)
    hold = str(tmp_path / "hold")
    proc = run_cli(["privatize", "--input", tmp_path / "in1.jsonl", "--output", tmp_path / "o2" / "r", "--ledger", ledger,
                    "--epsilon", 1, "--user-field", "author", "--ledger-key-file", tmp_path / "key", "--artifact", ART300,
                    "--runner", "FnApiRunner"], env_extra={"TEXTDP_TEST_LEDGER_HOLD": hold}, background=True)
    deadline = time.time() + 300
    while not os.path.exists(hold + ".ready") and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    shutil.copy(tmp_path / "L.bak", ledger)  # the restore, while the run holds
    open(hold, "w").close()
    out, err = (part.decode() for part in proc.communicate(timeout=300))
    release = str(tmp_path / "o2" / "r-ledger.json")
    assert proc.returncode != 0 and "is not in the ledger" in err and f"--release {release}`" in err, out + err
    code, out, err = _ledger(tmp_path, "reconcile", ledger, "--release", release)
    assert code == 0 and "re-committed" in out, out + err
    code, out, err = _ledger(tmp_path, "status", ledger)
    assert code == 0 and "max 10; 1 at the budget 10" in out, out + err


def test_r12_1_a_restore_is_detected_whatever_name_the_runs_gave_the_ledger(tmp_path):
    """R12-1: the record of commits beside the ledger (.textdp-seq) was named from the path given, so a run through a
    symlink to the ledger file recorded its commit beside the link, and a restore was not noticed through the real
    path (a budget exceeded, exit 0). Now the record is kept by the ledger's real path: run 2 through a link, then
    the restore, then run 3 by the real path is refused in one line. A ledger file with several names (hard links)
    is refused before the run."""
    (tmp_path / "key").write_bytes(KEY)
    (tmp_path / "data").mkdir()
    write_corpus(tmp_path / "in1.jsonl", [("a", 5)])
    write_corpus(tmp_path / "in2.jsonl", [("b", 5)])
    ledger = str(tmp_path / "data" / "L.sqlite")
    code, _, err = _privatize(tmp_path, tmp_path / "in1.jsonl", tmp_path / "o1" / "r", ledger, "--ledger-create",
                              "--author-budget", 10)
    assert code == 0, err
    shutil.copy(ledger, tmp_path / "L.bak")
    os.symlink("data/L.sqlite", tmp_path / "cur.sqlite")
    code, _, err = _privatize(tmp_path, tmp_path / "in2.jsonl", tmp_path / "o2" / "r", str(tmp_path / "cur.sqlite"))
    assert code == 0, err
    assert not os.path.exists(str(tmp_path / "cur.sqlite") + ".textdp-seq")
    shutil.copy(tmp_path / "L.bak", ledger)
    code, out, err = _privatize(tmp_path, tmp_path / "in2.jsonl", tmp_path / "o3" / "r", ledger)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "went back in time" in err, out + err
    os.link(tmp_path / "L.bak", tmp_path / "hard.sqlite")
    code, out, err = _ledger(tmp_path, "status", str(tmp_path / "hard.sqlite"))
    assert code == 2 and "hard links" in err, out + err


def test_r12_4_a_ledger_inside_the_artifact_folder_is_refused(tmp_path):
    """--ledger inside the --artifact folder was accepted (every other written path is refused there). Now one line
    before the run; the artifact folder is left as it was."""
    (tmp_path / "key").write_bytes(KEY)
    write_corpus(tmp_path / "in1.jsonl", [("a", 5)])
    artifact = tmp_path / "art"
    shutil.copytree(ART300, artifact)
    before = sorted(os.listdir(artifact))
    code, out, err = cli(["privatize", "--input", tmp_path / "in1.jsonl", "--output", tmp_path / "o" / "r",
                          "--ledger", artifact / "L.sqlite", "--ledger-create", "--author-budget", 10, "--epsilon", 1,
                          "--user-field", "author", "--ledger-key-file", tmp_path / "key", "--artifact", artifact,
                          "--runner", "FnApiRunner"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "inside" in err and "--artifact" in err, out + err
    assert sorted(os.listdir(artifact)) == before


def test_r12_3_an_overwrite_keeps_the_earlier_ledger_release_and_a_restore_recounts_both(tmp_path):
    """R12-3: a successful --overwrite of a ledger run's output deleted that run's <output>-ledger.json, the only file
    that re-counts it after a restore; the refusal then named the new run's file for it. Now the earlier file is kept
    beside the release as <output>-ledger-<run_id>.json (one console line says so); after a restore the refusal names
    the kept file, and `reconcile --release` with both files re-counts both runs."""
    write_corpus(tmp_path / "in2.jsonl", [("b", 5)])
    ledger = _created_and_backed_up(tmp_path, tmp_path / "o0" / "r", 30)
    output = tmp_path / "o" / "r"
    code, _, err = _privatize(tmp_path, tmp_path / "in2.jsonl", output, ledger)
    assert code == 0, err
    run_b = json.load(open(f"{output}-ledger.json", encoding="utf-8"))["run_id"]
    code, out, err = _privatize(tmp_path, tmp_path / "in1.jsonl", output, ledger, "--overwrite")
    assert code == 0 and f"r-ledger-{run_b}.json" in err and "kept the earlier release" in err, out + err
    kept = f"{output}-ledger-{run_b}.json"
    assert json.load(open(kept, encoding="utf-8"))["run_id"] == run_b
    run_c = json.load(open(f"{output}-ledger.json", encoding="utf-8"))["run_id"]
    assert run_c != run_b
    shutil.copy(tmp_path / "L.bak", ledger)
    code, out, err = _privatize(tmp_path, tmp_path / "in2.jsonl", tmp_path / "o3" / "r", ledger)
    assert code == 2 and kept in err and "went back in time" in err, out + err
    code, out, err = _ledger(tmp_path, "reconcile", ledger, "--release", kept, f"{output}-ledger.json")
    assert code == 0 and f"run {run_b} re-committed" in out and f"run {run_c} re-committed" in out, out + err
    code, out, err = _ledger(tmp_path, "status", ledger)
    assert code == 0 and "WARNING" not in out, out + err


def test_a_kept_release_copy_belongs_to_its_output_and_is_stamped_where_it_is():
    """`reconcile --release` of a kept copy (R12-3) settles the run of the output it came from and stamps the copy,
    never a new `<copy>-ledger.json` beside it nor the summary of the run that now holds the output's names."""
    from textdp.ledger.store import kept_release_file, release_file, release_output

    kept = kept_release_file("/d/o", "20261128T000000Z-ab12")
    assert release_output(kept, "20261128T000000Z-ab12") == ("/d/o", kept)
    assert release_output(release_file("/d/o"), "20261128T000000Z-ab12") == ("/d/o", None)
