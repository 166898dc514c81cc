"""What a conversation leaves for the memory store: :func:`extract_memories`.

Offline (``llm=None``, the default) it reads the conversation sentence by
sentence with the same rules as memory files' extractor
(:mod:`context_core.memory.extract`), which keep what holds beyond this
conversation and leave requests for the moment, questions, status and news.
Each memory gets a kind:

* ``semantic``: the user's preferences, rules, decisions and facts about
  themselves, the team or the project (user sentences, and labelled ones
  such as ``Remember: ...`` from either side);
* ``procedural``: lessons, from either side: what fails and why, what to do
  when it happens (``the deploy script fails unless AWS_PROFILE is set``,
  ``if psql hangs, the VPN has dropped``);
* ``episodic``: a finished change told with its outcome (``I replaced the
  loop with one query; /stock now responds in 140 ms``).

With ``llm`` the model is asked for memory lines ``- [kind] text``, one a
line, or ``NONE``, and the reply is held to two checks before anything is
kept: every line is in that format with one of the three kinds, and every
exact value a memory names (ids, paths, numbers, versions, URLs: the
entities of :func:`~context_core.memory_store.entities`) occurs in the
conversation, spelled as the conversation spells it. A reply that fails
either check raises
:class:`~context_core.MemoryFormatError` naming the line, and nothing of it
is kept.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from context_core._core import _entities
from context_core.errors import InvalidTypeError, MemoryFormatError
from context_core.memory.extract import classify, conversation_text, labelled, sentences
from context_core.memory.facts import NOTHING, normalize, parse_reply
from context_core.types import OpenAIMessage

__all__ = ["IMPORTANCE", "KINDS", "Extracted", "aextract_memories", "extract_memories", "extract_prompt"]

#: What a memory is: facts and preferences; task records and conversation
#: excerpts; tool-use lessons and failure patterns.
KINDS = ("semantic", "episodic", "procedural")

#: The importance an extracted memory gets, by what it is: a rule or a
#: preference outweighs a fact, a lesson outweighs a task record (a
#: model's semantic memories, not told apart, get ``semantic``'s).
IMPORTANCE = {
    "semantic": 0.7,
    "constraint": 0.8,
    "preference": 0.8,
    "decision": 0.7,
    "fact": 0.6,
    "procedural": 0.7,
    "episodic": 0.5,
}


@dataclass(frozen=True)
class Extracted:
    """A memory worth keeping: its ``text`` (the sentence as written), its
    ``kind`` (``semantic``, ``episodic`` or ``procedural``) and
    ``importance`` (0 to 1), ready for :meth:`MemoryStore.remember_many`."""

    text: str
    kind: str
    importance: float

    def item(self) -> dict[str, Any]:
        return {"text": self.text, "kind": self.kind, "importance": self.importance}


SYSTEM = f"""\
You keep an agent's long-term memory store. From the conversation below, \
write down only what will matter in later conversations, each as one memory \
of one of three kinds:
- semantic: the user's preferences, rules and decisions, and facts about the \
user, the team or the project;
- procedural: lessons from failures and how to use a tool (what fails, why, \
what to do instead);
- episodic: a finished task and its outcome.
Leave out greetings, questions, requests for this conversation only, status \
updates and anything only true right now. Never invent anything the \
conversation does not state; copy exact values (paths, IDs, numbers, names, \
versions, URLs) character for character.

