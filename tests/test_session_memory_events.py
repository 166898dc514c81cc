"""The memory store's writes a session's turns make due: what a message
says worth keeping and each failed tool call, written in the background as
the session goes (found by a later turn, kept by a process that dies),
never on the turn's own thread and never while a turn is in progress."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from context_core import AsyncSession, MemoryStore, MessageLog, Session
from context_core.memory_store import HashingEmbedder
from context_core.session import memory_events
from context_core.session.memory_events import MemoryEvents, error_line
from killed import reports_until_killed
from limits import in_child

RULE = "Never deploy the payments service on Fridays."


def new_store(where: Path) -> MemoryStore:
    return MemoryStore(where, embedder=HashingEmbedder(), durability="normal")


def open_session(tmp_path: Path, store: Any, **options: Any) -> Session:
    options.setdefault("compact", False)
    return Session.open(
        tmp_path / "session", model="gpt-4o", identity="You are an agent.", store=store, **options
    )


def call(call_id: str, name: str = "run_shell") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_a_rule_stated_early_is_in_the_store_while_the_session_goes_on(tmp_path):
    store = new_store(tmp_path / "m.db")
    with open_session(tmp_path, store) as session:
        session.prepare(f"{RULE} Now look at the refund job.")
        session.record({"role": "assistant", "content": "I will keep to that."})
        assert session.join(timeout=30)
        # Another handle on the file (another process, say) finds it before the session ends.
        with new_store(tmp_path / "m.db") as other:
            assert next(hit.memory.text for hit in other.search("deploy on Fridays", k=3)) == RULE
        request = session.prepare("Can we ship the payments release today, Friday?")
        assert request.report.memories >= 1
        assert RULE in str(request["messages"][0]["content"])


def test_a_failed_tool_call_is_stored_as_a_lesson_and_a_good_one_is_not(tmp_path):
    store = new_store(tmp_path / "m.db")
    with open_session(tmp_path, store) as session:
        session.prepare("Run the test suite.")
        session.record(
            {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2", "read_file")]}
        )
        session.record_tool_result(
            "c1", "\n  pytest timed out after 600 s\n" + "trace line\n" * 500, is_error=True
        )
        session.record_tool_result("c2", "def refund(): ...")
        assert session.join(timeout=30)
        lessons = [h.memory for h in store.search("pytest timed out", k=5, kinds=["procedural"])]
        assert [m.text for m in lessons] == ["run_shell failed: pytest timed out after 600 s"]
        assert store.count() == 1  # the good result and the plain request left nothing


def test_a_long_or_structured_error_is_kept_to_its_first_line():
    assert error_line("\n\n  first   \nsecond") == "first"
    assert error_line("x" * 1000) == "x" * memory_events.ERROR_CHARS
    assert error_line([{"type": "image"}, {"type": "text", "text": "boom\nmore"}]) == "boom"
    assert error_line({"error": "rate limited"}) == '{"error": "rate limited"}'
    assert error_line(None) == "null"


class Recorder:
    def __init__(self, fail_first: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail_first = fail_first

    def search(self, query: str, **options: Any) -> list[Any]:
        return []

    def conversation_ended(self, messages: Any, *, namespace: Any, source: Any) -> None:
        if self.fail_first:
            self.fail_first = False
            raise OSError("disk full")
        self.calls.append((threading.current_thread().name, messages[0]["content"]))


def test_writes_run_on_the_worker_and_wait_for_the_turn_in_progress(monkeypatch):
    monkeypatch.setattr(memory_events, "TURN_WAIT", 30.0)  # a turn that never ends is not this test
    recorder = Recorder()
    events = MemoryEvents(recorder, "default", None)
    with events.turn():
        events.message({"role": "user", "content": "first"}, None)
        assert events.join(timeout=0.05) is False  # held while the turn runs
        assert recorder.calls == []
        assert events.pending == 1
    assert events.join(timeout=30)
    events.message({"role": "user", "content": "second"}, None)
    assert events.join(timeout=30)
    assert recorder.calls == [
        ("context_core memory events", "first"),
        ("context_core memory events", "second"),
    ]
    events.close()
    events.message({"role": "user", "content": "after close"}, None)  # ignored
    assert events.pending == 0


class Watching(Recorder):
    """Notes each write's text and whether a call was in progress then."""

    def __init__(self) -> None:
        super().__init__()
        self.session: Session | None = None
        self.seen: list[tuple[str, bool]] = []

    def conversation_ended(self, messages: Any, *, namespace: Any, source: Any) -> None:
        assert self.session is not None
        assert self.session._events is not None
        self.seen.append((messages[0]["content"], bool(self.session._events._in_turn)))


