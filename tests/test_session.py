"""The Session: one object a server calls each turn. Each test drives it as
an agent loop does and checks the request it hands over."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import re
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import validators
from context_core import (
    AsyncSession,
    Budget,
    CacheBreakpointsError,
    InvalidInputError,
    InvalidTypeError,
    LogCorruptError,
    LogLockedError,
    LogStorageError,
    MemoryFiles,
    MessageLog,
    ModelEncodingError,
    OverBudgetError,
    PriorityAssembly,
    Session,
    ShapeHistory,
    Tokenizer,
    WeightedWindow,
    reference,
    sanitize,
)
from context_core.budget import MODEL_WINDOWS
from context_core.session.tool_calls import pending_in
from limits import in_child

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def call(call_id: str, path: str = "a.py") -> dict:
    arguments = json.dumps({"path": path})
    return {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": arguments}}


def anthropic_call(call_id: str) -> dict:
    return {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I should read it.", "signature": "sig-1"},
            {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": "a.py"}},
        ],
    }


def calling(call_id: str, provider: str) -> dict:
    """A reply that calls one tool, in ``provider``'s shape."""
    if provider == "anthropic":
        return anthropic_call(call_id)
    return {"role": "assistant", "content": None, "tool_calls": [call(call_id)]}


# A short prompt is below Claude's cacheable minimum: the renderer says so once.
pytestmark = pytest.mark.filterwarnings("ignore::context_core.PromptCacheWarning")


@contextlib.contextmanager
def selection_failing(session: Session):
    """The session's selection raising: a turn that fails after its input is logged."""
    original = session._select

    def failing(room: int, source=None):
        raise OverBudgetError("no room")

    session._select = failing
    try:
        yield
    finally:
        session._select = original


def open_session(tmp_path, **options):
    options.setdefault("model", "gpt-4o")
    options.setdefault("identity", "You are a coding agent.")
    options.setdefault("tools", TOOLS)
    options.setdefault("store", False)
    return Session.open(tmp_path / "session", **options)


def replay_calls(session: Session, agent: Any, prepare: Any) -> None:
    """Each model call of a replayed agent session (``agent_sessions``)
    through ``session``: the results before it recorded (those no call
    waits on refused, as the transcript's defect), ``prepare(said)`` (the
    user's text, or ``None`` for the turn's next step), the model's time
    (the background work joined), then the reply recorded. A call with
    nothing to answer is not made; its reply is kept."""
    previous = 0
    for end in agent.calls:
        said = None
        for message in agent.messages[previous:end]:
            if message["role"] == "tool":
                with contextlib.suppress(InvalidInputError):
                    session.record_tool_result(message["tool_call_id"], message["content"])
            elif message["role"] == "user" and isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "tool_result":
                        with contextlib.suppress(InvalidInputError):
                            session.record_tool_result(block["tool_use_id"], block["content"])
            elif message["role"] == "user":
                said = message["content"]
        previous = end + 1
        reply = agent.messages[end] if end < len(agent.messages) else None
        if said is not None or session.needs_reply:
            prepare(said)
            session.join()  # the model's time, when compaction runs
        if reply is not None:
            session.record({k: v for k, v in reply.items() if k != "timestamp"})


def recount(request: dict, tokenizer: Tokenizer | None = None) -> int:
    tokenizer = tokenizer or Tokenizer()
    messages = list(request["messages"])
    if request.get("system"):
        blocks = [{"type": "text", "text": b["text"]} for b in request["system"]]
        messages.insert(0, {"role": "system", "content": blocks})
    return tokenizer.count_messages(messages, request.get("tools"))


def test_an_agent_loop_turn_with_tool_calls(tmp_path):
    with open_session(tmp_path) as session:
        request = session.prepare("Read a.py and tell me what it does.")
        assert request["model"] == "gpt-4o"
        assert request["tools"][0]["function"]["name"] == "read_file"
        assert [m["role"] for m in request["messages"]] == ["system", "user"]
        calls = session.record(
            {"role": "assistant", "content": None, "tool_calls": [call("call_1"), call("call_2", "b.py")]}
        )
        assert [(c.id, c.arguments) for c in calls] == [
            ("call_1", {"path": "a.py"}),
            ("call_2", {"path": "b.py"}),
        ]
        session.record_tool_result("call_2", "def b(): ...")
        assert [c.id for c in session.pending] == ["call_1"]
        with pytest.raises(InvalidInputError, match="call_9") as unknown:
            session.record_tool_result("call_9", "x")
        assert "waiting: call_1" in str(unknown.value)
        session.record_tool_result("call_1", "def a(): ...", is_error=True)
        with pytest.raises(InvalidInputError, match="waiting: none"):
            session.record_tool_result("call_1", "again")
        inner = session.prepare()  # the next call of the same turn
        assert (inner.report.turn, inner.report.step) == (0, 1)
        roles = [m["role"] for m in inner["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "tool"]
        assert inner["messages"][-1]["content"] == "Error: def a(): ..."
        assert validators.openai(inner["messages"]) == []
        assert not sanitize(inner["messages"]).changed  # already in the form repair leaves
        session.record({"role": "assistant", "content": "It defines a()."})
        nxt = session.prepare("Thanks. Now b.py.")
        assert (nxt.report.turn, nxt.report.step) == (1, 0)
        assert not nxt.report.prefix_changed
        assert nxt.report.prefix_hash == inner.report.prefix_hash


def test_what_the_session_appends_is_not_decoded_again_for_the_next_window(tmp_path):
    # The input, the reply and the results go into the log's decoded cache
    # as the session appends them: the next window reads none of them back,
    # and sends what a session reading them from disk sends.
    with open_session(tmp_path) as session:
        session.prepare("Read a.py, please.")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("call_1")]})
        session.record_tool_result("call_1", "def a(): ...\n" * 50)
        read = []
        original = session.log.read

        def reading(seqs):
            seqs = list(seqs)
            read.extend(seqs)
            return original(seqs)

        session.log.read = reading
        inner = session.prepare()
        assert read == []
        sent = inner["messages"]
    with open_session(tmp_path) as again:
        assert again.prepare()["messages"] == sent


def test_the_whole_request_is_counted_and_fits_the_budget(tmp_path):
    budget = Budget(window=6_000, soft_ratio=1.0, system_reserve=500, pinned_reserve=200, input_reserve=200)
    with open_session(tmp_path, budget=budget, compact=False) as session:
        for turn in range(40):
            request = session.prepare(f"Step {turn}: " + "explain the retry queue in detail. " * 12)
            report = request.report
            assert report.total == recount(request)  # exact: framing, system and tools included
            assert report.total <= report.limit == 6_000
            session.record({"role": "assistant", "content": "Here is the explanation. " * 30})
        assert report.sections["recent"] > 0
        assert len(request["messages"]) < 2 * 40  # older turns were left out


def test_a_long_summary_beside_new_memories_each_turn_is_counted_exactly(tmp_path):
    """The policy's summaries and the turn's memories reach the request as
    one system message, new each turn and long: the report's count (made
    from its parts' cached counts) is the whole request's, turn after turn."""
    from context_core import MemoryStore

    summary = "\n\n".join(
        f"## Part {n}\n- keep ord_{n} and the 日志轮转 rule for run {n}.\n- decided: retry {n} times"
        for n in range(60)
    )
    log = MessageLog.open(tmp_path / "session" / "log", create=True)
    for i in range(8):
        log.append({"role": "user", "content": f"question {i}"})
        log.append({"role": "assistant", "content": f"answer {i}"})
    log.add_summary(summary, (0, 6))
    log.close()
    store = MemoryStore(tmp_path / "memories.db")
    store.remember_many(
        [f"Service {n} listens on port {5000 + n}; its owner is team {n % 7}." for n in range(40)]
    )
    with open_session(tmp_path, store=store, compact=False) as session:
        for turn in range(12):
            request = session.prepare(f"which port does service {3 * turn} use, and who owns it?")
            head = request["messages"][0]
            assert head["role"] == "system"
            assert "ord_59" in head["content"]  # the summary
            assert "port" in head["content"]  # the turn's memories
            assert request.report.memories > 0
            assert request.report.total == recount(request)
            session.record({"role": "assistant", "content": f"Port {5000 + 3 * turn}."})
    store.close()


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_a_user_who_states_rule_after_rule_never_fills_the_window(tmp_path, policy):
    """Every global summary carried every rule the user had stated, whole:
    at about 160 distinct rules in a 4,000-token window it outgrew the room
    and every later turn failed with OverBudgetError, for good. The global
    summary now carries the first rules within a sixth of the room; the
    first stays in every request."""
    session = Session.open(tmp_path / "s", model="gpt-4o", budget=4000, store=False, policy=policy)
    try:
        for turn in range(300):
            request = session.prepare(f"You must always call variant {turn} of the API with id R-{turn:04d}.")
            session.record({"role": "assistant", "content": f"OK, variant {turn}."})
            if turn % 20 == 19:
                assert session.compactor is not None
                assert session.compactor.join(timeout=60)
            assert "R-0000" in json.dumps(request["messages"])
        assert session.compactor is not None
        assert session.compactor.status.written[3] >= 5
    finally:
        session.close(persist=False)


_LONG_RULE = (
    "You must always call variant {t} of the payments API with idempotency key R-{t:04d}, retry at"
    " most three times with exponential backoff, and log the request id to the audit table, never"
    " from a batch job, never outside business hours (09:00-17:00 CET), and only through the"
    " gateway at gw-{t}.internal.example.com with mutual TLS and the service account svc-pay-{t}."
)


def _chat(turn: int) -> str:
    return (
        f"Now update src/module_{turn}.py so that handler_{turn} retries twice; we decided to use"
        f" backoff_{turn} because the old one failed with TimeoutError in test_{turn}."
    )


_IDS = "You must keep these ids unchanged: " + ", ".join(f"svc-{i:04d}" for i in range(150))


@pytest.mark.parametrize(
    ("model", "budget", "first", "turns"),
    [("gpt-4o", 4000, "", 60), ("gpt-4", None, "", 50), ("gpt-4o", 4000, _IDS, 90)],
    ids=["4K, a long rule every turn", "gpt-4, a longer rule every turn", "4K, a first rule of 900 tokens"],
)
def test_summaries_never_outgrow_a_small_window(tmp_path, model, budget, first, turns):
    """The view keeps a global summary and three segment summaries in
    every window. Sized for a large window (600 tokens each, every rule of
    a segment whole, the first rule always), they outgrew a small one: a
    4,000-token session whose user stated a long rule every turn failed
    every turn from the 40th on, gpt-4's with longer rules from the 30th,
    and one whose first rule was long from the 70th. A session sizes them
    to its room."""
    session = Session.open(tmp_path / "s", model=model, budget=budget, store=False)
    try:
        for turn in range(turns):
            if first:
                text = first if turn == 0 else _chat(turn)
            else:
                text = _LONG_RULE.format(t=turn) * (1 if budget else 2)
            session.prepare(text)
            session.record({"role": "assistant", "content": "OK."})
            if turn % 10 == 9:
                assert session.compactor is not None
                assert session.compactor.join(timeout=60)
        assert session.compactor is not None
        assert session.compactor.status.written[3] >= 1
        session.prepare("What's next?")
    finally:
        session.close(persist=False)


@pytest.mark.parametrize("model", ["gpt-4", "gpt-3.5-turbo"])
def test_small_windows_get_a_working_budget(tmp_path, model):
    with open_session(tmp_path, model=model, compact=False) as session:
        for turn in range(30):
            request = session.prepare(f"Turn {turn}: " + "summarise the incident log. " * 20)
            assert request.report.total <= request.report.limit
            session.record({"role": "assistant", "content": "Summary of the incident. " * 25})
        assert request.report.sections["recent"] > 0


def test_anthropic_keeps_the_logs_system_message_and_the_thinking(tmp_path):
    log = MessageLog.open(tmp_path / "session" / "log", create=True)
    log.append({"role": "system", "content": "Always answer in French."})
    log.close()
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        request = session.prepare("Read a.py.")
        texts = [block["text"] for block in request["system"]]
        assert any("Always answer in French." in text for text in texts)
        assert all(m["role"] != "system" for m in request["messages"])
        assert request["max_tokens"] == 4096
        calls = session.record(anthropic_call("toolu_01"))
        assert [c.id for c in calls] == ["toolu_01"]
        session.record_tool_result("toolu_01", "print('hi')")
        inner = session.prepare()
        assert inner["messages"][1]["content"][0]["signature"] == "sig-1"
        assert inner["messages"][2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": "print('hi')",
        }
        assert validators.anthropic(inner["messages"], inner["system"], request=True) == []


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_every_policy_reads_the_current_view_after_a_rewind_and_a_summary(tmp_path, policy):
    log = MessageLog.open(tmp_path / "session" / "log", create=True)
    for i in range(6):
        log.append({"role": "user", "content": f"question {i}"})
        log.append({"role": "assistant", "content": f"answer {i}"})
    log.add_summary(
        "## Constraints\n- none\n## Decisions\n- x\n## Current state\n- y\n## Next steps\n- z", (0, 3)
    )
    log.rewind(7)
    log.append({"role": "assistant", "content": "a different answer 3"})
    log.close()
    with open_session(tmp_path, policy=policy, compact=False) as session:
        request = session.prepare("question 4, again")
        sent = json.dumps(request["messages"])
        assert "a different answer 3" in sent
        assert "answer 5" not in sent  # the dead branch
        assert "question 4, again" in sent
        assert validators.openai(request["messages"]) == []


def test_memories_and_summaries_stay_out_of_the_cached_prefix(tmp_path):
    from context_core import MemoryStore

    store = MemoryStore(tmp_path / "memories.db")
    store.remember("The staging database listens on port 5433.")
    with open_session(tmp_path, store=store, model="claude-sonnet-4-5") as session:
        hashes = set()
        for turn in range(30):
            request = session.prepare(f"turn {turn}: which port does the staging database use?")
            hashes.add(request.report.prefix_hash)
            assert not request.report.prefix_changed
            last_marked = (
                max(i for i, b in enumerate(request["system"]) if "cache_control" in b)
                if any("cache_control" in b for b in request["system"])
                else -1
            )
            later = " ".join(b["text"] for b in request["system"][last_marked + 1 :])
            assert "5433" in later  # the memory, after every breakpoint
            session.record({"role": "assistant", "content": f"Port 5433 (turn {turn})."})
        session.compactor.close(wait=True)
        assert request.report.memories == 1
    assert len(hashes) == 1
    store.close()


def test_sdk_objects_are_recorded_and_their_usage_learned(tmp_path):
    from anthropic.types import Message as AnthropicResponse
    from openai.types.chat import ChatCompletion

    with open_session(tmp_path, compact=False) as session:
        request = session.prepare("Read a.py")
        completion = ChatCompletion.model_validate(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
                    }
                ],
                "usage": {
                    "prompt_tokens": request.report.total,
                    "completion_tokens": 9,
                    "total_tokens": request.report.total + 9,
                    "prompt_tokens_details": {"cached_tokens": 64},
                },
            }
        )
        assert [c.id for c in session.record(completion)] == ["call_1"]
        assert session.budget.observations == 1
        assert session.budget.ratio == pytest.approx(1.0)
        session.record_tool_result("call_1", "x = 1")
        assert session.prepare().report.cached_tokens == 64
    with open_session(tmp_path / "claude", model="claude-sonnet-4-5", compact=False) as session:
        request = session.prepare("And now?")
        message = AnthropicResponse.model_validate(
            {
                "id": "m1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": anthropic_call("toolu_7")["content"],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 200, "output_tokens": 3},
            }
        )
        session.record(message)
        assert session.pending[0].id == "toolu_7"
        kept = session.log.read([len(session.log) - 1])[0]
        assert kept["content"][0]["signature"] == "sig-1"
        # A retry recording it again would put the reply (and its calls) in twice.
        logged = len(session.log)
        with pytest.raises(InvalidInputError, match="'m1' is recorded already"):
            session.record(message)
        with pytest.raises(InvalidInputError, match="'m1' is recorded already"):
            session.record(message.model_dump())
        assert len(session.log) == logged
        assert session.pending[0].id == "toolu_7"
        # A server that gives every reply one id, polling: the same reply
        # after a result and a request is a new one.
        session.record_tool_result("toolu_7", "still running")
        session.prepare()
        session.record(message)
        assert len(session.log) == logged + 2
        assert session.pending[0].id != "toolu_7"  # its call stored under a fresh id


def test_a_reopened_session_knows_the_calls_still_waiting(tmp_path):
    session = open_session(tmp_path, compact=False)
    session.prepare("Read a.py")
    session.record({"role": "assistant", "content": None, "tool_calls": [call("call_1"), call("call_2")]})
    session.record_tool_result("call_1", "one")
    session.close()
    with open_session(tmp_path, compact=False) as again:
        assert [c.id for c in again.pending] == ["call_2"]
        again.record_tool_result("call_2", "two")
        assert again.pending == ()
    assert pending_in([{"role": "user", "content": "hi"}]) == {}


@pytest.mark.parametrize(
    "beside",
    [
        {"type": "text", "text": "also, hurry"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ],
)
def test_results_given_beside_an_input_end_the_wait_live_and_reopened_alike(tmp_path, beside):
    """A result for one of two calls, given with text or an image beside
    it, is a new input: the live session waits on nothing after it. A
    session reopened there waited on the other call, and refused the next
    step the live one would have made."""
    model = "claude-sonnet-4-5"
    with open_session(tmp_path, model=model, compact=False) as session:
        session.prepare("Read both files.")
        session.record(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b.py"}},
                    {"type": "tool_use", "id": "toolu_c", "name": "read_file", "input": {"path": "c.py"}},
                ],
            }
        )
        result = {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"}
        live = session.prepare({"role": "user", "content": [result, beside]})
        assert session.pending == ()
        assert session.needs_reply
    with open_session(tmp_path, model=model, compact=False) as again:
        assert again.pending == ()
        assert again.needs_reply
        request = again.prepare()
        assert request["messages"] == live["messages"]
        assert validators.anthropic(request["messages"], request["system"], request=True) == []


def test_a_reply_with_many_calls_is_still_waited_on_after_reopening(tmp_path):
    session = open_session(tmp_path, compact=False)
    session.prepare("Read every file")
    session.record({"role": "assistant", "content": None, "tool_calls": [call(f"c{i}") for i in range(70)]})
    for i in range(65):
        session.record_tool_result(f"c{i}", f"file {i}")
    session.close()
    with open_session(tmp_path, compact=False) as again:
        assert [c.id for c in again.pending] == [f"c{i}" for i in range(65, 70)]
        again.record_tool_result("c65", "file 65")
    assert pending_in([{"role": "tool", "tool_call_id": "c1", "content": "x"}]) is None  # undecided


@pytest.mark.parametrize(
    ("message", "error", "where"),
    [
        (
            {"role": "assistant", "content": "x", "tool_calls": [{"type": "function", "function": {}}]},
            InvalidInputError,
            r"message\.tool_calls\[0\]\.id: required field is missing",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [{**call("c"), "id": 5}]},
            InvalidTypeError,
            r"tool_calls\[0\]\.id: expected a str",
        ),
        ({"role": "assistant", "tool_calls": [{**call("c"), "id": ""}]}, InvalidInputError, "empty"),
        (
            {"choices": [{"message": {"role": "assistant", "tool_calls": [{"type": "function"}]}}]},
            InvalidInputError,
            "required field is missing",
        ),
    ],
)
def test_a_reply_whose_call_has_no_id_is_refused_before_the_log(tmp_path, message, error, where):
    session = open_session(tmp_path, compact=False)
    session.prepare("Read a.py")
    before = session.history()
    with pytest.raises(error, match=where):
        session.record(message)
    assert session.history() == before  # nothing written: the session goes on
    session.record({"role": "assistant", "content": "Nothing to read."})
    assert session.prepare("And now?")["messages"][-1]["content"] == "And now?"
    session.close()


