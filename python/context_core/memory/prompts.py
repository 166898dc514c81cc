"""What memory sends a model, and the format it asks back.

Both prompts ask for the fact line format of
:mod:`context_core.memory.facts`, one fact a line, and nothing else (or
``NONE``); :func:`~context_core.memory.facts.parse_reply` reads the reply
strictly, so a reply in any other shape writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_core.memory.facts import Fact
from context_core.types import OpenAIMessage

__all__ = ["consolidate_prompt", "extract_prompt"]

FORMAT = """\
Answer with fact lines only, one fact a line, exactly in this format:
- [kind] text
- [kind: key] text
kind is one lower-case word: constraint, preference, decision or fact.
key (optional) names what the fact is the value of, such as "database" or \
"staging db port"; give one when a later fact could replace this one.
text is one line; copy exact values (paths, IDs, numbers, names, versions, URLs) \
character for character.
No headings, no numbering, no explanations, no code fences."""

EXTRACT_SYSTEM = f"""\
You keep an agent's long-term memory. From the conversation below, write down \
only what is worth remembering in later conversations: constraints and rules \
the user set, stated preferences, decisions taken, and exact facts (paths, \
IDs, numbers, names, versions, URLs). Leave out greetings, questions, \
one-off requests, and anything only true for this conversation. Never \
invent a fact that the conversation does not state.

{FORMAT}
If nothing is worth remembering, answer NONE."""

CONSOLIDATE_SYSTEM = f"""\
You maintain an agent's long-term memory file. Below are its facts, oldest \
first. Rewrite them as one clean list: merge duplicates and facts that say the \
same thing, keep only the newest value when facts conflict or a newer fact \
makes an older one outdated, and keep every other fact. Do not invent facts \
and do not drop a fact only because it is old.

{FORMAT}"""


def extract_prompt(transcript: Sequence[tuple[str, str]]) -> list[OpenAIMessage]:
    """The messages that ask a model for the facts of a conversation given as
    ``(role, text)`` pairs (user and assistant only)."""
    body = "\n\n".join(f"[{role}]\n{text}" for role, text in transcript)
    return [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": f"<conversation>\n{body}\n</conversation>"},
    ]


def consolidate_prompt(facts: Sequence[Fact]) -> list[OpenAIMessage]:
    """The messages that ask a model to consolidate ``facts`` (oldest first)."""
    body = "\n".join(fact.line() for fact in facts)
    return [
        {"role": "system", "content": CONSOLIDATE_SYSTEM},
        {"role": "user", "content": f"<memory>\n{body}\n</memory>"},
    ]
