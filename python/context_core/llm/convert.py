"""Turning whatever the caller has into an :class:`~context_core.llm.LLM`: :func:`as_llm`."""

from __future__ import annotations

from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.llm.callable_adapter import CallableLLM
from context_core.llm.protocol import LLM
from context_core.llm.sdk_adapter import client_kind

__all__ = ["as_llm"]


def as_llm(obj: Any, *, model: str | None = None, **options: Any) -> LLM:
    """Return ``obj`` as an :class:`LLM`.

    Accepts, in this order:

    - an object that already has ``complete`` and ``acomplete`` (returned as is);
    - an ``openai.OpenAI`` / ``openai.AsyncOpenAI`` client (also Azure's, or
      any OpenAI-compatible server through ``base_url``), wrapped in
      :class:`~context_core.llm.OpenAIChat`;
    - an ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic`` client, wrapped
      in :class:`~context_core.llm.AnthropicChat`;
    - a plain callable ``f(messages) -> str``, sync or ``async def``, wrapped in
      :class:`~context_core.llm.CallableLLM`.

    SDK clients need ``model=``; the other keyword ``options`` (``timeout``,
    ``retry``, ``async_client``...) go to the adapter. SDK clients are
    recognised by their classes' modules, so neither SDK is imported unless
    the caller already did. Anything else raises
    :class:`~context_core.InvalidTypeError`.
    """
    if isinstance(obj, type):
        raise InvalidTypeError(f"as_llm() takes an instance, not the class {obj.__name__}")
    kind = client_kind(obj)
    if kind is not None:
        if model is None:
            raise InvalidInputError(f"as_llm() needs model= to call a {type(obj).__name__} client")
        if kind[0] == "openai":
            from context_core.llm.openai_adapter import OpenAIChat

            return OpenAIChat(obj, model=model, **options)
        from context_core.llm.anthropic_adapter import AnthropicChat

        return AnthropicChat(obj, model=model, **options)
    if isinstance(obj, LLM):
        _no_options(obj, model, options)
        return obj
    if callable(obj):
        _no_options(obj, model, options)
        return CallableLLM(obj)
    raise InvalidTypeError(
        f"as_llm() takes an LLM (an object with complete() and acomplete()), an openai or anthropic "
        f"client, or a callable f(messages) -> str; got {type(obj).__name__}"
    )


def _no_options(obj: object, model: str | None, options: dict[str, Any]) -> None:
    given = (["model"] if model is not None else []) + sorted(options)
    if given:
        raise InvalidInputError(
            f"as_llm(): {', '.join(given)} only apply to SDK clients, not to {type(obj).__name__}"
        )
