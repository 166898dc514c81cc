"""Checks of the store's scalar arguments, raising the library's errors."""

from __future__ import annotations

import math
from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError

__all__ = ["check_str", "check_unit"]


def check_str(value: Any, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be str, not {type(value).__name__}")
    if not empty and not value.strip():
        raise InvalidInputError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} holds a lone surrogate") from None
    return value


def check_unit(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidInputError(f"{what} must be between 0 and 1, not {value!r}")
    return float(value)
