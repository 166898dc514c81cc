"""One policy shape: ``policy.select(messages_or_log, budget, *, now=None)``
for all three, a frozen ``Selection`` whose keys index the input (a list's
indices, a log's seqs), and a log that is one more input to a policy."""

from __future__ import annotations

import dataclasses
import pickle
import typing

import pytest

from agent_sessions import generate, turn_in_progress
from context_core import (
    Budget,
    InvalidInputError,
    InvalidTypeError,
    MessageLog,
    Policy,
    PriorityAssembly,
    Selection,
    ShapeHistory,
    Tokenizer,
    WeightedWindow,
    shape_history,
)
from context_core.reference import select as reference
from context_core.select import SelectionBreakdown, Tagger, ToolResultCut


def short_turn_session() -> list[dict]:
    """An agent session cut where the turn in progress is small, so every
    budget here can hold it and something must still be dropped."""
    session = generate(400, "openai", seed=3)
    tokens = Tokenizer()
    for end in reversed(session.calls):
        start = turn_in_progress(session.messages[:end])
        if end > 120 and tokens.count_messages(session.messages[start:end]) < 1_500:
            return session.messages[:end]
    raise AssertionError("no short turn")


MESSAGES = short_turn_session()
NOW = 1_700_000_000.0 + 60 * 400


def every_policy() -> dict[str, Policy]:
    """One of each; the log's headers hold whole tool results, so no cap."""
    return {
        "ShapeHistory": ShapeHistory(summary="Earlier: the refund worker was fixed.", tool_result_cap=None),
        "WeightedWindow": WeightedWindow(tool_result_cap=None),
        "PriorityAssembly": PriorityAssembly(anchoring=True, tool_result_cap=None),
    }


@pytest.mark.parametrize("name", sorted(every_policy()))
@pytest.mark.parametrize("budget", [3_000, 12_000, 10**9])
def test_every_policy_takes_the_same_call(name, budget):
    """The three are interchangeable: the same call, the same kind of answer,
    whose keys index the messages it chose from."""
    policy = every_policy()[name]
    messages = MESSAGES
    chosen = policy.select(messages, budget, now=NOW)
    assert chosen.dropped or budget == 10**9
    assert isinstance(chosen, Selection)
    assert isinstance(chosen.breakdown, SelectionBreakdown)
    assert chosen.breakdown.total <= budget
    assert list(chosen.kept) == sorted(set(chosen.kept))
    assert set(chosen.kept).isdisjoint(chosen.dropped)
    assert sorted(chosen.kept + chosen.dropped) == list(range(len(messages)))
    assert all(isinstance(cut, ToolResultCut) and cut.index in chosen.kept for cut in chosen.truncated)
    # A Budget is a budget too: its messages() share of the window.
    window = Budget(window=200_000)
    assert (
        policy.select(messages, window, now=NOW).kept
        == policy.select(messages, window.messages(), now=NOW).kept
    )


