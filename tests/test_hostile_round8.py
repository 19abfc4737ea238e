"""Issue 25 items left open after round 7, and round-8 hostile findings, each on the real component (the local
Beam runners, the real 300-word GloVe artifact, real files); nothing is mocked."""

from __future__ import annotations

import glob
import json
import os
import stat

import pytest

from pipelines.cli import main as cli_main

RUNNER = "--runner=FnApiRunner"


def _input(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- --text-field naming one field twice ---------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--text-field=text,text"], ["--text-field=text", "--text-field=text"],
                                   ["--text-field=text, text"]])
def test_a_text_field_named_twice_is_refused_in_one_line(flags, tmp_path, tiny_artifact_dir, capsys):
    """`--text-field text,text` was silently de-duplicated (the API refuses the same); now one line, exit 2, before
    any output exists."""
    source = _input(tmp_path, "in.jsonl", '{"text": "the cat sat"}\n')
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER, *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "'text'" in err[0] and "more than once" in err[0], err
    assert not os.path.exists(tmp_path / "o")


def test_two_different_text_fields_still_run(tmp_path, tiny_artifact_dir):
    source = _input(tmp_path, "in.jsonl", '{"text": "the cat sat", "title": "a dog"}\n')
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER, "--text-field=text,title"]) == 0


# --- streaming error files with --keep-failed-text are owner-only -------------------------------------------------


@pytest.mark.parametrize("keep", [True, False])
def test_streaming_error_and_late_files_with_raw_text_are_owner_only(keep, tmp_path):
    """The batch job's error shards were made 0600 under --keep-failed-text (round 7 F7) but the streaming job's
    per-pane error file and late-record files were not: now both are created 0600 before a byte is written
    (whatever the umask) when they may hold raw text; without the flag the umask applies."""
    from tests.test_streaming import Events, _msg, run_stream

    stream = (Events().advance_watermark_to(0)
              .add_elements([_msg(1, {"text": "the cat sat"}, 2), _msg(2, b"secretcanary not json", 3)])
              .advance_watermark_to(21)
              .add_elements([_msg(3, b"latecanary not json", 4)])  # window [0, 10) closed: a late record
              .advance_watermark_to_infinity())
    old = os.umask(0o022)
    try:
        out = run_stream(tmp_path, stream, keep_failed_text=keep)
    finally:
        os.umask(old)
    pane_errors = glob.glob(out + "-19700101T000000Z-*-errors.jsonl")
    late = glob.glob(out + "-late-*-errors.jsonl")
    assert len(pane_errors) == 1 and len(late) == 1
    for path in pane_errors + late:
        assert stat.S_IMODE(os.stat(path).st_mode) == (0o600 if keep else 0o644), path
    pane_text = open(pane_errors[0], encoding="utf-8").read()
    assert ("secretcanary" in pane_text) == keep  # the raw text is there only with the flag
    assert ("latecanary" in open(late[0], encoding="utf-8").read()) == keep
    assert all(json.loads(line)["reason"] == "malformed_json" for line in pane_text.splitlines())


# --- round 7 F6 in full: a custom mechanism that is the identity on part of the vocabulary only --------------------

import numpy as np  # noqa: E402

from tests.custom_mechanism import CappedExponential  # noqa: E402


class RareIdentity(CappedExponential):
    """Right (the capped exponential mechanism) on the more frequent half of the vocabulary, the identity on the
    rarer half: the kind of mechanism round 7's F6 found passing the launcher (a table built for the top N words)."""

    name = "r8-rare-identity"

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        out = CappedExponential.privatize_ids(self, ids, rng)
        rare = ids >= self.vocab_size // 2
        out[rare] = ids[rare]
        return out


def test_the_trial_names_the_quarters_a_mechanism_leaves_unchanged(tiny_artifact_dir):
    """The trial (64 probe ids over the whole ranking) judged only "changed none": a mechanism right on the frequent
    half and the identity on the rare half changed some and passed. Now each quarter of the ranking is judged: the
    two rare quarters (every probe id there >= 150 of 300) are reported, the frequent ones not. Deterministic on the
    rare side; on the frequent side the capped exponential mechanism at epsilon 1 keeps a word with probability
    < 0.1 on this artifact, so a frequent quarter is wrongly reported with probability < 0.1^256."""
    from textdp.artifact.store import Artifact
    from textdp.mechanisms import TRIAL_RETRIES, probe_ids, trial_build
    from textdp.privacy.statements import trial_warnings

    artifact = Artifact(tiny_artifact_dir)
    trial = trial_build(RareIdentity, artifact, 1.0)
    assert trial.probes == 64 and 0 < trial.changed < 64
    assert [band for band, *_ in trial.silent_bands] == [2, 3]
    probe = probe_ids(300)
    assert [(count, low, high) for _, count, low, high in trial.silent_bands] == [
        (16, int(probe[32]), int(probe[47])), (16, int(probe[48]), int(probe[63]))]
    (line,) = trial_warnings(trial)
    assert "third most frequent quarter (frequency ranks 153 to 224: 16 words)" in line
    assert "rarest quarter (frequency ranks 229 to 300: 16 words)" in line
    assert f"in all {1 + TRIAL_RETRIES} of its releases" in line
    right = trial_build(CappedExponential, artifact, 1.0)
    assert right.changed > 0 and right.silent_bands == () and trial_warnings(right) == []


