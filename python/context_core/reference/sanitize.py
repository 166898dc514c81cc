"""The sanitize funnel in plain Python: the oracle of the differential tests and
the baseline of the benchmarks, written from README.md ("sanitize")."""

from __future__ import annotations

import re
import string
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from context_core._core import (
    DEFAULT_ERROR_PATTERNS,
    DEFAULT_FIRST_USER_TEXT,
    DEFAULT_MAX_PATTERN_CHARS,
    DEFAULT_PLACEHOLDER_PATTERNS,
)
from context_core.errors import InvalidInputError, InvalidTypeError

SEPARATOR = "\n\n"
# Unicode White_Space: what "blank" and "trimmed" mean (not str.isspace, which
# also counts U+001C..U+001F).
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
TEXT_TYPES = ("text", "input_text", "output_text")
ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
MERGEABLE = ("user", "assistant", "system", "developer")
# Anthropic server tools: a use and its result are blocks of the same assistant
# message (the result's type ends in "_tool_result"; the MCP connector's too).
SERVER_USES = ("server_tool_use", "mcp_tool_use")
KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@dataclass(frozen=True)
class Change:
    stage: int
    index: int | None
    action: str
    reason: str


@dataclass
class Result:
    messages: list[dict[str, Any]]
    system: str | list[Any] | None
    changes: list[Change]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


@dataclass
class Part:
    """A content block of the output: block ``block`` of message ``message``,
    or (``block is None``) message ``message``'s string content as a text block."""

    message: int
    block: int | None
    kind: str  # text, thinking, tool_use, tool_result, server_use, server_result, other
    id: str | None = None
    blank_parts: tuple[int, ...] = ()  # a tool_result's blank text parts, which it is built without


@dataclass
class Item:
    """A message under construction, based on input message ``origin``."""

    origin: int
    role: str
    name: str | None
    texts: list[int] | None = None  # string contents, by message index
    parts: list[Part] | None = None  # or content blocks
    empty_text: bool = False  # or the empty string (a tool result of blank text parts only)
    calls: list[tuple[int, int | None, str]] = field(default_factory=list)  # (message, index|None=legacy, id)
    answers: str | None = None
    legacy_of: int | None = None
    function_name: str | None = None
    has_function_call: bool = False
    legacy_call: bool = False
    content_changed: bool = False
    calls_changed: bool = False


def is_blank(text: str) -> bool:
    return all(c in WHITE_SPACE for c in text)


def is_blank_text_part(part: Any) -> bool:
    """A text block with blank text, inside a tool_result's content list."""
    return (
        isinstance(part, dict)
        and part.get("type") in TEXT_TYPES
        and isinstance(part.get("text"), str)
        and is_blank(part["text"])
    )