def test_anthropic_calls_and_results_without_ids_are_refused_before_the_log(tmp_path):
    session = open_session(tmp_path, model="claude-sonnet-4-5", compact=False)
    session.prepare("Read a.py")
    before = session.history()
    reply = anthropic_call("toolu_1")
    del reply["content"][1]["id"]
    with pytest.raises(InvalidInputError, match=r"message\.content\[1\]\.id"):
        session.record(reply)
    with pytest.raises(InvalidInputError, match=r"user_input\.content\[0\]\.tool_use_id"):
        session.prepare({"role": "user", "content": [{"type": "tool_result", "content": "x"}]})
    assert session.history() == before
    session.record({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
    assert session.prepare("plain")["messages"][-1]["content"] == "plain"
    session.close()


def test_a_tool_result_nested_too_deep_is_a_clear_type_error(tmp_path):
    nested: list = []
    for _ in range(5_000):
        nested = [nested]
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Read a.py")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        with pytest.raises(InvalidTypeError, match="JSON-able"):
            session.record_tool_result("c1", nested)
        assert [c.id for c in session.pending] == ["c1"]  # still waiting


@pytest.mark.parametrize(("option", "value"), [("memory_tokens", -5), ("max_tokens", 0), ("max_tokens", "x")])
def test_token_options_are_checked_when_the_session_opens(tmp_path, option, value):
    with pytest.raises(InvalidInputError, match=option):
        open_session(tmp_path, **{option: value})


@pytest.mark.parametrize("option", ["clock", "wall"])
def test_clocks_are_checked_when_the_session_opens(tmp_path, option):
    with pytest.raises(InvalidTypeError, match=option):
        open_session(tmp_path, **{option: None})
    assert not (tmp_path / "session").exists()  # refused before anything is written


@pytest.mark.parametrize(
    ("model", "field"),
    [("gpt-4o", "max_tokens"), ("o3-mini", "max_completion_tokens"), ("gpt-5", "max_completion_tokens")],
)
def test_the_reply_cap_goes_in_the_field_the_model_takes(tmp_path, model, field):
    with open_session(tmp_path, model=model, max_tokens=1_000, compact=False) as session:
        request = session.prepare("hi")
    assert request[field] == 1_000
    assert {"max_tokens", "max_completion_tokens"} - {field} <= {"max_tokens", "max_completion_tokens"} - set(
        request
    )


@pytest.mark.parametrize(("model", "cap"), [("gpt-4o", 100_000), ("claude-sonnet-4-5", 180_000)])
def test_the_prompt_leaves_the_reply_its_cap_in_the_window(tmp_path, model, cap):
    """The APIs refuse a prompt and a max_tokens that together exceed the window."""
    with open_session(tmp_path, model=model, max_tokens=cap, compact=False) as session:
        window, ratio = session.budget.window, session.budget.ratio
        session.prepare("Read the logs.")
        for turn in range(6):
            session.record({"role": "assistant", "content": "noted " * 2_000})
            request = session.prepare(f"Next log, part {turn}: " + "line of output " * 1_500)
            assert request.report.total * ratio + cap <= window
        assert request.report.limit < session.budget.messages(
            system_tokens=0
        )  # the cap, not the budget, bound
    with pytest.raises(InvalidInputError, match="leaves no room"):
        open_session(tmp_path / "other", model=model, max_tokens=window)


def test_anthropics_default_reply_cap_must_leave_room_at_open(tmp_path):
    with pytest.raises(InvalidInputError, match="default max_tokens for Anthropic"):
        open_session(
            tmp_path, model="claude-sonnet-4-5", budget=Budget.for_model("claude-sonnet-4-5", window=4_000)
        )


def test_a_learned_ratio_under_one_never_lets_prompt_and_cap_pass_the_window(tmp_path):
    with open_session(tmp_path, model="gpt-4o", max_tokens=100_000, compact=False) as session:
        for _ in range(5):
            session.budget.observe(10_000, 5_000)  # usage saying the provider counts half as many
        assert session.budget.ratio < 1
        assert session._room(0) <= session.budget.window - 100_000


def test_a_bad_session_path_is_a_clear_error(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(LogStorageError, match="a file, not a session directory") as raised:
        Session.open(afile, model="gpt-4o", store=False)
    assert isinstance(raised.value, NotADirectoryError)
    for bad in ("", "a\0b"):
        with pytest.raises(InvalidInputError, match="path must be"):
            Session.open(bad, model="gpt-4o", store=False)
    with pytest.raises(InvalidTypeError, match="path must be"):
        Session.open(None, model="gpt-4o", store=False)  # type: ignore[arg-type]
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "provider").write_bytes(b"\xff\xfe")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        Session.open(tmp_path / "odd", model="gpt-4o", store=False)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "provider").mkdir()
    with pytest.raises(LogStorageError) as raised:
        Session.open(tmp_path / "dir", model="gpt-4o", store=False)
    assert isinstance(raised.value, IsADirectoryError)


def test_a_failed_open_of_a_new_session_leaves_no_directory(tmp_path):
    """It left log/, memory/ and a memory.db of a session never opened."""
    for bad in ({"tools": 5}, {"skills": 5}, {"namespace": "", "store": None}, {"summarizer": 5}):
        with pytest.raises((InvalidTypeError, InvalidInputError)):
            open_session(tmp_path, **bad)
        assert not (tmp_path / "session").exists(), bad
    with open_session(tmp_path, compact=False) as session:
        session.prepare("hi")
    with pytest.raises(InvalidTypeError):
        open_session(tmp_path, tools=5)
    with open_session(tmp_path, compact=False) as session:  # an existing one is left as it was
        assert session.history()[0]["content"] == "hi"


@pytest.mark.parametrize(
    "left",
    [
        {"log": None},  # the log's directory made, no file in it yet
        {"log": {"index": b""}},  # an earlier version's order: index made first, empty
        {"log": {"index": b"", "data": b"CCLOGDAT" + bytes(56)}},
        {"provider": b""},  # the marker made, killed before it was written
    ],
)
def test_a_first_open_killed_midway_opens_next_time_for_its_model(tmp_path, left):
    """A kill during the first open of a new session left these, and every
    later open failed the same way for good: a 0-byte index was damage, an
    empty provider marker named a provider "", and an empty log/ was taken
    for an existing log, made in o200k_base, which gpt-4 then refused."""
    root = tmp_path / "session"
    root.mkdir()
    for name, content in left.items():
        if name == "log":
            (root / "log").mkdir()
            for file, data in (content or {}).items():
                (root / "log" / file).write_bytes(data)
        else:
            (root / name).write_bytes(content)
    with open_session(tmp_path, model="gpt-4", compact=False) as session:
        assert session.log.encoding == "cl100k_base"
        assert session.prepare("hi")["messages"][-1]["content"] == "hi"
    assert (root / "provider").read_text() == "openai\n"
    with pytest.raises(ModelEncodingError):  # the log made is gpt-4's, and kept
        open_session(tmp_path, model="gpt-4o")
    with open_session(tmp_path, model="gpt-4", compact=False) as session:
        assert session.history()[0]["content"] == "hi"


def test_a_failed_open_does_not_tie_the_directory_to_its_provider(tmp_path):
    with pytest.raises(InvalidTypeError):
        open_session(tmp_path, model="claude-sonnet-4-5", tools=5)
    with pytest.raises(InvalidTypeError):
        open_session(tmp_path, model="claude-sonnet-4-5", store=5)
    with open_session(
        tmp_path, model="gpt-4o", compact=False
    ) as session:  # not "holds a session for anthropic"
        assert session.prepare("hi")["messages"][-1]["content"] == "hi"


@pytest.mark.parametrize(("made_for", "other"), [("openai", "anthropic"), ("anthropic", "openai")])
def test_a_removed_provider_marker_is_told_by_the_log(tmp_path, made_for, other):
    """The marker removed by hand: the log's own shapes (tool calls, thinking)
    still say which API it was for, and the other one is refused. A log whose
    messages either API takes opens for both."""
    models = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-5"}
    with open_session(tmp_path, model=models[made_for]) as session:
        session.prepare("Read a.py.")
        session.record(calling("c1", made_for))
        session.record_tool_result("c1", "def a(): ...")
    marker = tmp_path / "session" / "provider"
    marker.unlink()
    with pytest.raises(InvalidInputError, match=f"holds a session for {made_for}.*marker is gone"):
        open_session(tmp_path, model=models[other])
    assert not marker.exists()
    with open_session(tmp_path, model=models[made_for]) as session:
        assert session.pending == ()
    assert marker.read_text() == f"{made_for}\n"
    plain = tmp_path / "plain"
    with Session.open(plain, model=models[made_for], store=False) as session:
        session.prepare("Hello.")
        session.record({"role": "assistant", "content": "Hi."})
    (plain / "provider").unlink()
    with Session.open(plain, model=models[other], store=False) as session:
        assert session.prepare("Again.")["messages"][-1]["content"] == "Again."


def test_an_anthropic_session_reopened_without_its_tools_still_sends(tmp_path):
    """Anthropic refuses tool_use and tool_result blocks in a request that
    defines no tools: reopened with ``tools=()``, the old tool steps go as
    text, the request is counted exactly, and the log keeps the blocks."""
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        session.prepare("Read a.py.")
        session.record(anthropic_call("toolu_1"))
        session.record_tool_result("toolu_1", "def a(): ...")
        session.prepare()
        session.record({"role": "assistant", "content": [{"type": "text", "text": "It defines a()."}]})
    with open_session(tmp_path, model="claude-sonnet-4-5", tools=()) as session:
        request = session.prepare("Sum up what we did.")
        assert "tools" not in request
        blocks = [b for m in request["messages"] if isinstance(m["content"], list) for b in m["content"]]
        assert {b["type"] for b in blocks} == {"text"}
        said = " ".join(b["text"] for b in blocks)
        assert "[Called the tool read_file (call toolu_1)" in said
        assert "[Result of read_file (call toolu_1):\ndef a(): ...]" in said
        assert validators.anthropic(request["messages"], request["system"], request=True) == []
        assert request.report.total == recount(request)
        logged = [b for m in session.history() if isinstance(m["content"], list) for b in m["content"]]
        assert any(b.get("type") == "tool_use" for b in logged)


def test_a_removed_marker_over_a_web_search_reply_is_told_by_the_log(tmp_path):
    """A reply of server tool blocks alone (a web search) is Anthropic's
    shape too: Chat Completions takes no such content parts."""
    reply = {
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "P"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "PAY-77 is fixed."},
        ],
    }
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        session.prepare("Look PAY-77 up.")
        session.record(reply)
    (tmp_path / "session" / "provider").unlink()
    with pytest.raises(InvalidInputError, match="holds a session for anthropic"):
        open_session(tmp_path, model="gpt-4o")
    with open_session(tmp_path / "other", model="gpt-4o") as session:
        session.prepare("Look PAY-77 up.")
        with pytest.raises(InvalidInputError):
            session.record(reply)  # the other provider's shape, refused before the log


def test_marks_piling_up_are_trimmed_on_what_is_sent_without_tools(tmp_path):
    """Reopened without tools, an old result's marks (its own and its parts')
    are said as text with the result: the newest marks are counted on the
    request as sent, and every turn fits the API's four."""
    mark = {"type": "ephemeral"}
    parts = [{"type": "text", "text": f"part {n}", "cache_control": mark} for n in range(2)]
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        session.prepare("Read a.py.")
        session.record(anthropic_call("toolu_1"))
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "cache_control": mark, "content": parts}
        session.prepare({"role": "user", "content": [result]})
        session.record({"role": "assistant", "content": "Read it."})
    with open_session(tmp_path, model="claude-sonnet-4-5", tools=()) as session:
        for turn in range(7):
            block = {"type": "text", "text": f"step {turn}", "cache_control": mark}
            said = {"role": "user", "content": [block]}
            request = session.prepare(said)
            marks = json.dumps(request["messages"]).count("cache_control")
            assert marks + sum("cache_control" in b for b in request["system"]) <= 4
            assert request["messages"][-1]["content"][-1].get("cache_control") == mark  # the newest kept
            session.record({"role": "assistant", "content": f"done {turn}"})


def test_a_marker_naming_no_provider_is_refused_without_echoing_it(tmp_path):
    with open_session(tmp_path):
        pass
    (tmp_path / "session" / "provider").write_text("\x1b[31mbanana" * 10_000)
    with pytest.raises(InvalidInputError, match="not a provider's name") as refused:
        open_session(tmp_path)
    assert len(str(refused.value)) < 300
    assert "\x1b" not in str(refused.value)  # escaped, not the raw control character


@pytest.mark.parametrize("model", ["gpt-4o", "claude-sonnet-4-5"])
def test_an_empty_input_is_refused_and_logs_nothing(tmp_path, model):
    blank = [{"type": "text", "text": "  "}]
    with open_session(tmp_path, model=model, compact=False) as session:
        for empty in (
            "",
            "  \n",
            {"role": "user", "content": ""},
            {"role": "user", "content": []},
            {"role": "user", "content": blank},
        ):
            with pytest.raises(InvalidInputError, match="user_input is empty"):
                session.prepare(empty)
        assert session.history() == []
        assert session.prepare("hi")["messages"][-1]["content"] == "hi"


def test_bad_input_is_refused_with_clear_errors(tmp_path):
    with pytest.raises(InvalidInputError, match="policy must be"):
        open_session(tmp_path, policy="fastest")
    with pytest.raises(InvalidInputError, match="provider must be"):
        open_session(tmp_path, provider="gemini")
    session = open_session(tmp_path, compact=False)
    with pytest.raises(InvalidInputError, match="unknown role"):
        session.prepare({"role": "banana", "content": "x"})
    with pytest.raises(InvalidTypeError, match="user_input"):
        session.prepare(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="attachments"):
        session.prepare(attachments=[{"type": "text", "text": "x"}])
    with pytest.raises(InvalidInputError, match="assistant message"):
        session.record({"role": "user", "content": "not a reply"})
    with pytest.raises(InvalidTypeError, match="SDK response"):
        session.record(3.5)
    tiny = Budget(window=400, soft_ratio=1.0, system_reserve=10, pinned_reserve=10, input_reserve=10)
    session.close()
    with open_session(tmp_path, budget=tiny, compact=False) as small, pytest.raises(OverBudgetError):
        small.prepare("word " * 2_000)
    with pytest.raises(InvalidInputError, match="closed"):
        session.prepare("after close")


def test_one_info_line_a_call_and_timings_from_the_injected_clock(tmp_path, caplog):
    ticks = itertools.count()
    with (
        open_session(tmp_path, compact=False, clock=lambda: next(ticks) * 0.001) as session,
        caplog.at_level(logging.INFO, logger="context_core"),
    ):
        request = session.prepare("Read a.py")
        session.record({"role": "assistant", "content": "ok"})
        session.prepare("And b.py")
    lines = [r for r in caplog.records if r.name == "context_core" and r.levelno == logging.INFO]
    assert len(lines) == 2
    assert "turn=0.0" in lines[0].getMessage()
    assert "total=" in lines[0].getMessage()
    timings = request.report.timings
    assert set(timings) == {"append", "memory", "prompt", "select", "render", "count", "schedule", "total"}
    assert timings["total"] == pytest.approx(sum(v for k, v in timings.items() if k != "total"))
    # One tick a stage; the memory stage is timed in two laps, as the store's
    # scan starts before the prompt is built and its search ends after.
    laps = {key: 2 if key == "memory" else 1 for key in timings if key != "total"}
    assert {key: round(timings[key] / 0.001) for key in laps} == laps


_REJECTED_USAGE = """
import logging, sys, tempfile
if sys.argv[1:] == ["configured"]:
    logging.basicConfig(level=logging.WARNING)
from context_core import Session
with Session.open(tempfile.mkdtemp() + "/s", model="claude-sonnet-4-5", store=False) as s:
    s.prepare("hi")
    usage = {"input_tokens": 10**7, "output_tokens": 1}  # no ratio: rejected, with a warning
    s.record({"id": "m1", "type": "message", "role": "assistant", "content": "ok", "usage": usage})
"""


def test_warnings_reach_the_applications_logging_and_are_never_printed_by_themselves():
    """The library's records are the application's to show: with no logging
    set up nothing is printed (Python's last-resort handler wrote warnings
    to stderr); configured, the warning is there."""
    import subprocess
    import sys

    def stderr_of(*argv: str) -> str:
        command = [sys.executable, "-W", "ignore", "-c", _REJECTED_USAGE, *argv]
        return subprocess.run(command, capture_output=True, text=True, check=True).stderr

    assert stderr_of() == ""
    assert "usage sample rejected" in stderr_of("configured")


@pytest.mark.parametrize(
    ("name", "returned", "error"),
    [
        ("clock", "soon", InvalidTypeError),
        ("clock", None, InvalidTypeError),
        ("wall", True, InvalidTypeError),
        ("wall", float("nan"), InvalidInputError),
        ("clock", float("inf"), InvalidInputError),
    ],
)
def test_a_clock_that_returns_no_seconds_is_refused_at_open(tmp_path, name, returned, error):
    """A clock returning something else (a datetime's worth of mistakes)
    raised a built-in TypeError from inside every prepare(). It is called
    once at open and refused there, leaving no session directory."""
    with pytest.raises(error, match=f"{name}\\(\\) must return"):
        open_session(tmp_path, compact=False, **{name: lambda: returned})
    assert not (tmp_path / "session").exists()


def test_compaction_runs_in_the_background_and_close_persists_learnings(tmp_path):
    from context_core import MemoryStore

    with open_session(tmp_path, store=None) as session:
        session.prepare("You must never drop the order_id from a log line.")
        session.record({"role": "assistant", "content": "Understood."})
        for turn in range(40):
            session.prepare(f"Now fix bug {turn} in payments/retry.go.")
            session.record({"role": "assistant", "content": f"Fixed bug {turn}."})
        session.compactor.close(wait=True)
        written = session.compactor.status.written
        assert sum(written.values()) >= 1
        request = session.prepare("What rules apply?")
        assert request.report.sections["global_summary"] + request.report.sections["segments"] > 0
        assert "order_id" in json.dumps(request["messages"])  # the rule survived compaction
    memory = (tmp_path / "session" / "memory" / "MEMORY.md").read_text()
    assert "order_id" in memory
    store = MemoryStore(tmp_path / "session" / "memory.db")
    assert any("order_id" in hit.memory.text for hit in store.search("order_id rule"))
    store.close()


def test_the_async_session_has_the_same_turn(tmp_path):
    async def run() -> None:
        async with await AsyncSession.open(
            tmp_path / "session", model="gpt-4o", tools=TOOLS, store=False
        ) as session:
            request = await session.prepare("Read a.py")
            assert request["messages"][-1]["content"] == "Read a.py"
            await session.record({"role": "assistant", "content": None, "tool_calls": [call("call_1")]})
            await session.record_tool_result("call_1", "x = 1")
            inner = await session.prepare()
            assert inner["messages"][-1]["role"] == "tool"
            assert session.last_report is inner.report
            roles = [m["role"] for m in await session.history()]
            assert roles == ["user", "assistant", "tool"]
            assert [m["role"] for m in await session.history(since=2)] == ["tool"]

    asyncio.run(run())
    with open_session(tmp_path, compact=False) as reopened:
        assert len(reopened.log) == 3  # the input, the call, its result


