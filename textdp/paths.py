"""The one path printer (on the floor, so every wing's messages can use it; ``textdp.outputs.shown`` is this object).

Every refusal that names a path (an input, an output, the artifact, the cache) shows it through ``shown``: control
characters escaped, bytes that are not UTF-8 as ``\\xNN`` (R8-7, R9-11, R11-4)."""

import os
import unicodedata


def is_remote(path: str) -> bool:
    return "://" in path


# Characters that reorder the text around them on a console (Trojan-Source style, R11-9): bidi embeddings,
# overrides and isolates, and the directional marks.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def _is_control(character: str) -> bool:
    """C0 and C1 controls and DEL (newline, carriage return, ESC...), the Unicode line/paragraph separators, and the
    bidi controls (they make a console show a name other than the real one): refused in output paths."""
    return unicodedata.category(character) in ("Cc", "Zl", "Zp") or character in _BIDI_CONTROLS


def _escaped_in_messages(character: str) -> bool:
    """What ``shown`` writes as an escape: ``_is_control``'s characters and every other format character (Cf: a
    zero-width space or joiner, a soft hyphen; invisible, so a name would read as another)."""
    return _is_control(character) or unicodedata.category(character) == "Cf"


def shown(path: str) -> str:
    """A path (input, output, artifact, any file name) for a message: bytes that are not UTF-8 (surrogate escapes from
    argv) as \\xNN, and every control character (C0, C1, DEL, U+2028/U+2029: a newline or ESC in a file name), bidi
    control and format character written as an escape (\\n, \\x1b, \\u202e...), never as itself, so no name can forge
    a console line, send a terminal escape or read reversed (R8-7, R9-11, R11-4, R11-9). The one path printer."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    text = os.fsencode(path).decode("utf-8", "backslashreplace") if not is_remote(path) else \
        path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join((repr(c)[1:-1] if c.isascii() or not c.isprintable() else f"\\u{ord(c):04x}")
                   if _escaped_in_messages(c) else c for c in text)
