"""The LLM client layer: the protocol, as_llm, and the plain-callable adapter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import context_core
from context_core import (
    LLM,
    CallableLLM,
    InvalidInputError,
    InvalidTypeError,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
    as_llm,
)

MESSAGES: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hi."},
]


def echo(messages: list[dict[str, str]]) -> str:
    return "echo: " + messages[-1]["content"]


async def aecho(messages: list[dict[str, str]]) -> str:
    await asyncio.sleep(0)
    return "aecho: " + messages[-1]["content"]


# --- plain callables ---------------------------------------------------------------------------


def test_sync_callable_both_ways():
    llm = as_llm(echo)
    assert isinstance(llm, CallableLLM)
    assert isinstance(llm, LLM)
    assert llm.complete(MESSAGES) == "echo: Say hi."
    assert asyncio.run(llm.acomplete(MESSAGES)) == "echo: Say hi."


def test_async_callable_both_ways():
    llm = as_llm(aecho)
    assert asyncio.run(llm.acomplete(MESSAGES)) == "aecho: Say hi."
    # No loop runs in this thread: complete() runs the coroutine on a fresh one.
    assert llm.complete(MESSAGES) == "aecho: Say hi."


def test_async_callable_refuses_sync_call_inside_a_running_loop():
    llm = as_llm(aecho)

    async def main() -> None:
        with pytest.raises(LLMError, match="await acomplete"):
            llm.complete(MESSAGES)

    asyncio.run(main())  # and no "coroutine was never awaited" warning (warnings are errors)


def test_callable_gets_options_when_it_takes_them():
    seen: list[tuple[int, float]] = []

    def fn(messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> str:
        seen.append((max_tokens, temperature))
        return "ok"

    def kw(messages: list[dict[str, str]], **kwargs: Any) -> str:
        seen.append((kwargs["max_tokens"], kwargs["temperature"]))
        return "ok"

    as_llm(fn).complete(MESSAGES, max_tokens=7, temperature=0.5)
    asyncio.run(as_llm(kw).acomplete(MESSAGES, max_tokens=9))
    assert seen == [(7, 0.5), (9, context_core.llm.DEFAULT_TEMPERATURE)]


def test_sync_callable_does_not_block_the_event_loop():
    import threading

    release = threading.Event()

    def slow(messages: list[dict[str, str]]) -> str:
        assert release.wait(5)
        return "done"

    async def main() -> str:
        task = asyncio.create_task(as_llm(slow).acomplete(MESSAGES))
        await asyncio.sleep(0.05)  # the loop keeps running while slow() waits
        assert not task.done()
        release.set()
        return await task

    assert asyncio.run(main()) == "done"


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (TimeoutError("slow"), LLMTimeoutError),
        (KeyError("x"), LLMError),
        (InvalidInputError("bad"), InvalidInputError),
    ],
)
def test_callable_errors_become_context_core_errors(raised: Exception, expected: type[Exception]):
    def fn(messages: list[dict[str, str]]) -> str:
        raise raised

    async def afn(messages: list[dict[str, str]]) -> str:
        raise raised

    for llm in (as_llm(fn), as_llm(afn)):
        with pytest.raises(expected) as info:
            llm.complete(MESSAGES)
        assert info.value is raised or info.value.__cause__ is raised
        with pytest.raises(expected):
            asyncio.run(llm.acomplete(MESSAGES))


@pytest.mark.parametrize("reply", [None, 3, b"bytes", ""])
def test_callable_reply_must_be_non_empty_text(reply: object):
    llm = as_llm(lambda messages: reply)
    with pytest.raises(LLMResponseError):
        llm.complete(MESSAGES)


# --- as_llm ------------------------------------------------------------------------------------


def test_as_llm_returns_an_llm_as_is():
    llm = CallableLLM(echo)
    assert as_llm(llm) is llm


@pytest.mark.parametrize("bad", [None, 3, "gpt-4o", [echo], object(), CallableLLM])
def test_as_llm_rejects_what_is_not_a_model(bad: object):
    with pytest.raises(InvalidTypeError):
        as_llm(bad)


def test_as_llm_options_only_for_sdk_clients():
    with pytest.raises(InvalidInputError, match="model"):
        as_llm(echo, model="gpt-4o")
