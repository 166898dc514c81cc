"""One object an agent server calls each turn: :class:`Session` (and
:class:`AsyncSession`), with the request's :class:`TurnReport`."""

from context_core.session.async_session import AsyncSession
from context_core.session.report import Request, TurnReport
from context_core.session.session import Session, provider_of
from context_core.session.tool_calls import ToolCall

__all__ = ["AsyncSession", "Request", "Session", "ToolCall", "TurnReport", "provider_of"]
