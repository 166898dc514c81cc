"""Context selection (mirrors rust/core/src/select): the invariants of every
policy on generated histories in both formats, agreement with the reference,
and each policy's own rules."""

from __future__ import annotations

import copy
import math
import re
import unicodedata

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import validators
from agent_sessions import turn_in_progress
from context_core import (
    Budget,
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    MessageLog,
    NothingToSendError,
    OverBudgetError,
    PriorityAssembly,
    ShapeHistory,
    Tokenizer,
    WeightedWindow,
    _selection,
    sanitize,
    shape_history,
)
from context_core._core import _analyze
from context_core._selection import count_sent
from context_core.reference import select as reference
from context_core.reference.tags import LOG as LOG_TAG
from context_core.select import METADATA_KEYS, _Backend, _laid_out_sanitizer

TOK = Tokenizer()

USER = [
    "You must use snake_case for every SQL column.",
    "禁止修改支付回调的事务边界，必须保证事务一致性。",
    "Please fix the failing migration.",
    "curl -X POST http://localhost:8080/callback -d '{\"id\": 1}'",
    "ok thanks",
    "What does the retry helper do?",
    'Traceback (most recent call last):\n  File "a.py", line 1\nValueError: bad',
]
ASSISTANT = [
    "<THINK> the failure comes from the retry cap </THINK> I will change it.",
    "Here is the patch.",
    "Done: 3 files changed.",
    "好的，我来修改。",
    "PLAN: Depends on: u0. Then rerun the suite.",
    "Blocked (DEPENDS_ON u1); depends on nothing else.",
]
# Tool output that reads like a rule: a tool cannot set the user's constraints.
TOOL_RULE = "warning: you must run the migration first (depends_on=u0)"
LONG = "line of tool output with some numbers 12345 and words\n" * 120


def tool_call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "run", "arguments": '{"cmd": "ls"}'}}


@st.composite
def history(draw, provider: str) -> list[dict]:
    messages: list[dict] = []
    clock = 1_700_000_000.0
    ids = 0
    if draw(st.booleans()):
        messages.append({"role": "system", "content": "You are a careful coding agent."})
    for turn in range(draw(st.integers(0, 8))):
        clock += draw(st.integers(0, 600))
        user = {"role": "user", "content": draw(st.sampled_from(USER)), "timestamp": clock, "id": f"u{turn}"}
        if draw(st.integers(0, 9)) == 0:
            user["pinned"] = True
        if draw(st.integers(0, 9)) == 0:
            user["tags"] = draw(st.lists(st.sampled_from(["constraint", "log", "pulse"]), max_size=2))
        if draw(st.integers(0, 4)) == 0:
            user["priority"] = draw(st.integers(-2, 2))
        messages.append(user)
        for _ in range(draw(st.integers(0, 2))):  # tool rounds
            ids += 1
            call_ids = [f"c{ids}_{k}" for k in range(draw(st.integers(1, 2)))]
            output = draw(st.sampled_from(["fine", LONG, "Exception in thread main\n\tat x", TOOL_RULE]))
            if provider == "openai":
                messages.append(
                    {"role": "assistant", "content": None, "tool_calls": [tool_call(i) for i in call_ids]}
                )
                messages.extend({"role": "tool", "tool_call_id": i, "content": output} for i in call_ids)
            else:
                blocks = (
                    [{"type": "thinking", "thinking": "plan", "signature": "s"}]
                    if draw(st.booleans())
                    else []
                )
                blocks += [
                    {"type": "tool_use", "id": i, "name": "run", "input": {"cmd": "ls"}} for i in call_ids
                ]
                messages.append({"role": "assistant", "content": blocks})
                results = [{"type": "tool_result", "tool_use_id": i, "content": output} for i in call_ids]
                messages.append({"role": "user", "content": results})
        if turn < 7 or draw(st.booleans()):
            reply = {"role": "assistant", "content": draw(st.sampled_from(ASSISTANT)), "id": f"a{turn}"}
            if turn and draw(st.integers(0, 3)) == 0:
                reply["depends_on"] = f"u{draw(st.integers(0, turn - 1))}"
            messages.append(reply)
    if draw(st.booleans()):
        messages.append({"role": "user", "content": draw(st.sampled_from(USER))})
    return messages


def check(result, messages: list[dict], budget: int, provider: str) -> None:
    """The invariants every policy keeps."""
    sent = result.messages
    total = TOK.count_messages(sent)
    if result.system:
        total += TOK.count_message({"role": "system", "content": result.system})
    assert result.breakdown.total == total
    assert total <= budget
    for i, message in enumerate(messages):
        if message.get("role") in ("system", "developer") or message.get("pinned"):
            assert i in result.kept, f"message {i} must be kept"
    start = turn_in_progress(messages)
    if start is not None:
        assert set(range(start, len(messages))) <= set(result.kept), "the turn in progress is kept"
    assert all(key not in m for m in sent for key in METADATA_KEYS)
    again = sanitize(sent, provider)
    assert not again.changed, [(c.action, c.reason) for c in again.changes]
    if provider == "anthropic":
        assert validators.anthropic(sent, result.system) == []
    else:
        assert validators.openai(sent) == []
    assert sorted(result.kept + result.dropped) == list(range(len(messages)))


def same(ours, theirs) -> None:
    assert ours.messages == theirs.messages
    assert ours.system == theirs.system
    assert ours.breakdown == theirs.breakdown
    assert ours.kept == theirs.kept
    assert ours.dropped == theirs.dropped
    assert ours.truncated == theirs.truncated
    assert ours.missing_dependencies == theirs.missing_dependencies
    assert ours.turns == theirs.turns


def both(run_ours, run_reference):
    try:
        ours = run_ours()
    except (OverBudgetError, NothingToSendError) as error:
        raised = error
    else:
        same(ours, run_reference())
        return ours
    with pytest.raises(type(raised), match=f"^{re.escape(str(raised))}$") as twin:
        run_reference()
    if isinstance(raised, NothingToSendError):
        assert (twin.value.kept, twin.value.budget) == (raised.kept, raised.budget)
        return None
    fields = ("system", "pinned", "turn_in_progress", "priming", "budget")
    assert [getattr(twin.value, f) for f in fields] == [getattr(raised, f) for f in fields]
    return None


