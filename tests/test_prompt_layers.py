"""PromptBuilder's layers: resident, on-demand skills, runtime-injected,
memory (MEMORY.md through MemoryFiles), never-enter; the sections in order."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone, tzinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import (
    InvalidInputError,
    InvalidTypeError,
    MemoryFiles,
    MemoryPathError,
    PromptBuilder,
    PromptCacheWarning,
    Tokenizer,
)
from context_core.errors import UnknownSkillError
from context_core.prompt import DEFAULT_MEMORY_GUIDE, Dimensions, Skill, SkillRegistry
from context_core.prompt.escape import caseless
from context_core.prompt.never_enter import Rules
from context_core.prompt.sections import format_time
from prompt_fixtures import PST, T0, big_builder, skills


def test_an_example_prompt_renders_section_by_section():
    builder = PromptBuilder(
        "You are an agent.", session_facts=[("Session", "sess_123"), ("Task", "fix_build")]
    )
    parts = builder.build(
        now=T0,
        cwd="/Users/name/project",
        memory="- Project uses Go 1.21\n",
        instructions=["Run tests with: go test ./..."],
    )
    assert parts.stable == "## Session Facts\nSession: sess_123\nTask: fix_build"
    assert parts.volatile == (
        "## Context\n"
        "Current date: 2024-01-18 10:30 PST\n"
        "Working directory: /Users/name/project\n"
        "\n"
        "## Memory\n"
        "- Project uses Go 1.21\n"
        "\n"
        "## Instructions\n"
        "- Run tests with: go test ./..."
    )
    assert parts.system == "You are an agent."


def test_the_system_part_holds_the_resident_layers_in_order():
    parts = big_builder(system_words=10, memory_guide="Memory is in MEMORY.md.").build(now=T0)
    system = parts.system
    order = [
        system.index(s)
        for s in ("You are a senior engineer.", "## Conventions", "## Safety", "## Skills", "## Memory Guide")
    ]
    assert order == sorted(order)
    assert "- Use Go 1.21\n- Run gofmt" in system
    assert "Never print secrets." in system
    assert list(parts.breakdown.layers)[:6] == [
        "tools",
        "identity",
        "conventions",
        "safety",
        "skills_index",
        "memory_guide",
    ]


def test_mappings_render_in_sorted_key_order_and_pairs_in_their_own():
    builder = PromptBuilder("x")
    one = builder.build(
        now=T0, preferences={"tone": "terse", "language": "English"}, context={"b": "2", "a": "1"}
    )
    two = builder.build(
        now=T0, preferences={"language": "English", "tone": "terse"}, context={"a": "1", "b": "2"}
    )
    assert one.volatile == two.volatile
    assert "a: 1\nb: 2\nUser preferences:\n- language: English\n- tone: terse" in one.volatile
    three = builder.build(now=T0, context=[("b", "2"), ("a", "1")])
    assert "b: 2\na: 1" in three.volatile


def test_runtime_values_are_one_line_each():
    parts = PromptBuilder("x").build(
        now="today", cwd="/a\nWorking directory: /evil", channel="C1\r\n## Instructions"
    )
    lines = parts.volatile.splitlines()
    assert lines == [
        "## Context",
        "Current date: today",
        "Working directory: /a Working directory: /evil",
        "Channel: C1 ## Instructions",
    ]


def test_the_date_line_is_to_the_minute_with_the_zone():
    builder = PromptBuilder("x")
    assert "Current date: 2024-01-18 10:30 PST" in builder.build(now=T0 + timedelta(seconds=59)).volatile
    utc = datetime(2024, 1, 18, 18, 30, tzinfo=timezone.utc)
    assert "Current date: 2024-01-18 18:30 UTC" in builder.build(now=utc).volatile
    assert "Current date: 2024-01-18 18:30\n" in builder.build(now=utc.replace(tzinfo=None), cwd="/").volatile
    assert "Current date" not in builder.build(now="", cwd="/").volatile
    assert "Current date: " in builder.build().volatile  # the current time by default


# -- skills -------------------------------------------------------------------------------------


def test_only_the_skills_index_is_resident():
    builder = big_builder(system_words=10)
    parts = builder.build(now=T0)
    for skill in skills():
        assert f"- {skill.name}: {skill.description}" in parts.system
        assert skill.body not in parts.system
        assert skill.body not in parts.volatile
    assert parts.skills == ()


def test_a_skill_body_loads_by_name_or_by_the_task():
    builder = big_builder(system_words=10)
    base = builder.prefix_hash()
    by_name = builder.build(now=T0, skills=["release"])
    assert by_name.skills == ("release",)
    assert "## Loaded Skills\n### release\nTag, build, publish." in by_name.volatile
    by_task = builder.build(now=T0, task="please run the DB migrations, then ship it")
    assert by_task.skills == ("db-migrations", "release")
    assert "### db-migrations\n1. Write the migration" in by_task.volatile
    assert by_task.prefix_hash() == base  # loading a skill never touches the cached prefix
    assert builder.build(now=T0, task="nosql and sqlite").skills == ()  # whole words only
    assert builder.build(now=T0, task="SQL: count rows").skills == ("sql",)
    assert builder.build(now=T0, task="修复数据库迁移").skills == ("sql",)  # CJK triggers as substrings
    assert by_task.breakdown["skills"] > 0


def test_the_task_is_shown_as_well_as_picking_skills():
    builder = big_builder(system_words=10)
    parts = builder.build(now=T0, instructions=["be careful"], task="please run the DB migrations")
    assert parts.volatile.endswith("## Instructions\n- be careful\n\n## Task\nplease run the DB migrations")
    assert parts.breakdown["task"] == Tokenizer().count("## Task\nplease run the DB migrations")
    assert "## Task" not in builder.build(now=T0, task="\n\n").volatile
    # A task block stands for the task: the text only picks skills then.
    dims = Dimensions()
    dims.add("Add an idempotency check", "task")
    blocked = builder.build(now=T0, task="run the DB migrations", dimensions=dims, task_budget=200)
    assert blocked.volatile.count("## Task") == 1
    assert "run the DB migrations" not in blocked.volatile.split("## Task")[1]
    assert blocked.skills == ("db-migrations",)
    # Skills picked by a text, without showing it:
    quiet = builder.build(now=T0, skills=[s.name for s in builder.skills.match("ship it")])
    assert quiet.skills == ("release",)
    assert "## Task" not in quiet.volatile


def test_a_skill_can_be_loaded_by_its_triggers_only():
    """A name that is a common word ("test", "go", "a") loads on any task that
    uses the word; match_name=False leaves matching to the triggers (and to
    asking by name)."""
    plain = SkillRegistry([Skill("test", "Run the tests", "pytest -q"), Skill("go", "Go", "go build")])
    assert [s.name for s in plain.match("do not test this, let's go")] == ["go", "test"]
    registry = SkillRegistry(
        [
            Skill("test", "Run the tests", "pytest -q", triggers=("run the tests",), match_name=False),
            Skill("go", "Go", "go build", match_name=False),
            Skill("a", "A", "a", match_name=False),
        ]
    )
    assert registry.match("do not test this; let's go write a function") == []
    assert [s.name for s in registry.match("please run the tests")] == ["test"]
    builder = PromptBuilder("x", skills=registry)
    assert builder.build(now=T0, skills=["go"], task="let's go").skills == ("go",)
    assert Skill("x", "d", "b").match_name  # the default: the name matches too


@pytest.mark.parametrize(
    ("task", "skill"),
    [
        ("ｒｅｌｅａｓｅ the app", "release"),  # full-width letters
        ("RELEASE it", "release"),
        ("ship\u00a0it now", "release"),  # a no-break space between a trigger's words
        ("re\u200blease", "release"),  # a zero-width space inside the word
        ("order a cafe\u0301 au lait", "coffee"),  # a decomposed é is one word, and matches é
        ("eine STRASSE bauen", "street"),  # caseless: ß matches SS
    ],
)
def test_tasks_and_triggers_match_as_read(task, skill):
    registry = SkillRegistry(
        [
            *skills(),
            Skill("coffee", "Coffee", "brew", triggers=("café au lait",)),
            Skill("street", "Roads", "pave", triggers=("Straße",)),
        ]
    )
    assert [s.name for s in registry.match(task)] == [skill]


VOCABULARY = ["db", "migrations", "ship", "it", "run", "the", "tests", "go"]
phrases = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3).map(tuple)


@given(
    st.lists(st.lists(phrases, min_size=1, max_size=3), min_size=1, max_size=4),
    st.lists(st.tuples(st.sampled_from(VOCABULARY), st.sampled_from([" ", ", ", "-", "! "])), max_size=12),
)
def test_matching_finds_exactly_the_phrases_in_the_task(triggers, task_words):
    """Against a plain reading: a skill matches when one of its phrases is a
    run of consecutive words of the task."""
    registry = SkillRegistry(
        Skill(f"s{i}", "d", "b", triggers=[" ".join(p) for p in ps], match_name=False)
        for i, ps in enumerate(triggers)
    )
    task = "".join(word + sep for word, sep in task_words)
    words = [word for word, _ in task_words]
    runs = {tuple(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    expected = [f"s{i}" for i, ps in enumerate(triggers) if runs & set(ps)]
    assert [s.name for s in registry.match(task)] == expected


def test_an_unknown_skill_name_is_refused():
    builder = big_builder(system_words=10)
    with pytest.raises(
        UnknownSkillError, match="no skill named 'deploy'; known: db-migrations, release, sql"
    ) as info:
        builder.build(now=T0, skills=["deploy"])
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, ValueError)


def test_the_registry_is_ordered_by_name_and_checks_its_skills():
    one = SkillRegistry(skills())
    two = SkillRegistry(reversed(skills()))
    assert one.index() == two.index()
    assert one.names() == ["db-migrations", "release", "sql"]
    with pytest.raises(InvalidInputError, match="two skills"):
        SkillRegistry([*skills(), skills()[0]])
    with pytest.raises(InvalidInputError, match="skill name"):
        Skill("bad name", "d", "b")
    assert Skill("x", "one\nline", "b").description == "one line"


# -- memory -------------------------------------------------------------------------------------


def test_the_memory_layer_reads_memory_md_and_sees_changes(tmp_path):
    root = tmp_path / "mem"
    with pytest.raises(MemoryPathError, match="is not a directory") as missing:
        PromptBuilder("x", memory=str(root))  # a typo must not mean no memory, silently
    assert isinstance(missing.value, ValueError)
    assert not root.exists()  # and the builder did not make one
    files = MemoryFiles(root)
    builder = PromptBuilder("x", memory=str(root))
    assert DEFAULT_MEMORY_GUIDE in builder.system
    assert "## Memory" not in builder.build(now=T0).volatile  # no MEMORY.md yet
    files.append(["- [fact] The staging DB port is 5433."])
    first = builder.build(now=T0)
    assert "## Memory\n- [fact] The staging DB port is 5433." in first.volatile
    files.append(["- [decision: db] Use Postgres 16"])
    second = builder.build(now=T0)
    assert second.volatile.endswith("- [fact] The staging DB port is 5433.\n- [decision: db] Use Postgres 16")
    assert second.prefix_hash() == first.prefix_hash()
    override = builder.build(now=T0, memory="- given for this turn")
    assert "- given for this turn" in override.volatile
    assert "5433" not in override.volatile


def test_memory_files_instance_and_a_file_edited_in_place(tmp_path):
    files = MemoryFiles(tmp_path)
    files.append(["- [fact] one"])
    builder = PromptBuilder("x", memory=files, memory_guide="")
    assert "Memory Guide" not in builder.system
    assert "- [fact] one" in builder.build(now=T0).volatile
    path = files.memory_path
    with open(path, "w") as handle:  # same size, new text
        handle.write("- [fact] two\n")
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert "- [fact] two" in builder.build(now=T0).volatile


def test_memory_is_cut_by_whole_lines_and_the_cut_reported():
    tok = Tokenizer()
    lines = [f"- [fact] fact number {i} is about the deploy pipeline" for i in range(40)]
    memory = "\n".join(lines)
    builder = PromptBuilder("x", memory_max_tokens=100)
    parts = builder.build(now="", memory=memory)
    body = parts.volatile.removeprefix("## Memory\n")
    kept = body.splitlines()
    assert kept == lines[: len(kept)]
    assert tok.count(body) <= 100 < tok.count("\n".join(lines[: len(kept) + 1]))
    (cut,) = parts.truncated
    assert (cut.layer, cut.item, cut.tokens, cut.kept) == (
        "memory",
        "MEMORY.md",
        tok.count(memory),
        tok.count(body),
    )
    assert not cut.dropped


def test_a_key_given_again_is_sent_once_its_newest_value_in_the_first_place():
    """Of two facts with one key the later holds (consolidation keeps only
    it): the prompt sends the newest value where the key first came, so a
    correction appended at the end is not cut in favour of the stale
    value a cap's first lines kept (or sent beside it)."""
    tok = Tokenizer()
    lines = ["- [fact: staging db port] the staging DB port is 5433."]
    lines += [f"- [fact] fact number {i} is about the deploy pipeline" for i in range(40)]
    lines += ["- [fact: staging db port] the staging DB port is 5434 now."]
    memory = "\n".join(lines)
    for cap in (None, 60):
        parts = PromptBuilder("x", memory_max_tokens=cap).build(now="", memory=memory)
        kept = parts.volatile.removeprefix("## Memory\n").splitlines()
        assert kept[0] == lines[-1]
        assert "5433" not in parts.volatile
        assert kept[1:] == lines[1 : len(kept)]
        assert cap is None or tok.count("\n".join(kept)) <= cap


