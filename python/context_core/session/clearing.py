"""Older tool results of the turn in progress, cleared so a long tool loop
still fits.

Every policy keeps the turn in progress whole (the user's input and each
call and result since), so a loop of many steps outgrows any window, and
every later step would fail. The session then sends the oldest results of
the turn as a short note in their place; the log keeps them whole. The
results of the newest step are never cleared: the model asked for them.

Results are cleared oldest first, by whole quarters of the room, and one
cleared stays cleared for the rest of the turn:
the next steps of the loop add to the end and clear nothing more until
that quarter is used, so the request's start, cleared results included,
stays the same for several steps, and so does the provider's cache of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from context_core._selection import must_keep
from context_core.errors import OverBudgetError
from context_core.session.tool_calls import calls_of

#: What a cleared result says instead; ``{tokens}``: what it held.
CLEARED = (
    "[Cleared to fit the context window: this result of an earlier step of the turn "
    "held {tokens} tokens. Call the tool again if it is still needed.]"
)

#: The room is cleared a quarter at a time (see the module's note).
STEPS_OF_ROOM = 4

Message = Mapping[str, Any]
#: A result's place: the message's index, and its block's for an Anthropic one (else None).
Slot = tuple[int, int | None]


def turn_start(view: Sequence[Message]) -> int | None:
    """The index of the message that starts the turn in progress (the newest
    user message with words of its own and no tool result), if any."""
    for i in range(len(view) - 1, -1, -1):
        message = view[i]
        if message.get("role") == "user" and _own_words(message.get("content")) and not _results_in(message):
            return i
    return None


def result_slots(view: Sequence[Message], start: int) -> list[Slot]:
    """The results after ``start`` a clearing may take, oldest first: every
    one before the newest call (whose results the model is waiting on)."""
    last_call = max((i for i in range(start, len(view)) if calls_of(view[i])), default=None)
    slots: list[Slot] = []
    for i in range(start + 1, len(view) if last_call is None else last_call):
        message = view[i]
        if message.get("role") == "tool":
            slots.append((i, None))
        elif message.get("role") == "user":
            slots.extend((i, b) for b in _results_in(message))
    return slots


def clearings(
    view: Sequence[Message],
    error: OverBudgetError,
    room: int,
    count: Callable[[Message], int],
    *,
    cap: int | None = None,
    floor: int = 0,
) -> Iterator[tuple[list[Message], int]]:
    """Views with more of the turn's older results cleared, each with how
    many: first at least ``floor`` (as many as the turn's last request
    cleared: one cleared is never sent whole again, which would change the
    request's start) and enough to free what ``error`` says is missing,
    rounded up to whole quarters of ``room`` (just what is missing where
    the results cannot free that much); then one more result each. ``count`` gives a
    message's tokens; a result over the policy's ``cap`` counts as cut to
    it, so clearing it frees no more than that."""
    start = turn_start(view)
    if start is None:
        return
    slots = result_slots(view, start)
    if not slots:
        return
    # Each result cleared in turn (an Anthropic message's after those before
    # it in the message): the message it leaves, and what that frees.
    work = list(view)
    steps: list[tuple[int, Message, int]] = []
    for i, block in slots:
        before = count(work[i])
        work[i] = _cleared(work[i], block, count)
        freed = before - count(work[i])
        steps.append((i, work[i], max(0, freed if cap is None else min(freed, cap))))
    missing = _missing(error, room)
    step = max(1, room // STEPS_OF_ROOM)
    # Whole steps: what is missing grows by a result a step, and the same
    # results stay cleared until it passes the next step.
    wanted = -(-missing // step) * step
    if sum(frees for _, _, frees in steps) < wanted:
        wanted = missing
    out = list(view)
    freed = cleared = 0
    for i, message, frees in steps:
        out[i] = message
        freed += frees
        cleared += 1
        if freed >= wanted and cleared >= floor:
            yield out, cleared
            out = list(out)  # a later view clears more: the one handed out stays as it was
    if freed < wanted or cleared < floor:
        yield out, cleared  # everything that may go, short of what was wanted


def _missing(error: OverBudgetError, room: int) -> int:
    """The tokens the kept units exceed ``room`` by, from ``error``'s sizes
    (at least one: the error says they do not fit)."""
    kept = must_keep(error) or 0
    return max(1, kept - (room if error.budget is None else error.budget))


def _cleared(message: Message, block: int | None, count: Callable[[Message], int]) -> dict[str, Any]:
    """``message`` with its result (its ``block``-th, for an Anthropic one) cleared."""
    if block is None:
        tokens = count({"role": "tool", "tool_call_id": "", "content": message.get("content") or ""})
        return {**message, "content": CLEARED.format(tokens=tokens)}
    content = list(message["content"])
    result = content[block]
    alone = {"type": "tool_result", "tool_use_id": "", "content": result.get("content") or ""}
    tokens = count({"role": "user", "content": [alone]})
    content[block] = {**result, "content": CLEARED.format(tokens=tokens)}
    return {**message, "content": content}


def _own_words(content: Any) -> bool:
    """Whether a message's content holds text that is not blank (as the
    policies tell a message that starts a turn: an image alone does not)."""
    if isinstance(content, str):
        return bool(content.strip())
    return isinstance(content, list) and any(
        isinstance(part, Mapping)
        and part.get("type") in _TEXT_PARTS
        and isinstance(part.get("text"), str)
        and bool(part["text"].strip())
        for part in content
    )


_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def _results_in(message: Message) -> list[int]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        b for b, part in enumerate(content) if isinstance(part, Mapping) and part.get("type") == "tool_result"
    ]
