"""The one check every adapter applies to a model's reply."""

from __future__ import annotations

from typing import Any

from context_core.errors import LLMResponseError

__all__ = ["check_reply"]


def check_reply(reply: Any, source: str, detail: str = "") -> str:
    """Return ``reply`` if it is a non-empty ``str``; raise
    :class:`~context_core.LLMResponseError` naming ``source`` otherwise."""
    if reply is None:
        raise LLMResponseError(f"{source} returned no text{detail}")
    if not isinstance(reply, str):
        raise LLMResponseError(f"{source} returned {type(reply).__name__}, not str{detail}")
    if not reply:
        raise LLMResponseError(f"{source} returned an empty reply{detail}")
    return reply