budgets = st.integers(20, 3000)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@given(data=st.data(), cap=st.sampled_from([None, 50, 2000]), find_tags=st.booleans())
def test_analysis_agrees_with_reference(provider, data, cap, find_tags):
    """The analysis every policy reads: counts, tags, units and the queries the
    layout makes, Rust against the reference."""
    messages = data.draw(history(provider))
    ours = _analyze(messages, TOK, None, cap, find_tags)
    tagger = reference.Tagger() if find_tags else None
    theirs = reference.Analysis(messages, reference.CachedTokenizer(), tagger, cap)
    assert ours.units == theirs.units
    assert ours.tokens == theirs.tokens
    assert list(ours.tags) == theirs.tags
    assert ours.ids == theirs.ids
    assert ours.truncations == theirs.truncations
    for query in ("unit_count", "total_tokens", "first_turn", "turn_starts"):
        assert getattr(ours, query) == getattr(theirs, query), query
    assert ours.constraint_starts() == theirs.constraint_starts()
    units = data.draw(st.lists(st.integers(0, max(0, ours.unit_count - 1)), unique=True))
    if ours.unit_count:
        assert ours.spans(units) == theirs.spans(units)
    kept, dropped = ours.expand(units)
    assert (kept, dropped) == theirs.expand(units)
    assert sorted(kept + dropped) == list(range(len(messages)))
    assert ours.missing_dependencies(kept) == theirs.missing_dependencies(kept)
    assert ours.kept(sorted(units)) == theirs.kept(sorted(units))
    extra = {"role": "system", "content": "an extra"}
    items = [*sorted(units), extra] if ours.unit_count else [extra]
    laid_out, known, laid_units = ours.lay_out(items)
    assert (laid_out, known, laid_units) == theirs.lay_out(items)
    assert laid_out[-1] is extra
    assert known[-1] is None
    # Tool output is never a constraint or a task, whatever it says.
    for index, message in enumerate(messages):
        if message["role"] == "tool" or (
            isinstance(message["content"], list) and message["content"][0].get("type") == "tool_result"
        ):
            assert ours.tags[index] & ~LOG_TAG == 0


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@given(data=st.data(), budget=budgets)
def test_weighted_window(provider, data, budget):
    messages = data.draw(history(provider))
    before = copy.deepcopy(messages)
    result = both(
        lambda: WeightedWindow(provider=provider).select(messages, budget),
        lambda: reference.WeightedWindow(provider=provider).select(messages, budget),
    )
    assert messages == before
    if result is not None:
        check(result, messages, budget, provider)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@given(
    data=st.data(),
    budget=budgets,
    recent_turns=st.integers(0, 4),
    tag_decay=st.sampled_from([0.0, 0.5, 0.999, 1.0]),
    max_anchors=st.integers(0, 6),
    now=st.sampled_from([None, 1_700_000_000.0, 1_700_003_000.0]),
)
def test_weighted_window_with_any_recency_agrees_with_the_reference(
    provider, data, budget, recent_turns, tag_decay, max_anchors, now
):
    messages = data.draw(history(provider))
    options = {"recent_turns": recent_turns, "tag_decay": tag_decay, "max_anchors": max_anchors}
    result = both(
        lambda: WeightedWindow(provider=provider, **options).select(messages, budget, now=now),
        lambda: reference.WeightedWindow(provider=provider, **options).select(messages, budget, now=now),
    )
    if result is not None:
        check(result, messages, budget, provider)


@pytest.mark.parametrize("budget", [300, 8000])
def test_a_long_history_is_weighed_in_slices_as_the_reference_sorts_it_whole(budget):
    """Over 256 units the window orders them a slice at a time; the result
    must be the reference's full sort, at a budget that fills in the first
    slice and one that fills after many short messages."""
    messages = []
    for i in range(1200):
        if i % 9 == 0:
            messages.append({"role": "user", "content": f"You must keep rule {i} in mind."})
        elif i % 2:
            messages.append({"role": "assistant", "content": "ok" if i % 5 else f"Step {i} done: " * 8})
        else:
            messages.append({"role": "user", "content": f"note {i}"})
    result = both(
        lambda: WeightedWindow().select(messages, budget),
        lambda: reference.WeightedWindow().select(messages, budget),
    )
    assert result is not None
    check(result, messages, budget, "openai")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@given(data=st.data(), budget=budgets, keep_last=st.integers(1, 20), min_keep=st.integers(0, 5))
def test_shape_history(provider, data, budget, keep_last, min_keep):
    messages = data.draw(history(provider))
    summary = data.draw(st.sampled_from([None, "The user set naming rules; the migration is half done."]))
    result = both(
        lambda: shape_history(messages, budget, keep_last, min_keep, summary, provider=provider),
        lambda: reference.shape_history(messages, budget, keep_last, min_keep, summary, provider=provider),
    )
    if result is not None:
        check(result, messages, budget, provider)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@given(data=st.data(), budget=budgets, anchoring=st.booleans())
def test_context_builder(provider, data, budget, anchoring):
    messages = data.draw(history(provider))
    extras = {
        "global_summary": data.draw(st.sampled_from([None, "We are migrating the payment service."])),
        "memories": data.draw(
            st.lists(st.sampled_from(["db: postgres 15", "lang: java17", "naming: snake_case"]), max_size=3)
        ),
        "segment_summaries": data.draw(
            st.lists(st.sampled_from(["Fixed the retry cap.", "Wrote tests."]), max_size=3)
        ),
    }
    result = both(
        lambda: PriorityAssembly(anchoring=anchoring, provider=provider).select(messages, budget, **extras),
        lambda: reference.PriorityAssembly(anchoring=anchoring, provider=provider).select(
            messages, budget, **extras
        ),
    )
    if result is not None:
        check(result, messages, budget, provider)


# -- each policy's own rules ------------------------------------------------------------------


def chat(n: int, *, constraint_first: bool = True) -> list[dict]:
    messages = [{"role": "system", "content": "You are a coding agent."}]
    if constraint_first:
        messages.append({"role": "user", "content": "You must use snake_case for SQL columns."})
        messages.append({"role": "assistant", "content": "Understood."})
    for i in range(n):
        messages.append({"role": "user", "content": f"curl http://localhost/{i} " + "noise " * 40})
        messages.append({"role": "assistant", "content": f"Step {i} done. " + "detail " * 40})
    messages.append({"role": "user", "content": "Now write the migration."})
    return messages


