"""Compaction: the L1/L2/L3 plan, summaries written as one atomic node,
failures that never reach the turn (backoff, circuit breaker), clean
shutdown, and a 300-turn session whose rules and facts survive every
compaction."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from compaction_sessions import PLAIN_RULES, RULES, compaction_session
from context_core import CallableLLM, LLMRateLimitError, MemoryFiles, MessageLog, PriorityAssembly
from context_core.compaction import Compactor, Outcome, next_job
from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.log import SEGMENT_PREFIX, SUMMARY_PREFIX
from context_core.summarize import Summarizer
from context_core.summarize.prompts import GLOBAL_SYSTEM


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def turns(count: int, start: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in range(start, start + count):
        out.append({"role": "user", "content": f"Task {t}: look at item-{t}."})
        out.append({"role": "assistant", "content": f"Item-{t} is done."})
    return out


def new_log(tmp_path: Path, messages: list[dict[str, Any]] | None = None) -> MessageLog:
    log = MessageLog.open(tmp_path / "log", create=True)
    log.append({"role": "system", "content": "You are an agent."})
    if messages:
        log.append_many(messages)
    return log


def good_reply(messages: list[dict[str, Any]]) -> str:
    """A model that answers well: it repeats every rule line it was shown
    and every Task marker of the transcript, in the asked-for sections."""
    prompt = messages[-1]["content"]
    rules = re.findall(r"Rule [\w-]+: [^\n<]*", prompt)
    tasks = sorted(set(re.findall(r"Task \d+", prompt)))
    constraints = "\n".join(f"- {r}" for r in dict.fromkeys(rules)) or "- none"
    return (
        "<analysis>timeline</analysis>\n<summary>\nConstraints:\n"
        f"{constraints}\nDecisions:\n- covered {', '.join(tasks) or 'segments'}\n"
        "Current state:\n- working\nNext steps:\n- continue\n</summary>"
    )


# --- the plan ------------------------------------------------------------------------------------


def test_nothing_is_due_until_a_segment_lies_before_the_recent_turns(tmp_path: Path):
    log = new_log(tmp_path, turns(17))
    assert next_job(log, recent_turns=8, segment_turns=10, segments_kept=3, tail_tokens=None) is None
    log.append_many(turns(1, 17))
    job = next_job(log, recent_turns=8, segment_turns=10, segments_kept=3, tail_tokens=None)
    assert job is not None
    assert job.level == 2
    # The system message is an anchor: covered, but not summarised.
    assert job.covers == (0, 20)
    assert job.messages == tuple(range(1, 21))


def test_a_long_raw_tail_starts_a_shorter_segment(tmp_path: Path):
    log = new_log(tmp_path, turns(12))
    assert next_job(log, recent_turns=8, segment_turns=10, segments_kept=3, tail_tokens=None) is None
    job = next_job(log, recent_turns=8, segment_turns=10, segments_kept=3, tail_tokens=50)
    assert job is not None
    assert job.covers == (0, 8)


def test_segments_then_a_global_summary_and_the_view_keeps_the_newest(tmp_path: Path):
    log = new_log(tmp_path)
    compactor = Compactor(log, recent_turns=2, segment_turns=3, segments_kept=2)
    levels = []
    for t in range(30):
        log.append_many(turns(1, t))
        while (outcome := compactor.compact()).status == "written":
            levels.append(outcome.level)
    assert levels.count(3) >= 2
    assert levels.count(2) >= 6
    # Never more than segments_kept segment summaries after the newest global one.
    parts = [part for _, part in log._view()]
    assert parts.count("global") <= 1
    assert parts.count("segment") <= 2
    view = log.context_view()
    raw_users = [m for m in view if m["role"] == "user"]
    assert len(raw_users) >= 2  # L1: the recent turns stay raw
    assert view[-2]["content"].startswith("Task 29")
    # Raw history resumes right after what the summaries cover.
    pointer = log.last_summary_index
    raw = [seq for seq, part in log._view() if part == "raw"]
    assert raw
    assert min(raw) > pointer
    log.verify()


def test_l3_prompts_never_hold_an_earlier_l3(tmp_path: Path):
    prompts: list[str] = []
    globals_written: list[str] = []

    def model(messages: list[dict[str, Any]]) -> str:
        prompts.append(messages[-1]["content"])
        reply = good_reply(messages)
        if messages[0]["content"] == GLOBAL_SYSTEM:
            marker = f"GLOBAL-MARK-{len(globals_written)}"
            globals_written.append(marker)
            reply = reply.replace("- working", f"- working {marker}")
        return reply

    log = new_log(tmp_path)
    compactor = Compactor(
        log, Summarizer(CallableLLM(model)), recent_turns=2, segment_turns=2, segments_kept=2
    )
    for t in range(40):
        log.append_many(turns(1, t))
        while compactor.compact().status == "written":
            pass
    assert len(globals_written) >= 3
    for i, prompt in enumerate(prompts):
        for marker in globals_written:
            assert marker not in prompt, f"prompt {i} holds an earlier global summary"
    # The global summaries were made from segment summaries (they are in the prompt).
    global_prompts = [p for p in prompts if "<segment" in p]
    assert len(global_prompts) == len(globals_written)


# --- the user's rules: never dropped, never a stall ----------------------------------------------


def forgetful(messages: list[dict[str, Any]]) -> str:
    """A model that drops every rule (and so would leave a segment stuck)."""
    return good_reply([{"role": "user", "content": "no rules here"}])


def test_a_rule_the_model_drops_is_added_to_its_summary(tmp_path: Path):
    messages = turns(3)
    messages[2] = {"role": "user", "content": "Rule R-77: you must never delete order_ledger rows."}
    log = new_log(tmp_path, messages + turns(20, 3))
    compactor = Compactor(log, Summarizer(CallableLLM(forgetful)), recent_turns=8, segment_turns=5)
    written = []
    while (outcome := compactor.compact()).status == "written":
        written.append(outcome.covers)
    assert len(written) >= 2  # the next segments are not held up by the rule
    assert written[0] == (0, 10)
    summaries = [m["content"] for m in log.context_view() if m["role"] == "system"]
    assert any("- Rule R-77: you must never delete order_ledger rows." in text for text in summaries)


@pytest.mark.parametrize(
    "rule",
    [
        'You must always print the banner "READY  NOW" at start.',
        "You must never\nrun `make  clean` on the\tbuild host.",
    ],
)
def test_a_rule_added_word_for_word_carries_itself(tmp_path: Path, rule: str):
    """A rule the summary misses is added as it was said, spacing in its
    values kept, so it always carries itself: compaction goes on (an added
    rule that failed its own check rejected the segment on every retry)."""
    messages = turns(3)
    messages[2] = {"role": "user", "content": rule}
    log = new_log(tmp_path, messages + turns(20, 3))
    compactor = Compactor(log, Summarizer(CallableLLM(forgetful)), recent_turns=8, segment_turns=5)
    first = compactor.compact()
    assert first.status == "written", first.reason
    assert first.covers[0] <= 2 <= first.covers[1]
    summaries = "\n".join(m["content"] for m in log.context_view() if m["role"] == "system")
    assert "- " + rule.replace("\n", " ") in summaries
    assert compactor.compact().status == "written"


def test_a_rule_the_caller_tagged_is_carried_too(tmp_path: Path):
    log = new_log(tmp_path)
    log.append({"role": "user", "content": "Deploys go to staging-eu-2 first."}, tags=["constraint"])
    log.append({"role": "assistant", "content": "Noted."})
    log.append_many(turns(20))
    compactor = Compactor(log, recent_turns=8, segment_turns=5)
    assert compactor.compact().status == "written"
    view = "\n".join(str(m["content"]) for m in log.context_view())
    assert "staging-eu-2" in view
    assert log.last_summary_index is not None
    assert log.last_summary_index >= 2  # the rule itself is covered: carried, not left raw


def test_a_long_paste_that_says_must_is_output_not_a_rule(tmp_path: Path):
    trace = "Traceback (most recent call last):\n" + '  File "/srv/app.py", line 9\n' * 40
    trace += "psycopg.errors.NotNullViolation: column must not be null"
    log = new_log(tmp_path, [{"role": "user", "content": trace}, {"role": "assistant", "content": "I see."}])
    log.append_many(turns(20))
    compactor = Compactor(log, recent_turns=8, segment_turns=5)
    assert compactor.compact().status == "written"
    summary = next(
        m["content"] for m in log.context_view() if m["role"] == "system" and "Summary" in m["content"]
    )
    assert "NotNullViolation: column must not be null" not in summary.split("Decisions:")[0]


def _constraints(log: MessageLog) -> str:
    """The Constraints sections of the log's summaries, joined."""
    view = log.context_view()
    summaries = [m["content"] for m in view if m["role"] == "system" and "Summary" in m["content"]]
    return "\n".join(text.split("Constraints:", 1)[1].split("Decisions:")[0] for text in summaries)


