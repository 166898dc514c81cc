"""Fixtures shared by the test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import context_core
from context_core import reference
from llm_server import FakeLLMServer
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
