"""The exact facts of a segment that go to memory when it is summarised:
prose summaries reword, memory keeps values exact.

Only facts with a subject and an exact value (an id, a path, a number with
its unit, a date, a version) are kept: ``<subject> is <value>`` sentences
said by the user or the assistant, and ``key: value`` lines of tool output
(or the scalar fields of a tool output that is one JSON object).
Each is keyed by its subject, so a newer value replaces an older one in
memory. All of memory goes into every prompt, so a segment gives at most
:data:`MAX_FACTS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from context_core.errors import ContextCoreError
from context_core.memory import Fact
from context_core.summarize.exact import exact_values
from context_core.summarize.offline import own_text
from context_core.summarize.transcript import message_text

__all__ = ["MAX_FACTS", "exact_facts"]

#: At most this many facts per segment: the newest subjects.
MAX_FACTS = 8
_SUBJECT = r"(?P<key>(?:the |our |my )?[A-Za-z][A-Za-z0-9_]*(?: [A-Za-z0-9_][\w-]*){0,4})"
_SAID = re.compile(_SUBJECT + r" (?:is|are|was|=|:) (?P<value>[^\n]{1,120}?)[.;!]?$")
_SAID_ZH = re.compile(
    r"(?P<key>[\u4e00-\u9fffA-Za-z0-9_ ]{2,16}?)(?:是|为|在) ?"
    r"(?P<value>[^\n\u3002\uff01]{1,80})[\u3002\uff01]?$"
)
_KEY_VALUE = re.compile(
    r"^\s*[\"']?(?P<key>[A-Za-z]\w*(?:[ .][A-Za-z]\w*){0,3})[\"']?\s*[:=]\s*"
    r"(?P<value>[^\s{\[/][^\n]{0,120}?)[,;]?\s*$"
)
# A value worth keeping exact: an id, a path, a long number, a number with a unit, a version.
_EXACT = re.compile(
    r"[A-Za-z]+[-_]\d|\d{3,}|\w/\w|\d(?:\.\d+)?\s?(?:ms|s|%|kb|mb|gb|h|min)\b|\bv?\d+\.\d+\.\d+",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n+")
_NOT_SUBJECT = frozenset({"it", "this", "that", "there", "here", "what", "which", "who", "http", "https"})


def _fact(subject: str, value: str) -> Fact | None:
    subject = " ".join(subject.split())
    if subject.lower().startswith(("the ", "our ", "my ")):
        subject = subject.split(" ", 1)[1]
    key = subject.replace("_", " ").lower()
    value = value.strip()
    if not key or key.split()[0] in _NOT_SUBJECT or "://" in key or not _EXACT.search(value):
        return None
    if not exact_values(value):
        return None
    try:
        return Fact(f"{subject}: {value}", "fact", key)
    except ContextCoreError:
        return None


def _said(text: str) -> list[Fact]:
    out = []
    for sentence in _SENTENCE.split(text):
        sentence = sentence.strip()
        if not sentence or len(sentence) > 200 or sentence.endswith(("?", "\uff1f")):
            continue
        match = _SAID.fullmatch(sentence) or _SAID_ZH.fullmatch(sentence)
        if match is not None:
            fact = _fact(match.group("key"), match.group("value"))
            if fact is not None:
                out.append(fact)
    return out


#: A JSON tool result is read up to this size, this deep and for this many leaves.
_JSON_CHARS = 64_000
_JSON_DEPTH = 3
_JSON_LEAVES = 64
_JSON_KEY = re.compile(r"[A-Za-z]\w{0,40}")


def _json_pairs(value: Any, path: str, depth: int, out: list[tuple[str, str]]) -> None:
    """The scalar leaves of a decoded JSON value, each as (dotted key, value)."""
    if len(out) >= _JSON_LEAVES:
        return
    if isinstance(value, Mapping) and depth < _JSON_DEPTH:
        for key, item in value.items():
            if isinstance(key, str) and _JSON_KEY.fullmatch(key):
                _json_pairs(item, f"{path}.{key}" if path else key, depth + 1, out)
    elif isinstance(value, str | int | float) and not isinstance(value, bool) and path:
        out.append((path.replace(".", " "), str(value)))


def _tool(text: str) -> list[Fact]:
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}") and len(stripped) <= _JSON_CHARS:
        # One JSON object (often on one line): its scalar fields, as key: value lines are read.
        try:
            decoded = json.loads(stripped)
        except ValueError:
            decoded = None
        if isinstance(decoded, Mapping):
            pairs: list[tuple[str, str]] = []
            _json_pairs(decoded, "", 0, pairs)
            return [fact for key, value in pairs if (fact := _fact(key, value)) is not None]
    out = []
    for line in text.splitlines():
        match = _KEY_VALUE.match(line)
        if match is not None:
            fact = _fact(match.group("key"), match.group("value"))
            if fact is not None:
                out.append(fact)
    return out


def exact_facts(messages: Sequence[Mapping[str, Any]]) -> list[Fact]:
    """The facts of ``messages`` worth keeping exact (see the module docs):
    the newest value of each subject, the newest :data:`MAX_FACTS` subjects."""
    found: list[Fact] = []
    for message in messages:
        role = message.get("role")
        if role in ("tool", "function"):
            content = message.get("content")
            found.extend(_tool(content if isinstance(content, str) else message_text(message)))
        elif role in ("user", "assistant"):
            found.extend(_said(own_text(message)))
            if role == "user" and not isinstance(message.get("content"), str):
                found.extend(_tool(message_text(message)))  # Anthropic tool results
    newest: dict[str, Fact] = {}
    for fact in found:
        key = fact.key or fact.text
        newest.pop(key, None)  # a later value moves its subject to the end
        newest[key] = fact
    return list(newest.values())[-MAX_FACTS:]
