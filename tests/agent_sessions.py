"""Long agent sessions shaped like real coding and research agents, replayed
turn by turn as a server runs them.

A session is a user asking for work and an agent loop answering: thinking,
one to three parallel tool calls per round, their results (files, logs,
diffs, stack traces, JSON, web and video transcripts of 1-100 KB), a final
answer. Users state rules ("must retry", "never drop the order_id", "必须...")
and report progress, in English and Chinese, two minutes or so apart. A few
defects are left in for the repair pass: a reused tool-call id, an empty tool
result, a call whose result never came (the user spoke first), and a session
that ends on a pending call.

Texts are slices of standard-library sources and docs and of generated
Chinese at random offsets, so each tool result is a text of its own (no count
is cached before its first sight) and building a 10,000-message session
costs well under a second. Both providers get the same session, shaped for
each: OpenAI tool messages, or Anthropic ``tool_use`` / ``tool_result``
blocks with thinking.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
from dataclasses import dataclass

SYSTEM = "You are a coding and research agent for the payments team. Use the tools; cite what you read."

RULES_EN = [
    "You must retry a failed payment at most three times.",
    "Never drop the order_id from any log line.",
    "Ensure every migration is reversible.",
    "Do not touch the production database without a ticket.",
    "Always answer in the same language as the question.",
    "You must keep the public API backwards compatible.",
]
RULES_ZH = [
    "必须保留每条日志里的 order_id。",
    "禁止在没有工单的情况下修改生产数据库。",
    "确保每次迁移都可以回滚。",
    "重试失败的支付最多三次，必须记录原因。",
]
TASKS_EN = [
    "Read the payment service and find why refunds time out.",
    "Summarise the last incident transcript for the team.",
    "Run the failing tests and fix what breaks.",
    "Compare the two configs and tell me what changed.",
    "Look up how the retry queue is drained and write it down.",
    "Check the logs from last night for duplicate charges.",
]
TASKS_ZH = [
    "读一下支付服务的代码，找出退款超时的原因。",
    "总结一下昨天事故的会议记录。",
    "运行失败的测试并修复问题。",
    "比较两个配置文件，告诉我改了什么。",
]
PROGRESS = [
    "Thanks, keep going.",
    "继续。",
    "Status update please: what is left?",
    "Good. Now the next file.",
    "进展如何？还有哪些没做？",
]
TOOLS = ["read_file", "run_shell", "git_diff", "search_web", "fetch_transcript", "query_db"]


@dataclass
class AgentSession:
    provider: str
    messages: list[dict]
    calls: list[int]
    """Where a server asks the model: ``messages[:i]`` is the history of each call."""


@functools.cache
def _sources() -> tuple[str, str, str]:
    import argparse
    import collections
    import email
    import logging
    import unittest

    code = inspect.getsource(argparse) + inspect.getsource(logging) + inspect.getsource(collections)
    docs = "\n\n".join(
        doc
        for module in (argparse, collections, email, logging, unittest, json, random, inspect)
        for obj in vars(module).values()
        if isinstance(doc := getattr(obj, "__doc__", None), str) and len(doc) > 200
    )
    rng = random.Random(1)
    words = (  # noqa: SIM905 (a word list reads best as text)
        "我们 需要 上下文 窗口 管理 模型 用户 约束 工具 调用 结果 错误 重试 超时 事务 数据库 接口 服务 "
        "支付 订单 日志 分析 总结 记忆 文件 路径 配置 部署 测试 性能 延迟 缓存 压缩 摘要 历史 消息 会话 "
        "然后 因为 所以 但是 如果 已经 可以 应该 不能"
    ).split()
    chinese = "".join(
        "".join(rng.choice(words) for _ in range(rng.randint(4, 14))) + rng.choice("，。；！？")
        for _ in range(20_000)
    )
    return code, docs, chinese


def _slice(rng: random.Random, source: str, length: int) -> str:
    while len(source) < length + 1:
        source += "\n" + source
    start = rng.randrange(0, len(source) - length)
    return source[start : start + length]


def _output_size(rng: random.Random) -> int:
    """Characters of one tool output: mostly 1-4 KB, often 4-20 KB, some 20-100 KB."""
    roll = rng.random()
    if roll < 0.7:
        return rng.randint(1_000, 4_000)
    if roll < 0.92:
        return rng.randint(4_000, 20_000)
    return rng.randint(20_000, 100_000)


def tool_output(rng: random.Random, tool: str, size: int) -> str:
    """A tool's output of about ``size`` characters, shaped like the tool's."""
    code, docs, chinese = _sources()
    if tool == "read_file":
        return f"# src/payments/{rng.choice(['refunds', 'retry', 'ledger'])}.py\n" + _slice(rng, code, size)
    if tool == "run_shell":
        lines, total = [], 0
        while total < size:
            n = rng.randint(1, 9999)
            line = rng.choice(
                [
                    f"2026-11-30T0{rng.randint(0, 9)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}Z INFO "
                    f"payments.worker order_id=ord_{n} charged amount={n / 7:.2f}",
                    f"tests/test_refunds.py::test_case_{n} PASSED",
                    f"tests/test_refunds.py::test_case_{n} FAILED - TimeoutError: refund {n} after 30s",
                    f'  File "/srv/payments/worker.py", line {n % 900}, in handle\n'
                    "    raise RetryError(order_id)",
                    f"WARN 重试 第{n % 3 + 1}次 订单 ord_{n} 超时",
                ]
            )
            lines.append(line)
            total += len(line) + 1
        return "\n".join(lines)
    if tool == "git_diff":
        body = _slice(rng, code, size).splitlines()
        return "diff --git a/worker.py b/worker.py\n@@ -10,7 +10,9 @@\n" + "\n".join(
            rng.choice("+- ") + line for line in body
        )
    if tool == "query_db":
        rows = []
        total = 0
        while total < size:
            n = rng.randint(1, 10**6)
            row = {"order_id": f"ord_{n}", "status": rng.choice(["paid", "refunded", "failed"]), "cents": n}
            rows.append(row)
            total += 60
        return json.dumps(rows, ensure_ascii=False)
    if tool == "fetch_transcript":
        text = _slice(rng, chinese, size // 3) if rng.random() < 0.5 else _slice(rng, docs, size)
        return "[00:00:01] Speaker 1: " + text.replace("。", "。\n[00:01:12] Speaker 2: ", 3)
    return "Search results:\n" + _slice(rng, docs, size)


def _user_text(rng: random.Random, turn: int, chinese: bool) -> str:
    """A task, often with a rule in it (tagged a constraint), or a progress note."""
    if turn > 0 and rng.random() < 0.25:
        return rng.choice(PROGRESS)
    task = rng.choice(TASKS_ZH if chinese else TASKS_EN)
    if rng.random() < 0.5:
        task += " " + rng.choice(RULES_ZH if chinese else RULES_EN)
    return task


def generate(messages: int, provider: str, seed: int = 0, timestamps: bool = True) -> AgentSession:
    """A session of about ``messages`` messages (exactly that many, or one
    more to close a tool round), in ``provider``'s shape."""
    rng = random.Random(seed)
    openai = provider == "openai"
    out: list[dict] = [{"role": "system", "content": SYSTEM}] if openai else []
    calls: list[int] = []
    clock = 1_790_000_000.0
    call_number = 0
    used_ids: list[str] = []
    turn = 0

    def stamp(message: dict) -> dict:
        nonlocal clock
        clock += rng.uniform(5, 40)
        if timestamps:
            message["timestamp"] = clock
        return message

    while len(out) < messages:
        clock += rng.uniform(60, 180)  # the user comes back a minute or three later
        chinese = rng.random() < 0.35
        out.append(stamp({"role": "user", "content": _user_text(rng, turn, chinese)}))
        turn += 1
        for round_ in range(rng.choice((0, 1, 2, 3, 3, 4, 6))):
            if len(out) >= messages:
                break
            calls.append(len(out))
            ids = []
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                call_number += 1
                reuse = used_ids and rng.random() < 0.01
                ids.append(rng.choice(used_ids) if reuse else f"call_{seed}_{call_number}")
            ids = list(dict.fromkeys(ids))
            used_ids.extend(ids)
            tools = [rng.choice(TOOLS) for _ in ids]
            arguments = [
                {"path": f"src/payments/{rng.randint(1, 99)}.py", "query": "refund timeout"} for _ in ids
            ]
            thought = _slice(rng, _sources()[1], rng.randint(100, 600)) if rng.random() < 0.6 else None
            if openai:
                out.append(
                    stamp(
                        {
                            "role": "assistant",
                            "content": thought if round_ == 0 else None,
                            "tool_calls": [
                                {
                                    "id": i,
                                    "type": "function",
                                    "function": {"name": tool, "arguments": json.dumps(args)},
                                }
                                for i, tool, args in zip(ids, tools, arguments, strict=True)
                            ],
                        }
                    )
                )
            else:
                blocks: list[dict] = []
                if thought is not None:
                    blocks.append({"type": "thinking", "thinking": thought, "signature": "c2lnbmF0dXJl"})
                blocks += [
                    {"type": "tool_use", "id": i, "name": tool, "input": args}
                    for i, tool, args in zip(ids, tools, arguments, strict=True)
                ]
                out.append(stamp({"role": "assistant", "content": blocks}))
            if rng.random() < 0.01:
                break  # the result never comes: the user speaks next (a pending call)
            results = []
            for i, tool in zip(ids, tools, strict=True):
                text = "" if rng.random() < 0.02 else tool_output(rng, tool, _output_size(rng))
                results.append((i, text))
            if openai:
                out.extend(stamp({"role": "tool", "tool_call_id": i, "content": text}) for i, text in results)
            else:
                out.append(
                    stamp(
                        {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": i, "content": text}
                                for i, text in results
                            ],
                        }
                    )
                )
        else:
            if len(out) < messages:
                calls.append(len(out))
                answer = _slice(rng, _sources()[2] if chinese else _sources()[1], rng.randint(80, 1_500))
                out.append(stamp({"role": "assistant", "content": answer}))
    # The session ends on a call whose result has not come yet.
    call_number += 1
    pending = f"call_{seed}_{call_number}"
    calls.append(len(out))
    if openai:
        out.append(
            stamp(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": pending,
                            "type": "function",
                            "function": {"name": "run_shell", "arguments": "{}"},
                        }
                    ],
                }
            )
        )
    else:
        out.append(
            stamp(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": pending, "name": "run_shell", "input": {}}],
                }
            )
        )
    calls.append(len(out))
    return AgentSession(provider, out, calls)


def turn_in_progress(messages: list[dict]) -> int | None:
    """Where the turn in progress starts: the newest user message with text of
    its own (not only tool results); ``None`` if there is none."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            return i
        if isinstance(content, list):
            kinds = {block.get("type") for block in content if isinstance(block, dict)}
            texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            if "tool_result" not in kinds and any(t.strip() for t in texts):
                return i
    return None
