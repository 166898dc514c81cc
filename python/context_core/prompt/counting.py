"""Exact token counts of prompt pieces, cached by content, and cutting a text
to a number of tokens with the cut reported.

``Tokenizer.count`` is exact but not cached (about 30 ns a token). A prompt
re-renders the same pieces every turn (the memory excerpt, the instructions,
a loaded skill), so each piece's count is kept by its text: a warm turn counts
only what changed (usually the date line). The cache is bounded (oldest
entries go first) so a long session's ever-changing date lines cannot grow it.

**Why piece counts add up.** The rendered parts are pieces that each end in a
line break and (all but the first) start with ``#`` or ``<``. For o200k_base
and cl100k_base the pre-tokenizer always splits between such a line break and
such a character (a run of line breaks is one pre-token, and neither ``#`` nor
``<`` can join it), and BPE never merges across pre-tokens, so the count of
the whole is the sum of the pieces' counts (property-tested). The GPT-2-era
encodings (p50k_base, r50k_base) split runs of line breaks by what follows,
so for them the sums are recounted on the whole text (:attr:`TokenCounts.additive`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from context_core._core import Tokenizer
from context_core.errors import InvalidInputError

__all__ = ["ADDITIVE_ENCODINGS", "TokenCounts", "Truncation"]

ADDITIVE_ENCODINGS = frozenset({"o200k_base", "cl100k_base"})
"""Encodings for which the rendered pieces' counts add up to the whole's."""

DEFAULT_CAPACITY = 4096


@dataclass(frozen=True)
class Truncation:
    """A piece of the prompt cut (or left out) to fit its token budget."""

    layer: str
    """Where: ``"memory"`` (the memory layer), or a dimension of the task
    block (``"memory"``, ``"context"``, ``"prompt"``) prefixed ``"task."``."""
    item: str
    """What: ``"MEMORY.md"``, or the item's tag and label (``'FILE path="a.py"'``)."""
    tokens: int
    """Its exact tokens before the cut."""
    kept: int
    """Its exact tokens after the cut; 0 when it was left out whole."""

    @property
    def dropped(self) -> bool:
        """Whether the item was left out whole."""
        return self.kept == 0


class TokenCounts:
    """Exact counts of texts, cached by content (bounded, oldest out first)."""

    __slots__ = ("_cache", "additive", "capacity", "tokenizer")

    def __init__(self, tokenizer: Tokenizer, capacity: int = DEFAULT_CAPACITY) -> None:
        self.tokenizer = tokenizer
        self.capacity = capacity
        self.additive = tokenizer.name in ADDITIVE_ENCODINGS
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        """The exact token count of ``text``."""
        count = self._cache.get(text)
        if count is None:
            count = self.tokenizer.count(text)
            cache = self._cache
            if len(cache) >= self.capacity:
                del cache[next(iter(cache))]
            cache[text] = count
        return count

    def pieces(self, pieces: Sequence[str]) -> list[int]:
        """Each piece's share of the exact count of ``"".join(pieces)``: its own
        count where counts add up, else what it adds to the count of the
        pieces before it (so the shares always sum to the whole's count)."""
        if self.additive:
            return [self(piece) for piece in pieces]
        shares, before, text = [], 0, ""
        for piece in pieces:
            text += piece
            total = self.tokenizer.count(text)
            shares.append(total - before)
            before = total
        return shares

    def truncate(
        self,
        text: str,
        budget: int,
        prefix: str = "",
        suffix: str = "",
        marker: str | None = None,
        valid: Callable[[str], bool] | None = None,
    ) -> str:
        """The longest head of ``text`` such that ``prefix + head + suffix``
        counts at most ``budget`` tokens (``""`` if not even the wrapper fits);
        ``marker`` (``{dropped}`` = tokens cut) ends a cut text when it fits.
        ``valid``: a cut head must pass it, else it is cut a token shorter."""
        if self(prefix + text + suffix) <= budget:
            return text
        count = self.tokenizer.count
        room = budget - count(prefix + suffix)
        while room > 0:
            try:
                head = self.tokenizer.truncate(text, room, marker)
            except InvalidInputError:  # the marker alone is over the room
                head = self.tokenizer.truncate(text, room)
            over = count(prefix + head + suffix) - budget
            if over <= 0:
                if valid is None or valid(head):
                    return head
                over = 1
            room -= over
        return ""
