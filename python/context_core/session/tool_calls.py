"""Tool calls a session waits on, in either provider's shape."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.sanitize import sanitize

__all__ = [
    "ToolCall",
    "answered_ids",
    "call_ids_in_payloads",
    "calls_of",
    "check_call_ids",
    "check_reply_blocks",
    "check_sendable",
    "only_results",
    "pending_in",
    "relocated",
    "result_message",
    "unsigned_thinking",
    "with_fresh_ids",
    "with_text_arguments",
]


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: run it, then pass its output to
    :meth:`~context_core.Session.record_tool_result` with ``id``."""

    id: str
    name: str
    arguments: Any
    """The arguments: a dict when they parse as a JSON object (OpenAI sends
    a JSON string, Anthropic an object), else the text as it came."""


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past what the parser takes
            return raw
    return raw


def _name(value: Any) -> str:
    """A call's tool name as given; one that is not text is none (and the
    repair refuses the call's message before it is logged)."""
    return value if isinstance(value, str) else ""


def calls_of(message: Mapping[str, Any]) -> list[ToolCall]:
    """The tool calls an assistant message makes (OpenAI ``tool_calls`` or
    Anthropic ``tool_use`` blocks)."""
    if message.get("role") != "assistant":
        return []
    calls: list[ToolCall] = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("id"), str):
            function = call.get("function")
            if isinstance(function, Mapping):
                name, arguments = _name(function.get("name", "")), _arguments(function.get("arguments"))
            else:  # a custom tool's call: its input is free text, passed on as it came
                custom = call.get("custom")
                custom = custom if isinstance(custom, Mapping) else {}
                name, arguments = _name(custom.get("name", "")), custom.get("input")
            calls.append(ToolCall(call["id"], name, arguments))
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") == "tool_use"
                and isinstance(block.get("id"), str)
            ):
                calls.append(ToolCall(block["id"], _name(block.get("name", "")), block.get("input")))
    return calls


def only_results(message: Mapping[str, Any]) -> bool:
    """Whether a user message carries tool results and nothing of its own."""
    content = message.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(block, Mapping) and block.get("type") == "tool_result" for block in content)
    )


def answered_ids(message: Mapping[str, Any]) -> list[str]:
    """The call ids a message answers (an OpenAI tool message, Anthropic
    ``tool_result`` blocks)."""
    if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
        return [message["tool_call_id"]]
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    return [
        block["tool_use_id"]
        for block in content
        if isinstance(block, Mapping)
        and block.get("type") == "tool_result"
        and isinstance(block.get("tool_use_id"), str)
    ]


def _check_id(value: Any, where: str) -> None:
    if value is None:
        raise InvalidInputError(f"{where}: required field is missing")
    if not isinstance(value, str):
        raise InvalidTypeError(f"{where}: expected a str, got {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{where}: must not be empty")


def check_call_ids(message: Mapping[str, Any], where: str = "message") -> None:
    """Every tool call and tool result in ``message`` names its call by a
    non-empty str. Checked before a message goes into the log: one without
    would be refused by every later selection, and stay in the log."""
    calls = message.get("tool_calls")
    if isinstance(calls, Sequence) and not isinstance(calls, (str, bytes)):
        for i, call in enumerate(calls):
            if not isinstance(call, Mapping):
                raise InvalidTypeError(f"{where}.tool_calls[{i}]: expected a dict, got {type(call).__name__}")
            _check_id(call.get("id"), f"{where}.tool_calls[{i}].id")
    if message.get("role") == "tool":
        _check_id(message.get("tool_call_id"), f"{where}.tool_call_id")
    content = message.get("content")
    if isinstance(content, list):
        for i, block in enumerate(content):
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "tool_use":
                _check_id(block.get("id"), f"{where}.content[{i}].id")
            elif block.get("type") == "tool_result":
                _check_id(block.get("tool_use_id"), f"{where}.content[{i}].tool_use_id")


