"""docs/choosing.md is generated from the committed frontier results and cannot drift from them.

The page is a pure function of benchmarks/results/frontier.json (benchmarks/utility/frontier_report.py
``choosing_doc``): no randomness, so these tests are exact (false-failure rate 0).
"""

import copy
import json
import os
import re

from benchmarks.utility import frontier_report
from textdp.mechanisms import REGISTRY

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results", "frontier.json")
DOC = os.path.join(REPO, "docs", "choosing.md")


def _payload() -> dict:
    with open(RESULTS, encoding="utf-8") as handle:
        return json.load(handle)


def _doc() -> str:
    with open(DOC, encoding="utf-8") as handle:
        return handle.read()


def test_choosing_doc_is_what_the_report_function_makes_of_the_committed_results():
    assert _doc() == frontier_report.choosing_doc(_payload()), (
        "docs/choosing.md differs from the results: python -m benchmarks.frontier --report-only --choosing")


def test_the_decision_table_follows_the_numbers():
    payload = _payload()
    table = "\n".join(frontier_report.decision_table(payload))
    assert table in _doc()
    changed = copy.deepcopy(payload)
    changed["points"][0]["training_time"]["accuracy"]["mean"] = 0.123456
    assert "0.123" in "\n".join(frontier_report.decision_table(changed))
    assert frontier_report.choosing_doc(changed) != _doc()


def test_the_contextual_column_shows_the_context_free_rates_on_the_same_tokens():
    """The contextual attacker attacks other tokens than the context-free check (docs/evaluation.md): where the
    audit measured the context-free attacker on the very releases the contextual one saw, the table prints those
    rates beside the contextual ones, so the two attackers are compared on the same tokens."""
    from benchmarks.frontier import inversion_rates

    section = {"posterior": "x", "per_epsilon": {"10": {"tokens": 50, "overall": {
        "top1": {"rate": 0.4}, "top10": {"rate": 0.6}, "released": {"rate": 0.3}}}},
        "same_releases_context_free": {"10": {"tokens": 50, "top1": {"rate": 0.456}, "top10": {"rate": 0.789}}}}
    rates = inversion_rates(section, 10.0)
    assert rates["same_releases_context_free"] == {"top1": 0.456, "top10": 0.789, "tokens": 50}
    payload = copy.deepcopy(_payload())
    payload["points"][0]["contextual_inversion"] = rates
    row = "\n".join(frontier_report.decision_table(payload))
    assert "0.400 / 0.600 (context-free on the same tokens: 0.456 / 0.789)" in row
    assert inversion_rates(section, 5.0) is None


def test_verdicts_judge_against_the_stronger_attacker():
    """The plot and the verdicts use the higher top-1 of the context-free and the contextual attacker: a weak
    contextual model must not make a mechanism look more protective than the context-free attack shows."""
    weak = {"inversion": {"top1": 0.9, "top10": 0.95}, "contextual_inversion": {"top1": 0.7, "top10": 0.8}}
    strong = {"inversion": {"top1": 0.4, "top10": 0.6}, "contextual_inversion": {"top1": 0.45, "top10": 0.6}}
    assert frontier_report.attack_of(weak) == (weak["inversion"], "context-free")
    assert frontier_report.attack_of(strong) == (strong["contextual_inversion"], "contextual")
    assert frontier_report.attack_of({"inversion": weak["inversion"]}) == (weak["inversion"], "context-free")
    assert frontier_report.attack_of({})[0] is None


def test_every_registered_mechanism_is_measured_at_three_epsilons_or_more():
    payload = _payload()
    assert payload["complete"]
    for name in REGISTRY:
        points = [p for p in payload["points"] if p["mechanism"] == name]
        assert len({p["epsilon"] for p in points}) >= 3, name
        for p in points:
            assert p["inversion"] is not None and p["linkage"], (name, p["epsilon"])
            assert len(p["samples"]) == len(payload["sentences"]) == 3


def test_fenced_blocks_are_text_samples_or_the_parse_only_benchmark_command():
    lines = _doc().splitlines()
    opening = [i for i, line in enumerate(lines) if line.startswith("```") and line != "```"]
    assert opening
    for i in opening:
        kind = lines[i][3:].strip()
        if kind != "text":
            assert kind == "sh" and lines[i - 1] == "<!-- docs-test: parse-only (long benchmark) -->", lines[i]
            assert re.match(r"nice -n 10 python -m benchmarks\.frontier ", lines[i + 1])