_PROSE = (
    "We have been chasing the refund timeouts for a week and the on-call team is tired, so please be"
    " careful and methodical: read the worker first, then the queue consumer, then the ledger client,"
    " and write down what you find before you change anything at all in the code base. "
)


def test_a_rule_beside_tool_results_is_judged_by_its_own_words(tmp_path: Path):
    """A rule typed beside tool results was lost at its first compaction
    when the tool output held a link: the message's tags (the output's
    ``log`` among them) made the user's text a paste. And a tool output
    saying "must" made the plain text beside it a rule."""
    rule = "Also, from here on you must keep the idempotency_key on every retry."
    output = "GET https://status.example.com/api/v1/refunds -> 200\n" + "row ok\n" * 30
    call = {"type": "tool_use", "id": "toolu_1", "name": "fetch", "input": {}}
    messages = [
        {"role": "user", "content": "Check the refunds."},
        {"role": "assistant", "content": [call]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": output},
                {"type": "text", "text": _PROSE * 5 + rule},
            ],
        },
        {"role": "assistant", "content": [{**call, "id": "toolu_2"}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "amount must not be null"},
                {"type": "text", "text": "Here is the second one."},
            ],
        },
        {"role": "assistant", "content": "Done."},
    ]
    log = new_log(tmp_path, messages + turns(20))
    compactor = Compactor(log, recent_turns=8, segment_turns=5)
    assert compactor.compact().status == "written"
    carried = _constraints(log)
    assert rule in carried
    assert carried.count("We have been chasing") == 1  # the rule's sentence and the one before it
    assert "Here is the second one." not in carried


def test_long_prose_with_a_link_keeps_its_rules_and_a_long_trace_states_none(tmp_path: Path):
    """Prose of 400+ characters that names a link, ``curl`` or a stack trace
    is tagged ``log``, and was taken for a pasted trace: its rules were lost
    at the first compaction. A trace of many lines is still output."""
    rules = ["Never drop the order_id from the refund log lines.", "Do not touch the ledger_prod database."]
    said = [
        "The ticket is at https://jira.example.com/browse/PAY-4411, all of it. " + _PROSE * 2 + rules[0],
        "You can reproduce it with curl against the staging host. " + _PROSE + _PROSE + rules[1],
    ]
    trace = "Traceback (most recent call last):\n" + '  File "/srv/app.py", line 9\n' * 40
    trace += "psycopg.errors.NotNullViolation: column must not be null"
    messages = []
    for text in [*said, trace]:
        assert len(text) > 400
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]
    log = new_log(tmp_path, messages + turns(20))
    compactor = Compactor(log, recent_turns=8, segment_turns=5)
    assert compactor.compact().status == "written"
    carried = _constraints(log)
    assert all(rule in carried for rule in rules)
    assert "NotNullViolation" not in carried


def test_a_rule_the_caller_tagged_beside_an_image_is_carried(tmp_path: Path):
    """A message the caller tagged a rule, with an image beside its text,
    was judged by its words alone (no keyword) and dropped."""
    said = "Keep the header exactly like this screenshot: navy bar, logo left, 64px."
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    log = new_log(tmp_path)
    log.append({"role": "user", "content": [{"type": "text", "text": said}, image]}, tags=["constraint"])
    log.append({"role": "assistant", "content": "Noted."})
    log.append_many(turns(20))
    compactor = Compactor(log, recent_turns=8, segment_turns=5)
    assert compactor.compact().status == "written"
    assert said in _constraints(log)