def test_a_line_too_long_for_the_cap_is_passed_over_not_the_end_of_memory():
    """One long hand-written line first hid every fact after it (the cut
    kept whole lines from the start only)."""
    tok = Tokenizer()
    prose = "- " + "a long hand-written note about the history of the project " * 40
    lines = [prose] + [f"- [fact] fact number {i} is about the deploy pipeline" for i in range(10)]
    parts = PromptBuilder("x", memory_max_tokens=100).build(now="", memory="\n".join(lines))
    body = parts.volatile.removeprefix("## Memory\n")
    kept = body.splitlines()
    assert kept
    assert kept == lines[1 : len(kept) + 1]
    assert tok.count(body) <= 100
    (cut,) = parts.truncated
    assert cut.kept == tok.count(body)


# -- never-enter --------------------------------------------------------------------------------


def test_never_enter_rules_are_refused_in_the_system_part():
    with pytest.raises(
        InvalidInputError, match="never-enter rule 'no force-push' appears in the conventions"
    ):
        PromptBuilder("x", conventions=["No force-push to main"], never_enter=["no force-push"])


def test_never_enter_rules_are_kept_out_of_every_turn():
    builder = PromptBuilder(
        "x",
        never_enter=["rm -rf"],
        session_facts={"Session": "s1", "Hook": "blocks RM -RF in the shell"},
        skills=[Skill("clean", "Clean up", "Delete build/\nnever rm -rf /")],
    )
    assert "rm -rf" not in builder.stable.lower()
    dims = Dimensions()
    dims.add("the hook blocks rm -rf\nother line", "doc", label="notes")
    dims.add("do it", "task")
    parts = builder.build(
        now=T0,
        memory="- keep this\n- the rm -rf hook exists",
        instructions=["Step 1", "rm -rf is blocked"],
        skills=["clean"],
        dimensions=dims,
        task_budget=500,
    )
    assert "rm -rf" not in parts.text().lower()
    assert "- keep this" in parts.volatile
    assert "other line" in parts.volatile
    assert "Delete build/" in parts.volatile
    assert set(parts.kept_out) >= {
        "Hook: blocks RM -RF in the shell",
        "- the rm -rf hook exists",
        "- rm -rf is blocked",
        "never rm -rf /",
        "the hook blocks rm -rf",
    }


