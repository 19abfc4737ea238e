"""Reading records (with their exact position) and writing outputs, error records and the summary.

Records travel through the pipeline as plain tuples ``(source, position, payload)``: the file
they came from, their 1-based line (text, JSONL) or row (Parquet) number, and the payload (a
``str`` for text, a ``dict`` for JSONL and Parquet).

Files are read whole by one worker each (``fileio.MatchFiles`` + ``ReadMatches``), streaming
line by line or row group by row group, so memory stays bounded. That is what gives every record
its exact line number, which an error report needs; the price is that one file is never split
between workers. Give a large corpus as many files (shards), and the ``Reshuffle`` in ``Privatize``
(``redistribute=True``) spreads the batches of each file's records over all workers for the
expensive perturbation step.

Bad input never crashes the job and is never lost without a trace: every line or row read becomes
either a record or an error record with one of the reason codes below (the table "What happens to
bad input" in docs/privatize.md lists every case), and a file that cannot be read to its end
(damaged, truncated, or of another Parquet schema) becomes an error record where reading stopped.
Text is read as bytes and decoded here, compressed files are decompressed here
(``transforms/compressed.py``, which notices a truncated stream), and Parquet batches that fail to
convert are converted cell by cell (``transforms/parquet_io.py``). Nothing here puts input text into
a log, metric or exception message; error records carry the text only when explicitly asked
(``keep_failed_text``), and their ``detail`` holds only numbers, JSON type words, reason phrases and
names of text fields or Parquet columns.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import lzma
import os
import re
import sys
import zlib
from typing import Callable, Iterable, List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from textdp.mechanisms.jsonsafe import strict_json  # noqa: F401  the one conversion (summaries; the launcher checks with it, R8-9)
from transforms.compressed import TruncatedStream, open_decompressed
from transforms.parquet_io import RowsToArrowTables, batch_rows, cells_as_text, check_input_schemas, schema_differences

_LOG = logging.getLogger(__name__)

FORMATS = ("text", "jsonl", "parquet")
_EXTENSIONS = {".txt": "text", ".text": "text", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
               ".parquet": "parquet", ".pq": "parquet"}
OUTPUT_SUFFIX = {"text": ".txt", "jsonl": ".jsonl", "parquet": ".parquet"}
_COMPRESSED = (".gz", ".bz2", ".deflate", ".zst", ".zstd", ".lzma", ".xz")

# Error reasons: the ``reason`` field of an error record and the keys of the summary's
# ``failed_by_reason``, so part of the public contract (docs/privatize.md, "What happens to bad input").
# One record (line or row):
UNDECODABLE = "undecodable"                # invalid UTF-8 (a text/JSONL line, or a Parquet string cell)
MALFORMED_JSON = "malformed_json"          # not JSON
NOT_AN_OBJECT = "not_an_object"            # JSON, but not an object
MISSING_FIELD = "missing_field"            # a --text-field is absent
NOT_A_STRING = "not_a_string"              # a --text-field is null, a number, a list, ...
EMPTY = "empty"                            # no text (blank line; every text field blank)
TOO_LARGE = "too_large"                    # over --max-record-bytes
TOO_DEEP = "too_deep"                      # JSON nested deeper than MAX_JSON_DEPTH
LONE_SURROGATE = "lone_surrogate"          # a JSON \uD800-\uDFFF escape without its pair: no UTF-8 form
UNSUPPORTED_NUMBER = "unsupported_number"  # an integer over Python's digit limit, a float beyond 1.8e308 or below 2.2e-308, NaN/Infinity
DUPLICATE_KEY = "duplicate_key"            # a JSON object with the same key twice
UNSUPPORTED_VALUE = "unsupported_value"    # a Parquet cell Python cannot represent (e.g. a date after 9999)
# One file (the record stands for the unread rest of the file; its position is where reading stopped):
UNREADABLE_FILE = "unreadable_file"        # damaged or not of its format; I/O error
TRUNCATED_FILE = "truncated_file"          # a compressed file that ends before its stream's end marker
SCHEMA_MISMATCH = "schema_mismatch"        # a Parquet file (matched on a worker) of another schema
FILE_REASONS = (UNREADABLE_FILE, TRUNCATED_FILE, SCHEMA_MISMATCH)

# JSON nested deeper than this is refused: Python's parser and encoder recurse, and a record that
# parses near the interpreter's recursion limit could fail later, while being written.
MAX_JSON_DEPTH = 200
MAX_LISTED_PROBLEMS = 6
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # only an escape can put a surrogate into a str


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


def describe_json_value(value) -> str:
    """A JSON value's kind in the user's words ("a JSON null", "a list"), never a Python type name."""
    if value is None:
        return "a JSON null"
    if isinstance(value, bool):
        return "true or false (a JSON boolean)"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "not a string"


class _FileProblem(Exception):
    """Reading a file stops here for a reason of ours (reason code and detail are safe to report)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class _DuplicateKey(ValueError):
    pass


class _NonFiniteNumber(ValueError):
    pass


class _InexactNumber(ValueError):
    pass


class _NonStandardNumber(ValueError):
    pass


