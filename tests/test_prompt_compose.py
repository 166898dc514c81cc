"""Prompt parts composed with a selection: one final form that repair leaves
as it is, the log's system messages kept for both providers, and summaries
and memories kept out of the cached prefix."""

from __future__ import annotations

import json

import pytest

import validators
from context_core import InvalidInputError, InvalidTypeError, MessageLog, PriorityAssembly, sanitize
from context_core.prompt import PromptParts
from prompt_fixtures import big_builder, tools
from test_prompt_parts import MODEL, anthropic_prefix, turn_parts


def logged(tmp_path, system: str | None = "Always answer in French."):
    log = MessageLog.open(tmp_path / "log", create=True)
    if system is not None:
        log.append({"role": "system", "content": system})
    for i in range(6):
        log.append({"role": "user", "content": f"question {i}"})
        log.append({"role": "assistant", "content": f"answer {i}"})
    log.append({"role": "user", "content": "question 6"})
    return log


@pytest.mark.parametrize("placement", ["system", "user"])
def test_an_openai_request_is_already_in_the_form_repair_leaves(tmp_path, placement):
    log = logged(tmp_path)
    parts = turn_parts(big_builder(stable_words=200), 3)
    selection = PriorityAssembly().select(
        log, 4000, global_summary="The user wants French.", memories=["the port is 5433"]
    )
    assert selection.messages[0]["role"] == "system"  # the log's system text, summary, memory
    request = parts.to_openai(selection.messages, volatile=placement)
    repaired = sanitize(request["messages"])
    assert not repaired.changed, repaired.changes
    assert validators.openai(request["messages"]) == []
    roles = [m["role"] for m in request["messages"]]
    assert roles.count("system") == 1
    assert roles[0] == "system"
    sent = json.dumps(request["messages"])
    for text in ("Always answer in French.", "The user wants French.", "the port is 5433", parts.volatile):
        assert json.dumps(text)[1:-1] in sent


def test_the_log_system_message_reaches_an_anthropic_request(tmp_path):
    log = logged(tmp_path)
    parts = turn_parts(big_builder(stable_words=200), 3)
    selection = PriorityAssembly(provider="anthropic").select(log, 4000, memories=["the port is 5433"])
    assert all(m["role"] != "system" for m in selection.messages)
    request = parts.to_anthropic(selection.messages, model=MODEL, system=selection.system)
    texts = [block["text"] for block in request["system"]]
    assert texts[:3] == [parts.system, parts.stable, parts.volatile]
    context = "\n\n".join(texts[3:])
    assert "Always answer in French." in context
    assert "the port is 5433" in context
    assert validators.anthropic(request["messages"], request["system"], request=True) == []
    # A system message the conversation starts with is lifted, never sent as a message.
    lifted = parts.to_anthropic(
        [{"role": "system", "content": "Be brief."}, *selection.messages], model=MODEL
    )
    assert lifted["system"][-1] == {"type": "text", "text": "Be brief."}
    assert lifted["messages"] == selection.messages


def test_summaries_and_memories_never_change_the_cached_prefix(tmp_path):
    log = logged(tmp_path)
    builder = big_builder(stable_words=200)
    anthropic, openai = set(), set()
    for turn in range(6):
        parts = turn_parts(builder, turn)
        summary, memories = f"summary version {turn}", [f"memory {turn}"]
        for_openai = PriorityAssembly().select(log, 4000, global_summary=summary, memories=memories)
        request = parts.to_openai(for_openai.messages)
        content = request["messages"][0]["content"]
        head = f"{parts.system}\n\n{parts.stable}"
        assert content.startswith(head + "\n\n" + parts.volatile + "\n\n")
        assert summary in content[len(head) :]
        openai.add(head)
        for_anthropic = PriorityAssembly(provider="anthropic").select(
            log, 4000, global_summary=summary, memories=memories
        )
        blocks = parts.to_anthropic(for_anthropic.messages, model=MODEL, system=for_anthropic.system)
        anthropic.add(anthropic_prefix(blocks))
        assert summary not in anthropic_prefix(blocks).decode()
    assert len(openai) == len(anthropic) == 1


def test_the_context_carries_the_callers_breakpoints_and_refuses_junk():
    parts = PromptParts("You are terse.", "## Facts\nport 5433", "now", tools=tools(1))
    marked = [{"type": "text", "text": "summary", "cache_control": {"type": "ephemeral"}}]
    request = parts.to_anthropic(
        [{"role": "user", "content": "hi"}], model=MODEL, system=marked, min_cache_tokens=0
    )
    assert request["system"][-1] == marked[0]
    with pytest.raises(InvalidInputError, match="already carry 5"):
        parts.to_anthropic(
            [{"role": "user", "content": "hi"}], model=MODEL, system=marked * 5, min_cache_tokens=0
        )
    with pytest.raises(InvalidTypeError, match="system must be"):
        parts.to_openai([], system=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match=r"messages\[0\]"):
        parts.to_openai([{"role": "system", "content": [{"type": "image_url"}]}])
    openai = parts.to_openai([{"role": "user", "content": "hi"}], system="summary")
    assert openai["messages"][0]["content"] == "You are terse.\n\n## Facts\nport 5433\n\nnow\n\nsummary"
    user = parts.to_openai([{"role": "user", "content": "hi"}], system="summary", volatile="user")
    assert user["messages"][-1] == {"role": "user", "content": "hi\n\nnow\n\nsummary"}
