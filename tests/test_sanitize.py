"""The sanitize funnel (mirrors rust/core/src/sanitize): a cancelled call's history,
every repair, generated broken histories in both formats checked against the
providers' rules, the reference, idempotency and the fast path."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

import validators
from context_core import InvalidInputError, InvalidTypeError, Sanitizer, sanitize
from context_core.reference import sanitize as reference
from context_core.sanitize import DEFAULT_ERROR_PATTERNS, Change
from strategies import edge_text

BROKEN = [
    {"role": "user", "content": "写个排序函数"},
    {"role": "assistant", "content": "[tool_call: quicksort]"},
    {"role": "tool", "content": "legacy tool message"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_1", "name": "search", "input": {}},
            {"type": "tool_use", "id": "call_2", "name": "calc", "input": {}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "结果..."}]},
    {"role": "assistant", "content": "The request was cancelled..."},
]


def summary(changes) -> list[tuple]:
    return [(c.stage, c.index, c.action, c.reason) for c in changes]


def test_a_cancelled_calls_history_is_repaired():
    result = sanitize(BROKEN, provider="anthropic")
    assert result.messages == [
        {"role": "user", "content": "写个排序函数"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_1", "name": "search", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "结果..."}]},
    ]
    assert result.messages[0] is BROKEN[0]
    assert result.messages[2] is BROKEN[4]
    assert result.messages[1]["content"][0] is BROKEN[3]["content"][0]  # blocks are reused, not copied
    assert result.system is None
    assert summary(result.changes) == [
        (1, 1, "drop_placeholder", "placeholder text"),
        (1, 2, "drop_role", 'role "tool" is not accepted by anthropic'),
        (1, 5, "drop_error_reply", "error or cancel reply"),
        (3, 3, "drop_call", 'tool call "call_2" has no result'),
    ]
    assert validators.anthropic(result.messages) == []


def test_valid_history_comes_back_as_the_same_objects():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "4"},
    ]
    result = sanitize(history)
    assert not result.changed
    assert len(result.messages) == len(history)
    assert all(a is b for a, b in zip(result.messages, history, strict=True))
    assert result.messages is not history


# -- each repair, both providers (table-driven) --------------------------------------------


def tool_call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


CASES = [
    (
        "openai",
        "merges consecutive user messages",
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        [{"role": "user", "content": "a\n\nb"}],
        ["merge"],
    ),
    (
        "openai",
        "never merges tool messages; moves results up to their call",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [tool_call("a"), tool_call("b")]},
            {"role": "user", "content": "hurry"},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [tool_call("a"), tool_call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "user", "content": "hurry"},
        ],
        ["move_result", "move_result"],
    ),
    (
        "openai",
        "drops a result without a call and a call without a result",
        [
            {"role": "tool", "tool_call_id": "x", "content": "lost"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "let me look", "tool_calls": [tool_call("y")]},
        ],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "let me look"}],
        ["drop_result", "drop_call"],
    ),
    (
        "openai",
        "keeps the first pair of a duplicated id",
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [tool_call("d")]},
            {"role": "tool", "tool_call_id": "d", "content": "1"},
            {"role": "assistant", "content": "again", "tool_calls": [tool_call("d")]},
            {"role": "tool", "tool_call_id": "d", "content": "2"},
        ],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [tool_call("d")]},
            {"role": "tool", "tool_call_id": "d", "content": "1"},
            {"role": "assistant", "content": "again"},
        ],
        ["drop_duplicate_call", "drop_result"],
    ),
    (
        "openai",
        "drops empty messages, empty tool_calls and blank text parts",
        [
            {"role": "user", "content": [{"type": "text", "text": "  "}, {"type": "text", "text": "real"}]},
            {"role": "assistant", "content": "   "},
            {"role": "assistant", "content": "ok", "tool_calls": []},
        ],
        [
            {"role": "user", "content": [{"type": "text", "text": "real"}]},
            {"role": "assistant", "content": "ok"},
        ],
        ["drop_block", "drop_empty", "drop_key"],
    ),
    (
        "openai",
        "drops legacy function messages and unknown roles",
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "r"},
            {"role": "critic", "content": "meh"},
            {"role": "assistant", "content": "done"},
        ],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "done"}],
        ["drop_call", "drop_empty", "drop_role", "drop_role"],
    ),
    (
        "anthropic",
        "lifts system messages and inserts a first user turn",
        [
            {"role": "system", "content": "Be brief."},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "hi"},
        ],
        [
            {"role": "user", "content": "(continued)"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "hi"},
        ],
        ["lift_system", "insert_user"],
    ),
    (
        "anthropic",
        "puts tool results first in the user message",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "here:"},
                    {"type": "tool_result", "tool_use_id": "t", "content": "R"},
                ],
            },
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": "R"},
                    {"type": "text", "text": "here:"},
                ],
            },
        ],
        ["reorder_blocks"],
    ),
    (
        "anthropic",
        "merges assistant turns with thinking first",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Let me think."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Answer."},
                ],
            },
        ],
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Let me think."},
                    {"type": "text", "text": "Answer."},
                ],
            },
        ],
        ["merge"],
    ),
    (
        # OpenAI refuses a tool message whose content is an empty list: one of
        # blank text parts only is an empty output, the empty string (as an
        # Anthropic tool result's is), and its call keeps its result.
        "openai",
        "tool result of blank parts only",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": " "}]},
            {"role": "user", "content": "and?"},
        ],
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": ""},
            {"role": "user", "content": "and?"},
        ],
        ["drop_block"],
    ),
    (
        # An empty content list is the same empty output: its call keeps its result.
        "openai",
        "tool result of an empty list",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": []},
            {"role": "user", "content": "and?"},
        ],
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": ""},
            {"role": "user", "content": "and?"},
        ],
        ["empty_result"],
    ),
    (
        "anthropic",
        "drops the blank text parts of a tool result",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": ""}, {"type": "text", "text": "out"}],
                    }
                ],
            },
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "out"}]}
                ],
            },
        ],
        ["drop_block"],
    ),
    (
        "anthropic",
        "a tool result of blank parts only is an empty string",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": " \n"}]},
                    {"type": "text", "text": "next?"},
                ],
            },
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": ""},
                    {"type": "text", "text": "next?"},
                ],
            },
        ],
        ["drop_block"],
    ),
    (
        "anthropic",
        "drops thinking that ends an assistant message",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Answer."},
                    {"type": "thinking", "thinking": "and then?", "signature": "s"},
                ],
            },
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "text", "text": "Answer."}]},
        ],
        ["drop_block"],
    ),
]


@pytest.mark.parametrize(
    ("provider", "what", "history", "expected", "actions"), CASES, ids=[c[1] for c in CASES]
)
def test_repairs(provider, what, history, expected, actions):
    result = sanitize(history, provider=provider)
    assert result.messages == expected, what
    assert [c.action for c in result.changes] == actions
    ref = reference.sanitize(history, provider)
    assert ref.messages == expected
    assert summary(ref.changes) == summary(result.changes)
    check = validators.anthropic if provider == "anthropic" else validators.openai
    assert check(result.messages) == []


def test_convert_legacy_function_messages():
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "function_call": {"name": "weather", "arguments": "{}"}},
        {"role": "function", "name": "weather", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    result = sanitize(history, convert_function=True)
    assert result.messages == [
        history[0],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_legacy_1", "type": "function", "function": history[1]["function_call"]}
            ],
        },
        {"role": "tool", "tool_call_id": "call_legacy_1", "content": "sunny"},
        history[3],
    ]
    assert validators.openai(result.messages) == []
    assert reference.sanitize(history, "openai", convert_function=True).messages == result.messages


def test_anthropic_system_with_blocks_is_lifted_as_blocks():
    cached = {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}
    history = [
        {"role": "system", "content": [cached]},
        {"role": "developer", "content": "More rules."},
        {"role": "user", "content": "hi"},
    ]
    result = sanitize(history, "anthropic")
    assert result.system == [cached, {"type": "text", "text": "More rules."}]
    assert result.system[0] is cached
    assert sanitize(history[1:], "anthropic").system == "More rules."
    assert reference.sanitize(history, "anthropic").system == result.system


def test_thinking_of_tool_turns_is_kept_intact_and_in_place():
    thinking = {"type": "thinking", "thinking": "I should search.", "signature": "sig=="}
    history = [
        {"role": "user", "content": "find it"},
        {
            "role": "assistant",
            "content": [
                thinking,
                {"type": "tool_use", "id": "t1", "name": "search", "input": {}},
                {"type": "tool_use", "id": "t2", "name": "search", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    result = sanitize(history, "anthropic")
    assistant = result.messages[1]
    assert assistant["content"][0] is thinking
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use"]


def test_custom_patterns_and_limits():
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<<aborted>>"}]
    assert sanitize(history).messages == history
    custom = sanitize(history, error_patterns=[*DEFAULT_ERROR_PATTERNS, r"<<aborted>>"])
    assert custom.messages == history[:1]
    short = sanitize(history, error_patterns=[r"<<aborted>>"], max_pattern_chars=5)
    assert short.messages == history  # the text is longer than the limit


def test_other_languages_and_claude_code_markers():
    for text in [
        "请求已取消",
        "[Request interrupted by user]",
        "La requête a été annulée.",
        "エラーが発生しました。",
    ]:
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text}]
        assert sanitize(history).messages == history[:1], text


# -- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error", "where"),
    [
        ("text", InvalidTypeError, r"^messages\[1\]: expected a message dict, got str"),
        ({"content": "x"}, InvalidInputError, r"^messages\[1\]\.role: required field is missing"),
        ({"role": "user", "content": 5}, InvalidTypeError, r"^messages\[1\]\.content: expected str"),
        (
            {"role": "user", "content": [{"text": "x"}]},
            InvalidInputError,
            r"^messages\[1\]\.content\[0\]\.type",
        ),
        (
            {"role": "assistant", "tool_calls": [{"type": "function"}]},
            InvalidInputError,
            r"tool_calls\[0\]\.id",
        ),
        (
            {"role": "user", "content": [{"type": "tool_result"}]},
            InvalidInputError,
            r"content\[0\]\.tool_use_id",
        ),
        (
            {"role": "assistant", "content": [{"type": "server_tool_use", "name": "web_search"}]},
            InvalidInputError,
            r"^messages\[1\]\.content\[0\]\.id",
        ),
        (
            {"role": "assistant", "content": [{"type": "web_search_tool_result", "tool_use_id": 7}]},
            InvalidTypeError,
            r"^messages\[1\]\.content\[0\]\.tool_use_id: expected str",
        ),
    ],
)
def test_malformed_messages_raise_or_drop(message, error, where):
    history = [{"role": "user", "content": "fine"}, message]
    with pytest.raises(error, match=where):
        sanitize(history)
    with pytest.raises(error, match=where):
        reference.sanitize(history)
    dropped = sanitize(history, on_invalid="drop")
    assert dropped.messages == history[:1]
    assert [c.action for c in dropped.changes] == ["drop_invalid"]
    assert summary(dropped.changes) == summary(reference.sanitize(history, on_invalid="drop").changes)


def test_bad_options():
    with pytest.raises(InvalidInputError, match="provider"):
        Sanitizer("gemini")
    with pytest.raises(InvalidInputError, match="on_invalid"):
        Sanitizer(on_invalid="ignore")
    with pytest.raises(InvalidInputError, match="invalid pattern"):
        Sanitizer(error_patterns=["(unclosed"])
    with pytest.raises(InvalidTypeError):
        sanitize({"role": "user"})
    with pytest.raises(InvalidTypeError):
        Sanitizer(placeholder_patterns="not a list")


def test_change_objects():
    change = sanitize([{"role": "user", "content": ""}]).changes[0]
    assert isinstance(change, Change)
    assert (change.stage, change.index, change.action) == (1, 0, "drop_empty")
    assert "drop_empty" in repr(change)
    assert change == sanitize([{"role": "user", "content": ""}]).changes[0]


# -- generated broken histories --------------------------------------------------------

REAL = [
    "hello",
    "Please fix the build.",
    "Done: 3 files changed.",
    "为什么失败了？",
    "ok",
    "Sure — here it is.",
]
JUNK = [
    "[tool_call: search]",
    "The request was cancelled...",
    "请求已取消",
    "",
    "   ",
    "Something went wrong.",
]
text = st.one_of(st.sampled_from(REAL), st.sampled_from(JUNK), edge_text)
ids = st.sampled_from(["c1", "c2", "c3", "c4", "c5", "call_9"])
# A tool's output: a string, or text parts (an MCP tool's), blank ones too.
tool_output = st.one_of(text, st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2))
thinking = st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, text) | st.just(
    {"type": "redacted_thinking", "data": "opaque"}
)


@st.composite
def openai_history(draw) -> list[dict]:
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text)})
    for _ in range(draw(st.integers(0, 4))):
        user_content = draw(
            st.one_of(text, st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2))
        )
        messages.append({"role": "user", "content": user_content})
        if draw(st.booleans()):
            call_ids = draw(st.lists(ids, min_size=1, max_size=3))
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.none() | text),
                    "tool_calls": [tool_call(i) for i in call_ids],
                }
            )
            for call_id in draw(st.permutations(call_ids)):
                messages.append({"role": "tool", "tool_call_id": call_id, "content": draw(tool_output)})
        if draw(st.booleans()):  # a legacy function-calling round
            messages.append(
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}
            )
            messages.append(
                {"role": "function", "name": draw(st.sampled_from(["f", "g"])), "content": draw(text)}
            )
        messages.append({"role": "assistant", "content": draw(text)})
    return mutate(draw, messages, openai_junk)


def openai_junk(draw) -> dict:
    return draw(
        st.sampled_from(
            [
                {"role": "tool", "tool_call_id": "ghost", "content": "stale"},
                {"role": "function", "name": "f", "content": "legacy"},
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
                {"role": "assistant", "content": "x", "tool_calls": []},
                {"role": "critic", "content": "unknown role"},
                {"role": "user", "content": None},
                {"role": "user", "content": "[tool_result: search]"},
                {"role": "assistant", "content": "An error occurred. Please try again."},
                {"role": "user", "name": "bob", "content": "named"},
            ]
        )
    )


# Anthropic server tools (web search, code execution, ...): ids of their own,
# and one shared with the client tools' (one id space).
server_ids = st.sampled_from(["srvtoolu_1", "srvtoolu_2", "srvtoolu_3", "c1"])
server_tools = st.sampled_from(["web_search", "web_fetch", "code_execution", "bash_code_execution"])


@st.composite
def server_tool_reply(draw) -> list[dict]:
    """An assistant reply running a server tool: the use and its result in
    one message, or a paused reply ending at the use then its continuation
    (two messages, which the merge stage joins)."""
    block_text = st.builds(lambda t: {"type": "text", "text": t}, text)
    server_id, tool = draw(server_ids), draw(server_tools)
    use = {"type": "server_tool_use", "id": server_id, "name": tool, "input": {"query": draw(text)}}
    found = st.builds(lambda t: {"type": "web_search_result", "url": "https://example.com", "title": t}, text)
    result = {
        "type": f"{tool}_tool_result",
        "tool_use_id": server_id,
        "content": draw(st.lists(found, max_size=1)),
    }
    lead = draw(st.lists(block_text, max_size=1))
    after = draw(st.lists(block_text, min_size=1, max_size=2))
    if draw(st.booleans()):
        return [
            {"role": "assistant", "content": [*lead, use]},
            {"role": "assistant", "content": [result, *after]},
        ]
    return [{"role": "assistant", "content": [*lead, use, result, *after]}]


@st.composite
def anthropic_history(draw) -> list[dict]:
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(text)})
    block_text = st.builds(lambda t: {"type": "text", "text": t}, text)
    for _ in range(draw(st.integers(0, 4))):
        messages.append({"role": "user", "content": draw(st.one_of(text, st.lists(block_text, max_size=2)))})
        if draw(st.booleans()):
            call_ids = draw(st.lists(ids, min_size=1, max_size=3))
            content = []
            if draw(st.booleans()):
                content.append({"type": "thinking", "thinking": draw(text), "signature": "sig"})
            content += draw(st.lists(block_text, max_size=1))
            content += [
                {"type": "tool_use", "id": i, "name": "f", "input": {"q": draw(text)}} for i in call_ids
            ]
            content += draw(st.lists(thinking, max_size=1))  # a reply cut off while thinking
            messages.append({"role": "assistant", "content": content})
            results = [
                {"type": "tool_result", "tool_use_id": i, "content": draw(tool_output)}
                for i in draw(st.permutations(call_ids))
            ]
            extra = draw(st.lists(block_text, max_size=1))
            messages.append(
                {"role": "user", "content": draw(st.sampled_from([results + extra, extra + results]))}
            )
        reply = st.builds(
            lambda blocks, last: blocks + last,
            st.lists(block_text, min_size=1, max_size=2),
            st.lists(thinking, max_size=2),
        )
        if draw(st.booleans()):
            messages.extend(draw(server_tool_reply()))
        else:
            messages.append({"role": "assistant", "content": draw(st.one_of(text, reply))})
    return mutate(draw, messages, anthropic_junk)


def anthropic_junk(draw) -> dict:
    return draw(
        st.sampled_from(
            [
                {"role": "tool", "tool_call_id": "c1", "content": "openai-style result"},
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "only", "signature": "s"}],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "cut"}, {"type": "redacted_thinking", "data": "d"}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "c2",
                            "content": [{"type": "text", "text": ""}],
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "ghost", "content": "?"}],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c2", "name": "f", "input": {}}],
                },
                {"role": "developer", "content": "late instructions"},
                {"role": "assistant", "content": "The request was cancelled..."},
                {"role": "user", "content": []},
                {"role": "assistant", "content": "hi", "tool_calls": [tool_call("c3")]},
                # A paused reply never continued, a continuation whose paused
                # reply was dropped, a server tool result in a user message.
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Searching."},
                        {"type": "server_tool_use", "id": "srvtoolu_9", "name": "web_search", "input": {}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                        {"type": "text", "text": "Found it."},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_2", "content": {}}
                    ],
                },
            ]
        )
    )


def mutate(draw, messages: list[dict], junk) -> list[dict]:
    """Break a well-formed history: truncate it mid-call, shuffle, duplicate,
    drop and interleave messages, and insert legacy, empty or junk ones."""
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(["truncate", "swap", "duplicate", "delete", "insert"]))
        if op == "insert" or not messages:
            messages.insert(draw(st.integers(0, len(messages))), copy.deepcopy(junk(draw)))
            continue
        i = draw(st.integers(0, len(messages) - 1))
        if op == "truncate":
            del messages[i:]
        elif op == "swap" and i + 1 < len(messages):
            messages[i], messages[i + 1] = messages[i + 1], messages[i]
        elif op == "duplicate":
            messages.insert(i, copy.deepcopy(messages[i]))
        elif op == "delete":
            del messages[i]
    return messages


def text_of(message: dict) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def check_funnel(history: list[dict], provider: str, **options) -> None:
    before = copy.deepcopy(history)
    result = sanitize(history, provider=provider, **options)
    assert history == before, "the input was mutated"
    ref = reference.sanitize(history, provider, **options)
    assert result.messages == ref.messages
    assert result.system == ref.system
    assert summary(result.changes) == summary(ref.changes)
    if provider == "anthropic":
        # Strict, but for a server tool use left unanswered in a last
        # assistant message (a paused turn, which a request may send back).
        problems = validators.anthropic(result.messages, result.system, request=True)
        assert [p for p in problems if "(A20)" not in p] == []  # A20: prefill rules, left alone
        last = f"messages[{len(result.messages) - 1}]: server tool use "
        assert all(p.startswith(last) for p in validators.anthropic(result.messages, result.system))
    else:
        assert validators.openai(result.messages) == []
    again = sanitize(result.messages, provider=provider, **options)
    assert not again.changed, summary(again.changes)
    assert all(a is b for a, b in zip(again.messages, result.messages, strict=True))
    # Valid user and assistant text is never lost (merges keep it inside a longer text).
    # Thinking blocks of turns that hold tool_use are the input's own objects,
    # in their input order, each still before the tool calls it preceded.
    input_blocks = [b for m in history if isinstance(m.get("content"), list) for b in m["content"]]
    for message in result.messages:
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        if message.get("role") == "assistant" and any(b.get("type") == "tool_use" for b in blocks):
            positions = [
                next(i for i, b in enumerate(input_blocks) if b is block)
                for block in blocks
                if block.get("type") in ("thinking", "redacted_thinking")
            ]
            assert positions == sorted(positions)
    patterns = reference.Sanitizer(provider)
    kept = [t for m in result.messages for t in text_of(m)]
    for message in history:
        if message.get("role") in ("user", "assistant") and isinstance(message.get("content"), str):
            body = message["content"]
            if not reference.is_blank(body) and not patterns.is_junk_text(body):
                assert any(body in t for t in kept), body


@given(history=openai_history(), convert_function=st.booleans())
def test_generated_openai_histories(history, convert_function):
    check_funnel(history, "openai", convert_function=convert_function)


@given(history=anthropic_history())
def test_generated_anthropic_histories(history):
    check_funnel(history, "anthropic")


# -- regressions found in review -------------------------------------------------------


def both(history, provider="openai", **options):
    result = sanitize(history, provider=provider, **options)
    ref = reference.sanitize(history, provider, **options)
    assert result.messages == ref.messages
    assert result.system == ref.system
    assert summary(result.changes) == summary(ref.changes)
    check = validators.anthropic if provider == "anthropic" else validators.openai
    assert check(result.messages) == []
    assert not sanitize(result.messages, provider=provider, **options).changed
    return result


def test_a_refusal_is_not_content():
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("x")]},
        {"role": "assistant", "content": None, "refusal": "no"},
    ]
    assert both(history).messages == [{"role": "user", "content": "q"}]


def test_legacy_function_call_is_removed_unless_converting():
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "calling", "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "tool", "tool_call_id": "call_legacy_1", "content": "r"},
    ]
    result = both(history)
    assert result.messages == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "calling"}]
    assert ("drop_call", 1) in [(c.action, c.index) for c in result.changes]


def test_tool_calls_outside_assistant_messages_are_removed():
    history = [{"role": "user", "content": "q", "tool_calls": [tool_call("x")]}]
    assert both(history).messages == [{"role": "user", "content": "q"}]
    blocks = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "q"},
                {"type": "tool_use", "id": "u", "name": "f", "input": {}},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "tool_result", "tool_use_id": "u"}],
        },
    ]
    result = both(blocks, "anthropic")
    assert [len(m["content"]) for m in result.messages] == [1, 1]


def test_interleaved_thinking_never_ends_an_assistant_message():
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "a", "signature": "s"},
                {"type": "tool_use", "id": "x", "name": "f", "input": {}},
                {"type": "thinking", "thinking": "b", "signature": "s"},
                {"type": "tool_use", "id": "y", "name": "f", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]},
    ]
    result = both(history, "anthropic")
    assert [b["type"] for b in result.messages[1]["content"]] == ["thinking", "tool_use"]


def test_first_user_text_must_survive_the_funnel():
    for text in ["", "   ", "[tool_call: x]", "The request was cancelled."]:
        with pytest.raises(InvalidInputError, match="first_user_text"):
            Sanitizer("anthropic", first_user_text=text)
    result = both([{"role": "assistant", "content": "hi"}], "anthropic", first_user_text="Continue.")
    assert result.messages[0] == {"role": "user", "content": "Continue."}


def test_tool_results_need_content():
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": None},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("t")]},
        {"role": "tool", "tool_call_id": "t"},
    ]
    assert both(history, convert_function=True).messages == [{"role": "user", "content": "q"}]
    empty_but_present = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("t")]},
        {"role": "tool", "tool_call_id": "t", "content": ""},
    ]
    assert not both(empty_but_present).changed


def test_lone_surrogates_in_ids_and_texts():
    """Strings are read as tiktoken reads them (lone surrogates become U+FFFD),
    by the extension and the reference alike."""
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("\ud800")]},
        {"role": "tool", "tool_call_id": "\udfff", "content": "r"},
        {"role": "assistant", "content": "[tool_call: " + "\ud83d\ude00" * 122 + "]"},
    ]
    result = sanitize(history)
    ref = reference.sanitize(history)
    assert result.messages == ref.messages
    assert summary(result.changes) == summary(ref.changes)


def test_patterns_fold_ascii_case_only():
    for text in ["İnternal error occurred.", "ſomething went wrong"]:
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text}]
        assert both(history).messages == history
    shouting = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "REQUEST CANCELLED BY USER"},
    ]
    assert both(shouting).messages == shouting[:1]


def test_empty_pattern_lists_replace_the_defaults():
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "The request was cancelled..."},
    ]
    assert not both(history, error_patterns=[]).changed


def test_many_calls_in_one_message_pair_quickly():
    ids = [f"c{i}" for i in range(4000)]
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call(i) for i in ids]},
        *({"role": "tool", "tool_call_id": i, "content": "r"} for i in reversed(ids)),
    ]
    assert not both(history).changed


def test_option_types():
    with pytest.raises(InvalidTypeError, match="convert_function"):
        Sanitizer(convert_function=1)
    with pytest.raises(InvalidTypeError):
        sanitize([], max_pattern_chars=True)


def test_merged_tool_turns_keep_thinking_before_their_calls():
    t1 = {"type": "thinking", "thinking": "one", "signature": "s"}
    t2 = {"type": "thinking", "thinking": "two", "signature": "s"}
    u1 = {"type": "tool_use", "id": "a", "name": "f", "input": {}}
    u2 = {"type": "tool_use", "id": "b", "name": "f", "input": {}}
    text = {"type": "text", "text": "Let me check."}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [text]},
        {"role": "assistant", "content": [t1, u1]},
        {"role": "assistant", "content": [t2, u2]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": k, "content": "r"} for k in "ab"],
        },
    ]
    result = both(history, "anthropic")
    assert result.messages[1]["content"] == [t1, text, u1, t2, u2]


def test_blank_text_parts_of_tool_results_go():
    """A tool result's blank text parts go as the message's own do (A5 holds
    inside a tool result too); its other parts and keys are the input's own,
    and one left with no part has the empty string for content."""
    kept = {"type": "text", "text": "3 files"}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    partial = {
        "type": "tool_result",
        "tool_use_id": "a",
        "is_error": False,
        "cache_control": {"type": "ephemeral"},
        "content": [{"type": "text", "text": "\u3000"}, kept, {"type": "input_text", "text": ""}, image],
    }
    blank = {"type": "tool_result", "tool_use_id": "b", "content": ({"type": "text", "text": " "},)}
    whole = {"type": "tool_result", "tool_use_id": "c", "content": [kept]}
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": k, "name": "f", "input": {}} for k in "abc"],
        },
        {"role": "user", "content": [partial, blank, whole]},
    ]
    result = both(history, "anthropic")
    assert result.messages[:2] == history[:2]
    assert result.messages[1] is history[1]
    results = result.messages[2]["content"]
    assert results[0] == {**partial, "content": [kept, image]}
    assert results[0]["content"][0] is kept
    assert results[0]["content"][1] is image
    assert results[0]["cache_control"] is partial["cache_control"]
    assert results[1] == {"type": "tool_result", "tool_use_id": "b", "content": ""}
    assert results[2] is whole
    assert summary(result.changes) == [
        (1, 2, "drop_block", "empty text block at content[0].content[0]"),
        (1, 2, "drop_block", "empty text block at content[0].content[2]"),
        (1, 2, "drop_block", "empty text block at content[1].content[0]"),
    ]
    assert history[2]["content"][0]["content"][0]["text"] == "\u3000"  # the input is not mutated


def test_a_misplaced_tool_result_goes_whole():
    """A tool result that goes (outside a user message) is reported once, not its parts too."""
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "done"},
                {"type": "tool_result", "tool_use_id": "x", "content": [{"type": "text", "text": ""}]},
            ],
        },
    ]
    result = both(history, "anthropic")
    assert result.messages[1]["content"] == [{"type": "text", "text": "done"}]
    assert summary(result.changes) == [
        (1, 1, "drop_block", "tool_result block in a assistant message at content[1]"),
    ]


def test_openai_tool_messages_of_blank_parts_keep_their_call():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    text = {"type": "text", "text": "r"}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": ""}, text]},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "\t"}]},
    ]
    result = both(history)
    assert result.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": [text]}
    assert result.messages[2]["content"][0] is text
    assert result.messages[4] == {"role": "tool", "tool_call_id": "c2", "content": ""}
    assert [m is h for m, h in zip(result.messages, history, strict=True)] == [True, True, False, True, False]
    assert summary(result.changes) == [
        (1, 2, "drop_block", "empty text block at content[0]"),
        (1, 4, "drop_block", "empty text block at content[0]"),
    ]
    # A legacy function result is a tool result too.
    legacy = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": [{"type": "text", "text": " "}]},
    ]
    converted = both(legacy, convert_function=True)
    assert converted.messages[2] == {"role": "tool", "tool_call_id": "call_legacy_1", "content": ""}
    # No content is still refused: the call goes with its result. An empty
    # list is the empty output, as blank parts are.
    empty = [*history[:2], {"role": "tool", "tool_call_id": "c1", "content": None}]
    assert both(empty).messages == history[:1]
    empty[2] = {"role": "tool", "tool_call_id": "c1", "content": []}
    assert both(empty).messages == [*history[:2], {"role": "tool", "tool_call_id": "c1", "content": ""}]


def test_thinking_never_ends_an_assistant_message():
    """A19: the thinking an assistant message ends with goes, the rest of it
    (signed thinking too) is the input's own; a message of thinking alone goes."""
    first = {"type": "thinking", "thinking": "plan", "signature": "sig-1"}
    text = {"type": "text", "text": "Here."}
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                first,
                text,
                {"type": "thinking", "thinking": "cut off", "signature": "sig-2"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": " "},
            ],
        },
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}]},
    ]
    result = both(history, "anthropic")
    assert result.messages == [history[0], {"role": "assistant", "content": [first, text]}, history[2]]
    assert result.messages[1]["content"][0] is first
    assert summary(result.changes) == [
        (1, 1, "drop_block", "empty text block at content[4]"),
        (1, 1, "drop_block", "thinking block left last at content[3]"),
        (1, 1, "drop_block", "thinking block left last at content[2]"),
        (1, 3, "drop_empty", "empty message"),
    ]