def _no_constant(literal: str):
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON (RFC 8259): Python's json reads them, but written back
    they would make the release fail every strict parser (jq, JSON.parse, Go, Java), so the record is refused
    (R11-6), in any field, nested or not."""
    raise _NonStandardNumber()


class _UnderflowNumber(ValueError):
    pass


FLOAT_EXACT_DIGITS = 15  # a decimal of at most 15 significant digits is the value of its float64 (it round-trips)


def _finite_float(literal: str) -> float:
    """A JSON number with a fraction or exponent as a float; one the float64 cannot hold (too large, or more
    significant digits than it keeps: 0.1000000000000000055511, 12345678901234567.89) is refused, since the
    line is written back from its parsed value (round 6 F9: never a silent change). ``1.10`` and ``1e5`` are
    kept as values (written back as ``1.1`` and ``100000.0``)."""
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _NonFiniteNumber()
    mantissa = literal.lstrip("-").split("e")[0].split("E")[0].replace(".", "").lstrip("0").rstrip("0")
    if abs(value) < sys.float_info.min and mantissa:  # below float64's normal range (R9-7): 1e-400 is 0.0, 2.5e-324
        from decimal import Decimal  # is 5e-324; a subnormal literal that is its float's value (5e-324) is kept

        if value == 0 or Decimal(literal) != Decimal(repr(value)):
            raise _UnderflowNumber()
    if len(mantissa) > FLOAT_EXACT_DIGITS:
        from decimal import Decimal

        if Decimal(literal) != Decimal(repr(value)):
            raise _InexactNumber()
    return value


def _unique_keys(pairs) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey()
    return result


def parse_json_line(text: str):
    """``(payload, None)`` or ``(None, (reason, detail))`` for one JSON line, never an exception."""
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant, object_pairs_hook=_unique_keys), None
    except json.JSONDecodeError as exc:  # its message is a fixed phrase ("Expecting value"), never content
        return None, (MALFORMED_JSON, f"{exc.msg}, at character {exc.colno} of the line")
    except _DuplicateKey:
        return None, (DUPLICATE_KEY, "an object has the same key twice (only one value could be kept)")
    except _NonFiniteNumber:
        return None, (UNSUPPORTED_NUMBER, "a number too large for 64-bit floating point (over about 1.8e308): "
                                          "it cannot be written back as it was")
    except _NonStandardNumber:
        return None, (UNSUPPORTED_NUMBER, "NaN, Infinity or -Infinity, which are not JSON numbers: written back, the "
                                          "output would not be strict JSON (quote it as a string, or use null)")
    except _UnderflowNumber:
        return None, (UNSUPPORTED_NUMBER, "a number too small for 64-bit floating point (below about 2.2e-308 it "
                                          "becomes 0 or loses digits): it cannot be written back as it was (quote it "
                                          "as a string to keep it exact)")
    except _InexactNumber:
        return None, (UNSUPPORTED_NUMBER, "a decimal number with more significant digits than 64-bit floating point "
                                          "keeps: it cannot be written back as it was (quote it as a string to keep "
                                          "it exact)")
    except RecursionError:
        return None, (TOO_DEEP, f"objects and lists nested too deep to parse (the limit is {MAX_JSON_DEPTH} levels)")
    except ValueError:  # the only other ValueError json.loads raises on a str: Python's int-digit limit
        return None, (UNSUPPORTED_NUMBER, f"an integer with more than {sys.get_int_max_str_digits()} digits "
                                          "(Python's limit for converting an integer)")


def json_structure_problem(payload, text: str, text_fields: Sequence[str]):
    """``(reason, detail)`` if ``payload`` (parsed from ``text``) is nested deeper than
    ``MAX_JSON_DEPTH`` or holds a lone surrogate in any key or string, else None."""
    look_for_surrogates = _SURROGATE_ESCAPE.search(text) is not None
    stack = [(payload, 1, None)]
    while stack:
        value, depth, field = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return TOO_DEEP, f"objects and lists nested more than {MAX_JSON_DEPTH} levels deep (the limit)"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            where = key if field is None else field  # the top-level field it is in
            if look_for_surrogates and isinstance(key, str) and _SURROGATE.search(key):
                return LONE_SURROGATE, ("a field name holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF "
                                        "without its pair), which has no UTF-8 form")
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1, where))
            elif look_for_surrogates and isinstance(item, str) and _SURROGATE.search(item):
                place = f"text field {where!r}" if where in text_fields else "a field that is not privatized"
                return LONE_SURROGATE, (f"{place} holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without "
                                        "its pair), which has no UTF-8 form")
    return None


def _compression_name(path: str) -> str:
    return {CompressionTypes.GZIP: "gzip", CompressionTypes.BZIP2: "bzip2", CompressionTypes.LZMA: "xz/lzma",
            CompressionTypes.DEFLATE: "deflate (zlib)", CompressionTypes.ZSTD: "zstd"}.get(
                CompressionTypes.detect_compression_type(path), "")


def decompression_errors() -> tuple:
    """What the decompressors raise on damaged data (bz2 raises OSError; zstd its own error)."""
    import zstandard  # a dependency of apache-beam
    return zlib.error, lzma.LZMAError, zstandard.ZstdError, OSError, EOFError


def _unreadable_detail(exc: Exception, path: str, data_format: str) -> str:
    """Why reading a file stopped, in the user's words; never the exception's message, which could
    quote file content."""
    compression = _compression_name(path)
    if data_format == "parquet":
        import pyarrow as pa
        if isinstance(exc, pa.ArrowException) and not isinstance(exc, pa.ArrowIOError):
            return "not a valid Parquet file, or damaged from here on"
    if compression and isinstance(exc, decompression_errors()) \
            and not isinstance(exc, (ConnectionError, PermissionError, FileNotFoundError)):
        return f"the {compression} data is damaged from here on"
    if isinstance(exc, OSError):
        return "an I/O error while reading (the file system's message is not shown)"
    _LOG.warning("textdp: reading %s stopped on an unexpected %s (message not shown)", path, type(exc).__name__)
    return "an unexpected error while reading (its message is not shown, as it could quote the input)"


class ReadFileRecords(beam.DoFn):
    """One matched file -> records (main), error records ('errors') and (file, records read) ('counts').

    Every record read is either emitted or turned into an error record, and the count emitted for
    the file is the number of records read (plus one for a file-level error record that stands for the
    unread rest of a file), so records in = records out + records failed.
    """

    ERRORS = "errors"
    COUNTS = "counts"

    def __init__(self, data_format: str, text_fields: Sequence[str], max_record_bytes: int,
                 keep_failed_text: bool, parquet_schema=None):
        if data_format not in FORMATS:
            raise ValueError(f"unknown format {data_format!r}")
        self.data_format = data_format
        self.text_fields = tuple(text_fields or ())
        self.max_record_bytes = int(max_record_bytes)
        self.keep_failed_text = bool(keep_failed_text)
        self.parquet_schema = parquet_schema  # the schema every Parquet file must have (checked before the run)

    def process(self, readable_file) -> Iterable:
        path = readable_file.metadata.path
        reader = self._parquet_rows if self.data_format == "parquet" else self._lines
        count = 0
        try:
            for item in reader(readable_file, path):
                count += 1
                yield item
        except _FileProblem as problem:
            count += 1
            yield beam.pvalue.TaggedOutput(self.ERRORS, error_record(path, count, problem.reason, problem.detail))
        except TruncatedStream:
            count += 1
            yield beam.pvalue.TaggedOutput(self.ERRORS, error_record(
                path, count, TRUNCATED_FILE,
                f"the {_compression_name(path)} data ends before its end-of-stream marker: the file is cut "
                f"after {count - 1} complete record(s) and the rest of it is missing"))
        except Exception as exc:
            # A damaged .gz or Parquet file: report where reading stopped; the records before are kept.
            count += 1
            yield beam.pvalue.TaggedOutput(self.ERRORS, error_record(
                path, count, UNREADABLE_FILE, _unreadable_detail(exc, path, self.data_format)))
        yield beam.pvalue.TaggedOutput(self.COUNTS, (path, count))

    def _failed(self, path, position, reason, detail, text):
        return beam.pvalue.TaggedOutput(
            self.ERRORS, error_record(path, position, reason, detail, text if self.keep_failed_text else None))

    # text and JSONL -------------------------------------------------------------------------
    def _lines(self, readable_file, path):
        """Lines as bytes, each read with a bounded ``readline`` so that one huge line cannot fill the
        worker's memory: a line over ``max_record_bytes`` is measured and skipped, not held."""
        window = self.max_record_bytes + 2  # room for "\r\n" after a line of exactly the limit
        with readable_file.open(mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED) as raw:
            handle = open_decompressed(raw, path)
            position = 0
            while True:
                raw_line = handle.readline(window)
                if not raw_line:
                    return
                position += 1
                if len(raw_line) == window and not raw_line.endswith(b"\n"):
                    yield self._too_long_line(handle, path, position, raw_line)
                else:
                    yield self._line_record(path, position, _strip_newline(raw_line))

    def _too_long_line(self, handle, path, position, head: bytes):
        """Skip the rest of a line longer than the limit, counting its bytes (without the line ending)."""
        length, last = len(head), head[-2:]
        while not last.endswith(b"\n"):
            chunk = handle.readline(1 << 20)
            if not chunk:
                break
            length += len(chunk)
            last = (last + chunk)[-2:]
        length -= 2 if last == b"\r\n" else 1 if last.endswith(b"\n") else 0
        return self._failed(path, position, TOO_LARGE,
                            f"a line of {length} bytes as read (without its line ending) > --max-record-bytes "
                            f"{self.max_record_bytes}",
                            head[:self.max_record_bytes].decode("utf-8", "replace"))

    def _line_record(self, path: str, position: int, raw: bytes):
        if len(raw) > self.max_record_bytes:
            return self._failed(path, position, TOO_LARGE,
                                f"a line of {len(raw)} bytes as read (without its line ending) > "
                                f"--max-record-bytes {self.max_record_bytes}", raw.decode("utf-8", "replace"))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._failed(path, position, UNDECODABLE, f"invalid UTF-8 at byte {exc.start} of the line",
                                raw.decode("utf-8", "replace"))
        if position == 1 and text.startswith("\ufeff"):
            text = text[1:]  # a UTF-8 byte order mark is not content
        if not text.strip():
            return self._failed(path, position, EMPTY, "no text", text)
        if self.data_format == "text":
            return (path, position, text)
        payload, problem = parse_json_line(text)
        if problem is None:
            if not isinstance(payload, dict):
                problem = NOT_AN_OBJECT, f"the line is {describe_json_value(payload)}, not a JSON object"
            else:
                problem = json_structure_problem(payload, text, self.text_fields)
        if problem is not None:
            return self._failed(path, position, problem[0], problem[1], text)
        return self._checked_object(path, position, payload, text, json_input=True)

    def _checked_object(self, path, position, payload, text, json_input):
        for field in self.text_fields:
            if field not in payload:
                return self._failed(path, position, MISSING_FIELD, f"no field {field!r}", text)
            if not isinstance(payload[field], str):
                kind = describe_json_value(payload[field]) if json_input else \
                    "null (no value)" if payload[field] is None else "a value of another type"
                return self._failed(path, position, NOT_A_STRING, f"field {field!r} is {kind}, not a string", text)
        if all(not payload[field].strip() for field in self.text_fields):
            return self._failed(path, position, EMPTY, "every text field is empty", text)
        return (path, position, payload)

    # Parquet --------------------------------------------------------------------------------
    def _parquet_rows(self, readable_file, path):
        import pyarrow.parquet as pq

        with readable_file.open(mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            parquet = pq.ParquetFile(handle)
            if self.parquet_schema is not None:
                differences = schema_differences(self.parquet_schema, parquet.schema_arrow,
                                                 "the schema checked before the run")
                if differences:
                    raise _FileProblem(SCHEMA_MISMATCH, (
                        f"this file {'; '.join(differences[:MAX_LISTED_PROBLEMS])}: none of its "
                        f"{parquet.metadata.num_rows} row(s) were read"))
            position = 0
            for batch in parquet.iter_batches(batch_size=1024):
                for index, (row, problems) in enumerate(batch_rows(batch)):
                    position += 1
                    if problems:
                        yield self._bad_cells(path, position, problems, batch, index)
                    else:
                        yield self._row_record(path, position, row)

    def _bad_cells(self, path, position, problems, batch, index):
        undecodable = [(column, offset) for column, kind, offset in problems if kind == "utf8"]
        text = None
        if self.keep_failed_text:
            try:
                text = json.dumps(cells_as_text(batch, index, self.text_fields), ensure_ascii=False)
            except Exception:  # the text is a courtesy; the record is not
                text = None
        if undecodable:
            detail = "; ".join(f"invalid UTF-8 in column {column!r}"
                               + (f" at byte {offset} of its value" if offset is not None else "")
                               for column, offset in undecodable[:MAX_LISTED_PROBLEMS])
            return self._failed(path, position, UNDECODABLE, detail, text)
        columns = ", ".join(repr(column) for column, _, _ in problems[:MAX_LISTED_PROBLEMS])
        return self._failed(path, position, UNSUPPORTED_VALUE,
                            f"column(s) {columns} hold a value Python cannot represent (e.g. a date after "
                            "year 9999)", text)

    def _row_record(self, path, position, row):
        text = None
        if self.keep_failed_text:
            text = json.dumps({f: row.get(f) for f in self.text_fields}, ensure_ascii=False, default=str)
        size = sum(len(row[f].encode("utf-8")) for f in self.text_fields if isinstance(row.get(f), str))
        if size > self.max_record_bytes:
            return self._failed(path, position, TOO_LARGE,
                                f"text fields of {size} bytes (UTF-8, together) > --max-record-bytes "
                                f"{self.max_record_bytes}", text)
        return self._checked_object(path, position, row, text, json_input=False)


class ReadRecords(beam.PTransform):
    """``file pattern -> {'records', 'errors', 'counts'}`` (see ``ReadFileRecords``).

    For Parquet, ``expected_schema`` is the schema every file must have (default: the one
    ``parquet_schema(pattern, text_fields)`` checks before the run); a file matched on a worker with
    another schema becomes one ``schema_mismatch`` error record.
    """

    def __init__(self, pattern: str, data_format: str, text_fields: Sequence[str], max_record_bytes: int,
                 keep_failed_text: bool = False, expected_schema=None):
        super().__init__()
        self.pattern = pattern
        if data_format == "parquet" and expected_schema is None:
            expected_schema = parquet_schema(pattern, text_fields)
        self.reader = ReadFileRecords(data_format, text_fields, max_record_bytes, keep_failed_text, expected_schema)

    def expand(self, pbegin):
        from apache_beam.io import fileio

        results = (pbegin
                   | "Match" >> fileio.MatchFiles(self.pattern, empty_match_treatment="DISALLOW")
                   | "NotHidden" >> beam.Filter(lambda meta, pattern: not hidden_match(meta.path, pattern), self.pattern)
                   | "Open" >> fileio.ReadMatches()
                   | "Parse" >> beam.ParDo(self.reader).with_outputs(
                       ReadFileRecords.ERRORS, ReadFileRecords.COUNTS, main="records"))
        return {"records": results.records, "errors": results[ReadFileRecords.ERRORS],
                "counts": results[ReadFileRecords.COUNTS]}


def parquet_schema(pattern: str, text_fields: Sequence[str] = ()):
    """The one Arrow schema of the Parquet files matching ``pattern``, checked before the run: every
    file with a readable footer must have the same columns and types, and every text field must be a
    string column; otherwise ``TextdpError`` naming the files and columns (never a value). The output
    keeps this schema. Checked once per set of files (sizes and times included) and text fields."""
    result = FileSystems.match([pattern])[0]
    files = tuple(sorted((meta.path, meta.size_in_bytes, meta.last_updated_in_seconds)
                         for meta in result.metadata_list if not hidden_match(meta.path, pattern)))
    return _checked_parquet_schema(files, tuple(text_fields or ()))


@functools.lru_cache(maxsize=16)
def _checked_parquet_schema(files: tuple, text_fields: tuple):
    return check_input_schemas([path for path, _, _ in files], text_fields)


FIELD_SAMPLE_RECORDS = 1000  # JSON objects read before the run to check --drop-fields / --user-field names


def _first_objects(paths: Sequence[str], limit: int, max_bytes: int):
    """The first ``limit`` JSON objects of the JSONL files ``paths`` (in order; compressed files decompressed),
    read before the run; lines that are not objects are skipped, reading stops at the first problem of a file
    (the run reports it). The caller keeps no value."""
    read = 0
    for path in paths:
        if read >= limit:
            break
        consumed = 0
        try:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
                handle = open_decompressed(raw, path)
                while read < limit and consumed < max_bytes:
                    line = handle.readline(1 << 22)
                    if not line:
                        break
                    consumed += len(line)
                    payload, problem = parse_json_line(line.decode("utf-8", "replace").lstrip("\ufeff"))
                    if problem is None and isinstance(payload, dict):
                        read += 1
                        yield payload
        except Exception:  # a damaged file is the run's to report
            continue


def first_record_fields(paths: Sequence[str], limit: int = FIELD_SAMPLE_RECORDS, max_bytes: int = 64 << 20):
    """``(field names, objects read)``: the top-level keys of the first ``limit`` JSON objects of the JSONL
    files ``paths`` (``_first_objects``). Only names are kept, never a value."""
    names, read = set(), 0
    for payload in _first_objects(paths, limit, max_bytes):
        names.update(str(key) for key in payload)
        read += 1
    return sorted(names), read


def first_record_authors(paths: Sequence[str], user_field: str, limit: int = FIELD_SAMPLE_RECORDS,
                         max_bytes: int = 64 << 20) -> dict:
    """How the first ``limit`` JSON objects (``_first_objects``) name their author under ``user_field``:
    ``{"read": n, "usable": n, MISSING_AUTHOR: n, UNSAFE_AUTHOR_ID: n}`` (``check_author``); no value is kept."""
    from textdp.text.records import MISSING_AUTHOR, UNSAFE_AUTHOR_ID, check_author

    counts = {"read": 0, "usable": 0, MISSING_AUTHOR: 0, UNSAFE_AUTHOR_ID: 0}
    for payload in _first_objects(paths, limit, max_bytes):
        counts["read"] += 1
        problem = check_author(payload, user_field)
        counts["usable" if problem is None else problem[0]] += 1
    return counts


def parquet_null_columns(paths: Sequence[str], names: Sequence[str]) -> List[str]:
    """Those of the top-level Parquet columns ``names`` that are null in every row of every file, known from the
    footers' row-group statistics (``null_count == num_values``) without reading a row; empty when any file is
    remote, unreadable or lacks statistics for a column (the run then reports each record)."""
    import pyarrow.parquet as pq

    if not paths or any("://" in p for p in paths):
        return []
    nulls = set(names)
    for path in paths:
        try:
            meta = pq.ParquetFile(path).metadata
        except Exception:
            return []
        for name in list(nulls):
            for group in range(meta.num_row_groups):
                row_group = meta.row_group(group)
                column = next((row_group.column(i) for i in range(row_group.num_columns)
                               if row_group.column(i).path_in_schema == name), None)
                stats = column.statistics if column is not None else None
                if stats is None or stats.null_count is None or stats.null_count != row_group.num_rows:
                    nulls.discard(name)
                    break
    return sorted(nulls)


def hidden_match(path: str, pattern: str) -> bool:
    """Whether ``path``, which Beam's match found for ``pattern``, reaches a hidden name (one starting with ``.``)
    through a wildcard: the shell's and Python glob's rule, which Beam's match does not follow. A name starting
    with ``.`` is matched only by a pattern component that itself starts with ``.`` (``in/.*``, ``in/.tmp/*``,
    a literal ``in/.a.txt``); ``*``, ``?``, ``[...]`` and ``**`` never match one (``**`` also not a hidden
    directory it crosses). rsync, scp and upload agents write their partial copies under such names
    (``.name.XXXXXX``) before the rename (round 8b R8b-12). The one rule for every input pattern (batch and
    streaming privatize, audit, calibrate; local or gs://)."""
    names, parts = path.split("/"), pattern.split("/")

    @functools.lru_cache(maxsize=None)
    def fits(i: int, j: int, strict: bool) -> bool:
        if j == len(parts):
            return i == len(names)
        part = parts[j]
        if "**" in part:  # Beam: ** crosses "/": it takes one or more names, the first by the component rule
            for k in range(i + 1, len(names) + 1):
                taken = names[i:k]
                if strict and ((taken[0].startswith(".") and not part.startswith("."))
                               or any(name.startswith(".") for name in taken[1:])):
                    continue
                if re.match(FileSystem.translate_pattern(part), "/".join(taken)) and fits(k, j + 1, strict):
                    return True
            return False
        if i == len(names) or not re.match(FileSystem.translate_pattern(part), names[i]):
            return False
        if strict and names[i].startswith(".") and not part.startswith("."):
            return False
        return fits(i + 1, j + 1, strict)

    if fits(0, 0, True):
        return False
    if fits(0, 0, False):
        return True
    # not aligned name by name (a path in another form): hidden when a name below the pattern's literal part is one
    literal = len(re.match(r"^[^[*?]*", pattern).group(0).split("/")) - 1
    return any(name.startswith(".") and name not in (".", "..") for name in names[literal:])


def matched_paths(pattern: str):
    """Paths matching ``pattern`` (local or gs://), sorted, hidden names aside (``hidden_match``); empty list
    if none."""
    result = FileSystems.match([pattern])[0]
    return sorted(meta.path for meta in result.metadata_list if not hidden_match(meta.path, pattern))


def skipped_matches(pattern: str) -> List[str]:
    """Local names ``pattern`` matches that Beam's match skips without a word (it lists files with their size,
    and a dangling or looping symlink has none): a run over the rest would call itself complete (F13)."""
    if "://" in pattern or re.match(r"^[^[*?]*", pattern).group(0) == pattern:  # a plain name: matched or not
        return []
    filesystem = FileSystems.get_filesystem(pattern)
    directory = os.path.dirname(re.match(r"^[^[*?]*", pattern).group(0)) or "."
    skipped = []
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            if directory == "." and not pattern.startswith("./") and path.startswith("./"):
                path = path[2:]
            try:
                os.path.getsize(path)
                os.path.getmtime(path)
            except OSError:
                skipped.append(FileMetadata(path, 0, 0))
    return sorted(meta.path for meta in filesystem.match_files(skipped, pattern) if not hidden_match(meta.path, pattern))


class WriteRecords(beam.PTransform):
    """Payloads -> files ``<output>-SSSSS-of-NNNNN<ext>`` in the input's format.

    Parquet rows are converted to Arrow tables by ``RowsToArrowTables``, whose errors name the column
    but never the value (Beam's ``WriteToParquet`` would quote it into the log and the exception).
    """

    def __init__(self, output: str, data_format: str, schema=None):
        super().__init__()
        self.output = output
        self.data_format = data_format
        self.schema = schema

    def expand(self, payloads):
        suffix = OUTPUT_SUFFIX[self.data_format]
        if self.data_format == "parquet":
            return (payloads
                    | "ToArrow" >> beam.ParDo(RowsToArrowTables(self.schema))
                    | "WriteParquet" >> beam.io.WriteToParquetBatched(self.output, self.schema,
                                                                      file_name_suffix=suffix))
        if self.data_format == "jsonl":
            payloads = payloads | "ToJson" >> beam.Map(lambda obj: json.dumps(obj, ensure_ascii=False))
        return payloads | "WriteText" >> beam.io.WriteToText(self.output, file_name_suffix=suffix)


ERRORS_SHARD_TEMPLATE = "-SSSSS"


class WriteErrors(beam.PTransform):
    """Error records -> ``<output>-errors-SSSSS.jsonl`` (one JSON object per line).

    The shard names have no ``-of-NNNNN`` on purpose: before renaming its files, a Beam file sink
    deletes everything matching ``<prefix>-*-of-NNNNN<suffix>``, and for JSONL input the main output's
    pattern would otherwise match (and delete) the error files.

    With ``private`` (``--keep-failed-text``: the records may hold raw input text) each local shard is created
    with mode 0600 (owner only) before a byte is written, whatever the umask, and keeps it when Beam renames it
    into place (round 7 F7); gs:// shards follow the bucket's access rules.
    """

    def __init__(self, errors_prefix: str, private: bool = False):
        super().__init__()
        self.errors_prefix = errors_prefix
        self.private = bool(private)

    def expand(self, errors):
        write = beam.io.WriteToText(self.errors_prefix, file_name_suffix=".jsonl",
                                    shard_name_template=ERRORS_SHARD_TEMPLATE)
        if self.private:
            write._sink.__class__ = _OwnerOnlyTextSink
        return (errors
                | "ToJson" >> beam.Map(lambda rec: json.dumps(rec, ensure_ascii=False, sort_keys=True))
                | "Write" >> write)


PRIVATE_FILE_MODE = 0o600


def refuse_skipped_matches(flag: str, pattern: str) -> None:
    """A name the pattern matches that cannot be read (a dangling or looping symlink) is never skipped silently
    (round 6 F13): TextdpError, one line, naming it. privatize's --input, audit's --corpus and --prior-corpus."""
    from textdp.errors import TextdpError
    from textdp.outputs import shown

    skipped = skipped_matches(pattern)
    if skipped:
        raise TextdpError(f"{flag} {pattern!r} matches {shown(skipped[0])}, which cannot be read (a dangling or looping "
                          f"symlink?){f' and {len(skipped) - 1} more such name(s)' if len(skipped) > 1 else ''}; fix or "
                          f"remove it, or narrow {flag}, so that no matched file is left out")


def create_owner_only(path: str) -> None:
    """Create (or empty) local file ``path`` with mode 0600 whatever the umask; an existing file's mode is set to
    0600 before it is emptied. gs:// paths are left to the bucket."""
    if "://" in path:
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)
    finally:
        os.close(descriptor)


