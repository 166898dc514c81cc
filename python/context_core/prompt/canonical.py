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
    "MAX_DEPTH",
    "PrefixHasher",
    "anthropic_form",
    "canonical_copy",
    "canonical_json",
    "check_depth",
    "check_tool",
    "copy_tools",
    "openai_form",
    "to_anthropic_tool",
    "to_openai_tool",
]

MAX_DEPTH = 256
"""The deepest nesting of dicts and lists a value may have: the Rust core's
JSON limit (``MAX_DEPTH`` in ``rust/core/src/json.rs``), the reference's too."""


def check_depth(value: Any, where: str = "value") -> None:
    """:class:`~context_core.InvalidInputError` if ``value`` nests more than
    :data:`MAX_DEPTH` levels deep (which also stops a reference cycle):
    ``value`` at depth 0, a container's items one deeper, as the reference counts.
    Walked without recursion: ``json`` and the SDKs' encoders recurse, and
    would raise a ``RecursionError`` at about a thousand levels."""
    if not isinstance(value, (dict, list, tuple)):
        return
    stack = [(value, 1)]  # a container, and the depth of its items
    while stack:  # depth first: a cycle reaches the limit in MAX_DEPTH steps
        item, depth = stack.pop()
        if not item:
            continue
        if depth > MAX_DEPTH:
            raise InvalidInputError(f"{where}: nested more than {MAX_DEPTH} levels deep (a reference cycle?)")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1))


def _dumps(value: Any) -> str:
    """:func:`canonical_json` of a value whose depth is checked already."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except TypeError as exc:  # a set, an object, keys of mixed types
        raise InvalidTypeError(f"not a JSON value: {exc}") from None
    except ValueError as exc:  # NaN, an int too long to write out
        raise InvalidInputError(f"not a JSON value: {exc}") from None


def _copy(value: Any) -> Any:
    """:func:`canonical_copy` of a value whose depth is checked already."""
    return json.loads(_dumps(value))


def _copy_object(value: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`_copy` of a JSON object, which comes back an object."""
    copied: dict[str, Any] = _copy(value)
    return copied


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: keys sorted at every level, no spaces,
    UTF-8 text (no ``\\u`` escapes), NaN and infinities refused, and values
    nested more than :data:`MAX_DEPTH` levels deep. Two values that are equal
    as JSON give the same string, whatever their dicts' order."""
    check_depth(value)
    return _dumps(value)


def canonical_copy(value: Any) -> Any:
    """A deep copy of ``value`` whose dicts hold their keys in sorted order
    (tuples become lists), so any JSON encoder writes it canonically."""
    check_depth(value)
    return _copy(value)


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


def _custom_of(tool: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The ``custom`` entry of an OpenAI custom tool (``{"type": "custom",
    "custom": {"name": ...}}``: free-text input); ``None`` for the other forms."""
    if tool.get("type") != "custom" or "custom" not in tool:
        return None
    custom = tool["custom"]
    if not isinstance(custom, Mapping):
        raise InvalidTypeError(f"{where}.custom: expected a dict, got {type(custom).__name__}")
    return custom


def _check(tool: Any, index: int) -> Mapping[str, Any]:
    if not isinstance(tool, Mapping):
        raise InvalidTypeError(f"tools[{index}]: expected a dict, got {type(tool).__name__}")
    check_depth(tool, f"tools[{index}]")
    return tool


def check_tool(tool: Any, index: int) -> Mapping[str, Any]:
    """``tool`` if it is a schema with a name (``name``, or ``function.name``
    in OpenAI's form): a dict, else :class:`~context_core.InvalidTypeError`;
    no name, or nested more than :data:`MAX_DEPTH` levels deep (the tool's
    own dict the first), :class:`~context_core.InvalidInputError`."""
    checked = _check(tool, index)
    where = f"tools[{index}]"
    function = _function_of(checked, where)
    custom = _custom_of(checked, where)
    if function is not None:
        _name(function, f"{where}.function")
    elif custom is not None:
        _name(custom, f"{where}.custom")
    else:
        _name(checked, where)
    return checked


def copy_tools(tools: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """Each tool checked (:func:`check_tool`: its depth alone, as a tool at
    the limit would be over it inside the list), then all canonically copied."""
    for index, tool in enumerate(tools):
        check_tool(tool, index)
    return tuple(_copy(list(tools)))


def to_openai_tool(tool: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """One tool schema in OpenAI's Chat Completions form
    (``{"type": "function", "function": {...}}``), from that form, a bare
    function (``name``/``description``/``parameters``) or Anthropic's
    (``name``/``description``/``input_schema``). Anthropic server tools (a
    ``type`` other than ``function`` and no schema) have no OpenAI form."""
    return openai_form(_check(tool, index), index)


def openai_form(tool: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """:func:`to_openai_tool` of a tool already checked (:func:`copy_tools`)."""
    where = f"tools[{index}]"
    function = _function_of(tool, where)
    if function is not None:
        _name(function, f"{where}.function")
        return _copy_object({"type": "function", **tool})
    custom = _custom_of(tool, where)
    if custom is not None:  # OpenAI's own form already
        _name(custom, f"{where}.custom")
        return _copy_object(dict(tool))
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
    return _copy_object({"type": "function", "function": function})


def to_anthropic_tool(tool: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """One tool schema in Anthropic's Messages form
    (``name``/``description``/``input_schema``), from that form, OpenAI's, or
    a bare function. Anthropic forms (server tools too) are kept as they are,
    ``cache_control`` included."""
    return anthropic_form(_check(tool, index), index)


def anthropic_form(tool: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """:func:`to_anthropic_tool` of a tool already checked (:func:`copy_tools`)."""
    where = f"tools[{index}]"
    function = _function_of(tool, where)
    if _custom_of(tool, where) is not None:
        raise InvalidInputError(f"{where}: an OpenAI custom tool (free-text input) has no Anthropic form")
    if function is not None:
        source, where = function, f"{where}.function"
    elif "input_schema" in tool or tool.get("type", "function") != "function":
        return _copy_object(dict(tool))
    else:
        source = tool
    out: dict[str, Any] = {
        "name": _name(source, where),
        "input_schema": source.get("parameters") or {"type": "object", "properties": {}},
    }
    if "description" in source:
        out["description"] = source["description"]
    return _copy_object(out)


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
        # not checked again: the tools come checked (copy_tools), and in the list
        # one at the depth limit would be a level over it
        for label, data in ((b"tools", _dumps(list(tools))), (b"system", system)):
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
