"""The :class:`Summarizer`: a model's two-phase summary behind the guard, or
the offline summary when no model is given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from context_core._core import Tagger, Tokenizer
from context_core._logging import library_logger
from context_core.errors import InvalidInputError, InvalidTypeError, LLMError, LLMTruncatedError
from context_core.summarize.guard import Rejected, Summary, carry_rules, check_reply, check_sections
from context_core.summarize.offline import constraint_messages, offline_global, offline_segment
from context_core.summarize.prompts import global_prompt, segment_prompt
from context_core.summarize.rules import line_tokens
from context_core.summarize.transcript import (
    DEFAULT_ARGUMENT_CHARS,
    DEFAULT_RESULT_TOKENS,
    message_text,
    render_transcript,
)
from context_core.types import OpenAIMessage

__all__ = ["DEFAULT_REPLY_TOKENS", "DEFAULT_SUMMARY_TOKENS", "MIN_SUMMARY_TOKENS", "Summarizer"]

log = library_logger("context_core.summarize")

#: Bound on a summary's own tokens.
DEFAULT_SUMMARY_TOKENS = 600
#: The least ``summary_tokens`` may be.
MIN_SUMMARY_TOKENS = 64
#: Bound on the model's whole reply (analysis and summary).
DEFAULT_REPLY_TOKENS = 1600


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidInputError(f"{name} must be >= 1, got {value}")
    return value


def _messages(messages: Any) -> list[Mapping[str, Any]]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidTypeError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidTypeError(f"messages[{i}] must be a dict, got {type(message).__name__}")
    return list(messages)


def _texts(name: str, values: Any) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidTypeError(f"{name} must be a list of str, got {type(values).__name__}")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise InvalidTypeError(f"{name}[{i}] must be a str, got {type(value).__name__}")
    return list(values)


class Summarizer:
    """Summaries of a conversation: a segment's (level 2) from its raw
    messages, or the whole conversation's (level 3) from segment summaries.

    With ``llm`` (an :class:`~context_core.llm.LLM`, or anything
    :func:`~context_core.as_llm` takes: use a small, fast model) the model
    answers the two-phase prompt of :mod:`~context_core.summarize.prompts`
    at ``temperature`` (0) within ``reply_tokens``, and only a reply that
    passes the guard (:func:`~context_core.summarize.guard.check_reply`)
    becomes a :class:`Summary`; a failed call, a cut reply or a failed check
    is :class:`Rejected`, logged on ``context_core.summarize``. Without
    ``llm`` the offline summarizer (:mod:`~context_core.summarize.offline`)
    runs: deterministic, extractive, no network.

    ``summary_tokens`` (at least 64) bounds a summary, all but the user's
    rules: those are carried whole, added word for word where the summary
    left one out (see :mod:`~context_core.summarize.rules`). ``result_tokens`` and
    ``argument_chars`` bound what the model is shown of each tool result and
    tool call."""

    def __init__(
        self,
        llm: Any = None,
        *,
        summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
        reply_tokens: int = DEFAULT_REPLY_TOKENS,
        temperature: float = 0.0,
        result_tokens: int = DEFAULT_RESULT_TOKENS,
        argument_chars: int = DEFAULT_ARGUMENT_CHARS,
        tokenizer: Tokenizer | None = None,
        tagger: Tagger | None = None,
    ) -> None:
        if llm is not None:
            from context_core.llm import LLM, as_llm

            llm = llm if isinstance(llm, LLM) else as_llm(llm)
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            raise InvalidTypeError(f"tokenizer must be a Tokenizer, got {type(tokenizer).__name__}")
        if tagger is not None and not isinstance(tagger, Tagger):
            raise InvalidTypeError(f"tagger must be a Tagger, got {type(tagger).__name__}")
        self.llm = llm
        self.summary_tokens = _positive("summary_tokens", summary_tokens)
        if summary_tokens < MIN_SUMMARY_TOKENS:
            raise InvalidInputError(
                f"summary_tokens must be at least {MIN_SUMMARY_TOKENS} (the four sections alone"
                f" take about 20), got {summary_tokens}"
            )
        self.reply_tokens = _positive("reply_tokens", reply_tokens)
        if reply_tokens < summary_tokens:
            raise InvalidInputError(
                f"reply_tokens ({reply_tokens}) must be at least summary_tokens ({summary_tokens})"
            )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 <= temperature <= 2
        ):
            raise InvalidInputError(f"temperature must be a number in [0, 2], got {temperature!r}")
        self.temperature = float(temperature)
        self.result_tokens = _positive("result_tokens", result_tokens)
        self.argument_chars = _positive("argument_chars", argument_chars)
        self.tokenizer = tokenizer or Tokenizer()
        self.tagger = tagger

    def __repr__(self) -> str:
        return f"Summarizer({'offline' if self.llm is None else repr(self.llm)})"

    # -- what is sent --------------------------------------------------------------------------

    def segment_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        first: int = 0,
        *,
        between: Callable[[], None] | None = None,
    ) -> list[OpenAIMessage]:
        """The messages a model is sent to summarise the segment ``messages``
        (``between``: called after each message is rendered)."""
        transcript = render_transcript(
            _messages(messages),
            tokenizer=self.tokenizer,
            result_tokens=self.result_tokens,
            argument_chars=self.argument_chars,
            first=first,
            between=between,
        )
        return segment_prompt(transcript)

    # -- the calls -----------------------------------------------------------------------------

    def summarize(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        constraints: Sequence[tuple[int, str]] | None = None,
        between: Callable[[], None] | None = None,
    ) -> Summary | Rejected:
        """A segment (level 2) summary of ``messages``, or why there is none.

        ``constraints`` (``(key, text)`` pairs; by default each user rule
        among the messages, keyed by its index) are the rules the summary
        must carry; those it does not are added to it (their keys are its
        ``added``). ``between`` is called between the steps of the work
        around the model call (after each message rendered, after the call,
        before the guard): a worker thread passes one that lets the turn's
        thread run, so no step holds the interpreter for long."""
        messages = _messages(messages)
        rules = self._rules(messages, constraints)
        if self.llm is None:
            return self._offline_segment(messages, rules)
        prompt = self.segment_prompt(messages, between=between)
        reply = self._call(prompt)
        if between is not None:
            between()
        covered = messages_covered(messages)
        if between is not None:
            between()
        return self._judge(reply, covered, 2, rules)

    async def asummarize(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        constraints: Sequence[tuple[int, str]] | None = None,
        between: Callable[[], None] | None = None,
    ) -> Summary | Rejected:
        """:meth:`summarize` without blocking the event loop: the model is
        awaited on it, and the rest (rendering the transcript, the guard, or
        the whole offline summary) runs in a worker thread, so other tasks
        on the loop (the turns) never wait for it. ``between`` is called in
        that thread as :meth:`summarize` calls it."""
        messages = _messages(messages)
        if self.llm is None:
            return await asyncio.to_thread(
                lambda: self._offline_segment(messages, self._rules(messages, constraints))
            )

        def prepare() -> tuple[list[tuple[int, str]], list[OpenAIMessage]]:
            rules = self._rules(messages, constraints)  # the tagger, when not given
            if between is None:  # a subclass's segment_prompt may not take it
                return rules, self.segment_prompt(messages)
            return rules, self.segment_prompt(messages, between=between)

        rules, prompt = await asyncio.to_thread(prepare)
        reply = await self._acall(prompt)

        def judge() -> Summary | Rejected:
            covered = messages_covered(messages)
            if between is not None:
                between()
            return self._judge(reply, covered, 2, rules)

        return await asyncio.to_thread(judge)

    def summarize_global(self, segments: Sequence[str], rules: Sequence[str] = ()) -> Summary | Rejected:
        """A global (level 3) summary made from the segment summaries
        ``segments`` (oldest first; never from an earlier global summary)
        and the user's ``rules``, which it must carry (keyed by position).
        The segments' own Constraints lines are read like their other
        lines: a rule to carry whole is given in ``rules``."""
        segments, rules = _texts("segments", segments), _texts("rules", rules)
        keyed = list(enumerate(rules))
        if self.llm is None:
            return self._offline_global(segments, rules, keyed)
        return self._judge(
            self._call(global_prompt(segments, rules)), "\n".join([*segments, *rules]), 3, keyed
        )

    async def asummarize_global(
        self, segments: Sequence[str], rules: Sequence[str] = ()
    ) -> Summary | Rejected:
        """:meth:`summarize_global` without blocking the event loop (as
        :meth:`asummarize`)."""
        segments, rules = _texts("segments", segments), _texts("rules", rules)
        keyed = list(enumerate(rules))
        if self.llm is None:
            return await asyncio.to_thread(self._offline_global, segments, rules, keyed)
        reply = await self._acall(await asyncio.to_thread(global_prompt, segments, rules))
        covered = "\n".join([*segments, *rules])
        return await asyncio.to_thread(self._judge, reply, covered, 3, keyed)

    # -- the parts -----------------------------------------------------------------------------

    def _rules(
        self, messages: list[Mapping[str, Any]], constraints: Sequence[tuple[int, str]] | None
    ) -> list[tuple[int, str]]:
        if constraints is None:
            return constraint_messages(messages, self.tagger)
        if isinstance(constraints, (str, bytes)) or not isinstance(constraints, Sequence):
            raise InvalidTypeError("constraints must be a list of (key, text) pairs")
        out = []
        for i, pair in enumerate(constraints):
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], str)):
                raise InvalidTypeError(f"constraints[{i}] must be a (key, text) pair")
            out.append((pair[0], pair[1]))
        return out

    def _call(self, prompt: list[OpenAIMessage]) -> str | Rejected:
        assert self.llm is not None
        try:
            return str(self.llm.complete(prompt, max_tokens=self.reply_tokens, temperature=self.temperature))
        except LLMTruncatedError:
            return Rejected(f"the reply was cut at its limit of {self.reply_tokens} tokens")
        except LLMError as error:
            return Rejected(f"the model call failed: {type(error).__name__}: {error}")

    async def _acall(self, prompt: list[OpenAIMessage]) -> str | Rejected:
        assert self.llm is not None
        try:
            reply = await self.llm.acomplete(
                prompt, max_tokens=self.reply_tokens, temperature=self.temperature
            )
            return str(reply)
        except LLMTruncatedError:
            return Rejected(f"the reply was cut at its limit of {self.reply_tokens} tokens")
        except LLMError as error:
            return Rejected(f"the model call failed: {type(error).__name__}: {error}")

    def _judge(
        self, reply: str | Rejected, covered: str, level: int, rules: list[tuple[int, str]]
    ) -> Summary | Rejected:
        if isinstance(reply, Rejected):
            outcome: Summary | Rejected = reply
        else:
            # The rules sit outside the bound, as in an offline summary: a
            # model that copies them, as the prompt asks, is not over it for
            # that (each on a line of its own, "- " before it).
            carried = sum(line_tokens(rule, self.tokenizer.count) for _, rule in rules)
            outcome = check_reply(
                reply,
                level=level,
                covered=covered,
                max_tokens=self.summary_tokens + carried,
                tokenizer=self.tokenizer,
                constraints=rules,
            )
        if isinstance(outcome, Rejected):
            log.warning("summary rejected (level %d): %s", level, outcome.reason)
        return outcome

    def _finish_offline(self, text: str, level: int, rules: list[tuple[int, str]]) -> Summary | Rejected:
        problem = check_sections(text)
        if problem is not None:  # a bug here, never the input's fault: say so, write nothing
            return Rejected(f"offline summary malformed: {problem}", "offline")
        return carry_rules(text, self.tokenizer.count(text), level, "offline", rules, self.tokenizer)

    def _offline_segment(
        self, messages: list[Mapping[str, Any]], rules: list[tuple[int, str]]
    ) -> Summary | Rejected:
        text = offline_segment(
            messages,
            max_tokens=self.summary_tokens,
            tokenizer=self.tokenizer,
            rules=[rule for _, rule in rules],
            tagger=self.tagger,
        )
        return self._finish_offline(text, 2, rules)

    def _offline_global(
        self, segments: list[str], rules: list[str], keyed: list[tuple[int, str]]
    ) -> Summary | Rejected:
        text = offline_global(segments, rules, max_tokens=self.summary_tokens, tokenizer=self.tokenizer)
        return self._finish_offline(text, 3, keyed)


def messages_covered(messages: Sequence[Mapping[str, Any]]) -> str:
    """Everything ``messages`` name: what a summary of them may name."""
    return "\n".join(message_text(m) for m in messages)
