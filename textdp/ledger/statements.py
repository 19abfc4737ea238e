"""The ledger's privacy sentences, derived from what the run did (its ledger section) and nothing else.

Composition (docs/ledger.md): a word w released with epsilon e satisfies P[M(w) in S] <= exp(e d(w, w')) P[M(w') in S]
for every w' (the mechanism's per-word guarantee). The words an author released over runs r = 1..R, n_r words at
epsilon e_r, are independent releases, so for any other words of the same number the ratio is at most
exp(sum_i e_i d(w_i, w_i')) <= exp(m * max_i d(w_i, w_i')), m = sum_r e_r n_r: the author's epsilon-mass.
That form holds only for a mechanism whose per-word bound is exp(e d) (``Mechanism.EPSILON_D_BOUND``, carried in
the section as ``epsilon_d_bound``); for any other the ratio is the product of its per-word bounds at those
epsilons, and the statement says so without the m x max d form (round 9b, R9b-8). The statement is about every
run the ledger counts, so the m x max d form needs every one of them to have that bound on one artifact (one d):
the section's ``ledger_form`` (``Ledger.bound_form``, from the forms the ledger records per run) says whether they
do; without it (a section of an older textdp) the general form is used (round 10b, R10b-6).
"""

from __future__ import annotations

from typing import Optional

# the ledger section's figures computed from the raw input (listed in the operator summary's raw_data_figures)
LEDGER_RAW_FIGURES = ("authors", "authors_withheld", "records_released", "records_withheld", "tokens_released",
                      "cumulative_mass")


def ledger_statement(section: dict, public: bool = False) -> str:
    """One paragraph for the summaries from ``transforms.ledger.WriteLedgerRelease``'s section. The public
    variant names the budget and no figure of the raw input (how many records were withheld depends on how much
    each author wrote, which the output does not show: like the other raw-data figures, operator summary only)."""
    budget: Optional[float] = section.get("author_budget")
    covered = (section.get("coverage") or {}).get("covered", "all")
    withheld = int(section.get("records_withheld", 0))
    where = "in this ledger" if public else f"in the ledger {section.get('ledger')}"
    if section.get("state") == "closed":  # a streaming window decided after its run was settled
        return ("this window was decided after its streaming run had been settled in the ledger, so none of its "
                "records was released (error output, ledger_closed)")
    if budget is None:
        bound = (f"no --author-budget was given: this run's releases were recorded per author {where}, "
                 "and no record was withheld")
    else:
        scope = "this window" if section.get("window") else "this run"
        withheld_text = ("any record whose release would have exceeded it was withheld" if public else
                         f"{withheld} record(s) of {scope} were withheld (error output, budget_exhausted) because "
                         "releasing them would have exceeded it")
        runs = ("the runs and streaming windows recorded" if section.get("window") else "the runs committed")
        bound = (f"every author's cumulative epsilon-mass (the sum, over {runs} {where}, of epsilon times "
                 f"the word tokens released from their records) is at most {budget:g}; {withheld_text}")
    if covered == "none":
        return (bound + f". The mechanism ({section.get('mechanism')}) claims no per-word guarantee, so this bounds "
                "how much of each author was released, not a privacy loss")
    subset = " for the words the mechanism's guarantee covers (see the privacy statement)" if covered == "subset" else ""
    if budget is None:
        return bound + "."
    form = section.get("ledger_form") or {}  # every run the ledger counts (Ledger.bound_form, R10b-6)
    if section.get("epsilon_d_bound") and form.get("epsilon_d"):  # every counted run declares exp(epsilon d) per word
        loss = (f"loss at most {budget:g} x max_i d(w_i, w_i') (d the distance of the privacy statement's per-word "
                "bound, for the most different pair; every run this ledger counted when this was written declares "
                "that bound, on the same vocabulary artifact)")
    else:  # CluSanT, CusText, Mahalanobis, SanText+, a custom mechanism: not epsilon x d (round 9b, R9b-8)
        if not section.get("epsilon_d_bound"):
            why = "this mechanism's per-word bound is not epsilon x d(w, w')"
        else:  # this run's mechanism has the form, but not every run of the ledger (or it is not known): R10b-6
            why = form.get("why") or ("the ledger does not record every run's per-word bound form and artifact, so "
                                      "one d cannot be claimed for them")
        loss = ("loss at most the sum of the per-word exponents of this run's privacy statement (per_token; for "
                "words of the ledger's other runs, of that run's statement) at the epsilons those words were released "
                f"with, whose sum, the author's epsilon-mass, is at most {budget:g}; {why}, so no bound of the form "
                f"{budget:g} x d is claimed")
    return (bound + f". By sequential composition of the per-word guarantee{subset}, an author's words released "
            f"across those runs, w_1..w_n, versus any other words w_1'..w_n', are protected as one release with "
            f"{loss}; this holds per author id as given by --user-field, not for a person who writes under several "
            "ids, and not for records released outside this ledger")
