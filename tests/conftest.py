"""Fixtures shared by the test modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import context_core
from context_core import reference
from llm_server import FakeLLMServer
from sdk_clients import SDKS, sync_client
from strategies import ENCODINGS


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeLLMServer]:
    """A scripted OpenAI/Anthropic HTTP server on 127.0.0.1, one per module."""
    with FakeLLMServer() as srv:
        yield srv


@pytest.fixture
def server(shared_server: FakeLLMServer) -> FakeLLMServer:
    """The module's server, with an empty script and no requests yet."""
    shared_server.reset()
    return shared_server


@pytest.fixture(params=ENCODINGS)
def encoding(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pair(encoding: str) -> tuple[context_core.Tokenizer, reference.Tokenizer]:
    """The Rust tokenizer and its reference twin for one encoding."""
    return context_core.Tokenizer(encoding), reference.Tokenizer(encoding)


@pytest.fixture(params=SDKS)
def sdk(request: pytest.FixtureRequest) -> str:
    """Each SDK in turn: ``openai``, ``anthropic``."""
    return str(request.param)


@pytest.fixture(scope="module")
def shared_clients(shared_server: FakeLLMServer) -> Iterator[dict[str, Any]]:
    """A sync client of each SDK pointed at the module's server."""
    clients = {sdk: sync_client(sdk, shared_server.url) for sdk in SDKS}
    yield clients
    for c in clients.values():
        c.close()


@pytest.fixture
def client(sdk: str, server: FakeLLMServer, shared_clients: dict[str, Any]) -> Any:
    """A sync client of ``sdk`` pointed at ``server``."""
    return shared_clients[sdk]
