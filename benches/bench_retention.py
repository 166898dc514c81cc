"""Constraint retention (see ``retention.py``): the share of planted
constraints each policy keeps in view, over 30 generated sessions at fixed
budgets. The table is printed at the end of the run; the bar is the issue's:
the weighted window and the priority builder keep >= 95% at a budget where
``messages[-N:]`` keeps <= 40%."""

from __future__ import annotations

import statistics

import pytest

from retention import POLICIES, TOK, continuity, retention, session
from support import REPORTS

SESSIONS = [session(seed) for seed in range(30)]
BUDGETS = [2_000, 4_000, 8_000, 16_000]


@pytest.fixture(scope="module")
def table() -> dict[int, dict[str, float]]:
    """Retention per budget and policy; its table goes into the run's report."""
    scores = {
        budget: {name: retention(SESSIONS, policy, budget) for name, policy in POLICIES.items()}
        for budget in BUDGETS
    }
    markers = sum(len(s.markers) for s in SESSIONS)
    sizes = [len(s.messages) for s in SESSIONS]
    tokens = statistics.mean(TOK.count_messages(s.messages) for s in SESSIONS)
    REPORTS.append(
        f"constraint retention: {len(SESSIONS)} sessions, {markers} constraints, "
        f"{min(sizes)}-{max(sizes)} messages (mean {tokens:,.0f} tokens)"
    )
    kept = {
        budget: {name: continuity(SESSIONS, policy, budget) for name, policy in POLICIES.items()}
        for budget in BUDGETS
    }
    header = " | ".join(f"{b // 1000}K" for b in BUDGETS)
    REPORTS.append(f"| policy | {header} | task continuity {header.replace(' | ', ' / ')} |")
    REPORTS.append("|---|" + "---:|" * (len(BUDGETS) + 1))
    for name in POLICIES:
        shares = " | ".join(f"{scores[b][name] * 100:.1f}%" for b in BUDGETS)
        whole = " / ".join(f"{kept[b][name] * 100:.0f}%" for b in BUDGETS)
        REPORTS.append(f"| {name} | {shares} | {whole} |")
    scores["continuity"] = kept
    return scores


def test_retention(table):
    scores = table[8_000]
    # From 8K on the weighted window keeps the newest tool result and the last
    # three turns in view in every session (below, its rules come first).
    for budget in BUDGETS[2:]:
        assert table["continuity"][budget]["WeightedWindow"] == 1.0
    assert scores["messages[-20:]"] <= 0.40
    assert scores["WeightedWindow"] >= 0.95
    assert scores["PriorityAssembly (anchoring)"] >= 0.95
    # At every budget ours keep at least what the naive windows keep.
    for budget in BUDGETS:
        for ours in ("WeightedWindow", "PriorityAssembly (anchoring)"):
            for naive in ("messages[-20:]", "truncate from the front", "shape_history"):
                assert table[budget][ours] >= table[budget][naive], (budget, ours, naive)