def test_thinking_after_a_tool_call_goes_and_the_pair_stays():
    thinking = {"type": "thinking", "thinking": "search", "signature": "s"}
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [thinking, use, {"type": "thinking", "thinking": "…", "signature": "s"}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    result = both(history, "anthropic")
    assert result.messages[1]["content"] == [thinking, use]
    assert result.messages[1]["content"][0] is thinking
    assert result.messages[2] is history[2]


def test_junk_text_before_trailing_thinking_is_junk():
    """The thinking goes first, so the text left is judged as the message (the
    funnel stays idempotent)."""
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "The request was cancelled..."},
                {"type": "thinking", "thinking": "x", "signature": "s"},
            ],
        },
    ]
    result = both(history, "anthropic")
    assert result.messages == history[:1]
    assert [c.action for c in result.changes] == ["drop_block", "drop_error_reply"]


def test_openai_leaves_thinking_blocks_alone():
    """Thinking blocks are Anthropic's format: the OpenAI funnel passes them on."""
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "thinking", "thinking": "b", "signature": "s"},
            ],
        },
    ]
    assert not both(history).changed


# -- Anthropic server tools -----------------------------------------------------------


def server_use(server_id: str = "srvtoolu_1", name: str = "web_search") -> dict:
    return {"type": "server_tool_use", "id": server_id, "name": name, "input": {"query": "weather"}}


