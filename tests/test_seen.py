"""What selection read of a message is remembered by the message's identity
(rust/py/src/seen.rs): a message changed in place, at any depth, is read
again; a laid-out copy the caller changed is made again; and a remembered
answer is never taken for another tokenizer, tagger or cap."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import ContextBuilder, Tagger, Tokenizer, WeightedWindow, shape_history
from test_select import history

LONG = "a long tool output line 12345 with words 必须\n" * 300


def select_all(messages: list[dict], provider: str, budget: int) -> list:
    """Every policy's answer, as plain data."""
    out = []
    for run in (
        lambda: WeightedWindow(provider=provider, tool_result_cap=50).select(messages, budget),
        lambda: shape_history(messages, budget, provider=provider, tool_result_cap=50),
        lambda: ContextBuilder(budget, provider=provider, tool_result_cap=50).build(messages),
    ):
        try:
            chosen = run()
        except Exception as error:
            out.append((type(error), str(error)))
            continue
        out.append((chosen.messages, chosen.system, chosen.kept, chosen.breakdown, chosen.truncated))
    return out


def containers(value, path=()):
    """Every dict and list inside ``value``, with the path to it."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            yield from containers(item, (*path, key))
    elif isinstance(value, list):
        yield path, value
        for i, item in enumerate(value):
            yield from containers(item, (*path, i))


@st.composite
def mutation(draw, messages: list[dict]):
    """Change one container somewhere in one message, in place."""
    index = draw(st.integers(0, len(messages) - 1))
    places = list(containers(messages[index]))
    _path, target = draw(st.sampled_from(places))
    choice = draw(st.integers(0, 3))
    if isinstance(target, dict):
        keys = sorted(target)
        if choice == 0 and "content" in target and isinstance(target["content"], str):
            target["content"] = target["content"] + " must retry" if draw(st.booleans()) else LONG
        elif choice == 1 and keys:
            key = draw(st.sampled_from(keys))
            value = target[key]
            if isinstance(value, str):
                target[key] = value[: len(value) // 2] + "x"
        elif choice == 2:
            target["pinned"] = True
        elif keys and draw(st.booleans()):
            key = draw(st.sampled_from(keys))
            if key != "role":
                del target[key]
    elif target:
        if choice == 0:
            target.pop()
        else:
            target.append(copy.deepcopy(target[0]))
    return index


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), budget=st.integers(200, 4000))
def test_a_message_changed_in_place_is_read_again(provider, data, budget):
    messages = data.draw(history(provider))
    if not messages:
        return
    for message in messages[::3]:
        if message.get("role") == "tool" or isinstance(message.get("content"), list):
            continue
        message.setdefault("timestamp", 1_700_000_000.0)  # a metadata key: laid-out copies are made
    select_all(messages, provider, budget)  # remembered
    data.draw(mutation(messages))
    assert select_all(messages, provider, budget) == select_all(copy.deepcopy(messages), provider, budget)


def test_a_laid_out_copy_changed_by_the_caller_is_made_again():
    messages = [
        {"role": "user", "content": "run it", "timestamp": 1.0},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": LONG, "timestamp": 2.0},
        {"role": "user", "content": "and now?", "timestamp": 3.0},
    ]
    policy = WeightedWindow(tool_result_cap=50)
    first = policy.select(messages, 10_000)
    again = policy.select(messages, 10_000)
    assert [a is b for a, b in zip(first.messages, again.messages, strict=True)] == [True] * 4
    assert "timestamp" not in first.messages[0]
    first.messages[2]["content"] = "changed by the caller"  # what was handed out
    first.messages[0]["timestamp"] = 5.0
    third = policy.select(messages, 10_000)
    assert third.messages[2]["content"].endswith("tokens]")
    assert "timestamp" not in third.messages[0]
    assert messages[0]["timestamp"] == 1.0, "the caller's own message is never changed"


def test_what_was_read_under_one_tokenizer_tagger_or_cap_is_not_taken_for_another():
    messages = [
        {"role": "user", "content": "the zebra crossing is closed"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": LONG},
    ]
    rules = Tagger(constraint_keywords=["zebra"])
    plain = WeightedWindow(tool_result_cap=None).select(messages, 10**6)
    tagged = WeightedWindow(tool_result_cap=None, tagger=rules).select(messages, 10**6)
    assert plain.breakdown == tagged.breakdown  # the same counts
    o200k = WeightedWindow(tool_result_cap=None).select(messages, 10**6).breakdown.total
    cl100k = WeightedWindow(tool_result_cap=None, tokenizer=Tokenizer("cl100k_base")).select(messages, 10**6)
    assert cl100k.breakdown.total == Tokenizer("cl100k_base").count_messages(cl100k.messages) != o200k
    # With "zebra" a constraint, the first message is an anchor at a budget with room for one.
    room = Tokenizer().count_messages(messages[2:]) + Tokenizer().count_message(messages[0])
    chosen = WeightedWindow(tool_result_cap=None, tagger=rules, recent_turns=0).select(messages, room)
    assert 0 in chosen.kept
    chosen = WeightedWindow(tool_result_cap=None, recent_turns=0).select(messages, room)
    assert 0 not in chosen.kept


class Note(dict):
    """A dict subclass: it could change in ways the shape would not show."""


def test_messages_of_other_types_are_read_every_time():
    messages = [Note(role="user", content="first"), {"role": "assistant", "content": "ok"}]
    messages.append({"role": "user", "content": "second"})
    before = WeightedWindow().select(messages, 1000).breakdown.total
    messages[0]["content"] = "first, and much longer than it was " * 5
    after = WeightedWindow().select(messages, 1000).breakdown.total
    assert after > before
    assert after == WeightedWindow().select(copy.deepcopy(messages), 1000).breakdown.total
