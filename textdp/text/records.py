"""Records as textdp privatizes them: which texts a record holds, and the record to release.

A record is a ``str`` (a line of text) or a row whose ``text_fields`` hold the texts to privatize;
every other field passes through unchanged. A row is a ``dict`` (a JSONL object or Parquet row), a
``beam.Row`` (what ``beam.io.ReadFromCsv`` and ``beam.Select`` yield) or a ``NamedTuple``: the last two
are read by attribute and released as the same kind (a ``beam.Row`` with the same fields, the same
NamedTuple class). This
module is the Beam-free part of the ``Privatize`` transform and of ``textdp.Privatizer``: it checks
a record (a reason code and a plain-language detail, never the text), takes its texts out, and
puts the released texts (and, for the shuffle accounting, the record's shape) back.
"""

from __future__ import annotations

import decimal
import hashlib
import math
import numbers
import unicodedata
from typing import List, Optional, Sequence, Tuple

# reason codes of error records (the same as the readers': transforms/io.py)
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
NOT_A_STRING = "not_a_string"
EMPTY = "empty"
TOO_LARGE = "too_large"
NOT_A_TEXT = "not_a_text"
NOT_A_PAIR = "not_a_pair"  # transforms.Privatize(keyed=True): an element that is not a (key, record) pair
MISSING_AUTHOR = "missing_author"  # --user-field set: the record has no such field, or it is null
UNSAFE_AUTHOR_ID = "unsafe_author_id"  # --user-field set: the author is a number that is not an exact integer
MAX_SAFE_FLOAT_ID = 2**53 - 1  # every integer up to here is one float and back; above it two ids can be one float


class NotAPair:
    """Stands for an element of keyed input that is not a ``(key, record)`` pair (``as_pair``)."""

    def __init__(self, kind: str):
        self.kind = kind


def as_pair(element) -> tuple:
    """``element`` if it is a ``(key, record)`` tuple or list of two, else ``(None, NotAPair(kind))``, so that
    it becomes an error record instead of failing the job (or being unpacked: a 2-character string)."""
    if isinstance(element, (tuple, list)) and len(element) == 2:
        return tuple(element)
    return None, NotAPair(kind_of(element))


def kind_of(value) -> str:
    """A value's kind in the user's words (never the value itself)."""
    if value is None:
        return "a null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a value of another type"


def is_beam_row(record) -> bool:
    """A ``beam.Row`` (``apache_beam.pvalue.Row`` or a subclass), told without importing Beam."""
    return any(cls.__module__ == "apache_beam.pvalue" and cls.__name__ == "Row" for cls in type(record).__mro__)


def row_fields(record) -> Optional[dict]:
    """The fields of a row record as a dict (a dict itself; a ``beam.Row`` or a ``NamedTuple``), or None
    for anything else: a plain tuple or list, and any other object with an ``_asdict`` method (a
    SQLAlchemy ``Row``...), which could not be released as the kind it came in (not_an_object)."""
    if isinstance(record, dict):
        return record
    if (isinstance(record, tuple) and hasattr(record, "_fields")) or is_beam_row(record):
        as_dict = getattr(record, "_asdict", None)
        return dict(as_dict()) if callable(as_dict) else None
    return None


def check_record(record, text_fields: Sequence[str], max_text_bytes: Optional[int] = None) -> Optional[Tuple[str, str]]:
    """None if ``record`` can be privatized, else (reason code, detail). Details never quote the text.

    ``text_fields`` empty: the record must be a string. Otherwise it must be a dict whose text fields
    are strings, not all blank. ``max_text_bytes``: the UTF-8 size of its texts, together, at most.
    """
    if isinstance(record, NotAPair):
        return NOT_A_PAIR, f"keyed input needs (key, record) pairs; the element is {record.kind}"
    if not text_fields:
        if not isinstance(record, str):
            return NOT_A_TEXT, f"the record is {kind_of(record)}, not a string"
        texts = [record]
    else:
        fields = row_fields(record)
        if fields is None:
            return NOT_AN_OBJECT, f"the record is {kind_of(record)}, not an object with text fields"
        for field in text_fields:
            if field not in fields:
                return MISSING_FIELD, f"no field {field!r}"
            if not isinstance(fields[field], str):
                return NOT_A_STRING, f"field {field!r} is {kind_of(fields[field])}, not a string"
        texts = [fields[field] for field in text_fields]
    if all(not text.strip() for text in texts):
        return EMPTY, "no text" if not text_fields else "every text field is empty"
    if max_text_bytes is not None:
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
        if size > max_text_bytes:
            return TOO_LARGE, f"{size} bytes of text > the limit of {max_text_bytes}"
    return None