def written_soon(session: Session, store: Watching, count: int, timeout: float) -> bool:
    """Whether ``count`` writes are done within ``timeout`` seconds (no join: that would run them)."""
    assert session._events is not None
    with session._events._state:
        return session._events._state.wait_for(lambda: len(store.seen) >= count, timeout)


def test_a_write_made_due_between_calls_waits_for_the_next_call_to_end(tmp_path, monkeypatch):
    """A reply's write would otherwise still run as the next call began (a
    tool's result comes back in milliseconds), the two threads taking turns
    with the interpreter: it waits for that call to end."""
    monkeypatch.setattr(memory_events, "NEXT_TURN_WAIT", 60.0)
    store = Watching()
    session = store.session = open_session(tmp_path, store)
    session.prepare("First question.")
    assert written_soon(session, store, 1, 30)  # the input's own: after its call, with no join
    session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
    session.record_tool_result("c1", "exit status 2", is_error=True)
    assert not written_soon(session, store, 2, 0.2)  # the tool is running, then the next call
    session.prepare()
    assert written_soon(session, store, 2, 30)
    assert session.join(timeout=30)
    assert store.seen == [("First question.", False), (None, False)]
    session.close()


def test_a_write_made_due_between_calls_runs_when_no_call_comes(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_events, "NEXT_TURN_WAIT", 0.05)
    store = Watching()
    session = store.session = open_session(tmp_path, store)
    session.prepare("First question.")
    session.record({"role": "assistant", "content": "An answer."})
    assert written_soon(session, store, 2, 30)  # a session left idle still writes
    assert store.seen == [("First question.", False), ("An answer.", False)]
    session.close()


def test_a_failed_write_is_made_again_by_the_close_and_the_next_still_runs(tmp_path):
    recorder = Recorder(fail_first=True)
    session = open_session(tmp_path, recorder)
    session.prepare("You must keep the order_id.")
    session.record({"role": "assistant", "content": "Yes."})
    assert session.join(timeout=30)
    assert isinstance(session._events.error, OSError)
    assert [text for _, text in recorder.calls] == ["Yes."]
    session.close()  # the failed one written again, in the close's own call
    assert [text for _, text in recorder.calls] == ["Yes.", "You must keep the order_id."]


def test_what_the_worker_did_not_write_goes_at_the_close(tmp_path, monkeypatch):
    """Messages the caller appended to the log itself, and writes a close
    without waiting dropped, go to the store at the close: none is marked
    learned without having been written."""
    monkeypatch.setattr(memory_events, "TURN_WAIT", 30.0)
    calls: list[list[str]] = []

    class Whole(Recorder):
        def conversation_ended(self, messages: Any, *, namespace: Any, source: Any) -> None:
            calls.append([m["content"] for m in messages])

    session = open_session(tmp_path, Whole())
    session.log.append({"role": "user", "content": "Appended by the server itself."})
    with session._events.turn():  # the worker waits: nothing written before the close
        session.prepare("You must keep the order_id.")
        session.record({"role": "assistant", "content": "Yes."})
        session.close(wait=False)
    assert calls == [["Appended by the server itself.", "You must keep the order_id.", "Yes."]]
    assert not session._events.taken()
    with MessageLog.open(tmp_path / "session" / "log") as log:
        assert learned_file(tmp_path) == len(log)


