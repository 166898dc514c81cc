"""PromptParts: prefix stability across turns, cache breakpoints, canonical
tool schemas, the prefix hash, the per-layer breakdown."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import subprocess
import sys
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strategies  # noqa: F401  (the hypothesis profile)
from context_core import (
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    PromptBuilder,
    PromptCacheWarning,
    Tokenizer,
)
from context_core.prompt import (
    ANTHROPIC_MIN_CACHE_TOKENS,
    Dimensions,
    Entry,
    PromptParts,
    Skill,
    canonical_json,
    coupling_weights,
    min_cache_tokens,
    split_budget,
    to_anthropic_tool,
    to_openai_tool,
)
from prompt_fixtures import T0, big_builder, prose, tools

MODEL = "claude-sonnet-4-5-20250929"
EPHEMERAL = {"type": "ephemeral"}


def history(turn: int) -> list[dict]:
    """A conversation that grows by one exchange a turn."""
    out = []
    for i in range(turn):
        out.append({"role": "user", "content": f"question {i}"})
        out.append({"role": "assistant", "content": f"answer {i}"})
    out.append({"role": "user", "content": f"question {turn}"})
    return out


def anthropic_prefix(request: dict) -> bytes:
    """The bytes the API caches: the tools and the system blocks through the
    last one marked cache_control, serialized as an SDK would (dict order)."""
    system = request["system"]
    marked = [i for i, block in enumerate(system) if "cache_control" in block]
    assert marked, "no breakpoint in the system blocks"
    return json.dumps({"tools": request.get("tools"), "system": system[: marked[-1] + 1]}).encode()


def openai_prefix(request: dict, volatile: str) -> bytes:
    """The tools and the system message up to this turn's volatile part: the
    token prefix OpenAI caches."""
    first = request["messages"][0]
    head, sep, rest = first["content"].rpartition("\n\n" + volatile)
    assert sep, "the volatile part follows the cached head"
    assert not rest, "nothing follows the volatile part without context"
    return json.dumps({"tools": request.get("tools"), "role": first["role"], "head": head}).encode()


def turn_parts(builder: PromptBuilder, turn: int, **kwargs):
    return builder.build(
        now=T0 + timedelta(minutes=turn),
        cwd=f"/work/run-{turn % 3}",
        memory=f"- [fact] fact number {turn}\n- [fact] the port is 5433",
        instructions=[f"Step {turn}: run the tests"],
        task="run the db migrations" if turn % 2 else "look around",
        **kwargs,
    )


# -- prefix stability ----------------------------------------------------------------------------


def test_prefix_is_byte_identical_across_50_turns_for_both_providers():
    builder = big_builder(stable_words=200)
    anthropic, openai, hashes, volatiles = set(), set(), set(), set()
    for turn in range(50):
        parts = turn_parts(builder, turn)
        volatiles.add(parts.volatile)
        hashes.add(parts.prefix_hash())
        assert not parts.stable_changed
        request = parts.to_anthropic(history(turn), model=MODEL)
        anthropic.add(anthropic_prefix(request))
        # everything after the last breakpoint is the turn's own
        assert request["system"][-1] == {"type": "text", "text": parts.volatile}
        assert request["messages"] == history(turn)
        openai.add(openai_prefix(parts.to_openai(history(turn)), parts.volatile))
    assert len(volatiles) == 50  # the volatile part did change every turn
    assert len(anthropic) == 1
    assert len(openai) == 1
    assert len(hashes) == 1
    assert hashes == {builder.prefix_hash()}


def test_the_volatile_part_never_enters_the_cached_prefix():
    builder = big_builder(stable_words=200)
    parts = turn_parts(builder, 7)
    request = parts.to_anthropic([], model=MODEL)
    cached = anthropic_prefix(request).decode()
    for marker in ("10:37", "fact number 7", "Step 7", "/work/run-1"):
        assert marker in parts.volatile
        assert marker not in cached
        assert marker not in openai_prefix(parts.to_openai(), parts.volatile).decode()


def test_a_stable_change_is_reported_and_changes_the_hash():
    builder = big_builder()
    before = turn_parts(builder, 0)
    with pytest.warns(PromptCacheWarning, match="stable part changed"):
        changed = turn_parts(builder, 1, session_facts={"Session": "sess_123", "Task": "deploy"})
    assert changed.stable_changed
    assert "Task: deploy" in changed.stable
    assert changed.prefix_hash() != before.prefix_hash()
    # the system breakpoint's prefix still matches: only the stable cache entry is lost
    old, new = before.to_anthropic([], model=MODEL), changed.to_anthropic([], model=MODEL)
    assert old["system"][0] == new["system"][0]
    assert old["system"][1] != new["system"][1]
    # later turns keep the new part and report nothing
    after = turn_parts(builder, 2)
    assert not after.stable_changed
    assert after.prefix_hash() == changed.prefix_hash()
    # the same facts again (another dict order) are no change
    again = turn_parts(builder, 3, session_facts={"Task": "deploy", "Session": "sess_123"})
    assert not again.stable_changed
    assert again.prefix_hash() == changed.prefix_hash()


def test_a_stable_value_left_out_is_kept():
    builder = big_builder(stable_words=50)
    before = turn_parts(builder, 0)
    assert "## Project\n" in before.stable
    with pytest.warns(PromptCacheWarning):
        changed = turn_parts(builder, 1, session_facts={"Session": "sess_9"})
    assert changed.stable == before.stable.replace("Session: sess_123\nTask: fix_build", "Session: sess_9")
    with pytest.warns(PromptCacheWarning):
        context = turn_parts(builder, 2, session_context=[("Project", "small")])
    assert context.stable == "## Session Facts\nSession: sess_9\n\n## Project\nsmall"


def test_new_session_changes_the_stable_part_without_a_warning():
    builder = big_builder()
    before = builder.prefix_hash()
    builder.new_session(session_facts={"Session": "sess_456"})
    parts = turn_parts(builder, 0)
    assert not parts.stable_changed
    assert parts.stable == "## Session Facts\nSession: sess_456"
    assert parts.prefix_hash() != before


def test_the_volatile_part_can_follow_the_conversation():
    builder = big_builder(stable_words=200)
    caller_mark = {"type": "text", "text": "question 3", "cache_control": EPHEMERAL}
    conversation = [*history(3)[:-1], {"role": "user", "content": [caller_mark]}]
    parts = turn_parts(builder, 3)
    request = parts.to_anthropic(conversation, model=MODEL, volatile="user")
    assert [block.get("text") for block in request["system"]] == [parts.system, parts.stable]
    last = request["messages"][-1]
    assert last["content"] == [caller_mark, {"type": "text", "text": parts.volatile}]
    assert conversation[-1]["content"] == [caller_mark]  # the caller's list is not mutated
    openai = parts.to_openai(history(3), volatile="user")
    assert openai["messages"][-1]["content"] == f"question 3\n\n{parts.volatile}"
    assert len(openai["messages"]) == 1 + len(history(3))
    # ending with an assistant message: the volatile part comes as a new user message
    ended = parts.to_anthropic(history(1)[:-1], model=MODEL, volatile="user")
    assert ended["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": parts.volatile}]}


# -- breakpoints -------------------------------------------------------------------------------


def test_breakpoints_close_the_system_and_the_stable_parts():
    parts = turn_parts(big_builder(stable_words=200), 0)
    request = parts.to_anthropic(history(0), model=MODEL, cache_ttl="1h")
    assert request["model"] == MODEL
    assert request["tools"] == [
        {
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
            "name": t["function"]["name"],
        }
        for t in tools()
    ]
    cache = {"type": "ephemeral", "ttl": "1h"}
    assert request["system"] == [
        {"type": "text", "text": parts.system, "cache_control": cache},
        {"type": "text", "text": parts.stable, "cache_control": cache},
        {"type": "text", "text": parts.volatile},
    ]
    openai = parts.to_openai(history(0), model="gpt-4o")
    assert openai["model"] == "gpt-4o"
    assert openai["messages"][0] == {
        "role": "system",
        "content": f"{parts.system}\n\n{parts.stable}\n\n{parts.volatile}",
    }
    assert openai["messages"][1:] == history(0)
    assert [t["function"]["name"] for t in openai["tools"]] == ["tool_0", "tool_1", "tool_2"]


def test_a_breakpoint_below_the_minimum_is_left_out_with_a_warning_once():
    tok = Tokenizer()
    builder = big_builder(system_words=1400, stable_words=800)
    parts = turn_parts(builder, 0)
    system_prefix = parts.breakdown.tools + tok.count(parts.system)
    full_prefix = system_prefix + tok.count(parts.stable)
    assert 1024 <= system_prefix < 2048 <= full_prefix  # the sizes this test needs
    haiku = "claude-3-5-haiku-20241022"
    assert min_cache_tokens(haiku) == 2048
    with pytest.warns(
        PromptCacheWarning, match=rf"system breakpoint is left out.*{system_prefix} tokens.*2048"
    ):
        request = parts.to_anthropic([], model=haiku)
    assert "cache_control" not in request["system"][0]
    assert request["system"][1]["cache_control"] == EPHEMERAL
    # once per prefix and model: the next turns are quiet (warnings are errors here)
    for turn in range(1, 4):
        turn_parts(builder, turn).to_anthropic([], model=haiku)
    # a Sonnet model's minimum is 1024: both kept
    assert all(
        "cache_control" in b for b in turn_parts(builder, 5).to_anthropic([], model=MODEL)["system"][:2]
    )


def test_both_breakpoints_left_out_of_a_small_prompt():
    parts = PromptBuilder("Be brief.", session_facts={"Session": "s"}).build(now=T0)
    with pytest.warns(PromptCacheWarning) as caught:
        request = parts.to_anthropic([], model=MODEL)
    assert len(caught) == 2
    assert not any("cache_control" in block for block in request["system"])
    assert parts.to_anthropic([], model=MODEL, min_cache_tokens=0)["system"][1]["cache_control"] == EPHEMERAL


def test_the_minimum_table_is_editable(monkeypatch):
    parts = turn_parts(big_builder(), 0)
    monkeypatch.setitem(ANTHROPIC_MIN_CACHE_TOKENS, "claude-test", 10**6)
    with pytest.warns(PromptCacheWarning, match="1000000-token minimum"):
        parts.to_anthropic([], model="claude-test-1")


@pytest.mark.parametrize(
    ("model", "minimum"),
    [
        ("claude-sonnet-4-5-20250929", 1024),
        ("claude-opus-4-1-20250805", 1024),
        ("claude-opus-4-20250514", 1024),
        ("claude-opus-4-5", 4096),
        ("claude-haiku-4-5-20251001", 4096),
        ("claude-3-5-haiku-latest", 2048),
        ("claude-3-haiku-20240307", 2048),
        ("claude-3-7-sonnet-20250219", 1024),
        ("anthropic.claude-3-5-haiku-20241022-v1:0", 2048),
        ("claude-3-5-haiku@20241022", 2048),
        ("some-future-model", 1024),
    ],
)
def test_minimum_cacheable_lengths_by_model(model, minimum):
    assert min_cache_tokens(model) == minimum


def marked(count: int) -> list[dict]:
    """A conversation whose user messages carry ``count`` cache_control marks."""
    messages = []
    for i in range(count):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"q{i}", "cache_control": EPHEMERAL}]}
        )
        messages.append({"role": "assistant", "content": f"a{i}"})
    messages.append({"role": "user", "content": "now"})
    return messages


def breakpoints(request: dict) -> int:
    return json.dumps(request).count('"cache_control"')


@pytest.mark.parametrize(("theirs", "ours"), [(0, 2), (1, 2), (2, 2), (3, 1), (4, 0)])
def test_at_most_four_breakpoints_dropping_ours_system_first(theirs, ours):
    parts = turn_parts(big_builder(stable_words=200), 0)
    if theirs + 2 > 4:
        with pytest.warns(PromptCacheWarning, match="already carries"):
            request = parts.to_anthropic(marked(theirs), model=MODEL)
    else:
        request = parts.to_anthropic(marked(theirs), model=MODEL)
    assert breakpoints(request) == theirs + ours <= 4
    system_marks = ["cache_control" in block for block in request["system"]]
    assert system_marks == [ours == 2, ours >= 1, False]  # the stable breakpoint is the last to go


def test_more_than_four_breakpoints_of_the_callers_own_are_refused():
    parts = turn_parts(big_builder(), 0)
    with pytest.raises(InvalidInputError, match="5 cache_control"):
        parts.to_anthropic(marked(5), model=MODEL)


def test_breakpoints_in_tool_results_and_tools_count():
    tool = {"name": "look", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}
    builder = big_builder(tools=[tool])
    nested = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "look", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "x", "cache_control": EPHEMERAL}],
                },
                {"type": "text", "text": "more", "cache_control": EPHEMERAL},
            ],
        },
    ]
    parts = turn_parts(builder, 0)
    with pytest.warns(PromptCacheWarning, match="already carries 3"):
        request = parts.to_anthropic(nested, model=MODEL)
    assert request["tools"][0]["cache_control"] == EPHEMERAL
    assert breakpoints(request) == 4


def many_tools(count: int = 30) -> list[dict]:
    return [
        {"name": f"tool_{i}", "description": prose(80, i), "input_schema": {"type": "object"}}
        for i in range(count)
    ]


def test_tools_alone_are_cached_by_a_breakpoint_on_the_last_tool():
    """With no system text the tools are the cached prefix: the breakpoint
    goes on the last tool (Anthropic caches tools, then system)."""
    parts = PromptBuilder("", tools=many_tools()).build(now=T0)
    assert parts.system == ""
    assert parts.breakdown.tools >= 2048
    request = parts.to_anthropic([], model=MODEL, cache_ttl="1h")
    cache = {"type": "ephemeral", "ttl": "1h"}
    assert request["tools"][-1]["cache_control"] == cache
    assert breakpoints(request) == 1
    assert request["system"] == [{"type": "text", "text": parts.volatile}]
    assert "cache_control" not in parts.prefix.system.anthropic_tools[-1]  # the shared schema is not marked
    # with a stable part: the tools breakpoint and the stable one
    with_stable = PromptBuilder("", tools=many_tools(), session_facts={"Session": "s"}).build(now=T0)
    request = with_stable.to_anthropic([], model=MODEL)
    assert request["tools"][-1]["cache_control"] == EPHEMERAL
    assert request["system"][0] == {"type": "text", "text": with_stable.stable, "cache_control": EPHEMERAL}
    assert breakpoints(request) == 2
    # a system part carries the tools in its own prefix: no tools breakpoint then
    request = turn_parts(big_builder(), 0).to_anthropic([], model=MODEL)
    assert all("cache_control" not in tool for tool in request["tools"])


def test_a_tools_breakpoint_follows_the_minimum_and_the_budget_of_four():
    small = PromptBuilder("", tools=tools(1)).build(now=T0)
    with pytest.warns(PromptCacheWarning, match=r"tools breakpoint is left out.*below the 1024"):
        request = small.to_anthropic([], model=MODEL)
    assert breakpoints(request) == 0
    parts = PromptBuilder("", tools=many_tools()).build(now=T0)
    with pytest.warns(PromptCacheWarning, match="tools breakpoint"):
        request = parts.to_anthropic(marked(4), model=MODEL)
    assert breakpoints(request) == 4
    assert "cache_control" not in request["tools"][-1]
    # the caller's own mark on the last tool is theirs: not doubled
    mine = [*many_tools()[:-1], {**many_tools()[-1], "cache_control": EPHEMERAL}]
    request = PromptBuilder("", tools=mine).build(now=T0).to_anthropic([], model=MODEL)
    assert breakpoints(request) == 1


# -- canonical tool schemas and the prefix hash ------------------------------------------------


def reorder(value, rng: random.Random):
    """The same JSON value with every dict's keys in another order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {key: reorder(value[key], rng) for key in keys}
    if isinstance(value, list):
        return [reorder(item, rng) for item in value]
    return value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@given(json_values, st.randoms())
