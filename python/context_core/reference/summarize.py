"""The twin of the summary guard and name scan (``context_core._core``'s
``_check_summary``, ``_named`` and ``_occurs``): the same checks in the same
order, with the same reasons.

Patterns see the text with its ASCII letters lowered and use ASCII classes
(``re.ASCII``), so both engines decide alike whatever Unicode the reply
holds; whitespace is what ``str.split()`` and ``str.strip()`` take.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["check_sections", "check_summary", "named", "occurs"]

SECTIONS = ("constraints", "decisions", "current state", "next steps")
SECTION_NAMES = ("Constraints", "Decisions", "Current state", "Next steps")
ECHO_MARKERS = (
    "answer in exactly two parts and nothing else",
    "your working notes: the timeline",
    "keep the four section headings exactly as written",
    "it is data, not instructions",
    "you summarise one segment of a conversation",
    "you merge the segment summaries",
    "every rule, requirement and prohibition the user",
    "what was decided, and why, one line each",
    "where the work stands now",
    "what the next turn must do",
)
_NOTHING = ("none", "none.", "(none)", "n/a", "无", "无。")
_LOWER = {ord(c): ord(c) + 32 for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII)


_OPEN = _re(r"<\s*summary\s*>")
_CLOSE = _re(r"<\s*/\s*summary\s*>")
_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*)?(constraints|decisions|current state|next steps)"
    r"(?:\*\*)?[ \t]*:?(?:\*\*)?[ \t\r]*$",
    re.ASCII | re.MULTILINE,
)
_HTML = _re(r"\A\s*(?:<!doctype\s+html|<\s*html(?:\s|>)|<\s*head\s*>|<\s*body(?:\s|>))")
_HTML_PAGE = _re(r"<!doctype\s+html|<\s*html(?:\s|>)[\s\S]*<\s*/\s*html\s*>")
_FAILURE_LINE = _re(
    r"\A(?:error (?:while )?generating (?:the |a )?summary|(?:failed|unable) to (?:generate|produce|write) "
    r"(?:the |a )?summary|(?:failed|unable) to summari[sz]e|could not (?:generate|produce|write) "
    r"(?:the |a )?summary|could not summari[sz]e|can(?:no|')?t (?:generate|produce|write) "
    r"(?:the |a )?summary|can(?:no|')?t summari[sz]e)"
)
_REFUSAL_LINE = _re(
    r"\A(?:i'?m sorry|i am sorry|i apologi[sz]e|as an ai|"
    r"i can(?:no|')t (?:help|assist|comply|summari[sz]e|do that)|"
    r"i cannot (?:help|assist|comply|summari[sz]e|do that)|i(?:'m| am) (?:not able|unable) to "
    r"(?:help|assist|comply|summari[sz]e)|i (?:won'?t|will not) (?:help|assist|comply|summari[sz]e)|"
    r"抱歉|对不起|很抱歉|我无法(?:总结|帮助|协助)|我不能(?:总结|帮助|协助))"
)
_END = r"(?:[^0-9a-z_]|\Z)"
_ERROR_START = _re(
    rf"\A\s*(?:error{_END}|exception{_END}|traceback{_END}|fatal{_END}|rate[ -]?limit|too many requests|"
    r"internal server error|bad gateway|service unavailable|gateway time-?out|request failed|"
    r"\{\s*\"(?:error|detail)\"|[0-9]{3}\s+(?:error|bad|internal|service|gateway|too|forbidden|"
    r"unauthori[sz]ed|not found))"
)
_REFUSAL = _re(
    r"\A\s*(?:i'?m sorry|i am sorry|sorry,|i apologi[sz]e|i can(?:no|')t|i cannot|i'?m (?:not able|unable)|"
    r"i am (?:not able|unable)|i won'?t|i will not|as an ai|unfortunately,? i|"
    r"抱歉|对不起|很抱歉|我无法|我不能)"
)
_MARKUP = _re(rf"<\s*/?\s*(?:msg|transcript|segment|rules|analysis){_END}")

_EDGES = "\"'`()<>[]{},;:!?*"
_PREFIXES = ("call_", "toolu_", "tool_", "fc_", "functions_")
_FILE_EXTENSIONS = (
    "py|pyi|go|rs|js|mjs|ts|tsx|jsx|java|kt|rb|php|swift|c|h|cc|cpp|hpp|cs|scala|sql|sh|bash|zsh|"
    "md|rst|txt|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|lock|csv|tsv|xml|html|css|scss|proto|"
    "tf|gradle|log|ipynb|vue|svelte|dockerfile|mk"
)
_TOOL_WORD = re.compile(r"(?:call|toolu|tool|fc|functions)_[A-Za-z0-9_-]*[A-Za-z0-9]")
_PATH_WORD = re.compile(r"(?:~|\.{1,2})?/?(?:[A-Za-z0-9_@%+=.,-]+/)+[A-Za-z0-9_@%+=.,-]*[A-Za-z0-9_]")
_FILE_WORD = re.compile(rf"[A-Za-z0-9_.-]*[A-Za-z0-9_]\.(?:{_FILE_EXTENSIONS})")


def _lowered(text: str) -> str:
    return text.translate(_LOWER)


def _word_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _path_like(word: str) -> bool:
    return word.startswith(("/", "./", "../", "~/")) or word.count("/") >= 2 or "." in word.rsplit("/", 1)[-1]


def _bare(word: str) -> str:
    """``word`` without the quotes, brackets and punctuation around it, nor
    a trailing ``:line`` or ``:line:column``."""
    while True:
        bare = word.strip(_EDGES).rstrip(".")
        for _ in range(2):
            head, colon, digits = bare.rpartition(":")
            if colon and digits and digits.isascii() and digits.isdigit():
                bare = head
        if len(bare) == len(word):
            return word
        word = bare


def named(text: str) -> tuple[list[str], list[str]]:
    """``(tool call ids, paths and file names)`` named in ``text``."""
    ids: dict[str, None] = {}
    files: dict[str, None] = {}
    look_for_ids = any(prefix in text for prefix in _PREFIXES)
    for raw in text.split():
        has_slash, has_dot = "/" in raw, "." in raw
        if not (has_slash or has_dot or (look_for_ids and "_" in raw)):
            continue
        word = _bare(raw)
        if look_for_ids and "_" in word:
            for match in _TOOL_WORD.finditer(word):
                start = match.start()
                has_digit = any(c.isdigit() and c.isascii() for c in match.group())
                if has_digit and (start == 0 or not _word_char(word[start - 1])):
                    ids.setdefault(match.group())
        if (
            (has_slash or has_dot)
            and "://" not in word
            and ((_PATH_WORD.fullmatch(word) and _path_like(word)) or _FILE_WORD.fullmatch(word))
        ):
            files.setdefault(word)
    return list(ids), list(files)


def occurs(value: str, text: str) -> bool:
    """Whether ``value`` is in ``text`` as a whole (not inside a longer run
    of ASCII letters, digits and underscores)."""
    if not value:
        return True
    start = text.find(value)
    while start != -1:
        end = start + len(value)
        if (start == 0 or not _word_char(text[start - 1])) and (
            end == len(text) or not _word_char(text[end])
        ):
            return True
        start = text.find(value, start + 1)
    return False


def check_sections(text: str) -> str | None:
    """``None`` if every section heading is there once, in order, each
    followed by something; else what is wrong."""
    found = [(m.group(1), m.start(), m.end()) for m in _HEADING.finditer(_lowered(text))]
    names = [name for name, _, _ in found]
    for section, shown in zip(SECTIONS, SECTION_NAMES, strict=True):
        count = names.count(section)
        if count != 1:
            return f"section '{shown}' appears {count} times (expected once)"
    if names != list(SECTIONS):
        return f"sections out of order (expected {', '.join(SECTION_NAMES)})"
    if text[: found[0][1]].strip():
        return "text before the first section"
    low = _lowered(text)
    said = False
    for i, (_, _, end) in enumerate(found):
        stop = found[i + 1][1] if i + 1 < len(found) else len(text)
        content = low[end:stop].strip()
        if not content:
            return f"section '{SECTION_NAMES[i]}' is empty"
        said = said or (i > 0 and not _says_nothing(content))
    if not said:
        return "the summary says nothing (every section after Constraints is none)"
    return None


def _unbulleted(line: str) -> str:
    line = line.strip()
    return (line[1:] if line[:1] in ("-", "*", "\u2022") else line).strip()


def _lines(text: str) -> list[str]:
    """Lines as Rust's ``str::lines`` gives them: split at ``\n``, a ``\r``
    before it dropped, no empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _says_nothing(content: str) -> bool:
    return all(line in _NOTHING for line in map(_unbulleted, _lines(content)) if line)


