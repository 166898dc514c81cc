"""Compaction's worker and the agent's turns: while a turn runs the worker
waits at its yields, a turn that starts mid-stage waits for the next one,
and neither can stall the other for long."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from context_core import CallableLLM, MessageLog, Session
from context_core.compaction import Compactor
from context_core.compaction import compactor as module
from context_core.session.memory_events import MemoryEvents
from context_core.summarize import Summarizer
from limits import in_child


def _log(tmp_path: Path, turns: int = 20) -> MessageLog:
    log = MessageLog.open(tmp_path / "log", create=True)
    log.append({"role": "system", "content": "You are an agent."})
    for t in range(turns):
        log.append_many(
            [
                {"role": "user", "content": f"Task {t}: look at item-{t}."},
                {"role": "assistant", "content": f"Item-{t} is done."},
            ]
        )
    return log


def _reply(messages) -> str:
    return (
        "<summary>\nConstraints:\n- none\nDecisions:\n- done\n"
        "Current state:\n- ok\nNext steps:\n- go on\n</summary>"
    )


def _joined(thread: threading.Thread, seconds: float = 20.0) -> bool:
    thread.join(seconds)
    return not thread.is_alive()


def test_the_worker_waits_while_a_turn_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "TURN_WAIT", 60.0)
    asked = threading.Event()

    def model(messages):
        asked.set()
        return _reply(messages)

    log = _log(tmp_path)
    compactor = Compactor(log, Summarizer(CallableLLM(model)))
    with compactor.turn():
        assert compactor.schedule()
        time.sleep(0.2)  # the worker is started and parked at its first yield
        assert not asked.is_set()
        assert compactor.status.written == {2: 0, 3: 0}
    compactor.close(wait=True)
    assert asked.is_set()
    assert compactor.status.written[2] >= 1
    log.close()


def test_a_turn_that_starts_mid_stage_waits_for_the_next_yield(monkeypatch):
    monkeypatch.setattr(module, "STAGE_WAIT", 60.0)
    monkeypatch.setattr(module, "TURN_WAIT", 60.0)
    gate = module._TurnGate()
    order: list[str] = []
    in_stage, go_on, in_turn, end_turn = (threading.Event() for _ in range(4))

    def worker():
        with gate.working():
            order.append("stage")
            in_stage.set()
            go_on.wait(20)
            order.append("yield")
            gate.wait()  # parked here while the turn runs
            order.append("resumed")

    def turn():
        in_stage.wait(20)
        with gate.held():
            order.append("turn")
            in_turn.set()
            end_turn.wait(20)
            order.append("turn ended")

    threads = [threading.Thread(target=worker), threading.Thread(target=turn)]
    for thread in threads:
        thread.start()
    in_stage.wait(20)
    time.sleep(0.1)
    assert not in_turn.is_set()  # the worker is mid-stage: the turn waits
    go_on.set()
    assert in_turn.wait(20)
    time.sleep(0.1)
    assert "resumed" not in order  # the turn runs: the worker waits
    end_turn.set()
    assert all(_joined(thread) for thread in threads)
    assert order == ["stage", "yield", "turn", "turn ended", "resumed"]


def test_a_worker_quiet_for_longer_than_a_stage_is_not_waited_for():
    """A worker waiting on the model's reply holds no interpreter: a turn
    must not wait for it."""
    now = [0.0]
    gate = module._TurnGate(clock=lambda: now[0])
    ready, finish = threading.Event(), threading.Event()

    def worker():
        with gate.working():
            ready.set()
            finish.wait(20)  # "the model call"

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait(20)
    now[0] += module.STAGE_WAIT * 2
    entered = threading.Event()

    def turn():
        with gate.held():
            entered.set()

    turner = threading.Thread(target=turn)
    turner.start()
    assert entered.wait(10)  # with the clock stopped, waiting would never end
    finish.set()
    assert _joined(thread)
    assert _joined(turner)


def test_a_thread_in_its_own_turn_compacts_without_waiting_for_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "TURN_WAIT", 60.0)
    log = _log(tmp_path)
    compactor = Compactor(log, Summarizer(CallableLLM(_reply)))
    outcome = []

    def run():
        with compactor.turn():
            outcome.append(compactor.compact())

    thread = threading.Thread(target=run)
    thread.start()
    assert _joined(thread, 10)  # a wait for its own turn would last a minute per yield
    assert outcome[0].status == "written"
    log.close()


def test_a_turn_never_ended_delays_compaction_only_by_turn_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "TURN_WAIT", 0.01)
    log = _log(tmp_path)
    compactor = Compactor(log, Summarizer(CallableLLM(_reply)))
    stuck = compactor.turn()
    stuck.__enter__()  # a caller that never leaves its turn
    try:
        assert compactor.schedule()
        assert compactor._thread is not None
        assert compactor.join(20)
        assert compactor.status.written[2] >= 1
    finally:
        stuck.__exit__(None, None, None)
        compactor.close()
        log.close()


@pytest.mark.parametrize("step", ["prepare", "record"])
def test_the_session_holds_the_turn_for_prepare_and_record(tmp_path, step):
    session = Session.open(tmp_path / "s", model="gpt-4o", identity="You are an agent.", store=False)
    assert session.compactor is not None
    held: list[str] = []
    turn = session.compactor.turn

    @contextlib.contextmanager
    def watched():
        with turn():
            held.append("in")
            yield
            held.append("out")

    session.compactor.turn = watched  # type: ignore[method-assign]
    session.prepare("Fix the refund job.")
    if step == "record":
        held.clear()
        session.record({"role": "assistant", "content": "Done."})
    assert held == ["in", "out"]
    assert not session.compactor._gate._holders  # released
    session.close(persist=False)


def test_one_worker_thread_runs_every_drain_and_ends_at_the_close(tmp_path):
    """Starting a thread for each drain cost the turn that scheduled it
    0.1-0.25 ms: the worker is kept, and woken for the next."""
    log = _log(tmp_path, turns=40)
    compactor = Compactor(log, Summarizer(CallableLLM(_reply)), recent_turns=2, segment_turns=3)
    assert compactor.schedule()
    assert compactor.join(20)
    worker = compactor._thread
    assert worker is not None
    assert worker.is_alive()  # idle, waiting for the next drain
    written = compactor.status.written[2]
    assert written >= 1
    for t in range(40, 60):
        log.append_many(
            [
                {"role": "user", "content": f"Task {t}: look at item-{t}."},
                {"role": "assistant", "content": f"Item-{t} is done."},
            ]
        )
    assert compactor.schedule()
    assert compactor.join(20)
    assert compactor._thread is worker
    assert compactor.status.written[2] > written
    compactor.close()
    assert not worker.is_alive()
    log.close()


def _stubbed(tmp_path: Path) -> tuple[MessageLog, Compactor, list[int]]:
    """A compactor whose drains only note the process they ran in (every
    schedule() finds one due), its log, and that list."""
    import os

    log = _log(tmp_path)
    compactor = Compactor(log, Summarizer(CallableLLM(_reply)))
    drains: list[int] = []
    compactor._drain = lambda: drains.append(os.getpid())  # type: ignore[method-assign]
    compactor._cannot_be_due = lambda: False  # type: ignore[method-assign]
    compactor._waiting = lambda: None  # type: ignore[method-assign]
    return log, compactor, drains


def test_a_forked_child_starts_its_own_worker_whatever_lock_it_copied(tmp_path):
    """The parent's worker does not exist in a forked child, and the child
    may copy the compactor's lock while the worker holds it (it takes it at
    each wake) and a drain flag set: the child gets a fresh lock, and its
    first drain starts a worker of its own."""
    log, compactor, drains = _stubbed(tmp_path)
    assert compactor.schedule()
    assert compactor.join(20)
    parent_worker = compactor._thread

    def in_the_child() -> tuple[bool, bool, bool, int]:
        started = compactor.schedule()
        joined = compactor.join(20)
        return started, joined, compactor._thread is not parent_worker, len(drains)

    with compactor._state:  # held, as the worker holds it at a wake
        compactor._draining = True  # and a drain running
        # A child stuck on the copied lock is killed by the alarm.
        outcome = in_child(in_the_child, seconds=20)
        compactor._draining = False
    assert outcome == f"returned {(True, True, True, 2)!r}"  # one drain inherited, one the child's own
    compactor.close()
    log.close()


def test_a_drain_that_raises_anything_leaves_the_worker_running(tmp_path):
    """A summarizer that raises a BaseException (a cancel, an exit) ended the
    worker; a schedule() in its last moments was then never run."""
    import asyncio

    log, compactor, drains = _stubbed(tmp_path)

    def cancelled() -> None:
        drains.append(-1)
        raise asyncio.CancelledError

    compactor._drain = cancelled  # type: ignore[method-assign]
    assert compactor.schedule()
    assert compactor.join(20)
    worker = compactor._thread
    assert worker is not None
    assert worker.is_alive()
    compactor._drain = lambda: drains.append(1)  # type: ignore[method-assign]
    assert compactor.schedule()
    assert compactor.join(20)
    assert drains == [-1, 1]
    assert compactor._thread is worker
    compactor.close()
    log.close()


def test_an_idle_worker_ends_and_the_next_drain_starts_another(tmp_path, monkeypatch):
    """A server holding many sessions open keeps a thread only for those
    that compacted lately."""
    monkeypatch.setattr(module, "IDLE_EXIT", 0.05)
    log, compactor, drains = _stubbed(tmp_path)
    assert compactor.schedule()
    assert compactor.join(20)
    first = compactor._thread
    assert first is not None
    assert _joined(first)  # ended once idle
    assert compactor._thread is None
    assert compactor.schedule()
    assert compactor.join(20)
    assert compactor._thread is not None
    assert compactor._thread is not first
    assert len(drains) == 2
    compactor.close()
    log.close()


def test_a_compactor_dropped_without_a_close_is_freed_and_its_worker_ends(tmp_path):
    """The kept worker holds its compactor only while it drains: one
    dropped without a close is collected (its log's lock with it, for a
    session's), and the worker ends."""
    import gc
    import weakref

    log = _log(tmp_path)
    compactor = Compactor(log, Summarizer(CallableLLM(_reply)))
    assert compactor.schedule()
    assert compactor.join(20)
    worker = compactor._thread
    assert worker is not None
    gone = weakref.ref(compactor)
    del compactor
    gc.collect()
    assert gone() is None
    assert _joined(worker)
    log.close()


def test_a_ctrl_c_while_a_turn_waits_for_a_stage_leaves_no_turn_held():
    """A turn that starts mid-stage waits (the clock frozen here: until
    interrupted); a Ctrl-C there left it held for good, and every yield of
    every later drain waited TURN_WAIT."""
    import _thread

    gate = module._TurnGate(clock=lambda: 0.0)
    gate._working[-1] = 0.0  # a worker mid-stage
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt), gate.held():
        pass
    timer.join()
    assert gate._holders == {}


