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
    if system:
        head.append({"role": "system", "content": [{"type": "text", "text": b["text"]} for b in system]})
    tools = request.get("tools")
    run = None if selection is None else _shared_run(messages, selection.messages)
    if run is None or selection is None:
        return tokenizer.count_messages([*head, *messages], tools)
    start, end, lifted, stop = run
    chosen = selection.messages
    own = selection.breakdown.total  # the priming and every chosen message, and its system
    if selection.system:
        own -= tokenizer.count_message({"role": "system", "content": selection.system})
    # The run's tokens: the selection's less its messages outside the run (the priming cancels).
    in_run = own - tokenizer.count_messages([*chosen[:lifted], *chosen[stop:]])
    return tokenizer.count_messages([*head, *messages[:start], *messages[end:]], tools) + in_run


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