def check_author(record, user_field: Optional[str]) -> Optional[Tuple[str, str]]:
    """None if ``record`` names its author in ``user_field`` (or no author field is asked for), else
    (MISSING_AUTHOR, detail): the field is absent or null, or (UNSAFE_AUTHOR_ID, detail): it is a float that is no
    safe identity (``unsafe_author_id``). Never quotes a value."""
    if not user_field:
        return None
    fields = row_fields(record)
    if fields is None:  # not a row: check_record reports it (not_an_object)
        return None
    if fields.get(user_field) is None:
        what = "null" if user_field in fields else "absent"
        return MISSING_AUTHOR, f"the author field {user_field!r} is {what}; every record needs an author under --user-field"
    if not unsafe_author_id(fields[user_field]):
        return None
    return UNSAFE_AUTHOR_ID, (f"the author field {user_field!r} is or holds a floating-point number that is not an exact "
                              f"integer of magnitude below 2**53 (it cannot be told apart from other authors' ids); "
                              "write author ids as integers or strings (docs/lac.md)")


def unsafe_author_id(value) -> bool:
    """Whether author id ``value`` is, or holds anywhere inside a list or object, a floating-point number that is
    no safe identity: not an integer (1.5, NaN, inf) or of magnitude above 2**53 - 1, where a float stands for
    several integers (an exporter writes the 64-bit id 1234567890123456789 of a column with nulls as
    1.2345678901234568e18, which is 1234567890123456768, and 1234567890123456700 gives the same float): one person
    could count as two authors, or two as one. Integers (any size) and strings are compared exactly; integral
    floats below 2**53 equal their integer, at the top level and inside lists and objects (docs/lac.md)."""
    if isinstance(value, dict):
        return any(unsafe_author_id(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(unsafe_author_id(item) for item in value)
    if hasattr(value, "tolist") and getattr(value, "ndim", 0):  # a numpy array (a Parquet list column)
        return unsafe_author_id(value.tolist())
    if isinstance(value, decimal.Decimal):  # a Parquet DECIMAL column: exact; an integral one is its integer
        return not (value.is_finite() and value == value.to_integral_value())
    if isinstance(value, bool) or isinstance(value, numbers.Integral) or not isinstance(value, numbers.Real):
        return False
    value = float(value)
    return not (math.isfinite(value) and value.is_integer() and abs(value) <= MAX_SAFE_FLOAT_ID)


def _canonical_author(value):
    """``value`` with every number inside written as the integer it equals when it is an integral float (1.0 -> 1,
    2.0 inside a list or object -> 2), numpy scalars and arrays as Python ones, strings (and UTF-8 bytes) in their
    normal form (``normal_text_key``); booleans and nulls as they are. A float that is no safe identity is
    refused first (``unsafe_author_id``)."""
    if isinstance(value, dict):
        return {key: _canonical_author(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical_author(item) for item in value]
    if hasattr(value, "tolist") and getattr(value, "ndim", 0):
        return _canonical_author(value.tolist())
    if isinstance(value, str):
        return normal_text_key(value)
    if isinstance(value, bytes):
        try:
            return normal_text_key(value.decode("utf-8"))
        except UnicodeDecodeError:
            return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, decimal.Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return int(value) if math.isfinite(value) and value.is_integer() else value
    return value


def author_identity(value):
    """The key an author id is compared by (the k-threshold and the per-author bound count authors by it):
    JSON numbers that are equal are one author (1, 1.0 and 1e0: an exporter writes 1.0 for an integer column
    that has a null; a float that is no exact integer below 2**53 is refused by ``check_author``), a string is
    not a number ("1" is another author than 1), a boolean is neither; a list or object by its canonical JSON
    (keys sorted, every number inside written as above: {"uid": 1} and {"uid": 1.0}, [2] and [2.0] are one
    author; ids without floats keep the key they had, so a ledger's hashes do not change); a string by its NFKC
    form without format characters or surrounding whitespace (``normal_text_key``), and UTF-8 bytes as that
    string (a Parquet BINARY column). Hashable; never None
    (a null author is MISSING_AUTHOR; a null inside a list or object is a value like any other)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, numbers.Integral):  # numpy's integers too (a Parquet column)
        return ("number", int(value))
    if isinstance(value, decimal.Decimal):  # DECIMAL(38,0) ids (Oracle NUMBER, Spark DecimalType): 7.00 is 7 (R9b-1)
        return ("number", int(value)) if value.is_finite() and value == value.to_integral_value() else \
            ("number", str(value.normalize()))  # refused first as unsafe_author_id; a key all the same
    if isinstance(value, numbers.Real):  # numpy's floats too; one that is no safe identity is refused first (check_author)
        value = float(value)
        return ("number", int(value) if math.isfinite(value) and value.is_integer() else value)
    if isinstance(value, bytes):  # a Parquet BINARY column is how some writers store UTF-8 text (round 8, R8b-9)
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return ("bytes", value)
    if isinstance(value, str):
        return ("str", normal_text_key(value))
    import json

    return ("json", json.dumps(_canonical_author(value), sort_keys=True, default=str))


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15): characters a renderer shows as
# nothing. Most are format characters (Cf); the others are variation selectors (an emoji's VS16), the combining
# grapheme joiner, Hangul fillers, Mongolian variation selectors... (round 9, R9b-2).
DEFAULT_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


BLANK_SYMBOLS = frozenset("\u2800")  # BRAILLE PATTERN BLANK: a symbol drawn as nothing, used as invisible padding


def _invisible(char: str) -> bool:
    code = ord(char)
    return (unicodedata.category(char) == "Cf" or char in BLANK_SYMBOLS
            or any(low <= code <= high for low, high in DEFAULT_IGNORABLE))


def normal_text_key(text: str) -> str:
    """A string author id as it is compared: NFKC (canonical and compatibility forms of one text are one id: "José"
    composed or decomposed, full-width digits), without invisible characters (format characters such as zero-width
    spaces and bidi marks, and every other Default_Ignorable_Code_Point: variation selectors, fillers) and without
    surrounding whitespace (round 8, R8-6: each form counted as another author). Case is kept ("Alice" and "alice"
    are two ids). Merging forms only ever makes fewer authors: a stricter --k-threshold and --author-budget, never a
    looser one. An id already in this form keeps its key (a ledger's hashes do not change)."""
    if text.isascii():
        return text.strip()
    normal = unicodedata.normalize("NFKC", "".join(c for c in text if not _invisible(c)))
    return "".join(c for c in normal if not _invisible(c)).strip()  # NFKC may bring one back (U+3164 -> U+1160)


def without_fields(record: dict, names) -> dict:
    """``record`` without the fields ``names`` (--drop-fields, the author and shape fields), a key matched by its
    normal form (``normal_text_key``): a key written in another Unicode form of a named field (NFD "émail" for an
    NFC flag, a zero-width space inside) is removed too, never released (round 8, R8-14)."""
    removed = {normal_text_key(name) for name in names}
    return {key: value for key, value in record.items()
            if not (key in names or (isinstance(key, str) and normal_text_key(key) in removed))}


def record_texts(record, text_fields: Sequence[str]) -> List[str]:
    """The texts of a checked record, in field order."""
    if not text_fields:
        return [record]
    if isinstance(record, dict):
        return [record[field] for field in text_fields]
    return [getattr(record, field) for field in text_fields]  # a beam.Row or NamedTuple


def record_shape(text_shapes: Sequence[Tuple[int, str]]) -> dict:
    """One record's shape from its texts' (words, layout digest) pairs, in field order."""
    layouts = "/".join(layout for _, layout in text_shapes)
    layout = layouts if len(text_shapes) == 1 else hashlib.sha256(layouts.encode("ascii")).hexdigest()[:32]
    return {"words": int(sum(words for words, _ in text_shapes)), "layout": layout}


def released_record(record, text_fields: Sequence[str], released: Sequence[str],
                    shape_field: Optional[str] = None, text_shapes: Optional[Sequence[Tuple[int, str]]] = None):
    """The record to release: its texts replaced by ``released`` (in field order).

    With ``shape_field`` the record becomes a dict carrying its shape in that field (a line of text
    becomes ``{"text": released, shape_field: shape}``), for the Amplifier, which removes it. Without it
    a ``beam.Row`` or ``NamedTuple`` is released as the same kind.
    """
    if not text_fields:
        if shape_field:
            return {"text": released[0], shape_field: record_shape(text_shapes)}
        return released[0]
    if not isinstance(record, dict) and not shape_field:
        replaced = dict(zip(text_fields, released))
        if isinstance(record, tuple):  # a NamedTuple: the same class
            return record._replace(**replaced)
        return type(record)(**dict(row_fields(record), **replaced))  # a beam.Row: the same fields, in order
    out = dict(record) if isinstance(record, dict) else row_fields(record)
    for field, text in zip(text_fields, released):
        out[field] = text
    if shape_field:
        out[shape_field] = record_shape(text_shapes)
    return out