@pytest.mark.parametrize(
    "tool",
    [
        {"name": "shell", "description": "Runs commands (RM -RF is blocked by a hook)"},
        {
            "type": "function",
            "function": {
                "name": "shell",
                "parameters": {"properties": {"cmd": {"description": "never rm -rf", "type": "string"}}},
            },
        },
        {"name": "rm -rf", "input_schema": {"type": "object"}},
    ],
)
def test_a_tool_that_states_a_never_enter_rule_is_refused(tool):
    """Tools are the developer's, like the system part: refused, not edited."""
    with pytest.raises(InvalidInputError, match="never-enter rule 'rm -rf' appears in tools\\[0\\]"):
        PromptBuilder("x", tools=[tool], never_enter=["rm -rf"])


@pytest.mark.parametrize(
    ("rule", "instruction", "kept_out"),
    [
        ("</task>", "never write </task> here", "- never write </task> here"),
        ("# secret", "# secret plan", "- # secret plan"),
        ("---", "---", "- ---"),
    ],
)
def test_never_enter_rules_are_checked_on_the_text_as_given(rule, instruction, kept_out):
    """The check reads a layer's text before escaping changes it (a rule with
    a reserved tag, a leading # or ---), and kept_out reports that text."""
    builder = PromptBuilder(
        "x",
        never_enter=[rule],
        session_facts={"Note": instruction},
        session_context=[("Project", instruction + "\nkept")],
        skills=[Skill("s", "d", f"step\n{instruction}")],
    )
    parts = builder.build(
        now=T0, channel=instruction, instructions=[instruction, "kept"], skills=["s"], memory=instruction
    )
    assert rule not in parts.text()
    for line in (kept_out, f"Note: {instruction}", f"Channel: {instruction}", instruction):
        assert line in parts.kept_out
    assert "- kept" in parts.volatile
    assert "## Project\nkept" in parts.stable
    assert not any("&lt;" in line or "\\" in line for line in parts.kept_out)