def test_a_mechanism_that_is_the_identity_on_the_rare_words_is_warned_before_the_run(tmp_path, tiny_artifact_dir,
                                                                                      capsys):
    """The CLI run: one WARNING line before the run names the rare quarters, and both summaries carry it; the run
    still releases (a warning, not a refusal: the trial cannot prove the mechanism wrong)."""
    source = _input(tmp_path, "in.txt", "the president said our police were cold\n")
    out = tmp_path / "o" / "p"
    code = cli_main(["privatize", RUNNER, "--epsilon=1", f"--input={source}", f"--output={out}",
                     f"--public-summary={tmp_path}/o/pub.json", f"--artifact={tiny_artifact_dir}",
                     "--mechanism=tests.test_hostile_round8:RareIdentity"])
    err = capsys.readouterr().err
    assert code == 0
    assert "rarest quarter" in err and "president" not in err
    summary = json.load(open(f"{out}-summary.json", encoding="utf-8"))
    public = json.load(open(f"{tmp_path}/o/pub.json", encoding="utf-8"))
    for document in (summary, public):
        assert any("rarest quarter" in w for w in document["warnings"])


# --- --unk-token look-alikes of vocabulary words ---------------------------------------------------------------------


@pytest.mark.parametrize("marker,why", [("th\u0435", "mixes"),         # Latin t, h + Cyrillic ie: "the"
                                        ("\u0430", "looks like"),      # Cyrillic a alone: the vocabulary word "a"
                                        ("\u0399\u03a4", "looks like"),  # Greek IOTA TAU: "it"
                                        ("\u0456n", "mixes")])         # Cyrillic i + Latin n: "in"
def test_an_unk_marker_that_looks_like_a_vocabulary_word_is_refused(marker, why, tmp_path, tiny_artifact_dir, capsys):
    """`--unk-token thе` (a Cyrillic е) passed the vocabulary check: every unknown word was released as what any
    reader takes for "the". Now a marker mixing scripts, or one that is a vocabulary word once its Cyrillic/Greek
    look-alike letters are read as the Latin ones, is refused in one line before the run."""
    source = _input(tmp_path, "in.txt", "the zyzzyvaqq said\n")
    code = cli_main(["privatize", RUNNER, "--epsilon=10", f"--input={source}", f"--output={tmp_path}/o/p",
                     f"--artifact={tiny_artifact_dir}", "--oov-policy=unk", f"--unk-token={marker}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and why in err[0] and "zyzzyvaqq" not in err[0], err
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("marker", ["<unk>", "\u043d\u0435\u0438\u0437\u0432", "[REDACTED]", "\u2588\u2588"])
def test_markers_in_one_script_that_are_no_word_still_work(marker, tmp_path, tiny_artifact_dir):
    """An all-Cyrillic marker that reads as no Latin word, <unk>, [REDACTED] and a redaction bar are accepted and
    released."""
    import textdp

    private = textdp.Privatizer(epsilon=1e6, artifact=tiny_artifact_dir, oov_policy="unk", unk_token=marker)
    assert private.privatize(["the zyzzyvaqq said"], seed=1) == [f"the {marker} said"]


# --- R8-3: a Privatizer's settings cannot be re-assigned ---------------------------------------------------------


@pytest.mark.parametrize("name,value", [("oov_policy", "random"), ("mechanism", None), ("epsilon", 0.001),
                                        ("seeded", False), ("unk_token", "<x>"), ("spec", None), ("artifact", None)])
def test_a_privatizers_settings_cannot_be_reassigned(name, value, tiny_artifact_dir):
    """`p.oov_policy = "random"` on a keep Privatizer made privacy_statement() claim every word covered while
    privatize() still released unknown words verbatim (the statement read the attribute, the release used the objects
    built at construction); `p.seeded = False` hid a seeded call. Now every public setting is fixed: assigning or
    deleting one raises TextdpAttributeError (an AttributeError) naming it, and the statement and the release agree."""
    import textdp

    p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir, oov_policy="keep")
    p.privatize(["the cat"], seed=1)
    before = (p.privacy_statement(), p.parameters())
    with pytest.raises(textdp.TextdpAttributeError, match=f"Privatizer.{name} cannot be set"):
        setattr(p, name, value)
    with pytest.raises(AttributeError):
        delattr(p, name)
    assert (p.privacy_statement(), p.parameters()) == before and p.seeded
    assert p.privacy_statement()["output_coverage"]["covered"] != "all"  # keep: unknown words are not covered
    assert p.privatize(["the zzqxsecret"], seed=2)[0].endswith("zzqxsecret")  # what the statement says: kept


def test_a_privatizer_still_pickles_previews_and_keeps_its_stats(tiny_artifact_dir):
    """The guard leaves what the object does itself: last_stats after a call, pickling (re-built from its
    arguments), and a fresh one is unseeded."""
    import pickle

    import textdp

    p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)
    p.privatize(["the cat sat"])
    assert p.last_stats["tokens"] == 3 and not p.seeded
    q = pickle.loads(pickle.dumps(p))
    assert q.parameters() == p.parameters() and q.privatize(["the cat"])[0].count(" ") == 1


# --- R8-1: every catchable signal that would end the process puts the earlier release back ------------------------


