"""Running test code in a forked child under limits: a full disk on demand
(writes past a file-size limit fail with EFBIG), or a memory ceiling (an
allocation past it fails, so a length trusted from a file kills the child)."""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Callable
from typing import Any


def in_child(
    work: Callable[[], Any],
    *,
    file_size: int | None = None,
    memory_headroom: int | None = None,
    seconds: int = 60,
) -> str:
    """Run ``work()`` in a forked child, its files kept under ``file_size`` bytes
    (SIGXFSZ ignored, so the write fails with EFBIG) and its address space held
    to ``memory_headroom`` bytes more than it has at the fork. What it did:
    ``"returned <repr>"``, or ``"<exception type>|<is an OSError>|<message>"``,
    or ``"killed by <signal>"`` (an abort, a crash, or SIGALRM after
    ``seconds``: a hang)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        outcome = "crashed"
        try:
            os.close(read_end)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(seconds)
            if file_size is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, resource.RLIM_INFINITY))
            if memory_headroom is not None:
                limit = address_space() + memory_headroom
                resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
            try:
                outcome = f"returned {work()!r}"
            except BaseException as error:  # reported to the parent
                outcome = f"{type(error).__name__}|{isinstance(error, OSError)}|{error}"
            os.write(write_end, outcome.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        outcome = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return outcome


def address_space() -> int:
    """This process's virtual memory size in bytes (what RLIMIT_AS bounds)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def in_child_with_a_file_size_limit(limit: int, work: Callable[[], Any]) -> str:
    """:func:`in_child` with only a file-size limit."""
    return in_child(work, file_size=limit)