def test_a_session_context_title_that_states_a_rule_leaves_its_section_out():
    builder = PromptBuilder(
        "x",
        never_enter=["rm -rf"],
        session_context=[("Hooks: rm -rf", "blocked in the shell"), ("Project", "a web app")],
    )
    assert builder.stable == "## Project\na web app"
    parts = builder.build(now=T0)
    assert parts.kept_out == ("Hooks: rm -rf",)
    assert "blocked in the shell" not in parts.text()


# The rule restated six ways a reader takes for the rule itself; each sits in
# "force-push" or between words, so "production" shows whether the restatement
# reached the prompt.
RULE = "never force-push to production"
EVASIONS = {
    "zero-width space": "never force\u200b-push to production",
    "soft hyphen": "never for\u00adce-push to production",
    "full-width letters": "never \uff46\uff4f\uff52\uff43\uff45-push to production",
    "no-break space": "never\u00a0force-push to production",
    "doubled space": "never force-push  to production",
    "line break": "never force-push\nto production",
}
SYSTEM_LAYERS = {
    "identity": lambda text: {"identity": text},
    "conventions": lambda text: {"conventions": text},
    "safety": lambda text: {"safety": f"Be careful.\n{text}"},
    "skills_index": lambda text: {"skills": [Skill("ship", text, "body")]},
    "memory_guide": lambda text: {"memory_guide": text},
}
TOOLS = {
    "description": lambda text: {"name": "shell", "description": text},
    "parameter description": lambda text: {
        "type": "function",
        "function": {
            "name": "shell",
            "parameters": {"properties": {"cmd": {"description": text, "type": "string"}}},
        },
    },
    "property name": lambda text: {"name": "shell", "input_schema": {"properties": {text: {}}}},
}


