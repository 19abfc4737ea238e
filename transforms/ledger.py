"""The exposure ledger inside the privatize pipeline (docs/ledger.md): contribution bounding per author.

``TagPositions`` puts each read record's (source, position) into a hidden field, so that after ``Privatize`` the
released record still says where it came from. ``BoundContributions`` then groups the released records by the
keyed hash of their author (``textdp.ledger.keys.author_hash``; workers never see the ledger, only a side input
of each author's committed epsilon-mass read by the launcher), orders each author's records by (source, position)
and releases them while the author's mass stays within the budget (``textdp.ledger.budget.admit``): the rest go to
the error output as ``budget_exhausted``. Its ``authors`` output, one (author hash, tokens, records, withheld) per
author, is written with the run's ledger section to ``<output>-ledger.json`` by ``WriteLedgerRelease``; the
launcher commits that file to the ledger after the run (pipelines/ledger.py).

Epsilon comes from the mechanism object the privatize workers built (the same ``Shared`` holder), a record's
tokens from the privatizer's shape of it (the words it released): nothing here knows a mechanism by name.
"""

from __future__ import annotations

from typing import Optional

import apache_beam as beam

from textdp.ledger import budget as ledger_budget
from textdp.ledger.keys import author_hash
from textdp.text.records import author_identity

# the hidden field that carries a record's (source, position) through Privatize; an input field of that name is
# overwritten, and the field never reaches the output
POSITION_FIELD = "__textdp_position__"
BUDGET_EXHAUSTED = "budget_exhausted"
RELEASE_FORMAT = "textdp-ledger-release/1"


class TagPositions(beam.PTransform):
    """Read records (source, position, payload) -> the same, the payload (a dict) carrying its position."""

    def expand(self, records):
        def tag(item):
            source, position, payload = item
            if isinstance(payload, dict):
                payload = dict(payload)
                payload[POSITION_FIELD] = [source, position]
            return source, position, payload

        return records | "TagPositions" >> beam.Map(tag)


class _Admit(beam.DoFn):
    """(author hash, [records]) -> released records; ``errors`` (budget_exhausted); ``authors`` (one tuple)."""

    def __init__(self, shared_handle, perturb_config, budget: Optional[float], shape_field: str):
        from transforms.perturb import holder_state

        self.budget = budget
        self.shape_field = shape_field
        self._state = holder_state(shared_handle, perturb_config)

    def setup(self):
        self._state.setup()

    def process(self, element, spent):
        from transforms.io import error_record

        author, records = element
        epsilon = float(self._state.value.mechanism.parameters()["epsilon"])  # the mechanism object's, as it ran
        ordered = sorted(records, key=lambda record: (str(record[POSITION_FIELD][0]), record[POSITION_FIELD][1]))
        words = [int(record[self.shape_field]["words"]) for record in ordered]
        before = ledger_budget.from_pair(spent[author]) if author in spent else ledger_budget.Mass(0)
        decided = ledger_budget.admit(before, self.budget, [ledger_budget.mass_of(epsilon, n) for n in words])
        released_tokens = released = withheld = 0
        for record, count, fits in zip(ordered, words, decided):
            source, position = record.pop(POSITION_FIELD)
            if fits:
                released_tokens, released = released_tokens + count, released + 1
                yield record
            else:
                withheld += 1
                yield beam.pvalue.TaggedOutput("errors", error_record(
                    source, position, BUDGET_EXHAUSTED,
                    f"releasing its {count} word(s) at epsilon {epsilon:g} would take the author's cumulative "
                    f"epsilon-mass above --author-budget {self.budget:g} (docs/ledger.md); the record was not released"))
        after = before + ledger_budget.mass_of(epsilon, released_tokens)
        yield beam.pvalue.TaggedOutput("authors", (author, released_tokens, released, withheld,
                                                   ledger_budget.as_pair(after)))


