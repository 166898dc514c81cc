"""The per-turn context a selection adds to the prompt: summaries, memories
and the system messages a conversation holds.

A selection policy puts the global summary, the retrieved memories and any
system message kept from the log at the head of what it chose (for OpenAI as
a leading system message, for Anthropic lifted into ``Selection.system``).
The renderers give all of it one place, right after the volatile part: past
every cache breakpoint, so a new summary or this turn's memories never change
the cached prefix, and in the same system message (OpenAI) or system list
(Anthropic) as the prompt's parts, so repairing the request (which merges
adjacent system messages) leaves it exactly as rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_core.errors import InvalidTypeError

__all__ = ["SEPARATOR", "context_blocks", "lift_system"]

SEPARATOR = "\n\n"
"""Between texts joined into one system message (as sanitize joins them)."""

_SYSTEM_ROLES = ("system", "developer")


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise InvalidTypeError(f"{where}: a system message holds text blocks only")
            text = block.get("text")
            if not isinstance(text, str):
                raise InvalidTypeError(f"{where}: a text block's text must be a str")
            texts.append(text)
        return "\n".join(texts)
    raise InvalidTypeError(f"{where}: content must be a str or a list of text blocks")


def lift_system(messages: Sequence[Any]) -> tuple[list[str], list[Any]]:
    """The texts of the system (or developer) messages ``messages`` starts
    with, and the messages after them."""
    lifted: list[str] = []
    start = 0
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") not in _SYSTEM_ROLES:
            break
        lifted.append(_text_of(message.get("content"), f"messages[{start}]"))
        start += 1
    return [text for text in lifted if text], list(messages[start:])


def context_blocks(system: Any, lifted: list[str]) -> list[dict[str, Any]]:
    """The context as text blocks: ``system`` (a str, text blocks, or
    ``None``; a selection's ``system``) and then the lifted texts."""
    blocks: list[dict[str, Any]] = []
    if isinstance(system, str):
        if system:
            blocks.append({"type": "text", "text": system})
    elif isinstance(system, Sequence):
        for i, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise InvalidTypeError(f"system[{i}]: expected a text block")
            if not isinstance(block.get("text"), str):
                raise InvalidTypeError(f"system[{i}]: a text block's text must be a str")
            if block["text"]:
                blocks.append(dict(block))
    elif system is not None:
        raise InvalidTypeError(
            f"system must be a str, a list of text blocks or None, got {type(system).__name__}"
        )
    blocks.extend({"type": "text", "text": text} for text in lifted)
    return blocks
