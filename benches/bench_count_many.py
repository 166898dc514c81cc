"""``Tokenizer.count_many`` over 10,000 chat messages against a plain tiktoken
loop (faster than tiktoken's own ``encode_ordinary_batch``)."""

from __future__ import annotations

import pytest

from context_core import Tokenizer
from inputs import chat_messages
from support import register

MESSAGES = chat_messages(10_000)


@pytest.mark.parametrize("impl", ["ours", "tiktoken loop", "tiktoken batch"])
def test_count_many_10k_messages(benchmark, tiktoken_encoding, impl):
    enc = tiktoken_encoding("o200k_base")
    expected = [len(enc.encode_ordinary(s)) for s in MESSAGES]
    register(benchmark, "count_many 10,000 messages o200k_base", impl, target=3.0)
    if impl == "ours":
        counts = benchmark(Tokenizer().count_many, MESSAGES).tolist()
    elif impl == "tiktoken loop":
        counts = benchmark(lambda: [len(enc.encode_ordinary(s)) for s in MESSAGES])
    else:
        counts = benchmark(lambda: [len(t) for t in enc.encode_ordinary_batch(MESSAGES)])
    assert counts == expected