@pytest.mark.parametrize("evasion", list(EVASIONS))
@pytest.mark.parametrize("layer", list(SYSTEM_LAYERS))
def test_a_rule_restated_in_the_system_part_is_refused_however_written(layer, evasion):
    """Rules and texts are matched folded: NFKC, format characters removed,
    white space runs (line breaks too) as one space, caseless."""
    arguments = {"identity": "x", **SYSTEM_LAYERS[layer](EVASIONS[evasion])}
    with pytest.raises(InvalidInputError, match=f"never-enter rule {RULE!r} appears in the {layer}"):
        PromptBuilder(arguments.pop("identity"), never_enter=[RULE], **arguments)


@pytest.mark.parametrize("evasion", list(EVASIONS))
@pytest.mark.parametrize("where", list(TOOLS))
def test_a_rule_restated_in_a_tool_is_refused_however_written(where, evasion):
    tool = TOOLS[where](EVASIONS[evasion])
    with pytest.raises(InvalidInputError, match=r"appears in tools\[0\]"):
        PromptBuilder("x", tools=[tool], never_enter=[RULE])


def stable_layers(text: str) -> dict:
    return {
        "session facts": {"session_facts": {"Hook": text, "Session": "keep"}},
        "session context": {"session_context": [("Hooks", f"keep\n{text}")]},
        "session context title": {"session_context": [(text, "body"), ("Project", "keep")]},
    }