class BoundContributions(beam.PTransform):
    """Privatized payloads (dicts with the author field, the shape field and ``POSITION_FIELD``) ->
    {'records', 'errors', 'authors'} (see the module docstring). ``spent``: a PCollection of (author hash,
    (numerator, denominator)) committed masses."""

    def __init__(self, key: bytes, user_field: str, shape_field: str, budget: Optional[float], spent,
                 shared_handle, perturb_config, label: Optional[str] = None):
        super().__init__(label)
        self.key, self.user_field, self.shape_field = bytes(key), user_field, shape_field
        self.budget = None if budget is None else float(budget)
        self.spent = spent
        self.shared_handle, self.perturb_config = shared_handle, perturb_config

    def expand(self, released):
        key, user_field = self.key, self.user_field

        def by_author(record):
            return author_hash(key, author_identity(record[user_field])), record

        outputs = (released
                   | "ByAuthor" >> beam.Map(by_author)
                   | "GroupByAuthor" >> beam.GroupByKey()
                   | "Admit" >> beam.ParDo(_Admit(self.shared_handle, self.perturb_config, self.budget,
                                                  self.shape_field),
                                           spent=beam.pvalue.AsDict(self.spent)).with_outputs(
                       "errors", "authors", main="records"))
        return {"records": outputs.records, "errors": outputs.errors, "authors": outputs.authors}


class WriteLedgerRelease(beam.DoFn):
    """All (author hash, tokens, records, withheld, cumulative mass) of the run -> ``<output>-ledger.json``: what
    the launcher commits to the ledger, with the run's ledger section (the distribution over this run's authors
    of their cumulative mass; nothing per author) for the summaries. Emits the section."""

    def __init__(self, shared_handle, perturb_config, path: str, run_id: str, fingerprint: str,
                 budget: Optional[float], ledger_shown: str):
        from transforms.perturb import holder_state

        self.path, self.run_id, self.fingerprint = path, run_id, fingerprint
        self.budget, self.ledger_shown = budget, ledger_shown
        self._state = holder_state(shared_handle, perturb_config)

    def setup(self):
        self._state.setup()

    def process(self, entries):
        from transforms.io import write_json

        mechanism = self._state.value.mechanism
        parameters = mechanism.parameters()
        entries = sorted(entries)
        section = {
            "ledger": self.ledger_shown, "run_id": self.run_id, "author_budget": self.budget,
            "epsilon": float(parameters["epsilon"]), "mechanism": parameters.get("mechanism"),
            "coverage": mechanism.privacy_statement().get("coverage"),
            "epsilon_d_bound": bool(getattr(mechanism, "EPSILON_D_BOUND", False)),  # the statement's form (R9b-8)
            "artifact": self._state.value.artifact.identity(),  # whose distances d are (R10b-6)
            "authors": len(entries), "authors_withheld": sum(1 for e in entries if e[3]),
            "records_released": sum(e[2] for e in entries), "records_withheld": sum(e[3] for e in entries),
            "tokens_released": sum(e[1] for e in entries),
            "cumulative_mass": ledger_budget.mass_distribution(
                [ledger_budget.from_pair(e[4]) for e in entries], self.budget)}
        write_json(self.path, {"format": RELEASE_FORMAT, "run_id": self.run_id, "key_fingerprint": self.fingerprint,
                               "section": section,
                               "entries": [[a, tokens, records, withheld] for a, tokens, records, withheld, _ in entries]})
        yield section


LEDGER_CLOSED = "ledger_closed"


def artifact_of(mechanism) -> Optional[str]:
    """The identity of the artifact a mechanism object runs on (``Artifact.identity``), None when it keeps none
    (a custom mechanism: its run's form is then unknown, and the ledger's statement takes the general form)."""
    artifact = getattr(mechanism, "artifact", None)
    identity = getattr(artifact, "identity", None)
    return identity() if callable(identity) else None


def position_key(where):
    """(source, position) in read order: a file's lines by number, a subscription's messages by id."""
    source, position = where
    if isinstance(position, (int, float)) and not isinstance(position, bool):
        return str(source), 0, position, ""
    return str(source), 1, 0, str(position)


