"""Every policy on a log chooses from the headers and decodes only what it
keeps. What it returns must be what the same policy returns over the log's
decoded context view, field by field: replayed agent sessions, both
providers, budgets from 2K to everything, tool results capped, summaries in
the log, errors alike."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from agent_sessions import generate, turn_in_progress
from context_core import (
    InvalidInputError,
    MessageLog,
    NothingToSendError,
    OverBudgetError,
    PriorityAssembly,
    ShapeHistory,
    Tokenizer,
    WeightedWindow,
    _log_selection,
)
from context_core._core import LOG_CACHED_BYTES, PARALLEL_FACTS_FROM, SEGMENT_PREFIX
from context_core._log_selection import count_cut_results, from_view
from context_core.reference import log as reference_log

BUDGETS = [2_000, 8_000, 32_000, 10**9]
MEMORIES = ["The refund worker retries on a queue.", "Deploys never happen on Fridays."]


def policies(provider: str, cap: int | None) -> dict:
    shape = ShapeHistory(provider=provider, summary="Earlier work.", tool_result_cap=cap)
    weighted = WeightedWindow(provider=provider, tool_result_cap=cap)
    priority = PriorityAssembly(provider=provider, tool_result_cap=cap)
    return {
        "shape": lambda source, budget, now: shape.select(source, budget),
        "weighted": lambda source, budget, now: weighted.select(source, budget, now=now),
        "priority": lambda source, budget, now: priority.select(
            source, budget, memories=MEMORIES, global_summary="The work so far."
        ),
    }


def same_choice(log: MessageLog, select, budget: int, now: float | None) -> None:
    """The log's answer is the decoded view's, or both raise the same error."""
    try:
        expected = from_view(log, lambda view: select(view, budget, now))
    except (OverBudgetError, NothingToSendError) as error:
        refused = error
    else:
        refused = None
    if refused is not None:
        with pytest.raises(type(refused), match=f"^{re.escape(str(refused))}$") as raised:
            select(log, budget, now)
        if isinstance(refused, NothingToSendError):  # from_view keys it by seq, as a selection
            assert (raised.value.kept, raised.value.budget) == (refused.kept, refused.budget)
        return
    chosen = select(log, budget, now)
    assert chosen.messages == expected.messages
    assert chosen.system == expected.system
    assert chosen.kept == expected.kept
    assert chosen.dropped == expected.dropped
    assert chosen.breakdown == expected.breakdown
    assert chosen.truncated == expected.truncated
    assert chosen.turns == expected.turns
    assert chosen.changes == expected.changes
    assert chosen.missing_dependencies == expected.missing_dependencies


def now_of(messages: list[dict]) -> float | None:
    stamps = [m["timestamp"] for m in messages if "timestamp" in m]
    return stamps[-1] + 5 if stamps else None


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("cap", [2000, 300, None])
def test_a_replayed_session_chooses_from_the_headers_what_the_view_gives(tmp_path, provider, cap):
    session = generate(260, provider, seed=21)
    chosen_by = policies(provider, cap)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        written = 0
        for turn, end in enumerate(session.calls):
            log.append_many(session.messages[written:end])
            written = end
            if turn % 3:
                continue
            now = now_of(session.messages[:end])
            for budget in BUDGETS:
                for select in chosen_by.values():
                    same_choice(log, select, budget, now)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_log_with_summaries_chooses_what_its_view_gives(tmp_path, provider):
    """Summary nodes stand in for what they cover: the view holds the
    anchors, the global and segment summaries, then the raw tail."""
    session = generate(300, provider, seed=4)
    chosen_by = policies(provider, 2000)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(session.messages[:120])
        log.add_summary("Segment one: the refund worker was read.", (0, 59), level=2)
        log.add_summary("Segment two: the retry was fixed.", (60, 119), level=2)
        log.add_summary("All of it: retries fixed, tests pass.", (0, 119), level=3)
        written = 120
        for end in [e for e in session.calls if e > 120][::4]:
            log.append_many(session.messages[written:end])
            written = end
            for budget in BUDGETS:
                for select in chosen_by.values():
                    same_choice(log, select, budget, None)


def test_a_result_over_the_cap_is_cut_and_counted_once(tmp_path):
    """The turn in progress holds a 20,000-token result: counted as cut, it
    fits an 8K window in every policy (counted whole, it could not)."""
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "read the file"})
        call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        log.append({"role": "assistant", "content": None, "tool_calls": [call]})
        log.append({"role": "tool", "tool_call_id": "c1", "content": "word " * 20_000})
        for select in policies("openai", 2000).values():
            chosen = select(log, 8_000, None)
            assert chosen.kept == (0, 1, 2)
            assert [(t.index, t.tokens, t.kept) for t in chosen.truncated] == [(2, 20_001, 2000)]
            assert chosen.breakdown.total <= 8_000
        # Every result was looked at: the next turn has nothing to cut again.
        assert log._over_cap(2000)[0] == []


def test_a_node_pinned_at_append_is_pinned_in_every_policy(tmp_path):
    """``append(pinned=True)`` marks the header only: the window keeps the
    node and lays it out as a pinned message (first, for priority assembly)."""
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "hello"})
        log.append({"role": "assistant", "content": "The deploy key is K-7781."}, pinned=True)
        for i in range(40):
            log.append({"role": "user", "content": f"question {i} " + "filler " * 60})
            log.append({"role": "assistant", "content": f"answer {i} " + "filler " * 60})
        for name, select in policies("openai", 2000).items():
            chosen = select(log, 1_500, None)
            assert 1 in chosen.kept, name
            assert chosen.breakdown.pinned >= 10, name
        priority = PriorityAssembly().select(log, 1_500)
        assert priority.messages[0]["content"] == "The deploy key is K-7781."


def test_summaries_and_pinned_copies_read_as_the_same_objects_each_turn(tmp_path):
    """A summary node reads as a system message, and a node pinned at
    append as a pinned copy: made once, so turn after turn the window
    holds the same objects and selection recalls them (a sliding window is
    then read from the run the last turn left). The log's own dicts are
    read-only, and so are these."""
    from context_core._log_selection import render

    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "hello"})
        log.append({"role": "assistant", "content": "The deploy key is K-7781."}, pinned=True)
        for i in range(6):
            log.append({"role": "user", "content": f"question {i}"})
        summary = log.add_summary("the deploy was set up", covers=(2, 5))
        first, again = log.context_view(), log.context_view()
        at = next(i for i, m in enumerate(first) if m["content"].endswith("the deploy was set up"))
        assert first[at] is again[at]
        assert first[at] == {"role": "system", "content": SEGMENT_PREFIX + "the deploy was set up"}
        nodes = [(1, "message"), (summary, "segment")]
        one, two = render(log, nodes, [1]), render(log, nodes, [1])
        assert one[0] is two[0]
        assert one[0] == {"role": "assistant", "content": "The deploy key is K-7781.", "pinned": True}
        assert log[1] == {
            "role": "assistant",
            "content": "The deploy key is K-7781.",
        }  # the payload as it was
    with MessageLog.open(tmp_path / "log") as log:  # read afresh: made afresh, equal
        assert log.context_view()[at] == first[at]


def test_a_window_naming_a_dependency_reports_what_it_left_out(tmp_path):
    """A kept message that depends on a node left out is reported, as for a list."""
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "hello"})
        log.append({"role": "user", "content": "the plan " + "detail " * 400, "id": "plan"})
        for i in range(30):
            log.append({"role": "user", "content": f"step {i} " + "filler " * 80})
            log.append({"role": "assistant", "content": f"done {i} " + "filler " * 80})
        log.append({"role": "user", "content": "follow the plan", "depends_on": ["plan"]})
        for name, select in policies("openai", 2000).items():
            chosen = select(log, 1_200, None)
            assert 1 not in chosen.kept, name
            assert chosen.missing_dependencies == ((len(log) - 1, "plan"),), name


def test_the_turn_in_progress_is_kept_on_every_turn(tmp_path):
    session = generate(200, "anthropic", seed=9)
    chosen_by = policies("anthropic", 2000)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        written = 0
        for end in session.calls:
            log.append_many(session.messages[written:end])
            written = end
            start = turn_in_progress(session.messages[:end])
            for name, select in chosen_by.items():
                try:
                    chosen = select(log, 16_000, None)
                except OverBudgetError:
                    continue
                if start is not None:
                    assert set(range(start, end)) <= set(chosen.kept), name


def test_a_cap_too_small_for_its_marker_is_refused_as_for_a_list(tmp_path):
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "read it"})
        call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        log.append({"role": "assistant", "content": None, "tool_calls": [call]})
        log.append({"role": "tool", "tool_call_id": "c1", "content": "word " * 500})
        log.append({"role": "user", "content": "and again"})
        log.append({"role": "tool", "tool_call_id": "c1", "content": "word " * 500})
        for select in policies("openai", 5).values():
            # Both name the first result over the cap by its place in the view (its seq).
            marker = re.escape("messages[2]: the truncation marker alone takes")
            with pytest.raises(InvalidInputError, match=marker + ".* more than the cap of 5"):
                select(log.context_view(), 8_000, None)
            with pytest.raises(InvalidInputError, match=marker + ".* more than the cap of 5"):
                select(log, 8_000, None)
        # With a summary, the view's places are not seqs: both name the view's.
        for _ in range(4):
            log.append({"role": "user", "content": "more"})
            log.append({"role": "assistant", "content": "done"})
        log.add_summary("Earlier: the file was read.", (0, 3), level=3)
        log.append({"role": "user", "content": "once more"})
        log.append({"role": "tool", "tool_call_id": "c1", "content": "word " * 500})
        for select in policies("openai", 5).values():
            with pytest.raises(InvalidInputError) as from_list:
                select(log.context_view(), 8_000, None)
            with pytest.raises(InvalidInputError, match=re.escape(str(from_list.value))):
                select(log, 8_000, None)


def read_turn(log: MessageLog, n: int, words: int) -> None:
    """One turn of a loop whose tool result is ``words`` tokens or so."""
    log.append({"role": "user", "content": f"read file {n}"})
    call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    log.append({"role": "assistant", "content": None, "tool_calls": [call]})
    log.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"line {n} " + "word " * words})


def whole_view_reads(monkeypatch) -> list[int]:
    """Counts the policies' reads of the whole decoded view."""
    reads: list[int] = []
    real = _log_selection.from_view
    monkeypatch.setattr(_log_selection, "from_view", lambda *a, **k: reads.append(1) or real(*a, **k))
    return reads