def test_rules_in_long_pastes_are_carried_by_their_sentences_not_whole(tmp_path: Path):
    """Each paste of a spec that says "must" was one rule, carried whole by
    every summary after it: at 75 pastes of about 1,900 tokens the global
    summary held 80,028 tokens, and every later turn failed over budget
    for good. Each paste's rule sentence is carried instead, and a list
    with no stops by its rule lines."""
    filler = "The refund worker reads batches from the queue and posts them to the ledger. " * 60
    rules = [f"Field spec_field_{n} must never be null." for n in range(12)]
    listed = "\n".join(f"- field list_{n}: required, must be a string" for n in range(60))
    messages = []
    for n, rule in enumerate(rules):
        messages += [
            {"role": "user", "content": f"Spec section {n}. {filler}{rule} {filler}"},
            {"role": "assistant", "content": "Read."},
        ]
    messages += [{"role": "user", "content": "Fields:\n" + listed}, {"role": "assistant", "content": "Ok."}]
    log = new_log(tmp_path, messages + turns(30))
    compactor = Compactor(log, recent_turns=8, segment_turns=4)
    while compactor.compact().status == "written":
        pass
    carried = _constraints(log)
    assert all(rule in carried for rule in rules)
    assert "- field list_59: required, must be a string" in carried
    assert carried.count("reads batches") == len(rules)  # each rule with the sentence before it
    tokens = sum(log.headers()["tokens"][seq] for seq, part in log._view() if part in ("global", "segment"))
    assert tokens < 3_000


@pytest.mark.parametrize("rules", [RULES, PLAIN_RULES], ids=["keyword rules", "plain rules"])
@pytest.mark.parametrize("seed", [3, 5])
def test_the_offline_summary_carries_every_rule(tmp_path: Path, rules: list[str], seed: int):
    session = compaction_session(seed, turns=60, rules=rules)
    log = MessageLog.open(tmp_path / "log", create=True)
    log.append_many(session.messages)
    compactor = Compactor(log)
    while compactor.compact().status == "written":
        pass
    assert compactor.status.written[2] >= 4
    text = "\n".join(str(m["content"]) for m in log.context_view())
    assert all(marker in text for marker in session.rules)


# --- failures never break a turn ------------------------------------------------------------------


def test_failures_back_off_then_the_breaker_pauses(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    clock = Clock()
    calls = []

    def busy(messages: list[dict[str, Any]]) -> str:
        calls.append(1)
        raise LLMRateLimitError("rate limited")

    compactor = Compactor(
        log, Summarizer(CallableLLM(busy)), backoff=10, max_backoff=25, max_failures=3, clock=clock
    )
    first = compactor.compact()
    assert first.status == "rejected"
    assert "LLMRateLimitError" in (first.reason or "")
    assert compactor.status.retry_at == 1010
    assert compactor.compact().status == "waiting"
    assert len(calls) == 1
    clock.now = 1010
    assert compactor.compact().status == "rejected"
    assert compactor.status.retry_at == 1030  # doubled
    clock.now = 1030
    assert compactor.compact().status == "rejected"
    assert compactor.status.retry_at == 1055  # capped at max_backoff
    assert compactor.status.paused
    assert compactor.status.failures == 3
    clock.now = 10**6
    assert compactor.compact().status == "waiting"
    assert len(calls) == 3
    assert log.last_summary_index is None  # nothing written by any failure
    compactor.summarizer = Summarizer(CallableLLM(good_reply))
    compactor.resume()
    assert compactor.compact().status == "written"
    assert compactor.status.failures == 0


@pytest.mark.parametrize("run", ["compact", "acompact"])
def test_a_cancelled_error_from_the_model_backs_off_like_a_failure(tmp_path: Path, run: str):
    """A model whose client raises CancelledError (its own task cancelled
    under it) cancelled nothing here: it backs off like any failure. It
    reached the worker's drain, which logged it and called the model again
    on every turn, the report saying all was well."""
    log = new_log(tmp_path, turns(20))
    clock = Clock()
    calls = []

    def cancelled(messages: list[dict[str, Any]]) -> str:
        calls.append(1)
        raise asyncio.CancelledError()

    async def acancelled(messages: list[dict[str, Any]]) -> str:
        return cancelled(messages)

    llm = cancelled if run == "compact" else acancelled
    compactor = Compactor(log, Summarizer(llm, summary_tokens=200, reply_tokens=400), backoff=10, clock=clock)
    outcome = compactor.compact() if run == "compact" else asyncio.run(compactor.acompact())
    assert outcome.status == "failed"
    assert "CancelledError" in (outcome.reason or "")
    assert (compactor.status.failures, compactor.status.retry_at) == (1, 1010)
    assert compactor.compact().status == "waiting"
    assert len(calls) == 1


def test_a_log_handler_that_reads_the_status_does_not_deadlock(tmp_path: Path):
    """The failure and pause lines were logged holding the compactor's lock:
    a handler that read ``status`` (a metrics hook, say) waited for good."""
    import logging
    import threading

    log = new_log(tmp_path, turns(20))
    clock = Clock()

    def busy(messages: list[dict[str, Any]]) -> str:
        raise LLMRateLimitError("rate limited")

    compactor = Compactor(log, Summarizer(CallableLLM(busy)), backoff=10, max_failures=2, clock=clock)
    seen: list[tuple[str, int]] = []

    class Reading(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.levelname, compactor.status.failures))

    handler = Reading(logging.INFO)
    logger = logging.getLogger("context_core.compaction")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for now in (1000, 2000):
            clock.now = now
            worker = threading.Thread(target=compactor.compact, daemon=True)
            worker.start()
            worker.join(20)
            assert not worker.is_alive()  # a deadlocked step never returns
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert ("INFO", 1) in seen
    assert ("WARNING", 2) in seen
    assert compactor.status.paused


@pytest.mark.parametrize(
    "reply",
    [
        "Error: rate limited",
        "<html><body>502 Bad Gateway</body></html>",
        "I'm sorry, I can't help with that.",
    ],
)
def test_error_text_never_becomes_a_summary(tmp_path: Path, reply: str):
    log = new_log(tmp_path, turns(20))
    compactor = Compactor(log, Summarizer(CallableLLM(lambda messages: reply)))
    outcome = compactor.compact()
    assert outcome.status == "rejected"
    assert log.last_summary_index is None
    assert len(log) == 41