def test_a_selection_is_frozen():
    chosen = WeightedWindow().select(MESSAGES, 4_000, now=NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chosen.kept = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        chosen.breakdown.total = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        chosen.kept.append(1)  # type: ignore[attr-defined]
    assert isinstance(chosen.dropped, tuple)
    assert isinstance(chosen.changes, tuple)


def test_shape_history_is_the_policy_in_one_call():
    messages = MESSAGES
    for budget in (2_000, 6_000, 10**9):
        one = shape_history(messages, budget, keep_last=8, min_keep=2, summary="s")
        other = ShapeHistory(keep_last=8, min_keep=2, summary="s").select(messages, budget)
        assert one == other
        assert one.dropped == other.dropped


@pytest.mark.parametrize("name", sorted(every_policy()))
@pytest.mark.parametrize("budget", [3_000, 12_000, 10**9])
def test_a_log_is_one_more_input(tmp_path, name, budget):
    """From a log, a policy chooses what it chooses from the log's context
    view, and names the kept and dropped messages by their seqs."""
    policy = every_policy()[name]
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        seqs = log.append_many(MESSAGES[:40])
        summary = log.add_summary("The user fixed the retry cap.", covers=(seqs[1], seqs[20]))
        log.append_many(MESSAGES[40:])
        view = log.context_view()
        nodes = [seq for seq, _ in log._view()]
        assert summary in nodes
        from_view = policy.select(view, budget, now=NOW)
        from_log = policy.select(log, budget, now=NOW)
        assert from_log.messages == from_view.messages
        # (The log knows a summary node from a system message; the sections may differ.)
        assert from_log.breakdown.total == from_view.breakdown.total
        assert from_log.kept == tuple(nodes[i] for i in from_view.kept)
        assert from_log.dropped == tuple(nodes[i] for i in from_view.dropped)
        for seq in from_log.kept:
            assert seq in nodes
        assert set(from_log.kept).isdisjoint(from_log.dropped)


def test_the_log_window_lists_what_it_dropped_only_when_asked(tmp_path):
    """The weighted window over a log reads headers, never the whole view;
    its dropped seqs are listed on first read, and then kept."""
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(MESSAGES)
        chosen = WeightedWindow(tool_result_cap=None).select(log, 3_000, now=NOW)
        first = chosen.dropped
        assert first
        assert first is chosen.dropped
        assert sorted(first + chosen.kept) == list(range(len(MESSAGES)))


def test_a_log_holds_its_input(tmp_path):
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(MESSAGES[:10])
        with pytest.raises(InvalidInputError, match="append it"):
            PriorityAssembly().select(log, 8_000, current_input="next")


def test_a_log_in_another_encoding_is_refused(tmp_path):
    with MessageLog.open(tmp_path / "log", create=True, encoding="cl100k_base", durability="never") as log:
        log.append({"role": "user", "content": "hello"})
        with pytest.raises(InvalidInputError, match="cl100k_base"):
            WeightedWindow().select(log, 8_000)


@pytest.mark.parametrize("name", ["ShapeHistory", "WeightedWindow", "PriorityAssembly"])
def test_the_reference_twins_take_the_same_call(name):
    ours = every_policy()[name]
    twin = {
        "ShapeHistory": reference.ShapeHistory(
            summary="Earlier: the refund worker was fixed.", tool_result_cap=None
        ),
        "WeightedWindow": reference.WeightedWindow(tool_result_cap=None),
        "PriorityAssembly": reference.PriorityAssembly(anchoring=True, tool_result_cap=None),
    }[name]
    for budget in (3_000, 12_000):
        one, other = ours.select(MESSAGES, budget, now=NOW), twin.select(MESSAGES, budget, now=NOW)
        assert (one.messages, one.kept, one.dropped, one.breakdown) == (
            other.messages,
            other.kept,
            other.dropped,
            other.breakdown,
        )
        fields = ("stage", "index", "action", "reason")
        assert [tuple(getattr(c, f) for f in fields) for c in one.changes] == [
            tuple(getattr(c, f) for f in fields) for c in other.changes
        ]


def test_the_log_windows_dropped_is_the_view_it_chose_from(tmp_path):
    """Listed on first read, but from the view as it was: the log may have
    moved on (appended, rewound) or been closed since."""
    with MessageLog.open(tmp_path / "plain", create=True, durability="never") as log:
        log.append_many(MESSAGES)
        plain = WeightedWindow(tool_result_cap=None).select(log, 3_000, now=NOW)
        log.rewind(3)
        log.append({"role": "user", "content": "a new branch"})
    assert sorted(plain.dropped + plain.kept) == list(range(len(MESSAGES)))
    with MessageLog.open(tmp_path / "branched", create=True, durability="never") as log:
        log.append_many(MESSAGES[:30])
        log.rewind(20)  # seqs 21..29 are off the active path
        log.append_many(MESSAGES[30:])
        view = [seq for seq, _ in log._view()]
        branched = WeightedWindow(tool_result_cap=None).select(log, 3_000, now=NOW)
        copied = pickle.loads(pickle.dumps(branched))  # before dropped is listed
    assert 25 not in view
    assert sorted(branched.dropped + branched.kept) == view
    assert copied.dropped == branched.dropped
    assert copied.kept == branched.kept


def test_from_a_log_every_key_is_a_seq(tmp_path):
    """Cut tool results and missing dependencies name seqs too, not places
    in the view (which a summary shifts)."""
    messages = [dict(m) for m in MESSAGES]
    tool = next(i for i, m in enumerate(messages) if i > 60 and m["role"] == "tool")
    messages[5] = {**messages[5], "id": "task-5"}
    messages[tool - 1] = {**messages[tool - 1], "depends_on": "task-5"}
    policy = PriorityAssembly(tool_result_cap=20)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        seqs = log.append_many(messages[:40])
        log.add_summary("Earlier work.", covers=(seqs[30], seqs[35]))
        log.append_many(messages[40:])
        nodes = [seq for seq, _ in log._view()]
        from_view = policy.select(log.context_view(), 6_000)
        from_log = policy.select(log, 6_000)
    assert from_view.truncated
    assert from_log.truncated == tuple(
        ToolResultCut(nodes[t.index], t.tokens, t.kept) for t in from_view.truncated
    )
    assert all(from_log.kept.index(t.index) >= 0 for t in from_log.truncated)
    assert from_log.missing_dependencies == tuple(
        (nodes[m], ref) for m, ref in from_view.missing_dependencies
    )
    assert nodes != list(range(len(nodes)))  # the summary shifted the places: keys differ from them


def test_a_log_window_refuses_its_own_tagger(tmp_path):
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(MESSAGES[:20])
        with pytest.raises(InvalidInputError, match="context_view"):
            WeightedWindow(tagger=Tagger(constraint_keywords=["banana"])).select(log, 8_000)


def test_a_selection_pickles_compares_and_does_not_hash():
    chosen = PriorityAssembly(tool_result_cap=20).select(MESSAGES, 6_000)
    assert chosen.truncated
    assert chosen.changes
    again = pickle.loads(pickle.dumps(chosen))
    assert again == chosen
    assert again.changes == chosen.changes
    assert again.kept == chosen.kept
    assert again.truncated == chosen.truncated
    assert again.breakdown == chosen.breakdown
    with pytest.raises(TypeError):
        hash(chosen)


def test_the_policies_signatures_resolve_at_run_time():
    for function in (ShapeHistory.select, WeightedWindow.select, PriorityAssembly.select, shape_history):
        hints = typing.get_type_hints(function)
        assert hints["return"] is Selection


@pytest.mark.parametrize("bad", [None, 5, 2.5, object()])
def test_a_history_that_is_not_messages_is_the_librarys_type_error(bad):
    """None or a number raised Python's bare TypeError from deep inside;
    sanitize and count_messages raise InvalidTypeError for the same."""
    for policy in (PriorityAssembly(), ShapeHistory(), WeightedWindow()):
        with pytest.raises(InvalidTypeError, match="messages must be a list"):
            policy.select(bad, 1000)


@pytest.mark.parametrize("policy", [WeightedWindow, PriorityAssembly])
@pytest.mark.parametrize("source", ["list", "log"])
def test_a_short_reply_left_out_where_keeping_it_would_not_fit(tmp_path, policy, source):
    """A short Anthropic reply before the input, kept, makes the repair open
    the history with a user turn of its own, more than the reply: taking
    that excess off the budget left less than the input needs, and a
    budget a little over the input alone was refused (once in every few
    tokens of room). Leaving the reply out fits: every budget from the
    input's size on gives a window within it."""
    history = [
        {"role": "user", "content": "refund " * 1_700},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": "refund " * 1_000},
    ]
    messages: object = history
    if source == "log":
        log = MessageLog.open(tmp_path / "log", create=True)
        log.append_many(history)
        messages = log
    alone = Tokenizer("o200k_base").count_messages(history[-1:])
    for spare in range(12):
        selection = policy(provider="anthropic").select(messages, alone + spare)
        assert selection.breakdown.total <= alone + spare
        assert selection.messages[-1] == history[-1]
