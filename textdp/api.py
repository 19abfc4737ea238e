"""``textdp.Privatizer``: privatize strings from Python, in one call, without files or a pipeline.

    import textdp
    p = textdp.Privatizer(epsilon=10)                  # bundled GloVe artifact, Madlib, exact search
    p.privatize(["a good movie", "the plot was thin"])  # -> list of str, in the same order
    p.privatize(texts, seed=1)                         # reproducible (NOT private), as --seed
    p.privatize_series(df["review"])                   # pandas in, pandas out, index and name kept
    p.privacy_statement()                              # the statement the public summary prints

It is the same code path as ``textdp privatize`` and the ``Privatize`` transform: the record checks
of ``textdp.text.records``, the tokenizer, OOV policies and mechanisms of ``textdp.text.privatizer``,
and the statements of ``textdp.privacy.summary``. Randomness comes from OS entropy (one generator per
``Privatizer``, created when it is built) unless a seed is given.

Bad input. ``privatize`` takes a list (or any sequence) of strings; a single string is refused
(iterating it would privatize its characters). An element that is not a usable string (None,
bytes, a number, one larger than ``max_text_bytes``) raises ``TextdpError`` naming its position and
why, never its content; with ``errors="none"`` such an element becomes None in the output instead.
An empty or blank string has no word to protect and is returned as it is. ``privatize_series``
leaves missing values (None, NaN, pandas.NA) missing and applies the same rules to the rest. A
mapping (a dict: iterating it would privatize its keys), a DataFrame (its column names), and
anything that is not iterable are refused with ``TextdpError`` naming the kind. Every error the API
raises on purpose is a ``TextdpError``, and also the built-in type Python code expects (textdp/errors.py):
a ``TypeError`` for a value of the wrong kind (a dict, a DataFrame, an element that is not a string),
a ``ValueError`` for a bad value (bad mechanism parameters are ``ParameterError``; an element larger
than ``max_text_bytes``), a ``FileNotFoundError`` for an artifact that is not there.

Failed share. The API has no ``max_failed_fraction`` (the command's ``--max-failed-fraction``): with
``errors="raise"`` (the default) the first unusable element raises, a threshold of zero; ``errors="none"``
is the caller's explicit choice to get None for each unusable element, and ``last_stats["failed"]``
says how many there were.

Threads and processes. A ``Privatizer`` is thread-safe: calls from several threads run one at a
time (a lock; the exact search already uses every core inside one call). It can be pickled, so
``beam.Map(privatizer.privatize)`` and ``multiprocessing`` work: the pickle holds the constructor's
arguments only (never texts, never the generator's state), and unpickling opens the artifact again
and draws a fresh generator from OS entropy, so copies never share noise.
"""

from __future__ import annotations

import numbers
import os
import threading
from collections.abc import Iterable, Mapping
from typing import List, Optional, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from textdp.artifact.compact_vocab import SharedVocabularyArtifact
from textdp.errors import TextdpError, TextdpTypeError, TextdpValueError
from textdp.artifact.locate import resolve_artifact, verify_artifact
from textdp.mechanisms import ALL_MECHANISMS, MAX_EPSILON, check_mechanism, check_number, make_mechanism  # noqa: F401
from textdp.mechanisms import DEFAULT_MECHANISM, statement_of
from textdp.text.records import EMPTY, NOT_A_TEXT, check_record
from textdp.spec import PrivacySpec
from textdp.privacy.summary import privacy_section
from textdp.text.privatizer import TextPrivatizer

ERROR_POLICIES = ("raise", "none")
# Words per mechanism call in the API, for every mechanism (the pipeline uses 4,096 for the
# vocabulary-search ones): the cost per word falls with the batch for TEM (6,000 IMDb reviews at
# epsilon 10, warm, alternating runs: ~290k tokens/s at 4,096 words per call, ~390k at 65,536), and
# 65,536 words keep a call's arrays to ~10-20 MB whatever the list's length.
API_BATCH_TOKENS = 65_536