def test_a_model_slower_than_the_timeout_writes_nothing(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    release = threading.Event()
    finished = threading.Event()

    def slow(messages: list[dict[str, Any]]) -> str:
        release.wait(10)
        finished.set()
        return good_reply(messages)

    compactor = Compactor(log, Summarizer(CallableLLM(slow)), timeout=0.2)
    outcome = compactor.compact()
    assert outcome.status == "rejected"
    assert "timed out" in (outcome.reason or "")
    release.set()
    assert finished.wait(5)
    assert log.last_summary_index is None
    assert len(log) == 41


def test_a_log_changed_meanwhile_is_not_overwritten(tmp_path: Path):
    log = new_log(tmp_path, turns(20))

    def racing(messages: list[dict[str, Any]]) -> str:
        log.add_summary("written by someone else", (0, 4), level=2)
        return good_reply(messages)

    compactor = Compactor(log, Summarizer(CallableLLM(racing)))
    outcome = compactor.compact()
    assert outcome.status == "stale"
    assert log.last_summary_index == 4
    assert [part for _, part in log._view()].count("segment") == 1


def test_a_rewind_meanwhile_writes_nothing(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    memory = MemoryFiles(tmp_path / "memory", create=True)

    def rewinding(messages: list[dict[str, Any]]) -> str:
        log.rewind(4)
        log.append({"role": "user", "content": "New branch: forget tasks 2-9."})
        return good_reply(messages)

    compactor = Compactor(log, Summarizer(CallableLLM(rewinding)), memory=memory)
    outcome = compactor.compact()
    assert outcome.status == "stale"
    assert log.last_summary_index is None
    assert memory.read() == ""  # no facts of the branch left behind
    kinds = log.headers()["kind"]
    assert 1 not in {int(kinds[seq]) for seq in log.path()}


def test_a_global_summary_carries_the_first_rules_within_rule_tokens(tmp_path: Path, caplog):
    """Every rule the user stated was carried whole by every global
    summary, without bound: a user stating rule after rule made it larger
    than any window. Past ``rule_tokens`` the first stated are kept."""
    stated = [
        {"role": "user", "content": f"Rule {n}: you must always call variant {n} with retry id R-{n:04d}."}
        for n in range(80)
    ]
    answers = [{"role": "assistant", "content": f"Noted variant {n}."} for n in range(80)]
    log = new_log(tmp_path, [m for pair in zip(stated, answers, strict=True) for m in pair])
    compactor = Compactor(log, rule_tokens=300)
    outcomes = []
    with caplog.at_level("WARNING", logger="context_core"):
        while (outcome := compactor.compact()).status == "written":
            outcomes.append(outcome)
    globals_written = [o for o in outcomes if o.level == 3]
    assert globals_written
    newest = globals_written[-1]
    text = log.read([newest.seq])[0]["summary"]
    carried = [n for n in range(80) if f"R-{n:04d}" in text]
    assert carried[:10] == list(range(10))  # the first stated, whole
    assert newest.rules_left_out > 0
    # The rules within rule_tokens, the rest of the summary (later segments'
    # rules among its lines) within summary_tokens.
    bound = 300 + compactor.summarizer.summary_tokens
    assert all(log.headers()["tokens"][o.seq] <= bound for o in globals_written)
    assert any("rule_tokens=300" in r.getMessage() for r in caplog.records)
    with pytest.raises(InvalidInputError):
        Compactor(log, rule_tokens=0)


def test_the_status_counts_the_rules_out_of_the_summaries_in_view(tmp_path: Path):
    """``status.rules_left_out``: those the newest global summary left out,
    and those of each segment summary written after it (a segment carries
    its own rules only; a global one the first of all)."""
    stated = [{"role": "user", "content": f"Rule {n}: you must call variant {n} only."} for n in range(90)]
    answers = [{"role": "assistant", "content": f"Noted {n}."} for n in range(90)]
    log = new_log(tmp_path, [m for pair in zip(stated, answers, strict=True) for m in pair])
    compactor = Compactor(log, rule_tokens=40, segment_rule_tokens=10)
    outcomes: list[Outcome] = []
    expected = 0
    while (outcome := compactor.compact()).status == "written":
        outcomes.append(outcome)
        expected = outcome.rules_left_out + (expected if outcome.level == 2 else 0)
        assert compactor.status.rules_left_out == expected
    assert compactor.compact().status == "idle"  # a step that writes nothing keeps the count
    assert compactor.status.rules_left_out == expected
    levels = [o.level for o in outcomes]
    # A segment with rules left out after a global summary: its count adds to the global's.
    assert any(o.level == 2 and o.rules_left_out > 0 and 3 in levels[:i] for i, o in enumerate(outcomes))


def test_a_rule_over_the_bound_alone_is_left_out(tmp_path: Path):
    """The first rule was carried whatever its size (one long sentence can
    be thousands of tokens), so the bound did not hold. Now a summary
    carries none when the first alone is over: all are left out, counted."""
    stated = [{"role": "user", "content": f"Rule {n}: you must call variant {n} only."} for n in range(60)]
    answers = [{"role": "assistant", "content": f"Noted {n}."} for n in range(60)]
    log = new_log(tmp_path, [m for pair in zip(stated, answers, strict=True) for m in pair])
    compactor = Compactor(log, rule_tokens=5, segment_rule_tokens=5)
    outcomes = []
    while (outcome := compactor.compact()).status == "written":
        outcomes.append(outcome)
    assert {o.level for o in outcomes} == {2, 3}
    assert all(o.rules_left_out > 0 for o in outcomes)
    view = "\n".join(str(m["content"]) for m in log.context_view() if m["role"] == "system")
    assert "variant 0 only" not in view


def test_the_view_limits_segments_kept(tmp_path: Path):
    log = new_log(tmp_path)
    with pytest.raises(InvalidInputError, match="at most 3"):
        Compactor(log, segments_kept=4)


def test_acompact_on_a_closed_log_is_abandoned(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    compactor = Compactor(log)
    log.close()

    async def main() -> None:
        outcome = await compactor.acompact()
        assert outcome.status == "abandoned"

    asyncio.run(main())
    assert compactor.compact().status == "abandoned"


# --- in the background ----------------------------------------------------------------------------


def test_schedule_returns_at_once_and_the_turn_goes_on(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    gate = threading.Event()
    entered = threading.Event()

    def gated(messages: list[dict[str, Any]]) -> str:
        entered.set()
        gate.wait(10)
        return good_reply(messages)

    compactor = Compactor(log, Summarizer(CallableLLM(gated)))
    assert compactor.schedule() is True
    assert entered.wait(5)
    assert compactor.schedule() is False  # one job at a time
    assert compactor.status.running
    assert compactor.compact().status == "busy"
    log.append_many(turns(2, 20))  # the turn's own writes are not held up
    gate.set()
    compactor.close(wait=True, timeout=10)
    assert compactor.status.written[2] == 1
    assert log.last_summary_index == 20


def test_after_write_runs_on_the_worker_once_a_drain_wrote(tmp_path: Path, caplog):
    """``after_write`` is called on the worker at the end of a drain that
    wrote summaries (once, after them all, before its joiners wake), not
    after one that wrote nothing; what it raises is logged, and the worker
    goes on."""
    log = new_log(tmp_path, turns(30))
    compactor = Compactor(log, Summarizer(CallableLLM(good_reply)))
    calls: list[tuple[str, int]] = []

    def after() -> None:
        calls.append((threading.current_thread().name, compactor.status.written[2]))
        raise RuntimeError("a hook that fails")

    compactor.after_write = after
    assert compactor.schedule() is True
    with caplog.at_level("ERROR", logger="context_core.compaction"):
        assert compactor.join(timeout=10) is True
    assert calls == [("context_core compaction", 2)]  # after both segments
    assert "after_write raised" in caplog.text
    assert compactor.schedule() is False  # nothing due: no drain, no call
    log.append_many(turns(2, 30))
    compactor.schedule()
    assert compactor.join(timeout=10) is True
    assert len(calls) == 1  # a drain that wrote nothing
    log.append_many(turns(10, 32))
    assert compactor.schedule() is True
    assert compactor.join(timeout=10) is True
    assert len(calls) == 2
    compactor.close()


def test_join_waits_for_every_due_step_and_times_out_on_one_that_hangs(tmp_path: Path):
    """``join`` returns once the worker has written all that was due (two
    segments here), and says so; past its timeout it returns ``False`` with
    the step still running, which then finishes."""
    log = new_log(tmp_path, turns(30))
    gate = threading.Event()

    def gated(messages: list[dict[str, Any]]) -> str:
        gate.wait(10)
        return good_reply(messages)

    compactor = Compactor(log, Summarizer(CallableLLM(gated)))
    assert compactor.join() is True  # nothing started: nothing to wait for
    assert compactor.schedule() is True
    assert compactor.join(timeout=0.05) is False
    assert compactor.status.running
    assert compactor.status.written[2] == 0
    gate.set()
    assert compactor.join(timeout=10) is True
    assert not compactor.status.running
    assert compactor.status.written[2] == 2
    assert log.last_summary_index == 40
    compactor.close()


def test_ajoin_awaits_the_task_without_closing(tmp_path: Path):
    log = new_log(tmp_path, turns(30))

    async def main() -> None:
        release = asyncio.Event()

        async def gated(messages: list[dict[str, Any]]) -> str:
            await release.wait()
            return good_reply(messages)

        compactor = Compactor(log, Summarizer(CallableLLM(gated)))
        assert compactor.aschedule() is not None
        assert await compactor.ajoin(timeout=0.05) is False
        release.set()
        assert await compactor.ajoin(timeout=10) is True
        assert compactor.status.written[2] == 2
        log.append_many(turns(10, 30))  # still open: more becomes due and runs
        assert compactor.aschedule() is not None
        assert await compactor.ajoin(timeout=10) is True
        assert compactor.status.written[2] == 3
        await compactor.aclose()

    asyncio.run(main())
    assert log.last_summary_index == 60


def test_close_without_waiting_abandons_the_job_whole(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    gate = threading.Event()
    entered = threading.Event()
    done = threading.Event()

    def gated(messages: list[dict[str, Any]]) -> str:
        entered.set()
        gate.wait(10)
        done.set()
        return good_reply(messages)

    compactor = Compactor(log, Summarizer(CallableLLM(gated)))
    compactor.schedule()
    assert entered.wait(5)
    compactor.close(wait=False)
    gate.set()
    assert done.wait(5)
    compactor._thread.join(5)  # type: ignore[union-attr]
    assert log.last_summary_index is None
    assert len(log) == 41
    assert compactor.schedule() is False


@pytest.mark.parametrize(
    "close", [{"wait": False}, {"wait": True, "timeout": 0.05}], ids=["no wait", "past its timeout"]
)
def test_aclose_cancels_the_task_and_nothing_is_written(tmp_path: Path, close: dict[str, Any]):
    """Closing without waiting, or waiting less than the job takes, cancels
    the job in flight: nothing is written and nothing starts after, and a
    join waiting on it returns."""
    log = new_log(tmp_path, turns(20))

    async def main() -> None:
        entered = asyncio.Event()

        async def hanging(messages: list[dict[str, Any]]) -> str:
            entered.set()
            await asyncio.sleep(30)
            return good_reply(messages)

        compactor = Compactor(log, Summarizer(CallableLLM(hanging)))
        task = compactor.aschedule()
        assert task is not None
        await asyncio.wait_for(entered.wait(), 5)
        joining = asyncio.ensure_future(compactor.ajoin(timeout=10))
        await asyncio.sleep(0)
        await compactor.aclose(**close)
        assert task.done()
        # The cancelled task ends a join's wait with an answer, not by raising in its caller.
        assert await joining is True
        assert compactor.aschedule() is None

    asyncio.run(main())
    assert log.last_summary_index is None
    assert len(log) == 41


def test_aclose_waits_for_the_job_in_flight_which_writes_and_nothing_after(tmp_path: Path):
    """``aclose(wait=True)`` lets the job in flight finish: its summary is
    written whole, and no further step starts once closing began."""
    log = new_log(tmp_path, turns(30))

    async def main() -> None:
        entered, release = asyncio.Event(), asyncio.Event()

        async def gated(messages: list[dict[str, Any]]) -> str:
            entered.set()
            await release.wait()
            return good_reply(messages)

        compactor = Compactor(log, Summarizer(CallableLLM(gated)))
        task = compactor.aschedule()
        assert task is not None
        await asyncio.wait_for(entered.wait(), 5)
        closing = asyncio.ensure_future(compactor.aclose(wait=True))
        await asyncio.sleep(0)
        assert not closing.done()  # still waiting on the job in flight
        release.set()
        await asyncio.wait_for(closing, 5)
        assert task.done()
        assert task.result().status == "written"
        assert compactor.status.written[2] == 1
        assert compactor.aschedule() is None

    asyncio.run(main())
    assert log.last_summary_index == 20  # the first segment's summary, and only it
    assert len(log) == 62


@pytest.mark.parametrize("cancel", ["task", "twice", "aclose"])
def test_a_cancel_during_the_write_leaves_it_whole_or_not_at_all(tmp_path: Path, monkeypatch, cancel: str):
    """Cancelled once the summary passed and its write began (in its
    thread): the lock stays held until the write ends, so no other job runs
    beside it. A bare cancel of ``acompact()`` (once, or again while it
    waits for the write) lets the write finish whole and counts it;
    ``aclose(wait=False)`` of a scheduled job stops it before the append,
    so nothing is written. Never half of one."""
    log = new_log(tmp_path, turns(20))
    before = len(log)
    writing, release = threading.Event(), threading.Event()
    remember = Compactor._remember

    def held(self: Compactor, job: Any, prepared: Any) -> int:
        writing.set()
        assert release.wait(10)
        return remember(self, job, prepared)

    monkeypatch.setattr(Compactor, "_remember", held)
    written = cancel != "aclose"

    async def main() -> None:
        compactor = Compactor(log, Summarizer(CallableLLM(good_reply)))
        task = asyncio.ensure_future(compactor.acompact()) if written else compactor.aschedule()
        assert task is not None
        assert await asyncio.to_thread(writing.wait, 10)
        closing = None
        if written:
            task.cancel()
            if cancel == "twice":
                await asyncio.sleep(0.01)
                task.cancel()
        else:
            closing = asyncio.ensure_future(compactor.aclose(wait=False))
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the write's thread
        assert closing is None or not closing.done()
        assert Compactor(log).compact().status == "busy"  # the job lock is held
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        if closing is not None:
            await closing
        assert compactor.status.written[2] == int(written)
        last = compactor.status.last  # an abandoned step is not an outcome to remember
        assert (last.status if last else None) == ("written" if written else None)

    asyncio.run(main())
    assert len(log) == before + int(written)  # one summary node, or none
    assert log.last_summary_index == (20 if written else None)  # the first segment, covered whole
    monkeypatch.undo()
    assert Compactor(log).compact().status == ("idle" if written else "written")  # nothing left half-done


def test_aschedule_writes_in_the_background(tmp_path: Path):
    log = new_log(tmp_path, turns(30))

    async def main() -> None:
        async def model(messages: list[dict[str, Any]]) -> str:
            await asyncio.sleep(0.01)
            return good_reply(messages)

        compactor = Compactor(log, Summarizer(CallableLLM(model)))
        task = compactor.aschedule()
        assert task is not None
        outcome = await task
        assert outcome.status == "idle"
        assert compactor.status.written[2] == 2
        await compactor.aclose()

    asyncio.run(main())
    assert log.last_summary_index == 40


# --- a long session -----------------------------------------------------------------------------


def is_summary(message: dict[str, Any]) -> bool:
    text = str(message["content"])
    return message["role"] == "system" and text.startswith((SUMMARY_PREFIX, SEGMENT_PREFIX))


def next_turn_context(log: MessageLog, memory: MemoryFiles, provider: str, budget: int = 4_000) -> str:
    """What the next turn sends at ``budget``: PriorityAssembly over the
    log's view (its summaries in place of what they cover) with memory's
    lines, as a server wires them."""
    lines = [line for line in memory.read().splitlines() if line.strip()]
    selection = PriorityAssembly(provider=provider).select(log, budget, memories=lines)
    return "\n".join([str(selection.system or ""), *(str(m.get("content")) for m in selection.messages)])


@pytest.mark.parametrize("mode", ["thread", "asyncio"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_rules_and_facts_survive_every_compaction_of_a_300_turn_session(
    tmp_path: Path, provider: str, mode: str
):
    """Compaction runs in the background (``schedule()`` or ``aschedule()``
    each turn, the agent waiting on its own model between turns). At every
    turn after a summary landed, each planted rule is in that turn's 4K
    context, and each planted fact seen so far is in it or in memory."""
    session = compaction_session(11, turns=300, provider=provider)
    log = MessageLog.open(tmp_path / "log", create=True)
    memory = MemoryFiles(tmp_path / "memory", create=True)
    compactor = Compactor(log, memory=memory)
    checks: list[int] = []  # the summaries written, at each turn that checked
    compacted: set[str] = set()  # facts checked once only a summary or memory could hold them

    def check(index: int) -> None:
        written = sum(compactor.status.written.values())
        if written == (checks[-1] if checks else 0):
            return
        checks.append(written)
        sent = next_turn_context(log, memory, provider)
        missing = [marker for marker in session.rules if marker not in sent]
        assert not missing, f"the turn at message {index}, after {written} summaries: rules {missing} lost"
        shown = sent + "\n" + memory.read()
        # A fact no summary covers yet is raw in the log's view: whether
        # the window keeps it is the budget's call, not compaction's.
        raw = "\n".join(str(m["content"]) for m in log.context_view() if not is_summary(m))
        seen = [value for value in session.facts if session.fact_at[value] <= index]
        lost = [value for value in seen if value not in shown and value not in raw]
        assert not lost, f"the turn at message {index}, after {written} summaries: facts {lost} lost"
        compacted.update(value for value in seen if value not in raw)

    def turns() -> Any:
        for index, message in enumerate(session.messages):
            log.append(message)
            if message["role"] == "user" and isinstance(message["content"], str):
                yield index

    end = len(session.messages)
    # However far the worker fell behind (a loaded machine), the steps still
    # due run at the end, one at a time, each checked.
    if mode == "thread":
        for index in turns():
            check(index)
            compactor.schedule()
            time.sleep(0.002)  # the agent's own model call
        while (outcome := compactor.compact()).status in ("written", "busy"):
            check(end)
            time.sleep(0.001)
        compactor.close(wait=True)
    else:

        async def run() -> Outcome:
            for index in turns():
                check(index)
                compactor.aschedule()
                await asyncio.sleep(0.002)
            while (outcome := await compactor.acompact()).status in ("written", "busy"):
                check(end)
                await asyncio.sleep(0.001)
            await compactor.aclose(wait=True)
            return outcome

        outcome = asyncio.run(run())
    check(end)
    assert outcome.status == "idle", outcome
    assert sum(compactor.status.written.values()) == checks[-1]  # the last summary was checked too
    assert checks[-1] >= 25, checks
    assert compactor.status.written[3] >= 5
    assert len(compacted) >= len(session.facts) // 2, (len(compacted), len(session.facts))
    log.close()


# --- bad input ----------------------------------------------------------------------------------


def test_bad_arguments_are_refused(tmp_path: Path):
    log = new_log(tmp_path)
    with pytest.raises(InvalidTypeError):
        Compactor("not a log")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        Compactor(log, "offline")  # type: ignore[arg-type]
    for option in ("recent_turns", "segment_turns", "segments_kept", "max_failures"):
        with pytest.raises(InvalidInputError):
            Compactor(log, **{option: 0})
    with pytest.raises(InvalidInputError):
        Compactor(log, timeout=0)
    with pytest.raises(InvalidInputError):
        Compactor(log, backoff=float("inf"))


# --- found in the second review ------------------------------------------------------------------


def test_schedule_does_not_skip_a_job_a_rewind_made_due(tmp_path: Path):
    log = new_log(tmp_path, turns(18))
    compactor = Compactor(log)
    assert compactor.compact().status == "written"
    assert compactor.compact().status == "idle"
    log.rewind(36)
    log.append_many(turns(1, 18))
    assert compactor._cannot_be_due() is False
    assert compactor.schedule() is True
    compactor.close(wait=True, timeout=10)
    assert compactor.status.written[2] == 2


def test_a_rule_said_twice_is_carried_once(tmp_path: Path):
    rule = "You must never use port 8080."
    log = new_log(tmp_path)
    for t in range(18):
        log.append({"role": "user", "content": rule if t in (1, 4) else f"Task {t}"})
        log.append({"role": "assistant", "content": f"done {t}"})
    compactor = Compactor(log, Summarizer(CallableLLM(forgetful)))
    outcome = compactor.compact()
    assert outcome.status == "written"
    assert log.read([outcome.seq])[0]["summary"].count(rule) == 1


def test_a_long_timeout_is_a_timeout_not_an_overflow(tmp_path: Path):
    log = new_log(tmp_path, turns(20))
    compactor = Compactor(log, Summarizer(CallableLLM(good_reply)), timeout=1e10)
    assert compactor.compact().status == "written"


# --- a turn costs O(its new nodes) -----------------------------------------------------------------


def test_schedule_plans_once_then_counts_only_the_new_turns(tmp_path: Path, monkeypatch):
    """After one plan says how many turns must start before a job can be
    due, each schedule() reads only the nodes appended since the last one;
    the job starts on exactly the turn the plan named."""
    import context_core.compaction.compactor as module

    planned: list[int] = []
    real_plan = module.plan

    def counting_plan(log: MessageLog, **options: Any):
        planned.append(len(log))
        return real_plan(log, **options)

    monkeypatch.setattr(module, "plan", counting_plan)
    log = new_log(tmp_path)
    compactor = Compactor(log, recent_turns=2, segment_turns=3)
    started, read_from = [], []
    for t in range(8):
        log.append_many(turns(1, t))
        if compactor.schedule():
            started.append(t)
            _join(compactor)
        elif compactor._wait is not None:
            read_from.append(compactor._wait[0] == len(log))
    compactor.close(wait=True, timeout=10)
    # Turn 0 plans (a worker finds nothing due); turns 1-3 are counted off
    # the bound without planning, each moving it to the log's end (the next
    # turn reads only its own nodes); turn 4 (2 recent + 3) is due.
    assert started[:2] == [0, 4]
    assert read_from[:3] == [True, True, True]
    assert planned[:2] == [3, 11]  # the system message, then two nodes a turn
    assert not {5, 7, 9} & set(planned)
    assert compactor.status.written[2] >= 1


def _join(compactor: Compactor) -> None:
    assert compactor._thread is not None
    assert compactor.join(10)


def test_one_header_starts_a_turn_as_the_array_check_says():
    import numpy as np

    from context_core.compaction.plan import starts_turn, turn_starts
    from context_core.log import HEADER_DTYPE

    headers = np.zeros(3 * 4 * 256, dtype=HEADER_DTYPE)
    combos = [(kind, role, flags) for kind in range(3) for role in range(4) for flags in range(256)]
    headers["kind"], headers["role"], headers["flags"] = zip(*combos, strict=True)
    assert [starts_turn(*c) for c in combos] == turn_starts(headers).tolist()


@pytest.mark.parametrize("seed", range(40))
def test_new_nodes_are_counted_alike_one_by_one_and_as_arrays(seed: int):
    import random

    import numpy as np

    from context_core.compaction.compactor import _NONE, _counted_arrays, _counted_rows
    from context_core.log import HEADER_DTYPE

    rng = random.Random(seed)
    length = rng.randrange(0, 50)
    count = rng.randrange(1, 80)
    head = None if length == 0 else length - 1
    headers = np.zeros(count, dtype=HEADER_DTYPE)
    headers["parent"] = [
        _NONE if head is None and i == 0 else (head if i == 0 else length + i - 1) for i in range(count)
    ]
    headers["role"] = [rng.randrange(4) for _ in range(count)]
    headers["flags"] = [rng.randrange(256) for _ in range(count)]
    headers["tokens"] = [rng.randrange(5000) for _ in range(count)]
    if rng.random() < 0.5:  # a broken chain or a node that is not a message
        at = rng.randrange(count)
        if rng.random() < 0.5:
            headers["parent"][at] = rng.randrange(length + count)
        else:
            headers["kind"][at] = rng.randrange(1, 3)
    rows = headers[["parent", "kind", "role", "flags", "tokens"]].tolist()
    assert _counted_rows(rows, length, head) == _counted_arrays(headers, length, head)


def test_plan_refuses_bad_arguments(tmp_path: Path):
    from context_core.compaction import plan

    log = new_log(tmp_path, turns(3))
    options = {"recent_turns": 2, "segment_turns": 3, "segments_kept": 3, "tail_tokens": None}
    for name, bad, error in (
        ("recent_turns", 0, InvalidInputError),
        ("segment_turns", True, InvalidTypeError),
        ("segments_kept", "3", InvalidTypeError),
        ("tail_tokens", -1, InvalidInputError),
    ):
        with pytest.raises(error, match=name):
            plan(log, **{**options, name: bad})


def test_huge_bounds_wait_exactly_and_the_binding_refuses_zero(tmp_path: Path):
    """Bounds past what a u64 holds are no bound, not an OverflowError or a
    wrapped count (a wrapped ``tokens=0`` would replan every turn)."""
    from context_core.compaction import Wait, plan

    log = new_log(tmp_path, turns(1))
    for tail in (2**63, 2**64 - 1, 10**20):
        step = plan(log, recent_turns=10**30, segment_turns=10**30, segments_kept=3, tail_tokens=tail)
        assert isinstance(step, Wait)
        assert step.tokens is not None
        assert step.tokens > 2**61
        assert step.turns > 2**61
    for kept, segment in ((0, 3), (3, 0)):
        with pytest.raises(InvalidInputError, match="at least 1"):
            log._plan(2, segment, kept, None)


def test_a_job_lets_others_run_after_each_message_and_around_the_call(tmp_path: Path):
    """The worker's `between` runs after every rendered message, after the
    model's reply and before the guard: no step of a job is long."""
    events: list[str] = []

    def model(prompt: list[dict[str, Any]]) -> str:
        events.append("call")
        return good_reply(prompt)

    messages = turns(3)
    result = Summarizer(CallableLLM(model)).summarize(messages, between=lambda: events.append("between"))
    assert result.text
    assert events == ["between"] * len(messages) + ["call", "between", "between"]


def test_a_segment_never_ends_between_a_tool_call_and_its_result(tmp_path: Path):
    """Anthropic puts a tool's result in the next user message, often with
    more text. That message answers the calls before it: if a segment ended
    just before it, the view would open on results whose calls were
    summarised away, which the API rejects."""
    from context_core.compaction import Job, plan

    messages: list[dict[str, Any]] = []
    for t in range(8):
        call = f"toolu_{t}"
        messages.append({"role": "user", "content": f"Task {t}: read file-{t}."})
        messages.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "read", "input": {}}]}
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call, "content": f"contents of file-{t}"},
                    {"type": "text", "text": "Thanks, now summarise it."},
                ],
            }
        )
        messages.append({"role": "assistant", "content": f"File-{t} says hello."})
    log = new_log(tmp_path, messages)
    for segment in (1, 2, 3):
        step = plan(log, recent_turns=2, segment_turns=segment, segments_kept=3, tail_tokens=None)
        assert isinstance(step, Job)
        first_uncovered = log.read([step.covers[1] + 1])[0]
        assert first_uncovered["role"] == "user"
        assert isinstance(first_uncovered["content"], str), first_uncovered  # a new task, not a result