def test_tool_results_of_any_json_shape_keep_the_session_usable(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Run them all")
        calls = [call(f"call_{i}") for i in range(5)]
        session.record({"role": "assistant", "content": None, "tool_calls": calls})
        session.record_tool_result("call_0", ["line one", "line two"])
        session.record_tool_result("call_1", 42)
        session.record_tool_result("call_2", None)
        session.record_tool_result("call_3", [{"type": "text", "text": "a block"}])
        session.record_tool_result("call_4", {"rows": 3})
        with pytest.raises(InvalidInputError):
            session.record_tool_result("call_4", object())  # answered already
        request = session.prepare()
        contents = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        assert contents == [
            '["line one", "line two"]',
            "42",
            "",
            "a block",  # text parts are joined, so the cap applies to the whole
            '{"rows": 3}',
        ]
        assert validators.openai(request["messages"]) == []


def test_a_session_keeps_its_provider_and_its_models_encoding(tmp_path):
    with open_session(tmp_path, model="gpt-4", compact=False) as session:
        assert session.log.encoding == "cl100k_base"  # gpt-4's own tokenizer counts the request
        session.prepare("hi")
        with pytest.raises(InvalidInputError, match="anthropic's shape"):
            session.record(anthropic_call("toolu_1"))
    with pytest.raises(InvalidInputError, match="holds a session for openai"):
        open_session(tmp_path, model="claude-sonnet-4-5")
    with open_session(tmp_path / "claude", model="claude-sonnet-4-5", compact=False) as claude:
        claude.prepare("hi")
        with pytest.raises(InvalidInputError, match="openai's shape"):
            claude.record({"role": "assistant", "content": None, "tool_calls": [call("call_1")]})


@pytest.mark.parametrize(
    ("model", "block"),
    [
        ("claude-sonnet-4-5", {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}),
        (
            "gpt-4o",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        ),
    ],
)
def test_an_attachment_in_the_other_providers_shape_is_refused_before_the_log(tmp_path, model, block):
    """Logged, it would be in every request after, each refused by the API."""
    with open_session(tmp_path, model=model, compact=False) as session:
        with pytest.raises(InvalidInputError, match=r"content\[1\]: a '(image_url|image)' block is"):
            session.prepare("and this?", attachments=[block])
        assert len(session.log) == 0
        request = session.prepare("and this?")  # the session goes on
        assert request.report.total > 0


def test_the_first_request_after_a_reopen_says_whether_the_prefix_changed(tmp_path):
    """It compared with nothing: new instructions after a deploy (the
    provider's cache missing) were reported as an unchanged prefix."""
    with open_session(tmp_path, compact=False) as session:
        first = session.prepare("hi").report
        assert not first.prefix_changed  # nothing before it
        session.record({"role": "assistant", "content": "hello"})
    with open_session(tmp_path, compact=False) as session:
        same = session.prepare("again").report
        assert same.prefix_hash == first.prefix_hash
        assert not same.prefix_changed
        session.record({"role": "assistant", "content": "hello"})
    with open_session(tmp_path, compact=False, identity="You are a reviewing agent.") as session:
        changed = session.prepare("and now?").report
        assert changed.prefix_hash != first.prefix_hash
        assert changed.prefix_changed
        session.record({"role": "assistant", "content": "ok"})
        assert not session.prepare("next").report.prefix_changed


def test_an_input_that_is_not_text_is_refused_in_the_sessions_words(tmp_path):
    """It failed in the store's search, named as its internal ``query``."""
    with open_session(tmp_path, store=None, compact=False) as session:
        for given in ("hi \ud800 there", {"role": "user", "content": [{"type": "text", "text": "a\udfff"}]}):
            with pytest.raises(InvalidInputError, match=r"user_input.* holds a lone surrogate"):
                session.prepare(given)
        assert len(session.log) == 0
        assert session.prepare("hi there").report.total > 0


def test_a_session_reopened_for_a_model_of_another_encoding_is_refused(tmp_path):
    """gpt-4o's log reopened for gpt-4 counted every request in o200k_base,
    and reported as fitting requests gpt-4's own tokenizer put far over
    its window."""
    with open_session(tmp_path, compact=False) as session:
        session.prepare("hi")
    with pytest.raises(
        ModelEncodingError, match="counts tokens in o200k_base, and gpt-4 counts in cl100k_base"
    ) as raised:
        open_session(tmp_path, model="gpt-4")
    assert isinstance(raised.value, ValueError)
    assert (raised.value.encoding, raised.value.model_encoding) == ("o200k_base", "cl100k_base")
    with open_session(tmp_path, model="gpt-4.1", compact=False) as again:  # the same encoding: fine
        assert again.prepare("again").report.total > 0


def test_a_session_open_elsewhere_is_named_without_options_open_does_not_take(tmp_path):
    with (
        open_session(tmp_path, compact=False),
        pytest.raises(LogLockedError, match="another Session") as raised,
    ):
        open_session(tmp_path)
    assert isinstance(raised.value, BlockingIOError)
    assert "readonly" not in str(raised.value)
    assert "lock_timeout" not in str(raised.value)


def test_a_new_session_path_another_opener_locked_first_is_left_to_it(tmp_path, monkeypatch):
    """Two servers opening one new path at once: the open that made the
    directory but lost the log's lock to the other must not remove the
    directory (with the other's log in it) as a half-made session."""
    import context_core.session.session as session_module

    where = tmp_path / "new"
    others: list[MessageLog] = []
    real = MessageLog.open

    def raced(path, **options):
        others.append(real(path, create=True, durability="never"))  # the other server, first to the lock
        others[0].append({"role": "user", "content": "the other server's turn"})
        return real(path, **options)

    monkeypatch.setattr(session_module.MessageLog, "open", raced)
    with pytest.raises(LogLockedError, match="another Session"):
        Session.open(where, model="gpt-4o", store=False, compact=False)
    monkeypatch.undo()
    assert (where / "log").is_dir()
    others[0].close()
    with MessageLog.open(where / "log", readonly=True) as log:
        assert [m["content"] for m in log.read(range(len(log)))] == ["the other server's turn"]


def test_a_failed_open_removes_nothing_another_server_wrote(tmp_path, monkeypatch):
    """A failed open removed the directory it had made after letting the
    log's lock go: a server waiting for the lock opened the session in
    that gap, acknowledged a turn, and lost it to the removal (found by two
    processes racing on new paths). A server that had opened, written and
    closed the new directory before the failing open took the lock lost
    its session too. Now the removal happens under the lock, and only of
    a log with no record in a directory no open has marked."""
    import context_core.session.session as session_module

    real_close_parts = session_module._close_parts
    waiting = tmp_path / "waiting"

    def then_the_waiter_writes(owned, *, raising=True):
        real_close_parts(owned, raising=raising)  # the lock let go: the other server's open goes on
        with MessageLog.open(waiting / "log", create=True, durability="always") as log:
            log.append({"role": "user", "content": "acknowledged"})

    monkeypatch.setattr(session_module, "_close_parts", then_the_waiter_writes)
    with pytest.raises(InvalidTypeError):
        Session.open(waiting, model="gpt-4o", store=False, memory=123)
    monkeypatch.undo()
    with MessageLog.open(waiting / "log", readonly=True) as log:
        assert [m["content"] for m in log.read(range(len(log)))] == ["acknowledged"]

    before = tmp_path / "before"
    real_open_log = session_module._open_log

    def after_another_servers_session(where, model, durability):
        monkeypatch.setattr(session_module, "_open_log", real_open_log)  # the other's own open
        with Session.open(before, model="gpt-4o", store=False, compact=False) as other:
            other.prepare("the other server's turn")
            other.record({"role": "assistant", "content": "done"})
        return real_open_log(where, model, durability)

    monkeypatch.setattr(session_module, "_open_log", after_another_servers_session)
    monkeypatch.setattr(session_module, "_session_directory", lambda path: (str(path), True))
    with pytest.raises(InvalidTypeError):
        Session.open(before, model="gpt-4o", store=False, memory=123)
    monkeypatch.undo()
    with Session.open(before, model="gpt-4o", store=False, compact=False) as reopened:
        assert [m["content"] for m in reopened.history()] == ["the other server's turn", "done"]

    with pytest.raises(InvalidTypeError):  # one that is this open's alone is removed
        Session.open(tmp_path / "alone", model="gpt-4o", store=False, memory=123)
    assert not (tmp_path / "alone").exists()

    def made_then_interrupted(where, model, durability):
        real_open_log(where, model, durability).close()  # the log made in gpt-4o's encoding
        raise KeyboardInterrupt

    monkeypatch.setattr(session_module, "_open_log", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        Session.open(tmp_path / "interrupted", model="gpt-4o", store=False)
    monkeypatch.undo()
    assert not (tmp_path / "interrupted").exists()  # else gpt-4 could never open the path
    Session.open(tmp_path / "interrupted", model="gpt-4", store=False, compact=False).close()


def test_an_int_budget_is_the_windows_tokens_and_a_bad_namespace_is_refused_at_open(tmp_path):
    with open_session(tmp_path / "int", budget=8000, compact=False) as session:
        assert session.budget.window == 8000
        assert session.prepare("hi").report.limit <= 8000
    with pytest.raises(InvalidInputError, match="namespace must not be empty"):
        open_session(tmp_path / "ns", store=None, namespace="")
    with pytest.raises(InvalidTypeError, match="budget must be a Budget or an int"):
        open_session(tmp_path / "bad", budget="8000")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_a_call_id_a_server_gives_again_keeps_each_turns_tool_loop(tmp_path, provider, policy):
    """Some OpenAI-compatible servers number calls per reply (``call_0``
    every turn): the session stores each again-given id fresh, so the
    repair never drops the turn in progress's call as a duplicate."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    with open_session(tmp_path, model=model, policy=policy, compact=False) as session:
        for turn in range(3):
            session.prepare(f"turn {turn}")
            if provider == "openai":
                reply = {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c1", "b.py")]}
            else:
                reply = anthropic_call("c1")
                reply["content"].append({**reply["content"][1], "input": {"path": "b.py"}})
            calls = session.record(reply)
            assert len({c.id for c in calls}) == 2  # unique, within the reply and across turns
            session.record_tool_result("c1", f"a.py of turn {turn}")  # by the id the server gave
            session.record_tool_result("c1", f"b.py of turn {turn}")
            assert session.pending == ()
            request = session.prepare()
            actions = [change.action for change in request.report.repairs]
            assert "drop_duplicate_call" not in actions
            assert "drop_result" not in actions
            if provider == "openai":
                assert validators.openai(request["messages"]) == []
                tail = [m["content"] for m in request["messages"][-2:]]
            else:
                assert validators.anthropic(request["messages"], request.get("system"), request=True) == []
                tail = [b["content"] for b in request["messages"][-1]["content"]]
            assert tail == [f"a.py of turn {turn}", f"b.py of turn {turn}"]
            session.record({"role": "assistant", "content": f"Read both, turn {turn}."})
    assert [c.id for c in calls] == ["c1_5", "c1_6"]  # the third turn's, after c1, c1_2 ... c1_4


def test_arguments_given_as_an_object_are_stored_as_the_json_text_the_api_takes(tmp_path):
    """Ollama's own API and some proxies give a call's arguments as an
    object; Chat Completions refuses one in a request."""
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Read a.py")
        reply = {"role": "assistant", "content": None, "tool_calls": [call("c1")]}
        reply["tool_calls"][0]["function"]["arguments"] = {"path": "a.py", "note": "é"}
        (made,) = session.record(reply)
        assert made.arguments == {"path": "a.py", "note": "é"}
        session.record_tool_result("c1", "x = 1")
        sent = session.prepare()["messages"][-2]["tool_calls"][0]["function"]["arguments"]
        assert sent == '{"path": "a.py", "note": "é"}'
        assert validators.openai(session.prepare()["messages"]) == []


class _TextStore:
    """A store of the caller's own that gives texts only (``search_texts``)."""

    def search(self, query: str, **options: object) -> list[object]:
        return []

    def conversation_ended(self, *args: object, **kwargs: object) -> None:
        return None


class _LongMemories(_TextStore):
    """Ignores the token cap it is given."""

    def search_texts(self, query: str, *, k: int = 8, **options: object) -> list[str]:
        short = [f"Short fact {i}: deploys need approval." for i in range(2)]
        return short + [f"Fact {i}: " + "the payments deploy requires approval " * 150 for i in range(k)]


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_long_memories_never_leave_an_input_no_room(tmp_path, policy):
    """On gpt-4's 8K window, eight memories of ~900 tokens: priority fits
    what it can itself; the others get whole memories within an eighth of
    the room (they went in whole, and every input was refused)."""
    with open_session(
        tmp_path, model="gpt-4", store=_LongMemories(), policy=policy, compact=False
    ) as session:
        request = session.prepare("How do I deploy?")
        sent = json.dumps(dict(request))
        assert "Short fact 0" in sent
        assert request.report.total <= request.report.limit
        if policy != "priority":
            assert "Fact 0: the payments" not in sent  # over the cap, left out whole
            assert request.report.memories == 2


def test_a_custom_tool_call_from_the_sdk_runs_its_loop(tmp_path):
    from openai.types.chat import ChatCompletion

    reply = {"role": "assistant", "content": None}
    reply["tool_calls"] = [
        {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": "+x = 1"}}
    ]
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-5",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": reply}],
        }
    )
    with open_session(tmp_path, model="gpt-5", compact=False) as session:
        session.prepare("Patch it")
        (patch,) = session.record(completion)
        assert (patch.id, patch.name, patch.arguments) == ("call_1", "apply_patch", "+x = 1")
        session.record_tool_result("call_1", "applied")
        request = session.prepare()
        assert validators.openai(request["messages"]) == []
        assert request["messages"][-2]["tool_calls"][0]["custom"] == {
            "name": "apply_patch",
            "input": "+x = 1",
        }
        assert request["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "applied"}
        assert request.report.total == recount(request)


def test_a_gpt5_request_stays_within_the_input_the_api_takes(tmp_path):
    """gpt-5's 400K window holds a 128K reply: the API refuses an input over
    272K tokens, and a learned ratio under 1 must not lift the limit past it."""
    with open_session(tmp_path, model="gpt-5", compact=False) as session:
        for turn in range(4):
            request = session.prepare(f"question {turn}")
            assert request.report.limit <= 272_000
            usage = {"prompt_tokens": int(request.report.total * 0.8), "completion_tokens": 3}
            session.record({"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": usage})
        assert session.budget.ratio < 1.0
        assert session.prepare("again").report.limit <= 272_000
    # Its reply room is apart from the 272K: a cap up to 128K takes nothing off the prompt's.
    limits = []
    for cap in (None, 32_000, 128_000):
        with open_session(tmp_path / str(cap), model="gpt-5", max_tokens=cap, compact=False) as session:
            limits.append(session.prepare("hi").report.limit)
    assert limits[0] == limits[1] == limits[2]
    extended = {**MODEL_WINDOWS, "my-model": 8_000, "gpt-5.3-chat": 128_000}
    assert Budget.for_model("gpt-5", table=extended).reply_room == 128_000  # the model's
    assert Budget.for_model("gpt-5.3-chat-latest", table=extended).reply_room == 0  # the table's model
    with pytest.raises(InvalidInputError, match="replies at most"):
        open_session(tmp_path / "over", model="gpt-5", max_tokens=200_000)
    for chat in ("gpt-5-chat-latest", "gpt-5.1-chat-latest"):
        assert Budget.for_model(chat).window == 128_000
        assert Budget.for_model(chat).reply_room == 0


class _DeployMemory(_TextStore):
    """One memory, for inputs about deploying."""

    def search_texts(self, query: str, **options: object) -> list[str]:
        return ["The staging password rotates every Monday."] if "deploy" in query else []


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_the_turns_skills_and_memories_stay_for_its_inner_steps_a_reopen_too(tmp_path, policy):
    from context_core.prompt import Skill

    skill = Skill("deploys", "Deploy a service", "ALWAYS run the dry run first.")

    def opened():
        return open_session(tmp_path, compact=False, policy=policy, store=_DeployMemory(), skills=[skill])

    def shows(request, text: str) -> bool:
        return text in json.dumps(dict(request))

    with opened() as session:
        first = session.prepare("Use deploys to deploy the api to staging.")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        session.record_tool_result("c1", "ok")
        inner = session.prepare()
        for request in (first, inner):
            assert shows(request, "ALWAYS run the dry run first.")
            assert shows(request, "password rotates")
    with opened() as again:  # reopened within the turn: its input is read back from the log
        assert again._input_in_log() == ("Use deploys to deploy the api to staging.", 1)
        again.log.path = None  # read back through the headers' parents: the whole path is never built
        reopened = again.prepare()
        del again.log.path
        assert shows(reopened, "ALWAYS run the dry run first.")
        assert shows(reopened, "password rotates")
        assert reopened.report.memories == 1


def test_results_given_as_the_input_are_the_turns_next_step(tmp_path):
    """Tool results sent through ``prepare(user_input)``, as Anthropic's own
    loop builds them, are a step of the turn: its memories and skills stay
    in the request, its number stays, and the step goes on; given again
    (the model's call failed) they are that step again, live or reopened."""
    from context_core.prompt import Skill

    skill = Skill("deploys", "Deploy a service", "ALWAYS run the dry run first.")

    def opened():
        return open_session(
            tmp_path, model="claude-sonnet-4-5", compact=False, store=_DeployMemory(), skills=[skill]
        )

    def shows(request, text: str) -> bool:
        return text in json.dumps(dict(request))

    def results(call_id: str) -> dict:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}]}

    with opened() as session:
        first = session.prepare("Use deploys to deploy the api to staging.")
        session.record(anthropic_call("t1"))
        step = session.prepare(results("t1"))
        logged = len(session.history())
        again = session.prepare(results("t1"))  # the model's call failed
        assert len(session.history()) == logged
        session.record(anthropic_call("t2"))
        later = session.prepare(results("t2"))
        for request in (first, step, again, later):
            assert shows(request, "ALWAYS run the dry run first.")
            assert shows(request, "password rotates")
        reported = [(r.report.turn, r.report.step) for r in (first, step, again, later)]
        assert reported == [(0, 0), (0, 1), (0, 1), (0, 2)]
        answered = session.prepare("Thanks. Now check the logs.")
        assert (answered.report.turn, answered.report.step) == (1, 0)
    with opened() as reopened:
        reopened.prepare("Use deploys to deploy the api to staging, again.")
        reopened.record(anthropic_call("t3"))
    with opened() as reopened:  # reopened within the turn, its results then given
        step = reopened.prepare(results("t3"))
        assert (step.report.turn, step.report.step) == (2, 1)  # the log's third turn
        assert shows(step, "password rotates")
        assert shows(step, "ALWAYS run the dry run first.")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_inner_step_needs_something_to_answer(tmp_path, provider):
    """After a reply with no tool result since, the request would end with
    the model's own reply: Anthropic takes it as a prefill (and refuses one
    that ends in whitespace), OpenAI answers its own answer."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    with open_session(tmp_path, model=model, compact=False) as session:
        assert not session.needs_reply
        session.prepare("Say hi")
        assert session.needs_reply
        session.record({"role": "assistant", "content": "Hi there!\n"})
        assert not session.needs_reply
        with pytest.raises(InvalidInputError, match="nothing to answer"):
            session.prepare()
        session.prepare("Read a.py")
        session.record(calling("t1", provider))
        with pytest.raises(InvalidInputError, match="record the tool results"):
            session.prepare()  # the call waits for its result
        session.record_tool_result("t1", "x = 1")
        assert session.needs_reply
    with open_session(tmp_path, model=model, compact=False) as again:  # read back from the log
        assert again.needs_reply
        last = again.prepare()["messages"][-1]
        assert last["role"] == ("tool" if provider == "openai" else "user")
        again.record({"role": "assistant", "content": "It sets x."})
    with open_session(tmp_path, model=model, compact=False) as third:
        assert not third.needs_reply


@pytest.mark.parametrize("made", [WeightedWindow, PriorityAssembly, ShapeHistory])
def test_a_policy_counting_in_another_encoding_is_refused_at_open(tmp_path, made):
    """gpt-4's log counts in cl100k_base; a policy made with the default
    tokenizer counts in o200k_base. Refused at open, nothing logged."""
    with pytest.raises(InvalidInputError, match="counts tokens in o200k_base"):
        open_session(tmp_path, model="gpt-4", policy=made(), compact=False)
    with open_session(
        tmp_path, model="gpt-4", policy=made(tokenizer=Tokenizer("cl100k_base")), compact=False
    ) as session:
        assert session.prepare("first question")["messages"][-1]["content"] == "first question"
        assert len(session.history()) == 1


def test_a_reopened_turn_whose_input_has_no_text_loads_no_older_turns_skill(tmp_path):
    from context_core.prompt import Skill

    skill = Skill("deploys", "Deploy a service", "ALWAYS run the dry run first.")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with open_session(tmp_path, compact=False, skills=[skill]) as session:
        session.prepare("Use deploys to deploy the api.")
        session.record({"role": "assistant", "content": "done"})
        session.prepare({"role": "user", "content": [image]})  # a new turn: a screenshot alone
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        session.record_tool_result("c1", "ok")
        assert "dry run" not in json.dumps(dict(session.prepare()))
    with open_session(tmp_path, compact=False, skills=[skill]) as again:
        assert "dry run" not in json.dumps(dict(again.prepare()))


def test_a_result_given_twice_is_refused_not_routed_to_a_sibling(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("go")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("a"), call("a_2", "b.py")]})
        session.record_tool_result("a", "A result")
        with pytest.raises(InvalidInputError, match="no tool call 'a' is waiting"):
            session.record_tool_result("a", "A result again")
        assert [c.id for c in session.pending] == ["a_2"]


def test_after_a_reopen_a_result_given_twice_is_still_refused(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("go")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("a"), call("a_2", "b.py")]})
    with open_session(tmp_path, compact=False) as again:
        again.record_tool_result("a", "A result")
        with pytest.raises(InvalidInputError, match="no tool call 'a' is waiting"):
            again.record_tool_result("a", "A result again")
        assert [c.id for c in again.pending] == ["a_2"]


def a_then_a_again(session, second: list[dict]) -> tuple:
    """Turn 1 calls `a` and has it answered ("one"); turn 2's reply makes
    the ``second`` calls. Its ToolCalls, under the stored ids."""
    session.prepare("turn 1")
    session.record({"role": "assistant", "content": None, "tool_calls": [call("a")]})
    session.record_tool_result("a", "one")
    session.record({"role": "assistant", "content": "Done."})
    session.prepare("turn 2")
    return session.record({"role": "assistant", "content": None, "tool_calls": second})


def test_after_a_reopen_an_ambiguous_server_id_is_refused_not_guessed(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        calls = a_then_a_again(session, [call("a_2", "two.py"), call("a", "three.py")])
        assert [c.id for c in calls] == ["a_2", "a_3"]
    with open_session(tmp_path, compact=False) as again:
        with pytest.raises(InvalidInputError, match="waiting: a_2, a_3"):
            again.record_tool_result("a", "three")  # a_3, or a stale a? the log cannot say
        again.record_tool_result("a_2", "two")
        again.record_tool_result("a_3", "three")
        assert again.pending == ()


def test_an_anthropic_call_with_nothing_to_answer_is_refused(tmp_path):
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        with pytest.raises(InvalidInputError, match="nothing to answer"):
            session.prepare()
        assert session.prepare("hi")["messages"] == [{"role": "user", "content": "hi"}]


def test_a_failed_step_is_no_step(tmp_path):
    class Failing(PriorityAssembly):
        fail = False

        def select(self, *args, **kwargs):
            if self.fail:
                raise OverBudgetError("no room")
            return super().select(*args, **kwargs)

    policy = Failing()
    with open_session(tmp_path, policy=policy, compact=False) as session:
        with pytest.raises(InvalidInputError, match="nothing to answer"):
            session.prepare()
        first = session.prepare("hello")
        assert (first.report.turn, first.report.step) == (0, 0)
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        session.record_tool_result("c1", "x")
        policy.fail = True
        for _ in range(2):
            with pytest.raises(OverBudgetError):
                session.prepare()
        policy.fail = False
        inner = session.prepare()
        assert (inner.report.turn, inner.report.step) == (0, 1)


@pytest.mark.parametrize("role", ["assistant", "tool", "system"])
def test_an_input_of_another_role_is_refused(tmp_path, role):
    with open_session(tmp_path, compact=False) as session:
        with pytest.raises(InvalidInputError, match=f"not role '{role}'"):
            session.prepare({"role": role, "content": "x", "tool_call_id": "t"})
        assert session.history() == []


def test_ids_a_server_gives_beside_a_renamed_one_keep_their_own_calls(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        calls = a_then_a_again(session, [call("a", "two.py"), call("a_2", "three.py")])
        assert [(c.id, c.arguments["path"]) for c in calls] == [("a_3", "two.py"), ("a_2", "three.py")]
        session.record_tool_result("a_2", "contents of three.py")  # the server's own a_2
        session.record_tool_result("a", "contents of two.py")  # the server's a, given again
        sent = session.prepare()["messages"]
        answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
        assert answers == {"a": "one", "a_2": "contents of three.py", "a_3": "contents of two.py"}


def test_after_a_reopen_an_id_in_the_window_given_again_is_stored_fresh(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Read zero.py")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("call_0", "zero.py")]})
        session.record_tool_result("call_0", "contents of zero.py")
        session.record({"role": "assistant", "content": "Read."})
        for turn in range(40):  # past the tail a reopen reads for waiting calls
            session.prepare(f"chat {turn}")
            session.record({"role": "assistant", "content": f"reply {turn}"})
    with open_session(tmp_path, compact=False) as again:
        again.prepare("Read new.py")
        (fresh,) = again.record(
            {"role": "assistant", "content": None, "tool_calls": [call("call_0", "new.py")]}
        )
        assert fresh.id == "call_0_2"
        again.record_tool_result("call_0", "contents of new.py")
        request = again.prepare()
        assert [c.action for c in request.report.repairs] == []
        results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        assert results == ["contents of zero.py", "contents of new.py"]
    with open_session(
        tmp_path, compact=False
    ) as third:  # waiting across a reopen, answered by the server's id
        third.prepare("Read last.py")
        third.record({"role": "assistant", "content": None, "tool_calls": [call("call_0", "last.py")]})
    with open_session(tmp_path, compact=False) as fourth:
        assert [c.id for c in fourth.pending] == ["call_0_3"]
        fourth.record_tool_result("call_0", "contents of last.py")
        assert fourth.pending == ()


def test_after_a_reopen_an_id_outside_the_window_given_again_is_stored_fresh(tmp_path):
    """An old turn can come back into a window that widens (here a larger
    budget; a learned ratio under 1 does the same): an id given again beside
    it must not be repaired away with the turn in progress's result."""
    narrow = Budget.for_model("gpt-4o", window=6_000)
    with open_session(tmp_path, compact=False, budget=narrow) as session:
        session.prepare("Read zero.py")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("call_0", "zero.py")]})
        session.record_tool_result("call_0", "contents of zero.py")
        session.record({"role": "assistant", "content": "Read."})
        for turn in range(40):
            session.prepare(f"chat {turn} " + "words " * 150)
            session.record({"role": "assistant", "content": f"reply {turn}"})
    with open_session(tmp_path, compact=False, budget=narrow) as again:
        first = again.prepare("Look again")
        assert "contents of zero.py" not in json.dumps(first["messages"])  # outside the window at open
        (fresh,) = again.record(
            {"role": "assistant", "content": None, "tool_calls": [call("call_0", "new.py")]}
        )
        assert fresh.id == "call_0_2"
        again.record_tool_result("call_0", "contents of new.py")
    with open_session(tmp_path, compact=False) as wide:  # the whole history fits again
        request = wide.prepare()
        assert [c.action for c in request.report.repairs] == []
        results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        assert results == ["contents of zero.py", "contents of new.py"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_message_the_repair_would_refuse_is_refused_before_the_log(tmp_path, provider):
    """The log holds any JSON; the repair each selection runs refuses a block
    that is not a dict, an id that is not a str... Logged, such a message
    failed every later turn (as a first message, for good)."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    with open_session(tmp_path, model=model, compact=False) as session:
        for bad in (
            {"role": "user", "content": ["a", "b"]},
            {"role": "user", "content": "x", "tool_call_id": 5},
        ):
            with pytest.raises(InvalidTypeError, match=r"^user_input\."):
                session.prepare(bad)
        assert session.history() == []
        session.prepare("Read a.py")
        for bad in (
            {"role": "assistant", "content": ["Hi"]},
            {"role": "assistant", "content": "Hi", "tool_call_id": 5},
        ):
            with pytest.raises(InvalidTypeError, match=r"^reply\."):
                session.record(bad)
        session.record(calling("t1", provider))
        with pytest.raises(InvalidTypeError, match=r"^result\.content\[0\]"):
            session.record_tool_result("t1", [{"type": "text", "text": 5}])
        session.record_tool_result("t1", "x = 1")
        assert len(session.history()) == 3  # the input, the call, its result: nothing refused was logged
        assert session.prepare()["messages"][-1]["role"] in ("tool", "user")


def test_a_damaged_old_reply_does_not_keep_the_session_from_opening(tmp_path):
    """The open reads every reply's call ids; a record damaged since (one
    byte of an old turn) is passed over, and the later replies' ids are
    still known."""
    with open_session(tmp_path, compact=False) as session:
        for turn in range(3):
            session.prepare(f"question {turn}")
            (made,) = session.record({"role": "assistant", "content": None, "tool_calls": [call(f"c{turn}")]})
            session.record_tool_result(made.id, "ok")
            session.record({"role": "assistant", "content": "done"})
        for turn in range(40):  # past the tail an open reads, and the window
            session.prepare(f"chat {turn} " + "words " * 60)
            session.record({"role": "assistant", "content": f"reply {turn}"})
    headers = MessageLog.open(tmp_path / "session" / "log", readonly=True).headers().copy()
    first = int(np.flatnonzero(headers["flags"] & 2)[0])  # the first reply that made calls
    with open(tmp_path / "session" / "log" / "data", "r+b") as data:
        data.seek(int(headers["offset"][first]) + 80 + 10)  # inside its payload, past the frame's head
        byte = data.read(1)
        data.seek(-1, 1)
        data.write(bytes([byte[0] ^ 0xFF]))
    with open_session(tmp_path, compact=False, budget=Budget.for_model("gpt-4o", window=4_000)) as again:
        again.prepare("next question")
        (fresh,) = again.record({"role": "assistant", "content": None, "tool_calls": [call("c2")]})
        assert fresh.id == "c2_2"  # a later reply's id is still known


@pytest.mark.parametrize(("batch_bytes", "batches"), [(1, 12), (8 << 20, 1)])
def test_the_open_reads_call_ids_in_batches_bounded_by_bytes(tmp_path, monkeypatch, batch_bytes, batches):
    from context_core.session import session as module

    with open_session(tmp_path, compact=False) as session:
        for turn in range(12):
            session.prepare(f"question {turn}")
            (made,) = session.record({"role": "assistant", "content": None, "tool_calls": [call(f"c{turn}")]})
            session.record_tool_result(made.id, "ok")
    monkeypatch.setattr(module, "_ID_BATCH_BYTES", batch_bytes)
    with open_session(tmp_path, compact=False) as again:
        reads: list[int] = []
        original = again.log._read

        def counted(seqs):
            reads.append(len(seqs))
            return original(seqs)

        monkeypatch.setattr(again.log, "_read", counted)
        assert again._ids_in_log() == {f"c{turn}" for turn in range(12)}
        assert len(reads) == batches
        assert sum(reads) == 12


def test_a_first_input_that_stays_after_a_failed_turn_is_the_turns(tmp_path):
    """The first message of a log has no node to go back to: it stays, so
    the session treats it as logged (the next prepare() answers it), not as
    undone (a retry would log it twice, and prepare() found nothing to answer)."""

    class Failing(PriorityAssembly):
        fail = True

        def select(self, *args, **kwargs):
            if self.fail:
                raise OverBudgetError("no room")
            return super().select(*args, **kwargs)

    for retry in (None, "first question"):  # prepare(), or the same input again
        policy = Failing()
        with open_session(tmp_path / str(retry), policy=policy, compact=False) as session:
            with pytest.raises(OverBudgetError):
                session.prepare("first question")
            with pytest.raises(OverBudgetError):
                session.prepare(retry)  # failing again changes nothing
            policy.fail = False
            assert [m["content"] for m in session.history()] == ["first question"]
            assert session.needs_reply
            request = session.prepare(retry)
            assert request["messages"][-1]["content"] == "first question"
            assert (request.report.turn, request.report.step) == (0, 0)
            assert [m["content"] for m in session.history()] == ["first question"]
            session.record({"role": "assistant", "content": "answer"})
            assert session.prepare("first question").report.turn == 1  # said again later: a new turn
            assert len(session.history()) == 3
    policy = Failing()
    with open_session(tmp_path / "between", policy=policy, compact=False) as session:
        with pytest.raises(OverBudgetError):
            session.prepare("q")  # kept: the first message
        with pytest.raises(OverBudgetError):
            session.prepare("r")  # taken back
    with open_session(tmp_path / "between", compact=False) as reopened:  # the log says what waits
        assert reopened.needs_reply
        assert reopened.prepare("q")["messages"][-1]["content"] == "q"
        assert [m["content"] for m in reopened.history()] == ["q"]
        mutable = {"role": "user", "content": [{"type": "text", "text": "delete file A"}]}
        reopened.record({"role": "assistant", "content": "which file?"})
        reopened.prepare(mutable)
        mutable["content"][0]["text"] = "delete file B"  # changed by the caller after the call
        sent = reopened.prepare(mutable)["messages"][-1]["content"]
        assert "delete file B" in json.dumps(sent)  # the stored input is compared, not the caller's object


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_a_failed_turn_leaves_the_log_one_chain(tmp_path, policy):
    """A turn whose request fails after its input is logged takes the input
    back with a rewind; the log is still one chain (with holes) to every
    policy, chosen from its headers rather than walked: at a million
    messages a walk costs each later turn about 80 ms, the chain 5."""
    with open_session(tmp_path, policy=policy, compact=False) as session:
        for turn in range(3):
            session.prepare(f"question {turn}")
            session.record({"role": "assistant", "content": f"answer {turn}"})
        with selection_failing(session), pytest.raises(OverBudgetError):
            session.prepare("this turn fails")
        assert [m["content"] for m in session.history()][-1] == "answer 2"  # taken back
        request = session.prepare("the next question")
        sent = json.dumps(request["messages"])
        assert "the next question" in sent
        assert "this turn fails" not in sent
        chosen = session._select(10_000)
        assert isinstance(chosen._dropped.view, tuple)  # the chain with its holes, not a walked path
        assert list(chosen.kept) == [int(seq) for seq in session.log.path()]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_retry_check_reads_no_tool_message(tmp_path, monkeypatch, provider):
    """Whether an input is a retry is found past the turn's steps: a tool
    message's output, large maybe, is never read for it. An Anthropic
    message of results is read (it may hold an image, and be an input)."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    with open_session(tmp_path, model=model, compact=False) as session:
        session.prepare("Read big.log")
        session.record(calling("t1", provider))
        session.record_tool_result("t1", "line\n" * 50_000)
        reads: list[list[int]] = []
        original = session.log.read

        def counted(seqs):
            seqs = list(seqs)
            reads.append(seqs)
            return original(seqs)

        monkeypatch.setattr(session.log, "read", counted)
        assert session._retried_steps({"role": "user", "content": "Read other.log"}) is None
        assert session._retried_steps({"role": "user", "content": "Read big.log"}) == 1
        assert reads == ([[0], [0]] if provider == "openai" else [[2], [0], [2], [0]])


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def test_results_with_an_image_are_an_input_the_retry_check_stops_at(tmp_path):
    """Results sent with an image are the turn's input from then on: the
    first input said again after it is a new message, not a retry."""
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("Take a screenshot")
        session.record(anthropic_call("t1"))
        session.prepare(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}, IMAGE],
            }
        )
        session.record(anthropic_call("t2"))
        session.record_tool_result("t2", "ok")
        session.prepare("Take a screenshot")
        assert session.history()[-1]["content"] == "Take a screenshot"
        assert len(session.history()) == 6