def test_policies_with_different_caps_share_a_log(tmp_path, monkeypatch):
    """Each cap keeps its own counts. Other policies counting for their caps
    between this one's count and choice (as threads sharing a log do) push
    this cap out of the few the log keeps: the headers decline, the policy
    counts again, and the answer is the view's, with no read of the whole."""
    caps = [2000, 500, 300, 1200, 900]  # one more than the log keeps at once
    with MessageLog.open(tmp_path / "log", create=True) as log:
        for turn, cap in enumerate(caps * 3):
            read_turn(log, turn, 5_000)
            for select in policies("openai", cap).values():
                expected = from_view(log, lambda view, select=select: select(view, 8_000, None))
                counted: list[int] = []

                def count_then_others(log_, backend, cap_, counted=counted):
                    count_cut_results(log_, backend, cap_)
                    counted.append(cap_)
                    if len(counted) == 1:  # every other cap, once: this one is pushed out
                        for other in caps:
                            if other != cap_:
                                count_cut_results(log_, backend, other)

                with monkeypatch.context() as patch:
                    reads = whole_view_reads(patch)
                    patch.setattr(_log_selection, "count_cut_results", count_then_others)
                    chosen = select(log, 8_000, None)
                assert (len(counted), reads) == (2, [])
                assert chosen.kept == expected.kept
                assert chosen.truncated == expected.truncated
                assert chosen.breakdown == expected.breakdown
                assert chosen.messages == expected.messages
                assert log._over_cap(cap)[0] == []  # every result counted for this cap