def test_every_catchable_terminating_signal_is_handled_and_no_other():
    """Round 7 handled five named signals; SIGPWR, SIGVTALRM, SIGSTKFLT, SIGIO and the real-time signals still killed
    an --overwrite run silently. Now the set is derived: every signal whose default action ends the process and that
    this process does not ignore; never one that stops, continues or is ignored, nor a synchronous fault."""
    import signal

    from pipelines.jobs import _termination_signals, signal_name

    found = set(_termination_signals())
    for name in ("SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU", "SIGPWR", "SIGVTALRM", "SIGPROF", "SIGIO",
                 "SIGSTKFLT", "SIGRTMIN", "SIGRTMAX"):
        if hasattr(signal, name):
            assert getattr(signal, name) in found, name
    assert signal.SIGRTMIN + 5 in found and signal_name(signal.SIGRTMIN + 5) == "SIGRTMIN+5"
    for name in ("SIGCHLD", "SIGWINCH", "SIGCONT", "SIGTSTP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGABRT", "SIGPIPE",
                 "SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", "SIGSTOP"):
        assert getattr(signal, name) not in found, name
    old = signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a signal the process ignores is left ignored
    try:
        assert signal.SIGUSR1 not in _termination_signals()
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_sigpwr_during_an_overwrite_run_puts_the_earlier_release_back(tmp_path, tiny_artifact_dir):
    """SIGPWR (a power-management shutdown notice) once the pipeline is privatizing: one line, exit 128 + 30, the
    earlier release byte-identical and no hidden folder left. A real subprocess, as round 7's SIGQUIT test."""
    import signal

    from tests.test_hostile_round6b import _snapshot, signal_during_overwrite
    from textdp.outputs import EARLIER_FOLDER_PREFIX

    before, code, err = signal_during_overwrite(tmp_path, tiny_artifact_dir, signal.SIGPWR)
    assert code == 128 + signal.SIGPWR, err
    assert "terminated (SIGPWR)" in err and "the earlier run's files were put back" in err
    assert _snapshot(f"{tmp_path}/o") == before
    assert not glob.glob(f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}*")


# --- R8-2: a ledger at textdp's own lock / run-record names; a refused run leaves no new ledger -------------------


def _ledger_args(tmp_path, artifact, output, ledger, *extra):
    from tests.test_ledger import KEY, write_corpus

    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    source = tmp_path / "in.jsonl"
    if not source.exists():
        write_corpus(source, [("a", 5), ("b", 5)])
    return ["privatize", f"--input={source}", f"--output={output}", "--epsilon=1", f"--artifact={artifact}",
            "--user-field=author", f"--ledger={ledger}", f"--ledger-key-file={key}", "--ledger-create", RUNNER, *extra]


@pytest.mark.parametrize("name", [".textdp.lock", "w.lock", "w.textdp-run.json", "x.textdp-run.json",
                                  ".textdp-earlier-x"])
def test_a_ledger_at_textdps_lock_or_run_record_names_is_refused_before_it_is_created(name, tmp_path,
                                                                                         tiny_artifact_dir, capsys):
    """`--ledger <dir>/.textdp.lock --ledger-create` created the SQLite ledger, then the run was refused ("not
    textdp's lock"), leaving a budget database disguised as a lock that blocked every later run there. Now a name
    textdp uses for its locks, run records or hidden folders is refused in one line before anything is created."""
    out = tmp_path / "o"
    out.mkdir()
    code = cli_main(_ledger_args(tmp_path, tiny_artifact_dir, out / "w", out / name))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "textdp uses for its locks and run records" in err[0], err
    assert os.listdir(out) == []


