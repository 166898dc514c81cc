"""What selection read of a message is remembered by the message's identity
(rust/py/src/seen.rs): a message changed in place, at any depth, is read
again; a laid-out copy the caller changed is made again; and a remembered
answer is never taken for another tokenizer, tagger or cap."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import PriorityAssembly, Tokenizer, WeightedWindow, shape_history
from context_core._core import _analyze, _run_counts
from context_core.select import Tagger
from test_select import history

LONG = "a long tool output line 12345 with words 必须\n" * 300


def select_all(messages: list[dict], provider: str, budget: int) -> list:
    """Every policy's answer, as plain data."""
    out = []
    for run in (
        lambda: WeightedWindow(provider=provider, tool_result_cap=50).select(messages, budget),
        lambda: shape_history(messages, budget, provider=provider, tool_result_cap=50),
        lambda: PriorityAssembly(provider=provider, tool_result_cap=50).select(messages, budget),
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
    select_all(messages, provider, budget)  # first sight: the list is noted
    select_all(messages, provider, budget)  # remembered
    data.draw(mutation(messages))
    assert select_all(messages, provider, budget) == select_all(copy.deepcopy(messages), provider, budget)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=100, deadline=None)
@given(data=st.data(), budget=st.integers(200, 4000))
def test_a_sliding_window_reads_as_a_fresh_copy_changed_or_not(provider, data, budget):
    """A window that keeps its head, leaves out the oldest of the rest and
    adds new messages is read from the run the last window left (its
    messages gathered from further on in it); read so, with or without a
    message of it changed in place, it is what a fresh copy reads as."""
    messages = data.draw(history(provider))
    if len(messages) < 4:
        return
    head = data.draw(st.integers(0, 2))
    select_all(messages, provider, budget)  # first sight: the list is noted
    select_all(messages, provider, budget)  # a run is kept
    left_out = data.draw(st.integers(head + 1, len(messages) - 1))
    window = messages[:head] + messages[left_out:] + copy.deepcopy(messages[-2:])
    if data.draw(st.booleans()):  # changed before the window is first read: the gathering must see it
        data.draw(mutation(window))
    assert select_all(window, provider, budget) == select_all(copy.deepcopy(window), provider, budget)


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
    policy.select(messages, 10_000)  # first sight: remembered from the next turn on
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


def test_a_value_replaced_in_place_is_never_taken_for_the_old_one():
    """A value the caller replaces is freed and a new object may take its
    address: the memo holds every object it walked, so it cannot."""
    tok = Tokenizer()
    policy = WeightedWindow()
    message = {"role": "user", "content": "".join(["hello "] * 7), "timestamp": 1_700_000_000.0}
    for turn in range(200):
        policy.select([message], 10**4, now=1_700_000_100.0)
        del message["content"]
        message["content"] = "".join(["zq"] * (10 + turn % 7)) + "x7" * (11 + turn % 5)
        del message["timestamp"]
        message["timestamp"] = 1_700_000_000.0 + turn
        chosen = policy.select([message], 10**4, now=1_700_000_100.0)
        assert chosen.breakdown.total == tok.count_messages(chosen.messages)
        assert chosen.messages[0]["content"] == message["content"]


def test_a_laid_out_copy_is_kept_only_for_the_cap_it_was_made_under():
    """User code between one policy's analysis and its layout (here a
    summary callable) runs another policy with another cap."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "old answer " * 300},
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": LONG},
    ]
    wide = WeightedWindow(tool_result_cap=100)

    def summary(middle):
        wide.select(messages, 10**6)
        return "earlier"

    shape_history(messages, 200, keep_last=1, min_keep=1, summary=summary, tool_result_cap=50)
    chosen = wide.select(messages, 10**6)
    tok = Tokenizer()
    assert chosen.breakdown.total == tok.count_messages(chosen.messages)
    assert [t.kept for t in chosen.truncated] == [tok.count(chosen.messages[-1]["content"])]
    assert 90 <= chosen.truncated[0].kept <= 100


MEMORY_CHILD = """
import json, resource, sys
from context_core import WeightedWindow
window = WeightedWindow(tool_result_cap=None)
rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"ok {i % 10}"} for i in range(1000)]
raw = json.dumps(rows)
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
window.select(json.loads(raw), 10**6)
start = peak()
for _ in range(400):  # a server that parses each request's history afresh
    window.select(json.loads(raw), 10**6)
