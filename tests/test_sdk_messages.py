"""SDK response objects become the messages the log stores and the next
request sends; the log refuses unknown roles and names where a bad message is."""

from __future__ import annotations

import pytest
from anthropic.types import Message as AnthropicMessage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.responses import Response

from context_core import InvalidInputError, InvalidTypeError, MessageLog, sanitize
from context_core.sdk_messages import message_of, usage_of


def chat_completion(tool_calls=None, content="done") -> ChatCompletion:
    message = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": [],
        "tool_calls": tool_calls,
    }
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 7,
        "total_tokens": 127,
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    return completion_of(message, "tool_calls" if tool_calls else "stop", usage=usage)


def completion_of(message: dict, finish_reason: str = "stop", **fields) -> ChatCompletion:
    """A one-choice ``ChatCompletion`` whose message is ``message``."""
    choice = {"index": 0, "finish_reason": finish_reason, "message": message}
    body = {"id": "cmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o", **fields}
    return ChatCompletion.model_validate({**body, "choices": [choice]})


def anthropic_message() -> AnthropicMessage:
    return AnthropicMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "thinking", "thinking": "check the file", "signature": "sig-abc"},
                {"type": "text", "text": "Reading it.", "citations": None},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
            ],
            "stop_reason": "tool_use",
            "usage": {
                "input_tokens": 30,
                "output_tokens": 12,
                "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 100,
            },
        }
    )


def test_a_chat_completion_keeps_only_what_a_request_carries():
    calls = [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}]
    message = message_of(chat_completion(calls, content=None))
    assert message == {"role": "assistant", "tool_calls": calls}
    assert message_of(chat_completion().choices[0].message) == {"role": "assistant", "content": "done"}
    usage = usage_of(chat_completion())
    assert (usage.prompt, usage.cached, usage.cache_written, usage.output) == (120, 64, 0, 7)


def test_an_anthropic_message_keeps_thinking_signatures_and_tool_use():
    message = message_of(anthropic_message())
    assert message == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "check the file", "signature": "sig-abc"},
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
        ],
    }
    usage = usage_of(anthropic_message())
    # Anthropic's input_tokens leaves out what was read from or written to the cache.
    assert (usage.prompt, usage.cached, usage.cache_written) == (2130, 2000, 100)
    assert (
        sanitize([{"role": "user", "content": "go"}, message], provider="anthropic").messages[-1]["content"][
            0
        ]["signature"]
        == "sig-abc"
    )


def test_a_responses_api_output_becomes_one_chat_message():
    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-4o",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "id": "m1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_9",
                    "name": "grep",
                    "arguments": "{}",
                },
            ],
            "usage": {
                "input_tokens": 50,
                "output_tokens": 5,
                "total_tokens": 55,
                "input_tokens_details": {"cached_tokens": 32, "cache_write_tokens": 8},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )
    assert message_of(response) == {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "grep", "arguments": "{}"}}],
    }
    usage = usage_of(response)
    assert (usage.prompt, usage.cached, usage.cache_written) == (50, 32, 8)
    # Its output (a list of items), and one item of it, as objects or dicts:
    # a message item's output_text parts are no chat content parts.
    whole = message_of(response)
    for output in (response.output, [item.model_dump() for item in response.output]):
        assert message_of(output) == whole
    assert message_of(response.output[1]) == {"role": "assistant", "content": "Looking."}
    assert message_of(response.output[1].model_dump()) == {"role": "assistant", "content": "Looking."}
    called = {"role": "assistant", "content": "", "tool_calls": whole["tool_calls"]}
    assert message_of(response.output[2]) == called
    with pytest.raises(InvalidTypeError, match=r"response\.output"):
        message_of([1, 2])
    # A list is an output only when its items are output items: Anthropic
    # blocks or chat messages were read as one with nothing in it.
    call = {"type": "tool_use", "id": "t1", "name": "read", "input": {}}
    blocks = [{"type": "text", "text": "Reading."}, call]
    chats = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    for wrong in (blocks, chats):
        with pytest.raises(InvalidTypeError, match="read as a Responses API output"):
            message_of(wrong)
    with pytest.raises(InvalidInputError, match="no message and no tool call"):
        message_of([response.output[0]])  # its reasoning alone
    # An item of a type not read here (a compaction, a server call) is passed over, as in a Response.
    other = {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}
    assert message_of([other, *[item.model_dump() for item in response.output]]) == whole


def test_a_message_dict_is_returned_as_given_and_junk_is_refused():
    given = {"role": "user", "content": "hi", "timestamp": 5.0}
    assert message_of(given) == given
    assert message_of(given) is not given
    with pytest.raises(InvalidTypeError, match="SDK response"):
        message_of(42)
    with pytest.raises(InvalidInputError, match="no choices"):
        message_of({"choices": []})
    with pytest.raises(InvalidInputError, match="no role"):
        message_of({"content": "x"})
    assert usage_of({"role": "assistant"}) is None


def test_a_reply_dict_loses_the_fields_no_request_carries():
    """A reply stored as a plain dict (a transcript's, or an SDK's dump of
    one message) keeps its message and metadata keys (``id`` too, which
    ``depends_on`` names), and an OpenAI-compatible server's own fields that
    hold something (DeepSeek wants a tool turn's ``reasoning_content``
    back), but not what only a response holds: the APIs refuse those."""
    reply = {
        "role": "assistant",
        "content": "Shipped.",
        "name": "agent",
        "timestamp": 5.0,
        "id": "msg-12",
        "model": "m",
        "usage": {"input_tokens": 3, "output_tokens": 1},
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "container": None,
        "logprobs": None,
        "reasoning_content": "I think...",
        "annotations": [],
    }
    kept = {
        "role": "assistant",
        "content": "Shipped.",
        "name": "agent",
        "timestamp": 5.0,
        "id": "msg-12",
        "reasoning_content": "I think...",
    }
    assert message_of(reply) == kept
    assert usage_of(reply) is not None  # still read for the budget


