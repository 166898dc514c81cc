"""Long agent sessions replayed turn by turn, as a server runs them (see
``tests/agent_sessions.py``): at each point where the server asks the model,
the whole turn is repaired, chosen and logged (sanitize + select +
breakdown), for every policy, both providers and budgets from 2K to the whole
window. Per turn, two times are taken: the first call, which reads the new
messages (cold: their counts, tags and cut tool results are first computed),
and the same turn again (warm: the figure the targets are set on, "after
each message's first sight"). Reported as p50 / p99 over the turns.

Tool results are capped at ``min(2000, budget // 4)`` tokens: at a 2K
budget a 2,000-token result could never sit beside its turn. A turn whose
turn in progress alone is over the budget raises ``OverBudgetError``; its
time is counted too, and the number of such turns is reported.

Also here: the same replay with ``tool_result_cap=None``, a budget that
holds everything against an 8K one, the pure-Python twin on sampled turns,
and ``truncate`` of a 50 KB text against ``count(text, limit=...)``.
"""

from __future__ import annotations

import statistics
import time

import pytest

import context_core
from agent_sessions import generate, turn_in_progress
from context_core import OverBudgetError, Tokenizer, sanitize
from context_core.reference import select as reference
from context_core.reference.sanitize import sanitize as reference_sanitize
from inputs import chinese, code, english
from support import REPORTS, register

WHOLE = 10**9
BUDGETS = [2_000, 8_000, 32_000, 128_000, WHOLE]
POLICIES = ["shape_history", "WeightedWindow", "PriorityAssembly"]
#: Rounds of the ratio replays (see ``test_cap_and_budget_ratios``).
RATIO_ROUNDS = 5
TOK = Tokenizer()


def cap_for(budget: int) -> int:
    return min(2000, budget // 4)


def turn_of(module, fix, policy: str, provider: str, budget: int, cap: int | None):
    """The server's turn: repair, choose, log. One policy object per
    session, as a server keeps it."""
    if policy == "shape_history":

        def choose(history, now):
            return module.shape_history(history, budget, provider=provider, tool_result_cap=cap)
    elif policy == "WeightedWindow":
        window = module.WeightedWindow(provider=provider, tool_result_cap=cap)

        def choose(history, now):
            return window.select(history, budget, now=now)
    else:
        builder = module.PriorityAssembly(provider=provider, tool_result_cap=cap)

        def choose(history, now):
            return builder.select(history, budget)

    def turn(history, now):
        repaired = fix(history, provider)
        try:
            selection = choose(repaired.messages, now)
        except OverBudgetError:
            return None
        selection.breakdown.log_line()
        return repaired.messages, selection

    return turn


def replay(session, turn, points) -> tuple[list[float], list[float], int]:
    """Cold and warm seconds per turn at ``points``, and the turns over budget."""
    cold, warm, over = [], [], 0
    for end in points:
        history = session.messages[:end]
        stamps = [m["timestamp"] for m in history[-3:] if "timestamp" in m]
        now = stamps[-1] + 5 if stamps else None
        started = time.perf_counter()
        result = turn(history, now)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        again = turn(history, now)
        warm.append(time.perf_counter() - started)
        if result is None:
            over += 1
            continue
        repaired, selection = again
        start = turn_in_progress(repaired)
        if start is not None:
            assert set(range(start, len(repaired))) <= set(selection.kept), "the turn in progress"
    return cold, warm, over


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.5) * 1e3:.3f} ms, p99 {percentile(values, 0.99) * 1e3:.3f} ms"


SESSIONS: dict[tuple[int, str], object] = {}


def session_of(size: int, provider: str):
    key = (size, provider)
    if key not in SESSIONS:
        SESSIONS[key] = generate(size, provider, seed=21 if size < 10_000 else 22)
    return SESSIONS[key]


def points_of(session, benchmark, every: int = 1) -> list[int]:
    """Every call point (every ``every``-th); a few in a smoke run."""
    points = session.calls[::every]
    return points if not benchmark.disabled else points[-3:]