class _OwnerOnlyTextSink(beam.io.textio._TextSink):
    """Beam's text sink whose temporary shards are created 0600 before Beam opens (and truncates) them."""

    def open(self, temp_path):
        create_owner_only(temp_path)
        return super().open(temp_path)


def write_json(path: str, document: dict) -> None:
    """Write one JSON document to a local or gs:// path through Beam's filesystems (strict JSON)."""
    data = (json.dumps(strict_json(document), indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    with FileSystems.create(path, mime_type="application/json") as handle:
        handle.write(data)


def read_text_file(flag: str, path: str) -> str:
    """A small UTF-8 text file given by a flag (calibrate's --word-list, audit's --pair-list), read whole
    before the run: a directory, pipe or unreadable file is refused without opening it, and bytes that
    are not UTF-8 are refused by line and byte offset, never quoted (TextdpError, one line)."""
    from textdp.errors import TextdpError
    from textdp.outputs import refuse_unreadable

    if not FileSystems.exists(path):
        raise TextdpError(f"{flag} {path!r} does not exist")
    refuse_unreadable(flag, [path])
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        raw = handle.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1)
        raise TextdpError(f"{flag} {path!r} is not UTF-8: an invalid byte on line {line} (byte {column} of "
                          "the line)") from None


# Archives textdp does not open: their first bytes (a ZIP's local header, an empty ZIP's end record, 7-Zip, RAR 4/5).
_ARCHIVE_MAGIC = ((b"PK\x03\x04", "ZIP"), (b"PK\x05\x06", "ZIP"), (b"PK\x07\x08", "ZIP"),
                  (b"7z\xbc\xaf\x27\x1c", "7-Zip"), (b"Rar!\x1a\x07", "RAR"))
_WIDE_MARKS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
               (b"\xfe\xff", "UTF-16"))


