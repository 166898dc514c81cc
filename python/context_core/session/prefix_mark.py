"""The cached prefix's hash of a session directory's last request, in the
``prefix`` file: a reopened session's first request says whether its prefix
changed (new instructions or tools after a deploy: the provider's cache
misses), as each later one does. Written only when the hash changes, by
rename; a hint, not a record, so a failed write is let go."""

from __future__ import annotations

import contextlib
import os

from context_core.session.markers import write_by_rename

__all__ = ["read_prefix", "write_prefix"]

_NAME = "prefix"


def read_prefix(root: str) -> str | None:
    """The hash the last request of ``root``'s session had, if known."""
    try:
        with open(os.path.join(root, _NAME), encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.isalnum() else None


def write_prefix(root: str, prefix: str) -> None:
    """Record ``prefix`` as the last request's hash (a failure is let go)."""
    with contextlib.suppress(OSError):
        write_by_rename(os.path.join(root, _NAME), f"{prefix}\n")