def server_result(server_id: str = "srvtoolu_1", kind: str = "web_search_tool_result") -> dict:
    return {"type": kind, "tool_use_id": server_id, "content": []}


def said(text: str) -> dict:
    return {"type": "text", "text": text}


def test_a_paused_turn_sent_back_keeps_its_unanswered_server_tool_use():
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [said("Let me search."), server_use()]},
    ]
    for result in (sanitize(history, provider="anthropic"), reference.sanitize(history, "anthropic")):
        assert not result.changed
        assert all(a is b for a, b in zip(result.messages, history, strict=True))
    # Valid only as the request's last message.
    assert validators.anthropic(history, request=True) == []
    assert validators.anthropic(history) == [
        "messages[1]: server tool use srvtoolu_1 without its result (A21)"
    ]


def test_a_paused_turn_not_continued_loses_its_server_tool_use():
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [said("Let me search."), server_use()]},
        {"role": "user", "content": "Never mind: Lyon?"},
        {"role": "assistant", "content": "Sunny in Lyon."},
    ]
    assert validators.anthropic(history) != []
    result = both(history, "anthropic")
    assert summary(result.changes) == [(3, 1, "drop_call", 'server tool use "srvtoolu_1" has no result')]
    assert result.messages[1]["content"] == [history[1]["content"][0]]
    assert result.messages[2:] == history[2:]
    # A reply of the use alone (and thinking) goes whole.
    history[1] = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "search", "signature": "s"}, server_use()],
    }
    result = both(history, "anthropic")
    assert summary(result.changes) == [
        (3, 1, "drop_call", 'server tool use "srvtoolu_1" has no result'),
        (3, 1, "drop_empty", "empty after removing tool calls without results"),
        (4, 2, "merge", "merged into the previous user message"),
    ]
    assert [m["role"] for m in result.messages] == ["user", "assistant"]


