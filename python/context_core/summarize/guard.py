"""The guard between a model's reply and the log: only a ``<summary>`` that
passes every check is kept; anything else is :class:`Rejected` with its
reason, and nothing is written. No error text ever becomes a summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from context_core._core import Tokenizer, _check_sections, _check_summary
from context_core.summarize.rules import carried, with_rules

__all__ = ["Rejected", "Summary", "carry_rules", "check_reply", "check_sections"]


@dataclass(frozen=True)
class Summary:
    """A summary that passed the guard.

    ``text`` is what the log stores; ``tokens`` its exact count; ``level`` 2
    (a segment) or 3 (the whole conversation); ``source`` ``"model"`` or
    ``"offline"``. ``added`` are the keys of the rules the summary did not
    carry (see :func:`~context_core.summarize.rules.carried`), added to its
    Constraints section word for word; ``uncarried`` those still not carried
    after that (only a rule whose values no text can hold, such as one
    that changes under Unicode normalisation), which must stay raw."""

    text: str
    tokens: int
    level: int
    uncarried: tuple[int, ...] = ()
    source: str = "model"
    added: tuple[int, ...] = ()


@dataclass(frozen=True)
class Rejected:
    """No summary: ``reason`` says why (nothing was written)."""

    reason: str
    source: str = "model"


def check_sections(text: str) -> str | None:
    """``None`` if ``text`` has every section heading of
    :data:`~context_core.summarize.prompts.SECTIONS` (in any case, as a line
    of its own, with an optional ``#`` or ``**``), once each and in order,
    each followed by something; else what is wrong."""
    return _check_sections(text)


def check_reply(
    reply: str,
    *,
    level: int,
    covered: str,
    max_tokens: int,
    tokenizer: Tokenizer,
    constraints: Sequence[tuple[int, str]] = (),
) -> Summary | Rejected:
    """The :class:`Summary` in ``reply``, or why there is none.

    In order: the reply is not empty, an HTML page, an error message or a
    refusal; it holds one ``<summary>``, closed, last and not empty; the
    summary is not an error message or a refusal, holds none of the
    prompt's markup or sentences, has its sections, fits ``max_tokens``, and
    names no tool call id or file (see
    :func:`~context_core.summarize.exact.named`) that ``covered`` (every
    covered message's text, tool call ids and arguments) does not hold as a
    whole. ``constraints`` are ``(key, text)`` of the rules it must carry:
    those it does not are added to it word for word (see :func:`carry_rules`).
    The checks run in Rust (``context_core.reference.summarize`` is their
    twin)."""
    if not isinstance(reply, str) or not reply.strip():
        return Rejected("the reply is empty")
    try:
        reply.encode("utf-8")
    except UnicodeEncodeError:
        return Rejected("the reply holds text that is not Unicode (a lone surrogate)")
    body, tokens, reason = _check_summary(reply, covered, max_tokens, tokenizer)
    if body is None:
        return Rejected(reason or "rejected")
    return carry_rules(body, tokens, level, "model", constraints, tokenizer)


def carry_rules(
    text: str,
    tokens: int,
    level: int,
    source: str,
    constraints: Sequence[tuple[int, str]],
    tokenizer: Tokenizer,
) -> Summary | Rejected:
    """The :class:`Summary` of ``text``, with every rule of ``constraints``
    it does not carry added to its Constraints section word for word (and
    the result checked again: it must still have its sections)."""
    missing = [(key, rule) for key, rule in constraints if not carried(rule, text)]
    if not missing:
        return Summary(text, tokens, level, (), source)
    text = with_rules(text, [rule for _, rule in missing])
    problem = _check_sections(text)
    if problem is not None:
        return Rejected(f"the summary with its rules added: {problem}", source)
    still = tuple(key for key, rule in missing if not carried(rule, text))
    return Summary(text, tokenizer.count(text), level, still, source, tuple(key for key, _ in missing))
