"""Beam side of the self-check: plan -> pairs -> draws per word (parallel) -> tests per pair (parallel).

1. ``MakePairsFn``: a plan element (a base word, a user pair, the out-of-vocabulary pairs) becomes
   ``PairSpec`` s; base words get their partners at the neighbour ranks of the bands from one
   distance row in the mechanism's metric.
2. Every pair is keyed by each of its two tokens and grouped by token, so ``DrawTokenFn`` draws each
   token once per epsilon (``draws`` releases, split into two halves) however many pairs share it.
3. The halves travel to their pairs, keyed by (pair, epsilon); ``TestPairFn`` computes the pair's
   guarantee and the two directional tests (``textdp.audit.selfcheck.test_pair``).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from textdp.audit.pairs import BANDS, PairSpec, TokenReleaser, band_pairs, guarantee_row, oov_pairs
from textdp.audit.selfcheck import pair_guarantee, test_pair
from textdp.audit.stats import split_histograms
from transforms.audit_common import NAMESPACE, AuditConfig, holder_state


def _token_key(token) -> tuple:
    return (type(token).__name__, token)


class MakePairsFn(beam.DoFn):
    """Plan elements -> PairSpec objects.

    ``("base", index, word_id, limit)``: the base word's band pairs (at most ``limit``);
    ``("user", line, a, b)``: one given pair (words or ids); ``("oov", vocab_word_id)``: the
    out-of-vocabulary pairs of the run's policy.
    """

    def __init__(self, shared_handle, config: AuditConfig, worker=None):
        self.config = config
        self._state = holder_state(shared_handle, config, worker)
        self._mechanism = None

    def setup(self):
        holder = self._state.setup()
        self._mechanism = self.config.build_mechanism(holder.artifact, self.config.epsilons[0])

    def process(self, element):
        self._state.report()
        artifact = self._state.value.artifact
        kind = element[0]
        if kind == "base":
            _, index, word_id, limit = element
            row = guarantee_row(self._mechanism, artifact.vectors, int(word_id))
            yield from band_pairs(int(index), int(word_id), row, BANDS, int(limit), artifact.words)
        elif kind == "user":
            _, line, a, b = element
            ids = [artifact.word_to_id.get(str(t).lower()) for t in (a, b)]
            tokens = [i if i is not None else str(t) for i, t in zip(ids, (a, b))]
            names = [artifact.words[i] if i is not None else f"<word outside the vocabulary, line {line}>"
                     for i in ids]
            yield PairSpec(f"u{line}", tokens[0], tokens[1], "user", label=f"{names[0]} / {names[1]} (line {line})")
        elif kind == "oov":
            yield from oov_pairs(self.config.oov_policy, artifact.word_to_id, int(element[1]))
        else:
            raise ValueError(f"unknown plan element {kind!r}")


class DrawTokenFn(beam.DoFn):
    """(token key, [(spec, role), ...]) -> ((pair_id, epsilon), (role, spec, halves)) per pair and epsilon."""

    def __init__(self, shared_handle, config: AuditConfig, worker=None):
        self.config = config
        self._state = holder_state(shared_handle, config, worker)
        self._rng = None
        self._draws = Metrics.counter(NAMESPACE, "self_check_draws")

    def setup(self):
        self._state.setup(own_search_threads=self.config.searches_nearest)
        self._rng = self.config.rng()  # OS entropy (a seed only for tests and benchmarks)

    def finish_bundle(self):
        self._state.progress.flush()

    def process(self, element):
        self._state.report()
        key, members = element
        token = key[1]
        config = self.config
        artifact = self._state.value.artifact
        progress = self._state.progress
        for epsilon in config.epsilons:
            releaser = TokenReleaser(lambda eps=epsilon: config.build_mechanism(artifact, eps), artifact,
                                     oov_policy=config.oov_policy, prune=config.prune)
            rng = self._rng if config.seed is None else config.rng("self-check", key, epsilon)
            outputs = releaser.release(token, config.draws, rng, progress=lambda n: progress.add(draws=n))
            self._draws.inc(config.draws)
            halves = split_histograms(outputs)
            for spec, role in members:
                yield (spec.pair_id, float(epsilon)), (role, spec, halves)


class TestPairFn(beam.DoFn):
    """((pair_id, epsilon), [(role, spec, halves) x 2]) -> two result rows (both directions)."""

    def __init__(self, shared_handle, config: AuditConfig, worker=None):
        self.config = config
        self._state = holder_state(shared_handle, config, worker)
        self._mechanisms = None

    def setup(self):
        holder = self._state.setup()
        self._mechanisms = {eps: self.config.build_mechanism(holder.artifact, eps) for eps in self.config.epsilons}

    def finish_bundle(self):
        self._state.progress.flush()

    def process(self, element):
        (pair_id, epsilon), parts = element
        by_role = {role: (spec, halves) for role, spec, halves in parts}
        if set(by_role) != {"a", "b"}:
            raise ValueError(f"pair {pair_id} at epsilon {epsilon:g} lacks the draws of one of its words")
        spec, halves_a = by_role["a"]
        _, halves_b = by_role["b"]
        config = self.config
        artifact = self._state.value.artifact
        mechanism = self._mechanisms[epsilon]
        word_id = lambda token: (int(token) if isinstance(token, int)  # noqa: E731
                                 else artifact.word_to_id.get(str(token).lower()))
        distance, bound = pair_guarantee(spec, mechanism, artifact, config.oov_policy, word_id)
        alpha_test = config.false_alarm_rate / config.planned_tests
        self._state.progress.add(pair_tests=2)
        yield from test_pair(spec, epsilon, halves_a, halves_b, config.draws, alpha_test, distance, bound)


def _by_token(spec: PairSpec):
    yield _token_key(spec.a), (spec, "a")
    yield _token_key(spec.b), (spec, "b")


class SelfCheck(beam.PTransform):
    """Plan elements -> self-check rows (two per pair and epsilon)."""

    def __init__(self, shared_handle, config: AuditConfig, worker=None):
        super().__init__()
        self._shared_handle = shared_handle
        self.config = config
        self.worker = worker

    def expand(self, plan):
        return (plan
                | "MakePairs" >> beam.ParDo(MakePairsFn(self._shared_handle, self.config))
                | "ByToken" >> beam.FlatMap(_by_token)
                | "GroupByToken" >> beam.GroupByKey()
                | "SpreadTokens" >> beam.Reshuffle()
                | "Draw" >> beam.ParDo(DrawTokenFn(self._shared_handle, self.config, self.worker))
                | "GroupByPair" >> beam.GroupByKey()
                | "Test" >> beam.ParDo(TestPairFn(self._shared_handle, self.config)))
