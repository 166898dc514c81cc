"""Canonical JSON for tool schemas, tool conversion between the two APIs, and
the hash of a cached prefix.

A provider's prompt cache hits only on a byte-identical prefix, and tool
schemas sit at its very start (Anthropic caches tools, then system, then
messages; OpenAI's automatic cache covers the tools too). Two dicts with the
same items but built in another order serialize differently with plain
``json.dumps``, so every tool schema is rebuilt once, at the start of a
session, with its keys sorted at every level: the SDK then serializes it the
same way in every process, whatever order the caller's dicts were built in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError

__all__ = [
    "PrefixHasher",
    "canonical_copy",
    "canonical_json",
    "check_tool",
    "to_anthropic_tool",
    "to_openai_tool",
]


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: keys sorted at every level, no spaces,
    UTF-8 text (no ``\\u`` escapes), NaN and infinities refused. Two values
    that are equal as JSON give the same string, whatever their dicts' order."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except TypeError as exc:  # a set, an object, keys of mixed types
        raise InvalidTypeError(f"not a JSON value: {exc}") from None
    except ValueError as exc:  # NaN, a cycle, an int too long to write out
        raise InvalidInputError(f"not a JSON value: {exc}") from None


def canonical_copy(value: Any) -> Any:
    """A deep copy of ``value`` whose dicts hold their keys in sorted order
    (tuples become lists), so any JSON encoder writes it canonically."""
    return json.loads(canonical_json(value))


def _name(tool: Mapping[str, Any], where: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{where}: a tool needs a non-empty string 'name'")
    return name


def _function_of(tool: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The ``function`` entry of a tool in OpenAI's form; ``None`` for the other forms."""
    if "function" not in tool:
        return None
    function = tool["function"]
    if not isinstance(function, Mapping):
        raise InvalidTypeError(f"{where}.function: expected a dict, got {type(function).__name__}")
    return function


def _check(tool: Any, index: int) -> Mapping[str, Any]:
    if not isinstance(tool, Mapping):
        raise InvalidTypeError(f"tools[{index}]: expected a dict, got {type(tool).__name__}")
    return tool


def check_tool(tool: Any, index: int) -> Mapping[str, Any]:
    """``tool`` if it is a schema with a name (``name``, or ``function.name``
    in OpenAI's form): a dict, else :class:`~context_core.InvalidTypeError`;
    no name, :class:`~context_core.InvalidInputError`."""
    tool = _check(tool, index)
    where = f"tools[{index}]"
    function = _function_of(tool, where)
    if function is not None:
        _name(function, f"{where}.function")
    else:
        _name(tool, where)
    return tool


def to_openai_tool(tool: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """One tool schema in OpenAI's Chat Completions form
    (``{"type": "function", "function": {...}}``), from that form, a bare
    function (``name``/``description``/``parameters``) or Anthropic's
    (``name``/``description``/``input_schema``). Anthropic server tools (a
    ``type`` other than ``function`` and no schema) have no OpenAI form."""
    tool = _check(tool, index)
    where = f"tools[{index}]"
    function = _function_of(tool, where)
    if function is not None:
        _name(function, f"{where}.function")
        return canonical_copy({"type": "function", **tool})
    name = _name(tool, where)
    if "input_schema" in tool:
        function = {"name": name, "parameters": tool["input_schema"]}
    elif tool.get("type", "function") == "function":
        function = {key: value for key, value in tool.items() if key != "type"}
    else:
        raise InvalidInputError(f"{where}: the server tool {tool['type']!r} has no OpenAI form")
    if "description" in tool:
        function["description"] = tool["description"]
    function.pop("cache_control", None)
    return canonical_copy({"type": "function", "function": function})


def to_anthropic_tool(tool: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """One tool schema in Anthropic's Messages form
    (``name``/``description``/``input_schema``), from that form, OpenAI's, or
    a bare function. Anthropic forms (server tools too) are kept as they are,
    ``cache_control`` included."""
    tool = _check(tool, index)
    where = f"tools[{index}]"
    function = _function_of(tool, where)
    if function is not None:
        source, where = function, f"{where}.function"
    elif "input_schema" in tool or tool.get("type", "function") != "function":
        return canonical_copy(dict(tool))
    else:
        source = tool
    out: dict[str, Any] = {
        "name": _name(source, where),
        "input_schema": source.get("parameters") or {"type": "object", "properties": {}},
    }
    if "description" in source:
        out["description"] = source["description"]
    return canonical_copy(out)


def _frame(label: bytes, data: bytes) -> bytes:
    return b"%s %d\n" % (label, len(data))


class PrefixHasher:
    """The hash of a cached prefix, built incrementally: the tools and the
    system part are hashed once a session, and each stable part continues
    from a copy of that state, so a new stable part costs its own bytes only.

    The bytes hashed (SHA-256) are, in order, each framed by a label and its
    length: the tools' canonical JSON, the system text, the stable text (all
    UTF-8). Two prefixes hash the same exactly when the provider sees the same
    cached bytes."""

    DOMAIN = b"context_core.prompt.prefix/1\n"

    def __init__(self, tools: Sequence[Any], system: str) -> None:
        self._state = hashlib.sha256(self.DOMAIN)
        for label, data in ((b"tools", canonical_json(list(tools))), (b"system", system)):
            raw = data.encode("utf-8", "surrogatepass")
            self._state.update(_frame(label, raw))
            self._state.update(raw)

    def with_stable(self, stable: str) -> str:
        """The prefix hash once ``stable`` follows the system part."""
        state = self._state.copy()
        raw = stable.encode("utf-8", "surrogatepass")
        state.update(_frame(b"stable", raw))
        state.update(raw)
        return state.hexdigest()