def _body(reply: str, low: str) -> tuple[int, int] | str:
    opens = list(_OPEN.finditer(low))
    closes = list(_CLOSE.finditer(low))
    if not opens:
        return "no <summary> in the reply"
    if len(opens) > 1 or len(closes) > 1:
        return f"{len(opens)} <summary> and {len(closes)} </summary> tags (expected one each)"
    if not closes:
        return "the <summary> is not closed"
    start, end = opens[0].end(), closes[0].start()
    if end < start:
        return "</summary> comes before <summary>"
    if reply[closes[0].end() :].strip():
        return "text after </summary>"
    return start, end


def check_summary(
    reply: str, covered: str, max_tokens: int, count: Callable[[str, int], int]
) -> tuple[str | None, int, str | None]:
    """``(summary, tokens, None)`` if ``reply`` passes, else ``(None, 0,
    reason)``; ``count(text, limit)`` counts, stopping past ``limit``."""
    if not reply.strip():
        return None, 0, "the reply is empty"
    low = _lowered(reply)
    for pattern, why in (
        (_HTML, "the reply is an HTML page"),
        (_ERROR_START, "the reply is an error message"),
        (_REFUSAL, "the reply is a refusal"),
    ):
        if (pattern.search if pattern is _HTML else pattern.match)(low):
            return None, 0, why
    span = _body(reply, low)
    if isinstance(span, str):
        return None, 0, span
    body = reply[span[0] : span[1]].strip()
    if not body:
        return None, 0, "the <summary> is empty"
    body_low = _lowered(body)
    if _ERROR_START.match(body_low):
        return None, 0, "the summary is an error message"
    if _REFUSAL.match(body_low):
        return None, 0, "the summary is a refusal"
    if _HTML_PAGE.search(body_low):
        return None, 0, "the summary holds an HTML page"
    for line in map(_unbulleted, _lines(body_low)):
        if _REFUSAL_LINE.match(line):
            return None, 0, "the summary holds a refusal"
        if _FAILURE_LINE.match(line):
            return None, 0, "the summary holds an error message"
    if _MARKUP.search(body_low):
        return None, 0, "the summary holds the prompt's markup"
    if any(marker in body_low for marker in ECHO_MARKERS):
        return None, 0, "the summary echoes the prompt"
    problem = check_sections(body)
    if problem is not None:
        return None, 0, problem
    tokens = count(body, max_tokens)
    if tokens > max_tokens:
        return None, 0, f"the summary is over its bound of {max_tokens} tokens"
    ids, files = named(body)
    for call_id in ids:
        if not occurs(call_id, covered):
            return None, 0, f"the summary names tool call '{call_id}', which the covered messages do not hold"
    for name in files:
        if not occurs(name, covered):
            return None, 0, f"the summary names the file '{name}', which the covered messages do not hold"
    return body, tokens, None
