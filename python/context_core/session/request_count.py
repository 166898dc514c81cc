"""The exact tokens of a rendered request, without walking its window twice.

The policy has already counted its selection exactly (``breakdown.total``:
the reply priming, every message it sends, and its ``system`` as one system
message), and the renderer hands the selection's messages on as they are
(the same objects), after the prompt's own head. So the request's count is
the selection's, less what the renderer did not pass on as it was, plus
what it added: the prompt's head, the system blocks, any message it
changed, and the tools. Counting is additive per message, so this is the
same number as counting the whole request, for a fraction of the work on a
long window. Where the messages do not line up, the whole request is
counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_core._core import Tokenizer
from context_core._selection import joined_tokens
from context_core.select import Selection

__all__ = ["request_tokens"]

_LIFTED = ("system", "developer")  # what the renderers lift out of the conversation
_WORTH = 8  # a shorter run is counted as sent: lining it up costs what counting does


def request_tokens(tokenizer: Tokenizer, request: Mapping[str, Any], selection: Selection | None) -> int:
    """Tokens of ``request`` as sent (its ``system`` blocks as a leading
    system message, its messages and its tools); ``selection``, where given,
    is what it was rendered from, counted by ``tokenizer``'s encoding."""
    messages: Sequence[Any] = request["messages"]
    system = request.get("system")
    head: list[Any] = []
    by_parts = 0  # the head's long text blocks, counted by their parts
    if system:
        blocks = []
        for block in system:
            text = block["text"]
            # The last block joins the summaries and the turn's memories: a
            # new string each turn, whose parts were mostly counted before.
            joined = _joined(tokenizer, text) if isinstance(text, str) else None
            if joined is None:
                blocks.append({"type": "text", "text": text})
            else:
                by_parts += joined  # a text block's tokens are its text's alone
        head.append({"role": "system", "content": blocks})
    tools = request.get("tools")
    # The renderer's head message (the prompt, then the turn's summaries and
    # memories) is a new string whenever they change: counted by its parts.
    lead = _count_by_parts(tokenizer, messages[0]) if messages and not head else None
    if lead is not None:
        head, messages = [], messages[1:]
    run = None if selection is None else _shared_run(messages, selection.messages)
    if run is None or selection is None:
        return tokenizer.count_messages([*head, *messages], tools) + (lead or 0) + by_parts
    start, end, lifted, stop = run
    chosen = selection.messages
    own = selection.breakdown.total  # the priming and every chosen message, and its system
    if selection.system:
        own -= _system_tokens(tokenizer, selection.system)
    # The run's tokens: the selection's less its messages outside the run (the priming cancels).
    in_run = own - _count_outside(tokenizer, [*chosen[:lifted], *chosen[stop:]])
    rest = tokenizer.count_messages([*head, *messages[:start], *messages[end:]], tools)
    return rest + in_run + (lead or 0) + by_parts


def _system_tokens(tokenizer: Tokenizer, system: str | list[Any]) -> int:
    """Tokens of a selection's lifted ``system`` as one system message,
    counted as the selection counted it (by its parts, where long)."""
    joined = _joined(tokenizer, system) if isinstance(system, str) else None
    if joined is None:
        return tokenizer.count_message({"role": "system", "content": system})
    return tokenizer.count_message({"role": "system", "content": ""}) + joined


def _count_outside(tokenizer: Tokenizer, messages: list[Any]) -> int:
    """Tokens of ``messages`` with the reply priming. The selection's lifted
    system messages are among them: the funnel joins the summaries and the
    turn's memories into one, a new text each turn (about 8,000 characters
    in a replayed session), counted by its parts as the head is; counted
    whole, it was 0.2-0.4 ms of BPE a user turn."""
    whole: list[Any] = []
    by_parts = 0
    for message in messages:
        tokens = _count_by_parts(tokenizer, message, remember=False)
        if tokens is None:
            whole.append(message)
        else:
            by_parts += tokens
    return tokenizer.count_messages(whole) + by_parts


def _count_by_parts(tokenizer: Tokenizer, message: Any, *, remember: bool = True) -> int | None:
    """Tokens of a long system message (without the reply priming) from the
    cached counts of its blank-line-separated parts, so a part seen on an
    earlier turn (the prompt, a summary) costs no BPE again; ``None`` for
    any other message, or where the parts cannot be joined exactly. With
    ``remember``, the text and its count are kept for the next call (the
    head's: the turn's next call sends the same)."""
    if not isinstance(message, Mapping) or message.get("role") not in _LIFTED:
        return None
    content = message.get("content")
    if not isinstance(content, str):
        return None
    joined = _joined(tokenizer, content) if remember else joined_tokens(tokenizer._count_joined, content)
    if joined is None:
        return None
    # The message's other fields (its role, a name) counted as they are each time.
    return tokenizer.count_message({**message, "content": ""}) + joined


def _joined(tokenizer: Tokenizer, text: str) -> int | None:
    """``joined_tokens`` of ``text``, remembered for the next calls: a
    turn's next call sends the same head and ``system`` texts, and found
    here they cost one comparison, where their parts' lookups again took
    10-20 microseconds a text."""
    for entry in _recent:
        if entry[0] is tokenizer and entry[1] == text:
            return entry[2]
    joined = joined_tokens(tokenizer._count_joined, text)
    if joined is not None:
        _remember((tokenizer, text, joined))
    return joined


# The texts last counted by parts (a call's head, or Anthropic's system and
# its last block), newest first. Replaced whole (one assignment), so a thread
# reads the old tuple or the new one.
_RECENT = 4
_recent: tuple[tuple[Tokenizer, str, int], ...] = ()


def _remember(entry: tuple[Tokenizer, str, int]) -> None:
    global _recent
    _recent = (entry, *_recent[: _RECENT - 1])


def _shared_run(messages: Sequence[Any], chosen: Sequence[Any]) -> tuple[int, int, int, int] | None:
    """``(start, end, lifted, stop)`` with ``messages[start:end]`` equal to
    ``chosen[lifted:stop]``: the selection's conversation (after the system
    messages a renderer lifts) at the end of the request, less any last
    messages the renderer changed; ``None`` where they do not line up."""
    lifted = 0
    while (
        lifted < len(chosen) and isinstance(chosen[lifted], Mapping) and chosen[lifted].get("role") in _LIFTED
    ):
        lifted += 1
    start = len(messages) - (len(chosen) - lifted)
    if start < 0:
        return None
    end, stop = len(messages), len(chosen)
    while end > start and messages[end - 1] is not chosen[stop - 1]:
        end, stop = end - 1, stop - 1
    # Equal values count alike; the same objects compare at once.
    if end - start < _WORTH or list(messages[start:end]) != list(chosen[lifted:stop]):
        return None
    return start, end, lifted, stop