def test_shape_history_fast_path_and_turns():
    messages = chat(30)
    everything = shape_history(messages, 100_000)
    assert everything.turns is None
    assert everything.messages == messages
    shaped = shape_history(messages, 1200, summary="Earlier: setup work.")
    assert shaped.turns is not None
    assert 3 <= shaped.turns <= 20
    assert shaped.kept[:2] == (0, 1)  # system and first user message
    assert any(
        m["content"].startswith("Summary of the conversation so far")
        for m in shaped.messages
        if m["role"] == "system"
    )
    calls = []
    shape_history(messages, 1200, summary=lambda middle: calls.append(len(middle)) or "summary")
    assert len(calls) == 1
    assert calls[0] > 0


def test_weighted_window_keeps_the_early_constraint():
    messages = chat(60)
    result = WeightedWindow().select(messages, 800)
    assert 1 in result.kept  # the constraint, stated first
    assert messages[-1] in result.messages or len(messages) - 1 in result.kept
    naive = messages[-8:]
    assert "snake_case" not in str(naive)


def test_weighted_window_reports_missing_dependencies():
    messages = [
        {"role": "user", "content": "Find the bug. " + "context " * 200, "id": "task"},
        {"role": "assistant", "content": "<THINK> depends_on=task: the loop is wrong </THINK> Fixed."},
        {"role": "user", "content": "thanks"},
    ]
    result = WeightedWindow().select(messages, 60)
    assert 0 in result.dropped
    assert result.missing_dependencies == ((1, "task"),)


def test_tool_results_are_capped_and_reported():
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": LONG * 5},
        {"role": "user", "content": "what happened?"},
    ]
    result = WeightedWindow(tool_result_cap=100).select(messages, 5000)
    (cut,) = result.truncated
    assert cut.index == 2
    assert cut.tokens > 100 >= cut.kept
    assert "[truncated" in result.messages[2]["content"]
    assert messages[2]["content"] == LONG * 5  # the input is untouched
    assert WeightedWindow(tool_result_cap=None).select(messages, 50_000).truncated == ()


def test_a_tool_messages_output_in_parts_is_capped_part_by_part(tmp_path):
    """An OpenAI tool message may give its output as a list of text parts:
    each over the cap is cut, as a string's is and as an Anthropic result's
    parts are (it went whole before), by every policy, its twin alike, and
    from a log's headers as from the list."""
    parts = [{"type": "text", "text": LONG * 5}, {"type": "text", "text": "exit 0"}]
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": parts},
        {"role": "user", "content": "what happened?"},
    ]
    ours = both(
        lambda: WeightedWindow(tool_result_cap=100).select(messages, 5000),
        lambda: reference.WeightedWindow(tool_result_cap=100).select(messages, 5000),
    )
    (cut,) = ours.truncated
    assert cut.index == 2
    assert cut.tokens > 100 >= cut.kept
    sent = ours.messages[2]["content"]
    assert "[truncated" in sent[0]["text"]
    assert sent[1] == parts[1]
    assert messages[2]["content"] == parts  # the input is untouched
    for policy in (PriorityAssembly(tool_result_cap=100), ShapeHistory(tool_result_cap=100)):
        assert policy.select(messages, 5000).truncated == ours.truncated
    assert validators.openai(ours.messages) == []
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append_many(messages)
        for policy in (WeightedWindow(tool_result_cap=100), PriorityAssembly(tool_result_cap=100)):
            from_log, from_list = policy.select(log, 5000), policy.select(messages, 5000)
            assert (from_log.messages, from_log.truncated) == (from_list.messages, from_list.truncated)


def test_builder_sections_and_shares():
    messages = chat(40)
    memories = [f"memory {i}: " + "fact " * 30 for i in range(20)]
    result = PriorityAssembly(anchoring=True).select(
        messages,
        2000,
        global_summary="Migration project.",
        memories=memories,
        segment_summaries=["seg one", "seg two"],
    )
    b = result.breakdown
    assert b.total <= 2000
    assert b.memories > 0
    assert b.pinned + b.global_summary + b.memories <= 0.8 * 2000 + 50  # memories stop at 80%
    assert b.log_line().startswith("pinned=")
    assert b.log_line().endswith("/2000")
    constraints = [
        m for m in result.messages if m["role"] == "system" and "Constraints to keep" in m["content"]
    ]
    assert constraints or "Constraints to keep" in result.messages[0]["content"]


def test_pinned_over_budget_is_a_clear_error():
    messages = [{"role": "user", "content": "x " * 500, "pinned": True}, {"role": "user", "content": "go"}]
    with pytest.raises(OverBudgetError, match=r"pinned \d+ .* > budget 100"):
        WeightedWindow().select(messages, 100)
    with pytest.raises(OverBudgetError):
        PriorityAssembly().select(messages, 100)


def test_bad_arguments():
    with pytest.raises(InvalidTypeError):
        WeightedWindow().select([{"role": "user", "content": "x", "pinned": "yes"}], 100)
    with pytest.raises(InvalidTypeError):
        shape_history("not messages", 100)
    with pytest.raises(InvalidTypeError):
        WeightedWindow().select([], 10.5)


# The extension-backed policies and their reference twins refuse the same arguments alike.
IMPLEMENTATIONS = {
    "extension": (WeightedWindow, PriorityAssembly, shape_history),
    "reference": (reference.WeightedWindow, reference.PriorityAssembly, reference.shape_history),
}
implementations = pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
NOT_COUNTS = [
    (-1, InvalidInputError, "must be a non-negative int, got -1"),
    (True, InvalidTypeError, "must be int, not bool"),
    (1.5, InvalidTypeError, "must be int, not float"),
    ("3", InvalidTypeError, "must be int, not str"),
    (None, InvalidTypeError, "must be int, not NoneType"),
]
NOT_CAPS = [
    (0, InvalidInputError, "tool_result_cap must be a positive int or None, got 0"),
    (-5, InvalidInputError, "got -5"),
    (2000.0, InvalidTypeError, "not float"),
    (False, InvalidTypeError, "not bool"),
]
NOT_PROVIDERS = [
    ("gemini", InvalidInputError, 'provider must be "openai" or "anthropic", got \'gemini\''),
    (None, InvalidTypeError, 'provider must be "openai" or "anthropic", not NoneType'),
]


def refused(error: type, match: str):
    assert issubclass(error, ContextCoreError)
    assert issubclass(error, ValueError if error is InvalidInputError else TypeError)
    return pytest.raises(error, match=re.escape(match))


