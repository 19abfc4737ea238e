"""The shuffle with two worker processes: output file and line carry no input order or author.

Marked slow (about 20-40 s each): the FnApiRunner starts two SDK worker processes
(``--direct_running_mode=multi_processing --direct_num_workers=2``).
"""

import glob
import json
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from scipy import stats

from transforms.shard_writer import WriteShuffledShards
from transforms.shuffle import ShuffleAmplifier

RECORDS = 2000
AUTHORS = 40


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_workers_output_position_and_file_split_are_independent_of_input(imdb_rows, tmp_path):
    """Three tests at p < 1e-4 each, so the false-failure rate is at most 3e-4 (union bound):

    1. Spearman rank correlation between input position and output position (shards concatenated
       in name order): p-value < 1e-4 fails;
    2. Mann-Whitney U between the input positions written to shard 0 and to shard 1;
    3. chi-square of author x shard (40 authors x 8 shards, about 6 records per cell).
    Under a uniform random permutation each p-value is (close to) uniform on [0, 1].
    """
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    per_file = RECORDS // 4
    for part in range(4):  # several input files, so that reading is split between the workers
        with open(in_dir / f"part-{part}.jsonl", "w", encoding="utf-8") as handle:
            for pos in range(part * per_file, (part + 1) * per_file):
                row = imdb_rows[pos]
                handle.write(json.dumps({"pos": pos, "author": f"user{pos % AUTHORS}", "text": row["text"]}) + "\n")
    out_dir = str(tmp_path / "out")
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    with beam.Pipeline(runner="FnApiRunner", options=options) as pipeline:
        records = (pipeline | "Read" >> beam.io.ReadFromText(str(in_dir / "part-*.jsonl"))
                   | "Parse" >> beam.Map(json.loads)
                   | "KeepAuthorCopy" >> beam.Map(lambda r: dict(r, author_for_test=r["author"])))
        outputs = records | "Amplify" >> ShuffleAmplifier(user_field="author", records_per_shard=250)
        outputs["shards"] | "Write" >> WriteShuffledShards(os.path.join(out_dir, "records"), "jsonl", ".jsonl")
        pids = ((records | "PidIn" >> beam.Map(lambda _: os.getpid()))
                , (outputs["records"] | "PidOut" >> beam.Map(lambda _: os.getpid()))) | beam.Flatten()
        (pids | "DistinctPids" >> beam.Distinct() | "PidText" >> beam.Map(str)
         | "WritePids" >> beam.io.WriteToText(os.path.join(out_dir, "pids")))

    worker_pids = {int(line) for path in glob.glob(os.path.join(out_dir, "pids*")) for line in open(path)}
    assert worker_pids and os.getpid() not in worker_pids  # the work ran in worker processes

    shards = sorted(glob.glob(os.path.join(out_dir, "records-*-of-*.jsonl")))
    assert len(shards) == 8 and shards[-1].endswith("records-00007-of-00008.jsonl")
    per_shard = [[json.loads(line) for line in open(path, encoding="utf-8")] for path in shards]
    out = [record for shard in per_shard for record in shard]
    assert sorted(r["pos"] for r in out) == list(range(RECORDS))
    assert all("author" not in r for r in out)

    positions = [r["pos"] for r in out]
    assert stats.spearmanr(np.arange(RECORDS), positions).pvalue >= 1e-4
    shard0, shard1 = ([r["pos"] for r in shard] for shard in per_shard[:2])
    assert min(len(shard0), len(shard1)) > 0
    assert stats.mannwhitneyu(shard0, shard1).pvalue >= 1e-4
    table = np.zeros((AUTHORS, len(shards)))
    for index, shard in enumerate(per_shard):
        for r in shard:
            table[int(r["author_for_test"][4:]), index] += 1
    assert stats.chi2_contingency(table).pvalue >= 1e-4


def _first_records_positions(tmp_path, options, records, per_shard):
    """ShuffleAmplifier + WriteShuffledShards on ``records`` one-field records read in order from one
    file; returns (number of files, output positions of the input records in input order)."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"pos": pos, "text": f"w{pos}"}) + "\n" for pos in range(records)),
                    encoding="utf-8")
    prefix = str(tmp_path / "out" / "records")
    with beam.Pipeline(runner="FnApiRunner", options=PipelineOptions(options)) as pipeline:
        outputs = (pipeline | "Read" >> beam.io.ReadFromText(str(path)) | "Parse" >> beam.Map(json.loads)
                   | "Amplify" >> ShuffleAmplifier(records_per_shard=per_shard))
        outputs["shards"] | "Write" >> WriteShuffledShards(prefix, "jsonl", ".jsonl")
    files = sorted(glob.glob(prefix + "-*-of-*.jsonl"))
    out = [json.loads(line)["pos"] for name in files for line in open(name, encoding="utf-8")]
    assert sorted(out) == list(range(records))
    where = {pos: index for index, pos in enumerate(out)}
    return len(files), np.array([where[pos] for pos in range(records)], dtype=float)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("options", [[], ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]],
                         ids=["one-process", "two-workers"])
def test_first_records_land_uniformly_over_the_output(tmp_path, options):
    """10,000 records read in order, 100 records per output file (100 files, far more than 10 shards'
    worth): the output positions (file in name order, then line) of the first 1% of input records are
    uniform over the output.

    Kolmogorov-Smirnov one-sample test of the 100 normalised positions against Uniform(0, 1), failing
    at p < 1e-3: false-failure rate 1e-3 per run, 2e-3 for both runs (conservative: positions drawn
    without replacement are closer to uniform than independent draws). The code before this change
    emitted its buckets in order of first arrival: the same test on it gave p = 8e-13 and 1e-14 in one
    process and 4e-4 and 3e-6 with two workers, so it fails there.
    """
    files, positions = _first_records_positions(tmp_path, options, 10_000, 100)
    assert files == 100
    assert stats.kstest((positions[:100] + 0.5) / 10_000, "uniform").pvalue >= 1e-3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_privatize_shuffle_writes_the_shuffled_shards(small_artifact_dir, imdb_rows, tmp_path):
    """``textdp privatize --shuffle`` with two worker processes writes the Amplifier's shards itself:
    2,000 records, 100 per file -> exactly 20 files named -000NN-of-00020, and the first 5% of input
    records (100) are uniform over the output (KS, p < 1e-3 fails: false-failure rate 1e-3)."""
    from pipelines.privatize import run

    records = 2000
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    for part in range(2):
        with open(in_dir / f"part-{part}.jsonl", "w", encoding="utf-8") as handle:
            for pos in range(part * 1000, (part + 1) * 1000):
                words = imdb_rows[pos]["text"].split()[:8]
                handle.write(json.dumps({"pos": pos, "text": " ".join(words)}) + "\n")
    output = str(tmp_path / "out" / "reviews")
    assert run([f"--input={in_dir}/part-*.jsonl", f"--output={output}", f"--artifact={small_artifact_dir}",
                "--epsilon=5", "--shuffle", "--shuffle-shard-records=100", "--runner=FnApiRunner",
                "--direct_running_mode=multi_processing", "--direct_num_workers=2"]) == 0
    files = sorted(glob.glob(output + "-*-of-*.jsonl"))
    assert len(files) == 20 and files[-1].endswith("-00019-of-00020.jsonl")
    out = [json.loads(line)["pos"] for path in files for line in open(path, encoding="utf-8")]
    assert sorted(out) == list(range(records))
    where = {pos: index for index, pos in enumerate(out)}
    first = np.array([where[pos] for pos in range(100)], dtype=float)
    assert stats.kstest((first + 0.5) / records, "uniform").pvalue >= 1e-3
