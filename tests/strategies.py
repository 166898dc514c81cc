"""Shared hypothesis settings (budget from the environment) and text strategies."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from context_core.reference.tags import NAMES

# Quick locally, thorough in CI: HYPOTHESIS_PROFILE=ci (see .ci/run).
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("soak", max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

ENCODINGS = ["o200k_base", "cl100k_base", "p50k_base", "r50k_base"]

# Characters that exercise every branch of the split patterns: each letter
# category, combining marks, digits of several scripts, every kind of space,
# newlines, apostrophes (and the case-folding long s), slashes, emoji, ZWJ.
EDGE_ALPHABET = list(
    "abstdmlverASTDMLVERſKǅʰ中文ßÉé\u0301\u0903\u20dd07٣Ⅻ½"
    " \u00a0\u2003\t\n\r\x0b\x0c\x85\u2028\u3000''’/.,!-_\"😀\u200d𝐀𝐚𝟙\U000e0100"
)

edge_text = st.text(alphabet=st.sampled_from(EDGE_ALPHABET), max_size=40)
"""Short texts dense in the pre-tokenizer's edge cases."""

any_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200)
"""Arbitrary Unicode (valid, so it has a UTF-8 form)."""

texts = st.one_of(edge_text, any_text)

# -- messages for the message log ------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
text_block = st.builds(lambda t: {"type": "text", "text": t}, texts)
tool_call = st.builds(
    lambda i, name, arguments: {
        "id": i,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    },
    texts,
    texts,
    texts,
)
openai_message = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "developer", "user", "assistant", "critic"]),
            "content": st.none() | texts | st.lists(text_block, max_size=3),
        },
        optional={"name": texts},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.none() | texts,
            "tool_calls": st.lists(tool_call, min_size=1, max_size=2),
        }
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": texts, "content": texts}),
    st.fixed_dictionaries({"role": st.just("function"), "name": texts, "content": texts}),
)
anthropic_block = st.one_of(
    text_block,
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, texts),
    st.builds(
        lambda i, name, given: {"type": "tool_use", "id": i, "name": name, "input": given},
        texts,
        texts,
        st.dictionaries(texts, json_values, max_size=3),
    ),
    st.builds(
        lambda i, content: {"type": "tool_result", "tool_use_id": i, "content": content},
        texts,
        texts | st.lists(text_block, max_size=2),
    ),
    st.just({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}}),
)
anthropic_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.lists(anthropic_block, min_size=1, max_size=4),
    }
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "pinned": st.booleans(),
        "priority": st.integers(-5, 5) | st.floats(-1e6, 1e6),
        "weight": st.floats(0, 100),
        "timestamp": st.floats(0, 2e9),
        "tags": st.lists(st.sampled_from(sorted(NAMES)), max_size=2),
        "id": texts,
        "extra": json_values,
    },
)
log_messages = st.tuples(
    openai_message.filter(lambda m: m["role"] != "critic") | anthropic_message, metadata
).map(lambda pair: {**pair[0], **pair[1]})
"""Messages as a log takes them: OpenAI and Anthropic shapes, tool calls and results,
with the metadata keys the header reads (pinned, priority, weight, timestamp, tags).
Every role is one the log accepts; ``openai_message`` also draws an unknown one."""