def test_a_result_landing_after_the_count_is_counted_and_chosen_again(tmp_path, monkeypatch):
    """The turn in progress gets a 20,000-token result after the count:
    counted whole it could not fit 8K (a false OverBudgetError); the headers
    decline, and the second try counts it cut."""
    for name, select in policies("openai", 2000).items():
        path = tmp_path / name
        with MessageLog.open(path, create=True) as writer, MessageLog.open(path, readonly=True) as log:
            read_turn(writer, 0, 3_000)
            counted: list[int] = []

            def count_then_append(log_, backend, cap, counted=counted, writer=writer):
                count_cut_results(log_, backend, cap)
                counted.append(cap)
                if len(counted) == 1:
                    read_turn(writer, 1, 20_000)

            with monkeypatch.context() as patch:
                reads = whole_view_reads(patch)
                patch.setattr(_log_selection, "count_cut_results", count_then_append)
                chosen = select(log, 8_000, None)
            assert (len(counted), reads) == (2, []), name
            expected = from_view(log, lambda view, select=select: select(view, 8_000, None))
            assert chosen.kept == expected.kept, name
            assert chosen.breakdown == expected.breakdown, name
            assert [t.index for t in chosen.truncated] == [2, 5], name


def test_a_result_appended_between_count_and_choice_is_cut(tmp_path):
    """Another writer appends a long result after this process counted the
    cut results: the headers say so, and the policy counts it and chooses
    again (it would not fit uncut)."""
    with (
        MessageLog.open(tmp_path / "log", create=True) as writer,
        MessageLog.open(tmp_path / "log", readonly=True) as log,
    ):
        read_turn(writer, 0, 3_000)
        backend = WeightedWindow()._backend
        count_cut_results(log, backend, 2000)
        read_turn(writer, 1, 20_000)
        assert log._weighted(8_000, WeightedWindow().weights, 3, 3, None, 2000) is None
        for select in policies("openai", 2000).values():
            chosen = select(log, 8_000, None)
            assert {3, 4, 5} <= set(chosen.kept)
            assert [t.index for t in chosen.truncated] == [2, 5]
            same_choice(log, select, 8_000, None)


def test_a_log_that_never_holds_still_is_read_whole(tmp_path, monkeypatch):
    """A long result lands after every count: the headers are asked a few
    times, then the whole view is read, and the answer is still the view's."""
    with (
        MessageLog.open(tmp_path / "log", create=True) as writer,
        MessageLog.open(tmp_path / "log", readonly=True) as log,
    ):
        read_turn(writer, 0, 3_000)
        counted = []

        def count_then_append(log_, backend, cap):
            count_cut_results(log_, backend, cap)
            counted.append(cap)
            read_turn(writer, len(counted), 2_500)

        monkeypatch.setattr(_log_selection, "count_cut_results", count_then_append)
        chosen = WeightedWindow().select(log, 10**6)
        monkeypatch.undo()
        assert len(counted) == _log_selection._TRIES
        assert chosen.kept == tuple(range(len(log)))
        assert len(chosen.truncated) == len(log) // 3
        same_choice(log, policies("openai", 2000)["weighted"], 10**6, None)


def test_counts_past_a_machine_word_keep_what_the_largest_does(tmp_path):
    """A budget, anchor count or recent-turn count past 2**64 is taken as the
    largest the machine holds, on a log as on a list."""
    huge = 2**70
    with MessageLog.open(tmp_path / "log", create=True) as log:
        for n in range(5):
            read_turn(log, n, 3_000)
        for budget in [huge, 8_000]:
            for policy in [
                WeightedWindow(max_anchors=huge, recent_turns=huge),
                ShapeHistory(keep_last=huge, min_keep=huge),
                PriorityAssembly(),
            ]:
                same_choice(log, lambda source, b, now, p=policy: p.select(source, b), budget, None)


def test_counts_for_a_cap_pushed_out_meanwhile_are_not_trusted(tmp_path):
    """Counts handed in for a cap that other caps pushed out of the log
    between its count and its hand-in: the records before them are looked
    at again, never taken as counted."""
    with MessageLog.open(tmp_path / "log", create=True) as log:
        backend = WeightedWindow()._backend
        for n in range(3):
            read_turn(log, n, 5_000)
        count_cut_results(log, backend, 2000)
        read_turn(log, 3, 5_000)
        seqs, start, upto = log._over_cap(2000)
        assert (seqs, start) == ([11], 9)
        for other in [500, 300, 1200, 900]:  # as many as the log keeps: 2000 goes
            count_cut_results(log, backend, other)
        log._set_capped(2000, start, upto, [(11, 2000)])
        assert log._weighted(60_000, WeightedWindow().weights, 3, 3, None, 2000) is None
        same_choice(log, policies("openai", 2000)["weighted"], 9_000, None)


