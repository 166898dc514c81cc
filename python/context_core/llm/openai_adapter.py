"""The official ``openai`` SDK's Chat Completions as an LLM: :class:`OpenAIChat`.

Works with OpenAI, Azure OpenAI and any OpenAI-compatible server (vLLM,
llama.cpp, Ollama, LiteLLM...) through the client's ``base_url``. Needs the
``openai`` extra (``pip install context-core[openai]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

from context_core.errors import InvalidInputError, LLMResponseError, LLMTruncatedError
from context_core.llm.reply import check_reply
from context_core.llm.retry import RetryPolicy
from context_core.llm.sdk_adapter import DEFAULT_TIMEOUT, SDKChat
from context_core.types import OpenAIMessage

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIChat"]


class OpenAIChat(SDKChat):
    """An ``openai.OpenAI`` or ``openai.AsyncOpenAI`` client (or both: the
    other one as ``async_client=``) as an :class:`~context_core.llm.LLM`.

    Messages are sent as given (they already are Chat Completions messages).
    ``max_tokens_field`` names the length cap in the request: ``"max_tokens"``
    (the default, understood by every OpenAI-compatible server) or
    ``"max_completion_tokens"`` (which OpenAI's reasoning models require;
    ``send_temperature=False`` too, as they refuse any temperature but the
    default). ``extra_params`` are added to every request (``top_p``,
    ``reasoning_effort``, ``seed``...).

    ``timeout`` bounds each try, in seconds of wall clock: connecting,
    sending, and the whole reply, however slowly the server sends it (the
    SDK's own timeout is per read; its retries are off, ``retry`` is the only
    retry policy). ``total_timeout`` (default ``None``: no bound but the
    retry policy's) bounds the whole call, every try and backoff wait: a try
    gets what is left when that is less than ``timeout``, and a wait that
    would reach it ends the retries (the last error is raised). Either
    passing raises :class:`~context_core.LLMTimeoutError` naming it. A reply
    without text (``content`` null or empty, a refusal), or whose body is not
    JSON, not UTF-8 or nested too deep to decode, raises
    :class:`~context_core.LLMResponseError`.
    """

    sdk_name = "openai"

    def __init__(
        self,
        client: Union[openai.OpenAI, openai.AsyncOpenAI],
        *,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        total_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        async_client: Union[openai.AsyncOpenAI, None] = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        send_temperature: bool = True,
        extra_params: Mapping[str, Any] | None = None,
    ) -> None:
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise InvalidInputError(
                f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_field!r}"
            )
        super().__init__(
            client,
            model=model,
            timeout=timeout,
            total_timeout=total_timeout,
            retry=retry,
            async_client=async_client,
            extra_params=extra_params,
        )
        self.max_tokens_field = max_tokens_field
        self.send_temperature = send_temperature

    def _request(
        self, messages: Sequence[OpenAIMessage], max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            self.max_tokens_field: max_tokens,
        }
        if self.send_temperature:
            request["temperature"] = temperature
        return request

    def _endpoint(self, client: Any) -> Any:
        return client.chat.completions.create

    def _reply_text(self, response: Any) -> str:
        choice = response.choices[0]
        message = choice.message
        finish = getattr(choice, "finish_reason", None)
        refusal = getattr(message, "refusal", None)
        if refusal:
            raise LLMResponseError(f"{self!r}: the model refused: {refusal}")
        text = check_reply(message.content, repr(self), f" (finish_reason={finish!r})")
        if finish == "length":
            raise LLMTruncatedError(
                f"{self!r}: the reply stopped at its token limit (finish_reason='length')",
                text=text,
                finish_reason=finish,
            )
        return text