def with_text_arguments(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with each function call's ``arguments`` as JSON text, the
    form Chat Completions takes back: some servers (Ollama's own API, some
    proxies) give them as an object, which the API refuses in a request."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return message
    fixed, changed = [], False
    for at, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and not isinstance(function.get("arguments"), str):
            given = function.get("arguments")
            try:
                # None or none given: a call with no arguments, "{}" as the model writes it.
                arguments = "{}" if given is None else json.dumps(given, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError) as error:  # not JSON: unsendable
                raise InvalidInputError(
                    f"reply.tool_calls[{at}].function.arguments: not JSON ({type(error).__name__}: {error})"
                ) from None
            call, changed = {**call, "function": {**function, "arguments": arguments}}, True
        fixed.append(call)
    return {**message, "tool_calls": fixed} if changed else message


def unsigned_thinking(block: Any) -> bool:
    """Whether ``block`` is a thinking block without its signature."""
    return (
        isinstance(block, Mapping)
        and block.get("type") == "thinking"
        and not (isinstance(block.get("signature"), str) and block["signature"])
    )


def check_reply_blocks(message: Mapping[str, Any]) -> None:
    """An Anthropic reply's blocks as the API takes them back: a
    ``tool_use``'s ``input`` an object, a ``thinking`` block signed (the API
    refuses one without its signature, in every request that holds it)."""
    content = message.get("content")
    if not isinstance(content, list):
        return
    for at, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "tool_use" and not isinstance(block.get("input"), Mapping):
            raise InvalidInputError(
                f"reply.content[{at}].input: a tool_use's input must be an object,"
                f" not {type(block.get('input')).__name__}"
            )
        if unsigned_thinking(block):
            raise InvalidInputError(
                f"reply.content[{at}]: a thinking block without its signature, which the API refuses"
                " when it is sent back (give the reply as the API returned it)"
            )


def check_sendable(message: Mapping[str, Any], provider: str, where: str) -> None:
    """``message`` passes the repair's checks of one message (every block a
    dict, every id a str...), as each later selection runs them: one it
    refuses, once logged, would fail every turn after, a reopen too."""
    try:
        sanitize([message], provider)  # type: ignore[arg-type]  # a provider the session checked
    except (InvalidTypeError, InvalidInputError) as error:
        raise relocated(error, "messages[0]", where) from None
    _check_finite(message, where)


def _check_finite(message: Mapping[str, Any], where: str) -> None:
    """No NaN or infinity anywhere in ``message``: the SDKs send strict JSON
    (httpx refuses them), so one logged would fail every request after it.
    A walk with a stack of its own, so no nesting is too deep for it."""
    stack: list[Any] = [message]
    while stack:
        value = stack.pop()
        kind = type(value)
        # The usual types first: an abstract Mapping check costs about 0.4 us.
        if kind is str:
            continue
        if kind is dict:
            stack.extend(value.values())
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidInputError(f"{where}: holds {value!r}, which JSON requests cannot carry")
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)


def relocated(error: InvalidTypeError | InvalidInputError, head: str, where: str) -> Exception:
    """``error`` (of the same class) with the location ``head`` it names
    (a list the check wrapped the message in) given as ``where``, the
    argument the caller passed."""
    text = str(error)
    return type(error)(where + text.removeprefix(head) if text.startswith(head) else f"{where}: {text}")


def with_fresh_ids(
    message: Mapping[str, Any], taken: set[str]
) -> tuple[dict[str, Any], list[str], list[tuple[str, str]]]:
    """``message`` with each call id already in ``taken`` (an id a server
    gave again, as some OpenAI-compatible ones number calls per reply), or
    made twice in it, made unique as ``id_2``, ``id_3``...; the ids it now
    makes (for the caller to add to ``taken`` once it is kept); and the
    ``(given, stored)`` pairs renamed.

    Two calls of one id in a request would be repaired away as duplicates,
    the newer one with its result: the turn in progress would lose its
    tool loop."""
    made: list[str] = []
    renamed: list[tuple[str, str]] = []
    # A new name is never one the reply itself gives (a server's own `a_2`
    # beside an `a` given again): each given id keeps answering its own call.
    given_here = {call.id for call in calls_of(message)}

    made_here: set[str] = set()
    # The last suffix tried for each given id: those before it are taken
    # (here or before), so a reply with many calls of one id is linear.
    tried: dict[str, int] = {}

    def fresh(given: str) -> str:
        stored, n = given, tried.get(given, 1)
        if n > 1:
            stored = f"{given}_{n}"
        while stored in taken or stored in made_here or (stored != given and stored in given_here):
            n += 1
            stored = f"{given}_{n}"
        tried[given] = n
        made.append(stored)
        made_here.add(stored)
        if stored != given:
            renamed.append((given, stored))
        return stored

    out = dict(message)
    calls = message.get("tool_calls")
    if isinstance(calls, Sequence) and not isinstance(calls, (str, bytes)) and calls:
        out["tool_calls"] = [{**call, "id": fresh(call["id"])} for call in calls]
    content = message.get("content")
    if isinstance(content, list) and any(_is_call_block(block) for block in content):
        out["content"] = [
            {**block, "id": fresh(block["id"])} if _is_call_block(block) else block for block in content
        ]
    return (out if renamed else dict(message)), made, renamed