def test_the_log_takes_sdk_objects_and_refuses_unknown_roles(tmp_path):
    log = MessageLog.open(tmp_path / "log", create=True)
    log.append({"role": "user", "content": "read a.py"})
    log.append(anthropic_message())
    log.append(ChatCompletionMessage(role="assistant", content="ok"))
    view = log.context_view()
    assert view[1]["content"][0]["signature"] == "sig-abc"
    assert view[2] == {"role": "assistant", "content": "ok"}
    with pytest.raises(InvalidInputError, match=r"unknown role \"banana\""):
        log.append({"role": "banana", "content": "x"})
    with pytest.raises(InvalidInputError, match=r"messages\[1\]\.role"):
        log.append_many([{"role": "user", "content": "a"}, {"role": "assitant", "content": "b"}])
    with pytest.raises(InvalidTypeError, match=r"^message: expected a message dict"):
        log.append(None)
    assert len(log) == 3  # nothing refused was written


def test_custom_tool_calls_and_dumped_messages_keep_only_what_is_sent():
    dumped = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}}],
    }
    message = message_of(dumped)
    assert "refusal" not in message
    assert "annotations" not in message
    completion = {"choices": [{"message": dumped}]}
    assert message_of(completion)["tool_calls"] == [
        {"id": "c1", "type": "custom", "custom": {"name": "code_exec", "input": "print(1)"}}
    ]


def test_a_refusal_is_kept_as_the_replys_text():
    """A refusal comes with no content: it was stored as an empty reply, so
    the next request lost the model's answer and ran the user's two inputs
    together."""

    refused = "I can't help with that."
    as_dict = {"role": "assistant", "content": None, "refusal": refused}
    completion = completion_of(as_dict)
    responses = {
        "object": "response",
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": refused}]}
        ],
    }
    for response in (completion, completion.choices[0].message, as_dict, responses):
        assert message_of(response) == {"role": "assistant", "content": refused}
    answered = {"role": "assistant", "content": "Here it is.", "refusal": ""}
    assert message_of(answered) == {"role": "assistant", "content": "Here it is."}


def test_a_spoken_reply_is_kept_as_its_transcript(tmp_path):
    """An audio reply (``modalities=["audio"]``) has no content: it was
    stored empty, repaired away, and the next request ran the user's two
    inputs together. Its transcript is the reply's text; the audio (an id
    that expires, megabytes of data) is not sent back."""
    audio = {"id": "audio_1", "data": "UklGRg" * 100, "expires_at": 1729018505, "transcript": "Hi there!"}
    as_dict = {"role": "assistant", "content": None, "audio": audio}
    completion = completion_of(as_dict)
    for response in (completion, completion.choices[0].message, as_dict):
        assert message_of(response) == {"role": "assistant", "content": "Hi there!"}
    written = {"role": "assistant", "content": "Hello.", "audio": audio}
    assert message_of(written) == {"role": "assistant", "content": "Hello."}
    # An audio reply with nothing to say it by (its id alone expires): refused, not logged empty.
    for silent in ({**audio, "transcript": " "}, {"id": "audio_1"}):
        with pytest.raises(InvalidInputError, match="no transcript"):
            message_of({"role": "assistant", "content": None, "audio": silent})
    # As the SDK gives it too (its audio has every field: the transcript blank).
    spoken = completion_of({**as_dict, "audio": {**audio, "transcript": ""}})
    for response in (spoken, spoken.choices[0].message, spoken.model_dump()):
        with pytest.raises(InvalidInputError, match="no transcript"):
            message_of(response)
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "Say hi."})
        log.append(message_of(completion))
        log.append({"role": "user", "content": "Again."})
        sent = sanitize(log.context_view()).messages
        assert [m["content"] for m in sent] == ["Say hi.", "Hi there!", "Again."]


def test_a_responses_custom_tool_call_is_kept_as_a_chat_custom_call(tmp_path):
    """A custom tool's call in a Responses output (free-text input) was
    dropped: the reply was logged empty and the call lost."""
    from context_core import Session

    response = Response.model_validate(
        {
            "id": "resp_2",
            "object": "response",
            "created_at": 1,
            "model": "gpt-5",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "custom_tool_call",
                    "id": "ctc_1",
                    "call_id": "call_7",
                    "name": "apply_patch",
                    "input": "*** Begin",
                }
            ],
        }
    )
    call = {"id": "call_7", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}
    assert message_of(response) == {"role": "assistant", "content": "", "tool_calls": [call]}
    with Session.open(tmp_path / "s", model="gpt-4o", store=False) as session:
        session.prepare("patch it")
        (made,) = session.record(response)
        assert (made.id, made.name) == ("call_7", "apply_patch")


def test_to_openai_renders_the_sdks_own_message_object_as_its_dict():
    """The SDK takes its own message object in ``messages`` (the reply
    appended as ``completion.choices[0].message``), so the renderer does
    too, as its dict; anything else that is not a mapping is refused."""
    from context_core.prompt import PromptParts

    call = {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    reply = chat_completion(tool_calls=[call], content=None).choices[0].message
    history = [
        {"role": "user", "content": "find the bug"},
        reply,
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py:3"},
    ]
    request = PromptParts("You are terse.").to_openai(history, model="gpt-4o")
    assert request["messages"][2] == message_of(reply)
    assert request["messages"][2]["tool_calls"] == [call]
    assert history[1] is reply  # the caller's list as it was
    with pytest.raises(InvalidTypeError, match=r"messages\[1\]"):
        PromptParts("You are terse.").to_openai([history[0], object()])