print(peak() - start)
"""


def test_messages_parsed_afresh_each_turn_do_not_grow_memory_without_bound():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD], capture_output=True, text=True, check=True)
    grown = int(out.stdout.strip())
    # 400,000 messages seen once each; the memo keeps about 64 MB of them.
    assert grown < 160 << 20, grown


DEL_CHILD = """
from context_core import Tokenizer
tok = Tokenizer()
class Text(str):
    def __del__(self):
        tok.truncate("w" * 2000 + "z", 10)  # back into the key memo, on this thread
text = Text("a " * 500_000)
tok.truncate(text, 10)  # its key remembered beside a reference
del text  # only the memo holds it now
for i in range(80):  # 80 MB more: it is evicted, and freed
    tok.truncate(("b%d " % i) * 300_000, 10)
print("done")
"""


def test_a_str_subclass_freed_by_an_eviction_can_call_back_in():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", DEL_CHILD], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "done", out.stderr


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), budget=st.integers(200, 4000))
def test_a_handed_out_message_changed_in_place_is_not_taken_as_it_was(provider, data, budget):
    """A laid-out copy shares the caller's values, and its own keys are
    checked alone; the policies' funnel takes the copies as checked. A change
    at any depth of what was handed out (the copy's own keys, or a value it
    shares with the caller's message) shows in the next turn."""
    messages = data.draw(history(provider))
    if not messages:
        return
    for message in messages[::2]:
        message.setdefault("timestamp", 1_700_000_000.0)  # laid-out copies are made
    policy = WeightedWindow(provider=provider, tool_result_cap=50)
    try:
        policy.select(messages, budget)  # first sight
        handed_out = policy.select(messages, budget).messages
    except Exception:
        return
    if not handed_out:
        return
    data.draw(mutation(handed_out))
    assert select_all(messages, provider, budget) == select_all(copy.deepcopy(messages), provider, budget)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_summary_that_changes_the_history_in_place_is_allowed_for(provider):
    """User code between a policy's analysis and its layout (a summary
    callable) may change the messages; the turns after it, the change undone,
    are answered as a fresh run answers them."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "the first request"}], "timestamp": 1.0},
        {"role": "assistant", "content": "working on it " * 200, "timestamp": 2.0},
        {"role": "user", "content": [{"type": "text", "text": "the second request"}], "timestamp": 3.0},
        {"role": "assistant", "content": "done " * 200, "timestamp": 4.0},
        {"role": "user", "content": [{"type": "text", "text": "and now?"}], "timestamp": 5.0},
    ]
    block = messages[2]["content"][0]

    def summary(middle):
        block["text"] = ""  # an empty message: the funnel drops it
        return "earlier work"

    plain = {"provider": provider, "tool_result_cap": None}
    for _ in range(3):
        shape_history(messages, 10**6, **plain)  # remembered, the copies vouched for
    changed = shape_history(messages, 300, keep_last=1, min_keep=1, summary=summary, **plain)
    assert changed.breakdown.total == Tokenizer().count_messages(changed.messages) + (
        Tokenizer().count_message({"role": "system", "content": changed.system}) if changed.system else 0
    )
    whole = shape_history(messages, 10**6, **plain)  # the empty block is read as it is now
    assert whole.messages == shape_history(copy.deepcopy(messages), 10**6, **plain).messages
    block["text"] = "the second request"  # undone
    again = shape_history(messages, 10**6, **plain)
    assert again.messages == shape_history(copy.deepcopy(messages), 10**6, **plain).messages
    assert [m["content"] for m in again.messages][2] == [{"type": "text", "text": "the second request"}]


class Meddling(str):
    """A text whose ``+`` changes a message: the caller's code, run late."""

    target: dict | None = None

    def __radd__(self, other):
        if self.target is not None:
            self.target["content"][0]["text"] = "An error occurred. Please try again."
        return str.__add__(other, str(self))


class MeddlingNote(dict):
    """A message whose ``get`` changes another message."""

    target: dict | None = None

    def get(self, key, default=None):
        if self.target is not None:
            self.target["content"][0]["text"] = "An error occurred. Please try again."
        return ""  # no text to anchor: the window the funnel saw before is kept


def small_history() -> list[dict]:
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello there, how can I help?"}],
            "timestamp": 1.0,
        },
        {"role": "user", "content": "tell me a joke"},
        {"role": "assistant", "content": "why did the chicken"},
        {"role": "user", "content": "go on"},
    ]


