"""The message log against its pure-Python twin (same API, same files):
appends of 200-byte messages (and per durability mode), opening a
1,000,000-message log, ``headers()``, 20 random reads, and a log-backed turn
(append one message, choose the weighted window, return the kept dicts) at
1,000 and 1,000,000 messages, with its peak memory.

The default test run builds a 20,000-message log instead of 1,000,000, so
the smoke run stays quick; ``--benchmark-enable`` builds the full one."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

import context_core
from context_core import MessageLog
from context_core.reference import select as reference_select
from context_core.reference.log import MessageLog as TwinLog
from inputs import session
from support import REPORTS, register

IMPLS = {"ours": MessageLog, "twin": TwinLog}
BUDGET = 8_000
PER_ROUND = 500
# Ordinary chat words: no constraint keywords (those are planted one message in 97).
SENTENCE = (
    "the agent keeps the retry logic idempotent while the payment service handles callbacks, "
    "logs each failure and drops no request; review after 支付回调服务 已经上线"
)
WORDS = SENTENCE.split()
_serial = itertools.count()


def chat_message(n: int) -> dict:
    """About 200 bytes of JSON, every one different (nothing is answered by a cache)."""
    rng = random.Random(n)
    text = f"{n}: " + " ".join(rng.choice(WORDS) for _ in range(40))
    text = text[:150]
    return {"role": "user" if n % 2 else "assistant", "content": text}


def fresh_messages(count: int) -> list[dict]:
    start = next(_serial) * 1_000_000_000
    return [chat_message(start + i) for i in range(count)]


def big_size(request) -> int:
    session = getattr(request.config, "_benchmarksession", None)
    return 20_000 if session is None or session.disabled else 1_000_000


@pytest.fixture(scope="session")
def big_log(tmp_path_factory, request):
    """A log of 1,000,000 chat messages (20,000 in the smoke run), written once."""
    size = big_size(request)
    path = tmp_path_factory.mktemp("big") / "log"
    with MessageLog.open(path, create=True, durability="never") as log:
        log.append({"role": "system", "content": "You are a careful agent. Never skip the tests."})
        for start in range(1, size, 50_000):
            batch = [chat_message(i) for i in range(start, min(size, start + 50_000))]
            for i in range(0, len(batch), 97):
                batch[i] = {"role": "user", "content": f"Constraint {start + i}: you must log every retry."}
            log.append_many(batch)
    return path, size


# -- appends ---------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["ours", "twin"])
@pytest.mark.parametrize("how", ["append", "append_many"])
def test_append(benchmark, tmp_path, impl, how):
    register(benchmark, f"log {how}, {PER_ROUND} messages of ~200 bytes, durability never", impl, 20.0)
    log = IMPLS[impl].open(tmp_path / "log", create=True, durability="never")

    def write(messages):
        if how == "append":
            for message in messages:
                log.append(message)
        else:
            log.append_many(messages)

    rounds = 20 if impl == "ours" else 3
    benchmark.pedantic(write, setup=lambda: ((fresh_messages(PER_ROUND),), {}), rounds=rounds)
    assert len(log) in (PER_ROUND, rounds * PER_ROUND)  # one round in the smoke run
    if benchmark.stats is not None:
        benchmark.extra_info["messages_per_s"] = round(PER_ROUND / benchmark.stats.stats.median)
    log.close()


@pytest.mark.parametrize("durability", ["always", "batch", "never"])
def test_append_per_durability(benchmark, tmp_path, durability):
    """fsync costs ~150 µs here: `batch` groups commits in the background."""
    count = 100
    register(benchmark, f"log append, {count} messages, durability {durability}", "ours")
    with MessageLog.open(tmp_path / "log", create=True, durability=durability) as log:

        def write(messages):
            for message in messages:
                log.append(message)

        benchmark.pedantic(write, setup=lambda: ((fresh_messages(count),), {}), rounds=10)
        if benchmark.stats is not None:
            benchmark.extra_info["messages_per_s"] = round(count / benchmark.stats.stats.median)


# -- a big log ----------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["ours", "twin"])
def test_open(benchmark, big_log, impl):
    path, size = big_log
    register(benchmark, f"log open, {size:,} messages", impl)

    def open_and_count():
        with IMPLS[impl].open(path, readonly=True) as log:
            return len(log)

    count = benchmark.pedantic(open_and_count, rounds=10 if impl == "ours" else 1)
    assert count >= size


@pytest.mark.parametrize("impl", ["ours", "twin"])
def test_headers(benchmark, big_log, impl):
    path, size = big_log
    register(benchmark, f"log headers(), {size:,} messages", impl)
    with IMPLS[impl].open(path, readonly=True) as log:
        log.headers()
        rows = benchmark.pedantic(log.headers, rounds=50 if impl == "ours" else 2)
        assert len(rows) >= size
        assert int(rows["tokens"][:100].sum()) > 0


def test_headers_copied(benchmark, big_log):
    """What headers() would cost if it copied instead of viewing the map: the
    price of an array that no truncation of the file can fault."""
    path, size = big_log
    register(benchmark, f"log headers(), {size:,} messages", "copy (cannot fault)")
    with MessageLog.open(path, readonly=True) as log:
        rows = benchmark.pedantic(lambda: log.headers().copy(), rounds=10)
        assert len(rows) >= size


def test_index_read_by_pread(benchmark, big_log):
    """What a sweep that cannot fault would add to each turn: the committed
    index records copied out with pread (into a buffer kept between turns)
    instead of read in place through the map."""
    path, size = big_log
    register(benchmark, f"log turn, {size:,} messages", "index copied by pread (cannot fault)")
    with MessageLog.open(path, readonly=True) as log:
        length = 64 + 64 * len(log)
    buffer = bytearray(length)
    fd = os.open(path / "index", os.O_RDONLY)
    try:
        got = benchmark.pedantic(lambda: os.preadv(fd, [buffer], 0), rounds=20)
    finally:
        os.close(fd)
    assert got == length


@pytest.mark.parametrize("impl", ["ours", "twin"])
def test_read_random(benchmark, big_log, impl):
    path, size = big_log
    register(benchmark, f"log read 20 random of {size:,}", impl)
    rng = random.Random(5)
    with IMPLS[impl].open(path, readonly=True) as log:
        got = benchmark.pedantic(
            log.read,
            setup=lambda: ((rng.sample(range(1, size), 20),), {}),
            rounds=200 if impl == "ours" else 20,
        )
        assert all(isinstance(m, dict) and m["content"] for m in got)


# -- a turn --------------------------------------------------------------------------------


def test_turn_1k(benchmark, tmp_path):
    """Append the user's message, choose the window, hand back the kept dicts."""
    register(benchmark, "log turn, 1,000 messages", "ours")
    window = context_core.WeightedWindow()
    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(session(1_000, "openai"))
        window.select(log, BUDGET)
        turns = iter(fresh_messages(100_000))

        def turn():
            log.append(next(turns))
            return window.select(log, BUDGET).messages

        # A fixed number of rounds: each appends, and the log must stay near 1,000.
        kept = benchmark.pedantic(turn, rounds=300)
        assert kept
        if benchmark.stats is not None:
            benchmark.extra_info["median_us"] = round(benchmark.stats.stats.median * 1e6, 1)