@implementations
@pytest.mark.parametrize(
    ("name", "value", "error", "match"),
    [("max_anchors", *case) for case in NOT_COUNTS]
    + [("tool_result_cap", *case) for case in NOT_CAPS]
    + [("provider", *case) for case in NOT_PROVIDERS]
    + [
        ("decay", -0.5, InvalidInputError, "decay must be in [0, 1], got -0.5"),
        ("decay", 1.5, InvalidInputError, "decay must be in [0, 1], got 1.5"),
        ("system", "5", InvalidTypeError, "system must be a number, not str"),
        ("constraint", True, InvalidTypeError, "constraint must be a number, not bool"),
        ("evidence", None, InvalidTypeError, "evidence must be a number, not NoneType"),
        ("pulse", float("inf"), InvalidInputError, "pulse must be finite, got inf"),
        ("log", float("nan"), InvalidInputError, "log must be finite, got nan"),
        ("decay", float("nan"), InvalidInputError, "decay must be finite, got nan"),
    ],
)
def test_weighted_window_refuses_bad_arguments(impl, name, value, error, match):
    window_class = IMPLEMENTATIONS[impl][0]
    with refused(error, match):
        window_class(**{name: value})


@implementations
@pytest.mark.parametrize(
    ("now", "error", "match"),
    [
        ("1700000000", InvalidTypeError, "now must be a number (epoch seconds) or None, not str"),
        (True, InvalidTypeError, "not bool"),
        (float("nan"), InvalidInputError, "now must be finite, got nan"),
    ],
)
def test_weighted_window_refuses_a_bad_now(impl, now, error, match):
    window_class = IMPLEMENTATIONS[impl][0]
    with refused(error, match):
        window_class().select(chat(3), 5000, now=now)


@implementations
@pytest.mark.parametrize(
    ("name", "value", "error", "match"),
    [("budget", *case) for case in NOT_COUNTS[:2]]
    + [
        ("budget", -1, InvalidInputError, "budget must be non-negative, got -1"),
        ("budget", 1.5, InvalidTypeError, "budget must be int or Budget, not float"),
        ("budget", True, InvalidTypeError, "budget must be int or Budget, not bool"),
        ("anchoring", "yes", InvalidTypeError, "anchoring must be bool, not str"),
        ("anchoring", 1, InvalidTypeError, "anchoring must be bool, not int"),
    ]
    + [("tool_result_cap", *case) for case in NOT_CAPS]
    + [("provider", *case) for case in NOT_PROVIDERS],
)
def test_priority_assembly_refuses_bad_arguments(impl, name, value, error, match):
    builder_class = IMPLEMENTATIONS[impl][1]
    if name == "budget" and error is InvalidInputError:
        match = "budget must be non-negative, got -1"
    elif name == "budget":
        match = f"budget must be int or Budget, not {type(value).__name__}"
    with refused(error, match):
        if name == "budget":
            builder_class().select(chat(3), value)
        else:
            builder_class(**{name: value})


@implementations
@pytest.mark.parametrize("name", ["memories", "segment_summaries"])
@pytest.mark.parametrize("value", [None, 3, "one text"])
def test_priority_assembly_refuses_texts_that_are_not_a_sequence(impl, name, value):
    """Not a sequence of str (``None`` included): the library's type error,
    never Python's own from iterating it."""
    builder_class = IMPLEMENTATIONS[impl][1]
    with refused(InvalidTypeError, f"{name} must be a sequence of str, not {type(value).__name__}"):
        builder_class().select(chat(3), 1_000, **{name: value})


@implementations
@pytest.mark.parametrize(
    ("name", "value", "error", "match"),
    [(name, *case) for name in ("keep_last", "min_keep") for case in NOT_COUNTS]
    + [("tool_result_cap", *case) for case in NOT_CAPS]
    + [("provider", *case) for case in NOT_PROVIDERS],
)
def test_shape_history_refuses_bad_arguments(impl, name, value, error, match):
    shape = IMPLEMENTATIONS[impl][2]
    with refused(error, match):
        shape(chat(3), 5000, **{name: value})


@implementations
def test_numpy_integers_are_counts(impl):
    window_class, builder_class, shape = IMPLEMENTATIONS[impl]
    messages = chat(12)
    window = window_class(max_anchors=np.int64(1), tool_result_cap=np.int32(50))
    assert window.max_anchors == 1
    assert type(window.max_anchors) is int
    same(
        window.select(messages, np.int64(900)),
        window_class(max_anchors=1, tool_result_cap=50).select(messages, 900),
    )
    same(builder_class().select(messages, np.uint16(900)), builder_class().select(messages, 900))
    same(
        shape(messages, np.int64(900), keep_last=np.int64(4), min_keep=np.uint8(1)),
        shape(messages, 900, keep_last=4, min_keep=1),
    )
    # A numpy float is a number where a weight is one.
    same(
        window_class(decay=np.float32(0.5)).select(messages, 900),
        window_class(decay=0.5).select(messages, 900),
    )


@implementations
def test_counts_beyond_a_machine_word_are_taken(impl):
    """More anchors or turns than the history holds are the same as all of them."""
    window_class, _builder_class, shape = IMPLEMENTATIONS[impl]
    messages = chat(12)
    everything = window_class(max_anchors=len(messages)).select(messages, 900)
    for anchors in (2**63, 2**70):
        same(window_class(max_anchors=anchors).select(messages, 900), everything)
    shaped = shape(messages, 900, keep_last=2**70, min_keep=2**70)
    within = shape(messages, 900, keep_last=len(messages), min_keep=len(messages))
    assert (shaped.kept, shaped.turns) == (within.kept, within.turns)
    # Every turn fits, the greeting before the first does not: the search stops at once, at
    # keep_last, the kernel's answer for any keep_last past the turns.
    greeted = [messages[0], {"role": "assistant", "content": "Hello! How can I help?"}, *messages[1:]]
    almost = TOK.count_messages(greeted) - 1
    assert shape(greeted, almost, keep_last=20).turns == 20
    assert shape(greeted, almost, keep_last=2**70).turns == 2**70
    assert shape(greeted, almost, keep_last=2**70).kept == shape(greeted, almost, keep_last=20).kept


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@given(
    data=st.data(),
    keep_last=st.integers(0, 40),
    min_keep=st.integers(0, 40),
    summary_tokens=st.sampled_from([None, 5, 400]),
)
def test_shape_asks_the_kernel_for_at_most_the_turns(provider, data, keep_last, min_keep, summary_tokens):
    """Given no more than the number of turns, the kernel's answer is the one
    it gives for any keep_last and min_keep."""
    messages = data.draw(history(provider))
    if data.draw(st.booleans()):  # what every N past the turns drops: a greeting before the first
        start = 1 if messages and messages[0]["role"] == "system" else 0
        messages.insert(start, {"role": "assistant", "content": data.draw(st.sampled_from(ASSISTANT))})
    total = TOK.count_messages(messages)
    budget = data.draw(st.integers(0, total + 5) | st.integers(max(0, total - 300), total))
    for analysis in (
        _analyze(messages, TOK, None, 2000, False),
        reference.Analysis(messages, reference.CachedTokenizer(), None, 2000),
    ):
        try:
            expected = analysis.shape(budget, keep_last, min_keep, summary_tokens)
        except OverBudgetError as error:
            with pytest.raises(OverBudgetError, match=f"^{re.escape(str(error))}$"):
                _selection.shape(analysis, budget, keep_last, min_keep, summary_tokens)
            continue
        assert tuple(_selection.shape(analysis, budget, keep_last, min_keep, summary_tokens)) == tuple(
            expected
        )


