"""A history's tool calls and results as text, for an Anthropic request
with no tools.

The Messages API refuses a request whose messages hold ``tool_use`` or
``tool_result`` blocks and that defines no tools. A session reopened
without its tools, or a prompt built without them for a summary turn,
would then fail on every request its old tool steps are still in. Each
call is said as a text block instead, and each result as a text block
followed by what it held besides text (images, documents); the thinking
blocks of a reply that made calls go too (the API checks them only beside
the calls they led to). What the log holds is not changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["tool_blocks_as_text"]

_TOOL_BLOCKS = frozenset({"tool_use", "tool_result"})
_THINKING = frozenset({"thinking", "redacted_thinking"})


def tool_blocks_as_text(messages: list[Any]) -> list[Any]:
    """``messages`` with each one holding tool calls or results replaced by
    a copy that says them as text (the others are the same objects)."""
    names: dict[str, str] = {}
    out = list(messages)
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list) or not any(_kind(b) in _TOOL_BLOCKS for b in content):
            continue
        blocks: list[Any] = []
        for block in content:
            kind = _kind(block)
            if kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
                blocks += _marked(block, [_text(_said_call(block))])
            elif kind == "tool_result":
                blocks += _marked(block, _said_result(block, names))
            elif kind not in _THINKING:
                blocks.append(block)
        out[i] = {**message, "content": blocks}
    return out


def _kind(block: Any) -> str | None:
    return block.get("type") if isinstance(block, Mapping) else None


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _said_call(block: Mapping[str, Any]) -> str:
    given = block.get("input", {})
    try:
        arguments = json.dumps(given, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):  # keys of several types, or a value JSON has no form for
        try:
            arguments = json.dumps(given, ensure_ascii=False, default=str)
        except (TypeError, ValueError):  # a key JSON cannot name, or a cycle: said as Python writes it
            arguments = repr(given)
    return f"[Called the tool {block.get('name')} (call {block.get('id')}) with {arguments}]"


def _said_result(block: Mapping[str, Any], names: Mapping[str, str]) -> list[Any]:
    call = str(block.get("tool_use_id"))
    name = names.get(call, "a tool")
    failed = " (an error)" if block.get("is_error") else ""
    content = block.get("content")
    parts: Sequence[Any] = [_text(content)] if isinstance(content, str) else content or []
    texts = [p["text"] for p in parts if _kind(p) == "text" and isinstance(p.get("text"), str)]
    # What a user message takes besides text goes after it; anything else
    # (a call or result nested where none belongs) is named, not sent.
    others = [p for p in parts if _kind(p) in _MEDIA]
    texts += [f"(a {_kind(p)} block)" for p in parts if _kind(p) not in _MEDIA and _kind(p) != "text"]
    held = "\n".join(texts).strip() or "(no text)"
    return [_text(f"[Result of {name} (call {call}){failed}:\n{held}]"), *others]


_MEDIA = frozenset({"image", "document", "search_result"})


def _marked(block: Mapping[str, Any], said: list[Any]) -> list[Any]:
    """``said`` for ``block``, the caller's cache breakpoint (if it had one) on its last part."""
    mark = block.get("cache_control")
    if mark is None or not said:
        return said
    return [*said[:-1], {**said[-1], "cache_control": mark}]