def test_an_interrupt_as_a_turn_ends_leaves_no_turn_held(monkeypatch):
    gate = module._TurnGate()
    let_go = module._TurnGate._let_go
    interrupted = []

    def once_interrupted(self: module._TurnGate, token: object) -> None:
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        let_go(self, token)

    monkeypatch.setattr(module._TurnGate, "_let_go", once_interrupted)
    with pytest.raises(KeyboardInterrupt), gate.held(), gate.held():  # nested: one token each
        pass
    assert interrupted
    assert gate._holders == {}


def test_a_joiner_is_woken_even_when_logging_the_drains_error_fails(tmp_path):
    """The worker's last word (no drain running) came after its log line: a
    logging filter that raised ended the worker without it, and join()
    waited for good."""
    import logging

    class Failing(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise RuntimeError("a filter's own bug")

    log, compactor, drains = _stubbed(tmp_path)

    def failing() -> None:
        drains.append(-1)
        raise RuntimeError("the drain failed")

    compactor._drain = failing  # type: ignore[method-assign]
    logger = logging.getLogger("context_core.compaction")
    failing_filter = Failing()
    logger.addFilter(failing_filter)
    try:
        assert compactor.schedule()
        assert compactor.join(20)
    finally:
        logger.removeFilter(failing_filter)
    assert drains == [-1]
    assert compactor._thread is not None
    assert compactor._thread.is_alive()  # and still there for the next drain
    compactor.close()
    log.close()


def test_a_forked_child_drains_whatever_gate_or_log_lock_it_copied(tmp_path):
    """Every turn and each of a drain's yields take the gate's lock, and a
    drain holds its log's job lock for its whole model call: copied held,
    the child's drains blocked for good."""
    import os

    log, compactor, drains = _stubbed(tmp_path)

    def yielding() -> None:  # a drain takes the gate at its yields, and the log's job lock
        compactor._gate.wait()
        lock = module._log_lock(log)
        taken = lock.acquire(blocking=False)
        drains.append(os.getpid() if taken else -1)
        if taken:
            lock.release()

    compactor._drain = yielding  # type: ignore[method-assign]
    assert compactor.schedule()
    assert compactor.join(20)

    def in_the_child() -> tuple[bool, bool, bool, int]:
        with compactor.turn():
            pass
        started = compactor.schedule()
        joined = compactor.join(20)
        compactor.close()
        return started, joined, drains[-1] == os.getpid(), len(drains)

    with compactor._gate._state, module._log_lock(log):  # held at the fork
        outcome = in_child(in_the_child, seconds=20)  # stuck on a copied lock: killed by the alarm
    assert outcome == f"returned {(True, True, True, 2)!r}"
    compactor.close()
    log.close()


def test_a_forked_child_holds_none_of_the_turns_other_threads_were_in(tmp_path):
    """A compactor that never started a worker was not reset in a child: a
    turn another thread was in at the fork stayed held there for good, and
    each of the child's yields waited TURN_WAIT."""
    log = _log(tmp_path)
    compactor = Compactor(log, Summarizer(CallableLLM(_reply)))
    events = MemoryEvents(None, "default", None)
    inside, leave = threading.Event(), threading.Event()

    def in_a_turn() -> None:
        with compactor.turn(), events.turn():
            inside.set()
            leave.wait(20)

    other = threading.Thread(target=in_a_turn, daemon=True)
    other.start()
    assert inside.wait(20)
    outcome = in_child(lambda: (len(compactor._gate._holders), len(events._in_turn)), seconds=20)
    leave.set()
    other.join(20)
    assert outcome == f"returned {(0, 0)!r}"
    compactor.close()
    log.close()
