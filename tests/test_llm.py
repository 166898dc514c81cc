"""The LLM client layer: the protocol, as_llm, the plain-callable adapter, and
the OpenAI and Anthropic adapters driving the real SDKs against a local HTTP
server that speaks their wire formats (tests/llm_server.py)."""

from __future__ import annotations

import asyncio
import inspect
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.resources.messages import Messages

import context_core
from context_core import (
    LLM,
    AnthropicChat,
    CallableLLM,
    InvalidInputError,
    InvalidTypeError,
    LLMCancelledError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMTimeoutError,
    OpenAIChat,
    as_llm,
)
from context_core.llm import RetryPolicy
from context_core.llm.sdk_errors import parse_retry_after
from llm_server import FakeLLMServer, Reply, anthropic_body, openai_body
from sdk_clients import async_client, sync_client

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


def test_asyncio_timeout_error_is_a_timeout_too(monkeypatch: pytest.MonkeyPatch):
    """Before Python 3.11 ``asyncio.TimeoutError`` is not ``TimeoutError``: a
    distinct class stands in for it here, as it is on 3.10."""

    class AsyncioTimeoutError(Exception):
        pass

    monkeypatch.setattr(asyncio, "TimeoutError", AsyncioTimeoutError)

    async def afn(messages: list[dict[str, str]]) -> str:
        raise AsyncioTimeoutError

    with pytest.raises(LLMTimeoutError):
        asyncio.run(as_llm(afn).acomplete(MESSAGES))


