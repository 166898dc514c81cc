"""Memory files: BoundedAppend throughput under contention (1, 2 and 8
processes appending one fact at a time to one root), and the cost of a
consolidation of a full MEMORY.md and 12 batches of 150 facts appended after
it (13 fragments: the first batch takes MEMORY.md's newest lines along, so that
MEMORY.md keeps room for the pointers) with the offline consolidator, from a
cold start (files read, merged, written and synced) and the merge alone.

The default test run appends 10 facts a process instead of 200, so the smoke
run stays quick."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import time

import pytest

from context_core import MemoryFiles
from context_core.memory import Fact, consolidate_items
from support import register

_serial = itertools.count()


def enabled(request) -> bool:
    session = getattr(request.config, "_benchmarksession", None)
    return session is not None and not session.disabled


def fact(tag: str) -> str:
    """A fact line of about 100 bytes, every one different."""
    noise = random.Random(tag).randbytes(24).hex()
    return f"- [fact] {tag}: the staging service answers on port 5433 ({noise})"


def appender(root: str, p: int, count: int, durability: str, go: int) -> None:
    os.read(go, 1)
    mem = MemoryFiles(root, durability=durability, lock_timeout=120)
    for i in range(count):
        mem.append([fact(f"p{p} n{i}")])


def contend(root: str, processes: int, count: int, durability: str) -> None:
    """``processes`` processes, started together, each appending ``count`` facts one by one."""
    go_read, go_write = os.pipe()
    pids = []
    for p in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                appender(root, p, count, durability, go_read)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    os.write(go_write, b"x" * processes)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    os.close(go_read)
    os.close(go_write)


@pytest.mark.parametrize(
    ("processes", "durability"), [(1, "never"), (2, "never"), (8, "never"), (1, "always"), (8, "always")]
)
def test_bounded_append_under_contention(benchmark, tmp_path, request, processes, durability):
    count = 200 if enabled(request) else 10
    register(
        benchmark,
        f"memory append, {processes} process(es) x {count} facts, durability {durability}",
        "ours",
    )
    roots = []

    def setup():
        root = str(tmp_path / f"root{next(_serial)}")
        roots.append(root)
        return (root, processes, count, durability), {}

    benchmark.pedantic(contend, setup=setup, rounds=3 if enabled(request) else 1, iterations=1)
    total = processes * count
    if benchmark.stats is not None:
        benchmark.extra_info["appends_per_s"] = round(total / benchmark.stats.stats.median)
    facts = MemoryFiles(roots[-1]).facts()
    assert len(facts) == total
    assert len({f.text for f in facts}) == total


@pytest.fixture(scope="module")
def twelve_fragments(tmp_path_factory):
    """A root with a full MEMORY.md (150 facts), then 12 batches of 150 facts
    (13 fragments, as MEMORY.md keeps its pointers within 150 lines), 1/10 of
    the facts a newer value of an older key, and 15 near duplicates."""
    root = str(tmp_path_factory.mktemp("memory") / "template")
    mem = MemoryFiles(root, durability="never")
    mem.append([fact(f"base {i}") for i in range(150)])
    for n in range(12):
        batch = []
        for i in range(150):
            if i % 10 == 0:
                batch.append(Fact(f"frag {n} key {i} value {time.time_ns()}", "decision", f"setting {i}"))
            else:
                batch.append(fact(f"frag {n} fact {i}"))
        mem.append(batch)
    # Near duplicates (other case, a full stop) of 15 base facts, written by hand
    # (append() would have skipped them).
    with open(os.path.join(root, mem.fragments()[-1]), "a") as handle:
        handle.writelines(fact(f"base {i}").replace("base", "BASE") + ".\n" for i in range(15))
    assert len(mem.fragments()) == 13
    assert len(mem.read().splitlines()) <= 150
    return root


@pytest.mark.parametrize("durability", ["always", "never"])
def test_consolidate_twelve_fragments(benchmark, tmp_path, twelve_fragments, durability):
    register(
        benchmark,
        f"memory consolidate, 150 + 12 x 150 facts (13 fragments), offline, durability {durability}",
        "ours",
    )
    results = []

    def setup():
        root = str(tmp_path / f"c{next(_serial)}")
        shutil.copytree(twelve_fragments, root)
        return (MemoryFiles(root, durability=durability),), {}

    def run(mem):
        results.append(mem.consolidate(force=True))

    benchmark.pedantic(run, setup=setup, rounds=5, iterations=1)
    result = results[-1]
    assert result.ran
    assert len(result.merged) == 13
    assert result.facts_before == 150 + 12 * 150 + 15
    assert result.facts_after == 150 + 12 * 135 + 15  # one value a key, near duplicates gone


def test_consolidate_items_merge_alone(benchmark, twelve_fragments):
    register(benchmark, "memory consolidate_items, 1,965 facts (the merge alone)", "ours")
    mem = MemoryFiles(twelve_fragments, durability="never")
    facts = mem.facts()
    out = benchmark(consolidate_items, facts)
    assert len(out) == 150 + 12 * 135 + 15
