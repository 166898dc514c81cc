"""A 300-turn agent session replayed through a Session that is killed with
SIGKILL at random points, reopened and driven on from where its log stands:
no acknowledged message is lost, none is duplicated, and no summary is
half-written."""

from __future__ import annotations

import os
import random
from pathlib import Path

from context_core import MessageLog, Session
from killed import reports_until_killed

TURNS = 300
KILLS = 25
INPUT, CALL, RESULT, ANSWER = range(4)


def user_text(n: int) -> str:
    rule = " You must keep the order_id in every log line." if n == 0 else ""
    return f"Task {n}: look at item-{n} in payments/retry.go.{rule}"


def call_message(n: int) -> dict:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def result_text(n: int) -> str:
    return f"item-{n} = {n * 7}\n" + "log line order_id=ord_1 ok\n" * (n % 7 * 20)


def answer_text(n: int) -> str:
    return f"Item-{n} is {n * 7}."


def open_session(where: Path) -> Session:
    return Session.open(where, model="gpt-4o", store=False, identity="You are an agent.")


def where_it_stands(session: Session) -> tuple[int, int]:
    """The turn the log is in and the next step of it, from the log alone."""
    messages = session.history()
    inputs = [m for m in messages if m["role"] == "user"]
    if not inputs:
        return 0, INPUT
    n = len(inputs) - 1
    last = messages[-1]
    if last["role"] == "user":
        return n, CALL
    if last["role"] == "assistant" and last.get("tool_calls"):
        return n, RESULT
    if last["role"] == "tool":
        return n, ANSWER
    return n + 1, INPUT


def replay(where: Path, report_fd: int | None, until: int = TURNS) -> None:
    """Drive the session on from where its log stands; report each
    acknowledged message as ``seq * 4096 + n * 4 + kind``."""
    session = open_session(where)

    def acknowledge(n: int, kind: int) -> None:
        if report_fd is not None:
            assert session.last_seq is not None
            os.write(report_fd, (session.last_seq * 4096 + n * 4 + kind).to_bytes(8, "little"))

    n, step = where_it_stands(session)
    while n < until:
        if step == INPUT:
            session.prepare(user_text(n))
            acknowledge(n, INPUT)
        if step <= CALL:
            if step == CALL:
                session.prepare()  # the input was acknowledged before the kill: its reply is next
            session.record(call_message(n))
            acknowledge(n, CALL)
        if step <= RESULT:
            assert [c.id for c in session.pending] == [f"call_{n}"]  # recovered on reopen too
            session.record_tool_result(f"call_{n}", result_text(n))
            acknowledge(n, RESULT)
        session.prepare()
        session.record({"role": "assistant", "content": answer_text(n)})
        acknowledge(n, ANSWER)
        n, step = n + 1, INPUT
    session.close()


def expected(n: int, kind: int) -> dict:
    return [
        {"role": "user", "content": user_text(n)},
        call_message(n),
        {"role": "tool", "tool_call_id": f"call_{n}", "content": result_text(n)},
        {"role": "assistant", "content": answer_text(n)},
    ][kind]


def check(where: Path, acknowledged: list[int]) -> None:
    with MessageLog.open(where / "log") as log:
        log.verify()
        for report in acknowledged:
            seq, n, kind = report // 4096, report % 4096 // 4, report % 4
            stored = dict(log.read([seq])[0])
            stored.pop("timestamp", None)
            assert stored == expected(n, kind), f"acknowledged message {seq} (turn {n}) lost or changed"
        path = log.path()
        kinds = log.headers()["kind"]
        for payload in log.read([seq for seq in path if kinds[seq] == 1]):
            assert payload["summary"].startswith("Constraints:")  # whole, never half-written
        messages = [m for m in log.read(path) if isinstance(m, dict) and "role" in m]
        inputs = [m["content"] for m in messages if m["role"] == "user"]
        assert inputs == [user_text(n) for n in range(len(inputs))]  # none lost, none twice


def test_a_killed_session_goes_on_and_loses_nothing_acknowledged(tmp_path: Path):
    where = tmp_path / "session"
    open_session(where).close()  # the tokenizer loads here, not in each child
    rng = random.Random(11)
    acknowledged: list[int] = []
    for _ in range(KILLS):
        acknowledged += reports_until_killed(lambda fd: replay(where, fd), rng.uniform(0.01, 0.08))
        check(where, acknowledged)
    assert len(acknowledged) > 50
    replay(where, None)  # the rest, uninterrupted
    check(where, acknowledged)
    with open_session(where) as session:
        messages = session.history()
        assert sum(m["role"] == "user" for m in messages) == TURNS
        view = session.prepare("What rule holds?")
        assert "order_id" in str(view["messages"])  # the rule of turn 0 survived the compactions
        assert session.compactor.status.written or any(part != "raw" for _, part in session.log._view())
