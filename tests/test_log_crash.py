"""Crash safety: writers killed with SIGKILL mid-append, again and again;
readers in other processes while a writer appends."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from context_core import MessageLog
from killed import reports_until_killed

KILLS = 200


def message(n: int) -> dict:
    # Sizes from a few bytes to several KB, some compressible, some not.
    noise = random.Random(n).randbytes(n % 5 * 40).hex()
    body = f"message {n} " + ("retry with backoff; " * (n % 7) * 20) + noise
    return {"role": "user" if n % 2 else "assistant", "content": body, "n": n}


def writer(where: Path, durability: str, report_fd: int) -> None:
    """Append forever; after each acknowledged append, report its number."""
    log = MessageLog.open(where, create=True, durability=durability, lock_timeout=5.0)
    n = len(log)
    while True:
        if n % 5 == 4:
            log.append_many([message(n), message(n + 1)])
            n += 2
        else:
            log.append(message(n))
            n += 1
        os.write(report_fd, n.to_bytes(8, "little"))


def run_and_kill(where: Path, durability: str, after: float) -> int:
    """Start a writer, SIGKILL it after `after` seconds; the most it acknowledged."""
    return max(reports_until_killed(lambda fd: writer(where, durability, fd), after), default=0)


def warm_up(where: Path) -> None:
    """Load the tokenizer in this process, so forked writers start appending at once."""
    with MessageLog.open(where, create=True) as log:
        log.append(message(1))


def test_killed_writers_never_lose_an_acknowledged_append(tmp_path):
    warm_up(tmp_path / "warm")
    where = tmp_path / "log"
    rng = random.Random(7)
    acknowledged = 0
    for kill in range(KILLS):
        durability = ("always", "batch", "never")[kill % 3]
        acknowledged = max(acknowledged, run_and_kill(where, durability, rng.uniform(0.0, 0.03)))
        # Reopened by a writer: recovery runs, every invariant holds.
        with MessageLog.open(where, create=True) as log:
            count = len(log)
            assert count >= acknowledged, f"kill {kill}: {count} nodes, {acknowledged} acknowledged"
            got = log.read(range(max(0, count - 3), count)) if count else []
            assert got == [message(n) for n in range(max(0, count - 3), count)]
            assert log.path() == list(range(count))
            rows = log.headers()
            assert list(rows["seq"]) == list(range(count))
    with MessageLog.open(where) as log:
        log.verify()
        assert list(log) == [message(n) for n in range(len(log))]
        assert len(log) > 20 * KILLS, "the writers were killed while appending, not before"


def test_readers_in_other_processes_see_a_consistent_prefix(tmp_path):
    warm_up(tmp_path / "warm")
    where = tmp_path / "log"
    MessageLog.open(where, create=True).close()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # a reader process
        os.close(read_fd)
        status = 1
        try:
            reader = MessageLog.open(where, readonly=True)
            seen = 0
            deadline = time.monotonic() + 3
            while seen < 300 and time.monotonic() < deadline:
                count = len(reader)
                assert count >= seen, "the log never shrinks for a reader"
                if count:
                    # Never a partial record: the newest is whole and right.
                    assert reader[count - 1] == message(count - 1)
                seen = count
            status = 0 if seen >= 300 else 2
        finally:
            os.write(write_fd, bytes([status]))
            os._exit(0)
    os.close(write_fd)
    with MessageLog.open(where, durability="never") as log:
        for n in range(300):
            log.append(message(n))
    with os.fdopen(read_fd, "rb") as result:
        status = result.read()
    os.waitpid(pid, 0)
    assert status == b"\x00", "the reader saw a torn or missing record"
