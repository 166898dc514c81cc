"""Hierarchical compaction of a :class:`~context_core.MessageLog`: L1 raw
turns, L2 segment summaries, an L3 global summary, made in the background
by a :class:`Compactor` and stored as the log's summary nodes, so
``context_view()`` and every policy reading the log use them in place of
the raw messages they cover."""

from __future__ import annotations

from context_core.compaction.compactor import Compactor, CompactorStatus, Outcome
from context_core.compaction.facts import exact_facts
from context_core.compaction.plan import Job, Wait, next_job, plan

__all__ = ["Compactor", "CompactorStatus", "Job", "Outcome", "Wait", "exact_facts", "next_job", "plan"]