def _is_call_block(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_use"


#: A string value under the key ``id`` in compact JSON (the log's payloads):
#: a call's id, in ``tool_calls`` and ``tool_use`` blocks alike. A key
#: ``id`` elsewhere (in a tool's input) matches too, which only makes a
#: later reply's id be renamed where it need not be.
_ID_VALUE = re.compile(rb'"id":"((?:[^"\\]|\\.)*)"')


def call_ids_in_payloads(payloads: Iterable[bytes]) -> set[str]:
    """Every call id in the log payloads (a superset: see :data:`_ID_VALUE`),
    read from the JSON text without decoding the messages (several times
    faster, and an open reads every reply the log holds)."""
    found: set[str] = set()
    for payload in payloads:  # one at a time: no joined copy of them all
        for raw in _ID_VALUE.findall(payload):
            found.add(json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8", "replace"))
    return found


def pending_in(messages: Sequence[Mapping[str, Any]]) -> dict[str, ToolCall] | None:
    """The calls of the newest assistant message that asked for tools and
    that no later message answers (what a reopened session still waits on);
    ``None`` when ``messages`` (the tail of a history) ends before deciding."""
    answered: set[str] = set()
    for message in reversed(messages):
        calls = calls_of(message)
        if calls:
            return {call.id: call for call in calls if call.id not in answered}
        if message.get("role") == "user" and not only_results(message):
            # The user spoke since (results beside text or an image are an
            # input too, as the live session reads them): nothing is waited on.
            return {}
        answered.update(answered_ids(message))
    return None


def _text(content: Any) -> str | list[Any]:
    """A tool's output as a message carries it: a str, a list of content
    blocks (dicts with a ``type``) with its text joined (see
    :func:`_joined`), anything else JSON-able as its JSON text (``None``:
    empty)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if (
        isinstance(content, list)
        and content
        and all(isinstance(block, Mapping) and isinstance(block.get("type"), str) for block in content)
    ):
        return _joined(content)
    try:
        return json.dumps(content, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # unserialisable, or nested too deep
        raise InvalidTypeError(
            f"a tool result must be a str, content blocks or JSON-able data, got {type(content).__name__}"
        ) from None


#: The keys of a text block that carries nothing but its text.
_PLAIN = frozenset({"type", "text"})


def _as_sent(block: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool output's block as a request carries it. An MCP tool's blocks
    come with keys set to ``None`` (``annotations``, ``_meta``), which the
    APIs refuse as fields they do not know: left out. An MCP image
    (``data`` and ``mimeType``, no ``source``) becomes Anthropic's."""
    if any(value is None for value in block.values()):
        block = {key: value for key, value in block.items() if value is not None}
    if block.get("type") == "image" and "source" not in block and "data" in block and "mimeType" in block:
        source = {"type": "base64", "media_type": block["mimeType"], "data": block["data"]}
        block = {"type": "image", "source": source}
    return block


def _joined(blocks: list[Any]) -> str | list[Any]:
    """Content blocks with each run of plain text blocks (only ``type`` and
    ``text``) joined into one, and blank ones left out; the text alone
    where nothing else is left. The cap on a tool result's tokens applies
    to a text, not to the sum of many (an MCP tool's output in parts came
    through whole, over the budget), and the APIs refuse a blank text block
    (an MCP tool with no output gives one) and an empty list."""
    out: list[Any] = []
    run: list[str] = []

    def end_run() -> None:
        text = "\n".join(run)
        if text.strip():
            out.append({"type": "text", "text": text})
        run.clear()

    for block in map(_as_sent, blocks):
        if block.get("type") == "text" and isinstance(block.get("text"), str) and block.keys() <= _PLAIN:
            if block["text"].strip():  # a blank one left out inside a run too
                run.append(block["text"])
        else:
            end_run()
            out.append(block)
    end_run()
    if not out:
        return ""
    if len(out) == 1 and out[0].keys() == _PLAIN and out[0]["type"] == "text":
        text = out[0]["text"]
        if isinstance(text, str):
            return text
    return out


def result_message(provider: str, call_id: str, content: Any, is_error: bool) -> dict[str, Any]:
    """The message that carries one tool's output."""
    body = _text(content)
    if provider == "anthropic":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": body}
        if is_error:
            block["is_error"] = True
        return {"role": "user", "content": [block]}
    if isinstance(body, list):
        for at, block in enumerate(body):
            if block.get("type") != "text":
                raise InvalidInputError(
                    f"result.content[{at}]: a {block.get('type')!r} block; a Chat Completions tool"
                    " result holds text only (send an image in a user message)"
                )
    # Chat Completions has no error flag for a tool result: the text says it
    # (in parts, the first part's, which the check above made all text).
    if is_error:
        body = _said_failed(body)
    return {"role": "tool", "tool_call_id": call_id, "content": body}


def _said_failed(body: str | list[Any]) -> str | list[Any]:
    """A Chat Completions tool result's text (or text parts) saying it failed."""
    if isinstance(body, str):
        return f"Error: {body}"
    if body and isinstance(body[0].get("text"), str):
        return [{**body[0], "text": f"Error: {body[0]['text']}"}, *body[1:]]
    return [{"type": "text", "text": "Error:"}, *body]
