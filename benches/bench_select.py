"""Context selection at an 8K budget: each policy against its pure-Python
reference on a 1,000-message session (counts warm on both sides), our
growth from 1K to 100K messages, LangChain's ``trim_messages`` as a peer, and
the whole turn (sanitize + select + breakdown)."""

from __future__ import annotations

import pytest

import context_core
from context_core import Tokenizer, sanitize
from context_core.reference import select as reference
from context_core.reference.sanitize import sanitize as reference_sanitize
from inputs import session
from support import register

BUDGET = 8_000
SIZE = 1_000
TOK = Tokenizer()
IMPLS = {"ours": context_core, "reference": reference}


def policies(provider: str, module) -> dict:
    """A callable per policy, built once so the instances keep their caches."""
    window = module.WeightedWindow(provider=provider)
    builder = module.PriorityAssembly(provider=provider)
    return {
        "shape_history": lambda messages: module.shape_history(messages, BUDGET, provider=provider),
        "WeightedWindow": lambda messages: window.select(messages, BUDGET),
        "PriorityAssembly": lambda messages: builder.select(messages, BUDGET),
    }


def signature(selection) -> tuple:
    return selection.messages, selection.system, selection.kept, selection.breakdown


@pytest.mark.parametrize("impl", ["ours", "reference"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", ["shape_history", "WeightedWindow", "PriorityAssembly"])
def test_policy(benchmark, policy, provider, impl):
    history = session(SIZE, provider)
    run = policies(provider, IMPLS[impl])[policy]
    expected = policies(provider, reference)[policy](history)
    register(benchmark, f"{policy}, {SIZE:,} messages, 8K budget, {provider}", impl, target=5.0)
    run(history)  # the first call fills the count caches; turns after it are warm
    result = benchmark(run, history)
    assert signature(result) == signature(expected)
    assert result.breakdown.total <= BUDGET


@pytest.mark.parametrize("size", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("policy", ["shape_history", "WeightedWindow", "PriorityAssembly"])
def test_policy_growth(benchmark, policy, size):
    history = session(size, "openai")
    run = policies("openai", context_core)[policy]
    register(benchmark, f"{policy} growth, {size:,} messages", "ours")
    run(history)
    result = benchmark(run, history)
    assert result.breakdown.total <= BUDGET
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_message"] = round(benchmark.stats.stats.median / size * 1e6, 3)


# -- LangChain trim_messages as a peer ---------------------------------------------


def tiktoken_counter(encoding):
    """The counter LangChain's trim_messages guide writes with tiktoken."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    def str_token_counter(text: str) -> int:
        return len(encoding.encode(text))

    def count(messages) -> int:
        num_tokens = 3
        for msg in messages:
            if isinstance(msg, HumanMessage):
                role = "user"
            elif isinstance(msg, AIMessage):
                role = "assistant"
            elif isinstance(msg, ToolMessage):
                role = "tool"
            elif isinstance(msg, SystemMessage):
                role = "system"
            else:
                raise ValueError(f"Unsupported messages type {msg.__class__}")
            num_tokens += 3 + str_token_counter(role) + str_token_counter(msg.content)
            if msg.name:
                num_tokens += 1 + str_token_counter(msg.name)
        return num_tokens

    return count


@pytest.mark.parametrize("impl", ["ours", "trim_messages"])
@pytest.mark.parametrize("counter", ["tiktoken", "approximate"])
def test_against_langchain_trim(benchmark, tiktoken_encoding, counter, impl):
    """Keep the newest messages that fit: our shape_history (exact counts)
    against LangChain's ``trim_messages(strategy="last")`` with the options its
    guide uses, on its own message objects (no conversion timed)."""
    from langchain_core.messages import convert_to_messages, trim_messages
    from langchain_core.messages.utils import convert_to_openai_messages

    history = session(SIZE, "openai")
    target = 100.0 if counter == "tiktoken" else 5.0
    group = f"trim to 8K, {SIZE:,} messages, vs trim_messages ({counter} counter)"
    register(benchmark, group, "ours" if impl == "ours" else f"trim_messages ({counter})", target)
    if impl == "ours":
        run = policies("openai", context_core)["shape_history"]
        run(history)
        sent = benchmark(run, history).messages
    else:
        token_counter = (
            "approximate" if counter == "approximate" else tiktoken_counter(tiktoken_encoding("o200k_base"))
        )
        native = convert_to_messages(history)
        kept = benchmark(
            trim_messages,
            native,
            max_tokens=BUDGET,
            strategy="last",
            token_counter=token_counter,
            include_system=True,
            start_on="human",
            allow_partial=False,
        )
        assert kept, "trim_messages kept nothing"
        sent = convert_to_openai_messages(kept)
    exact = TOK.count_messages(sent)
    benchmark.extra_info["exact_tokens_sent"] = exact
    benchmark.extra_info["over_budget_pct"] = round(max(0.0, exact / BUDGET - 1) * 100, 1)
    if impl == "ours":
        assert exact <= BUDGET


# -- the whole turn ------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["ours", "reference"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", ["shape_history", "WeightedWindow", "PriorityAssembly"])
def test_whole_turn(benchmark, policy, provider, impl):
    """What a server does each turn: repair the history, choose the context,
    log the breakdown. The target is an absolute one: 1 ms at 1,000 messages."""
    module = IMPLS[impl]
    fix = sanitize if impl == "ours" else reference_sanitize
    history = session(SIZE, provider)
    select = policies(provider, module)[policy]

    def turn():
        repaired = fix(history, provider)
        selection = select(repaired.messages)
        return selection, selection.breakdown.log_line()

    register(benchmark, f"whole turn ({policy}), {SIZE:,} messages, {provider}", impl)
    turn()
    selection, line = benchmark(turn)
    assert line.endswith(f"total={selection.breakdown.total}/{BUDGET}")
    if impl == "ours" and benchmark.stats is not None:
        median_us = benchmark.stats.stats.median * 1e6
        benchmark.extra_info["median_us"] = round(median_us, 1)
        benchmark.extra_info["within_1ms"] = median_us <= 1000
