"""ShuffleAmplifier with two worker processes: output order and file split carry no input order or author.

Marked slow (about 20 s): the FnApiRunner starts two SDK worker processes
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
    3. chi-square of author x shard (40 authors x 2 shards, about 25 records per cell).
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
        outputs = records | "Amplify" >> ShuffleAmplifier(user_field="author", records_per_bucket=250)
        (outputs["records"] | "Json" >> beam.Map(json.dumps)
         | "Write" >> beam.io.WriteToText(os.path.join(out_dir, "records"), num_shards=2))
        pids = ((records | "PidIn" >> beam.Map(lambda _: os.getpid()))
                , (outputs["records"] | "PidOut" >> beam.Map(lambda _: os.getpid()))) | beam.Flatten()
        (pids | "DistinctPids" >> beam.Distinct() | "PidText" >> beam.Map(str)
         | "WritePids" >> beam.io.WriteToText(os.path.join(out_dir, "pids")))

    worker_pids = {int(line) for path in glob.glob(os.path.join(out_dir, "pids*")) for line in open(path)}
    assert worker_pids and os.getpid() not in worker_pids  # the work ran in worker processes

    shards = sorted(glob.glob(os.path.join(out_dir, "records-*")))
    assert len(shards) == 2
    per_shard = [[json.loads(line) for line in open(path, encoding="utf-8")] for path in shards]
    out = per_shard[0] + per_shard[1]
    assert sorted(r["pos"] for r in out) == list(range(RECORDS))
    assert all("author" not in r for r in out)

    positions = [r["pos"] for r in out]
    assert stats.spearmanr(np.arange(RECORDS), positions).pvalue >= 1e-4
    shard0, shard1 = ([r["pos"] for r in shard] for shard in per_shard)
    assert min(len(shard0), len(shard1)) > 0
    assert stats.mannwhitneyu(shard0, shard1).pvalue >= 1e-4
    table = np.zeros((AUTHORS, 2))
    for index, shard in enumerate(per_shard):
        for r in shard:
            table[int(r["author_for_test"][4:]), index] += 1
    assert stats.chi2_contingency(table).pvalue >= 1e-4
