"""Long generated agent sessions for compaction: rules stated early, exact
facts buried in tool output, and hundreds of turns of work after them.

Each session is built from a seeded ``random.Random``. A rule carries the
marker ``K<seed>-<i>``; a fact is a ``key: value`` line of a tool output
whose value ``F<seed>-<i>-<n>`` occurs nowhere else. A rule or fact counts as
kept when its marker is in what the model is shown, or in memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["PLAIN_RULES", "RULES", "CompactionSession", "compaction_session"]

RULES = [
    "you must retry the gateway call at most 3 times",
    "never log card numbers or CVV codes",
    "always keep amounts as Decimal, never float",
    "make sure every new endpoint lives under /api/v2",
    "you must not touch the legacy_billing module",
    "ensure each migration has a rollback",
    "必须在同一个数据库事务内完成支付回调",
    "禁止在日志中打印银行卡号",
    "务必为每个 bug 修复补充单元测试",
]
TASKS = [
    "Fix the failing test in tests/test_refund.py.",
    "Add pagination to the /orders endpoint.",
    "Why does the settlement job time out at night?",
    "Refactor the webhook handler in services/payments/webhook.py.",
    "把对账报表的导出改成 CSV。",
    "看一下为什么覆盖率下降了。",
    "Update the deployment notes.",
]
ANSWERS = [
    "Done: the test passes now and the suite is green.",
    "I changed the handler and added a test; all tests pass.",
    "The job was blocked on a lock; I shortened the transaction.",
    "已经修改完成，相关测试全部通过。",
    "Pagination works; I added limit and cursor parameters.",
]
# Rules said without must, never, 必须 or 禁止: each with a word of its own, or
# starting its sentence with one ("avoid", 别动).
PLAIN_RULES = [
    "avoid touching the production database",
    "别动 config.yaml 里的超时设置",
    "refrain from running migrations by hand",
    "under no circumstances push straight to main",
    "keep the audit log switched on at all times",
    "请勿修改 config.yaml 里的超时设置",
    "勿删 migrations 目录",
    "千万别在周五发布",
    "不许用 print 调试",
    "仅限 staging 环境跑压测",
]
MODULES = ["gateway", "refund", "ledger"]
FACT_KEYS = ["refund_ref", "ticket", "build_id", "db_port_note", "trace_id", "invoice", "batch", "job_run"]


@dataclass
class CompactionSession:
    messages: list[dict]
    rules: list[str] = field(default_factory=list)  # markers
    facts: list[str] = field(default_factory=list)  # values
    #: Index of the message each fact first appears in.
    fact_at: dict[str, int] = field(default_factory=dict)


def _log_lines(rng: random.Random, lines: int) -> str:
    return "\n".join(
        rng.choice(
            [
                f"tests/test_orders.py::test_{rng.randint(1, 99)} PASSED",
                f'  File "/srv/app/payments/{rng.choice(MODULES)}.py", line {rng.randint(1, 900)}',
                f"INFO worker-{rng.randint(1, 8)} processed {rng.randint(10, 999)} rows",
                f"curl -s https://sandbox.example.test/v1/charges/{rng.randint(1000, 9999)} -> HTTP 200",
            ]
        )
        for _ in range(lines)
    )


def compaction_session(
    seed: int, turns: int = 300, provider: str = "openai", rules: list[str] = RULES
) -> CompactionSession:
    """``turns`` turns: five to seven of ``rules`` in the first ten user
    turns, facts in tool outputs across the first two thirds, tool rounds in
    most turns, and the user's new request last."""
    rng = random.Random(seed)
    session = CompactionSession(
        [{"role": "system", "content": "You are a coding agent for the payments team."}]
    )
    rules = rng.sample(rules, min(len(rules), rng.randint(5, 7)))
    planted = {rng.randrange(10): [] for _ in range(len(rules))}
    keys = list(planted)
    for i, rule in enumerate(rules):
        marker = f"K{seed}-{i}"
        planted[keys[i % len(keys)]].append(f"Rule {marker}: {rule}.")
        session.rules.append(marker)
    fact_turns = sorted(rng.sample(range(5, turns * 2 // 3), 10))
    call = 0
    for turn in range(turns):
        text = rng.choice(TASKS)
        if turn in planted:
            text = text + "\n" + " ".join(planted[turn])
        session.messages.append({"role": "user", "content": text})
        for _ in range(rng.choice((1, 1, 2))):
            call += 1
            call_id = f"call_{seed}_{call}"
            output = _log_lines(rng, rng.randint(4, 30))
            if fact_turns and turn == fact_turns[0]:
                fact_turns.pop(0)
                value = f"F{seed}-{len(session.facts)}-{rng.randint(1000, 9999)}"
                key = f"{rng.choice(FACT_KEYS)}_{len(session.facts)}"
                output = f"{output}\n{key}: {value}\n{_log_lines(rng, 3)}"
                session.facts.append(value)
                session.fact_at[value] = len(session.messages) + 1
            session.messages.append(_call(provider, call_id))
            session.messages.append(_result(provider, call_id, output))
        session.messages.append({"role": "assistant", "content": rng.choice(ANSWERS)})
    session.messages.append({"role": "user", "content": rng.choice(TASKS)})
    return session


def _call(provider: str, call_id: str) -> dict:
    if provider == "anthropic":
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": "shell", "input": {"cmd": "pytest -x"}}],
        }
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "shell", "arguments": '{"cmd": "pytest -x"}'},
            }
        ],
    }


def _result(provider: str, call_id: str, output: str) -> dict:
    if provider == "anthropic":
        return {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}],
        }
    return {"role": "tool", "tool_call_id": call_id, "content": output}
