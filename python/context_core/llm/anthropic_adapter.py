"""The official ``anthropic`` SDK's Messages API as an LLM: :class:`AnthropicChat`.

Needs the ``anthropic`` extra (``pip install context-core[anthropic]``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from context_core.errors import InvalidInputError, InvalidTypeError, LLMTruncatedError
from context_core.llm.reply import check_reply
from context_core.llm.retry import RetryPolicy
from context_core.llm.sdk_adapter import DEFAULT_TIMEOUT, SDKChat
from context_core.types import OpenAIMessage

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicChat", "to_anthropic"]


def _text_of(content: Any, where: str) -> str:
    """The text of a system message: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text"):
                raise InvalidInputError(f"{where}: a system message may hold text parts only")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise InvalidTypeError(f"{where}: content must be a str or a list of parts, got {type(content).__name__}")


def to_anthropic(messages: Sequence[OpenAIMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """Split OpenAI-style ``messages`` into Anthropic's ``system`` (every
    ``system``/``developer`` message's text, joined by blank lines, in order;
    ``None`` if there is none) and its ``messages`` (the ``user`` and
    ``assistant`` turns, with ``role`` and ``content`` only). Other roles
    (``tool``, ``function``) raise :class:`~context_core.InvalidInputError`."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_text_of(content, f"messages[{i}]"))
        elif role in ("user", "assistant"):
            if content is None:
                raise InvalidInputError(f"messages[{i}] ({role}) has no content")
            turns.append({"role": role, "content": content})
        else:
            raise InvalidInputError(f"messages[{i}]: role {role!r} has no Anthropic equivalent here")
    if not turns:
        raise InvalidInputError("Anthropic needs at least one user or assistant message")
    return ("\n\n".join(system) if system else None), turns


def _takes_temperature(client: Any) -> bool:
    try:
        return "temperature" in inspect.signature(client.messages.create).parameters
    except (TypeError, ValueError):  # no signature to read: assume the classic API
        return True


class AnthropicChat(SDKChat):
    """An ``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic`` client (or
    both: the other one as ``async_client=``) as an :class:`~context_core.llm.LLM`.

    The OpenAI-style messages are converted (:func:`to_anthropic`): system
    messages move to the ``system`` parameter. The reply's text blocks are
    joined; a reply without any raises :class:`~context_core.LLMResponseError`.

    ``temperature`` is sent only if ``send_temperature`` says so; by default
    (``None``) when the installed SDK's ``messages.create`` still takes a
    ``temperature`` parameter (recent SDKs dropped the sampling parameters,
    following the API). ``send_temperature=True`` sends it anyway (through
    ``extra_body`` if need be).
    ``timeout``, ``total_timeout``, ``retry`` and ``extra_params`` as for
    :class:`~context_core.llm.OpenAIChat`.
    """

    sdk_name = "anthropic"

    def __init__(
        self,
        client: Union[anthropic.Anthropic, anthropic.AsyncAnthropic],
        *,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        total_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        async_client: Union[anthropic.AsyncAnthropic, None] = None,
        send_temperature: bool | None = None,
        extra_params: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            client,
            model=model,
            timeout=timeout,
            total_timeout=total_timeout,
            retry=retry,
            async_client=async_client,
            extra_params=extra_params,
        )
        self._temperature_param = _takes_temperature(self._sync if self._sync is not None else self._async)
        self.send_temperature = self._temperature_param if send_temperature is None else send_temperature

    def _request(
        self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        system, turns = to_anthropic(messages)
        request: dict[str, Any] = {"model": self.model, "messages": turns, "max_tokens": max_tokens}
        if system is not None:
            request["system"] = system
        if self.send_temperature:
            if self._temperature_param:
                request["temperature"] = temperature
            else:
                request["extra_body"] = {"temperature": temperature}
        return request

    def _endpoint(self, client: Any) -> Any:
        return client.messages.create

    def _reply_text(self, response: Any) -> str:
        texts = [block.text for block in response.content if getattr(block, "type", None) == "text"]
        stop = getattr(response, "stop_reason", None)
        text = check_reply("".join(texts) if texts else None, repr(self), f" (stop_reason={stop!r})")
        if stop == "max_tokens":
            raise LLMTruncatedError(
                f"{self!r}: the reply stopped at its token limit (stop_reason='max_tokens')",
                text=text,
                finish_reason=stop,
            )
        return text
