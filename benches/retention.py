"""Constraint retention: long generated agent sessions with constraints stated
early and buried under later noise, and the share of those constraints each
selection policy still shows the model at a fixed budget.

Every session is built from a seeded ``random.Random``, so every run scores
the same sessions. A constraint counts as retained when its marker (``R<s>-<i>``)
appears anywhere in what would be sent: the selected messages, the Anthropic
system text, or an anchoring note.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from context_core import PriorityAssembly, Tokenizer, WeightedWindow, shape_history

TOK = Tokenizer()

RULES_EN = [
    "store every amount as a Decimal, not a float",
    "keep the payment callback inside one database transaction",
    "use snake_case for every SQL column",
    "log no card numbers or CVV codes",
    "retry the gateway call at most 3 times with exponential backoff",
    "put new endpoints under /api/v2",
    "write a migration for every schema change",
    "keep timestamps in UTC in the database",
    "touch nothing in the legacy_billing module",
    "answer in English in code comments",
    "use the existing HttpClient wrapper for outbound calls",
    "add a unit test with every bug fix",
    "run mypy --strict before you commit",
    "keep functions under 60 lines",
]
RULES_ZH = [
    "金额字段使用 Decimal 类型，不能用 float",
    "支付回调在同一个数据库事务内完成，保证事务一致性",
    "数据库字段名统一使用 snake_case",
    "日志里不出现银行卡号和 CVV",
    "网关调用最多重试 3 次，使用指数退避",
    "新接口放在 /api/v2 下",
    "每次表结构变更都写迁移脚本",
    "数据库里的时间统一用 UTC",
    "legacy_billing 模块保持原样，不做修改",
    "代码注释使用中文",
    "外部调用统一使用现有的 HttpClient 封装",
    "每个 bug 修复都附带单元测试",
    "提交前运行 mypy --strict",
    "函数长度控制在 60 行以内",
]
# How users state a rule: the phrasings the tagger's default keywords cover,
# with ASCII and full-width punctuation.
PHRASINGS_EN = [
    "Constraint {m}: you must {r}.",
    "{m} - always {r}, no exceptions.",
    "Important ({m}): make sure you {r}.",
    "Rule {m}: it is required that you {r}.",
    "Please ensure you {r} ({m}).",
    "{m}: do not forget: you must {r}!",
]
PHRASINGS_ZH = [
    "约束{m}：必须{r}。",
    "{m}：务必{r}！",
    "注意（{m}）：一定要{r}。",
    "规范{m}: 要求{r}",
    "{m}，请确保{r}。",
    "【{m}】{r}，这是硬性要求。",
]
TASKS_EN = [
    "Now fix the failing test in test_refund.py.",
    "Add pagination to the /orders endpoint.",
    "Why does the settlement job time out at night?",
    "Refactor the webhook handler so it is easier to test.",
    "Update the README with the new deployment steps.",
    "Check why the coverage dropped in the last run.",
    "Can you make sure the tests pass before we continue?",
    "Implement the refund reconciliation report.",
]
TASKS_ZH = [
    "现在修复 test_refund.py 里失败的测试。",
    "给 /orders 接口加上分页。",
    "结算任务为什么晚上会超时？",
    "重构 webhook 处理逻辑，方便测试。",
    "更新 README 里的部署步骤。",
    "检查一下上次运行覆盖率为什么下降了。",
    "继续之前先确保测试都通过。",
    "实现退款对账报表。",
]
CHATTER = ["ok", "thanks", "继续", "好的，继续吧", "looks good", "嗯", "go on", "👍"]
ANSWERS = [
    "<think>The failure comes from the retry helper returning early.</think> I changed the loop.",
    "Done. I updated 3 files and the tests pass locally.",
    "The job waits on a lock held by the nightly export; I moved the export earlier.",
    "已经修改完成，相关测试全部通过。",
    "<think>分页参数需要校验上限</think> 已添加 limit 和 offset 参数，并限制最大值为 100。",
    "I could not reproduce it yet; the logs show a connection reset from the gateway.",
]


def _log_text(rng: random.Random, lines: int) -> str:
    frames = [
        f'  File "/srv/app/payments/{rng.choice(["gateway", "callback", "refund", "ledger"])}.py", '
        f"line {rng.randint(10, 900)}, in {rng.choice(['handle', 'post', 'retry', 'commit'])}"
        for _ in range(lines)
    ]
    kind = rng.choice(["trace", "curl", "test"])
    if kind == "trace":
        error = rng.choice(
            [
                "TimeoutError: gateway read timed out",
                "ValueError: amount must be a positive Decimal",  # rule-like words in noise
                "AssertionError: response schema mismatch",
                "psycopg.errors.NotNullViolation: column must not be null",
            ]
        )
        return "Traceback (most recent call last):\n" + "\n".join(frames) + "\n" + error
    if kind == "curl":
        return "\n".join(
            f"curl -s -X POST https://sandbox.example.test/v1/charges/{rng.randint(1000, 9999)}"
            f" -> HTTP {rng.choice([200, 500, 502])}"
            for _ in range(lines)
        )
    results = "\n".join(
        f"tests/test_{rng.choice(['refund', 'orders', 'ledger'])}.py::test_{rng.randint(1, 99)} "
        f"{rng.choice(['PASSED', 'PASSED', 'FAILED'])}"
        for _ in range(lines * 2)
    )
    return (
        results + f"\n{rng.randint(1, 9)} failed, {rng.randint(50, 300)} passed in {rng.random() * 60:.2f}s"
    )


@dataclass
class Session:
    messages: list[dict]
    markers: list[str]


def session(seed: int) -> Session:
    """One session of 60-120 turns: constraints in the first six user turns
    (some restated later as reminders), then tasks, tool calls with logs,
    pasted traces, answers and chatter; the last message is the user's new
    request."""
    rng = random.Random(seed)
    language = ("en", "zh", "mixed")[seed % 3]

    def lang() -> str:
        return language if language != "mixed" else rng.choice(("en", "zh"))

    turns = rng.randint(60, 120)
    count = rng.randint(6, 10)
    rule_ids = rng.sample(range(len(RULES_EN)), count)
    constraints: list[tuple[str, str]] = []  # (marker, statement)
    for i, rule in enumerate(rule_ids):
        marker = f"R{seed}-{i}"
        if lang() == "en":
            statement = rng.choice(PHRASINGS_EN).format(m=marker, r=RULES_EN[rule])
        else:
            statement = rng.choice(PHRASINGS_ZH).format(m=marker, r=RULES_ZH[rule])
        constraints.append((marker, statement))
    # Constraints go into the first six user turns, one or two at a time.
    planted: dict[int, list[str]] = {}
    for marker_statement in constraints:
        planted.setdefault(rng.randrange(6), []).append(marker_statement[1])
    # Some rules are said again in the second half of the session.
    reminders = {
        rng.randrange(turns // 2, turns): statement
        for _, statement in rng.sample(constraints, max(1, count // 3))
    }
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent for the payments team."}]
    call = 0
    for turn in range(turns):
        tasks = TASKS_EN if lang() == "en" else TASKS_ZH
        if turn in planted:
            text = " ".join(planted[turn])
            if rng.random() < 0.5:
                text = rng.choice(tasks) + "\n" + text
            messages.append({"role": "user", "content": text})
        elif turn in reminders:
            messages.append({"role": "user", "content": "Reminder / 提醒: " + reminders[turn]})
        else:
            roll = rng.random()
            if roll < 0.15:
                messages.append({"role": "user", "content": rng.choice(CHATTER)})
            elif roll < 0.3:
                messages.append(
                    {"role": "user", "content": "Here is what I get:\n" + _log_text(rng, rng.randint(5, 30))}
                )
            else:
                messages.append({"role": "user", "content": rng.choice(tasks)})
        for _ in range(rng.choice((0, 1, 1, 2))):  # tool rounds
            call += 1
            ids = [f"call_{call}_{k}" for k in range(rng.randint(1, 2))]
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "shell", "arguments": '{"cmd": "pytest -x"}'},
                        }
                        for i in ids
                    ],
                }
            )
            messages.extend(
                {"role": "tool", "tool_call_id": i, "content": _log_text(rng, rng.randint(5, 40))}
                for i in ids
            )
        messages.append({"role": "assistant", "content": rng.choice(ANSWERS)})
    messages.append({"role": "user", "content": rng.choice(TASKS_EN if lang() == "en" else TASKS_ZH)})
    return Session(messages, [marker for marker, _ in constraints])


def _sent_text(messages: list[dict], system: object = None) -> str:
    parts = [str(system or "")]
    for message in messages:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else str(content or ""))
    return "\n".join(parts)


def last_n(messages: list[dict], budget: int, n: int = 20) -> str:
    """``[system] + messages[-N:]``: what hand-written code does."""
    return _sent_text(messages[:1] + messages[-n:])


def truncate_front(messages: list[dict], budget: int) -> str:
    """Drop the oldest messages (after the system prompt) until the exact count fits."""
    start = 1
    while start < len(messages) and TOK.count_messages(messages[:1] + messages[start:]) > budget:
        start += 1
    # Never start on tool results whose call was cut off.
    while start < len(messages) and messages[start]["role"] == "tool":
        start += 1
    return _sent_text(messages[:1] + messages[start:])


def shape(messages: list[dict], budget: int) -> str:
    result = shape_history(messages, budget)
    return _sent_text(result.messages, result.system)


def weighted(messages: list[dict], budget: int) -> str:
    result = WeightedWindow().select(messages, budget)
    return _sent_text(result.messages, result.system)


def builder(messages: list[dict], budget: int) -> str:
    result = PriorityAssembly(anchoring=True).select(messages, budget)
    return _sent_text(result.messages, result.system)


POLICIES: dict[str, Callable[[list[dict], int], str]] = {
    "messages[-20:]": last_n,
    "truncate from the front": truncate_front,
    "shape_history": shape,
    "WeightedWindow": weighted,
    "PriorityAssembly (anchoring)": builder,
}


def continuity(sessions: list[Session], policy: Callable[[list[dict], int], str], budget: int) -> float:
    """The share of sessions whose newest tool result and last three turns
    (from the third newest user message on) are all in view, each found by
    the start of its text (a capped result keeps its start)."""
    whole = 0
    for s in sessions:
        sent = policy(s.messages, budget)
        starts = [i for i, m in enumerate(s.messages) if m["role"] == "user"]
        wanted = list(range(starts[-3], len(s.messages)))
        tools = [i for i, m in enumerate(s.messages) if m["role"] == "tool"]
        if tools:
            wanted.append(tools[-1])
        texts = [s.messages[i]["content"] for i in wanted if isinstance(s.messages[i]["content"], str)]
        whole += all(text[:60] in sent for text in texts if text.strip())
    return whole / len(sessions)


def retention(sessions: list[Session], policy: Callable[[list[dict], int], str], budget: int) -> float:
    """The share of all planted constraints the policy keeps in view."""
    kept = total = 0
    for s in sessions:
        sent = policy(s.messages, budget)
        kept += sum(marker in sent for marker in s.markers)
        total += len(s.markers)
    return kept / total
