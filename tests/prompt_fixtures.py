"""Shared builders for the prompt-layer tests."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from context_core import PromptBuilder
from context_core.prompt import Skill

PST = timezone(timedelta(hours=-8), "PST")
T0 = datetime(2024, 1, 18, 10, 30, tzinfo=PST)

_WORDS = [
    "agent", "build", "cache", "context", "deploy", "error", "file", "function", "graph", "handler",
    "index", "json", "kernel", "lint", "module", "network", "output", "parser", "query", "retry",
    "schema", "test", "token", "update", "value", "worker",
]  # fmt: skip


def prose(words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def tools(count: int = 3) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": prose(30, i),
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["path"],
                },
            },
        }
        for i in range(count)
    ]


def skills() -> list[Skill]:
    return [
        Skill("db-migrations", "Write and run database migrations", "1. Write the migration\n2. Run it"),
        Skill("release", "Cut a release", "Tag, build, publish.", triggers=("ship it", "publish")),
        Skill("sql", "Query the warehouse", "Use the read replica.", triggers=("数据库",)),
    ]


def big_builder(system_words: int = 1500, stable_words: int = 0, **kwargs) -> PromptBuilder:
    """A builder whose system part is well over every model's minimum
    cacheable length with the default sizes (about 1,500 + tools tokens)."""
    args = {
        "conventions": ["Use Go 1.21", "Run gofmt"],
        "safety": "Never print secrets.",
        "tools": tools(),
        "skills": skills(),
        "session_facts": {"Session": "sess_123", "Task": "fix_build"},
    }
    if stable_words:
        args["session_context"] = [("Project", prose(stable_words, 99))]
    args.update(kwargs)
    return PromptBuilder("You are a senior engineer. " + prose(system_words, 1), **args)