def test_a_run_refused_after_it_created_its_ledger_removes_the_new_ledger(tmp_path, tiny_artifact_dir, capsys):
    """A refusal that comes after the ledger was created (here: a file that is not textdp's lock at the output's lock
    name, found when the locks are taken) removes the new ledger again and says so, so the same command works once
    the cause is fixed; a ledger that existed before a refused run is left byte-identical."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "w.lock").write_text("not a textdp lock\n", encoding="utf-8")
    ledger = tmp_path / "L.sqlite"
    code = cli_main(_ledger_args(tmp_path, tiny_artifact_dir, out / "w", ledger))
    err = capsys.readouterr().err
    assert code == 2 and "not textdp's lock" in err and "was removed again" in err, err
    assert not ledger.exists() and not glob.glob(f"{ledger}-*")
    (out / "w.lock").unlink()
    assert cli_main(_ledger_args(tmp_path, tiny_artifact_dir, out / "w", ledger)) == 0  # the same command, fixed
    before = ledger.read_bytes()
    (out / "v.lock").write_text("not a textdp lock\n", encoding="utf-8")
    args = [a for a in _ledger_args(tmp_path, tiny_artifact_dir, out / "v", ledger) if a != "--ledger-create"]
    assert cli_main(args) == 2
    assert ledger.read_bytes() == before


# --- R8b-1, R8b-2: a custom mechanism's declared epsilon ------------------------------------------------------------

from textdp.mechanisms.madlib import Madlib  # noqa: E402


class TinyEps(Madlib):
    """Madlib at the epsilon it was built with, reporting epsilon / 1000 (the ledger counted that)."""

    name = "r8-tiny-eps"

    def parameters(self):
        return dict(super().parameters(), epsilon=self.epsilon / 1000)


class NoEps(Madlib):
    name = "r8-no-eps"

    def parameters(self):
        return {k: v for k, v in super().parameters().items() if k != "epsilon"}


class NanEps(Madlib):
    name = "r8-nan-eps"

    def parameters(self):
        return dict(super().parameters(), epsilon=float("nan"))


class StrEps(Madlib):
    name = "r8-str-eps"

    def parameters(self):
        return dict(super().parameters(), epsilon="lots")


@pytest.mark.parametrize("cls,phrase", [("TinyEps", "is 0.001, not the epsilon 1"), ("NoEps", "with the key 'epsilon'"),
                                        ("NanEps", "not a finite number"), ("StrEps", "a str that is not a finite number")])
def test_a_custom_mechanism_declaring_another_epsilon_is_refused_before_the_ledger(cls, phrase, tmp_path,
                                                                                  tiny_artifact_dir, capsys):
    """R8b-1: a class whose parameters() said epsilon / 1000 ran at epsilon 1 while the ledger counted 0.001 per word
    (budgets exceeded 1000-fold, two epsilons in one summary). R8b-2: a missing, NaN or string epsilon failed only
    after the whole job ran and left the new ledger behind. Now the launcher's trial refuses each in one line (exit 2)
    before the ledger is created; the API refuses the same."""
    import textdp

    out = tmp_path / "o"
    ledger = tmp_path / "L.sqlite"
    code = cli_main(_ledger_args(tmp_path, tiny_artifact_dir, out / "w", ledger,
                                 f"--mechanism=tests.test_hostile_round8:{cls}"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and phrase in err[0], err
    assert not ledger.exists() and not out.exists()
    with pytest.raises(textdp.TextdpError, match="parameters()"):
        textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir, mechanism=globals()[cls])


def test_a_custom_mechanism_declaring_its_own_epsilon_runs_with_the_ledger(tmp_path, tiny_artifact_dir):
    class Honest(Madlib):
        name = "r8-honest"

    assert textdp_privatizer_ok(tiny_artifact_dir, Honest)


def textdp_privatizer_ok(artifact, cls) -> bool:
    import textdp

    return len(textdp.Privatizer(epsilon=1, artifact=artifact, mechanism=cls).privatize(["the cat"])) == 1


# --- R8-6, R8b-9: one author id in another Unicode form or stored as bytes is one author ---------------------------


def test_author_ids_are_compared_in_one_normal_form():
    """NFC and NFD "José", a zero-width space or a bidi mark inside, surrounding spaces, full-width digits, and UTF-8
    bytes (a Parquet BINARY column) were each another author (two budgets, two k-threshold votes). Now one; ASCII ids
    keep the key they had (a ledger's hashes do not change); case is kept; bytes that are not UTF-8 stay bytes."""
    import unicodedata

    from textdp.text.records import author_identity

    jose = "Jos\u00e9"
    forms = [jose, unicodedata.normalize("NFD", jose), "Jo\u200bs\u00e9", "\u200fJos\u00e9", " Jos\u00e9 ", jose.encode("utf-8"),
             unicodedata.normalize("NFD", jose).encode("utf-8")]
    assert len({author_identity(f) for f in forms}) == 1
    assert author_identity("\uff11\uff12") == author_identity("12") == ("str", "12")  # full-width digits; "12" is no 12
    assert author_identity("alice") == ("str", "alice") and author_identity("Alice") != author_identity("alice")
    assert author_identity(b"\xff\xfe") == ("bytes", b"\xff\xfe")
    assert author_identity({"u": jose}) == author_identity({"u": unicodedata.normalize("NFD", jose)})
    assert author_identity([b"bob"]) == author_identity(["bob"])


def test_a_binary_author_column_counts_against_the_same_ledger_budget(tmp_path, tiny_artifact_dir):
    """R8b-9: authors at their budget from a JSONL run started again at 0 when the same ids came in a Parquet BINARY
    column. Now the second run withholds every record (budget_exhausted), as for the same ids as strings.
    Deterministic: admission is exact arithmetic."""
    import pyarrow as pa

    from tests.test_ledger import WORDS

    text = " ".join(WORDS[:5])
    _assert_parquet_authors_are_the_jsonl_ones(tmp_path, tiny_artifact_dir, ["alice", "bob"], text, pa.table(
        {"author": pa.array([b"alice", b"bob"], pa.binary()), "text": [text, text]}))


def _assert_parquet_authors_are_the_jsonl_ones(tmp_path, artifact, authors, text, table):
    """A JSONL run brings ``authors`` (one record of ``text``, 5 words, each) to the budget 6; a run of the Parquet
    ``table`` (the same ids in another column type) must withhold every record (budget_exhausted). Exact."""
    import pyarrow.parquet as pq

    from tests.test_ledger import KEY

    key = tmp_path / "ledger.key"
    key.write_bytes(KEY)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"author": a, "text": text}) + "\n" for a in authors),
                                      encoding="utf-8")
    pq.write_table(table, tmp_path / "b.parquet")
    ledger = tmp_path / "L.sqlite"
    common = ["--epsilon=1", f"--artifact={artifact}", "--user-field=author", f"--ledger={ledger}",
              f"--ledger-key-file={key}", RUNNER]
    assert cli_main(["privatize", f"--input={tmp_path}/a.jsonl", f"--output={tmp_path}/o/a", "--ledger-create",
                     "--author-budget=6", *common]) == 0
    cli_main(["privatize", f"--input={tmp_path}/b.parquet", f"--output={tmp_path}/o/b", "--max-failed-fraction=1",
              *common])
    summary = json.load(open(f"{tmp_path}/o/b-summary.json", encoding="utf-8"))
    assert summary["records"]["out"] == 0 and summary["records"]["failed_by_reason"] == {"budget_exhausted": len(authors)}


