"""Summaries and compaction: the guard on a 2,000-token reply, the offline
summary of a 30-message segment, the turn while a slow model summarises in
the background, and retention at a 4K budget with L2/L3 summaries.

The retention rows use ``tests/compaction_sessions.py``: 300-turn sessions
with rules stated in the first ten turns and exact facts in tool output.
After the whole session is compacted (offline summarizer, facts to memory),
``PriorityAssembly`` picks the window from the log's raw tail with the
global summary, the segment summaries and the memory lines; a rule or fact
is kept when its marker is in what would be sent, or in memory.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent_sessions import generate
from compaction_sessions import compaction_session
from context_core import CallableLLM, MemoryFiles, MessageLog, PriorityAssembly, Tokenizer, WeightedWindow
from context_core.compaction import Compactor
from context_core.log import SUMMARY_PREFIX
from context_core.summarize import Summarizer, check_reply
from support import REPORTS, register

TOK = Tokenizer()


def two_thousand_token_reply() -> tuple[str, str]:
    """A reply of about 2,000 tokens (analysis and summary) naming files and
    call ids, and the covered text that holds them."""
    decisions = "\n".join(
        f"- step {i}: changed services/payments/retry.go for order A-{8800 + i}, "
        f"after call_7_{i % 9} failed with a timeout of {200 + i} ms"
        for i in range(36)
    )
    analysis = "The user first asked for the refund job; then corrected the retry limit. " * 60
    reply = (
        f"<analysis>\n{analysis}\n</analysis>\n<summary>\nConstraints:\n- retry at most 3 times\n"
        f"Decisions:\n{decisions}\nCurrent state:\n- tests pass\nNext steps:\n- ship it\n</summary>"
    )
    covered = "services/payments/retry.go\n" + "\n".join(f"call_7_{i}" for i in range(9))
    return reply, covered


def test_guard_on_a_2000_token_reply(benchmark):
    reply, covered = two_thousand_token_reply()
    register(benchmark, "summary guard, 2,000-token reply", "ours")
    result = benchmark(check_reply, reply, level=2, covered=covered, max_tokens=1600, tokenizer=TOK)
    assert result.__class__.__name__ == "Summary"
    REPORTS.append(f"guard: reply of {TOK.count(reply)} tokens, summary of {result.tokens}")


def segment() -> list[dict]:
    """Ten turns of a generated agent session (files, logs, diffs, JSON;
    English and Chinese): 30 messages."""
    session = generate(400, "openai", seed=5, timestamps=False)
    messages = session.messages[1:]
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"]
    chosen = messages[starts[0] : starts[10]]
    return chosen[:30] if len(chosen) >= 30 else messages[:30]


def test_offline_summary_of_a_30_message_segment(benchmark):
    messages = segment()
    summarizer = Summarizer()
    register(benchmark, "offline summary, 30-message segment", "ours")
    result = benchmark(summarizer.summarize, messages)
    assert result.source == "offline"
    chars = sum(len(str(m.get("content"))) for m in messages)
    REPORTS.append(f"offline summary: {len(messages)} messages ({chars:,} chars) -> {result.tokens} tokens")


def _turns(session_messages: list[dict]) -> list[int]:
    return [
        i + 1 for i, m in enumerate(session_messages) if m["role"] == "user" and isinstance(m["content"], str)
    ]


SUMMARY_REPLY = (
    "<summary>\nConstraints:\n- none\nDecisions:\n- none\nCurrent state:\n- ok\n"
    "Next steps:\n- go on\n</summary>"
)


@dataclass
class Round:
    """One replay: seconds per turn, whether a summary landed just before
    each turn (so its window is the first to see the new view), the loop's
    lateness in waking each turn (asyncio only), and the summaries written."""

    times: list[float] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    after_write: list[bool] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)
    written: int = 0
    overlapped: list[float] = field(default_factory=list)


class Watched(Compactor):
    """A Compactor that notes when its work after the model's answer (the
    guard, the fact filter and the write) ran, to find the turns it
    overlapped."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.busy: list[tuple[float, float]] = []
        judge = self.summarizer._judge

        def watched_judge(*a, **k):
            started = time.perf_counter()
            try:
                return judge(*a, **k)
            finally:
                self.busy.append((started, time.perf_counter()))

        self.summarizer._judge = watched_judge  # type: ignore[method-assign]

    def _finish_recorded(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return super()._finish_recorded(*args, **kwargs)
        finally:
            self.busy.append((started, time.perf_counter()))


def overlapped(out: Round, busy: list[tuple[float, float]]) -> list[float]:
    """The times of the turns that ran while the job's post-answer work did."""
    return [
        t
        for t, (start, end) in zip(out.times, out.spans, strict=True)
        if any(b_start < end and start < b_end for b_start, b_end in busy)
    ]


def _written(compactor: Compactor | None) -> int:
    return 0 if compactor is None else sum(compactor.status.written.values())


class Replayer:
    """One turn at a time over ``messages``: append what came since the
    last turn, pick the window from the log and (with a compactor) start
    compaction; only that is timed."""

    def __init__(self, messages: list[dict], log: MessageLog, compactor: Compactor | None, budget: int):
        self.messages, self.log, self.compactor, self.budget = messages, log, compactor, budget
        self.window = WeightedWindow()
        self.out = Round()
        self.done = self.seen = 0

    def turn(self, end: int, start_compaction: Callable[[], object] | None) -> None:
        written = _written(self.compactor)
        self.out.after_write.append(written > self.seen)
        self.seen = written
        started = time.perf_counter()
        self.log.append_many(self.messages[self.done : end])
        self.done = end
        self.window.select(self.log, self.budget)
        if start_compaction is not None:
            start_compaction()
        ended = time.perf_counter()
        self.out.times.append(ended - started)
        self.out.spans.append((started, ended))

    def finish(self) -> Round:
        self.out.written = _written(self.compactor)
        if isinstance(self.compactor, Watched):
            self.out.overlapped = overlapped(self.out, self.compactor.busy)
        return self.out


def replay_in_threads(messages: list[dict], compactor_of, pace: float, budget: int = 8_000) -> Round:
    """Each turn starts compaction with ``schedule()`` (a worker thread).
    Between turns the agent waits ``pace`` seconds for its own model (not
    measured), so summaries land during the replay."""
    with tempfile.TemporaryDirectory() as where:
        log = MessageLog.open(Path(where) / "log", create=True)
        compactor = compactor_of(log)
        replayer = Replayer(messages, log, compactor, budget)
        for end in _turns(messages):
            time.sleep(pace)
            replayer.turn(end, None if compactor is None else compactor.schedule)
        out = replayer.finish()
        if compactor is not None:
            compactor.close(wait=False)
        log.close()
    return out


def replay_on_a_loop(messages: list[dict], compactor_of, pace: float, budget: int = 8_000) -> Round:
    """:func:`replay_in_threads` as a coroutine server runs it: each turn
    is due ``pace`` seconds after the last one ended, runs on the event
    loop and starts compaction with ``aschedule()``. ``lateness`` is how
    long past its due time the loop woke the turn: work the compaction
    task did on the loop would show there."""

    async def run() -> Round:
        with tempfile.TemporaryDirectory() as where:
            log = MessageLog.open(Path(where) / "log", create=True)
            compactor = compactor_of(log)
            replayer = Replayer(messages, log, compactor, budget)
            for end in _turns(messages):
                due = time.perf_counter() + pace
                await asyncio.sleep(pace)
                replayer.out.lateness.append(time.perf_counter() - due)
                replayer.turn(end, None if compactor is None else compactor.aschedule)
            out = replayer.finish()
            if compactor is not None:
                await compactor.aclose(wait=False)
            log.close()
        return out

    return asyncio.run(run())


def _settle() -> None:
    """Wait for the library's threads: a round measures its own variant."""
    for thread in threading.enumerate():
        if thread.name.startswith("context_core") or thread.name.startswith("asyncio"):
            thread.join(10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.5) * 1e3:.3f} / p99 {percentile(values, 0.99) * 1e3:.3f} ms"


