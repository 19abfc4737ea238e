"""SanText and SanText+ of Yue, Du, Wang, Li, Sun and Chow (Findings of ACL 2021).

SanText. Every word x is replaced by a word y drawn from the whole vocabulary V with

    P(y | x) = exp(-epsilon d_euc(x, y) / 2) / sum_{y' in V} exp(-epsilon d_euc(x, y') / 2)

(the paper's SanText, the exponential mechanism with utility -d_euc between embeddings). It is
TEM's closed form with gamma = infinity, sampled exactly from the K-nearest table by
textdp.mechanisms.table_sampler (cap = infinity): no per-token pass over the vocabulary.
Guarantee: epsilon * d_euc metric local DP: for any words x, x' and output set O,
P[M(x) in O] <= exp(epsilon d(x, x')) P[M(x') in O] (the exponent changes by at most
epsilon d(x, x') / 2 by the triangle inequality, and the normaliser by at most as much again).

SanText+ (``plus=True``). The vocabulary is split into sensitive words V_S and the rest V_N. The
paper takes V_S as the rarest fraction w of the words (by their frequency in the task corpus);
here it is the rarest fraction ``sensitive_fraction`` of the artifact's vocabulary by its
frequency rank (artifacts keep words in frequency order: V_S = the last floor(w |V|) ids), or an
explicit ``sensitive_ids`` set. Then
  * a sensitive x is always replaced: y ~ P_S(y | x) = exp(-epsilon d(x, y)/2) / sum_{y' in V_S} ...,
    an exponential mechanism whose outputs are the sensitive words only;
  * a non-sensitive x is replaced the same way with probability p, and released unchanged with
    probability 1 - p.
This is the official implementation's output set (read in a public copy of the authors' code: its
probability matrix has every word as a row and the sensitive words as columns; the paper's full text
was not reachable from this build's reference index). Guarantee (what we derive and state; the paper calls the
notion utility-optimized metric LDP): for any x, x' and any set O of sensitive words,
P[M(x) in O] <= exp(epsilon d(x, x')) P[M(x') in O] * (1/p if x is sensitive and x' is not, else 1);
an unchanged non-sensitive word is an output no other input produces, so it reveals the input:
a non-sensitive word is protected only with probability p. With p = 1 every word is sanitized into
V_S and the plain metric bound holds for all words.

Where readings differ. pyPANTERA 1.0.2 implements SanText (not SanText+) by computing all
|V| distances for every text, caching the probability rows by the whole text, and drawing with
``np.random.choice`` over |V| (exact, slow); it gives a word missing from the vocabulary a random
Gaussian vector. MLDP 0.1.2 does not ship SanText. The official SanText+ computes word frequencies
on the task corpus and takes ``int(w |V|) + 1`` rarest words (an off-by-one); we use the
artifact's rank order and floor(w |V|) words, which the statement names exactly.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from textdp.mechanisms.base import Mechanism, Parameter
from textdp.mechanisms.madlib import check_diameter
from textdp.mechanisms.table_sampler import TableSampler

SANTEXT_P = Parameter("santext_p", float, 0.3, low=0.0, high=1.0, low_open=True, label="santext p", argument="p",
                      aliases=("p",), example=0.4,
                      help="probability that a non-sensitive word is replaced (else kept), at least 1e-6 (below, every non-sensitive "
                           "word is released unchanged but with probability under 1e-6); default 0.3")
SENSITIVE_FRACTION = Parameter(
    "sensitive_fraction", float, 0.9, low=0.0, high=1.0, low_open=True, example=0.5,
    help="the share of the vocabulary treated as sensitive, the least frequent words; default 0.9")
SENSITIVE_IDS = Parameter(
    "sensitive_ids", list, None, cli=False, example=(1, 2, 3),
    help="the vocabulary ids treated as sensitive (Python only; default: the rarest --sensitive-fraction)")


def rarest_ids(vocab_size: int, fraction: float) -> np.ndarray:
    """The rarest ``fraction`` of a frequency-ordered vocabulary: the last floor(fraction * |V|) ids."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError("sensitive_fraction must be in (0, 1]")
    count = int(math.floor(fraction * vocab_size))
    if count < 1:
        raise ValueError("sensitive_fraction selects no word of this vocabulary")
    return np.arange(vocab_size - count, vocab_size, dtype=np.int64)


