"""Selection an agent loop can trust: the turn in progress (the newest user
message and the tool calls and results after it) is in every window, the
newest turns are never pushed out by tagged history, and tagged messages age."""

from __future__ import annotations

import re

import pytest

from agent_sessions import turn_in_progress
from context_core import (
    MessageLog,
    OverBudgetError,
    PriorityAssembly,
    Tokenizer,
    WeightedWindow,
    shape_history,
)
from context_core.reference import select as reference

TOK = Tokenizer()
RULES = [
    "You must retry a failed refund at most three times and log every attempt with its reason.",
    "Never drop the order_id from any log line, and ensure the ledger stays balanced after each step.",
    "Make sure every migration is reversible; you must not touch the production tables directly.",
]
START = 1_790_000_000.0


def task(turn: int) -> str:
    """A task message of about 150 tokens that states rules (tagged a constraint)."""
    rule = RULES[turn % len(RULES)]
    return (
        f"Task {turn}: look at the refund worker again and fix the timeout in step {turn}. {rule} "
        + "Keep the public API as it is, write the change up for the team, and run the suite. " * 3
    )


def loop_session(turns: int, *, provider: str = "openai") -> tuple[list[dict], list[int]]:
    """Task messages two minutes apart, each answered by one tool round and a
    reply. Returns the messages and, per turn, the index of its tool result
    (the server asks the model right after it)."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    results = []
    for turn in range(turns):
        at = START + 120 * turn
        messages.append({"role": "user", "content": task(turn), "timestamp": at})
        call_id = f"call_{turn}"
        output = f"tests/test_refunds.py::test_{turn} FAILED - TimeoutError after 30s\n" * 8
        if provider == "openai":
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": "run", "arguments": "{}"}}
                    ],
                    "timestamp": at + 10,
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": output, "timestamp": at + 40}
            )
        else:
            messages.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call_id, "name": "run", "input": {}}],
                    "timestamp": at + 10,
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}],
                    "timestamp": at + 40,
                }
            )
        results.append(len(messages) - 1)
        messages.append({"role": "assistant", "content": f"Fixed step {turn}.", "timestamp": at + 60})
    return messages, results


def policies(provider: str, budget: int, module=None) -> dict:
    """Every policy, from the extension or (``module``) the reference."""
    if module is None:
        return {
            "shape_history": lambda h, now: shape_history(h, budget, provider=provider),
            "WeightedWindow": lambda h, now: WeightedWindow(provider=provider).select(h, budget, now=now),
            "PriorityAssembly": lambda h, now: PriorityAssembly(provider=provider).select(h, budget),
            "PriorityAssembly (anchoring)": lambda h, now: PriorityAssembly(
                provider=provider, anchoring=True
            ).select(h, budget),
        }
    return {
        "shape_history": lambda h, now: module.shape_history(h, budget, provider=provider),
        "WeightedWindow": lambda h, now: module.WeightedWindow(provider=provider).select(h, budget, now=now),
        "PriorityAssembly": lambda h, now: module.PriorityAssembly(provider=provider).select(h, budget),
    }


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_tool_result_just_returned_is_in_every_window(provider):
    """The issue's replay: rules in every task message fill an 8K budget with
    tagged history from turn ~70 on; every policy must still show the model
    the result it just asked for, at every one of 120 turns."""
    messages, results = loop_session(120, provider=provider)
    for name, select in policies(provider, 8000).items():
        for turn, result in enumerate(results):
            history = messages[: result + 1]
            chosen = select(history, START + 120 * turn + 45)
            assert result in chosen.kept, (name, turn)
            assert set(range(result - 2, result + 1)) <= set(chosen.kept), (name, turn)
            assert chosen.breakdown.total <= 8000


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_reference_keeps_the_turn_in_progress_too(provider):
    messages, results = loop_session(90, provider=provider)
    for name, select in policies(provider, 8000, reference).items():
        for turn in range(0, 90, 15):
            result = results[turn]
            chosen = select(messages[: result + 1], START + 120 * turn + 45)
            assert set(range(result - 2, result + 1)) <= set(chosen.kept), (name, turn)


def test_the_log_window_keeps_the_turn_in_progress(tmp_path):
    messages, results = loop_session(120)
    policy = WeightedWindow(tool_result_cap=None)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        written = 0
        for turn, result in enumerate(results):
            log.append_many(messages[written : result + 1])
            written = result + 1
            now = START + 120 * turn + 45
            chosen = policy.select(log, 8000, now=now)
            assert set(range(result - 2, result + 1)) <= set(chosen.kept), turn
            expected = policy.select(messages[:written], 8000, now=now)
            assert chosen.kept == expected.kept
            assert chosen.messages == expected.messages


@pytest.mark.parametrize("impl", ["extension", "reference"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_turn_in_progress_over_the_budget_is_named(impl, provider):
    module = reference if impl == "reference" else None
    messages, results = loop_session(3, provider=provider)
    history = messages[: results[-1] + 1]
    start = turn_in_progress(history)
    in_progress = TOK.count_messages(history[start:]) - 3  # without the reply priming
    budget = in_progress  # the system message and the priming do not fit beside it
    for name, select in policies(provider, budget, module).items():
        with pytest.raises(OverBudgetError, match=r"turn in progress (\d+) \+ reply priming") as error:
            select(history, None)
        named = int(re.search(r"turn in progress (\d+)", str(error.value)).group(1))
        assert abs(named - in_progress) <= 4, name  # the unit's own counts (framing as counted)
        assert f"budget {budget}" in str(error.value)
        # The same sizes as fields, adding up to more than the budget.
        sizes = error.value
        assert (sizes.turn_in_progress, sizes.budget, sizes.priming) == (named, budget, 3), name
        assert sizes.system + sizes.pinned + sizes.turn_in_progress + sizes.priming > sizes.budget
        assert f"system {sizes.system} + pinned {sizes.pinned} " in str(error.value)


def test_the_newest_turns_survive_a_long_session_of_short_requests():
    """3,000 short turns of user requests that state rules: by turn 2,500 the
    window once held one merged user message of ~779 old requests and no
    assistant or tool message. The newest three turns must be there whole."""
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(2_500):
        messages.append({"role": "user", "content": f"Please ensure step {turn} must pass; retry it."})
        messages.append({"role": "assistant", "content": f"On it: step {turn}."})
        messages.append({"role": "user", "content": "ok"})
        messages.append({"role": "assistant", "content": "Done."})
    messages.append({"role": "user", "content": "Now the next one."})
    chosen = WeightedWindow().select(messages, 8000)
    # The turn in progress and the two turns before it (a user message and its answer each).
    assert set(range(len(messages) - 5, len(messages))) <= set(chosen.kept)
    sent_roles = [m["role"] for m in chosen.messages]
    assert sent_roles[-5:] == ["user", "assistant", "user", "assistant", "user"]
    # The first five rules are anchored; every other old request is weighed
    # down by its age, so the rest of the window is a recent stretch.
    anchors = [1, 5, 9, 13, 17]
    assert chosen.kept[:6] == (0, *anchors)
    assert min(chosen.kept[6:]) > len(messages) - 2_500


@pytest.mark.parametrize("impl", ["extension", "reference"])
def test_tagged_messages_age_slower_than_untagged_ones(impl):
    """A rule stated an hour ago outweighs a fresh untagged note; a rule
    stated two days ago does not (3 * 0.999**60 > 0.85**0.5 > 3 * 0.999**2880)."""
    cls = reference.WeightedWindow if impl == "reference" else WeightedWindow
    now = START + 3 * 86_400

    def history(rule_age_minutes: float) -> list[dict]:
        said = now - 60 * rule_age_minutes
        return [
            {"role": "user", "content": "You must keep the ledger balanced.", "timestamp": said},
            {"role": "assistant", "content": "Noted.", "timestamp": said},
            {"role": "user", "content": "the build is green now, by the way", "timestamp": now - 30},
            {"role": "assistant", "content": "Good.", "timestamp": now - 300},
            {"role": "user", "content": "Next?", "timestamp": now},
        ]

    policy = cls(max_anchors=0, recent_turns=0, tool_result_cap=None)
    for age, rule_wins in ((60, True), (2 * 1440, False)):
        messages = history(age)
        mandatory = TOK.count_messages(messages[4:])
        room = max(TOK.count_message(messages[0]), TOK.count_message(messages[2]))
        chosen = policy.select(messages, mandatory + room, now=now)
        assert (0 in chosen.kept) == rule_wins, age
        assert (2 in chosen.kept) != rule_wins, age