def test_a_store_with_only_tool_failed_still_closes(tmp_path):
    class ToolsOnly:
        def __init__(self) -> None:
            self.lessons: list[str] = []

        def search(self, query: str, **options: Any) -> list[Any]:
            return []

        def tool_failed(self, tool: str, error: str, **options: Any) -> None:
            self.lessons.append(f"{tool}: {error}")

    store = ToolsOnly()
    with open_session(tmp_path, store) as session:
        session.prepare("Run it.")
        session.record({"role": "assistant", "content": None, "tool_calls": [call("c1")]})
        session.record_tool_result("c1", "exit status 2", is_error=True)
    assert store.lessons == ["run_shell: exit status 2"]
    with MessageLog.open(tmp_path / "session" / "log") as log:
        assert learned_file(tmp_path) == len(log)


def test_an_open_that_fails_in_its_warm_up_leaves_the_marker(tmp_path):
    """A session killed before its close leaves its messages to the next
    close; an open that fails on the way must not mark them learned."""
    session = open_session(tmp_path, False)
    session._events = None
    session.prepare(RULE)
    session.record({"role": "assistant", "content": "Noted."})
    session._closed = True  # as a killed process leaves it: no close ran
    session.log.close()
    assert learned_file(tmp_path) == 0

    class Failing:
        def search(self, query: str, **options: Any) -> list[Any]:
            return []

        def preload(self, **options: Any) -> None:
            raise RuntimeError("not now")

    with pytest.raises(RuntimeError, match="not now"):
        open_session(tmp_path, Failing())
    assert learned_file(tmp_path) == 0
    open_session(tmp_path, False).close()
    assert "payments service on Fridays" in (tmp_path / "session" / "memory" / "MEMORY.md").read_text()


def test_close_without_persisting_drops_the_writes_not_started(monkeypatch):
    monkeypatch.setattr(memory_events, "TURN_WAIT", 30.0)
    recorder = Recorder()
    events = MemoryEvents(recorder, "default", None)
    with events.turn():
        events.message({"role": "user", "content": "one"}, None)
        events.message({"role": "user", "content": "two"}, None)
        events.close(wait=False, timeout=30)
    assert recorder.calls == []
    assert events.pending == 0


def test_what_was_written_before_a_kill_is_kept(tmp_path):
    """The child states a rule, waits for the write and reports it, then
    hangs until SIGKILL: no close ever runs, and the rule is stored."""

    def work(report_fd: int) -> None:
        session = open_session(tmp_path, new_store(tmp_path / "m.db"))
        session.prepare(RULE)
        session.record({"role": "assistant", "content": "Noted."})
        if session.join(timeout=30):
            os.write(report_fd, (1).to_bytes(8, "little"))
        time.sleep(60)

    reported = reports_until_killed(work, after=6.0)
    assert reported == [1]
    with new_store(tmp_path / "m.db") as store:
        assert RULE in [hit.memory.text for hit in store.search("deploy Fridays", k=3)]


def test_the_async_session_joins_and_drains_the_writes(tmp_path):
    async def main() -> None:
        session = await AsyncSession.open(
            tmp_path / "session",
            model="gpt-4o",
            identity="You are an agent.",
            store=new_store(tmp_path / "m.db"),
            compact=False,
        )
        await session.prepare(RULE)
        await session.record({"role": "assistant", "content": "Noted."})
        assert await session.join(timeout=30)
        await session.prepare("Always run the linter before a commit.")
        await session.record({"role": "assistant", "content": "Will do."})
        await session.aclose()  # drains the second input's write

    asyncio.run(main())
    with new_store(tmp_path / "m.db") as store:
        texts = {hit.memory.text for hit in store.search("deploy Fridays linter commit", k=10)}
    assert {RULE, "Always run the linter before a commit."} <= texts


# --- what a session that ended without learning leaves to the next ------------------------------


def learned_file(tmp_path: Path) -> int:
    return int((tmp_path / "session" / "learned").read_text())


