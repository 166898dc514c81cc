"""The Session: everything an agent server does each turn, in one object.

A turn is :meth:`Session.prepare` (append the input, search the memory
store, build the prompt, choose the window, repair it, render it with its
cache layout, count the whole request exactly and fit it to the budget),
the user's own client call, then :meth:`Session.record` (the reply, with its
tool calls and thinking) and :meth:`Session.record_tool_result` for each
call, and :meth:`Session.prepare` again with no input for the next call of
the same turn. Compaction runs in a worker thread, scheduled every turn,
and never on the turn's path; learnings are persisted at :meth:`close`.
A tool loop that outgrows the room goes on with its oldest results sent as
a note (:mod:`~context_core.session.clearing`).

Everything a session keeps lives under one directory::

    path/log         the MessageLog (crash-safe: what was appended survives SIGKILL)
    path/memory      MemoryFiles (MEMORY.md, shown in every prompt)
    path/memory.db   the MemoryStore (searched once a turn)
    path/provider    the provider the log's shapes are for
    path/learned     how far the log has been learned from
    path/prefix      the last request's cached-prefix hash (a reopen compares with it)

Each part can be given instead, or turned off with ``False``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import math
import numbers
import os
import shutil
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from context_core._core import Tokenizer
from context_core._log_selection import (
    EVERY_READ,
    PRIORITY_READS,
    SHAPE_READS,
    WEIGHTED_READS,
    from_view,
    standing_in,
)
from context_core._logging import library_logger
from context_core._threads import wait_timeout
from context_core.budget import Budget
from context_core.errors import (
    CacheBreakpointsError,
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    LogCorruptError,
    LogLockedError,
    MemoryLimitError,
    ModelEncodingError,
    OverBudgetError,
    UnknownModelError,
    storage_error,
)
from context_core.log import MessageLog
from context_core.memory import MemoryFiles
from context_core.memory.extract import extract_facts, in_batches, in_runs
from context_core.memory.facts import Fact, to_facts
from context_core.prompt import PromptBuilder, PromptParts
from context_core.prompt.context_part import SEPARATOR
from context_core.prompt.render_anthropic import MAX_BREAKPOINTS, count_breakpoints, too_many_breakpoints
from context_core.prompt.sections import check_text
from context_core.prompt.tool_text import tool_blocks_as_text
from context_core.sdk_messages import OPENAI_REPLY_FIELDS, message_of, paused, response_id, usage_of
from context_core.select import Policy, PriorityAssembly, Selection, ShapeHistory, WeightedWindow
from context_core.session.clearing import clearings
from context_core.session.held_facts import HeldFacts
from context_core.session.learned import read_learned, write_learned
from context_core.session.markers import write_by_rename
from context_core.session.memory_events import MemoryEvents
from context_core.session.prefix_mark import read_prefix, write_prefix
from context_core.session.report import Request, TurnReport
from context_core.session.request_count import request_tokens
from context_core.session.tool_calls import (
    ToolCall,
    answered_ids,
    call_ids_in_payloads,
    calls_of,
    check_call_ids,
    check_reply_blocks,
    check_sendable,
    only_results,
    pending_in,
    relocated,
    result_message,
    with_fresh_ids,
    with_text_arguments,
)
from context_core.summarize.offline import own_text

if TYPE_CHECKING:  # the store (numpy, sqlite3) loads only when a session has one
    from context_core.memory_store.namespaces import NamespaceLike

__all__ = ["Session"]

logger = library_logger()

_DURABILITIES = ("always", "batch", "never")

#: The tokens a session first leaves under its room (it learns more if a
#: request still comes out over, up to 1% of the limit).
_FIRST_MARGIN = 16

Provider = Literal["openai", "anthropic"]
PolicyName = Literal["priority", "weighted", "shape"]

#: How many times a turn redoes its selection to fit the whole request.
_MAX_SHRINKS = 4
#: The metadata each built-in policy reads (a policy of the caller's own: all of it).
_METADATA_READ: dict[type, tuple[str, ...]] = {
    ShapeHistory: SHAPE_READS,
    PriorityAssembly: PRIORITY_READS,
    WeightedWindow: WEIGHTED_READS,
}
#: The newest nodes read on open to find the tool calls still waited on.
_TAIL = 64
#: With no ``memory_tokens``, a turn's memories take at most this fraction
#: (one over it) of the room for messages; MEMORY.md does too.
_MEMORY_SHARE = 8
#: A log header's flag bit: the message holds tool calls (docs/log-format.md).
_FLAG_CALLS = 1 << 1
#: A log header's kind of a message node (not a summary or branch marker),
#: its role bytes, and its flags for tool results and for text of its own.
_KIND_MESSAGE = 0
_ROLE_USER = 1
_ROLE_ASSISTANT = 2
_ROLE_TOOL = 3
_FLAG_RESULTS = 1 << 2
_FLAG_HAS_TEXT = 1 << 3
#: Payload bytes read at a time when the open gathers the log's call ids.
_ID_BATCH_BYTES = 8 << 20
#: The reply room Anthropic requires a request to name, when none is given.
DEFAULT_ANTHROPIC_MAX_TOKENS = 4096


def provider_of(model: str) -> Provider:
    """``"anthropic"`` for Claude models, else ``"openai"``."""
    return "anthropic" if model.startswith("claude") else "openai"


def _policy(policy: PolicyName | Policy, provider: Provider, tokenizer: Tokenizer | None = None) -> Policy:
    """The policy named, counting with ``tokenizer`` (the log's, so it can
    choose from the log's headers), or the one given, checked."""
    if policy == "priority":
        return PriorityAssembly(provider=provider, tokenizer=tokenizer)
    if policy == "weighted":
        return WeightedWindow(provider=provider, tokenizer=tokenizer)
    if policy == "shape":
        return ShapeHistory(provider=provider, tokenizer=tokenizer)
    if isinstance(policy, str):
        raise InvalidInputError(f"policy must be 'priority', 'weighted', 'shape' or a Policy, got {policy!r}")
    if not callable(getattr(policy, "select", None)):
        raise InvalidTypeError(f"policy must have a select method, got {type(policy).__name__}")
    theirs = getattr(policy, "provider", provider)
    if theirs != provider:
        raise InvalidInputError(f"the policy repairs for {theirs!r}; this session sends to {provider!r}")
    return policy


def _check_counts_like(policy: Policy, encoding: str) -> None:
    """A policy given as an object counts in the log's encoding: its window
    would be measured in other tokens than the request (and a weighted one
    refuses the log at every turn, after the input is logged)."""
    # The library's policies keep it on their backend; a caller's own may
    # have one of its own, or none (then it counts as it likes).
    counting = getattr(policy, "_backend", policy)
    name = getattr(getattr(counting, "tokenizer", None), "name", encoding)
    if name != encoding:
        raise InvalidInputError(
            f"the policy counts tokens in {name}; this session's log counts in {encoding}"
            f" (give the policy tokenizer=Tokenizer({encoding!r}))"
        )


def _input_message(user_input: str | Mapping[str, Any], attachments: Sequence[Any]) -> dict[str, Any]:
    if isinstance(user_input, str):
        message: dict[str, Any] = {"role": "user", "content": user_input}
    elif isinstance(user_input, Mapping):
        message = dict(user_input)
    else:
        raise InvalidTypeError(f"user_input must be a str or a message dict, got {type(user_input).__name__}")
    role = message.get("role")
    if role in _OTHER_ROLES:
        raise InvalidInputError(
            f"user_input must be a user message, not role {role!r}"
            " (record() takes replies, record_tool_result() tool results)"
        )
    if not attachments and says_nothing(message.get("content")):
        # Repaired away, it would leave nothing to answer (and Anthropic
        # refuses a request with no messages); prepare() continues a turn.
        raise InvalidInputError("user_input is empty; call prepare() to continue the turn")
    if isinstance(attachments, (str, bytes, Mapping)) or not isinstance(attachments, Sequence):
        raise InvalidTypeError(
            f"attachments must be a list of content blocks, got {type(attachments).__name__}"
        )
    if attachments:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) and content else []
        if isinstance(content, list):
            blocks = list(content)
        message["content"] = [*blocks, *attachments]
    _check_text(message.get("content"))
    return message


def _check_text(content: Any) -> None:
    """An input's text must be text: a lone surrogate (which JSON can
    spell, ``\\ud800``) cannot be sent as UTF-8, nor searched for."""
    if isinstance(content, str):
        check_text(content, "user_input")
    elif isinstance(content, list):
        blocks = [b.get("text") for b in content if isinstance(b, Mapping)]
        for i, text in enumerate(text for text in blocks if isinstance(text, str)):
            check_text(text, f"user_input's text block {i}")


@dataclass(frozen=True)
class _Before:
    """A session's state before a turn's input was logged."""

    head: int | None
    last_seq: int | None
    pending: dict[str, ToolCall]
    turn: int
    step: int
    memories: list[str]
    said: str | None
    to_answer: bool


class _NoneFits(Exception):
    """No view with the turn's older results cleared fits the room."""


@dataclass(frozen=True)
class _Searched:
    """What :class:`~context_core.AsyncSession` did before a turn, awaiting
    the store: the input checked (the message to log and its search text;
    ``None``: a step, no input), the memories found, in ``seconds``."""

    checked: tuple[dict[str, Any], str | None] | None
    memories: list[str]
    seconds: float


#: Roles a turn's input cannot have (an unknown one is refused by the log).
_OTHER_ROLES = ("assistant", "tool", "function", "system", "developer")


def says_nothing(content: Any) -> bool:
    """Content the repair drops as empty: no text, blank text, or only
    text blocks of blank text."""
    if content is None or (isinstance(content, str) and not content.strip()):
        return True
    return isinstance(content, list) and all(
        isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and not block["text"].strip()
        for block in content
    )