# --- R8b-10: a ledger path with URL characters is the file it names ------------------------------------------------


@pytest.mark.parametrize("name", ["Lq?x=1.sqlite", "L%41.sqlite", "L#1.sqlite"])
def test_a_ledger_path_with_url_characters_is_the_file_it_names(name, tmp_path, tiny_artifact_dir, capsys):
    """`--ledger 'Lq?x=1.sqlite'` made SQLite write the ledger to `Lq` (the rest read as URL query arguments) while
    every check looked at the whole name: the job released, then the run was "counted in no ledger". `%41` was read
    as `A`. Now a plain path is the file it names: the run commits, `ledger status` reads it, no other file appears."""
    ledger = tmp_path / "led" / name
    ledger.parent.mkdir()
    assert cli_main(_ledger_args(tmp_path, tiny_artifact_dir, tmp_path / "o" / "w", ledger, "--author-budget=12")) == 0
    err = capsys.readouterr().err
    assert "committed" in err and "counted in no ledger" not in err, err
    assert sorted(os.listdir(ledger.parent)) == [name, name + ".textdp-seq"]  # the ledger and its commit record
    from pipelines.cli import main

    assert main(["ledger", "status", f"--ledger={ledger}", f"--ledger-key-file={tmp_path}/ledger.key", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["author_budget"] == 12 and status["cumulative_mass"]["max"] == 5, status


# --- R8-14: --drop-fields matches a key in another Unicode form ------------------------------------------------------


def test_drop_fields_removes_a_key_written_in_another_unicode_form(tmp_path, tiny_artifact_dir):
    """`--drop-fields émail` (NFC) left the e-mail address in a record whose key was the NFD form, and the public
    summary listed the same-looking name as removed and remaining. Now a key is matched by its normal form: no
    released record has any form of it, and it is not among the remaining fields. Deterministic."""
    import unicodedata

    nfc, nfd = unicodedata.normalize("NFC", "\u00e9mail"), unicodedata.normalize("NFD", "\u00e9mail")
    rows = [{"text": "the president said", "id": 1, nfc: "alice@example.com"},
            {"text": "the first time", "id": 2, nfd: "bob@example.com"},
            {"text": "his company", "id": 3, nfc + "\u200b": "carol@example.com"}]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "o" / "p"
    assert cli_main(["privatize", f"--input={source}", f"--output={out}", "--epsilon=10", "--shuffle",
                     f"--drop-fields={nfc}", f"--public-summary={tmp_path}/o/pub.json", f"--artifact={tiny_artifact_dir}",
                     RUNNER]) == 0
    released = [json.loads(line) for path in glob.glob(f"{out}-*-of-*.jsonl") for line in open(path, encoding="utf-8")]
    assert len(released) == 3 and all(set(r) == {"text", "id"} for r in released), released
    text = "".join(open(path, encoding="utf-8").read() for path in glob.glob(f"{tmp_path}/o/*"))
    assert "@example.com" not in text
    report = json.load(open(f"{out}-amplification.json", encoding="utf-8"))
    assert report["fields"]["remaining"] == ["id", "text"], report["fields"]


def test_a_ledger_under_dev_shm_is_refused(tmp_path, tiny_artifact_dir, capsys):
    """R8-15: a ledger on /dev/shm (a tmpfs emptied at every reboot) was accepted although outputs under /dev are
    refused: after a reboot every author would start again at 0. Refused in one line before it is created."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    ledger = f"/dev/shm/textdp-r8-{os.getpid()}.sqlite"
    code = cli_main(_ledger_args(tmp_path, tiny_artifact_dir, tmp_path / "o" / "w", ledger))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "under /dev" in err[0], err
    assert not os.path.exists(ledger)


# --- R8-11, R8-12: the Python API ---------------------------------------------------------------------------------


def test_a_pickled_privatizer_opens_the_artifact_it_was_built_on(tmp_path, tiny_artifact_dir, small_artifact_dir,
                                                                 monkeypatch):
    """A Privatizer built with a relative artifact path was pickled with it: unpickled in another working directory it
    opened whatever that path meant there (another vocabulary, another epsilon scale). Now the pickle holds the
    absolute real path, and the vocabulary's and vectors' checksums: a different artifact now at that path is
    refused on unpickle."""
    import pickle
    import shutil

    import textdp

    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    shutil.copytree(tiny_artifact_dir, first / "art")
    os.symlink(small_artifact_dir, second / "art")
    monkeypatch.chdir(first)
    p = textdp.Privatizer(epsilon=10, artifact="art")
    blob = pickle.dumps(p)
    monkeypatch.chdir(second)  # "art" here is the 5,000-word artifact
    q = pickle.loads(blob)
    assert q.artifact.vocab_size == p.artifact.vocab_size == 300
    shutil.rmtree(first / "art")
    shutil.copytree(small_artifact_dir, first / "art")  # another artifact now at the original's real path
    with pytest.raises(textdp.TextdpError, match="built on another artifact"):
        pickle.loads(blob)


def test_preview_samples_beyond_calibrates_limit_are_refused(tiny_artifact_dir):
    """R8-12: preview(samples=10**12) raised numpy's MemoryError; now a ParameterError naming samples, at the bound
    calibrate --samples has (one constant)."""
    import textdp
    from textdp.calibration.statistics import MAX_SAMPLES

    p = textdp.Privatizer(epsilon=10, artifact=tiny_artifact_dir)
    with pytest.raises(textdp.TextdpError, match="samples"):
        p.preview(["the cat sat"], epsilons=[5], samples=10 ** 12)
    with pytest.raises(textdp.TextdpError, match="samples"):
        p.preview(["the cat sat"], epsilons=[5], samples=MAX_SAMPLES + 1)


# --- R8-10: --diagnostics-output at another release's prefix ----------------------------------------------------


@pytest.mark.parametrize("overwrite", [True, False])
def test_diagnostics_output_at_another_releases_prefix_is_refused(overwrite, tmp_path, tiny_artifact_dir, capsys):
    """`--diagnostics-output P --overwrite` with P another release's --output replaced that release's shard and run
    record with diagnostics (its summary and errors left orphaned), and the refusal without --overwrite advised
    adding it. Now both are refused in one line before the run, and the release stays byte-identical."""
    source = _input(tmp_path, "in.jsonl", '{"text": "the cat sat"}\n{"text": "a dog ran"}\n')
    release = tmp_path / "d" / "p"
    assert cli_main(["privatize", f"--input={source}", f"--output={release}", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 0
    before = {name: (tmp_path / "d" / name).read_bytes() for name in os.listdir(tmp_path / "d")}
    capsys.readouterr()
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/e/q", "--epsilon=10",
                     f"--diagnostics-output={release}", f"--artifact={tiny_artifact_dir}", RUNNER]
                    + (["--overwrite"] if overwrite else []))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "an earlier run's --output" in err[0] and "never replaces" in err[0], err
    assert {name: (tmp_path / "d" / name).read_bytes() for name in os.listdir(tmp_path / "d")} == before


# --- R8-13: the restore hint names every folder of the release ----------------------------------------------------


def test_a_killed_overwrite_runs_public_summary_folder_is_named_with_its_mv(tmp_path, tiny_artifact_dir, capsys):
    """A SIGKILLed --overwrite run leaves the release in .textdp-earlier-* next to the records AND its public summary
    in another .textdp-earlier-* next to it (the state built here by hand, as round 7's test does). The refusal named
    only the first folder; the next run then succeeded without the public summary. Now it names both, with one mv
    each; after running those, the release is whole and runs go on."""
    import shutil
    import subprocess

    from textdp.outputs import EARLIER_FOLDER_PREFIX

    source = _input(tmp_path, "in.txt", "the cat sat\na dog ran\n")
    output, public = tmp_path / "o" / "p", tmp_path / "pub" / "pub.json"
    public.parent.mkdir()
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10",
                     f"--public-summary={public}", f"--artifact={tiny_artifact_dir}", RUNNER]) == 0
    before = {p: open(p, "rb").read() for p in glob.glob(f"{tmp_path}/o/*") + [str(public)]}
    folders = [f"{tmp_path}/o/{EARLIER_FOLDER_PREFIX}abc123", f"{tmp_path}/pub/{EARLIER_FOLDER_PREFIX}def456"]
    for folder in folders:
        os.mkdir(folder)
    for path in before:
        if not path.endswith(".textdp-run.json"):
            shutil.move(path, os.path.join(folders[0] if "/o/" in path else folders[1], os.path.basename(path)))
    capsys.readouterr()
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 2  # no --public-summary this time
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(f"mv -- {folder}/*" in err[0] for folder in folders), err
    restore = err[0].split("restore it with: ", 1)[1].split(" (after removing", 1)[0]
    subprocess.run(restore, shell=True, check=True)
    assert {p: open(p, "rb").read() for p in before} == before
    assert cli_main(["privatize", f"--input={source}", f"--output={output}", "--epsilon=10", "--overwrite",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 0


# --- integer flags take plain digits only (as float flags since R8b-8) -----------------------------------------------


@pytest.mark.parametrize("flag,value", [("--seed", "1_0"), ("--k-threshold", "\u0662"), ("--batch-tokens", "1_000"),
                                        ("--max-record-bytes", "\uff11\uff10")])
def test_an_integer_flag_refuses_what_is_not_plain_digits(flag, value, tmp_path, tiny_artifact_dir, capsys):
    """Python's int() reads `1_0` as 10 and other scripts' digits (Arabic-Indic, full-width) as numbers: every integer
    flag now takes plain ASCII digits only, refused in one line naming the flag (exit 2) before anything runs."""
    source = _input(tmp_path, "in.jsonl", '{"u": 1, "text": "the cat sat"}\n')
    extra = ["--shuffle", "--user-field=u"] if flag == "--k-threshold" else []
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER, f"{flag}={value}", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and flag in err[0] and "invalid int value" in err[0], err
    assert not os.path.exists(tmp_path / "o")


def test_a_public_summary_under_dev_is_refused(tmp_path, tiny_artifact_dir, capsys):
    """R8-15's other half: --public-summary /dev/shm/x.json was written although outputs under /dev are refused."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    public = f"/dev/shm/textdp-r8-{os.getpid()}.json"
    source = _input(tmp_path, "in.txt", "the cat sat\n")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--public-summary={public}", f"--artifact={tiny_artifact_dir}", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "under /dev" in err[0], err
    assert not os.path.exists(public)


# --- round 9b: R9b-1 DECIMAL author ids, R9b-2 invisible characters other than format characters -------------------


def test_decimal_author_ids_are_numbers_and_invisible_characters_are_dropped():
    """A Parquet DECIMAL(38,0) or DECIMAL(10,2) author column keyed "7" / "7.00" (JSON text), so every author started
    again at 0 in the ledger; an emoji's variation selector (VS16), a combining grapheme joiner, Hangul fillers or a
    braille blank made another author. Now an integral Decimal is its integer (a non-integral one is no safe id), and
    every Default_Ignorable_Code_Point is dropped like the format characters."""
    from decimal import Decimal

    from textdp.text.records import author_identity, unsafe_author_id

    assert author_identity(Decimal("7")) == author_identity(Decimal("7.00")) == author_identity(7) == ("number", 7)
    assert author_identity([Decimal("8.0")]) == author_identity([8])
    assert unsafe_author_id(Decimal("7.5")) and unsafe_author_id(Decimal("NaN")) and not unsafe_author_id(Decimal("7.00"))
    base = author_identity("kim\u2764")
    for variant in ("kim\u2764\ufe0f", "kim\u034f\u2764", "kim\u2764\u3164", "kim\u1160\u2764", "kim\u2764\u2800",
                    "kim\u180b\u2764", "kim\u2764\U000e0020"):
        assert author_identity(variant) == base, ascii(variant)


def test_a_decimal_author_column_counts_against_the_same_ledger_budget(tmp_path, tiny_artifact_dir):
    """R9b-1 end to end: authors at their budget from a JSONL run with integer ids; the same ids as a Parquet
    decimal(38,0) column are withheld (budget_exhausted), not released as new authors. Deterministic."""
    from decimal import Decimal

    import pyarrow as pa

    from tests.test_ledger import WORDS

    text = " ".join(WORDS[:5])
    _assert_parquet_authors_are_the_jsonl_ones(tmp_path, tiny_artifact_dir, [7, 8], text, pa.table(
        {"author": pa.array([Decimal(7), Decimal(8)], pa.decimal128(38, 0)), "text": [text, text]}))


# --- R9-1: a Privatizer's mechanism object changed after it was built -------------------------------------------


@pytest.mark.parametrize("name,value", [("epsilon", float("inf")), ("epsilon", 1e9), ("epsilon", -5.0)])
def test_a_privatizer_refuses_once_its_mechanism_object_was_changed(name, value, tiny_artifact_dir):
    """`p.mechanism.epsilon = inf` made privatize() the identity while privacy_statement() said covered; -5 gave a raw
    ValueError. Now privatize(), privacy_statement() and parameters() refuse with TextdpError once the mechanism's
    parameters differ from those it was built with; an untouched Privatizer works as before."""
    import textdp

    p = textdp.Privatizer(epsilon=1, artifact=tiny_artifact_dir)
    assert len(p.privatize(["the cat"])) == 1 and p.privacy_statement()["covered_by_guarantee"]
    setattr(p.mechanism, name, value)
    for call in (lambda: p.privatize(["the president said"]), p.privacy_statement, p.parameters):
        with pytest.raises(textdp.TextdpError, match="mechanism object was changed after it was built"):
            call()


# --- R9-4: a ledger key that can never be given again, or no secret ------------------------------------------------


@pytest.mark.parametrize("source", ["/dev/urandom", "/dev/zero", "repeated"])
def test_a_ledger_key_from_a_device_or_of_one_repeated_byte_is_refused(source, tmp_path, tiny_artifact_dir, capsys):
    """`--ledger-key-file /dev/urandom` created a ledger with a key no later run could give again (every later run
    refused "made with another key"); /dev/zero's NULs are no secret. Now refused in one line before the ledger is
    created."""
    key = source
    if source == "repeated":
        key = tmp_path / "weak.key"
        key.write_bytes(b"a" * 40)
    out = tmp_path / "o"
    ledger = tmp_path / "L.sqlite"
    args = [a for a in _ledger_args(tmp_path, tiny_artifact_dir, out / "w", ledger) if not a.startswith("--ledger-key-file")]
    code = cli_main(args + [f"--ledger-key-file={key}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and ("not a regular file" in err[0] or "no secret" in err[0]), err
    assert not ledger.exists()


def test_a_public_summary_at_the_outputs_ledger_release_name_is_refused_without_ledger(tmp_path, tiny_artifact_dir,
                                                                                       capsys):
    """R9-10: --public-summary <output>-ledger.json was accepted on a run without --ledger (the amplification
    report's name was refused), and the release's later --overwrite --ledger run was then refused with a false
    reason. Now the ledger release's name is always the release's own: refused in one line."""
    source = _input(tmp_path, "in.txt", "the cat sat\n")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=10",
                     f"--public-summary={tmp_path}/o/p-ledger.json", f"--artifact={tiny_artifact_dir}", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "the ledger release" in err[0], err
    assert not os.path.exists(tmp_path / "o")


# --- R9-13: a signal while the job's modules are imported ----------------------------------------------------------


@pytest.mark.parametrize("signame,code,word", [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted"),
                                               ("SIGHUP", 129, "hung up (SIGHUP)")])
def test_a_signal_while_the_job_module_is_imported_is_one_line(signame, code, word, tmp_path):
    """Ctrl-C, SIGTERM or SIGHUP in a job's first seconds (while run_job imported the job's module, outside the try
    that turns interrupts into one line) printed a 50-125-line traceback, and SIGTERM/SIGHUP exited as SIGINT. The
    signal is sent at that exact moment: the job's module is replaced by one that signals its own process when it is
    imported (deterministic). Now one line, the signal's exit code, nothing written."""
    import subprocess
    import sys

    (tmp_path / "signalling_job.py").write_text(f"import os, signal\nos.kill(os.getpid(), signal.{signame})\n",
                                               encoding="utf-8")
    script = ("import dataclasses, sys; sys.path.insert(0, sys.argv[1]); from pipelines import jobs; "
              "jobs.JOBS['privatize'] = dataclasses.replace(jobs.JOBS['privatize'], module='signalling_job'); "
              "sys.exit(jobs.run_job('privatize', ['--input=x.txt', '--output=' + sys.argv[1] + '/o/p', '--epsilon=1']))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), capture_output=True, text=True, timeout=120)
    err = done.stderr.strip().splitlines()
    assert done.returncode == code and len(err) == 1 and word in err[0] and "nothing was written" in err[0], done.stderr
    assert not (tmp_path / "o").exists()


# --- R9-12: a custom mechanism that is the identity on large batches only ----------------------------------------


class BigBatchIdentity(CappedExponential):
    """Right on batches of up to 1,000 ids (the trial's 64), the identity on the run's batches of 4,096."""

    name = "r9-big-batch-identity"

    def privatize_ids(self, ids, rng):
        ids = np.asarray(ids, dtype=np.int64)
        return ids.copy() if len(ids) > 1000 else CappedExponential.privatize_ids(self, ids, rng)


def test_a_mechanism_that_is_the_identity_on_large_batches_is_warned_before_the_run(tmp_path, tiny_artifact_dir,
                                                                                     capsys):
    """The trial released 64 ids; the run calls privatize_ids with BATCH_TOKENS (4,096) ids, where this class is the
    identity: 99% of the words were released unchanged under a covered statement, no warning. Now the trial also
    releases one batch of the run's size: one WARNING line before the run and in both summaries. The honest class at
    the same epsilon changes > 90% of the words of this artifact alone and in a batch (keep probability < 0.1, see
    the band test), so it is warned with probability far below 1e-9."""
    from textdp.artifact.store import Artifact
    from textdp.mechanisms import trial_build
    from textdp.privacy.statements import trial_warnings

    artifact = Artifact(tiny_artifact_dir)
    trial = trial_build(BigBatchIdentity, artifact, 1.0)
    assert trial.batch == 4096 and trial.batch_changed == 0.0 and trial.changed > 50
    assert any("one batch of 4,096" in w for w in trial_warnings(trial))
    honest = trial_build(CappedExponential, artifact, 1.0)
    assert honest.batch_changed > 0.8 and trial_warnings(honest) == []
    source = _input(tmp_path, "in.txt", "the president said our police were cold\n")
    out = tmp_path / "o" / "p"
    assert cli_main(["privatize", RUNNER, "--epsilon=1", f"--input={source}", f"--output={out}",
                     f"--public-summary={tmp_path}/o/pub.json", f"--artifact={tiny_artifact_dir}",
                     "--mechanism=tests.test_hostile_round8:BigBatchIdentity"]) == 0
    assert "one batch of 4,096" in capsys.readouterr().err
    for path in (f"{out}-summary.json", f"{tmp_path}/o/pub.json"):
        assert any("one batch of 4,096" in w for w in json.load(open(path, encoding="utf-8"))["warnings"])


# --- R9-15: a refusal leaves no folder it made ------------------------------------------------------------------


def test_a_refused_run_removes_the_folders_it_made_for_its_locks(tmp_path, tiny_artifact_dir, capsys):
    """An --output too long for the file system was refused (exit 2) after its parent folders were made: 17 empty
    nested folders stayed. Now the folders a refused run made are removed; one that held something before is kept."""
    deep = tmp_path / "base"
    deep.mkdir()
    (deep / "keep.txt").write_text("mine\n", encoding="utf-8")
    long = str(deep)
    for _ in range(20):
        long += "/" + "e" * 240
    source = _input(tmp_path, "in.txt", "the cat sat\n")
    code = cli_main(["privatize", f"--input={source}", f"--output={long}/p", "--epsilon=10",
                     f"--artifact={tiny_artifact_dir}", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "too long" in err[0]
    assert sorted(os.listdir(deep)) == ["keep.txt"]


# --- audit --corpus / --prior-corpus matching a dangling symlink -----------------------------------------------------


@pytest.mark.parametrize("flag", ["--corpus", "--prior-corpus"])
def test_audit_refuses_a_corpus_pattern_matching_a_dangling_symlink(flag, tmp_path, tiny_artifact_dir, capsys):
    """privatize's --input refused a glob matching a dangling symlink (round 6 F13), audit's --corpus skipped it
    silently (exit 0, the file left out). Now the same one-line refusal (transforms.io.refuse_skipped_matches)."""
    import shutil

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "reviews.txt"),
                folder / "a.txt")
    other = tmp_path / "prior"
    other.mkdir()
    (other / "p.txt").write_text("a film about a dog\n" * 3, encoding="utf-8")
    target = folder if flag == "--corpus" else other
    os.symlink(tmp_path / "nowhere.txt", target / "b.txt")
    code = cli_main(["audit", f"--artifact={tiny_artifact_dir}", "--checks=inversion", "--epsilons=5",
                     f"--corpus={folder}/*.txt", f"--prior-corpus={other}/*.txt", "--inversion-tokens=50",
                     "--mc-draws=500", "--prior-words=100", "--records=5", f"--output={tmp_path}/aud", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{flag} " in err[0] and "dangling or looping symlink" in err[0], err
    assert not (tmp_path / "aud").exists()
