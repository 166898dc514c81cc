"""Messages and usage from what the provider SDKs return.

An agent loop holds SDK objects: an OpenAI ``ChatCompletion`` (or its
``ChatCompletionMessage``), a Responses API ``Response``, an Anthropic
``Message``. :func:`message_of` turns any of them, or the same thing as a
plain dict, into the message dict the log stores and the next request
sends; :func:`usage_of` reads its token usage. Only the fields a request
may carry are kept: ``refusal``, ``annotations``, ``audio``, ``citations``
and the like describe a response and are refused by some servers when sent
back (a spoken reply's ``audio`` becomes its transcript). Thinking blocks
keep their signatures (Anthropic checks them on the next turn). Neither
SDK is imported: objects are read through their ``model_dump``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError

__all__ = ["OPENAI_REPLY_FIELDS", "Usage", "message_of", "paused", "response_id", "usage_of"]

#: Fields of an OpenAI chat message that a request carries.
_CHAT_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
#: Fields of each Anthropic content block that a request carries, by type
#: (a type not listed here is kept as the SDK gave it).
_BLOCK_FIELDS = {
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "tool_result": ("type", "tool_use_id", "content", "is_error"),
    "image": ("type", "source"),
}


#: Fields of a chat completion message that describe the response; sent
#: back empty (as ``model_dump()`` leaves them), some servers refuse them.
_RESPONSE_ONLY = frozenset({"refusal", "annotations", "audio", "function_call", "reasoning_content"})
#: Fields of a response (or a transcript's stored reply) that are never a
#: request message's, whatever they hold: the APIs refuse them ("Extra
#: inputs are not permitted"). ``id`` stays: it is a message's own
#: metadata key (``depends_on`` names it), taken off before sending.
_NEVER_SENT = frozenset({"model", "usage", "stop_reason", "stop_sequence", "container", "logprobs"})
#: An OpenAI-compatible server's own reply fields: some must come back in
#: later requests (DeepSeek's ``reasoning_content`` of a reply that made
#: tool calls), while Anthropic refuses every one of them.
OPENAI_REPLY_FIELDS = frozenset(
    {"refusal", "annotations", "audio", "reasoning_content", "reasoning", "reasoning_details"}
)


def _plain(obj: Any, what: str) -> Mapping[str, Any]:
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        value = dump(mode="json", exclude_none=True)
        if isinstance(value, Mapping):
            return value
    raise InvalidTypeError(
        f"{what}: expected a message dict or an SDK response object, got {type(obj).__name__}"
    )


def _chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: message[key] for key in _CHAT_FIELDS if message.get(key) is not None}
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        if not calls:
            del out["tool_calls"]
        else:
            out["tool_calls"] = [_tool_call(call) for call in calls]
    if not out.get("content") and _refusal(message):
        out["content"] = _refusal(message)  # the model's answer, kept for what follows it
    audio = message.get("audio")
    if not out.get("content") and isinstance(audio, Mapping) and "tool_calls" not in out:
        out["content"] = _transcript(audio)
        if not out["content"]:
            raise InvalidInputError(_NO_TRANSCRIPT)
    if "content" not in out and "tool_calls" not in out:
        out["content"] = ""
    return out


def _refusal(message: Mapping[str, Any]) -> str:
    """A chat message's ``refusal`` text (``""``: none). A refusal comes with
    no content: stored as nothing, the model's answer was lost, and the
    user's next input ran into the one it refused."""
    refusal = message.get("refusal")
    return refusal if isinstance(refusal, str) and refusal.strip() else ""


_NO_TRANSCRIPT = (
    "response: a spoken reply with no content and no transcript (an audio id alone expires"
    " within hours): record it with its transcript as content"
)


def _transcript(audio: Any) -> str:
    """The transcript of a chat reply's ``audio`` (``""``: none). A spoken
    reply has no content: its transcript is what the next request carries.
    The audio itself is not sent back: its ``id`` expires within hours, and
    one past its time would fail every request the reply stays in."""
    transcript = audio.get("transcript") if isinstance(audio, Mapping) else None
    return transcript if isinstance(transcript, str) and transcript.strip() else ""


