"""The guard between a model's reply and the log: only a ``<summary>`` that
passes every check is kept; anything else is :class:`Rejected` with its
reason, and nothing is written. No error text ever becomes a summary."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from context_core._core import Tokenizer
from context_core.summarize.exact import carried, named, occurs
from context_core.summarize.prompts import ECHO_MARKERS, SECTIONS

__all__ = ["Rejected", "Summary", "check_reply", "check_sections"]


@dataclass(frozen=True)
class Summary:
    """A summary that passed the guard.

    ``text`` is what the log stores; ``tokens`` its exact count; ``level`` 2
    (a segment) or 3 (the whole conversation); ``uncarried`` the keys of the
    constraints it does not carry (see :func:`~context_core.summarize.exact.carried`),
    which must stay raw; ``source`` ``"model"`` or ``"offline"``."""

    text: str
    tokens: int
    level: int
    uncarried: tuple[int, ...] = ()
    source: str = "model"


@dataclass(frozen=True)
class Rejected:
    """No summary: ``reason`` says why (nothing was written)."""

    reason: str
    source: str = "model"


_OPEN = re.compile(r"<\s*summary\s*>", re.IGNORECASE)
_CLOSE = re.compile(r"<\s*/\s*summary\s*>", re.IGNORECASE)
_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*)?("
    + "|".join(re.escape(s) for s in SECTIONS)
    + r")(?:\*\*)?[ \t]*:?(?:\*\*)?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_HTML = re.compile(r"<!doctype\s+html|<\s*html[\s>]|<\s*head\s*>|<\s*body[\s>]", re.IGNORECASE)
_ERROR_START = re.compile(
    r"\A\s*(?:error\b|exception\b|traceback\b|fatal\b|rate[ -]?limit|too many requests|internal server error|"
    r"bad gateway|service unavailable|gateway time-?out|request failed|\{\s*\"(?:error|detail)\"|"
    r"\d{3}\s+(?:error|bad|internal|service|gateway|too|forbidden|unauthori[sz]ed|not found))",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"\A\s*(?:I'?m sorry|I am sorry|sorry,|I apologi[sz]e|I can(?:no|')t|I cannot|"
    r"I'?m (?:not able|unable)|I am (?:not able|unable)|I won'?t|I will not|As an AI|Unfortunately,? I|"
    r"抱歉|对不起|很抱歉|我无法|我不能)",
    re.IGNORECASE,
)
_TRANSCRIPT_MARKUP = re.compile(r"<\s*/?\s*(?:msg|transcript|segment|rules|analysis)\b", re.IGNORECASE)


def check_sections(text: str) -> str | None:
    """``None`` if ``text`` has every section heading of
    :data:`~context_core.summarize.prompts.SECTIONS`, once each and in order,
    each followed by something; else what is wrong."""
    found = [(m.group(1).casefold(), m.start(), m.end()) for m in _HEADING.finditer(text)]
    names = [name for name, _, _ in found]
    for section in SECTIONS:
        count = names.count(section.casefold())
        if count != 1:
            return f"section {section!r} appears {count} times (expected once)"
    if names != [s.casefold() for s in SECTIONS]:
        return "sections out of order (expected " + ", ".join(SECTIONS) + ")"
    bounds = [start for _, start, _ in found[1:]] + [len(text)]
    for (name, _, end), stop in zip(found, bounds, strict=True):
        if not text[end:stop].strip():
            return f"section {name!r} is empty"
    return None


def _summary_body(reply: str) -> str | Rejected:
    opens = list(_OPEN.finditer(reply))
    closes = list(_CLOSE.finditer(reply))
    if not opens:
        return Rejected("no <summary> in the reply")
    if len(opens) > 1 or len(closes) > 1:
        return Rejected(f"{len(opens)} <summary> and {len(closes)} </summary> tags (expected one each)")
    if not closes:
        return Rejected("the <summary> is not closed")
    start, end = opens[0].end(), closes[0].start()
    if end < start:
        return Rejected("</summary> comes before <summary>")
    if reply[closes[0].end() :].strip():
        return Rejected("text after </summary>")
    body = reply[start:end].strip()
    if not body:
        return Rejected("the <summary> is empty")
    return body


def check_reply(
    reply: str,
    *,
    level: int,
    covered: str,
    max_tokens: int,
    tokenizer: Tokenizer,
    constraints: Sequence[tuple[int, str]] = (),
) -> Summary | Rejected:
    """The :class:`Summary` in ``reply``, or why there is none.

    ``covered`` is the text the summary may name (every covered message's
    text, tool call ids and arguments); ``max_tokens`` bounds the summary;
    ``constraints`` are ``(key, text)`` of the rules it must carry (those it
    does not are listed in ``uncarried``, not refused)."""
    if not isinstance(reply, str) or not reply.strip():
        return Rejected("the reply is empty")
    if _HTML.search(reply):
        return Rejected("the reply is an HTML page")
    if _ERROR_START.match(reply):
        return Rejected("the reply is an error message")
    if _REFUSAL.match(reply):
        return Rejected("the reply is a refusal")
    body = _summary_body(reply)
    if isinstance(body, Rejected):
        return body
    if _ERROR_START.match(body):
        return Rejected("the summary is an error message")
    if _REFUSAL.match(body):
        return Rejected("the summary is a refusal")
    if _TRANSCRIPT_MARKUP.search(body):
        return Rejected("the summary holds the prompt's markup")
    folded = body.casefold()
    for marker in ECHO_MARKERS:
        if marker.casefold() in folded:
            return Rejected("the summary echoes the prompt")
    problem = check_sections(body)
    if problem is not None:
        return Rejected(problem)
    tokens = tokenizer.count(body, limit=max_tokens)
    if tokens > max_tokens:
        return Rejected(f"the summary is over its bound of {max_tokens} tokens")
    call_ids, files = named(body)
    for call_id in call_ids:
        if not occurs(call_id, covered):
            return Rejected(
                f"the summary names tool call {call_id!r}, which the covered messages do not hold"
            )
    for name in files:
        if not occurs(name, covered):
            return Rejected(f"the summary names the file {name!r}, which the covered messages do not hold")
    uncarried = tuple(key for key, text in constraints if not carried(text, body))
    return Summary(body, tokens, level, uncarried, "model")
