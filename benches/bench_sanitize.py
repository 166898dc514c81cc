"""``sanitize`` on 10,000-message histories: broken ones (every stage works)
and valid ones (the fast path), against the pure-Python reference. Both sides
take the caller's dicts and return dicts: conversion at the boundary is in
the measured time."""

from __future__ import annotations

import pytest

from context_core import Sanitizer
from context_core.reference.sanitize import Sanitizer as ReferenceSanitizer
from inputs import agent_history, broken_history
from support import register

SIZE = 10_000


def summary(result) -> list[tuple]:
    return [(c.stage, c.index, c.action, c.reason) for c in result.changes]


@pytest.mark.parametrize("impl", ["ours", "reference"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_sanitize_broken_history(benchmark, impl, provider):
    history = broken_history(SIZE, provider)
    expected = ReferenceSanitizer(provider).sanitize(history)
    register(benchmark, f"sanitize 10,000 broken messages, {provider}", impl, target=5.0)
    sanitizer = Sanitizer(provider) if impl == "ours" else ReferenceSanitizer(provider)
    result = benchmark(sanitizer.sanitize, history)
    assert result.changed
    assert result.messages == expected.messages
    assert summary(result) == summary(expected)


@pytest.mark.parametrize("impl", ["ours", "reference"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_sanitize_valid_history(benchmark, impl, provider):
    history = agent_history(SIZE, provider)
    register(benchmark, f"sanitize 10,000 valid messages (fast path), {provider}", impl, target=5.0)
    sanitizer = Sanitizer(provider) if impl == "ours" else ReferenceSanitizer(provider)
    result = benchmark(sanitizer.sanitize, history)
    assert not result.changed
    assert all(a is b for a, b in zip(result.messages, history, strict=True))
    if impl == "ours" and benchmark.stats is not None:
        benchmark.extra_info["us_per_message"] = round(benchmark.stats.stats.median / SIZE * 1e6, 3)
