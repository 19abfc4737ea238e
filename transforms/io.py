"""Reading records (with their exact position) and writing outputs, error records and the summary.

Records travel through the pipeline as plain tuples ``(source, position, payload)``: the file
they came from, their 1-based line (text, JSONL) or row (Parquet) number, and the payload (a
``str`` for text, a ``dict`` for JSONL and Parquet).

Files are read whole by one worker each (``fileio.MatchFiles`` + ``ReadMatches``), streaming
line by line or row group by row group, so memory stays bounded. That is what gives every record
its exact line number, which an error report needs; the price is that one file is never split
between workers. Give a large corpus as many files (shards), and the ``Reshuffle`` after reading
spreads the records of each file over all workers for the expensive perturbation step.

Text is read as bytes and decoded here, so undecodable bytes become error records instead of
crashing the job. Nothing here puts input text into a log, metric or exception message; error
records carry the text only when explicitly asked (``keep_failed_text``).
"""

from __future__ import annotations

import json
from typing import Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

FORMATS = ("text", "jsonl", "parquet")
_EXTENSIONS = {".txt": "text", ".text": "text", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
               ".parquet": "parquet", ".pq": "parquet"}
OUTPUT_SUFFIX = {"text": ".txt", "jsonl": ".jsonl", "parquet": ".parquet"}
_COMPRESSED = (".gz", ".bz2", ".deflate", ".zst", ".lzma", ".xz")

# Error reasons (the ``reason`` field of an error record).
UNDECODABLE = "undecodable"
MALFORMED_JSON = "malformed_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
NOT_A_STRING = "not_a_string"
EMPTY = "empty"
TOO_LARGE = "too_large"
UNREADABLE_FILE = "unreadable_file"


def infer_format(pattern: str) -> Optional[str]:
    """``text``/``jsonl``/``parquet`` from a file pattern's extension (ignoring .gz etc.), else None."""
    name = pattern.lower()
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for extension, fmt in _EXTENSIONS.items():
        if name.endswith(extension):
            return fmt
    return None


def error_record(source: str, position: int, reason: str, detail: str = "", text: Optional[str] = None) -> dict:
    """An entry of the error output: where and why, never the text unless ``text`` is given."""
    record = {"source": source, "position": position, "reason": reason, "detail": detail}
    if text is not None:
        record["text"] = text
    return record


def _strip_newline(raw: bytes) -> bytes:
    if raw.endswith(b"\r\n"):
        return raw[:-2]
    if raw.endswith(b"\n"):
        return raw[:-1]
    return raw


