"""Typed shapes of the dicts context_core reads: chat messages in the OpenAI
Chat Completions and Anthropic Messages formats, and tool schemas.

These describe the caller's own dicts; context_core never asks for a private
message type. Extra keys are allowed and ignored by the accounting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, Union

__all__ = [
    "AnthropicBlock",
    "AnthropicMessage",
    "ContentPart",
    "FunctionCall",
    "Message",
    "MessageLike",
    "OpenAIMessage",
    "Tool",
    "ToolCall",
    "ToolLike",
]


class FunctionCall(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ContentPart(TypedDict, total=False):
    """An OpenAI content part: ``text``, ``image_url``, ``input_audio``, ``file``, ``refusal``."""

    type: str
    text: str
    refusal: str
    image_url: dict[str, Any]


class _Metadata(TypedDict, total=False):
    """The keys selection reads and takes off before a message is sent (see
    the README's metadata table)."""

    pinned: bool
    priority: float
    weight: float
    tags: list[str]
    timestamp: float
    id: str
    depends_on: Union[str, list[str]]


class _OpenAIRole(TypedDict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]


class OpenAIMessage(_OpenAIRole, _Metadata, total=False):
    content: Union[str, list[ContentPart], None]
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str
    function_call: FunctionCall
    refusal: Union[str, None]


class AnthropicBlock(TypedDict, total=False):
    """An Anthropic content block: ``text``, ``tool_use``, ``tool_result``,
    ``thinking``, ``redacted_thinking``, ``image``, ``document``."""

    type: str
    text: str
    id: str
    name: str
    input: dict[str, Any]
    tool_use_id: str
    content: Union[str, list[AnthropicBlock]]
    is_error: bool
    thinking: str
    signature: str
    data: str
    source: dict[str, Any]


class _AnthropicRequired(TypedDict):
    role: Literal["user", "assistant"]
    content: Union[str, list[AnthropicBlock]]


class AnthropicMessage(_AnthropicRequired, _Metadata, total=False):
    pass


Message = Union[OpenAIMessage, AnthropicMessage]
"""A chat message in either format."""


class Tool(TypedDict, total=False):
    """A tool schema: OpenAI ``{"type": "function", "function": {...}}``, a bare
    function ``{"name", "description", "parameters"}``, or Anthropic
    ``{"name", "description", "input_schema"}``."""

    type: str
    function: dict[str, Any]
    name: str
    description: str
    parameters: dict[str, Any]
    input_schema: dict[str, Any]


MessageLike = Mapping[str, Any]
"""What every parameter that reads messages takes: a :data:`Message`, a
plain dict, or what another call returned (``Selection.messages``,
``SanitizeResult.messages``), so one step's output type-checks as the next
step's input."""

ToolLike = Mapping[str, Any]
"""What every parameter that reads tool schemas takes: a :class:`Tool` or a
plain dict (a literal list of schemas assigned to a variable first)."""