def test_a_paused_reply_and_its_continuation_are_merged_into_a_valid_message():
    paused = {"role": "assistant", "content": [said("Let me search."), server_use()]}
    continuation = {"role": "assistant", "content": [server_result(), said("It is 18 degrees.")]}
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        paused,
        continuation,
        {"role": "user", "content": "Thanks"},
    ]
    result = both(history, "anthropic")
    assert summary(result.changes) == [(2, 2, "merge", "merged into the previous assistant message")]
    assert result.messages[1]["content"] == paused["content"] + continuation["content"]


def test_a_continuation_without_its_paused_reply_loses_the_result():
    # The selection kept the continuation and dropped the paused reply.
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [server_result(), said("It is 18 degrees.")]},
        {"role": "user", "content": "Thanks"},
    ]
    assert validators.anthropic(history) != []
    result = both(history, "anthropic")
    assert summary(result.changes) == [
        (3, 1, "drop_result", 'server tool result for "srvtoolu_1" has no matching server tool use')
    ]
    assert result.messages[1]["content"] == [history[1]["content"][1]]
    # Even as the last message: a result needs its use.
    result = both(history[:2], "anthropic")
    assert summary(result.changes) == [
        (3, 1, "drop_result", 'server tool result for "srvtoolu_1" has no matching server tool use')
    ]


