"""The offline summarizer: deterministic and extractive, the default when
no model is given, so summaries and compaction work with no model at all.

A segment summary keeps the user's rules whole (outside the bound: a rule
is never cut), then, in this order of priority, the newest state and next
step, decisions, errors and their fixes, and files touched, bounded in
tokens (lower priorities are cut first). A global summary merges
segment summaries section by section: the rules given and every rule the
segments carry, decisions (the newest kept first), the newest state and
next steps, and the union of files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from context_core._core import Tagger, Tokenizer
from context_core.summarize.exact import named_files
from context_core.summarize.prompts import SECTIONS
from context_core.summarize.transcript import call_parts, message_text, tool_calls

__all__ = [
    "MAX_WHOLE_RULE_CHARS",
    "PASTE_LINES",
    "constraint_messages",
    "offline_global",
    "offline_segment",
    "own_text",
    "parse_sections",
    "rule_texts",
]

_TAGGER = Tagger()
_SENTENCE = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n+")
_DECISION = re.compile(
    r"\b(?:decided|decide to|we(?:'ll| will| should) (?:use|go|keep|switch|move|drop)|"
    r"let'?s (?:use|go|keep|switch)|going with|switch(?:ed|ing)? to|chose|choose|agreed|instead of|"
    r"from now on|settled on|the plan is)\b"
    r"|决定|采用|改用|就用|统一用|以后都",
    re.IGNORECASE,
)
# Literal-led alternatives only: a leading \w* would rescan every word.
# Every match holds one of _ERROR_WORDS (which finds the lines to match).
_ERROR = re.compile(
    r"(?:Error|Exception):|\b(?:FAILED|failed|panicked|panic|fatal)\b|HTTP 5\d\d|报错|失败|异常"
)
_ERROR_WORDS = (
    "Error:",
    "Exception:",
    "FAILED",
    "failed",
    "panic",
    "fatal",
    "HTTP 5",
    "报错",
    "失败",
    "异常",
)
_TRIVIAL = re.compile(
    r"^\s*(?:ok(?:ay)?|thanks?|thank you|great|good|sure|yes|no|好的?|谢谢|收到)[.!\u3002\uff01]*\s*$", re.I
)
_ITEM = re.compile(r"^\s*[-*]\s+(.*\S)\s*$")
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*)?("
    + "|".join(re.escape(s) for s in (*SECTIONS, "Files touched", "Errors and fixes"))
    + r")(?:\*\*)?\s*:?(?:\*\*)?\s*$",
    re.IGNORECASE,
)
#: Extra sections the offline summaries add after the required ones.
EXTRA_SECTIONS = ("Errors and fixes", "Files touched")
_LINE_TOKENS = 120
#: At most this many lines of a section (the newest).
_SECTION_LINES = {"Errors and fixes": 5, "Files touched": 12, "Decisions": 12}


def _role(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    return role if isinstance(role, str) else ""


def own_text(message: Mapping[str, Any]) -> str:
    """The message's own text (no tool calls or results)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text"
        )
    return ""


