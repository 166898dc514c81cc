"""A child process that reports what it acknowledged, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

__all__ = ["reports_until_killed"]


def reports_until_killed(work: Callable[[int], None], after: float) -> list[int]:
    """Fork a child running ``work(report_fd)`` (it writes each acknowledged
    number there as 8 little-endian bytes), SIGKILL it after ``after``
    seconds, and return every number it reported in full."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            work(write_fd)
        finally:
            os._exit(1)
    os.close(write_fd)
    time.sleep(after)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as reports:
        data = reports.read()
    return [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data) - len(data) % 8, 8)]