# -- budgets -------------------------------------------------------------------------------------


def test_selection_accepts_a_budget():
    budget = Budget(window=2000, soft_ratio=1.0, system_reserve=500)
    result = WeightedWindow().select(chat(30), budget)
    assert result.breakdown.budget == 1500
    assert result.breakdown.total <= 1500


# -- counting merged messages by their parts --------------------------------------------

join_texts = st.lists(
    st.sampled_from([*"ab Z9.?!)'/\n\r\t中文é-_:，？。ーﾟ٣", "\u3000", "\u0301", "🎉", "  ", "1234", "'s"]),
    max_size=8,
).map("".join)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base", "p50k_base", "r50k_base"])
@given(parts=st.lists(join_texts, min_size=2, max_size=4), role=st.sampled_from(["user", "assistant"]))
def test_a_merged_message_counts_as_if_counted_whole(encoding, parts, role):
    """count_sent adjusts part counts at each join; it must equal counting the
    merged text whole, whatever the parts end and start with."""
    from context_core._selection import TEXT_SEPARATOR

    backend = _Backend(Tokenizer(encoding), None)
    laid_out = [{"role": role, "content": part} for part in parts]
    merged = {"role": role, "content": TEXT_SEPARATOR.join(parts)}
    final = [{"role": "system", "content": "be brief"}, merged]
    laid_out = [final[0], *laid_out]
    assert count_sent(backend, laid_out, final) == backend.count_messages(final)


def _dangling_call(call_id: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(call_id)]}


merge_runs = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["system", "user", "assistant"]), st.lists(join_texts, min_size=1, max_size=3)
        ),
        # Messages sanitize changes otherwise: a call with no result, a result with no call.
        st.just(("dangling", [])),
        st.just(("orphan", [])),
    ),
    min_size=1,
    max_size=5,
)


def _merge_history(runs: list[tuple[str, list[str]]]) -> list[dict]:
    messages: list[dict] = []
    for n, (role, texts) in enumerate(runs):
        if role == "dangling":
            messages.append(_dangling_call(f"c{n}"))
        elif role == "orphan":
            messages.append({"role": "tool", "tool_call_id": f"gone{n}", "content": "out"})
        else:
            messages += [{"role": role, "content": text} for text in texts]
    messages.append({"role": "user", "content": "and now?"})
    return messages


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@given(
    runs=merge_runs,
    extras=st.lists(join_texts, max_size=3),
    provider=st.sampled_from(["openai", "anthropic"]),
)
def test_the_extensions_count_of_a_repaired_answer_is_the_python_count(encoding, runs, extras, provider):
    """The laid-out answer, whatever sanitize changed (runs of one role
    merged, calls and results repaired), is counted in the extension: the
    same total as ``count_sent`` (the Python twin), and as counting the
    answer whole."""
    tokenizer = Tokenizer(encoding)
    backend = _Backend(tokenizer, None)
    messages = _merge_history(runs)
    analysis = backend.analyze(messages, None)
    extra = [{"role": "system", "content": "Memory: " + text} for text in extras]
    items = [*extra, *range(analysis.unit_count)]
    funnel = _laid_out_sanitizer(provider)
    (laid_out, _, _), result, tokens = analysis.lay_out_sanitized(items, funnel, tokenizer)
    (_, known, _), _, untouched = analysis.lay_out_sanitized(items, funnel)
    python = count_sent(backend, laid_out, result.messages, known)
    assert tokens is not None
    if untouched is not None:  # sanitize kept every message as it was
        assert tokens == untouched
    assert tokens + tokenizer.count_messages([]) == python == tokenizer.count_messages(result.messages)


def test_memory_and_summary_messages_are_made_and_counted_once():
    backend = _Backend(Tokenizer(), None)
    text = "Relevant memory: the deploy window is 02:00-04:00 UTC；周末不部署。"
    message, tokens = backend.system_message(text)
    assert message == {"role": "system", "content": text}
    assert tokens == Tokenizer().count_message(message)
    again, same = backend.system_message(text)
    assert again is message  # the repair pass finds its last window's start again
    assert same == tokens
    message["content"] += " (edited by a caller)"  # shared, though read-only by contract
    fresh, counted = backend.system_message(text)
    assert fresh == {"role": "system", "content": text}
    assert counted == tokens


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_policy_reusing_its_memory_messages_chooses_as_a_new_one(provider):
    # The same policy over a growing history with the same memories (an
    # agent loop's steps): each window is the one a new policy chooses.
    policy = PriorityAssembly(provider=provider)
    memories = ["the deploy window is 02:00-04:00 UTC", "Alice Chen owns the payments service"]
    history = chat(6)
    for step in range(6):
        history = [*history, {"role": "user", "content": f"step {step}: go on"}]
        ours = policy.select(history, 400, memories=memories, global_summary="so far: a deploy")
        fresh = PriorityAssembly(provider=provider).select(
            history, 400, memories=memories, global_summary="so far: a deploy"
        )
        assert ours.messages == fresh.messages
        assert ours.system == fresh.system
        assert ours.breakdown == fresh.breakdown
        history.append({"role": "assistant", "content": f"done {step}"})


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_answer_sanitize_left_alone_is_counted_with_its_extras(provider):
    # Nothing to repair, and an extra (a memory) with no known count: the
    # extension still counts the answer, the extra included.
    tokenizer = Tokenizer()
    backend = _Backend(tokenizer, None)
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "and now?"},
    ]
    analysis = backend.analyze(messages, None)
    items = [{"role": "system", "content": "x"}, *range(analysis.unit_count)]
    _, result, tokens = analysis.lay_out_sanitized(items, _laid_out_sanitizer(provider), tokenizer)
    assert tokens is not None
    assert tokens + tokenizer.count_messages([]) == tokenizer.count_messages(result.messages)


