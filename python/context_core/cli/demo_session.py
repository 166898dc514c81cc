"""A long agent session for ``context-core demo``, written from a seed.

A user asks a coding agent for work, in English and Chinese, and states
rules early ("never drop the order_id", "必须..."); the agent answers in
rounds of tool calls (files, logs, diffs, query results, transcripts of
1-30 KB) and a final answer. Tool outputs are slices of the standard
library's own sources and docs at random offsets, so each is a text of its
own, as real outputs are.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["IDENTITY", "RULES", "TOOLS", "write_session"]

IDENTITY = (
    "You are a coding agent for the payments team. Read before you change anything, run the "
    "tests after every change, and cite the files you read."
)
RULES = [
    "You must never drop the order_id from any log line.",
    "Retry a failed payment at most three times.",
    "Do not touch the production database without a ticket.",
    "必须保留每条日志里的 order_id。",
    "禁止在没有工单的情况下修改生产数据库。",
    "Always keep the public API backwards compatible.",
]
TASKS = [
    "Read src/payments/refunds.py and find why refunds time out.",
    "Run the failing tests and fix what breaks.",
    "Compare the two retry configs and tell me what changed.",
    "Look at yesterday's incident log and summarise it.",
    "请检查 src/payments/retry.py 里的重试逻辑。",
    "把退款超时的问题修好，然后跑一遍测试。",
    "Query the ledger for refunds stuck in pending.",
    "Fetch the design review transcript and list the decisions.",
]
PROGRESS = [
    "Thanks, keep going.",
    "继续。",
    "Status update please: what is left?",
    "Good. Now the next file.",
]
TOOL_NAMES = ["read_file", "run_shell", "git_diff", "query_db", "fetch_transcript"]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name.replace('_', ' ')} tool of the agent's sandbox.",
            "parameters": {"type": "object", "properties": {"target": {"type": "string"}}},
        },
    }
    for name in TOOL_NAMES
]
_CHINESE = (
    "退款任务在高峰期超时，原因是重试队列没有及时清空。我们决定把重试上限设为三次，"
    "并在每条日志里保留订单号。数据库迁移需要可以回滚，生产环境的修改必须有工单。"
)


@cache
def _sources() -> str:
    import argparse
    import json as json_module
    import logging

    return "\n".join(
        Path(str(m.__file__)).read_text(encoding="utf-8") for m in (argparse, json_module.decoder, logging)
    )


def _slice(rng: random.Random, text: str, size: int) -> str:
    while len(text) <= size:
        text += "\n" + text
    start = rng.randrange(0, len(text) - size)
    return text[start : start + size]


def _output(rng: random.Random, tool: str) -> str:
    size = rng.choice((800, 1_500, 3_000, 3_000, 8_000, 30_000))
    if tool == "run_shell":
        lines = [
            f"tests/test_refunds.py::test_case_{n} {'PASSED' if n % 5 else 'FAILED - TimeoutError'}"
            for n in range(size // 48)
        ]
        return "\n".join(lines)
    if tool == "query_db":
        rows = [{"order_id": f"ord_{rng.randint(1, 10**6)}", "status": "pending"} for _ in range(size // 45)]
        return json.dumps(rows)
    if tool == "fetch_transcript":
        return "[00:00:01] " + _slice(rng, _CHINESE * 40, size // 3)
    return _slice(rng, _sources(), size)


def write_session(path: Path, turns: int, seed: int = 0, provider: str = "openai") -> list[dict[str, Any]]:
    """Write the session as JSONL (one message a line) to ``path`` and
    return it: tool calls and results in ``provider``'s shape (OpenAI's
    ``tool_calls`` and ``tool`` messages, or Anthropic's ``tool_use`` and
    ``tool_result`` blocks), the same session either way."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": IDENTITY}]
    call = 0
    for turn in range(turns):
        if turn < len(RULES):
            text = f"{rng.choice(TASKS)} {RULES[turn]}"
        elif rng.random() < 0.3:
            text = rng.choice(PROGRESS)
        else:
            text = rng.choice(TASKS)
        messages.append({"role": "user", "content": text})
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            calls: list[tuple[str, str, dict[str, str]]] = []
            for _ in range(rng.choice((1, 1, 2))):
                call += 1
                name = rng.choice(TOOL_NAMES)
                target = {"target": f"src/payments/{rng.choice(['refunds', 'retry', 'ledger'])}.py"}
                calls.append((f"call_{call}", name, target))
            outputs = [_output(rng, name) for _, name, _ in calls]
            messages.extend(_tool_round(calls, outputs, provider))
        answer = _slice(rng, _CHINESE * 8, rng.randint(60, 300)) if "。" in text else f"Done: {text[:60]}"
        messages.append({"role": "assistant", "content": answer})
    path.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages), encoding="utf-8")
    return messages


def _tool_round(
    calls: list[tuple[str, str, dict[str, str]]], outputs: list[str], provider: str
) -> list[dict[str, Any]]:
    """A reply making ``calls`` (id, tool, arguments) and their results, in ``provider``'s shape."""
    if provider == "anthropic":
        return [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": id_, "name": name, "input": arguments}
                    for id_, name, arguments in calls
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": id_, "content": output}
                    for (id_, _, _), output in zip(calls, outputs, strict=True)
                ],
            },
        ]
    made = [
        {"id": id_, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        for id_, name, arguments in calls
    ]
    results = [
        {"role": "tool", "tool_call_id": id_, "content": output}
        for (id_, _, _), output in zip(calls, outputs, strict=True)
    ]
    return [{"role": "assistant", "content": None, "tool_calls": made}, *results]
