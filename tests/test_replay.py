"""Long agent sessions replayed turn by turn, as a server runs them: repair
the history, choose the context, send it. At every turn, for every policy and
both providers, the turn in progress is in the window (or, if it alone cannot
fit, ``OverBudgetError`` says so with its size) and the window is valid."""

from __future__ import annotations

import re

import pytest

import validators
from agent_sessions import generate, turn_in_progress
from context_core import (
    MessageLog,
    OverBudgetError,
    PriorityAssembly,
    Tokenizer,
    WeightedWindow,
    sanitize,
    shape_history,
)
from context_core._core import _analyze

TOK = Tokenizer()
CAP = 2000
BUDGETS = [4_000, 16_000, 64_000, 10**9]


def policies(provider: str, budget: int) -> dict:
    return {
        "shape_history": lambda h, now: shape_history(h, budget, provider=provider, summary="Earlier work."),
        "WeightedWindow": lambda h, now: WeightedWindow(provider=provider).select(h, budget, now=now),
        "PriorityAssembly": lambda h, now: PriorityAssembly(provider=provider, anchoring=True).select(
            h, budget, memories=["The refund worker retries on a queue."]
        ),
    }


def check_turn(name: str, select, history: list[dict], provider: str, budget: int, now: float) -> bool:
    """One turn: the window keeps the turn in progress and is valid; ``False``
    if the turn in progress alone is over the budget (and the error says so)."""
    repaired = sanitize(history, provider).messages
    start = turn_in_progress(repaired)
    try:
        chosen = select(repaired, now)
    except OverBudgetError as error:
        message = str(error)
    else:
        message = None
    if message is not None:
        sizes = [int(n) for n in re.findall(r"(?:system|pinned|progress) (\d+)", message)]
        assert sum(sizes) + 3 > budget, (name, message)
        tokens = _analyze(repaired, TOK, None, CAP, False).tokens
        in_progress = sum(tokens[start:]) if start is not None else 0
        assert sizes[2] == in_progress, (name, message)
        return False
    if start is not None:
        assert set(range(start, len(repaired))) <= set(chosen.kept), (name, len(history))
    assert chosen.breakdown.total <= budget
    sent = TOK.count_messages(chosen.messages)
    if chosen.system:
        sent += TOK.count_message({"role": "system", "content": chosen.system})
    assert chosen.breakdown.total == sent, name
    if provider == "anthropic":
        assert validators.anthropic(chosen.messages, chosen.system) == [], name
    else:
        assert validators.openai(chosen.messages) == [], name
    return True


def now_of(history: list[dict]) -> float | None:
    stamps = [m["timestamp"] for m in history if "timestamp" in m]
    return stamps[-1] + 5 if stamps else None


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("budget", BUDGETS)
def test_every_turn_of_a_session_keeps_the_turn_in_progress(provider, budget):
    session = generate(300, provider, seed=7)
    for name, select in policies(provider, budget).items():
        fitted = 0
        for end in session.calls:
            history = session.messages[:end]
            fitted += check_turn(name, select, history, provider, budget, now_of(history))
        if budget >= 16_000:
            assert fitted == len(session.calls), name  # no turn of this session is that large


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_thousand_message_session_without_timestamps(provider):
    session = generate(1_000, provider, seed=3, timestamps=False)
    for budget in (8_000, 10**9):
        for name, select in policies(provider, budget).items():
            for end in session.calls[::7] + session.calls[-2:]:
                check_turn(name, select, session.messages[:end], provider, budget, None)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_ten_thousand_message_session(provider):
    session = generate(10_000, provider, seed=5)
    for name, select in policies(provider, 32_000).items():
        for end in session.calls[:: len(session.calls) // 6] + session.calls[-1:]:
            history = session.messages[:end]
            check_turn(name, select, history, provider, 32_000, now_of(history))


def test_the_log_window_replays_as_the_messages_do(tmp_path):
    """The same session appended to a log turn by turn: its window from the
    headers keeps the turn in progress, and chooses what the list gives."""
    session = generate(400, "openai", seed=11)
    policy = WeightedWindow(tool_result_cap=None)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        written = 0
        for end in session.calls:
            log.append_many(session.messages[written:end])
            written = end
            history = session.messages[:end]
            now = now_of(history)
            try:
                expected = policy.select(history, 64_000, now=now)
            except OverBudgetError as error:
                with pytest.raises(OverBudgetError, match=re.escape(str(error))):
                    policy.select(log, 64_000, now=now)
                continue
            chosen = policy.select(log, 64_000, now=now)
            assert chosen.kept == expected.kept
            assert chosen.messages == expected.messages
            start = turn_in_progress(history)
            if start is not None:
                assert set(range(start, end)) <= set(chosen.kept)