def test_a_repaired_answer_is_counted_exactly():
    # A run of user messages merged and a call with no result dropped, in
    # one answer: the merge counted from its parts, the rest from their
    # known counts, the total what counting the answer gives.
    tokenizer = Tokenizer()
    backend = _Backend(tokenizer, None)
    long_part = "Deploy the payments service, then run the tests. " * 40
    messages = [
        {"role": "user", "content": long_part},
        {"role": "user", "content": "必须保证事务一致性。"},
        _dangling_call("c1"),
        {"role": "user", "content": "and now?"},
    ]
    analysis = backend.analyze(messages, None)
    items = list(range(analysis.unit_count))
    _, result, tokens = analysis.lay_out_sanitized(items, _laid_out_sanitizer("openai"), tokenizer)
    assert {c.action for c in result.changes} >= {"merge", "drop_call"}
    assert [m["role"] for m in result.messages] == ["user"]
    assert result.messages[0]["content"] == "\n\n".join([long_part, "必须保证事务一致性。", "and now?"])
    assert tokens + tokenizer.count_messages([]) == tokenizer.count_messages(result.messages)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base", "p50k_base", "r50k_base"])
@given(parts=st.lists(join_texts, min_size=1, max_size=4))
def test_joined_parts_count_as_the_reference_counts_them_whole(encoding, parts):
    ours = Tokenizer(encoding)._count_joined(parts)
    whole = reference._shared_backend(encoding).count_joined(parts)
    assert ours is None or ours == whole
    simple = all(any(c.isalnum() for c in part) for part in parts[:-1]) and not any(
        unicodedata.combining(c) for part in parts for c in part
    )
    if simple:
        assert ours is not None, "after a letter or digit, with no combining mark, a tail is said simply"


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@given(parts=st.lists(join_texts, min_size=1, max_size=4))
def test_a_long_system_message_counts_as_if_counted_whole(encoding, parts):
    """A long system text (Anthropic's lifted summaries and memories) is
    counted by its blank-line parts; it must equal counting it whole,
    whatever the parts end and start with."""
    text = "\n\n".join(["Keep the order_id in every reply. " * 70, *parts])
    tokenizer = Tokenizer(encoding)
    message, tokens = _Backend(tokenizer, None).system_message(text)
    assert message == {"role": "system", "content": text}
    assert tokens == tokenizer.count_message(message)


def test_joined_parts_are_counted_from_their_parts():
    tokenizer = Tokenizer()
    parts = ["Deploy the service.", "必须保证事务一致性！", "then run the tests"]
    assert tokenizer._count_joined(parts) == tokenizer.count("\n\n".join(parts))
    assert tokenizer._count_joined(["…"]) == tokenizer.count("…")
    assert tokenizer._count_joined(["...", "no letter before the join"]) is None


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_cap_smaller_than_the_marker_is_refused_alike(impl):
    window = IMPLEMENTATIONS[impl][0]
    messages = [
        {"role": "user", "content": "run"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": LONG},
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(InvalidInputError, match=r"messages\[2\].*truncation marker alone"):
        window(tool_result_cap=5).select(messages, 10**6)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_shape_history_names_the_first_user_message_it_keeps(impl):
    shape = IMPLEMENTATIONS[impl][2]
    messages = [
        {"role": "user", "content": "a first request that is rather long " * 20},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "now this"},
    ]
    with pytest.raises(OverBudgetError) as error:
        shape(messages, 100, keep_last=1, min_keep=1)
    named = [int(n) for n in re.findall(r"(?:system|pinned|progress) (\d+)", str(error.value))]
    assert sum(named) + 3 > 100
    assert named[1] == TOK.count_message(messages[0])


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_budget_near_the_top_of_a_machine_word_keeps_everything(impl):
    """Memories fill to 80% and segments to 90% of the budget: shares of a
    budget near 2^64 must not wrap around (they once did, dropping them)."""
    _window_class, builder_class, _shape = IMPLEMENTATIONS[impl]
    messages = chat(6)
    # 80 times this is 2^64 + 64: wrapped, the memories' share would be 0.
    for budget in (2**64 // 80 + 1, 2**64 - 1):
        result = builder_class().select(
            messages, budget, memories=["the user prefers tabs"], segment_summaries=["they asked for retries"]
        )
        assert result.breakdown.memories > 0
        assert result.breakdown.segments > 0
        assert result.breakdown.recent > 0


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_an_int_past_a_floats_range_is_refused_as_input(impl):
    window_class, _builder_class, _shape = IMPLEMENTATIONS[impl]
    with pytest.raises(InvalidInputError, match="finite"):
        window_class(constraint=10**400)
    with pytest.raises(InvalidInputError, match="finite"):
        window_class().select(chat(2), 1000, now=10**400)


@pytest.mark.parametrize(
    "fields",
    [
        {"timestamp": math.inf},
        {"timestamp": math.nan},
        {"priority": -(10**400)},
        {"priority": math.nan},
    ],
)
def test_numbers_past_a_float_in_a_messages_fields_read_alike(fields):
    """A list's selection reads what a log refuses: an infinite or huge
    field is an infinity (NaN as given) in the extension and the twin alike."""
    messages = [{"role": "user", "content": "a", **fields}, {"role": "assistant", "content": "b"}]
    both(
        lambda: WeightedWindow().select(messages, 1000, now=100.0),
        lambda: reference.WeightedWindow().select(messages, 1000, now=100.0),
    )
    # The priority builder ranks by the largest priority a unit gives.
    history = [
        {"role": "user", "content": "first " * 8, **fields},
        {"role": "assistant", "content": "one " * 8},
        {"role": "user", "content": "second " * 8},
        {"role": "assistant", "content": "two " * 8},
        {"role": "user", "content": "now?"},
    ]
    for budget in (40, 60, 90):
        both(
            lambda b=budget: PriorityAssembly().select(history, b),
            lambda b=budget: reference.PriorityAssembly().select(history, b),
        )


def _aged(now: float, stamps: list[float], texts: list[str]) -> list[dict]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text, "timestamp": at}
        for i, (at, text) in enumerate(zip(stamps, texts, strict=True))
    ]
    return [*messages, {"role": "user", "content": "and now?", "timestamp": now}]