def test_huge_turn_counts_report_the_turns_a_list_reports(tmp_path):
    """ShapeHistory's ``turns`` with counts past a machine word, at budgets
    where the summary does and does not go in: the list's count, not the
    machine's largest."""
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "assistant", "content": "intro " * 300})
        for i in range(3):
            log.append({"role": "user", "content": f"q{i} " + "x " * 50})
            log.append({"role": "assistant", "content": f"a{i} " + "y " * 50})
        total = from_view(log, lambda view: ShapeHistory().select(view, 10**6)).breakdown.total
        for keep_last, min_keep in [(2**71, 2**70), (2**71, 2**63 - 1), (2**70, 2**71)]:
            policy = ShapeHistory(keep_last=keep_last, min_keep=min_keep, summary="S " * 200)
            turns = set()
            for budget in range(total - 300, total + 300, 20):
                same_choice(log, lambda source, b, now, p=policy: p.select(source, b), budget, None)
                turns.add(policy.select(log, budget).turns)
            assert len(turns) >= 2  # both passes were taken


def test_a_batch_leaves_the_counts_of_long_texts_and_a_live_append_all(tmp_path):
    """A long tool output is capped by selection, and the cap needs its
    whole count: a batch's append leaves that count in the shared cache,
    and counts its short texts (most of an imported log) without it. A
    message appended alone is a live turn's, which the next selection reads
    at once: all its counts stay, as do a summary's."""
    tokenizer = Tokenizer()
    tokenizer.cache_clear()
    log = MessageLog.open(tmp_path / "log", create=True)
    long_text = "".join(f"row {i}: order A-{i:05d} refunded\n" for i in range(LOG_CACHED_BYTES // 20))
    short_text = "a short tool output, " * ((LOG_CACHED_BYTES - 1) // 21)
    assert len(long_text) >= LOG_CACHED_BYTES > len(short_text) >= 256
    log.append_many([{"role": "user", "content": short_text}])
    assert tokenizer.cache_info().size == 0
    log.append_many([{"role": "user", "content": long_text}])
    assert tokenizer.cache_info().size == 1
    before = tokenizer.cache_info()
    assert tokenizer.count_messages([{"role": "user", "content": long_text}]) > 0
    assert tokenizer.cache_info().hits == before.hits + 1

    live = "the turn's input, " + short_text
    log.append({"role": "user", "content": live})
    assert tokenizer.cache_info().size == 2
    first = log.head
    log.add_summary("the user asked for refunds of the A orders", (first, first), level=2)
    assert tokenizer.cache_info().size == 3
    before = tokenizer.cache_info()
    assert tokenizer.count_messages([{"role": "user", "content": live}]) > 0
    assert (tokenizer.cache_info().hits, tokenizer.cache_info().misses) == (before.hits + 1, before.misses)
    log.close()


@pytest.mark.parametrize("budget", [2_000, 32_000])
def test_a_long_log_weighed_on_every_core_chooses_what_its_view_gives(tmp_path, budget):
    """From PARALLEL_FACTS_FROM nodes on, with ages from timestamps, the
    headers are read ahead on every core before grouping: the weights, and
    so the window, must be the decoded view's (weighed one message at a
    time by the list's policy), with rules, evidence and chatter of many
    ages competing."""
    count = PARALLEL_FACTS_FROM + 1_500
    start = 1_700_000_000.0
    messages = []
    for i in range(count):
        at = start + i * 0.37 + (i % 7) * 11.0  # not in order: ages interleave
        if i % 997 == 0:
            rule = f"You must keep rule {i} for order ord_{i}."
            messages.append({"role": "user", "content": rule, "timestamp": at})
        elif i % 2:
            text = f"Traceback: error in step {i}" if i % 13 == 1 else f"step {i} done"
            messages.append({"role": "assistant", "content": text, "timestamp": at})
        else:
            messages.append({"role": "user", "content": f"note {i}", "timestamp": at})
    now = start + count * 0.37 + 120.0
    weighted = WeightedWindow()
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        for at in range(0, count, 10_000):
            log.append_many(messages[at : at + 10_000])
        assert len(log) >= PARALLEL_FACTS_FROM
        same_choice(log, lambda source, b, n: weighted.select(source, b, now=n), budget, now)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("name", ["priority", "shape"])
def test_units_kept_between_selections_give_what_the_view_gives(tmp_path, provider, name):
    """A handle keeps a plain log's units from one selection to the next and
    groups only what came since the turn in progress began. One message at
    a time (a call's results land after it), some with a priority or pinned,
    the cap changed and then a summary added midway: after every
    append the answer is the decoded view's, and a fresh handle's."""
    session = generate(220, provider, seed=13)
    path = tmp_path / "log"
    budgets = [3_000, 24_000]
    with MessageLog.open(path, create=True, durability="never") as log:
        for i, message in enumerate(session.messages):
            message = pinned_or_prioritised(message, i, pin=(41, 7), rank=(17, 5, 5))
            log.append(message)
            if i == 150:
                log.add_summary("The first part: the worker was read and fixed.", (0, 99), level=3)
            cap = 2000 if i < 110 else 400
            select = policies(provider, cap)[name]
            budget = budgets[i % 2]
            same_choice(log, select, budget, None)
            if i % 23 == 0:
                with MessageLog.open(path, readonly=True) as fresh:
                    assert _answer(select, fresh, budget) == _answer(select, log, budget)


def pinned_or_prioritised(message: dict, i: int, *, pin: tuple[int, int], rank: tuple[int, int, int]) -> dict:
    """Message ``i``, pinned every ``pin[0]`` (at ``pin[1]``, not a tool's)
    and given a priority every ``rank[0]`` (at ``rank[1]``: ``i % rank[2]``)."""
    if i % pin[0] == pin[1] and message["role"] != "tool":
        message = {**message, "pinned": True}
    if i % rank[0] == rank[1]:
        message = {**message, "priority": float(i % rank[2])}
    return message


def _answer(select, log: MessageLog, budget: int):
    try:
        chosen = select(log, budget, None)
    except OverBudgetError as error:
        return str(error)
    return chosen.kept, chosen.messages, chosen.breakdown, chosen.truncated


WEIGHTED_VARIANTS = {
    "default": {},
    "one anchor, one recent turn": {"max_anchors": 1, "recent_turns": 1},
    "no anchors, no recent turns": {"max_anchors": 0, "recent_turns": 0},
    "every anchor, tags equal and undecayed": {
        "max_anchors": 10**6,
        "constraint": 1.0,
        "evidence": 1.0,
        "pulse": 1.0,
        "log": 1.0,
        "tag_decay": 1.0,
    },
    "zero weights, no decay at all": {"constraint": 0.0, "log": 0.0, "decay": 0.0},
}

TAGGED_TEXT = [
    " You must always keep the order_id.",  # constraint
    " THINK: the retry loop drops the id. PLAN: keep it. VERIFY: the test passes.",  # evidence
    " Fix it and deploy it now.",  # pulse
    " curl https://ci.example/job/42 failed at line 7",  # log
]


def _weighed_session(provider: str, stamps: str) -> list[dict]:
    """A replayed session whose user turns carry each tag in turn, some
    messages a weight of their own; ``stamps``: "rising", "none" (no
    timestamps: the log stamps them), or "back" (some go back an hour)."""
    out = []
    for i, message in enumerate(generate(200, provider, seed=17).messages):
        message = dict(message)
        if message["role"] == "user" and isinstance(message["content"], str) and i % 3:
            message["content"] += TAGGED_TEXT[i % 4]
        if i % 19 == 4 and message["role"] != "tool":
            message["weight"] = float(i % 4) / 2
        if stamps == "none":
            message.pop("timestamp", None)
        elif stamps == "back" and i % 29 == 11 and "timestamp" in message:
            message["timestamp"] -= 3600
        out.append(message)
    return out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("stamps", ["rising", "none", "back"])
@pytest.mark.parametrize("variant", list(WEIGHTED_VARIANTS))
def test_the_weighted_window_from_kept_units_gives_what_the_view_gives(tmp_path, provider, stamps, variant):
    """The weighted window keeps each weight class's final units between
    selections and merges them newest first, weighing only what it reaches.
    One message at a time, with every tag, weights of their own, ages from
    the clock and from places, and timestamps that go back (where the
    handle weighs every node instead): after every append the answer is the
    decoded view's, and a fresh handle's."""
    messages = _weighed_session(provider, stamps)
    window = WeightedWindow(provider=provider, tool_result_cap=600, **WEIGHTED_VARIANTS[variant])
    path = tmp_path / "log"
    budgets = [1_500, 6_000, 20_000]
    with MessageLog.open(path, create=True, durability="never") as log:
        for i, message in enumerate(messages):
            log.append(message)
            stamps_now = now_of(messages[: i + 1])
            for now in (stamps_now, None):
                select = lambda source, b, n: window.select(source, b, now=n)  # noqa: E731
                budget = budgets[i % 3]
                same_choice(log, select, budget, now)
            if i % 37 == 0:
                with MessageLog.open(path, readonly=True) as fresh:
                    assert _answer(select, fresh, budget) == _answer(select, log, budget)


@pytest.mark.parametrize("implementation", [MessageLog, reference_log.MessageLog], ids=["rust", "twin"])
def test_a_batch_and_a_clock_behind_the_log_never_stamp_a_node_earlier(tmp_path, implementation):
    """Nodes appended without a timestamp are stamped with the clock but
    never before the node ahead of them: a large batch is built on every
    core, and a node given a later time than the clock's holds the ones
    after it to that time. Ages from such times keep the log's order."""
    future = 4_000_000_000.0
    with implementation.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many([{"role": "user", "content": f"note {i} " + "x" * 200} for i in range(5_000)])
        log.append({"role": "user", "content": "from a later clock", "timestamp": future})
        log.append({"role": "assistant", "content": "after it"})
        log.append_many([{"role": "user", "content": "a batch after it"}] * 3)
        log.append_many(
            [
                {"role": "user", "content": "given a later time still", "timestamp": future + 60},
                {"role": "assistant", "content": "in the same batch, after it"},
                {"role": "user", "content": "and one more"},
            ]
        )
        stamps = log.headers()["timestamp"]
    assert (np.diff(stamps) >= 0).all()
    assert list(stamps[-7:]) == [future] * 4 + [future + 60] * 3


def test_an_append_after_the_index_was_cut_under_the_writer_does_not_crash(tmp_path):
    """The default stamp reads the last node's time from the handle, not
    through the map: a plain append does not check the file's length first,
    and a read past a cut file's end is a SIGBUS that kills the process."""
    script = f"""
import os
from context_core import MessageLog
log = MessageLog.open({str(tmp_path / "log")!r}, create=True, durability="never")
for i in range(3):
    log.append({{"role": "user", "content": f"m{{i}}"}})
os.truncate({str(tmp_path / "log" / "index")!r}, 0)
try:
    log.append({{"role": "user", "content": "after the cut"}})
except Exception as error:
    print(type(error).__name__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr)


def test_shape_cutting_turns_after_the_repair_grew_the_window_adds_the_summary(tmp_path):
    """Anthropic's repair puts a user turn before a leading assistant
    message, so a window the kernel counted as fitting comes out over and is
    chosen again for less: turns are cut then, and the summary goes in, from
    a list as from a log (the list used to decide on the summary once, at
    the budget, and leave it out). (A leading tool loop with no input before
    it is the turn in progress now, kept whole: a greeting leads here.)"""
    messages = [
        {"role": "assistant", "content": "Hello! " + "I can help with the refund job. " * 3},
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "word " * 40}]},
    ]
    policy = ShapeHistory(
        keep_last=10, min_keep=1, summary="Earlier work.", provider="anthropic", tool_result_cap=60
    )
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(messages)
        for budget in (60, 100, 104, 120):
            same_choice(log, lambda source, b, now: policy.select(source, b), budget, None)
    cut = policy.select(messages, 104)
    assert cut.kept == (1, 2, 3)
    assert cut.system is not None
    assert "Earlier work." in cut.system


def _view_from_the_walk(log: MessageLog) -> list[int]:
    """The context view's seqs, from the path the parent links give (no
    summary in these logs: every message on the path)."""
    return [int(seq) for seq in log.path()]


def _plain_view_of(selection) -> object:
    """The view a log's selection was chosen from, as the extension gave it."""
    return selection._dropped.view


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("name", ["priority", "shape", "weighted"])
def test_a_log_rewound_at_its_newest_nodes_is_chosen_from_as_one_chain(tmp_path, provider, name):
    """A turn that fails after its input is logged is rewound (the input
    left behind); a log rewound so is still one chain with holes, chosen
    from the headers and the units kept between selections, not walked. The
    view is the walked path's, the answer the decoded view's and a fresh
    handle's, after every append and rewind: single nodes and a few at a
    time left behind, rewinds of rewinds, with a priority or pinned here
    and there."""
    session = generate(160, provider, seed=29)
    path = tmp_path / "log"
    budgets = [2_500, 20_000]
    select = policies(provider, 1200)[name]
    rewinds = 0
    with MessageLog.open(path, create=True, durability="never") as log:
        for i, message in enumerate(session.messages):
            message = pinned_or_prioritised(message, i, pin=(37, 9), rank=(13, 4, 3))
            before = log.head
            log.append(message)
            if i % 3 and before is not None and message["role"] == "user":
                log.rewind(before)  # the failed turn's input left behind
                log.append(message)  # and given again
                rewinds += 1
            if i % 29 == 20:
                # Turns back (into the units kept between selections), then
                # the same messages again.
                back = log.path()[-13]
                log.rewind(int(back))
                for again in session.messages[i - 11 : i + 1]:
                    log.append(again)
                rewinds += 1
            assert log._view()
            assert [seq for seq, _ in log._view()] == _view_from_the_walk(log)
            budget = budgets[i % 2]
            same_choice(log, select, budget, None)
            if rewinds:
                try:
                    chosen = select(log, budget, None)
                except OverBudgetError:
                    continue  # the turn in progress alone is over (same_choice checked the error)
                view = _plain_view_of(chosen)
                assert isinstance(view, tuple), view  # one chain with holes, not a walked path
                assert set(chosen.kept) | set(chosen.dropped) == set(_view_from_the_walk(log))
            if i % 19 == 0:
                with MessageLog.open(path, readonly=True) as fresh:
                    assert _answer(select, fresh, budget) == _answer(select, log, budget)
    assert rewinds > 15


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_handle_that_alternates_policies_gives_each_the_views_answer(tmp_path, provider):
    """A handle keeps each weighing's units (the priority builder's, and the
    windows' unweighed ones), parking one while the other is used. Policies
    taken in turn on one handle, while the log grows, rewinds into units a
    parked set holds, and changes its cap: every answer is the decoded
    view's, and a fresh handle's."""
    session = generate(180, provider, seed=41)
    path = tmp_path / "log"
    budgets = [2_500, 20_000]
    names = ["priority", "weighted", "priority", "shape", "weighted", "shape"]
    rewinds = 0
    with MessageLog.open(path, create=True, durability="never") as log:
        for i, message in enumerate(session.messages):
            message = pinned_or_prioritised(message, i, pin=(31, 5), rank=(11, 3, 3))
            log.append(message)
            if i % 31 == 25:
                # Back into the kept units while the other weighing's are
                # parked, then the same messages again.
                log.rewind(int(log.path()[-9]))
                for again in session.messages[i - 7 : i + 1]:
                    log.append(again)
                rewinds += 1
            name = names[i % len(names)]
            select = policies(provider, 1500 if i < 120 else 500)[name]
            budget = budgets[i % 2]
            same_choice(log, select, budget, None)
            if i % 17 == 0:
                with MessageLog.open(path, readonly=True) as fresh:
                    assert _answer(select, fresh, budget) == _answer(select, log, budget)
    assert rewinds >= 5


CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
}


@pytest.mark.parametrize("name", ["priority", "shape", "weighted"])
def test_a_rewind_to_the_last_kept_node_opens_its_unit_again(tmp_path, name):
    """Units kept between selections end where the next turn started; a
    rewind to just before that start opens the last of them again: a tool
    result appended then joins its call's unit, and the last turn is the
    turn in progress again."""
    select = policies("openai", None)[name]
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append({"role": "user", "content": "read the file"})
        log.append(CALL)
        log.append({"role": "tool", "tool_call_id": "c1", "content": "part one " * 100})
        log.append({"role": "user", "content": "a question that fails"})
        _answer(select, log, 10**6)  # the units before the question kept
        log.rewind(2)
        for budget in (40, 120, 10**6):  # the call's turn in progress again
            same_choice(log, select, budget, None)
        log.append({"role": "tool", "tool_call_id": "c1", "content": "part two"})
        log.append({"role": "user", "content": "next"})
        for budget in (40, 120, 10**6):
            same_choice(log, select, budget, None)


def test_a_log_rewound_too_often_is_walked_and_chooses_the_same(tmp_path):
    """Past the holes a chain keeps, the path is walked: the same answer."""
    window = WeightedWindow(tool_result_cap=600)
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        for i in range(2_100):
            before = log.head
            log.append({"role": "user", "content": f"question {i}: where is the order ord_{i}?"})
            log.rewind(before if before is not None else log.head)
            log.append({"role": "user", "content": f"question {i} again"})
            log.append({"role": "assistant", "content": f"answer {i}"})
        chosen = window.select(log, 3_000)
        assert isinstance(_plain_view_of(chosen), bytes)  # walked
        same_choice(log, lambda source, b, n: window.select(source, b, now=n), 3_000, None)
        assert set(chosen.kept) | set(chosen.dropped) == set(_view_from_the_walk(log))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("name", ["priority", "shape", "weighted"])
def test_a_loop_whose_input_a_summary_covers_is_still_the_turn_in_progress(tmp_path, provider, name):
    """Found by a review: the turn in progress began at the newest user
    input, so once a summary covered the input a long tool loop began with,
    nothing was the turn in progress and every policy dropped the newest
    tool result as history, with no error (ShapeHistory sent the summary
    alone; to Anthropic, no message at all)."""
    anthropic = provider == "anthropic"

    def call(i: int) -> dict:
        if anthropic:
            return {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"c{i}", "name": "read", "input": {}}],
            }
        function = {"name": "read", "arguments": "{}"}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": function}],
        }

    def result(i: int, words: int) -> dict:
        text = f"file {i}: " + "x " * words
        if anthropic:
            return {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"c{i}", "content": text}],
            }
        return {"role": "tool", "tool_call_id": f"c{i}", "content": text}

    policy = {
        "priority": PriorityAssembly(provider=provider),
        "shape": ShapeHistory(provider=provider),
        "weighted": WeightedWindow(provider=provider),
    }[name]
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append({"role": "user", "content": "Refactor the payment module."})
        for i in range(6):
            log.append(call(i))
            log.append(result(i, 30))
        log.add_summary("Files 0 to 3 were read.", covers=(0, 8), level=3)
        log.append(call(6))
        log.append(result(6, 400))
        for budget in (300, 600, 2000):
            same_choice(log, lambda source, b, now: policy.select(source, b, now=now), budget, None)
        chosen = policy.select(log, 600)
        assert "file 6: " in str(chosen.messages[-1])  # the newest result, which the model answers
        assert chosen.breakdown.input > 400
        with pytest.raises(OverBudgetError):
            policy.select(log, 300)  # the loop does not fit: said, not dropped