def refuse_wide_text(flag: str, paths: Sequence[str], data_format: str, text_fields: Optional[Sequence[str]] = None,
                     duplicates_checked: bool = False) -> None:
    """Text and JSONL inputs are UTF-8: a local file whose (decompressed) start is a UTF-16/32 byte-order
    mark, or whose first 4 KiB (decompressed) are more than 10% NUL bytes (UTF-16 without a mark), is refused before the
    run; so is a tar archive, compressed or not (``ustar`` at offset 257 of the decompressed stream), and a ZIP, 7-Zip
    or RAR archive (its first bytes: they were refused as "UTF-16" before, a misleading reason). Read as UTF-8
    such a file is mostly valid: one letter per "word", its NULs kept as layout, which would release every word's
    length. Only the first bytes are read, never quoted (TextdpError). First ``refuse_duplicate_content``, unless
    the caller ran it (``duplicates_checked``)."""
    from textdp.errors import TextdpError
    from textdp.outputs import shown

    if not duplicates_checked:
        refuse_duplicate_content(flag, paths, data_format, text_fields)
    if data_format == "parquet":
        return []
    for path in paths:
        if "://" in path or not os.path.isfile(path):  # a FIFO is never opened here
            continue
        try:  # a compressed file's decompressed start (R8-8: a .tar.gz was read as text, tar headers included)
            with open(path, "rb") as raw:
                head = open_decompressed(raw, path).read(4096)
        except Exception:
            continue  # the guard (unreadable) and refuse_false_compression / the run (damaged) report it
        if head[257:262] != b"ustar" and not _compression_name(path):
            head_tar = _unnamed_compressed_tar(path, head)
        else:
            head_tar = head[257:262] == b"ustar"
        if head_tar:
            raise TextdpError(f"{flag}: {shown(path)} is a tar archive, not {data_format} (its tar headers would be read as "
                              "records): extract it first and give the extracted files")
        archive = next((name for magic, name in _ARCHIVE_MAGIC if head.startswith(magic)), None)
        if archive:
            raise TextdpError(f"{flag}: {shown(path)} is a {archive} archive, not {data_format} (its headers and compressed "
                              "members would be read as records): extract it first and give the extracted files")
        if head.startswith(b"PAR1"):
            raise TextdpError(f"{flag}: {shown(path)} is a Parquet file (it starts with PAR1), not {data_format}: give the "
                              "format parquet")
        wide = next((f"{name} (it starts with a byte-order mark)" for mark, name in _WIDE_MARKS if head.startswith(mark)),
                    None)
        if wide is None and head and head.count(0) > len(head) // 10:
            wide = "UTF-16, another wide encoding or binary (NUL bytes in its first 4 KiB)"
        if wide:
            raise TextdpError(f"{flag}: {shown(path)} is {wide}, not UTF-8: convert it (e.g. iconv -f UTF-16 -t UTF-8)")
    refuse_false_compression(flag, paths)
    refuse_undecodable_start(flag, paths)
    return check_declared_format(flag, paths, data_format)


