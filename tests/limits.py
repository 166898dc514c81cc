"""Running test code in a forked child under a file-size limit: a full disk
on demand (the child's writes past the limit fail with EFBIG)."""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Callable
from typing import Any


def in_child_with_a_file_size_limit(limit: int, work: Callable[[], Any]) -> str:
    """Run ``work()`` in a forked child whose files may not grow past ``limit``
    bytes (SIGXFSZ ignored, so the write fails with EFBIG). What it did:
    ``"returned <repr>"``, or ``"<exception type>|<is an OSError>|<message>"``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        outcome = "crashed"
        try:
            os.close(read_end)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
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
    os.waitpid(pid, 0)
    return outcome
