"""``textdp.Privatizer``: privatize strings from Python, in one call, without files or a pipeline.

    import textdp
    p = textdp.Privatizer(epsilon=10)                  # bundled GloVe artifact, Madlib, exact search
    p.privatize(["a good movie", "the plot was thin"])  # -> list of str, in the same order
    p.privatize(texts, seed=1)                         # reproducible (NOT private), as --seed
    p.privatize_series(df["review"])                   # pandas in, pandas out, index and name kept
    p.privatize_frame(df, columns=["review"])          # a new DataFrame with those columns privatized
    p.preview(texts, epsilons=[5, 10], mechanisms=["madlib", "tem"])  # one row per setting: the trade-off
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

Progress. Long calls show a tqdm bar of texts done: ``progress=None`` (default) in a Jupyter kernel or when
stderr is a terminal, never in a log; ``progress=False`` / ``True`` on the constructor or one call.

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
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import List, Optional, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from textdp.artifact.compact_vocab import SharedVocabularyArtifact
from textdp.artifact.locate import resolve_artifact, verify_artifact
from textdp.artifact.store import artifact_identity
from textdp.errors import TextdpAttributeError, TextdpError, TextdpTypeError, TextdpValueError, TextdpWarning
from textdp.mechanisms import (  # noqa: F401
    ALL_MECHANISMS,
    DEFAULT_MECHANISM,
    MAX_EPSILON,
    built_in,
    check_mechanism,
    check_number,
    make_mechanism,
    mechanism_reference,
    statement_of,
)
from textdp.paths import shown
from textdp.privacy.summary import privacy_section
from textdp.progress import progress_bar
from textdp.spec import PrivacySpec
from textdp.text.privatizer import DEFAULT_UNK_TOKEN, TextPrivatizer, released_ids
from textdp.text.records import EMPTY, NOT_A_TEXT, check_record

ERROR_POLICIES = ("raise", "none")
# Words per mechanism call in the API, for every mechanism (the pipeline uses 4,096 for the
# vocabulary-search ones): the cost per word falls with the batch for TEM (6,000 IMDb reviews at
# epsilon 10, warm, alternating runs: ~290k tokens/s at 4,096 words per call, ~390k at 65,536), and
# 65,536 words keep a call's arrays to ~10-20 MB whatever the list's length.
API_BATCH_TOKENS = 65_536


def _check_progress(progress) -> Optional[bool]:
    """``progress=``: None (automatic), True or False; True needs tqdm (requirements.txt)."""
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise TextdpTypeError(f"progress must be True, False or None (automatic), not {type(progress).__name__}")
    if progress:
        try:
            import tqdm  # noqa: F401
        except ImportError as exc:
            raise TextdpValueError("progress=True needs tqdm: pip install tqdm") from exc
    return None if progress is None else bool(progress)


PREVIEW_SAMPLES = 1_000  # draws per word for preview's N_w / S_w: calibrate's default (the paper's)
PREVIEW_ATTACK_TOKENS = 2_000  # word tokens of the texts the preview's attacker tries to recover


def _token_ids(text_privatizer, texts: List[str]) -> np.ndarray:
    """The vocabulary ids of the texts' words, in order (unknown words left out), by privatize's tokenizer."""
    tokenizer = text_privatizer.tokenizer
    found = [np.asarray(tokenizer.tokenize(t).ids, dtype=np.int64) for t in texts if isinstance(t, str)]
    ids = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    return ids[ids >= 0]


def _word_counts(text_privatizer, texts: List[str]):
    """(distinct vocabulary ids of the texts' words, how often each occurs)."""
    return np.unique(_token_ids(text_privatizer, texts), return_counts=True)


def _calibration_figures(artifact, spec, epsilon, mech, word_ids, samples, rng) -> dict:
    """Median N_w and S_w over ``word_ids`` at one epsilon, by calibrate's own WordCalibrator."""
    from textdp.calibration.statistics import WordCalibrator

    if not len(word_ids):
        return {"median_n_w": None, "median_s_w": None, "calibration_basis": "no vocabulary word in the texts"}
    calibrator = WordCalibrator(artifact, spec.mechanism, {float(epsilon): mech}, samples=samples)
    rows = [calibrator.calibrate(int(w), rng)[0] for w in word_ids]
    exact = all(r["n_w_exact"] is not None for r in rows)
    n_w = [r["n_w_exact"] if exact else r["n_w"] for r in rows]
    s_w = [r["s_w_exact"] if exact else r["s_w"] for r in rows]
    basis = (f"{'exact law' if exact else f'{samples:,} draws'} over {len(rows)} word(s) of the texts; S_w counts "
             f"distinct outputs in {samples:,} draws")
    return {"median_n_w": float(np.median(n_w)), "median_s_w": float(np.median(s_w)), "calibration_basis": basis}


def _attack_figures(artifact, mech, ids, counts, tokens, rng) -> dict:
    """Top-1 recovery of ``tokens`` by the context-free Bayes attacker of textdp.audit (prior: the texts' word
    frequencies): the exact posterior where the mechanism has a closed form, else the Monte Carlo attacker
    (a lower bound of the Bayes-optimal rate, as in ``textdp audit``)."""
    from textdp.audit import attacks

    if not len(tokens):
        return {"attack_top1": None, "attack_basis": "no vocabulary word in the texts"}
    prior = attacks.Prior.from_counts(ids, counts, None, "word frequencies of the given texts")
    outputs = released_ids(mech, tokens, rng, len(artifact.words))
    kernel = attacks.kernel_of(mech)
    if kernel is not None:
        points64 = attacks.metric_points64(np.asarray(artifact.vectors), kernel.metric)
        log_z = attacks.log_normalizers(points64.astype(np.float32), prior.support, [kernel], points64)[:, 0]
        guesses = attacks.KernelPosterior(points64, prior, log_z, kernel).top_guesses(outputs, k=1)
        basis = "exact posterior (closed form)"
    else:
        draws = int(min(50_000, max(5_000, 20 * len(prior))))
        inputs = prior.sample(draws, rng)
        table = attacks.CountTable(inputs, released_ids(mech, inputs, rng, len(artifact.words)), len(artifact.words))
        guesses = attacks.fill_guesses(table.guesses(prior, k=1), outputs, prior.top(1), k=1)
        basis = f"Monte Carlo posterior from {draws:,} draws (a lower bound of the Bayes-optimal rate)"
    top1 = float(np.mean(guesses[:, 0] == tokens))
    return {"attack_top1": top1, "attack_basis": f"{basis}; prior: the texts' word frequencies; "
                                                 f"{len(tokens):,} token(s)"}


def _announce(found) -> None:
    """Each line of the trial (``PrivacySpec.check_artifact``) as a ``textdp.TextdpWarning`` (never user text)."""
    for line in found:
        warnings.warn(f"textdp: {line}", TextdpWarning, stacklevel=3)


class Privatizer:
    """A loaded mechanism over a vocabulary artifact, ready to privatize lists of strings.

    Keyword arguments mirror ``textdp privatize``'s flags: ``epsilon`` (required, in
    [1e-30, 1e6]: ``textdp.mechanisms.check_epsilon``), ``mechanism`` (a registered name, an import path
    ``package.module:Class`` or a ``textdp.mechanisms.base.Mechanism`` subclass: docs/mechanisms.md),
    ``artifact`` (a directory or gs:// URL; None: the bundled GloVe 6B 50d artifact, built once into the cache), ``oov_policy``
    (random, unk, keep), ``unk_token``, ``max_text_bytes``; ``threads``: threads of the exact
    nearest-word search (default: this machine's cores); ``batch_tokens``: about how many words go
    into one mechanism call (default 65,536; a long list is privatized in such batches, so memory
    stays bounded); ``progress``: a progress bar of long calls (None: automatic, in a notebook or a terminal;
    True; False); any other keyword is a parameter of the
    mechanism by its public name (``nn``, ``search_k``, ``gamma``, ``beta``, ``lam``, ``vickrey_t``, ``custext_k``,
    ...: the ``PARAMETERS`` its class declares, the same names as the flags; see ``textdp.mechanisms``).
    The artifact is checked (manifest, sizes, checksums) before anything is loaded.
    """

    CHARS_PER_WORD = 6  # characters per word (with spaces and punctuation) of English text, for batching

    def __init__(self, epsilon: float, mechanism=DEFAULT_MECHANISM, artifact: Optional[str] = None,
                 oov_policy: str = "random", unk_token: str = DEFAULT_UNK_TOKEN, max_text_bytes: Optional[int] = None,
                 threads: Optional[int] = None, batch_tokens: int = API_BATCH_TOKENS, progress: Optional[bool] = None,
                 **mechanism_params):
        # mechanism, its parameters, epsilon, artifact and OOV policy, validated once (textdp/spec.py)
        self.spec = PrivacySpec(mechanism, (epsilon,), mechanism_params, artifact, oov_policy, unk_token)
        # what a pickle holds: the arguments, a local artifact as its absolute real path (a relative one would mean
        # another directory where the copy is unpickled: round 8, R8-11) and the identity of the vectors/vocabulary
        located = artifact if artifact is None or "://" in str(artifact) else os.path.realpath(os.fspath(artifact))
        self._arguments = dict(epsilon=epsilon, mechanism=self.spec.mechanism, artifact=located, oov_policy=oov_policy,
                               unk_token=unk_token, max_text_bytes=max_text_bytes, threads=threads,
                               batch_tokens=batch_tokens, progress=progress, **mechanism_params)
        self.progress = _check_progress(progress)
        for name, value in (("max_text_bytes", max_text_bytes), ("threads", threads), ("batch_tokens", batch_tokens)):
            if value is not None or name == "batch_tokens":  # the first two may be None (no limit, every core)
                check_number(value, name, low=1, integer=True)
        self._artifact_identity = artifact_identity(verify_artifact(self.spec.artifact, needs=self.spec.needs()))
        self.artifact = SharedVocabularyArtifact(resolve_artifact(self.spec.artifact))
        self.mechanism = self.spec.make(self.artifact)
        # a mechanism that is not built in: the launcher's trial release (PrivacySpec.check_artifact, the one the
        # jobs and transforms.Privatize ask); what it found is a Python warning and in privacy_statement() (R10-9)
        self._trial_warnings = () if built_in(self.spec.mechanism_class) else tuple(self.spec.check_artifact(self.artifact))
        _announce(self._trial_warnings)
        self._built_parameters = repr(self.mechanism.parameters())  # what _unchanged() compares with (R9-1)
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
        self._fresh_generator()  # OS entropy, tagged with this process's id (a forked child draws its own: _after_fork)
        self.last_stats: dict = {}
        self._seeded = False  # True once any call of this Privatizer used a seed: privacy_statement() then says so
        _LIVE.add(self)
        self._frozen = True  # the settings above are fixed: __setattr__

    # What it releases with and what privacy_statement() describes are the same objects: no public setting can be
    # re-assigned after construction (round 8, R8-3: `p.oov_policy = "random"` changed the statement only).
    def __setattr__(self, name: str, value) -> None:
        if self.__dict__.get("_frozen") and not name.startswith("_") and name != "last_stats":
            raise TextdpAttributeError(
                f"Privatizer.{name} cannot be set: a Privatizer's settings are fixed when it is built (its privacy "
                f"statement describes what it releases with); build a new textdp.Privatizer(...) instead")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self.__dict__.get("_frozen") and not name.startswith("_"):
            raise TextdpAttributeError(f"Privatizer.{name} cannot be deleted: its settings are fixed when it is built")
        object.__delattr__(self, name)

    @property
    def seeded(self) -> bool:
        """True once any call of this Privatizer used a seed (sticky: privacy_statement() then says so)."""
        return self._seeded

    def _fresh_generator(self) -> None:
        """A new generator from OS entropy, owned by this process, and a new lock (one inherited through fork may be
        held by a parent thread that does not exist in the child)."""
        self._rng = np.random.default_rng()  # OS entropy
        self._rng_pid = os.getpid()
        self._lock = threading.Lock()  # one call at a time: the tokenizer's memo and the generator are not shared
        self._owner: Optional[int] = None  # the thread inside a call (a re-entrant call is refused, never a hang)

    def __getstate__(self) -> dict:
        return dict(self._arguments, _artifact_identity=self._artifact_identity)

    def __setstate__(self, arguments: dict) -> None:
        arguments = dict(arguments)
        identity = arguments.pop("_artifact_identity", None)
        self.__init__(**arguments)  # opens the artifact again; a fresh generator from OS entropy
        if identity is not None and identity != self._artifact_identity:
            where = shown(self.spec.artifact) if self.spec.artifact else "the default location"
            raise TextdpError(f"this pickled Privatizer was built on another artifact than the one now at {where} "
                              "(its vocabulary or vectors differ): "
                              "its output would not be what the original's privacy statement describes")

    # --- privatizing -------------------------------------------------------------------------------
    def privatize(self, texts: Sequence[str], seed: Optional[int] = None, errors: str = "raise",
                  progress: Optional[bool] = None, *, _positions: Optional[List[int]] = None) -> List[Optional[str]]:
        """The privatized texts, in order. ``seed``: reproducible output for tests (not private).

        ``errors``: "raise" (default) or "none" (an unusable element becomes None; see the module
        docstring). ``last_stats`` then holds this call's counts (raw-data figures: keep them to
        yourself). ``progress``: a progress bar of texts done (True / False; None: the constructor's
        setting, whose None shows one in a notebook or when stderr is a terminal).
        """
        self._unchanged()
        progress = self.progress if progress is None else _check_progress(progress)
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
        if seed is not None:
            self._seeded = True  # sticky: output made with a seed may be among what the caller publishes
        texts = list(texts)  # the caller's iterable is consumed before the lock: it may call this Privatizer too
        if self._owner == threading.get_ident():
            raise TextdpError("privatize was called again from inside a call of the same Privatizer on the "
                                   "same thread (it would wait for itself forever); finish one call first")
        if self._rng_pid != os.getpid():  # a copy inherited through fork: never the parent's noise (F12)
            self._fresh_generator()
        with self._lock:
            self._owner = threading.get_ident()
            try:
                return self._privatize(texts, seed, errors, progress, _positions)
            finally:
                self._owner = None

    def _privatize(self, texts: List[str], seed: Optional[int], errors: str, progress: Optional[bool] = False,
                   positions: Optional[List[int]] = None) -> List[Optional[str]]:
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
                where = index if positions is None else positions[index]  # a Series: its row, missing values counted
                raise kind(f"text {where}: {problem[1]} (reason {problem[0]}); pass errors='none' to get None")
        stats = {"tokens": 0, "changed_tokens": 0, "unknown_tokens": 0}
        bar = progress_bar(progress, total=len(usable), unit="text", desc="textdp privatize")
        with bar, threadpool_limits(limits=1, user_api="blas"):  # the search's own threads, not a BLAS pool each
            for chunk in self._chunks(texts, usable):
                chosen = [texts[i] for i in chunk]
                rng = self._rng if seed is None else [np.random.default_rng([seed, i]) for i in chunk]
                released, one = self._text.privatize(chosen, rng)
                for index, text in zip(chunk, released):
                    out[index] = text
                for key, value in one.items():
                    stats[key] += value
                bar.update(len(chunk))  # counts only, never text
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

    def privatize_series(self, series, seed: Optional[int] = None, errors: str = "raise",
                         progress: Optional[bool] = None):
        """A pandas Series of strings -> a Series of privatized strings with the same index and name.

        Missing values (None, NaN) stay missing; other values follow ``errors`` as in ``privatize``.
        """
        import pandas as pd

        if not isinstance(series, pd.Series):
            raise TextdpTypeError("privatize_series takes a pandas Series; use privatize for a list")
        values = series.tolist()
        missing = series.isna().tolist()
        present = [i for i in range(len(values)) if not missing[i]]
        released = self.privatize([values[i] for i in present], seed=seed, errors=errors, progress=progress,
                                  _positions=present)
        out = [None] * len(values)
        for index, text in zip(present, released):
            out[index] = text
        return pd.Series(out, index=series.index, name=series.name, dtype=object)

    def privatize_frame(self, frame, columns, seed: Optional[int] = None, errors: str = "raise",
                        progress: Optional[bool] = None):
        """A pandas DataFrame -> a new DataFrame with ``columns`` privatized, every other column, the index and
        the column order unchanged; missing values stay missing; other values follow ``errors`` as in
        ``privatize`` (an error names the column and the row's position, counted from 0).
        ``last_stats`` then holds the counts summed over the columns. ``seed`` (tests only) seeds every column
        the same way: the same text at the same position of two columns gets the same output."""
        import pandas as pd

        if not isinstance(frame, pd.DataFrame):
            raise TextdpTypeError(f"privatize_frame takes a pandas DataFrame, not {type(frame).__name__}; use "
                                  "privatize_series for a Series and privatize for a list")
        if isinstance(columns, str) or not isinstance(columns, Iterable):
            columns = [columns]  # one column label
        columns = list(columns)
        if not columns:
            raise TextdpValueError("privatize_frame needs at least one column to privatize (columns=[...])")
        if len(set(map(repr, columns))) != len(columns):
            raise TextdpValueError("privatize_frame: a column is named twice in columns=[...]")
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise TextdpValueError(f"privatize_frame: no column {', '.join(map(repr, missing))} in the DataFrame")
        doubled = [c for c in columns if isinstance(frame[c], pd.DataFrame)]
        if doubled:
            raise TextdpValueError(f"privatize_frame: the DataFrame has several columns named "
                                   f"{', '.join(map(repr, doubled))}; rename them first")
        out, totals = frame.copy(), {}
        for column in columns:
            try:
                out[column] = self.privatize_series(frame[column], seed=seed, errors=errors, progress=progress)
            except TextdpError as exc:
                raise type(exc)(f"column {column!r}: {exc}") from None
            for key, value in self.last_stats.items():
                totals[key] = totals.get(key, 0) + value
        self.last_stats = totals
        return out

    # --- the trade-off on your own text -------------------------------------------------------------
    def preview(self, texts, epsilons: Optional[Sequence[float]] = None, mechanisms: Optional[Sequence] = None,
                examples: int = 3, words: int = 30, samples: int = PREVIEW_SAMPLES,
                attack_tokens: int = PREVIEW_ATTACK_TOKENS, seed: Optional[int] = None):
        """A small pandas DataFrame, one row per (mechanism, epsilon): what each setting does to ``texts``.

        Columns: ``mechanism``, ``epsilon``; ``sample_1`` .. ``sample_<examples>``: the first texts privatized;
        ``changed_share``: the share of the texts' words released as another word; ``median_n_w`` and
        ``median_s_w``: the medians over up to ``words`` distinct vocabulary words of the texts (a uniform
        sample when there are more) of calibrate's N_w (Pr[M(w) = w]) and S_w (distinct outputs in ``samples``
        draws), from the mechanism's exact law where it declares one and estimated from the draws otherwise
        (``calibration_basis`` says which; textdp.calibration.statistics.WordCalibrator); ``attack_top1``: the
        share of up to ``attack_tokens`` of the texts' word tokens that the context-free Bayes attacker of
        ``textdp audit`` recovers from their release (its prior: the word frequencies of these texts),
        exactly where the mechanism has a closed form and by Monte Carlo otherwise (``attack_basis``).

        ``mechanisms``: references as for the constructor (default: this Privatizer's; its own parameters go
        with it, any other runs with its defaults); ``epsilons``: default this Privatizer's. ``seed``: a
        reproducible table (tests only; every row's samples use it as ``privatize(texts, seed=seed)`` would). Nothing
        here is a privacy statement: see ``privacy_statement()``. It runs beside other calls of this Privatizer:
        every setting gets its own mechanism object and generator.
        """
        import pandas as pd

        if hasattr(texts, "dropna") and hasattr(texts, "tolist") and not hasattr(texts, "columns"):
            texts = texts.dropna().tolist()  # a pandas Series: missing values are not texts
        from textdp.calibration.statistics import MAX_SAMPLES

        for name, value in (("examples", examples), ("words", words), ("samples", samples),
                            ("attack_tokens", attack_tokens)):
            check_number(value, name, low=1 if name != "examples" else 0, integer=True,
                         high=MAX_SAMPLES if name == "samples" else None)  # as calibrate --samples (R8-12)
        mechanisms = [self.spec.mechanism] if mechanisms is None else mechanisms
        epsilons = [self.spec.epsilon] if epsilons is None else epsilons
        if isinstance(mechanisms, str) or not isinstance(mechanisms, Iterable):
            mechanisms = [mechanisms]
        if isinstance(epsilons, (str, bytes)) or not isinstance(epsilons, Iterable):
            epsilons = [epsilons]
        specs = []
        for reference in list(mechanisms):
            own = mechanism_reference(reference) == self.spec.mechanism
            spec = PrivacySpec(reference, tuple(epsilons), self.spec.keywords() if own else {}, self.spec.artifact,
                        self.oov_policy, self.unk_token)
            if not own:
                verify_artifact(spec.artifact, needs=spec.needs())
            _announce(spec.check_artifact(self.artifact))  # the trial at the preview's epsilons: warned, not refused
            specs.append(spec)
        if not specs:
            raise TextdpValueError("preview needs at least one mechanism")
        if isinstance(texts, Iterable) and not isinstance(texts, (str, bytes, Mapping)) and not hasattr(texts, "columns"):
            texts = list(texts)  # read once (a generator), refused below like privatize refuses it otherwise
        rows, rng = [], None
        for spec in specs:
            for epsilon in spec.epsilons:
                mech = spec.make(self.artifact, epsilon)  # a mechanism object of its own: none is shared
                clone = self._with_mechanism(mech, spec)
                released = clone.privatize(texts, seed=seed, progress=False)  # the first refuses what privatize does
                stats = clone.last_stats
                if rng is None:  # the texts and the seed are usable: the words and tokens the figures are over
                    rng = np.random.default_rng(None if seed is None else [seed, 1])
                    ids, counts = _word_counts(clone._text, texts)
                    chosen = ids if len(ids) <= words else np.sort(rng.choice(ids, size=words, replace=False))
                    tokens = _token_ids(clone._text, texts)[:attack_tokens]
                row = {"mechanism": spec.name, "epsilon": float(epsilon)}
                row.update({f"sample_{i + 1}": released[i] for i in range(min(examples, len(texts)))})
                row["changed_share"] = stats["changed_tokens"] / stats["tokens"] if stats["tokens"] else None
                row.update(_calibration_figures(self.artifact, spec, epsilon, mech, chosen, samples, rng))
                row.update(_attack_figures(self.artifact, mech, ids, counts, tokens, rng))
                rows.append(row)
        return pd.DataFrame(rows)

    def _with_mechanism(self, mechanism, spec) -> "Privatizer":
        """This Privatizer (same artifact, OOV policy, limits) over another mechanism object: for preview."""
        clone = object.__new__(Privatizer)
        clone.__dict__.update(self.__dict__)
        clone.__dict__.update(spec=spec, mechanism=mechanism,  # settings, fixed (__setattr__) once set
                              _built_parameters=repr(mechanism.parameters()))
        nearest = getattr(mechanism, "nearest", None)
        if hasattr(nearest, "threads"):
            nearest.threads = self.threads
        clone._text = TextPrivatizer(mechanism, self.artifact.words, self.artifact.word_to_id, self.oov_policy,
                                     self.unk_token)
        clone._fresh_generator()
        clone.last_stats = {}
        return clone

    # --- describing ---------------------------------------------------------------------------------
    def _unchanged(self) -> None:
        """The mechanism object is the one built: its parameters are what they were (``p.mechanism.epsilon = inf``
        would make privatize() the identity under a statement that says epsilon; round 9, R9-1). TextdpError."""
        try:
            now = repr(self.mechanism.parameters())
        except Exception:
            now = None
        if now != self._built_parameters:
            raise TextdpError("this Privatizer's mechanism object was changed after it was built (its parameters differ "
                              "from those it was built with): its output and its privacy statement would no longer be "
                              "what it was checked for; build a new textdp.Privatizer(...) instead")

    def parameters(self) -> dict:
        self._unchanged()
        return dict(self.mechanism.parameters(), oov_policy=self.oov_policy)

    def privacy_statement(self, seed_used: Optional[bool] = None) -> dict:
        """The privacy statement of the public summary for output made by this Privatizer.

        It states a seed (output covered by nothing) when any call of this Privatizer was given one (``seeded``;
        the object cannot tell which of its outputs is published) or when ``seed_used`` is True; ``seed_used=False``
        cannot hide a seeded call. For a private release after seeded tests, build a new Privatizer."""
        if seed_used is not None and not isinstance(seed_used, bool):
            raise TextdpTypeError("seed_used must be True, False or None")
        self._unchanged()
        statement = privacy_section(statement_of(self.mechanism), self.oov_policy, self.unk_token, None,
                                    bool(seed_used) or self.seeded)
        if self._trial_warnings:  # as the jobs' summaries: the guarantee as declared, and what the trial showed
            statement["warnings"] = list(self._trial_warnings)
        return statement

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.parameters().items())
        return f"Privatizer({params})"


# Every Privatizer of this process: a child made by fork (multiprocessing's default start method on Linux,
# ProcessPoolExecutor, os.fork) re-creates each one's generator from fresh OS entropy before it runs any code, so two
# children never release the same noise (round 6, F12). privatize() also compares the process id with the one that
# drew the generator (a fork that skipped Python's at-fork hooks, a pid reused by a grandchild).
_LIVE: "weakref.WeakSet[Privatizer]" = weakref.WeakSet()


def _after_fork() -> None:
    for privatizer in list(_LIVE):
        privatizer._fresh_generator()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

