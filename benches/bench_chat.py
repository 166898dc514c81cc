"""``count_messages`` on a 1,000-message history: the warm second call (the
count cache answers) against the cookbook's tiktoken loop, and the cold call."""

from __future__ import annotations

import pytest

from context_core import Tokenizer, reference
from inputs import history
from support import register

HISTORY = history(1_000)


def cookbook_count(encoding, messages) -> int:
    """``num_tokens_from_messages`` as the OpenAI cookbook writes it."""
    num_tokens = 0
    for message in messages:
        num_tokens += 3
        for key, value in message.items():
            num_tokens += len(encoding.encode(value))
            if key == "name":
                num_tokens += 1
    return num_tokens + 3


@pytest.mark.parametrize("impl", ["ours", "cookbook (tiktoken)", "reference"])
def test_count_messages_warm(benchmark, tiktoken_encoding, impl):
    enc = tiktoken_encoding("o200k_base")
    expected = cookbook_count(enc, HISTORY)
    register(benchmark, "count_messages 1,000 messages, warm", impl, target=20.0)
    if impl == "ours":
        tok = Tokenizer()
        tok.count_messages(HISTORY)  # the first call fills the cache
        result = benchmark(tok.count_messages, HISTORY)
    elif impl == "reference":
        result = benchmark(reference.Tokenizer().count_messages, HISTORY)
    else:
        result = benchmark(cookbook_count, enc, HISTORY)
    assert result == expected


@pytest.mark.parametrize("impl", ["ours", "cookbook (tiktoken)"])
def test_count_messages_cold(benchmark, tiktoken_encoding, impl):
    enc = tiktoken_encoding("o200k_base")
    expected = cookbook_count(enc, HISTORY)
    register(benchmark, "count_messages 1,000 messages, cold cache", impl)
    if impl == "ours":
        tok = Tokenizer()
        result = benchmark.pedantic(tok.count_messages, (HISTORY,), setup=tok.cache_clear, rounds=20)
    else:
        result = benchmark.pedantic(cookbook_count, (enc, HISTORY), rounds=20)
    assert result == expected