def test_an_input_with_results_retried_after_a_step_is_logged_once(tmp_path):
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("Read a.py")
        session.record(anthropic_call("t1"))
        given = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a.py: ok"},
                {"type": "text", "text": "also check b.py"},
            ],
        }
        session.prepare(given)
        session.record(anthropic_call("t2"))
        session.record_tool_result("t2", "b.py: ok")
        logged = len(session.history())
        request = session.prepare(given)  # the model's call failed; the server tries the turn again
        assert len(session.history()) == logged
        assert (request.report.turn, request.report.step) == (1, 1)


def test_a_call_asked_for_again_is_the_same_step_live_as_reopened(tmp_path):
    """A server asks for the request again after the model's call failed:
    with no reply recorded since, it is the same step, as a reopened session
    reports it (each retry counted as a step before, live only)."""
    with open_session(tmp_path, compact=False) as session:
        steps = [session.prepare("Fix the refund job.").report.step]
        steps += [session.prepare().report.step for _ in range(2)]
        session.record(calling("t1", "openai"))
        session.record_tool_result("t1", "ok")
        steps += [session.prepare().report.step for _ in range(2)]
    with open_session(tmp_path, compact=False) as reopened:
        steps += [reopened.prepare().report.step, reopened.prepare("Fix the refund job.").report.step]
    assert steps == [0, 0, 0, 1, 1, 1, 1]


def test_retries_of_a_later_step_report_that_step(tmp_path):
    """The step a retry builds is the turn's next, however often it is
    retried, live or reopened, and after a retry that failed."""
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Read a and b")
        session.record(calling("t1", "openai"))
        session.record_tool_result("t1", "ok")
        session.prepare()
        session.record(calling("t2", "openai"))
        session.record_tool_result("t2", "ok")
        assert session.prepare().report.step == 2  # its model call fails
        assert session.prepare("Read a and b").report.step == 2
        assert session.prepare("Read a and b").report.step == 2
    with open_session(tmp_path, compact=False) as reopened:
        with selection_failing(reopened), pytest.raises(OverBudgetError):
            reopened.prepare("Read a and b")
        assert (reopened.prepare().report.turn, reopened.last_report.step) == (0, 2)


@pytest.mark.parametrize("made", [0, 1, 2])
def test_a_session_reopened_within_a_turn_reports_its_next_step(tmp_path, made):
    """Reopened after some of a turn's steps, the next call is the step
    after them, as a retry of its input would report."""
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Read a and b")
        for n in range(made):
            if n:
                session.prepare()
            session.record(calling(f"t{n}", "openai"))
            session.record_tool_result(f"t{n}", "ok")
    with open_session(tmp_path, compact=False) as reopened:
        assert reopened.prepare("Read a and b").report.step == made  # a retry of its input
    with open_session(tmp_path, compact=False) as reopened:
        assert reopened.prepare().report.step == made
        assert reopened.prepare().report.step == made  # asked again, no reply since: a retry
    with open_session(tmp_path, compact=False) as reopened:
        with selection_failing(reopened), pytest.raises(OverBudgetError):
            reopened.prepare()  # the first call fails: no step
        assert reopened.prepare().report.step == made
        reopened.record(calling("again", "openai"))
        reopened.record_tool_result("again", "ok")
        assert reopened.prepare().report.step == made + 1


def test_turn_numbers_go_on_from_the_log_after_a_reopen(tmp_path):
    """Turns count over the log's life, not the handle's: a reopened
    session's next turn follows its log's last, a turn whose input was taken
    back (its call failed) is no turn, and a reopened turn in progress keeps
    its number. The extension and the twin count the log's turns alike."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with open_session(tmp_path, compact=False) as session:
        for said in ("Read a.py", {"role": "user", "content": [image]}):  # an image alone is a turn too
            session.prepare(said)
            session.record({"role": "assistant", "content": "Done."})
        with selection_failing(session), pytest.raises(OverBudgetError):
            session.prepare("This one fails")  # taken back: not a turn
        path = session.log._path
    with open_session(tmp_path, compact=False) as reopened:
        request = reopened.prepare("And c.py")
        assert (request.report.turn, request.report.step) == (2, 0)
        reopened.record(calling("t1", "openai"))
        reopened.record_tool_result("t1", "ok")
        reopened.prepare()
        reopened.record(calling("t2", "openai"))
        reopened.record_tool_result("t2", "ok")
    with open_session(tmp_path, compact=False) as reopened:
        with selection_failing(reopened), pytest.raises(OverBudgetError):
            reopened.prepare()  # a failed call: the next is still this step
        assert (reopened.prepare().report.turn, reopened.last_report.step) == (2, 2)
        assert reopened.prepare("And d.py").report.turn == 3
        assert reopened.log._turns() == 4
    with reference.MessageLog.open(path, readonly=True) as twin:
        assert twin._turns() == 4


def test_results_sent_with_an_image_and_given_again_are_logged_once(tmp_path):
    """A user message of tool results and an image (no text: its header has
    no text flag) is still the input waiting, and its retry is not logged."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("list files")
        session.record(anthropic_call("t1"))
        answer = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}, image],
        }
        session.prepare(answer)
        session.prepare(answer)  # the model's call failed; the server tries again
        assert len(session.history()) == 3


