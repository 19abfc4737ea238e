"""A vocabulary that worker processes share through the page cache instead of copying.

``Artifact`` keeps the vocabulary as a Python list (and, on demand, a dict): for the 400k-word
default that is ~60 MB of private memory in every worker process, almost as much as the
memory-mapped vectors (80 MB) that all processes share. ``CompactVocabulary`` instead
memory-maps ``vocab.txt`` itself (shared, read-only) and keeps only small numpy arrays per
process: where each word starts and ends in the file, and a sorted array of word hashes for
lookups (~10 MB in all). Word -> id is a binary search on the hash plus a byte comparison, so a
hash collision can never map a word to the wrong id.

``SharedVocabularyArtifact`` is an ``Artifact`` whose ``words`` is such a view: a drop-in for
code that reads ``artifact.words[i]`` and ``len(artifact.words)``.
"""

from __future__ import annotations

import mmap

import numpy as np

from textdp.artifact.store import Artifact
from textdp.errors import ArtifactError
from textdp.paths import shown
from textdp.text.word_memo import different_spans, ranges


class CompactVocabulary:
    """``vocab[i] -> word``, ``len(vocab)``, ``vocab.get(word, default) -> id`` over a mapped vocab file."""

    def __init__(self, path: str):
        with open(path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        data = np.frombuffer(self._map, dtype=np.uint8)
        ends = np.flatnonzero(data == 10)
        if len(data) and data[-1] != 10:
            ends = np.append(ends, len(data))
        del data  # keep no exported buffer on the map
        self._ends = ends.astype(np.int64)
        self._starts = np.concatenate(([0], self._ends[:-1] + 1)).astype(np.int64)
        hashes = np.fromiter((hash(self[i]) for i in range(len(self._ends))), dtype=np.int64,
                             count=len(self._ends))
        self._order = np.argsort(hashes, kind="stable").astype(np.int32)
        self._sorted_hashes = hashes[self._order]

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: int) -> str:
        return self._map[self._starts[index]:self._ends[index]].decode("utf-8")

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def words_at(self, ids: np.ndarray) -> list:
        """``[vocab[i] for i in ids]`` without Python work per word: one gather from the map, one decode.

        Every word is copied with the byte after it, which is set to a newline (the last word of
        the file may have none), and the gathered bytes are decoded and split once.
        """
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return []
        starts = self._starts[ids]
        spans = self._ends[ids] - starts + 1  # word and separator
        ends = np.cumsum(spans)
        offsets = ends - spans
        source = np.repeat(starts - offsets, spans) + np.arange(int(ends[-1]), dtype=np.int64)
        data = np.frombuffer(self._map, dtype=np.uint8)
        try:
            gathered = data.take(source, mode="clip")
        finally:
            del data  # keep no exported buffer on the map
        gathered[ends - 1] = 10
        return gathered.tobytes().decode("utf-8").split("\n")[:-1]

    def joined_words(self, ids: np.ndarray) -> tuple:
        """``("".join(vocab[i] for i in ids), code point length of each)``, gathered from the map at once."""
        ids = np.asarray(ids, dtype=np.int64)
        starts = self._starts[ids]
        spans = self._ends[ids] - starts
        data = np.frombuffer(self._map, dtype=np.uint8)
        try:
            gathered = data[ranges(starts, spans)]
        finally:
            del data  # keep no exported buffer on the map
        if not len(gathered) or gathered.max() < 128:  # ASCII: one code point per byte
            return gathered.tobytes().decode("ascii"), spans
        first_bytes = np.concatenate(([0], np.cumsum((gathered & 0xC0) != 0x80)))  # code points so far
        ends = np.cumsum(spans)
        return gathered.tobytes().decode("utf-8"), first_bytes[ends] - first_bytes[ends - spans]

    def get(self, word: str, default=None):
        """The id of ``word`` (exact match), or ``default``."""
        key = hash(word)
        position = int(np.searchsorted(self._sorted_hashes, key))
        encoded = None
        while position < len(self._sorted_hashes) and self._sorted_hashes[position] == key:
            candidate = int(self._order[position])
            if encoded is None:
                encoded = word.encode("utf-8")
            if self._map[self._starts[candidate]:self._ends[candidate]] == encoded:
                return candidate
            position += 1
        return default

    def get_many(self, words) -> np.ndarray:
        """``[get(word, -1) for word in words]`` as an int64 array: the hash search for all at once, the
        bytes compared at once (a word whose hash another vocabulary word shares takes ``get``)."""
        out = np.full(len(words), -1, dtype=np.int64)
        if not len(words) or not len(self._sorted_hashes):
            return out
        hashes = self._sorted_hashes
        keys = np.fromiter(map(hash, words), dtype=np.int64, count=len(words))
        order = np.argsort(keys)  # sorted queries: each binary search starts where the previous one ended
        positions = np.empty(len(keys), dtype=np.int64)
        positions[order] = np.minimum(np.searchsorted(hashes, keys[order]), len(hashes) - 1)
        found = np.flatnonzero(hashes[positions] == keys)
        if not len(found):
            return out
        candidates = self._order[positions[found]].astype(np.int64)
        encoded = "\n".join([words[k] for k in found.tolist()]).encode("utf-8")
        if encoded.count(b"\n") != len(found) - 1:  # a word with a newline (never in the vocabulary file)
            return np.array([self.get(word, -1) for word in words], dtype=np.int64)
        query = np.frombuffer(encoded, dtype=np.uint8)
        lengths = np.diff(np.concatenate(([-1], np.flatnonzero(query == 10), [len(query)]))) - 1  # bytes per word
        stored = self._ends[candidates] - self._starts[candidates]
        same_length = np.flatnonzero(stored == lengths)
        data = np.frombuffer(self._map, dtype=np.uint8)
        try:
            offsets = np.cumsum(lengths + 1) - lengths - 1  # where each word starts in ``query``
            differ = same_length[different_spans(query, offsets[same_length], data, self._starts[candidates[same_length]],
                                                 lengths[same_length])]
        finally:
            del data  # keep no exported buffer on the map
        match = np.zeros(len(found), dtype=bool)
        match[same_length] = True
        match[differ] = False
        out[found[match]] = candidates[match]
        for k in found[~match].tolist():  # a hash shared with another vocabulary word: compare them all
            out[k] = self.get(words[k], -1)
        return out

    def __contains__(self, word: str) -> bool:
        return self.get(word) is not None

    def private_bytes(self) -> int:
        """Bytes of per-process arrays (the mapped file itself is shared page cache)."""
        return sum(a.nbytes for a in (self._starts, self._ends, self._order, self._sorted_hashes))


class SharedVocabularyArtifact(Artifact):
    """An ``Artifact`` whose ``words`` is a ``CompactVocabulary`` (same checks, far less private memory)."""

    def _load_words(self):
        words = CompactVocabulary(self.file_path(self.manifest["vocab"]))
        if len(words) != self.vocab_size:
            raise ArtifactError(f"{shown(self.path)}: vocabulary has {len(words)} words, manifest says {self.vocab_size}")
        return words

    @property
    def word_to_id(self):
        """The compact vocabulary answers ``get(word)`` itself; no dict is built."""
        return self.words