def test_server_tool_results_pair_one_to_one_in_their_own_message():
    history = [
        {"role": "user", "content": "Run it"},
        {
            "role": "assistant",
            "content": [
                server_use("srvtoolu_1", "code_execution"),
                server_result("srvtoolu_1", "code_execution_tool_result"),
                server_result("srvtoolu_1", "code_execution_tool_result"),
                server_use("srvtoolu_1", "code_execution"),
                {
                    "type": "mcp_tool_use",
                    "id": "mcptoolu_1",
                    "name": "lookup",
                    "server_name": "s",
                    "input": {},
                },
                {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": []},
                said("Done."),
            ],
        },
        {"role": "user", "content": [server_result("srvtoolu_2", "web_fetch_tool_result"), said("And now?")]},
        {
            "role": "assistant",
            "content": [said("Again."), server_use("srvtoolu_1"), server_result("srvtoolu_1")],
        },
    ]
    result = both(history, "anthropic")
    assert summary(result.changes) == [
        (1, 2, "drop_block", "web_fetch_tool_result block in a user message at content[0]"),
        (3, 1, "drop_duplicate_call", 'duplicate tool call id "srvtoolu_1"'),
        (3, 1, "drop_result", 'duplicate server tool result for "srvtoolu_1"'),
        (3, 3, "drop_duplicate_call", 'duplicate tool call id "srvtoolu_1"'),
        (3, 3, "drop_result", 'server tool result for "srvtoolu_1" has no matching server tool use'),
    ]
    content = history[1]["content"]
    assert result.messages[1]["content"] == [content[0], content[1], *content[4:]]
    assert result.messages[3]["content"] == [history[3]["content"][0]]


def test_a_server_tool_result_before_its_use_goes_with_the_use():
    """The API refuses a server tool result with no use before it in the
    message: one placed before its use answers nothing, and the use, left
    with no result after it, goes too (a result after the use keeps both)."""
    before = [said("Searching."), server_result(), server_use(), said("Found it.")]
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": before},
        {"role": "user", "content": "Thanks."},
    ]
    assert validators.anthropic(history) != []
    result = both(history, "anthropic")
    assert summary(result.changes) == [
        (3, 1, "drop_call", 'server tool use "srvtoolu_1" has no result'),
        (3, 1, "drop_result", 'server tool result for "srvtoolu_1" has no matching server tool use'),
    ]
    assert result.messages[1]["content"] == [before[0], before[3]]
    assert validators.anthropic(result.messages) == []
    again = [server_result(), server_use(), server_result(), said("Found it.")]
    history[1] = {"role": "assistant", "content": again}
    result = both(history, "anthropic")
    assert summary(result.changes) == [
        (3, 1, "drop_result", 'server tool result for "srvtoolu_1" comes before its server tool use')
    ]
    assert result.messages[1]["content"] == again[1:]
    assert validators.anthropic(result.messages) == []


def test_openai_leaves_server_tool_blocks_alone():
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [said("Searching."), server_use()]},
        {"role": "user", "content": [server_result()]},
    ]
    result = sanitize(history, provider="openai")
    assert not result.changed
    assert not reference.sanitize(history, "openai").changed