def test_an_input_given_again_after_the_models_call_failed_is_logged_once(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Fix the build")
        session.prepare("Fix the build")  # the model's call failed; the server tries the turn again
        assert [m["content"] for m in session.history()] == ["Fix the build"]
        request = session.prepare("Fix the build")
        assert request["messages"][-1]["content"] == "Fix the build"
        assert (request.report.turn, request.report.step) == (0, 0)
        session.record({"role": "assistant", "content": "Fixed."})
        session.prepare("Thanks")
        session.prepare("Thanks, and the tests?")  # another input, not a retry: both kept
        assert len(session.history()) == 4


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("reopened", [False, True])
def test_a_turn_retried_after_a_later_steps_call_failed_goes_on_where_it_was(tmp_path, provider, reopened):
    """A server that retries the whole turn after the model's call failed at
    a later step sends the turn's input again: the turn goes on from its
    results, the input is not logged twice. Another input is a new message,
    and after the answer the same input is a new turn."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    session = open_session(tmp_path, model=model, compact=False)
    session.prepare("Read a.log and b.log")
    session.record(calling("t1", provider))
    session.record_tool_result("t1", "a.log: ok")
    session.prepare()
    session.record(calling("t2", provider))
    session.record_tool_result("t2", "b.log: failed at line 7")
    # The model's call for the next step fails; the server tries the turn again.
    if reopened:
        session.close()
        session = open_session(tmp_path, model=model, compact=False)
    with session:
        logged = len(session.history())
        request = session.prepare("Read a.log and b.log")
        assert len(session.history()) == logged
        assert "b.log: failed at line 7" in json.dumps(request["messages"][-1])
        if not reopened:
            assert (request.report.turn, request.report.step) == (0, 2)  # the next step
        session.record({"role": "assistant", "content": "b.log failed at line 7."})
        assert session.prepare("Read a.log and b.log").report.step == 0  # answered: a new turn
        assert len(session.history()) == logged + 2


def test_another_input_in_the_middle_of_a_turn_is_logged(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Read a.log")
        session.record(calling("t1", "openai"))
        session.record_tool_result("t1", "a.log: ok")
        session.prepare("Also read b.log")
        assert [m.get("content") for m in session.history()][-1] == "Also read b.log"
        assert len(session.history()) == 4


def test_a_failing_store_on_the_first_turn_logs_nothing(tmp_path):
    class FlakyStore:
        failures = 2

        def search(self, *args, **kwargs):
            if self.failures:
                self.failures -= 1
                raise OSError("store unreachable")
            return []

        def conversation_ended(self, *args, **kwargs):
            return None

    with open_session(tmp_path, store=FlakyStore(), compact=False) as session:
        for _ in range(2):
            with pytest.raises(OSError, match="unreachable"):
                session.prepare("What is in a.py?")
            assert session.history() == []
        sent = session.prepare("What is in a.py?")["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == ["What is in a.py?"]


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_a_first_input_that_cannot_fit_beside_the_prompt_is_not_logged(tmp_path, policy):
    budget = Budget.for_model("gpt-4o", window=8_000)
    identity = "You are an agent. Rule: keep every order_id exactly as written. " * 120
    with open_session(tmp_path, identity=identity, policy=policy, budget=budget, compact=False) as session:
        near = "word " * (
            budget.messages(system_tokens=0) - 100
        )  # under the bare limit, not beside the prompt
        with pytest.raises(OverBudgetError, match="beside the prompt"):
            session.prepare(near)
        assert session.history() == []
    with open_session(tmp_path, identity=identity, policy=policy, budget=budget, compact=False) as again:
        assert again.prepare("short question")["messages"][-1]["content"] == "short question"


@pytest.mark.parametrize("policy", ["priority", "shape"])
def test_an_input_at_the_edge_of_the_room_is_sent_or_refused_before_the_log(tmp_path, policy):
    """The check before logging uses the room the selection gets (its
    margin included): an input either goes out or is never logged."""
    budget = Budget.for_model("gpt-4o", window=3_000)
    outcomes = set()
    for words in range(1_500, 2_100, 4):
        text = "word " * words
        with open_session(tmp_path / str(words), policy=policy, budget=budget, compact=False) as session:
            try:
                request = session.prepare(text)
            except OverBudgetError:
                outcomes.add("refused")
                assert len(session.log) == 0
                continue
            outcomes.add("sent")
            assert request["messages"][-1]["content"] == text
    assert outcomes == {"sent", "refused"}  # the sweep crosses the edge


def test_a_margin_learned_from_one_request_does_not_refuse_a_later_input(tmp_path):
    """A request that came out over its room once makes the session leave
    more room spare (up to 1% of the limit); an input that fits the room
    at the least margin is still sent, not refused."""

    class OverOnce(PriorityAssembly):
        over = 0

        def select(self, log, room, **kwargs):
            room, self.over = room + self.over, 0
            return super().select(log, room, **kwargs)

    policy = OverOnce()
    budget = Budget.for_model("gpt-4o", window=64_000)
    tok = Tokenizer()
    with open_session(tmp_path, policy=policy, budget=budget, compact=False) as session:
        for turn in range(30):  # more history than the room holds
            session.prepare(f"filler {turn} " + "word " * 2_000)
            session.record({"role": "assistant", "content": "ok"})
        policy.over = 5_000
        assert session.prepare("next").report.shrunk == 1
        session.record({"role": "assistant", "content": "ok"})
        assert session._render_margin > 100  # learned
        room = session._room(session.builder.build(now="2026-01-01T00:00").breakdown.total)
        wanted = room - 40  # past the learned margin, within the least one
        words = next(
            n
            for n in range(wanted, 0, -1)
            if tok.count_messages([{"role": "user", "content": "word " * n}]) <= wanted
        )
        big = "word " * words
        request = session.prepare(big, now="2026-01-01T00:00")
        assert request["messages"][-1]["content"] == big
        assert request.report.total <= request.report.limit


def test_a_failed_turn_leaves_no_memories_behind(tmp_path):
    class EchoStore:
        def search(self, query, **kwargs):
            return []

        def search_texts(self, query, **kwargs):
            return [f"memory about: {query[:24]}"]

        def conversation_ended(self, *args, **kwargs):
            return None

    budget = Budget.for_model("gpt-4o", window=4_000)
    for policy in ("weighted", "shape"):
        with open_session(
            tmp_path / policy, store=EchoStore(), policy=policy, budget=budget, compact=False
        ) as session:
            session.prepare("Read a.py please")
            session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
            with pytest.raises(OverBudgetError):
                session.prepare("SECRET doomed " + "word " * 3_000)
            session.record_tool_result("c1", "print(1)")
            sent = json.dumps(session.prepare())
            assert "SECRET" not in sent
            assert "memory about: Read a.py please" in sent


def test_a_turn_whose_request_fails_leaves_its_input_out_of_the_history(tmp_path):
    class FlakyStore:
        failing = False

        def search(self, *args, **kwargs):
            if self.failing:
                raise OSError("store unreachable")
            return []

        def conversation_ended(self, *args, **kwargs):
            return None

    store = FlakyStore()
    session = open_session(tmp_path, store=store, compact=False)
    session.prepare("Read a.py")
    session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
    store.failing = True
    with pytest.raises(OSError, match="unreachable"):
        session.prepare("This question never reached the model")
    assert [c.id for c in session.pending] == ["c1"]  # the call still waits, as before the turn
    assert all("never reached" not in str(m.get("content")) for m in session.history())
    store.failing = False
    session.record_tool_result("c1", "print('a')")
    sent = session.prepare()["messages"]
    assert all("never reached" not in str(m.get("content")) for m in sent)
    assert sent[-1]["role"] == "tool"
    session.close()


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_an_input_over_the_limit_is_refused_before_the_log(tmp_path, policy):
    budget = Budget.for_model("gpt-4o", window=4_000)
    with open_session(tmp_path, policy=policy, budget=budget, compact=False) as session:
        with pytest.raises(OverBudgetError, match="beside the prompt") as raised:
            session.prepare("log line\n" * 4_000)
        assert raised.value.budget < budget.messages(system_tokens=0)  # less the prompt
        assert raised.value.turn_in_progress > raised.value.budget
        assert session.history() == []
        assert session.prepare("hello")["messages"][-1]["content"] == "hello"
        session.record({"role": "assistant", "content": "Hello."})
        # Over once the prompt and the turn are laid out, though not alone:
        # the failed input is left out of the view, and the session goes on.
        limit = budget.messages(system_tokens=0)
        near = "word " * (limit - 40)
        assert session.tokenizer.count_messages([{"role": "user", "content": near}]) <= limit
        with pytest.raises(OverBudgetError):
            session.prepare(near)
        assert [m["content"] for m in session.history() if m["role"] == "user"] == ["hello"]
        assert session.prepare("still here")["messages"][-1]["content"] == "still here"


def test_a_session_longer_than_one_extraction_still_persists_its_learnings(tmp_path, caplog):
    """MEMORY.md's extraction takes at most ``max_batch_bytes`` of text at
    once: a longer session's messages go in runs that fit, so its first and
    last rules are both learned and close() does not raise; a message over
    the limit on its own is left out (and said so in the log)."""
    from context_core import MemoryFiles

    memory = MemoryFiles(tmp_path / "memory", max_batch_bytes=2_000)
    with open_session(tmp_path, compact=False, memory=memory) as session:
        session.prepare("You must never drop the order_id from a log line.")
        session.record({"role": "assistant", "content": "Understood."})
        for turn in range(30):
            session.prepare(f"Now fix bug {turn} in payments/retry.go, it fails on every retry we make.")
            session.record({"role": "assistant", "content": f"Fixed bug {turn} in the retry loop."})
        session.prepare("Paste: " + "x" * 3_000)  # over the limit alone
        session.record({"role": "assistant", "content": "Noted."})
        session.prepare("Always run the dry run before a deploy to staging.")
        session.record({"role": "assistant", "content": "Will do."})
    learned = (tmp_path / "memory" / "MEMORY.md").read_text()
    assert "order_id" in learned
    assert "dry run" in learned
    assert any("1 message(s) over max_batch_bytes=2000" in r.getMessage() for r in caplog.records)


def test_short_rules_whose_facts_outgrow_their_text_are_still_learned(tmp_path):
    """A label makes a short rule's fact line about twice its text, so a
    run of them that fits as text can pass the limit as facts: it is learned
    in halves instead of raising at close and learning nothing."""
    from context_core import MemoryFiles

    memory = MemoryFiles(tmp_path / "memory", max_batch_bytes=2_000)
    with open_session(tmp_path, compact=False, memory=memory) as session:
        for n in range(60):
            session.prepare(f"Always run suite {n}.")
            session.record({"role": "assistant", "content": "OK."})
    learned = (tmp_path / "memory" / "MEMORY.md").read_text()
    assert "suite 0." in learned
    assert "suite 59." in learned


def learned_from_one_message(tmp_path, caplog, text: str, **limits: int) -> str:
    """MEMORY.md's files after a session of one input ``text`` closed,
    with the memory files' ``limits``; the warnings go to ``caplog``."""
    from context_core import MemoryFiles

    memory = MemoryFiles(tmp_path / "memory", **limits)
    with (
        caplog.at_level(logging.WARNING, logger="context_core"),
        open_session(tmp_path, compact=False, memory=memory) as session,
    ):
        session.prepare(text)
        session.record({"role": "assistant", "content": "OK."})
    return "".join(path.read_text() for path in (tmp_path / "memory").glob("*.md"))


def test_one_message_whose_facts_outgrow_a_batch_is_learned_in_runs(tmp_path, caplog):
    """One message of many short rules: its text fits a batch, its facts do
    not. They go in runs that fit, every one learned, and no warning says a
    message was left out."""
    text = " ".join(f"Always run suite {n}." for n in range(60))
    assert len(text.encode()) < 2_000
    learned = learned_from_one_message(tmp_path, caplog, text, max_batch_bytes=2_000)
    assert all(f"suite {n}." in learned for n in range(60))
    assert "left out" not in caplog.text


def test_a_fact_over_the_line_limit_is_left_out_and_said(tmp_path, caplog):
    """A fact whose line alone is over ``max_line_bytes`` cannot be written:
    the message's other facts are, and the warning counts that fact."""
    long_rule = "Always keep the path /srv/" + "a" * 250 + " intact."
    text = " ".join([long_rule, *(f"Never skip check {n}." for n in range(12))])
    learned = learned_from_one_message(tmp_path, caplog, text, max_batch_bytes=600, max_line_bytes=200)
    assert all(f"check {n}." in learned for n in range(12))
    assert "a" * 250 not in learned
    assert "1 fact(s) over max_line_bytes=200 left out" in caplog.text


def test_a_failing_store_still_lets_memory_persist_and_the_log_close(tmp_path):
    class BrokenStore:
        def search(self, *args, **kwargs):
            return []

        def conversation_ended(self, *args, **kwargs):
            raise OSError("disk full")

    session = open_session(tmp_path, store=BrokenStore(), compact=False)
    session.prepare("You must never drop the order_id.")
    session.record({"role": "assistant", "content": "Understood."})
    with pytest.raises(OSError, match="disk full"):
        session.close()
    assert "order_id" in (tmp_path / "session" / "memory" / "MEMORY.md").read_text()
    open_session(tmp_path, compact=False).close()  # the log was closed: it opens again


def test_a_cancelled_aclose_still_closes_the_log(tmp_path):
    async def run() -> None:
        session = await AsyncSession.open(tmp_path / "session", model="gpt-4o", store=False)
        await session.prepare("hi")

        async def slow(**kwargs):
            await asyncio.sleep(10)

        session.session.compactor.aclose = slow
        task = asyncio.ensure_future(session.aclose())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)

    asyncio.run(run())
    open_session(tmp_path, compact=False).close()


def test_every_aclose_returns_only_once_the_session_is_closed(tmp_path):
    """A second aclose() (after one a timeout cancelled, or beside another)
    returned at once while the first close still persisted, with the log
    still locked: a server reopening the path then failed."""
    release = threading.Event()

    async def run() -> None:
        session = await AsyncSession.open(tmp_path / "session", model="gpt-4o", store=False)
        await session.prepare("hi")
        persist = session.session._persist

        def slow_persist() -> None:
            assert release.wait(30)
            persist()

        session.session._persist = slow_persist
        with pytest.raises(asyncio.TimeoutError):  # given up while the close persists
            await asyncio.wait_for(session.aclose(), 0.05)
        again = [asyncio.ensure_future(session.aclose()) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in again)  # the close has not ended
        with pytest.raises(LogLockedError):
            open_session(tmp_path, compact=False)
        release.set()
        await asyncio.gather(*again)
        open_session(tmp_path, compact=False).close()  # free once they return

    asyncio.run(run())


def test_a_close_that_fails_with_no_caller_left_is_logged(tmp_path, caplog):
    async def run() -> None:
        session = await AsyncSession.open(tmp_path / "session", model="gpt-4o", store=False)
        await session.prepare("hi")
        release = threading.Event()

        def failing_persist() -> None:
            assert release.wait(30)
            raise OSError("disk full")

        session.session._persist = failing_persist
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.aclose(), 0.05)
        release.set()
        await asyncio.wait([session._closing])  # the close ends with no aclose() waiting
        await session.aclose()  # closed: a later call returns, as Session.close does

    async def awaited() -> None:  # a caller waits: raised to it, not logged
        session = await AsyncSession.open(tmp_path / "other", model="gpt-4o", store=False)
        await session.prepare("hi")

        def failing_persist() -> None:
            raise OSError("disk full")

        session.session._persist = failing_persist
        with pytest.raises(OSError, match="disk full"):
            await session.aclose()
        await session.aclose()  # raised once, to the call that waited

    with caplog.at_level(logging.WARNING, logger="context_core"):
        asyncio.run(run())
        asyncio.run(awaited())
    failures = [r for r in caplog.records if "closing the session failed: disk full" in r.getMessage()]
    assert len(failures) == 1


def test_a_cancelled_close_waits_for_no_thread_at_the_loops_end():
    """Compactor.aclose joined its worker in the loop's executor: a timeout
    on it left that join blocked, and asyncio.run waited for it (for as
    long as the summarizer's model call) before it returned."""
    from context_core import Compactor

    def work() -> bool:
        release = threading.Event()
        worker = threading.Thread(target=release.wait, args=(30,), daemon=True)
        worker.start()
        compactor = Compactor.__new__(Compactor)  # only what aclose() reads
        compactor._state = threading.Lock()
        compactor._signal = threading.Condition(compactor._state)
        compactor._task, compactor._thread = None, worker

        async def main() -> None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(compactor.aclose(), 0.05)

        asyncio.run(main())
        still = worker.is_alive()  # asyncio.run returned while the worker still runs
        release.set()
        return still

    assert in_child(work, seconds=20) == "returned True"


def test_an_async_session_awaits_its_stores_embedder(tmp_path):
    """AsyncSession.prepare called the store's embedder on the event loop:
    a slow one stalled the loop, and one on an async client (aembed only,
    as an OpenAIEmbedder on AsyncOpenAI) failed every turn."""
    from context_core import MemoryStore
    from context_core.memory_store import HashingEmbedder

    hashing = HashingEmbedder(64)

    class AsyncOnly:
        name = "async-only"
        calls = 0

        def embed(self, texts):
            raise AssertionError("the sync embed of an async-only client")

        async def aembed(self, texts):
            AsyncOnly.calls += 1
            await asyncio.sleep(0)
            return hashing.embed(texts)

    class Blocking:  # a sync embedder that returns once another task has run
        name = "blocking"
        ran = threading.Event()

        def embed(self, texts):
            assert Blocking.ran.wait(10), "the event loop was blocked"
            return hashing.embed(texts)

    async def turn(embedder, path) -> str:
        store = MemoryStore(path / "memories.db", embedder=embedder)
        await store.aremember("Deploys go out on Tuesdays only.")
        async with await AsyncSession.open(
            path / "session", model="gpt-4o", store=store, compact=False
        ) as session:
            if isinstance(embedder, Blocking):
                Blocking.ran.clear()
                asyncio.get_running_loop().call_later(0.01, Blocking.ran.set)
            request = await session.prepare("When do deploys go out?")
            assert request.report.memories > 0
            assert request.report.timings["memory"] > 0
            text = json.dumps(request["messages"])
        await asyncio.to_thread(store.close)
        return text

    (tmp_path / "a").mkdir()
    assert "Tuesdays" in asyncio.run(turn(AsyncOnly(), tmp_path / "a"))
    assert AsyncOnly.calls >= 2  # the memory, then the query
    (tmp_path / "b").mkdir()
    Blocking.ran.set()  # for the store's own write
    assert "Tuesdays" in asyncio.run(turn(Blocking(), tmp_path / "b"))


def test_an_async_input_is_checked_once_unless_it_can_change_while_awaited(tmp_path, monkeypatch):
    """Awaiting the store's search, AsyncSession checked a text input, then
    checked it again to log it. A dict input (or attachments) is checked
    again after the await: the caller could change its parts meanwhile, and
    what is logged must be what was checked."""
    from context_core import MemoryStore
    from context_core.memory_store import HashingEmbedder

    hashing = HashingEmbedder(64)
    shared: dict = {"role": "user", "content": [{"type": "text", "text": "When do deploys go out?"}]}

    class Changing:  # the caller's other task changes the input during the search
        name = "changing"
        armed = False

        def embed(self, texts):
            return hashing.embed(texts)

        async def aembed(self, texts):
            if Changing.armed:
                shared["content"].append({"type": "text", "text": "and?", "weight": float("nan")})
            return hashing.embed(texts)

    checks = []
    real = Session._turn_input

    def counted(self, user_input, attachments):
        checks.append(user_input)
        return real(self, user_input, attachments)

    monkeypatch.setattr(Session, "_turn_input", counted)

    async def run() -> None:
        store = MemoryStore(tmp_path / "memories.db", embedder=Changing())
        await store.aremember("Deploys go out on Tuesdays only.")
        async with await AsyncSession.open(
            tmp_path / "session", model="gpt-4o", store=store, compact=False
        ) as session:
            request = await session.prepare("When do deploys go out?")
            assert "Tuesdays" in json.dumps(request["messages"])
            assert checks == ["When do deploys go out?"]
            await session.record({"role": "assistant", "content": "Tuesdays."})
            before = len(await session.history())
            Changing.armed = True
            with pytest.raises(InvalidInputError, match="user_input"):
                await session.prepare(shared)
            assert len(await session.history()) == before  # nothing unsendable logged
        await asyncio.to_thread(store.close)

    asyncio.run(run())


class _CountingPolicy:
    """A policy that records each call and fails while told to."""

    def __init__(self, failing: bool) -> None:
        self.calls: list[int] = []
        self.failing = failing
        self.inner = PriorityAssembly()

    def select(self, messages, budget, *, now=None):
        self.calls.append(len(messages))
        if self.failing:
            raise OverBudgetError("nothing fits")
        return self.inner.select(messages, budget, now=now)


def test_open_selects_once_so_the_first_turn_pays_no_one_time_work(tmp_path):
    session = open_session(tmp_path)
    session.prepare("Add a test for the parser.")
    session.close()
    policy = _CountingPolicy(failing=False)
    session = open_session(tmp_path, policy=policy)
    assert policy.calls == [1]  # at open, over the one message on disk
    session.prepare("And run it.")
    assert policy.calls == [1, 2]
    session.close()


def test_a_selection_that_fails_at_open_is_reported_by_the_turn(tmp_path):
    policy = _CountingPolicy(failing=True)
    session = open_session(tmp_path, policy=policy)
    assert policy.calls == [0]
    with pytest.raises(OverBudgetError):
        session.prepare("Add a test for the parser.")
    session.close()


def test_open_loads_the_stores_vectors_so_the_first_search_reads_none(tmp_path, monkeypatch):
    from context_core import MemoryStore
    from context_core.memory_store.vectors import NamespaceVectors

    store = MemoryStore(tmp_path / "memories.db")
    store.remember_many([f"Service {i} listens on port {5000 + i}." for i in range(30)])
    loads = []
    real = NamespaceVectors._load
    monkeypatch.setattr(
        NamespaceVectors, "_load", lambda self, db: (loads.append(self.namespace), real(self, db))
    )
    with open_session(tmp_path, store=store) as session:
        assert loads == ["default"]  # at open
        request = session.prepare("Which port does service 7 listen on?")
        assert loads == ["default"]
        assert request.report.memories > 0
        assert "5007" in json.dumps(request["messages"])
    store.close()
    fresh = MemoryStore(tmp_path / "memories.db")  # nothing held yet
    with open_session(tmp_path / "no-memories", store=fresh, memory_k=0):
        assert loads == ["default"]  # a session that retrieves none loads none
    with open_session(tmp_path / "more", store=fresh):
        assert loads == ["default", "default"]
    fresh.close()


def test_a_store_failing_its_own_way_at_open_leaves_the_log_closed(tmp_path):
    class OddStore:
        def search(self, *args, **kwargs):
            return []

        def preload(self, **kwargs):
            raise RuntimeError("not this way")

    with pytest.raises(RuntimeError, match="not this way") as caught:
        open_session(tmp_path, store=OddStore(), compact=False)
    # The traceback (kept) holds the failed session: its log was closed, not left to the collector.
    assert caught.traceback
    open_session(tmp_path, compact=False).close()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_the_request_count_from_the_selection_is_the_whole_requests(tmp_path, monkeypatch, provider, policy):
    """Each call's total reuses the selection's own exact count for the
    messages it hands on; counted whole, every request comes to the same.
    A replayed agent session (tool calls, long outputs, Chinese, defects)
    under a small window, so the window moves and compaction runs."""
    from agent_sessions import generate
    from context_core import select
    from context_core.session import request_count

    lined_up: list[bool] = []
    shared_run = request_count._shared_run

    def spy(messages, chosen):
        found = shared_run(messages, chosen)
        lined_up.append(found is not None)
        return found

    monkeypatch.setattr(request_count, "_shared_run", spy)
    # Long system texts (the summaries Anthropic's repair lifts, the head's
    # blocks) counted by their parts where the count cache has them.
    by_parts: dict[str, int] = {"selection": 0, "request": 0}

    def counting(where: str, joined_tokens):
        def spied(count_joined, text):
            found = joined_tokens(count_joined, text)
            by_parts[where] += found is not None
            return found

        return spied

    monkeypatch.setattr(select, "joined_tokens", counting("selection", select.joined_tokens))
    monkeypatch.setattr(request_count, "joined_tokens", counting("request", request_count.joined_tokens))
    agent = generate(300, provider, seed=4)
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    budget = Budget(window=24_000, soft_ratio=1.0, system_reserve=800, pinned_reserve=400, input_reserve=400)
    tokenizer = Tokenizer("o200k_base")
    with open_session(tmp_path, model=model, policy=policy, budget=budget, compact=True) as session:
        session.log.append({"role": "system", "content": "Stored rule: never drop the order_id."})
        calls = summarized = 0

        def checked(said: Any) -> None:
            nonlocal calls, summarized
            request = session.prepare(said)
            assert request.report.total == recount(request, tokenizer)
            assert request.report.total <= request.report.limit
            calls += 1
            sections = request.report.sections
            summarized += sections["global_summary"] + sections["segments"] > 0

        replay_calls(session, agent, checked)
    assert calls > 100
    assert sum(lined_up) > len(lined_up) // 2  # the selection's count was used on most calls
    assert summarized > calls // 3  # summaries were in view, counted with the rest
    assert by_parts["request"] > 0
    if provider == "anthropic":
        assert by_parts["selection"] > 0  # the summaries lifted into its ``system``


