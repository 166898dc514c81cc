"""The same Session for asyncio servers: ``await`` on every call.

A turn's own work (append, search, select, render, count) is CPU-bound and
sub-millisecond at ordinary sizes, so it runs inline rather than paying a
thread hop. What can take long runs off the event loop: draining compaction
(``Compactor.aclose``) and persisting learnings at the end.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from context_core.session.report import Request, TurnReport
from context_core.session.session import Session
from context_core.session.tool_calls import ToolCall

__all__ = ["AsyncSession"]


class AsyncSession:
    """:class:`~context_core.Session` with awaitable calls: ``await
    AsyncSession.open(...)``, ``await session.prepare(...)`` and so on, and
    ``async with``."""

    def __init__(self, session: Session) -> None:
        self.session = session

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
        return self.session.prepare(user_input, now=now, attachments=attachments)

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
        await self._aclose(persist=persist, wait=wait, forget=not persist)

    async def _aclose(self, *, persist: bool, wait: bool, forget: bool) -> None:
        session = self.session
        if session._closed:
            return
        try:
            if session.compactor is not None:
                await session.compactor.aclose(wait=wait)
            if session._events is not None:  # the store's writes, finished off the loop
                await asyncio.to_thread(session._events.close, wait=wait and persist)
        finally:
            # Even if draining was cancelled: the log's lock must not outlive the session.
            await asyncio.shield(
                asyncio.to_thread(session._close, persist=persist, wait=False, forget=forget)
            )

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # As Session's: a block that raised leaves its messages to the next close.
        await self._aclose(persist=exc[0] is None, wait=True, forget=False)