@pytest.mark.parametrize("evasion", list(EVASIONS))
@pytest.mark.parametrize("layer", list(stable_layers("x")))
def test_a_rule_restated_in_the_stable_part_is_kept_out_however_written(layer, evasion):
    builder = PromptBuilder("x", never_enter=[RULE], **stable_layers(EVASIONS[evasion])[layer])
    parts = builder.build(now=T0)
    assert "production" not in parts.text()
    assert "keep" in builder.stable
    assert any("production" in line for line in parts.kept_out)


def turn_layers(text: str) -> dict:
    dims = Dimensions()
    dims.add(f"keep\n{text}", "doc", label="notes")
    labelled = Dimensions()
    labelled.add("body", "doc", label=text)
    labelled.add("keep", "task")
    return {
        "date": {"now": text, "cwd": "keep"},
        "cwd": {"cwd": text, "channel": "keep"},
        "channel": {"channel": text, "cwd": "keep"},
        "context": {"context": [("Hook", text), ("Other", "keep")]},
        "preferences": {"preferences": {"hook": text, "other": "keep"}},
        "memory": {"memory": f"- keep\n- {text}"},
        "skills": {"skills": ["ship"]},
        "instructions": {"instructions": f"keep\n{text}"},
        "task": {"dimensions": dims, "task_budget": 500},
        "task label": {"dimensions": labelled, "task_budget": 500},
    }


@pytest.mark.parametrize("evasion", list(EVASIONS))
@pytest.mark.parametrize("layer", list(turn_layers("x")))
def test_a_rule_restated_in_a_turn_is_kept_out_however_written(layer, evasion):
    text = EVASIONS[evasion]
    builder = PromptBuilder("x", never_enter=[RULE], skills=[Skill("ship", "Ship it", f"keep\n{text}")])
    parts = builder.build(**{"now": T0, **turn_layers(text)[layer]})
    assert "production" not in parts.text()
    assert "keep" in parts.volatile
    assert any("production" in line for line in parts.kept_out)


def test_a_rule_is_folded_too():
    """A rule given in full-width letters, with a soft hyphen or a line break
    matches the plain text, and a rule that folds to nothing is refused."""
    for rule in ("\uff52\uff4d -rf", "r\u00adm -rf", "rm\n-rf", "RM  -RF"):
        builder = PromptBuilder("x", never_enter=[rule])
        assert builder.never_enter == (rule,)
        assert builder.build(now=T0, instructions=["rm -rf /", "ok"]).kept_out == ("- rm -rf /",)
        with pytest.raises(InvalidInputError, match="appears in the conventions"):
            PromptBuilder("x", conventions="never rm -rf", never_enter=[rule])
    for blank in ("\u200b", " \u00ad\n", "\u3000"):
        with pytest.raises(InvalidInputError, match="non-blank"):
            PromptBuilder("x", never_enter=[blank])


