"""Messages as the transcript a summarising model reads.

Each message is one ``<msg>`` element naming its position and role. Tool
calls show their name and arguments, results their call id and a capped
text; thinking is left out and images are named, not sent. Text from the
conversation is escaped so that it cannot open or close any of the tags the
prompt and the reply use (``msg``, ``transcript``, ``segment``, ``rules``,
``analysis``, ``summary``): a tool output that says ``</summary>`` reaches the
model as ``&lt;/summary>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from context_core._core import Tokenizer
from context_core.errors import InvalidTypeError

__all__ = [
    "DEFAULT_ARGUMENT_CHARS",
    "DEFAULT_RESULT_TOKENS",
    "escape",
    "message_text",
    "render_transcript",
]

#: Tokens of each tool result the model is shown.
DEFAULT_RESULT_TOKENS = 200
#: Characters of each tool call's arguments the model is shown.
DEFAULT_ARGUMENT_CHARS = 300
_OUR_TAGS = re.compile(r"<(?=\s*/?\s*(?:msg|transcript|segment|rules|analysis|summary)\b)", re.IGNORECASE)
_CUT = "…[cut]"


def escape(text: str) -> str:
    """``text`` with every ``<`` that would start one of our tags written ``&lt;``."""
    return _OUR_TAGS.sub("&lt;", text) if "<" in text else text


#: Deepest nesting of content read (a tool result inside a tool result...).
MAX_NESTING = 8


def tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A message's OpenAI ``tool_calls``, checked: a list of dicts, each
    ``function`` a dict; else :class:`~context_core.InvalidTypeError`."""
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        raise InvalidTypeError(f"tool_calls must be a list of dicts, got {type(calls).__name__}")
    for i, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise InvalidTypeError(f"tool_calls[{i}] must be a dict, got {type(call).__name__}")
        function = call.get("function")
        if function is not None and not isinstance(function, Mapping):
            raise InvalidTypeError(f"tool_calls[{i}].function must be a dict, got {type(function).__name__}")
    return list(calls)


def call_parts(call: Mapping[str, Any]) -> tuple[Any, Any]:
    """A tool call's name and arguments: a function's, or a custom tool's
    name and free-text input."""
    function = call.get("function")
    if not isinstance(function, Mapping):
        custom = call.get("custom")
        function = (
            {"name": custom.get("name"), "arguments": custom.get("input")}
            if isinstance(custom, Mapping)
            else {}
        )
    return function.get("name"), function.get("arguments")


def _text_of(content: Any, depth: int = 0) -> str:
    """The plain text of a content value: a string, or its text parts."""
    if depth > MAX_NESTING:
        raise InvalidTypeError(f"a message's content is nested deeper than {MAX_NESTING} levels")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping):
                kind = block.get("type")
                if kind == "text" and isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif kind in ("image", "image_url", "input_image"):
                    parts.append("[image]")
                elif kind == "tool_result":
                    parts.append(_text_of(block.get("content"), depth + 1))
        return "\n".join(p for p in parts if p)
    return str(content)


def message_text(message: Mapping[str, Any]) -> str:
    """What a message says: its text, its tool calls' names and arguments and
    its tool results' text, uncapped (what the guard checks names against)."""
    parts = [_text_of(message.get("content"))]
    for call in tool_calls(message):
        if isinstance(call, Mapping):
            name, arguments = call_parts(call)
            parts.append(f"{call.get('id', '')} {name or ''} {'' if arguments is None else arguments}")
    content = message.get("content")
    if isinstance(content, Sequence) and not isinstance(content, str):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                parts.append(f"{block.get('id', '')} {block.get('name', '')} {_json(block.get('input'))}")
            elif isinstance(block, Mapping) and block.get("type") == "tool_result":
                parts.append(str(block.get("tool_use_id", "")))
    if message.get("tool_call_id"):
        parts.append(str(message["tool_call_id"]))
    return "\n".join(p for p in parts if p)


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _cap_chars(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + _CUT


class _Renderer:
    def __init__(self, tokenizer: Tokenizer, result_tokens: int, argument_chars: int) -> None:
        self.tokenizer = tokenizer
        self.result_tokens = result_tokens
        self.argument_chars = argument_chars

    def result(self, text: str) -> str:
        return self.tokenizer.truncate(text, self.result_tokens, _CUT) if text else "(empty)"

    def call(self, call_id: Any, name: Any, arguments: Any) -> str:
        return f"[tool call {call_id}: {name}({_cap_chars(_json(arguments), self.argument_chars)})]"

    def body(self, message: Mapping[str, Any]) -> tuple[str, str]:
        """``(role shown, body)`` of one message."""
        role = str(message.get("role", "?"))[:40].replace('"', "'")
        content = message.get("content")
        lines: list[str] = []
        if role in ("tool", "function"):
            call = message.get("tool_call_id") or message.get("name") or "?"
            return f"tool result for {call}"[:80].replace('"', "'"), self.result(_text_of(content))
        if isinstance(content, str):
            lines.append(content)
        elif isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
            for block in content:
                if isinstance(block, str):
                    lines.append(block)
                    continue
                if not isinstance(block, Mapping):
                    continue
                kind = block.get("type")
                if kind == "text":
                    lines.append(str(block.get("text", "")))
                elif kind == "tool_use":
                    lines.append(self.call(block.get("id"), block.get("name"), block.get("input")))
                elif kind == "tool_result":
                    flag = " (error)" if block.get("is_error") else ""
                    text = self.result(_text_of(block.get("content")))
                    lines.append(f"[tool result for {block.get('tool_use_id')}{flag}]\n{text}")
                elif kind in ("image", "image_url", "input_image"):
                    lines.append("[image]")
                elif kind == "document":
                    lines.append("[document]")
                # thinking and redacted thinking: the model's own scratch, left out
        elif content is not None:
            lines.append(str(content))
        for call in tool_calls(message):
            if isinstance(call, Mapping):
                lines.append(self.call(call.get("id"), *call_parts(call)))
        return role, "\n".join(line for line in lines if line)


def render_transcript(
    messages: Sequence[Mapping[str, Any]],
    *,
    tokenizer: Tokenizer | None = None,
    result_tokens: int = DEFAULT_RESULT_TOKENS,
    argument_chars: int = DEFAULT_ARGUMENT_CHARS,
    first: int = 0,
    between: Callable[[], None] | None = None,
) -> str:
    """``messages`` as a ``<transcript>`` of ``<msg n=... role=...>``
    elements, numbered from ``first``, escaped (see the module docs).
    ``between`` is called after each message: a background job passes one
    that lets other threads run, so it never holds the interpreter long."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidTypeError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    renderer = _Renderer(tokenizer or Tokenizer(), result_tokens, argument_chars)
    out = ["<transcript>"]
    for offset, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidTypeError(f"messages[{offset}] must be a dict, got {type(message).__name__}")
        role, body = renderer.body(message)
        out.append(f'<msg n="{first + offset}" role="{escape(role)}">\n{escape(body)}\n</msg>')
        if between is not None:
            between()
    out.append("</transcript>")
    return "\n".join(out)
