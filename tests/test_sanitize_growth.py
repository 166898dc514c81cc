"""A history the funnel answered is run from its last turn on when it grows
(rust/py/src/answered.rs, rust/core/src/sanitize/joints.rs): the answer
must be the whole funnel's (messages, which are the caller's objects, the
lifted system text, every change in order), for any history, damaged or
not, any growth, ids that reach back, and messages changed in place since."""

from __future__ import annotations

import copy
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import Sanitizer
from test_sanitize import anthropic_history, anthropic_junk, openai_history, openai_junk, tool_call

HISTORIES = {"openai": openai_history, "anthropic": anthropic_history}
JUNK = {"openai": openai_junk, "anthropic": anthropic_junk}


def answer(result) -> tuple:
    """A result as data, with which output messages are the input's own objects."""
    return result.messages, result.system, list(result.changes)


def identities(result, history) -> list:
    ids = {id(m): i for i, m in enumerate(history)}
    return [ids.get(id(m)) for m in result.messages]


def reaching_back(draw, provider: str, history: list[dict]) -> list[dict]:
    """Messages that use the tool-call ids already in ``history``."""
    known = [c["id"] for m in history for c in m.get("tool_calls") or []]
    known += [
        b["id"]
        for m in history
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    if not known:
        return []
    call_id = draw(st.sampled_from(known))
    if provider == "openai":
        return draw(
            st.sampled_from(
                [
                    [{"role": "tool", "tool_call_id": call_id, "content": "late"}],
                    [
                        {"role": "user", "content": "again"},
                        {"role": "assistant", "content": None, "tool_calls": [tool_call(call_id)]},
                        {"role": "tool", "tool_call_id": call_id, "content": "reused"},
                    ],
                ]
            )
        )
    return draw(
        st.sampled_from(
            [
                [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "late"}],
                    }
                ],
                [
                    {"role": "user", "content": "again"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": call_id, "name": "f", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "x"}],
                    },
                ],
            ]
        )
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_grown_history_gets_the_whole_funnels_answer(provider, data):
    funnel = Sanitizer(provider)
    history = data.draw(HISTORIES[provider]())  # damaged, often
    if data.draw(st.booleans()):
        history = list(Sanitizer(provider).sanitize(history).messages)  # clean
    for _ in range(data.draw(st.integers(1, 4))):
        funnel.sanitize(history)  # first sight: the list is noted
        funnel.sanitize(history)  # kept
        kind = data.draw(st.sampled_from(["turn", "junk", "back", "same"]))
        if kind == "turn":
            added = data.draw(HISTORIES[provider]())
        elif kind == "junk":
            added = [copy.deepcopy(JUNK[provider](data.draw))]
        elif kind == "back":
            added = reaching_back(data.draw, provider, history)
        else:
            added = []
        grown = history + added
        ours = funnel.sanitize(grown)
        whole = Sanitizer(provider).sanitize(grown)
        assert answer(ours) == answer(whole)
        assert identities(ours, grown) == identities(whole, grown)
        assert answer(funnel.sanitize(grown)) == answer(whole)  # asked again
        history = list(whole.messages) if data.draw(st.booleans()) else grown


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_message_changed_in_place_is_judged_again(provider, data):
    funnel = Sanitizer(provider)
    history = data.draw(HISTORIES[provider]())
    if data.draw(st.booleans()):
        history = list(Sanitizer(provider).sanitize(history).messages)
    if not history:
        return
    funnel.sanitize(history)  # first sight: the list is noted
    first = funnel.sanitize(history)  # kept
    if data.draw(st.booleans()) and first.messages:  # or change a repaired copy handed out
        handed = first.messages[data.draw(st.integers(0, len(first.messages) - 1))]
        if handed is not history[0] and all(handed is not m for m in history):
            handed["content"] = "changed by the caller"
    message = history[data.draw(st.integers(0, len(history) - 1))]
    change = data.draw(st.sampled_from(["blank", "role", "calls", "nested"]))
    if change == "blank":
        message["content"] = ""
    elif change == "role":
        message["role"] = "assistant" if message["role"] == "user" else "user"
    elif change == "calls":
        message["tool_calls"] = [tool_call("fresh")]
    elif isinstance(message.get("content"), list) and message["content"]:
        message["content"].append(copy.deepcopy(message["content"][0]))
    else:
        message["content"] = [{"type": "text", "text": "   "}]
    grown = [*history, {"role": "user", "content": "next"}]
    assert answer(funnel.sanitize(grown)) == answer(Sanitizer(provider).sanitize(grown))


