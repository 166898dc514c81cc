"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

import context_core
from context_core import reference
from strategies import ENCODINGS


@pytest.fixture(params=ENCODINGS)
def encoding(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pair(encoding: str) -> tuple[context_core.Tokenizer, reference.Tokenizer]:
    """The Rust tokenizer and its reference twin for one encoding."""
    return context_core.Tokenizer(encoding), reference.Tokenizer(encoding)
