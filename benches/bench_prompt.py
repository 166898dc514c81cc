"""Prompt layers: the cost of a turn's prompt for a typical agent (a
20K-token system part with its tools, 2K of session facts, 1K of per-turn
context), rendered for Anthropic (with its cache breakpoints) and for
OpenAI.

A warm turn is every turn after the first, as an agent runs it: a new task
text each turn (matched against the 30 skills, which loads one of them), the
date line a minute later, the memory excerpt checked with one ``stat``; only
the volatile part is rendered and counted. Its target is an absolute one,
50 µs. A second row has MEMORY.md changed before every turn (re-read,
re-escaped, recounted). The cold turn makes the builder (rendering, counting
and hashing the system and stable parts, canonicalising the tools) and
renders its first turn.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path

import pytest

from context_core import MemoryFiles, PromptBuilder, Tokenizer
from context_core.prompt import Dimensions, Skill
from support import REPORTS, register

# The prompt tests' deterministic prose, one definition for both.
sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))
from prompt_fixtures import prose

TARGET_US = 50.0
MODEL = "claude-sonnet-4-5"
T0 = datetime(2024, 1, 18, 10, 30, tzinfo=timezone.utc)
SKILLS = 30
TASKS = [f"{prose(8, 20_000 + i)} in topic{i % SKILLS}, then {prose(10, 40_000 + i)}" for i in range(4096)]
"""A new task text each turn (4,096 of them, cycled): each names one skill's trigger."""


def memory_lines(count: int = 40, first: int = 0) -> list[str]:
    return [f"- [fact] {prose(12, 1000 + i)} {i}" for i in range(first, first + count)]