def test_a_growing_agent_session_is_clean_every_turn_and_keeps_the_callers_objects():
    from agent_sessions import generate

    session = generate(300, "openai", seed=4)
    funnel = Sanitizer("openai")
    history = list(Sanitizer("openai").sanitize(session.messages[: session.calls[-3]]).messages)
    # Where a server asks the model: before each assistant message.
    ends = [i for i in range(len(history) // 2, len(history)) if history[i]["role"] == "assistant"]
    assert len(ends) > 20
    for end in ends:
        result = funnel.sanitize(history[:end])
        assert not result.changed
        assert all(a is b for a, b in zip(result.messages, history[:end], strict=True))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_damaged_agent_session_gets_the_whole_funnels_answer_every_turn(provider):
    """The generated sessions carry defects (a reused id, empty results, a
    call whose result never came): every turn's answer is the whole funnel's."""
    from agent_sessions import generate

    session = generate(400, provider, seed=6)
    funnel = Sanitizer(provider)
    for end in session.calls:
        history = session.messages[:end]
        assert answer(funnel.sanitize(history)) == answer(Sanitizer(provider).sanitize(history))


def grown_twice(funnel: Sanitizer, history: list[dict], added: list[dict]):
    """``history`` answered (noted, then kept), then grown by ``added``."""
    funnel.sanitize(history)
    first = funnel.sanitize(history)
    return first, funnel.sanitize(history + added)


def test_a_refused_message_in_the_tail_is_named_by_its_place_in_the_whole():
    options = {"on_invalid": "drop"}
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "next"},
    ]
    added = [{"role": "user", "content": 5}, {"role": "assistant", "content": "ok"}]
    _, grown = grown_twice(Sanitizer("openai", **options), history, added)
    assert answer(grown) == answer(Sanitizer("openai", **options).sanitize(history + added))


def test_a_tail_whose_first_message_is_dropped_is_answered_whole():
    options = {"placeholder_patterns": [r"hello\nworld"]}
    history = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "hello"},
    ]
    added = [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "z", "content": "r"},
                {"type": "text", "text": "world"},
            ],
        },
        {"role": "assistant", "content": "reply"},
    ]
    _, grown = grown_twice(Sanitizer("anthropic", **options), history, added)
    assert answer(grown) == answer(Sanitizer("anthropic", **options).sanitize(history + added))


def test_a_lifted_system_list_changed_by_the_caller_is_not_handed_out_again():
    history = [
        {"role": "system", "content": [{"type": "text", "text": "rules"}]},
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "more"},
    ]
    funnel = Sanitizer("anthropic")
    funnel.sanitize(history)
    first = funnel.sanitize(history)
    first.system[0]["cache_control"] = {"type": "ephemeral"}
    first.system.append({"type": "text", "text": "added by the caller"})
    added = [{"role": "assistant", "content": "sure"}, {"role": "user", "content": "and?"}]
    assert answer(funnel.sanitize(history + added)) == answer(
        Sanitizer("anthropic").sanitize(history + added)
    )


def test_one_conversation_keeps_one_answer():
    """A conversation whose tail keeps reaching back (a reused id) must not
    fill the funnel's slots with its own prefixes."""
    import sys

    funnel = Sanitizer("openai")
    first = {"role": "user", "content": "start"}
    history = [
        first,
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "ok"},
    ]
    other = [{"role": "user", "content": "another conversation"}, {"role": "assistant", "content": "yes"}]
    funnel.sanitize(other)
    funnel.sanitize(other)
    counts = []
    for turn in range(12):
        history = [
            *history,
            {"role": "user", "content": f"turn {turn}"},
            {"role": "tool", "tool_call_id": "c1", "content": "late"},
        ]
        funnel.sanitize(history)
        funnel.sanitize(history)
        counts.append(sys.getrefcount(first))
    assert counts[-1] <= counts[2] + 2, counts  # not one more kept prefix a turn


def asked_twice_is_whole(funnel: Sanitizer, history: list[dict], provider: str):
    """``funnel``'s answer for ``history`` (asked twice: noted, then kept),
    checked against a fresh funnel's."""
    funnel.sanitize(history)
    ours = funnel.sanitize(history)
    whole = Sanitizer(provider).sanitize(history)
    assert answer(ours) == answer(whole)
    assert identities(ours, history) == identities(whole, history)
    return ours