def test_a_killed_sessions_messages_are_learned_by_the_next_close(tmp_path):
    """The child logs a rule (no store: nothing learned as it goes) and is
    killed before any close. The next session learns it at its close, into
    MEMORY.md and the store, and records the log as learned from."""

    def work(report_fd: int) -> None:
        session = open_session(tmp_path, False)
        session.prepare(RULE)
        session.record({"role": "assistant", "content": "Noted."})
        os.write(report_fd, (1).to_bytes(8, "little"))
        time.sleep(60)

    assert reports_until_killed(work, after=4.0) == [1]
    assert learned_file(tmp_path) == 0  # opened, never closed
    store = new_store(tmp_path / "m.db")
    session = open_session(tmp_path, store)
    assert not (tmp_path / "session" / "memory" / "MEMORY.md").exists()
    session.close()
    assert (
        "deploy the payments service on Fridays"
        in (tmp_path / "session" / "memory" / "MEMORY.md").read_text()
    )
    assert RULE in [hit.memory.text for hit in store.search("deploy Fridays", k=3)]
    with MessageLog.open(tmp_path / "session" / "log") as log:
        assert learned_file(tmp_path) == len(log)


def test_a_block_that_raised_leaves_its_messages_to_the_next_close(tmp_path):
    recorder = Recorder()

    def turn_that_fails() -> None:
        with open_session(tmp_path, recorder) as session:
            session._events = None  # nothing learned as it goes: only the close could have
            session.prepare("You must keep the order_id.")
            session.record({"role": "assistant", "content": "Yes."})
            raise RuntimeError("the server's own failure")

    with pytest.raises(RuntimeError):
        turn_that_fails()
    assert recorder.calls == []
    assert learned_file(tmp_path) == 0
    session = open_session(tmp_path, recorder)
    session.prepare("Next question.")
    session.record({"role": "assistant", "content": "An answer."})
    session.close()
    # This session's own messages went as the turns did; the earlier two at the close, once.
    texts = [text for _, text in recorder.calls]
    assert sorted(texts) == sorted(["Next question.", "An answer.", "You must keep the order_id."])
    assert "order_id" in (tmp_path / "session" / "memory" / "MEMORY.md").read_text()


def test_closing_without_persisting_means_never_learned(tmp_path):
    recorder = Recorder()
    session = open_session(tmp_path, recorder)
    session._events = None
    session.prepare("You must keep the order_id.")
    session.record({"role": "assistant", "content": "Yes."})
    session.close(persist=False)
    with MessageLog.open(tmp_path / "session" / "log") as log:
        assert learned_file(tmp_path) == len(log)
    open_session(tmp_path, recorder).close()
    assert recorder.calls == []
    assert not (tmp_path / "session" / "memory" / "MEMORY.md").exists()


def test_a_store_that_joins_from_its_own_write_does_not_hang():
    answers: list[bool] = []

    class Calling(Recorder):
        def conversation_ended(self, messages: Any, *, namespace: Any, source: Any) -> None:
            answers.append(events.join(timeout=None))  # from the worker: at once, not forever

    events = MemoryEvents(Calling(), "default", None)
    events.message({"role": "user", "content": "x"}, None)
    assert events.join(timeout=30)
    assert answers == [False]
    events.close()


def test_an_exit_raised_by_a_write_is_kept_and_the_worker_goes_on():
    class Exiting(Recorder):
        def conversation_ended(self, messages: Any, *, namespace: Any, source: Any) -> None:
            if messages[0]["content"] == "exit":
                raise SystemExit(3)
            super().conversation_ended(messages, namespace=namespace, source=source)

    store = Exiting()
    events = MemoryEvents(store, "default", None)
    events.message({"role": "user", "content": "exit"}, None)
    events.message({"role": "user", "content": "after"}, None)
    assert events.join(timeout=30)
    assert isinstance(events.error, SystemExit)
    assert [text for _, text in store.calls] == ["after"]
    events.close()


