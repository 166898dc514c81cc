"""The real ``openai`` and ``anthropic`` SDK clients, pointed at the scripted
server of ``llm_server`` (the fixtures using them are in ``conftest.py``)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai

__all__ = ["SDKS", "async_client", "sync_client"]

SDKS = ["openai", "anthropic"]


def sync_client(sdk: str, url: str) -> Any:
    if sdk == "openai":
        return openai.OpenAI(base_url=url + "/v1", api_key="test-key")
    return anthropic.Anthropic(base_url=url, api_key="test-key")


def async_client(sdk: str, url: str) -> Any:
    if sdk == "openai":
        return openai.AsyncOpenAI(base_url=url + "/v1", api_key="test-key")
    return anthropic.AsyncAnthropic(base_url=url, api_key="test-key")