class Privatizer:  # pylint: disable=too-many-instance-attributes
    """A loaded mechanism over a vocabulary artifact, ready to privatize lists of strings.

    Keyword arguments mirror ``textdp privatize``'s flags: ``epsilon`` (required, in
    [1e-30, 1e6]: ``textdp.mechanisms.check_epsilon``), ``mechanism`` (a registered name, an import path
    ``package.module:Class`` or a ``textdp.mechanisms.base.Mechanism`` subclass: docs/mechanisms.md),
    ``artifact`` (a directory or gs:// URL; None: the bundled GloVe 6B 50d artifact, built once into the cache), ``oov_policy``
    (random, unk, keep), ``unk_token``, ``max_text_bytes``; ``threads``: threads of the exact
    nearest-word search (default: this machine's cores); ``batch_tokens``: about how many words go
    into one mechanism call (default 65,536; a long list is privatized in such batches, so memory
    stays bounded); any other keyword is a parameter of the
    mechanism by its public name (``nn``, ``search_k``, ``gamma``, ``beta``, ``lam``, ``vickrey_t``, ``custext_k``,
    ...: the ``PARAMETERS`` its class declares, the same names as the flags; see ``textdp.mechanisms``).
    The artifact is checked (manifest, sizes, checksums) before anything is loaded.
    """

    CHARS_PER_WORD = 6  # characters per word (with spaces and punctuation) of English text, for batching

    def __init__(self, epsilon: float, mechanism=DEFAULT_MECHANISM, artifact: Optional[str] = None,
                 oov_policy: str = "random", unk_token: str = "<unk>", max_text_bytes: Optional[int] = None,
                 threads: Optional[int] = None, batch_tokens: int = API_BATCH_TOKENS, **mechanism_params):
        # mechanism, its parameters, epsilon, artifact and OOV policy, validated once (textdp/spec.py)
        self.spec = PrivacySpec(mechanism, (epsilon,), mechanism_params, artifact, oov_policy, unk_token)
        self._arguments = dict(epsilon=epsilon, mechanism=self.spec.mechanism, artifact=artifact, oov_policy=oov_policy,
                               unk_token=unk_token, max_text_bytes=max_text_bytes, threads=threads,
                               batch_tokens=batch_tokens, **mechanism_params)  # what a pickle holds
        for name, value in (("max_text_bytes", max_text_bytes), ("threads", threads), ("batch_tokens", batch_tokens)):
            if value is not None or name == "batch_tokens":  # the first two may be None (no limit, every core)
                check_number(value, name, low=1, integer=True)
        verify_artifact(self.spec.artifact, needs=self.spec.needs())
        self.artifact = SharedVocabularyArtifact(resolve_artifact(self.spec.artifact))
        self.mechanism = self.spec.make(self.artifact)
        self.oov_policy = oov_policy
        self.unk_token = unk_token
        self.max_text_bytes = None if max_text_bytes is None else int(max_text_bytes)
        self.threads = int(threads) if threads else (os.cpu_count() or 1)
        self.batch_tokens = int(batch_tokens)
        nearest = getattr(self.mechanism, "nearest", None)
        if hasattr(nearest, "threads"):  # the exact search ranks vocabulary ranges in parallel threads
            nearest.threads = self.threads
        self._text = TextPrivatizer(self.mechanism, self.artifact.words, self.artifact.word_to_id, oov_policy,
                                    unk_token)
        self._rng = np.random.default_rng()  # OS entropy
        self._lock = threading.Lock()  # one call at a time: the tokenizer's memo and the generator are not shared
        self._owner: Optional[int] = None  # the thread inside a call (a re-entrant call is refused, never a hang)
        self.last_stats: dict = {}

    def __getstate__(self) -> dict:
        return dict(self._arguments)

    def __setstate__(self, arguments: dict) -> None:
        self.__init__(**arguments)  # opens the artifact again; a fresh generator from OS entropy

    # --- privatizing -------------------------------------------------------------------------------
    def privatize(self, texts: Sequence[str], seed: Optional[int] = None, errors: str = "raise") -> List[Optional[str]]:
        """The privatized texts, in order. ``seed``: reproducible output for tests (not private).

        ``errors``: "raise" (default) or "none" (an unusable element becomes None; see the module
        docstring). ``last_stats`` then holds this call's counts (raw-data figures: keep them to
        yourself).
        """
        if isinstance(texts, (str, bytes)):
            raise TextdpTypeError("privatize takes a list of strings; for one text use privatize([text])[0]")
        if isinstance(texts, (bytearray, memoryview)) or getattr(texts, "ndim", None) == 0:
            kind = "a 0-d numpy array" if getattr(texts, "ndim", None) == 0 else f"a {type(texts).__name__}"
            raise TextdpTypeError(f"privatize takes a list of strings, not {kind}; for one text use "
                                  "privatize([text])[0]")
        if isinstance(texts, Mapping) or hasattr(texts, "columns"):
            raise TextdpTypeError(f"privatize takes a list of strings, not a {type(texts).__name__} (iterating it "
                                  "would privatize its keys or column names): pass list(d.values()) or use "
                                  "privatize_series")
        if not isinstance(texts, Iterable):
            raise TextdpTypeError(f"privatize takes a list of strings, not {type(texts).__name__}")
        if errors not in ERROR_POLICIES:
            raise TextdpValueError(f"errors must be one of {', '.join(ERROR_POLICIES)}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
            raise TextdpValueError("seed must be an integer >= 0")
        seed = None if seed is None else int(seed)
        texts = list(texts)  # the caller's iterable is consumed before the lock: it may call this Privatizer too
        if self._owner == threading.get_ident():
            raise TextdpError("privatize was called again from inside a call of the same Privatizer on the "
                                   "same thread (it would wait for itself forever); finish one call first")
        with self._lock:
            self._owner = threading.get_ident()
            try:
                return self._privatize(texts, seed, errors)
            finally:
                self._owner = None

    def _privatize(self, texts: List[str], seed: Optional[int], errors: str) -> List[Optional[str]]:
        usable, out = [], [None] * len(texts)
        failed = 0
        for index, text in enumerate(texts):
            problem = check_record(text, (), self.max_text_bytes)
            if problem is None:
                usable.append(index)
                continue
            if problem[0] == EMPTY:  # no word to protect: released as it is, like any structure
                out[index] = text
                continue
            failed += 1
            if errors == "raise":
                kind = TextdpTypeError if problem[0] == NOT_A_TEXT else TextdpValueError  # not a string / too large
                raise kind(f"text {index}: {problem[1]} (reason {problem[0]}); pass errors='none' to get None")
        stats = {"tokens": 0, "changed_tokens": 0, "unknown_tokens": 0}
        with threadpool_limits(limits=1, user_api="blas"):  # the search's own threads, not a BLAS pool each
            for chunk in self._chunks(texts, usable):
                chosen = [texts[i] for i in chunk]
                rng = self._rng if seed is None else [np.random.default_rng([seed, i]) for i in chunk]
                released, one = self._text.privatize(chosen, rng)
                for index, text in zip(chunk, released):
                    out[index] = text
                for key, value in one.items():
                    stats[key] += value
        self.last_stats = dict(stats, records=len(usable), failed=failed)
        return out

    def _chunks(self, texts: List[str], usable: List[int]):
        """``usable`` in consecutive groups of about ``batch_tokens`` words (estimated from the length:
        ~6 characters per word), so that memory stays bounded whatever the list's size and each mechanism
        call gets a batch of the size the pipeline uses."""
        budget = self.batch_tokens * self.CHARS_PER_WORD
        chunk, size = [], 0
        for index in usable:
            chunk.append(index)
            size += len(texts[index])
            if size >= budget:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def privatize_series(self, series, seed: Optional[int] = None, errors: str = "raise"):
        """A pandas Series of strings -> a Series of privatized strings with the same index and name.

        Missing values (None, NaN) stay missing; other values follow ``errors`` as in ``privatize``.
        """
        import pandas as pd  # pylint: disable=import-outside-toplevel

        if not isinstance(series, pd.Series):
            raise TextdpTypeError("privatize_series takes a pandas Series; use privatize for a list")
        values = series.tolist()
        missing = series.isna().tolist()
        present = [i for i in range(len(values)) if not missing[i]]
        released = self.privatize([values[i] for i in present], seed=seed, errors=errors)
        out = [None] * len(values)
        for index, text in zip(present, released):
            out[index] = text
        return pd.Series(out, index=series.index, name=series.name, dtype=object)

    # --- describing ---------------------------------------------------------------------------------
    def parameters(self) -> dict:
        return dict(self.mechanism.parameters(), oov_policy=self.oov_policy)

    def privacy_statement(self, seed_used: bool = False) -> dict:
        """The privacy statement of the public summary for output made by this Privatizer."""
        return privacy_section(statement_of(self.mechanism), self.oov_policy, self.unk_token, None, seed_used)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.parameters().items())
        return f"Privatizer({params})"