class ReadFileRecords(beam.DoFn):
    """One matched file -> records (main), error records ('errors') and (file, records read) ('counts').

    Every record read is either emitted or turned into an error record, and the count emitted for
    the file is the number of records read, so records in = records out + records failed.
    """

    ERRORS = "errors"
    COUNTS = "counts"

    def __init__(self, data_format: str, text_fields: Sequence[str], max_record_bytes: int,
                 keep_failed_text: bool):
        if data_format not in FORMATS:
            raise ValueError(f"unknown format {data_format!r}")
        self.data_format = data_format
        self.text_fields = tuple(text_fields or ())
        self.max_record_bytes = int(max_record_bytes)
        self.keep_failed_text = bool(keep_failed_text)

    def process(self, readable_file) -> Iterable:
        path = readable_file.metadata.path
        reader = self._parquet_rows if self.data_format == "parquet" else self._lines
        count = 0
        try:
            for item in reader(readable_file, path):
                count += 1
                yield item
        except Exception as exc:  # pylint: disable=broad-except
            # A truncated .gz or a corrupt Parquet footer: report where reading stopped. The exception
            # type is safe to show; its message could quote file content, so it is not used.
            count += 1
            yield beam.pvalue.TaggedOutput(self.ERRORS, error_record(
                path, count, UNREADABLE_FILE, f"reading stopped here: {type(exc).__name__}"))
        yield beam.pvalue.TaggedOutput(self.COUNTS, (path, count))

    # text and JSONL -------------------------------------------------------------------------
    def _lines(self, readable_file, path):
        with readable_file.open(mime_type="application/octet-stream") as handle:
            position = 0
            for raw in iter(handle.readline, b""):
                position += 1
                yield self._line_record(path, position, _strip_newline(raw))

    def _failed(self, path, position, reason, detail, text):
        return beam.pvalue.TaggedOutput(
            self.ERRORS, error_record(path, position, reason, detail, text if self.keep_failed_text else None))

    def _line_record(self, path: str, position: int, raw: bytes):
        if len(raw) > self.max_record_bytes:
            return self._failed(path, position, TOO_LARGE,
                                f"{len(raw)} bytes > --max-record-bytes {self.max_record_bytes}",
                                raw.decode("utf-8", "replace"))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._failed(path, position, UNDECODABLE, f"invalid UTF-8 at byte {exc.start}",
                                raw.decode("utf-8", "replace"))
        if position == 1 and text.startswith("\ufeff"):
            text = text[1:]  # a UTF-8 byte order mark is not content
        if not text.strip():
            return self._failed(path, position, EMPTY, "no text", text)
        if self.data_format == "text":
            return (path, position, text)
        try:
            payload = json.loads(text)
        except ValueError as exc:
            column = getattr(exc, "colno", None)
            message = getattr(exc, "msg", "invalid JSON")
            return self._failed(path, position, MALFORMED_JSON, f"{message} (column {column})", text)
        return self._checked_object(path, position, payload, text)

    def _checked_object(self, path, position, payload, text):
        if not isinstance(payload, dict):
            return self._failed(path, position, NOT_AN_OBJECT, f"a JSON {type(payload).__name__}, not an object", text)
        for field in self.text_fields:
            if field not in payload:
                return self._failed(path, position, MISSING_FIELD, f"no field {field!r}", text)
            if not isinstance(payload[field], str):
                kind = "null" if payload[field] is None else type(payload[field]).__name__
                return self._failed(path, position, NOT_A_STRING, f"field {field!r} is {kind}, not a string", text)
        if all(not payload[field].strip() for field in self.text_fields):
            return self._failed(path, position, EMPTY, "every text field is empty", text)
        return (path, position, payload)

    # Parquet --------------------------------------------------------------------------------
    def _parquet_rows(self, readable_file, path):
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

        with readable_file.open(mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            parquet = pq.ParquetFile(handle)
            position = 0
            for batch in parquet.iter_batches(batch_size=1024):
                for row in batch.to_pylist():
                    position += 1
                    yield self._row_record(path, position, row)

    def _row_record(self, path, position, row):
        text = None
        if self.keep_failed_text:
            text = json.dumps({f: row.get(f) for f in self.text_fields}, ensure_ascii=False, default=str)
        size = sum(len(row[f].encode("utf-8")) for f in self.text_fields if isinstance(row.get(f), str))
        if size > self.max_record_bytes:
            return self._failed(path, position, TOO_LARGE,
                                f"{size} bytes of text > --max-record-bytes {self.max_record_bytes}", text)
        return self._checked_object(path, position, row, text)


class ReadRecords(beam.PTransform):
    """``file pattern -> {'records', 'errors', 'counts'}`` (see ``ReadFileRecords``)."""

    def __init__(self, pattern: str, data_format: str, text_fields: Sequence[str], max_record_bytes: int,
                 keep_failed_text: bool = False):
        super().__init__()
        self.pattern = pattern
        self.reader = ReadFileRecords(data_format, text_fields, max_record_bytes, keep_failed_text)

    def expand(self, pbegin):
        from apache_beam.io import fileio  # pylint: disable=import-outside-toplevel

        results = (pbegin
                   | "Match" >> fileio.MatchFiles(self.pattern, empty_match_treatment="DISALLOW")
                   | "Open" >> fileio.ReadMatches()
                   | "Parse" >> beam.ParDo(self.reader).with_outputs(
                       ReadFileRecords.ERRORS, ReadFileRecords.COUNTS, main="records"))
        return {"records": results.records, "errors": results[ReadFileRecords.ERRORS],
                "counts": results[ReadFileRecords.COUNTS]}


def parquet_schema(pattern: str):
    """The Arrow schema of the first file matching ``pattern`` (the output keeps it)."""
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    first = matched_paths(pattern)[0]
    with FileSystems.open(first, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return pq.read_schema(handle)


def matched_paths(pattern: str):
    """Paths matching ``pattern`` (local or gs://), sorted; empty list if none."""
    result = FileSystems.match([pattern])[0]
    return sorted(meta.path for meta in result.metadata_list)


class WriteRecords(beam.PTransform):
    """Payloads -> files ``<output>-SSSSS-of-NNNNN<ext>`` in the input's format."""

    def __init__(self, output: str, data_format: str, schema=None):
        super().__init__()
        self.output = output
        self.data_format = data_format
        self.schema = schema

    def expand(self, payloads):
        suffix = OUTPUT_SUFFIX[self.data_format]
        if self.data_format == "parquet":
            return payloads | "WriteParquet" >> beam.io.WriteToParquet(
                self.output, self.schema, file_name_suffix=suffix)
        if self.data_format == "jsonl":
            payloads = payloads | "ToJson" >> beam.Map(lambda obj: json.dumps(obj, ensure_ascii=False))
        return payloads | "WriteText" >> beam.io.WriteToText(self.output, file_name_suffix=suffix)


ERRORS_SHARD_TEMPLATE = "-SSSSS"


class WriteErrors(beam.PTransform):
    """Error records -> ``<output>-errors-SSSSS.jsonl`` (one JSON object per line).

    The shard names have no ``-of-NNNNN`` on purpose: before renaming its files, a Beam file sink
    deletes everything matching ``<prefix>-*-of-NNNNN<suffix>``, and for JSONL input the main output's
    pattern would otherwise match (and delete) the error files.
    """

    def __init__(self, errors_prefix: str):
        super().__init__()
        self.errors_prefix = errors_prefix

    def expand(self, errors):
        return (errors
                | "ToJson" >> beam.Map(lambda rec: json.dumps(rec, ensure_ascii=False, sort_keys=True))
                | "Write" >> beam.io.WriteToText(self.errors_prefix, file_name_suffix=".jsonl",
                                                shard_name_template=ERRORS_SHARD_TEMPLATE))


def write_json(path: str, document: dict) -> None:
    """Write one JSON document to a local or gs:// path through Beam's filesystems."""
    data = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    with FileSystems.create(path, mime_type="application/json") as handle:
        handle.write(data)