def tool_round(provider: str, call_id: str, result: str) -> list[dict]:
    """One round of the agent loop: a call and its result."""
    if provider == "openai":
        return [
            {"role": "assistant", "content": None, "tool_calls": [tool_call(call_id)]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}]},
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_turn_in_progress_with_repairs_grows_with_the_whole_funnels_answer(provider, data):
    """Round after round of one turn, with repairs in the turn itself (an
    empty result, a call the user spoke over, so the user's words merge
    into the turn's start, junk): every step's answer is the whole funnel's,
    and what comes before the turn is handed out as the same objects."""
    funnel = Sanitizer(provider)
    history = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "part one"},
        {"role": "assistant", "content": "part two"},  # merged: a copy before the turn
        {"role": "user", "content": "the turn in progress"},
    ]
    before = None
    clean_so_far = True
    for step in range(data.draw(st.integers(2, 7))):
        kind = data.draw(st.sampled_from(["round", "empty", "spoke over", "junk", "text"]))
        if kind == "round":
            added = tool_round(provider, f"c{step}", f"result {step}")
        elif kind == "empty":
            added = tool_round(provider, f"c{step}", "")
        elif kind == "spoke over":
            added = [tool_round(provider, f"c{step}", "")[0], {"role": "user", "content": f"wait {step}"}]
        elif kind == "junk":
            added = [copy.deepcopy(JUNK[provider](data.draw))]
        else:
            added = [{"role": "assistant", "content": f"thinking aloud {step}"}]
        history = history + added
        ours = asked_twice_is_whole(funnel, history, provider)
        copy_before_the_turn = ours.messages[1]
        assert all(copy_before_the_turn is not h for h in history)
        # Junk (a legacy function call, say) is judged by the whole funnel every time.
        clean_so_far = clean_so_far and kind != "junk"
        if before is not None and clean_so_far:
            assert copy_before_the_turn is before, "the same object, turn after turn"
        before = copy_before_the_turn


def test_a_history_that_stopped_extending_is_kept_again_when_it_grows():
    """A history that once did not extend what was kept (a moving window
    with the same first message) is remembered again after a short wait:
    its repaired copies are the same objects turn after turn once more."""
    funnel = Sanitizer("openai")
    history = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "part one"},
        {"role": "assistant", "content": "part two"},  # merged: a copy
        {"role": "user", "content": "next"},
    ]
    funnel.sanitize(history)
    funnel.sanitize(history)
    for turn in range(6):  # the window moves: the same first message, a different rest
        funnel.sanitize([history[0], {"role": "assistant", "content": f"other {turn}"}])
    stable = []
    for turn in range(12):
        history = [
            *history,
            {"role": "assistant", "content": f"a{turn}"},
            {"role": "user", "content": f"u{turn}"},
        ]
        first = funnel.sanitize(history)
        again = funnel.sanitize(history)
        assert answer(first) == answer(Sanitizer("openai").sanitize(history))
        stable.append(first.messages[1] is again.messages[1])
    assert stable[-4:] == [True] * 4, stable


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_turn_answered_whole_hands_out_the_same_copies(provider):
    """A turn in progress holding a result for a call from before it (before
    any call of its own) cannot be extended, so each call is answered by
    the whole funnel; its repaired copies, equal each time, are still
    handed out as the same objects."""
    funnel = Sanitizer(provider)
    history = [
        {"role": "user", "content": "start"},
        *tool_round(provider, "c1", "first result"),
        {"role": "assistant", "content": "part one"},
        {"role": "assistant", "content": "part two"},  # merged: a copy
        {"role": "user", "content": "again"},
        tool_round(provider, "c1", "a late result")[1],  # reaches back: repaired, whole
    ]
    answers = []
    for step in range(4):
        history = history + tool_round(provider, f"n{step}", f"round {step}")
        answers.append(funnel.sanitize(history))
        whole = Sanitizer(provider).sanitize(history)
        assert answer(answers[-1]) == answer(whole)
    copies = [[i for i, m in enumerate(a.messages) if all(m is not h for h in history)] for a in answers]
    assert copies[0], "the history has repaired copies"
    # From the second sight of the history on (the first is only noted).
    for earlier, later in itertools.pairwise(answers[1:]):
        shared = [i for i in copies[0] if i < len(earlier.messages)]
        assert all(earlier.messages[i] is later.messages[i] for i in shared)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("result_first", [False, True])
def test_a_turn_reusing_an_id_from_long_ago_gets_the_whole_funnels_answer(provider, result_first):
    """A call in the turn in progress reuses an id kept long before (the
    run after the split is told of the calls before it), or a result
    reaches back before any call of the turn (answered whole): either way,
    every step is the whole funnel's answer."""
    funnel = Sanitizer(provider)
    history = [{"role": "user", "content": "start"}, *tool_round(provider, "old", "first")]
    for turn in range(3):
        history += [{"role": "assistant", "content": f"done {turn}"}, {"role": "user", "content": f"u{turn}"}]
        history += tool_round(provider, f"t{turn}", "ok")
    history += [
        {"role": "assistant", "content": "so far"},
        {"role": "user", "content": "the turn in progress"},
    ]
    reused = tool_round(provider, "old", "the same id again")
    steps = [reused[1:], reused[:1]] if result_first else [reused]
    steps += [tool_round(provider, f"n{k}", f"round {k}") for k in range(3)]
    for added in steps:
        history = history + added
        ours = asked_twice_is_whole(funnel, history, provider)
    if not result_first:
        assert any(c.action == "drop_duplicate_call" for c in ours.changes), "the id is reused"


