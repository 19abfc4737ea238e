"""Writing the shuffled output: each shard to its own file, in the order the shuffle chose.

Beam's file sinks decide themselves which records go to which file and in what order, so they
would undo (or at least not promise) the uniform permutation of ``ShuffleAmplifier``. Here every
``(index, S, records)`` shard is written whole to ``<output>-<index>-of-<S><suffix>`` with its
records in the order given, so a record's output file and line are exactly those the shuffle
drew. A file is written under a temporary name in the same directory and renamed into place, so a
retried or failed worker never leaves a half-written shard under the final name. Locally that is
one ``os.replace``: it replaces a file (a retried shard's) atomically and never deletes anything;
a directory that appeared at the name after the pre-run check fails the run, untouched (Beam's
``FileSystems.delete`` would have removed it recursively).

Error messages never quote a record: a Parquet record that does not fit the schema is reported by
column name and type only.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import uuid
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from textdp.errors import TextdpError

SHARD_NAME = "{prefix}-{index:05d}-of-{total:05d}{suffix}"


def shard_path(prefix: str, index: int, total: int, suffix: str) -> str:
    return SHARD_NAME.format(prefix=prefix, index=index, total=total, suffix=suffix)


def _temporary_path(final: str) -> str:
    """A name beside ``final`` (local or gs://) that no output glob matches."""
    return posixpath.join(posixpath.dirname(final), f"{temporary_name_part()}{posixpath.basename(final)}")


def temporary_name_part() -> str:
    """What ``_temporary_path`` puts before a shard's name (the output guard counts it against NAME_MAX)."""
    return f".textdp-tmp-{uuid.uuid4().hex}-"


def encode_shard(records, data_format: str, schema=None) -> bytes:
    """The bytes of one shard file: text lines, JSON lines, or a Parquet file with ``schema``."""
    if data_format == "text":
        return "".join(f"{record}\n" for record in records).encode("utf-8")
    if data_format == "jsonl":
        return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8")
    if data_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pa.Table.from_pylist(list(records), schema=schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            columns = ", ".join(f"{field.name} ({field.type})" for field in schema)
            raise TextdpError(f"a released record does not fit the output Parquet schema [{columns}]") from None
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        return buffer.getvalue()
    raise ValueError(f"unknown format {data_format!r}")


class WriteShard(beam.DoFn):
    """(index, S, records) -> the file's path, written atomically (temporary name, then rename)."""

    def __init__(self, prefix: str, data_format: str, suffix: str, schema=None):
        super().__init__()
        self.prefix = prefix
        self.data_format = data_format
        self.suffix = suffix
        self.schema = schema

    def process(self, shard):
        index, total, records = shard
        records = [record["text"] if self.data_format == "text" and isinstance(record, dict) else record
                   for record in records]
        final = shard_path(self.prefix, index, total, self.suffix)
        temporary = _temporary_path(final)
        data = encode_shard(records, self.data_format, self.schema)
        with FileSystems.create(temporary, mime_type="application/octet-stream") as handle:
            handle.write(data)
        if "://" not in final:  # one atomic rename over a file (a retried shard's); never a delete
            try:
                os.replace(temporary, final)
            except OSError as exc:
                os.remove(temporary)
                kind = "a directory" if os.path.isdir(final) else f"not writable ({exc.strerror or type(exc).__name__})"
                raise TextdpError(f"{final} is {kind}, so this shard cannot be written there (it appeared after "
                                  "the pre-run check); nothing was deleted") from None
        else:  # an object store: the rename (copy) replaces a retried shard's object whole
            FileSystems.rename([temporary], [final])
        yield final


class WriteShuffledShards(beam.PTransform):
    """Shards of ``ShuffleAmplifier`` -> ``<output>-SSSSS-of-NNNNN<suffix>`` files; returns the paths."""

    def __init__(self, prefix: str, data_format: str, suffix: str, schema=None, label: Optional[str] = None):
        super().__init__(label)
        self.writer = WriteShard(prefix, data_format, suffix, schema)

    def expand(self, shards):
        return shards | "WriteShards" >> beam.ParDo(self.writer)
