"""Token budgets: how much of a model's window a request may fill.

A soft budget of 70% of the window, less reserves for the system prompt with
the tool schemas (8K), pinned messages (5K) and the current input (3K), each
scaled down for small windows (an eighth, a sixteenth and a sixteenth of the
window at most); the rest is history. A budget that leaves no room for
history is refused when it is made. Claude's tokenizer is not public, so for Anthropic models the
counts (OpenAI encodings) are estimates: a safety factor covers the difference
until :meth:`Budget.observe` has learned the real ratio from the usage the API
reports.
"""

from __future__ import annotations

import math
import numbers
import operator
import warnings
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from context_core._core import Tokenizer
from context_core.errors import (
    BudgetTooSmallError,
    BudgetWarning,
    InvalidInputError,
    InvalidTypeError,
    UnknownModelError,
)
from context_core.types import Tool

__all__ = ["CLAUDE_SAFETY_FACTOR", "MODEL_REPLY_ROOM", "MODEL_WINDOWS", "RATIO_RANGE", "Budget"]

# Context windows in tokens, matched by the longest prefix of the model name:
# what a request's input may fill. Sources: the providers' model pages (OpenAI
# "Models", Anthropic "Models overview").
MODEL_WINDOWS: Mapping[str, int] = {
    # The gpt-5 family's 400K window holds a 128K reply: the API refuses an
    # input over the other 272K, whatever max_completion_tokens says. Its
    # chat models have 128K for both.
    "gpt-5": 272_000,
    "gpt-5-chat": 128_000,
    "gpt-5.1-chat": 128_000,
    "gpt-5.2-chat": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-oss": 131_072,
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-opus": 200_000,
    "claude-3-sonnet": 200_000,
    "claude-3-haiku": 200_000,
}

# The reply room a model keeps outside the window MODEL_WINDOWS gives it (by
# the same longest prefix): a reply cap up to this takes nothing from the
# prompt's room. gpt-5's 272K input sits beside a 128K reply.
MODEL_REPLY_ROOM: Mapping[str, int] = {
    "gpt-5": 128_000,
    "gpt-5-chat": 0,
    "gpt-5.1-chat": 0,
    "gpt-5.2-chat": 0,
}

CLAUDE_SAFETY_FACTOR = 1.2
"""How much more Claude's tokenizer may count than o200k_base before any usage
has been observed (Claude tokenizes most text into more tokens)."""


RATIO_RANGE = (0.5, 4.0)
"""The provider tokens per counted token a usage sample may show to be learned.

o200k_base is among the most compact encodings, and Claude's tokenizer counts
most text into somewhat more tokens (the safety factor guesses 1.2), not into
half or four times as many. So a sample below half means the reported figure
left part of the prompt out (Anthropic's ``input_tokens`` without the cached
tokens: 0.025 for a prompt served mostly from the cache), and one above four
that the count left out part of what was sent (tool schemas, the system
prompt, documents, images) or that the prompt was so small the provider's
fixed overhead is most of it. Neither says anything about the tokenizers."""

#: Each reserve's default: at most ``cap`` tokens, and at most the window / ``share``.
_DEFAULT_RESERVES = {
    "system_reserve": (8_000, 8),
    "pinned_reserve": (5_000, 16),
    "input_reserve": (3_000, 16),
}

_RECENT = 9  # the ratio is the median of this many recent samples...
_QUORUM = 3  # ...with the safety factor in the places of the first ones missing


def _count(value: Any, name: str, *, positive: bool = False) -> int:
    """``value`` as an int: Python's or numpy's integers, not a bool."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise InvalidTypeError(f"{name} must be int, not {type(value).__name__}")
    number = operator.index(value)
    if number < 0 or (positive and number == 0):
        raise InvalidInputError(f"{name} must be {'positive' if positive else 'non-negative'}, got {number}")
    return number


def _number(value: Any, name: str) -> float:
    given = value  # as given: numbers.Real's stubs do not say int() takes it
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int past a float's range
        bits = int(given).bit_length()
        raise InvalidInputError(f"{name} must be finite, got an int of {bits} bits") from None


def _usage_field(usage: Any, name: str) -> int | None:
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
    return None if value is None else _count(value, f"usage.{name}")


def _reported_tokens(reported: Any) -> int:
    """The prompt's tokens as the provider counted them, cached ones included."""
    if isinstance(reported, bool) or hasattr(type(reported), "__index__"):
        return _count(reported, "reported", positive=True)
    if not isinstance(reported, Mapping) and not (
        hasattr(reported, "prompt_tokens") or hasattr(reported, "input_tokens")
    ):
        raise InvalidTypeError(
            f"reported must be int or an API usage (object or dict), not {type(reported).__name__}"
        )
    # OpenAI's prompt_tokens (Chat Completions) already holds the cached tokens.
    tokens = _usage_field(reported, "prompt_tokens")
    if tokens is None:
        tokens = _usage_field(reported, "input_tokens")
        if tokens is None:
            raise InvalidInputError("reported usage has neither prompt_tokens nor input_tokens")
        # Anthropic's input_tokens leaves out what was written to and read from
        # the cache; OpenAI's Responses usage has neither field, its input_tokens
        # holding the cached tokens as prompt_tokens does.
        for name in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            tokens += _usage_field(reported, name) or 0
    if tokens == 0:
        raise InvalidInputError("reported usage counts no input tokens")
    return tokens


