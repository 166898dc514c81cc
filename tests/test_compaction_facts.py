"""The exact facts a compaction sends to memory: a subject with an exact
value (an id, a path, a number with its unit, a version), from what the
user or assistant said and from tool output, the newest value of each."""

from __future__ import annotations

import json

from context_core.compaction.facts import MAX_FACTS, exact_facts


def texts(messages: list[dict]) -> list[str]:
    return [fact.text for fact in exact_facts(messages)]


def tool(content: str, call_id: str = "c1") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_a_stated_value_is_a_fact_and_chat_is_not():
    found = texts(
        [
            {"role": "user", "content": "The deploy target is staging-eu-2. Thanks!"},
            {"role": "assistant", "content": "The plan is good."},  # no exact value
            {"role": "user", "content": "Is the port 5432?"},  # a question states nothing
        ]
    )
    assert found == ["deploy target: staging-eu-2"]


def test_key_value_lines_of_tool_output():
    found = texts([tool("version: 2.4.1\nname: widget\ntimeout: 30s\nnote: see the docs")])
    assert found == ["version: 2.4.1", "timeout: 30s"]


def test_a_json_tool_result_gives_its_exact_fields_even_on_one_line():
    result = {
        "order_id": "A-8812",
        "amount": 1999,
        "status": "refunded",
        "ok": True,
        "shipment": {"tracking": "ZX-40771", "carrier": "ups"},
        "items": [{"sku": "SKU-1"}],
    }
    found = texts([tool(json.dumps(result))])
    assert found == ["order_id: A-8812", "amount: 1999", "shipment tracking: ZX-40771"]
    assert texts([tool(json.dumps(result, indent=2))]) == found
    assert texts([tool("{not json: A-8812")]) == []  # not JSON, not a key: value line either


def test_the_newest_value_of_a_subject_wins_and_moves_last():
    found = texts(
        [
            tool("version: 2.4.1"),
            tool("timeout: 30s", "c2"),
            tool("version: 2.5.0", "c3"),
        ]
    )
    assert found == ["timeout: 30s", "version: 2.5.0"]


def test_a_segment_gives_at_most_max_facts_the_newest():
    lines = "\n".join(f"port{n}: {8000 + n}" for n in range(MAX_FACTS + 5))
    found = texts([tool(lines)])
    assert len(found) == MAX_FACTS
    assert found[-1] == f"port{MAX_FACTS + 4}: {8000 + MAX_FACTS + 4}"


def test_chinese_statements_are_facts_too():
    assert texts([{"role": "assistant", "content": "数据库端口是5432。"}]) == ["数据库端口: 5432"]
