"""Context selection in plain Python: the analysis and the three policy kernels
written from README.md ("Context selection"), behind the same layout code
(``context_core._selection``) as the extension-backed policies."""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, cast

from context_core import _selection
from context_core._core import METADATA_KEYS, TRUNCATION_MARKER, ToolResultCut
from context_core._selection import Selection
from context_core.errors import InvalidInputError, InvalidTypeError, OverBudgetError
from context_core.reference import sanitize as reference_sanitize
from context_core.reference.tags import CONSTRAINT, EVIDENCE, LOG, NAMES, PULSE, WHITE_SPACE, Tagger
from context_core.reference.tokenizer import Tokenizer

METADATA = frozenset(METADATA_KEYS)

REPLY_PRIMING = 3
TEXT_TYPES = ("text", "input_text", "output_text")
DEPENDS_ON = re.compile(r"""(?:depends|Depends|DEPENDS)[_ ](?:on|On|ON) *[=:] *["']?([A-Za-z0-9_.\-]+)""")
ALLOWED = {  # found tags count where they mean something
    "system": CONSTRAINT | LOG,
    "user": CONSTRAINT | PULSE | LOG,
    "assistant": EVIDENCE | LOG,
}

#: A unit: (first message, end, tokens, kind, tags, starts a turn), as the extension's.
Unit = tuple[int, int, int, str, int, bool]
#: A tool result cut to the cap: (message, block, part, text, tokens before, after).
Truncation = tuple[int, int | None, int | None, str, int, int]
#: Where a cut text goes in its message: (block, part, text).
Cut = tuple[int | None, int | None, str]


def decayed(decay: float, age: float) -> float:
    """``decay ** age`` as the extension computes it, ``exp(age * log(decay))``
    (the same C library's ``exp`` and ``log``, so the same bits); an age of 0
    weighs 1, as does any age at a decay of 1, and a decay of 0 weighs 0 at
    any later age."""
    if age == 0.0 or decay == 1.0:
        return 1.0
    if decay == 0.0:
        return 0.0
    return math.exp(age * math.log(decay))


class MessageInfo(TypedDict):
    """What selection reads from one message (``Analysis.read``)."""

    role: str
    tokens: int
    tags: int
    pinned: bool
    priority: float
    weight: float | None
    timestamp: float | None
    id: str | None
    depends_on: list[str]
    calls: bool
    results: bool
    has_text: bool


class CachedTokenizer(Tokenizer):
    """The reference tokenizer with a count cache, as the extension has one."""

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - one instance per backend
    def _count(self, text: str) -> int:
        return len(self.encode(text))

    def count(self, text: str, limit: int | None = None) -> int:
        n = self._count(text) if isinstance(text, str) else super().count(text)
        return n if limit is None else min(n, limit + 1)


def _blank(text: str) -> bool:
    return all(c in WHITE_SPACE for c in text)


def _number(message: Mapping[str, Any], key: str) -> float | None:
    value = message.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{key}: expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int past a float's range: an infinity, as the extension reads it
        return math.inf if value > 0 else -math.inf


def _finite_weight(weight: float | None) -> float | None:
    """A message's ``weight``, refused where it is not finite (NaN, an
    infinity, an int past a float's range), as the extension refuses it
    (and a log's append, which reads a message here too)."""
    if weight is not None and not math.isfinite(weight):
        shown = "NaN" if math.isnan(weight) else str(weight)  # as Rust prints it
        raise InvalidInputError(f"weight: must be a finite number, not {shown}")
    return weight


