"""Parquet specifics: one schema for every input file, rows read cell by cell when a batch fails,
and rows written back with errors that never quote a value.

- **One schema.** The output is written with one Arrow schema, so every input file must have the same
  columns with the same types. ``check_input_schemas`` reads every file's footer before the pipeline
  starts and refuses files that differ (naming the files and the columns, never a value), instead of
  letting a worker fail on the first value that does not fit (whose error message would quote it) or
  silently dropping a column that only a later file has. Column order and schema metadata may differ;
  a column that is nullable in any file is nullable in the output. A file matched only later, on a
  worker, is checked again against the same schema (``schema_differences``).
- **Rows.** ``RecordBatch.to_pylist`` fails for the whole batch on one bad cell (invalid UTF-8 in a
  string, a timestamp beyond Python's ``datetime``); ``batch_rows`` then converts that batch cell by
  cell, so exactly the bad rows fail and every other row is read. ``time64[ns]`` values are read as
  integer nanoseconds and written back as ``time64[ns]`` (``datetime.time`` would drop the last three digits).
- **Writing.** Beam's ``WriteToParquet`` converts rows with ``pyarrow.array``, whose errors quote the
  offending value (``Could not convert 'xyz' with type str ...``) into the worker's log and the job's
  exception. ``RowsToArrowTables`` does that conversion itself and raises ``OutputSchemaError`` naming
  only the column and its type; the tables then go to ``WriteToParquetBatched``.
"""

from __future__ import annotations

import concurrent.futures
from typing import Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms import window

from textdp.errors import TextdpError
from textdp.outputs import shown as shown_path

MAX_LISTED_DIFFERENCES = 6
SCHEMA_READ_THREADS = 8


class OutputSchemaError(TextdpError):
    """A record does not fit the output's Parquet schema (the message names the column, never the value)."""


