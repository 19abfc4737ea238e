"""Round-8 findings R8-9, R8b-8, R8b-6, R8b-4 and R8b-7 (issue 25), each on the real component (the local Beam
runner FnApiRunner, the real 300-word GloVe artifact, real files); nothing is mocked."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from pipelines.cli import main as cli_main
from textdp.mechanisms.madlib import Madlib

RUNNER = "--runner=FnApiRunner"


def _input(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- R8-9: a custom mechanism's parameters() / privacy_statement() must be writable as JSON --------------------------


class Float32Epsilon(Madlib):
    """Madlib reporting its epsilon as the np.float32 a numpy-based mechanism naturally stores."""

    name = "r8d-f32"

    def parameters(self):
        return dict(super().parameters(), epsilon=np.float32(self.epsilon))


class SetInStatement(Madlib):
    name = "r8d-set"

    def privacy_statement(self):
        return dict(super().privacy_statement(), notes={"a", "b"})


class ObjectInParameters(Madlib):
    name = "r8d-object"

    def parameters(self):
        return dict(super().parameters(), extra={"inner": [1, object()]})


@pytest.mark.parametrize("cls,phrase", [("SetInStatement", "privacy_statement() cannot be written to the summaries as "
                                                           "JSON: key 'notes' holds a set"),
                                        ("ObjectInParameters", "parameters() cannot be written to the summaries as JSON: "
                                                               "key 'extra.inner[1]' holds a object")])
def test_a_custom_mechanism_whose_documents_json_cannot_write_is_refused_before_the_run(cls, phrase, tmp_path,
                                                                                      tiny_artifact_dir, capsys):
    """R8-9: a set in privacy_statement() ran the whole job, then failed at WriteSummary (exit 1), leaving a release
    with no summary. Now the launcher serialises both documents strictly when it builds the mechanism and refuses in
    one line naming the key (exit 2) before any output exists; the API refuses the same."""
    import textdp

    source = _input(tmp_path, "in.txt", "the cat sat on the mat\n")
    code = cli_main(["privatize", f"--input={source}", f"--output={tmp_path}/o/p", "--epsilon=5",
                     f"--artifact={tiny_artifact_dir}", RUNNER, f"--mechanism=tests.test_hostile_round8d:{cls}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and phrase in err[0], err
    assert not os.path.exists(tmp_path / "o")
    with pytest.raises(textdp.TextdpError, match="cannot be written to the summaries as JSON"):
        textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, mechanism=globals()[cls])


def test_a_numpy_float32_epsilon_is_written_as_the_number_it_holds(tmp_path, tiny_artifact_dir):
    """R8-9: an np.float32 epsilon is natural; the summaries' own conversion (textdp.jsonsafe.strict_json, used by
    transforms.io.write_json) writes numpy scalars as Python numbers, so the run completes with both summaries."""
    source = _input(tmp_path, "in.txt", "the cat sat on the mat\n")
    out = tmp_path / "o"
    code = cli_main(["privatize", f"--input={source}", f"--output={out}/p", "--epsilon=5",
                     f"--artifact={tiny_artifact_dir}", RUNNER, "--mechanism=tests.test_hostile_round8d:Float32Epsilon",
                     f"--public-summary={out}/pub.json"])
    assert code == 0
    public = json.loads((out / "pub.json").read_text(encoding="utf-8"))
    operator = json.loads((out / "p-summary.json").read_text(encoding="utf-8"))
    assert '"epsilon": 5.0' in json.dumps(public) and '"epsilon": 5.0' in json.dumps(operator)


def test_strict_json_helper_names_the_first_key_json_cannot_write():
    from textdp.jsonsafe import dumps_strict, json_problem

    assert json_problem({"epsilon": np.float32(2), "n": np.int64(3), "x": float("inf")}) is None
    assert json.loads(dumps_strict({"epsilon": np.float32(2), "x": float("nan")})) == {"epsilon": 2.0, "x": "nan"}
    assert json_problem({"a": {"b": {1, 2}}}) == "key 'a.b' holds a set, which JSON cannot write"
    assert "is a tuple" in json_problem({(1, 2): 3})