def _tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call  # the log reports what is wrong with it
    kind = call.get("type", "function")
    if kind != "function":  # a custom tool call ({"type": "custom", "custom": {...}}): kept whole
        return {key: value for key, value in call.items() if value is not None}
    function = call.get("function")
    if isinstance(function, Mapping):
        function = {key: function[key] for key in ("name", "arguments") if key in function}
    return {"id": call.get("id"), "type": kind, "function": function}


def _block(block: Any) -> Any:
    if not isinstance(block, Mapping):
        return block
    fields = _BLOCK_FIELDS.get(str(block.get("type")))
    if fields is None:
        return dict(block)
    return {key: block[key] for key in fields if block.get(key) is not None}


def _output_message(output: Sequence[Any]) -> dict[str, Any]:
    """The chat message of a Responses API ``output`` given as a list: every
    item one of its item types, and a message or a tool call among them."""
    items = [_plain(item, "response.output") for item in output]
    for item in items:
        kind = item.get("type")
        if not isinstance(kind, str) or kind in _CONTENT_BLOCKS or kind.endswith("_tool_result"):
            # A chat message (no type) or a content block: no output item.
            raise InvalidTypeError(
                "response: a list is read as a Responses API output (message, function_call,"
                f" reasoning... items); got {'a message' if kind is None else f'a {kind!r} block'}"
            )
    if not any(_responses_item(item) for item in items):
        raise InvalidInputError("response: a Responses API output with no message and no tool call")
    return _responses_message(items)


#: Content block types (of a message's content, Anthropic's or a chat
#: message's), which no Responses API output item is typed; an output item
#: of a type not read here (reasoning, a compaction, a server call) is passed over.
_CONTENT_BLOCKS = frozenset(
    {
        "text",
        "image",
        "image_url",
        "document",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "mcp_tool_use",
        "input_text",
        "output_text",
        "input_image",
        "input_file",
        "input_audio",
        "refusal",
        "search_result",
    }
)


def _responses_item(data: Mapping[str, Any]) -> bool:
    """Whether ``data`` is one item of a Responses API ``output`` (a message of
    ``output_text`` or ``refusal`` parts, or a tool call), which an Anthropic
    ``Message`` (also ``type: "message"``) never is."""
    kind = data.get("type")
    if kind in ("function_call", "custom_tool_call"):
        return True
    parts = data.get("content")
    return (
        kind == "message"
        and isinstance(parts, list)
        and any(isinstance(p, Mapping) and p.get("type") in ("output_text", "refusal") for p in parts)
    )