@pytest.mark.parametrize("mode", ["thread", "asyncio", "back to back"])
def test_the_turn_never_waits_for_a_slow_model(benchmark, mode: str):
    """1,000 messages (215 turns); the model takes 2 s a summary (it
    sleeps, as a remote call would) and the agent 30 ms between turns, so
    a round lasts about 6.5 s and several summaries land in it: the turns
    that follow pay for the new view, and the summaries' guard, facts and
    write run in the background meanwhile (the report counts the turns
    they overlapped). Rounds alternate with and without compaction.

    ``back to back`` is the stress case, not the target's: a model that
    answers at once and turns with no pause between them (worker thread),
    so every step of every job, the guard, facts and write included, runs
    beside a turn."""
    messages = compaction_session(2, turns=215).messages[:1000]
    smoke = benchmark.disabled
    model_seconds, pace, rounds = (0.2, 0.005, 1) if smoke else (2.0, 0.03, 6)
    if mode == "back to back":
        model_seconds, pace = 0.0, 0.0
    calls = []

    def slow(prompt: list[dict]) -> str:
        calls.append(1)
        time.sleep(model_seconds)
        return SUMMARY_REPLY

    async def aslow(prompt: list[dict]) -> str:
        calls.append(1)
        await asyncio.sleep(model_seconds)
        return SUMMARY_REPLY

    model = aslow if mode == "asyncio" else slow
    replay = replay_on_a_loop if mode == "asyncio" else replay_in_threads

    def with_compaction(log):
        return Watched(log, Summarizer(CallableLLM(model)), recent_turns=4, segment_turns=5)

    results: dict[str, list[Round]] = {"with": [], "without": []}

    def run():
        for i in range(rounds):  # alternated, so a drift of the machine falls on both
            for variant in ("without", "with") if i % 2 == 0 else ("with", "without"):
                compactor_of = with_compaction if variant == "with" else (lambda log: None)
                _settle()  # an earlier round's job, still in its model call, must not fall in this one
                results[variant].append(replay(messages, compactor_of, pace))

    register(benchmark, f"turn with a 2 s model compacting in the background ({mode})", "ours")
    benchmark.pedantic(run, rounds=1, iterations=1)
    written = [r.written for r in results["with"]]
    assert all(written), f"a summary landed in every round with compaction: {written}"
    ratios50 = [
        percentile(w.times, 0.5) / percentile(o.times, 0.5)
        for w, o in zip(results["with"], results["without"], strict=True)
    ]
    ratios99 = [
        percentile(w.times, 0.99) / percentile(o.times, 0.99)
        for w, o in zip(results["with"], results["without"], strict=True)
    ]
    w = [t for r in results["with"] for t in r.times]  # every turn of every round
    o = [t for r in results["without"] for t in r.times]
    first = [t for r in results["with"] for t, after in zip(r.times, r.after_write, strict=True) if after]
    beside = [t for r in results["with"] for t in r.overlapped]
    REPORTS.append(
        f"turn at 1,000 messages with a {model_seconds:g} s model compacting ({mode}), {len(w)} turns in "
        f"{rounds} rounds, "
        f"{sum(written)} summaries written ({min(written)}-{max(written)} a round): {_ms(w)}; without "
        f"compaction {_ms(o)}: {percentile(w, 0.5) / percentile(o, 0.5):.2f}x / "
        f"{percentile(w, 0.99) / percentile(o, 0.99):.2f}x; per round p50 {statistics.median(ratios50):.2f}x "
        f"({min(ratios50):.2f}-{max(ratios50):.2f}), p99 {statistics.median(ratios99):.2f}x "
        f"({min(ratios99):.2f}-{max(ratios99):.2f}); the {len(first)} turns right after a summary landed: "
        f"max {max(first, default=0) * 1e3:.3f} ms; {len(beside)} turns overlapped the guard, facts or "
        f"write: max {max(beside, default=0) * 1e3:.3f} ms; {len(calls)} model calls"
    )
    if mode == "asyncio":
        lw = [t for r in results["with"] for t in r.lateness]
        lo = [t for r in results["without"] for t in r.lateness]
        REPORTS.append(f"  loop lateness waking a turn: with compaction {_ms(lw)}, without {_ms(lo)}")


