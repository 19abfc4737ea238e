"""Run-time, parameter and API variants found by the third hostile round (issue 25; the findings are
numbered F3-F18 in the round's report): each has a defined outcome -- an error record, a one-line
refusal before the run (exit 2), or a warning on the console and in the summary. Real runs on the local
runner (FnApiRunner) and the real GloVe artifacts of tests/conftest.py; nothing is mocked."""

import glob
import json
import os
import threading

import numpy as np
import pytest

import textdp
from pipelines.cli import main as cli_main

RUNNER = ["--runner", "FnApiRunner"]


def _run(capsys, args):
    code = cli_main(args + RUNNER)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _privatize(tmp_path, artifact, *args, epsilon="10"):
    return ["privatize", "--epsilon", epsilon, "--artifact", artifact, "--output", str(tmp_path / "o" / "x"),
            "--seed", "1", *args]


def _summary(tmp_path):
    with open(tmp_path / "o" / "x-summary.json") as handle:
        return json.load(handle)


def _lines(pattern):
    out = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as handle:
            out += [line for line in handle.read().splitlines() if line]
    return out


# --- F12: a record without its --user-field author is an error record, the job goes on ------------------


def test_a_record_without_its_author_is_an_error_record_under_shuffle(tiny_artifact_dir, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text('{"u": "a", "text": "the city"}\n{"u": "b", "text": "he said"}\n'
                    '{"text": "SECRETCANARY was"}\n{"u": null, "text": "it was SECRETCANARY"}\n'
                    '{"u": "a", "text": "they were"}\n')
    code, out, err = _run(capsys, _privatize(tmp_path, tiny_artifact_dir, "--input", str(data), "--shuffle",
                                             "--user-field", "u", "--max-failed-fraction", "1"))
    assert code == 0, err
    summary = _summary(tmp_path)
    records = summary["records"]
    assert (records["in"], records["out"], records["failed"]) == (5, 3, 2)
    assert records["failed_by_reason"] == {"missing_author": 2}
    errors = [json.loads(line) for line in _lines(str(tmp_path / "o" / "x-errors-*.jsonl"))]
    assert sorted((e["position"], e["reason"]) for e in errors) == [(3, "missing_author"), (4, "missing_author")]
    assert "absent" in errors[0]["detail"] + errors[1]["detail"] and "null" in errors[0]["detail"] + errors[1]["detail"]
    released = [json.loads(line) for line in _lines(str(tmp_path / "o" / "x-*-of-*.jsonl"))]
    assert len(released) == 3 and all("u" not in r for r in released)
    assert "SECRETCANARY" not in out + err + json.dumps(summary) + json.dumps(errors)


# --- F7 / F8: the Python API never hangs on a re-entrant call and refuses a 0-d array ---------------------


def _in_thread(function, seconds=120):
    """Runs ``function`` in a daemon thread; fails (instead of hanging the suite) if it does not return."""
    result = {}

    def target():
        try:
            result["value"] = function()
        except BaseException as error:  # pylint: disable=broad-except
            result["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call did not return within {seconds} s (deadlock)"
    return result


def test_a_generator_that_uses_the_same_privatizer_does_not_deadlock(tiny_artifact_dir):
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    texts = ["the city", "he said"]
    result = _in_thread(lambda: p.privatize(p.privatize([t], seed=1)[0] for t in texts))
    assert "error" not in result, result.get("error")
    assert len(result["value"]) == 2 and all(isinstance(text, str) for text in result["value"])
    # the Privatizer is still usable afterwards, from another thread too (the lock was released)
    assert len(_in_thread(lambda: p.privatize(["it was"]))["value"]) == 1

    class Sneaky(str):  # a str whose method calls the Privatizer while a call is running on this thread
        def strip(self, *args):
            return p.privatize(["the city"])[0]

    result = _in_thread(lambda: p.privatize([Sneaky("he said")]))
    assert isinstance(result.get("error"), textdp.TextdpError), result
    assert "called again from inside a call of the same Privatizer" in str(result["error"])
    assert len(_in_thread(lambda: p.privatize(["it was"]))["value"]) == 1


def test_a_0d_array_and_byte_buffers_are_refused_naming_the_kind(tiny_artifact_dir):
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    with pytest.raises(textdp.TextdpError, match="not a 0-d numpy array") as caught:
        p.privatize(np.array("the SECRETCANARY city"))
    assert isinstance(caught.value, TypeError) and "SECRETCANARY" not in str(caught.value)
    for buffer in (bytearray(b"the city"), memoryview(b"the city")):
        with pytest.raises(textdp.TextdpError, match=f"not a {type(buffer).__name__}"):
            p.privatize(buffer)
    assert len(p.privatize(np.array(["the city", "he said"]))) == 2  # a 1-d array is a list of texts