_MAGIC_SUFFIXES = (("gzip", ".gz"), ("bzip2", ".bz2"), ("xz/lzma", ".xz"), ("zstd", ".zst"))


def _unnamed_compressed_tar(path: str, head: bytes) -> bool:
    """Whether a file named without a compression suffix (``corpus.tgz``) starts with a gzip, bzip2, xz or zstd
    stream whose decompressed first 4 KiB are a tar header ("ustar" at offset 257)."""
    for compression, suffix in _MAGIC_SUFFIXES:
        if len(head) >= 6 and _magic_fits(compression, head[:8]) and not (compression == "xz/lzma" and head[:1] == b"\x5d"):
            try:
                with open(path, "rb") as raw:
                    return open_decompressed(raw, path + suffix).read(4096)[257:262] == b"ustar"
            except Exception:
                return False
    return False


DUPLICATE_SAMPLE_BYTES = 1 << 16  # record keys hashed from each file's start to pick the pairs compared whole
RECORD_CHECK_MAX_BYTES = 256 << 20  # decompressed bytes (Parquet: text-field bytes) read whole for the overlap check
OVERLAP_SHARE = 0.5  # more than this share of one file's distinct records (and at least 2) in another: a copy or a
#                      version of it, not chance (the duplicate-input check and audit's --prior-corpus check)
_OVERLAP_HOLDERS = 32  # a record held by more files is counted against its first 32 holders only (the cost bound)
_EMPTY_DIGEST = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # SHA-256 of no bytes
_LINE_PIECE_BYTES = 1 << 20
_KEY_BATCH_BYTES = 1 << 20  # record text keyed per word_sequences call


def stream_digest(handle, limit: Optional[int] = None) -> str:
    """SHA-256 (hex) of what ``handle.read`` gives, at most ``limit`` bytes (all when None), read 1 MiB at a time: the
    one content hash of the input checks and the streaming watch (transforms/streaming.py)."""
    import hashlib

    digest, left = hashlib.sha256(), limit
    while left is None or left > 0:
        chunk = handle.read(1 << 20 if left is None else min(1 << 20, left))
        if not chunk:
            break
        digest.update(chunk)
        left = None if left is None else left - len(chunk)
    return digest.hexdigest()


def record_line_digests(paths: Sequence[str], budget: int = None, text_fields: Optional[Sequence[str]] = None,
                        data_format: Optional[str] = None) -> set:
    """8-byte digests of the distinct records of local files, compared as textdp privatizes them (``_Records``: the
    words of a text line, or of a JSONL object's / Parquet row's ``text_fields``, as the tokenizer looks them up), up
    to ``budget`` decompressed bytes in all (default RECORD_CHECK_MAX_BYTES); gs:// and unreadable files are left
    out."""
    found: set = set()
    budget = RECORD_CHECK_MAX_BYTES if budget is None else budget
    for path in sorted(p for p in paths if "://" not in p and os.path.isfile(p)):
        if budget <= 0:
            break
        try:
            read = _Records(path, lines=True, text_fields=text_fields, data_format=data_format)
        except Exception:
            continue
        budget -= read.size
        found |= read.lines
    return found


