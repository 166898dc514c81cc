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
from context_core.prompt.context_part import SEPARATOR
from context_core.select import Selection

__all__ = ["request_tokens"]

_LIFTED = ("system", "developer")  # what the renderers lift out of the conversation
_WORTH = 8  # a shorter run is counted as sent: lining it up costs what counting does
_SPLIT_FROM = 2048  # characters: a shorter head costs little to count whole
_MOST_PARTS = 512  # more parts would fill the count cache with fragments


def request_tokens(tokenizer: Tokenizer, request: Mapping[str, Any], selection: Selection | None) -> int:
    """Tokens of ``request`` as sent (its ``system`` blocks as a leading
    system message, its messages and its tools); ``selection``, where given,
    is what it was rendered from, counted by ``tokenizer``'s encoding."""
    messages: Sequence[Any] = request["messages"]
    system = request.get("system")
    head: list[Any] = []
    if system:
        head.append({"role": "system", "content": [{"type": "text", "text": b["text"]} for b in system]})
    tools = request.get("tools")
    # The renderer's head message (the prompt, then the turn's summaries and
    # memories) is a new string whenever they change: counted by its parts.
    lead = _count_by_parts(tokenizer, messages[0]) if messages and not head else None
    if lead is not None:
        head, messages = [], messages[1:]
    run = None if selection is None else _shared_run(messages, selection.messages)
    if run is None or selection is None:
        return tokenizer.count_messages([*head, *messages], tools) + (lead or 0)
    start, end, lifted, stop = run
    chosen = selection.messages
    own = selection.breakdown.total  # the priming and every chosen message, and its system
    if selection.system:
        own -= tokenizer.count_message({"role": "system", "content": selection.system})
    # The run's tokens: the selection's less its messages outside the run (the priming cancels).
    in_run = own - _count_outside(tokenizer, [*chosen[:lifted], *chosen[stop:]])
    return tokenizer.count_messages([*head, *messages[:start], *messages[end:]], tools) + in_run + (lead or 0)


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
    if not isinstance(content, str) or len(content) < _SPLIT_FROM:
        return None
    last = _last_head if remember else None
    if last is not None and last[0] is tokenizer and last[1] == content:
        joined = last[2]  # the turn's next call: the same text (one comparison, no hashing)
    else:
        parts = content.split(SEPARATOR)
        if len(parts) < 2 or len(parts) > _MOST_PARTS:
            return None
        counted = tokenizer._count_joined(parts)
        if counted is None:
            return None
        joined = counted
        if remember:
            _remember_head((tokenizer, content, joined))
    # The message's other fields (its role, a name) counted as they are each time.
    return tokenizer.count_message({**message, "content": ""}) + joined


# The last head text counted by parts: the next call of a turn sends the same.
# Replaced whole (one assignment), so a thread reads an old entry or a new one.
_last_head: tuple[Tokenizer, str, int] | None = None


def _remember_head(entry: tuple[Tokenizer, str, int]) -> None:
    global _last_head
    _last_head = entry


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