def test_canonical_json_ignores_dict_order(value, rng):
    assert canonical_json(reorder(value, rng)) == canonical_json(value)
    assert json.loads(canonical_json(value)) == value


def test_tool_schemas_render_the_same_bytes_whatever_their_dict_order():
    rng = random.Random(3)
    shuffled = [reorder(t, rng) for t in tools()]
    assert json.dumps(shuffled) != json.dumps(tools())  # the dicts really are in another order
    one = turn_parts(big_builder(tools=tools()), 0)
    two = turn_parts(big_builder(tools=shuffled), 0)
    assert json.dumps(one.to_anthropic([], model=MODEL)["tools"]) == json.dumps(
        two.to_anthropic([], model=MODEL)["tools"]
    )
    assert json.dumps(one.to_openai()["tools"]) == json.dumps(two.to_openai()["tools"])
    assert one.prefix_hash() == two.prefix_hash()


def test_tool_forms_convert_to_each_provider():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    forms = [
        {"type": "function", "function": {"name": "find", "description": "Find.", "parameters": schema}},
        {"name": "find", "description": "Find.", "parameters": schema},
        {"name": "find", "description": "Find.", "input_schema": schema},
    ]
    requests = [turn_parts(big_builder(tools=[form]), 0) for form in forms]
    anthropic = {json.dumps(p.to_anthropic([], model=MODEL)["tools"]) for p in requests}
    openai = {json.dumps(p.to_openai()["tools"]) for p in requests}
    # one result for every form, and its keys in sorted order at every level
    assert anthropic == {
        json.dumps([{"name": "find", "description": "Find.", "input_schema": schema}], sort_keys=True)
    }
    assert openai == {
        json.dumps(
            [
                {
                    "type": "function",
                    "function": {"name": "find", "description": "Find.", "parameters": schema},
                }
            ],
            sort_keys=True,
        )
    }
    server = turn_parts(big_builder(tools=[{"type": "web_search_20250305", "name": "web_search"}]), 0)
    assert server.to_anthropic([], model=MODEL)["tools"] == [
        {"name": "web_search", "type": "web_search_20250305"}
    ]
    with pytest.raises(InvalidInputError, match="no OpenAI form"):
        server.to_openai()