class Analysis:
    """A history read for selection (the extension's ``_Analysis``)."""

    def __init__(
        self,
        messages: list[dict[str, Any]],
        tokenizer: CachedTokenizer,
        tagger: Tagger | None,
        cap: int | None,
    ) -> None:
        self.tokenizer, self.tagger, self.cap = tokenizer, tagger, cap
        self.messages = messages
        # The twin keeps no memo to vouch for: whether the messages are plain
        # values only does not change what it answers.
        self.plain = False
        self.truncations: list[Truncation] = []
        self.info: list[MessageInfo] = []
        for index, message in enumerate(messages):
            try:
                self.info.append(self.read(index, message))
            except (InvalidInputError, InvalidTypeError) as error:
                raise type(error)(f"messages[{index}]: {error}") from None
        self.units = self.group()
        self.tokens = [m["tokens"] for m in self.info]
        self.tags = [m["tags"] for m in self.info]
        self.ids = [(m["id"], m["depends_on"]) for m in self.info]

    def cut(self, text: str) -> tuple[str, int, int] | None:
        if self.cap is None or self.tokenizer.count(text, self.cap) <= self.cap:
            return None
        cut = self.tokenizer.truncate(text, self.cap, TRUNCATION_MARKER)
        return cut, self.tokenizer.count(text), self.tokenizer.count(cut)

    def read(self, index: int, message: Any) -> MessageInfo:
        if not isinstance(message, Mapping):
            raise InvalidTypeError(f"expected a message dict, got {type(message).__name__}")
        # cast: count_message itself refuses a mapping that is not a dict (as the extension does).
        tokens = self.tokenizer.count_message(cast("dict[str, Any]", message))
        given_role: Any = message.get("role")
        role = {"developer": "system", "function": "tool"}.get(given_role, given_role)
        if role not in ("system", "user", "assistant", "tool"):
            role = "other"
        calls = isinstance(message.get("tool_calls"), (list, tuple)) and len(message["tool_calls"]) > 0
        results = role == "tool"
        thinking = has_text = False
        text = ""  # the message's own words
        result_texts: list[str] = []  # tool output it carries
        content = message.get("content")
        if isinstance(content, str):
            has_text = not _blank(content)
            text = content
            if role == "tool" and (cut := self.cut(content)):
                self.truncations.append((index, None, None, *cut))
                tokens += cut[2] - cut[1]
        elif isinstance(content, (list, tuple)):
            for j, block in enumerate(content):
                kind = block.get("type") if isinstance(block, Mapping) else None
                if kind in TEXT_TYPES and isinstance(block.get("text"), str):
                    has_text = has_text or not _blank(block["text"])
                    text += block["text"] + "\n"
                    # An OpenAI tool message's output in parts: each text capped, as a result's are.
                    if role == "tool" and kind == "text" and (cut := self.cut(block["text"])):
                        self.truncations.append((index, None, j, *cut))
                        tokens += cut[2] - cut[1]
                elif kind in ("thinking", "redacted_thinking"):
                    thinking = True
                elif kind == "tool_use":
                    calls = True
                elif kind == "tool_result":
                    results = True
                    inner = block.get("content")
                    if isinstance(inner, str):
                        result_texts.append(inner)
                        if cut := self.cut(inner):
                            self.truncations.append((index, j, None, *cut))
                            tokens += cut[2] - cut[1]
                    elif isinstance(inner, (list, tuple)):
                        for k, part in enumerate(inner):
                            if (
                                isinstance(part, Mapping)
                                and part.get("type") == "text"
                                and isinstance(part.get("text"), str)
                            ):
                                result_texts.append(part["text"])
                                if cut := self.cut(part["text"]):
                                    self.truncations.append((index, j, k, *cut))
                                    tokens += cut[2] - cut[1]
        given = message.get("tags")
        if given is None:
            if self.tagger is None:
                tags = EVIDENCE if thinking else 0
            else:
                tagger = self.tagger
                tags = (
                    (tagger.mask(text) & ALLOWED.get(role, LOG))
                    # Tool output can only be a log; each text is tagged on its own.
                    | (LOG if any(tagger.mask(t) & LOG for t in result_texts) else 0)
                    | (EVIDENCE if thinking else 0)
                )
        elif isinstance(given, (list, tuple)):
            tags = 0
            for name in given:
                if not isinstance(name, str):
                    raise InvalidTypeError(f"tags: expected str, got {type(name).__name__}")
                if name not in NAMES:
                    raise InvalidInputError(f"tags: unknown tag {name!r}")
                tags |= NAMES[name]
        else:
            raise InvalidTypeError("tags: expected a list of tag names")
        pinned = message.get("pinned")
        if pinned is not None and not isinstance(pinned, bool):
            raise InvalidTypeError("pinned: expected bool")
        message_id = message.get("id")
        if message_id is not None and not isinstance(message_id, str):
            raise InvalidTypeError("id: expected str")
        depends = message.get("depends_on")
        depends_on: list[str]
        if depends is None:
            depends_on = []
        elif isinstance(depends, str):
            depends_on = [depends]
        elif isinstance(depends, (list, tuple)) and all(isinstance(d, str) for d in depends):
            depends_on = list(depends)
        else:
            raise InvalidTypeError("depends_on: expected a message id or a list of them")
        if role == "assistant":
            depends_on += DEPENDS_ON.findall(text)
        return {
            "role": role,
            "tokens": tokens,
            "tags": tags,
            "pinned": bool(pinned),
            "priority": _number(message, "priority") or 0.0,
            "weight": _finite_weight(_number(message, "weight")),
            "timestamp": _number(message, "timestamp"),
            "id": message_id,
            "depends_on": depends_on,
            "calls": calls,
            "results": results,
            "has_text": has_text,
        }

    def group(self) -> list[Unit]:
        """Units: an assistant message with tool calls takes the results after it."""
        info, i = self.info, 0
        units: list[Unit] = []
        while i < len(info):
            end = i + 1
            if info[i]["role"] == "assistant" and info[i]["calls"]:
                while end < len(info) and info[end]["results"] and info[end]["role"] in ("tool", "user"):
                    end += 1
                    if info[end - 1]["role"] == "user":
                        break
            members = info[i:end]
            if info[i]["role"] == "system":
                kind = "system"
            elif any(m["pinned"] for m in members):
                kind = "pinned"
            else:
                kind = "normal"
            tags = 0
            for m in members:
                tags |= m["tags"]
            turn_start = info[i]["role"] == "user" and info[i]["has_text"] and not info[i]["results"]
            units.append((i, end, sum(m["tokens"] for m in members), kind, tags, turn_start))
            i = end
        # The turn in progress: the newest unit that starts a turn, and every
        # unit after it; with none that starts a turn (a summary covers the
        # input the loop began with), the call the view ends in, with its results.
        starts = [u for u, unit in enumerate(units) if unit[5]]
        first = starts[-1] if starts else len(units)
        last = info[units[-1][0]] if units else None
        if not starts and last is not None and last["role"] == "assistant" and last["calls"]:
            first = len(units) - 1
        for u in range(first, len(units)):
            start, end, tokens, kind, tags, turn_start = units[u]
            if kind == "normal":
                units[u] = (start, end, tokens, "current", tags, turn_start)
        return units

    # -- what the layout reads -------------------------------------------------

    @property
    def unit_count(self) -> int:
        return len(self.units)

    @property
    def total_tokens(self) -> int:
        return sum(unit[2] for unit in self.units)

    @property
    def first_turn(self) -> int | None:
        return next((u for u, unit in enumerate(self.units) if unit[5]), None)

    @property
    def turn_starts(self) -> list[int]:
        return [u for u, unit in enumerate(self.units) if unit[5]]

    def spans(self, units: list[int]) -> list[tuple[int, int, int, str]]:
        for u in units:
            if not 0 <= u < len(self.units):
                raise InvalidInputError(f"no unit {u}")
        return [self.units[u][:4] for u in units]

    def expand(self, units: list[int]) -> tuple[list[int], list[int]]:
        keep = set(units)
        kept: list[int] = []
        dropped: list[int] = []
        for u, (start, end, *_rest) in enumerate(self.units):
            (kept if u in keep else dropped).extend(range(start, end))
        return kept, dropped

    def missing_dependencies(self, kept: list[int]) -> list[tuple[int, str]]:
        position = {message_id: i for i, (message_id, _) in enumerate(self.ids) if message_id is not None}
        kept_set = {i for i in kept if 0 <= i < len(self.ids)}
        return [
            (index, dependency)
            for index in sorted(kept_set)
            for dependency in self.ids[index][1]
            if dependency in position and position[dependency] not in kept_set
        ]

    def kind_tokens(self, units: list[int]) -> tuple[int, int, int, int]:
        sums = dict.fromkeys(("system", "pinned", "current", "normal"), 0)
        for _start, _end, tokens, kind in self.spans(units):
            sums[kind] += tokens
        return sums["system"], sums["pinned"], sums["current"], sums["normal"]

    def outputs(self, units: list[int]) -> tuple[list[dict[str, Any]], list[int]]:
        """The messages of ``units`` as sent (tool results capped, metadata
        removed), and their tokens."""
        cuts: dict[int, list[Cut]] = {}
        for message, block, part, text, _before, _after in self.truncations:
            cuts.setdefault(message, []).append((block, part, text))
        indices = [m for start, end, *_ in self.spans(units) for m in range(start, end)]
        return [self.output(m, cuts.get(m, [])) for m in indices], [self.tokens[m] for m in indices]

    def lay_out(self, items: Sequence[Any]) -> tuple[list[dict[str, Any]], list[int | None], list[int]]:
        """A plan laid out: each item a unit's number (its messages, as
        :meth:`outputs` gives them) or an extra message (as it is); with each
        message's tokens (``None`` for an extra) and the units."""
        out: list[dict[str, Any]] = []
        tokens: list[int | None] = []
        units: list[int] = []
        for item in items:
            if type(item) is int:
                messages, counts = self.outputs([item])
                out += messages
                tokens += counts
                units.append(item)
            else:
                out.append(item)
                tokens.append(None)
        return out, tokens, units

    def kept(
        self, units: list[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, str], ...], tuple[ToolResultCut, ...]]:
        """Kept and dropped messages, missing dependencies and the kept tool
        results cut to the cap, when ``units`` are kept."""
        kept, dropped = self.expand(units)
        kept_set = set(kept)
        truncated = tuple(ToolResultCut(t[0], t[4], t[5]) for t in self.truncations if t[0] in kept_set)
        return tuple(kept), tuple(dropped), tuple(self.missing_dependencies(kept)), truncated

    def output(self, index: int, cuts: list[Cut]) -> dict[str, Any]:
        message = self.messages[index]
        if not cuts and METADATA.isdisjoint(message):
            return message
        out = {k: v for k, v in message.items() if k not in METADATA}
        for block, part, text in cuts:
            if block is None:  # an OpenAI tool message: its content, or a text part of it
                _put_cut(out, part, text)
            else:  # an Anthropic tool_result block, copied with the cut in it
                content = list(out["content"])
                result = dict(content[block])
                _put_cut(result, part, text)
                content[block] = result
                out["content"] = content
        return out

    def constraint_starts(self) -> list[int]:
        return [
            unit[0]
            for unit in self.units
            if unit[3] in ("normal", "pinned") and self.tags[unit[0]] & CONSTRAINT
        ]

    # -- the kernels ------------------------------------------------------------

    def mandatory(self, budget: int) -> tuple[list[int], int]:
        kept = [u for u, unit in enumerate(self.units) if unit[3] != "normal"]
        cost = REPLY_PRIMING + sum(self.units[u][2] for u in kept)
        if cost > budget:
            raise self.over_budget(kept, budget)
        return kept, cost

    def sizes(self, kept: list[int]) -> dict[str, int]:
        kinds = ("system", "pinned", "current")
        return {k: sum(self.units[u][2] for u in kept if self.units[u][3] == k) for k in kinds}

    def over_budget(self, kept: list[int], budget: int) -> OverBudgetError:
        return self.budget_error(self.sizes(kept), budget)

    @staticmethod
    def budget_error(sizes: dict[str, int], budget: int) -> OverBudgetError:
        error = OverBudgetError(
            f"what must be kept does not fit: system {sizes['system']} + pinned {sizes['pinned']} + "
            f"turn in progress {sizes['current']} + reply priming 3 tokens > budget {budget}"
        )
        error.system, error.pinned = sizes["system"], sizes["pinned"]
        error.turn_in_progress, error.priming, error.budget = sizes["current"], 3, budget
        return error

    def weight(self, m: int, weights: tuple[float, ...], now: float | None) -> float:
        info = self.info[m]
        if info["weight"] is not None:
            return info["weight"]
        if info["role"] == "system":
            return weights[0]
        if now is not None and info["timestamp"] is not None:
            age = max(0.0, (now - info["timestamp"]) / 60.0)
        else:
            age = float(len(self.info) - 1 - m)
        for tag, weight in (
            (CONSTRAINT, weights[1]),
            (EVIDENCE, weights[2]),
            (PULSE, weights[3]),
            (LOG, weights[4]),
        ):
            if info["tags"] & tag:
                return weight * decayed(weights[6], age)
        return decayed(weights[5], age)

    def weighted(
        self, budget: int, weights: tuple[float, ...], max_anchors: int, recent_turns: int, now: float | None
    ) -> list[int]:
        kept, cost = self.mandatory(budget)
        optional = [u for u, unit in enumerate(self.units) if unit[3] == "normal"]
        anchors = [u for u in optional if self.units[u][4] & CONSTRAINT][:max_anchors]
        starts = self.turn_starts
        recent_from = (
            starts[-recent_turns]
            if 0 < recent_turns <= len(starts)
            else (starts[0] if starts and recent_turns else len(self.units))
        )
        recent = [u for u in reversed(optional) if u >= recent_from and u not in anchors]
        rest = [u for u in optional if u < recent_from and u not in anchors]
        for u in anchors:
            if cost + self.units[u][2] <= budget:
                cost += self.units[u][2]
                kept.append(u)
        # The newest turns go in first, within half the budget; the rest compete by weight.
        recent_cost = 0
        for u in recent:
            tokens = self.units[u][2]
            if cost + tokens <= budget and recent_cost + tokens <= budget // 2:
                cost += tokens
                recent_cost += tokens
                kept.append(u)
            else:
                rest.append(u)
        heaviest = {
            u: max(self.weight(m, weights, now) for m in range(self.units[u][0], self.units[u][1]))
            for u in rest
        }
        for u in sorted(rest, key=lambda u: (-heaviest[u], -u)):
            if cost + self.units[u][2] <= budget:
                cost += self.units[u][2]
                kept.append(u)
        return sorted(kept)

    def shape(
        self, budget: int, keep_last: int, min_keep: int, summary_tokens: int | None
    ) -> tuple[list[int], int | None, bool]:
        if REPLY_PRIMING + sum(u[2] for u in self.units) <= budget:
            return list(range(len(self.units))), None, False
        mandatory, _ = self.mandatory(budget)
        starts = [u for u, unit in enumerate(self.units) if unit[5]]
        first_user = starts[0] if starts else None

        def candidate(n: int, with_summary: bool) -> tuple[list[int], int, bool] | None:
            start = len(self.units) if n == 0 or not starts else starts[max(0, len(starts) - n)]
            units = set(mandatory) | set(range(start, len(self.units)))
            if first_user is not None:
                units.add(first_user)
            summary, summary_cost = False, 0
            if with_summary and len(units) < len(self.units) and summary_tokens is not None:
                summary, summary_cost = True, summary_tokens
            cost = REPLY_PRIMING + sum(self.units[u][2] for u in units) + summary_cost
            return (sorted(units), n, summary) if cost <= budget else None

        min_keep = min(min_keep, keep_last)
        for n in range(keep_last, min_keep - 1, -1):
            if found := candidate(n, True):
                return found
        for n in range(min_keep, -1, -1):
            if found := candidate(n, False):
                return found
        # The first user message is kept as pinned ones are: named with them.
        error = self.over_budget(mandatory, budget)
        if first_user is not None and first_user not in mandatory:
            sizes = self.sizes(mandatory)
            sizes["pinned"] += self.units[first_user][2]
            error = self.budget_error(sizes, budget)
        raise error

    def build(
        self,
        budget: int,
        global_tokens: int | None,
        memories: list[int],
        segments: list[int],
        anchoring: int | None,
    ) -> tuple[list[int], list[int], list[int], bool, bool, list[int], list[int]]:
        units, cost = self.mandatory(budget)

        def fits(tokens: int, limit: int) -> bool:
            nonlocal cost
            if cost + tokens <= limit:
                cost += tokens
                return True
            return False

        with_anchor = anchoring is not None and fits(anchoring, budget)
        with_global = global_tokens is not None and fits(global_tokens, budget)
        kept_memories = [i for i, tokens in enumerate(memories) if fits(tokens, budget * 80 // 100)]
        kept_segments = sorted(
            i for i, tokens in reversed(list(enumerate(segments))) if fits(tokens, budget * 90 // 100)
        )
        optional = [u for u, unit in enumerate(self.units) if unit[3] == "normal"]

        def priority(u: int) -> float:
            # The largest given, a NaN passed over (as f64::max does): a unit
            # of NaNs alone ranks last.
            given = (self.info[m]["priority"] for m in range(self.units[u][0], self.units[u][1]))
            return max((p for p in given if not math.isnan(p)), default=-math.inf)

        def constraint(u: int) -> int:
            return 1 if self.units[u][4] & CONSTRAINT else 0

        for u in sorted(optional, key=lambda u: (-priority(u), -constraint(u), -u)):
            if fits(self.units[u][2], budget):
                units.append(u)
        kept = sorted(units)
        kinds = [self.units[u][3] for u in kept]
        fixed = [u for u, kind in zip(kept, kinds, strict=True) if kind in ("system", "pinned")]
        recent = [u for u, kind in zip(kept, kinds, strict=True) if kind == "normal"]
        current = [u for u, kind in zip(kept, kinds, strict=True) if kind == "current"]
        return fixed, recent, current, with_global, with_anchor, kept_memories, kept_segments


class _Backend:
    def __init__(self, encoding: str = "o200k_base", tagger: Tagger | None = None) -> None:
        self.tokenizer = CachedTokenizer(encoding)
        self.tagger = tagger or Tagger()

    def analyze(self, messages: list[dict[str, Any]], cap: int | None, find_tags: bool = True) -> Analysis:
        return Analysis(messages, self.tokenizer, self.tagger if find_tags else None, cap)

    def sanitize(
        self, messages: list[dict[str, Any]], provider: str
    ) -> tuple[list[dict[str, Any]], str | list[Any] | None, list[reference_sanitize.Change]]:
        result = reference_sanitize.sanitize(messages, provider)
        return result.messages, result.system, result.changes

    def lay_out(
        self, analysis: Analysis, items: Sequence[int | dict[str, Any]], provider: str
    ) -> tuple[
        list[dict[str, Any]],
        list[int | None],
        list[int],
        list[dict[str, Any]],
        str | list[Any] | None,
        list[reference_sanitize.Change],
        int | None,
    ]:
        laid_out, known, units = analysis.lay_out(items)
        final, system, changes = self.sanitize(laid_out, provider)
        unchanged = len(final) == len(laid_out) and all(map(operator.is_, final, laid_out))
        if unchanged and None not in known:
            # cast: None is not in known, so each count is an int.
            return laid_out, [], units, final, system, changes, sum(cast("list[int]", known))
        return laid_out, known, units, final, system, changes, None

    def system_message(self, text: str) -> tuple[dict[str, Any], int]:
        message = {"role": "system", "content": text}
        return message, self.count_message(message)

    def count_message(self, message: Mapping[str, Any]) -> int:
        # cast: count_message itself refuses a mapping that is not a dict (as the extension does).
        return self.tokenizer.count_message(cast("dict[str, Any]", message))

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return self.tokenizer.count_messages(messages)

    def count_joined(self, parts: list[str]) -> int | None:
        """The definition the extension's shortcut must equal: the joined text, counted whole."""
        return self.tokenizer.count(_selection.TEXT_SEPARATOR.join(parts))


@functools.cache
def _shared_backend(encoding: str) -> _Backend:
    """One backend per encoding, so repeated calls share the count cache (as
    the extension's tokenizers share theirs)."""
    return _Backend(encoding)


class ShapeHistory:
    def __init__(
        self,
        *,
        keep_last: int = 20,
        min_keep: int = 3,
        summary: str | Callable[[list[dict[str, Any]]], str] | None = None,
        provider: str = "openai",
        encoding: str = "o200k_base",
        tool_result_cap: int | None = 2000,
    ) -> None:
        self.keep_last = _selection.count(keep_last, "keep_last")
        self.min_keep = _selection.count(min_keep, "min_keep")
        self.summary = _selection.check_summary(summary)
        self.provider = _selection.check_provider(provider)
        self.cap = _selection.tool_result_cap(tool_result_cap)
        self.backend = _shared_backend(encoding)

    def select(
        self, messages: Sequence[dict[str, Any]], budget: Any, *, now: float | None = None
    ) -> Selection:
        _selection.check_now(now)
        return _selection.shape_history(
            self.backend,
            messages,
            budget,
            self.keep_last,
            self.min_keep,
            self.summary,
            self.provider,
            self.cap,
        )


def shape_history(
    messages: Sequence[dict[str, Any]],
    budget: Any,
    keep_last: int = 20,
    min_keep: int = 3,
    summary: str | Callable[[list[dict[str, Any]]], str] | None = None,
    *,
    provider: str = "openai",
    encoding: str = "o200k_base",
    tool_result_cap: int | None = 2000,
) -> Selection:
    return _selection.shape_history(
        _shared_backend(encoding), messages, budget, keep_last, min_keep, summary, provider, tool_result_cap
    )


class WeightedWindow:
    def __init__(
        self,
        *,
        system: float = 5.0,
        constraint: float = 3.0,
        evidence: float = 2.0,
        pulse: float = 1.5,
        log: float = 0.3,
        decay: float = 0.85,
        tag_decay: float = 0.999,
        max_anchors: int = 5,
        recent_turns: int = 3,
        provider: str = "openai",
        encoding: str = "o200k_base",
        tool_result_cap: int | None = 2000,
    ) -> None:
        self.weights = _selection.policy_weights(
            system=system,
            constraint=constraint,
            evidence=evidence,
            pulse=pulse,
            log=log,
            decay=decay,
            tag_decay=tag_decay,
        )
        self.max_anchors = _selection.count(max_anchors, "max_anchors")
        self.recent_turns = _selection.count(recent_turns, "recent_turns")
        self.provider = _selection.check_provider(provider)
        self.cap = _selection.tool_result_cap(tool_result_cap)
        self.backend = _Backend(encoding)

    def select(
        self, messages: Sequence[dict[str, Any]], budget: Any, *, now: float | None = None
    ) -> Selection:
        return _selection.weighted_window(
            self.backend,
            messages,
            budget,
            self.weights,
            self.max_anchors,
            self.recent_turns,
            now,
            self.provider,
            self.cap,
        )


class PriorityAssembly:
    def __init__(
        self,
        *,
        anchoring: bool = False,
        provider: str = "openai",
        encoding: str = "o200k_base",
        tool_result_cap: int | None = 2000,
    ) -> None:
        self.anchoring = _selection.check_flag(anchoring, "anchoring")
        self.provider = _selection.check_provider(provider)
        self.cap = _selection.tool_result_cap(tool_result_cap)
        self.backend = _Backend(encoding)

    def select(
        self,
        messages: Sequence[dict[str, Any]],
        budget: Any,
        *,
        now: float | None = None,
        current_input: Any = None,
        global_summary: str | None = None,
        segment_summaries: Sequence[str] = (),
        memories: Sequence[str] = (),
    ) -> Selection:
        _selection.check_now(now)
        return _selection.build_context(
            self.backend,
            messages,
            budget,
            current_input=current_input,
            global_summary=global_summary,
            segment_summaries=segment_summaries,
            memories=memories,
            anchoring=self.anchoring,
            provider=self.provider,
            cap=self.cap,
        )


def _put_cut(holder: dict[str, Any], part: int | None, text: str) -> None:
    """``holder``'s content made ``text`` (``part`` None), or its text part
    ``part`` copied with ``text`` in it, in a copy of the list."""
    if part is None:
        holder["content"] = text
        return
    parts = list(holder["content"])
    parts[part] = {**parts[part], "text": text}
    holder["content"] = parts
