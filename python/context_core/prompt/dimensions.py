"""The task block's three dimensions: Memory, Context and Prompt, tagged and kept
apart, each fitted to its share of a token budget.

* **Memory** (``<MEM>key: value</MEM>``): what is settled. A user's
  must/forbid statements (tagged ``constraint`` by :class:`~context_core.select.Tagger`)
  and the system's defaults, which are anchors of weight 5.0 (a user's
  constraints weigh 3.0); heavier first.
* **Context** (``<FILE path="...">``, ``<ERROR>``, ``<DOC source="...">``): the
  material of this task. Uploaded files and documents are Context, never
  Memory, whatever they say; a user's statement that is not a constraint is
  Context too (``<DOC source="user">``).
* **Prompt** (``<TASK>``, ``<OUTPUT_FORMAT>``, ``<CONSTRAINT>``): what to do now.

They render in that order, never mixed. The budget is split by the coupling
matrix: M:C:P = 0.40:0.35:0.25; M -0.05 for each
``<MEM>`` beyond 5 and -0.02 per point of the 0-10 task-complexity score
(floored at 0.05); C = 0.45 with more than 3 files or any error; P = 0.35 when
the task says must/forbid; normalised; shares rounded by largest remainder so
they sum to the budget exactly. Each dimension is then filled to its share by
exact token count, in priority order (Memory by weight; Context errors, then
files, then documents; Prompt the task, then constraints, then the output
format): an item that does not fit is cut (the task, files, documents, errors)
or left out whole (a memory, a constraint, an output format), and every cut
is reported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Literal

from context_core._core import Tagger, Tokenizer
from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.prompt.counting import TokenCounts, Truncation
from context_core.prompt.escape import code_fence, escape, escape_attr, escape_tags, one_line

__all__ = [
    "DIMENSIONS",
    "MARKER",
    "Allocation",
    "CouplingWeights",
    "Dimension",
    "DimensionBlock",
    "Dimensions",
    "Entry",
    "Source",
    "coupling_weights",
    "split_budget",
    "task_complexity",
]

Dimension = Literal["memory", "context", "prompt"]
DIMENSIONS: tuple[Dimension, ...] = ("memory", "context", "prompt")

Source = Literal["user", "system", "file", "doc", "error", "task", "output_format", "constraint"]
"""Where a piece of content came from; :meth:`Dimensions.add` routes by it."""

BASE_WEIGHTS = (0.40, 0.35, 0.25)
MEM_FREE = 5
MEM_STEP = 0.05
COMPLEXITY_STEP = 0.02
CONTEXT_RAISED = 0.45
PROMPT_RAISED = 0.35
MIN_WEIGHT = 0.05
SYSTEM_WEIGHT = 5.0
USER_WEIGHT = 3.0
MARKER = "…[truncated {dropped} tokens]"
MIN_KEPT = 8
"""A cut item keeps at least this many tokens of content (the marker is not
content), or is left out."""
_MARKER_END = re.compile(re.escape(MARKER).replace(re.escape("{dropped}"), r"\d+") + r"\Z")

# tag -> (dimension, fill priority, output rank, may be cut)
_TAGS: dict[str, tuple[Dimension, int, int, bool]] = {
    "MEM": ("memory", 0, 0, False),
    "ERROR": ("context", 0, 1, True),
    "FILE": ("context", 1, 0, True),
    "DOC": ("context", 2, 2, True),
    "TASK": ("prompt", 0, 0, True),
    "CONSTRAINT": ("prompt", 1, 2, False),
    "OUTPUT_FORMAT": ("prompt", 2, 1, False),
}
_ATTR = {"FILE": "path", "DOC": "source"}
_BLOCK_TAGS = frozenset({"FILE", "DOC", "ERROR"})


@dataclass(frozen=True)
class Entry:
    """One tagged item: its ``tag``, raw ``text``, ``label`` (a memory's key,
    a file's path, a document's source), ``weight`` (memories) and ``source``."""

    tag: str
    text: str
    label: str | None = None
    weight: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str):
            raise InvalidTypeError(f"an entry's tag must be a str, got {type(self.tag).__name__}")
        if self.tag not in _TAGS:
            raise InvalidInputError(f"unknown tag {self.tag!r}; known: {', '.join(_TAGS)}")
        if not isinstance(self.text, str):
            raise InvalidTypeError(f"an entry's text must be a str, got {type(self.text).__name__}")
        if self.label is not None and not isinstance(self.label, str):
            raise InvalidTypeError(f"an entry's label must be a str, got {type(self.label).__name__}")
        if self.tag in _ATTR and not self.label:
            raise InvalidInputError(f"a {self.tag} entry needs its {_ATTR[self.tag]}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not self.weight >= 0:
            raise InvalidInputError(f"an entry's weight must be a number >= 0, got {self.weight!r}")

    @property
    def dimension(self) -> Dimension:
        return _TAGS[self.tag][0]

    def describe(self) -> str:
        """The tag and its label, as reports name the item."""
        if self.tag in _ATTR:
            return f'{self.tag} {_ATTR[self.tag]}="{self.label}"'
        return f"{self.tag} {self.label}" if self.label else self.tag

    @cached_property
    def parts(self) -> tuple[str, str, str]:
        """``(opening, escaped content, closing)``; the closing ends the line.

        Files, documents and errors go in a code fence longer than any
        backtick run of theirs, shown as written (only tags escaped); a
        memory is one line; the Prompt tags' content starts on the tag's
        line, its later lines escaped."""
        tag = self.tag
        if tag in _BLOCK_TAGS:
            attr = f' {_ATTR[tag]}="{escape_attr(self.label or "")}"' if tag in _ATTR else ""
            body = self.text.rstrip("\r\n")
            fence = code_fence(body)
            return f"<{tag}{attr}>\n{fence}\n", escape_tags(body), f"\n{fence}\n</{tag}>\n"
        if tag == "MEM":
            key = f"{escape_tags(one_line(self.label))}: " if self.label else ""
            return f"<MEM>{key}", escape_tags(one_line(self.text)), "</MEM>\n"
        return f"<{tag}>", escape(self.text.strip("\r\n"), line_start=False), f"</{tag}>\n"

    def is_escaped(self, content: str) -> bool:
        """Whether ``content`` (a head of :attr:`parts`' content, cut) needs no
        more escaping: a cut can end a text inside what becomes a tag
        (``<MEMORY>`` cut to ``<MEM``)."""
        if self.tag in _BLOCK_TAGS or self.tag == "MEM":
            return escape_tags(content) == content
        return escape(content, line_start=False) == content

    @cached_property
    def rendered(self) -> str:
        opening, body, closing = self.parts
        return opening + body + closing


@dataclass(frozen=True)
class Allocation:
    """Tokens per dimension."""

    memory: int
    context: int
    prompt: int

    @property
    def total(self) -> int:
        return self.memory + self.context + self.prompt

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter((self.memory, self.context, self.prompt))


@dataclass(frozen=True)
class CouplingWeights:
    """The coupling matrix's weights, before normalisation, and why."""

    memory: float
    context: float
    prompt: float
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (value >= 0 and value < math.inf)
            ):
                raise InvalidInputError(f"weight {name} must be a finite number >= 0, got {value!r}")
        if self.memory + self.context + self.prompt <= 0:
            raise InvalidInputError("the weights sum to 0")

    def normalized(self) -> tuple[float, float, float]:
        """The shares, summing to 1."""
        total = self.memory + self.context + self.prompt
        return (self.memory / total, self.context / total, self.prompt / total)

    def split(self, budget: int) -> Allocation:
        """``budget`` split by these weights (:func:`split_budget`)."""
        return split_budget(budget, self)