def test_a_rule_that_spans_lines_leaves_out_the_lines_it_spans():
    """Each line the restatement touches is left out (and listed, a blank one
    between them left out unlisted); the lines around it stay."""
    builder = PromptBuilder("x", never_enter=[RULE])
    parts = builder.build(
        now=T0, memory="- before\n- never force-\u200bpush\n\n  to PRODUCTION now\n- after\n\n- last"
    )
    assert parts.kept_out == ("- never force-\u200bpush", "  to PRODUCTION now")
    assert "## Memory\n- before\n- after\n\n- last" in parts.volatile
    twice = builder.build(
        now=T0, instructions="never force-push\nto production never\nforce-push to production"
    )
    assert twice.kept_out == ("never force-push", "to production never", "force-push to production")
    assert "Instructions" not in twice.volatile
    joined = PromptBuilder("x", never_enter=["rm -rf", RULE]).build(
        now=T0, instructions="never force-push\nrm -rf\nto production\nkeep"
    )
    assert joined.kept_out == ("never force-push", "rm -rf", "to production")  # they would join up
    assert "## Instructions\nkeep" in joined.volatile


RULE_WORDS = ["rm", "-rf", "push", "x"]
PIECES = [
    *RULE_WORDS,
    "\uff52\uff4d",
    "r\u00adm",
    "PUSH",
    " ",
    "  ",
    "\u00a0",
    "\u200b",
    "\n",
    "\r\n",
    "\n\n",
    "\u2028",
]


@given(
    st.lists(
        st.lists(st.sampled_from(RULE_WORDS), min_size=1, max_size=3).map(" ".join), min_size=1, max_size=3
    ),
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
)
def test_what_a_rule_leaves_restates_no_rule_and_what_it_drops_is_listed(rules, text):
    """Whatever lines a restatement spans, and however the lines left join
    up once it is gone, no rule survives; every line that holds text is kept
    or listed, and a text that restates nothing comes back as it was."""
    never_enter = Rules(rules)
    states = [rule for rule in rules if caseless(rule) in caseless(text)]
    assert never_enter.first(text) == (states[0] if states else None)
    kept_out: list[str] = []
    kept = never_enter.keep_out(text, kept_out)
    if not states:
        assert kept is text
        assert kept_out == []
    assert not any(caseless(rule) in caseless(kept) for rule in rules)
    holding = [line for line in text.splitlines() if caseless(line)]
    assert sorted(holding) == sorted([line for line in kept.splitlines() if caseless(line)] + kept_out)


def test_a_rule_from_a_session_context_title_into_its_body_leaves_the_section_out():
    builder = PromptBuilder(
        "x",
        never_enter=[RULE],
        session_context=[("Hooks: never force-push", "to production\nmore"), ("Project", "a web app")],
    )
    assert builder.stable == "## Project\na web app"
    assert builder.build(now=T0).kept_out == ("Hooks: never force-push", "to production")


def test_session_changes_warn_even_when_lines_are_kept_out():
    builder = PromptBuilder("x", never_enter=["secret"], session_facts={"Session": "s1"})
    with pytest.warns(PromptCacheWarning):
        parts = builder.build(now=T0, session_facts={"Session": "s2", "Key": "secret"})
    assert parts.stable_changed
    assert parts.kept_out == ("Key: secret",)