def _record_keys(records: list) -> List[bytes]:
    """What each record releases, for the duplicate checks (R9-3, R10-3): a record is ``("l", text)`` (a text line,
    or a JSONL line that does not parse), ``("o", [texts])`` (a JSONL object's / Parquet row's text fields),
    ``("b", line)`` (a line that is not UTF-8: its bytes) or ``("x", None)`` (a row the reader fails: no key, b"").
    Texts are keyed by their word sequence as the tokenizer looks words up (``textdp.text.tokenize.word_sequences``:
    case folded, ’ read as ', NFKC; punctuation, whitespace and layout dropped), all texts of the batch at once; an
    object's text fields by the words of all of them in order, one sequence (R11-7: which field held which words
    does not change what is released), the same key as a text line with those words."""
    from textdp.text.tokenize import word_sequences

    texts = [text for kind, value in records if kind in "lo" for text in ((value,) if kind == "l" else value)]
    sequences = iter(word_sequences(texts))
    keys = []
    for kind, value in records:
        if kind == "l":
            keys.append(b"l" + next(sequences).encode("utf-8", "surrogatepass"))
        elif kind == "o":  # the words of every text field in order, as one sequence (R11-7: a text moved from one
            words = " ".join(w for w in (next(sequences) for _ in value) if w)  # field to another is the same record)
            keys.append(b"l" + words.encode("utf-8", "surrogatepass"))
        else:
            keys.append(b"b" + value if kind == "b" else b"")
    return keys