def split_budget(budget: int, weights: CouplingWeights) -> Allocation:
    """``budget * w / sum(w)`` for each dimension, rounded down, with the
    tokens left by rounding given to the largest remainders (ties: memory,
    context, prompt), so the shares sum to ``budget`` exactly. Weights are
    read as the decimals they were written as (0.35, not 0.34999...)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidInputError(f"budget must be an int >= 0, got {budget!r}")
    if not isinstance(weights, CouplingWeights):
        raise InvalidTypeError(f"weights must be CouplingWeights, got {type(weights).__name__}")
    exact = [Fraction(getattr(weights, name)).limit_denominator(10**9) for name in DIMENSIONS]
    total = sum(exact)
    quotas = [budget * w / total for w in exact]
    shares = [math.floor(q) for q in quotas]
    order = sorted(range(3), key=lambda i: (-(quotas[i] - shares[i]), i))
    for i in order[: budget - sum(shares)]:
        shares[i] += 1
    return Allocation(*shares)


def task_complexity(task_tokens: int, files: int, error_lines: int) -> float:
    """The 0-10 task-complexity score (instruction length, files,
    error log lines): up to 4 points for the task's length (one per 50
    tokens), up to 3 for files (one each), up to 3 for error lines (one per
    10), capped at 10 and rounded to 2 decimals."""
    for name, value in (("task_tokens", task_tokens), ("files", files), ("error_lines", error_lines)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"{name} must be an int >= 0, got {value!r}")
    score = min(4.0, task_tokens / 50) + min(3.0, float(files)) + min(3.0, error_lines / 10)
    return round(min(10.0, score), 2)


def coupling_weights(
    memories: int, files: int, has_error: bool, task_forbids: bool, complexity: float = 0.0
) -> CouplingWeights:
    """The coupling matrix for a task block with
    ``memories`` ``<MEM>`` items and ``files`` ``<FILE>`` items."""
    for name, value in (("memories", memories), ("files", files)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"{name} must be an int >= 0, got {value!r}")
    for name, flag in (("has_error", has_error), ("task_forbids", task_forbids)):
        if not isinstance(flag, bool):
            raise InvalidTypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if isinstance(complexity, bool) or not isinstance(complexity, (int, float)) or not 0 <= complexity <= 10:
        raise InvalidInputError(f"complexity must be a number from 0 to 10, got {complexity!r}")
    memory, context, prompt = BASE_WEIGHTS
    reasons = []
    if memories > MEM_FREE:
        memory -= MEM_STEP * (memories - MEM_FREE)
        reasons.append(f"memory -{MEM_STEP * (memories - MEM_FREE):.2f}: {memories} <MEM> (> {MEM_FREE})")
    if complexity:
        memory -= COMPLEXITY_STEP * complexity
        reasons.append(f"memory -{COMPLEXITY_STEP * complexity:.2f}: complexity {complexity:g}")
    if memory < MIN_WEIGHT:
        memory = MIN_WEIGHT
        reasons.append(f"memory floored at {MIN_WEIGHT}")
    if files > 3 or has_error:
        context = CONTEXT_RAISED
        reasons.append(f"context {CONTEXT_RAISED}: " + ("an error" if has_error else f"{files} files (> 3)"))
    if task_forbids:
        prompt = PROMPT_RAISED
        reasons.append(f"prompt {PROMPT_RAISED}: the task says must/forbid")
    return CouplingWeights(round(memory, 10), context, prompt, tuple(reasons))


@dataclass(frozen=True)
class DimensionBlock:
    """A rendered task block: Memory, Context and Prompt items, in that order."""

    text: str
    """The tagged items, one after another, each ending its line."""
    tokens: int
    """Exact tokens of ``text`` (never more than the budget)."""
    budget: int
    complexity: float
    weights: CouplingWeights
    allocation: Allocation
    """Each dimension's share of the budget."""
    used: Allocation
    """Each dimension's exact tokens as rendered (at most its share)."""
    truncated: tuple[Truncation, ...] = field(default=())
    """Items cut or left out to fit, by dimension, in fill order."""


