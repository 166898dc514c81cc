"""Rendering to OpenAI Chat Completions messages.

OpenAI caches prompt prefixes automatically (1,024 tokens and longer, in
128-token steps); there are no breakpoints to place, only a prefix to keep
byte-identical. The messages this renders are::

    {"role": "system", "content": system part + "\\n\\n" + stable part    <- same bytes every turn
                                  + "\\n\\n" + volatile part               <- changes each turn
                                  + "\\n\\n" + context}                     <- summaries, memories
    ...the conversation...

with the tools (keys sorted, in OpenAI's form) beside them: the tools and the
system and stable parts are the cached prefix (OpenAI caches a token prefix,
not whole messages). The context is ``system=`` (a selection's summaries and
memories) and the text of the system messages the conversation starts with:
it follows the volatile part, so it never changes the cached prefix. One
system message, not one per part, because repairing the request
(:func:`~context_core.sanitize`) merges adjacent system messages: the request
is already in the form repair leaves it in.

With ``volatile="user"`` the volatile part goes at the end of the last user
message instead, followed by the context (a new user message when the
conversation does not end with one): the cached prefix then runs through the
whole earlier conversation, which is worth more than the system prompt alone
once a conversation is long; the default keeps the per-turn context ahead of
the conversation. ``role="developer"`` addresses reasoning models that prefer
it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.prompt.context_part import SEPARATOR, context_blocks, lift_system
from context_core.prompt.prefix import Prefix
from context_core.sdk_messages import message_of
from context_core.types import MessageLike, OpenAIMessage

__all__ = ["OpenAIRequest", "openai_request"]


class _OpenAIRequestBase(TypedDict):
    messages: list[OpenAIMessage]


class OpenAIRequest(_OpenAIRequestBase, total=False):
    """Keyword arguments for ``client.chat.completions.create``."""

    model: str
    tools: list[dict[str, Any]]


def _append_volatile(messages: list[Any], volatile: str) -> None:
    last = messages[-1] if messages else None
    if isinstance(last, Mapping) and last.get("role") == "user":
        content = last.get("content")
        if isinstance(content, str):
            messages[-1] = {**last, "content": f"{content}\n\n{volatile}" if content else volatile}
        elif isinstance(content, list):
            messages[-1] = {**last, "content": [*content, {"type": "text", "text": volatile}]}
        else:
            raise InvalidTypeError(
                f"the last message's content must be a str or a list, got {type(content).__name__}"
            )
    else:
        messages.append({"role": "user", "content": volatile})


def _sdk_message(message: Any, index: int) -> dict[str, Any]:
    """A message given as the SDK's own object (the reply appended as
    ``completion.choices[0].message``, which the SDK takes too) as its
    dict; anything else that is not a mapping is refused here, not by the
    SDK after the request was built."""
    if hasattr(message, "model_dump"):
        return message_of(message)
    raise InvalidTypeError(f"messages[{index}]: a message must be a dict, got {type(message).__name__}")


def openai_request(
    prefix: Prefix,
    volatile: str,
    messages: Sequence[MessageLike],
    *,
    model: str | None = None,
    placement: Literal["system", "user"] = "system",
    role: Literal["system", "developer"] = "system",
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> OpenAIRequest:
    """The messages (and tools, and model when given) of a request."""
    if model is not None and not isinstance(model, str):
        raise InvalidTypeError(f"model must be a str, got {type(model).__name__}")
    if placement not in ("system", "user"):
        raise InvalidInputError(f"volatile must be 'system' or 'user', got {placement!r}")
    if role not in ("system", "developer"):
        raise InvalidInputError(f"role must be 'system' or 'developer', got {role!r}")
    if isinstance(messages, (str, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidTypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    lifted, conversation = lift_system(messages)
    start = len(messages) - len(conversation)
    for i, message in enumerate(conversation):
        # A dict first: the abstract check costs about 0.4 us a message.
        if type(message) is not dict and not isinstance(message, Mapping):
            conversation[i] = _sdk_message(message, start + i)
    context = SEPARATOR.join(block["text"] for block in context_blocks(system, lifted))
    per_turn = SEPARATOR.join(text for text in (volatile, context) if text)
    head = prefix.openai_head
    if placement == "system":
        head = SEPARATOR.join(text for text in (head, per_turn) if text)
    out: list[Any] = [{"role": role, "content": head}] if head else []
    out.extend(conversation)
    if per_turn and placement == "user":
        _append_volatile(out, per_turn)
    request: OpenAIRequest = {"messages": out}
    if model is not None:
        request["model"] = model
    if prefix.system.tools:
        request["tools"] = list(prefix.system.openai_tools)
    return request