def test_the_compactor_lets_others_run_while_it_reads_and_summarises(tmp_path: Path, monkeypatch):
    """The worker thread yields between reads of the covered messages and
    hands the summarizer a `between` it calls after each message."""
    from context_core.compaction import compactor as module

    yields: list[str] = []
    seen: list[Any] = []

    class Watching(Summarizer):
        def summarize(self, messages, *, constraints=(), between=None):  # type: ignore[override]
            seen.append(between)
            return super().summarize(messages, constraints=constraints, between=between)

    log = new_log(tmp_path, turns(20))
    compactor = Compactor(log, Watching(CallableLLM(good_reply)))
    monkeypatch.setattr(compactor._gate, "wait", lambda *owner: yields.append("yield"))
    job = compactor.due()
    assert job is not None
    assert compactor.compact().status == "written"
    assert len(seen) == 1
    assert seen[0].func is compactor._gate.wait  # waiting on behalf of the compacting thread
    rendered = len(job.messages)  # one yield after each message rendered
    reads = (len(job.messages) - 1) // module._READ_STEP  # one between reads of a few
    assert rendered >= 10
    assert len(yields) >= rendered + reads + 2


def test_a_summarizer_without_between_still_compacts(tmp_path: Path):
    class Older(Summarizer):
        def summarize(self, messages, *, constraints=()):  # type: ignore[override]
            return super().summarize(messages, constraints=constraints)

    log = new_log(tmp_path, turns(20))
    assert Compactor(log, Older()).compact().status == "written"
    assert log.last_summary_index is not None


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_summarizer_that_raises_backs_off_and_writes_nothing(tmp_path: Path, asynchronous: bool):
    """A bug in a summarizer is a failure like any other: recorded, backed
    off, paused after max_failures; never retried on every turn."""
    calls: list[int] = []

    class Broken(Summarizer):
        def summarize(self, messages, **options):  # type: ignore[override]
            calls.append(1)
            raise RuntimeError("the summarizer broke")

        async def asummarize(self, messages, **options):  # type: ignore[override]
            return self.summarize(messages)

    log = new_log(tmp_path, turns(20))
    clock = Clock()
    compactor = Compactor(log, Broken(), backoff=10, max_failures=2, clock=clock)
    step = (lambda: asyncio.run(compactor.acompact())) if asynchronous else compactor.compact
    first = step()
    assert first.status == "failed"
    assert "RuntimeError: the summarizer broke" in (first.reason or "")
    assert compactor.status.retry_at == 1010
    assert step().status == "waiting"
    assert compactor.schedule() is False  # backing off: no thread started
    clock.now = 1010
    assert step().status == "failed"
    assert compactor.status.paused
    assert len(calls) == 2
    assert log.last_summary_index is None


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_facts_callable_that_raises_backs_off_and_writes_nothing(tmp_path: Path, asynchronous: bool):
    """An error after the model answered (here from the user's ``facts``)
    is a failure too: recorded and backed off, the lock released, nothing
    written; not an exception out of the step, retried on every turn."""
    calls: list[int] = []

    def facts(messages: Any) -> list[str]:
        calls.append(1)
        raise RuntimeError("the fact filter broke")

    log = new_log(tmp_path, turns(20))
    memory = MemoryFiles(tmp_path / "memory", create=True)
    clock = Clock()
    compactor = Compactor(log, memory=memory, facts=facts, backoff=10, clock=clock)
    step = (lambda: asyncio.run(compactor.acompact())) if asynchronous else compactor.compact
    first = step()
    assert first.status == "failed"
    assert "writing the summary (or its facts) raised RuntimeError: the fact filter broke" in (
        first.reason or ""
    )
    assert compactor.status.retry_at == 1010
    assert step().status == "waiting"
    assert len(calls) == 1
    assert log.last_summary_index is None
    clock.now = 1010
    assert Compactor(log).compact().status == "written"  # the lock was released


