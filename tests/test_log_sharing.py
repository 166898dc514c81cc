"""One log shared: by the threads of a server, and across fork() (a forked
worker inherits its parent's writer). Nothing acknowledged is overwritten,
nothing raises a bare KeyError, nothing hangs."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

import context_core.log
from context_core import LogClosedError, LogForkedError, LogLockedError, MessageLog, WeightedWindow, reference
from limits import in_child

LOGS = {"rust": MessageLog, "twin": reference.log.MessageLog}
impls = pytest.mark.parametrize("impl", LOGS.values(), ids=LOGS.keys())


def message(n: int) -> dict:
    return {"role": "user" if n % 2 else "assistant", "content": f"message {n}: " + "work " * (n % 13)}


# -- fork --------------------------------------------------------------------------------


@impls
@pytest.mark.parametrize("durability", ["batch", "never"])
def test_a_writer_inherited_across_fork_refuses_to_write_in_the_child(tmp_path, impl, durability):
    where = tmp_path / "log"
    log = impl.open(where, create=True, durability=durability)
    log.append_many([message(n) for n in range(10)])

    def child() -> list:
        said = []
        for attempt in (
            lambda: log.append(message(99)),
            lambda: log.append_many([message(98)]),
            lambda: log.rewind(3),
            lambda: log.add_summary("s", (0, 2)),
        ):
            try:
                attempt()
                said.append("wrote")
            except LogForkedError as error:
                pids = (error.opened_by, error.process) == (os.getppid(), os.getpid())
                said.append("refused" if pids and isinstance(error, LogClosedError) else repr(error))
        # Reads stay safe, the parent's writes included.
        said.append(len(log))
        said.append(log.read([0, 9]) == [message(0), message(9)])
        said.append(len(log.headers()))
        log.close()  # must neither hang on the parent's sync thread nor release its lock
        return said

    outcome = in_child(child, seconds=30)
    assert outcome == "returned ['refused', 'refused', 'refused', 'refused', 10, True, 10]"
    # The parent still holds the lock and keeps appending where it was.
    with pytest.raises(LogLockedError):
        impl.open(where)
    seqs = [log.append(message(n)) for n in range(10, 210)]
    assert seqs == list(range(10, 210))
    log.close()
    with impl.open(where) as reopened:
        reopened.verify()
        assert list(reopened) == [message(n) for n in range(210)]


@impls
def test_a_child_may_read_while_the_parent_appends(tmp_path, impl):
    where = tmp_path / "log"
    with impl.open(where, create=True) as log:
        log.append_many([message(n) for n in range(5)])

        def child() -> int:
            with impl.open(where, readonly=True) as reader:
                return len(reader)

        assert in_child(child, seconds=30) == "returned 5"
        log.append(message(5))
        assert len(log) == 6


def test_a_forked_child_left_to_exit_does_not_hang_or_write(tmp_path):
    """Garbage collection in the child drops the inherited writer: its close
    runs there, and must not join a sync thread the child does not have."""
    where = tmp_path / "log"
    log = MessageLog.open(where, create=True, durability="batch")
    log.append(message(0))
    meta_before = (where / "meta").read_bytes() if (where / "meta").exists() else None

    def child() -> str:
        nonlocal log
        del log  # the last reference in the child
        return "dropped"

    assert in_child(child, seconds=30) == "returned 'dropped'"
    meta_after = (where / "meta").read_bytes() if (where / "meta").exists() else None
    assert meta_after == meta_before
    log.append(message(1))
    log.close()
    with MessageLog.open(where, readonly=True) as reopened:
        assert list(reopened) == [message(0), message(1)]


# -- the decoded cache, large views and threads ---------------------------------------------------


def big(where: Path, count: int) -> list[dict]:
    messages = [message(n) for n in range(count)]
    with MessageLog.open(where, create=True, durability="never") as log:
        log.append_many(messages)
    return messages


def test_a_view_larger_than_the_decoded_cache_comes_back_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(context_core.log, "DECODED_CACHE", 64)
    where = tmp_path / "log"
    messages = big(where, 500)
    with MessageLog.open(where, readonly=True) as log:
        assert log.context_view() == messages
        assert log.context_view() == messages  # again, from a cache that could not hold it
        window = WeightedWindow(tool_result_cap=None).select(log, 10**9)
        assert len(window.messages) == 500
        assert len(log._decoded) == 64


def test_a_view_past_the_default_cache_size(tmp_path):
    where = tmp_path / "log"
    messages = big(where, context_core.log.DECODED_CACHE + 500)
    with MessageLog.open(where, readonly=True) as log:
        assert log.context_view() == messages


def test_threads_sharing_one_log(tmp_path, monkeypatch):
    """A server's thread pool: windows and views from many threads at once,
    with a writer among them, over a cache small enough to churn."""
    monkeypatch.setattr(context_core.log, "DECODED_CACHE", 32)
    where = tmp_path / "log"
    big(where, 300)
    log = MessageLog.open(where)
    failures: list[BaseException] = []
    start = threading.Barrier(9)

    def reader(k: int) -> None:
        try:
            start.wait()
            for i in range(40):
                if (i + k) % 2:
                    view = log.context_view()
                    assert view[:300] == [message(n) for n in range(300)]
                else:
                    kept = WeightedWindow(tool_result_cap=None).select(log, 4_000 + 97 * i).messages
                    assert kept
        except BaseException as error:
            failures.append(error)

    def writer() -> None:
        try:
            start.wait()
            for n in range(300, 400):
                assert log.append(message(n)) == n
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
    threads.append(threading.Thread(target=writer))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(log) == 400
    assert log.context_view() == [message(n) for n in range(400)]
    log.close()


@pytest.mark.parametrize("impl", [MessageLog], ids=["rust"])
def test_a_fork_while_another_thread_is_inside_a_call_cannot_hang_the_child(tmp_path, impl):
    """A thread in flush() holds the log's lock (fsync, the GIL released) while
    the main thread forks: in the child that thread does not exist and never
    lets go. The child's calls must answer or refuse, never wait forever."""
    where = tmp_path / "log"
    log = impl.open(where, create=True, durability="never")
    log.append_many([message(n) for n in range(200)])
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            log.flush()

    thread = threading.Thread(target=flusher)
    thread.start()
    outcomes = set()
    try:
        for n in range(30):
            log.append({"role": "user", "content": "dirty the page cache " * 200 + str(n)})

            def child() -> str:
                try:
                    return f"read {len(log)}"
                except LogForkedError:
                    return "refused"
                finally:
                    log.close()

            outcome = in_child(child, seconds=30)
            assert outcome.startswith("returned "), f"the child hung or crashed: {outcome}"
            outcomes.add(outcome.split()[1].strip("'"))
    finally:
        stop.set()
        thread.join()
    assert outcomes <= {"read", "refused"}
    log.close()