def test_turn_1k_twin(benchmark, tmp_path):
    """The same turn in pure Python: the twin log and the reference window."""
    register(benchmark, "log turn, 1,000 messages", "twin")
    window = reference_select.WeightedWindow()
    with TwinLog.open(tmp_path / "log", create=True, durability="never") as log:
        log.append_many(session(1_000, "openai"))
        turns = iter(fresh_messages(100))

        def turn():
            log.append(next(turns))
            return window.select(log.context_view(), BUDGET).messages

        assert benchmark.pedantic(turn, rounds=3)


def test_turn_big(benchmark, big_log):
    path, size = big_log
    register(benchmark, f"log turn, {size:,} messages", "ours")
    window = context_core.WeightedWindow()
    with MessageLog.open(path, durability="never") as log:
        window.select(log, BUDGET)
        turns = iter(fresh_messages(1_000))

        def turn():
            log.append(next(turns))
            return window.select(log, BUDGET)

        selection = benchmark.pedantic(turn, rounds=20)
        assert selection.breakdown.total <= BUDGET
        if benchmark.stats is not None:
            benchmark.extra_info["median_ms"] = round(benchmark.stats.stats.median * 1e3, 2)


def test_turn_big_alternating(benchmark, big_log):
    """The big log's turn with the policy changing every turn on one handle
    (the priority builder, the weighted window, shape_history in turn): each
    weighing's units are kept, so a change of policy groups only what came
    since that policy last ran."""
    path, size = big_log
    register(benchmark, f"log turn, {size:,} messages, policies in turn", "ours")
    chosen = [context_core.PriorityAssembly(), context_core.WeightedWindow(), context_core.ShapeHistory()]
    with MessageLog.open(path, durability="never") as log:
        for policy in chosen:
            policy.select(log, BUDGET)
        turns = iter(fresh_messages(1_000))
        order = itertools.cycle(chosen)

        def turn():
            log.append(next(turns))
            return next(order).select(log, BUDGET)

        selection = benchmark.pedantic(turn, rounds=30)
        assert selection.breakdown.total <= BUDGET
        if benchmark.stats is not None:
            benchmark.extra_info["median_ms"] = round(benchmark.stats.stats.median * 1e3, 2)


PEAK_MEMORY = textwrap.dedent(
    """
    import json, sys
    import context_core
    from context_core import MessageLog, WeightedWindow

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) / 1024

    context_core.Tokenizer().count("load the vocabulary")
    window = WeightedWindow()
    base = status("VmRSS:")
    with MessageLog.open(sys.argv[1], durability="never") as log:
        for n in range(3):
            log.append({"role": "user", "content": f"turn {n}: what next?"})
            window.select(log, 8000)
        print(json.dumps({"base_mb": base, "peak_mb": status("VmHWM:"), "nodes": len(log)}))
    """
)


def test_turn_big_peak_memory(big_log):
    """Peak resident memory of turns on the big log, above the interpreter's
    and the tokenizer's (measured in a fresh process)."""
    path, size = big_log
    out = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY, os.fspath(path)], capture_output=True, text=True, check=True
    )
    memory = json.loads(out.stdout)
    above = memory["peak_mb"] - memory["base_mb"]
    REPORTS.append(
        f"log turn, {size:,} messages: peak RSS {memory['peak_mb']:.0f} MB, "
        f"{above:.0f} MB above the interpreter and tokenizer ({memory['base_mb']:.0f} MB)"
    )
    assert memory["nodes"] >= size
