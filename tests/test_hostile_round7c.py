"""Variants found by the seventh hostile round (issue 25, findings F15, F12, F13, F6) that this branch fixed.
Real Privatizers, real subprocesses of the command on the local runner (FnApiRunner) and the small GloVe fixture; no
mocks. No test here is randomized in a way that can fail: the assertions hold for every draw of the noise."""

import textdp

# --- F15: privacy_statement() after a seeded call ----------------------------------------------------------------


def test_f15_privacy_statement_after_a_seeded_call_states_the_seed(tiny_artifact_dir):
    """After P.privatize(texts, seed=42), P.privacy_statement() said "No seed was used" and covered_by_guarantee True.
    Now the Privatizer records that a call was seeded and its statement says so (covered by nothing), even when the
    caller passes seed_used=False; a Privatizer that never saw a seed still states the guarantee."""
    fresh = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    fresh.privatize(["the was cold"])
    unseeded = fresh.privacy_statement()
    assert unseeded["covered_by_guarantee"] is True and unseeded["seed"].startswith("No seed")
    p = textdp.Privatizer(epsilon=5, artifact=tiny_artifact_dir)
    p.privatize(["the was cold"], seed=42)
    p.privatize(["the was cold"])  # a later unseeded call does not wash the seed out
    for statement in (p.privacy_statement(), p.privacy_statement(seed_used=False), p.privacy_statement(seed_used=True)):
        assert statement["covered_by_guarantee"] is False
        assert statement["output_coverage"]["covered"] == "none"
        assert not statement["seed"].startswith("No seed")
    assert p.seeded is True and fresh.seeded is False