def measure(benchmark, group: str, replayed, turns: int, label: str) -> None:
    """Run ``replayed()`` (one replay: cold times, warm times, turns over
    budget) once under the benchmark; record and report the percentiles."""
    results = {}

    def run():
        results["times"] = replayed()

    register(benchmark, group, "ours")
    benchmark.pedantic(run, rounds=1, iterations=1)
    cold, warm, over = results["times"]
    benchmark.extra_info.update(
        warm_p50_ms=round(percentile(warm, 0.5) * 1e3, 3),
        warm_p99_ms=round(percentile(warm, 0.99) * 1e3, 3),
        cold_p50_ms=round(percentile(cold, 0.5) * 1e3, 3),
        cold_p99_ms=round(percentile(cold, 0.99) * 1e3, 3),
        turns=turns,
        over_budget=over,
    )
    REPORTS.append(f"{label}: warm {row(warm)}; cold {row(cold)}; {turns} turns, {over} over budget")


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: "whole" if b == WHOLE else f"{b // 1000}K")
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", POLICIES)
def test_replayed_turn_1k(benchmark, policy, provider, budget):
    session = session_of(1_000, provider)
    turn = turn_of(context_core, sanitize, policy, provider, budget, cap_for(budget))
    size = "whole" if budget == WHOLE else f"{budget // 1000}K"
    points = points_of(session, benchmark)
    measure(
        benchmark,
        f"replay 1,000 messages: {policy}, {provider}, {size}",
        lambda: replay(session, turn, points),
        len(points),
        f"replay 1k {policy:<14} {provider:<9} {size:>5}",
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", POLICIES)
def test_replayed_turn_10k(benchmark, policy, provider):
    session = session_of(10_000, provider)
    turn = turn_of(context_core, sanitize, policy, provider, 128_000, cap_for(128_000))
    points = points_of(session, benchmark, every=10)
    measure(
        benchmark,
        f"replay 10,000 messages: {policy}, {provider}, 128K",
        lambda: replay(session, turn, points),
        len(points),
        f"replay 10k {policy:<14} {provider:<9}  128K",
    )


def log_policy(policy: str, provider: str, cap: int | None):
    if policy == "shape_history":
        return context_core.ShapeHistory(provider=provider, tool_result_cap=cap)
    if policy == "WeightedWindow":
        return context_core.WeightedWindow(provider=provider, tool_result_cap=cap)
    return context_core.PriorityAssembly(provider=provider, tool_result_cap=cap)


def replay_log(log, session, chooser, budget: int, points) -> tuple[list[float], list[float], int]:
    """The log-backed turn: the messages since the last call appended
    (untimed, as the server records them), then the window chosen from the
    log (repair included), cold and again warm."""
    cold, warm, over, written = [], [], 0, 0
    for end in points:
        log.append_many(session.messages[written:end])
        written = end
        stamps = [m["timestamp"] for m in session.messages[max(0, end - 3) : end] if "timestamp" in m]
        now = stamps[-1] + 5 if stamps else None
        for times in (cold, warm):
            started = time.perf_counter()
            try:
                selection = chooser.select(log, budget, now=now)
            except OverBudgetError:
                selection = None
            times.append(time.perf_counter() - started)
        if selection is None:
            over += 1
            continue
        selection.breakdown.log_line()
        start = turn_in_progress(session.messages[:end])
        if start is not None:
            assert set(range(start, end)) <= set(selection.kept), "the turn in progress"
    return cold, warm, over


@pytest.mark.parametrize("budget", [8_000, 128_000], ids=["8K", "128K"])
@pytest.mark.parametrize("size", [1_000, 10_000], ids=["1k", "10k"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", POLICIES)
def test_replayed_log_turn(benchmark, tmp_path, policy, provider, size, budget):
    """The same sessions appended to a MessageLog turn by turn, each turn
    chosen from the log's headers (only the kept nodes decoded)."""
    session = session_of(size, provider)
    chooser = log_policy(policy, provider, cap_for(budget))
    every = 1 if size < 10_000 else 10
    points = session.calls[::every] if not benchmark.disabled else session.calls[:3]

    def replayed():
        with context_core.MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
            return replay_log(log, session, chooser, budget, points)

    measure(
        benchmark,
        f"replay on a log, {size:,} messages: {policy}, {provider}, {budget // 1000}K",
        replayed,
        len(points),
        f"replay log {size // 1000}k {policy:<14} {provider:<9} {budget // 1000:>4}K",
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("policy", POLICIES)
def test_cap_and_budget_ratios(benchmark, policy, provider):
    """The turn with the default cap against ``tool_result_cap=None`` (at the
    whole window, where nothing else differs), and a budget that holds
    everything against an 8K one: ratios of the medians of warm turns.

    Each variant replays the session in turn (a server runs one policy on
    a history, so the variants are not mixed within a replay), and the three
    replays are run ``RATIO_ROUNDS`` times in rotating order: a burst of
    noise on this shared machine then lands on one round, and the median
    round's ratio is reported with the range of all rounds."""
    session = session_of(1_000, provider)
    points = points_of(session, benchmark, every=3)
    variants = (("capped", WHOLE, 2000), ("uncapped", WHOLE, None), ("8K", 8_000, 2000))
    rounds: list[dict[str, float]] = []

    def run():
        for r in range(RATIO_ROUNDS if not benchmark.disabled else 1):
            medians = {}
            for name, budget, cap in variants[r % 3 :] + variants[: r % 3]:
                turn = turn_of(context_core, sanitize, policy, provider, budget, cap)
                medians[name] = statistics.median(replay(session, turn, points)[1])
            rounds.append(medians)

    register(benchmark, f"replay ratios: {policy}, {provider}", "ours")
    benchmark.pedantic(run, rounds=1, iterations=1)
    cap = sorted(m["capped"] / m["uncapped"] for m in rounds)
    budget = sorted(m["capped"] / m["8K"] for m in rounds)
    cap_ratio, budget_ratio = statistics.median(cap), statistics.median(budget)
    benchmark.extra_info.update(
        cap_ratio=round(cap_ratio, 2),
        cap_ratio_range=[round(cap[0], 2), round(cap[-1], 2)],
        whole_over_8k=round(budget_ratio, 2),
        whole_over_8k_range=[round(budget[0], 2), round(budget[-1], 2)],
    )
    REPORTS.append(
        f"replay ratios {policy:<14} {provider:<9}: capped/uncapped {cap_ratio:.2f}x"
        f" ({cap[0]:.2f}-{cap[-1]:.2f}), whole window/8K {budget_ratio:.2f}x"
        f" ({budget[0]:.2f}-{budget[-1]:.2f}); medians of warm turns, {len(rounds)} rounds"
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("impl", ["ours", "reference"])
def test_replayed_turn_against_the_twin(benchmark, impl, provider):
    """WeightedWindow at 32K on every 25th turn: ours against the pure-Python twin."""
    session = session_of(1_000, provider)
    module, fix = (context_core, sanitize) if impl == "ours" else (reference, reference_sanitize)
    turn = turn_of(module, fix, "WeightedWindow", provider, 32_000, 2000)
    points = session.calls[::25] if not benchmark.disabled else session.calls[-1:]
    for end in points:  # first sight, on both sides
        turn(session.messages[:end], None)

    def run():
        for end in points:
            turn(session.messages[:end], None)

    register(benchmark, f"replay, WeightedWindow 32K, {provider}, every 25th turn", impl)
    benchmark.pedantic(run, rounds=3 if impl == "ours" else 1, iterations=1)


def fifty_kb() -> str:
    return (english(20_000) + "\n" + chinese(6_000, seed=9) + "\n" + code(20_000))[:50_000]


@pytest.mark.parametrize("impl", ["truncate", "count limit"])
def test_truncate_against_count_with_a_limit(benchmark, impl):
    """``truncate(text, 2000)`` of a 50 KB text whose count is cached, against
    ``count(text, limit=2000)``: the cut costs about the tokens it keeps."""
    text = fifty_kb()
    TOK.count(text)  # the whole text's count, cached as a turn before left it
    register(benchmark, "50 KB text to 2,000 tokens", "ours" if impl == "truncate" else "count(limit=2000)")
    if impl == "truncate":
        cut = benchmark(TOK.truncate, text, 2000, "…[truncated {dropped} tokens]")
        assert TOK.count(cut) <= 2000
    else:
        assert benchmark(TOK.count, text, limit=2000) == 2001