def _call_arguments(message: Mapping[str, Any]) -> str:
    """The arguments of a message's tool calls (OpenAI and Anthropic)."""
    parts = []
    for call in tool_calls(message):
        arguments = call_parts(call)[1]
        if arguments is not None:
            parts.append(str(arguments))
    content = message.get("content")
    if isinstance(content, Sequence) and not isinstance(content, str):
        parts.extend(
            str(b.get("input", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"
        )
    return "\n".join(parts)


#: A rule text up to this long is carried whole, and so is a paragraph of a
#: longer one that states a rule. A longer paragraph (a spec pasted with its
#: prose) is carried by its sentences that state a rule, each with the
#: sentence before it (which often names what the rule is about), so a few
#: long messages cannot fill every later request with their summaries.
MAX_WHOLE_RULE_CHARS = 1000

#: A longer text tagged ``log`` with at least this many lines is a paste (a
#: trace, a log that says "must not be null"): output, never a rule. Prose
#: that names a link or a ``curl`` line is tagged ``log`` too, and is not one.
PASTE_LINES = 8

_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
#: A sentence ends after . ! ? and a space, and after their full-width forms
#: (Chinese puts no space); a wrapped line stays in its sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*")
#: A stop that ends an abbreviation, not a sentence ("never use e.g. pickle").
_ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|etc|vs|cf|approx|incl|Mr|Mrs|Ms|Dr|St|No)\.$", re.IGNORECASE)
#: A line that is an item of a list: a long "sentence" of them is cut at its lines.
_LIST_LINE = re.compile(r"^[^\S\n]*(?:[-*\u2022]|\d+[.)])\s+", re.MULTILINE)
_LINE_BREAK = re.compile(r"\n")


def _spans(text: str, pattern: re.Pattern[str], start: int, end: int) -> list[tuple[int, int]]:
    """``text[start:end]`` cut where ``pattern`` matches, as offsets."""
    spans, at = [], start
    for match in pattern.finditer(text, start, end):
        spans.append((at, match.start()))
        at = match.end()
    spans.append((at, end))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _sentences_of(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The sentences of the paragraph ``text[start:end]``, as offsets: a
    stop after an abbreviation does not end one; one over
    :data:`MAX_WHOLE_RULE_CHARS` that holds a list is cut at its lines."""
    sentences: list[tuple[int, int]] = []
    at = start
    for match in _SENTENCE_END.finditer(text, start, end):
        if _ABBREVIATION.search(text, at, match.start()):
            continue
        sentences.append((at, match.start()))
        at = match.end()
    sentences.append((at, end))
    out: list[tuple[int, int]] = []
    for a, b in sentences:
        if b - a > MAX_WHOLE_RULE_CHARS and len(_LIST_LINE.findall(text, a, b)) >= 2:
            out.extend(_spans(text, _LINE_BREAK, a, b))
        elif text[a:b].strip():
            out.append((a, b))
    return out


def rule_texts(text: str, tagger: Tagger | None = None, *, tagged: bool = False) -> list[str]:
    """The rules ``text`` (a user's own text) states, each word for word: the
    text whole when it is tagged ``constraint`` (or ``tagged``: marked so by
    the caller) and at most :data:`MAX_WHOLE_RULE_CHARS` long. A longer one
    by its paragraphs that state a rule, whole when at most that long, else
    by their rule sentences, each with the sentence before it; the text
    whole if no part of it says a rule (one the caller marked). None for a
    paste (see :data:`PASTE_LINES`)."""
    tagger = tagger or _TAGGER
    text = text.strip()
    tags = tagger.tag(text) if text else []
    if not text or not (tagged or "constraint" in tags):
        return []
    if len(text) <= MAX_WHOLE_RULE_CHARS:
        return [text]
    if "log" in tags and sum(1 for line in text.splitlines() if line.strip()) >= PASTE_LINES:
        return []
    kept: list[tuple[int, int]] = []
    for start, end in _spans(text, _PARAGRAPH_BREAK, 0, len(text)):
        if "constraint" not in tagger.tag(text[start:end]):
            continue
        if end - start <= MAX_WHOLE_RULE_CHARS:
            kept.append((start, end))
            continue
        sentences = _sentences_of(text, start, end)
        for i, (a, b) in enumerate(sentences):
            if "constraint" in tagger.tag(text[a:b]):
                kept.append((sentences[i - 1][0] if i else a, b))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(kept):  # a rule's context that is the rule before it: one piece
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    found = [text[a:b].strip() for a, b in merged]
    return list(dict.fromkeys(piece for piece in found if piece)) or [text]


def constraint_messages(
    messages: Sequence[Mapping[str, Any]], tagger: Tagger | None = None
) -> list[tuple[int, str]]:
    """``(index, text)`` of the user's rules among ``messages``: those of
    user (and system or developer) messages' own texts (see
    :func:`rule_texts`; a message may state several)."""
    out: list[tuple[int, str]] = []
    for index, message in enumerate(messages):
        if _role(message) in ("user", "system", "developer"):
            out.extend((index, text) for text in rule_texts(own_text(message), tagger))
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


class _Builder:
    """Lines per section, each with a priority; cut to the bound lowest first."""

    def __init__(self, tokenizer: Tokenizer, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.lines: dict[str, list[tuple[int, int, str]]] = {s: [] for s in (*SECTIONS, *EXTRA_SECTIONS)}
        self.order = 0

    def add(self, section: str, text: str, priority: int) -> None:
        # A rule (priority 0) is kept whole: cut, it would lose the values
        # that carry it. Everything else is one line of bounded length.
        text = (
            _one_line(text) if priority == 0 else self.tokenizer.truncate(_one_line(text), _LINE_TOKENS, "…")
        )
        if text and all(text != line for _, _, line in self.lines[section]):
            self.lines[section].append((priority, self.order, text))
            self.order += 1

    def render(self, keep: set[tuple[str, int]] | None = None) -> str:
        out = []
        for section, lines in self.lines.items():
            chosen = [text for _, order, text in lines if keep is None or (section, order) in keep]
            if not chosen and section in EXTRA_SECTIONS:
                continue
            out.append(f"{section}:")
            out.extend(f"- {text}" for text in chosen) if chosen else out.append("- none")
        return "\n".join(out)

    def build(self) -> str:
        """Every rule, and every other line that fits: those are taken by
        priority (then the newest first) while the sum of their counts stays
        within the bound, which the rules are outside of; the text is then
        counted exactly and, in the rare case joining made it longer, the
        lowest lines go until it fits."""
        ranked = sorted(
            ((p, -o, s, text) for s, lines in self.lines.items() for p, o, text in lines),
            key=lambda item: (item[0], item[1]),
        )
        count = self.tokenizer.count
        used = sum(count(f"{s}:\n- none\n") for s in SECTIONS)
        keep: list[tuple[str, int]] = []
        taken: dict[str, int] = {}
        rules = 0
        bound = self.max_tokens  # grows by each rule's tokens: rules are outside it
        for priority, neg_order, section, text in ranked:  # the rules (priority 0) come first
            cost = count(f"- {text}\n")
            if priority == 0:
                keep.append((section, -neg_order))
                rules += 1
                used += cost
                bound += cost
                continue
            if taken.get(section, 0) >= _SECTION_LINES.get(section, 10**9):
                continue
            if section in EXTRA_SECTIONS and not taken.get(section):
                cost += count(f"{section}:\n")
            if used + cost <= bound:
                used += cost
                keep.append((section, -neg_order))
                taken[section] = taken.get(section, 0) + 1
        while True:
            text = self.render(set(keep))
            if len(keep) == rules or count(text, limit=bound) <= bound:
                return text
            keep.pop()


#: Only the end of a tool output is searched for its error: that is where
#: a trace, a failed test run or a status line says what went wrong.
_ERROR_TAIL_CHARS = 4_000
#: Characters kept on each side of the error in a long line (one-line JSON).
_ERROR_CONTEXT = 160


def _first_error(output: str) -> str | None:
    """The first line naming an error in the end of ``output``. Each error
    the pattern finds holds one of :data:`_ERROR_WORDS`, so lines are
    found by substring search (in C) and only those are matched."""
    start = max(0, len(output) - _ERROR_TAIL_CHARS)
    pos = start
    while True:
        hits = [i for word in _ERROR_WORDS if (i := output.find(word, pos)) != -1]
        if not hits:
            return None
        at = min(hits)
        line_start = max(output.rfind("\n", start, at) + 1, start)
        line_end = output.find("\n", at)
        if line_end == -1:
            line_end = len(output)
        match = _ERROR.search(output, line_start, line_end)
        if match is not None:
            begin = max(line_start, match.start() - _ERROR_CONTEXT)
            return output[begin : min(line_end, match.end() + _ERROR_CONTEXT)].strip() or None
        pos = line_end + 1


def offline_segment(
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    tokenizer: Tokenizer,
    rules: Sequence[str] | None = None,
    tagger: Tagger | None = None,
) -> str:
    """A segment summary of ``messages`` (see the module docs); ``rules``
    (default: :func:`constraint_messages`) are carried whole, outside the
    bound."""
    builder = _Builder(tokenizer, max_tokens)
    found = constraint_messages(messages, tagger)
    for text in [text for _, text in found] if rules is None else rules:
        builder.add("Constraints", text, 0)
    last_user = last_assistant = None
    files: list[str] = []
    for message in messages:
        role = _role(message)
        text = own_text(message)
        if role != "tool":  # files the agent named or passed to a tool, not every path a log prints
            files.extend(named_files(text + "\n" + _call_arguments(message)))
        # The newest request, even one that states a rule too ("Fix the
        # login bug; you must keep the API stable"): passed over, an older
        # request read as the next step.
        if role == "user" and text.strip() and not _TRIVIAL.match(text):
            last_user = text
        if role == "assistant" and text.strip():
            last_assistant = text
        if role in ("user", "assistant"):
            for sentence in _sentences(text):
                if _DECISION.search(sentence):
                    builder.add("Decisions", sentence, 3)
        result = message_text(message) if role in ("tool", "function") else ""
        if not result and role == "user" and not text.strip():
            result = message_text(message)  # Anthropic tool results
        error = _first_error(result)
        if error:
            builder.add("Errors and fixes", error, 4)
    if last_assistant is not None:
        builder.add("Current state", " ".join(_sentences(last_assistant)[:2]), 1)
    elif messages:  # never "none": a segment always ends somewhere
        builder.add("Current state", f"{len(messages)} messages, the last from the {_role(messages[-1])}", 1)
    if last_user is not None:
        builder.add("Next steps", "The user asked: " + _one_line(last_user), 2)
    for name in dict.fromkeys(files):
        builder.add("Files touched", name, 5)
    return builder.build()


def parse_sections(text: str) -> dict[str, list[str]]:
    """The bullet items of each section of a summary (lower-cased names)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = sections.setdefault(heading.group(1).casefold(), [])
            continue
        item = _ITEM.match(line)
        if current is not None and item and item.group(1).casefold() != "none":
            current.append(item.group(1))
    return sections


def offline_global(
    segments: Sequence[str],
    rules: Sequence[str],
    *,
    max_tokens: int,
    tokenizer: Tokenizer,
) -> str:
    """A global summary merging ``segments`` (oldest first) and ``rules``:
    the rules carried whole, outside ``max_tokens``; the segments' own
    Constraints lines (the rules they carried) within it, first after the
    current state. Whole, every rule a segment ever carried came back in
    every global summary, past any bound the compactor set on the rules."""
    builder = _Builder(tokenizer, max_tokens)
    parsed = [parse_sections(text) for text in segments]
    for rule in rules:
        builder.add("Constraints", rule, 0)
    for sections in parsed:
        for rule in sections.get("constraints", []):
            builder.add("Constraints", rule, 2)
    for sections in parsed:
        for line in sections.get("decisions", []):
            builder.add("Decisions", line, 3)
        for line in sections.get("errors and fixes", []):
            builder.add("Errors and fixes", line, 4)
        for line in sections.get("files touched", []):
            builder.add("Files touched", line, 5)
    newest = next((s for s in reversed(parsed) if s.get("current state")), {})
    for line in newest.get("current state", []):
        builder.add("Current state", line, 1)
    if not newest:
        builder.add("Current state", f"merged from {len(segments)} segment summaries", 1)
    newest = next((s for s in reversed(parsed) if s.get("next steps")), {})
    for line in newest.get("next steps", []):
        builder.add("Next steps", line, 2)
    return builder.build()
