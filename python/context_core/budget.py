"""Token budgets: how much of a model's window a request may fill.

DESIGN.md, mechanism 4: a soft budget of 70% of the window; reserves for the
system prompt with the tool schemas (8K), pinned messages (5K) and the current
input (3K); the rest is history. Claude's tokenizer is not public, so for
Anthropic models the counts (OpenAI encodings) are estimates: a safety factor
covers the difference until :meth:`Budget.observe` has learned the real ratio
from the usage the API reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from context_core._core import Tokenizer
from context_core.errors import InvalidInputError, InvalidTypeError, UnknownModelError

__all__ = ["CLAUDE_SAFETY_FACTOR", "MODEL_WINDOWS", "Budget"]

# Context windows in tokens, matched by the longest prefix of the model name.
# Sources: the providers' model pages (OpenAI "Models", Anthropic "Models overview").
MODEL_WINDOWS: Mapping[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
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

CLAUDE_SAFETY_FACTOR = 1.2
"""How much more Claude's tokenizer may count than o200k_base before any usage
has been observed (Claude tokenizes most text into more tokens)."""


@dataclass
class Budget:
    """A model's window split into what a request may use.

    ``messages`` is what a selection policy fills (pinned, summaries, history
    and the current input); ``history`` is what is left for history alone.
    Both are in the units of the tokenizer counting them; for models whose
    tokenizer is not public they are divided by ``ratio`` (provider tokens per
    counted token), which starts at ``safety_factor`` and is learned by
    :meth:`observe`.
    """

    window: int
    soft_ratio: float = 0.7
    system_reserve: int = 8_000
    pinned_reserve: int = 5_000
    input_reserve: int = 3_000
    safety_factor: float = 1.0
    estimated: bool = False
    observations: int = field(default=0, init=False)
    _ratio: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("window", "system_reserve", "pinned_reserve", "input_reserve"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be int, not {type(value).__name__}")
            if value < 0:
                raise InvalidInputError(f"{name} must be non-negative, got {value}")
        if not 0 < self.soft_ratio <= 1:
            raise InvalidInputError(f"soft_ratio must be in (0, 1], got {self.soft_ratio}")
        if self.safety_factor <= 0:
            raise InvalidInputError(f"safety_factor must be positive, got {self.safety_factor}")

    @classmethod
    def for_model(cls, model: str, *, table: Mapping[str, int] | None = None, **overrides: Any) -> Budget:
        """The budget of a known model (``MODEL_WINDOWS``, or ``table``);
        Claude models are marked estimated with :data:`CLAUDE_SAFETY_FACTOR`."""
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
        if matches:
            options["window"] = windows[max(matches, key=len)]
        options.update(overrides)
        return cls(**options)

    @property
    def soft_limit(self) -> int:
        """The part of the window a request may fill."""
        return int(self.window * self.soft_ratio)

    @property
    def ratio(self) -> float:
        """Provider tokens per counted token: learned, else the safety factor."""
        return self._ratio if self._ratio is not None else self.safety_factor

    def messages(
        self,
        *,
        system_tokens: int | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> int:
        """Tokens for the message list: the soft limit less the system prompt
        and tool schemas. Give ``system_tokens`` and/or ``tools`` (counted with
        ``tokenizer``, default o200k_base) to reserve their real size instead
        of ``system_reserve``."""
        if system_tokens is None and tools is None:
            reserve = self.system_reserve
        else:
            reserve = system_tokens or 0
            if tools:
                reserve += (tokenizer or Tokenizer()).count_tools(list(tools))
        return max(0, math.floor((self.soft_limit - reserve) / self.ratio))

    def history(self, **kwargs: Any) -> int:
        """Tokens for history alone: :meth:`messages` less the pinned and
        current-input reserves."""
        return max(
            0, self.messages(**kwargs) - math.ceil((self.pinned_reserve + self.input_reserve) / self.ratio)
        )

    def observe(self, counted: int, reported: int) -> float:
        """Learn from a response: ``counted`` tokens by our count, ``reported``
        by the provider's usage (``prompt_tokens`` / ``input_tokens``).
        Returns the new ratio: the mean of the first five samples, then an
        exponential average that follows drift (weight 0.2)."""
        for name, value in (("counted", counted), ("reported", reported)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be int, not {type(value).__name__}")
            if value <= 0:
                raise InvalidInputError(f"{name} must be positive, got {value}")
        sample = reported / counted
        self.observations += 1
        if self._ratio is None:
            self._ratio = sample
        else:
            weight = max(0.2, 1 / self.observations)  # a mean at first, then an EMA
            self._ratio += weight * (sample - self._ratio)
        return self._ratio
