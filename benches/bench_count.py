"""``Tokenizer.count`` against tiktoken (the reference's engine) on long texts,
one short string, and megabyte worst cases. ``count`` bypasses the count
cache, so every round does the full BPE work."""

from __future__ import annotations

import pytest

from context_core import Tokenizer
from inputs import WORST_CASES, chinese, code, english, worst_case
from support import register

LONG_TEXTS = {"english": english(20_000), "code": code(20_000), "chinese": chinese(10_000)}


@pytest.mark.parametrize("impl", ["ours", "tiktoken"])
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("kind", sorted(LONG_TEXTS))
def test_count_long_text(benchmark, tiktoken_encoding, impl, encoding, kind):
    text = LONG_TEXTS[kind]
    assert len(text.encode()) >= 10_000
    expected = len(tiktoken_encoding(encoding).encode_ordinary(text))
    register(benchmark, f"count {kind} {len(text.encode()) // 1024} KB {encoding}", impl, target=2.0)
    if impl == "ours":
        count = Tokenizer(encoding).count
        assert benchmark(count, text) == expected
    else:
        encode = tiktoken_encoding(encoding).encode_ordinary
        assert benchmark(lambda: len(encode(text))) == expected


SHORT = "Please summarise the last three tool results for me."[:50]


@pytest.mark.parametrize("impl", ["ours", "tiktoken"])
def test_count_short_string(benchmark, tiktoken_encoding, impl):
    assert len(SHORT) == 50
    enc = tiktoken_encoding("o200k_base")
    register(benchmark, "count one 50-char string o200k_base", impl, target=1.0)
    if impl == "ours":
        assert benchmark(Tokenizer().count, SHORT) == len(enc.encode_ordinary(SHORT))
    else:
        encode = enc.encode_ordinary
        assert benchmark(lambda: len(encode(SHORT))) == len(enc.encode_ordinary(SHORT))


@pytest.mark.parametrize("impl", ["ours", "tiktoken"])
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("kind", WORST_CASES)
def test_count_one_megabyte_worst_case(benchmark, tiktoken_encoding, impl, encoding, kind):
    text = worst_case(kind)
    enc = tiktoken_encoding(encoding)
    register(benchmark, f"count 1 MB worst case: {kind} {encoding}", impl, target=1.0)
    if impl == "ours":
        result = benchmark.pedantic(
            Tokenizer(encoding).count, (text,), rounds=5, iterations=1, warmup_rounds=1
        )
    else:
        result = benchmark.pedantic(lambda: len(enc.encode_ordinary(text)), rounds=5, iterations=1)
    assert result == len(enc.encode_ordinary(text))


def test_count_one_megabyte_of_spaces(benchmark, tiktoken_encoding):
    """tiktoken's regex overflows its stack on this input (a Rust panic surfaces
    as pyo3's PanicException); ours counts it. What tiktoken did is recorded."""
    text = " " * (1 << 20)
    register(benchmark, "count 1 MB worst case: spaces o200k_base", "ours")
    try:
        tiktoken_result = str(len(tiktoken_encoding("o200k_base").encode_ordinary(text)))
    except BaseException as error:  # PanicException derives from BaseException
        tiktoken_result = f"raised {type(error).__name__}"
    benchmark.extra_info["tiktoken"] = tiktoken_result
    count = benchmark.pedantic(Tokenizer().count, (text,), rounds=5, iterations=1)
    assert count == len(Tokenizer().encode(text)) > 0


@pytest.mark.parametrize("impl", ["ours", "tiktoken"])
def test_count_with_limit_on_a_huge_tool_output(benchmark, tiktoken_encoding, impl):
    """A 2,000-token budget check on a 1 MB tool output: ours stops at the limit,
    tiktoken has to encode everything."""
    text = worst_case("prose")
    enc = tiktoken_encoding("o200k_base")
    register(benchmark, "budget check: count(1 MB, limit=2000)", impl)
    if impl == "ours":
        assert benchmark(Tokenizer().count, text, limit=2000) == 2001
    else:
        assert benchmark.pedantic(lambda: min(len(enc.encode_ordinary(text)), 2001), rounds=5) == 2001
