"""The memory store's writes a session's turns make due, done in the
background: what a message says worth keeping (a rule, a preference, a
lesson, a finished change) and each tool call that failed.

They are written as the session goes, not only when it closes, so a later
turn's search finds a rule stated early, and a process that dies keeps
what was written before it. Writes run while the model answers, never
while a call is prepared:

- one a call makes due (its input) waits for that call to end (at most
  :data:`TURN_WAIT` a job);
- one made due between two calls (a reply or a tool result recorded) waits
  for the next call to end, or for :data:`NEXT_TURN_WAIT` with none. Run
  at once, it would most often still be running when the next call began
  (a tool's result comes back in milliseconds), and the two threads would
  take turns with the interpreter: in three replays, the slowest call that
  began with a write running took 5.9-7.9 ms, the slowest with none
  2.9-3.7 ms.

So what a reply says is searchable from the turn after next (or after
:data:`NEXT_TURN_WAIT`), where it started within milliseconds before: the
very next turn has the reply itself in its window, and its next call is
most often a tool step, which does not search. :meth:`MemoryEvents.join`
runs the waiting ones at once.

A failed call's lesson does not wait for the next call: it is held only
here until written (the log keeps the result, not the lesson), so a
process killed meanwhile would lose it, and failures are few.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from context_core._logging import library_logger
from context_core._threads import thread_end

__all__ = ["ERROR_CHARS", "NEXT_TURN_WAIT", "TURN_WAIT", "MemoryEvents", "error_line"]

logger = library_logger()

#: The longest a job waits for a turn to end before it runs anyway (a
#: caller that never ends a turn must not stop the writes for good).
TURN_WAIT = 0.25

#: The longest a job made due between two calls waits for the next call to
#: end (a session left idle still writes; a user's next message takes
#: longer than this to type).
NEXT_TURN_WAIT = 0.5

#: A failed call's error is stored as its first line, at most this long (a
#: longer sentence is prose, not a memory).
ERROR_CHARS = 300


def error_line(content: Any) -> str:
    """The first non-blank line of a tool result's content (text, text
    blocks, or JSON-able data), cut to :data:`ERROR_CHARS`."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(isinstance(block, Mapping) for block in content):
        text = "\n".join(str(block.get("text", "")) for block in content if block.get("type") == "text")
    else:
        try:
            text = json.dumps(content, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = ""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:ERROR_CHARS].rstrip()


# Every writer. A forked child has none of the parent's threads (their
# workers, the calls other threads were in), and may have copied a lock a
# worker held (it takes it at each wake): each gets a fresh lock there, and
# none of the parent's jobs (the parent writes them).
_WRITERS: weakref.WeakSet[MemoryEvents] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for events in list(_WRITERS):
        events._state = threading.Condition(threading.Lock())
        events._jobs.clear()
        events._urgent.clear()
        events._lessons.clear()
        events._thread = None
        events._busy = False
        events._in_turn.clear()
        events._hurried = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