@dataclass(init=False)
class Budget:
    """A model's window split into what a request may use.

    ``messages`` is what a selection policy fills (pinned, summaries, history
    and the current input); ``history`` is what is left for history alone.
    Both are in the units of the tokenizer counting them; for models whose
    tokenizer is not public they are divided by ``ratio`` (provider tokens per
    counted token), which starts at ``safety_factor`` and is learned by
    :meth:`observe`. Whatever the ratio, neither exceeds the window, and the
    ratio stays within :data:`RATIO_RANGE`.
    """

    window: int
    soft_ratio: float
    system_reserve: int
    """Tokens kept for the system prompt and tool schemas (default: an eighth
    of the window, at most 8,000)."""
    pinned_reserve: int
    """Tokens kept for pinned messages (default: a sixteenth, at most 5,000)."""
    input_reserve: int
    """Tokens kept for the current input (default: a sixteenth, at most 3,000)."""
    safety_factor: float
    estimated: bool
    reply_room: int
    """Tokens the model keeps for its reply outside ``window`` (gpt-5:
    128,000): a reply cap up to this takes nothing from the prompt's room."""
    observations: int = field(default=0, init=False)
    """Usage samples learned from."""
    rejected: int = field(default=0, init=False)
    """Usage samples refused as outside :data:`RATIO_RANGE` (each with a :class:`BudgetWarning`)."""
    _samples: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT), init=False, repr=False)

    def __init__(
        self,
        window: int,
        soft_ratio: float = 0.7,
        system_reserve: int | None = None,
        pinned_reserve: int | None = None,
        input_reserve: int | None = None,
        safety_factor: float = 1.0,
        estimated: bool = False,
        reply_room: int = 0,
    ) -> None:
        self.window = _count(window, "window")
        self.reply_room = _count(reply_room, "reply_room")
        # Reserves scale with the window: fixed 8K/5K/3K reserves would leave
        # an 8K model (gpt-4) no room for a single message.
        given = {"system_reserve": system_reserve, "pinned_reserve": pinned_reserve}
        given["input_reserve"] = input_reserve
        for name, value in given.items():
            cap, share = _DEFAULT_RESERVES[name]
            setattr(self, name, min(cap, self.window // share) if value is None else _count(value, name))
        self.soft_ratio = soft_ratio
        self.safety_factor = safety_factor
        self.estimated = estimated
        self.observations = 0
        self.rejected = 0
        self._samples = deque(maxlen=_RECENT)
        self._check()

    def _check(self) -> None:
        self.soft_ratio = _number(self.soft_ratio, "soft_ratio")
        if not 0 < self.soft_ratio <= 1:
            raise InvalidInputError(f"soft_ratio must be in (0, 1], got {self.soft_ratio}")
        self.safety_factor = _number(self.safety_factor, "safety_factor")
        low, high = RATIO_RANGE
        if not low <= self.safety_factor <= high:
            raise InvalidInputError(
                f"safety_factor must be in [{low:g}, {high:g}] (provider tokens per counted token), "
                f"got {self.safety_factor}"
            )
        if self.history() <= 0:
            error = BudgetTooSmallError(
                f"this budget leaves no room for history: the soft limit of {self.soft_limit} tokens "
                f"({self.soft_ratio:g} of a {self.window}-token window) less the reserves (system "
                f"{self.system_reserve}, pinned {self.pinned_reserve}, input {self.input_reserve}), "
                f"at {self.safety_factor:g} provider tokens per counted token; give smaller reserves"
            )
            error.window, error.soft_limit, error.ratio = self.window, self.soft_limit, self.safety_factor
            error.system_reserve, error.pinned_reserve = self.system_reserve, self.pinned_reserve
            error.input_reserve = self.input_reserve
            raise error

    @classmethod
    def for_model(cls, model: str, *, table: Mapping[str, int] | None = None, **overrides: Any) -> Budget:
        """The budget of a known model (``MODEL_WINDOWS``, or ``table``);
        Claude models are marked estimated with :data:`CLAUDE_SAFETY_FACTOR`.
        ``reply_room`` comes from :data:`MODEL_REPLY_ROOM` unless ``table``
        names the model more closely (its window then holds the reply too);
        pass ``reply_room=`` to say otherwise."""
        if not isinstance(model, str):
            raise InvalidTypeError(f"model must be str, not {type(model).__name__}")
        windows = MODEL_WINDOWS if table is None else table
        matches = [prefix for prefix in windows if model.startswith(prefix)]
        if not matches and "window" not in overrides:
            known = ", ".join(f"{p}*" for p in windows)
            raise UnknownModelError(f"unknown model {model!r}; known: {known}. Pass window=... to set it")
        estimated = model.startswith("claude")
        options: dict[str, Any] = {
            "estimated": estimated,
            "safety_factor": CLAUDE_SAFETY_FACTOR if estimated else 1.0,
        }
        named = max(matches, key=len) if matches else ""
        if matches:
            options["window"] = windows[named]
        # The model's reply room, whatever table gave the window, unless the
        # table names the model more closely (a model of its own that only
        # shares the family's prefix): that window is the table's alone.
        apart = [prefix for prefix in MODEL_REPLY_ROOM if model.startswith(prefix)]
        if apart and len(max(apart, key=len)) >= len(named):
            options["reply_room"] = MODEL_REPLY_ROOM[max(apart, key=len)]
        options.update(overrides)
        return cls(**options)

    @property
    def soft_limit(self) -> int:
        """The part of the window a request may fill."""
        return int(self.window * self.soft_ratio)

    @property
    def ratio(self) -> float:
        """Provider tokens per counted token: the median of the last nine samples
        :meth:`observe` accepted, the safety factor filling in for the first
        three until they are in (so no one sample moves it on its own)."""
        if not self._samples:
            return self.safety_factor
        samples = [*self._samples, *[self.safety_factor] * (_QUORUM - len(self._samples))]
        import statistics  # on first use: it imports random, fractions and decimal

        return statistics.median(samples)

    def messages(
        self,
        *,
        system_tokens: int | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> int:
        """Tokens for the message list: the soft limit less the system prompt
        and tool schemas, at most the window less them. Give ``system_tokens``
        and/or ``tools`` (counted with ``tokenizer``, default o200k_base) to
        reserve their real size instead of ``system_reserve``."""
        if system_tokens is None and tools is None:
            reserve, counted = self.system_reserve, 0  # a share of the window, in the provider's tokens
        else:
            if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
                raise InvalidTypeError(f"tokenizer must be a Tokenizer, not {type(tokenizer).__name__}")
            reserve = 0
            counted = 0 if system_tokens is None else _count(system_tokens, "system_tokens")
            listed = isinstance(tools, Iterable) and not isinstance(tools, (str, bytes, Mapping))
            if tools is not None and not listed:
                raise InvalidTypeError(f"tools must be a list of tool schemas, not {type(tools).__name__}")
            if tools:
                counted += (tokenizer or Tokenizer()).count_tools(cast("list[Tool]", list(tools)))
        tokens = math.floor((self.soft_limit - reserve) / self.ratio) - counted
        # Never more of our own tokens than the window holds, whatever ratio
        # was learned: a ratio under 1 (the provider counting fewer tokens than
        # we do) rests on samples that may be wrong, and this is the bound that
        # holds without them. Conservative: at a true ratio of 0.5 it leaves
        # part of the soft limit unused.
        return max(0, min(tokens, self.window - reserve - counted))

    def history(self, **kwargs: Any) -> int:
        """Tokens for history alone: :meth:`messages` less the pinned and
        current-input reserves."""
        return max(
            0, self.messages(**kwargs) - math.ceil((self.pinned_reserve + self.input_reserve) / self.ratio)
        )

    def observe(self, counted: int, reported: int | Mapping[str, Any] | Any) -> float:
        """Learn from a response: ``counted`` is our count of the whole prompt
        (system, tools and messages, as sent), ``reported`` the API's ``usage``
        as its SDK returns it (an object or a dict): Anthropic's
        ``input_tokens`` plus ``cache_creation_input_tokens`` plus
        ``cache_read_input_tokens``, OpenAI's ``prompt_tokens`` (or the
        Responses API's ``input_tokens``), which hold the cached tokens
        already. An int is taken as that total.

        A sample outside :data:`RATIO_RANGE` is not learned: it is counted in
        ``rejected`` and a :class:`BudgetWarning` says why. Returns the ratio,
        which is the median of the recent samples (see :attr:`ratio`)."""
        refused = self._observe(counted, reported)
        if refused is not None:
            warnings.warn(BudgetWarning(refused), stacklevel=2)
        return self.ratio

    def _observe(self, counted: int, reported: int | Mapping[str, Any] | Any) -> str | None:
        """:meth:`observe`, saying why a sample was rejected instead of
        warning (for a caller that logs it: a ``Session``'s ``record``)."""
        counted = _count(counted, "counted", positive=True)
        tokens = _reported_tokens(reported)
        try:
            sample = tokens / counted
        except OverflowError:  # an int past any float: out of range whatever it is
            sample = math.inf
        low, high = RATIO_RANGE
        if not low <= sample <= high:
            self.rejected += 1
            return (
                f"usage sample rejected: {tokens} reported / {counted} counted = {sample:.3g} "
                f"tokens per counted token, outside [{low:g}, {high:g}]; the ratio stays "
                f"{self.ratio:.3g}. Give the whole usage (Anthropic's input_tokens leaves out "
                "the cached tokens) and count the whole prompt (system, tools, messages)"
            )
        self._samples.append(sample)
        self.observations += 1
        return None
