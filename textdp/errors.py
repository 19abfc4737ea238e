"""Exceptions raised by the core library.

Messages name files, line numbers and parameters, never the content of user text.
"""


class TextdpError(Exception):
    """Base class for every error the library raises on purpose."""


class EmbeddingFormatError(TextdpError):
    """An embedding source is malformed; the message names the file and, where known, the line."""

    def __init__(self, path, reason, line=None):
        self.path = str(path)
        self.line = line
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


class ArtifactError(TextdpError):
    """A vocabulary artifact is missing, incomplete, corrupted or of an unknown format."""


class ParameterError(TextdpError, ValueError):
    """A mechanism parameter or epsilon that the mechanism refuses (one line, never input text).

    Also a ValueError, the type the mechanism constructors raised before they shared one check."""
