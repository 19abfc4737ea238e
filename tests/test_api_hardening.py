"""Issue 25 item 11: the Python API refuses what it cannot privatize with TextdpError, accepts numpy
integers, survives pickling (``beam.Map(privatizer.privatize)``) and is safe to share between threads.

Real 300-word GloVe artifact and the local Beam runner; nothing is mocked.
"""

import pickle
import random
import string
import threading
from collections import OrderedDict

import apache_beam as beam
import numpy as np
import pandas as pd
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

import textdp
from textdp.artifact.locate import open_artifact
from textdp.errors import ParameterError, TextdpError


@pytest.fixture(scope="module")
def words(tiny_artifact_dir):
    return [w for w in open_artifact(tiny_artifact_dir).words if w.isalpha()]


@pytest.fixture(scope="module")
def privatizer(tiny_artifact_dir):
    return textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)


@pytest.mark.parametrize("bad, kind", [({"a": "the text"}, "dict"), (OrderedDict(a="the text"), "OrderedDict"),
                                       (pd.DataFrame({"review": ["the text"]}), "DataFrame"), (7, "int"),
                                       (None, "NoneType"), (3.5, "float")])
def test_mappings_frames_and_non_iterables_are_refused_by_kind(privatizer, bad, kind):
    with pytest.raises(TextdpError, match=f"not a? ?{kind}") as info:
        privatizer.privatize(bad)
    assert "the text" not in str(info.value)


def test_numpy_integers_are_seeds(privatizer, words):
    texts = [" ".join(words[:20])] * 3
    assert privatizer.privatize(texts, seed=np.int64(3)) == privatizer.privatize(texts, seed=3)
    assert privatizer.privatize(texts, seed=np.uint8(3)) == privatizer.privatize(texts, seed=3)
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(TextdpError, match="seed must be an integer >= 0"):
            privatizer.privatize(texts, seed=bad)


@pytest.mark.parametrize("keyword, value", [("max_text_bytes", "10"), ("max_text_bytes", 0), ("max_text_bytes", True),
                                            ("unk_token", None), ("unk_token", ""), ("unk_token", 5),
                                            ("threads", "2"), ("threads", 0), ("batch_tokens", 1.5)])
def test_constructor_arguments_of_the_wrong_kind_are_textdp_errors(tiny_artifact_dir, keyword, value):
    with pytest.raises(TextdpError, match=keyword):
        textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, **{keyword: value})


def test_one_error_hierarchy_for_mechanism_parameters_and_keywords(tiny_artifact_dir):
    with pytest.raises(ParameterError):  # a TextdpError (and a ValueError, as before)
        textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, mechanism="custext", k=1)
    with pytest.raises(TextdpError):
        textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, no_such_keyword=1)
    assert issubclass(ParameterError, TextdpError)
    numpy_ints = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir, max_text_bytes=np.int32(100),
                                   threads=np.int64(1))
    assert numpy_ints.max_text_bytes == 100 and numpy_ints.threads == 1


def test_a_pickled_privatizer_reopens_its_artifact_with_fresh_noise(privatizer, words):
    copy = pickle.loads(pickle.dumps(privatizer))
    texts = [" ".join(words[:40])] * 4
    assert copy.parameters() == privatizer.parameters()
    assert copy.privatize(texts, seed=11) == privatizer.privatize(texts, seed=11)  # the same mechanism
    assert b"the text" not in pickle.dumps(privatizer)
    unseeded = [copy.privatize(texts), privatizer.privatize(texts)]
    assert unseeded[0] != unseeded[1]  # 160 noisy words at epsilon 5: equal only if no noise at all


def test_beam_map_of_the_bound_method_runs_on_the_local_runner(privatizer, words):
    batches = [[" ".join(words[i:i + 10])] for i in range(0, 50, 10)]
    expected_lengths = [[10] for _ in batches]
    with beam.Pipeline(runner="FnApiRunner", options=PipelineOptions()) as pipeline:
        released = (pipeline | beam.Create(batches) | beam.Map(privatizer.privatize)
                    | beam.Map(lambda out: [len(text.split(" ")) for text in out]))
        assert_that(released, equal_to(expected_lengths))


def test_threads_sharing_one_privatizer_get_what_each_would_alone(privatizer, words):
    """Without the lock this fails with an IndexError in the tokenizer's memo (three threads add
    ~240k new words: past the memo's 65,536)."""
    def texts_of(thread, r):
        rnd = random.Random(f"{thread}-{r}")
        return [" ".join(rnd.choice(words) if rnd.random() < 0.5 else
                         "".join(rnd.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(50))
                for _ in range(200)]

    results, failures = {}, []

    def work(thread):
        try:
            for r in range(16):
                results[thread, r] = privatizer.privatize(texts_of(thread, r), seed=thread)
        except Exception as exc:  # noqa: BLE001  (reported below)
            failures.append(repr(exc))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for thread in range(3):  # what each thread got is what one call alone gives
        assert results[thread, 15] == privatizer.privatize(texts_of(thread, 15), seed=thread)
