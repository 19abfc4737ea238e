"""Reading compressed input files so that a file which ends early is noticed, not silently cut.

Beam's ``CompressedFile`` stops reading when the underlying file runs out of bytes, whether or not the
compressed stream reached its end marker: a truncated ``.gz`` (an interrupted upload, a full disk)
reads as a shorter, valid-looking file, and the records after the cut are lost without a word. Here
the file is opened uncompressed and decompressed by ``DecompressingReader``, which raises
``TruncatedStream`` when the bytes run out before the stream's end marker (gzip, bzip2, xz/lzma,
zlib-"deflate" and zstd all have one). Compression is chosen from the file name exactly as Beam's
``CompressionTypes.AUTO`` does, and concatenated streams (``cat a.gz b.gz``) are read whole, as Beam
reads them. The result is a buffered binary stream, so ``readline(limit)`` keeps memory bounded.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib

from apache_beam.io.filesystem import CompressionTypes

READ_CHUNK_BYTES = 1 << 16


class TruncatedStream(EOFError):
    """The file ended before the compressed stream's end marker: part of the file is missing."""


def _decompressor_factory(compression_type: str):
    if compression_type == CompressionTypes.GZIP:
        return lambda: zlib.decompressobj(zlib.MAX_WBITS | 16)
    if compression_type == CompressionTypes.BZIP2:
        return bz2.BZ2Decompressor
    if compression_type == CompressionTypes.LZMA:
        return lzma.LZMADecompressor
    if compression_type == CompressionTypes.DEFLATE:
        return zlib.decompressobj  # Beam's "deflate" is the zlib format (header and checksum)
    if compression_type == CompressionTypes.ZSTD:
        import zstandard  # a dependency of apache-beam
        return lambda: zstandard.ZstdDecompressor(max_window_size=2 ** 31).decompressobj()
    raise ValueError(f"unknown compression type {compression_type!r}")


class DecompressingReader(io.RawIOBase):
    """Raw stream of the decompressed bytes of ``raw``; raises ``TruncatedStream`` at an early end.

    A new decompressor starts on bytes left over after an end marker (concatenated streams), and the
    stream ends cleanly only where the file ends right after an end marker (or is empty); for gzip, zero bytes
    after a member are skipped as padding (block-oriented writers pad so; gzip(1) and Python's gzip ignore them).
    """

    def __init__(self, raw, compression_type: str):
        super().__init__()
        self._raw = raw
        self._new_decompressor = _decompressor_factory(compression_type)
        self._gzip = compression_type == CompressionTypes.GZIP
        self._decompressor = self._new_decompressor()
        self._stream_started = False  # bytes of the current stream were fed to the decompressor
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            if not self._fill():
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _fill(self) -> bool:
        """Decompress the next chunk into ``_pending``; False at a clean end of the file."""
        if self._decompressor.eof:
            leftover = self._decompressor.unused_data
            self._decompressor = self._new_decompressor()
            self._stream_started = False
            chunk = leftover or self._raw.read(READ_CHUNK_BYTES)
            if self._gzip:  # zero bytes after a gzip member are padding, as gzip(1) and Python's gzip read them (R10-4)
                chunk = chunk.lstrip(b"\0")
                while not chunk:
                    chunk = self._raw.read(READ_CHUNK_BYTES)
                    if not chunk:
                        return False
                    chunk = chunk.lstrip(b"\0")
        else:
            chunk = self._raw.read(READ_CHUNK_BYTES)
        if not chunk:
            if self._stream_started and not self._decompressor.eof:
                raise TruncatedStream("the compressed stream ends before its end marker")
            return False
        self._stream_started = True
        self._pending = memoryview(self._decompressor.decompress(chunk))
        return True

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def open_decompressed(raw, path: str):
    """``raw`` (a binary file opened without decompression) as a buffered stream of its content,
    decompressed according to ``path``'s extension; uncompressed files are returned as they are."""
    compression_type = CompressionTypes.detect_compression_type(path)
    if compression_type == CompressionTypes.UNCOMPRESSED:
        return raw
    return io.BufferedReader(DecompressingReader(raw, compression_type), buffer_size=READ_CHUNK_BYTES)