class Dimensions:
    """Collects a task's content by source, then renders the task block::

    dims = Dimensions()
    dims.add("Field names must use snake_case", "user")   # <MEM>constraint: ...</MEM>
    dims.add(source_code, "file", label="src/app.py")     # <FILE path="src/app.py">
    dims.add("Add an idempotency check", "task")          # <TASK>...</TASK>
    block = dims.render(4000, tokenizer)                  # block.text, .used, .truncated
    """

    def __init__(self, entries: Iterable[Entry] = (), *, tagger: Tagger | None = None) -> None:
        if tagger is not None and not isinstance(tagger, Tagger):
            raise InvalidTypeError(f"tagger must be a Tagger, got {type(tagger).__name__}")
        if not isinstance(entries, Iterable):
            raise InvalidTypeError(f"entries must be a list of Entry, got {type(entries).__name__}")
        self._tagger = tagger or Tagger()
        self._entries: list[Entry] = []
        for entry in entries:
            self.append(entry)

    def append(self, entry: Entry) -> Entry:
        """Add an item as it is (no routing)."""
        if not isinstance(entry, Entry):
            raise InvalidTypeError(f"expected an Entry, got {type(entry).__name__}")
        self._entries.append(entry)
        return entry

    @property
    def tagger(self) -> Tagger:
        """The tagger that decides what says must/forbid."""
        return self._tagger

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    def is_constraint(self, text: str) -> bool:
        """Whether ``text`` says must/forbid (the tagger's ``constraint`` tag)."""
        return "constraint" in self._tagger.tag(text)

    def add(self, text: str, source: Source, *, label: str | None = None) -> Entry:
        """Route ``text`` by where it came from:

        * ``"user"``: a must/forbid statement becomes ``<MEM>`` (key ``label``,
          default ``constraint``; weight 3.0); anything else ``<DOC source="user">``.
        * ``"system"``: a default, ``<MEM>`` anchor of weight 5.0 (key ``label``,
          default ``default``).
        * ``"file"``, ``"doc"``: ``<FILE path=label>``, ``<DOC source=label>``;
          Context whatever they say.
        * ``"error"``: ``<ERROR>``.
        * ``"task"``, ``"output_format"``, ``"constraint"``: the Prompt tags.
        """
        if not isinstance(text, str):
            raise InvalidTypeError(f"text must be a str, got {type(text).__name__}")
        if not isinstance(source, str):
            raise InvalidTypeError(f"source must be a str, got {type(source).__name__}")
        if label is not None and not isinstance(label, str):
            raise InvalidTypeError(f"label must be a str, got {type(label).__name__}")
        if source == "user":
            if self.is_constraint(text):
                return self.append(Entry("MEM", text, label or "constraint", USER_WEIGHT, "user"))
            return self.append(Entry("DOC", text, label or "user", 1.0, "user"))
        if source == "system":
            return self.append(Entry("MEM", text, label or "default", SYSTEM_WEIGHT, "system"))
        tag = {
            "file": "FILE",
            "doc": "DOC",
            "error": "ERROR",
            "task": "TASK",
            "output_format": "OUTPUT_FORMAT",
            "constraint": "CONSTRAINT",
        }.get(source)
        if tag is None:
            raise InvalidInputError(f"unknown source {source!r}; known: {', '.join(Source.__args__)}")  # type: ignore[attr-defined]
        if tag in _ATTR and not label:
            raise InvalidInputError(f"a {source} needs a label (its {_ATTR[tag]})")
        return self.append(Entry(tag, text, label if tag in _ATTR else None, 1.0, source))

    def _count(self, tag: str) -> int:
        return sum(1 for entry in self._entries if entry.tag == tag)

    def complexity(self, tokenizer: Tokenizer | TokenCounts | None = None) -> float:
        """:func:`task_complexity` of the items: the task's tokens, the files,
        the lines of the errors."""
        count = tokenizer if isinstance(tokenizer, TokenCounts) else TokenCounts(tokenizer or Tokenizer())
        task_tokens = sum(count(e.text) for e in self._entries if e.tag == "TASK")
        error_lines = sum(len(e.text.splitlines()) for e in self._entries if e.tag == "ERROR")
        return task_complexity(task_tokens, self._count("FILE"), error_lines)

    def weights(self, complexity: float = 0.0) -> CouplingWeights:
        """:func:`coupling_weights` of the items."""
        task_forbids = any(self.is_constraint(e.text) for e in self._entries if e.tag == "TASK")
        return coupling_weights(
            self._count("MEM"), self._count("FILE"), self._count("ERROR") > 0, task_forbids, complexity
        )

    def render(
        self,
        budget: int,
        tokenizer: Tokenizer | TokenCounts | None = None,
        *,
        complexity: float | None = None,
        weights: CouplingWeights | None = None,
        redistribute: bool = False,
    ) -> DimensionBlock:
        """The task block within ``budget`` tokens, counted with ``tokenizer``
        (o200k_base by default). ``complexity`` (0-10) defaults to
        :meth:`complexity`; ``weights`` to :meth:`weights`.

        Each dimension is held to its share. With ``redistribute=True`` the
        tokens a dimension leaves unused go, in a second pass, to the
        dimensions that had to cut something (Memory, Context, Prompt, in that
        order), so a dimension's ``used`` may pass its ``allocation``; the
        block never passes ``budget``."""
        if isinstance(tokenizer, TokenCounts):
            counts = tokenizer
        else:
            if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
                raise InvalidTypeError(f"tokenizer must be a Tokenizer, got {type(tokenizer).__name__}")
            counts = TokenCounts(tokenizer or Tokenizer())
        score = self.complexity(counts) if complexity is None else complexity
        if weights is None:
            weights = self.weights(score)
        elif not isinstance(weights, CouplingWeights):
            raise InvalidTypeError(f"weights must be CouplingWeights, got {type(weights).__name__}")
        allocation = split_budget(budget, weights)
        texts, used, cuts = [], [], []
        groups = [[e for e in self._entries if e.dimension == dimension] for dimension in DIMENSIONS]
        for dimension, entries, share in zip(DIMENSIONS, groups, allocation, strict=True):
            found: list[Truncation] = []
            text, tokens = _fill(entries, dimension, share, counts, found)
            texts.append(text)
            used.append(tokens)
            cuts.append(found)
        if redistribute:
            spare = budget - sum(used)
            for i, dimension in enumerate(DIMENSIONS):
                if spare <= 0 or not cuts[i]:
                    continue
                found = []
                text, tokens = _fill(groups[i], dimension, used[i] + spare, counts, found)
                spare -= tokens - used[i]
                texts[i], used[i], cuts[i] = text, tokens, found
        truncated = [cut for found in cuts for cut in found]
        text = "".join(texts)
        return DimensionBlock(
            text=text,
            tokens=sum(used) if counts.additive else counts(text),
            budget=budget,
            complexity=score,
            weights=weights,
            allocation=allocation,
            used=Allocation(*used),
            truncated=tuple(truncated),
        )