def _line_record(line: bytes, text_fields: Optional[Sequence[str]]):
    """One line as a record for ``_record_keys``; None when the reader finds it empty (blank text, or every text field
    of a JSONL object blank: ``ReadFileRecords``' EMPTY)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return ("b", line)
    if not text.strip():
        return None
    if text_fields:
        payload, problem = parse_json_line(text)
        if problem is None and isinstance(payload, dict) and all(isinstance(payload.get(f), str) for f in text_fields):
            values = [payload[f] for f in text_fields]
            return ("o", values) if any(v.strip() for v in values) else None
    return ("l", text)


def line_key(line: bytes, text_fields: Optional[Sequence[str]] = None) -> bytes:
    """The duplicate checks' key of one line (``_line_record`` then ``_record_keys``): what it releases, its words
    as the tokenizer looks them up; b"" when the reader finds it empty. For callers that key records one at a time
    (audit's training text, R10b-4); files are keyed in batches by ``_Records``."""
    record = _line_record(line, text_fields)
    return b"" if record is None else _record_keys([record])[0]


class _Records:
    """One local file read as the reader reads it, each record compared by what textdp privatizes of it
    (``_record_keys``: its words as the tokenizer looks them up; text: non-blank lines, LF or CRLF, a first line's
    UTF-8 byte-order mark dropped; JSONL: ``text_fields`` of each object; Parquet (``data_format``): ``text_fields``
    read column-wise with pyarrow). ``digest``: SHA-256 of those keys (each + LF), the whole file or the first
    ``limit`` bytes of that stream; ``lines``: an 8-byte BLAKE2b digest per distinct key when asked; ``size``: the
    decompressed bytes read (Parquet: the text fields' UTF-8 bytes); ``records``: records that are not empty (as the
    reader decides: blank lines and blank text fields aside); ``complete``: the whole file was read; ``head_digest``:
    the digest of the first DUPLICATE_SAMPLE_BYTES of that stream, what ``_Records(path, DUPLICATE_SAMPLE_BYTES)
    .digest`` gives (a file read whole is not read again for it). ``until_record``: stop at the first record, keys
    not computed (whether a file holds any record)."""

    def __init__(self, path: str, limit: Optional[int] = None, lines: bool = False,
                 text_fields: Optional[Sequence[str]] = None, raw=None, data_format: Optional[str] = None,
                 until_record: bool = False, stop_when: Optional[Callable[[List[bytes]], bool]] = None):
        import contextlib
        import hashlib

        self.lines, self.size, self.records, self.complete = (set() if lines else None), 0, 0, True
        self._digest, self._hashed, self._limit = hashlib.sha256(), 0, limit
        self._head, self._head_hashed = (hashlib.sha256() if limit is None else None), 0
        self._stop_when, self.stopped = stop_when, False
        parquet = data_format == "parquet"
        if parquet:
            text_fields = tuple(text_fields or ("text",))
        # raw: the file already open (binary, at its start; left open), else ``path`` is opened
        with (open(path, "rb") if raw is None else contextlib.nullcontext(raw)) as raw:
            batches = self._parquet_records(raw, text_fields) if parquet else \
                self._line_records(open_decompressed(raw, path), text_fields)
            for batch in batches:
                if until_record:
                    self.records += len(batch)
                    if self.records:
                        self.complete = False
                        break
                    continue
                self._add(batch)
                if self.stopped:
                    self.complete = False
                    break
        self.digest = self._digest.hexdigest()
        self.head_digest = self._head.hexdigest() if self._head is not None else (
            self.digest if limit == DUPLICATE_SAMPLE_BYTES else None)

    def _more(self) -> bool:
        limit = self._limit
        more = limit is None or (self._hashed < limit and self.size < 4 * limit + (1 << 12))
        self.complete = self.complete and more
        return more

    def _add(self, batch: list) -> None:
        import hashlib

        self.records += len(batch)
        limit = self._limit
        keys = _record_keys(batch)
        if self._stop_when is not None and self._stop_when(keys):
            self.stopped = True
        for key in keys:
            if not key or (limit is not None and self._hashed >= limit):
                continue
            piece = key + b"\n" if limit is None else (key + b"\n")[:limit - self._hashed]
            self._digest.update(piece)
            self._hashed += len(piece)
            if self._head is not None and self._head_hashed < DUPLICATE_SAMPLE_BYTES:
                part = piece[:DUPLICATE_SAMPLE_BYTES - self._head_hashed]
                self._head.update(part)
                self._head_hashed += len(part)
            if self.lines is not None:
                self.lines.add(hashlib.blake2b(key, digest_size=8).digest())

    def _line_records(self, handle, text_fields):
        """Batches of the non-empty lines' records (``_line_record``), about _KEY_BATCH_BYTES each (at most
        ``limit`` bytes when a limit is set, so that reading stops soon after it)."""
        batch, batch_bytes, first = [], 0, True
        size = _KEY_BATCH_BYTES if self._limit is None else min(_KEY_BATCH_BYTES, self._limit)
        while self._more():
            line, ended = self._line(handle)
            if line is None:
                break
            if first and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            first = False
            if ended and line.endswith(b"\r"):
                line = line[:-1]
            record = _line_record(line, text_fields)
            if record is None:
                continue
            batch.append(record)
            batch_bytes += len(line)
            if batch_bytes >= size:
                yield batch
                batch, batch_bytes = [], 0
        if batch:
            yield batch

    def _parquet_records(self, raw, text_fields):
        """Batches of a Parquet file's rows as records: their ``text_fields`` (only those columns are read); a row
        whose text fields are all blank strings is empty (no record), one with a null or non-string value a record the
        reader fails (no key)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(raw)
        for table in parquet.iter_batches(batch_size=4096, columns=list(text_fields)):
            if not self._more():
                return
            columns = [table.column(field) for field in text_fields]
            self.size += sum(int(pc.sum(pc.binary_length(column)).as_py() or 0) for column in columns)
            batch = []
            for values in zip(*(column.to_pylist() for column in columns)):
                if not all(isinstance(value, str) for value in values):
                    batch.append(("x", None))
                elif any(value.strip() for value in values):
                    batch.append(("o", list(values)))
            yield batch

    def _line(self, handle):
        """The next line without its LF (None at the end) and whether it had one; read 1 MiB at a time."""
        pieces = []
        while True:
            piece = handle.readline(_LINE_PIECE_BYTES)
            self.size += len(piece)
            if not piece:
                return (b"".join(pieces), False) if pieces else (None, False)
            if piece.endswith(b"\n"):
                pieces.append(piece[:-1])
                return b"".join(pieces), True
            pieces.append(piece)


def any_record_word(paths: Sequence[str], data_format: str, text_fields: Optional[Sequence[str]],
                    known: Callable[[str], bool]) -> Optional[bool]:
    """Whether some word of the local files' records, as the duplicate checks key them (``_record_keys``: the words as
    the tokenizer looks them up), satisfies ``known``; reading stops at the first. None when that cannot be told: a
    remote or unreadable file, or RECORD_CHECK_MAX_BYTES read without an answer (audit's --prior-corpus, R11b-3)."""
    if any("://" in p for p in paths):
        return None
    fields = tuple(text_fields or ("text",)) if data_format in ("jsonl", "parquet") else None

    def found(keys: List[bytes]) -> bool:
        return any(known(word) for key in keys if key.startswith(b"l")
                   for word in key[1:].decode("utf-8", "surrogatepass").split(" ") if word)

    budget = RECORD_CHECK_MAX_BYTES
    for path in sorted(paths):
        try:
            read = _Records(path, max(budget, 1), text_fields=fields, data_format=data_format, stop_when=found)
        except Exception:  # unreadable or damaged: the run reports it
            return None
        if read.stopped:
            return True
        budget -= read.size
        if not read.complete or budget <= 0:
            return None
    return False


def records_identity(path: str, raw, data_format: str, text_fields: Optional[Sequence[str]] = None) -> str:
    """A file's identity by what textdp privatizes of its records, the key ``refuse_duplicate_content`` compares
    (``_Records``' digest: the words of each record as the tokenizer looks them up, of a JSONL object's or Parquet
    row's ``text_fields``; case, ’ vs ', punctuation, whitespace, blank lines, line endings, a byte-order mark and the
    final newline aside), read from ``raw`` (the file open in binary at its start, seekable; decompressed as the reader
    decompresses ``path``): the streaming watch knows a file by it, so a copy the batch job refuses as a duplicate is
    one the watch does not read twice. A file that cannot be read so (damaged compressed data, a damaged Parquet
    file; the reader makes its error record): the SHA-256 of its bytes, prefixed ``raw-``."""
    fields = tuple(text_fields or ("text",)) if data_format in ("jsonl", "parquet") else None
    try:  # the reader's decompressor closes the stream it wraps: it gets one that leaves ``raw`` open (R11b-2)
        return _Records(path, text_fields=fields, raw=_LeftOpen(raw), data_format=data_format).digest
    except Exception:
        raw.seek(0)
    return "raw-" + stream_digest(raw)


class _LeftOpen(io.RawIOBase):
    """A view of a binary stream whose ``close`` leaves the stream open (reads, seeks and tells go through)."""

    def __init__(self, raw):
        super().__init__()
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._raw.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seekable(self) -> bool:
        return self._raw.seekable()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()


def holds_no_record(path: str, data_format: str, text_fields: Optional[Sequence[str]] = None, read=None) -> bool:
    """Whether a local file holds no record the reader would privatize or fail (only blank lines, JSONL objects or
    Parquet rows whose text fields are all blank, or nothing): ``read``, the ``_Records`` the duplicate check kept for
    it (``refuse_duplicate_content``'s answer), when it tells; else the file is read up to its first record, keys not
    computed. False when unknown (a file that cannot be read: the run reports it)."""
    if read is not None and (read.records or read.complete):
        return not read.records
    fields = tuple(text_fields or ("text",)) if data_format in ("jsonl", "parquet") else None
    try:
        return not _Records(path, text_fields=fields, data_format=data_format, until_record=True).records
    except Exception:
        return False


def refuse_duplicate_content(flag: str, paths: Sequence[str], data_format: Optional[str] = None,
                             text_fields: Optional[Sequence[str]] = None) -> dict:
    """The same records matched twice would be released once per copy with fresh noise (two releases of a record
    compose; round 7 F11, round 8 R8-4): refused before the run, naming both files, never their content.

    Files are compared by what textdp privatizes of each record (``_record_keys``, rounds 9-10: R9-3, R10-2, R10-3):
    the words of a text line, of a JSONL object's ``text_fields`` (default ``text``; other fields, key order and number
    spellings such as 0 and 0.0 aside) or of a Parquet row's ``text_fields`` (read column-wise: codec, row groups and
    other writer settings aside), as the tokenizer looks them up: case folded, ’ read as ', NFKC, punctuation and
    whitespace dropped (punctuation is structure, released as is), the lines read as the reader reads them (CRLF or
    LF, a UTF-8 byte-order mark dropped, final newline optional, blank lines skipped). Two files with the same records
    are refused (a cp/unix2dos copy, an editor's re-save, an NFD copy from macOS, an upper-cased or curly-apostrophe
    copy, a copy with every line quoted "> ", a re-export that adds a column or uses another Parquet codec,
    reviews.txt next to reviews.txt.gz); so is a file more than OVERLAP_SHARE (half) of whose distinct records, and at
    least 2, occur in one other matched file (a part next to its merge, two versions of one export: R10-5), the
    threshold audit's --prior-corpus check uses. One record shared by two files is legitimate and never refused.
    Cost: every local file's first 64 KiB of record keys (read from at most about 256 KiB of it) are hashed, and only
    files agreeing there are hashed whole for equality; the overlap check reads local files whole up to
    RECORD_CHECK_MAX_BYTES (256 MiB decompressed; Parquet: of text fields) in all, keeping an 8-byte digest per
    distinct record, counting per pair of files only the records they share (a record held by more than
    _OVERLAP_HOLDERS files: against its first ones), and is skipped for the files past that budget. gs:// files and
    unreadable or damaged ones are not compared (the guard and the run report those).

    Returns ``{path: _Records}`` of what was read (for ``holds_no_record``: files are not read twice)."""
    from collections import Counter

    from textdp.errors import TextdpError
    from textdp.outputs import shown

    local = sorted(p for p in paths if "://" not in p and os.path.isfile(p))
    if len(local) < 2:
        return {}
    text_fields = tuple(text_fields or ("text",)) if data_format in ("jsonl", "parquet") else None
    whole: dict = {}
    read_any: dict = {}
    budget = RECORD_CHECK_MAX_BYTES
    for path in local:  # the overlap pass, bounded by the budget (and its equality digests)
        if budget <= 0:
            break
        try:
            read = _Records(path, lines=True, text_fields=text_fields, data_format=data_format)
        except Exception:  # a damaged file is the run's to report
            continue
        budget -= read.size
        read_any[path] = read
        if budget >= 0:
            whole[path] = read

    def full(path):
        if path not in whole:
            whole[path] = _Records(path, text_fields=text_fields, data_format=data_format)
        return whole[path].digest

    seen: dict = {}
    for path in local:
        try:
            if path in whole:
                quick = whole[path].head_digest
            else:
                read_any[path] = _Records(path, DUPLICATE_SAMPLE_BYTES, text_fields=text_fields, data_format=data_format)
                quick = read_any[path].digest
        except Exception:
            continue
        if quick == _EMPTY_DIGEST:  # no records: two empty files release nothing twice
            continue
        for other in seen.get(quick, []):
            try:
                same = full(other) == full(path)
            except Exception:
                continue
            if same:
                how = "compared by the words privatized: case, ’ vs ', punctuation, whitespace, line endings and " \
                      "blank lines aside" + (", and fields that are not --text-field" if text_fields else "")
                raise TextdpError(f"{flag} matches two files with the same content: {shown(other)} and {shown(path)} "
                                  f"({how}), so each of their records would be released twice with "
                                  f"fresh noise (two releases of a record compose); remove the copy or narrow {flag}")
        seen.setdefault(quick, []).append(path)
    holders: dict = {}
    for path, read in whole.items():
        for line in read.lines or ():
            holders.setdefault(line, []).append(path)
    found = None  # the pair with the largest share (a whole file contained first), then by names
    for path, read in whole.items():
        distinct = len(read.lines or ())
        if distinct < 2:
            continue
        shared: Counter = Counter()
        for line in read.lines:
            held = holders[line]
            if len(held) > 1:
                shared.update(holder for holder in held[:_OVERLAP_HOLDERS] if holder != path)
        for other, count in shared.items():
            if count >= 2 and count > OVERLAP_SHARE * distinct:
                rank = (-count / distinct, path, other)
                found = min(found, (rank, count, distinct)) if found else (rank, count, distinct)
    if found:
        (_, path, other), count, distinct = found
        which = f"every record of {shown(path)} also occurs" if count == distinct else \
            f"{count:,} of the {distinct:,} distinct records of {shown(path)} also occur"
        raise TextdpError(f"{flag}: {which} in {shown(other)} (more than {OVERLAP_SHARE:.0%} of them: a part "
                          "next to the file merged from it, or two versions of one export?), so those records would "
                          "be released twice with fresh noise (two releases of a record compose); remove one of "
                          f"them or narrow {flag}")
    return read_any


def _magic_fits(compression: str, head: bytes) -> bool:
    """Whether a file's first bytes are what its compression suffix says (an empty file is read as empty)."""
    if not head:
        return True
    if compression == "gzip":
        return head[:2] == b"\x1f\x8b"
    if compression == "bzip2":
        return head[:3] == b"BZh"
    if compression == "zstd":
        return head[:4] == b"\x28\xb5\x2f\xfd"
    if compression == "xz/lzma":
        return head[:6] == b"\xfd7zXZ\x00" or head[:1] == b"\x5d"  # .xz, or a legacy .lzma header
    if compression == "deflate (zlib)":
        return len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] * 256 + head[1]) % 31 == 0
    return True