def typical_inputs(memory_root: str) -> dict:
    """The builder's arguments: 20 tools (~4K tokens), identity, conventions,
    safety and 30 skills (~16K), session facts and a project overview (~2K)."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": prose(40, i),
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"arg{j}": {"type": "string", "description": prose(12, 100 * i + j)} for j in range(8)
                    },
                    "required": ["arg0"],
                },
            },
        }
        for i in range(20)
    ]
    memory = MemoryFiles(memory_root, durability="never")
    memory.append(memory_lines())
    return {
        "identity": "You are a senior software engineer. " + prose(10_600, 1),
        "conventions": [prose(25, 2000 + i) for i in range(120)],
        "safety": [prose(25, 3000 + i) for i in range(60)],
        "tools": tools,
        "skills": [
            Skill(f"skill-{i}", prose(12, 4000 + i), prose(150, 5000 + i), (f"topic{i}",))
            for i in range(SKILLS)
        ],
        "memory": memory,
        "session_facts": {"Session": "sess_123", "Task": "fix_build", "Repository": "/srv/app"},
        "session_context": [("Project", "\n".join(prose(20, 6000 + i) for i in range(92)))],
    }


INSTRUCTIONS = ["Run tests with: go test ./...", prose(60, 7), prose(60, 8)]
MESSAGES = [{"role": "user", "content": "The build fails on main; fix it."}]


def make_builder(inputs: dict) -> PromptBuilder:
    args = dict(inputs)
    return PromptBuilder(args.pop("identity"), **args)


def turn(builder: PromptBuilder, minute: int):
    """Turn ``minute``: its own date line and task text."""
    return builder.build(
        now=T0 + timedelta(minutes=minute),
        cwd="/srv/app",
        channel="C0123",
        instructions=INSTRUCTIONS,
        task=TASKS[minute % len(TASKS)],
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    return typical_inputs(str(tmp_path_factory.mktemp("memory")))


@pytest.fixture(scope="module")
def builder(inputs) -> PromptBuilder:
    built = make_builder(inputs)
    tok = Tokenizer()
    for minute in (0, 1):
        parts = turn(built, minute)
        # what this benchmark claims to measure
        assert 19_000 <= parts.breakdown.tools + tok.count(parts.system) <= 21_000
        assert 1_800 <= tok.count(parts.stable) <= 2_200
        assert 900 <= tok.count(parts.volatile) <= 1_300
        assert parts.skills == (f"skill-{minute % SKILLS}",)  # each task loads its skill
    return built


def record(benchmark, target: bool) -> None:
    if benchmark.stats is not None:
        median_us = benchmark.stats.stats.median * 1e6
        benchmark.extra_info["median_us"] = round(median_us, 1)
        if target:
            within = median_us <= TARGET_US
            benchmark.extra_info[f"within_{TARGET_US:g}us"] = within
            REPORTS.append(
                f"{benchmark.group}: median {median_us:.1f} us, target {TARGET_US:g} us"
                + ("" if within else " MISSED")
            )


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_warm_turn(benchmark, builder, provider):
    """A new task and a new date line every turn, the rest of the session as it was."""
    register(benchmark, f"prompt turn, 20K system + 2K stable + 1K volatile, warm, {provider}", "ours")
    minute = count(2)
    if provider == "anthropic":

        def run():
            return turn(builder, next(minute)).to_anthropic(MESSAGES, model=MODEL)
    else:

        def run():
            return turn(builder, next(minute)).to_openai(MESSAGES)

    first = run()
    request = benchmark(run)
    if provider == "anthropic":
        assert [("cache_control" in block) for block in request["system"]] == [True, True, False]
        assert request["system"][:2] == first["system"][:2]
        assert request["system"][2] != first["system"][2]  # a new date line, another skill
    else:
        # One system message: the cached head, then this turn's volatile part.
        head = f"{builder.system}\n\n{builder.stable}\n\n"
        assert request["messages"][0]["content"].startswith(head)
        assert first["messages"][0]["content"].startswith(head)
        assert request["messages"][0] != first["messages"][0]  # a new date line, another skill
    record(benchmark, target=True)


def test_warm_turn_memory_changed(benchmark, inputs, tmp_path, request):
    """A warm turn after MEMORY.md changed (a fact edited each turn, written
    between turns): the memory layer is re-read, escaped and counted again."""
    register(
        benchmark, "prompt turn, 20K system + 2K stable + 1K volatile, memory changed, anthropic", "ours"
    )
    memory = MemoryFiles(str(tmp_path / "memory"), durability="never")
    memory.append(memory_lines())
    built = make_builder({**inputs, "memory": memory})
    path = memory.memory_path
    lines = memory_lines()
    version = count()
    minute = count(2)

    def change_memory():
        k = next(version)
        lines[k % len(lines)] = f"- [fact] {prose(12, 90_000 + k)} {k}"
        with open(f"{path}.next", "w", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in lines))
        os.replace(f"{path}.next", path)  # a new file: the turn's stat sees it

    def run():
        return turn(built, next(minute)).to_anthropic(MESSAGES, model=MODEL)

    change_memory()
    before = run()
    change_memory()
    after = run()
    assert lines[1] in after["system"][2]["text"]
    assert lines[1] not in before["system"][2]["text"]
    session = getattr(request.config, "_benchmarksession", None)
    rounds = 2000 if session is not None and not session.disabled else 1
    result = benchmark.pedantic(run, setup=change_memory, rounds=rounds, iterations=1)
    assert result["system"][2]["text"] != after["system"][2]["text"]
    record(benchmark, target=False)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_cold_turn(benchmark, inputs, provider, request):
    """A new session: the builder made, its system and stable parts counted
    and hashed, the first turn rendered (for comparison with a warm turn)."""
    register(benchmark, f"prompt turn, 20K system + 2K stable + 1K volatile, cold, {provider}", "ours")

    def run():
        parts = turn(make_builder(inputs), 0)
        if provider == "anthropic":
            return parts.to_anthropic(MESSAGES, model=MODEL)
        return parts.to_openai(MESSAGES)

    session = getattr(request.config, "_benchmarksession", None)
    rounds = 20 if session is not None and not session.disabled else 1
    result = benchmark.pedantic(run, rounds=rounds, iterations=1)
    assert result is not None
    record(benchmark, target=False)


def test_task_block(benchmark):
    """A task block: 8 memories, 4 files (one over its share), an
    error and a task, split by the coupling matrix and fitted by exact count
    within 4,000 tokens (per turn, when the task block is used)."""
    register(benchmark, "prompt task block, 4,000 tokens (8 MEM, 4 FILE, ERROR, TASK)", "ours")
    tok = Tokenizer()
    rules = [
        (f"rule {i}: {prose(15, 7000 + i)} must hold", "system" if i < 2 else "user", f"k{i}")
        for i in range(8)
    ]
    files = [(prose(1500 if i == 0 else 200, 8000 + i), f"src/module_{i}.py") for i in range(4)]
    error = "\n".join(f"  at frame {i} {prose(6, 9000 + i)}" for i in range(25))
    task = "Add an idempotency check to the payment callback; it must not retry twice."

    def run():
        dims = Dimensions()
        for text, source, key in rules:
            dims.add(text, source, label=key)
        for text, path in files:
            dims.add(text, "file", label=path)
        dims.add(error, "error")
        dims.add(task, "task")
        return dims.render(4000, tok)

    block = benchmark(run)
    assert block.tokens == tok.count(block.text) <= 4000
    assert block.truncated  # the files are more than the context share
    record(benchmark, target=False)