EARLIER = "Summary of the conversation so far:\nEarlier work."


def _every_path(provider: str) -> dict:
    """Each policy from the headers, and those that read the whole view
    (a summary callable, anchoring, another encoding)."""
    shape = ShapeHistory(provider=provider)
    called = ShapeHistory(provider=provider, summary=lambda dropped: "Earlier work.")
    weighted = WeightedWindow(provider=provider)
    priority = PriorityAssembly(provider=provider)
    anchored = PriorityAssembly(provider=provider, anchoring=True)
    other = PriorityAssembly(provider=provider, tokenizer=Tokenizer("cl100k_base"))
    return {
        "shape": lambda source, budget, now: shape.select(source, budget),
        "shape, a summary callable": lambda source, budget, now: called.select(source, budget),
        "weighted": lambda source, budget, now: weighted.select(source, budget, now=now),
        "priority": lambda source, budget, now: priority.select(source, budget),
        "priority, anchoring": lambda source, budget, now: anchored.select(source, budget),
        "priority, another encoding": lambda source, budget, now: other.select(source, budget),
    }


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_log_that_would_send_no_message_is_refused_as_its_view_is(tmp_path, provider):
    """A log's window is refused as a list's is where it would send no
    message, naming the seqs it kept; an empty log selects nothing."""
    with MessageLog.open(tmp_path / "empty", create=True, durability="never") as log:
        for name, select in _every_path(provider).items():
            chosen = select(log, 1000, None)
            assert (chosen.messages, chosen.kept, chosen.dropped) == ([], (), ()), name
    with MessageLog.open(tmp_path / "reply", create=True, durability="never") as log:
        log.append({"role": "assistant", "content": "a long answer " * 40})
        for name, select in _every_path(provider).items():
            same_choice(log, select, 30, None)
            if provider == "openai" and name == "shape, a summary callable":
                # The summary of what was dropped is a system message: sent.
                assert select(log, 30, None).messages == [{"role": "system", "content": EARLIER}]
                continue
            with pytest.raises(NothingToSendError, match="fits in the budget of 30 tokens") as caught:
                select(log, 30, None)
            assert (caught.value.kept, caught.value.budget) == ((), 30), name
    with MessageLog.open(tmp_path / "summarized", create=True, durability="never") as log:
        log.append({"role": "user", "content": "Refactor the payment module."})
        log.append({"role": "assistant", "content": "Done: three files changed."})
        summary = log.add_summary("The payment module was refactored.", covers=(0, 1), level=3)
        for name, select in _every_path(provider).items():
            same_choice(log, select, 1000, None)
            if provider == "openai":  # the summary is a system message: sent
                assert select(log, 1000, None).kept == (summary,), name
                continue
            with pytest.raises(NothingToSendError, match="lifted into the system prompt") as caught:
                select(log, 1000, None)  # the summary went to system: no message is left
            assert caught.value.kept == (summary,), name
        log.append({"role": "user", "content": "Now the refunds."})
        for name, select in _every_path(provider).items():
            assert select(log, 1000, None).messages[-1] == {"role": "user", "content": "Now the refunds."}, (
                name
            )


