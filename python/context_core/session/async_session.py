"""The same Session for asyncio servers: ``await`` on every call.

A turn's own work (append, select, render, count, and a search with the
built-in embedder) is CPU-bound and sub-millisecond at ordinary sizes, so it
runs inline rather than paying a thread hop. What can take long runs off the
event loop: a memory search with any other embedder (awaited through the
store's ``asearch_texts``, so an async client's ``aembed`` works), draining
compaction (``Compactor.aclose``) and persisting learnings at the end.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from context_core._logging import library_logger
from context_core.errors import InvalidInputError
from context_core.session.report import Request, TurnReport
from context_core.session.session import Session, _Searched, check_bools
from context_core.session.tool_calls import ToolCall

__all__ = ["AsyncSession"]

logger = library_logger()


class AsyncSession:
    """:class:`~context_core.Session` with awaitable calls: ``await
    AsyncSession.open(...)``, ``await session.prepare(...)`` and so on, and
    ``async with``."""

    def __init__(self, session: Session) -> None:
        self.session = session
        # The close every aclose() waits for: one, run to its end even if
        # they are all cancelled; and how many wait for it now.
        self._closing: asyncio.Future[None] | None = None
        self._waiting = 0
        self._close_options: tuple[bool, bool, bool] | None = None  # (persist, wait, forget)

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> AsyncSession:
        """As :meth:`Session.open` (opening runs in a thread: it may create files)."""
        return cls(await asyncio.to_thread(Session.open, path, **options))

    @property
    def pending(self) -> tuple[ToolCall, ...]:
        return self.session.pending

    @property
    def needs_reply(self) -> bool:
        """As :attr:`Session.needs_reply`."""
        return self.session.needs_reply

    @property
    def last_seq(self) -> int | None:
        """As :attr:`Session.last_seq`: the seq of the last message appended."""
        return self.session.last_seq

    @property
    def last_report(self) -> TurnReport | None:
        """The last request's report (``None`` before the first)."""
        return self.session.last_report

    async def history(self, *, since: int = 0) -> list[dict[str, Any]]:
        """As :meth:`Session.history`, read in a thread: it reads every
        message of the path."""
        return await asyncio.to_thread(self.session.history, since=since)

    async def prepare(
        self,
        user_input: str | Mapping[str, Any] | None = None,
        *,
        now: datetime | str | None = None,
        attachments: Sequence[Any] = (),
    ) -> Request:
        """As :meth:`Session.prepare`. A new input's memory search is
        awaited where it may wait on a model or another thread (an
        embedder other than the built-in one, a store of the caller's
        own); the rest runs inline. Once :meth:`aclose` was called, no
        turn starts (``InvalidInputError``); ``record`` and
        ``record_tool_result`` still take what calls in flight return
        until the close lands."""
        session = self.session
        if self._close_options is not None and not session._closed:
            # A turn begun now would end in a closed session (its reply
            # could not be recorded); the replies of calls in flight still can.
            raise InvalidInputError("this session is closing: aclose() was called")
        if not _awaits_its_search(session.store) or (user_input is None and not session.needs_reply):
            return session.prepare(user_input, now=now, attachments=attachments)  # (which refuses the latter)
        session._check_open()
        started = session._clock()
        checked = None if user_input is None else session._turn_input(user_input, attachments)
        query = None if checked is None else checked[1]
        if query is None:  # the turn's next step: it searches only in a session reopened within the turn
            query = session._step_query()
        if query is None:
            return session.prepare(user_input, now=now, attachments=attachments)
        memories = await _search(session, query)
        # A text input is checked once. A dict or attachments hold parts the
        # caller could change while the search is awaited: checked again.
        once = isinstance(user_input, str) and not attachments
        searched = _Searched(checked if once else None, memories, session._clock() - started)
        return session._prepare_turn(user_input, now, attachments, searched)

    async def record(self, response: Any) -> tuple[ToolCall, ...]:
        return self.session.record(response)

    async def record_tool_result(self, call_id: str, content: Any, *, is_error: bool = False) -> int:
        return self.session.record_tool_result(call_id, content, is_error=is_error)

    async def join(self, timeout: float | None = None) -> bool:
        """As :meth:`Session.join`, waited for in a thread."""
        return await asyncio.to_thread(self.session.join, timeout)

    async def aclose(self, *, persist: bool = True, wait: bool = True) -> None:
        """Drain (``wait``) or abandon compaction without blocking the loop,
        then persist and close in a thread (as :meth:`Session.close`)."""
        check_bools(persist=persist, wait=wait)
        persist, wait = bool(persist), bool(wait)  # a numpy bool too
        await self._aclose(persist=persist, wait=wait, forget=not persist)

    async def _aclose(self, *, persist: bool, wait: bool, forget: bool) -> None:
        """Drains, then closes. A call while another's close runs waits for
        it (the session is closed when it returns), with the first call's
        options; a call after it returns at once; a close made by
        :meth:`Session.close` is not waited for."""
        session = self.session
        if self._closing is not None and self._closing.done():
            return  # closed: its outcome went to the calls waiting then (or to the log)
        if self._close_options is None:  # the first call's say, whichever drain ends first
            self._close_options = (persist, wait, forget)
        persist, wait, forget = self._close_options
        if self._closing is None and not session._closed:
            try:
                if session.compactor is not None:
                    await session.compactor.aclose(wait=wait)
                if session._events is not None:  # the store's writes, finished off the loop
                    await session._events.aclose(wait=wait and persist)
            finally:
                # Even if draining was cancelled: the log's lock must not
                # outlive the session, so the close runs to its end.
                if self._closing is None and not session._closed:
                    self._closing = asyncio.ensure_future(
                        asyncio.to_thread(session._close, persist=persist, wait=False, forget=forget)
                    )
                    self._closing.add_done_callback(self._close_ended)
        if self._closing is not None:
            self._waiting += 1
            try:
                await asyncio.shield(self._closing)
            finally:
                self._waiting -= 1

    def _close_ended(self, closing: asyncio.Future[None]) -> None:
        """A close that failed with every caller gone (each cancelled) has
        no one to raise its error to: it is logged instead. (This runs
        before a waiting caller resumes, so the count is still theirs.)"""
        error = None if closing.cancelled() else closing.exception()  # marked as seen, whoever waits
        if error is not None and not self._waiting:
            logger.warning("context_core: closing the session failed: %s", error)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # As Session's: a block that raised leaves its messages to the next close.
        await self._aclose(persist=exc[0] is None, wait=True, forget=False)


def _awaits_its_search(store: Any) -> bool:
    """Whether a turn's search is awaited: it is, unless there is no store
    or it is a :class:`~context_core.MemoryStore` on its built-in embedder
    (no model to wait on: inline costs less than a thread hop)."""
    if store is None:
        return False
    from context_core.memory_store import MemoryStore  # loaded already: the session has a store

    return not (type(store) is MemoryStore and store._builtin_embedder)


async def _search(session: Session, query: str) -> list[str]:
    """:meth:`Session._search`, awaited: a store's ``asearch_texts`` or
    ``asearch`` (which await its embedder's ``aembed``), else its search in
    a worker thread."""
    arguments = session._search_arguments(query)
    if arguments is None:
        return []
    texts = getattr(session.store, "asearch_texts", None)
    if texts is not None:  # only the texts go in the prompt: for less
        return session._within(list(await texts(query, **arguments)), arguments["max_tokens"])
    asearch = getattr(session.store, "asearch", None)
    if asearch is None:
        return await asyncio.to_thread(session._search, query)
    found = [hit.memory.text for hit in await asearch(query, **arguments)]
    return session._within(found, arguments["max_tokens"])