@pytest.mark.parametrize(
    ("weights", "now", "stamps"),
    [
        # A decay of 1 weighs 1 at any age, an infinite one too (exp(inf * 0) would be NaN).
        (
            {"decay": 1.0, "tag_decay": 1.0},
            1.7e308,
            [-1.7e308 if i % 3 == 0 else 1.7e308 - 60.0 * (40 - i) for i in range(40)],
        ),
        ({"decay": 1.0}, 1.7e308, [-1.7e308 if i % 3 == 0 else 1.7e308 - 60.0 * i for i in range(40)]),
        # A negative tag weight decayed to nothing is -0.0, which weighs what 0.0 does.
        (
            {"constraint": -1.0, "decay": 0.0, "tag_decay": 0.0},
            10_000.0,
            [100.0 + 100.0 * i for i in range(40)],
        ),
        ({"constraint": -1.0, "decay": 0.5, "tag_decay": 0.5}, 1e9, [100.0 * i for i in range(40)]),
        # The oldest ages a log's times allow (up to 1e11 seconds).
        ({"decay": 1.0, "tag_decay": 1.0}, 1e11 - 1.0, [60.0 * i for i in range(40)]),
        ({"decay": 0.5, "tag_decay": 0.999}, 1e11 - 1.0, [1e10 + 60.0 * i for i in range(40)]),
    ],
)
def test_extreme_ages_and_signed_zero_weights_agree_with_the_reference(tmp_path, weights, now, stamps):
    texts = [
        f"You must keep rule {i}." if i % 4 == 1 else f"plain note {i} " + "y" * (i % 7) for i in range(40)
    ]
    messages = _aged(now, stamps, texts)
    policy = WeightedWindow(max_anchors=0, recent_turns=0, **weights)
    twin = reference.WeightedWindow(max_anchors=0, recent_turns=0, **weights)
    for budget in (16, 120, 400):
        listed = both(
            lambda b=budget: policy.select(messages, b, now=now),
            lambda b=budget: twin.select(messages, b, now=now),
        )
        assert listed is not None
        with MessageLog.open(tmp_path / f"log-{budget}", create=True, durability="never") as log:
            if not all(0 <= m["timestamp"] < 1e11 for m in messages):
                with pytest.raises(InvalidInputError, match="seconds since the epoch"):
                    log.append_many(messages)  # a log holds times from 0 to 1e11 seconds
                continue
            log.append_many(messages)
            logged = policy.select(log, budget, now=now)
        assert logged.kept == listed.kept
        assert logged.breakdown == listed.breakdown


def test_a_negative_tag_weight_decayed_to_nothing_ties_with_zero_as_in_the_reference(tmp_path):
    """-0.0 (the rule's weight, -1, times a decay that underflowed) and the
    note's 0.0 tie, and a tie goes to the newer unit: here the rule."""
    messages = [
        {"role": "user", "content": "hello", "timestamp": 50.0},
        {"role": "assistant", "content": "plain note", "timestamp": 100.0},
        {"role": "user", "content": "You must keep it", "timestamp": 200.0},
        {"role": "assistant", "content": "ok", "timestamp": 300.0},
        {"role": "user", "content": "go on", "timestamp": 9_000.0},
    ]
    weights = {"constraint": -1.0, "decay": 0.0, "tag_decay": 0.0, "max_anchors": 0, "recent_turns": 0}
    for budget in (16, 24):
        listed = both(
            lambda b=budget: WeightedWindow(**weights).select(messages, b, now=10_000.0),
            lambda b=budget: reference.WeightedWindow(**weights).select(messages, b, now=10_000.0),
        )
        assert listed is not None
        with MessageLog.open(tmp_path / f"log-{budget}", create=True, durability="never") as log:
            log.append_many(messages)
            assert WeightedWindow(**weights).select(log, budget, now=10_000.0).kept == listed.kept


# -- a request needs a message ----------------------------------------------------------------


def _policies(impl: str, provider: str) -> dict:
    """One of each policy, the extension's or the twin's."""
    if impl == "extension":
        return {
            "shape": ShapeHistory(provider=provider),
            "weighted": WeightedWindow(provider=provider),
            "priority": PriorityAssembly(provider=provider),
        }
    return {
        "shape": reference.ShapeHistory(provider=provider),
        "weighted": reference.WeightedWindow(provider=provider),
        "priority": reference.PriorityAssembly(provider=provider),
    }


# (history, providers, budget, the keys kept before sanitize took them out, the error's words)
NOTHING_TO_SEND = {
    "a lone system message, lifted": (
        [{"role": "system", "content": "Be terse."}],
        ["anthropic"],
        1000,
        (0,),
        "sanitize took out every message the policy kept (system message lifted into the system prompt)",
    ),
    "two system messages, lifted": (
        [{"role": "system", "content": "Be terse."}, {"role": "developer", "content": "Use tabs."}],
        ["anthropic"],
        1000,
        (0, 1),
        "(system message lifted into the system prompt)",
    ),
    "a blank user message": (
        [{"role": "user", "content": " \n"}],
        ["openai", "anthropic"],
        1000,
        (0,),
        "(empty message)",
    ),
    "an empty assistant message": (
        [{"role": "assistant", "content": ""}],
        ["openai", "anthropic"],
        1000,
        (0,),
        "(empty message)",
    ),
    "a tool result without its call": (
        [{"role": "tool", "tool_call_id": "c9", "content": "exit 0"}],
        ["openai", "anthropic"],
        1000,
        (0,),
        "sanitize took out every message the policy kept (",
    ),
    "a reply the budget cannot hold": (
        [{"role": "assistant", "content": "a long answer " * 40}],
        ["openai", "anthropic"],
        30,
        (),
        "no message of the history fits in the budget of 30 tokens, and none had to be kept",
    ),
}


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("case", sorted(NOTHING_TO_SEND))
def test_a_history_that_would_send_no_message_is_refused(impl, case):
    """Both APIs refuse a request without messages: a history that had
    messages and would send none is refused, naming why, by every policy."""
    messages, providers, budget, kept, words = NOTHING_TO_SEND[case]
    for provider in providers:
        for name, policy in _policies(impl, provider).items():
            with pytest.raises(NothingToSendError, match=re.escape(words)) as caught:
                policy.select(messages, budget)
            error = caught.value
            assert isinstance(error, InvalidInputError)
            assert isinstance(error, ValueError)
            assert isinstance(error, ContextCoreError)
            assert str(error).startswith("nothing to send: "), (provider, name)
            assert (error.kept, error.budget) == (kept, budget), (provider, name)


