"""Memory files under contention and under SIGKILL: many processes appending
at once, consolidations (offline and with a slow model) racing appends, and
processes killed mid-append and mid-consolidation (offline and with a model),
again and again. Each time: every acknowledged fact is there exactly once,
every batch whole or absent, every line well formed, no temporary file read as
memory, MEMORY.md within max_lines (pointers included), and for a key whose
values come back (0, 1, 0, 1...) the newest value written is the newest one
read."""

from __future__ import annotations

import os
import random
import re
import signal
import time
import traceback
from collections import Counter
from pathlib import Path

from context_core import MemoryFiles
from context_core.memory import Fact, Pointer, RawLine
from context_core.memory.facts import parse_line

PROCESSES, APPENDS = 8, 500
KILLS = 30


def fact_text(tag: str, size: int) -> str:
    return f"{tag} " + random.Random(tag).randbytes(size // 2).hex()[:size]


def check_root(root: Path, max_lines: int) -> list[Fact]:
    """Read the files directly (no recovery): the invariants that hold at any
    moment between operations. Returns the facts, oldest first."""
    names = set(os.listdir(root))
    assert not [n for n in names if n.startswith((".tmp-", ".merged-", ".new-"))], names
    memory = (root / "MEMORY.md").read_bytes() if "MEMORY.md" in names else b""
    assert memory == b"" or memory.endswith(b"\n"), "a torn last line in MEMORY.md"
    items = [parse_line(line) for line in memory.decode().splitlines()]
    assert not [i for i in items if isinstance(i, RawLine)], "a malformed line in MEMORY.md"
    pointers = [i.name for i in items if isinstance(i, Pointer)]
    fragments = sorted(n for n in names if n.startswith("auto-"))
    assert sorted(pointers) == fragments, "every fragment has exactly one pointer, and no pointer dangles"
    assert len(items) <= max_lines, (
        f"MEMORY.md holds {len(items)} lines (pointers included), over {max_lines}"
    )
    facts = [i for i in items if isinstance(i, Fact)]
    sizes = []
    for name in pointers:
        data = (root / name).read_bytes()
        assert data.endswith(b"\n"), f"a torn last line in {name}"
        lines = [parse_line(line) for line in data.decode().splitlines()]
        assert all(isinstance(i, Fact) for i in lines), f"a malformed line in {name}"
        facts.extend(lines)  # type: ignore[arg-type]
        sizes.append(len(lines))
    if max(sizes, default=0) > max_lines:  # only once MEMORY.md has no room for another pointer
        assert len(pointers) >= max_lines - 1, f"a fragment of {max(sizes)} lines, over {max_lines}"
    return facts


def fork(work, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work(*args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait_all(pids: list[int]) -> None:
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a child process failed (its traceback is above)"


# -- contention -------------------------------------------------------------------------


def batches(p: int, count: int, keyed: bool) -> list[list[Fact | str]]:
    """Process ``p``'s batches: ``count`` unique facts in all; with ``keyed``,
    each batch also sets the key ``p<p> setting`` to 0, 1, 0, 1... (a value that
    comes back must be written, and the newest must win)."""
    rng = random.Random(p)
    out: list[list[Fact | str]] = []
    n = 0
    while n < count:
        size = min(rng.choice((1, 1, 1, 2, 3)), count - n)
        batch: list[Fact | str] = [fact_text(f"p{p} n{n + i}", rng.randrange(10, 600)) for i in range(size)]
        if keyed:
            batch.append(Fact(f"p{p} setting is {len(out) % 2}", "fact", f"p{p} setting"))
        out.append(batch)
        n += size
    return out


def appender(root: Path, p: int, count: int, go: int, keyed: bool = False, max_lines: int = 150) -> None:
    os.read(go, 1)  # all start at once
    mem = MemoryFiles(root, durability="never", lock_timeout=60, max_lines=max_lines)
    for batch in batches(p, count, keyed):
        assert len(mem.append(batch).appended) == len(batch)


def test_many_processes_appending_at_once_lose_and_tear_nothing(tmp_path):
    go_read, go_write = os.pipe()
    pids = [fork(appender, tmp_path, p, APPENDS, go_read) for p in range(PROCESSES)]
    os.write(go_write, b"x" * PROCESSES)
    wait_all(pids)
    facts = check_root(tmp_path, 150)
    counts = Counter(f.text.split(" ", 2)[0] + " " + f.text.split(" ", 2)[1] for f in facts)
    expected = {f"p{p} n{n}" for p in range(PROCESSES) for n in range(APPENDS)}
    assert set(counts) == expected
    assert max(counts.values()) == 1
    for fact in facts:  # none torn: each is the text its writer wrote
        p, n, rest = fact.text.split(" ", 2)
        assert fact.text == fact_text(f"{p} {n}", len(rest))
    # Each process's facts in the order it wrote them.
    for p in range(PROCESSES):
        mine = [int(f.text.split(" ")[1][1:]) for f in facts if f.text.startswith(f"p{p} ")]
        assert mine == sorted(mine)


def echo_model(messages) -> str:
    """A slow model that returns the memory it was given as it is."""
    time.sleep(0.02)
    body = messages[1]["content"].removeprefix("<memory>\n").removesuffix("</memory>")
    return body.strip() or "NONE"


def consolidator(root: Path, rounds: int, go: int) -> None:
    os.read(go, 1)
    mem = MemoryFiles(root, max_lines=20, durability="never", lock_timeout=60)
    for r in range(rounds):
        result = mem.consolidate(echo_model if r % 3 else None, force=True)
        assert result.ran or result.reason.startswith("superseded"), result


def newest_values(facts: list[Fact]) -> dict[str, str]:
    """Each key's newest value: its last fact, oldest first."""
    return {f.key: f.text for f in facts if f.key is not None}


def test_consolidation_racing_appends_loses_nothing(tmp_path):
    MemoryFiles(tmp_path, max_lines=20).append([f"seed {i}" for i in range(30)])
    go_read, go_write = os.pipe()
    pids = [fork(appender, tmp_path, p, 150, go_read, True, 20) for p in range(3)]
    pids += [fork(consolidator, tmp_path, 12, go_read) for _ in range(2)]
    os.write(go_write, b"x" * len(pids))
    wait_all(pids)
    facts = check_root(tmp_path, 20)
    tags = Counter(" ".join(f.text.split(" ")[:2]) for f in facts if f.key is None)
    expected = {f"p{p} n{n}" for p in range(3) for n in range(150)} | {f"seed {i}" for i in range(30)}
    assert set(tags) == expected
    assert max(tags.values()) == 1
    last = {f"p{p} setting": f"p{p} setting is {(len(batches(p, 150, True)) - 1) % 2}" for p in range(3)}
    assert newest_values(facts) == last  # no stale consolidation wrote over a newer value
    MemoryFiles(tmp_path, max_lines=20).consolidate(force=True)
    keyed = [f for f in check_root(tmp_path, 20) if f.key is not None]
    assert sorted(f.text for f in keyed) == sorted(last.values())


# -- SIGKILL ----------------------------------------------------------------------------


def fast_echo_model(messages) -> str:
    """A model that hands back the memory it was given, at once."""
    return messages[1]["content"].removeprefix("<memory>\n").removesuffix("</memory>").strip() or "NONE"


def killable_writer(root: Path, seed: int, acks: int, consolidate: bool) -> None:
    """Append batches (some of hundreds of KB, so a write spans many pages),
    each with a new value of the key ``s<seed> latest``, and consolidate
    between them if asked (every other time with a model: odd seeds); report
    each acknowledged batch."""
    rng = random.Random(seed)
    mem = MemoryFiles(root, max_lines=60, durability="always" if seed % 2 else "never", lock_timeout=60)
    for batch in range(10**6):
        big = rng.random() < 0.3 and not consolidate
        size = rng.randrange(40, 120) if big else rng.randrange(1, 6)
        facts: list[Fact | str] = [
            fact_text(f"s{seed}b{batch} f{i}/{size}", rng.randrange(20, 900)) for i in range(size)
        ]
        facts.append(Fact(f"s{seed}b{batch} latest", "fact", f"s{seed} latest"))
        mem.append(facts)
        os.write(acks, f"s{seed}b{batch}\n".encode())
        if consolidate:
            model = fast_echo_model if seed % 2 and batch % 2 else None
            result = mem.consolidate(model, force=True)
            assert result.ran, result
            os.write(acks, b"c\n")


def run_and_kill(root: Path, seed: int, consolidate: bool, rng: random.Random) -> tuple[set[str], bool]:
    """Start a writer, SIGKILL it a little after its first acknowledgement;
    the batches it acknowledged, and whether it left work half done."""
    read_fd, write_fd = os.pipe()
    pid = fork(killable_writer, root, seed, write_fd, consolidate)
    os.close(write_fd)
    first = os.read(read_fd, 64)  # started
    time.sleep(rng.uniform(0.0, 0.03))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as pipe:
        data = first + pipe.read()
    acked = {line for line in data.decode().split("\n")[:-1] if line != "c"}
    pending = root / ".memory.pending"
    half_done = (pending.exists() and pending.stat().st_size > 0) or any(
        n.startswith((".tmp-", ".merged-", ".new-")) for n in os.listdir(root)
    )
    return acked, half_done


def check_after_kills(root: Path, acked: set[str], max_lines: int) -> None:
    MemoryFiles(root).facts()  # recovery runs at the lock
    facts = check_root(root, max_lines)
    batches: Counter[str] = Counter()
    sizes = {}
    newest = newest_values(facts)
    for fact in facts:
        if fact.key is not None:
            continue
        match = re.fullmatch(r"(s\d+b\d+) f(\d+)/(\d+) .*", fact.text)
        assert match, fact.text
        assert fact.text == fact_text(f"{match[1]} f{match[2]}/{match[3]}", len(fact.text.split(" ", 2)[2]))
        batches[match[1]] += 1
        sizes[match[1]] = int(match[3])
    assert not acked - set(batches), "an acknowledged batch was lost"
    for batch, count in batches.items():
        assert count == sizes[batch], f"batch {batch}: {count} of its {sizes[batch]} facts (torn or doubled)"
    last: dict[str, int] = {}
    for batch in batches:  # each writer's last batch present holds its key's newest value
        seed, number = re.fullmatch(r"s(\d+)b(\d+)", batch).groups()  # type: ignore[union-attr]
        last[seed] = max(last.get(seed, -1), int(number))
    assert newest == {f"s{seed} latest": f"s{seed}b{n} latest" for seed, n in last.items()}


def test_writers_killed_mid_append(tmp_path):
    rng = random.Random(1)
    acked: set[str] = set()
    half_done = 0
    for kill in range(KILLS):
        got, left = run_and_kill(tmp_path, kill, False, rng)
        acked |= got
        half_done += left
        check_after_kills(tmp_path, acked, 60)
    assert len(acked) > KILLS, "the writers were killed while appending, not before"
    assert half_done > 0, "no kill landed mid-append"


def test_processes_killed_mid_consolidation(tmp_path):
    seed_mem = MemoryFiles(tmp_path, max_lines=60, durability="never")
    for b in range(40):  # a memory worth consolidating: about 15 fragments
        seed_mem.append(
            [fact_text(f"s999b{b} f{i}/40", 200) for i in range(40)]
            + [Fact(f"s999b{b} latest", "fact", "s999 latest")]
        )
    acked = {f"s999b{b}" for b in range(40)}
    rng = random.Random(2)
    half_done = 0
    for kill in range(KILLS):
        got, left = run_and_kill(tmp_path, 1000 + kill, True, rng)
        acked |= got
        half_done += left
        check_after_kills(tmp_path, acked, 60)
    assert half_done > 0, "no kill landed mid-consolidation"