def test_a_long_head_counted_by_its_parts_counts_its_other_fields_each_time():
    """The head's text is counted by its blank-line parts and remembered for
    the next call; the rest of the message is counted as it is each time."""
    from context_core.session.request_count import request_tokens

    tokenizer = Tokenizer()
    head = "\n\n".join(f"Part {n}: keep the order_id ord_{n} in every line." for n in range(200))
    plain = {"messages": [{"role": "system", "content": head}, {"role": "user", "content": "hi"}]}
    named = {
        "messages": [{"role": "system", "content": head, "name": "policy"}, {"role": "user", "content": "hi"}]
    }
    for request in (plain, named, plain, named):
        assert request_tokens(tokenizer, request, None) == tokenizer.count_messages(request["messages"])


@given(parts=st.lists(st.sampled_from(["Keep it.", "退款", "  ", "\n", "end 9", "'s", ""]), max_size=4))
def test_a_long_system_block_counts_as_if_counted_whole(parts):
    """Anthropic's system blocks: a long one is counted by its blank-line
    parts (the summaries and memories joined, new each turn), the same
    number as counting the request whole."""
    from context_core.session.request_count import request_tokens

    tokenizer = Tokenizer()
    text = "\n\n".join(["Never drop the order_id. " * 90, *parts])
    request = {
        "system": [{"type": "text", "text": "You are an agent."}, {"type": "text", "text": text}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    for _ in range(2):  # the second time remembered
        assert request_tokens(tokenizer, request, None) == recount(request, tokenizer)


def session_of_turns(tmp_path, turns: int):
    """A session's log of ``turns`` answered turns; its directory and headers."""
    with open_session(tmp_path, compact=False) as session:
        for turn in range(turns):
            session.prepare(f"question {turn} " + "x" * 200)
            session.record({"role": "assistant", "content": f"answer {turn} " + "y" * 200})
    where = tmp_path / "session" / "log"
    with MessageLog.open(where) as log:
        return where, log.headers()


def damage(where, header, original: bytes | None = None) -> None:
    """One byte of ``header``'s payload flipped (in ``original``, if given)."""
    data = bytearray((where / "data").read_bytes() if original is None else original)
    data[int(header["offset"]) + int(header["stored_len"]) // 2] ^= 0xFF
    (where / "data").write_bytes(data)


def test_a_damaged_older_record_fails_the_turn_with_the_way_out(tmp_path):
    """A record older than the turns the open reads is found by the first
    window that holds it: the turn's error names the repair too."""
    where, headers = session_of_turns(tmp_path, 40)
    damage(where, headers[2])
    with open_session(tmp_path, compact=False) as session:
        expected = re.escape(f"close the session, then MessageLog.repair({str(where)!r})")
        with pytest.raises(LogCorruptError, match=expected) as raised:
            session.prepare("and now?")
        assert raised.value.offset is not None


def test_a_damaged_newest_record_fails_the_open_with_the_way_out(tmp_path):
    """The newest turns are read at open: a record there that bit rot
    damaged is reported then, naming the repair, and the log is let go so
    the repair can run at once; after it the session opens and goes on."""
    where, headers = session_of_turns(tmp_path, 4)
    original = (where / "data").read_bytes()
    # The newest record (which the log's own open checks) or one before it
    # (which the session's reading of its last turns finds).
    for newest in (headers[-1], headers[-3]):
        damage(where, newest, original)
        with pytest.raises(LogCorruptError, match=re.escape(f"MessageLog.repair({str(where)!r})")) as raised:
            open_session(tmp_path, compact=False)
        assert raised.value.file == "data"
        assert raised.value.offset is not None
    try:
        open_session(tmp_path, compact=False)
    except LogCorruptError:
        report = MessageLog.repair(where)  # the failed open holds no lock, even now
    assert report.lost == 1
    with open_session(tmp_path, compact=False) as session:
        request = session.prepare("and now?")
        assert request["messages"][-1]["content"] == "and now?"
        assert "answer 1" in json.dumps(request["messages"])


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "reply",
    [
        {
            "role": "assistant",
            "tool_calls": [{**call("c1"), "function": {"name": "f", "arguments": {"b": b"x"}}}],
        },
        {
            "role": "assistant",
            "tool_calls": [{**call("c1"), "function": {"name": "f", "arguments": {(1,): 2}}}],
        },
        {
            "role": "assistant",
            "tool_calls": [{**call("c1"), "function": {"name": "f", "arguments": _nested(1500)}}],
        },
        {
            "role": "assistant",
            "tool_calls": [{**call("c1"), "function": {"name": _nested(1500), "arguments": "{}"}}],
        },
        {"role": _nested(1500), "content": "hi"},
        {"output": [{"type": "message", "content": 5}]},
        {"output": [{"type": "message", "content": [{"type": "output_text", "text": _nested(1500)}]}]},
        {"role": "assistant", "content": "fine", "extra": float("nan")},
    ],
    ids=["bytes", "tuple-key", "deep-arguments", "deep-name", "deep-role", "content-int", "deep-text", "nan"],
)
def test_a_reply_that_cannot_be_sent_is_refused_with_the_librarys_errors(tmp_path, reply):
    """These escaped as TypeError, ValueError or RecursionError (or, a NaN,
    was logged and failed every later request: the SDKs send strict JSON)."""
    with open_session(tmp_path, compact=False) as session:
        session.prepare("hi")
        with pytest.raises((InvalidInputError, InvalidTypeError)):
            session.record(reply)
        assert len(session.log) == 1  # nothing logged
        session.record({"role": "assistant", "content": "hello"})
        request = session.prepare("again")
        json.dumps(request["messages"], allow_nan=False)


def test_no_nan_reaches_the_log_from_an_input_or_a_result(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        image = {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": float("inf")}}
        with pytest.raises(InvalidInputError, match="user_input: holds inf"):
            session.prepare({"role": "user", "content": [{"type": "text", "text": "see"}, image]})
        session.prepare("read it")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        with pytest.raises(InvalidInputError, match="result: holds nan"):
            session.record_tool_result("c1", [{"type": "text", "text": "x", "score": float("nan")}])
        session.record_tool_result("c1", "fine")
        json.dumps(session.prepare()["messages"], allow_nan=False)


def test_a_usage_no_ratio_takes_is_logged_and_the_reply_still_recorded(tmp_path, caplog):
    """An absurd usage (10**400 prompt tokens) raised OverflowError after
    the reply was logged, and with BudgetWarning made an error a rejected
    sample raised: the caller never got the calls, and a retry was "recorded
    already"."""
    import warnings

    from context_core import BudgetWarning

    with open_session(tmp_path, compact=False) as session, warnings.catch_warnings():
        warnings.simplefilter("error", BudgetWarning)
        for n, prompt_tokens in enumerate((10**400, 10**9)):
            session.prepare("read it")
            reply = {
                "id": f"r{n}",
                "choices": [
                    {"message": {"role": "assistant", "content": None, "tool_calls": [call(f"c{n}")]}}
                ],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1},
            }
            with caplog.at_level(logging.WARNING, logger="context_core"):
                calls = session.record(reply)
            assert [c.id for c in calls] == [f"c{n}"]
            session.record_tool_result(f"c{n}", "x")
        assert session.budget.rejected == 2
    assert sum("usage sample rejected" in r.getMessage() for r in caplog.records) == 2


def test_many_calls_of_one_id_each_get_their_own(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        session.prepare("run them")
        calls = session.record({"role": "assistant", "content": None, "tool_calls": [call("c")] * 300})
        assert [c.id for c in calls] == ["c"] + [f"c_{n}" for n in range(2, 301)]
        session.prepare("again?")
        calls = session.record({"role": "assistant", "content": None, "tool_calls": [call("c")] * 3})
        assert [c.id for c in calls] == ["c_301", "c_302", "c_303"]


@pytest.mark.parametrize(
    "options",
    [
        {"identity": "bad \udcff"},
        {"tools": [{**TOOLS[0], "function": {**TOOLS[0]["function"], "description": "\udcff"}}]},
    ],
    ids=["identity", "tools"],
)
def test_a_prompt_part_no_request_can_carry_is_refused_at_open(tmp_path, options):
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        open_session(tmp_path, **options)
    assert not (tmp_path / "session").exists()


def test_a_now_no_request_can_carry_is_refused(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        with pytest.raises(InvalidInputError, match="now holds a lone surrogate"):
            session.prepare("hi", now="Monday \udcff")
        assert len(session.log) == 0
        assert session.prepare("hi", now="Monday")["messages"][-1]["content"] == "hi"


def test_an_open_refused_for_its_durability_or_path_leaves_nothing(tmp_path):
    with pytest.raises(InvalidInputError, match="durability"):
        open_session(tmp_path, durability="zzz")
    assert not (tmp_path / "session").exists()
    for compact in ("no", 0, None):  # "no" was taken as true: compaction on
        with pytest.raises(InvalidTypeError, match="compact must be a bool"):
            open_session(tmp_path, compact=compact)
        assert not (tmp_path / "session").exists()
    with open_session(tmp_path, compact=np.False_) as session:
        assert session.compactor is None
    undecodable = tmp_path / os.fsdecode(b"s-\xff")
    with pytest.raises(InvalidInputError, match="UTF-8"):
        Session.open(undecodable, model="gpt-4o", store=False)
    assert not os.path.exists(undecodable)


def test_openai_arguments_given_as_none_or_a_scalar_go_back_as_json_text(tmp_path):
    """The API takes only text: None, a missing key or a bool were logged
    as they came and sent back every turn."""
    with open_session(tmp_path, compact=False) as session:
        session.prepare("run them")
        calls = [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": None}},
            {"id": "b", "type": "function", "function": {"name": "f"}},
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": True}},
        ]
        session.record({"role": "assistant", "content": None, "tool_calls": calls})
        for call_id in "abc":
            session.record_tool_result(call_id, "ok")
        sent = session.prepare()["messages"]
        assistant = next(m for m in sent if m["role"] == "assistant")
        assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == ["{}", "{}", "true"]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_use", "id": "t1", "name": "f", "input": "not an object"},
        {"type": "thinking", "thinking": "hmm"},
        {"type": "thinking", "thinking": "hmm", "signature": 5},
    ],
    ids=["input-text", "unsigned-thinking", "signature-int"],
)
def test_an_anthropic_reply_the_api_would_refuse_back_is_refused(tmp_path, block):
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("hi")
        with pytest.raises(InvalidInputError, match=r"reply\.content\[0\]"):
            session.record({"role": "assistant", "content": [block, {"type": "text", "text": "ok"}]})
        assert len(session.log) == 1
        signed = {"type": "thinking", "thinking": "hmm", "signature": "c2ln"}
        session.record({"role": "assistant", "content": [signed, {"type": "text", "text": "ok"}]})


def test_blocks_the_other_api_or_a_tool_message_cannot_carry_are_refused(tmp_path):
    with open_session(tmp_path, compact=False) as session:
        result = {"type": "tool_result", "tool_use_id": "x", "content": "ok"}
        with pytest.raises(InvalidInputError, match="'tool_result' block is anthropic's shape"):
            session.prepare({"role": "user", "content": [result]})
        session.prepare("look")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        image = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
        with pytest.raises(InvalidInputError, match="tool result holds text only"):
            session.record_tool_result("c1", [{"type": "text", "text": "see"}, image])
        session.record_tool_result("c1", [{"type": "text", "text": "see"}])
        assert session.prepare()["messages"][-1]["role"] == "tool"


def test_an_async_session_reopened_within_a_turn_awaits_its_search_too(tmp_path):
    """A session reopened within a tool loop searches again at its next
    step: that search ran the embedder on the loop (an async-only one
    failed, a slow one blocked the loop)."""
    from context_core import MemoryStore
    from context_core.memory_store import HashingEmbedder

    hashing = HashingEmbedder(64)

    queries: list[str] = []

    class AsyncOnly:
        name = "async-only"

        def embed(self, texts):
            raise AssertionError("the sync embed of an async-only client")

        async def aembed(self, texts):
            queries.extend(texts)
            return hashing.embed(texts)

    async def run() -> None:
        store = MemoryStore(tmp_path / "memories.db", embedder=AsyncOnly())
        await store.aremember("Deploys go out on Tuesdays only.")
        options = {"model": "gpt-4o", "store": store, "compact": False, "tools": TOOLS}
        session = await AsyncSession.open(tmp_path / "session", **options)
        await session.prepare("When do deploys go out?")
        await session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        await session.aclose(persist=False)
        session = await AsyncSession.open(tmp_path / "session", **options)
        await session.record_tool_result("c1", "x = 1")
        request = await session.prepare()
        assert "Tuesdays" in json.dumps(request["messages"])
        assert queries[-1] == "When do deploys go out?"  # searched again, awaited
        await session.aclose(persist=False)
        await asyncio.to_thread(store.close)

    asyncio.run(run())


def test_an_async_session_shows_what_a_session_shows(tmp_path):
    """The README names ``pending``, ``needs_reply``, ``last_seq`` and
    ``last_report`` as what a session shows; an AsyncSession had no
    ``last_seq`` (an AttributeError)."""

    async def run() -> None:
        session = await AsyncSession.open(tmp_path / "s", model="gpt-4o", store=False, tools=TOOLS)
        assert (session.last_seq, session.last_report, session.needs_reply) == (None, None, False)
        await session.prepare("Read a.py")
        await session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        inner = session.session
        assert session.last_seq == inner.last_seq == len(await session.history()) - 1
        assert [c.id for c in session.pending] == ["c1"]
        await session.record_tool_result("c1", "x = 1")
        assert session.last_seq == inner.last_seq
        assert session.needs_reply
        assert session.last_report is inner.last_report
        await session.aclose(persist=False)

    asyncio.run(run())


def test_two_acloses_at_once_close_as_the_first_asked(tmp_path):
    """Whichever drain ended first used to set the close: a later
    aclose(persist=False) could undo an aclose() that persists."""
    persisted = []

    async def run() -> None:
        session = await AsyncSession.open(tmp_path / "session", model="gpt-4o", store=False)
        await session.prepare("hi")
        delays = [0.05, 0.0]

        async def drain(**kwargs) -> None:
            await asyncio.sleep(delays.pop(0))

        session.session.compactor.aclose = drain
        session.session._persist = lambda: persisted.append(True)
        first = asyncio.ensure_future(session.aclose())
        await asyncio.sleep(0)
        second = asyncio.ensure_future(session.aclose(persist=False))
        await asyncio.gather(first, second)

    asyncio.run(run())
    assert persisted == [True]


def test_no_turn_starts_once_aclose_was_called_but_replies_in_flight_land(tmp_path):
    """A turn begun while aclose() drained ran, then its record failed once
    the close landed. New turns are refused now; a reply to a call made
    before the close began is still recorded."""

    async def run() -> None:
        session = await AsyncSession.open(tmp_path / "session", model="gpt-4o", store=False)
        await session.prepare("hi")  # the model's call is in flight
        drained = asyncio.Event()

        async def drain(**kwargs) -> None:
            await drained.wait()

        session.session.compactor.aclose = drain
        closing = asyncio.ensure_future(session.aclose())
        await asyncio.sleep(0)
        with pytest.raises(InvalidInputError, match="closing"):
            await session.prepare("a new turn")
        await session.record({"role": "assistant", "content": "hello"})  # the reply in flight
        drained.set()
        await closing

    asyncio.run(run())
    with open_session(tmp_path, compact=False) as reopened:
        assert [m["role"] for m in reopened.history()] == ["user", "assistant"]


def test_a_store_whose_close_fails_still_lets_the_log_go(tmp_path):
    """The store's last write at close (access counts) met a busy database
    or a full disk, and raised before the log was closed: a second close
    did nothing, and the session could not be opened again until the
    process ended."""

    class StoreFailingAtClose:
        def search(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

        def close(self) -> None:
            raise OSError("disk full")

    session = open_session(tmp_path, compact=False)
    session._owned.append(StoreFailingAtClose())  # as the session's own store, closed first
    session.prepare("Read a.py.")
    session.record({"role": "assistant", "content": "Done."})
    with pytest.raises(OSError, match="disk full"):
        session.close()
    with open_session(tmp_path, compact=False) as again:  # LogLockedError before
        assert "Read a.py." in json.dumps(again.prepare("And b.py?")["messages"])


def test_a_forked_childs_close_writes_nothing_of_the_parents_session(tmp_path):
    """A forked worker's close(persist=False) marked the parent's messages
    as learned from: had the parent then crashed, no later close would have
    learned them. A child's close now lets go of what it holds and writes
    nothing; the parent's close learns as ever."""
    session = open_session(tmp_path, compact=False, store=False)
    for n in range(3):
        session.prepare(f"I prefer that you always keep order Z-{n:04d} in the audit log.")
        session.record({"role": "assistant", "content": "Noted."})

    learned = tmp_path / "session" / "learned"
    before = learned.read_bytes() if learned.exists() else None

    def close_in_the_child() -> bool:
        session.close(persist=False)
        session.close()  # idempotent in the child too
        return (learned.read_bytes() if learned.exists() else None) == before

    assert in_child(close_in_the_child) == "returned True"
    session.close()
    assert (tmp_path / "session" / "memory" / "MEMORY.md").read_text().count("Z-") == 3


def test_a_memory_file_grown_past_a_small_window_still_leaves_room_for_turns(tmp_path):
    """MEMORY.md grows as sessions end (up to 150 lines, ~18 KB) and went
    into every prompt whole: in a 3,000-token session, once it outgrew the
    room every turn failed, and at 8,000 tokens it took 5,454 of the
    5,600-token limit. It goes in by whole lines up to an eighth of the room."""
    from context_core import MemoryFiles

    files = MemoryFiles(tmp_path / "session" / "memory")
    facts = [
        f"Never touch the service number {n} on host db-{n}.internal without a ticket; always log ticket ids."
        for n in range(150)
    ]
    files.append(facts)
    with open_session(tmp_path, budget=3000, compact=False) as session:
        request = session.prepare("hello")
        memory = Tokenizer().count(files.read())
        assert memory > session.budget.messages()  # whole, it could never fit
        assert request.report.sections["volatile"] <= session.budget.messages() // 8 + 64
        assert facts[0] in json.dumps(request["messages"]) + json.dumps(request.get("system"))
        assert request.report.total <= request.report.limit


@pytest.mark.parametrize("model", ["gpt-4o", "claude-sonnet-4-5"])
def test_a_tool_output_in_text_parts_is_capped_whole_and_an_empty_one_is_sendable(tmp_path, model):
    """An MCP tool's output comes as text parts: OpenAI's were never capped
    (only a str was), Anthropic's were capped part by part, and 80 parts
    of 4,000 tokens killed the tool loop with OverBudgetError. A tool with
    no output gives a blank text part, which both APIs refuse (OpenAI got
    ``content: []``), in every request after."""
    anthropic = model.startswith("claude")

    def call(call_id: str) -> dict:
        if anthropic:
            return {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call_id, "name": "sh", "input": {}}],
            }
        function = {"name": "sh", "arguments": "{}"}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    with open_session(tmp_path, model=model, compact=False) as session:
        session.prepare("Run the tests.")
        session.record(call("c1"))
        parts = [{"type": "text", "text": f"part {n}: " + "error at line 42\n" * 1500} for n in range(80)]
        session.record_tool_result("c1", parts)
        request = session.prepare()
        assert request.report.total <= request.report.limit
        assert request.report.sections["input"] + request.report.sections["recent"] < 3000
        session.record(call("c2"))
        session.record_tool_result("c2", [{"type": "text", "text": ""}, {"type": "text", "text": "  "}])
        request = session.prepare()
        check = validators.anthropic if anthropic else validators.openai
        assert check(request["messages"]) == []
        last = request["messages"][-1]
        content = last["content"][0]["content"] if anthropic else last["content"]
        assert content == ""


def test_tool_results_given_as_the_input_must_answer_calls_that_wait(tmp_path):
    """Anthropic's own loop passes results as the next user message. One
    with an id no call waits on was logged: the call was repaired away and
    the request ended with the model's own reply (a prefill the API refuses
    when it ends in white space); results for some of the calls cleared the
    others, so their results were then refused."""
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("Read a.py and b.py.")
        uses = [{"type": "tool_use", "id": f"t{n}", "name": "read_file", "input": {}} for n in (1, 2)]
        session.record({"role": "assistant", "content": [{"type": "text", "text": "Reading. "}, *uses]})

        def results(*ids: str) -> dict:
            blocks = [{"type": "tool_result", "tool_use_id": i, "content": f"{i} read"} for i in ids]
            return {"role": "user", "content": blocks}

        for bad in (results("typo"), results("t1", "t1")):
            with pytest.raises(InvalidInputError, match=r"no tool call .* is waiting"):
                session.prepare(bad)
        assert [call.id for call in session.pending] == ["t1", "t2"]
        assert len(session.history()) == 2  # nothing refused was logged
        session.prepare(results("t1"))
        assert [call.id for call in session.pending] == ["t2"]
        session.record_tool_result("t2", "t2 read")
        request = session.prepare()
        assert validators.anthropic(request["messages"], request["system"], request=True) == []
        blocks = [b for m in request["messages"] if isinstance(m["content"], list) for b in m["content"]]
        assert [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"] == ["t1", "t2"]


@pytest.mark.parametrize(
    ("model", "attachment", "lacking"),
    [
        ("claude-sonnet-4-5", {"type": "image"}, "has no source"),
        (
            "claude-sonnet-4-5",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png"}},
            "no data",
        ),
        ("claude-sonnet-4-5", {"type": "document", "source": {"type": "url"}}, "no url"),
        ("gpt-4o", {"type": "image_url"}, "has no image_url.url"),
        ("gpt-4o", {"type": "image_url", "image_url": {"url": ""}}, "has no image_url.url"),
        ("gpt-4o", {"type": "file", "file": {}}, "has no file_id or file_data"),
    ],
)
def test_an_attachment_the_api_would_refuse_is_refused_before_the_log(tmp_path, model, attachment, lacking):
    """An image with no source (or an image_url with no url) was logged and
    then sent in every request after, each refused by the API."""
    with open_session(tmp_path, model=model, compact=False) as session:
        with pytest.raises(InvalidInputError, match=lacking):
            session.prepare("What is this?", attachments=[attachment])
        assert session.history() == []
        assert session.prepare("Hello")["messages"][-1]["content"] == "Hello"


def test_results_given_again_after_a_failed_call_are_a_retry_when_their_calls_were_renamed(tmp_path):
    """Found by a review: results given as the input are logged with their
    calls' stored ids (a server's ``t1`` given again is stored as ``t1_2``),
    so the same input given again after the model's call failed no longer
    matched the logged one, and was refused as answering no waiting call."""
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        use = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}
        session.prepare("Read a.py.")
        session.record({"role": "assistant", "content": [use]})
        session.record_tool_result("t1", "a read")
        session.prepare()
        session.record({"role": "assistant", "content": "Done."})
        session.prepare("Read b.py and c.py.")
        session.record({"role": "assistant", "content": [use, use]})  # the server's ids again
        assert [call.id for call in session.pending] == ["t1_2", "t1_3"]
        results = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "b read"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "c read"},
            ],
        }
        first = session.prepare(results)
        logged = len(session.history())
        again = session.prepare(results)  # the model's call failed: the server sends it again
        assert len(session.history()) == logged
        assert again["messages"] == first["messages"]
        blocks = again["messages"][-1]["content"]
        assert [b["tool_use_id"] for b in blocks] == ["t1_2", "t1_3"]
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as reopened:
        reopened.prepare(results)  # and after a reopen
        assert len(reopened.history()) == logged