_KEYWORDS = ("pinned", "priority", "weight", "timestamp")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("name", ["priority", "shape", "weighted"])
def test_metadata_given_to_append_counts_where_the_whole_view_is_read(tmp_path, monkeypatch, provider, name):
    """``append(pinned=..., priority=..., weight=..., timestamp=...)`` puts
    its keywords in the header only (over the message's own keys, where it
    has them). Where a window is chosen from the whole view (here: a
    dependency named), each message still weighs as it would with those
    values in the message itself, as it does from the headers."""
    messages = []
    for i, message in enumerate(_weighed_session(provider, "rising")):
        message = pinned_or_prioritised(message, i, pin=(10**9, 0), rank=(7, 3, 5))
        short = isinstance(message["content"], str) and len(message["content"]) < 400
        if i % 37 == 5 and short:
            message = {**message, "pinned": True}
        if i % 11 == 2 and message["role"] == "assistant":
            message = {**message, "tags": ["constraint"]}
        messages.append(message)
    messages[1] = {**messages[1], "id": "early"}
    messages[-1] = {**messages[-1], "depends_on": "early"}  # the whole view, every time
    now = now_of(messages)
    priority, shape = PriorityAssembly(provider=provider), ShapeHistory(provider=provider, keep_last=2)
    select = {
        "priority": lambda source, b: priority.select(source, b, memories=MEMORIES),
        "shape": lambda source, b: shape.select(source, b),
        "weighted": lambda source, b: WeightedWindow(provider=provider).select(source, b, now=now),
    }[name]
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        stale = {"pinned": False, "priority": 42.0, "weight": 0.01, "timestamp": 1.0}
        for i, message in enumerate(messages):
            given = {k: message[k] for k in _KEYWORDS if k in message}
            stored = {k: v for k, v in message.items() if k not in _KEYWORDS}
            if i % 13 == 4:  # keys of its own, which the keywords override
                stored.update({k: stale[k] for k in given})
            log.append(stored, **given)
        reads = whole_view_reads(monkeypatch)
        for budget in (3_000, 6_000, 16_000):
            from_list, from_log = select(messages, budget), select(log, budget)
            assert len(reads) == 1
            reads.clear()
            assert from_log.kept == from_list.kept, budget
            assert from_log.messages == from_list.messages
            assert from_log.breakdown == from_list.breakdown