def read_schema(path: str) -> pa.Schema:
    """The Arrow schema in the footer of one Parquet file (local or gs://)."""
    import pyarrow.parquet as pq

    with FileSystems.open(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return pq.read_schema(handle)


def _is_text_type(data_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    return (pa.types.is_string(data_type) or pa.types.is_large_string(data_type)
            or pa.types.is_string_view(data_type))


def _column(name: str) -> str:
    """A column name for a message: quoted when it looks like an identifier; otherwise never shown (Parquet from a pivot
    or a spreadsheet carries data in its column names; round 8, R8-5), as the --user-field refusal does."""
    from textdp.outputs import FIELD_NAME_SHOWN

    return repr(name) if FIELD_NAME_SHOWN.fullmatch(name) else "[name not shown: not an identifier]"


def _type(data_type: pa.DataType) -> str:
    """A column type for a message: a nested type (struct, list, map) by its kind only, its child names never shown."""
    return str(data_type).split("<", 1)[0] if pa.types.is_nested(data_type) else str(data_type)


def _columns_listed(names: Sequence[str]) -> str:
    """At most MAX_FIELDS_SHOWN identifier-like column names, and how many others there are."""
    from textdp.outputs import FIELD_NAME_SHOWN, MAX_FIELDS_SHOWN

    shown = [name for name in names if FIELD_NAME_SHOWN.fullmatch(name)][:MAX_FIELDS_SHOWN]
    others = len(names) - len(shown)
    more = f" and {others} other column(s) (a name that does not look like an identifier is never shown)" if others else ""
    return (", ".join(shown) or "none shown") + more


def schema_differences(expected: pa.Schema, actual: pa.Schema, expected_name: str = "the first file") -> List[str]:
    """How ``actual`` differs from ``expected`` in the columns that matter for writing (names, types,
    and a nullable column where the output's is not); empty if it fits. Names and types only."""
    found = []
    for field in actual:
        index = expected.get_field_index(field.name)
        if index < 0:
            found.append(f"has a column {_column(field.name)} ({_type(field.type)}) that {expected_name} lacks")
            continue
        wanted = expected.field(index)
        if not field.type.equals(wanted.type):
            found.append(f"has column {_column(field.name)} of type {_type(field.type)} where {expected_name} has "
                         f"{_type(wanted.type)}")
        elif field.nullable and not wanted.nullable:
            found.append(f"has column {_column(field.name)} nullable where {expected_name} declares it not null")
    for field in expected:
        if actual.get_field_index(field.name) < 0:
            found.append(f"lacks the column {_column(field.name)} ({_type(field.type)}) that {expected_name} has")
    return found


def _duplicate_names(schema: pa.Schema) -> List[str]:
    names = schema.names
    return sorted({name for name in names if names.count(name) > 1})


def check_input_schemas(paths: Sequence[str], text_fields: Sequence[str]) -> pa.Schema:
    """The one output schema for Parquet files ``paths`` (sorted; the first file's column order and
    metadata); raises ``TextdpError`` if the files differ in columns or types, or if a text field is
    not a string column. Reads only the footers, in parallel (gs:// round trips). A file whose footer
    cannot be read is skipped here: the worker that reads it reports it as an ``unreadable_file``,
    so one damaged file among thousands does not stop the run."""
    if not paths:
        raise TextdpError("no Parquet input file to read the schema from")
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(SCHEMA_READ_THREADS, len(paths))) as pool:
        read = list(zip(paths, pool.map(_schema_or_none, paths)))
    # A file whose footer cannot be read is left to the workers, which report it as an unreadable file.
    readable = [(path, schema) for path, schema in read if schema is not None]
    if not readable:
        raise TextdpError(f"none of the {len(paths)} Parquet input file(s) is a readable Parquet file "
                          f"(first: {shown_path(paths[0])})")
    paths, schemas = [path for path, _ in readable], [schema for _, schema in readable]
    first_path, first = paths[0], schemas[0]
    for path, schema in readable:
        duplicated = _duplicate_names(schema)
        if duplicated:
            raise TextdpError(f"the Parquet input {shown_path(path)} has more than one column named {_column(duplicated[0])}; "
                              "textdp reads rows as name -> value and would lose one of them")
    problems = []
    for path, schema in zip(paths[1:], schemas[1:]):
        problems.extend(f"{shown_path(path)} {difference}"
                        for difference in schema_differences(_relaxed(first), schema, shown_path(first_path)))
    if problems:
        shown = "; ".join(problems[:MAX_LISTED_DIFFERENCES])
        more = len(problems) - MAX_LISTED_DIFFERENCES
        raise TextdpError(
            "the Parquet input files do not all have the same columns and types, and the output is written "
            f"with one schema: {shown}{f'; and {more} more difference(s)' if more > 0 else ''}. "
            "Convert the files to one schema, or privatize each group of files in its own run")
    output = _with_nullability(first, schemas)
    for field in text_fields:
        index = output.get_field_index(field)
        if index < 0:
            raise TextdpError(f"--text-field {field!r} is not a column of the Parquet input "
                              f"(its columns: {_columns_listed(output.names)})")
        if not _is_text_type(output.field(index).type):
            raise TextdpError(f"--text-field {field!r} is a Parquet column of type {_type(output.field(index).type)}, "
                              "not a string column: only text can be privatized")
    return output


def _schema_or_none(path: str) -> Optional[pa.Schema]:
    try:
        return read_schema(path)
    except Exception:  # not a Parquet file, a damaged footer, an I/O error
        return None


def _relaxed(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column nullable (nullability alone never refuses input files)."""
    return pa.schema([field.with_nullable(True) for field in schema], metadata=schema.metadata)


def _with_nullability(first: pa.Schema, schemas: Sequence[pa.Schema]) -> pa.Schema:
    """``first``, with a column nullable if any of ``schemas`` has it nullable."""
    nullable = {field.name for schema in schemas for field in schema if field.nullable}
    fields = [field.with_nullable(field.nullable or field.name in nullable) for field in first]
    return pa.schema(fields, metadata=first.metadata)


# reading -----------------------------------------------------------------------------------------

_TIME_NS = pa.time64("ns")


def _times_as_integers(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every ``time64[ns]`` in it (top level or nested in lists, structs, maps) as ``int64``."""
    if kind == _TIME_NS:
        return pa.int64()
    if pa.types.is_map(kind):
        return pa.map_(_times_as_integers(kind.key_type), _times_as_integers(kind.item_type), kind.keys_sorted)
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_times_as_integers(kind.value_type)), kind.list_size)
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_times_as_integers(kind.value_type)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_times_as_integers(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_times_as_integers(field.type)) for field in kind])
    return kind


