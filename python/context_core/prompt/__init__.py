"""Prompt layers: a prompt assembled from parts by
lifetime so the provider's prompt cache stays hot.

* :class:`PromptBuilder` assembles each turn's :class:`PromptParts` from the
  layers (resident, on-demand skills, runtime-injected, memory, never-enter).
* :class:`PromptParts` renders to OpenAI Chat Completions messages and to an
  Anthropic Messages request with cache breakpoints after the system part and
  after the stable part; :meth:`PromptParts.prefix_hash` names the cached prefix.
* :class:`Dimensions` renders the three-dimension Memory / Context / Prompt task block,
  split by the coupling matrix and fitted by exact token counts.
"""

from __future__ import annotations

from context_core.errors import PromptCacheWarning, UnknownSkillError
from context_core.prompt.builder import DEFAULT_MEMORY_GUIDE, TITLES, PromptBuilder
from context_core.prompt.canonical import canonical_json, to_anthropic_tool, to_openai_tool
from context_core.prompt.counting import Truncation
from context_core.prompt.dimensions import (
    DIMENSIONS,
    Allocation,
    CouplingWeights,
    DimensionBlock,
    Dimensions,
    Entry,
    coupling_weights,
    split_budget,
    task_complexity,
)
from context_core.prompt.escape import RESERVED_TAGS, escape, escape_attr
from context_core.prompt.parts import LAYERS, PromptBreakdown, PromptParts
from context_core.prompt.render_anthropic import (
    ANTHROPIC_MIN_CACHE_TOKENS,
    CACHE_TTLS,
    DEFAULT_MIN_CACHE_TOKENS,
    MAX_BREAKPOINTS,
    AnthropicRequest,
    min_cache_tokens,
)
from context_core.prompt.render_openai import OpenAIRequest
from context_core.prompt.skills import Skill, SkillRegistry

__all__ = [
    "ANTHROPIC_MIN_CACHE_TOKENS",
    "CACHE_TTLS",
    "DEFAULT_MEMORY_GUIDE",
    "DEFAULT_MIN_CACHE_TOKENS",
    "DIMENSIONS",
    "LAYERS",
    "MAX_BREAKPOINTS",
    "RESERVED_TAGS",
    "TITLES",
    "Allocation",
    "AnthropicRequest",
    "CouplingWeights",
    "DimensionBlock",
    "Dimensions",
    "Entry",
    "OpenAIRequest",
    "PromptBreakdown",
    "PromptBuilder",
    "PromptCacheWarning",
    "PromptParts",
    "Skill",
    "SkillRegistry",
    "Truncation",
    "UnknownSkillError",
    "canonical_json",
    "coupling_weights",
    "escape",
    "escape_attr",
    "min_cache_tokens",
    "split_budget",
    "task_complexity",
    "to_anthropic_tool",
    "to_openai_tool",
]
