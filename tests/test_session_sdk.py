"""A Session driven through the real ``openai`` and ``anthropic`` SDKs
against a local HTTP server, for 200 turns with tool calls: every request the
server receives must be one the real API accepts (the validators of the
sanitize tests), and what the SDKs return is recorded as it is."""

from __future__ import annotations

import json
import random

import pytest

import validators
from agent_sessions import TOOLS as TOOL_NAMES
from agent_sessions import _user_text, tool_output
from context_core import Budget, InvalidInputError, Session, Tokenizer
from llm_server import FakeLLMServer, Reply, anthropic_body, openai_body
from sdk_clients import sync_client

TURNS = 200
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name.replace('_', ' ')} tool.",
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        },
    }
    for name in TOOL_NAMES
]
IDENTITY = "You are a coding and research agent for the payments team. " * 40  # a cacheable prefix

pytestmark = pytest.mark.filterwarnings("ignore::context_core.PromptCacheWarning")


def openai_reply(rng: random.Random, turn: int, round_: int, prompt_tokens: int, cached: int) -> dict:
    body = openai_body(None, model="gpt-4o")
    message = body["choices"][0]["message"]
    if round_ < 2 and rng.random() < 0.7:
        message["tool_calls"] = [
            {
                "id": f"call_{turn}_{round_}_{i}",
                "type": "function",
                "function": {"name": rng.choice(TOOL_NAMES), "arguments": json.dumps({"target": f"t{turn}"})},
            }
            for i in range(rng.randint(1, 3))
        ]
        body["choices"][0]["finish_reason"] = "tool_calls"
    else:
        message["content"] = f"Done with turn {turn}."
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 20,
        "total_tokens": prompt_tokens + 20,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return body


def anthropic_reply(rng: random.Random, turn: int, round_: int, prompt_tokens: int, cached: int) -> dict:
    blocks: list[dict] = [{"type": "thinking", "thinking": f"Plan for {turn}.", "signature": f"sig{turn}"}]
    stop = "end_turn"
    if round_ < 2 and rng.random() < 0.7:
        blocks += [
            {
                "type": "tool_use",
                "id": f"toolu_{turn}_{round_}_{i}",
                "name": rng.choice(TOOL_NAMES),
                "input": {"target": f"t{turn}"},
            }
            for i in range(rng.randint(1, 3))
        ]
        stop = "tool_use"
    else:
        blocks.append({"type": "text", "text": f"Done with turn {turn}."})
    body = anthropic_body(blocks, model="claude-sonnet-4-5", stop=stop)
    body["usage"] = {
        "input_tokens": prompt_tokens - cached,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": 20,
    }
    return body


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_two_hundred_turns_through_the_real_sdks(tmp_path, sdk):
    rng = random.Random(7)
    model = "gpt-4o" if sdk == "openai" else "claude-sonnet-4-5"
    reply = openai_reply if sdk == "openai" else anthropic_reply
    ratio = 1.0 if sdk == "openai" else 1.15  # what the fake provider's tokenizer counts against ours
    calls = results = 0
    # A 16K window: the session trims and compacts, and each request stays small for the SDKs.
    budget = Budget.for_model(model, window=16_000)
    with (
        FakeLLMServer() as server,
        Session.open(
            tmp_path / "s", model=model, identity=IDENTITY, tools=TOOLS, store=None, budget=budget
        ) as session,
    ):
        client = sync_client(sdk, server.url)
        create = client.chat.completions.create if sdk == "openai" else client.messages.create
        for turn in range(TURNS):
            request = session.prepare(_user_text(rng, turn, rng.random() < 0.35))
            for round_ in range(3):
                report = request.report
                assert report.total <= report.limit
                cached = report.sections["tools"] + report.sections["system"] if round_ or turn else 0
                server.script(Reply(body=reply(rng, turn, round_, int(report.total * ratio), cached)))
                response = create(**request)  # the SDK's own object, recorded as it is
                pending = session.record(response)
                calls += 1
                if not pending:
                    break
                for tool_call in pending:
                    output = tool_output(rng, tool_call.name, rng.randint(100, 1_500))
                    session.record_tool_result(tool_call.id, output, is_error=rng.random() < 0.05)
                    results += 1
                request = session.prepare()
            if turn:
                assert request.report.cached_tokens is not None
        assert session.budget.observations > 0
        assert session.budget.ratio == pytest.approx(ratio, rel=0.02)
    assert len(server.received) == calls
    assert results > TURNS / 2
    for received in server.received:
        body = received.json
        if sdk == "openai":
            assert received.path == "/v1/chat/completions"
            problems = validators.openai(body["messages"])
            assert sum(m["role"] == "system" for m in body["messages"]) == 1
        else:
            assert received.path == "/v1/messages"
            problems = validators.anthropic(body["messages"], body.get("system"), request=True)
            marks = sum("cache_control" in block for block in body["system"])
            marks += sum("cache_control" in tool for tool in body.get("tools", []))
            assert marks <= 4
        assert problems == [], problems
    # Thinking signatures went back as they came.
    if sdk == "anthropic":
        sent = json.dumps(server.received[-1].json["messages"])
        assert '"signature": "sig' in sent