def answer(selection) -> tuple:
    changes = [(c.stage, c.index, c.action) for c in selection.changes]
    return selection.messages, selection.system, selection.kept, selection.breakdown, changes


def test_texts_of_a_str_subclass_run_none_of_their_code():
    """A memory, summary or segment text that is a str subclass is taken as
    its characters: its methods never run, so none can change a message
    after the analysis (the laid-out copies are vouched for then)."""
    messages = small_history()
    texts = {}
    for name in ("memory", "summary", "segment"):
        texts[name] = Meddling(f"{name} " * 3000)
    builder = PriorityAssembly()

    def build(history, texts):
        return builder.select(
            history,
            2000,
            memories=[texts["memory"]],
            global_summary=texts["summary"],
            segment_summaries=[texts["segment"]],
        )

    for _ in range(3):
        build(messages, texts)
    for text in texts.values():
        text.target = messages[2]
    chosen = build(messages, texts)
    assert messages[2]["content"][0]["text"] == "Hello there, how can I help?"
    assert answer(chosen) == answer(PriorityAssembly().select(copy.deepcopy(messages), 2000))
    summary = Meddling("earlier work")
    summary.target = messages[2]
    shape_history(messages, 60, keep_last=1, min_keep=1, summary=summary)
    assert messages[2]["content"][0]["text"] == "Hello there, how can I help?"


def test_a_message_of_a_dict_subclass_turns_vouching_off():
    """Reading a message that is not plain values can run the caller's code
    (here the anchoring reads a dict subclass's ``get``), which may change
    another message after the analysis: the funnel then checks every copy."""
    builder = PriorityAssembly(anchoring=True, tool_result_cap=None)
    messages = small_history()
    for _ in range(3):
        builder.select(messages, 10**5)
    note = MeddlingNote(role="user", content="You must never use tabs.")
    note.target = messages[2]
    grown = [*messages, note, {"role": "assistant", "content": "noted"}]
    grown.append({"role": "user", "content": "and now?"})
    fresh = copy.deepcopy(grown)
    assert fresh[6].target is fresh[2]
    chosen = builder.select(grown, 10**5)
    assert messages[2]["content"][0]["text"].startswith("An error")  # the caller's code did run
    assert answer(chosen) == answer(
        PriorityAssembly(anchoring=True, tool_result_cap=None).select(fresh, 10**5)
    )


def _turn_message(i: int, rng: random.Random) -> dict:
    roll = rng.random()
    if roll < 0.2:
        return {"role": "tool", "tool_call_id": f"c{i}", "content": LONG + str(i), "timestamp": float(i)}
    if roll < 0.3:
        block = {"type": "tool_result", "tool_use_id": f"c{i}", "content": [{"type": "text", "text": LONG}]}
        return {"role": "user", "content": [block]}
    message: dict = {
        "role": "user" if i % 2 == 0 else "assistant",
        "content": f"message {i} " * rng.randint(1, 10),
    }
    for key, value, chance in (("timestamp", float(i), 0.5), ("pinned", True, 0.1), ("id", f"id{i}", 0.1)):
        if rng.random() < chance:
            message[key] = value
    return message


