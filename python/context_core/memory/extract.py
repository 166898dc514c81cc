"""The deterministic extractor: what ``persist_learnings()`` keeps with no model.

:func:`extract_facts` reads a conversation sentence by sentence and keeps:

* **labelled sentences**, in user and assistant messages: a sentence starting
  with ``Remember:``, ``Note:``, ``Fact:``, ``Decision:``, ``Constraint:``,
  ``Rule:``, ``Preference:`` (or ``记住``, ``备注``, ``决定``, ``约束``, ``规则``,
  ``偏好`` and a colon, ASCII or full-width) becomes a fact of that kind, keyed
  as below when it reads ``<subject> is <value>``;

and, in user messages only, the first of these that a sentence is:

* a **stated preference**: ``I prefer``, ``I'd rather``, ``my preference is``,
  ``I (don't) like``, ``I love``, ``I hate``, ``我喜欢``, ``我更喜欢``, ``我偏好``,
  ``我倾向``, ``我不喜欢``;
* a **constraint**: a sentence the constraint tagger flags (``must``, ``never``,
  ``always``, ``ensure``, ``do not``, ``必须``, ``禁止``, ``确保``... matched after
  Unicode normalisation, see :class:`~context_core.select.Tagger`);
* a **decision**: ``we decided``, ``the decision is``, ``let's use / go with /
  stick with / switch to``, ``we'll use``, ``we're going with``, ``决定``,
  ``就用``, ``改用``, ``采用``; ``use X for Y`` gets the key ``Y`` (so a later
  ``switch to Z for Y`` replaces it);
* an **exact fact**: a sentence ``<the subject> is/are/=/: <value>`` whose value
  holds a number or an exact value below, keyed by the subject (``The staging
  DB port is 5433`` -> key ``staging db port``); or any sentence holding an
  exact value: a path (``/etc/app.yaml``, ``~/x``, ``src/main.rs``, ``C:\\x``),
  a file name with a known extension, a URL, an e-mail address, an IP address,
  a version (``v1.2.3``), a UUID, a commit hash, a ticket id (``PROJ-123``,
  ``#42``) or an identifier mixing letters and digits (``usr_8f3k2``).

The fact's text is the sentence as written (list bullets and surrounding
white space removed), so exact values are never paraphrased.

It does not keep: system, developer and tool messages (never read), tool
calls and results, thinking and image blocks; anything inside Markdown code
fences or indented code lines; questions (a sentence ending in ``?``);
sentences over :data:`MAX_FACT_CHARS` characters; assistant text other than
labelled sentences; a number that is not the value of an ``X is N`` sentence
("I have 2 questions"); anything that needs understanding to recognise (a
preference stated without one of the phrases above, a decision implied by
agreement, a fact paraphrased across sentences). A model
(``persist_learnings(llm=...)``) does those.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from context_core.errors import InvalidTypeError, MemoryFormatError
from context_core.memory.facts import Fact
from context_core.select import tag

__all__ = ["MAX_FACT_CHARS", "conversation_text", "extract_facts"]

MAX_FACT_CHARS = 300
"""Longer sentences are prose, not facts: the extractor skips them."""

READ_ROLES = frozenset({"user", "assistant"})
"""The roles whose messages are read (system, developer and tool never are)."""

_LABELS = {
    "remember": "fact",
    "note": "fact",
    "fact": "fact",
    "decision": "decision",
    "decided": "decision",
    "constraint": "constraint",
    "rule": "constraint",
    "preference": "preference",
    "记住": "fact",
    "备注": "fact",
    "决定": "decision",
    "约束": "constraint",
    "规则": "constraint",
    "偏好": "preference",
}
_LABEL = re.compile(
    r"(?P<label>"
    + "|".join(sorted(map(re.escape, _LABELS), key=len, reverse=True))
    + r")\s*[:\uff1a]\s*(?P<rest>.+)",
    re.I,
)
_PREFERENCE = re.compile(
    r"\bI(?:'d| would)? (?:really |much |strongly )?(?:prefer|rather)\b|\bmy preference is\b"
    r"|\bI (?:really )?(?:(?:don't|do not) like|like|love|hate|dislike)\b"
    r"|我(?:更|比较)?喜欢|我偏好|我倾向|我不喜欢",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:we|I)(?:'ve| have)? decided\b|\bthe decision is\b"
    r"|\blet'?s (?:use|go with|stick with|switch to|keep using|adopt)\b"
    r"|\bwe(?:'ll| will| are going to|'re going to) (?:use|go with|stick with|switch to|adopt)\b"
    r"|\bwe're going with\b|\bwe are going with\b"
    r"|决定|就用|改用|采用",
    re.I,
)
_DECISION_KEY = re.compile(
    r"\b(?:use|go with|stick with|switch to|adopt|keep using)\s+.+?\s+(?:for|as)\s+(?:the\s+|our\s+|a\s+)?"
    r"(?P<key>[\w][\w ./-]{0,40}?)\s*[.!;]?$",
    re.I,
)

# Exact values: the tokens that make a sentence worth keeping verbatim.
_EXACT = re.compile(
    r"https?://\S+"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
    r"|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|(?:^|(?<=[\s(\"'`]))(?:~|\.{1,2})?/[\w.@%+~-]+(?:/[\w.@%+~-]*)*"
    r"|\b[A-Za-z]:\\[\w\\ .-]+"
    r"|\b[\w.-]+(?:/[\w.-]+)+\.\w{1,8}\b"
    r"|\b[\w-]+\.(?:py|rs|md|json|ya?ml|toml|txt|cfg|ini|conf|sh|js|ts|tsx|go|java|c|h|cc|cpp|hpp|sql"
    r"|env|lock|log|csv|xml|html|css|rb|php|kt|swift)\b"
    r"|\bv\d+(?:\.\d+)+\b|\b\d+\.\d+\.\d+\b"
    r"|\b[A-Z][A-Z0-9]+-\d+\b|(?<![\w&])#\d+\b"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
    r"|\b(?=\w*[A-Za-z])(?=\w*\d)\w+[_-][\w-]*\b",
)
_NUMBER = re.compile(r"\d")
_KEYED = re.compile(
    r"(?:(?:the|our|my|your)\s+)?(?P<subject>[^\W\d_][\w'./ -]{0,60}?)"
    r"\s*(?:\bis set to\b|\bis at\b|\blives (?:at|in)\b|\bis\b|\bare\b|=|:(?=\s)|\uff1a)\s*(?P<value>.+)",
    re.I,
)
_KEYED_ZH = re.compile(r"(?P<subject>[\u4e00-\u9fff][\w\u4e00-\u9fff ]{0,19}?)(?:是|为|在)(?P<value>.+)")
_NOT_SUBJECTS = frozenset(
    {"it", "this", "that", "there", "here", "he", "she", "they", "we", "i", "you", "what", "which"}
    | {"who", "where", "when", "why", "how", "one"}
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f\uff1b;])")
_BULLET = re.compile(r"(?:[-*+•]|\d{1,3}[.)])\s+")
_FENCE = re.compile(r"\s*(?:```|~~~)")


def _blocks_text(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                yield block
            elif isinstance(block, Mapping) and block.get("type") in ("text", "input_text", "output_text"):
                text = block.get("text")
                if isinstance(text, str):
                    yield text


def conversation_text(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(role, text)`` of the user and assistant messages, in order: plain
    text content and text blocks only. System, developer and tool messages,
    tool calls and results, thinking and image blocks are left out."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise InvalidTypeError("messages must be a list of message dicts")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidTypeError(f"messages[{index}] must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidTypeError(f"messages[{index}] has no 'role' string")
        if role not in READ_ROLES:
            continue
        text = "\n".join(_blocks_text(message.get("content")))
        if text.strip():
            out.append((role, text))
    return out


def _lines(text: str) -> Iterator[str]:
    """Lines outside code fences and indented code."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")) or not line.strip():
            continue
        line = line.strip()
        bullet = _BULLET.match(line)
        yield line[bullet.end() :] if bullet else line


