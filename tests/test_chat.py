"""Chat accounting (mirrors rust/core/src/chat.rs): OpenAI's published figures,
both message formats against the reference, tool schemas, errors with paths."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

import context_core
from context_core import InvalidInputError, InvalidTypeError, Tokenizer, reference
from strategies import ENCODINGS, texts

# The cookbook's examples ("How to count tokens with tiktoken"), with the
# prompt_tokens the API reported for them, as OpenAI published them.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
        "into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for "
        "increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
WEATHER_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


@pytest.mark.parametrize(("model", "api_tokens"), [("gpt-4", 129), ("gpt-4o", 124)])
def test_cookbook_messages_match_the_api(model, api_tokens):
    assert Tokenizer.for_model(model).count_messages(COOKBOOK_MESSAGES) == api_tokens
    assert reference.Tokenizer.for_model(model).count_messages(COOKBOOK_MESSAGES) == api_tokens


@pytest.mark.parametrize(("model", "api_tokens"), [("gpt-3.5-turbo", 105), ("gpt-4", 105), ("gpt-4o", 101)])
def test_cookbook_tools_match_the_api(model, api_tokens):
    assert Tokenizer.for_model(model).count_messages(WEATHER_MESSAGES, tools=WEATHER_TOOLS) == api_tokens
    assert reference.Tokenizer.for_model(model).count_messages(WEATHER_MESSAGES, WEATHER_TOOLS) == api_tokens


def test_formula_parts():
    tok = Tokenizer()
    message = {"role": "user", "content": "hello world"}
    assert tok.count_message(message) == 3 + tok.count("user") + tok.count("hello world")
    named = {**message, "name": "alice"}
    assert tok.count_message(named) == tok.count_message(message) + tok.count("alice") + 1
    assert tok.count_messages([message, named]) == tok.count_message(message) + tok.count_message(named) + 3
    assert tok.count_messages([]) == 3


# -- generated histories in both formats --------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)
ids = st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=12)

openai_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries(
        {
            "type": st.just("image_url"),
            "image_url": st.fixed_dictionaries(
                {"url": texts}, optional={"detail": st.sampled_from(["low", "high", "auto"])}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("input_audio"),
            "input_audio": st.fixed_dictionaries({"data": texts, "format": st.just("wav")}),
        }
    ),
)
tool_call = st.one_of(
    st.fixed_dictionaries(
        {
            "id": ids,
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": ids, "arguments": st.one_of(texts, json_values.map(str))}
            ),
        }
    ),
    # A custom tool's call: free-text input where a function has arguments.
    st.fixed_dictionaries(
        {"id": ids, "type": st.just("custom"), "custom": st.fixed_dictionaries({"name": ids, "input": texts})}
    ),
)
openai_message = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "developer", "user"]),
            "content": st.one_of(texts, st.lists(openai_part, max_size=3)),
        },
        optional={"name": ids},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": st.one_of(st.none(), texts),
            "tool_calls": st.lists(tool_call, min_size=1, max_size=3),
            "refusal": st.one_of(st.none(), texts),
            "function_call": st.fixed_dictionaries({"name": ids, "arguments": texts}),
        },
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": ids, "content": texts}),
)

text_block = st.fixed_dictionaries(
    {"type": st.just("text"), "text": texts}, optional={"cache_control": st.just({"type": "ephemeral"})}
)
image_block = st.fixed_dictionaries(
    {
        "type": st.just("image"),
        "source": st.fixed_dictionaries(
            {"type": st.just("base64"), "media_type": st.just("image/png"), "data": texts}
        ),
    }
)
anthropic_block = st.one_of(
    text_block,
    image_block,
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": ids,
            "name": ids,
            "input": st.dictionaries(texts, json_values, max_size=4),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": ids},
        optional={
            "content": st.one_of(texts, st.lists(st.one_of(text_block, image_block), max_size=3)),
            "is_error": st.booleans(),
        },
    ),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": texts, "signature": ids}),
    st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": texts}),
    st.fixed_dictionaries(
        {"type": st.just("document"), "source": st.dictionaries(texts, json_values, max_size=3)}
    ),
)
anthropic_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.one_of(texts, st.lists(anthropic_block, max_size=4)),
    }
)
json_schema_property = st.recursive(
    st.fixed_dictionaries(
        {
            "type": st.one_of(
                st.sampled_from(["string", "integer", "number", "boolean"]),
                st.lists(st.sampled_from(["string", "null"]), max_size=2),
            )
        },
        optional={"description": texts, "enum": st.lists(st.one_of(texts, st.integers()), max_size=4)},
    ),
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(ids, inner, max_size=3)},
            optional={"description": texts},
        ),
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
    ),
    max_leaves=6,
)
function_schema = st.fixed_dictionaries(
    {"name": ids},
    optional={
        "description": texts,
        "parameters": st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(ids, json_schema_property, max_size=4)}
        ),
    },
)
tools = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("function"), "function": function_schema}),
        function_schema,
        function_schema.map(
            lambda f: {("input_schema" if k == "parameters" else k): v for k, v in f.items()}
        ),
    ),
    max_size=3,
)


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(messages=st.lists(openai_message, max_size=6), tool_list=st.one_of(st.none(), tools))
def test_openai_histories_count_as_the_reference(encoding, messages, tool_list):
    rust, ref = Tokenizer(encoding), reference.Tokenizer(encoding)
    before = copy.deepcopy(messages)
    assert rust.count_messages(messages, tool_list) == ref.count_messages(messages, tool_list)
    assert messages == before  # never mutated


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@given(messages=st.lists(anthropic_message, max_size=6), tool_list=st.one_of(st.none(), tools))
def test_anthropic_histories_count_as_the_reference(encoding, messages, tool_list):
    rust, ref = Tokenizer(encoding), reference.Tokenizer(encoding)
    assert rust.count_messages(messages, tool_list) == ref.count_messages(messages, tool_list)
    for message in messages:
        assert rust.count_message(message) == ref.count_message(message)


def test_a_custom_tool_call_counts_its_input_as_a_function_counts_its_arguments():
    tok = Tokenizer()
    function = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "apply_patch", "arguments": "+x = 1"},
    }
    custom = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": "+x = 1"}}
    as_function = tok.count_message({"role": "assistant", "tool_calls": [function]})
    assert tok.count_message({"role": "assistant", "tool_calls": [custom]}) == as_function
    with pytest.raises(InvalidInputError, match=r"tool_calls\[0\]\.custom\.name"):
        tok.count_message({"role": "assistant", "tool_calls": [{"id": "c", "custom": {"input": "x"}}]})
    with pytest.raises(InvalidInputError, match=r"tool_calls\[0\]\.function"):
        tok.count_message({"role": "assistant", "tool_calls": [{"id": "c", "type": "custom"}]})


def test_block_rules():
    tok = Tokenizer()
    base = tok.count_message({"role": "user", "content": []})
    assert base == 3 + tok.count("user")

    def cost(block):
        return tok.count_message({"role": "user", "content": [block]}) - base

    assert cost({"type": "text", "text": "hi there"}) == tok.count("hi there")
    assert (
        cost({"type": "image_url", "image_url": {"url": "x", "detail": "low"}})
        == context_core.tokens.IMAGE_TOKENS_LOW
    )
    assert cost({"type": "image_url", "image_url": {"url": "x"}}) == context_core.tokens.IMAGE_TOKENS
    assert (
        cost({"type": "image", "source": {"data": "A" * 10_000}})
        == context_core.tokens.ANTHROPIC_IMAGE_TOKENS
    )
    use = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "ünï", "n": 3, "x": 1e-05}}
    assert cost(use) == 3 + tok.count("search") + tok.count('{"q":"ünï","n":3,"x":1e-05}')
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "found it"}]}
    assert cost(result) == 3 + tok.count("found it")
    assert cost({"type": "thinking", "thinking": "hmm", "signature": "sig"}) == tok.count("hmm")


def test_recount_is_answered_by_the_cache():
    tok = Tokenizer("cl100k_base")
    history = [
        {"role": "user", "content": f"message number {i} with enough text to be cached"} for i in range(50)
    ]
    first = tok.count_messages(history)
    hits = tok.cache_info().hits
    assert tok.count_messages(history) == first
    assert tok.cache_info().hits >= hits + 50


@pytest.mark.parametrize(
    "text", ["", "ab", "abcd", "the staging port is 5432", "订单已退款 " * 40, "x" * 5000, "a\udcff b"]
)
def test_a_cached_count_is_the_count_of_its_text(text):
    """``_count_cached`` (a returned memory's count) answers what ``count``
    does, first from the tokenizer and then from the cache, for texts
    below the cached length, long ones, Chinese and a lone surrogate."""
    tok = Tokenizer("o200k_base")
    expected = reference.Tokenizer("o200k_base").count(text)
    assert tok.count(text) == expected
    assert tok._count_cached(text) == expected
    hits = tok.cache_info().hits
    assert tok._count_cached(text) == expected
    assert tok.cache_info().hits == hits + (len(text.encode("utf-8", "surrogatepass")) >= 4)


class _SameHash(str):
    """A str whose every instance hashes alike: it must be counted by content."""

    def __hash__(self) -> int:
        return 7


def test_texts_are_cached_by_content_not_by_a_subclass_hash():
    tok = Tokenizer("o200k_base")
    # Equal hashes and equal lengths, different words: only the content tells them apart.
    texts = [_SameHash("plain english words here"), _SameHash("7f3a9c0e1b2d4f6a8c0e1b2d")]
    assert len({hash(t) for t in texts}) == 1
    assert len({len(t) for t in texts}) == 1
    oracle = reference.Tokenizer("o200k_base")
    expected = [oracle.count_messages([{"role": "user", "content": str(text)}]) for text in texts]
    assert expected[0] != expected[1]
    # Twice each: the second answer comes from the cache and must still be this text's.
    for _ in range(2):
        assert [tok.count_messages([{"role": "user", "content": t}]) for t in texts] == expected


def test_equal_texts_in_distinct_objects_share_a_cache_entry():
    tok = Tokenizer("cl100k_base")
    text = "the same words in two separate string objects, long enough to be cached"
    copy_of_text = "".join(list(text))
    assert copy_of_text is not text
    tok.count_messages([{"role": "user", "content": text}])
    hits = tok.cache_info().hits
    tok.count_messages([{"role": "user", "content": copy_of_text}])
    assert tok.cache_info().hits == hits + 1


# -- malformed input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "error", "where"),
    [
        (
            [{"role": "user", "content": "ok"}, {"role": "user", "content": 3}],
            InvalidTypeError,
            r"messages\[1\]\.content",
        ),
        ([{"content": "no role"}], InvalidInputError, r"messages\[0\]\.role"),
        ([{"role": 5, "content": "x"}], InvalidTypeError, r"messages\[0\]\.role"),
        (["not a dict"], InvalidTypeError, r"messages\[0\]"),
        (
            [{"role": "user", "content": [{"text": "no type"}]}],
            InvalidInputError,
            r"messages\[0\]\.content\[0\]\.type",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": None}]}],
            InvalidTypeError,
            r"content\[0\]\.text",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c"}]}],
            InvalidInputError,
            r"tool_calls\[0\]\.function",
        ),
        ([{"role": "assistant", "tool_calls": "nope"}], InvalidTypeError, r"messages\[0\]\.tool_calls"),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {"s": {1, 2}}}]}],
            InvalidTypeError,
            r"content\[0\]\.input\.s",
        ),
    ],
)
def test_malformed_messages_name_the_field(messages, error, where):
    with pytest.raises(error, match=where):
        Tokenizer().count_messages(messages)


def test_messages_must_be_a_sequence_of_dicts():
    with pytest.raises(InvalidTypeError, match="messages must be a list, tuple or other iterable, not dict"):
        Tokenizer().count_messages({"role": "user"})
    generated = (m for m in COOKBOOK_MESSAGES)
    assert Tokenizer("cl100k_base").count_messages(generated) == 129
    with pytest.raises(InvalidTypeError, match="message must be a dict"):
        Tokenizer().count_message([])


def test_cyclic_input_is_refused_not_a_crash():
    cyclic: dict = {"k": "v"}
    cyclic["self"] = cyclic
    message = {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": cyclic}]}
    with pytest.raises(InvalidInputError, match=r"^content\[0\]\.input\.self\.self.*: nested more than 256"):
        Tokenizer().count_message(message)
    with pytest.raises(InvalidInputError):
        reference.Tokenizer().count_message(message)


class Weird(int):
    """An int subclass whose own methods must not be used to write it out."""

    def __index__(self):
        return 7

    def __repr__(self):
        return "weird"


def test_int_subclasses_are_written_as_json_dumps_writes_them():
    for value in (Weird(3), Weird(10**30), True, 2**80):
        message = {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {"n": value}}]}
        assert Tokenizer().count_message(message) == reference.Tokenizer().count_message(message)


def test_an_int_too_long_to_write_is_refused():
    message = {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {"n": 10**5000}}]}
    with pytest.raises(InvalidInputError, match=r"content\[0\]\.input\.n"):
        Tokenizer().count_message(message)
    with pytest.raises(InvalidInputError):
        reference.Tokenizer().count_message(message)


def test_cyclic_tool_results_are_refused_with_a_short_message():
    block: dict = {"type": "tool_result", "tool_use_id": "t"}
    block["content"] = [block]
    message = {"role": "user", "content": [block]}
    with pytest.raises(InvalidInputError) as info:
        Tokenizer().count_messages([message])
    message_text = str(info.value)
    assert message_text.startswith("messages[0].content[0].content[0].content[0]")
    assert message_text.endswith("…: nested more than 256 levels deep (a reference cycle?)")
    assert len(message_text) < 200
    with pytest.raises(InvalidInputError):
        reference.Tokenizer().count_messages([message])


def test_cyclic_schemas_are_refused():
    prop: dict = {"type": "object"}
    prop["properties"] = {"again": prop}
    tools = [{"name": "f", "parameters": {"properties": {"p": prop}}}]
    with pytest.raises(InvalidInputError, match=r"^tools\[0\]\.parameters\.properties\.p\.properties\.again"):
        Tokenizer().count_tools(tools)
    with pytest.raises(InvalidInputError):
        reference.Tokenizer().count_tools(tools)


def test_schema_errors_name_the_property():
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"properties": {"loc": {"description": 5}}}},
        }
    ]
    with pytest.raises(
        InvalidTypeError, match=r"tools\[0\]\.function\.parameters\.properties\.loc\.description"
    ):
        Tokenizer().count_tools(tools)
    with pytest.raises(InvalidTypeError, match=r"tools\[0\]\.input_schema\.properties"):
        Tokenizer().count_tools([{"name": "f", "input_schema": {"properties": {(1, 2): {}}}}])


def test_tool_schema_errors_name_the_tool():
    with pytest.raises(InvalidInputError, match=r"tools\[1\]\.function\.name"):
        Tokenizer().count_tools([{"name": "ok"}, {"type": "function", "function": {"description": "x"}}])
