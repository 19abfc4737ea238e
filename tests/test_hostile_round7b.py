"""Round-7 hostile findings fixed on branch fix7b (issue 25): F11, F10, F5, F7.
Real runs of the CLI on the local runner (FnApiRunner) over the real 300-word GloVe artifact, real files; nothing
is mocked."""

import gzip
import os
import shutil

import pytest

from pipelines.cli import main as cli_main
from textdp.errors import TextdpError
from transforms.io import DUPLICATE_SAMPLE_BYTES, refuse_duplicate_content

RUNNER = "--runner=FnApiRunner"
REVIEWS = ["The pasta was cold and the waiter forgot our drinks.", "A fine hotel, the staff were kind.",
           "We would not go back to that place again."]


def _input(directory, name="in.txt", lines=REVIEWS) -> str:
    path = directory / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


# --- F11: the same content matched twice as different files --------------------------------------------------------


@pytest.mark.parametrize("copy", ["cp copy", "gz beside the original"])
def test_f11_two_files_with_the_same_content_are_refused(copy, tmp_path, tiny_artifact_dir, capsys):
    """A cp copy, or reviews.txt beside reviews.txt.gz, was privatized once per copy with fresh noise (composing)
    under the per-record claim; now refused in one line before the run, naming both files, never their content."""
    directory = tmp_path / "d"
    directory.mkdir()
    source = _input(directory, "reviews.txt")
    if copy == "cp copy":
        shutil.copyfile(source, directory / "reviews copy.txt")
    else:
        with open(source, "rb") as plain, gzip.open(directory / "reviews.txt.gz", "wb") as packed:
            packed.write(plain.read())
    assert cli_main(["privatize", f"--input={directory}/*", "--format=text", f"--output={tmp_path}/o/p",
                     "--epsilon=10", f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "same content" in err[0] and "reviews.txt" in err[0]
    assert ("reviews copy.txt" if copy == "cp copy" else "reviews.txt.gz") in err[0]
    assert "pasta" not in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


def test_f11_audit_corpus_with_two_copies_is_refused(tmp_path, tiny_artifact_dir, capsys):
    """audit --corpus reads its files through the same check."""
    directory = tmp_path / "d"
    directory.mkdir()
    source = _input(directory, "a.txt")
    shutil.copyfile(source, directory / "b.txt")
    code = cli_main(["audit", f"--artifact={tiny_artifact_dir}", "--checks=inversion", "--epsilons=5",
                     f"--corpus={directory}/*.txt", f"--output={tmp_path}/o", RUNNER])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "same content" in err[0] and "b.txt" in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


def test_f11_files_equal_at_both_ends_but_not_in_the_middle_are_not_refused(tmp_path):
    """The bounded prefix+suffix digest only selects candidates: two files of one size that agree on their first and
    last 64 KiB but differ in the middle are read whole and kept; same-size distinct files and distinct compressed
    files pass too."""
    ends = b"word " * (DUPLICATE_SAMPLE_BYTES // 5 + 1)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(ends + b"alpha\n" + ends)
    b.write_bytes(ends + b"gamma\n" + ends)
    with gzip.open(tmp_path / "c.txt.gz", "wb") as packed:
        packed.write(ends + b"delta\n" + ends)
    refuse_duplicate_content("--input", [str(a), str(b), str(tmp_path / "c.txt.gz")])
    with gzip.open(tmp_path / "d.txt.gz", "wb") as packed:
        packed.write(ends + b"gamma\n" + ends)
    with pytest.raises(TextdpError, match="same content"):
        refuse_duplicate_content("--input", [str(a), str(b), str(tmp_path / "c.txt.gz"), str(tmp_path / "d.txt.gz")])


# --- F10: a field present but never usable ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["null", "1.5"])
def test_f10_a_user_field_never_usable_in_the_sample_is_refused(value, tmp_path, tiny_artifact_dir, capsys):
    """A --user-field null (or an unsafe float) in every sampled record ran the whole job, then failed every record;
    now refused in one line before the run, with the counts, never a value."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"u": {value}, "text": "the pasta was cold"}}\n' for _ in range(30)), encoding="utf-8")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=5", "--shuffle",
                     "--user-field=u", f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--user-field u" in err[0] and "none of the first 30" in err[0]
    assert ("30 null or absent" if value == "null" else "30 a floating-point") in err[0] and "pasta" not in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


def test_f10_a_user_field_usable_in_one_sampled_record_runs(tmp_path, tiny_artifact_dir, capsys):
    """One usable author among nulls: the run goes ahead and reports the others per record (missing_author)."""
    source = tmp_path / "in.jsonl"
    source.write_text('{"u": null, "text": "the pasta was cold"}\n{"u": 7, "text": "the pasta was cold"}\n',
                      encoding="utf-8")
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=5", "--shuffle",
                     "--user-field=u", "--max-failed-fraction=1", f"--artifact={tiny_artifact_dir}", RUNNER]) == 0


def test_f10_an_all_null_parquet_text_column_is_refused(tmp_path, tiny_artifact_dir, capsys):
    """A Parquet text column null in every row ran and failed every record (not_a_string); the footer's row-group
    statistics say so before the run: refused in one line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"text": pa.array([None, None], pa.string()), "id": [1, 2]}), source)
    assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=5",
                     f"--artifact={tiny_artifact_dir}", RUNNER]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--text-field text" in err[0] and "null in every row" in err[0]
    assert not os.path.exists(f"{tmp_path}/o")


