"""The library's loggers, under ``context_core``.

A library's records are the application's to show: the ``context_core``
logger holds a :class:`logging.NullHandler`, so with no logging set up
nothing is printed (Python would otherwise write warnings to stderr
through its last-resort handler), and once the application configures
logging (``logging.basicConfig()``, say) every record reaches its handlers.
"""

from __future__ import annotations

import logging

__all__ = ["library_logger"]

_ROOT = logging.getLogger("context_core")
if not any(isinstance(handler, logging.NullHandler) for handler in _ROOT.handlers):
    _ROOT.addHandler(logging.NullHandler())


def library_logger(name: str = "context_core") -> logging.Logger:
    """The logger ``name`` (``context_core`` or one under it)."""
    return logging.getLogger(name)