def _compactor(log: MessageLog, summarizer: Any, files: Any, room: int) -> Any:
    """A session's compactor, its summaries sized to its room for messages
    (``room`` tokens). The view holds a global summary and three segment
    summaries, each in the window for good: together they must leave the
    turn room, whatever the user says. So a summary takes at most a
    sixteenth of the room (600 tokens from a 9,600-token room on), the
    global summary's rules a sixth, a segment summary's a sixteenth: in all
    at most about 60% of it. Unsized, a 4,000-token session whose user
    stated long rules failed every turn from the 20th on."""
    from context_core.compaction import Compactor
    from context_core.summarize import Summarizer
    from context_core.summarize.summarizer import DEFAULT_SUMMARY_TOKENS, MIN_SUMMARY_TOKENS

    if summarizer is None:
        summary_tokens = max(MIN_SUMMARY_TOKENS, min(DEFAULT_SUMMARY_TOKENS, room // 16))
        summarizer = Summarizer(summary_tokens=summary_tokens)
    return Compactor(
        log,
        summarizer,
        memory=files,
        rule_tokens=max(1, room // 6),
        segment_rule_tokens=max(1, room // 16),
    )


class Session:
    """One conversation's turns. Open it with :meth:`open`; one turn at a
    time (not thread-safe); close it (or use ``with``) to drain compaction
    and persist what the conversation taught."""

    def __init__(
        self,
        log: MessageLog,
        builder: PromptBuilder,
        *,
        model: str,
        provider: Provider,
        policy: Policy,
        budget: Budget,
        memory: MemoryFiles | None,
        store: Any,
        compactor: Any,
        namespace: NamespaceLike,
        memory_k: int,
        memory_tokens: int | None,
        max_tokens: int | None,
        owned: Sequence[Any],
        clock: Callable[[], float],
        wall: Callable[[], float],
        path: str = "",
        held_facts: HeldFacts | None = None,
    ) -> None:
        self.path = path
        """The session's directory (``""`` when made from parts)."""
        self.log = log
        self.builder = builder
        self.model = model
        self.provider: Provider = provider
        self.policy = policy
        self.budget = budget
        self.memory = memory
        self.store = store
        # A MemoryStore's scan starts ahead of its search; another store searches as it does.
        self._prefetch = _prefetch_of(store)
        self.compactor = compactor
        # Compaction's exact facts, for MEMORY.md at the close (see held_facts).
        self._held_facts = held_facts
        if compactor is not None:
            # Weakly: the worker must not keep a dropped session alive.
            compactor.after_write = functools.partial(_call_if_alive, weakref.WeakMethod(self._warm_window))
        self.namespace = namespace
        # The store's writes the turns make due (a store of the caller's own
        # that has neither method gets none).
        self._events = (
            MemoryEvents(store, namespace, path or None)
            if store is not None and (hasattr(store, "conversation_ended") or hasattr(store, "tool_failed"))
            else None
        )
        self.memory_k = memory_k
        self.memory_tokens = memory_tokens
        self.max_tokens = max_tokens
        self.tokenizer = Tokenizer(log.encoding)  # type: ignore[arg-type]  # a log's is a known one
        # A selection by one of the library's policies counted in this
        # encoding is exact (``breakdown.total``); a policy of the caller's
        # own is not relied on, and its request is counted whole.
        backend = getattr(policy, "_backend", None)
        self._own_policy = type(policy) in (PriorityAssembly, WeightedWindow, ShapeHistory)
        self._selection_counted = self._own_policy and (
            getattr(getattr(backend, "tokenizer", None), "name", None) == self.tokenizer.name
        )
        self._owned = list(owned)
        self._clock = clock
        self._wall = wall
        # The first node not learned from yet (a session directory keeps it
        # across processes: see `learned`).
        self._first_seq = len(log)
        # The calls still waiting and the ids the newest reply made, from the
        # log's last turns; and every call id the log holds (each reply
        # since adds its own), so an id a server gives again is stored fresh.
        self._pending, self._last_calls, self._to_answer = self._read_tail()
        self._call_ids = self._ids_in_log()
        # A renamed call's id as its server gave it -> the stored ids, so
        # a result recorded under either answers it; before this process
        # recorded a reply (after a reopen) the renaming is inferred.
        self._renamed: dict[str, list[str]] = {}
        self._replied = False
        # The last request built was answered by no reply yet: a plain
        # prepare() now asks for the same step again (the model's call failed).
        self._asked = False
        self._memories: list[str] = []
        # The turn's input text, for its skills and memories on the inner
        # steps (``None``: not read yet, after an open).
        self._said: str | None = None
        # The last turn's number, read from the log when first needed (turns
        # count from 0 over the log's life, so a reopened session goes on
        # from its log's): -1 before the first.
        self._last_turn: int | None = None
        self._step = 0
        self._counted: int | None = None
        # Tokens the rendered request came to over its selection's room last
        # time it had to shrink (joining the leading system messages into the
        # prompt's can cost a few): taken off the room up front, so a steady
        # session selects once a call, not twice.
        # A request can come out a few tokens over its room (BPE is not
        # additive where the prompt's parts meet the messages); starting a few
        # under saves a second selection on most first calls of a full window.
        self._render_margin = _FIRST_MARGIN
        self._last_room: int | None = None  # the room the last window was chosen within
        self._cleared = 0  # the turn's older tool results the last window cleared
        self._cleared_in_turn = (-1, 0)  # the most a window of that turn cleared: never fewer again
        self._paused: set[int] = set()  # seqs of the replies this object recorded paused (pause_turn)
        self._cached: int | None = None
        # The API's id of the last reply recorded, and its message as given,
        # until the next request or tool result (a retry records it again).
        self._last_reply: tuple[str, dict[str, Any]] | None = None
        self._prefix: str | None = None
        self._closed = False
        self._pid = os.getpid()  # a forked child's copy writes nothing at its close
        self.last_report: TurnReport | None = None
        """The last call's report."""
        self.last_seq: int | None = None
        """The log seq of the last message this session appended (the input,
        a reply, a tool result): acknowledged, so it survives a crash."""

    # -- opening -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        model: str,
        provider: Provider | None = None,
        identity: str = "",
        conventions: Any = (),
        safety: Any = (),
        tools: Sequence[Mapping[str, Any]] = (),
        skills: Any = (),
        session_facts: Any = None,
        memory: MemoryFiles | bool | None = None,
        store: Any = None,
        summarizer: Any = None,
        compact: bool = True,
        policy: PolicyName | Policy = "priority",
        budget: Budget | int | None = None,
        namespace: NamespaceLike = "default",
        memory_k: int = 8,
        memory_tokens: int | None = None,
        max_tokens: int | None = None,
        durability: str = "batch",
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> Session:
        """Open (or create) the session kept under ``path``.

        ``model`` picks the budget (its window, unless ``budget`` is given)
        and the provider (Claude models: ``"anthropic"``; others ``"openai"``).
        ``identity``, ``conventions``, ``safety``, ``tools``, ``skills`` and
        ``session_facts`` make the prompt (:class:`~context_core.prompt.PromptBuilder`).
        ``memory``: a :class:`~context_core.MemoryFiles`, ``None`` for
        ``path/memory``, ``False`` for none. ``store``: a
        :class:`~context_core.MemoryStore`, ``None`` for ``path/memory.db``,
        ``False`` for none. ``summarizer``: the compactor's (default: the
        offline one); ``compact=False`` turns compaction off. ``policy``:
        ``"priority"``, ``"weighted"``, ``"shape"`` or a policy object.
        ``memory_k`` / ``memory_tokens``: how many memories a turn retrieves,
        and their token cap (default: none for ``"priority"``, which fits
        them itself; an eighth of the room for messages for the others).
        MEMORY.md goes in by whole lines up to an eighth of the room too
        (its first lines, so the cached prefix holds as it grows).
        ``max_tokens``: the reply's (Anthropic requires one; 4096 when not
        given). ``clock``: seconds for the report's
        timings; ``wall``: epoch seconds for timestamps.
        """
        if not isinstance(model, str) or not model:
            raise InvalidInputError(f"model must be a model name, got {model!r}")
        provider = provider_of(model) if provider is None else provider
        if provider not in ("openai", "anthropic"):
            raise InvalidInputError(f"provider must be 'openai' or 'anthropic', got {provider!r}")
        chosen = _policy(policy, provider)
        if budget is None:
            budget = Budget.for_model(model)
        elif isinstance(budget, int) and not isinstance(budget, bool):
            # A whole request's tokens, as the CLI's --budget: the model's
            # budget (its reply room, Claude's estimate) with that window.
            budget = Budget.for_model(model, window=budget)
        elif not isinstance(budget, Budget):
            raise InvalidTypeError(f"budget must be a Budget or an int (tokens), got {type(budget).__name__}")
        if isinstance(memory_k, bool) or not isinstance(memory_k, int) or memory_k < 0:
            raise InvalidInputError(f"memory_k must be an int >= 0, got {memory_k!r}")
        check_bools(compact=compact)  # a truthy string ("no", "off") would turn compaction on
        if durability not in _DURABILITIES:  # before anything is made on disk
            raise InvalidInputError(
                f"durability must be one of {', '.join(map(repr, _DURABILITIES))}, got {durability!r}"
            )
        for name, given in (("clock", clock), ("wall", wall)):
            if not callable(given):
                raise InvalidTypeError(
                    f"{name} must be callable (seconds as a float), got {type(given).__name__}"
                )
            # Called once now: one that returns something else (a datetime,
            # say) would fail every turn deep inside it.
            seconds = given()
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                got = type(seconds).__name__
                raise InvalidTypeError(f"{name}() must return seconds as a float, got {got}")
            if not math.isfinite(seconds):
                raise InvalidInputError(f"{name}() must return finite seconds, got {seconds!r}")
        for name, value, least in (("memory_tokens", memory_tokens, 0), ("max_tokens", max_tokens, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise InvalidInputError(f"{name} must be None or an int >= {least}, got {value!r}")
        cap = DEFAULT_ANTHROPIC_MAX_TOKENS if max_tokens is None and provider == "anthropic" else max_tokens
        if cap is not None and 0 < budget.reply_room < cap:
            raise InvalidInputError(
                f"max_tokens ({cap}) is over the {budget.reply_room} tokens {model} replies at most"
            )
        if cap is not None and cap - budget.reply_room >= budget.window:
            named = "max_tokens" if max_tokens is not None else "the default max_tokens for Anthropic"
            raise InvalidInputError(
                f"{named} ({cap}) leaves no room for a prompt in a {budget.window}-token window"
            )
        root, made = _session_directory(path)
        owned: list[Any] = []
        where = os.path.join(root, "log")
        try:
            log = _open_log(where, model, durability)
            owned.append(log)
            _check_model_encoding(model, log.encoding)
            if isinstance(policy, str):
                chosen = _policy(policy, provider, Tokenizer(log.encoding))  # type: ignore[arg-type]
            _check_counts_like(chosen, log.encoding)
            files = _memory_files(memory, root)
            builder = PromptBuilder(
                identity,
                conventions=conventions,
                safety=safety,
                tools=tools,
                skills=skills,
                memory=files,
                # MEMORY.md grows as sessions end: held to a share of the
                # room, it never leaves a small window no room for a turn.
                memory_max_tokens=budget.messages() // _MEMORY_SHARE,
                session_facts=session_facts,
            )
            # Each tool in the provider's form now (an OpenAI custom tool has
            # no Anthropic one, an Anthropic server tool no OpenAI one), not
            # at the first turn.
            builder.tools_for(provider)
            if provider == "anthropic":
                _check_tool_marks(builder._system.tool_breakpoints())
            memory_store = _store(store, root)
            if memory_store is not None and store is None:
                owned.append(memory_store)
            if memory_store is not None:
                from context_core.memory_store.namespaces import namespace_keys

                namespace_keys(namespace)  # checked now, not at the first turn's search
            compactor = None
            held = HeldFacts(root) if files is not None else None
            if compact:
                compactor = _compactor(log, summarizer, held, budget.messages())
            session = cls(
                log,
                builder,
                model=model,
                provider=provider,
                policy=chosen,
                budget=budget,
                memory=files,
                store=memory_store,
                compactor=compactor,
                held_facts=held,
                namespace=namespace,
                memory_k=memory_k,
                memory_tokens=memory_tokens,
                max_tokens=max_tokens,
                owned=owned,
                clock=clock,
                wall=wall,
                path=root,
            )
            # Marked once every option is known good: a failed open leaves
            # the directory free for another provider.
            _check_provider(root, provider, log)
            session._first_seq = read_learned(root, len(log))
            session._prefix = read_prefix(root)
        except LogCorruptError as error:
            # The newest turns are read at open: a damaged record there would
            # fail every turn. Said now, with the way out; the log is let go
            # first, so the repair can take it.
            _close_parts(owned, raising=False)
            raise _with_repair(error, where) from error
        except LogLockedError:
            _close_parts(owned, raising=False)
            raise  # the session another holds: its directory is not this open's to remove
        except BaseException:
            _undo_open(root, made, owned)
            raise
        try:
            session._warm_up()
        except BaseException:  # an interrupt, or a store of the caller's own failing its own way
            session._close(persist=False, wait=False, forget=False)  # nothing said here to forget
            raise
        return session

    @property
    def _turn(self) -> int:
        if self._last_turn is None:
            self._last_turn = self.log._turns() - 1
        return self._last_turn

    @_turn.setter
    def _turn(self, turn: int) -> None:
        self._last_turn = turn

    def _warm_up(self) -> None:
        """Select once at open, result dropped, so the first turn costs what
        the others do: a handle's first sweep checks the records a checkpoint
        vouched for, counts the cut tool results and grows the buffers a
        sweep reuses (at a million messages, ~30 ms on top of a turn); and the
        memory store's vectors are loaded (at 100,000 memories, ~1 s). Bad
        history is left to the turn, which reports it as turns do."""
        with contextlib.suppress(ContextCoreError):
            self._select(self._room(0))
            # The log's turns counted now, its headers read by the selection
            # (at a million messages, 10 ms, against 40 ms cold).
            self._turn  # noqa: B018 - read for its effect
        # A store's first search of a namespace reads all its vectors (a
        # store of the caller's own may have nothing to load ahead).
        preload = getattr(self.store, "preload", None) if self.memory_k else None
        if preload is not None:
            with contextlib.suppress(ContextCoreError):
                preload(namespace=self.namespace)

    def _warm_window(self) -> None:
        """Choose the next window once, result dropped, on the compaction
        worker after it wrote a summary (between turns: the model's time).
        The first selection over a changed view groups it afresh and lays
        out the new summaries: in the replayed sessions about 1.2 ms at the
        median against 0.4, the slowest turns of a session. The next turn
        then reads it from where this one left off. Failures are left to
        the turn, which reports them."""
        room = self._last_room
        if room is None or self._closed:
            return
        with contextlib.suppress(ContextCoreError):
            self._select(room)
        with contextlib.suppress(ContextCoreError):
            self.builder.build(now="")  # MEMORY.md, which the compaction's facts went into, read and fitted

    def _ids_in_log(self) -> set[str]:
        """Every call id the log's replies made, dead branches' too: an old
        turn can come back into a window (a learned ratio under 1 widens
        it, a weighted policy readmits a heavy unit), and an id given again
        beside it would be repaired away with the turn in progress's result.
        Read from the payloads' text in batches of at most ``_ID_BATCH_BYTES``
        (at 1,000 messages, about a millisecond). A damaged record is passed
        over: a window that reaches it reports it, and the open must not fail
        for an old turn's byte."""
        headers = self.log.headers()
        seqs = np.flatnonzero(headers["flags"] & _FLAG_CALLS)
        sizes = np.cumsum(headers["raw_len"][seqs], dtype=np.int64)
        found: set[str] = set()
        start = 0
        while start < len(seqs):
            base = int(sizes[start - 1]) if start else 0
            end = max(start + 1, int(np.searchsorted(sizes, base + _ID_BATCH_BYTES, side="right")))
            batch = seqs[start:end].tolist()
            try:
                payloads = self.log._read(batch)
            except LogCorruptError:
                payloads = []
                for seq in batch:
                    with contextlib.suppress(LogCorruptError):
                        payloads += self.log._read([seq])
            found |= call_ids_in_payloads(payloads)
            start = end
        return found

    def _messages_back(self) -> Iterator[tuple[int, np.ndarray]]:
        """The seqs of the messages on the log's path, newest first, with
        the headers: from the head through the headers' parent links, past
        summaries and branch markers, reading no payload and never building
        the whole path (at a million messages, a quarter of a second)."""
        headers = self.log.headers()
        seq = self.log.head
        while seq is not None:
            if int(headers["kind"][seq]) == _KIND_MESSAGE:
                yield seq, headers
            parent = int(headers["parent"][seq])
            seq = None if parent >= len(headers) else parent

    def _older_results_in_turn(self) -> bool:
        """Whether the turn in progress holds a tool result before its newest
        call (one clearing may take), from the headers alone: back from the
        head to the message that starts the turn (a user's, with words of
        its own and no result, as the policies tell one)."""
        headers = self.log.headers()
        newest_call = False
        for seq in reversed(self._turn_seqs()):
            role, flags = int(headers["role"][seq]), int(headers["flags"][seq])
            if role == _ROLE_ASSISTANT and flags & _FLAG_CALLS:
                newest_call = True
            elif flags & _FLAG_RESULTS and newest_call:
                return True
        return False

    def _retried_steps(self, message: Mapping[str, Any]) -> int | None:
        """How many of the turn's steps ``message`` comes after, if it is the
        input of the turn in progress given again; ``None`` if it is not. The
        turn's input is the newest user message on the log's path that is
        not a step of the turn (a reply that made calls, tool results alone),
        compared as stored. A server that retries a turn after the model's
        call failed sends it again, before any step or after some. An answer
        (a reply that made no call) ends the search. A tool message is
        passed over unread; a user message of results is read, as it may
        hold more than results (an image, a document) and so be an input.
        Results given as the input and given again are the step they began:
        the turn's steps before them count too. A reply recorded paused
        (``pause_turn``) is a step too."""
        steps = 0
        matched = False
        for seq, headers in self._messages_back():
            role, flags = int(headers["role"][seq]), int(headers["flags"][seq])
            step = role == _ROLE_ASSISTANT and (flags & _FLAG_CALLS or seq in self._paused)
            if role == _ROLE_TOOL or step:
                steps += role == _ROLE_ASSISTANT
                continue
            if role != _ROLE_USER:
                return steps if matched else None  # the turn was answered
            node = self.log.read([seq])[0]
            if not isinstance(node, dict):
                return None
            results = only_results(node)
            # Results given again are those since the newest reply that made
            # calls: an older step's, alike, answered another call.
            if (node == message or _same_results(node, message)) and (not results or steps == 0):
                if not results:
                    return steps
                # Results given again: the step they began, after the
                # turn's steps before them too.
                matched = True
                continue
            if not results:
                return steps if matched else None  # another input is the turn's
        return steps if matched else None

    def _input_in_log(self) -> tuple[str, int]:
        """The text of the newest user input (a user message that is not
        only tool results), the turn in progress's (``""`` when it has no
        text, an image alone, or there is none), and how many of the turn's
        steps (replies that made calls) came after it."""
        steps = 0
        for seq, headers in self._messages_back():
            role = int(headers["role"][seq])
            if role == _ROLE_ASSISTANT and int(headers["flags"][seq]) & _FLAG_CALLS:
                steps += 1
            elif role == _ROLE_USER:
                node = self.log.read([seq])[0]
                if isinstance(node, dict) and not only_results(node):
                    return own_text(node), steps
        return "", steps

    def _next_step(self, searched: list[str] | None = None) -> tuple[str, list[str], int, int]:
        """The turn in progress's input text and memories, and the turn and
        step numbers of its next call. In a session opened within the turn
        they are read back from the log: the memories searched as its first
        step had them (``searched``: found so beforehand), the step the one
        after the replies with calls it made."""
        if self._said is not None and self._turn >= 0:
            # A call asked for again with no reply recorded since (the
            # model's call failed) is the same step, as a reopened session
            # counts it: by the replies the turn made.
            return self._said, self._memories, self._turn, self._step + (0 if self._asked else 1)
        said, made = self._input_in_log()
        return said, self._search(said) if searched is None else searched, max(self._turn, 0), made

    def _step_query(self) -> str | None:
        """The text the next step of the turn in progress searches the
        store with: only in a session opened within the turn (``None``:
        the turn's memories are held)."""
        if self._said is not None and self._turn >= 0:
            return None
        return self._input_in_log()[0]

    def _read_tail(self) -> tuple[dict[str, ToolCall], set[str], bool]:
        """From the log's last turns: the calls still waiting, the ids of
        the newest reply that made calls, and whether a message after the
        last reply waits for the model. The read grows until it reaches that
        reply (it may make more calls than the first tail holds). The
        messages are found back from the head: building the whole path
        would take a million-message log 40-60 ms."""
        size = _TAIL
        while True:
            seqs = [seq for seq, _ in itertools.islice(self._messages_back(), size)]
            seqs.reverse()
            tail = [node for node in self.log.read(seqs) if isinstance(node, dict) and "role" in node]
            found = pending_in(tail)
            if found is not None or len(seqs) < size:
                replies = [calls for calls in map(calls_of, tail) if calls]
                waiting = bool(tail) and tail[-1].get("role") != "assistant"
                return found or {}, {call.id for call in replies[-1]} if replies else set(), waiting
            size *= 4

    # -- a turn ------------------------------------------------------------------

    @property
    def pending(self) -> tuple[ToolCall, ...]:
        """The tool calls the last reply made that have no result yet."""
        return tuple(self._pending.values())

    @property
    def needs_reply(self) -> bool:
        """Whether a message since the last reply (an input, a tool result)
        waits for the model, or the last reply paused within its turn
        (Anthropic's ``pause_turn``): what :meth:`prepare` with no input
        needs. A pause is held by this object only: a session opened
        again reads the paused reply as a finished one. False while a call
        of the last reply still waits for its result (:attr:`pending`)."""
        return self._to_answer and not self._pending

    def prepare(
        self,
        user_input: str | Mapping[str, Any] | None = None,
        *,
        now: datetime | str | None = None,
        attachments: Sequence[Any] = (),
    ) -> Request:
        """The next request. With ``user_input`` a new turn starts (it is
        appended to the log first, and the memory store searched with it);
        with none, the next call of the same turn (after the tool results
        were recorded) reuses the turn's memories. ``now``: the prompt's
        date line (default: the current time). Background compaction waits
        while it runs."""
        return self._prepare_turn(user_input, now, attachments, None)

    def _prepare_turn(
        self,
        user_input: str | Mapping[str, Any] | None,
        now: datetime | str | None,
        attachments: Sequence[Any],
        searched: _Searched | None,
    ) -> Request:
        """:meth:`prepare`; ``searched``: the input checked and its memories
        found beforehand (by :class:`~context_core.AsyncSession`, awaiting
        the store), the seconds that took counted by the report."""
        self._check_open()
        with self._quiet(preparing=True):
            try:
                request = self._prepare(user_input, now, attachments, searched)
                self._last_reply = None  # a reply after a request is a new one, whatever its id
                return request
            except LogCorruptError as error:
                # A damaged record the open did not read (older than the
                # last turns), in every window from now on.
                raise _with_repair(error, self.log._path, close_first=True) from error

    def _quiet(self, *, preparing: bool = False) -> contextlib.AbstractContextManager[None]:
        """The background workers (compaction, the store's writes) paused
        for the span of a turn's call (``preparing``: one that prepares a
        request; the writes made due before it wait for its end)."""
        if self._events is None:
            return contextlib.nullcontext() if self.compactor is None else self.compactor.turn()
        if self.compactor is None:
            return self._events.turn(preparing=preparing)
        return _both(self.compactor.turn(), self._events.turn(preparing=preparing))

    def _prepare(
        self,
        user_input: str | Mapping[str, Any] | None,
        now: datetime | str | None,
        attachments: Sequence[Any],
        searched: _Searched | None = None,
    ) -> Request:
        clock = self._clock
        started = clock() - (0.0 if searched is None else searched.seconds)
        found = None if searched is None else searched.memories  # (a step's, or the input's)
        timings: dict[str, float] = {}
        if user_input is None:
            if attachments:
                raise InvalidInputError("attachments come with a user input")
            if not self._to_answer:
                # The request would end with the model's own reply: Anthropic
                # takes it as a prefill to continue (and refuses one ending
                # in whitespace), OpenAI answers its own answer.
                raise InvalidInputError(
                    "nothing to answer: no input or tool result since the last reply;"
                    " record the tool results, or start a turn with prepare(user_input)"
                )
            if self._pending:
                # The repair would take the unanswered calls out of the
                # request, and their results, recorded later, would be refused.
                waiting = ", ".join(self._pending)
                raise InvalidInputError(
                    f"calls still wait for their results ({waiting}): record each (a failure with"
                    " is_error=True), or start a turn with prepare(user_input)"
                )
            timings["append"] = 0.0  # the same stages, nothing to append
            # A failed call is no step: its turn, step and input as they were
            # (an input not yet read back after an open is read again).
            before = self._turn, self._step, self._said
            try:
                said, self._memories, turn, step = self._next_step(found)
                self._said = said
                mark = self._lap(timings, "memory", started)
                parts, mark = self._prompt(said, now, timings, mark)
                self._turn, self._step = turn, step
                return self._request(parts, timings, started, mark)
            except BaseException:
                self._turn, self._step, self._said = before
                raise
        checked = None if searched is None else searched.checked
        message, query = self._turn_input(user_input, attachments) if checked is None else checked
        # The search and the prompt need only the input: done before it is
        # logged, so a store that fails, or an input that cannot fit beside
        # the prompt, leaves the log as it was.
        if query is None:
            # Tool results given as the input (as Anthropic's own loop builds
            # them) are the turn's next step: its memories and skills stay.
            said, memories, turn, step = self._next_step(found)
            mark = self._lap(timings, "memory", started)
            parts, mark = self._prompt(said, now, timings, mark)
        else:
            said = query
            arguments = None if found is not None else self._search_arguments(said)
            if arguments is not None and self._prefetch is not None:
                # The store's scan runs on its worker while the prompt is built.
                self._prefetch(said, namespace=arguments["namespace"], k=arguments["k"])
            mark = self._lap(timings, "memory", started)
            parts, mark = self._prompt(said, now, timings, mark)
            memories = self._search_by(said, arguments) if found is None else found
            mark = self._lap(timings, "memory", mark)
            turn, step = self._turn + 1, 0
        # Results that each answer a call still waiting are new, whatever
        # an older step's look like; only what answers nothing may be given
        # again (and, if it is not, is refused below).
        refused: InvalidInputError | None = None
        try:
            answered = self._result_ids(message, self._pending)
        except InvalidInputError as error:
            answered, refused = [], error
        retried = None
        if self._to_answer and (refused is not None or not answered):
            retried = self._retried_steps(message)
        if retried is not None:
            # The input of the turn still in progress, given again (a retry
            # after the model's call failed, at the turn's first step or a
            # later one, or after a failed turn that could not take its
            # input back): answered where the turn is, not logged twice.
            # The next step is the one after those the turn has made.
            self._turn, self._step, self._memories, self._said = max(self._turn, 0), retried, memories, said
            mark = self._lap(timings, "append", mark)
            try:
                return self._request(parts, timings, started, mark)
            except BaseException:
                self._step, self._asked = retried - 1, False  # a failed call is no step
                raise
        if refused is not None:
            raise refused
        if answered:
            message = _with_result_ids(message, answered)
        self._check_fits(message, parts, memories)
        undo = _Before(
            self.log.head,
            self.last_seq,
            self._pending,
            self._turn,
            self._step,
            self._memories,
            self._said,
            self._to_answer,
        )
        self.last_seq = int(self.log.append(message, timestamp=self._wall()))
        self.log._keep_appended(self.last_seq, message)  # the next window reads it: not decoded again
        if query is None:  # results alone: the calls they do not answer still wait
            self._pending = {k: v for k, v in self._pending.items() if k not in answered}
        else:
            self._pending = {}  # the user spoke first: sanitize closes any call left open
        self._turn, self._step, self._memories, self._said = turn, step, memories, said
        self._to_answer = True
        mark = self._lap(timings, "append", mark)
        logged = self.last_seq
        try:
            request = self._request(parts, timings, started, mark)
        except BaseException:
            self._undo_input(undo)
            if self._events is not None and self.last_seq == logged:
                self._events.message(message, logged)  # it stayed: the turn's input still
            raise
        if self._events is not None:
            self._events.message(message, logged)  # what it says worth keeping, stored in the background
        return request

    def _result_ids(self, message: Mapping[str, Any], waiting: Mapping[str, Any]) -> list[str]:
        """The id each tool result ``message`` carries (as Anthropic's own
        loop builds the input) names its call by as stored, in order: its
        own, or the one the last reply's call was renamed to (a server's id
        given again), never one a result before it took. Each must answer
        one of the calls ``waiting``, as a result given to
        :meth:`record_tool_result` must: one that answers nothing would
        leave the request ending with the model's own reply (its call
        repaired away), and the call it meant lost."""
        ids: list[str] = []
        for given in answered_ids(message):
            choices = [given, *self._renamed_as(given)]
            stored = next((c for c in choices if c in waiting and c not in ids), None)
            if stored is None:
                left = ", ".join(k for k in waiting if k not in ids) or "none"
                raise InvalidInputError(
                    f"user_input: no tool call {given!r} is waiting for a result (waiting: {left})"
                )
            ids.append(stored)
        return ids

    def _turn_input(
        self, user_input: str | Mapping[str, Any], attachments: Sequence[Any]
    ) -> tuple[dict[str, Any], str | None]:
        """The input checked, as the message to log, and the text the store
        is searched with (``None``: tool results given as the input, the
        turn's next step, which searches nothing)."""
        message = _input_message(user_input, attachments)
        _check_input_shape(message, self.provider)
        check_call_ids(message, "user_input")
        check_sendable(message, self.provider, "user_input")
        return message, None if only_results(message) else own_text(message)

    def _prompt(
        self, said: str, now: datetime | str | None, timings: dict[str, float], mark: float
    ) -> tuple[PromptParts, float]:
        """The prompt's parts, with the skills ``said`` names loaded, and the
        clock after them."""
        skills = [skill.name for skill in self.builder.skills.match(said)] if said else []
        parts = self.builder.build(now=now, skills=skills)
        return parts, self._lap(timings, "prompt", mark)

    def _reply_cap(self) -> int | None:
        """The reply's token cap the request carries (Anthropic's default when none is given)."""
        if self.max_tokens is None and self.provider == "anthropic":
            return DEFAULT_ANTHROPIC_MAX_TOKENS
        return self.max_tokens

    def _room(self, system_tokens: int) -> int:
        """Tokens for the messages, the system part taking ``system_tokens``:
        the budget's, and never more than the window holds beside the
        reply's cap (the APIs refuse a prompt and ``max_tokens`` that
        together exceed the window), in our tokens and in the provider's."""
        room = self.budget.messages(system_tokens=system_tokens)
        cap = self._reply_cap()
        if cap is None:
            return room
        left = self.budget.window - max(0, cap - self.budget.reply_room)
        beside = min(math.floor(left / self.budget.ratio), left) - system_tokens
        return max(0, min(room, beside))

    def _extra(self, memories: list[str] | None = None) -> str:
        """The memories' text for a policy that does not place them itself
        (rendered after the volatile part, their tokens off the room)."""
        memories = self._memories if memories is None else memories
        return "" if isinstance(self.policy, PriorityAssembly) else _memory_text(memories)

    def _check_fits(self, message: Mapping[str, Any], parts: PromptParts, memories: list[str]) -> None:
        """An input that cannot fit beside the prompt (and the memories a
        policy does not place itself) could never be sent: refused before it
        is logged, where a policy that pins the first user message would
        keep it in every later window."""
        # The room the selection gets at the least margin (a larger margin
        # learned from an earlier request is given back for an input that
        # needs it): the same bound the selection's own check then uses.
        room = self._room(parts.breakdown.total) - _FIRST_MARGIN
        extra = self._extra(memories)
        # Through the shared count cache: the turn's every step sends this
        # same text (a few hundred tokens of BPE a call otherwise).
        memory = self.tokenizer._count_cached(extra) if extra else 0
        room -= memory
        tokens = self.tokenizer.count_messages([dict(message)])  # with the reply priming
        if tokens > room:
            beside = f"the prompt and the turn's memories ({memory} tokens)" if memory else "the prompt"
            error = OverBudgetError(
                f"the input counts {tokens} tokens with the reply priming, over the {max(0, room)}"
                f" tokens the request has for messages beside {beside}"
            )
            error.turn_in_progress, error.budget = tokens, max(0, room)
            raise error

    def _undo_input(self, before: _Before) -> None:
        """A turn whose request failed leaves its input out of the view: the
        head goes back to the node before it (a branch, the input kept in
        the file), so the next turn does not carry it. The first message
        of a log has no node before it to go back to. The log stays one
        chain (with the input as a hole in it) to the selection's fast
        paths. An input that
        stays (the first, or a rewind that failed) is the turn's: the next
        ``prepare()`` answers it as the turn's first step, as does the same
        input given again."""
        undone = False
        if before.head is not None:
            with contextlib.suppress(ContextCoreError):
                self.log.rewind(before.head)
                undone = True
        if not undone:
            # The failed call is no step: the next is the turn's first.
            self._turn, self._step, self._asked = max(before.turn + 1, 0), -1, False
            return
        self.last_seq, self._pending, self._memories = before.last_seq, before.pending, before.memories
        self._said, self._to_answer = before.said, before.to_answer
        self._turn, self._step = before.turn, before.step

    def _request(self, parts: PromptParts, timings: dict[str, float], started: float, mark: float) -> Request:
        limit = self._room(0)
        # Memories for a policy that does not place them: rendered after the
        # volatile part, their tokens taken off the room once.
        extra = self._extra()
        extra_tokens = self.tokenizer._count_cached(extra) if extra else 0  # as in _check_fits
        room = self._room(parts.breakdown.total) - extra_tokens
        # The least margin: what the check before logging allowed the input.
        least = max(0, room - _FIRST_MARGIN)
        room = max(0, room - self._render_margin)
        shrunk = excess = 0
        self._cleared = 0
        while True:
            try:
                selection = self._select(room)
            except OverBudgetError as error:
                # A margin learned from an earlier turn's request can leave
                # this turn's input no room; it goes back to the least once.
                if not shrunk and room < least:
                    room = least
                    continue
                if not self._older_results_in_turn():
                    # Nothing clearing could take: said without decoding
                    # the view (at a million messages, seconds).
                    raise
                selection = self._select_clearing(room, error)
            mark = self._lap(timings, "select", mark)
            arguments = self._render(parts, selection, extra)
            if self.provider == "anthropic" and not arguments["messages"]:
                raise InvalidInputError(
                    "nothing to answer: Anthropic needs a message, and the history has none;"
                    " start a turn with prepare(user_input)"
                )
            mark = self._lap(timings, "render", mark)
            total = self._count(arguments, selection)
            mark = self._lap(timings, "count", mark)
            if total <= limit:
                break
            if shrunk >= _MAX_SHRINKS or room == 0:
                raise OverBudgetError(
                    f"the request counts {total} tokens, over the limit of {limit}, and selecting "
                    f"again within {room} tokens for the messages does not bring it under"
                )
            # Less than the selection took, not than the room: a selection
            # well under its room (the next unit did not fit) would come
            # back the same from a room a few tokens smaller. (A policy of
            # the caller's own: its count is not relied on.)
            took = selection.breakdown.total if self._selection_counted else room
            room = max(0, min(room, took) - (total - limit))
            excess += total - limit
            shrunk += 1
        self._last_room = room
        if shrunk:  # a few tokens, bounded: a request far over is shrunk each call instead
            self._render_margin = min(self._render_margin + excess, max(64, limit // 100))

        if self.compactor is not None:
            self.compactor.schedule()
        mark = self._lap(timings, "schedule", mark)
        timings["total"] = mark - started

        prefix = parts.prefix_hash()
        changed = parts.stable_changed or (self._prefix is not None and prefix != self._prefix)
        if prefix != self._prefix and self.path:
            write_prefix(self.path, prefix)  # for the first request after a reopen
        self._prefix = prefix
        self._counted = total
        report = TurnReport(
            turn=self._turn,
            step=self._step,
            sections=_sections(parts, selection, extra_tokens),
            total=total,
            limit=limit,
            prefix_hash=prefix,
            prefix_changed=changed,
            timings=timings,
            memories=len(self._memories),
            repairs=selection.changes,
            compaction=self._compaction(),
            cached_tokens=self._cached,
            shrunk=shrunk,
            cleared=self._cleared,
        )
        self.last_report = report
        self._asked = True
        if logger.isEnabledFor(logging.INFO):  # the line is built only when someone reads it
            logger.info("%s", report.log_line())
        return Request(arguments, report)

    def _lap(self, timings: dict[str, float], stage: str, mark: float) -> float:
        now = self._clock()
        timings[stage] = timings.get(stage, 0.0) + now - mark
        return now

    def _search(self, query: str) -> list[str]:
        return self._search_by(query, self._search_arguments(query))

    def _search_by(self, query: str, arguments: dict[str, Any] | None) -> list[str]:
        """``query``'s memories, the store asked with ``arguments`` (see
        :meth:`_search_arguments`; ``None``: no search)."""
        if arguments is None:
            return []
        # Only the texts go in the prompt: a MemoryStore gives just those,
        # for less; a store of the caller's own may have only `search`.
        texts = getattr(self.store, "search_texts", None)
        if texts is not None:
            found = list(texts(query, **arguments))
        else:
            found = [hit.memory.text for hit in self.store.search(query, **arguments)]
        return self._within(found, arguments["max_tokens"])

    def _search_arguments(self, query: str) -> dict[str, Any] | None:
        """What the store is asked for ``query``'s memories (``None``: no search)."""
        if self.store is None or not query.strip() or self.memory_k == 0:
            return None
        cap = self.memory_tokens
        if cap is None and not isinstance(self.policy, PriorityAssembly):
            # Memories a policy does not place itself go in whole: uncapped,
            # they could leave an input no room at all.
            cap = max(1, self._room(0) // _MEMORY_SHARE)
        return {"namespace": self.namespace, "k": self.memory_k, "max_tokens": cap}

    def _within(self, found: list[str], cap: int | None) -> list[str]:
        """Whole memories within the cap, in this session's encoding: a store
        of the caller's own may not keep to it, and ours counts in its own."""
        if cap is None:
            return found
        kept, used = [], 0
        for text in found:
            tokens = self.tokenizer._count_cached(text)  # the store's own counted them: often a hit
            if used + tokens <= cap:
                kept.append(text)
                used += tokens
        return kept

    def _select(self, room: int, source: Sequence[Mapping[str, Any]] | None = None) -> Selection:
        """The window within ``room`` tokens from the log (or from ``source``,
        its view); priority assembly places the memories."""
        chosen_from: Any = self.log if source is None else source
        if isinstance(self.policy, PriorityAssembly):
            return self.policy.select(chosen_from, room, memories=self._memories)
        return self.policy.select(chosen_from, room, now=self._wall())

    def _select_clearing(self, room: int, error: OverBudgetError) -> Selection:
        """The window within ``room`` from the view with the oldest tool
        results of the turn in progress cleared, as few as fit (see
        :mod:`~context_core.session.clearing`); ``error`` again where
        clearing every one that may go does not. Only the turn is decoded:
        its cleared results stand in for the log's in a window chosen from
        the headers (the whole view, decoded, took a second at 200,000
        messages), unless a result of it is not in the view (a summary
        covers it) or the policy is the caller's own, where the whole view
        is read."""
        turn, floor = self._cleared_in_turn
        floor = floor if turn == self._turn else 0  # a new turn clears from none
        cap = getattr(self.policy, "tool_result_cap", None)

        def cleared_views(view: list[Any]) -> Iterator[tuple[list[Any], int]]:
            return clearings(
                view,
                error,
                room,
                self.tokenizer.count_message,
                cap=cap if isinstance(cap, int) else None,
                floor=floor,
            )

        try:
            found = self._select_turn_cleared(room, cleared_views)
            if found is None:
                found = self._select_view_cleared(room, cleared_views)
        except _NoneFits:
            # Its figures are the turn's uncleared: say what clearing could not do.
            error.add_note(
                "clearing the turn's older tool results did not make it fit: each cleared result"
                " still sends its call and a short note, and the newest step's results are never cleared"
            )
            raise error from None
        selection, cleared = found
        self._cleared = cleared
        self._cleared_in_turn = (self._turn, max(cleared, floor))
        return selection

    def _select_turn_cleared(
        self, room: int, cleared_views: Callable[[list[Any]], Iterator[tuple[list[Any], int]]]
    ) -> tuple[Selection, int] | None:
        """The first of the turn's cleared views whose window fits, with
        how many it cleared, each chosen from the headers with the cleared
        results standing in; ``None`` where the turn's results are not all
        in the view, or the policy is not one of the library's (which read
        the stand-ins): the whole view's clearing answers. :class:`_NoneFits`
        where none fits: the whole view's clearing, which clears the same
        results, finds none either."""
        if not self._own_policy:
            return None  # a policy of the caller's own may read the log itself: not the stand-ins
        nodes = [(seq, "raw") for seq in self._turn_seqs()]
        if not nodes:
            return None
        turn = self.log._render(nodes, strip=False)
        for view, count in cleared_views(turn):
            stood = {
                seq: message
                for (seq, _), message, was in zip(nodes, view, turn, strict=True)
                if message is not was  # cleared: a new message
            }
            try:
                with standing_in(self.log, stood):
                    selection = self._select(room)
            except OverBudgetError:
                continue
            # Every policy keeps the turn whole: a result it did not keep is
            # not in the view, and the view's own clearing must answer.
            kept = set(selection.kept)
            return (selection, count) if all(seq in kept for seq in stood) else None
        raise _NoneFits

    def _select_view_cleared(
        self, room: int, cleared_views: Callable[[list[Any]], Iterator[tuple[list[Any], int]]]
    ) -> tuple[Selection, int]:
        """:meth:`_select_turn_cleared` from the whole view, decoded."""
        cleared = 0

        def choose(view: list[Any]) -> Selection:
            nonlocal cleared
            for cleared_view, count in cleared_views(view):
                try:
                    selection = self._select(room, cleared_view)
                except OverBudgetError:
                    continue
                cleared = count
                return selection
            raise _NoneFits

        selection = from_view(self.log, choose, keys=_METADATA_READ.get(type(self.policy), EVERY_READ))
        return selection, cleared

    def _turn_seqs(self) -> list[int]:
        """The seqs of the turn in progress's messages, oldest first, from
        the headers: back from the head to the message that starts it (a
        user's with words and no result, as the log's windows tell one);
        empty where none does."""
        seqs = []
        for seq, headers in self._messages_back():
            seqs.append(seq)
            role, flags = int(headers["role"][seq]), int(headers["flags"][seq])
            if role == _ROLE_USER and flags & _FLAG_HAS_TEXT and not flags & _FLAG_RESULTS:
                return seqs[::-1]
        return []

    def _render(self, parts: PromptParts, selection: Selection, extra: str) -> dict[str, Any]:
        if self.provider == "anthropic":
            system: Any = selection.system
            if extra:
                if isinstance(system, list):
                    system = [*system, {"type": "text", "text": extra}]
                else:
                    system = SEPARATOR.join(text for text in (system, extra) if text)
            messages = selection.messages
            if not parts.prefix.system.tools:
                # As the renderer says them (no tools, no tool blocks): the
                # marks below are counted on what is sent.
                messages = tool_blocks_as_text(messages)
            try:
                request: dict[str, Any] = dict(parts.to_anthropic(messages, model=self.model, system=system))
            except CacheBreakpointsError as error:
                # The caller's marks, logged with its inputs and results,
                # pile up turn after turn: the newest are kept, as many as
                # the API takes beside the tools' own.
                messages = _newest_marks(messages, error)
                request = dict(parts.to_anthropic(messages, model=self.model, system=system))
            request["messages"] = _continued(request["messages"])
            request["max_tokens"] = self._reply_cap()
            return request
        request = dict(parts.to_openai(selection.messages, model=self.model, system=extra or None))
        if self.max_tokens is not None:
            request[_reply_cap_field(self.model)] = self.max_tokens
        return request

    def _count(self, request: Mapping[str, Any], selection: Selection) -> int:
        """The request's exact tokens; the selection's own count is used
        where this session's policy counted it in the request's encoding."""
        return request_tokens(self.tokenizer, request, selection if self._selection_counted else None)

    def _compaction(self) -> dict[str, Any]:
        if self.compactor is None:
            return {}
        status = self.compactor.status
        last = status.last
        return {
            "running": status.running,
            "written": dict(status.written),
            "last": None if last is None else last.status,
            # The user's rules the summaries in view could not carry (past
            # their rule bounds): they stay in the log, out of the window.
            "rules_left_out": status.rules_left_out,
            "paused": status.paused,
        }

    # -- recording -----------------------------------------------------------------

    def record(self, response: Any) -> tuple[ToolCall, ...]:
        """Append the model's reply (an SDK response object, or a message
        dict) with its tool calls and thinking blocks, and learn from its
        usage. Returns the tool calls to run; record each result with
        :meth:`record_tool_result`."""
        self._check_open()
        with self._quiet():
            return self._record(response)

    def _record(self, response: Any) -> tuple[ToolCall, ...]:
        given_id = response_id(response)
        message = message_of(response)
        if self.provider == "anthropic" and not OPENAI_REPLY_FIELDS.isdisjoint(message):
            # An OpenAI-compatible server's fields (a transcript's reply, say):
            # Anthropic refuses each.
            message = {k: v for k, v in message.items() if k not in OPENAI_REPLY_FIELDS}
        if given_id is not None and self._last_reply == (given_id, message):
            # A retry that recorded it already: logged twice, the model
            # would see its own reply twice (and a second set of its calls).
            # Some servers give every reply one id: the message must match too.
            raise InvalidInputError(f"the reply {given_id!r} is recorded already; record each response once")
        as_given = message
        if message.get("role") != "assistant":
            role = message.get("role")
            shown = repr(role) if isinstance(role, str) or role is None else f"of type {type(role).__name__}"
            raise InvalidInputError(f"a reply is an assistant message, got role {shown}")
        shape = _shape(message)
        if shape is not None and shape != self.provider:
            # Sent back to the other API, its calls and results would be refused or repaired away.
            raise InvalidInputError(f"this reply is in {shape}'s shape; the session sends to {self.provider}")
        check_call_ids(message)
        check_reply_blocks(message)
        message = with_text_arguments(message)
        check_sendable(message, self.provider, "reply")
        usage = usage_of(response)
        message, made, renamed = with_fresh_ids(message, self._call_ids)
        self.last_seq = int(self.log.append(message, timestamp=self._wall()))
        self.log._keep_appended(self.last_seq, message)
        self._last_reply = None if given_id is None else (given_id, as_given)
        self._call_ids.update(made)
        calls = calls_of(message)
        self._pending = {call.id: call for call in calls}
        # A reply paused within its turn (a server tool's long run) is sent
        # back as it is by the next prepare(), for the model to go on.
        self._renamed, self._replied, self._asked = {}, True, False
        self._to_answer = self.provider == "anthropic" and not calls and paused(response)
        if self._to_answer:
            self._paused.add(self.last_seq)  # a step of its turn, as a reply that made calls is
        for given, stored in renamed:
            self._renamed.setdefault(given, []).append(stored)
        if usage is not None:
            self._cached = usage.cached
            if self._counted and usage.prompt:
                # Logged, not warned: the reply is in the log, and a warning
                # made an error would raise from a record that happened.
                refused = self.budget._observe(self._counted, usage.prompt)
                if refused is not None:
                    logger.warning("context_core: %s", refused)
        if self._events is not None:
            self._events.message(message, self.last_seq)
        return tuple(calls)

    def record_tool_result(self, call_id: str, content: Any, *, is_error: bool = False) -> int:
        """Append the output of call ``call_id`` (a str, content blocks, or
        JSON-able data); its seq in the log. A call the last reply did not
        make, or one already answered, raises ``InvalidInputError``."""
        self._check_open()
        if not isinstance(call_id, str):
            raise InvalidTypeError(f"call_id must be a str, got {type(call_id).__name__}")
        if not isinstance(is_error, bool):
            raise InvalidTypeError(f"is_error must be a bool, got {type(is_error).__name__}")
        call_id = self._waiting_as(call_id)
        if call_id not in self._pending:
            waiting = ", ".join(self._pending) or "none"
            raise InvalidInputError(f"no tool call {call_id!r} is waiting for a result (waiting: {waiting})")
        result = result_message(self.provider, call_id, content, is_error)
        _check_result_blocks(result)
        check_sendable(result, self.provider, "result")
        try:
            with self._quiet():  # the workers wait, as for a reply: the append lets go of the interpreter
                seq = self.log.append(result, timestamp=self._wall())
        except (InvalidTypeError, InvalidInputError) as error:  # a block inside the result
            raise relocated(error, "message", "result") from None
        self.log._keep_appended(int(seq), result)
        self._last_reply = None  # a reply after this one is a new one, whatever its id
        call = self._pending.pop(call_id, None)  # not thread-safe, but a race is no KeyError
        self._to_answer = True
        self.last_seq = int(seq)
        if is_error and call is not None and self._events is not None:
            self._events.tool_failed(call.name, content)  # a lesson for later turns and sessions
        return self.last_seq

    def _waiting_as(self, call_id: str) -> str:
        """The id under which the call ``call_id`` waits: itself, or for a
        call renamed, the id it was stored as (``call_id`` if none waits)."""
        if call_id in self._pending:
            return call_id
        return next((stored for stored in self._renamed_as(call_id) if stored in self._pending), call_id)

    def _renamed_as(self, given: str) -> list[str]:
        """The stored ids of calls whose server gave ``given``: as renamed
        by this session's last reply; after a reopen, before any reply (the
        renaming not kept), the one pending ``given_N``, when the reply did
        not itself make ``given`` and no other ``given_M`` waits (else the
        caller answers by the id :attr:`pending` shows)."""
        if self._replied:
            return self._renamed.get(given, [])
        if given in self._last_calls:  # the server's own id in that reply: not renamed
            return []
        prefix = given + "_"
        found = [
            stored
            for stored in self._pending
            if stored.startswith(prefix) and stored[len(prefix) :].isdigit()
        ]
        return found if len(found) == 1 else []

    # -- closing -----------------------------------------------------------------

    def close(self, *, persist: bool = True, wait: bool = True) -> None:
        """Finish (``wait``) or abandon the compaction in flight, finish the
        store's writes the turns made due (``persist`` and ``wait``; else
        those not started are dropped, those done stay), persist what the
        messages not learned from yet taught (this session's, and those of
        one that ended without learning: a crash, a ``with`` block that
        raised) to MEMORY.md and the store, and close what the session
        opened. ``persist=False``: this session's messages are not learned
        from, now or by a later session. Idempotent. In a forked child (a
        worker that inherited the session) it only lets go of what the
        child holds: the session is the parent's to persist."""
        # A truthy string would persist a session meant to learn nothing.
        check_bools(persist=persist, wait=wait)
        persist, wait = bool(persist), bool(wait)  # a numpy bool too
        self._close(persist=persist, wait=wait, forget=not persist)

    def _close(self, *, persist: bool, wait: bool, forget: bool) -> None:
        """:meth:`close`; ``forget``: without ``persist``, record the
        messages as learned from, so no later session learns them."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:
            # A forked child's copy: its parent's background threads are not
            # here to wait for, and what the messages taught, or that they
            # were learned from, is the parent's to write.
            persist = forget = wait = False
        try:
            if self.compactor is not None:
                self.compactor.close(wait=wait)
            if self._held_facts is not None:
                self._held_facts.close()  # a job abandoned in flight holds nothing after this
            if self._events is not None:
                self._events.close(wait=wait and persist)
            if persist:
                self._persist()
            elif forget:
                if self._held_facts is not None:
                    self._held_facts.clear()  # learned nothing: compaction's facts neither
                if self.path:
                    write_learned(self.path, len(self.log))
        except BaseException:
            _close_parts(self._owned, raising=False)  # the error already on its way says more
            raise
        _close_parts(self._owned)

    def _persist(self) -> None:
        """MEMORY.md gets the messages not learned from yet, and the store
        those it did not take as the turns went; a failure of one does not
        keep the other from its turn (the first is raised, and the messages
        stay unlearned for the next close). Then the session directory
        records them as learned."""
        failures: list[BaseException] = []
        end = len(self.log)
        found = self._messages(self._first_seq, end)
        if self.memory is not None:
            skipped = facts_left_out = 0
            try:
                # Compaction's facts among the learnings, where they were
                # found: the later value of a key is the newer.
                for part in self._in_order(found):
                    if isinstance(part, list):
                        facts_left_out += _append_in_runs(self.memory, part)
                        continue
                    # A long session's text can pass what one extraction takes:
                    # it goes in runs that fit (a message over it alone is left out).
                    batches, left = in_batches(list(part), self.memory.max_batch_bytes)
                    skipped += left
                    for batch in batches:
                        facts_left_out += _learn_from(self.memory, batch)
            except Exception as error:  # the store still gets its turn
                failures.append(error)
            if skipped:
                logger.warning(
                    "context_core: %d message(s) over max_batch_bytes=%d left out of MEMORY.md's learnings",
                    skipped,
                    self.memory.max_batch_bytes,
                )
            if facts_left_out:
                logger.warning(
                    "context_core: %d fact(s) over max_line_bytes=%d left out of MEMORY.md's learnings",
                    facts_left_out,
                    self.memory.max_line_bytes,
                )
        # The store took most of this process's messages as the turns went;
        # the rest go now: those logged before it opened (by a process that
        # died, say), appended to the log directly, or whose write was
        # dropped by a close or failed (written again here).
        ended = None if self.store is None else getattr(self.store, "conversation_ended", None)
        taken = set() if self._events is None else self._events.taken()
        rest = [message for seq, message in found if seq not in taken]
        if ended is not None and rest:
            try:
                ended(rest, namespace=self.namespace, source=self.path or None)
            except Exception as error:
                failures.append(error)
        if self._events is not None:
            for tool, content in self._events.lessons_left():
                try:
                    self._events.write_lesson(tool, content)
                except Exception as error:
                    failures.append(error)
                    break  # the store that failed this one would fail the rest
        if failures:
            raise failures[0]  # the held facts are held still: learned again with the messages
        if self.path and end > self._first_seq:
            write_learned(self.path, end)
        if self._held_facts is not None:
            self._held_facts.clear()  # after the messages are marked learned: never one without the other

    def _in_order(self, found: list[tuple[int, dict[str, Any]]]) -> Iterator[list[Any] | tuple[Any, ...]]:
        """The messages ``found`` (seq, message) to learn from, as tuples of
        messages, with compaction's held facts (lists) between them: each
        just before the learnings of the message it was found in (of one
        message, the user's words are the newer value: a tool output an
        Anthropic input gives with them came first), so the later value of
        a key is the newer. Facts of messages a close learned from before
        (a reopened session compacting older turns) only fill a key memory
        does not hold: a value it holds was learned later."""
        held = [] if self._held_facts is None else self._held_facts.take()
        learned = [h for h in held if h.seq < self._first_seq]
        if learned:
            assert self.memory is not None
            known = {fact.identity for fact in self.memory.facts() if fact.identity is not None}
            gaps = [h for h in learned if h.fact.identity is None or h.fact.identity not in known]
            held = gaps + [h for h in held if h.seq >= self._first_seq]
        at = 0
        for seq, group in itertools.groupby(sorted(held, key=lambda h: h.seq), key=lambda h: h.seq):
            upto = at  # the messages before the one the facts were found in
            while upto < len(found) and found[upto][0] < seq:
                upto += 1
            if upto > at:
                yield tuple(message for _, message in found[at:upto])
            yield [h.fact for h in group]
            at = upto
        if at < len(found):
            yield tuple(message for _, message in found[at:])

    def _messages(self, since: int, until: int) -> list[tuple[int, dict[str, Any]]]:
        """The active path's messages with seqs in ``[since, until)``, with their seqs."""
        if since >= until:
            return []
        seqs = [seq for seq in self.log.path() if since <= seq < until]
        return [
            (seq, node)
            for seq, node in zip(seqs, self.log.read(seqs), strict=True)
            if isinstance(node, dict) and "role" in node
        ]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the background work the turns started (compaction's
        steps, the store's writes), at most ``timeout`` seconds each;
        returns whether none is left. A server never needs this: the work
        runs while the model answers. A replay with no model time does, or
        turns made back to back leave the workers no time at all."""
        timeout = wait_timeout(timeout)
        idle = True
        if self.compactor is not None:
            idle = self.compactor.join(timeout) and idle
        if self._events is not None:
            idle = self._events.join(timeout) and idle
        return idle

    def history(self, *, since: int = 0) -> list[dict[str, Any]]:
        """The messages of the log's active path as they were appended
        (summaries left out), from seq ``since`` on. Reads them all: for
        inspection and tests, not for a turn."""
        if isinstance(since, bool) or not isinstance(since, numbers.Integral):
            raise InvalidTypeError(f"since must be an int (a seq), not {type(since).__name__}")
        since = int(since)
        return [message for _, message in self._messages(since, len(self.log))]

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError("this session is closed")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        # A block that raised ends the session as a crash would: what it
        # said is learned from by the next session that closes.
        self._close(persist=exc[0] is None, wait=True, forget=False)


#: OpenAI models that refuse ``max_tokens`` for ``max_completion_tokens`` (the
#: reasoning models: their cap covers the hidden reasoning too).
_COMPLETION_CAP_MODELS = ("o1", "o3", "o4", "gpt-5")


def check_bools(**options: Any) -> None:
    """Options that switch something on or off are bools (numpy's too):
    any other value would be read as true or false by its truth."""
    for name, value in options.items():
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidTypeError(f"{name} must be a bool, got {type(value).__name__}")


def _check_tool_marks(marks: int) -> None:
    """Tools that carry more ``cache_control`` marks than a request may hold
    make every request refused: said at open, before an input is logged."""
    if marks > MAX_BREAKPOINTS:
        raise too_many_breakpoints("the tools carry", marks, MAX_BREAKPOINTS)


def _reply_cap_field(model: str) -> str:
    return "max_completion_tokens" if model.startswith(_COMPLETION_CAP_MODELS) else "max_tokens"


def _newest_marks(messages: list[Any], error: CacheBreakpointsError) -> list[Any]:
    """``messages`` with the ``cache_control`` marks of the oldest taken off
    (copies: the log's own stay as logged) until those left and the rest of
    the request's (``error``: its count and the API's limit) fit."""
    marked = count_breakpoints(messages)
    room = (error.limit or 0) - ((error.breakpoints or 0) - marked)
    if room < 0:
        raise error  # the tools and system alone carry too many
    out = list(messages)
    for at, message in enumerate(out):
        if marked <= room:
            break
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list) and (here := count_breakpoints([message])):
            out[at] = {**message, "content": _unmarked(content)}
            marked -= here
    return out


def _unmarked(blocks: list[Any]) -> list[Any]:
    """``blocks`` without ``cache_control`` (a tool result's own blocks too)."""
    out = []
    for block in blocks:
        if isinstance(block, Mapping):
            block = {k: v for k, v in block.items() if k != "cache_control"}
            if isinstance(block.get("content"), list):
                block["content"] = _unmarked(block["content"])
        out.append(block)
    return out


def _continued(messages: list[Any]) -> list[Any]:
    """``messages``, where the last is the model's own (a reply paused
    within its turn, sent back for it to go on), with the whitespace its
    text ends in cut, and a text block left blank dropped: Anthropic
    refuses a request whose last message is the model's and ends in
    whitespace. The message is a copy (the log's own stays as recorded),
    so the request's count reads it anew."""
    last = messages[-1] if messages else None
    if not isinstance(last, Mapping) or last.get("role") != "assistant":
        return messages
    content = last.get("content")
    if isinstance(content, str):
        cut: Any = content.rstrip()
    elif isinstance(content, list):
        cut = list(content)
        while cut and _is_text(cut[-1]) and not cut[-1]["text"].strip():
            cut.pop()
        if cut and _is_text(cut[-1]):
            cut[-1] = {**cut[-1], "text": cut[-1]["text"].rstrip()}
    else:
        return messages
    if cut == content or not cut:  # nothing to cut, or nothing left to send
        return messages
    return [*messages[:-1], {**last, "content": cut}]


def _is_text(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _call_if_alive(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    alive = method()
    if alive is not None:
        alive()


def _memory_text(memories: Sequence[str]) -> str:
    return "Relevant memory:\n" + "\n".join(f"- {text}" for text in memories) if memories else ""


def _shape(message: Mapping[str, Any]) -> Provider | None:
    """The provider a reply's tool calls, thinking or server tool blocks are
    shaped for (``None``: either)."""
    if message.get("tool_calls"):
        return "openai"
    content = message.get("content")
    if isinstance(content, list) and any(_anthropic_block(b) for b in content):
        return "anthropic"
    return None


def _anthropic_block(block: Any) -> bool:
    """A reply's block only Anthropic takes: a call, thinking, or a server
    tool's use or result (``web_search_tool_result``, ``mcp_tool_result``...)."""
    kind = block.get("type") if isinstance(block, Mapping) else None
    if not isinstance(kind, str):
        return False
    return kind in _ANTHROPIC_REPLY_BLOCKS or (kind.endswith("_tool_result") and kind != "tool_result")


_ANTHROPIC_REPLY_BLOCKS = frozenset(
    {"tool_use", "thinking", "redacted_thinking", "server_tool_use", "mcp_tool_use"}
)


#: The input's block types one provider takes and the other refuses (the
#: repair keeps block types it does not know: the APIs add new ones).
_INPUT_BLOCKS: dict[str, Provider] = {
    "image_url": "openai",
    "input_audio": "openai",
    "file": "openai",
    "image": "anthropic",
    "document": "anthropic",
    "search_result": "anthropic",
    "tool_result": "anthropic",
}


def _check_input_shape(message: Mapping[str, Any], provider: Provider) -> None:
    """An input block (an attachment, say) in the other provider's shape
    would be logged, then refused by the API in every request after."""
    content = message.get("content")
    if not isinstance(content, list):
        return
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, Mapping) else None
        shape = _INPUT_BLOCKS.get(kind) if isinstance(kind, str) else None
        if shape is not None and shape != provider:
            raise InvalidInputError(
                f"user_input content[{i}]: a {kind!r} block is {shape}'s shape; the session sends to"
                f" {provider}, which refuses it"
            )
        lacking = _lacking(block) if shape is not None else None
        if lacking is not None:
            raise InvalidInputError(
                f"user_input content[{i}]: a {kind!r} block {lacking}, which the API refuses"
            )


def _check_result_blocks(result: Mapping[str, Any]) -> None:
    """A tool output's blocks the API would refuse in the result (as it
    would in an input: an image with no data, a document with no source,
    the other provider's shape, a result or call inside it): refused here,
    or logged they would be refused in every request while the turn is in
    the window."""
    blocks = result["content"][0]["content"] if result.get("role") == "user" else None
    if not isinstance(blocks, list):
        return
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind in ("tool_result", "tool_use", "server_tool_use"):
            raise InvalidInputError(f"result.content[{i}]: a {kind!r} block inside a tool result")
        if isinstance(kind, str) and _INPUT_BLOCKS.get(kind) == "openai":
            raise InvalidInputError(
                f"result.content[{i}]: a {kind!r} block is openai's shape; the session sends to"
                " anthropic, which refuses it"
            )
        lacking = _lacking(block) if isinstance(block, Mapping) else None
        if lacking is not None:
            raise InvalidInputError(f"result.content[{i}]: a {kind!r} block {lacking}, which the API refuses")


def _lacking(block: Mapping[str, Any]) -> str | None:
    """What an input block lacks that its API requires (``None``: nothing):
    logged without it, the block would be refused in every request after."""
    kind = block.get("type")

    def named(value: Any, *keys: str) -> bool:
        return isinstance(value, Mapping) and any(isinstance(value.get(k), str) and value[k] for k in keys)

    if kind == "image_url":
        given = block.get("image_url")
        return None if named(given, "url") or (isinstance(given, str) and given) else "has no image_url.url"
    if kind == "input_audio":
        audio = block.get("input_audio")
        return None if named(audio, "data") and named(audio, "format") else "has no audio data or format"
    if kind == "file":
        return None if named(block.get("file"), "file_id", "file_data") else "has no file_id or file_data"
    if kind in ("image", "document"):
        source = block.get("source")
        if not isinstance(source, Mapping) or not named(source, "type"):
            return "has no source"
        kind = source["type"]
        missing = [key for key in _SOURCE_NEEDS.get(kind, ()) if not named(source, key)]
        return f"has a {kind} source with no {' or '.join(missing)}" if missing else None
    return None


#: What an Anthropic image or document source of each type must name.
_SOURCE_NEEDS: dict[str, tuple[str, ...]] = {
    "base64": ("data", "media_type"),
    "url": ("url",),
    "file": ("file_id",),
}


def _with_repair(error: LogCorruptError, where: str, *, close_first: bool = False) -> LogCorruptError:
    """``error`` (its fields kept), naming the repair of the log at ``where``
    (``close_first``: once the session using it is closed)."""
    then = "close the session, then " if close_first else ""
    hinted = LogCorruptError(f"{error}; {then}MessageLog.repair({where!r}) keeps every intact record")
    hinted.file, hinted.offset, hinted.reason = error.file, error.offset, error.reason
    return hinted


def _open_log(where: str, model: str, durability: str) -> MessageLog:
    """The session's log: a new one (or one a kill left unfinished) counts
    in the model's encoding (o200k_base for models whose tokenizer is not
    public); an existing one keeps its own, for :func:`_check_model_encoding`
    to judge."""
    wanted = Tokenizer.for_model(model, fallback="o200k_base").name
    try:
        return MessageLog.open(where, create=True, durability=durability, new_encoding=wanted)
    except LogLockedError as error:
        # The log's own advice names options Session.open does not take.
        raise LogLockedError(
            f"{where}: another Session (or a MessageLog) has this session open; close it"
            " first (a session has one writer: a server keeps one Session a conversation)"
        ) from error


def _check_model_encoding(model: str, encoding: str) -> None:
    """A log counts in the encoding it was made with: reopened for a model
    whose public tokenizer is another, every count would be that of the
    wrong tokenizer, and requests the API refuses would be reported as
    fitting. (A model whose tokenizer is not public, Claude's, is counted
    in any and corrected by the learned ratio.)"""
    try:
        wanted = Tokenizer.for_model(model).name
    except UnknownModelError:
        return
    if wanted != encoding:
        error = ModelEncodingError(
            f"this session's log counts tokens in {encoding}, and {model} counts in {wanted}:"
            f" open a new session path for {model}, or reopen this one with a model of {encoding}"
        )
        error.encoding, error.model_encoding = encoding, wanted
        raise error


def _undo_open(root: str, made: bool, owned: Sequence[Any]) -> None:
    """Closes what a failed open made and, so no half-made session is left,
    removes the directory it made, but only what can be no one else's:
    while this open holds the log's lock (a writer waiting for it gets it
    after the removal, and finds no session), with the log holding no
    record and no other open having marked the directory with its
    provider. Another server may have opened the new directory, written
    and closed between this open making it and taking the lock. A log
    whose own open failed (an interrupt, a full disk) is opened again for
    its lock, made whole if it was left half made, and judged the same."""
    log = next((part for part in owned if isinstance(part, MessageLog)), None)
    if made and log is None:
        with contextlib.suppress(ContextCoreError, OSError):  # held by another: theirs
            log = MessageLog.open(os.path.join(root, "log"), create=True, durability="never")
            owned = [*owned, log]
    if made and log is not None and len(log) == 0 and not os.path.exists(os.path.join(root, "provider")):
        shutil.rmtree(root, ignore_errors=True)
    _close_parts(owned, raising=False)


def _same_results(logged: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    """Whether ``given`` is the input ``logged`` was, its tool results naming
    their calls by the ids the server gave (``t1``) where the log holds those
    they were stored under (``t1``, or renamed ``t1_2``): the same results
    given again after the model's call failed."""
    stored, said = answered_ids(logged), answered_ids(given)
    if not said or len(stored) != len(said):
        return False
    for held, named in zip(stored, said, strict=True):
        renamed = held.startswith(named + "_") and held[len(named) + 1 :].isdigit()
        if held != named and not renamed:
            return False
    return _with_result_ids(dict(given), stored) == logged


def _with_result_ids(message: dict[str, Any], ids: Sequence[str]) -> dict[str, Any]:
    """``message`` with its tool results naming their calls by ``ids``, in
    order (see :meth:`Session._result_ids`)."""
    if list(answered_ids(message)) == list(ids):
        return message
    left = iter(ids)

    def named(block: Any) -> Any:
        given = block.get("tool_use_id") if isinstance(block, Mapping) else None
        if isinstance(given, str) and block.get("type") == "tool_result":
            return {**block, "tool_use_id": next(left)}
        return block

    return {**message, "content": [named(block) for block in message["content"]]}


def _close_parts(owned: Sequence[Any], *, raising: bool = True) -> None:
    """Closes what a session (or a failed open) opened: the store, then the
    log, each of them even if one before it fails (its store's last write
    meeting a busy database or a full disk would otherwise leave the log
    locked until the process ends); the first failure is raised, if
    ``raising``."""
    failure: Exception | None = None
    for part in reversed(owned):
        try:
            part.close()
        except Exception as error:
            failure = failure or error
    if failure is not None and raising:
        raise failure


def _session_directory(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """``path`` as a str, made a directory if it is not one yet; and
    whether this made it."""
    try:
        root = os.fspath(path)
    except TypeError:
        raise InvalidTypeError(f"path must be a str or a path, got {type(path).__name__}") from None
    if not isinstance(root, str) or not root or "\0" in root:
        raise InvalidInputError(f"path must be a directory's name, got {root!r}")
    check_text(root, f"path {root!r}")  # a name os.fsdecode kept undecodable bytes of
    try:
        os.makedirs(root)
        return root, True
    except FileExistsError:
        if os.path.isdir(root):
            return root, False
        raise storage_error(f"{root}: a file, not a session directory", errno.ENOTDIR, root) from None
    except OSError as error:
        raise storage_error(
            f"{root}: cannot use it as a session directory: {error.strerror or error}", error.errno, root
        ) from error


def _check_provider(root: str, provider: Provider, log: MessageLog) -> None:
    """A session directory keeps the provider it was made for: its log holds
    that provider's message shapes, which the other API refuses."""
    marker = os.path.join(root, "provider")
    try:
        try:
            with open(marker, encoding="utf-8") as handle:
                kept = handle.read(64).strip()  # a provider's name, or the file is not a marker
        except FileNotFoundError:
            kept = ""
        if not kept:
            # Written whole, by a rename, and synced (a power loss must not
            # empty the marker of a session with turns); an empty one (a
            # kill while an earlier version wrote it in place) names nothing,
            # and no turn was ever taken: the open that wrote it never returned.
            # One removed by hand leaves the log to tell: its shapes (tool
            # calls, thinking, input blocks) are the provider's it was for.
            found = shape_of(log)
            if found is not None and found != provider:
                raise InvalidInputError(
                    f"{root} holds a session for {found} (its log's messages are in {found}'s shapes,"
                    f" and its provider marker is gone); it cannot be sent to {provider}"
                    " (open a new directory)"
                )
            write_by_rename(marker, provider + "\n", durable=True)
            return
    except OSError as error:
        raise storage_error(f"{marker}: {error.strerror or error}", error.errno, marker) from error
    except UnicodeDecodeError:
        raise InvalidInputError(f"{marker}: not a provider's name (not UTF-8 text)") from None
    if kept not in ("openai", "anthropic"):
        raise InvalidInputError(f"{marker}: not a provider's name ({kept[:32]!r}): 'openai' or 'anthropic'")
    if kept != provider:
        raise InvalidInputError(
            f"{root} holds a session for {kept}; it cannot be sent to {provider} (open a new directory)"
        )


def shape_of(messages: Iterable[Any]) -> Provider | None:
    """The provider the first of ``messages`` shaped for one API only is for
    (its tool calls or results, thinking, server tool or input blocks);
    ``None``: every one would go to either. Reads a log's nodes too (its
    summaries' texts and branch markers are passed over)."""
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        found = _shape(message)
        if found is None and message.get("role") == "tool":
            found = "openai"
        content = message.get("content")
        if found is None and isinstance(content, list):
            found = next(
                (
                    _INPUT_BLOCKS[b["type"]]
                    for b in content
                    if isinstance(b, Mapping) and b.get("type") in _INPUT_BLOCKS
                ),
                None,
            )
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def _both(
    first: contextlib.AbstractContextManager[None], second: contextlib.AbstractContextManager[None]
) -> Iterator[None]:
    with first, second:
        yield


def _learn_from(memory: MemoryFiles, batch: list[Mapping[str, Any]]) -> int:
    """MEMORY.md's learnings from ``batch``; the facts left out. The facts
    a run yields can pass the limit its text kept to (a label and a dash
    make a short rule twice as long): such a run goes in halves, and one
    message's facts in runs that fit, a fact whose line alone is over
    ``max_line_bytes`` left out. Any other error (a lock not taken, a full
    disk) is raised: the next runs would meet it too."""
    try:
        memory.persist_learnings(batch)
    except MemoryLimitError:
        if len(batch) > 1:
            half = len(batch) // 2
            return _learn_from(memory, batch[:half]) + _learn_from(memory, batch[half:])
        return _append_in_runs(memory, to_facts(extract_facts(batch)))
    return 0


def _append_in_runs(memory: MemoryFiles, facts: list[Fact]) -> int:
    """``facts`` appended in runs within ``max_batch_bytes``; those left
    out, each over ``max_line_bytes`` as a line (sized as the batch check
    sizes them)."""
    runs, left_out = in_runs(
        facts,
        lambda fact: fact.line_bytes,
        memory.max_batch_bytes,
        min(memory.max_line_bytes, memory.max_batch_bytes),
    )
    for run in runs:
        memory.append(run)
    return left_out


def _memory_files(memory: MemoryFiles | bool | None, root: str) -> MemoryFiles | None:
    if memory is None or memory is True:
        return MemoryFiles(os.path.join(root, "memory"))
    if memory is False:
        return None
    if not isinstance(memory, MemoryFiles):
        raise InvalidTypeError(f"memory must be a MemoryFiles, None or False, got {type(memory).__name__}")
    return memory


def _prefetch_of(store: Any) -> Callable[..., None] | None:
    """``store``'s ``prefetch`` if it is a :class:`MemoryStore` (a method
    of that name on a store of the caller's own may mean something else)."""
    if store is None:
        return None
    from context_core.memory_store import MemoryStore

    return getattr(store, "prefetch", None) if isinstance(store, MemoryStore) else None


def _store(store: Any, root: str) -> Any:
    if store is False:
        return None
    if store is None or store is True:
        from context_core.memory_store import MemoryStore

        return MemoryStore(os.path.join(root, "memory.db"))
    if not callable(getattr(store, "search", None)):
        raise InvalidTypeError(f"store must be a MemoryStore, None or False, got {type(store).__name__}")
    return store


def _sections(parts: PromptParts, selection: Selection, extra: int) -> dict[str, int]:
    prompt = parts.breakdown
    chosen = selection.breakdown
    return {
        "tools": prompt.tools,
        "system": prompt.system,
        "stable": prompt.stable,
        "volatile": prompt.volatile,
        "pinned": chosen.pinned,
        "global_summary": chosen.global_summary,
        "memories": chosen.memories + extra,
        "segments": chosen.segments,
        "recent": chosen.recent,
        "input": chosen.input,
    }