def test_a_retry_of_results_whose_calls_were_renamed_in_part_or_one_at_a_time(tmp_path):
    """Found by a review of the fix above: a reply of two calls of one id
    stores them as ``t1`` and ``t1_2``, so results given as ``t1`` twice
    were logged as ``t1``, ``t1_2``, and their retry was rebuilt the other
    way round and refused; results given one at a time the same."""

    def results(*texts: str) -> dict:
        blocks = [{"type": "tool_result", "tool_use_id": "t1", "content": text} for text in texts]
        return {"role": "user", "content": blocks}

    use = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("Read b.py and c.py.")
        session.record({"role": "assistant", "content": [use, use]})
        assert [call.id for call in session.pending] == ["t1", "t1_2"]
        both = results("b read", "c read")
        session.prepare(both)
        logged = len(session.history())
        session.prepare(both)  # the model's call failed: given again
        assert len(session.history()) == logged
        session.record({"role": "assistant", "content": [use, use]})  # t1 taken: t1_3, t1_4
        assert [call.id for call in session.pending] == ["t1_3", "t1_4"]
        session.prepare(results("d read"))
        session.prepare(results("e read"))
        logged = len(session.history())
        session.prepare(results("e read"))  # the second given again
        assert len(session.history()) == logged
        assert session.pending == ()
    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as reopened:
        reopened.prepare(results("e read"))  # and after a reopen
        assert len(reopened.history()) == logged


def test_a_new_result_like_an_older_steps_is_logged_not_taken_for_a_retry(tmp_path):
    """Found by a review of the retry fix: a result given one at a time
    that looked like an older step's (a server reusing ``t1``, a tool with
    the same output) was taken for that step's given again, and dropped:
    its call waited for ever. Results that answer a waiting call are new;
    results given again are those since the newest reply that made calls."""

    def use(call_id: str) -> dict:
        return {"type": "tool_use", "id": call_id, "name": "read", "input": {}}

    def result(call_id: str, text: str) -> dict:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}]}

    with open_session(tmp_path, model="claude-sonnet-4-5", compact=False) as session:
        session.prepare("Read the files.")
        session.record({"role": "assistant", "content": [use("t1")]})
        session.prepare(result("t1", "same output"))
        session.record({"role": "assistant", "content": [use("t1"), use("t9")]})  # t1 stored as t1_2
        session.prepare(result("t9", "other output"))
        before = len(session.history())
        session.prepare(result("t1", "same output"))  # the answer to t1_2, not a retry
        assert len(session.history()) == before + 1
        assert session.pending == ()
        session.prepare(result("t1", "same output"))  # now given again: a retry
        assert len(session.history()) == before + 1
        session.record({"role": "assistant", "content": [use("t1"), use("t1")]})  # t1_3, t1_4
        session.prepare(result("t1", "same output"))
        session.prepare(result("t1", "same output"))  # the second call's answer, alike
        assert len(session.history()) == before + 4
        assert session.pending == ()


def test_a_paused_reply_ending_in_a_blank_text_is_sent_back_without_it(tmp_path):
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        session.prepare("look PAY-77 up")
        paused = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "stop_reason": "pause_turn",
            "content": [
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {"query": "x"},
                },
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": " \n"},
            ],
        }
        session.record(paused)
        request = session.prepare()
        assert request["messages"][-1]["content"] == paused["content"][:2]
        assert session.history()[-1]["content"] == paused["content"]  # the log keeps it as recorded
        assert request.report.total == recount(request)
        assert validators.anthropic(request["messages"], request["system"], request=True) == []


def test_the_workers_wait_while_a_tool_result_is_appended(tmp_path):
    """Appending a tool result lets go of the interpreter (the log's write
    runs in Rust): the compaction worker waits, as for a turn's own calls,
    rather than taking it for up to the switch interval."""
    with open_session(tmp_path, compact=True) as session:
        session.prepare("read the config")
        session.record(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
                ],
            }
        )
        gate = session.compactor._gate
        held_during = []
        append = session.log.append

        def watched(*args, **kwargs):
            held_during.append(bool(gate._holders))
            return append(*args, **kwargs)

        session.log.append = watched
        session.record_tool_result("c1", "port = 8080")
        assert held_during == [True]
        assert not gate._holders  # let go after


def test_the_input_given_again_after_a_paused_step_is_a_retry(tmp_path):
    """A server whose continuation call failed sends the turn's input again:
    the paused reply is a step of that turn, as a reply that made calls is,
    so the input is not logged twice and the request goes on from the pause."""
    paused = {
        "id": "msg_p",
        "type": "message",
        "role": "assistant",
        "stop_reason": "pause_turn",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        ],
    }
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        session.prepare("look PAY-77 up")
        session.record(paused)
        session.prepare()  # the continuation's call fails
        logged = len(session.history())
        again = session.prepare("look PAY-77 up")
        assert len(session.history()) == logged
        assert (again.report.turn, again.report.step) == (0, 1)
        assert again["messages"][-1]["content"] == paused["content"]
        assert validators.anthropic(again["messages"], again["system"], request=True) == []


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_a_compaction_warms_the_next_window_without_changing_it(tmp_path, policy):
    """After a drain that wrote a summary, the compaction worker chooses the
    next window once (the first choice over a changed view is the slowest
    of a session), result dropped: the requests are those of a session
    that does not."""
    from agent_sessions import generate

    agent = generate(160, "openai", seed=5)
    budget = Budget(window=12_000, soft_ratio=1.0, system_reserve=800, pinned_reserve=400, input_reserve=400)
    sent: dict[bool, list[tuple[Any, int]]] = {}
    warmed: list[str] = []
    for warm in (True, False):
        with open_session(
            tmp_path / str(warm), policy=policy, budget=budget, compact=True, wall=lambda: 1_700_000_000.0
        ) as session:
            if warm:
                select = session._select

                def spied(room: int, select: Any = select) -> Any:
                    warmed.append(threading.current_thread().name)
                    return select(room)

                session._select = spied
            else:
                session.compactor.after_write = None
            sent[warm] = []

            def kept(said: Any, calls: list[tuple[Any, int]] = sent[warm], session: Any = session) -> None:
                request = session.prepare(said, now="")
                calls.append((request["messages"], request.report.total))

            replay_calls(session, agent, kept)
            written = session.compactor.status.written
            assert written[2] + written[3] > 0
    assert "context_core compaction" in warmed
    assert sent[True] == sent[False]


def _anthropic_call(session: Session, call_id: str = "toolu_1") -> None:
    session.prepare("run the tool")
    session.record(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": "read_file", "input": {}}],
        }
    )


def test_an_mcp_tools_output_is_sent_as_the_api_takes_it(tmp_path):
    """``[c.model_dump() for c in result.content]`` of an MCP tool: text
    blocks with ``annotations`` and ``_meta`` set to None (fields the API
    does not know) were sent as they were and not joined, so the cap
    applied to each part; its image (``data``, ``mimeType``) is Anthropic's
    image block."""
    parts = [{"type": "text", "text": f"line {i}", "annotations": None, "_meta": None} for i in range(3)]
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "annotations": None}
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        _anthropic_call(session)
        session.record_tool_result("toolu_1", [*parts, image])
        request = session.prepare()
        (result,) = request["messages"][-1]["content"]
        assert result["content"] == [
            {"type": "text", "text": "line 0\nline 1\nline 2"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ]
        assert validators.anthropic(request["messages"], request["system"], request=True) == []
        assert request.report.total == recount(request)


def test_an_openai_error_result_in_parts_still_says_it_failed(tmp_path):
    """Chat Completions has no error flag: a failed result says so in its
    text. Given as text parts (one with a key of its own, so not joined),
    the marker was dropped. Blank parts inside a run of text are left
    out, as blank parts alone were."""
    parts = [
        {"type": "text", "text": "exit 1", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "x"},
    ]
    with open_session(tmp_path, compact=False) as session:
        session.prepare("Run the tests")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("call_1"), call("call_2")]})
        session.record_tool_result("call_1", parts, is_error=True)
        session.record_tool_result("call_2", [{"type": "text", "text": t} for t in ("a", "  ", "b")])
        request = session.prepare()
        first, second = request["messages"][-2:]
        assert first["content"][0]["text"] == "Error: exit 1"
        assert first["content"][1:] == parts[1:]
        assert second["content"] == "a\nb"
        assert request.report.total == recount(request)


@pytest.mark.parametrize(
    ("block", "said"),
    [
        ({"type": "image", "source": {"type": "base64", "media_type": "image/png"}}, "no data"),
        ({"type": "document", "title": "spec"}, "has no source"),
        ({"type": "image_url", "image_url": {"url": "https://a.example/x.png"}}, "openai's shape"),
        ({"type": "tool_result", "tool_use_id": "toolu_0", "content": "x"}, "inside a tool result"),
    ],
)
def test_a_tool_output_block_the_api_refuses_is_refused_before_the_log(tmp_path, block, said):
    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        _anthropic_call(session)
        logged = len(session.history())
        with pytest.raises(InvalidInputError, match=rf"result\.content\[1\]: .*{said}"):
            session.record_tool_result("toolu_1", [{"type": "text", "text": "output"}, block])
        assert len(session.history()) == logged
        assert [call.id for call in session.pending] == ["toolu_1"]  # still waits for its result


def test_the_callers_cache_marks_piling_up_in_the_log_keep_the_newest(tmp_path):
    """Marking each new input with cache_control (a common way to cache a
    growing history) logged every mark; the fifth raised for good, as the
    old marks never left the window. The newest are sent, as many as the
    API takes beside the tools' and system's; the log keeps them all."""
    from context_core.prompt.render_anthropic import MAX_BREAKPOINTS, count_breakpoints

    with open_session(tmp_path, model="claude-sonnet-4-5") as session:
        for turn in range(8):
            said = {
                "role": "user",
                "content": [{"type": "text", "text": f"step {turn}", "cache_control": {"type": "ephemeral"}}],
            }
            request = session.prepare(said)
            marks = count_breakpoints(request["messages"])
            marks += sum("cache_control" in block for block in request["system"])
            assert marks <= MAX_BREAKPOINTS
            assert "cache_control" in request["messages"][-1]["content"][-1]  # the newest kept
            assert request.report.total == recount(request)
            session.record({"role": "assistant", "content": f"done {turn}"})
        assert count_breakpoints(session.history()) == 8  # as logged


def test_too_many_cache_marks_given_to_the_renderer_say_how_many():
    from context_core.errors import CacheBreakpointsError
    from context_core.prompt import PromptBuilder

    marked = [
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
    ]
    with pytest.raises(CacheBreakpointsError, match="already carry 5") as raised:
        PromptBuilder(identity="You help.").build(now="").to_anthropic(marked * 5, model="claude-sonnet-4-5")
    assert (raised.value.breakpoints, raised.value.limit) == (5, 4)
    assert isinstance(raised.value, InvalidInputError)


def test_an_openai_custom_tool_is_offered_and_counted(tmp_path):
    """An OpenAI custom tool (``{"type": "custom", "custom": {...}}``,
    free-text input) was refused at open as a tool with no name; Anthropic
    has no such tool, and refuses it at open, not at the first turn."""
    from context_core import reference

    custom = {
        "type": "custom",
        "custom": {"name": "apply_patch", "description": "Apply a patch.", "format": {"type": "text"}},
    }
    assert Tokenizer().count_tools([custom]) == reference.Tokenizer("o200k_base").count_tools([custom])
    with open_session(tmp_path / "openai", tools=[*TOOLS, custom]) as session:
        request = session.prepare("patch it")
        assert request["tools"][-1] == custom
        assert request.report.total == recount(request)
    with pytest.raises(InvalidInputError, match=r"custom tool \(free-text input\) has no Anthropic form"):
        open_session(tmp_path / "anthropic", model="claude-sonnet-4-5", tools=[custom])
    assert not (tmp_path / "anthropic" / "session").exists()


def test_prepare_with_no_input_waits_for_every_calls_result(tmp_path):
    """With one of two results recorded, the request dropped the other call
    (the repair closes a call with no result), and its result, recorded
    after the next reply, was refused: the call was lost without a word."""
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        for i in (1, 2)
    ]
    with open_session(tmp_path) as session:
        session.prepare("read both")
        session.record({"role": "assistant", "content": None, "tool_calls": calls})
        session.record_tool_result("c1", "one")
        assert not session.needs_reply  # c2 still waits
        with pytest.raises(InvalidInputError, match=r"calls still wait for their results \(c2\)"):
            session.prepare()
        session.record_tool_result("c2", "two")
        assert session.needs_reply
        request = session.prepare()
        assert [m.get("tool_call_id") for m in request["messages"][-2:]] == ["c1", "c2"]
        session.record({"role": "assistant", "content": None, "tool_calls": [{**calls[0], "id": "c3"}]})
        assert session.prepare("never mind, stop").report.total > 0  # a new input closes the call


def test_a_reply_dicts_own_fields_go_where_the_provider_takes_them(tmp_path):
    """An OpenAI-compatible server's reasoning_content must come back with a
    tool turn (DeepSeek refuses the next request without it), while
    Anthropic refuses the field; a reply's ``id`` is its metadata key, kept
    in the log for ``depends_on``, and never sent."""
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    reply = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "read a.py first",
        "tool_calls": [call],
    }
    with open_session(tmp_path / "openai") as session:
        session.prepare("fix it")
        session.record({**reply, "id": "msg-12", "usage": {"prompt_tokens": 9}})
        session.record_tool_result("c1", "ok")
        sent = session.prepare()["messages"]
        assert sent[-2]["reasoning_content"] == "read a.py first"
        assert "id" not in sent[-2]
        assert "usage" not in sent[-2]
        assert session.log.context_view()[-2]["id"] == "msg-12"
    with open_session(tmp_path / "anthropic", model="claude-sonnet-4-5") as session:
        session.prepare("fix it")
        session.record({"role": "assistant", "content": "Done.", "reasoning_content": "x", "annotations": []})
        assert session.history()[-1] == {"role": "assistant", "content": "Done."}


def _results_sent(request: dict, provider: str) -> list[tuple[str, str]]:
    """Each tool result a request sends, in order: its call's id and text."""
    out = []
    for message in request["messages"]:
        if provider == "openai" and message["role"] == "tool":
            out.append((message["tool_call_id"], message["content"]))
        elif provider == "anthropic" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    text = content if isinstance(content, str) else "".join(p["text"] for p in content)
                    out.append((block["tool_use_id"], text))
    return out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_a_long_tool_loop_clears_its_oldest_results_and_goes_on(tmp_path, provider, policy):
    """Every policy keeps the turn in progress whole, so fifty steps of
    700-token results outgrow a 16K budget (every step after the 16th
    failed). The oldest results of the turn go as a short note instead: the
    newest step's result whole, every request within its limit and valid
    for the API, the same results cleared for several steps in a row (the
    request's start holds, for the provider's cache), and the log keeps
    every result whole."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    output = "def f(x):\n    return x * 2\n" * 60
    with open_session(tmp_path, model=model, budget=16_000, policy=policy) as session:
        session.prepare("Refactor the billing module. Never touch the tests.")
        counts = []
        for step in range(50):
            session.record(calling(f"c{step}", provider))
            session.record_tool_result(f"c{step}", f"file {step}\n" + output)
            request = session.prepare()
            report = request.report
            assert report.total <= report.limit
            sent = _results_sent(request, provider)
            assert sent[-1] == (f"c{step}", f"file {step}\n" + output)  # the newest, whole
            cleared = [call_id for call_id, text in sent if text.startswith("[Cleared to fit")]
            assert cleared == [f"c{n}" for n in range(len(cleared))]  # the oldest of the turn
            assert all(text == f"file {call_id[1:]}\n" + output for call_id, text in sent[len(cleared) :])
            assert report.cleared == len(cleared)
            if provider == "openai":
                assert validators.openai(request["messages"]) == []
            else:
                assert validators.anthropic(request["messages"], request.get("system"), request=True) == []
            counts.append(report.cleared)
        assert counts[:12] == [0] * 12
        assert counts[-1] >= 30
        assert counts == sorted(counts)  # one cleared is never sent whole again in the turn
        assert sum(a != b for a, b in itertools.pairwise(counts)) <= len(counts) // 3
        logged = json.dumps(session.history())
        assert "Cleared to fit" not in logged
        assert logged.count("return x * 2") == 50 * 60


def _loop(session: Session, steps: int, output: str, provider: str = "openai") -> list[int]:
    """``steps`` tool steps of one turn, each result ``output``: the cleared count of each request."""
    counts = []
    for step in range(steps):
        session.record(calling(f"c{step}", provider))
        session.record_tool_result(f"c{step}", f"file {step}\n" + output)
        request = session.prepare()
        assert request.report.total <= request.report.limit
        counts.append(request.report.cleared)
    return counts


def test_results_over_the_cap_are_cleared_a_quarter_at_a_time_too(tmp_path):
    """A result over the policy's cap counts as cut to it, so clearing it
    frees no more than that: weighed whole, each step cleared one more."""
    with open_session(tmp_path, budget=40_000) as session:
        session.prepare("Read everything.")
        counts = _loop(session, 40, "word " * 6_000)  # each cut to the 2,000-token cap
    assert counts[-1] >= 10
    assert counts == sorted(counts)
    assert sum(a != b for a, b in itertools.pairwise(counts)) <= len(counts) // 3


def test_small_results_beside_a_long_input_clear_as_few_as_fit(tmp_path):
    """Where the turn's results cannot free a quarter of the room, as few
    are cleared as fit: not every one of them at once."""
    with open_session(tmp_path, budget=16_000) as session:
        session.prepare("Review this document:\n" + "the billing module computes refunds daily. " * 1_200)
        counts = _loop(session, 40, "ok fine " * 60)
    first = next(i for i, n in enumerate(counts) if n)
    assert counts[first] < first // 2  # some of the older results, not all of them
    assert counts == sorted(counts)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_input_without_words_does_not_end_the_turn_being_cleared(tmp_path, provider):
    """An image alone starts no turn (the policies keep the turn in progress
    from the last input with words): clearing takes that turn's results."""
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    image = (
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        if provider == "openai"
        else {"type": "image", "source": png}
    )
    with open_session(tmp_path, model=model, budget=16_000) as session:
        session.prepare("Refactor the billing module.")
        assert _loop(session, 20, "def f(x):\n    return x * 2\n" * 60, provider)[-1] > 0
        session.record({"role": "assistant", "content": "Here is what I found so far."})
        request = session.prepare({"role": "user", "content": [image]})
        assert request.report.cleared > 0
        assert request.report.total <= request.report.limit