def test_the_whole_view_leaves_tags_to_the_policys_own_tagger(tmp_path):
    """The headers hold the default tagger's tags: a policy with a tagger of
    its own, reading the whole view (anchoring), tags the messages itself,
    on a log as on its decoded view."""
    from context_core._core import Tagger

    own = Tagger(constraint_keywords=["banana"], constraint_openers=[])
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append({"role": "user", "content": "Remember: you must never touch the tests."})
        log.append({"role": "assistant", "content": "Understood."})
        log.append({"role": "user", "content": "Use the banana format for dates."})
        log.append({"role": "assistant", "content": "Noted."})
        log.append({"role": "user", "content": "Now the refunds."})
        policy = PriorityAssembly(anchoring=True, tagger=own)
        from_log, from_list = policy.select(log, 10_000), policy.select(log.context_view(), 10_000)
        assert from_log.messages == from_list.messages
        assert "banana" in str(from_log.messages)


def test_a_summary_callable_is_handed_the_messages_as_logged(tmp_path):
    """A ShapeHistory summary callable is handed what may be dropped, as
    logged: no metadata the headers hold is added to them (a callable may
    send them to a model)."""
    seen = []

    def summarise(messages):
        seen.extend(messages)
        return "Earlier: small talk."

    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        for i in range(30):
            asked = f"Question {i}: you must never touch the tests. " + "x " * 50
            log.append({"role": "user", "content": asked})
            log.append({"role": "assistant", "content": f"Answer {i}: " + "y " * 50}, priority=2.0)
        log.append({"role": "user", "content": "Now the refunds."})
        ShapeHistory(summary=summarise, keep_last=3, min_keep=1).select(log, 800)
    assert seen
    assert {key for message in seen for key in message} == {"role", "content"}