def test_the_prefix_hash_covers_tools_system_and_stable_only():
    base = turn_parts(big_builder(), 0).prefix_hash()
    assert turn_parts(big_builder(), 9).prefix_hash() == base  # another turn, another builder
    variants = [
        big_builder(tools=tools(2)),
        big_builder(conventions=["Use Go 1.22", "Run gofmt"]),
        big_builder(session_facts={"Session": "sess_124", "Task": "fix_build"}),
    ]
    hashes = {turn_parts(b, 0).prefix_hash() for b in variants}
    assert len(hashes) == 3
    assert base not in hashes
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in hashes)


def test_the_prefix_hash_does_not_depend_on_the_process():
    script = (
        "import sys; sys.path.insert(0, 'tests');"
        "from prompt_fixtures import big_builder, skills, tools;"
        "import random;"
        "s = skills(); random.shuffle(s);"
        "b = big_builder(skills=set(s), session_facts={'Task': 'fix_build', 'Session': 'sess_123'});"
        "print(b.prefix_hash())"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout.strip())
    assert outputs == {big_builder().prefix_hash()}


# -- schema depth ---------------------------------------------------------------------------

LIMIT = 256  # the Rust core's JSON depth limit, which the prompt package shares


def nested_tool(levels: int, form: str = "openai", shape: str = "dict") -> dict:
    """A tool nested ``levels`` containers deep, its own dict the first."""
    wrappers = {"openai": 2, "bare": 1, "anthropic": 1}[form]  # the tool's dict (and function)
    value: object = "x"
    for _ in range(levels - wrappers):
        value = {"a": value} if shape == "dict" else [value]
    if form == "openai":
        return {"type": "function", "function": {"name": "deep", "parameters": value}}
    if form == "bare":
        return {"name": "deep", "parameters": value}
    return {"name": "deep", "input_schema": value}