def _sentences(line: str) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(line):
        sentence = sentence.strip()
        if sentence:
            yield sentence


def _fact(text: str, kind: str, key: str | None = None) -> Fact | None:
    if len(text) > MAX_FACT_CHARS:
        return None
    try:
        return Fact(text, kind, key)
    except MemoryFormatError:
        return None


def _subject_key(subject: str) -> str | None:
    words = subject.strip(" '-./").lower().split()
    if not words or len(words) > 6 or (len(words) == 1 and words[0] in _NOT_SUBJECTS):
        return None
    return " ".join(words)


def _value_key(sentence: str) -> str | None:
    """The subject of ``<subject> is <value>`` where the value holds an exact
    token or a number; else ``None``."""
    for pattern in (_KEYED, _KEYED_ZH):
        match = pattern.fullmatch(sentence.rstrip(".!\u3002\uff01"))
        if match is None:
            continue
        value = match.group("value")
        if _EXACT.search(value) or _NUMBER.search(value):
            key = _subject_key(match.group("subject"))
            if key is not None:
                return key
    return None


def _labelled(sentence: str) -> Fact | None:
    labelled = _LABEL.match(sentence)
    if labelled is None:
        return None
    kind = _LABELS[labelled.group("label").lower()]
    rest = labelled.group("rest").strip()
    if kind == "decision":
        decision = _decision(rest)
        if decision is None or decision.key is not None:
            return decision
    return _fact(rest, kind, _value_key(rest))


def _classify(sentence: str, role: str) -> Fact | None:
    if role != "user" or sentence.endswith(("?", "\uff1f")):
        return None
    if _PREFERENCE.search(sentence):
        return _fact(sentence, "preference")
    if "constraint" in tag(sentence):
        return _fact(sentence, "constraint")
    if _DECISION.search(sentence):
        return _decision(sentence)
    key = _value_key(sentence)
    if key is not None:
        return _fact(sentence, "fact", key)
    if _EXACT.search(sentence):
        return _fact(sentence, "fact")
    return None


def _decision(sentence: str) -> Fact | None:
    match = _DECISION_KEY.search(sentence)
    key = _subject_key(match.group("key")) if match else None
    return _fact(sentence, "decision", key)


def extract_facts(messages: Iterable[Mapping[str, Any]]) -> list[Fact]:
    """The facts worth keeping from a conversation, oldest first, without
    duplicates (see the module's documentation for exactly what is kept)."""
    facts: dict[str, Fact] = {}
    for role, text in conversation_text(messages):
        for line in _lines(text):
            for sentence in _sentences(line):
                fact = _labelled(sentence) if _LABEL.match(sentence) else _classify(sentence, role)
                if fact is not None:
                    facts.pop(fact.signature, None)  # the newest copy, at its place
                    facts[fact.signature] = fact
    return list(facts.values())