def test_a_paused_turn_is_sent_back_for_the_model_to_go_on(tmp_path):
    """Anthropic ends a long server tool run with ``stop_reason``
    ``pause_turn``: the reply, sent back as the last message, lets the model
    go on with its turn. ``prepare()`` builds that request (its text's end
    whitespace cut, as the API requires of a last assistant message), and
    the reply that finishes the turn joins the paused one."""
    searched = [
        {"type": "text", "text": "Let me look that up."},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "PAY-77"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://a.example",
                    "title": "A",
                    "encrypted_content": "e",
                }
            ],
        },
        {"type": "text", "text": "Still searching. \n"},
    ]
    with (
        FakeLLMServer() as server,
        Session.open(tmp_path / "s", model="claude-sonnet-4-5", identity=IDENTITY, store=None) as session,
    ):
        client = sync_client("anthropic", server.url)
        server.script(
            Reply(body=anthropic_body(searched, model="claude-sonnet-4-5", stop="pause_turn")),
            Reply(
                body=anthropic_body([{"type": "text", "text": "PAY-77 shipped."}], model="claude-sonnet-4-5")
            ),
        )
        first = session.prepare("what happened to PAY-77?")
        assert session.record(client.messages.create(**first)) == ()
        assert session.needs_reply
        going_on = session.prepare()
        assert (going_on.report.turn, going_on.report.step) == (0, 1)
        last = going_on["messages"][-1]
        assert last["role"] == "assistant"
        assert [b["type"] for b in last["content"]] == [b["type"] for b in searched]
        assert last["content"][-1]["text"] == "Still searching."
        system = {
            "role": "system",
            "content": [{"type": "text", "text": b["text"]} for b in going_on["system"]],
        }
        assert going_on.report.total == Tokenizer().count_messages([system, *going_on["messages"]])
        session.record(client.messages.create(**going_on))
        assert not session.needs_reply
        with pytest.raises(InvalidInputError, match="nothing to answer"):
            session.prepare()
        after = session.prepare("thanks")
        assert after["messages"][-2]["content"][-1] == {"type": "text", "text": "PAY-77 shipped."}
    for received in server.received:
        body = received.json
        assert validators.anthropic(body["messages"], body.get("system"), request=True) == []
    assert len(server.received) == 2


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_long_tool_loop_goes_through_the_real_sdks_with_its_old_results_cleared(tmp_path, sdk):
    """One input, then 40 steps of one call each through the SDKs with a 16K
    window: the turn outgrows the room and its oldest results go as a note.
    Every request the server receives is one the API accepts, carries the
    newest result whole, and the later ones carry cleared results."""
    rng = random.Random(11)
    model = "gpt-4o" if sdk == "openai" else "claude-sonnet-4-5"
    budget = Budget.for_model(model, window=16_000)
    outputs = []
    with (
        FakeLLMServer() as server,
        Session.open(
            tmp_path / "s", model=model, identity=IDENTITY, tools=TOOLS, store=None, budget=budget
        ) as s,
    ):
        client = sync_client(sdk, server.url)
        create = client.chat.completions.create if sdk == "openai" else client.messages.create
        request = s.prepare("Audit every service of the payments repository, one by one.")
        for step in range(40):
            reply = openai_reply if sdk == "openai" else anthropic_reply
            body = reply(random.Random(step), step, 0, request.report.total, 0)
            # One call a step, whatever the scripted reply drew.
            if sdk == "openai":
                message = body["choices"][0]["message"]
                message["content"] = None
                message["tool_calls"] = [
                    {
                        "id": f"call_{step}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ]
                body["choices"][0]["finish_reason"] = "tool_calls"
            else:
                body["content"] = [
                    {"type": "tool_use", "id": f"toolu_{step}", "name": "read_file", "input": {}}
                ]
                body["stop_reason"] = "tool_use"
            server.script(Reply(body=body))
            (call,) = s.record(create(**request))
            outputs.append(f"service {step}\n" + tool_output(rng, "read_file", 3_000))  # ~700 tokens
            s.record_tool_result(call.id, outputs[-1])
            request = s.prepare()
            assert request.report.total <= request.report.limit
        assert request.report.cleared > 0
    cleared = 0
    for received in server.received:
        body = received.json
        if sdk == "openai":
            problems = validators.openai(body["messages"])
        else:
            problems = validators.anthropic(body["messages"], body.get("system"), request=True)
        assert problems == [], problems
        cleared += "Cleared to fit the context window" in json.dumps(body["messages"])
    assert cleared > 10
    last = json.dumps(server.received[-1].json["messages"], ensure_ascii=False)
    assert json.dumps(outputs[-2], ensure_ascii=False)[1:-1] in last  # the newest result it was sent, whole
