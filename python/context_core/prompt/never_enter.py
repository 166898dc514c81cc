"""Never-enter rules: texts the code enforces, kept out of the prompt.

A rule is matched on the folded form of both the rule and the text
(:func:`~context_core.prompt.escape.caseless`: format characters removed,
NFKC, caseless, white space runs as one space), so a zero-width space, a soft
hyphen, full-width letters, a no-break space, a doubled space or a line break
does not hide a restated rule. As folding joins lines, a restatement may span
several: every line it touches is what is left out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.prompt.escape import LINE_BREAKS, caseless, caseless_chars

__all__ = ["Rules", "drop"]


class Rules:
    """The rules as given, each folded once."""

    __slots__ = ("folded", "given", "words")

    def __init__(self, rules: Iterable[str]) -> None:
        given = tuple(rules)
        folded = []
        for rule in given:
            if not isinstance(rule, str):
                raise InvalidTypeError(f"never_enter: each rule must be a str, got {type(rule).__name__}")
            fold = caseless(rule)
            if not fold:  # an empty rule would match every text
                raise InvalidInputError(
                    "never_enter: each rule must be a non-blank str (white space and format"
                    f" characters do not count), got {rule!r}"
                )
            folded.append(fold)
        self.given = given
        self.folded = tuple(folded)
        # Each rule's longest word: a text without it cannot restate the rule,
        # and looking for it needs no white space collapsed (splitting a long
        # text into words costs some twenty times folding its characters).
        self.words = tuple(max(fold.split(" "), key=len) for fold in folded)

    def __bool__(self) -> bool:
        return bool(self.given)

    def _fold(self, text: str) -> str | None:
        """``text`` folded (:func:`caseless`) if it may restate a rule."""
        chars = caseless_chars(text)
        if not any(word in chars for word in self.words):
            return None
        return " ".join(chars.split())

    def first(self, text: str) -> str | None:
        """The first rule (in the order given, as given) that ``text`` states, if any."""
        folded = self._fold(text) if self.given else None
        if folded is not None:
            for rule, fold in zip(self.given, self.folded, strict=True):
                if fold in folded:
                    return rule
        return None

    def lines_out(self, text: str) -> tuple[list[str], list[bool]]:
        """``text``'s lines (with their ends) and which of them a restated
        rule touches; ``[]`` when none does (the usual case, one fold)."""
        folded = self._fold(text) if self.given else None
        if folded is None or not any(fold in folded for fold in self.folded):
            return [], []
        lines = text.splitlines(keepends=True)
        # Folding never joins across a line break (a break is white space and
        # composes with nothing), so the text's fold is its lines' folds joined
        # by spaces: where each line's fold starts in it maps a match to lines.
        folds = [caseless(line) for line in lines]
        out = [False] * len(lines)
        removed = self._mark(list(range(len(lines))), folds, out)
        # The lines left join up: "do not" and "push" around a line that goes
        # would restate "do not push", so they are read again. A new match
        # must cross a seam the last pass opened (any other was there before,
        # and found), so only a window of lines around each seam is searched:
        # each pass costs what its seams hold, not the whole text again.
        before = list(range(-1, len(lines) - 1))
        after = list(range(1, len(lines) + 1))
        reach = max(len(fold) for fold in self.folded)
        while removed:
            seams = set()
            for i in removed:  # unlink, remembering the neighbours that now meet
                left, right = before[i], after[i]
                if left >= 0:
                    after[left] = right
                if right < len(lines):
                    before[right] = left
                seams.add(left)
            removed = []
            for left in sorted(seams):
                while left >= 0 and out[left]:  # a neighbour removed in this pass too
                    left = before[left]
                right = after[left] if left >= 0 else _first(out)
                window = self._window(left, right, folds, before, after, reach)
                removed += self._mark(window, folds, out)
        return lines, out

    def _mark(self, window: list[int], folds: list[str], out: list[bool]) -> list[int]:
        """Mark the lines of ``window`` (line numbers in order) that a rule's
        match in their joined folds touches; the newly marked ones."""
        starts = []
        at = 0
        for i in window:
            starts.append(at)
            at += len(folds[i]) + 1 if folds[i] else 0
        joined = " ".join(folds[i] for i in window if folds[i])
        marked = []
        for fold in self.folded:
            found = joined.find(fold)
            while found >= 0:
                # the lines holding the match's first and last characters (a
                # blank line shares the next line's start; bisect takes the later)
                first = bisect_right(starts, found) - 1
                last = bisect_right(starts, found + len(fold) - 1) - 1
                for k in range(first, last + 1):
                    if not out[window[k]]:
                        out[window[k]] = True
                        marked.append(window[k])
                found = joined.find(fold, found + 1)
        return marked

    @staticmethod
    def _window(
        left: int, right: int, folds: list[str], before: list[int], after: list[int], reach: int
    ) -> list[int]:
        """The kept lines around the seam between ``left`` and ``right``
        (either may be past an end): as many on each side as a match crossing
        the seam can reach (``reach`` folded characters)."""
        window: list[int] = []
        i, held = left, 0
        while i >= 0 and held < reach:
            window.append(i)
            held += len(folds[i]) + 1
            i = before[i]
        window.reverse()
        i, held = right, 0
        while i < len(folds) and held < reach:
            window.append(i)
            held += len(folds[i]) + 1
            i = after[i]
        return window

    def keep_out(self, text: str, kept_out: list[str]) -> str:
        """``text`` (as given, not escaped) without the lines a restated rule
        touches; those that hold text are added to ``kept_out``."""
        lines, out = self.lines_out(text)
        return drop(lines, out, kept_out) if lines else text


def _first(out: list[bool]) -> int:
    """The first line not left out (past the end if none)."""
    return next((i for i, gone in enumerate(out) if not gone), len(out))


def drop(lines: list[str], out: list[bool], kept_out: list[str]) -> str:
    """The lines not ``out``, joined; the others that hold text (a blank
    line inside a restatement goes unlisted) are added to ``kept_out``."""
    kept = []
    for line, left_out in zip(lines, out, strict=True):
        if not left_out:
            kept.append(line)
        elif caseless(line):
            kept_out.append(line.rstrip(LINE_BREAKS))
    return "".join(kept).rstrip(LINE_BREAKS)
