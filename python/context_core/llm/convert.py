"""Turning whatever the caller has into an :class:`~context_core.llm.LLM`: :func:`as_llm`."""

from __future__ import annotations

from typing import Any, Literal

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.llm.callable_adapter import CallableLLM
from context_core.llm.protocol import LLM

__all__ = ["as_llm", "sdk_of"]


def sdk_of(obj: object) -> Literal["openai", "anthropic"] | None:
    """``"openai"`` or ``"anthropic"`` if ``obj`` is a client of that SDK
    (found by the modules its class comes from, so neither SDK is imported)."""
    if isinstance(obj, type):
        return None
    for cls in type(obj).__mro__:
        root = cls.__module__.partition(".")[0]
        if root in ("openai", "anthropic") and cls.__name__ in ("SyncAPIClient", "AsyncAPIClient"):
            return root  # type: ignore[return-value]
    return None


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

    SDK clients need ``model=``; other keyword ``options`` (``timeout``,
    ``retry``...) go to the adapter. Anything else raises
    :class:`~context_core.InvalidTypeError`.
    """
    if isinstance(obj, type):
        raise InvalidTypeError(f"as_llm() takes an instance, not the class {obj.__name__}")
    sdk = sdk_of(obj)
    if sdk is None and isinstance(obj, LLM):
        _no_options(obj, model, options)
        return obj
    if sdk is not None:
        if model is None:
            raise InvalidInputError(f"as_llm() needs model= to call a {type(obj).__name__} client")
        raise InvalidTypeError(f"{sdk} clients are not supported yet")
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