@pytest.mark.parametrize(
    "options", [{"max_tokens": 0}, {"max_tokens": 2.5}, {"max_tokens": True}, {"temperature": -1}]
)
@pytest.mark.parametrize("fn", ["sync", "async"])
def test_callable_options_are_checked_before_the_call(options: dict[str, Any], fn: str):
    calls: list[int] = []

    def sync_fn(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        return "ok"

    async def async_fn(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        return "ok"

    llm = as_llm(sync_fn if fn == "sync" else async_fn)
    with pytest.raises(InvalidInputError):
        llm.complete(MESSAGES, **options)
    with pytest.raises(InvalidInputError):
        asyncio.run(llm.acomplete(MESSAGES, **options))
    with pytest.raises(InvalidInputError, match="temperature"):
        llm.complete(MESSAGES, temperature=float("nan"))
    assert calls == []


def test_a_refused_sync_call_in_a_loop_sent_nothing():
    async def main() -> None:
        with pytest.raises(LLMError) as info:
            as_llm(aecho).complete(MESSAGES)
        assert info.value.attempts == 0

    asyncio.run(main())


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


def test_callable_retries_only_when_asked():
    calls: list[int] = []

    def flaky(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LLMRateLimitError("busy", retry_after=0.0)
        return "finally"

    with pytest.raises(LLMRateLimitError):
        as_llm(flaky).complete(MESSAGES)
    assert len(calls) == 1
    calls.clear()
    assert CallableLLM(flaky, retry=RetryPolicy(attempts=3, base_delay=0.001)).complete(MESSAGES) == "finally"
    assert len(calls) == 3


# --- the SDK adapters against a real local server ----------------------------------------------

FAST = RetryPolicy(attempts=3, base_delay=0.02, max_delay=0.05, max_retry_after=1.0)
OPENAI_PATH = "/v1/chat/completions"
# Recent anthropic SDKs dropped the sampling parameters; AnthropicChat follows the installed one.
ANTHROPIC_TAKES_TEMPERATURE = "temperature" in inspect.signature(Messages.create).parameters
ANTHROPIC_PATH = "/v1/messages"


def adapter(sdk: str, client: Any, **options: Any) -> OpenAIChat | AnthropicChat:
    options.setdefault("retry", FAST)
    options.setdefault("timeout", 5.0)
    if sdk == "openai":
        return OpenAIChat(client, model="gpt-test", **options)
    return AnthropicChat(client, model="claude-test", **options)


def run_async(sdk: str, server: FakeLLMServer, body: Any, **options: Any) -> Any:
    """Run ``await body(llm)`` with an adapter over a fresh async client."""

    async def main() -> Any:
        async with async_client(sdk, server.url) as c:
            return await body(adapter(sdk, c, **options))

    return asyncio.run(main())


HOW = ["sync", "async", "async over sync"]


def ask(how: str, sdk: str, server: FakeLLMServer, client: Any, **options: Any) -> str:
    """One call: ``complete()`` on the sync client, ``acomplete()`` on an async
    client, or ``acomplete()`` over the sync client (in a worker thread)."""
    if how == "sync":
        return adapter(sdk, client, **options).complete(MESSAGES)
    if how == "async":
        return str(run_async(sdk, server, lambda llm: llm.acomplete(MESSAGES), **options))
    return asyncio.run(adapter(sdk, client, **options).acomplete(MESSAGES))


CONVERSATION: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi."},
    {"role": "assistant", "content": "Hello."},
    {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
    {"role": "user", "content": "Name a colour."},
]


def test_openai_request_on_the_wire(server: FakeLLMServer):
    with sync_client("openai", server.url) as c:
        reply = adapter("openai", c).complete(CONVERSATION, max_tokens=77, temperature=0.3)
    assert reply == "Hello from the fake model."
    [got] = server.received
    assert got.path == OPENAI_PATH
    assert got.headers["authorization"] == "Bearer test-key"
    assert got.json == {
        "model": "gpt-test",
        "messages": CONVERSATION,
        "max_tokens": 77,
        "temperature": 0.3,
    }


def test_anthropic_moves_system_messages_to_the_system_parameter(server: FakeLLMServer):
    server.script(
        Reply(
            body=anthropic_body(
                [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Rouge"},
                    {"type": "text", "text": "."},
                ]
            )
        )
    )
    with sync_client("anthropic", server.url) as c:
        reply = adapter("anthropic", c).complete(CONVERSATION, max_tokens=77, temperature=0.3)
    assert reply == "Rouge."
    [got] = server.received
    assert got.path == ANTHROPIC_PATH
    assert got.json == {
        "model": "claude-test",
        "system": "You are terse.\n\nAnswer in French.",
        "messages": [
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Name a colour."},
        ],
        "max_tokens": 77,
        **({"temperature": 0.3} if ANTHROPIC_TAKES_TEMPERATURE else {}),
    }


def test_anthropic_temperature_when_asked(server: FakeLLMServer):
    with sync_client("anthropic", server.url) as c:
        adapter("anthropic", c, send_temperature=True).complete(MESSAGES, temperature=0.7)
        adapter("anthropic", c, send_temperature=False).complete(MESSAGES, temperature=0.7)
    assert server.received[0].json["temperature"] == 0.7
    assert "temperature" not in server.received[1].json


def test_anthropic_without_system_messages_sends_no_system(server: FakeLLMServer):
    with sync_client("anthropic", server.url) as c:
        adapter("anthropic", c).complete([{"role": "user", "content": "Hi."}])
    assert "system" not in server.received[0].json
    assert server.received[0].json["max_tokens"] == context_core.llm.DEFAULT_MAX_TOKENS


def test_async_clients_on_the_wire(sdk: str, server: FakeLLMServer):
    async def body(llm: LLM) -> str:
        return await llm.acomplete(MESSAGES, max_tokens=12, temperature=1.0)

    assert run_async(sdk, server, body) == "Hello from the fake model."
    [got] = server.received
    assert got.headers["x-stainless-async"].startswith("async")
    assert got.json["max_tokens"] == 12
    if sdk == "openai" or ANTHROPIC_TAKES_TEMPERATURE:
        assert got.json["temperature"] == 1.0
    assert got.json["model"] in ("gpt-test", "claude-test")


def test_as_llm_wraps_sdk_clients(sdk: str, server: FakeLLMServer, client: Any):
    llm = as_llm(client, model="m-1", retry=FAST)
    assert isinstance(llm, OpenAIChat if sdk == "openai" else AnthropicChat)
    assert isinstance(llm, LLM)
    assert llm.complete(MESSAGES) == "Hello from the fake model."
    assert server.received[0].json["model"] == "m-1"
    with pytest.raises(InvalidInputError, match="model="):
        as_llm(client)


def test_adapter_refuses_the_other_sdks_client(server: FakeLLMServer):
    with sync_client("openai", server.url) as oc, sync_client("anthropic", server.url) as ac:
        with pytest.raises(InvalidTypeError, match="anthropic"):
            AnthropicChat(oc, model="m")
        with pytest.raises(InvalidTypeError, match="openai"):
            OpenAIChat(ac, model="m")
        with pytest.raises(InvalidTypeError, match="async_client"):
            OpenAIChat(oc, model="m", async_client=oc)
    with pytest.raises(InvalidTypeError):
        OpenAIChat(object(), model="m")  # type: ignore[arg-type]


def test_openai_options_for_reasoning_models(server: FakeLLMServer):
    with sync_client("openai", server.url) as c:
        llm = OpenAIChat(
            c,
            model="o-test",
            max_tokens_field="max_completion_tokens",
            send_temperature=False,
            extra_params={"seed": 7, "reasoning_effort": "low"},
        )
        llm.complete(MESSAGES, max_tokens=50)
    assert server.received[0].json == {
        "model": "o-test",
        "messages": MESSAGES,
        "max_completion_tokens": 50,
        "seed": 7,
        "reasoning_effort": "low",
    }


def test_unknown_extra_params_are_input_errors_and_send_nothing(sdk: str, server: FakeLLMServer, client: Any):
    with pytest.raises(InvalidInputError, match=r"extra_params \['bogus_option'\]"):
        adapter(sdk, client, extra_params={"bogus_option": 1})
    # What the SDK does not know goes through extra_body.
    llm = adapter(sdk, client, extra_params={"extra_body": {"bogus_option": 1}})
    llm.complete(MESSAGES)
    assert server.received[0].json["bogus_option"] == 1
    # Added after construction: the SDK's TypeError at the call, as an input error.
    llm.extra_params["another_bogus"] = 2
    with pytest.raises(InvalidInputError, match="another_bogus") as info:
        llm.complete(MESSAGES)
    assert isinstance(info.value.__cause__, TypeError)
    assert len(server.received) == 1

    async def body(llm: LLM) -> None:
        llm.extra_params["bogus_option"] = 3  # type: ignore[attr-defined]
        with pytest.raises(InvalidInputError, match="bogus_option"):
            await llm.acomplete(MESSAGES)

    run_async(sdk, server, body)
    assert len(server.received) == 1


# --- retries -----------------------------------------------------------------------------------


def error_body(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "api_error", "message": message}}


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits the retry loop asks for, in order, none of them slept:
    ``time.sleep`` (sync), ``asyncio.sleep`` (async) and the cancel token's
    ``wait`` (async over a sync client, in its worker thread) record their
    seconds and return at once. The deadline clock (``time.monotonic``) stays real."""
    asked: list[float] = []
    real_asleep = asyncio.sleep

    async def asleep(seconds: float) -> None:
        asked.append(seconds)
        await real_asleep(0)  # still a suspension point, as a real sleep is

    class Token(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            assert timeout is not None  # a backoff wait always has its length
            asked.append(timeout)
            return self.is_set()

    clock = types.SimpleNamespace(sleep=asked.append, monotonic=time.monotonic)
    monkeypatch.setattr(context_core.llm.retry, "time", clock)
    monkeypatch.setattr(context_core.llm.retry, "asyncio", types.SimpleNamespace(sleep=asleep))
    monkeypatch.setattr(context_core.llm._sync, "threading", types.SimpleNamespace(Event=Token))
    return asked


def step(retry: int, policy: RetryPolicy = FAST) -> float:
    """The backoff step before retry number ``retry``: its wait is in [step/2, step]."""
    return min(policy.max_delay, policy.base_delay * 2.0 ** (retry - 1))


@pytest.mark.parametrize("how", HOW)
def test_retry_after_on_429_is_honoured(
    sdk: str, server: FakeLLMServer, client: Any, how: str, waits: list[float]
):
    server.script(Reply(status=429, headers={"retry-after": "0.15"}, body=error_body("slow down")))
    assert ask(how, sdk, server, client) == "Hello from the fake model."
    assert len(server.received) == 2
    # One wait, the server's: not the backoff step (at most FAST.base_delay = 0.02 s).
    assert waits == [0.15]
    # The SDK's own retries are off: every request is its first try.
    assert {r.headers["x-stainless-retry-count"] for r in server.received} == {"0"}


def test_429_until_the_retries_run_out(sdk: str, server: FakeLLMServer, client: Any):
    server.script(*[Reply(status=429, headers={"retry-after-ms": "10"}, body=error_body("busy"))] * 5)
    with pytest.raises(LLMRateLimitError, match="429") as info:
        adapter(sdk, client).complete(MESSAGES)
    assert len(server.received) == 3
    assert info.value.attempts == 3
    assert info.value.status_code == 429
    assert info.value.retry_after == pytest.approx(0.01)


def test_retry_after_beyond_the_cap_gives_up_at_once(
    sdk: str, server: FakeLLMServer, client: Any, waits: list[float]
):
    server.script(Reply(status=429, headers={"retry-after": "30"}, body=error_body("quota")))
    with pytest.raises(LLMRateLimitError) as info:
        adapter(sdk, client).complete(MESSAGES)
    assert waits == []  # no wait at all, let alone 30 s
    assert len(server.received) == 1
    assert info.value.retry_after == 30.0


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_5xx_is_retried_with_backoff(
    sdk: str, server: FakeLLMServer, client: Any, status: int, how: str, waits: list[float]
):
    server.script(*[Reply(status=status, body=error_body("oops"))] * 2)
    assert ask(how, sdk, server, client) == "Hello from the fake model."
    assert len(server.received) == 3
    # One wait before each retry, the steps doubling; equal jitter keeps each
    # between half its step and the whole step.
    first, second = waits
    assert step(1) / 2 <= first <= step(1)
    assert step(2) / 2 <= second <= step(2)


def test_5xx_until_the_retries_run_out(sdk: str, server: FakeLLMServer, client: Any):
    server.script(*[Reply(status=503, body=error_body("down"))] * 5)
    with pytest.raises(LLMResponseError, match="503") as info:
        adapter(sdk, client).complete(MESSAGES)
    assert len(server.received) == 3
    assert info.value.status_code == 503
    assert info.value.attempts == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_are_not_retried(sdk: str, server: FakeLLMServer, client: Any, status: int):
    server.script(Reply(status=status, body=error_body("bad request: no such model")))
    with pytest.raises(LLMResponseError, match="no such model") as info:
        adapter(sdk, client).complete(MESSAGES)
    assert len(server.received) == 1
    assert info.value.status_code == status
    assert info.value.attempts == 1
    sdk_error = openai.APIStatusError if sdk == "openai" else anthropic.APIStatusError
    assert isinstance(info.value.__cause__, sdk_error)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_connection_errors_are_retried_then_raised(sdk: str):
    with (
        sync_client(sdk, closed_port_url()) as c,
        pytest.raises(LLMConnectionError, match="cannot reach") as info,
    ):
        adapter(sdk, c).complete(MESSAGES)
    assert info.value.attempts == 3
    assert isinstance(info.value, ConnectionError)


def test_retry_policy_validation_and_backoff():
    for bad in ({"attempts": 0}, {"base_delay": -1.0}, {"max_delay": float("inf")}):
        with pytest.raises(InvalidInputError):
            RetryPolicy(**bad)
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for retry, step in [(1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0), (1000, 4.0)]:
        for _ in range(20):
            assert step / 2 <= policy.backoff(retry) <= step


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], seconds: float | None):
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after(headers, now=now) == seconds


# --- timeouts, bad replies ---------------------------------------------------------------------


def test_timeout_raises_without_retry(sdk: str, server: FakeLLMServer, client: Any):
    server.script(Reply(delay=3.0))
    # Without the timeout the reply would come, after 3 s: no error at all.
    with pytest.raises(LLMTimeoutError, match=r"within 0\.1 s") as info:
        adapter(sdk, client, timeout=0.1).complete(MESSAGES)
    assert isinstance(info.value, TimeoutError)
    assert len(server.received) == 1


def test_timeouts_retried_when_asked(sdk: str, server: FakeLLMServer, client: Any):
    server.script(Reply(delay=3.0))
    policy = RetryPolicy(attempts=2, base_delay=0.01, retry_timeouts=True)
    assert adapter(sdk, client, timeout=0.1, retry=policy).complete(MESSAGES) == "Hello from the fake model."
    assert len(server.received) == 2


def test_async_timeout(sdk: str, server: FakeLLMServer):
    server.script(Reply(delay=3.0))

    async def body(llm: LLM) -> str:
        return await llm.acomplete(MESSAGES)

    with pytest.raises(LLMTimeoutError):
        run_async(sdk, server, body, timeout=0.1)


MALFORMED: dict[str, list[Any]] = {
    "openai": [
        b"this is not json",
        {"unexpected": True},
        {"choices": []},
        openai_body(None),
        openai_body(""),
        openai_body(None, finish="length") | {"choices": [{"index": 0, "message": None}]},
        {
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "refusal": "no"}}
            ]
        },
    ],
    "anthropic": [
        b"{truncated",
        {"unexpected": True},
        anthropic_body([]),
        anthropic_body([{"type": "tool_use", "id": "t", "name": "f", "input": {}}]),
        anthropic_body([{"type": "text", "text": ""}], stop="max_tokens"),
    ],
}


@pytest.mark.parametrize(("which", "index"), [(k, i) for k, v in MALFORMED.items() for i in range(len(v))])
def test_malformed_or_empty_replies(server: FakeLLMServer, which: str, index: int):
    server.script(Reply(body=MALFORMED[which][index]))
    with sync_client(which, server.url) as c, pytest.raises(LLMResponseError) as info:
        adapter(which, c).complete(MESSAGES)
    assert info.value.status_code is None
    assert len(server.received) == 1  # a bad reply is not retried


UNDECODABLE = {
    "not UTF-8": (
        b'{"choices": [{"message": {"role": "assistant", "content": "caf\xe9"}}]}',
        "not valid UTF-8",
    ),
    "nested too deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
}


@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("bad", sorted(UNDECODABLE))
def test_undecodable_replies_are_response_errors(
    sdk: str, server: FakeLLMServer, client: Any, how: str, bad: str
):
    body, match = UNDECODABLE[bad]
    server.script(Reply(body=body))
    with pytest.raises(LLMResponseError, match=match) as info:
        ask(how, sdk, server, client)
    assert isinstance(info.value.__cause__, (UnicodeDecodeError, RecursionError))
    assert info.value.status_code is None
    assert len(server.received) == 1  # not retried


def test_input_errors_send_nothing(sdk: str, server: FakeLLMServer, client: Any):
    llm = adapter(sdk, client)
    with pytest.raises(InvalidInputError):
        llm.complete(MESSAGES, max_tokens=0)
    with pytest.raises(InvalidTypeError):
        llm.complete("hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        llm.complete([{"content": "no role"}])  # type: ignore[typeddict-item]
    if sdk == "anthropic":
        with pytest.raises(InvalidInputError, match="tool"):
            llm.complete([{"role": "tool", "content": "x", "tool_call_id": "1"}])
        with pytest.raises(InvalidInputError, match="at least one"):
            llm.complete([{"role": "system", "content": "only a system prompt"}])
    assert server.received == []


# --- wall-clock deadlines ----------------------------------------------------------------------

ONCE = RetryPolicy(attempts=1)


def trickled(headers: bool = False, n: int = 8) -> Reply:
    """A reply sent a byte every 0.2 s: no read waits near the 0.4 s timeouts
    below, yet the slow bytes alone take ``n`` x 0.2 s."""
    return Reply(trickle=0.2, trickle_bytes=n, trickle_headers=headers)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_trickled_reply_times_out_at_the_deadline(
    sdk: str, server: FakeLLMServer, client: Any, how: str, part: str
):
    reply = trickled(headers=part == "headers")
    server.script(reply)
    with pytest.raises(LLMTimeoutError, match=r"within 0\.4 s \(timeout\)") as info:
        ask(how, sdk, server, client, timeout=0.4, retry=ONCE)
    assert isinstance(info.value, TimeoutError)
    assert info.value.attempts == 1
    # The connection was dropped, not left reading the reply in the background.
    assert reply.hung_up.wait(5)
    assert not reply.sent.is_set()


@pytest.mark.parametrize("how", HOW)
def test_total_timeout_bounds_the_retries(sdk: str, server: FakeLLMServer, client: Any, how: str):
    replies = [trickled(), trickled(), trickled()]
    server.script(*replies)
    policy = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01, retry_timeouts=True)
    # The first try takes its whole 0.4 s timeout; the second gets what is left of the 0.7 s.
    with pytest.raises(LLMTimeoutError, match=r"within 0\.7 s \(total_timeout\)") as info:
        ask(how, sdk, server, client, timeout=0.4, total_timeout=0.7, retry=policy)
    assert info.value.attempts == 2
    assert len(server.received) == 2
    assert replies[0].hung_up.wait(5)
    assert replies[1].hung_up.wait(5)


@pytest.mark.parametrize("how", HOW)
def test_total_timeout_gives_up_on_a_wait_it_cannot_fit(
    sdk: str, server: FakeLLMServer, client: Any, how: str
):
    server.script(Reply(status=503, headers={"retry-after": "5"}, body=error_body("down")))
    policy = RetryPolicy(attempts=3, max_retry_after=10)
    with pytest.raises(LLMResponseError, match="503") as info:
        ask(how, sdk, server, client, total_timeout=2.0, retry=policy)
    assert info.value.attempts == 1
    assert info.value.retry_after == 5.0
    assert len(server.received) == 1


def test_total_timeout_leaves_a_quick_call_alone(sdk: str, server: FakeLLMServer, client: Any):
    server.script(Reply(status=503, body=error_body("down")))
    llm = adapter(sdk, client, timeout=5.0, total_timeout=5.0)
    assert llm.total_timeout == 5.0
    assert llm.complete(MESSAGES) == "Hello from the fake model."
    assert len(server.received) == 2


@pytest.fixture(scope="module")
def keep_alive_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(keep_alive=True) as srv:
        yield srv


def test_a_reused_connection_is_cut_at_the_deadline(sdk: str, keep_alive_server: FakeLLMServer):
    srv = keep_alive_server
    srv.reset()
    reply = trickled()
    srv.script(Reply(), reply)
    with sync_client(sdk, srv.url) as c:
        llm = adapter(sdk, c, timeout=0.4, retry=ONCE)
        assert llm.complete(MESSAGES) == "Hello from the fake model."
        with pytest.raises(LLMTimeoutError):
            llm.complete(MESSAGES)
        assert reply.hung_up.wait(5)
    first, second = srv.received
    assert first.client_port == second.client_port  # the connection the first call opened


def test_a_connection_the_adapter_did_not_open_still_times_out(sdk: str, keep_alive_server: FakeLLMServer):
    """The client's own request leaves the idle connection the adapter's
    request then takes: the caller still gets its error at the deadline."""
    srv = keep_alive_server
    srv.reset()
    reply = trickled(n=4)
    srv.script(Reply(), reply)
    with sync_client(sdk, srv.url) as c:
        if sdk == "openai":
            c.chat.completions.create(model="m", messages=MESSAGES)
        else:
            c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "Hi."}])
        with pytest.raises(LLMTimeoutError):
            adapter(sdk, c, timeout=0.4, retry=ONCE).complete(MESSAGES)
        # The abandoned request reads on in its thread: let it end before the client closes.
        reply.sent.wait(5)
    first, second = srv.received
    assert first.client_port == second.client_port


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (0, InvalidInputError),
        (-1.0, InvalidInputError),
        (float("nan"), InvalidInputError),
        (float("inf"), InvalidInputError),
        (True, InvalidTypeError),
        ("5", InvalidTypeError),
    ],
)
def test_timeouts_are_finite_positive_seconds(sdk: str, client: Any, bad: object, error: type[Exception]):
    with pytest.raises(error, match="timeout"):
        adapter(sdk, client, timeout=bad)
    with pytest.raises(error, match="total_timeout"):
        adapter(sdk, client, total_timeout=bad)


# --- sync/async and cancellation ---------------------------------------------------------------


def test_async_only_adapter_refuses_complete(sdk: str, server: FakeLLMServer):
    async def body(llm: LLM) -> None:
        with pytest.raises(LLMError, match="acomplete"):
            llm.complete(MESSAGES)

    run_async(sdk, server, body)
    assert server.received == []


def test_both_clients_each_used_for_its_kind(sdk: str, server: FakeLLMServer, client: Any):
    async def main() -> str:
        async with async_client(sdk, server.url) as ac:
            llm = adapter(sdk, client, async_client=ac)
            assert llm.complete(MESSAGES) == "Hello from the fake model."
            return await llm.acomplete(MESSAGES)

    asyncio.run(main())
    assert server.received[0].headers["x-stainless-async"] == "false"
    assert server.received[1].headers["x-stainless-async"].startswith("async")


def test_acomplete_over_a_sync_client_leaves_the_loop_free(sdk: str, server: FakeLLMServer, client: Any):
    gate = threading.Event()
    server.script(Reply(gate=gate))  # the reply waits until the event loop opens the gate
    llm = adapter(sdk, client, timeout=20.0)

    async def main() -> str:
        task = asyncio.create_task(llm.acomplete(MESSAGES))
        # Only a free loop gets here while the request waits: a blocked one would
        # leave the gate shut until the request timed out.
        await until_received(server, 1)
        assert not task.done()
        gate.set()
        return await task

    assert asyncio.run(main()) == "Hello from the fake model."


def test_cancel_acomplete_during_the_request(sdk: str, server: FakeLLMServer):
    server.script(Reply(delay=5.0))

    async def body(llm: LLM) -> bool:
        task = asyncio.create_task(llm.acomplete(MESSAGES))
        await until_received(server, 1)
        task.cancel()
        # Uncancelled, the task would end with the reply (after 5 s), not this.
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert run_async(sdk, server, body)


async def until_received(server: FakeLLMServer, n: int) -> None:
    while len(server.received) < n:
        await asyncio.sleep(0.005)


def test_cancel_acomplete_during_the_backoff_wait(sdk: str, server: FakeLLMServer):
    server.script(*[Reply(status=429, headers={"retry-after": "0.3"}, body=error_body("busy"))] * 3)

    async def body(llm: LLM) -> bool:
        task = asyncio.create_task(llm.acomplete(MESSAGES))
        await until_received(server, 1)
        await asyncio.sleep(0.05)  # the 429 came back; the task now sleeps 0.3 s
        task.cancel()
        # Uncancelled, it would retry after the wait and end with a 429 error.
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.35)  # no retry happens later either
        return task.cancelled()

    assert run_async(sdk, server, body)
    assert len(server.received) == 1


def test_cancel_acomplete_over_a_sync_client_stops_its_retries(sdk: str, server: FakeLLMServer, client: Any):
    server.script(*[Reply(status=503, headers={"retry-after": "0.3"}, body=error_body("down"))] * 3)
    llm = adapter(sdk, client)

    async def main() -> bool:
        task = asyncio.create_task(llm.acomplete(MESSAGES))
        await until_received(server, 1)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.35)
        return task.cancelled()

    assert asyncio.run(main())
    assert len(server.received) == 1  # the worker thread saw the cancellation in its backoff wait


def test_sync_cancel_token_cuts_the_backoff_short(sdk: str, server: FakeLLMServer, client: Any):
    server.script(*[Reply(status=503, headers={"retry-after": "0.8"}, body=error_body("down"))] * 3)

    class SetDuringTheWait:
        """A token set while the call waits: the wait is where it must be seen."""

        def __init__(self) -> None:
            self.waits: list[float | None] = []

        def is_set(self) -> bool:
            return bool(self.waits)

        def wait(self, timeout: float | None = None) -> bool:
            self.waits.append(timeout)
            return True

    cancel = SetDuringTheWait()
    with pytest.raises(LLMCancelledError):
        adapter(sdk, client).complete(MESSAGES, cancel=cancel)
    assert cancel.waits == [pytest.approx(0.8)]  # the backoff waits on the token, not a sleep
    assert len(server.received) == 1


def test_set_cancel_token_sends_nothing(sdk: str, server: FakeLLMServer, client: Any):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(LLMCancelledError) as info:
        adapter(sdk, client).complete(MESSAGES, cancel=cancel)
    assert server.received == []
    assert info.value.attempts == 0


def test_every_llm_error_counts_the_requests_sent(sdk: str, server: FakeLLMServer, client: Any):
    cancel = threading.Event()
    server.script(Reply(status=503, headers={"retry-after": "5"}, body=error_body("down")))
    done = threading.Event()

    def cancel_once_the_503_is_back() -> None:
        while not server.received:
            done.wait(0.005)
        cancel.set()

    helper = threading.Thread(target=cancel_once_the_503_is_back)
    helper.start()
    with pytest.raises(LLMCancelledError) as info:
        adapter(sdk, client, retry=RetryPolicy(attempts=3, max_retry_after=10)).complete(
            MESSAGES, cancel=cancel
        )
    helper.join()
    assert info.value.attempts == 1  # one request sent, cancelled in the backoff wait
    assert len(server.received) == 1

    async def only_async(llm: LLM) -> None:
        with pytest.raises(LLMError, match="only an async") as refused:
            llm.complete(MESSAGES)
        assert refused.value.attempts == 0

    run_async(sdk, server, only_async)
    assert len(server.received) == 1


def test_importing_context_core_imports_no_sdk():
    code = "import sys, context_core.llm; print(sorted({'openai', 'anthropic'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- found by review: queues, cancels in flight, wrapped deadlines, bad requests -------------


def test_a_queued_async_call_over_a_sync_client_keeps_its_total_timeout(
    sdk: str, server: FakeLLMServer, client: Any
):
    """total_timeout counts from the call, not from when a worker thread of
    the loop's executor is free: a call that waited its turn gets what is
    left, not a fresh budget (then its reply, 0.1 s later, came in time)."""
    import concurrent.futures

    server.script(Reply(delay=0.45), Reply(delay=0.1))
    llm = adapter(sdk, client, total_timeout=0.5)

    async def main() -> list[str]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        first = asyncio.create_task(llm.acomplete(MESSAGES))
        await asyncio.sleep(0)  # the first takes the only worker
        second = asyncio.create_task(llm.acomplete(MESSAGES))
        outcomes = []
        for task in (first, second):
            try:
                outcomes.append(await task)
            except LLMTimeoutError:
                outcomes.append("timeout")
        return outcomes

    assert asyncio.run(main())[1] == "timeout"


def test_a_cancel_ends_the_wait_for_a_try_in_flight(sdk: str, server: FakeLLMServer, client: Any):
    """The reply comes after 2 s and the try's timeout is 30 s: only the
    token can end the wait, and it must, at once."""
    server.script(Reply(delay=2.0))
    cancel = threading.Event()
    watcher = threading.Thread(target=lambda: (server_received(server, 1), cancel.set()))
    watcher.start()
    with pytest.raises(LLMCancelledError):
        adapter(sdk, client, timeout=30.0).complete(MESSAGES, cancel=cancel)
    watcher.join()
    assert len(server.received) == 1


def server_received(server: FakeLLMServer, n: int) -> None:
    while len(server.received) < n:
        time.sleep(0.005)


def test_a_deadline_the_sdk_wraps_as_a_connection_error_is_a_timeout(sdk: str, client: Any):
    """Anthropic's SDK re-raises whatever a request raises, the try's
    deadline included, as APIConnectionError: it is still a timeout."""
    llm = adapter(sdk, client, timeout=0.5)
    module = openai if sdk == "openai" else anthropic
    wrapped = module.APIConnectionError(request=httpx_request())
    wrapped.__cause__ = context_core.llm._deadline.DeadlinePassed()
    with pytest.raises(LLMTimeoutError), llm._sdk_errors(0.5, "timeout"):
        raise wrapped


def httpx_request() -> Any:
    import httpx

    return httpx.Request("POST", "http://127.0.0.1/v1")


def test_a_request_too_deep_or_not_unicode_is_refused_before_sending(
    sdk: str, server: FakeLLMServer, client: Any
):
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(InvalidInputError, match="too deep"):
        adapter(sdk, client, extra_params={"metadata": {"x": deep}}).complete(MESSAGES)
    with pytest.raises(InvalidInputError, match="not Unicode"):
        adapter(sdk, client).complete([{"role": "user", "content": "half a pair \ud83d"}])
    assert server.received == []


def test_a_try_runs_in_the_callers_thread_when_no_thread_can_start(
    sdk: str, server: FakeLLMServer, client: Any, monkeypatch: pytest.MonkeyPatch
):
    """At interpreter shutdown (or a thread limit) Thread.start raises; the try
    then runs where it was called, its reads still bounded."""

    class NoThread(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't create new thread at interpreter shutdown")

    # Only the adapter's threads are refused: the test server needs its own.
    no_threads = types.SimpleNamespace(Thread=NoThread, Event=threading.Event)
    monkeypatch.setattr(context_core.llm._deadline, "threading", no_threads)
    assert adapter(sdk, client).complete(MESSAGES) == "Hello from the fake model."