def test_a_pinned_rule_stays_raw_and_no_summary_must_carry_it(tmp_path: Path):
    """A pinned message is an anchor: every view keeps it raw, so neither a
    segment job nor a global one lists it among the rules to carry."""
    from context_core.compaction import plan

    log = new_log(tmp_path)
    pinned = log.append({"role": "user", "content": "You must always answer in English."}, pinned=True)
    compactor = Compactor(log, recent_turns=2, segment_turns=2, segments_kept=1)
    levels = []
    for t in range(12):
        log.append_many(turns(1, t))
        while True:
            step = plan(log, recent_turns=2, segment_turns=2, segments_kept=1, tail_tokens=None)
            if not hasattr(step, "level"):
                break
            assert pinned not in step.rules
            outcome = compactor.compact()
            assert outcome.status == "written"
            levels.append(outcome.level)
    assert 3 in levels
    view = log.context_view()
    assert [m for m in view if m.get("content") == "You must always answer in English."]


def test_join_refuses_a_timeout_that_is_no_number_of_seconds(tmp_path: Path):
    """As the session's join: a wrong timeout raised Python's own error, and
    one past what a lock waits overflowed its deadline; it is for ever."""
    compactor = Compactor(new_log(tmp_path, turns(4)))
    for bad, error in (("a", InvalidTypeError), (-1, InvalidInputError), (float("nan"), InvalidInputError)):
        with pytest.raises(error, match="timeout must be"):
            compactor.join(bad)
        with pytest.raises(error, match="timeout must be"):
            asyncio.run(compactor.ajoin(bad))
    assert compactor.join(1e12)
    compactor.close()