def test_the_date_line_names_the_zone_as_the_datetime_does():
    """format_time writes the zone's own name: a named offset (PST),
    an unnamed one as Python names it, none for a naive time."""
    assert format_time(T0) == "2024-01-18 10:30 PST"
    assert T0.tzinfo is PST
    india = timezone(timedelta(hours=5, minutes=30))
    assert format_time(T0.astimezone(india)) == "2024-01-19 00:00 UTC+05:30"
    assert format_time(T0.replace(tzinfo=None)) == "2024-01-18 10:30"
    assert format_time("yesterday") == "yesterday"
    with pytest.raises(InvalidTypeError):
        format_time(1705600000)


def test_a_zone_whose_name_is_no_text_is_refused_as_the_others_are():
    """A tzinfo whose tzname() is not a str raised datetime's own TypeError
    from prepare(); one named with a lone surrogate failed later, in the
    SDK's encoding of every request."""

    class Numbered(tzinfo):
        def utcoffset(self, dt):
            return timedelta(0)

        def tzname(self, dt):
            return 5

    class Surrogate(Numbered):
        def tzname(self, dt):
            return "Z\ud800"

    with pytest.raises(InvalidTypeError, match=r"now: tzinfo\.tzname"):
        format_time(T0.replace(tzinfo=Numbered()))
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        format_time(T0.replace(tzinfo=Surrogate()))


def fixpoint_lines_out(rules: list[str], text: str) -> list[bool]:
    """The plain reading: search the kept lines' joined folds again and
    again, marking every line a match touches, until nothing is found."""
    from bisect import bisect_right

    from context_core.prompt.escape import caseless

    folded = [caseless(rule) for rule in rules]
    lines = text.splitlines(keepends=True)
    folds = [caseless(line) for line in lines]
    out = [False] * len(lines)
    while True:
        kept = [i for i in range(len(lines)) if not out[i]]
        starts, at = [], 0
        for i in kept:
            starts.append(at)
            at += len(folds[i]) + 1 if folds[i] else 0
        joined = " ".join(folds[i] for i in kept if folds[i])
        found_any = False
        for fold in folded:
            found = joined.find(fold)
            while found >= 0:
                for k in range(bisect_right(starts, found) - 1, bisect_right(starts, found + len(fold) - 1)):
                    out[kept[k]] = True
                found_any = True
                found = joined.find(fold, found + 1)
        if not found_any:
            return out


@given(
    st.lists(
        st.lists(st.sampled_from(RULE_WORDS), min_size=1, max_size=3).map(" ".join), min_size=1, max_size=3
    ),
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
)
def test_the_seam_search_marks_what_searching_everything_again_marks(rules, text):
    """After the first pass only the seams the removed lines open are read
    again (linear, not quadratic, in a cascade of restatements); it must mark
    the lines the plain fixpoint marks."""
    lines, out = Rules(rules).lines_out(text)
    expected = fixpoint_lines_out(rules, text)
    assert (out if lines else [False] * len(expected)) == expected


def test_a_restatement_reaching_several_lines_past_a_seam_is_found():
    """Dropping "gone" joins "never" / "force" with "push": the match reaches
    two lines back from the seam."""
    lines, out = Rules(["gone", "never force push"]).lines_out("never\nforce\ngone\npush\nkeep")
    assert [line for line, gone in zip(lines, out, strict=True) if not gone] == ["keep"]
    assert out == fixpoint_lines_out(["gone", "never force push"], "never\nforce\ngone\npush\nkeep")


def test_two_tools_of_one_name_are_refused_when_the_builder_is_made():
    """Both were sent, and the APIs refuse a request with two tools of one name."""
    from context_core import InvalidInputError
    from context_core.prompt import PromptBuilder

    function = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    anthropic = {"name": "read_file", "input_schema": {"type": "object"}}
    for tools in ([function, function], [anthropic, {**anthropic, "description": "again"}]):
        with pytest.raises(InvalidInputError, match=r"tools\[1\]: 'read_file' is the name of tools\[0\] too"):
            PromptBuilder("You are an agent.", tools=tools)
    other = {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}
    assert len(PromptBuilder("You are an agent.", tools=[function, other]).build().tools) == 2
