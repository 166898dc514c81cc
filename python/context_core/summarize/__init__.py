"""Summaries of a conversation that are never wrong in the ways that hurt.

:class:`Summarizer` makes a segment's summary from its raw messages and the
whole conversation's from segment summaries, with a model (a two-phase
prompt behind a strict guard) or, by default, offline. The result is a
:class:`Summary` or :class:`Rejected`: an error, a refusal, a cut or
malformed reply never becomes a summary, and every user rule the summary
does not carry is named so it can stay raw.
"""

from __future__ import annotations

from context_core.summarize.exact import carried, exact_values
from context_core.summarize.guard import Rejected, Summary, check_reply
from context_core.summarize.offline import constraint_messages, parse_sections
from context_core.summarize.prompts import SECTIONS
from context_core.summarize.summarizer import DEFAULT_REPLY_TOKENS, DEFAULT_SUMMARY_TOKENS, Summarizer
from context_core.summarize.transcript import escape, render_transcript

__all__ = [
    "DEFAULT_REPLY_TOKENS",
    "DEFAULT_SUMMARY_TOKENS",
    "SECTIONS",
    "Rejected",
    "Summarizer",
    "Summary",
    "carried",
    "check_reply",
    "constraint_messages",
    "escape",
    "exact_values",
    "parse_sections",
    "render_transcript",
]
