"""Exceptions raised by the core library.

Messages name files, line numbers and parameters, never the content of user text.

Every error textdp raises on purpose is a ``TextdpError`` (catch that for all of them), and also the
built-in exception Python code would expect for its case, so that a caller's ``except ValueError``
or ``except FileNotFoundError`` works too:

- a value textdp refuses (a parameter out of range, a malformed file): ``TextdpValueError``, a
  ``ValueError`` (``ParameterError``, ``EmbeddingFormatError`` are of this kind);
- a value of the wrong kind (a dict where a list of strings is expected, an artifact given as a
  number): ``TextdpTypeError``, a ``TypeError``;
- a file or directory that is not there (an artifact directory, its manifest or one of its files, an
  embedding source): ``ArtifactNotFoundError`` / ``EmbeddingNotFoundError``, a ``FileNotFoundError``.

``ArtifactError`` (an artifact that is incomplete, corrupted or of an unknown format) stays a plain
``TextdpError``: a damaged artifact is neither a caller's bad value nor a missing file.
"""

import re

# A field or column name a message or the public summary may show: identifier-like only, since keys can be data (a
# pivot's "John Smith has HIV", an e-mail address); other names are counted, never shown (R8-5, R9-6).
FIELD_NAME_SHOWN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,40}")


class TextdpError(Exception):
    """Base class for every error the library raises on purpose."""


class TextdpWarning(UserWarning):
    """What textdp warns about through Python's ``warnings`` module (a run that goes on, but whose output may not
    be what its privacy statement says: e.g. a custom mechanism whose trial release changed no word). Never user
    text."""


class TextdpValueError(TextdpError, ValueError):
    """A value textdp refuses: a setting out of its range, a malformed input file."""


class TextdpTypeError(TextdpError, TypeError):
    """A value of the wrong kind (the message names the kind expected and the kind given, never the value)."""


class TextdpAttributeError(TextdpError, AttributeError):
    """An attribute textdp does not let a caller set: a Privatizer's settings are fixed at construction."""


class EmbeddingFormatError(TextdpValueError):
    """An embedding source is malformed; the message names the file and, where known, the line."""

    def __init__(self, path, reason, line=None):
        self.path = str(path)
        self.line = line
        from textdp.paths import shown  # the one path printer (R11-4): no control character of a name reaches a console

        where = f"{shown(self.path)}, line {line}" if line is not None else shown(self.path)
        super().__init__(f"{where}: {reason}")


class EmbeddingNotFoundError(EmbeddingFormatError, FileNotFoundError):
    """An embedding source (a file, or the package of the bundled one) that is not there."""


class ArtifactError(TextdpError):
    """A vocabulary artifact is missing, incomplete, corrupted or of an unknown format."""


class ArtifactNotFoundError(ArtifactError, FileNotFoundError):
    """A vocabulary artifact's directory, manifest or one of its files that is not there."""


class ParameterError(TextdpValueError):
    """A mechanism parameter or epsilon that the mechanism refuses (one line, never input text).

    Also a ValueError, the type the mechanism constructors raised before they shared one check."""