class Sanitizer:
    def __init__(
        self,
        provider: str = "openai",
        *,
        convert_function: bool = False,
        on_invalid: str = "raise",
        placeholder_patterns: Iterable[str] | None = None,
        error_patterns: Iterable[str] | None = None,
        max_pattern_chars: int | None = None,
        first_user_text: str | None = None,
    ) -> None:
        if provider not in ("openai", "anthropic"):
            raise InvalidInputError(f"provider: expected openai or anthropic, got {provider!r}")
        self.provider = provider
        self.convert_function = convert_function
        self.on_invalid = on_invalid
        placeholders = DEFAULT_PLACEHOLDER_PATTERNS if placeholder_patterns is None else placeholder_patterns
        errors = DEFAULT_ERROR_PATTERNS if error_patterns is None else error_patterns
        self.placeholders = [re.compile(p) for p in placeholders]
        self.errors = [re.compile(p) for p in errors]
        self.max_chars = DEFAULT_MAX_PATTERN_CHARS if max_pattern_chars is None else max_pattern_chars
        self.first_user_text = DEFAULT_FIRST_USER_TEXT if first_user_text is None else first_user_text
        if is_blank(self.first_user_text) or self.classify(self.first_user_text) is not None:
            raise InvalidInputError("first_user_text: blank or junk text, which sanitize itself drops")

    def __call__(self, messages: Iterable[dict[str, Any]]) -> Result:
        return self.sanitize(messages)

    def sanitize(self, messages: Iterable[dict[str, Any]]) -> Result:
        if isinstance(messages, (str, bytes, dict)):
            raise InvalidTypeError("messages must be a list, tuple or other iterable")
        self.messages = list(messages)
        self.changes: list[Change] = []
        self.system: list[Item] = []
        items = self.stage1()
        items = self.merge(2, items)
        items = self.pair_anthropic(items) if self.provider == "anthropic" else self.pair_openai(items)
        items = self.merge(4, items)
        out = [self.build(item) for item in items]
        if self.provider == "anthropic" and items and items[0].role != "user":
            self.note(4, None, "insert_user", "the first message must be a user message")
            out.insert(0, {"role": "user", "content": self.first_user_text})
        return Result(out, self.build_system(), self.changes)

    def note(self, stage: int, index: int | None, action: str, reason: str) -> None:
        self.changes.append(Change(stage, index, action, reason))

    # -- stage 1 ---------------------------------------------------------------

    def stage1(self) -> list[Item]:
        items: list[Item] = []
        open_legacy: tuple[int, str | None] | None = None
        for index, message in enumerate(self.messages):
            try:
                item = self.read(index, message)
            except (InvalidInputError, InvalidTypeError) as error:
                error = type(error)(f"messages[{index}]{error}")
                if self.on_invalid == "raise":
                    raise error from None
                self.note(1, index, "drop_invalid", str(error))
                continue
            role = item.role
            if role not in KNOWN_ROLES:
                self.note(1, index, "drop_role", f'unknown role "{role}"')
                continue
            if self.provider == "anthropic" and role in ("tool", "function"):
                self.note(1, index, "drop_role", f'role "{role}" is not accepted by anthropic')
                continue
            if self.provider == "openai" and role == "function" and not self.convert_function:
                self.note(
                    1, index, "drop_role", 'legacy role "function" (the convert_function option converts it)'
                )
                continue
            self.drop_misplaced_blocks(item)
            self.settle_calls(item)
            if self.drop_if_junk(1, item):
                continue
            # A tool result needs content too (O8), even an empty string; an
            # empty list is refused. An empty list, or one whose parts were
            # all blank text (dropped above), said nothing: the empty string,
            # as for an Anthropic tool_result, its call still answered. With
            # no content at all it is dropped, and its call is closed as one
            # with no result.
            if role in ("tool", "function") and item.parts == []:
                if not item.content_changed:
                    self.note(1, index, "empty_result", "empty content list: the empty string")
                    item.content_changed = True
                item.parts, item.empty_text = None, True
            no_content = item.texts is None and not item.parts and not item.empty_text
            if no_content if role in ("tool", "function") else self.empty(item):
                self.note(1, index, "drop_empty", "empty message")
                continue
            if self.provider == "anthropic" and role in ("system", "developer"):
                self.note(1, index, "lift_system", "system message lifted into the system prompt")
                self.system.append(item)
                continue
            if role == "assistant":
                open_legacy = (index, item.function_name) if item.legacy_call else None
            elif role == "function":
                legacy, open_legacy = open_legacy, None
                if legacy is None or legacy[1] != item.function_name:
                    self.note(
                        1, index, "drop_role", "legacy function result without a function_call to answer"
                    )
                    continue
                self.note(1, index, "convert_function", "legacy function result converted to a tool message")
                item.role = "tool"
                item.answers = f"call_legacy_{legacy[0]}"
                item.legacy_of = legacy[0]
            items.append(item)
        return items

    def drop_misplaced_blocks(self, item: Item) -> None:
        """Blank text blocks go; for Anthropic also tool_use outside assistant
        messages, tool_result outside user messages, non-text blocks of system ones."""
        if item.parts is None:
            return
        anthropic, role = self.provider == "anthropic", item.role
        kept = []
        for part in item.parts:
            at = f"at content[{part.block}]"
            if part.kind == "blank":
                why = f"empty text block {at}"
            elif anthropic and part.kind == "tool_use" and role != "assistant":
                why = f"tool_use block in a {role} message {at}"
            elif anthropic and part.kind == "tool_result" and role != "user":
                why = f"tool_result block in a {role} message {at}"
            elif anthropic and part.kind in ("server_use", "server_result") and role != "assistant":
                kind = _repair(self.messages[part.message]["content"][part.block]["type"])
                why = f"{kind} block in a {role} message {at}"
            elif anthropic and part.kind in ("thinking", "other") and role in ("system", "developer"):
                why = f"non-text block in a {role} message {at}"
            else:
                for k in part.blank_parts:  # kept, without its blank text parts
                    self.note(
                        1,
                        part.message,
                        "drop_block",
                        f"empty text block at content[{part.block}].content[{k}]",
                    )
                    item.content_changed = True
                kept.append(part)
                continue
            self.note(1, part.message, "drop_block", why)
            item.content_changed = True
        item.parts = kept
        # Before the junk check, so the text left is judged as a second pass would.
        if anthropic and role == "assistant" and self.drop_trailing_thinking(1, kept):
            item.content_changed = True

    def drop_trailing_thinking(self, stage: int, parts: list[Part]) -> bool:
        """An assistant message may not end with thinking (a reply cut off while
        thinking, or interleaved thinking before a removed call): those blocks go,
        in place, the last first. Thinking alone stays; the message is empty then."""
        if all(p.kind == "thinking" for p in parts):
            return False
        dropped = False
        while parts[-1].kind == "thinking":
            part = parts.pop()
            self.note(stage, part.message, "drop_block", f"thinking block left last at content[{part.block}]")
            dropped = True
        return dropped

    def settle_calls(self, item: Item) -> None:
        """``tool_calls: []`` goes, tool calls outside assistant messages go, and a
        legacy ``function_call`` is converted (OpenAI, when asked) or removed."""
        message = self.messages[item.origin]
        if isinstance(message.get("tool_calls"), (list, tuple)) and not message["tool_calls"]:
            self.note(1, item.origin, "drop_key", "empty tool_calls")
            item.calls_changed = True
        if item.role != "assistant" and item.calls:
            for call in item.calls:
                self.note(1, item.origin, "drop_call", f'tool call "{call[2]}" in a {item.role} message')
            item.calls = []
            item.calls_changed = True
        if item.has_function_call:
            item.calls_changed = True
            if self.convert_function and self.provider == "openai" and item.role == "assistant":
                self.note(1, item.origin, "convert_function", "legacy function_call converted to tool_calls")
                item.calls.append((item.origin, None, f"call_legacy_{item.origin}"))
                item.legacy_call = True
            else:
                hint = (
                    ""
                    if self.provider == "anthropic" or item.role != "assistant"
                    else " (the convert_function option converts it)"
                )
                self.note(1, item.origin, "drop_call", f"legacy function_call removed{hint}")

    def read(self, index: int, message: Any) -> Item:
        """The record of one message; errors carry a path relative to it."""
        if not isinstance(message, dict):
            raise InvalidTypeError(f": expected a message dict, got {type(message).__name__}")
        if "role" not in message:
            raise InvalidInputError(".role: required field is missing")
        role = _str(message["role"], ".role")
        item = Item(index, role, None)
        content = message.get("content")
        if isinstance(content, str):
            item.texts = [index]
        elif isinstance(content, (list, tuple)):
            item.parts = [self.read_block(index, j, block) for j, block in enumerate(content)]
        elif content is not None:
            raise InvalidTypeError(
                f".content: expected str, a list of content blocks, or None, got {type(content).__name__}"
            )
        item.name = name = _optional_str(message.get("name"), ".name")
        _optional_str(message.get("refusal"), ".refusal")  # its type only: a refusal is not content
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, (list, tuple)):
                raise InvalidTypeError(
                    f".tool_calls: expected a list of tool calls, got {type(calls).__name__}"
                )
            for i, call in enumerate(calls):
                if not isinstance(call, dict):
                    raise InvalidTypeError(
                        f".tool_calls[{i}]: expected a tool call dict, got {type(call).__name__}"
                    )
                if "id" not in call:
                    raise InvalidInputError(f".tool_calls[{i}].id: required field is missing")
                item.calls.append((index, i, _str(call["id"], f".tool_calls[{i}].id")))
        item.answers = _optional_str(message.get("tool_call_id"), ".tool_call_id")
        function_call = message.get("function_call")
        if function_call is not None:
            if not isinstance(function_call, dict):
                kind = type(function_call).__name__
                raise InvalidTypeError(f".function_call: expected a dict with name and arguments, got {kind}")
            function_name = _optional_str(function_call.get("name"), ".function_call.name")
            if function_name is None:
                raise InvalidInputError(".function_call.name: required field is missing")
            item.function_name = function_name
            item.has_function_call = True  # converted or removed in stage 1
        if role == "function":
            item.function_name = name
        return item

    @staticmethod
    def read_block(index: int, j: int, block: Any) -> Part:
        at = f".content[{j}]"
        if not isinstance(block, dict):
            raise InvalidTypeError(f"{at}: expected a content block dict, got {type(block).__name__}")
        if "type" not in block:
            raise InvalidInputError(f"{at}.type: required field is missing")
        kind = _str(block["type"], f"{at}.type")
        if kind in TEXT_TYPES:
            if "text" not in block:
                raise InvalidInputError(f"{at}.text: required field is missing")
            text = _str(block["text"], f"{at}.text")
            return Part(index, j, "blank" if is_blank(text) else "text")
        if kind in ("thinking", "redacted_thinking"):
            return Part(index, j, "thinking")
        for name, field_name, matches in (
            ("tool_use", "id", kind == "tool_use"),
            ("tool_result", "tool_use_id", kind == "tool_result"),
            ("server_use", "id", kind in SERVER_USES),
            ("server_result", "tool_use_id", kind.endswith("_tool_result") and kind != "tool_result"),
        ):
            if matches:
                if field_name not in block:
                    raise InvalidInputError(f"{at}.{field_name}: required field is missing")
                part = Part(index, j, name, _str(block[field_name], f"{at}.{field_name}"))
                results = block.get("content") if name == "tool_result" else None
                if isinstance(results, (list, tuple)):
                    part.blank_parts = tuple(k for k, p in enumerate(results) if is_blank_text_part(p))
                return part
        return Part(index, j, "other")

    def drop_if_junk(self, stage: int, item: Item) -> bool:
        """Drop a user or assistant message without tool calls whose content is
        only text, and junk text."""
        junk = self.junk(item) if item.role in ("user", "assistant") and not item.calls else None
        if junk:
            self.note(stage, item.origin, *junk)
        return junk is not None

    def keeps_after_stripping(self, item: Item, what: str) -> bool:
        if self.empty(item):
            self.note(3, item.origin, "drop_empty", f"empty after removing {what}")
            return False
        return not self.drop_if_junk(3, item)

    def item_text(self, item: Item) -> str | None:
        if item.texts is not None:
            return SEPARATOR.join(self.messages[m]["content"] for m in item.texts)
        if item.parts and all(p.kind in ("text", "blank") for p in item.parts):
            return "\n".join(self.text_of_part(p) for p in item.parts)
        return None

    def text_of_part(self, part: Part) -> str:
        content = self.messages[part.message]["content"]
        text: str = content if part.block is None else content[part.block]["text"]
        return text

    def is_junk_text(self, text: str) -> bool:
        return self.classify(text) is not None

    def junk(self, item: Item) -> tuple[str, str] | None:
        text = self.item_text(item)
        return None if text is None else self.classify(text)

    def classify(self, text: str) -> tuple[str, str] | None:
        """Patterns see the trimmed text with its ASCII letters lowered."""
        text = _repair(text).strip(WHITE_SPACE)
        if len(text) > self.max_chars:
            return None
        text = text.translate(ASCII_LOWER)
        if any(p.fullmatch(text) for p in self.placeholders):
            return ("drop_placeholder", "placeholder text")
        if any(p.fullmatch(text) for p in self.errors):
            return ("drop_error_reply", "error or cancel reply")
        return None

    def empty(self, item: Item) -> bool:
        if item.texts is not None:
            substance = len(item.texts) > 1 or not is_blank(_repair(self.messages[item.texts[0]]["content"]))
        elif item.parts is not None:
            substance = any(p.kind not in ("blank", "thinking") for p in item.parts)
        else:
            substance = False
        return not substance and not item.calls

    # -- stages 2 and 4 ------------------------------------------------------------

    def merge(self, stage: int, items: list[Item]) -> list[Item]:
        out: list[Item] = []
        for item in items:
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous.role == item.role
                and item.role in MERGEABLE
                and (self.provider == "anthropic" or previous.name == item.name)
            ):
                self.note(stage, item.origin, "merge", f"merged into the previous {item.role} message")
                self.merge_into(previous, item)
            else:
                out.append(item)
        return out

    def merge_into(self, previous: Item, item: Item) -> None:
        # A blank string content (kept only for its tool calls) adds nothing.
        for side in (previous, item):
            if (
                side.texts is not None
                and len(side.texts) == 1
                and is_blank(self.messages[side.texts[0]]["content"])
            ):
                side.texts = None
        if previous.texts is not None and item.texts is not None:
            previous.texts = previous.texts + item.texts
        elif item.texts is None and item.parts is None:
            pass  # nothing to add
        elif previous.texts is None and previous.parts is None:
            previous.texts, previous.parts = item.texts, item.parts
        else:
            parts = self.as_parts(previous) + self.as_parts(item)
            if self.provider == "anthropic" and previous.role == "user":
                parts = [p for p in parts if p.kind == "tool_result"] + [
                    p for p in parts if p.kind != "tool_result"
                ]
            elif self.provider == "anthropic" and previous.role == "assistant":
                # Thinking must come first; the blocks before the first thinking run
                # move to just after it, everything else keeps its place.
                first = next((i for i, p in enumerate(parts) if p.kind == "thinking"), 0)
                end = first
                while end < len(parts) and parts[end].kind == "thinking":
                    end += 1
                parts = parts[first:end] + parts[:first] + parts[end:]
            previous.texts, previous.parts = None, parts
        previous.content_changed = True
        if item.calls or item.calls_changed:
            previous.calls = previous.calls + item.calls
            previous.calls_changed = True

    @staticmethod
    def as_parts(item: Item) -> list[Part]:
        if item.texts is not None:
            return [Part(m, None, "text") for m in item.texts]
        return list(item.parts or [])

    # -- stage 3 -------------------------------------------------------------------

    def pair_openai(self, items: list[Item]) -> list[Item]:
        seen: set[str] = set()
        out: list[Item] = []
        i = 0
        while i < len(items):
            if items[i].role != "assistant":
                self.keep_unless_orphan(items[i], out)
                i += 1
                continue
            end = next((k for k in range(i + 1, len(items)) if items[k].role == "assistant"), len(items))
            assistant, segment = items[i], list(range(i + 1, end))
            results: dict[str, deque[int]] = defaultdict(deque)  # tool results by the id they answer
            for k in segment:
                if items[k].role == "tool" and (answers := items[k].answers) is not None:
                    results[answers].append(k)
            first_other = next((k for k in segment if items[k].role != "tool"), end)
            claimed: list[int] = []
            kept = []
            for call in assistant.calls:
                call_id = call[2]
                if call_id in seen:
                    self.note(
                        3, assistant.origin, "drop_duplicate_call", f'duplicate tool call id "{call_id}"'
                    )
                    assistant.calls_changed = True
                    continue
                result = results[call_id].popleft() if results.get(call_id) else None
                if result is None:
                    self.note(3, assistant.origin, "drop_call", f'tool call "{call_id}" has no result')
                    assistant.calls_changed = True
                else:
                    claimed.append(result)
                    seen.add(call_id)
                    kept.append(call)
            stripped = len(kept) != len(assistant.calls)
            assistant.calls = kept
            if not stripped or self.keeps_after_stripping(assistant, "tool calls without results"):
                out.append(assistant)
            claimed_set = set(claimed)
            for k in sorted(claimed):
                if first_other < k:
                    self.note(
                        3,
                        items[k].origin,
                        "move_result",
                        f'tool result for "{self.answer_id(items[k])}" moved to follow its call',
                    )
                out.append(items[k])
            for k in segment:
                if k not in claimed_set:
                    self.keep_unless_orphan(items[k], out)
            i = end
        return out

    def answer_id(self, item: Item) -> str | None:
        if item.legacy_of is not None:
            return f"call_legacy_{item.legacy_of}"
        call_id = self.messages[item.origin].get("tool_call_id")
        return None if call_id is None else _repair(call_id)

    def keep_unless_orphan(self, item: Item, out: list[Item]) -> None:
        if item.role != "tool":
            out.append(item)
            return
        call_id = self.answer_id(item)
        reason = (
            "tool result without tool_call_id"
            if call_id is None
            else f'tool result for "{call_id}" has no matching call'
        )
        self.note(3, item.origin, "drop_result", reason)

    def pair_anthropic(self, items: list[Item]) -> list[Item]:
        seen: set[str] = set()
        out: list[Item] = []
        i = 0
        while i < len(items):
            item = items[i]
            if item.role != "assistant":
                user = self.settle_results(item, set())
                if user is not None:
                    out.append(user)
                i += 1
                continue
            follower = items[i + 1] if i + 1 < len(items) and items[i + 1].role == "user" else None
            # A paused turn sent back: the history's last message may hold a
            # server tool use whose result the model has yet to give.
            paused = i + 1 == len(items)
            available = (
                {p.id for p in (follower.parts or []) if p.kind == "tool_result"} if follower else set()
            )
            claimed: set[str] = set()
            stripped = bool(item.calls)
            for call in item.calls:  # OpenAI-style calls: their tool messages were dropped
                self.note(3, item.origin, "drop_call", f'tool call "{call[2]}" has no result')
                item.calls_changed = True
            item.calls = []
            if item.parts is not None:
                server_results = answered_after_use(item.parts)
                server_kept: set[str] = set()
                kept = []
                for part in item.parts:
                    if part.kind == "server_use":
                        assert part.id is not None  # read_block gives every server use its id
                        if part.id in seen:
                            self.note(
                                3, item.origin, "drop_duplicate_call", f'duplicate tool call id "{part.id}"'
                            )
                            item.content_changed = stripped = True
                        elif part.id in server_results or paused:
                            seen.add(part.id)
                            server_kept.add(part.id)
                            kept.append(part)
                        else:
                            self.note(
                                3, item.origin, "drop_call", f'server tool use "{part.id}" has no result'
                            )
                            item.content_changed = stripped = True
                    elif part.kind != "tool_use":
                        kept.append(part)
                    elif part.id in seen:
                        self.note(
                            3, item.origin, "drop_duplicate_call", f'duplicate tool call id "{part.id}"'
                        )
                        item.content_changed = stripped = True
                    elif part.id in available:
                        assert part.id is not None  # read_block gives every tool_use block its id
                        seen.add(part.id)
                        claimed.add(part.id)
                        kept.append(part)
                    else:
                        self.note(3, item.origin, "drop_call", f'tool call "{part.id}" has no result')
                        item.content_changed = stripped = True
                if self.settle_server_results(item, kept, server_kept):
                    item.content_changed = stripped = True
                if stripped:  # stage 1 left no thinking last; a removed call can
                    self.drop_trailing_thinking(3, kept)
                item.parts = kept
            if not stripped or self.keeps_after_stripping(item, "tool calls without results"):
                out.append(item)
            if follower is not None:
                user = self.settle_results(follower, claimed)
                if user is not None:
                    out.append(user)
                i += 2
            else:
                i += 1
        return out

    def settle_server_results(self, item: Item, parts: list[Part], kept_uses: set[str]) -> bool:
        """Keep in an assistant message's ``parts`` (in place) one server tool
        result per server tool use it kept; returns whether any went."""
        answered: set[str] = set()
        used: set[str | None] = set()  # a result must come after its use (the API refuses one before it)
        kept = []
        for part in parts:
            if part.kind == "server_use":
                used.add(part.id)
            if part.kind != "server_result":
                kept.append(part)
            elif part.id in used and part.id in kept_uses and part.id not in answered:
                assert part.id is not None
                answered.add(part.id)
                kept.append(part)
            else:
                if part.id in answered:
                    reason = f'duplicate server tool result for "{part.id}"'
                elif part.id in kept_uses:
                    reason = f'server tool result for "{part.id}" comes before its server tool use'
                else:
                    reason = f'server tool result for "{part.id}" has no matching server tool use'
                self.note(3, item.origin, "drop_result", reason)
        dropped = len(kept) != len(parts)
        parts[:] = kept
        return dropped

    def settle_results(self, user: Item, claimed: set[str]) -> Item | None:
        stripped = False
        if user.parts is not None:
            answered: set[str] = set()
            results, others = [], []
            reordered = False
            for part in user.parts:
                if part.kind != "tool_result":
                    others.append(part)
                elif part.id in claimed and part.id not in answered:
                    answered.add(part.id)
                    reordered = reordered or bool(others)
                    results.append(part)
                else:
                    what = "duplicate tool result for" if part.id in answered else "tool result for"
                    suffix = "" if part.id in answered else " has no matching call"
                    self.note(3, user.origin, "drop_result", f'{what} "{part.id}"{suffix}')
                    user.content_changed = stripped = True
            if reordered:
                self.note(3, user.origin, "reorder_blocks", "tool results moved to the start of the message")
                user.content_changed = True
            user.parts = results + others
        if stripped and not self.keeps_after_stripping(user, "tool results without calls"):
            return None
        return user

    # -- output --------------------------------------------------------------------

    def build(self, item: Item) -> dict[str, Any]:
        base = self.messages[item.origin]
        converted = item.legacy_of is not None
        if not (item.content_changed or item.calls_changed or converted):
            return base
        message = dict(base)
        if converted:
            message["role"] = "tool"
        if item.content_changed:
            message["content"] = self.content(item)
        if item.calls_changed:
            if item.calls:
                message["tool_calls"] = [self.call(c) for c in item.calls]
            else:
                message.pop("tool_calls", None)
        if converted:
            message["tool_call_id"] = f"call_legacy_{item.legacy_of}"
        if item.has_function_call:
            message.pop("function_call", None)
        if converted:
            message.pop("name", None)
        return message

    def content(self, item: Item) -> Any:
        if item.empty_text:
            return ""
        if item.texts is not None:
            return SEPARATOR.join(self.messages[m]["content"] for m in item.texts)
        if item.parts is not None:
            return [self.part(p) for p in item.parts]
        return None

    def part(self, part: Part) -> Any:
        content = self.messages[part.message]["content"]
        if part.block is None:
            return {"type": "text", "text": content}
        block = content[part.block]
        if not part.blank_parts:
            return block
        kept = [p for k, p in enumerate(block["content"]) if k not in part.blank_parts]
        return {**block, "content": kept or ""}

    def call(self, call: tuple[int, int | None, str]) -> dict[str, Any]:
        message, index, call_id = call
        if index is None:
            return {"id": call_id, "type": "function", "function": self.messages[message]["function_call"]}
        tool_call: dict[str, Any] = self.messages[message]["tool_calls"][index]
        return tool_call

    def build_system(self) -> str | list[Any] | None:
        if not self.system:
            return None
        strings = [item.texts for item in self.system if item.texts is not None]
        if len(strings) == len(self.system):  # every one has string contents
            return SEPARATOR.join(self.messages[m]["content"] for texts in strings for m in texts)
        blocks: list[Any] = []
        for item in self.system:
            blocks.extend(self.part(p) for p in self.as_parts(item))
        return blocks


def _repair(text: str) -> str:
    """Lone surrogates become U+FFFD (valid pairs join), as the extension reads
    every Python string: ids, names and texts are compared in that form."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{path}: expected str, got {type(value).__name__}")
    return _repair(value)


def _optional_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def sanitize(messages: Iterable[dict[str, Any]], provider: str = "openai", **options: Any) -> Result:
    return Sanitizer(provider, **options).sanitize(messages)


def answered_after_use(parts: list[Part]) -> set[str | None]:
    """The server tool uses of ``parts`` with a result after them (one
    before its use answers nothing: the API refuses it)."""
    uses: set[str | None] = set()
    answered: set[str | None] = set()
    for part in parts:
        if part.kind == "server_use":
            uses.add(part.id)
        elif part.kind == "server_result" and part.id in uses:
            answered.add(part.id)
    return answered
