"""The :class:`Compactor`: summaries made ahead of need, off the turn's path.

One compaction runs per log at a time (a lock per log object in this
process; across processes the log's single writer already ensures it, since
only the writer can append). A job reads what :func:`next_job` plans, asks
the summarizer, and writes the summary as one atomic append of a summary
node, which also moves the log's ``last_summary_index``: a crash at any
point leaves the old view or the new one. Before it writes, the job checks
that the log still is as planned (no summary written or history rewound
meanwhile); otherwise it writes nothing.

A failure (a rejected summary, a model error, a timeout) never reaches the
turn: the job is tried again after a backoff (``backoff`` seconds, doubled
per failure up to ``max_backoff``), and after ``max_failures`` in a row the
circuit breaker pauses compaction (logged, and :attr:`CompactorStatus.paused`)
until :meth:`Compactor.resume`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np

from context_core._core import SEGMENTS_KEPT
from context_core._logging import library_logger
from context_core._threads import thread_end, wait_timeout
from context_core.compaction.plan import Job, Wait, plan, starts_turn, turn_starts
from context_core.errors import ContextCoreError, InvalidInputError, InvalidTypeError, LogClosedError
from context_core.log import MessageLog
from context_core.summarize import Rejected, Summarizer, Summary
from context_core.summarize.offline import own_text, rule_texts
from context_core.summarize.rules import line_tokens

__all__ = ["Compactor", "CompactorStatus", "Outcome"]

_T = TypeVar("_T")

log = library_logger("context_core.compaction")

_LOCKS: weakref.WeakKeyDictionary[MessageLog, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _takes_between(summarize: Callable[..., Any]) -> bool:
    """Whether ``summarize`` takes ``between=`` (a subclass may not)."""
    try:
        parameters = inspect.signature(summarize).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "between" or p.kind is p.VAR_KEYWORD for p in parameters)


def _being_cancelled() -> bool:
    """Whether the running task was asked to stop (a CancelledError is then
    the task's own, not one its model call raised). Before Python 3.11,
    which cannot tell, every one is taken as the task's."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


def _raised(job: Job, error: BaseException, what: str = "the summarizer") -> Outcome:
    log.error("compaction: %s raised", what, exc_info=error)
    return Outcome("failed", job.level, job.covers, reason=f"{what} raised {type(error).__name__}: {error}")


def _log_lock(message_log: MessageLog) -> threading.Lock:
    with _LOCKS_GUARD:
        lock = _LOCKS.get(message_log)
        if lock is None:
            lock = _LOCKS[message_log] = threading.Lock()
        return lock


@dataclass(frozen=True)
class Outcome:
    """What one compaction step did. ``status``: ``"written"`` (``seq`` is
    the new summary node), ``"idle"`` (nothing due), ``"busy"`` (another
    job runs on this log), ``"waiting"`` (backing off or paused), ``"stale"``
    (the log changed while the summary was made; nothing written),
    ``"rejected"`` or ``"failed"`` (``reason`` says why; nothing written),
    ``"abandoned"`` (closed first; nothing written)."""

    status: str
    level: int | None = None
    covers: tuple[int, int] | None = None
    seq: int | None = None
    reason: str | None = None
    facts: int = 0
    #: The user's rules the summary left out, past ``rule_tokens`` (a
    #: global summary) or ``segment_rule_tokens`` (a segment summary).
    rules_left_out: int = 0


@dataclass(frozen=True)
class CompactorStatus:
    """The compactor's state: a job ``running``; ``failures`` in a row;
    ``paused`` by the circuit breaker; ``retry_at`` (on the compactor's
    clock) before which nothing is tried; the ``last`` outcome; the
    counts of summaries ``written`` at each level; and ``rules_left_out``,
    the user's rules out of the window's summaries: those the newest global
    summary could not carry, and those of each segment summary written
    after it (each :attr:`Outcome.rules_left_out`; the last step is most
    often ``idle``, which carries none). Like ``written``, counted since
    this compactor started."""

    running: bool
    failures: int
    paused: bool
    retry_at: float | None
    last: Outcome | None
    written: Mapping[int, int]
    rules_left_out: int = 0


#: A header's "no node" (the root's parent).
_NONE = 2**64 - 1


#: Payloads a job reads and decodes between two yields.
_READ_STEP = 4

#: Up to this many new nodes, schedule() checks them one by one.
_FEW = 64


def _counted_rows(
    rows: list[tuple[int, int, int, int, int]], length: int, head: int | None
) -> tuple[int, int] | None:
    """(turns started, tokens) of the messages appended after ``head``
    (rows of parent, kind, role, flags, tokens from seq ``length`` on), or
    ``None`` unless they extend the path from ``head`` one after another."""
    parent = _NONE if head is None else head
    turns = tokens = 0
    for seq, (up, kind, role, flags, size) in enumerate(rows, length):
        if up != parent or kind != 0:
            return None
        turns += starts_turn(kind, role, flags)
        tokens += size
        parent = seq
    return turns, tokens


def _counted_arrays(new: np.ndarray, length: int, head: int | None) -> tuple[int, int] | None:
    """:func:`_counted_rows` over many headers at once."""
    seqs = np.arange(length, length + len(new), dtype=np.uint64)
    parents = new["parent"]
    first = _NONE if head is None else head
    if int(parents[0]) != first or not np.array_equal(parents[1:], seqs[:-1]) or not np.all(new["kind"] == 0):
        return None
    return int(turn_starts(new).sum()), int(new["tokens"].sum())


#: The longest a job's step waits at a yield for a turn to end: a turn
#: takes milliseconds, and a caller that never ends one must not stop
#: compaction for good.
TURN_WAIT = 0.25

#: The longest a turn waits, as it starts, for a worker in the middle of a
#: stage to reach its next yield (stages hold the interpreter well under a
#: millisecond). A worker that left its last yield longer ago than this is
#: taken to be waiting on something else (the model's reply), holding
#: neither the interpreter nor a core, and is not waited for.
STAGE_WAIT = 0.002


class _TurnGate:
    """The turns in progress, and the workers between two yields.

    While a turn runs, a worker waits at each of its yields. Otherwise, each
    time the turn lets go of the interpreter (every SQLite call, every scan
    in Rust) the worker would take it, and the turn would wait up to the
    switch interval (5 ms) to get it back; the worker's own Rust work would
    take a core from the turn's threads. A turn that starts while a worker
    is in the middle of a stage waits (at most :data:`STAGE_WAIT`) for it
    to reach its next yield, for the same reason."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state = threading.Condition(threading.Lock())
        # Each turn in progress (a token of its own) -> its thread. A token,
        # not a count per thread: letting go of one twice is harmless, so
        # an interrupt while it is let go of can be met by trying again.
        self._holders: dict[object, int] = {}
        self._working: dict[int, float] = {}  # thread -> when it left its last yield

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        me, token = threading.get_ident(), object()
        try:
            with self._state:
                self._holders[token] = me
                until = self._clock() + STAGE_WAIT
                while True:
                    now = self._clock()
                    busy = [t for t, since in self._working.items() if t != me and now - since < STAGE_WAIT]
                    if not busy or now >= until:
                        break
                    self._state.wait(until - now)
            yield
        finally:
            try:
                self._let_go(token)
            except BaseException:  # interrupted taking the lock (Ctrl-C): once more, then raised
                self._let_go(token)
                raise

    def _let_go(self, token: object) -> None:
        with self._state:
            self._holders.pop(token, None)
            self._state.notify_all()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """This thread runs a job's stages until the block ends: a turn that
        starts meanwhile waits for its next yield."""
        me = threading.get_ident()
        with self._state:
            self._working[me] = self._clock()
        try:
            yield
        finally:
            with self._state:
                self._working.pop(me, None)
                self._state.notify_all()

    def wait(self, owner: int | None = None) -> None:
        """Between a job's stages: let a thread waiting for the interpreter
        (the turn) run now, rather than after the switch interval, then wait
        for the turns to end (not for one this thread runs, or ``owner``:
        the thread a helper thread works for)."""
        time.sleep(0)
        me = threading.get_ident() if owner is None else owner
        with self._state:
            working = self._working.pop(me, None) is not None
            if working:
                self._state.notify_all()
            if any(t != me for t in self._holders.values()):
                self._state.wait_for(lambda: not any(t != me for t in self._holders.values()), TURN_WAIT)
            if working:
                self._working[me] = self._clock()

    def waiter(self) -> Callable[[], None]:
        """:meth:`wait` on behalf of this thread, for a helper thread to call
        (the model call's, which runs the summarizer): a turn this thread
        holds must not make its own work wait."""
        return functools.partial(self.wait, threading.get_ident())

    def staged(self, fn: Callable[..., _T]) -> Callable[..., _T]:
        """``fn`` run as :meth:`working` stages (for a worker thread's target)."""

        def run(*args: Any) -> _T:
            with self.working():
                return fn(*args)

        return run


#: An idle worker thread ends after this long without a drain (the next
#: schedule() starts another): a server holding many sessions open keeps a
#: thread only for those that compacted lately. It also ends once its
#: compactor is collected (woken at once, unless the lock is held just then).
IDLE_EXIT = 30.0


def _work(owner: weakref.ReferenceType[Compactor], signal: threading.Condition) -> None:
    """A compactor's worker thread: a drain each time its :meth:`~Compactor.schedule`
    asks, until it closes or :data:`IDLE_EXIT` passes without one. It holds
    the compactor only while it drains, so a compactor dropped without a
    close is still freed (and its log's lock with it)."""
    while True:
        with signal:
            compactor = owner()
            if compactor is None:
                return
            if not (compactor._draining or compactor._closing):
                del compactor  # not held while waiting
                signal.wait(IDLE_EXIT)
                compactor = owner()
                if compactor is None:
                    return
                if not (compactor._draining or compactor._closing):
                    # Idle (or woken for nothing): ended, and forgotten under
                    # the lock, so a schedule() after this starts another.
                    if compactor._thread is threading.current_thread():
                        compactor._thread = None
                    return
            if not compactor._draining:
                return  # closing
        try:
            compactor._drain()
        except BaseException:  # kept alive: a schedule() meanwhile counts on it
            with contextlib.suppress(Exception):  # a logging handler that raises
                log.exception("a compaction drain raised")
        finally:  # the joiners are woken whatever happened
            with signal:
                compactor._draining = False
                del compactor  # before the joiners wake: a drop after join() frees it
                signal.notify_all()


# Every compactor. A forked child has none of the parent's threads (their
# workers, the turns other threads were in), and may have copied a lock one
# held (a worker takes it at each wake): each gets fresh locks and no
# worker there.
_COMPACTORS: weakref.WeakSet[Compactor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _LOCKS_GUARD
    for compactor in list(_COMPACTORS):
        compactor._state = threading.Lock()
        compactor._signal = threading.Condition(compactor._state)
        compactor._draining = False
        compactor._thread = None
        compactor._finalizer = None  # the new lock's, made with the child's first worker
        # The gate's lock is taken at every yield and every turn; its turns
        # and stages were the parent's threads'.
        compactor._gate = _TurnGate(compactor._gate._clock)
    # A log's job lock is held for a drain's whole model call: copied held,
    # the child's compactions would find it busy for good.
    _LOCKS_GUARD = threading.Lock()
    for message_log in list(_LOCKS):
        _LOCKS[message_log] = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _wake(signal: threading.Condition) -> None:
    """A collected compactor's worker woken to end; not if the lock is held
    (the collection may run on a thread holding it), then at its next check."""
    if signal.acquire(blocking=False):
        try:
            signal.notify_all()
        finally:
            signal.release()


async def _until_set(ended: threading.Event, finish: asyncio.Future[Any]) -> None:
    """Wait until ``ended`` is set by a worker thread, through any further
    cancels (a second cancel, or the loop's shutdown cancelling ``finish``
    itself while its thread still runs): the write takes milliseconds."""
    while not ended.is_set():
        try:
            if finish.done():
                await asyncio.sleep(0.001)
            else:
                await asyncio.wait([finish])
        except asyncio.CancelledError:
            continue


class _SegmentInput(NamedTuple):
    """What a segment summary reads: the messages, the ``(seq, text)`` of
    the rules it carries, and how many it left out."""

    messages: list[Any]
    rules: list[tuple[int, str]]
    left_out: int


class _GlobalInput(NamedTuple):
    """What a global summary reads: the segment summaries' texts, the
    user's rules it carries, and how many it left out."""

    segments: list[str]
    rules: list[str]
    left_out: int


def _first_within(rules: list[str], count: Callable[[str], int], tokens: int) -> list[str]:
    """The first of ``rules`` whose counts (each on a line of its own, as
    a summary carries it) add up to at most ``tokens``: none, if the first
    alone is over (a rule of thousands of tokens, one long sentence)."""
    kept: list[str] = []
    used = 0
    for rule in rules:
        used += line_tokens(rule, count)
        if used > tokens:
            break
        kept.append(rule)
    return kept


def _warn_left_out(summary: str, carried: int, stated: int, option: str, tokens: int) -> None:
    if carried < stated:
        log.warning(
            "compaction: the %s summary carries the first %d of %d rules the user stated (%s=%d);"
            " the %d after them stay in the log, not in the summary",
            summary,
            carried,
            stated,
            option,
            tokens,
            stated - carried,
        )


def _rules_of(message: Any) -> list[str]:
    """The rules a message the log tagged ``constraint`` states: those its
    own text states (:func:`~context_core.summarize.offline.rule_texts`),
    judged by that text's own words. Tool results beside it (whose output
    may say "must", or hold a link) decide nothing; a message with none
    whose words do not say it was tagged by the caller, and is one rule."""
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    results = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    return rule_texts(own_text(message), tagged=not results)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidInputError(f"{name} must be >= 1, got {value}")
    return value


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InvalidInputError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class Compactor:
    """Compacts ``log`` with ``summarizer`` (default: the offline
    :class:`~context_core.summarize.Summarizer`).

    Parameters (all named; see :mod:`context_core.compaction.plan`):
    ``recent_turns`` (8) raw turns always kept; ``segment_turns`` (10) turns
    per segment summary; ``segments_kept`` (3) segment summaries in view
    before a global one merges them; ``tail_tokens`` (``None``: off) a raw
    tail size that starts a shorter segment early; ``global_input_tokens``
    (12,000) of segment summaries a global summary reads, newest first;
    ``rule_tokens`` (4,000) of the user's rules a global summary carries
    whole, and ``segment_rule_tokens`` (1,000) of its segment's a segment
    summary does: the first stated, in order, up to that many (a rule
    restated counts where it was first said). Past it the rest are left
    out, with a WARNING and ``Outcome.rules_left_out``: they stay in the
    log. Unbounded, a session whose user states rule after rule made its
    summaries larger than its window, and every later turn failed.
    ``memory`` (a :class:`~context_core.MemoryFiles`) receives the exact
    facts of each segment (``facts``, default
    :func:`~context_core.compaction.facts.exact_facts`), or, where it has
    ``hold(facts, seq)`` (a session's, which writes them at its close),
    holds them with the seq of the newest message each came from; ``timeout``
    (120 s) per job; ``backoff`` (5 s), ``max_backoff`` (600 s) and
    ``max_failures`` (5) for failures; ``clock`` (``time.monotonic``) the
    clock backoff is measured on.

    :meth:`compact` runs one step on the calling thread. :meth:`schedule`
    starts it in a worker thread and returns at once; :meth:`aschedule`
    starts it as an asyncio task. :meth:`close` / :meth:`aclose` wait for the
    job in flight or abandon it (nothing half-written either way).

    ``after_write`` (an attribute, ``None`` by default): called on the
    worker thread at the end of a drain that wrote a summary, after the
    turns in progress (a :class:`~context_core.Session` chooses its next
    window there, so the turn after a compaction does not pay for the
    changed view); what it raises is logged."""

    def __init__(
        self,
        log: MessageLog,
        summarizer: Summarizer | None = None,
        *,
        recent_turns: int = 8,
        segment_turns: int = 10,
        segments_kept: int = 3,
        tail_tokens: int | None = None,
        global_input_tokens: int = 12_000,
        rule_tokens: int = 4_000,
        segment_rule_tokens: int = 1_000,
        memory: Any = None,
        facts: Callable[[Sequence[Mapping[str, Any]]], list[Any]] | None = None,
        timeout: float = 120.0,
        backoff: float = 5.0,
        max_backoff: float = 600.0,
        max_failures: int = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(log, MessageLog):
            raise InvalidTypeError(f"log must be a MessageLog, got {type(log).__name__}")
        if summarizer is not None and not isinstance(summarizer, Summarizer):
            raise InvalidTypeError(f"summarizer must be a Summarizer, got {type(summarizer).__name__}")
        if memory is not None and not callable(getattr(memory, "hold", getattr(memory, "append", None))):
            raise InvalidTypeError(f"memory must be a MemoryFiles, got {type(memory).__name__}")
        self.log = log
        self.summarizer = summarizer or Summarizer()
        self.recent_turns = _positive_int("recent_turns", recent_turns)
        self.segment_turns = _positive_int("segment_turns", segment_turns)
        self.segments_kept = _positive_int("segments_kept", segments_kept)
        if segments_kept > SEGMENTS_KEPT:
            raise InvalidInputError(
                f"segments_kept must be at most {SEGMENTS_KEPT}, the segment summaries a log's view shows"
                f" after its global summary (got {segments_kept}): more would hide the oldest"
            )
        self.tail_tokens = None if tail_tokens is None else _positive_int("tail_tokens", tail_tokens)
        self.global_input_tokens = _positive_int("global_input_tokens", global_input_tokens)
        self.rule_tokens = _positive_int("rule_tokens", rule_tokens)
        self.segment_rule_tokens = _positive_int("segment_rule_tokens", segment_rule_tokens)
        self.memory = memory
        if facts is None:
            from context_core.compaction.facts import exact_facts

            facts = exact_facts
        self.facts = facts
        self.timeout = _seconds("timeout", timeout)
        self.backoff = _seconds("backoff", backoff)
        self.max_backoff = _seconds("max_backoff", max_backoff)
        self.max_failures = _positive_int("max_failures", max_failures)
        self.clock = clock
        self._state = threading.Lock()
        self._failures = 0
        self._paused = False
        self._retry_at: float | None = None
        self._last: Outcome | None = None
        self._left_out = 0  # by the newest global summary and the segments after it
        self._written = {2: 0, 3: 0}
        self._closing = False
        self._abandon = False
        # The worker thread, kept between drains (started by the first);
        # `_draining` while it runs one, `_signal` wakes it.
        self._thread: threading.Thread | None = None
        self._draining = False
        self._signal = threading.Condition(self._state)
        self._finalizer: weakref.finalize[[threading.Condition], Compactor] | None = None  # wakes the worker
        self._wait: tuple[int, int | None, Wait] | None = None
        self._task: asyncio.Task[Outcome] | None = None
        self._gate = _TurnGate()
        self.after_write: Callable[[], object] | None = None
        _COMPACTORS.add(self)

    def __repr__(self) -> str:
        return f"Compactor({self.log!r}, {self.summarizer!r})"

    # -- state ----------------------------------------------------------------------------------

    @property
    def status(self) -> CompactorStatus:
        with self._state:
            return CompactorStatus(
                running=self._running(),
                failures=self._failures,
                paused=self._paused,
                retry_at=self._retry_at,
                last=self._last,
                written=dict(self._written),
                rules_left_out=self._left_out,
            )

    def _running(self) -> bool:
        return self._thread_busy() or (self._task is not None and not self._task.done())

    def _thread_busy(self) -> bool:
        """The worker thread runs a drain (a forked child's copy of the
        parent's worker is not alive, so it never is there)."""
        return self._draining and self._thread is not None and self._thread.is_alive()

    def resume(self) -> None:
        """Lift the circuit breaker and the backoff: the next step runs."""
        with self._state:
            self._paused, self._failures, self._retry_at = False, 0, None

    def due(self) -> Job | None:
        """The step :meth:`compact` would take now, or ``None``."""
        # Read before planning: a node appended meanwhile counts as new.
        length, head = len(self.log), self.log.head
        step = plan(
            self.log,
            recent_turns=self.recent_turns,
            segment_turns=self.segment_turns,
            segments_kept=self.segments_kept,
            tail_tokens=self.tail_tokens,
        )
        with self._state:
            # Remember how far the log is from a job, so schedule() skips
            # turns that cannot make one due (no thread, no plan).
            self._wait = (length, head, step) if isinstance(step, Wait) else None
        return step if isinstance(step, Job) else None

    def _cannot_be_due(self) -> bool:
        """Nothing can be due yet, by what the last plan said. Cheap: it
        reads the headers of the nodes appended since the last call only,
        then moves the bound past them, so a turn costs O(its new nodes)."""
        with self._state:
            remembered = self._wait
        if remembered is None:
            return False
        length, head, wait = remembered
        end = len(self.log)
        if end < length or wait.turns <= 0:
            return False
        if end - length > _FEW:
            counted = _counted_arrays(self.log.headers()[length:end], length, head)
        else:  # a turn's few nodes: one by one, cheaper than a dozen array calls
            rows = self.log.headers()[length:end][["parent", "kind", "role", "flags", "tokens"]].tolist()
            counted = _counted_rows(rows, length, head)
        # Only appends on the planned path keep the plan: a rewind, a branch
        # or a summary since means planning again.
        if counted is None or self.log.head != (end - 1 if end > length else head):
            return False
        turns = wait.turns - counted[0]
        tokens = None if wait.tokens is None else wait.tokens - counted[1]
        if turns <= 0 or (tokens is not None and tokens <= 0):
            return False
        with self._state:
            if self._wait is remembered:  # a plan made meanwhile is newer
                self._wait = (end, end - 1 if end > length else head, Wait(turns, tokens))
        return True

    def _in_worker(self) -> bool:
        """Whether this runs in the compactor's own thread or task."""
        if threading.current_thread() is self._thread:
            return True
        try:
            return self._task is not None and asyncio.current_task() is self._task
        except RuntimeError:  # no event loop here
            return False

    def _waiting(self) -> Outcome | None:
        # Closed: no step starts, except the one a worker already runs when
        # close() waits for it (that one stops only once close gives up).
        if self._abandon or (self._closing and not self._in_worker()):
            return Outcome("abandoned", reason="the compactor is closed")
        if self._paused:
            return Outcome("waiting", reason=f"paused after {self._failures} failures in a row")
        if self._retry_at is not None and self.clock() < self._retry_at:
            return Outcome("waiting", reason="backing off after a failure")
        return None

    # -- one step -------------------------------------------------------------------------------

    def _claim(self) -> threading.Lock | Outcome:
        """The log's job lock, taken; or why no step starts now."""
        with self._state:
            waiting = self._waiting()
        if waiting is not None:
            return self._record(waiting)
        lock = _log_lock(self.log)
        if not lock.acquire(blocking=False):
            return Outcome("busy")
        return lock

    def turn(self) -> contextlib.AbstractContextManager[None]:
        """A context manager around one turn of the agent loop (``Session``
        wraps ``prepare`` and ``record`` in it): while it is held, the
        worker's steps wait at their next yield, at most :data:`TURN_WAIT`
        seconds, so the turn has the interpreter and the cores to itself.
        Turns on several threads may overlap."""
        return self._gate.held()

    def compact(self) -> Outcome:
        """Run the next due step now, on this thread (the summarizer's model
        call is bounded by ``timeout``)."""
        lock = self._claim()
        if isinstance(lock, Outcome):
            return lock
        try:
            job = self.due()
            if job is None:
                return self._record(Outcome("idle"))
            self._gate.wait()
            prepared = self._prepare(job)
            self._gate.wait()
            try:
                result = self._run_sync(job, prepared)
            # A summarizer's bug backs off like a failure; so does a
            # CancelledError its model raised (a client's task cancelled
            # under it): nothing here was cancelled, and left to the drain
            # it would skip the backoff and the circuit breaker.
            except (Exception, asyncio.CancelledError) as error:
                return self._record(_raised(job, error))
            self._gate.wait()
            return self._finish_recorded(job, prepared, result)
        except LogClosedError as error:
            return self._record(Outcome("abandoned", reason=str(error)))
        finally:
            lock.release()

    async def acompact(self) -> Outcome:
        """:meth:`compact` as a coroutine: the model is awaited, the log
        work runs in a worker thread."""
        lock = self._claim()
        if isinstance(lock, Outcome):
            return lock
        handed_over = False  # once the write's thread owns the lock, it releases it
        try:
            job = await asyncio.to_thread(self._gate.staged(self.due))
            if job is None:
                return self._record(Outcome("idle"))
            prepared = await asyncio.to_thread(self._gate.staged(self._prepare), job)
            try:
                result = await asyncio.wait_for(self._asummarize(job, prepared), self.timeout)
            except asyncio.TimeoutError:
                result = Rejected(f"timed out after {self.timeout:g} s")
            except asyncio.CancelledError as error:
                if _being_cancelled():
                    raise
                return self._record(_raised(job, error))  # the model's own, as in compact()
            except Exception as error:  # a summarizer's bug backs off like a failure
                return self._record(_raised(job, error))
            ended = threading.Event()

            def write() -> Outcome:
                try:
                    return self._finish_recorded(job, prepared, result)
                finally:
                    lock.release()
                    ended.set()

            handed_over = True
            finish = asyncio.ensure_future(asyncio.to_thread(self._gate.staged(write)))
            try:
                return await asyncio.shield(finish)
            except asyncio.CancelledError:
                # The write is under way in its thread, which records what
                # it did and then releases the lock: no other job starts
                # beside it. The task ends only after it, so a closed
                # compactor writes nothing later, whatever else is cancelled.
                await _until_set(ended, finish)
                raise
        except LogClosedError as error:
            return self._record(Outcome("abandoned", reason=str(error)))
        finally:
            if not handed_over:
                lock.release()

    def _finish_recorded(self, job: Job, prepared: Any, result: Summary | Rejected) -> Outcome:
        """:meth:`_finish`, its outcome recorded; an error from it (a
        ``facts`` callable's bug) backs off like any failure."""
        try:
            outcome = self._finish(job, prepared, result)
        except LogClosedError as error:
            outcome = Outcome("abandoned", job.level, job.covers, reason=str(error))
        except Exception as error:
            outcome = _raised(job, error, "writing the summary (or its facts)")
        return self._record(outcome)

    def _prepare(self, job: Job) -> Any:
        """What the summarizer reads for ``job``: the messages and their
        rules (L2), or the segment texts and rules (L3)."""
        count = self.summarizer.tokenizer.count
        if job.level == 2:
            messages = self._read_in_steps(job.messages)
            at = {seq: i for i, seq in enumerate(job.messages)}
            rules: dict[str, int] = {}  # a rule said twice is carried once
            for seq in job.rules:
                if seq in at:
                    for text in _rules_of(messages[at[seq]]):
                        rules.setdefault(text, seq)
            bound = self.segment_rule_tokens
            carried = _first_within(list(rules), count, bound)
            _warn_left_out("segment", len(carried), len(rules), "segment_rule_tokens", bound)
            left_out = len(rules) - len(carried)
            return _SegmentInput(messages, [(rules[text], text) for text in carried], left_out)
        payloads = self.log.read(job.segments)
        texts = [str(p["summary"]) for p in payloads]
        kept: list[str] = []
        used = 0
        for text in reversed(texts):  # the newest first, up to the bound
            used += count(text)
            if used > self.global_input_tokens and kept:
                break
            kept.append(text)
        if len(kept) < len(texts):
            log.warning(
                "compaction: the global summary reads the newest %d of %d segment summaries"
                " (global_input_tokens=%d); the rules of the others are given to it (within rule_tokens)",
                len(kept),
                len(texts),
                self.global_input_tokens,
            )
        stated = self.log.read(job.rules)
        every = list(dict.fromkeys(text for m in stated for text in _rules_of(m)))
        carried = _first_within(every, count, self.rule_tokens)
        _warn_left_out("global", len(carried), len(every), "rule_tokens", self.rule_tokens)
        return _GlobalInput(kept[::-1], carried, len(every) - len(carried))

    def _read_in_steps(self, seqs: Sequence[int]) -> list[Any]:
        """The nodes' payloads, a few at a time: each read and decode of a
        large tool output holds the interpreter, so others run between."""
        out: list[Any] = []
        for start in range(0, len(seqs), _READ_STEP):
            if start:
                self._gate.wait()
            out.extend(self.log.read(seqs[start : start + _READ_STEP]))
        return out

    def _run_sync(self, job: Job, prepared: Any) -> Summary | Rejected:
        from context_core.llm._deadline import DeadlinePassed, call_within

        between = self._gate.waiter()  # work() may run in the model call's own thread

        def work() -> Summary | Rejected:
            if job.level == 2:
                messages, rules, _ = prepared
                if _takes_between(self.summarizer.summarize):
                    return self.summarizer.summarize(messages, constraints=rules, between=between)
                return self.summarizer.summarize(messages, constraints=rules)  # a subclass's own
            segments, rules, _ = prepared
            return self.summarizer.summarize_global(segments, rules)

        if self.summarizer.llm is None:
            return work()
        try:
            return call_within(work, self.timeout)
        except DeadlinePassed:
            return Rejected(f"timed out after {self.timeout:g} s")

    async def _asummarize(self, job: Job, prepared: Any) -> Summary | Rejected:
        # Only the model call is awaited on the loop; the offline summary
        # runs through summarize() in a thread, so a subclass's own is used.
        if job.level == 2:
            messages, rules, _ = prepared
            if self.summarizer.llm is None:
                return await asyncio.to_thread(self.summarizer.summarize, messages, constraints=rules)
            if _takes_between(self.summarizer.asummarize):
                return await self.summarizer.asummarize(
                    messages, constraints=rules, between=self._gate.waiter()
                )
            return await self.summarizer.asummarize(messages, constraints=rules)  # a subclass's own
        segments, rules, _ = prepared
        if self.summarizer.llm is None:
            return await asyncio.to_thread(self.summarizer.summarize_global, segments, rules)
        return await self.summarizer.asummarize_global(segments, rules)

    def _finish(self, job: Job, prepared: Any, result: Summary | Rejected) -> Outcome:
        """Write ``result`` for ``job`` if it passed and the log is as planned."""
        if isinstance(result, Rejected):
            return Outcome("rejected", job.level, job.covers, reason=result.reason)
        if result.uncarried:  # a rule no summary text can carry: it must stay raw, so no summary
            return Outcome(
                "rejected",
                job.level,
                job.covers,
                reason=f"the summary cannot carry the rules {result.uncarried}",
            )
        with self._state:
            if self._abandon:
                return Outcome(
                    "abandoned", job.level, job.covers, reason="closed before the summary was written"
                )
        if not self._as_planned(job):
            return Outcome(
                "stale", job.level, job.covers, reason="the log changed while the summary was made"
            )
        self._gate.wait()
        try:
            facts = self._remember(job, prepared) if job.level == 2 else 0
            self._gate.wait()
            with self._state:  # no write once close() gave up waiting
                if self._abandon:
                    return Outcome(
                        "abandoned", job.level, job.covers, reason="closed before the summary was written"
                    )
                # Checked and written under the log's own lock: no rewind or
                # other summary can fall between.
                seq = self.log._add_summary_if(result.text, *job.covers, job.level, job.base)
        except ContextCoreError as error:
            return Outcome("failed", job.level, job.covers, reason=f"{type(error).__name__}: {error}")
        if seq is None:
            return Outcome(
                "stale", job.level, job.covers, reason="the log changed while the summary was made"
            )
        return Outcome(
            "written", job.level, job.covers, seq=seq, facts=facts, rules_left_out=prepared.left_out
        )

    def _as_planned(self, job: Job) -> bool:
        """The newest summary on the active path is still the one planned
        on, and what the job covers is still on that path."""
        path = np.asarray(self.log.path(), dtype=np.int64)
        summaries = path[self.log.headers()["kind"][path] == 1] if path.size else path
        newest = int(summaries[-1]) if summaries.size else None
        return newest == job.base and bool(np.isin(job.covers[1], path))

    def _remember(self, job: Job, prepared: Any) -> int:
        """Send the exact facts of the covered messages to memory, just
        before the summary is written (once it is, they leave the view): if
        the summary is then not written, the next try sends them again and
        memory skips what it holds."""
        if self.memory is None:
            return 0
        facts = self.facts(prepared[0])
        if not facts:
            return 0
        try:
            hold = getattr(self.memory, "hold", None)
            if hold is not None:  # a session's: held to its close, with where they were found
                return sum(
                    int(hold(found, seq)) for seq, found in self._found_at(job, prepared[0], facts).items()
                )
            return len(self.memory.append(facts).appended)
        except ContextCoreError as error:  # memory is extra: the summary still counts
            log.warning("compaction: facts not saved to memory: %s", error)
            return 0

    def _found_at(self, job: Job, messages: list[Any], facts: list[Any]) -> dict[int, list[Any]]:
        """``facts`` (of ``messages``, the nodes ``job.messages``) by the seq
        of the newest message each is a fact of; one of none alone (found
        in the messages together) by the segment's last."""
        origin: dict[str, int] = {}
        if len(job.messages) == len(messages):
            for seq, message in zip(job.messages, messages, strict=True):
                self._gate.wait()  # a turn goes first: a long tool output takes a while
                for fact in self.facts([message]) if isinstance(message, dict) else ():
                    origin[fact.signature] = seq
        found: dict[int, list[Any]] = {}
        for fact in facts:
            found.setdefault(origin.get(fact.signature, job.covers[1]), []).append(fact)
        return found

    def _record(self, outcome: Outcome) -> Outcome:
        said: tuple[int, str, tuple[Any, ...]] | None = None
        with self._state:
            if outcome.status not in ("busy", "waiting", "abandoned"):
                self._last = outcome
            if outcome.status == "written":
                self._failures, self._retry_at = 0, None
                self._written[outcome.level or 2] += 1
                # A global summary carries the first rules of all stated (the
                # segments' before it included); a segment only its own.
                if outcome.level == 3:
                    self._left_out = outcome.rules_left_out
                else:
                    self._left_out += outcome.rules_left_out
            elif outcome.status in ("rejected", "failed"):
                self._failures += 1
                delay = min(self.max_backoff, self.backoff * 2 ** (self._failures - 1))
                self._retry_at = self.clock() + delay
                if self._failures >= self.max_failures and not self._paused:
                    self._paused = True
                    said = (
                        logging.WARNING,
                        "compaction paused after %d failures in a row (last: %s); call resume() to retry",
                        (self._failures, outcome.reason),
                    )
                else:
                    said = (
                        logging.INFO,
                        "compaction step failed, retrying in %.0f s: %s",
                        (delay, outcome.reason),
                    )
        if said is not None:  # out of the lock: a handler may read the compactor's status
            log.log(said[0], said[1], *said[2])
        return outcome

    # -- in the background ----------------------------------------------------------------------

    def schedule(self) -> bool:
        """Start the next due steps in a worker thread, unless one runs or
        nothing is due; returns whether a worker was started. Never blocks
        on the model or the log's lock."""
        with self._state:
            if self._closing or self._running() or self._waiting() is not None:
                return False
        try:
            if self._cannot_be_due():
                return False
        except ContextCoreError:  # a closed log: the job will say so
            pass
        with self._state:
            if self._closing or self._running():
                return False
            self._draining = True
            if self._thread is None or not self._thread.is_alive():
                # The first drain (or the first in a forked child, where the
                # parent's worker is not alive). The worker is kept: starting
                # a thread took 0.1-0.25 ms of the turn that scheduled it,
                # waking one 0.02 ms.
                if self._finalizer is None:
                    self._finalizer = weakref.finalize(self, _wake, self._signal)
                self._thread = threading.Thread(
                    target=_work,
                    args=(weakref.ref(self), self._signal),
                    name="context_core compaction",
                    daemon=True,
                )
                self._thread.start()
            else:
                self._signal.notify_all()
            return True

    def _wait_idle(self, timeout: float | None) -> None:
        """Wait (at most ``timeout`` seconds) for the worker thread's drain to
        end; at once from the worker itself."""
        if threading.current_thread() is self._thread:
            return
        with self._signal:
            self._signal.wait_for(lambda: not self._thread_busy(), timeout)

    def _drain(self) -> None:
        """Steps until nothing is due or one fails (a failure waits for its backoff)."""
        with self._gate.working():
            self._gate.wait()  # the thread that started this one goes on with its turn first
            wrote = False
            while True:
                try:
                    outcome = self.compact()
                except Exception:  # a bug must not kill the thread silently
                    log.exception("compaction step raised")
                    break
                wrote = wrote or outcome.status == "written"
                if outcome.status != "written" or self._closing:
                    break
            after = self.after_write
            if wrote and after is not None and not self._closing:
                self._gate.wait()  # the turns in progress first
                try:
                    after()
                except Exception:
                    log.exception("compaction's after_write raised")

    def aschedule(self) -> asyncio.Task[Outcome] | None:
        """Start the next due steps as a task on the running event loop
        (``None`` if one runs, compaction waits, or the compactor is closed)."""
        with self._state:
            if self._closing or self._running() or self._waiting() is not None:
                return None
        try:
            if self._cannot_be_due():
                return None
        except ContextCoreError:
            pass
        with self._state:
            if self._closing or self._running():
                return None
            self._task = asyncio.get_running_loop().create_task(
                self._adrain(), name="context_core compaction"
            )
            return self._task

    async def _adrain(self) -> Outcome:
        while True:
            outcome = await self.acompact()
            if outcome.status != "written" or self._closing:
                return outcome

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker's steps (those :meth:`schedule` started, until
        nothing is due) to finish, at most ``timeout`` seconds; returns
        whether none is running. A server never needs this: the steps run
        while the model answers. A replay with no model time does, or the
        worker never gets the interpreter between calls made back to back.
        Call it outside a turn (a step waits at its yields for the turn)."""
        self._wait_idle(wait_timeout(timeout))
        with self._state:
            return not self._running()

    async def ajoin(self, timeout: float | None = None) -> bool:
        """:meth:`join` for asyncio: awaits the task :meth:`aschedule`
        started (or the worker thread) without blocking the loop."""
        timeout = wait_timeout(timeout)
        with self._state:
            task, thread = self._task, self._thread
        if task is not None and not task.done() and task is not asyncio.current_task():
            # Waited on, not awaited: the task's own end (cancelled by a
            # close, say) is not the caller's.
            await asyncio.wait({task}, timeout=timeout)
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(self._wait_idle, timeout)
        with self._state:
            return not self._running()

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop compacting: with ``wait``, the job in flight finishes (up to
        ``timeout`` seconds); without, or past the timeout, it is abandoned
        and writes nothing. Idempotent."""
        with self._state:
            self._closing = True
            self._signal.notify_all()  # an idle worker ends
            thread = self._thread
        if thread is not None and wait and thread is not threading.current_thread():
            thread.join(timeout)
        with self._state:
            self._abandon = True

    async def aclose(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """:meth:`close` for asyncio: awaits (or cancels) the task in flight."""
        with self._state:
            self._closing = True
            self._signal.notify_all()  # an idle worker ends
            task, thread = self._task, self._thread
        if task is not None and not task.done():
            if wait:
                try:
                    await asyncio.wait_for(asyncio.shield(task), timeout)
                except asyncio.TimeoutError:
                    task.cancel()
            else:
                task.cancel()
            with self._state:
                self._abandon = True
            with contextlib.suppress(
                asyncio.CancelledError, Exception
            ):  # outcome recorded; a cancel expected
                await task
        if thread is not None:
            await thread_end(thread, timeout if wait else 0)
        with self._state:
            self._abandon = True

    def __enter__(self) -> Compactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Compactor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