class WindowLedger:
    """The exposure ledger of a streaming run, on the workers (docs/ledger.md, "The ledger in streaming").

    ``WriteWindowPane`` calls ``decide`` on a window pane's privatized records before writing any of its files, and
    ``commit`` after the last one (its summary). ``decide`` orders each author's records by (source, position) and
    asks the ledger (``Ledger.admit_window``: one transaction, serialised with the run's other windows) to decide
    them against the author's mass as it stands (every committed run, and every window of any run not discarded,
    this run's earlier windows included) and to record the window, pending, with its per-author releases: from
    then on its mass counts for every later window and run. A retried pane gets the recorded decision back.
    Picklable: it carries the location, the key and the budget; the database handle is opened in ``setup``.
    """

    def __init__(self, location: str, key: bytes, fingerprint: str, budget: Optional[float], run_id: str,
                 user_field: str, shown: str):
        self.location, self.key, self.fingerprint = location, bytes(key), fingerprint
        self.budget = None if budget is None else float(budget)
        self.run_id, self.user_field, self.shown = run_id, user_field, shown
        self._ledger = None

    def setup(self) -> None:
        from textdp.ledger import Ledger

        if self._ledger is None:
            self._ledger = Ledger(self.location, self.fingerprint, create=False)

    def teardown(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    def decide(self, records, window: str, prefix: str, mechanism, shape_field: str):
        """A pane's privatized records -> (released records, withheld error records, the pane's ledger section).
        The run's bound form and artifact identity are recorded in the ledger; the section's ``ledger_form`` says
        whether every run the ledger counts has the "B x d" form (R10b-6)."""
        from transforms.io import error_record

        self.setup()
        epsilon = float(mechanism.parameters()["epsilon"])  # the mechanism object's, as it ran
        epsilon_d = bool(getattr(mechanism, "EPSILON_D_BOUND", False))
        artifact = artifact_of(mechanism)
        self._ledger.record_form(self.run_id, epsilon_d, artifact)
        by_author = {}
        for record in records:
            by_author.setdefault(author_hash(self.key, author_identity(record[self.user_field])), []).append(record)
        for found in by_author.values():
            found.sort(key=lambda record: position_key(record[POSITION_FIELD]))
        counts = {author: [int(record[shape_field]["words"]) for record in found] for author, found in by_author.items()}
        decided = self._ledger.admit_window(self.run_id, window, prefix, epsilon, self.budget, counts)
        closed = decided is None
        decisions, befores, fresh = (({a: [False] * len(c) for a, c in counts.items()}, {}, True) if closed
                                     else decided)
        released, withheld, after = [], [], []
        for author in sorted(by_author):
            total = befores.get(author, ledger_budget.Mass(0))
            for record, count, fits in zip(by_author[author], counts[author], decisions[author]):
                record = dict(record)  # a retried pane may see the same objects again: never changed in place
                source, position = record.pop(POSITION_FIELD)
                if fits:
                    total += ledger_budget.mass_of(epsilon, count)
                    released.append(record)
                elif closed:
                    withheld.append(error_record(source, position, LEDGER_CLOSED, (
                        f"the streaming run {self.run_id} no longer holds the ledger (it was settled, e.g. by "
                        "`textdp ledger reconcile`, while the job ran); the record was not released")))
                else:
                    withheld.append(error_record(source, position, BUDGET_EXHAUSTED, (
                        f"releasing its {count} word(s) at epsilon {epsilon:g} would take the author's cumulative "
                        f"epsilon-mass above --author-budget {self.budget:g} (docs/ledger.md); the record was not "
                        "released")))
            if not closed:
                after.append(total)
        parameters = mechanism.parameters()
        section = {
            "ledger": self.shown, "run_id": self.run_id, "window": window, "author_budget": self.budget,
            "epsilon": epsilon, "mechanism": parameters.get("mechanism"),
            "coverage": mechanism.privacy_statement().get("coverage"),
            "epsilon_d_bound": epsilon_d, "artifact": artifact,  # the statement's form (R9b-8, R10b-6)
            "ledger_form": self._ledger.bound_form(self.run_id),  # every counted run's form (R10b-6)
            "state": "closed" if closed else "committed", "decided_before": not fresh,
            "authors": len(by_author),
            "authors_withheld": sum(1 for a in by_author if not all(decisions[a])),
            "records_released": len(released), "records_withheld": len(withheld),
            "tokens_released": sum(c for a in counts for c, ok in zip(counts[a], decisions[a]) if ok),
            "cumulative_mass": ledger_budget.mass_distribution(after, self.budget)}
        return released, withheld, section

    def commit(self, window: str) -> bool:
        self.setup()
        return self._ledger.commit_window(self.run_id, window)