def kept(sent: str, markers: list[str]) -> int:
    return sum(marker in sent for marker in markers)


def uncompacted(seed: int, provider: str, budget: int) -> dict[str, tuple[int, int]]:
    """``{policy: (rules kept, facts kept)}`` with no summaries, same sessions."""
    session = compaction_session(seed, turns=300, provider=provider)
    out = {}
    for name, policy in (
        ("WeightedWindow", WeightedWindow(provider=provider)),
        ("PriorityAssembly (anchoring)", PriorityAssembly(anchoring=True, provider=provider)),
    ):
        selection = policy.select(session.messages, budget)
        sent = "\n".join(str(m.get("content")) for m in selection.messages) + str(selection.system or "")
        out[name] = (kept(sent, session.rules), kept(sent, session.facts))
    return out


def compacted_retention(seed: int, provider: str, budget: int) -> tuple[int, int, int, int, int]:
    """``(rules kept, rules, facts kept, facts, memory lines)`` for one session."""
    session = compaction_session(seed, turns=300, provider=provider)
    with tempfile.TemporaryDirectory() as where:
        log = MessageLog.open(Path(where) / "log", create=True)
        memory = MemoryFiles(Path(where) / "memory", create=True)
        compactor = Compactor(log, memory=memory)
        done = 0
        for end in _turns(session.messages):
            log.append_many(session.messages[done:end])
            done = end
            while compactor.compact().status == "written":
                pass
        view = log.context_view()
        summaries = [m["content"] for m in view if m["role"] == "system" and "Summary of" in m["content"]]
        rest = [m for m in view if not (m["role"] == "system" and "Summary of" in m["content"])]
        global_summary = next((s for s in summaries if s.startswith(SUMMARY_PREFIX)), None)
        segments = [s for s in summaries if not s.startswith(SUMMARY_PREFIX)]
        lines = [line for line in memory.read().splitlines() if line.strip()]
        selection = PriorityAssembly(provider=provider).select(
            rest, budget, global_summary=global_summary, segment_summaries=segments, memories=lines
        )
        sent = "\n".join(str(m.get("content")) for m in selection.messages) + str(selection.system or "")
        log.close()
    return (
        kept(sent, session.rules),
        len(session.rules),
        kept(sent, session.facts),
        len(session.facts),
        len(lines),
    )