class SanText(Mechanism):
    """SanText (``plus=False``) or SanText+ (``plus=True``; registered as ``SanTextPlus``) over an artifact
    with a Euclidean neighbour table. Every epsilon of the range works: the sampler's weights are relative
    to the nearest allowed word (textdp.mechanisms.table_sampler)."""

    name = "santext"
    DESCRIPTION = "exponential mechanism over the whole vocabulary"
    NEEDS_NEIGHBOUR_TABLE = True
    TABLE_METRIC = "euclidean"  # refused on an angular table before the run (textdp.mechanisms.check_table_metric)
    EXACT_LAW = True
    AUDIT_KERNEL = True
    BOUND_TEXT = "epsilon * d(w, w'), Euclidean"
    EPSILON_D_BOUND = True  # exp(epsilon * d(x, x')) (SanText+ and plus=True: no, the 1/p factor)

    def __init__(self, artifact, epsilon: float, plus: bool = False, sensitive_fraction: float = 0.9,
                 p: float = 0.3, sensitive_ids: Optional[Sequence[int]] = None, batch: int = 8192):
        from textdp.artifact.neighbours import NeighbourTable

        checks = SanTextPlus if plus else SanText
        checks.check_parameters(epsilon, artifact, **({"sensitive_fraction": sensitive_fraction, "p": p,
                                                       "sensitive_ids": sensitive_ids} if plus else {}))
        self.artifact = artifact
        self.epsilon = float(epsilon)
        self.plus = bool(plus)
        self.name = "santext+" if self.plus else "santext"
        self.EPSILON_D_BOUND = not self.plus  # SanText: exp(epsilon * d); SanText+: times 1/p
        self.vocab_size = int(artifact.vocab_size)
        self.batch = int(batch)
        self.table = NeighbourTable.from_artifact(artifact)
        if self.table.metric != "euclidean":
            raise ValueError("SanText is defined on Euclidean distance: the artifact's neighbour table is "
                             f"{self.table.metric!r}; build one with --metric euclidean")
        allowed = None
        self.sensitive_fraction = None
        self.p = None
        if self.plus:
            self.p = float(p)
            if sensitive_ids is not None:
                allowed = np.unique(np.asarray(sensitive_ids, dtype=np.int64))
                if len(allowed) == 0 or allowed.min() < 0 or allowed.max() >= self.vocab_size:
                    raise ValueError("sensitive_ids must be non-empty vocabulary ids")
                self.sensitive_source = "given ids"
            else:
                allowed = rarest_ids(self.vocab_size, sensitive_fraction)
                self.sensitive_fraction = float(sensitive_fraction)
                self.sensitive_source = "rarest fraction by the artifact's frequency rank"
            self.sensitive = np.zeros(self.vocab_size, dtype=bool)
            self.sensitive[allowed] = True
        elif sensitive_ids is not None:
            raise ValueError("sensitive_ids applies to SanText+ only (plus=True)")
        self.sampler = TableSampler(artifact.vectors, self.table.ids, self.table.distances, self.epsilon,
                                    allowed=allowed)  # no cap: SanText's weights are exp(-epsilon d / 2) at any distance

    def privatize_ids(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Release one vocabulary id per input id (independent draws), vectorised per batch."""
        ids = self.input_ids(ids)
        out = np.empty(len(ids), dtype=np.int64)
        for start in range(0, len(ids), self.batch):
            chunk = ids[start:start + self.batch]
            if not self.plus:
                out[start:start + len(chunk)] = self.sampler.sample(chunk, rng)
                continue
            keep = ~self.sensitive[chunk] & (rng.random(len(chunk)) >= self.p)
            released = chunk.copy()
            replace = np.flatnonzero(~keep)
            released[replace] = self.sampler.sample(chunk[replace], rng)
            out[start:start + len(chunk)] = released
        return out

    def sensitive_count(self) -> int:
        return int(self.sensitive.sum()) if self.plus else 0

    # the guarantee's metric --------------------------------------------------------------------------
    def metric_points(self, vectors: np.ndarray) -> np.ndarray:
        """Euclidean: the vectors themselves (row-wise, float64)."""
        return np.asarray(vectors, dtype=np.float64)

    def token_epsilon0(self, diameter_upper: float) -> float:
        """SanText: epsilon * diam (Euclidean). SanText+: inf when p < 1 (an unchanged non-sensitive word
        identifies its input, so no finite pure-LDP bound holds over the vocabulary); epsilon * diam when p = 1."""
        diameter = check_diameter(diameter_upper)
        if self.plus and self.p < 1.0:
            return math.inf
        return self.epsilon * diameter

    # the exact law ------------------------------------------------------------------------------------
    def exact_distribution(self, row: np.ndarray, word_id: int) -> np.ndarray:
        """P(y) ~ exp(-epsilon d(w, y) / 2) over the vocabulary (SanText+: over the sensitive words, mixed with
        "unchanged" with probability 1 - p for a non-sensitive input)."""
        log_w = -0.5 * self.epsilon * np.asarray(row, dtype=np.float64)
        if self.plus:
            log_w = np.where(self.sensitive, log_w, -np.inf)
        log_w = log_w - log_w.max()
        probs = np.exp(log_w)
        probs /= probs.sum()
        if self.plus and not self.sensitive[word_id]:
            probs *= self.p
            probs[word_id] += 1.0 - self.p
        return probs

    def audit_kernel(self):
        """exp(-epsilon d / 2) over the whole vocabulary (Yue et al.); SanText+ has no such kernel."""
        return None if self.plus else (0.5 * self.epsilon, math.inf, "euclidean")

    # reporting ----------------------------------------------------------------------------------------
    def parameters(self) -> dict:
        params = {"mechanism": self.name, "epsilon": self.epsilon, "metric": "euclidean",
                  "neighbour_k": self.table.k}
        if self.plus:
            params.update(santext_p=self.p, sensitive_words=self.sensitive_count(), sensitive_source=self.sensitive_source)
            if self.sensitive_fraction is not None:
                params["sensitive_fraction"] = self.sensitive_fraction
        return params

    def privacy_statement(self) -> dict:
        e = self.epsilon
        if not self.plus:
            return {
                "notion": "metric local differential privacy on word embeddings, Euclidean distance (SanText)",
                "per_token": f"for any words x, x' and any output set O: P[M(x) in O] <= exp({e:g} * d(x, x')) * P[M(x') in O]",
                "per_record": f"a record with words x_1..x_l versus x_1'..x_l': exp({e:g} * sum_i d(x_i, x_i'))",
                "covered": "every vocabulary word",
                "sampling": ("exact sampling of P(y|x) ~ exp(-epsilon d(x, y) / 2) over the whole vocabulary from the "
                             "K-nearest table (rejection sampling)"),
                "coverage": {"covered": "all"},
            }
        count, n, p = self.sensitive_count(), self.vocab_size, self.p
        if self.sensitive_fraction is not None:
            which = (f"the {count:,} rarest words of the vocabulary by the artifact's frequency rank "
                     f"(ids {n - count:,} to {n - 1:,}, fraction {self.sensitive_fraction:g})")
        else:
            which = f"the {count:,} given vocabulary ids"
        return {
            "notion": ("SanText+ (utility-optimized metric local DP, Euclidean distance): sensitive words are always "
                       f"sanitized, other words with probability {p:g}"),
            "covered": (f"sensitive words: {which}. A sanitized word is drawn from the sensitive words only, with "
                        f"P(y|x) ~ exp(-{e:g} d(x, y) / 2)"),
            "per_token": (f"for any words x, x' and any set O of sensitive output words: P[M(x) in O] <= "
                          f"exp({e:g} * d(x, x')) * P[M(x') in O], times 1/{p:g} when x is sensitive and x' is not"),
            "not_covered": (f"a non-sensitive word is released unchanged with probability {1 - p:g}; no other input "
                            "produces that output, so it reveals the word: non-sensitive words are protected only "
                            f"with probability {p:g}" if p < 1 else "none: with p = 1 every word is sanitized"),
            "per_record": (f"a record's sanitized words compose: exp({e:g} * sum_i d(x_i, x_i')) with the 1/{p:g} factor "
                           "for each position where a sensitive word is compared with a non-sensitive one"),
            "sampling": ("exact sampling of the exponential mechanism restricted to the sensitive words from the "
                         "K-nearest table (rejection sampling)"),
            "coverage": ({"covered": "subset", "subset": f"the sensitive words ({which}), always sanitized",
                          "reason": (f"santext+: a non-sensitive word is released unchanged with probability {1 - p:g}, "
                                     "which reveals it")}
                         if p < 1 else {"covered": "all"}),
        }


class SanTextPlus(SanText):
    """SanText+ (Yue et al.): SanText with ``plus=True``, the variant's own name and parameters."""

    name = "santext+"
    DESCRIPTION = "SanText only for the sensitive (rarest) words; others kept with probability 1 - p"
    PARAMETERS = (SANTEXT_P, SENSITIVE_FRACTION, SENSITIVE_IDS)
    AUDIT_KERNEL = False
    BOUND_TEXT = "none claimed when p < 1 (a kept non-sensitive word reveals itself)"
    FIXED = {"plus": True}
    EPSILON_D_BOUND = False  # the 1/p factor between a sensitive and a non-sensitive word

    @classmethod
    def check_special(cls, epsilon, artifact=None, sensitive_fraction: float = 0.9, sensitive_ids=None,
                      p: float = 0.3, **_others) -> None:
        """A sensitive fraction must select at least one word of the vocabulary (when it is known); p below
        IDENTITY_CHANGE is refused like p = 0: a non-sensitive word would be released unchanged with
        probability above 1 - 1e-6 (the identity for every word but the sensitive ones)."""
        from textdp.errors import ParameterError

        if p is not None and 0 < float(p) < cls.IDENTITY_CHANGE:
            raise ParameterError(
                f"santext p {float(p):.4g} is below {cls.IDENTITY_CHANGE:g}: a non-sensitive word would be released as "
                f"another with probability below {cls.IDENTITY_CHANGE:g}, so every non-sensitive word would be released "
                "unchanged (give p >= 1e-06, or a larger --sensitive-fraction to sanitize more words always)")

        if sensitive_ids is not None:
            cls.check_sensitive_ids(sensitive_ids, getattr(artifact, "vocab_size", None))
        if sensitive_ids is None and artifact is not None \
                and math.floor(float(sensitive_fraction) * int(artifact.vocab_size)) < 1:
            raise ParameterError(f"sensitive_fraction {float(sensitive_fraction):g} selects no word of this vocabulary")

    @staticmethod
    def check_sensitive_ids(sensitive_ids, vocab_size=None) -> None:
        """``sensitive_ids``: a non-empty list, tuple or 1-D integer array of vocabulary ids (never a word, a
        string, a number, a mapping or a boolean). ParameterError naming what was wrong, never quoting a value."""
        from textdp.errors import ParameterError

        if isinstance(sensitive_ids, (str, bytes, dict)) or not isinstance(sensitive_ids, (list, tuple, np.ndarray)):
            raise ParameterError(f"sensitive_ids must be a list of vocabulary ids, not a {type(sensitive_ids).__name__}")
        values = np.asarray(sensitive_ids, dtype=object)
        if values.ndim != 1 or len(values) == 0:
            raise ParameterError("sensitive_ids must be a non-empty flat list of vocabulary ids")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
            raise ParameterError("sensitive_ids must hold integers (vocabulary ids), not words or other values")
        low, high = min(values), max(values)
        if low < 0 or (vocab_size is not None and high >= int(vocab_size)):
            bound = f"0 to {int(vocab_size) - 1:,}" if vocab_size is not None else ">= 0"
            raise ParameterError(f"sensitive_ids must be vocabulary ids ({bound})")

    def __init__(self, artifact, epsilon: float, sensitive_fraction: float = 0.9, p: float = 0.3,
                 sensitive_ids: Optional[Sequence[int]] = None, batch: int = 8192, plus: bool = True):
        if plus is not True:
            raise ValueError("SanText+ always has plus=True (use SanText for plus=False)")
        super().__init__(artifact, epsilon, plus=True, sensitive_fraction=sensitive_fraction, p=p,
                         sensitive_ids=sensitive_ids, batch=batch)