def _long_answer_log(path, long: bool) -> MessageLog:
    """Ten turns and a turn in progress; node 3 (a reply) long or short."""
    log = MessageLog.open(path, create=True)
    for turn in range(10):
        log.append({"role": "user", "content": f"question {turn} " * (turn + 1)})
        answer = "a long answer " * 300 if turn == 1 and long else f"answer {turn}"
        log.append({"role": "assistant", "content": answer})
    log.append({"role": "user", "content": "the turn in progress"})
    return log


def _windows(log: MessageLog, budget: int, stand_ins: list[tuple[int, int]]) -> list:
    """Each policy's choice from the headers (what the bindings return)."""
    weights = WeightedWindow().weights
    return [
        log._weighted(budget, weights, 3, 3, None, None, stand_ins),
        log._shape(budget, 3, 1, None, None, stand_ins),
        log._priority(budget, None, [], [], None, stand_ins),
    ]


def test_a_stand_in_count_is_for_one_window_and_no_kept_unit_keeps_it(tmp_path):
    """Counts standing in for some records' own (a session's cleared
    results) count in the one window they are given to: a log whose long
    reply stands in as a short one's count chooses what the log with the
    short reply does. The units a plain log keeps between windows never
    hold one: the windows after choose what a new handle (nothing kept)
    does, for a stand-in before the turn in progress too."""
    short = _long_answer_log(tmp_path / "short", long=False)
    log = _long_answer_log(tmp_path / "long", long=True)
    fresh = MessageLog.open(tmp_path / "long", readonly=True)
    stand_in = [(3, int(short.headers()["tokens"][3]))]
    for less in (0, 15, 25):  # all of the short log's, or its oldest left out
        budget = int(short.headers()["tokens"].sum()) - less
        expected = _windows(short, budget, [])
        alone = _windows(fresh, budget, [])
        assert expected != alone or less  # the long reply counts
        assert _windows(log, budget, []) == alone
        assert _windows(log, budget, stand_in) == expected
        assert _windows(log, budget, []) == alone
        log.append({"role": "assistant", "content": "more"})
        log.append({"role": "user", "content": f"the next turn, {budget}"})
        short.append({"role": "assistant", "content": "more"})
        short.append({"role": "user", "content": f"the next turn, {budget}"})
        fresh.close()
        fresh = MessageLog.open(tmp_path / "long", readonly=True)
    for handle in (short, log, fresh):
        handle.close()
