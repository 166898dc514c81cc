"""The user's rules in a summary: whether its Constraints section carries
each one, and the rules it does not carry added to it, word for word.

A rule is carried only by a line of the Constraints section (a value that
turns up in Decisions, say, may well state the opposite), only if every
exact value of the rule is on it (see :func:`~context_core.summarize.exact.carried`), and
only if the line keeps the rule's negation and its limits ("never",
"at most", "only"...). A rule not carried is added to the section whole,
so no summary ever drops a rule, and no segment waits forever for a model
to phrase one right.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from context_core.summarize.exact import carried as values_carried

__all__ = ["carried", "constraints_section", "line_tokens", "with_rules"]

_HEADING = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*)?(constraints|decisions|current state|next steps)"
    r"(?:\*\*)?[ \t]*:?(?:\*\*)?[ \t\r]*$",
    re.ASCII | re.IGNORECASE,
)
_NOTHING = frozenset({"none", "none.", "(none)", "n/a", "无", "无。"})
# Words whose loss turns a rule around or drops its limit: the section must
# keep one of a group whenever the rule holds one.
_KEEP = [
    re.compile(
        r"\b(?:never|not|no|don'?t|doesn'?t|mustn'?t|cannot|can'?t|won'?t|without|avoid|forbid\w*|prohibit\w*)\b"
        r"|禁止|不要|不能|不得|不准|不许|不可|严禁|勿|别",
        re.IGNORECASE,
    ),
    re.compile(r"\b(?:at most|no more than|up to|maximum|max)\b|最多|至多|不超过", re.IGNORECASE),
    re.compile(r"\b(?:at least|no less than|minimum|min)\b|至少|不少于", re.IGNORECASE),
    re.compile(r"\b(?:only|exactly|solely)\b|仅|只", re.IGNORECASE),
]


def line_tokens(rule: str, count: Callable[[str], int]) -> int:
    """The tokens ``rule`` takes as a summary carries it, on a line of its
    own: its count, and two for the "- " before it and the break after."""
    return count(rule) + 2


def _one_line(text: str) -> str:
    # Only the guard's line breaks go: a rule's other spacing may be a value
    # ("READY  NOW" in quotes), and a rule added so must carry itself.
    return text.replace("\n", " ").strip()


def constraints_section(summary: str) -> str:
    """The text of ``summary``'s Constraints section (empty if it has none)."""
    lines = summary.split("\n")  # the guard's lines: other breaks are text
    out: list[str] = []
    inside = False
    for line in lines:
        heading = _HEADING.match(line)
        if heading is not None:
            if inside:
                break
            inside = heading.group(1).lower() == "constraints"
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


# A limit the other way round: a line stating it turns the rule's around.
_OPPOSITE = {1: 2, 2: 1}


def carried(rule: str, summary: str) -> bool:
    """Whether one line of ``summary``'s Constraints section carries
    ``rule`` (see the module docs): another rule's "not" on another line
    keeps nothing of this one."""
    held = [i for i, keep in enumerate(_KEEP) if keep.search(rule)]
    against = [_KEEP[_OPPOSITE[i]] for i in held if i in _OPPOSITE and not _KEEP[_OPPOSITE[i]].search(rule)]
    return any(
        values_carried(rule, line)
        and all(_KEEP[i].search(line) for i in held)
        and not any(other.search(line) for other in against)
        for line in constraints_section(summary).split("\n")
        if line.strip()
    )


def with_rules(summary: str, rules: Sequence[str]) -> str:
    """``summary`` with ``rules`` added to its Constraints section, each a
    ``- `` line (in place of a lone ``- none``)."""
    if not rules:
        return summary
    added = [f"- {_one_line(rule)}" for rule in dict.fromkeys(rules)]
    lines = summary.split("\n")
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if (m := _HEADING.match(line)) and m.group(1).lower() == "constraints"
        ),
        None,
    )
    if start is None:
        return "Constraints:\n" + "\n".join(added) + "\n" + summary
    end = next((i for i in range(start + 1, len(lines)) if _HEADING.match(lines[i])), len(lines))
    body = [line for line in lines[start + 1 : end] if line.strip()]
    if all(line.strip().lstrip("-*\u2022 ").strip().lower() in _NOTHING for line in body):
        body = []
    return "\n".join([*lines[: start + 1], *body, *added, *lines[end:]])