def test_retention_with_compaction(benchmark):
    seeds = range(2) if benchmark.disabled else range(10)
    rows = {}
    plain: dict[str, dict[str, list[int]]] = {}

    def run():
        for provider in ("openai", "anthropic"):
            totals = [0, 0, 0, 0, 0]
            plain[provider] = {}
            for seed in seeds:
                for i, value in enumerate(compacted_retention(seed, provider, 4_000)):
                    totals[i] += value
                for name, (rules, facts) in uncompacted(seed, provider, 4_000).items():
                    counts = plain[provider].setdefault(name, [0, 0])
                    counts[0] += rules
                    counts[1] += facts
            rows[provider] = totals

    register(benchmark, "retention with compaction, 4K", "ours")
    benchmark.pedantic(run, rounds=1, iterations=1)
    for provider, (rules, n_rules, facts, n_facts, lines) in rows.items():
        REPORTS.append(
            f"retention with compaction, {provider}, 4K, {len(seeds)} sessions of 300 turns: rules "
            f"{rules}/{n_rules} ({rules / n_rules:.1%}), facts {facts}/{n_facts} ({facts / n_facts:.1%}), "
            f"{lines / len(seeds):.0f} memory lines a session"
        )
        for name, (plain_rules, plain_facts) in plain[provider].items():
            REPORTS.append(
                f"  no summaries, {name}: rules {plain_rules / n_rules:.1%}, "
                f"facts {plain_facts / n_facts:.1%}"
            )
        assert rules / n_rules >= 0.95
        assert facts / n_facts >= 0.90


@pytest.fixture(autouse=True)
def _no_leftover_threads():
    before = threading.active_count()
    yield
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