# --- F5: Privatize's shape_field and text_fields -----------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{"text_fields": ("text", "text")}, {"text_fields": ("text",), "shape_field": "text"},
                                    {"shape_field": "text"}, {"text_fields": ("text",), "shape_field": ""}])
def test_f5_a_repeated_text_field_or_a_shape_field_on_the_text_is_refused_at_construction(kwargs, tiny_artifact_dir):
    """text_fields=("text", "text") privatized the field twice and double-counted its tokens; shape_field="text"
    replaced the released text by its shape (plain strings are released under "text"): refused when built."""
    from transforms import Privatize

    with pytest.raises(TextdpError, match="more than once|shape_field"):
        Privatize(epsilon=5, artifact=tiny_artifact_dir, **kwargs)


def test_f5_a_record_that_has_the_shape_field_is_an_error_record_never_overwritten(tiny_artifact_dir):
    """shape_field naming a field a record has silently replaced the record's own value (its id) by the shape; now
    that record is an error record shape_field_taken (counted in stats: failed), the others are released with
    their shape."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from transforms import Privatize

    with beam.Pipeline("FnApiRunner", options=PipelineOptions()) as pipeline:
        result = (pipeline | beam.Create([{"text": "the was cold", "id": "customer-4711"}, {"text": "the was cold"}])
                  | Privatize(epsilon=5, artifact=tiny_artifact_dir, text_fields=("text",), shape_field="id"))
        assert_that(result.released | beam.Map(lambda r: sorted(r) + [isinstance(r["id"], dict)]),
                    equal_to([["id", "text", True]]), label="released")
        assert_that(result.errors | beam.Map(lambda e: (e["reason"], "customer" in e["detail"])),
                    equal_to([("shape_field_taken", False)]), label="errors")
        assert_that(result.stats | beam.Map(lambda s: (s["records"], s["failed"], s["failed:shape_field_taken"],
                                                       s["tokens"])), equal_to([(1, 1, 1, 3)]), label="stats")


# --- F7: error shards with raw text are owner-only -----------------------------------------------------------------


def test_f7_keep_failed_text_error_shards_are_owner_only(tmp_path, tiny_artifact_dir):
    """--keep-failed-text wrote the raw text of failed records into an error shard of mode 0644 from a 0600 input;
    now every local error shard of such a run is 0600 (even with a permissive umask); without the flag (no raw text)
    the umask applies as before."""
    import glob
    import stat

    source = tmp_path / "sec.jsonl"
    source.write_text('{"text": "the secretcanary was cold"}\n{"text": 5, "note": "x"}\n', encoding="utf-8")
    os.chmod(source, 0o600)
    old = os.umask(0o022)
    try:
        for keep, out in ((True, "k/s"), (False, "n/s")):
            assert cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/{out}", "--epsilon=10",
                             "--max-failed-fraction=1", f"--artifact={tiny_artifact_dir}", RUNNER]
                            + (["--keep-failed-text"] if keep else [])) == 0
            shards = glob.glob(f"{tmp_path}/{out}-errors-*.jsonl")
            assert shards
            modes = {stat.S_IMODE(os.stat(path).st_mode) for path in shards}
            assert modes == ({0o600} if keep else {0o644}), (keep, modes)
            text = "".join(open(path, encoding="utf-8").read() for path in shards)
            assert ('\\"note\\"' in text) == keep  # the raw line is there only with the flag
    finally:
        os.umask(old)