def _fill(
    entries: list[Entry], dimension: str, share: int, counts: TokenCounts, truncated: list[Truncation]
) -> tuple[str, int]:
    """The dimension's items that fit ``share``, in output order, and their tokens."""
    layer = f"task.{dimension}"
    order = sorted(range(len(entries)), key=lambda i: (-entries[i].weight, _TAGS[entries[i].tag][1], i))
    rank = {index: position for position, index in enumerate(order)}
    kept: dict[int, tuple[str, int]] = {}  # index -> (rendered, tokens)
    cuts: dict[int, Truncation] = {}
    left = share
    for i in order:
        entry = entries[i]
        n = counts(entry.rendered)
        if n <= left:
            kept[i] = (entry.rendered, n)
            left -= n
            continue
        head = ""
        if _TAGS[entry.tag][3]:  # an item that may be cut
            opening, body, closing = entry.parts
            head = counts.truncate(body, left, opening, closing, MARKER, entry.is_escaped)
            content = _MARKER_END.sub("", head, count=1)  # the marker, when it fit, is not content
            if not content or counts(content) < min(MIN_KEPT, counts(body)):
                head = ""
        if head:
            rendered = entry.parts[0] + head + entry.parts[2]
            m = counts(rendered)
            kept[i] = (rendered, m)
            left -= m
            cuts[i] = Truncation(layer, entry.describe(), n, m)
        else:
            cuts[i] = Truncation(layer, entry.describe(), n, 0)
    ordered = sorted(kept, key=lambda i: (_TAGS[entries[i].tag][2], rank[i]))
    text = "".join(kept[i][0] for i in ordered)
    if counts.additive:
        total = sum(kept[i][1] for i in ordered)
    else:
        total = counts(text)
        while total > share:  # the pieces' counts need not add up here: drop the least important
            worst = max(ordered, key=rank.__getitem__)
            ordered.remove(worst)
            cuts[worst] = Truncation(layer, entries[worst].describe(), counts(entries[worst].rendered), 0)
            text = "".join(kept[i][0] for i in ordered)
            total = counts(text)
    truncated.extend(cuts[i] for i in sorted(cuts, key=rank.__getitem__))
    return text, total