def _call(call_id: str, content=None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [tool_call(call_id)]}


def _result(call_id: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


def _user(text):
    return {"role": "user", "content": text}


def _assistant(text):
    return {"role": "assistant", "content": text}


def _kept(funnel: Sanitizer, history: list[dict]) -> None:
    funnel.sanitize(history)  # noted
    funnel.sanitize(history)  # kept


def _is_whole(funnel: Sanitizer, history: list[dict], provider: str = "openai") -> None:
    ours = funnel.sanitize(history)
    whole = Sanitizer(provider).sanitize(history)
    assert answer(ours) == answer(whole)
    assert identities(ours, history) == identities(whole, history)


def test_a_branch_that_moves_an_id_earlier_is_judged_with_it():
    """A history that branches off a kept one within its tail: ids first
    seen in the replaced tail are forgotten, so a later reuse is seen."""
    u0, a1, u2 = _user("hi"), _assistant("ok"), _user("q")
    funnel = Sanitizer("openai")
    _kept(funnel, [u0, a1, u2, _call("A"), _result("A"), _call("Y"), _result("Y"), _assistant("fin")])
    branch = [u0, a1, u2, _call("Y"), _result("Y"), _assistant("done"), _user("new"), _assistant("x")]
    _is_whole(funnel, branch)
    _is_whole(funnel, [*branch[:7], _call("Y"), _result("Y"), _assistant("r2")])
    funnel = Sanitizer("openai")
    _kept(funnel, [u0, a1, u2, _call("A"), _result("A"), _call("W"), _result("W"), _assistant("fin")])
    pending = [u0, a1, u2, _call("W"), _assistant("done"), _user("new"), _assistant("x")]
    _is_whole(funnel, pending)
    _is_whole(funnel, [*pending[:6], _result("W"), _assistant("r2")])


def test_only_an_assistants_own_calls_count_as_made():
    """OpenAI pairs ``tool_calls`` only: a ``tool_use`` block in a user
    message before the split is no call, so reusing its id is no duplicate."""
    first = {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "X", "name": "f", "input": {}},
        ],
    }
    history = [first, _assistant("ok"), _user("q"), _assistant("a")]
    funnel = Sanitizer("openai")
    _kept(funnel, history)
    _is_whole(funnel, [*history, _user("again"), _call("X"), _result("X"), _assistant("done")])


def test_a_dropped_first_assistant_does_not_bound_an_earlier_calls_reach():
    """An empty assistant message is dropped before pairing: a result after
    it still belongs to the call before the split, and moves up to it."""
    u0, a1, u2 = _user("hi"), _call("Z", "calling"), _user("q")
    funnel = Sanitizer("openai")
    _kept(funnel, [u0, a1, u2, _assistant("ans")])
    _is_whole(funnel, [u0, a1, u2, _assistant(""), _result("Z"), _assistant("done")])


def test_a_copy_handed_back_is_the_callers_own_and_copies_match_by_type():
    """A repaired copy passed back as a message is the caller's object, not
    also the answer's copy; and a copy is reused only if equal down to its
    types (``1`` is not ``True``, ``0.0`` is not ``-0.0``)."""
    u0, a1, u2, a3 = (
        _user("hi"),
        {"role": "assistant", "content": "x", "tool_calls": []},
        _user("q"),
        _assistant("y"),
    )
    funnel = Sanitizer("openai")
    history = [u0, a1, u2, a3]
    _kept(funnel, history)
    handed = funnel.sanitize(history).messages[1]
    _is_whole(funnel, [*history, _user("z"), handed])
    funnel = Sanitizer("openai")
    flagged = {"role": "assistant", "content": "x", "tool_calls": [], "n": 1}
    late = _result("gone")
    _kept(funnel, [u0, flagged, u2, late])
    flagged["n"] = True  # changed in place: the whole funnel answers again
    ours = funnel.sanitize([u0, flagged, u2, late])
    assert ours.messages[1]["n"] is True
    flagged["n"] = 0.0
    funnel.sanitize([u0, flagged, u2, late])
    flagged["n"] = -0.0
    assert str(funnel.sanitize([u0, flagged, u2, late]).messages[1]["n"]) == "-0.0"