def _read(items: list, tokenizer: Tokenizer, cap: int | None) -> tuple:
    analysis = _analyze(items, tokenizer, None, cap, True)
    laid_out, tokens, _ = analysis.lay_out(list(range(analysis.unit_count)))
    cuts = [(t[0], t[1], t[2], str(t[3]), t[4], t[5]) for t in analysis.truncations]
    return analysis.tokens, bytes(analysis.tags), analysis.ids, cuts, analysis.units, laid_out, tokens


@pytest.mark.parametrize("seed", range(40))
def test_windows_sliding_over_shared_messages_read_as_fresh_copies(seed):
    """Twelve turns of a window over one conversation's message objects:
    a head kept, the start sliding, now and then the same object twice, a
    fresh input, a message changed in place, or a laid-out copy the caller
    was handed changed. Each turn reads (from the runs the turns before
    left) as a deep copy of it reads."""
    rng = random.Random(seed)
    tokenizer = Tokenizer("cl100k_base")
    pool = [_turn_message(i, rng) for i in range(80)]
    head = [{"role": "system", "content": "sys"}] + ([pool[0]] if rng.random() < 0.5 else [])
    cap = rng.choice([None, 30])
    start, handed = 1, []
    for turn in range(12):
        start += rng.randint(0, 4)
        items = head + pool[start : min(len(pool), start + rng.randint(5, 30))]
        if rng.random() < 0.3 and len(items) > 3:
            j = rng.randrange(1, len(items))
            items.insert(rng.randrange(j, len(items) + 1), items[j])
        if rng.random() < 0.3:
            items.append({"role": "user", "content": f"fresh {turn}"})
        if rng.random() < 0.4:
            changed = rng.choice(items)
            if isinstance(changed.get("content"), str):
                changed["content"] += " changed"
            else:
                changed["timestamp"] = 99.0
        if handed and rng.random() < 0.3:
            rng.choice(handed)["extra"] = turn
        got = _read(items, tokenizer, cap)
        assert got == _read(copy.deepcopy(items), tokenizer, cap), (seed, turn)
        handed = [m for m in got[5] if isinstance(m, dict)]


def _plain_history(n: int) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 5, "timestamp": float(i)}
        for i in range(n)
    ]


def test_a_sliding_window_is_read_from_the_history_the_last_turn_left():
    """A window that keeps its head and leaves out the oldest of the rest is
    taken from the kept history, head and overlap alike, each message's
    shape checked once."""
    tokenizer = Tokenizer("cl100k_base")
    history = _plain_history(60)
    for _ in range(2):  # first sight notes the list; the second keeps it whole
        _analyze(history, tokenizer, None, None, True)
    window = history[:2] + history[20:] + [{"role": "user", "content": "a new turn"}]
    taken, checked = _run_counts()
    _analyze(window, tokenizer, None, None, True)
    now_taken, now_checked = _run_counts()
    assert now_taken - taken == 2 + 40
    assert now_checked - checked == 2 + 40


def test_a_fresh_input_each_turn_costs_no_second_look_at_the_history():
    """A history that ends in a new input each turn (the last turn's input
    is not in it) takes the shared history from the run, each shape checked
    once, and looks for the rest no further than the run's addresses."""
    tokenizer = Tokenizer("cl100k_base")
    history = _plain_history(300)
    for turn in range(2):
        _analyze([*history, {"role": "user", "content": f"input {turn}"}], tokenizer, None, None, True)
    for turn in range(2, 6):
        taken, checked = _run_counts()
        _analyze([*history, {"role": "user", "content": f"input {turn}"}], tokenizer, None, None, True)
        now_taken, now_checked = _run_counts()
        assert now_taken - taken == len(history)
        assert now_checked - checked == len(history)
