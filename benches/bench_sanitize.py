"""``sanitize`` on 10,000-message histories: broken ones (every stage works)
and valid ones (the fast path), against the pure-Python reference. Both sides
take the caller's dicts and return dicts: conversion at the boundary is in
the measured time.

A ``Sanitizer`` remembers the histories it answered (``answered.rs``), so the
same list again is answered from memory. "ours" is the whole funnel: each
round gets fresh copies of the messages (made outside the timing), as a
history read from storage would be; "ours, seen before" is the same list
again, what a server that keeps its history objects pays."""

from __future__ import annotations

import copy

import pytest

from context_core import Sanitizer
from context_core.reference.sanitize import Sanitizer as ReferenceSanitizer
from inputs import agent_history, broken_history
from support import register

SIZE = 10_000


def summary(result) -> list[tuple]:
    return [(c.stage, c.index, c.action, c.reason) for c in result.changes]


IMPLS = ["ours", "ours, seen before", "reference"]


def run(benchmark, sanitizer, history: list[dict], impl: str):
    """The whole funnel on fresh copies each round, or the same list again."""
    if impl != "ours":
        return benchmark(sanitizer.sanitize, history)
    results = []

    def fresh():
        return (copy.deepcopy(history),), {}

    def once(messages):
        results.append(sanitizer.sanitize(messages))
        return results[-1]

    benchmark.pedantic(once, setup=fresh, rounds=5 if benchmark.disabled else 20, iterations=1)
    return results[-1]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_sanitize_broken_history(benchmark, impl, provider):
    history = broken_history(SIZE, provider)
    expected = ReferenceSanitizer(provider).sanitize(history)
    register(benchmark, f"sanitize 10,000 broken messages, {provider}", impl, target=5.0)
    sanitizer = ReferenceSanitizer(provider) if impl == "reference" else Sanitizer(provider)
    result = run(benchmark, sanitizer, history, impl)
    assert result.changed
    assert result.messages == expected.messages
    assert summary(result) == summary(expected)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_sanitize_valid_history(benchmark, impl, provider):
    history = agent_history(SIZE, provider)
    register(benchmark, f"sanitize 10,000 valid messages (fast path), {provider}", impl, target=5.0)
    sanitizer = ReferenceSanitizer(provider) if impl == "reference" else Sanitizer(provider)
    result = run(benchmark, sanitizer, history, impl)
    assert not result.changed
    if impl != "ours":  # the fresh copies are what came back there
        assert all(a is b for a, b in zip(result.messages, history, strict=True))
    if impl == "ours" and benchmark.stats is not None:
        benchmark.extra_info["us_per_message"] = round(benchmark.stats.stats.median / SIZE * 1e6, 3)