@impls
def test_a_forked_child_does_not_keep_the_parents_lock(tmp_path, impl):
    """A worker that keeps the inherited writer object alive (and never closes
    it) must not stop the parent from reopening once the parent closed it."""
    where = tmp_path / "log"
    log = impl.open(where, create=True)
    log.append(message(0))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # hold the object; wait until the parent is done
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        log.close()
        with impl.open(where) as again:  # refused before: the child's copy held the flock
            again.append(message(1))
    finally:
        os.write(write_end, b"x")
        os.close(write_end)
        os.waitpid(pid, 0)
    with impl.open(where, readonly=True) as reader:
        assert list(reader) == [message(0), message(1)]


@impls
def test_a_readers_brief_check_does_not_make_a_writer_fail(tmp_path, impl):
    """A reader that found bytes past the end holds the lock shared while it
    looks again; a writer opening then (lock_timeout=0) waits out that grace
    instead of reporting another writer."""
    import fcntl

    where = tmp_path / "log"
    with impl.open(where, create=True) as log:
        log.append(message(0))
    fd = os.open(where / "lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    timer = threading.Timer(0.01, lambda: fcntl.flock(fd, fcntl.LOCK_UN))
    timer.start()
    try:
        with impl.open(where) as writer:
            assert len(writer) == 1
    finally:
        timer.join()
        os.close(fd)


_GIL_AND_LOCK = """
import faulthandler, os, resource, shutil, signal, sys, threading
from context_core import MessageLog
faulthandler.dump_traceback_later(30, exit=True)  # a hang fails the test with every thread's stack
sys.setswitchinterval(1e-6)  # threads take turns with the interpreter as often as they can
where = sys.argv[1]
log = MessageLog.open(os.path.join(where, "first"), create=True, durability="never")
log.append({"role": "user", "content": "hello"})
stop = threading.Event()

def reader(log):
    while not stop.is_set():
        try:
            log.read([0])
        except Exception:
            pass

thread = threading.Thread(target=reader, args=(log,), daemon=True)
thread.start()
# A fresh process: these keys are looked up for the first time under the log's lock.
call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
log.append({"role": "assistant", "content": os.urandom(100_000).hex(), "tool_calls": [call]})
log.append({"role": "tool", "tool_call_id": "c1", "content": os.urandom(100_000).hex()})
stop.set(); thread.join(); log.close()
# A full disk: each failed append builds its error (Python code) under the log's lock.
log = MessageLog.open(os.path.join(where, "full"), create=True, durability="never")
log.append({"role": "user", "content": "hello"})
stop.clear()
thread = threading.Thread(target=reader, args=(log,), daemon=True)
thread.start()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, resource.RLIM_INFINITY))
big, failed = os.urandom(50_000).hex(), 0
for i in range(1000):
    try:
        log.append({"role": "tool", "tool_call_id": "c", "content": f"{i} {big}"})
    except OSError:
        failed += 1
        if failed >= 100:
            break
stop.set(); thread.join()
print("no hang", failed)
"""


def test_a_thread_waiting_for_the_log_never_holds_up_its_holder(tmp_path):
    """A thread that waited for the log's lock held the interpreter (GIL)
    while it waited. The thread holding the lock may need the interpreter
    before it lets go: the first time a message key is looked up in a
    process (a cached Python name is made), or when an append fails and
    its error is built by Python code (a full disk). Both threads then
    waited for each other for good: a server's turn appending while its
    compaction worker read the log hung. A fresh interpreter (the names
    are made once a process), its thread switches made as frequent as they
    can be, must finish both cases; a hang ends it with every stack."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _GIL_AND_LOCK, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("no hang 100")


@impls
def test_a_writer_waiting_while_the_log_is_removed_and_made_again_stays_the_only_writer(tmp_path, impl):
    """A session whose open fails takes back the directory it made, while it
    holds the lock. A writer waiting for that lock then got it, on a file no
    longer at the path, while a third open made the log anew and locked its
    new file: two writers, and one's acknowledged appends written over."""
    where = tmp_path / "log"
    first = impl.open(where, create=True)
    outcome: dict[str, object] = {}

    def wait_for_the_lock() -> None:
        try:
            with impl.open(where, create=True, lock_timeout=60) as waiting:
                waiting.append_many([{"role": "user", "content": f"waited {n}"} for n in range(40)])
            outcome["waited"] = "appended"
        except Exception as error:  # reported below, not lost in the thread
            outcome["waited"] = error

    thread = threading.Thread(target=wait_for_the_lock)
    thread.start()
    time.sleep(0.3)  # the thread is waiting for the lock
    shutil.rmtree(where)  # as a failed session open takes back its directory, lock held
    again = impl.open(where, create=True)
    first.close()  # frees the lock on the removed file
    time.sleep(0.3)  # a waiter that took that lock would write now
    again.append_many([{"role": "user", "content": f"again {n}"} for n in range(40)])
    again.close()
    thread.join(timeout=60)
    assert outcome["waited"] == "appended"
    with impl.open(where, readonly=True) as reader:
        kept = [m["content"] for m in reader]
    assert sorted(kept) == sorted([f"waited {n}" for n in range(40)] + [f"again {n}" for n in range(40)])