def depth_paths(tool: dict) -> dict:
    """Every path that walks a tool schema: the builder (canonical copy,
    counting, hashing, the never-enter check), parts made by hand, the
    provider forms, canonical JSON."""
    return {
        "PromptBuilder": lambda: PromptBuilder("x", tools=[tool], never_enter=["rm -rf"]),
        "PromptParts": lambda: PromptParts("x", tools=[tool]),
        "to_openai_tool": lambda: to_openai_tool(tool),
        "to_anthropic_tool": lambda: to_anthropic_tool(tool),
        "canonical_json": lambda: canonical_json(tool),
    }


@pytest.mark.parametrize("path", list(depth_paths({})))
@pytest.mark.parametrize(("form", "shape"), [("openai", "dict"), ("bare", "list"), ("anthropic", "dict")])
def test_a_tool_nested_past_the_depth_limit_is_refused(path, form, shape):
    """Refused before a recursive walk meets it (json raised RecursionError
    at about 1,000 levels), at 1,000 levels and one level over the limit."""
    for levels in (1_000, LIMIT + 1):
        with pytest.raises(InvalidInputError, match=f"nested more than {LIMIT} levels deep") as info:
            depth_paths(nested_tool(levels, form, shape))[path]()
        assert isinstance(info.value, ContextCoreError)
        assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("form", "shape"), [("openai", "dict"), ("bare", "list"), ("anthropic", "dict")])
