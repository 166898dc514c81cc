"""``PromptBuilder``: one agent session's prompt, assembled each turn from
layers by lifetime.

=================  ==========================================  =================
layer              what                                        where
=================  ==========================================  =================
resident           identity, conventions, safety, tools,       system part
                   the skills index, the memory guide
on-demand          skill bodies, when a turn asks for one by   volatile part
                   name or its task names one
runtime-injected   date and time, working directory, channel,  volatile part
                   user preferences
memory             MEMORY.md (through MemoryFiles)             volatile part
never-enter        rules enforced by code (hooks, checks)      nowhere
=================  ==========================================  =================

Session facts form the stable part, between the two. The system part is
rendered, counted and hashed once, when the builder is made; the stable part
once a session; a turn renders the volatile part only, and counts only the
sections whose text changed since they were last counted (usually just the
date line), so a warm turn costs a few microseconds.

**Stable part changes.** Passing other session facts to :meth:`PromptBuilder.build`
replaces the stable part; the provider's cached prefix is then lost, so the
turn's :attr:`PromptParts.stable_changed` is true and a
:class:`~context_core.PromptCacheWarning` says what happened. Start a new
session with :meth:`PromptBuilder.new_session` to change it without a warning.

**Never-enter rules** are texts the builder keeps out of the prompt (the code
enforces them, the model need not read them). A rule is a substring of the
text as given (before escaping), both read folded
(:func:`~context_core.prompt.escape.caseless`: format characters removed,
NFKC, caseless, each run of white space, line breaks included, one space),
so a zero-width space, a soft hyphen, full-width letters, a no-break space,
a doubled space or a line break does not hide a restated rule. The
developer's own text refuses them: a system part layer (identity,
conventions, safety, the skills index, the memory guide) or a tool (any key
or string in its schema) that states one raises
:class:`~context_core.InvalidInputError` when the builder is made. Other
text drops them: in the stable part (session facts, session context) and
the per-turn layers (runtime values, memory, skill bodies, instructions,
task items), every line a restatement touches (all the lines it spans) is
left out, and each that holds text is listed, as given, in
:attr:`PromptParts.kept_out` (the stable part's on every turn of the
session); a session-context section whose title a restatement touches
(alone, or running on into the body) is left out whole, the lines it
touches listed.

A builder serves one session, one turn at a time (it is not thread-safe).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Union

from context_core._core import Tokenizer
from context_core.errors import InvalidInputError, InvalidTypeError, PromptCacheWarning
from context_core.memory.facts import Fact, parse_line
from context_core.prompt.counting import TokenCounts, Truncation
from context_core.prompt.dimensions import DimensionBlock, Dimensions, Entry
from context_core.prompt.escape import LINE_BREAKS, escape, escape_tags, one_line
from context_core.prompt.memory_layer import MemoryLayer, MemorySource
from context_core.prompt.never_enter import Rules, drop
from context_core.prompt.parts import PromptBreakdown, PromptParts
from context_core.prompt.prefix import Prefix, SystemPart
from context_core.prompt.sections import Pairs, check_text, format_time, key_values, lines, pairs, piece
from context_core.prompt.skills import Skill, SkillRegistry
from context_core.types import ToolLike

__all__ = ["DEFAULT_MEMORY_GUIDE", "TITLES", "PromptBuilder"]

TITLES = {
    "conventions": "Conventions",
    "safety": "Safety",
    "skills_index": "Skills",
    "memory_guide": "Memory Guide",
    "session_facts": "Session Facts",
    "runtime": "Context",
    "memory": "Memory",
    "skills": "Loaded Skills",
    "instructions": "Instructions",
    "task": "Task",
}
"""Section titles by layer (Session Facts, Context, Memory, Instructions)."""

SKILLS_INTRO = (
    "Skills available on request. Each line is a skill's name and what it is for;"
    " ask for a skill by name and its instructions are loaded under ## Loaded Skills."
)

DEFAULT_MEMORY_GUIDE = (
    "The ## Memory section holds what earlier sessions learned (MEMORY.md), one fact a line:"
    " `- [kind] text` or `- [kind: key] text`. Trust it over assumptions; of two facts with"
    " the same key, the later one holds. A `[more]` line names a file of further facts that"
    " is not loaded."
)

Text = Union[str, Sequence[str]]
_CACHE_LIMIT = 1024


def _optional_str(value: Any, what: str) -> str | None:
    """``value`` as a str (a path-like as its path), or ``None``."""
    if value is None or isinstance(value, str):
        return value
    if what == "cwd" and isinstance(value, os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str):
            return path
    raise InvalidTypeError(f"{what} must be a str, got {type(value).__name__}")


def _strings(value: Any) -> Iterable[str]:
    """Every str of a JSON value, its keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _newest_values(text: str) -> str:
    """MEMORY.md's ``text`` with one line for each fact's key: its newest
    value, in the place of its first (as consolidation would keep it). A
    correction appended at the end then reaches the prompt in the old
    value's place, where a cap that keeps the first lines sent the stale
    value beside it, or instead of it."""
    lines = text.splitlines()
    keys = []
    for line in lines:
        fact = parse_line(line)
        keys.append(fact.identity if isinstance(fact, Fact) else None)
    newest = {key: i for i, key in enumerate(keys) if key}
    if len(newest) == sum(1 for key in keys if key):
        return text  # no key given twice
    out, placed = [], set()
    for line, key in zip(lines, keys, strict=True):
        if not key:
            out.append(line)
        elif key not in placed:
            out.append(lines[newest[key]])
            placed.add(key)
    return "\n".join(out)


