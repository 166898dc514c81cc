"""JSON written for another program to read: valid whatever it holds.

Non-ASCII text is written as itself where the output's encoding holds it
(Chinese stays readable). A lone surrogate (valid in JSON's ``\\ud800``
escape, not in UTF-8) or a character the encoding lacks makes the whole
document ASCII with escapes instead, so the bytes are always JSON.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

__all__ = ["write_json"]


def write_json(document: Any, out: TextIO) -> None:
    """``document`` as indented JSON and a newline."""
    text = json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False)
    try:
        text.encode(getattr(out, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(document, ensure_ascii=True, indent=2, allow_nan=False)
    out.write(text + "\n")