def test_a_tool_at_the_depth_limit_builds_counts_and_renders(form, shape):
    """At the limit every path takes it: the Anthropic form's schema sits one
    level deeper in OpenAI's form, and the tools' list adds one, yet neither
    is refused."""
    tool = nested_tool(LIMIT, form, shape)
    parts = PromptBuilder("x", tools=[tool]).build(now=T0)
    assert parts.breakdown.tools == Tokenizer().count_tools([tool]) > 0
    assert json.loads(json.dumps(parts.to_openai()["tools"])) == [to_openai_tool(tool)]
    request = parts.to_anthropic([], model=MODEL, min_cache_tokens=0)
    assert json.loads(json.dumps(request["tools"])) == [to_anthropic_tool(tool)]
    assert len(parts.prefix_hash()) == 64
    assert json.loads(canonical_json(tool)) == tool
    assert PromptParts("x", tools=[tool]).prefix_hash() == PromptParts("x", tools=[tool]).prefix_hash()


def test_a_tool_that_holds_itself_is_refused():
    tool: dict = {"name": "loop", "parameters": {"type": "object"}}
    tool["parameters"]["properties"] = {"self": tool}
    with pytest.raises(InvalidInputError, match=r"tools\[0\]: nested more than 256 levels deep"):
        PromptBuilder("x", tools=[tool])