def refuse_false_compression(flag: str, paths: Sequence[str]) -> None:
    """A compression suffix that lies (plain text or bzip2 data named .gz) is found from the first bytes
    before the run (round 6 F18): refused when every matched file is local and each one lies (the run would
    read nothing); in a glob where other files are fine, each such file is the run's unreadable_file error
    record, as before. Never quotes the bytes (TextdpError)."""
    from textdp.errors import TextdpError
    from textdp.outputs import shown

    local = [p for p in paths if "://" not in p and os.path.isfile(p)]
    if not paths or len(local) < len(paths):
        return
    lying = []
    for path in local:
        compression = _compression_name(path)
        if not compression:
            return  # an uncompressed file: the run reads it
        try:
            with open(path, "rb") as handle:
                head = handle.read(8)
        except OSError:
            return  # the guard reports what cannot be read
        if _magic_fits(compression, head):
            return
        lying.append((path, compression))
    if lying:
        path, compression = lying[0]
        more = f" (and so do the other {len(lying) - 1} matched file(s))" if len(lying) > 1 else ""
        raise TextdpError(f"{flag}: {shown(path)} is named as {compression} data but its first bytes are not{more}: rename "
                          "it to what it is (e.g. drop the .gz of a plain-text file)")


def refuse_undecodable_start(flag: str, paths: Sequence[str]) -> None:
    """Text and JSONL are UTF-8: a local file of which none of the first non-blank lines (up to
    FORMAT_SAMPLE_LINES, decompressed) is valid UTF-8 (a Windows-1252 or Latin-1 export) is refused before the
    run (round 6 F17), naming the byte offset of the first invalid byte, never the bytes; a file with some
    undecodable lines among UTF-8 ones is the run's to report (an undecodable error record per line)."""
    from textdp.errors import TextdpError
    from textdp.outputs import shown

    for path in [p for p in paths if "://" not in p and os.path.isfile(p)][:FORMAT_SAMPLE_FILES]:
        lines = _first_lines(path, FORMAT_SAMPLE_LINES)
        starts = []
        for line in lines:
            try:
                line.decode("utf-8")
                break  # a UTF-8 line: the run reports the others one by one
            except UnicodeDecodeError as exc:
                starts.append(exc.start)
        if lines and len(starts) == len(lines):
            first = starts[0]
            offset = _offset_in_file(path, lines[0]) + first
            where = "of its decompressed data" if _compression_name(path) else ""
            raise TextdpError(f"{flag}: {shown(path)} is not UTF-8 (none of its first {len(lines)} non-blank line(s) is; the "
                              f"first invalid byte is at offset {offset:,}{' ' + where if where else ''}): convert it, "
                              "e.g. iconv -f WINDOWS-1252 -t UTF-8 if it came from Excel or Windows")


def _offset_in_file(path: str, line: bytes) -> int:
    """The byte offset of the first non-blank line ``line`` in ``path``'s (decompressed) data."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
            head = open_decompressed(raw, path).read(1 << 16)
        found = head.find(line)
        return found if found >= 0 else 0
    except Exception:
        return 0


FORMAT_SAMPLE_LINES = 20  # non-blank lines of each of the first FORMAT_SAMPLE_FILES local files read before the run
FORMAT_SAMPLE_FILES = 10


def _first_lines(path: str, count: int, max_bytes: int = 1 << 16) -> list:
    """The first ``count`` non-blank lines (bytes) of a local file, decompressed; a line cut by ``max_bytes``
    is left out. Empty when the file cannot be read here (the run reports it)."""
    lines = []
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
            handle = open_decompressed(raw, path)
            consumed = 0
            while len(lines) < count and consumed < max_bytes:
                line = handle.readline(max_bytes - consumed)
                if not line:
                    break
                consumed += len(line)
                if line.strip() and (line.endswith(b"\n") or consumed < max_bytes):
                    lines.append(line)
    except Exception:  # a damaged file is the run's to report
        return []
    return lines


def check_declared_format(flag: str, paths: Sequence[str], data_format: str) -> list:
    """The input's first lines against its format (given or inferred), before the run: JSONL of which none
    of the first non-blank lines is JSON or starts with { or [ (plain text) is refused (every record would fail,
    after the whole run; malformed JSON is left to the run, which reports each line); so is JSONL whose first
    non-blank character is [ and of whose first lines none is a JSON object (one JSON array, pretty-printed
    or on one line, or text lines such as "[1] ...");
    plain text whose first non-blank lines (two or more) are all JSON objects is read as asked, with a
    warning returned (its keys and numbers would be privatized as words and the output would not be JSON).
    Local files only (the first FORMAT_SAMPLE_FILES); never quotes a line (TextdpError)."""
    from textdp.errors import TextdpError
    from textdp.outputs import shown

    if data_format not in ("text", "jsonl"):
        return []
    for path in [p for p in paths if "://" not in p and os.path.isfile(p)][:FORMAT_SAMPLE_FILES]:
        texts = [line.decode("utf-8", "replace").lstrip("\ufeff") for line in _first_lines(path, FORMAT_SAMPLE_LINES)]
        parsed = [parse_json_line(text) for text in texts]
        objects = sum(1 for payload, _ in parsed if isinstance(payload, dict))
        json_like = sum(1 for text, (_, problem) in zip(texts, parsed) if problem is None or text.lstrip()[:1] in "{[")
        if data_format == "jsonl" and texts and (texts[0].strip() == "[" or (not objects and texts[0].lstrip()[:1] == "[")):
            if texts[0].strip() == "[" or isinstance(parsed[0][0], list):  # a JSON array (a line "[" is no record)
                raise TextdpError(f"{flag}: {shown(path)} holds a JSON array, not JSON Lines (one JSON object per line): "
                                  f"convert it, e.g. jq -c '.[]' {shown(path)} > records.jsonl")
            raise TextdpError(f"{flag}: {shown(path)} is not JSONL: none of its first {len(texts)} non-blank line(s) is a JSON "
                              "object (lines starting with [ : is it plain text? give the format text)")
        if data_format == "jsonl" and texts and not objects and texts[0].lstrip()[:1] == "{" and len(texts) >= 2:
            raise TextdpError(f"{flag}: {shown(path)} is not JSONL: none of its first {len(texts)} non-blank lines is a whole JSON "
                              "object (one object spread over lines, i.e. pretty-printed JSON?): JSON Lines needs one "
                              f"object per line, e.g. jq -c . {shown(path)} > records.jsonl")
        if data_format == "jsonl" and texts and not json_like:  # broken JSON ("{", "[1,") is the run's to report
            raise TextdpError(f"{flag}: {shown(path)} is not JSONL: none of its first {len(texts)} non-blank line(s) is JSON "
                              "or starts like it (is it plain text? give the format text)")
        lines = texts
        if data_format == "text" and len(lines) >= 2 and objects == len(lines):
            return [f"{flag} is read as plain text, but the first {len(lines)} non-blank lines of one of its files are all "
                    "JSON objects (JSONL?): their keys, numbers and punctuation are privatized as words and the output is "
                    "not JSON; give the format jsonl to privatize only the text fields"]
    return []