def test_a_lesson_the_worker_did_not_write_is_written_by_the_close(tmp_path, monkeypatch):
    """A failed call's lesson dropped by a close without waiting, or whose
    write failed, is written by the close itself."""
    monkeypatch.setattr(memory_events, "TURN_WAIT", 30.0)

    class Lessons(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.lessons: list[str] = []
            self.refuse = 1

        def tool_failed(self, tool: str, error: str, **options: Any) -> None:
            if self.refuse:
                self.refuse -= 1
                raise OSError("busy")
            self.lessons.append(f"{tool}: {error}")

    store = Lessons()
    session = open_session(tmp_path, store)
    session.prepare("Run both.")
    session.record({"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2", "git_diff")]})
    session.record_tool_result("c1", "exit status 2", is_error=True)
    assert session.join(timeout=30)  # its write failed once
    assert store.lessons == []
    with session._events.turn():  # the second waits for the turn: the close drops it
        session.record_tool_result("c2", "fatal: bad revision", is_error=True)
        session.close(wait=False)
    assert store.lessons == ["run_shell: exit status 2", "git_diff: fatal: bad revision"]


def test_a_forked_child_closes_whatever_lock_it_copied():
    """The worker takes its lock at each wake: a fork at that moment copies
    it held, and a child that closed the writer (a session it inherited)
    blocked for good. The child gets a fresh lock and none of the parent's
    jobs (the parent writes them)."""
    recorder = Recorder()
    events = MemoryEvents(recorder, "default", None)
    events.message({"role": "user", "content": "before the fork"}, None)
    assert events.join(timeout=30)

    def in_the_child() -> tuple[int, bool, int]:
        left = events.pending
        events.message({"role": "user", "content": "in the child"}, None)
        joined = events.join(timeout=20)
        events.close()
        return left, joined, len(recorder.calls)

    with events._state:  # held, as the worker holds it at a wake
        events._jobs.append((lambda: None, 0, 0.0))  # and a job the parent will write
        outcome = in_child(in_the_child, seconds=20)  # stuck on the copied lock: killed by the alarm
    assert outcome == f"returned {(0, True, 2)!r}"  # none of the parent's jobs; its own written
    assert events.join(timeout=30)  # the parent's job, written by the parent
    events.close()
    assert [text for _, text in recorder.calls] == ["before the fork"]


class Lessons(Recorder):
    """Notes each lesson written."""

    def __init__(self) -> None:
        super().__init__()
        self.lessons: list[str] = []

    def tool_failed(self, tool: str, error: str, **options: Any) -> None:
        self.lessons.append(f"{tool}: {error}")


def test_a_failed_calls_lesson_does_not_wait_for_the_next_call(tmp_path, monkeypatch):
    """The lesson lives only in the writer until written (the log keeps the
    result, not the lesson): a process killed before the next call would
    lose it. It is written once the call that recorded it ends, before the
    reply's own write that waits ahead of it."""
    monkeypatch.setattr(memory_events, "NEXT_TURN_WAIT", 60.0)
    store = Lessons()
    session = open_session(tmp_path, store)
    session.prepare("Run the tests.")
    session.record({"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]})
    session.record_tool_result("c1", "exit status 2: pytest failed", is_error=True)
    events = session._events
    assert events is not None
    with events._state:  # no join, no next call: the writer alone
        assert events._state.wait_for(lambda: bool(store.lessons), 30)
    assert store.lessons == ["run_shell: exit status 2: pytest failed"]
    assert events.pending == 1  # the reply's write still waits for the next call
    session.close()


def test_an_interrupt_as_a_call_ends_leaves_no_call_in_progress(monkeypatch):
    """A Ctrl-C while the call's end takes the lock left the call counted
    for good: the jobs added after it were never woken for."""
    recorder = Recorder()
    events = MemoryEvents(recorder, "default", None)
    end_turn = MemoryEvents._end_turn
    interrupted = []

    def once_interrupted(self: MemoryEvents, token: object, preparing: bool) -> None:
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        end_turn(self, token, preparing)

    monkeypatch.setattr(MemoryEvents, "_end_turn", once_interrupted)
    with pytest.raises(KeyboardInterrupt), events.turn(preparing=True):
        pass
    assert interrupted
    assert not events._in_turn
    assert events._prepared == 1
    events.message({"role": "user", "content": "after"}, None)
    with events._state:  # woken for at once: no join
        assert events._state.wait_for(lambda: bool(recorder.calls), 30)
    events.close()