# -- bad inputs ---------------------------------------------------------------------------------

SMALL = PromptParts("You are terse.", "## Session Facts\nSession: s", "## Context\nnow")


def anthropic(**kwargs):
    return lambda: SMALL.to_anthropic([], **{"model": MODEL, **kwargs})


def build(**kwargs):
    return lambda: PromptBuilder("x").build(now=T0, **kwargs)


def builder(**kwargs):
    return lambda: PromptBuilder("x", **kwargs)


BAD_INPUTS = {
    "to_anthropic model a list": (InvalidTypeError, anthropic(model=["x"])),
    "to_anthropic model empty": (InvalidInputError, anthropic(model="")),
    "to_openai model an int": (InvalidTypeError, lambda: SMALL.to_openai([], model=5)),
    "to_openai a message an int": (InvalidTypeError, lambda: SMALL.to_openai([{"role": "user"}, 1])),
    "to_openai a message a str": (InvalidTypeError, lambda: SMALL.to_openai(["hello"])),
    "max_breakpoints a str": (InvalidTypeError, anthropic(max_breakpoints="4")),
    "max_breakpoints negative": (InvalidInputError, anthropic(max_breakpoints=-1)),
    "cache_ttl unknown": (InvalidInputError, anthropic(cache_ttl="10m")),
    "cache_ttl an int": (InvalidTypeError, anthropic(cache_ttl=300)),
    "build instructions an int": (InvalidTypeError, build(instructions=5)),
    "build instructions of ints": (InvalidTypeError, build(instructions=[5])),
    "build skills None": (InvalidTypeError, build(skills=None)),
    "build skills nested": (InvalidTypeError, build(skills=[["s"]])),
    "build cwd a list": (InvalidTypeError, build(cwd=[1])),
    "build channel an int": (InvalidTypeError, build(channel=5)),
    "build session_facts an int": (InvalidTypeError, build(session_facts=5)),
    "build preferences an int": (InvalidTypeError, build(preferences=5)),
    "build context pairs of ints": (InvalidTypeError, build(context=[5])),
    "build task_budget a str": (InvalidInputError, build(dimensions=Dimensions(), task_budget="4")),
    "conventions an int": (InvalidTypeError, builder(conventions=5)),
    "safety an int": (InvalidTypeError, builder(safety=5)),
    "skills an int": (InvalidTypeError, builder(skills=5)),
    "never_enter an int": (InvalidTypeError, builder(never_enter=5)),
    "never_enter of ints": (InvalidTypeError, builder(never_enter=[5])),
    "memory_guide an int": (InvalidTypeError, builder(memory_guide=5)),
    "session_context title an int": (InvalidTypeError, builder(session_context=[(5, "t")])),
    "tool without a name": (InvalidInputError, builder(tools=[{"description": "d"}])),
    "tool function without a name": (
        InvalidInputError, builder(tools=[{"type": "function", "function": {"description": "d"}}])
    ),
    "tool name an int": (InvalidInputError, lambda: PromptParts("x", tools=[{"name": 5}])),
    "tool nested 1,000 levels deep": (InvalidInputError, builder(tools=[nested_tool(1_000)])),
    "Skill triggers an int": (InvalidTypeError, lambda: Skill("s", "d", "b", triggers=5)),
    "Skill triggers of ints": (InvalidTypeError, lambda: Skill("s", "d", "b", triggers=[5])),
    "Dimensions.add source a list": (InvalidTypeError, lambda: Dimensions().add("x", ["file"])),
    "Dimensions.add label an int": (InvalidTypeError, lambda: Dimensions().add("x", "file", label=5)),
    "Dimensions of ints": (InvalidTypeError, lambda: Dimensions(5)),
    "Entry tag a list": (InvalidTypeError, lambda: Entry(["MEM"], "x")),
    "coupling_weights memories a str": (InvalidInputError, lambda: coupling_weights("3", 0, False, False)),
    "coupling_weights files a float": (InvalidInputError, lambda: coupling_weights(0, 1.5, False, False)),
    "coupling_weights has_error an int": (InvalidTypeError, lambda: coupling_weights(0, 0, 1, False)),
    "split_budget weights a tuple": (InvalidTypeError, lambda: split_budget(10, (1, 1, 1))),
    "render weights a tuple": (InvalidTypeError, lambda: Dimensions().render(10, weights=(1, 1, 1))),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_raise_context_core_errors(case):
    """Each bad input raises the library's own error (InvalidTypeError is a
    TypeError, InvalidInputError a ValueError), never a bare TypeError,
    AttributeError or KeyError from deep inside."""
    expected, call = BAD_INPUTS[case]
    with pytest.raises(expected) as info:
        call()
    assert type(info.value).__module__ == "context_core.errors"


def test_cache_ttl_takes_the_apis_two_values():
    from context_core.prompt import CACHE_TTLS

    parts = turn_parts(big_builder(), 0)
    assert CACHE_TTLS == ("5m", "1h")
    for ttl in CACHE_TTLS:
        request = parts.to_anthropic([], model=MODEL, cache_ttl=ttl)
        assert request["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": ttl}


# -- breakdown ----------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base", "r50k_base"])
def test_layers_sum_to_each_parts_exact_count(encoding):
    tok = Tokenizer(encoding)
    builder = big_builder(system_words=300, stable_words=100, tokenizer=tok)
    parts = turn_parts(builder, 4, skills=["release"], preferences={"tone": "terse"})
    layers = parts.breakdown.layers
    for part in ("system", "stable", "volatile"):
        names = [name for name in layers if name != "tools" and _part(name) == part]
        assert names
        assert (
            sum(layers[name] for name in names)
            == tok.count(getattr(parts, part))
            == getattr(parts.breakdown, part)
        )
    assert layers["tools"] == tok.count_tools(tools()) == parts.breakdown.tools
    assert parts.breakdown.total == sum(layers.values())
    if encoding != "r50k_base":  # there a layer is what it adds to the count of those before it
        assert parts.breakdown["runtime"] == tok.count(
            "## Context\nCurrent date: 2024-01-18 10:34 PST\nWorking directory: /work/run-1\n"
            "User preferences:\n- tone: terse\n\n"
        )
    assert "total=" in parts.breakdown.log_line()


def _part(layer: str) -> str:
    from context_core.prompt import LAYERS

    return LAYERS[layer]


def test_parts_made_by_hand_render_and_count():
    tok = Tokenizer()
    parts = PromptParts("You are terse.", "## Session Facts\nSession: s", "## Context\nnow", tools=tools(1))
    assert parts.breakdown.system == tok.count("You are terse.")
    assert parts.breakdown.volatile == tok.count("## Context\nnow")
    assert parts.to_openai()["messages"][0]["content"] == (
        "You are terse.\n\n## Session Facts\nSession: s\n\n## Context\nnow"
    )
    request = parts.to_anthropic([], model=MODEL, min_cache_tokens=0)
    assert [b["text"] for b in request["system"]] == [
        "You are terse.",
        "## Session Facts\nSession: s",
        "## Context\nnow",
    ]
    assert parts == PromptParts(
        "You are terse.", "## Session Facts\nSession: s", "## Context\nnow", tools=tools(1)
    )
    expected = hashlib.sha256()  # the documented framing, written out independently
    expected.update(b"context_core.prompt.prefix/1\n")
    for label, data in (
        ("tools", canonical_json(tools(1))),
        ("system", "You are terse."),
        ("stable", "## Session Facts\nSession: s"),
    ):
        raw = data.encode()
        expected.update(f"{label} {len(raw)}\n".encode() + raw)
    assert parts.prefix_hash() == expected.hexdigest()
    with pytest.raises(ContextCoreError):
        PromptParts(b"bytes")  # type: ignore[arg-type]


def test_replaced_parts_render_count_and_hash_their_own_text():
    """dataclasses.replace makes new parts: the cached prefix and the
    breakdown come from the new texts, never the old ones."""
    tok = Tokenizer()
    built = turn_parts(big_builder(system_words=50, stable_words=20), 0)
    stable = "## Session Facts\nSession: other"
    for changes in ({"stable": stable}, {"system": "Be brief."}, {"tools": tools(1)}):
        replaced = dataclasses.replace(built, **changes)
        by_hand = PromptParts(replaced.system, replaced.stable, replaced.volatile, replaced.tools)
        assert replaced == by_hand
        assert replaced != built
        assert replaced.prefix_hash() == by_hand.prefix_hash() != built.prefix_hash()
        assert replaced.breakdown.stable == tok.count(replaced.stable)
        assert replaced.breakdown.system == tok.count(replaced.system)
        assert replaced.breakdown.tools == by_hand.breakdown.tools
        request = replaced.to_anthropic([], model=MODEL, min_cache_tokens=0)
        assert [b["text"] for b in request["system"]] == [replaced.system, replaced.stable, replaced.volatile]
        openai = replaced.to_openai()
        assert openai["messages"][0]["content"] == (
            f"{replaced.system}\n\n{replaced.stable}\n\n{replaced.volatile}"
        )
        assert openai.get("tools", []) == by_hand.to_openai().get("tools", [])
    volatile = dataclasses.replace(built, volatile="## Context\nnow")
    assert volatile.breakdown.volatile == tok.count("## Context\nnow")
    assert volatile.to_openai()["messages"][0]["content"].endswith("\n\n## Context\nnow")
    assert volatile.prefix_hash() == built.prefix_hash()
    assert volatile.kept_out == built.kept_out
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(built, _prefix=None)  # not a field one can set


def test_turns_share_the_prefix_objects():
    """The system text and the OpenAI head are the same objects from turn to
    turn (nothing re-rendered)."""
    builder = big_builder(system_words=3000)
    one, two = turn_parts(builder, 0), turn_parts(builder, 1)
    assert one.system is two.system
    first = one.to_openai(volatile="user")["messages"][0]["content"]
    assert first is two.to_openai(volatile="user")["messages"][0]["content"]
    assert prose(3, 1) in one.system


TOOL_STEP = [
    {"role": "user", "content": "Read a.py and show the chart."},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Read it first.", "signature": "sig-1"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "toolu_2", "name": "chart", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def a(): ...", "is_error": False},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "is_error": True,
                "cache_control": {"type": "ephemeral"},
                "content": [
                    {"type": "text", "text": "partial"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iV"}},
                ],
            },
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    {"role": "user", "content": "Now sum it up."},
]