def exact_times(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its ``time64[ns]`` values as integers (nanoseconds since midnight), which the writer
    turns back into ``time64[ns]``: Python's ``datetime.time`` holds microseconds only, so ``to_pylist``
    would drop the last three digits without a word (R9-8). Other types are left as they are."""
    columns, changed = [], False
    for column in batch.columns:
        exact = _times_as_integers(column.type)
        if exact != column.type:
            try:
                column, changed = column.cast(exact), True
            except (pa.ArrowException, ValueError, TypeError):  # a layout the cast does not cover: as before
                pass
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(
        [field.with_type(column.type) for field, column in zip(batch.schema, columns)], metadata=batch.schema.metadata)) \
        if changed else batch


def batch_rows(batch: pa.RecordBatch) -> Iterator[Tuple[Optional[dict], List[Tuple[str, str, Optional[int]]]]]:
    """Each row of ``batch`` as ``(row, [])``, or ``(None, problems)`` for a row with cells that cannot
    be converted: ``(column, 'utf8' | 'value', byte offset of the invalid UTF-8 or None)`` each.
    ``time64[ns]`` values come as integer nanoseconds (``exact_times``)."""
    batch = exact_times(batch)
    try:
        rows = batch.to_pylist()
    except (UnicodeDecodeError, ValueError, OverflowError, pa.ArrowException):
        rows = None
    if rows is not None:
        for row in rows:
            yield row, []
        return
    names, columns = batch.schema.names, batch.columns
    for index in range(batch.num_rows):
        row, problems = {}, []
        for name, column in zip(names, columns):
            try:
                row[name] = column[index].as_py()
            except UnicodeDecodeError as exc:
                problems.append((name, "utf8", exc.start))
            except (ValueError, OverflowError, pa.ArrowException):
                problems.append((name, "value", None))
        yield (None, problems) if problems else (row, [])


def cells_as_text(batch: pa.RecordBatch, index: int, fields: Sequence[str]) -> dict:
    """The text fields of one row, invalid UTF-8 replaced by U+FFFD (for ``--keep-failed-text`` only)."""
    values = {}
    for field in fields:
        column = batch.column(batch.schema.get_field_index(field))
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        raw = column.cast(pa.large_binary())[index].as_py() if column[index].is_valid else None
        values[field] = raw.decode("utf-8", "replace") if raw is not None else None
    return values


# writing -----------------------------------------------------------------------------------------

class RowsToArrowTables(beam.DoFn):
    """Rows (dicts) -> ``pyarrow.Table``s of ``schema``, one per bundle (or per ``table_bytes``).

    Like Beam's own converter, a column missing from a row is null; a field the schema lacks is an
    error (it would otherwise be dropped without a word). Errors name the column and its type only.
    """

    def __init__(self, schema: pa.Schema, batch_rows_count: int = 1000, table_bytes: int = 64 * 1024 * 1024):
        self.schema = schema
        self.batch_rows_count = int(batch_rows_count)
        self.table_bytes = int(table_bytes)
        self._columns: List[list] = []
        self._batches: List[pa.RecordBatch] = []
        self._bytes = 0

    def start_bundle(self):
        self._columns = [[] for _ in self.schema.names]
        self._batches, self._bytes = [], 0

    def process(self, row):
        if len(row) > len(self._columns) or any(self.schema.get_field_index(key) < 0 for key in row):
            extra = sorted(key for key in row if self.schema.get_field_index(key) < 0)
            raise OutputSchemaError(f"a record has field(s) {extra} that the output's Parquet schema lacks; "
                                    "they would be dropped (values not shown)")
        for column, name in zip(self._columns, self.schema.names):
            column.append(row.get(name))
        if len(self._columns[0]) >= self.batch_rows_count:
            self._flush_rows()
        if self._bytes >= self.table_bytes:
            yield self._take_table()

    def finish_bundle(self):
        if self._columns and self._columns[0]:
            self._flush_rows()
        if self._batches:
            yield window.GlobalWindows.windowed_value_at_end_of_window(self._take_table())

    def _flush_rows(self):
        arrays = [self._array(values, field) for values, field in zip(self._columns, self.schema)]
        self._columns = [[] for _ in self.schema.names]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._batches.append(batch)
        self._bytes += batch.nbytes

    @staticmethod
    def _array(values: list, field: pa.Field) -> pa.Array:
        try:
            array = pa.array(values, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # The library's message quotes the value: replace it, and drop the chained exception.
            raise OutputSchemaError(f"a record does not fit the output's Parquet schema: column {_column(field.name)} "
                                    f"expects {_type(field.type)} (the value is not shown)") from None
        if not field.nullable and array.null_count:
            raise OutputSchemaError(f"a record has no value in column {_column(field.name)}, which the output's "
                                    "Parquet schema declares not null")
        return array

    def _take_table(self) -> pa.Table:
        table = pa.Table.from_batches(self._batches, schema=self.schema)
        self._batches, self._bytes = [], 0
        return table