def test_a_turn_with_nothing_to_clear_is_refused_without_reading_the_view(tmp_path, monkeypatch):
    """A refused turn with no result before its newest call is refused
    from the headers: no view is decoded (seconds at a million messages)."""
    from context_core.session import session as session_module

    reads = []
    real = session_module.from_view
    monkeypatch.setattr(session_module, "from_view", lambda *a, **k: reads.append(1) or real(*a, **k))
    with open_session(tmp_path, budget=16_000) as session:
        session.prepare("Read a.py.")
        session.record(calling("c0", "openai"))
        session.record_tool_result("c0", "def a(): ...")
        with selection_failing(session), pytest.raises(OverBudgetError):
            session.prepare()  # its one result is the newest call's
        assert reads == []
        with selection_failing(session), pytest.raises(OverBudgetError):
            session.prepare("Now b.py.")  # a new turn: no result in it at all
        assert reads == []


def test_a_loop_that_cannot_fit_even_cleared_is_still_refused(tmp_path):
    """The newest step's results are never cleared: where they alone do not
    fit, the turn is refused as before, with the sizes."""
    with open_session(tmp_path, budget=16_000) as session:
        session.prepare("Read everything.")
        session.record(calling("c0", "openai"))
        session.record_tool_result("c0", "word " * 3_000)
        session.prepare()
        calls = [call(f"d{n}") for n in range(10)]  # one step, ten results: over the room together
        session.record({"role": "assistant", "content": None, "tool_calls": calls})
        for n in range(10):
            session.record_tool_result(f"d{n}", "word " * 1_500)
        with pytest.raises(OverBudgetError) as refused:
            session.prepare()
        assert refused.value.turn_in_progress > refused.value.budget
        # Its sizes are the uncleared turn's: a note says clearing was tried.
        assert any("clearing the turn's older tool results" in n for n in refused.value.__notes__)


def _clearing_run(
    tmp_path, provider: str, policy: str, whole_view: bool, monkeypatch
) -> list[tuple[dict, int]]:
    """A session with earlier turns (a pinned rule, tool calls, a long
    document), then a tool loop that outgrows the room, its results in three
    sizes (one over the cap): each step's request and cleared count, the
    clearing chosen from the headers or (``whole_view``) from the decoded
    view. The clock is fixed, so both see the same ages."""
    from context_core.session import session as session_module

    if whole_view:
        monkeypatch.setattr(session_module.Session, "_select_turn_cleared", lambda *_: None)
    else:
        monkeypatch.setattr(session_module, "from_view", lambda *a, **k: pytest.fail("the view was decoded"))
    model = "gpt-4o" if provider == "openai" else "claude-sonnet-4-5"
    seconds = itertools.count(1_700_000_000, 7)
    out = []
    try:
        with open_session(
            tmp_path / ("view" if whole_view else "headers"),
            model=model,
            budget=16_000,
            policy=policy,
            compact=False,
            wall=lambda: float(next(seconds)),
        ) as session:
            session.log.append({"role": "user", "content": "Never push to main."}, pinned=True)
            for turn in range(6):
                session.prepare(f"Turn {turn}: look at module {turn}. " + "context words " * (40 * turn))
                session.record(calling(f"t{turn}", provider))
                session.record_tool_result(f"t{turn}", f"module {turn}\n" + "x = 1\n" * (30 + 20 * turn))
                session.prepare()
                session.record({"role": "assistant", "content": f"Module {turn} is fine."})
            session.prepare("Refactor the billing module. Never touch the tests.")
            sizes = ["def f(x):\n    return x * 2\n" * 60, "ok " * 40, "word " * 2_500]
            for step in range(24):
                session.record(calling(f"c{step}", provider))
                session.record_tool_result(f"c{step}", f"file {step}\n" + sizes[step % 3])
                request = session.prepare()
                assert request.report.total <= request.report.limit
                out.append((dict(request), request.report.cleared))
    finally:
        monkeypatch.undo()
    return out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_clearing_from_the_headers_sends_what_the_whole_view_would(tmp_path, provider, policy, monkeypatch):
    """The turn's cleared results stand in for the log's in a window chosen
    from the headers (the whole view, decoded, took a second a step at
    200,000 messages): every step's request and cleared count are those of
    the clearing over the decoded view, and the view is never decoded."""
    headers = _clearing_run(tmp_path, provider, policy, False, monkeypatch)
    view = _clearing_run(tmp_path, provider, policy, True, monkeypatch)
    assert [cleared for _, cleared in headers][-1] > 0
    assert headers == view


@pytest.mark.parametrize("policy", ["priority", "weighted", "shape"])
def test_an_anthropic_session_without_tools_fits_every_request(tmp_path, policy):
    """With no tools declared, the tool blocks go as text, which makes the
    request longer than the selection counted. The retry took the excess
    off the room, not off what the selection took: a selection well under
    its room (the next message did not fit) came back the same from each
    smaller room, and after four tries the turn was refused although a
    smaller window fits. Every request of this loop now fits."""
    rng = random.Random(1)
    budget = Budget.for_model("claude-sonnet-4-5", window=16_000)
    with open_session(
        tmp_path, model="claude-sonnet-4-5", tools=[], policy=policy, budget=budget, compact=False
    ) as session:
        n = 0
        for turn in range(24):
            said = f"Turn {turn}: fix file_{turn}.py. " + "details " * rng.randint(5, 80)
            reports = [session.prepare(said)]
            for _ in range(rng.randint(1, 3)):
                n += 1
                session.record(
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "text", "text": "Checking."},
                            {"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {}},
                        ],
                    }
                )
                session.record_tool_result(f"toolu_{n}", "line of code\n" * rng.randint(5, 120))
                reports.append(session.prepare())
            for request in reports:
                assert request.report.total <= request.report.limit
            answer = "Fixed. " * rng.randint(1, 30)
            session.record({"role": "assistant", "content": [{"type": "text", "text": answer}]})


class _ViewPolicy:
    """A caller's own policy that reads the log's context view itself."""

    provider = "openai"

    def __init__(self) -> None:
        self.inner = PriorityAssembly(provider="openai")

    def select(self, messages, budget, *, now=None):
        if isinstance(messages, MessageLog):
            messages = messages.context_view()
        return self.inner.select(messages, budget)


def test_a_policy_of_the_callers_own_is_cleared_for_from_the_view(tmp_path):
    """A caller's policy may read the log itself, never seeing results that
    stand in for the log's: its tool loop is cleared from the decoded view,
    as before clearing chose from the headers (which refused it mid-turn)."""
    with open_session(tmp_path, budget=8_000, policy=_ViewPolicy(), compact=False) as session:
        session.prepare("Refactor the billing module.")
        counts = []
        for step in range(6):
            session.record(calling(f"c{step}", "openai"))
            session.record_tool_result(f"c{step}", "def f(x):\n    return x * 2\n" * 150)
            request = session.prepare()
            assert request.report.total <= request.report.limit
            counts.append(request.report.cleared)
    assert counts[-1] > 0


def _lookups(session: Session, turns: int) -> None:
    """``turns`` turns that each look a customer up (a JSON tool output of
    exact values), compaction's work joined after each."""
    for turn in range(turns):
        session.prepare(f"Turn {turn}: look up customer {turn}")
        session.record(calling(f"call_{turn}", "openai"))
        output = {"customer_id": f"CUST-{5500 + turn}", "home": f"/home/cust{turn}/private.key"}
        session.record_tool_result(f"call_{turn}", json.dumps(output))
        session.prepare()
        session.record({"role": "assistant", "content": f"Found customer {turn}."})
        session.join()


def test_the_report_says_how_many_rules_the_last_summary_left_out(tmp_path):
    """A user stating rule after rule outgrows the summaries' rule bound:
    the rules left out stay in the log, and each call's report says how
    many the last summary written could not carry."""
    seen = []
    with open_session(tmp_path, budget=6_000) as session:
        for n in range(150):
            request = session.prepare(
                f"Rule {n}: you must always call variant {n} with retry id R-{n:04d} and never skip audits."
            )
            seen.append(request.report.compaction["rules_left_out"])
            session.record({"role": "assistant", "content": f"Noted variant {n}."})
            session.join()
        status = session.compactor.status
        assert session.prepare("and now?").report.compaction["rules_left_out"] == status.rules_left_out
    assert seen[0] == 0  # nothing compacted yet
    assert max(seen) > 0


@pytest.mark.parametrize("persist", [True, False])
def test_compactions_exact_facts_reach_memory_at_the_close_only(tmp_path, persist):
    """Compaction sends the exact values a summary hides to memory. They
    wrote MEMORY.md mid-session (part of the cached prompt, written at the
    close only) and stayed after close(persist=False), which learns nothing.
    They are held to the close now: written with its learnings, or dropped."""
    memory = tmp_path / "session" / "memory" / "MEMORY.md"
    with open_session(tmp_path, budget=6_000) as session:
        _lookups(session, 30)
        assert session._compaction()["written"][2] > 0
        assert not memory.exists()
        session.close(persist=persist)
    written = memory.read_text() if memory.exists() else ""
    assert ("customer_id: CUST-5509" in written) is persist
    assert ("Turn 0: look up customer 0" in written) is persist


@pytest.mark.parametrize("since", ["a", 1.5, None, True])
def test_history_since_that_is_not_a_seq_is_the_librarys_type_error(tmp_path, since):
    with open_session(tmp_path) as session:
        session.prepare("hello")
        with pytest.raises(InvalidTypeError, match="since must be an int"):
            session.history(since=since)
        assert session.history(since=np.int64(0)) == [{"role": "user", "content": "hello"}]


def test_tools_with_more_cache_marks_than_a_request_holds_are_refused_at_open(tmp_path):
    """Every request would be refused (and the first input, with no node
    before it to go back to, stayed in the log): said at open instead."""
    marked = {"input_schema": {"type": "object", "properties": {}}, "cache_control": {"type": "ephemeral"}}
    tools = [{"name": f"t{i}", "description": "tool", **marked} for i in range(5)]
    with pytest.raises(CacheBreakpointsError, match="the tools carry 5 cache_control breakpoints") as refused:
        open_session(tmp_path, model="claude-sonnet-4-5", tools=tools)
    assert (refused.value.breakpoints, refused.value.limit) == (5, 4)
    with open_session(tmp_path, model="claude-sonnet-4-5", tools=tools[:4]) as session:
        assert session.prepare("hi").report.total > 0


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda s: s.close(persist="no"), InvalidTypeError, "persist must be a bool"),
        (lambda s: s.close(wait=1), InvalidTypeError, "wait must be a bool"),
        (lambda s: s.join("a"), InvalidTypeError, "timeout must be a number of seconds"),
        (lambda s: s.join(True), InvalidTypeError, "timeout must be a number of seconds"),
        (lambda s: s.join(-1), InvalidInputError, "timeout must be >= 0"),
        (lambda s: s.join(float("nan")), InvalidInputError, "timeout must be >= 0"),
    ],
)
def test_close_and_join_refuse_options_of_the_wrong_kind(tmp_path, call, error, match):
    """close(persist="no") persisted (a truthy string) a session meant to
    learn nothing; join("a") waited as if no timeout was given."""
    with open_session(tmp_path) as session:
        session.prepare("hello")
        with pytest.raises(error, match=match):
            call(session)
        assert session.join()


@pytest.mark.parametrize("persist", [np.bool_(True), np.bool_(False)])
def test_close_takes_a_numpy_bool_and_join_an_infinite_timeout(tmp_path, persist):
    """A numpy bool is a bool here (it was refused as "bool"); join(inf)
    waits for ever (it overflowed a deadline)."""
    with open_session(tmp_path / "s", budget=6_000) as session:
        _lookups(session, 3)
        assert session.join(float("inf"))
        assert session.join(1e12)  # past what a wait takes: for ever too
        session.close(persist=persist, wait=np.True_)
    assert (tmp_path / "s" / "session" / "memory" / "MEMORY.md").exists() is bool(persist)


def test_compactions_facts_outlive_a_block_that_raised_and_a_failed_close(tmp_path, monkeypatch):
    """Held in the session directory, not in the process: a ``with`` block
    that raised (which learns nothing) and a close whose write failed leave
    them to the next session that closes, as they leave its messages."""
    memory = tmp_path / "session" / "memory" / "MEMORY.md"

    def raising() -> None:
        with open_session(tmp_path, budget=6_000) as session:
            _lookups(session, 30)
            raise RuntimeError("the server's own bug")

    with pytest.raises(RuntimeError):
        raising()
    assert not memory.exists()
    session = open_session(tmp_path, budget=6_000)
    real = MemoryFiles.append

    def full_disk(self, facts):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(MemoryFiles, "append", full_disk)
    with pytest.raises(OSError, match="No space left"):
        session.close()
    monkeypatch.setattr(MemoryFiles, "append", real)
    with open_session(tmp_path, budget=6_000):
        pass
    written = memory.read_text()
    assert "customer_id: CUST-5509" in written
    assert "Turn 0: look up customer 0" in written


def _db_port_lines(tmp_path, said: list[tuple[int, str]], shown: list[int]) -> list[str]:
    """A session whose user says ``said`` ((turn, text)) and whose tool
    shows ``db_port`` at the turns ``shown`` (the port 5400 + turn), then
    enough turns for compaction to cover them; MEMORY.md's db port lines."""
    with open_session(tmp_path, budget=6_000) as session:
        for turn in range(30):
            told = dict(said).get(turn)
            session.prepare(told or f"Turn {turn}: look at service {turn}")
            session.record(calling(f"call_{turn}", "openai"))
            output = {"service": f"svc-{turn}"} | ({"db_port": 5400 + turn} if turn in shown else {})
            session.record_tool_result(f"call_{turn}", json.dumps(output))
            session.prepare()
            session.record({"role": "assistant", "content": "Done."})
            session.join()
        assert session._compaction()["written"][2] > 0
    text = (tmp_path / "session" / "memory" / "MEMORY.md").read_text()
    return [line for line in text.splitlines() if line.startswith("- [fact: db port]")]


def test_compactions_facts_go_among_the_learnings_where_they_were_found(tmp_path):
    """The close writes each held fact right after the message it was found
    in, among the learnings, so the later value of a key is the newer
    whichever said it: a tool's value after the user's, a user's
    correction after a tool's (within one summarised segment too)."""
    lines = _db_port_lines(tmp_path / "tool", [(0, "The db port is 5433.")], [3])
    assert lines[-1] == "- [fact: db port] db_port: 5403"
    lines = _db_port_lines(tmp_path / "user", [(3, "Correction: the db port is 5499.")], [1])
    assert lines[-1] == "- [fact: db port] the db port is 5499."


def test_a_torn_or_edited_held_facts_file_keeps_every_whole_fact(tmp_path):
    """A crash's torn last line: the next fact held starts a line of its
    own (it was glued to the torn one and lost). A line that is not a held
    fact is passed over (a null one failed every close)."""
    from context_core.session.held_facts import HeldFacts

    root = tmp_path / "s"
    root.mkdir()
    torn = '{"seq": 3, "line": "- [fact: tag] tag: v1'
    (root / "held_facts").write_text('{"seq": 1, "line": null}\n[]\n' + torn)
    held = HeldFacts(str(root))
    assert held.hold(["- [fact: port] port: 5433"], 7) == 1
    assert [(h.fact.line(), h.seq) for h in held.take()] == [("- [fact: port] port: 5433", 7)]
    held.clear()
    assert held.take() == []


def test_held_facts_stay_until_the_messages_are_learned_and_none_after_a_close(tmp_path, monkeypatch):
    """A close that fails after MEMORY.md was written (the store's write,
    the learned mark) leaves the facts held: the messages are learned again
    at the next close, and the facts with them (they were dropped, so the
    next close wrote the messages' older values last). A compaction still
    in flight after its session closed holds nothing (it wrote the file
    after close(persist=False) had cleared it)."""
    from context_core.session import session as session_module

    held = tmp_path / "session" / "held_facts"
    session = open_session(tmp_path, budget=6_000)
    _lookups(session, 30)
    assert held.exists()

    def failing(root, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session_module, "write_learned", failing)
    with pytest.raises(OSError, match="No space left"):
        session.close()
    assert held.exists()
    monkeypatch.undo()
    with open_session(tmp_path, budget=6_000):
        pass
    assert not held.exists()
    lines = (tmp_path / "session" / "memory" / "MEMORY.md").read_text().splitlines()
    keyed = [line for line in lines if line.startswith("- [fact: customer id]")]
    assert "CUST-55" in keyed[-1]

    from context_core.session.held_facts import HeldFacts

    late = HeldFacts(str(tmp_path))
    late.close()
    assert late.hold(["- [fact: port] port: 5433"], 3) == 0
    assert late.take() == []


def test_held_facts_sync_the_directory_when_their_file_is_made(tmp_path, monkeypatch):
    """The file's data is synced on every hold; its name in the directory
    only when the file is made (a power loss could drop a file whose entry
    was never synced), so once after each clear."""
    from context_core.session import held_facts

    synced: list[str] = []
    monkeypatch.setattr(held_facts, "fsync_dir_of", synced.append)
    held = held_facts.HeldFacts(str(tmp_path))
    assert held.hold(["- [fact: port] port: 5433"], 3) == 1
    assert held.hold(["- [fact: host] host: db1"], 4) == 1
    assert len(synced) == 1
    assert synced == [held.path]
    held.clear()
    assert held.hold(["- [fact: port] port: 5434"], 5) == 1
    assert len(synced) == 2
    assert [h.seq for h in held.take()] == [5]


def test_a_reopened_session_holds_older_turns_facts_only_where_memory_has_none(tmp_path):
    """A reopened session's compaction summarises turns a close already
    learned from: a value memory holds for their key was learned since (the
    tool showed the port before the user corrected it), so the held one is
    not written after it; a key memory has no value for is."""
    path = tmp_path / "session"

    def turn(session: Session, n: int, said: str, output: dict[str, Any]) -> None:
        session.prepare(said)
        session.record(calling(f"call_{n}", "openai"))
        session.record_tool_result(f"call_{n}", json.dumps(output))
        session.prepare()
        session.record({"role": "assistant", "content": "Done."})
        session.join()

    with open_session(tmp_path, budget=50_000) as first:
        turn(first, 0, "Turn 0: check the database", {"db_port": 5433, "cache_host": "10.0.0.7"})
        for n in range(1, 12):
            turn(first, n, f"Turn {n}: check service {n}", {"rows": n})
        first.prepare("The db port is 5434 now.")
        first.record({"role": "assistant", "content": "Noted."})
    with open_session(tmp_path, budget=6_000) as second:
        for n in range(100, 120):
            turn(second, n, f"Turn {n}: check service {n}", {"rows": n})
        assert (path / "held_facts").exists()
    lines = (path / "memory" / "MEMORY.md").read_text().splitlines()
    assert [line for line in lines if line.startswith("- [fact: db port]")] == [
        "- [fact: db port] The db port is 5434 now."
    ]
    assert "- [fact: cache host] cache_host: 10.0.0.7" in lines


def test_a_tool_output_and_the_users_words_in_one_message_the_words_are_newer(tmp_path):
    """An Anthropic input can give a tool's result and the user's words in
    one message: the words are the newer value (they were written last),
    where the tool's, held at that message, was written after them."""
    with open_session(tmp_path, model="claude-sonnet-4-5", budget=6_000) as session:
        session.prepare("Turn 0: check the db")
        session.record(calling("call_0", "anthropic"))
        result = {"type": "tool_result", "tool_use_id": "call_0", "content": "db_port: 5433\nstatus: ok"}
        words = {"type": "text", "text": "The db port is 5434 now."}
        session.prepare({"role": "user", "content": [result, words]})
        session.record({"role": "assistant", "content": "Noted."})
        for n in range(1, 30):
            session.prepare(f"Turn {n}: look at service {n}")
            session.record(calling(f"call_{n}", "anthropic"))
            session.record_tool_result(f"call_{n}", json.dumps({"service": f"svc-{n}"}))
            session.prepare()
            session.record({"role": "assistant", "content": "Done."})
            session.join()
    text = (tmp_path / "session" / "memory" / "MEMORY.md").read_text()
    keyed = [line for line in text.splitlines() if line.startswith("- [fact: db port]")]
    assert keyed[-1] == "- [fact: db port] The db port is 5434 now."