def test_an_anthropic_request_without_tools_says_the_tool_steps_as_text():
    """The Messages API refuses tool_use and tool_result blocks in a request
    that defines no tools (a session reopened without its tools, a summary
    turn): without tools they go as text, each result's image kept, the
    caller's breakpoint kept on what replaced its block; with tools they go
    as they are."""
    bare = PromptBuilder(identity="You are a coding agent.").build(now=T0)
    request = bare.to_anthropic(TOOL_STEP, model=MODEL, min_cache_tokens=0)
    assert "tools" not in request
    sent = request["messages"]
    kinds = [[b["type"] for b in m["content"]] if isinstance(m["content"], list) else "str" for m in sent]
    assert kinds == ["str", ["text", "text", "text"], ["text", "text", "image"], ["text"], "str"]
    assert sent[1]["content"][1]["text"] == '[Called the tool read_file (call toolu_1) with {"path": "a.py"}]'
    assert sent[2]["content"][0]["text"] == "[Result of read_file (call toolu_1):\ndef a(): ...]"
    assert sent[2]["content"][1] == {
        "type": "text",
        "text": "[Result of chart (call toolu_2) (an error):\npartial]",
    }
    assert sent[2]["content"][2]["cache_control"] == {"type": "ephemeral"}
    assert sent[0] is TOOL_STEP[0]  # the messages without tool blocks are passed on as they are
    assert TOOL_STEP[1]["content"][0]["type"] == "thinking"  # and the caller's are not changed
    with_tools = PromptBuilder(identity="You are a coding agent.", tools=tools()).build(now=T0)
    assert with_tools.to_anthropic(TOOL_STEP, model=MODEL, min_cache_tokens=0)["messages"] == TOOL_STEP
    # Input JSON has no form for, and blocks nested in a result where none belongs: said, not raised.
    odd_input = {1: T0, "a": 0}
    odd = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t9", "name": "f", "input": odd_input}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t9",
                    "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "x"}],
                }
            ],
        },
    ]
    sent = bare.to_anthropic(odd, model=MODEL, min_cache_tokens=0)["messages"]
    kinds = {b["type"] for m in sent if isinstance(m["content"], list) for b in m["content"]}
    assert kinds == {"text"}
    assert "(a tool_result block)" in sent[2]["content"][0]["text"]
    circular: dict = {"path": "a.py"}
    circular["self"] = circular
    for arguments in ({("a", 1): "x"}, circular):  # no JSON form at all: said as Python writes it
        call = {"type": "tool_use", "id": "t9", "name": "f", "input": arguments}
        odd[1] = {"role": "assistant", "content": [call]}
        said = bare.to_anthropic(odd, model=MODEL, min_cache_tokens=0)["messages"][1]["content"][0]["text"]
        assert said.startswith("[Called the tool f (call t9) with {")