class PromptBuilder:
    """Builds each turn's :class:`PromptParts` for one session.

    ``identity``, ``conventions``, ``safety`` (text, or lists of lines),
    ``tools`` (schemas in OpenAI's, Anthropic's or the bare function form, each
    nested at most :data:`~context_core.prompt.canonical.MAX_DEPTH` levels deep),
    ``skills`` (their index) and the memory guide make the system part.
    ``memory`` (a :class:`~context_core.MemoryFiles` or a memory root's path)
    is read each turn, re-read only when MEMORY.md changed, and cut to
    ``memory_max_tokens`` by whole lines (reported). ``session_facts`` (a
    mapping, rendered in sorted key order, or ``(key, value)`` pairs) and
    ``session_context`` (``(title, text)`` sections) make the stable part.
    ``never_enter`` lists the rules code enforces (kept out of the prompt;
    each must hold text once folded).
    Counts use ``tokenizer`` (o200k_base by default).
    """

    def __init__(
        self,
        identity: str = "",
        *,
        conventions: Text = (),
        safety: Text = (),
        tools: Sequence[ToolLike] = (),
        skills: SkillRegistry | Iterable[Skill] = (),
        memory: MemorySource | None = None,
        memory_guide: str | None = None,
        memory_max_tokens: int | None = None,
        never_enter: Iterable[str] = (),
        session_facts: Pairs | None = None,
        session_context: Pairs | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            raise InvalidTypeError(f"tokenizer must be a Tokenizer, got {type(tokenizer).__name__}")
        if not isinstance(identity, str):
            raise InvalidTypeError(f"identity must be a str, got {type(identity).__name__}")
        if memory_max_tokens is not None and (
            isinstance(memory_max_tokens, bool)
            or not isinstance(memory_max_tokens, int)
            or memory_max_tokens < 0
        ):
            raise InvalidInputError(f"memory_max_tokens must be an int >= 0, got {memory_max_tokens!r}")
        if memory_guide is not None and not isinstance(memory_guide, str):
            raise InvalidTypeError(f"memory_guide must be a str, got {type(memory_guide).__name__}")
        if isinstance(never_enter, str):
            never_enter = (never_enter,)
        elif isinstance(never_enter, (bytes, Mapping)) or not isinstance(never_enter, Iterable):
            raise InvalidTypeError(f"never_enter must be a list of str, got {type(never_enter).__name__}")
        rules = Rules(never_enter)
        if isinstance(tools, (str, Mapping)) or not isinstance(tools, Sequence):
            raise InvalidTypeError(f"tools must be a list of tool schemas, got {type(tools).__name__}")
        named: dict[str, int] = {}
        for index, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise InvalidTypeError(f"tools[{index}]: expected a dict, got {type(tool).__name__}")
            name = _tool_name(tool)
            if name is not None and named.setdefault(name, index) != index:
                raise InvalidInputError(
                    f"tools[{index}]: {name!r} is the name of tools[{named[name]}] too;"
                    " the APIs refuse two tools of one name"
                )
        self.tokenizer = tokenizer or Tokenizer()
        self.never_enter = rules.given
        self._rules = rules
        self.skills = skills if isinstance(skills, SkillRegistry) else SkillRegistry(skills)
        self.memory = None if memory is None else MemoryLayer(memory)
        self.memory_max_tokens = memory_max_tokens
        self._counts = TokenCounts(self.tokenizer)
        self._pieces: dict[tuple[str, str, bool], tuple[str, int]] = {}
        self._memory_cache: dict[str, tuple[str, tuple[Truncation, ...], tuple[str, ...]]] = {}
        self._texts: dict[Any, tuple[str, tuple[str, ...]]] = {}

        sections: list[tuple[str, str]] = []
        if identity.strip():
            sections.append(("identity", identity.strip()))
        for layer, value in (("conventions", conventions), ("safety", safety)):
            text = lines(value, layer)
            if text.strip():
                sections.append((layer, text))
        if len(self.skills):
            sections.append(("skills_index", f"{SKILLS_INTRO}\n{self.skills.index()}"))
        guide = DEFAULT_MEMORY_GUIDE if memory_guide is None and memory is not None else memory_guide
        if guide:
            sections.append(("memory_guide", guide.strip("\n")))
        for layer, text in sections:
            check_text(text, f"the {layer} layer")
            self._refuse_rules(text, f"the {layer} layer")
        system_pieces = [
            piece(TITLES.get(layer, ""), text, i == len(sections) - 1)
            for i, (layer, text) in enumerate(sections)
        ]
        system_counts = self._counts.pieces(system_pieces)
        self._system = SystemPart("".join(system_pieces), tools, self.tokenizer, sum(system_counts))
        for index, schema in enumerate(self._system.tools):
            for text in _strings(schema):
                check_text(text, f"tools[{index}]")
                self._refuse_rules(text, f"tools[{index}]")
        self._system_layers = {"tools": self._system.tools_tokens} if self._system.tools else {}
        self._system_layers.update(zip((layer for layer, _ in sections), system_counts, strict=True))
        self._stable_key: Any = None
        self._prefix: Prefix
        self._stable_layers: dict[str, int]
        self._stable_out: tuple[str, ...]
        self._set_stable(session_facts, session_context)

    def _refuse_rules(self, text: str, where: str) -> None:
        rule = self._rules.first(text)
        if rule is not None:
            raise InvalidInputError(
                f"the never-enter rule {rule!r} appears in {where}: rules enforced by code stay out"
                " of the prompt"
            )

    # -- the stable part ---------------------------------------------------------

    def _set_stable(self, facts: Pairs | None, context: Pairs | None) -> bool:
        """Render the stable part; whether it changed (within the session)."""
        fact_pairs = pairs(facts, "session_facts")
        context_pairs = pairs(context, "session_context")
        key = (fact_pairs, context_pairs)
        if key == self._stable_key:
            return False
        kept_out: list[str] = []
        sections = []
        if fact_pairs:
            body = self._clean(key_values(fact_pairs), kept_out)
            if body:
                sections.append(("session_facts", TITLES["session_facts"], body))
        for title, text in context_pairs:
            heading = one_line(title).strip()
            if not heading:
                raise InvalidInputError("session_context: each section needs a title")
            given = lines(text, "session_context")
            # The title is read with its body, as the section renders: a
            # restatement may run from one into the other.
            section, out = self._rules.lines_out(f"{heading}\n{given}")
            if not section:
                body = escape(given)
            elif out[0]:  # the section goes whole: its body would join the one before
                drop(section, out, kept_out)
                continue
            else:
                body = escape(drop(section[1:], out[1:], kept_out))
            if body:
                sections.append(("session_context", escape_tags(heading), body))
        pieces = [piece(title, text, i == len(sections) - 1) for i, (_, title, text) in enumerate(sections)]
        counts = self._counts.pieces(pieces)
        stable = "".join(pieces)
        layers: dict[str, int] = {}
        for (layer, _, _), tokens in zip(sections, counts, strict=True):
            layers[layer] = layers.get(layer, 0) + tokens
        previous = None if self._stable_key is None else self._prefix.stable
        self._stable_key = key
        self._stable_layers = layers
        self._stable_out = tuple(kept_out)
        if stable != previous:
            self._prefix = Prefix(self._system, stable, sum(counts))
        return previous is not None and stable != previous

    def new_session(
        self, *, session_facts: Pairs | None = None, session_context: Pairs | None = None
    ) -> None:
        """Start a new session: set the stable part (``None``: nothing) without
        reporting a change."""
        self._stable_key = None
        self._set_stable(session_facts, session_context)

    def prefix_hash(self) -> str:
        """The current cached prefix's hash (see :meth:`PromptParts.prefix_hash`)."""
        return self._prefix.hash

    @property
    def system(self) -> str:
        """The system part's text."""
        return self._system.text

    @property
    def stable(self) -> str:
        """The current stable part's text."""
        return self._prefix.stable

    # -- per-turn layers ---------------------------------------------------------

    def _keep_out(self, text: str, kept_out: list[str]) -> str:
        """``text`` (as given, not escaped) without the lines a restated
        never-enter rule touches; those lines are added to ``kept_out``."""
        return self._rules.keep_out(text, kept_out)

    def _clean(self, text: str, kept_out: list[str]) -> str:
        """``text`` as given without the lines that restate a rule, escaped."""
        return escape(self._rules.keep_out(text, kept_out))

    def _text(self, key: Any, make: Callable[[list[str]], str]) -> tuple[str, tuple[str, ...]]:
        """A layer's escaped body by its inputs, and the lines kept out
        (``make`` adds them), cached."""
        hit = self._texts.get(key)
        if hit is None:
            kept_out: list[str] = []
            body = make(kept_out)
            hit = (body, tuple(kept_out))
            if len(self._texts) >= _CACHE_LIMIT:
                self._texts.clear()
            self._texts[key] = hit
        return hit

    def _memory(self, text: str) -> tuple[str, tuple[Truncation, ...], tuple[str, ...]]:
        hit = self._memory_cache.get(text)
        if hit is not None:
            return hit
        kept_out: list[str] = []
        body = _newest_values(self._keep_out(text.strip(LINE_BREAKS), kept_out))
        truncated: tuple[Truncation, ...] = ()
        cap = self.memory_max_tokens
        if cap is not None and body and self._counts(escape(body)) > cap:
            before = self._counts(escape(body))
            body = "\n".join(self._lines_within(body.splitlines(), cap))
            truncated = (
                Truncation("memory", "MEMORY.md", before, self._counts(escape(body)) if body else 0),
            )
        hit = (escape(body), truncated, tuple(kept_out))
        if len(self._memory_cache) >= 64:
            self._memory_cache.clear()
        self._memory_cache[text] = hit
        return hit

    def _lines_within(self, lines: list[str], cap: int) -> list[str]:
        """The first of ``lines`` that fit in ``cap`` tokens together, in
        order; a line too long for what is left is passed over, not the end
        of the memory (one long hand-written line hid every fact after it)."""
        kept: list[str] = []
        used = 0
        for line in lines:
            tokens = self._counts(escape(line)) + (1 if kept else 0)  # its line break
            if used + tokens <= cap:
                kept.append(line)
                used += tokens
        # Counted line by line; the joined text decides (a merge across a
        # line break could count otherwise): the last lines go until it fits.
        while kept and self._counts(escape("\n".join(kept))) > cap:
            kept.pop()
        return kept

    def _runtime(
        self,
        now: datetime | str | None,
        cwd: str | None,
        channel: str | None,
        preferences: Pairs | None,
        context: Pairs | None,
    ) -> tuple[str, tuple[str, ...]]:
        extra = pairs(context, "context")
        prefs = pairs(preferences, "preferences")

        def make(kept_out: list[str]) -> str:
            out = []
            if cwd:
                out.append(f"Working directory: {one_line(cwd)}")
            if channel:
                out.append(f"Channel: {one_line(channel)}")
            for key, value in extra:
                out.append(f"{one_line(key)}: {one_line(value)}")
            if prefs:
                out.append("User preferences:")
                out.extend(f"- {one_line(key)}: {one_line(value)}" for key, value in prefs)
            return self._clean("\n".join(out), kept_out)

        rest, kept_out = self._text(("runtime", cwd, channel, prefs, extra), make)
        if now == "":
            return rest, kept_out
        moment = format_time(datetime.now().astimezone() if now is None else now)
        date = f"Current date: {one_line(moment)}"
        if self._rules and self._rules.first(date) is not None:
            return rest, (*kept_out, date)
        date = escape(date)
        return (f"{date}\n{rest}" if rest else date), kept_out

    def _skill_bodies(self, names: Sequence[str], task: str | None) -> tuple[list[str], str, tuple[str, ...]]:
        chosen = self.skills.select(names, task)
        if not chosen:
            return [], "", ()
        key = ("skills", tuple(skill.name for skill in chosen))
        body, kept_out = self._text(
            key,
            lambda kept_out: "\n\n".join(
                f"### {skill.name}\n{self._clean(skill.body.strip(LINE_BREAKS), kept_out)}"
                for skill in chosen
            ),
        )
        return [skill.name for skill in chosen], body, kept_out

    def _task(
        self, dimensions: Dimensions | None, budget: int | None
    ) -> tuple[DimensionBlock | None, tuple[str, ...]]:
        if dimensions is None:
            return None, ()
        if not isinstance(dimensions, Dimensions):
            raise InvalidTypeError(f"dimensions must be a Dimensions, got {type(dimensions).__name__}")
        if budget is None:
            raise InvalidInputError("a task block needs task_budget (its tokens)")
        kept_out: list[str] = []
        entries = []
        for entry in dimensions.entries:
            text = self._keep_out(entry.text, kept_out)
            label = entry.label
            if label is not None and self._keep_out(label, kept_out) != label:
                continue
            if text is entry.text:
                entries.append(entry)
            elif text.strip():
                entries.append(Entry(entry.tag, text, entry.label, entry.weight, entry.source))
        block = Dimensions(entries, tagger=dimensions.tagger).render(budget, self._counts)
        return block, tuple(kept_out)

    # -- a turn ------------------------------------------------------------------

    def tools_for(self, provider: Literal["openai", "anthropic"]) -> list[dict[str, Any]]:
        """The tool schemas in ``provider``'s form, each converted once and
        kept; :class:`~context_core.InvalidInputError` for one that has no
        such form (an OpenAI custom tool for Anthropic, an Anthropic server
        tool for OpenAI)."""
        return self._system.anthropic_tools if provider == "anthropic" else self._system.openai_tools

    def build(
        self,
        *,
        now: datetime | str | None = None,
        cwd: str | None = None,
        channel: str | None = None,
        preferences: Pairs | None = None,
        context: Pairs | None = None,
        memory: str | None = None,
        instructions: Text = (),
        task: str | None = None,
        skills: Sequence[str] = (),
        dimensions: Dimensions | None = None,
        task_budget: int | None = None,
        session_facts: Pairs | None = None,
        session_context: Pairs | None = None,
    ) -> PromptParts:
        """This turn's parts.

        Runtime layer (``## Context``): ``now`` (a datetime, rendered to the
        minute with its zone; a str as it is; ``None``: the current local
        time; ``""``: no date line), ``cwd``, ``channel``, ``context`` (more
        ``Key: value`` lines), ``preferences`` (the user's). Memory layer
        (``## Memory``): MEMORY.md, or ``memory`` given as text. On-demand
        layer (``## Loaded Skills``): the skills named in ``skills`` and those
        ``task`` names. ``instructions`` (``## Instructions``): text or lines.
        ``task`` (``## Task``): the task as given, after the instructions;
        or ``dimensions``, the task block, rendered within ``task_budget``
        tokens in its place (``task`` then only picks skills). To pick skills
        by a text without showing it, pass
        ``skills=[s.name for s in builder.skills.match(text)]``. ``session_facts``, ``session_context``: new
        values for the stable part (a change is reported; ``None`` keeps the
        current value).
        """
        changed = False
        if session_facts is not None or session_context is not None:
            facts, context_ = self._stable_key
            changed = self._set_stable(
                facts if session_facts is None else session_facts,
                context_ if session_context is None else session_context,
            )
            if changed:
                warnings.warn(
                    "prompt cache: the stable part changed within the session, so the provider's"
                    " cached prefix is lost for this request (use new_session() for a new session)",
                    PromptCacheWarning,
                    stacklevel=2,
                )
        kept_out: list[str] = list(self._stable_out)
        truncated: list[Truncation] = []
        sections: list[tuple[str, str]] = []

        runtime, out = self._runtime(
            now, _optional_str(cwd, "cwd"), _optional_str(channel, "channel"), preferences, context
        )
        kept_out.extend(out)
        if runtime:
            sections.append(("runtime", runtime))

        if memory is None and self.memory is not None:
            memory = self.memory.read()
        elif memory is not None and not isinstance(memory, str):
            raise InvalidTypeError(f"memory must be a str, got {type(memory).__name__}")
        if memory:
            body, cut, out = self._memory(memory)
            truncated.extend(cut)
            kept_out.extend(out)
            if body:
                sections.append(("memory", body))

        if task is not None and not isinstance(task, str):
            raise InvalidTypeError(f"task must be a str, got {type(task).__name__}")
        loaded, body, out = self._skill_bodies(skills, task)
        kept_out.extend(out)
        if body:
            sections.append(("skills", body))

        text = lines(instructions, "instructions")
        if text:
            body, out = self._text(("instructions", text), lambda kept_out: self._clean(text, kept_out))
            kept_out.extend(out)
            if body:
                sections.append(("instructions", body))

        block, out = self._task(dimensions, task_budget)
        kept_out.extend(out)
        if block is not None:
            truncated.extend(block.truncated)
            if block.text:
                sections.append(("task", block.text))
        elif task and task.strip(LINE_BREAKS):
            # The task is shown as it is named: it picks the skills above, and
            # the model sees it under ## Task (a task block stands for it).
            stated = task.strip(LINE_BREAKS)
            body, out = self._text(("task", stated), lambda kept_out: self._clean(stated, kept_out))
            kept_out.extend(out)
            if body:
                sections.append(("task", body))

        volatile, volatile_layers = self._volatile(sections)
        layers = {**self._system_layers, **self._stable_layers, **volatile_layers}
        prefix = self._prefix
        system = prefix.system
        breakdown = PromptBreakdown(
            layers, system.tools_tokens, system.tokens, prefix.stable_tokens, sum(volatile_layers.values())
        )
        return PromptParts._assemble(
            prefix, volatile, breakdown, changed, tuple(loaded), tuple(truncated), tuple(kept_out)
        )

    def _volatile(self, sections: list[tuple[str, str]]) -> tuple[str, dict[str, int]]:
        """The volatile text and each layer's tokens, counting only new pieces."""
        last = len(sections) - 1
        if not self._counts.additive:
            pieces = [piece(TITLES[layer], body, i == last) for i, (layer, body) in enumerate(sections)]
            counts = self._counts.pieces(pieces)
            return "".join(pieces), {layer: n for (layer, _), n in zip(sections, counts, strict=True)}
        cache = self._pieces
        texts = []
        layers = {}
        for i, (layer, body) in enumerate(sections):
            if layer == "runtime":  # the date line: new every turn, never worth caching
                text = piece(TITLES[layer], body, i == last)
                texts.append(text)
                layers[layer] = self.tokenizer.count(text)
                continue
            key = (layer, body, i == last)
            hit = cache.get(key)
            if hit is None:
                text = piece(TITLES[layer], body, i == last)
                hit = (text, self.tokenizer.count(text))
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[key] = hit
            texts.append(hit[0])
            layers[layer] = hit[1]
        return "".join(texts), layers


def _tool_name(tool: Mapping[str, Any]) -> str | None:
    """A tool schema's name: Chat Completions' ``function.name`` (a custom
    tool's ``custom.name``), else Anthropic's (and the Responses API's) ``name``."""
    function = tool.get("function")
    if not isinstance(function, Mapping) and tool.get("type") == "custom":
        function = tool.get("custom")  # an OpenAI custom tool
    name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return name if isinstance(name, str) else None