class MemoryEvents:
    """One session's store writes, in order (a failed call's lesson ahead of
    the writes waiting for the next call), on one worker thread started at
    the first and ended by :meth:`close`. A write that fails is logged and
    kept (``error``, the first); the next ones still run."""

    def __init__(self, store: Any, namespace: Any, source: str | None) -> None:
        self.store = store
        self.namespace = namespace
        self.source = source
        self.error: BaseException | None = None
        """The first write that failed (a close writes its message again)."""
        self._taken: set[int] = set()
        self._lessons: list[tuple[str, Any]] = []  # failed calls not written yet
        # Each job with the calls prepared before it was added, and when.
        self._jobs: deque[tuple[Callable[[], Any], int, float]] = deque()
        self._urgent: deque[Callable[[], Any]] = deque()  # run before them, waiting for no next call
        self._state = threading.Condition(threading.Lock())
        # A token per call in progress: letting go of one twice is harmless,
        # so an interrupt while it is let go of can be met by trying again.
        self._in_turn: set[object] = set()
        self._prepared = 0  # calls prepared (turns that prepared one, ended)
        self._hurried = 0  # joins waiting: the jobs run without waiting for a next call
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = None
        _WRITERS.add(self)

    @property
    def pending(self) -> int:
        """Jobs not done yet (the one running included)."""
        with self._state:
            return len(self._jobs) + len(self._urgent) + self._busy

    @contextlib.contextmanager
    def turn(self, *, preparing: bool = False) -> Iterator[None]:
        """Around a turn's call: jobs wait for it to end. ``preparing``: the
        call prepares a request (the model answers after it), so the jobs
        made due before it may run once it ends."""
        token = object()
        with self._state:
            self._in_turn.add(token)
        try:
            yield
        finally:
            try:
                self._end_turn(token, preparing)
            except BaseException:  # interrupted taking the lock (Ctrl-C): once more, then raised
                self._end_turn(token, preparing)
                raise

    def _end_turn(self, token: object, preparing: bool) -> None:
        with self._state:
            if token in self._in_turn:
                self._in_turn.discard(token)
                self._prepared += preparing
            if not self._in_turn and (self._jobs or self._urgent):
                self._state.notify_all()  # the jobs the turn added

    def message(self, message: Mapping[str, Any], seq: int | None) -> None:
        """What ``message`` (the log's node ``seq``) says worth keeping (the
        offline extractor, read on the worker), stored with near duplicates
        updating older ones."""
        extract = getattr(self.store, "conversation_ended", None)
        if extract is None:
            return

        def job() -> None:
            extract([message], namespace=self.namespace, source=self.source)
            if seq is not None:
                with self._state:
                    self._taken.add(seq)

        self._add(job)

    def taken(self) -> set[int]:
        """The seqs of the messages whose write is done (not dropped, not failed)."""
        with self._state:
            return set(self._taken)

    def tool_failed(self, tool: str, content: Any) -> None:
        """A failed call of ``tool``: its error's first line, as a lesson."""
        if getattr(self.store, "tool_failed", None) is None:
            return
        lesson = (tool, content)

        def job() -> None:
            self.write_lesson(*lesson)
            with self._state:
                self._lessons.remove(lesson)

        with self._state:
            if self._closing:
                return
            self._lessons.append(lesson)
        self._add(job, wait_for_next_call=False)

    def write_lesson(self, tool: str, content: Any) -> None:
        """``tool_failed`` for a failed call, here and now."""
        error = error_line(content)
        if error:
            self.store.tool_failed(tool, error, namespace=self.namespace, source=self.source)

    def lessons_left(self) -> list[tuple[str, Any]]:
        """The failed calls whose lesson was not written (dropped by a close,
        or its write failed): a close writes them itself."""
        with self._state:
            return list(self._lessons)

    def _add(self, job: Callable[[], Any], *, wait_for_next_call: bool = True) -> None:
        with self._state:
            if self._closing:
                return
            if wait_for_next_call:
                self._jobs.append((job, self._prepared, time.monotonic()))
            else:
                self._urgent.append(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="context_core memory events", daemon=True
                )
                self._thread.start()
            if not self._in_turn:  # else woken as the turn ends: not to take the interpreter from it
                self._state.notify_all()

    def _run(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._jobs or self._urgent or self._closing)
                if not self._jobs and not self._urgent:
                    return  # closing, and nothing left
                if not self._urgent:
                    _, prepared, added = self._jobs[0]
                    left = added + NEXT_TURN_WAIT - time.monotonic()
                    if left > 0 and self._prepared == prepared:  # made due between two calls
                        self._state.wait_for(functools.partial(self._next_call_over, prepared), left)
                if self._in_turn and not self._closing:
                    self._state.wait_for(lambda: not self._in_turn or self._closing, TURN_WAIT)
                if self._urgent:
                    job = self._urgent.popleft()
                elif self._jobs:
                    job = self._jobs.popleft()[0]
                else:  # dropped by a close meanwhile
                    continue
                self._busy = True
            try:
                job()
            except BaseException as error:  # logged; the next write still runs (an exit too: no caller here)
                logger.warning("context_core: a memory store write failed", exc_info=True)
                with self._state:
                    self.error = self.error or error
            finally:
                with self._state:
                    self._busy = False
                    self._state.notify_all()

    def _next_call_over(self, prepared: int) -> bool:
        """Whether a job added after ``prepared`` calls may stop waiting for
        the next: one ended since, a join waits, or the worker is closing."""
        return self._prepared != prepared or bool(self._hurried or self._urgent) or self._closing

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every job added so far is done, at most ``timeout``
        seconds; returns whether none is left. Jobs waiting for a next call
        run at once (those waiting for a turn in progress still wait for
        it). From a job itself (a store that calls back), it returns at
        once: the job cannot wait for itself."""
        with self._state:
            if threading.current_thread() is self._thread:
                return False
            self._hurried += 1
            self._state.notify_all()
            try:
                return self._state.wait_for(lambda: not (self._jobs or self._urgent or self._busy), timeout)
            finally:
                self._hurried -= 1

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Finish the jobs (``wait``) or drop those not started (a write in
        flight still ends as SQLite ends it: within the store's
        ``busy_timeout``); the worker ends. Idempotent."""
        with self._state:
            if not wait:
                self._jobs.clear()
                self._urgent.clear()
            self._closing = True
            self._state.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    async def aclose(self, *, wait: bool = True) -> None:
        """:meth:`close` for asyncio: the worker's end is waited for without
        a thread of the loop's (a cancelled wait leaves none blocked)."""
        self.close(wait=wait, timeout=0)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            await thread_end(thread)