Answer with memory lines only, one a line, exactly in this format:
- [kind] text
kind is semantic, procedural or episodic; text is one line.
No headings, numbering, explanations or code fences.
If nothing is worth remembering, answer {NOTHING}."""


def extract_prompt(transcript: Iterable[tuple[str, str]]) -> list[OpenAIMessage]:
    """The messages that ask a model for the memories of a conversation
    given as ``(role, text)`` pairs (user and assistant only)."""
    body = "\n\n".join(f"[{role}]\n{text}" for role, text in transcript)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"<conversation>\n{body}\n</conversation>"},
    ]


def _offline(messages: list[Mapping[str, Any]]) -> list[Extracted]:
    found: dict[str, Extracted] = {}
    for role, sentence in sentences(messages):
        fact = labelled(sentence, role)
        if fact is not None:
            kind, weight = "semantic", fact.kind
        else:
            kept = classify(sentence, role)
            if kept is None:
                continue
            fact, kind = kept
            weight = fact.kind if kind == "semantic" else kind
        key = normalize(fact.text)
        found.pop(key, None)  # the newest copy, at its place
        found[key] = Extracted(fact.text, kind, IMPORTANCE.get(weight, 0.6))
    return list(found.values())


def _invented(text: str, said: set[str], spoken: str) -> str | None:
    """The first exact value ``text`` names that the conversation does not:
    by its normal form, then as ``text`` spells it (a path or an id whose
    case was changed is another value)."""
    for _, value in _entities(text):
        if value not in said:
            return value
        for spelled in re.finditer(re.escape(value), text, re.IGNORECASE):
            if spelled.group() not in spoken:
                return spelled.group()
    return None


def _checked(reply: str, transcript: list[tuple[str, str]]) -> list[Extracted]:
    said = {value for _, text in transcript for _, value in _entities(text)}
    spoken = "\n".join(text for _, text in transcript)
    out = []
    for n, fact in enumerate(parse_reply(reply), 1):
        if fact.kind not in KINDS or fact.key is not None:
            raise MemoryFormatError(
                f"line {n} of the model's reply has kind {fact.kind!r}"
                f"{'' if fact.key is None else ' and a key'}; a memory line is '- [kind] text'"
                f" with kind one of {', '.join(KINDS)}",
                line=n,
                text=reply,
            )
        invented = _invented(fact.text, said, spoken)
        if invented is not None:
            raise MemoryFormatError(
                f"line {n} of the model's reply names {invented!r}, which the conversation does not",
                line=n,
                text=reply,
            )
        out.append(Extracted(fact.text, fact.kind, IMPORTANCE[fact.kind]))
    return out


def extract_memories(
    messages: Iterable[Mapping[str, Any]],
    llm: Any = None,
    *,
    max_tokens: int = 1024,
    temperature: float = 0.0,
) -> list[Extracted]:
    """The memories worth keeping from a conversation, oldest first, each
    once (see the module's documentation). Only user and assistant text is
    read. ``llm`` is an :class:`~context_core.llm.LLM` or anything
    :func:`~context_core.llm.as_llm` takes; without it the offline
    extractor runs. A model's reply that breaks the format or names a value
    the conversation does not raises :class:`~context_core.MemoryFormatError`."""
    messages = _listed(messages)
    if llm is None:
        return _offline(messages)
    transcript = conversation_text(messages)
    if not transcript:
        return []
    reply = _as_llm(llm).complete(extract_prompt(transcript), max_tokens=max_tokens, temperature=temperature)
    return _checked(reply, transcript)


async def aextract_memories(
    messages: Iterable[Mapping[str, Any]],
    llm: Any = None,
    *,
    max_tokens: int = 1024,
    temperature: float = 0.0,
) -> list[Extracted]:
    """:func:`extract_memories` without blocking the event loop (the model
    through ``acomplete``, the offline extractor in a worker thread)."""
    messages = _listed(messages)
    if llm is None:
        return await asyncio.to_thread(_offline, messages)
    transcript = conversation_text(messages)
    if not transcript:
        return []
    reply = await _as_llm(llm).acomplete(
        extract_prompt(transcript), max_tokens=max_tokens, temperature=temperature
    )
    return _checked(reply, transcript)


def _listed(messages: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidTypeError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    listed = list(messages)
    conversation_text(listed)  # each message checked as memory files check it
    return listed


def _as_llm(llm: Any) -> Any:
    from context_core.llm import as_llm  # the client layer loads only when a model is used

    return as_llm(llm)
