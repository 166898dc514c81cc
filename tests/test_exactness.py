"""Exactness never rests on hash luck: texts whose hashes collide are still
told apart, by the count cache and by sanitize's pairing of tool calls.

The colliding pairs below were searched for offline (a distinguished-point
birthday search, about 2^32 hashes):
- under XXH3-64 (unseeded), the hash sanitize once compared tool-call ids by;
- under Python's str hash with PYTHONHASHSEED=0 (SipHash-1-3, all-zero key),
  the key the count cache once took for a Python str, with its length.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import validators
from context_core import Tokenizer, sanitize
from context_core.reference import sanitize as reference

XXH3_PAIR = ("call071a3a90afd4af78", "call288f48d0edb5dded")
SEED_0_PAIR = ("ctx-c9d1868eed27d266", "ctx-53db84f2945a2691")  # 10 and 11 tokens (o200k_base)


def history(call_id: str, answer_id: str) -> list[dict]:
    """A call and a result that answers another id: the result is an orphan."""
    return [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": answer_id, "content": "the answer"},
        {"role": "user", "content": "thanks"},
    ]


@pytest.mark.parametrize("pair", [XXH3_PAIR, XXH3_PAIR[::-1]])
def test_tool_call_ids_that_share_a_64_bit_hash_are_different_ids(pair):
    call_id, answer_id = pair
    messages = history(call_id, answer_id)
    result = sanitize(messages, provider="openai")
    assert validators.openai(result.messages) == []
    # Neither id is answered: the call and the result are both orphans.
    assert all(not m.get("tool_calls") and m["role"] != "tool" for m in result.messages)
    twin = reference.sanitize(messages, provider="openai")
    assert result.messages == twin.messages
    # The same ids, matched as they should be, are kept.
    kept = sanitize(history(call_id, call_id), provider="openai").messages
    assert [m["role"] for m in kept] == ["user", "assistant", "tool", "user"]


def test_anthropic_tool_use_ids_that_share_a_64_bit_hash_are_different_ids():
    call_id, answer_id = XXH3_PAIR
    messages = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": answer_id, "content": "x"}]},
        {"role": "assistant", "content": "done"},
    ]
    result = sanitize(messages, provider="anthropic")
    assert validators.anthropic(result.messages, result.system) == []
    assert result.messages == reference.sanitize(messages, provider="anthropic").messages


COUNT_BOTH = """
from context_core import Tokenizer
a, b = {pair!r}
assert hash(a) == hash(b) and len(a) == len(b) and a != b
tok = Tokenizer("o200k_base")
exact = [tok.count_messages([{{"role": "user", "content": t}}]) for t in (a, b)]
tok.cache_clear()
cached = [tok.count_messages([{{"role": "user", "content": t}}]) for t in (a, b)]
print(exact, cached)
"""


def test_a_python_hash_collision_never_shares_a_count():
    """Under PYTHONHASHSEED=0 (a common setting for reproducible runs) the two
    texts have one hash and one length; each must still get its own count."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [sys.executable, "-c", COUNT_BOTH.format(pair=SEED_0_PAIR)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("]")
    tok = Tokenizer("o200k_base")
    expected = [len(tok.encode(t)) + 4 + 3 for t in SEED_0_PAIR]  # framing and reply priming
    assert expected[0] != expected[1]
    assert out[0].strip(" [") == ", ".join(map(str, expected))
    assert out[1].strip(" [,") == ", ".join(map(str, expected))


def test_a_reused_address_never_brings_back_another_texts_count():
    """Long texts' keys are remembered by the string object; a string freed
    and another made in its place (often at the same address) must be
    counted as itself. Each text differs in length and tokens."""
    tok = Tokenizer("o200k_base")
    for n in range(300):
        text = f"{n} " + "retry the payment callback " * (20 + n % 17) + "x" * (n % 5)
        message = {"role": "user", "content": text}
        assert tok.count_messages([message]) == len(tok.encode(text)) + 7  # framing, reply priming
        del text, message
