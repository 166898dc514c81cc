"""The tagger in plain Python (README.md, "Tags")."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from context_core._core import (
    DEFAULT_CONSTRAINT_KEYWORDS,
    DEFAULT_CONSTRAINT_OPENERS,
    DEFAULT_EVIDENCE_MARKERS,
    DEFAULT_LOG_MARKERS,
    DEFAULT_PULSE_KEYWORDS,
)
from context_core.errors import InvalidInputError

CONSTRAINT, EVIDENCE, PULSE, LOG = 1, 2, 4, 8
NAMES = {"constraint": CONSTRAINT, "evidence": EVIDENCE, "pulse": PULSE, "log": LOG}
WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def is_separator(c: str) -> bool:
    """Punctuation, symbols and white space."""
    if c.isascii():
        return not c.isalnum()
    return c in WHITE_SPACE or unicodedata.category(c)[0] in "PS"


def forms(text: str) -> tuple[str, str, str]:
    """``(lowered, spaced, squeezed)``: NFKC and lower case; then separators as
    single spaces; then separators removed."""
    lowered = unicodedata.normalize("NFKC", text).lower()
    words = "".join(" " if is_separator(c) else c for c in lowered).split(" ")
    spaced = " ".join(w for w in words if w)
    squeezed = "".join(c for c in lowered if not is_separator(c))
    return lowered, spaced, squeezed


def _is_word(spaced: str) -> bool:
    return all(c == " " or (c.isascii() and c.isalnum()) for c in spaced)


class Tagger:
    def __init__(
        self,
        *,
        constraint_keywords: Iterable[str] | None = None,
        pulse_keywords: Iterable[str] | None = None,
        evidence_markers: Iterable[str] | None = None,
        log_markers: Iterable[str] | None = None,
        constraint_openers: Iterable[str] | None = None,
    ) -> None:
        self.constraint = self._keywords(constraint_keywords, DEFAULT_CONSTRAINT_KEYWORDS)
        self.openers = []
        for opener in DEFAULT_CONSTRAINT_OPENERS if constraint_openers is None else constraint_openers:
            lowered, _, squeezed = forms(opener)
            if not squeezed:
                raise InvalidInputError(f"opener {opener!r} has no letters or digits")
            self.openers.append(lowered)
        self.pulse = self._keywords(pulse_keywords, DEFAULT_PULSE_KEYWORDS)
        self.evidence = self._markers(evidence_markers, DEFAULT_EVIDENCE_MARKERS)
        self.log = self._markers(log_markers, DEFAULT_LOG_MARKERS)

    @staticmethod
    def _keywords(given: Iterable[str] | None, default: list[str]) -> tuple[list[str], list[str]]:
        words: list[str] = []
        squeezed: list[str] = []
        for keyword in default if given is None else given:
            _, spaced, squeeze = forms(keyword)
            if not squeeze:
                raise InvalidInputError(f"keyword {keyword!r} has no letters or digits")
            (words if _is_word(spaced) else squeezed).append(spaced if _is_word(spaced) else squeeze)
        return words, squeezed

    @staticmethod
    def _markers(given: Iterable[str] | None, default: list[str]) -> list[str]:
        return [m for m in (forms(m)[0] for m in (default if given is None else given)) if m]

    @staticmethod
    def _has_word(spaced: str, word: str) -> bool:
        start = spaced.find(word)
        while start != -1:
            end = start + len(word)
            before = spaced[start - 1] if start else ""
            after = spaced[end] if end < len(spaced) else ""
            if not (before.isascii() and before.isalnum()) and not (after.isascii() and after.isalnum()):
                return True
            start = spaced.find(word, start + 1)
        return False

    def _matches(self, keywords: tuple[list[str], list[str]], spaced: str, squeezed: str) -> bool:
        words, pieces = keywords
        return any(p in squeezed for p in pieces) or any(self._has_word(spaced, w) for w in words)

    def mask(self, text: str) -> int:
        lowered, spaced, squeezed = forms(text)
        mask = 0
        if self._matches(self.constraint, spaced, squeezed) or _opens_a_sentence(lowered, self.openers):
            mask |= CONSTRAINT
        if self._matches(self.pulse, spaced, squeezed):
            mask |= PULSE
        if any(m in lowered for m in self.evidence):
            mask |= EVIDENCE
        if any(m in lowered for m in self.log):
            mask |= LOG
        return mask

    def tag(self, text: str) -> list[str]:
        mask = self.mask(text)
        return [name for name, bit in NAMES.items() if mask & bit]


# ASCII white space as Rust's u8::is_ascii_whitespace has it (no vertical
# tab); a sentence's lead skips it up to a line break only.
_SPACE = "[ \t\n\x0c\r]"
_SKIP = "[ \t\x0c\r]"
_OTHER_SCRIPT = "[^\x00-\x7f]"
_SENTENCE_START = re.compile(rf"\n|。|[.!?;:](?={_SPACE}|{_OTHER_SCRIPT})|,(?={_OTHER_SCRIPT})")
_LEAD = re.compile(
    rf"{_SKIP}*(?:[-*] |•|\u2013 |[0-9]+、|[0-9]+[.)](?={_SPACE}))?{_SKIP}*"
    rf"(?P<polite>(?:please |请){_SKIP}*)?"
)
_STATEMENT_END = re.compile("[?.!\n。]")


def _opens_a_sentence(lowered: str, openers: list[str]) -> bool:
    """Whether a sentence of ``lowered`` starts with one of ``openers`` and
    is no question (see ``opens_a_sentence`` in the Rust core)."""
    if not openers:
        return False
    starts = [0, *(m.end() for m in _SENTENCE_START.finditer(lowered))]
    for start in starts:
        lead = _LEAD.match(lowered, start)
        assert lead is not None  # every part of it is optional
        body = lead.end()
        plain = lead.start("polite") if lead.group("polite") else body
        if not any(_opens_with(lowered, i, o) for i in (plain, body) for o in openers):
            continue
        end = _STATEMENT_END.search(lowered, body)
        if end is None or end.group() != "?":
            return True
    return False


def _opens_with(lowered: str, at: int, opener: str) -> bool:
    if not lowered.startswith(opener, at):
        return False
    after = lowered[at + len(opener) : at + len(opener) + 1]
    joined = after != "" and after.isascii() and (after.isalnum() or after in "-_")
    return not (opener[-1].isascii() and opener[-1].isalnum() and joined)


def tag(text: str) -> list[str]:
    return Tagger().tag(text)
