"""Generated memories shaped like an agent's: preferences, task records and
tool lessons of 20-200 words, English with some Chinese, each naming its
own id (``A-01234``, ``PAY-1234``, ``order_1234``) and often a path. With
them come the queries of the retrieval benchmarks:

- entity queries name one memory's id or path, phrased far from its text
  (few words in common, so a low cosine);
- paraphrase queries restate one of :data:`GISTS` in other words, with no
  entity; each gist is planted in exactly one memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["GISTS", "Corpus", "corpus"]

_TOPICS = """refund retry payment invoice checkout webhook ledger settlement chargeback payout
    deploy release rollback canary migration schema index replica backup failover
    test fixture flaky timeout mock coverage lint build cache artifact pipeline
    prompt context summary memory budget token window tool agent session trace""".split()  # noqa: SIM905
_GLUE = """the a of to and in for with on after before because while then so that it we they
    was is were are had has been will would should could again also only still""".split()  # noqa: SIM905
_CHINESE = (
    "需要在周五之前完成",
    "用户说这个问题很紧急",
    "我们已经修复了重试逻辑",
    "日志显示连接超时",
    "测试在本地可以通过",
    "部署以后监控正常",
    "请不要修改数据库结构",
    "这个接口返回了错误",
)
_NAMES = ("Alice Chen", "Bob Li", "Carol Wang", "Dmitri Petrov", "Erin Walsh", "Farah Khan")
_TOOLS = ("pytest", "kubectl", "terraform", "psql", "git", "npm", "cargo", "curl")

#: ``(fact, paraphrase)``: the fact goes in one memory, the paraphrase is
#: the query; they share almost no words.
GISTS: tuple[tuple[str, str], ...] = (
    ("deploys never happen on Fridays", "can we ship at the end of the week"),
    ("the user prefers tabs over spaces", "what indentation style do they like"),
    ("answers should be short and direct", "how verbose should replies be"),
    ("staging uses port 5433 for postgres", "which port does the test database listen on"),
    ("the nightly job runs at two in the morning", "when does the scheduled batch start"),
    ("never push directly to the main branch", "may I commit straight to trunk"),
    ("the team writes commit messages in English", "which language for change descriptions"),
    ("invoices are generated on the first day of each month", "when do bills get created"),
    ("refunds above 500 euros need a manager", "who approves large reimbursements"),
    ("the service is written in Go", "what programming language is the backend in"),
    ("logs are kept for thirty days", "how long is log retention"),
    ("the user is based in Berlin", "where does the customer live"),
    ("the user is allergic to peanuts", "any food the person cannot eat"),
    ("code reviews need two approvals before merging", "how many sign-offs does a pull request require"),
    ("the mobile app supports dark mode", "can the phone client switch to a night theme"),
    ("customer data must stay inside the European Union", "where are we allowed to store client records"),
    ("the on-call rotation changes every Monday", "when does the pager duty hand over"),
    ("passwords are rotated every ninety days", "how often do credentials expire"),
    ("the user likes examples before explanations", "should I show a sample first or explain first"),
    ("the frontend is built with React", "which UI library does the web client use"),
    ("the office closes at six in the evening", "until what hour is the building open"),
    ("support tickets are answered within four hours", "how fast must we respond to help requests"),
    ("the user's manager is called Priya", "who does this person report to"),
    ("the build server has thirty-two cores", "how much CPU does the CI machine have"),
    ("feature flags are removed after two releases", "how long do toggles stay in the code"),
    ("the user wants bullet points instead of paragraphs", "what layout do they prefer for answers"),
    ("production runs on three availability zones", "how is the live system spread for redundancy"),
    ("the analytics warehouse refreshes hourly", "how stale can the reporting data be"),
    ("contractors may not access the billing system", "can outside workers see payment records"),
    ("the user speaks Spanish at home", "what is their native tongue"),
    ("load tests run every Wednesday night", "when is the performance check scheduled"),
    ("the team uses metric units in all documents", "kilometres or miles in the specs"),
    ("the cat is named Miso", "what is the pet called"),
    ("the user's laptop is a ThinkPad running Linux", "what computer and operating system do they use"),
    ("design reviews happen before any new table is added", "do schema changes need sign-off first"),
    ("coffee orders go through the shared spreadsheet", "how do people request drinks for the office"),
    ("the user prefers video calls over phone calls", "how do they like to meet"),
    ("the quarterly report is due on the fifteenth", "when must the three-month summary be submitted"),
    ("emails to customers must be reviewed by legal", "who checks messages before they go to clients"),
    ("the API allows a hundred requests per minute", "how many calls can a client make before throttling"),
    ("backups are copied to a second region nightly", "is there an off-site copy of our data"),
    ("the user is learning Japanese", "which foreign language are they studying"),
    ("用户喜欢简短的回答", "这个人希望回复写多长"),
    ("周末不要发布新版本", "星期六可以上线吗"),
    ("数据库每天凌晨备份一次", "资料多久存档一次"),
    ("客户的时区是东八区", "对方在哪个时间带"),
    ("新员工第一周要完成安全培训", "入职时必须上什么课"),
)


@dataclass(frozen=True)
class Corpus:
    texts: list[str]
    kinds: list[str]
    entity_queries: list[tuple[str, int]]
    """``(query, index of the memory it names)``."""
    paraphrase_queries: list[tuple[str, int]]


def _filler(rng: random.Random, words: int) -> str:
    out = []
    for _ in range(words):
        out.append(rng.choice(_TOPICS) if rng.random() < 0.55 else rng.choice(_GLUE))
    return " ".join(out)


def _identity(i: int) -> str:
    return (f"A-{i:05d}", f"PAY-{i}", f"order_{i}")[i % 3]


def corpus(n: int, *, seed: int = 0, queries: int = 200) -> Corpus:
    """``n`` memories and their queries, the same for the same seed."""
    rng = random.Random(seed)
    texts, kinds, paths = [], [], {}
    planted = {rng.randrange(n): g for g in range(len(GISTS))} if n >= len(GISTS) else {}
    for i in range(n):
        kind = ("semantic", "episodic", "procedural")[i % 3]
        ident = _identity(i)
        path = f"services/{rng.choice(_TOPICS)}/{rng.choice(_TOPICS)}_{i}.go" if i % 4 == 0 else None
        words = rng.randint(14, 190)
        if kind == "semantic":
            head = f"{rng.choice(_NAMES)} said about {ident}:"
        elif kind == "episodic":
            head = f"Finished the work on {ident}:"
        else:
            head = f"{rng.choice(_TOOLS)} failed for {ident} with a timeout of {rng.randint(5, 900)} s:"
        parts = [head, _filler(rng, words)]
        if path is not None:
            parts.append(f"see {path}")
            paths[i] = path
        if rng.random() < 0.2:
            parts.append(rng.choice(_CHINESE) + "。")
        if i in planted:
            parts.insert(1, GISTS[planted[i]][0] + ".")
        texts.append(" ".join(parts))
        kinds.append(kind)
    entity_queries = []
    for _ in range(queries):
        i = rng.randrange(n)
        if i in paths and rng.random() < 0.5:  # the path as a user might type it
            entity_queries.append((f"what changed in {paths[i].title()}", i))
        else:
            entity_queries.append((f"any news about {_identity(i)}?", i))
    paraphrase_queries = [(GISTS[g][1], i) for i, g in sorted(planted.items(), key=lambda p: p[1])]
    return Corpus(texts, kinds, entity_queries, paraphrase_queries)