@pytest.mark.parametrize("case", sorted(NOTHING_TO_SEND))
def test_the_refusal_of_nothing_to_send_agrees_with_the_reference(case):
    messages, providers, budget, _kept, _words = NOTHING_TO_SEND[case]
    for provider in providers:
        theirs = _policies("reference", provider)
        for name, ours in _policies("extension", provider).items():
            assert (
                both(
                    lambda p=ours: p.select(messages, budget),
                    lambda p=theirs[name]: p.select(messages, budget),
                )
                is None
            )


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_empty_history_selects_nothing_without_an_error(impl, provider):
    """Nothing was given, so nothing was dropped: the selection is empty
    (a caller adds the input; a Session refuses to send it as it is)."""
    for policy in _policies(impl, provider).values():
        result = policy.select([], 1000)
        assert (result.messages, result.system, result.kept, result.dropped) == ([], None, (), ())
        assert result.breakdown.total == 3


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_what_sanitize_can_make_sendable_is_sent(impl):
    """A lone reply gets Anthropic's leading user turn; a system message
    alone is an OpenAI request; a system message with the input is sent
    beside it: none of these is refused."""
    reply = [{"role": "assistant", "content": "Hi, how can I help?"}]
    for provider in ("openai", "anthropic"):
        for policy in _policies(impl, provider).values():
            result = policy.select(reply, 1000)
            assert result.messages[-1] == reply[0]
            check(result, reply, 1000, provider)
    system = [{"role": "system", "content": "Be terse."}]
    for policy in _policies(impl, "openai").values():
        assert policy.select(system, 1000).messages == system
    asked = [*system, {"role": "user", "content": "hi"}]
    for policy in _policies(impl, "anthropic").values():
        result = policy.select(asked, 1000)
        assert (result.messages, result.system) == ([asked[1]], "Be terse.")


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_an_input_given_beside_a_system_history_is_sent(impl):
    """PriorityAssembly's current_input makes a lone system message sendable
    to Anthropic; its memories alone (lifted into system) do not."""
    builder = IMPLEMENTATIONS[impl][1](provider="anthropic")
    system = [{"role": "system", "content": "Be terse."}]
    result = builder.select(system, 1000, current_input="hi", memories=["the user likes tabs"])
    assert result.messages == [{"role": "user", "content": "hi"}]
    assert result.kept == (0, 1)
    with pytest.raises(NothingToSendError, match="lifted into the system prompt") as caught:
        builder.select(system, 1000, memories=["the user likes tabs"])
    assert caught.value.kept == (0,)


# -- a message's weight ---------------------------------------------------------------------

NOT_FINITE_WEIGHTS = [
    (math.nan, "NaN"),
    (np.float64("nan"), "NaN"),
    (math.inf, "inf"),
    (-math.inf, "-inf"),
    (10**400, "inf"),
    (-(10**400), "-inf"),
]
NOT_FINITE_IDS = ["nan", "numpy-nan", "inf", "-inf", "10**400", "-10**400"]


def _weighed(weight) -> list[dict]:
    return [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second", "weight": weight},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "now?"},
    ]


#: The turn in progress, the reply priming and room for one more of ``_weighed``'s messages.
ROOM_FOR_ONE = 3 + TOK.count_message(_weighed(1.0)[4]) + max(map(TOK.count_message, _weighed(None)[:4]))


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize(("weight", "shown"), NOT_FINITE_WEIGHTS, ids=NOT_FINITE_IDS)
def test_a_weight_that_is_not_finite_is_refused_naming_its_message(impl, weight, shown):
    """As a log's append refuses it: NaN has no place in the window's order,
    and an infinity is no weight. Every policy reads a message's metadata,
    so every one refuses it (the builder's ``current_input`` too)."""
    for policy in _policies(impl, "openai").values():
        with pytest.raises(InvalidInputError, match=r"^messages\[2\](\.|: )weight: ") as caught:
            policy.select(_weighed(weight), 1000)
        assert str(caught.value).endswith(f"weight: must be a finite number, not {shown}")
        assert isinstance(caught.value, (ValueError, ContextCoreError))
    builder = IMPLEMENTATIONS[impl][1]()
    with pytest.raises(InvalidInputError, match=r"^messages\[5\](\.|: )weight: must be a finite number"):
        builder.select(_weighed(1.0), 1000, current_input={"role": "user", "content": "x", "weight": weight})


@pytest.mark.parametrize(("weight", "shown"), NOT_FINITE_WEIGHTS, ids=NOT_FINITE_IDS)
def test_a_weight_that_is_not_finite_is_refused_as_by_the_reference(weight, shown):
    ours, theirs = _policies("extension", "anthropic"), _policies("reference", "anthropic")
    for name in ours:
        with pytest.raises(InvalidInputError) as extension:
            ours[name].select(_weighed(weight), 1000)
        with pytest.raises(InvalidInputError) as twin:
            theirs[name].select(_weighed(weight), 1000)
        # The twin names the place as "messages[2]: weight", the extension "messages[2].weight".
        assert str(twin.value).replace("]: ", "].", 1) == str(extension.value)
        assert str(extension.value) == f"messages[2].weight: must be a finite number, not {shown}"


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_finite_weight_however_large_is_weighed(impl):
    """Finite weights are kept, past f32's range too (a list's are f64; a
    log, which keeps them in f32, refuses those at append)."""
    window = IMPLEMENTATIONS[impl][0](max_anchors=0, recent_turns=0)
    assert window.select(_weighed(1e300), ROOM_FOR_ONE).kept == (2, 4)
    assert window.select(_weighed(-1e300), ROOM_FOR_ONE).kept == (3, 4)  # the newest of the rest


def test_finite_weights_agree_with_the_reference():
    for weight in (1e300, -1e300, 0.0, -0.0, 5e-324, 3.5):
        both(
            lambda w=weight: WeightedWindow(max_anchors=0, recent_turns=0).select(_weighed(w), ROOM_FOR_ONE),
            lambda w=weight: reference.WeightedWindow(max_anchors=0, recent_turns=0).select(
                _weighed(w), ROOM_FOR_ONE
            ),
        )