def _responses_message(output: list[Any]) -> dict[str, Any]:
    """One chat message from a Responses API ``output``: its text and its
    function and custom tool calls (reasoning items are not sent back in
    chat form)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            parts = item.get("content") or ()
            if not isinstance(parts, (list, tuple)):
                raise InvalidTypeError(
                    f"response.output: a message's content must be a list, not {type(parts).__name__}"
                )
            for part in parts:
                if isinstance(part, Mapping) and part.get("type") == "refusal" and _refusal(part):
                    texts.append(_refusal(part))
                elif isinstance(part, Mapping) and part.get("type") == "output_text":
                    text = part.get("text", "")
                    if not isinstance(text, str):
                        raise InvalidTypeError(
                            f"response.output: an output_text's text must be a str, not {type(text).__name__}"
                        )
                    texts.append(text)
        elif item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id") or item.get("id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
                }
            )
        elif item.get("type") == "custom_tool_call":  # a custom tool's call: its input is free text
            calls.append(
                {
                    "id": item.get("call_id") or item.get("id"),
                    "type": "custom",
                    "custom": {"name": item.get("name"), "input": item.get("input", "")},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def response_id(response: Any) -> str | None:
    """The id the API gave ``response`` (a ``ChatCompletion``'s, a
    ``Response``'s, an Anthropic ``Message``'s, as objects or dicts), if any."""
    given = response.get("id") if isinstance(response, Mapping) else getattr(response, "id", None)
    return given if isinstance(given, str) and given else None


def paused(response: Any) -> bool:
    """Whether ``response`` is an Anthropic reply paused within its turn
    (``stop_reason`` ``"pause_turn"``, as a long server tool run ends one):
    the API goes on with the turn when the reply is sent back as the last
    message."""
    reason = (
        response.get("stop_reason")
        if isinstance(response, Mapping)
        else getattr(response, "stop_reason", None)
    )
    return reason == "pause_turn"


def message_of(response: Any) -> dict[str, Any]:
    """The message dict of ``response``: a message dict (OpenAI or
    Anthropic form, returned as given), an OpenAI ``ChatCompletion`` (its first choice) or
    ``ChatCompletionMessage``, a Responses API ``Response`` (or its ``output``,
    or one item of it), an Anthropic ``Message``, or any of them as a plain dict."""
    if isinstance(response, Mapping) and "role" in response and response.get("type") != "message":
        # Already a message: stored as given, metadata keys too, less the
        # response-only fields an SDK's model_dump() leaves empty.
        message = {
            k: v for k, v in response.items() if k not in _NEVER_SENT and not (k in _RESPONSE_ONLY and not v)
        }
        if not message.get("content") and not message.get("tool_calls") and _refusal(message):
            message["content"] = message.pop("refusal")
        if "audio" in message and isinstance(message["audio"], Mapping):
            spoken = _transcript(message.pop("audio"))
            if not message.get("content") and not message.get("tool_calls"):
                if not spoken:
                    raise InvalidInputError(_NO_TRANSCRIPT)
                message["content"] = spoken
        return message
    if isinstance(response, (list, tuple)) and response:  # a Response's ``output``, whole
        return _output_message(response)
    data = _plain(response, "response")
    if _responses_item(data):  # one item of a Response's ``output``
        return _responses_message([data])
    if "choices" in data:
        choices = data["choices"]
        if not isinstance(choices, list) or not choices:
            raise InvalidInputError("response: a chat completion with no choices")
        data = _plain(choices[0], "response.choices[0]")
        data = _plain(data.get("message"), "response.choices[0].message")
    elif isinstance(data.get("output"), list) and data.get("object") == "response":
        return _responses_message(data["output"])
    if data.get("type") == "message" and isinstance(data.get("content"), list):
        return {"role": data.get("role", "assistant"), "content": [_block(b) for b in data["content"]]}
    if "role" not in data:
        raise InvalidInputError("response: neither a message (no role) nor a response the SDKs return")
    content = data.get("content")
    if isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") in ("tool_use", "thinking", "tool_result") for b in content
    ):
        return {"role": data["role"], "content": [_block(b) for b in content]}
    return _chat_message(data)


class Usage:
    """A response's token usage: ``prompt`` (the whole input, cached tokens
    included), ``cached`` (read from the provider's cache), ``cache_written``
    (Anthropic: written to it), ``output``; ``raw`` as the SDK gave it."""

    __slots__ = ("cache_written", "cached", "output", "prompt", "raw")

    def __init__(self, prompt: int, cached: int, cache_written: int, output: int, raw: Any) -> None:
        self.prompt = prompt
        self.cached = cached
        self.cache_written = cache_written
        self.output = output
        self.raw = raw

    def __repr__(self) -> str:
        return (
            f"Usage(prompt={self.prompt}, cached={self.cached}, "
            f"cache_written={self.cache_written}, output={self.output})"
        )


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_of(response: Any) -> Usage | None:
    """The usage of ``response`` (``None`` when it reports none)."""
    raw = response.get("usage") if isinstance(response, Mapping) else getattr(response, "usage", None)
    if raw is None:
        return None
    data = _plain(raw, "response.usage")
    if "prompt_tokens" in data:  # Chat Completions
        details = data.get("prompt_tokens_details") or {}
        cached = _int(details, "cached_tokens") if isinstance(details, Mapping) else 0
        return Usage(_int(data, "prompt_tokens"), cached, 0, _int(data, "completion_tokens"), raw)
    if "cache_read_input_tokens" in data or "cache_creation_input_tokens" in data:  # Anthropic
        read, written = _int(data, "cache_read_input_tokens"), _int(data, "cache_creation_input_tokens")
        return Usage(
            _int(data, "input_tokens") + read + written, read, written, _int(data, "output_tokens"), raw
        )
    if "input_tokens" in data:  # the Responses API, or Anthropic without cache fields
        details = data.get("input_tokens_details") or {}
        if not isinstance(details, Mapping):
            details = {}
        cached, written = _int(details, "cached_tokens"), _int(details, "cache_write_tokens")
        return Usage(_int(data, "input_tokens"), cached, written, _int(data, "output_tokens"), raw)
    return None
