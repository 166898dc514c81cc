"""MemoryFiles: bounded append, reading, persist_learnings and consolidate
(with no model and with a plain callable as the model), the async forms,
limits, safety (names, symlinks, modes, roots) and recovery from what a
killed process leaves."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import random
import stat
import threading
import time
import types

import filelock
import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import (
    InvalidInputError,
    InvalidTypeError,
    MemoryFiles,
    MemoryFormatError,
    MemoryLimitError,
    MemoryLockError,
    MemoryPathError,
    MemoryStorageError,
)
from context_core.memory import Fact, parse_reply
from context_core.memory import files as memory_files
from context_core.memory import store as memory_store
from context_core.memory.facts import parse_line
from context_core.memory.layout import plan, reserve


def files_in(root) -> list[str]:
    return sorted(os.listdir(root))


def fragments_on_disk(root) -> list[str]:
    return [n for n in files_in(root) if n.startswith("auto-")]


def snapshot(root) -> dict[str, bytes]:
    out = {}
    for name in files_in(root):
        with open(os.path.join(root, name), "rb") as handle:
            out[name] = handle.read()
    return out


@pytest.fixture
def mem(tmp_path):
    return MemoryFiles(tmp_path / "mem", max_lines=5, durability="never")


# -- bounded append ---------------------------------------------------------------------


def test_append_then_read(mem):
    result = mem.append(["- [decision: db] Use Postgres 16", "a fact about /etc/app", Fact("x", "lesson")])
    assert result.file == "MEMORY.md"
    assert [f.line() for f in result.appended] == [
        "- [decision: db] Use Postgres 16",
        "- [fact] a fact about /etc/app",
        "- [lesson] x",
    ]
    assert mem.read() == "- [decision: db] Use Postgres 16\n- [fact] a fact about /etc/app\n- [lesson] x\n"
    assert mem.facts() == list(result.appended)
    assert mem.fragments() == []


def test_facts_already_present_are_not_appended_again(mem):
    mem.append(["Use Postgres 16", "Never push"])
    result = mem.append(["use postgres 16.", "NEVER push", "new one", "new one!"])
    assert [f.text for f in result.appended] == ["new one"]
    assert [f.text for f in result.duplicates] == ["use postgres 16.", "NEVER push", "new one!"]
    assert mem.append(["new one"]).appended == ()
    assert mem.append([]).file is None
    assert len(mem.read().splitlines()) == 3


@pytest.mark.parametrize("max_lines", [150, 2])  # all in MEMORY.md, or spread over fragments
def test_a_keys_value_that_comes_back_is_appended_and_wins(tmp_path, max_lines):
    mem = MemoryFiles(tmp_path, max_lines=max_lines, durability="never")
    assert mem.append(["- [fact: db port] 5433", "keyless"]).appended
    assert mem.append(["- [fact: db port] 5434"]).appended
    back = mem.append(["- [fact: DB port] 5433.", "Keyless."])
    assert back.appended == (Fact("5433.", "fact", "DB port"),)  # the newest value is 5434: not a duplicate
    assert back.duplicates == (Fact("Keyless."),)  # a keyless fact: a duplicate anywhere
    assert mem.append(["- [decision: db port] 5433"]).duplicates  # now it is the newest value
    assert [f.text for f in mem.facts() if f.key] == ["5433", "5434", "5433."]
    mem.consolidate(force=True)
    assert [f.line() for f in mem.facts()] == ["- [fact: DB port] 5433.", "- [fact] keyless"]


def test_a_batch_is_checked_against_its_own_earlier_values(mem):
    result = mem.append(["- [fact: k] a", "- [fact: k] b", "- [fact: k] A.", "- [fact: k] a", "x", "X!"])
    assert [f.line() for f in result.appended] == [
        "- [fact: k] a",
        "- [fact: k] b",
        "- [fact: k] A.",
        "- [fact] x",
    ]
    assert [f.line() for f in result.duplicates] == ["- [fact: k] a", "- [fact] X!"]


@pytest.fixture
def fixed_day(monkeypatch) -> str:
    """The UTC day appends see (fragment names, today's fragment), injected:
    a run crossing midnight cannot move it. Other readings of the clock stay real."""
    day = time.gmtime(1_900_000_000)
    clock = types.SimpleNamespace(strftime=time.strftime, gmtime=lambda: day, time=time.time)
    monkeypatch.setattr(memory_files, "time", clock)
    monkeypatch.setattr(memory_store, "time", clock)
    return "2030-03-17"


def test_over_the_limit_facts_go_to_a_fragment_with_one_pointer(mem, fixed_day):
    mem.append(["a1", "a2", "a3", "a4"])
    result = mem.append(["b1", "b2"])  # 4 + 2 > 5: the whole batch to a fragment
    name = result.file
    assert name is not None
    assert name.startswith(f"auto-{fixed_day}-")
    assert name.endswith(".md")
    assert result.files == (name,)
    assert mem.read().splitlines() == [
        "- [fact] a1",
        "- [fact] a2",
        "- [fact] a3",
        "- [fact] a4",
        f"- [more] {name}",
    ]
    assert mem.read_fragment(name) == "- [fact] b1\n- [fact] b2\n"
    # MEMORY.md has room for one more line, but once there are fragments, facts
    # go to today's fragment while it has room (so the order stays the order of writing).
    assert mem.append(["c1", "c2", "c3"]).file == name
    second = mem.append(["d1"]).file
    assert second not in (name, "MEMORY.md")
    # MEMORY.md was full: its newest lines moved to a fragment in their place, leaving
    # room for the new pointer and one more (max(1, max_lines // 10)).
    lines = mem.read().splitlines()
    assert len(lines) == 4
    moved = parse_line(lines[1]).name
    assert lines == ["- [fact] a1", f"- [more] {moved}", f"- [more] {name}", f"- [more] {second}"]
    assert mem.read_fragment(moved) == "- [fact] a2\n- [fact] a3\n- [fact] a4\n"
    assert mem.fragments() == [moved, name, second]
    assert mem.read(expand=True).splitlines() == [
        f"- [fact] {x}" for x in ["a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "c3", "d1"]
    ]
    assert [f.text for f in mem.facts()] == ["a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "c3", "d1"]
    # Duplicates are found in fragments too.
    assert mem.append(["b2", "d1", "a1"]).appended == ()


def test_memory_md_never_grows_past_max_lines_pointers_included(tmp_path):
    """150 facts, then batches of 151 (each one new fragment at least): MEMORY.md
    stays within 150 lines, and every fact stays in order."""
    mem = MemoryFiles(tmp_path, durability="never")
    facts = [f"base {i}" for i in range(150)]
    mem.append(facts)
    for batch in range(3):
        more = [f"batch {batch} fact {i}" for i in range(151)]
        result = mem.append(more)
        assert len(result.files) == 2  # 150 + 1: a fragment holds at most max_lines
        facts += more
        lines = mem.read().splitlines()
        assert len(lines) <= 150
        assert [f.text for f in mem.facts()] == facts
        for name in mem.fragments():
            assert len(mem.read_fragment(name).splitlines()) <= 150
    assert [parse_line(line).text for line in mem.read(expand=True).splitlines()] == facts


@pytest.mark.parametrize("max_lines", [1, 2, 3, 5, 8])
def test_the_limit_holds_for_any_max_lines_and_batch_sizes(tmp_path, max_lines):
    mem = MemoryFiles(tmp_path, max_lines=max_lines, durability="never")
    rng = random.Random(max_lines)
    facts: list[str] = []
    for batch in range(25):
        more = [
            f"b{batch} f{i}" for i in range(rng.choice([1, 1, 2, max_lines, max_lines + 1, 3 * max_lines]))
        ]
        mem.append(more)
        facts += more
        assert [f.text for f in mem.facts()] == facts
        lines = mem.read().splitlines()
        assert len(lines) <= max_lines
        # A fragment grows past max_lines only once MEMORY.md has no room for another pointer.
        if any(len(mem.read_fragment(n).splitlines()) > max_lines for n in mem.fragments()):
            assert len(mem.fragments()) >= max_lines - 1
        if batch % 7 == 6:
            mem.consolidate(force=True)
            assert [f.text for f in mem.facts()] == facts
            assert len(mem.read().splitlines()) <= max_lines


def test_a_fragment_of_an_earlier_day_is_not_appended_to(mem):
    mem.append(["a1", "a2", "a3", "a4", "a5"])
    first = mem.append(["b1"]).file
    old = "auto-2001-01-01-abcd.md"
    os.rename(os.path.join(mem.root, first), os.path.join(mem.root, old))
    text = mem.read().replace(first, old)
    with open(mem.memory_path, "w") as handle:
        handle.write(text)
    assert mem.append(["c1"]).file not in (old, "MEMORY.md")


@given(
    st.integers(0, 400),
    st.integers(0, 400),
    st.integers(0, 30),
    st.integers(0, 400),
    st.integers(1, 40),
    st.booleans(),
)
def test_the_layout_keeps_memory_md_within_max_lines(head, adjacent, fixed, tail, max_lines, tail_fixed):
    def lines(keep: int, size: int) -> int:
        tail_lines = tail if tail_fixed else -(-tail // size)
        return keep + -(-(head - keep + adjacent) // size) + fixed + tail_lines

    layout = plan(head, adjacent, fixed, tail, max_lines, tail_fixed=tail_fixed)
    if layout is None:  # only when the fixed lines leave no room for the pointers
        needed = fixed + (head + adjacent > 0) + (tail if tail_fixed else tail > 0)
        assert needed > max_lines
        return
    keep, size = layout
    assert 0 <= keep <= head
    assert size >= max_lines
    assert lines(keep, size) <= max_lines
    if size == max_lines:
        if keep < head:  # lines moved: the most that fit, leaving the reserve free when it can
            assert lines(keep + 1, size) > max_lines - reserve(max_lines)
    else:  # bigger fragments only when max_lines-sized ones cannot fit
        assert lines(0, max_lines) > max_lines
        assert lines(0, size - 1) > max_lines


def test_a_batch_bigger_than_max_lines_is_split_across_fragments(mem):
    result = mem.append([f"f{i}" for i in range(12)])
    assert result.file == result.files[0]
    assert [len(mem.read_fragment(n).splitlines()) for n in result.files] == [5, 5, 2]
    assert mem.fragments() == list(result.files)
    assert [f.text for f in mem.facts()] == [f"f{i}" for i in range(12)]


@pytest.mark.parametrize("how", ["line", "batch", "format"])
def test_oversized_or_malformed_input_is_refused_whole(tmp_path, how):
    mem = MemoryFiles(tmp_path, max_line_bytes=64, max_batch_bytes=200, durability="never")
    mem.append(["before"])
    before = snapshot(tmp_path)
    if how == "line":
        batch, error = ["ok", "x" * 60], MemoryLimitError
    elif how == "batch":
        batch, error = [f"fact number {i}" for i in range(20)], MemoryLimitError
    else:
        batch, error = ["ok", "[broken"], MemoryFormatError
    with pytest.raises(error) as caught:
        mem.append(batch)
    assert isinstance(caught.value, InvalidInputError)
    assert "nothing written" in str(caught.value) or how == "format"
    assert snapshot(tmp_path) == before


def test_a_lone_surrogate_is_refused_and_nothing_invalid_is_written(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    mem.append(["before"])
    before = snapshot(tmp_path)
    for bad in (["ok", "port \ud800 5433"], [Fact("ok"), "- [fact: k\udce9] x"]):
        with pytest.raises(MemoryFormatError, match="surrogate"):
            mem.append(bad)
    with pytest.raises(MemoryFormatError, match="surrogate"):
        mem.persist_learnings([{"role": "user", "content": "hi"}], llm=FakeModel("- [fact] bad \udc80"))
    # The offline extractor skips a sentence that is not text.
    assert mem.persist_learnings([{"role": "user", "content": "The port is 54\ud80033."}]).appended == ()
    assert snapshot(tmp_path) == before
    (tmp_path / "MEMORY.md").read_bytes().decode("utf-8")  # valid UTF-8


def test_default_limits_4k_line_1m_batch(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    with pytest.raises(MemoryLimitError, match="max_line_bytes=4096"):
        mem.append(["é" * 2100])
    with pytest.raises(MemoryLimitError, match="max_batch_bytes=1048576"):
        mem.append([f"{i} " + "x" * 3000 for i in range(400)])
    assert not os.path.exists(mem.memory_path)


def test_options_are_checked(tmp_path):
    for bad in ({"max_lines": 0}, {"lock_timeout": -1}, {"durability": "sometimes"}, {"max_line_bytes": 1.5}):
        with pytest.raises((InvalidInputError, TypeError)):
            MemoryFiles(tmp_path, **bad)
    for name in ("gc_interval", "lock_timeout", "poll_interval"):
        with pytest.raises(InvalidInputError, match=name):
            MemoryFiles(tmp_path, **{name: float("nan")})
    with pytest.raises(TypeError):
        MemoryFiles(3)  # type: ignore[arg-type]
    with pytest.raises(MemoryPathError, match="does not exist"):
        MemoryFiles(tmp_path / "missing", create=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(MemoryPathError, match="not a directory"):
        MemoryFiles(tmp_path / "file")


def test_os_errors_are_context_core_errors(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(MemoryPathError, match="Not a directory"):
        MemoryFiles(tmp_path / "file" / "mem")
    with monkeypatch.context() as patch:
        patch.setattr(os, "makedirs", failing(os.makedirs, errno.EACCES))
        with pytest.raises(MemoryStorageError, match="Permission denied") as denied:
            MemoryFiles(tmp_path / "new")
    # Also the OS error's own class, with its fields.
    assert isinstance(denied.value, PermissionError)
    assert denied.value.errno == errno.EACCES
    assert type(denied.value).__name__ == "MemoryStorageError"
    mem = MemoryFiles(tmp_path / "mem", durability="never", min_fragments=0, gc_interval=0)
    mem.append(["x"])
    with monkeypatch.context() as patch:
        patch.setattr(os, "utime", failing(os.utime, errno.EROFS))
        with pytest.raises(MemoryStorageError, match=r"\.memory_gc: Read-only file system") as read_only:
            mem.consolidate(force=True)
    assert read_only.value.errno == errno.EROFS
    assert read_only.value.filename.endswith(".memory_gc")
    gc_fd = lambda fd, *args: isinstance(fd, int) and fd_name(fd) == ".memory_gc"  # noqa: E731
    with monkeypatch.context() as patch:
        patch.setattr(os, "fstat", failing(os.fstat, errno.EIO, gc_fd))
        with pytest.raises(MemoryStorageError, match=r"\.memory_gc: Input/output error"):
            mem.due()
    (tmp_path / "mem" / "auto-2025-01-01-aaaa.md").write_text("")  # an empty orphan: removed
    with monkeypatch.context() as patch:
        patch.setattr(os, "unlink", failing(os.unlink, errno.EPERM))
        refused = r"auto-2025-01-01-aaaa\.md: Operation not permitted"
        with pytest.raises(MemoryStorageError, match=refused) as info:
            mem.facts()
    assert isinstance(info.value, PermissionError)
    assert info.value.errno == errno.EPERM
    assert mem.facts() == [Fact("x")]


def failing(real, code: int, when=lambda *args: True):
    """``real``, raising ``OSError(code)`` when ``when(*args)``."""

    def fail(*args, **kwargs):
        if when(*args):
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    return fail


def fd_name(fd: int) -> str:
    return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))


# -- safety -----------------------------------------------------------------------------


def test_modes_0600_and_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        mem = MemoryFiles(tmp_path / "a" / "mem", max_lines=2, durability="never")
        mem.append(["one", "two"])
        mem.append(["three"])
        mem.consolidate(force=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(mem.root).st_mode) == 0o700
    for name in files_in(mem.root):
        assert stat.S_IMODE(os.stat(os.path.join(mem.root, name)).st_mode) == 0o600, name


@pytest.mark.parametrize("which", ["MEMORY.md", ".memory.lock", ".memory.pending", ".memory_gc"])
def test_a_symlink_in_place_of_a_memory_file_is_refused(tmp_path, which):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    root = tmp_path / "mem"
    root.mkdir()
    os.symlink(victim, root / which)
    mem = MemoryFiles(root, durability="never", min_fragments=0, gc_interval=0)

    def use() -> None:
        mem.append(["x"])
        mem.consolidate()  # .memory_gc is read here

    with pytest.raises(MemoryPathError, match="symlink"):
        use()
    if which == "MEMORY.md":
        with pytest.raises(MemoryPathError, match="symlink"):
            mem.read()
    assert victim.read_text() == "precious\n"


def test_a_lock_file_swapped_for_a_symlink_before_the_lock_is_taken_is_refused(tmp_path, monkeypatch):
    from context_core.memory import files

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    mem = MemoryFiles(tmp_path / "mem", durability="never")
    mem.append(["before"])
    lock = tmp_path / "mem" / ".memory.lock"
    checked = files.open_file

    def check_then_swap(root, dir_fd, name, flags, **kw):
        fd = checked(root, dir_fd, name, flags, **kw)
        if name == ".memory.lock":  # after the check, before filelock opens it by path
            os.unlink(lock)
            os.symlink(victim, lock)
        return fd

    before = (tmp_path / "mem" / "MEMORY.md").read_bytes()
    with monkeypatch.context() as patch:
        patch.setattr(files, "open_file", check_then_swap)
        with pytest.raises(MemoryPathError, match="symlink"):
            mem.append(["after"])
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "mem" / "MEMORY.md").read_bytes() == before
    os.unlink(lock)
    assert mem.append(["after"]).appended  # the lock is usable again


def test_an_os_error_from_the_lock_is_a_storage_error(tmp_path, monkeypatch):
    mem = MemoryFiles(tmp_path, durability="never")

    def no_locks(*args, **kwargs):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(mem._lock, "acquire", no_locks)
    with pytest.raises(MemoryStorageError, match="No locks available"):
        mem.append(["x"])


def test_a_symlinked_fragment_is_refused(mem, tmp_path):
    mem.append(["a1", "a2", "a3", "a4", "a5"])
    name = mem.append(["b1"]).file
    victim = tmp_path / "victim"
    victim.write_text("- [fact] planted\n")
    os.unlink(os.path.join(mem.root, name))
    os.symlink(victim, os.path.join(mem.root, name))
    with pytest.raises(MemoryPathError, match="symlink"):
        mem.append(["c1"])
    with pytest.raises(MemoryPathError, match="symlink"):
        mem.read_fragment(name)
    assert victim.read_text() == "- [fact] planted\n"


def test_hard_links_and_special_files_are_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    root = tmp_path / "mem"
    root.mkdir()
    os.link(victim, root / "MEMORY.md")
    mem = MemoryFiles(root, durability="never")
    with pytest.raises(MemoryPathError, match="hard link"):
        mem.append(["x"])
    os.unlink(root / "MEMORY.md")
    os.mkfifo(root / "MEMORY.md")  # must not hang the open
    with pytest.raises(MemoryPathError, match="not a regular file"):
        mem.read()
    os.unlink(root / "MEMORY.md")
    os.mkdir(root / "MEMORY.md")
    with pytest.raises(MemoryPathError):
        mem.append(["x"])
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize(
    "name", ["../MEMORY.md", "/etc/passwd", "sub/auto-2025-01-01-abcd.md", "..", "MEMORY.md", "auto-x.md", 3]
)
def test_fragment_names_are_checked(mem, name):
    with pytest.raises(MemoryPathError):
        mem.read_fragment(name)


def test_pointer_lines_naming_outside_files_are_never_followed(tmp_path):
    outside = tmp_path / "secret.md"
    outside.write_text("- [fact] secret\n")
    root = tmp_path / "mem"
    root.mkdir()
    (root / "MEMORY.md").write_text("- [more] ../secret.md\n- [more] /etc/passwd\n- [fact] mine\n")
    mem = MemoryFiles(root, durability="never")
    assert mem.read(expand=True) == "- [more] ../secret.md\n- [more] /etc/passwd\n- [fact] mine\n"
    assert mem.facts() == [Fact("mine")]
    assert mem.fragments() == []


def test_roots_are_isolated(tmp_path):
    a = MemoryFiles(tmp_path / "tenant-a", durability="never")
    b = MemoryFiles(tmp_path / "tenant-b", durability="never")
    a.append(["Tenant A's secret is 1234"])
    assert b.append(["Tenant A's secret is 1234"]).appended  # not a duplicate: another root
    b.append(["only b"])
    assert [f.text for f in a.facts()] == ["Tenant A's secret is 1234"]
    assert [f.text for f in b.facts()] == ["Tenant A's secret is 1234", "only b"]
    assert files_in(tmp_path) == ["tenant-a", "tenant-b"]


# -- the lock ---------------------------------------------------------------------------


def test_lock_timeout_is_a_clear_error(tmp_path):
    mem = MemoryFiles(tmp_path, lock_timeout=0.2, durability="never")
    mem.append(["first"])
    holder = filelock.FileLock(os.path.join(tmp_path, ".memory.lock"))
    with holder, pytest.raises(MemoryLockError, match=r"lock_timeout") as caught:
        mem.append(["second"])
    assert isinstance(caught.value, TimeoutError)
    assert mem.append(["second"]).appended


def test_threads_sharing_one_instance_are_serialised(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=20, durability="never")

    def work(t: int) -> None:
        for i in range(50):
            mem.append([f"thread {t} fact {i}"])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    texts = [f.text for f in mem.facts()]
    assert sorted(texts) == sorted(f"thread {t} fact {i}" for t in range(4) for i in range(50))


# -- persist_learnings ------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "SYSTEM-SECRET: you must always obey /etc/system-only."},
    {"role": "user", "content": "Let's use Postgres 16 for the database. The staging DB port is 5433."},
    {"role": "assistant", "content": "Done. Decision: retries back off exponentially."},
    {"role": "tool", "tool_call_id": "1", "content": "TOOL-OUTPUT /tmp/tool"},
]


def test_persist_learnings_offline(mem):
    result = mem.persist_learnings(CONVERSATION)
    assert [f.line() for f in result.appended] == [
        "- [decision: database] Let's use Postgres 16 for the database.",
        "- [fact: staging db port] The staging DB port is 5433.",
        "- [decision] retries back off exponentially.",
    ]
    assert mem.persist_learnings(CONVERSATION).appended == ()  # already there


class FakeModel:
    """A plain callable standing in for a model: records what it is sent."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[list[dict]] = []

    def __call__(self, messages):
        self.calls.append(messages)
        return self.reply


def test_persist_learnings_with_a_model(mem):
    model = FakeModel("- [decision: database] Use Postgres 16\n- [fact: staging db port] 5433\n")
    result = mem.persist_learnings(CONVERSATION, llm=model)
    assert [f.line() for f in result.appended] == [
        "- [decision: database] Use Postgres 16",
        "- [fact: staging db port] 5433",
    ]
    sent = repr(model.calls)
    assert "SYSTEM-SECRET" not in sent
    assert "/etc/system-only" not in sent
    assert "TOOL-OUTPUT" not in sent
    assert "Postgres 16 for the database" in sent
    assert "back off" in sent
    assert "- [kind: key] text" in model.calls[0][0]["content"]  # the format is asked for
    # Facts already present are not appended again.
    again = mem.persist_learnings(CONVERSATION, llm=model)
    assert again.appended == ()
    assert len(again.duplicates) == 2
    assert mem.persist_learnings(CONVERSATION, llm=FakeModel("NONE")).appended == ()


@pytest.mark.parametrize(
    "reply",
    [
        "Sure! Here are the facts:\n- [fact] x",
        "- [fact] ok\n- broken",
        '["json"]',
        "- [more] auto-2025-01-01-abcd.md",
    ],
)
def test_a_malformed_reply_writes_nothing(mem, reply):
    mem.append(["before"])
    before = snapshot(mem.root)
    with pytest.raises(MemoryFormatError) as caught:
        mem.persist_learnings(CONVERSATION, llm=FakeModel(reply))
    assert caught.value.text == reply
    assert snapshot(mem.root) == before


def test_an_oversized_conversation_or_reply_is_refused(tmp_path):
    mem = MemoryFiles(tmp_path, max_batch_bytes=100, durability="never")
    model = FakeModel("- [fact] x")
    with pytest.raises(MemoryLimitError, match="nothing sent"):
        mem.persist_learnings([{"role": "user", "content": "x" * 101}], llm=model)
    assert model.calls == []
    with pytest.raises(MemoryLimitError):
        mem.persist_learnings([{"role": "user", "content": "hi"}], llm=FakeModel("- [fact] " + "x" * 200))
    assert files_in(tmp_path) == []


def test_a_generator_of_messages_is_read_once(mem):
    result = mem.persist_learnings(m for m in CONVERSATION)
    assert len(result.appended) == 3
    with pytest.raises(TypeError):
        mem.persist_learnings({"role": "user", "content": "x"})  # type: ignore[arg-type]


def test_nothing_to_read_calls_no_model(mem):
    model = FakeModel("- [fact] x")
    assert mem.persist_learnings([{"role": "system", "content": "only system"}], llm=model).appended == ()
    assert model.calls == []


# -- consolidate ------------------------------------------------------------------------


_serial = iter(range(1_000_000))


def many_fragments(mem: MemoryFiles, count: int) -> list[str]:
    """MEMORY.md full, then new facts until at least ``count`` fragments; the fragments."""
    mem.append([f"base {next(_serial)}" for _ in range(mem.max_lines)])
    while len(mem.fragments()) < count:
        n = next(_serial)
        mem.append([f"frag {n} fact {i}" for i in range(mem.max_lines)])
    return mem.fragments()


def test_consolidation_is_due_after_min_fragments_and_gc_interval(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=6, gc_interval=3600, durability="never")
    mem.min_fragments = len(many_fragments(mem, 3)) + 1
    assert not mem.due()
    result = mem.consolidate()
    assert not result.ran
    assert f"fewer than min_fragments={mem.min_fragments}" in result.reason
    many_fragments(mem, mem.min_fragments)
    assert mem.due()  # never consolidated: no .memory_gc
    before = [f.text for f in mem.facts()]
    fragments = mem.fragments()
    result = mem.consolidate()
    assert result.ran
    assert result.reason == "due"
    assert result.merged == tuple(fragments)
    assert [f.text for f in mem.facts()] == before  # nothing lost, order kept
    assert os.path.exists(tmp_path / ".memory_gc")
    many_fragments(mem, mem.min_fragments)
    assert not mem.due()
    assert "gc_interval" in mem.consolidate().reason
    old = time.time() - 7200
    os.utime(tmp_path / ".memory_gc", (old, old))
    assert mem.consolidate().ran
    assert mem.consolidate(force=True).reason == "forced"


def test_offline_consolidation_merges_dedups_retires_and_keeps_the_limit(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=4, durability="never")
    mem.append(["- [decision: db] Use Postgres", "Never push", "a"])
    first = mem.append(["- [decision: db] Use MySQL", "b"]).file
    # A hand-edited MEMORY.md: a heading, and a near duplicate appended without the library.
    text = (tmp_path / "MEMORY.md").read_text()
    (tmp_path / "new").write_text("# Memory\n" + text + "- [constraint] never push.\n")
    os.replace(tmp_path / "new", tmp_path / "MEMORY.md")
    result = mem.consolidate(force=True)
    assert result.ran
    assert result.merged == (first,)
    assert result.facts_before == 6
    assert result.facts_after == 4
    assert first not in files_in(tmp_path)
    lines = mem.read(expand=True).splitlines()
    assert lines == [
        "# Memory",
        "- [decision: db] Use MySQL",
        "- [constraint] never push.",
        "- [fact] a",
        "- [fact] b",
    ]
    assert len(mem.read().splitlines()) <= 4  # the rest in a new fragment, with its pointer
    assert len(result.created) == 1
    assert mem.fragments() == list(result.created)
    # Idempotent: consolidating again changes nothing.
    mem.consolidate(force=True)
    assert mem.read(expand=True).splitlines() == lines


def test_model_consolidation(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=3, min_fragments=2, durability="never")
    merged = many_fragments(mem, 2)
    facts = mem.facts()
    model = FakeModel("- [fact] base 0\n- [fact: frags] all the frags, 6 facts")
    result = mem.consolidate(model)
    assert result.ran
    assert set(result.merged) == set(merged)
    assert mem.read() == "- [fact] base 0\n- [fact: frags] all the frags, 6 facts\n"
    assert not fragments_on_disk(tmp_path)
    sent = model.calls[0][1]["content"]
    assert sent == "<memory>\n" + "".join(f"{f.line()}\n" for f in facts) + "</memory>"


@pytest.mark.parametrize("reply", ["not a list of facts", "NONE", "- [fact] ok\nchatter"])
def test_a_malformed_consolidation_reply_writes_nothing(tmp_path, reply):
    mem = MemoryFiles(tmp_path, max_lines=3, min_fragments=2, durability="never")
    many_fragments(mem, 2)
    before = snapshot(tmp_path)
    with pytest.raises(MemoryFormatError):
        mem.consolidate(FakeModel(reply))
    assert snapshot(tmp_path) == before  # and .memory_gc not touched: it is still due
    assert mem.due()


def test_facts_appended_while_the_model_runs_are_kept(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=6, min_fragments=2, durability="never")
    mem.append(["base 0", "base 1", "base 2"])
    first = mem.append(["frag 0", "frag 1", "frag 2", "frag 3"]).file
    second = mem.append(["frag 4", "frag 5", "frag 6"]).file
    assert mem.fragments() == [first, second]
    other = MemoryFiles(tmp_path, max_lines=6, durability="never")  # "another process"
    added: list[str] = []

    def model(messages):
        text = messages[1]["content"]
        assert "late" not in text
        added.append(other.append(["late 1"]).file)  # to the last fragment, which is being merged
        added.append(other.append(["late 2", "late 3", "late 4"]).file)  # a new fragment
        return "- [fact] everything before, merged"

    result = mem.consolidate(model)
    assert added[0] == second
    assert added[1] not in (first, second)
    assert result.merged == (first, second)
    assert result.kept == (added[1],)
    assert [f.text for f in mem.facts()] == [
        "everything before, merged",
        "late 1",
        "late 2",
        "late 3",
        "late 4",
    ]
    assert fragments_on_disk(tmp_path) == [added[1]]


def test_a_model_is_not_asked_to_consolidate_nothing(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    model = FakeModel("- [fact] invented")
    assert mem.consolidate(model, force=True).ran
    assert model.calls == []
    assert mem.read() == ""
    assert asyncio.run(mem.aconsolidate(model, force=True)).ran
    assert model.calls == []


def test_a_consolidation_overtaken_by_another_writes_nothing(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=3, min_fragments=2, durability="never")
    many_fragments(mem, 2)
    facts = mem.facts()

    def model(messages):
        assert MemoryFiles(tmp_path, max_lines=3).consolidate(force=True).ran
        return "- [fact] stale"

    result = mem.consolidate(model)
    assert not result.ran
    assert result.reason.startswith("superseded")
    assert mem.facts() == facts


def echo_memory(messages) -> str:
    """A model that hands back the memory it was given, as it was."""
    return messages[1]["content"].removeprefix("<memory>\n").removesuffix("</memory>").strip()


def test_other_consolidations_during_the_model_call_supersede_it(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=20, durability="never")
    mem.append(["- [fact: db port] 5433", "a", "b"])
    assert mem.consolidate(force=True).ran
    other = MemoryFiles(tmp_path, max_lines=20, durability="never")  # "another process"
    newest = []

    def model(messages):
        reply = echo_memory(messages)  # the memory as it was: port 5433
        snapshot_inode = os.stat(mem.memory_path).st_ino
        # Consolidate, append a newer value, consolidate: MEMORY.md has as many lines as
        # before, and (ext4 reuses a freed inode at once) soon the inode it had, too.
        for port in range(5434, 5454):
            assert other.consolidate(force=True).ran
            assert other.append([f"- [fact: db port] {port}"]).appended
            newest[:] = [port]
            assert other.consolidate(force=True).ran
            if os.stat(mem.memory_path).st_ino == snapshot_inode:
                break
        return reply

    result = mem.consolidate(model, force=True)
    assert not result.ran
    assert result.reason.startswith("superseded")
    assert [f.line() for f in mem.facts()] == [f"- [fact: db port] {newest[0]}", "- [fact] a", "- [fact] b"]


def test_a_hand_edit_during_the_model_call_supersedes_it(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=20, durability="never")
    mem.append(["- [fact: db port] 5433", "a", "b"])

    def model(messages):
        (tmp_path / "edited").write_text("- [fact: db port] 6000\n- [fact] a\n- [fact] b\n")
        os.replace(tmp_path / "edited", tmp_path / "MEMORY.md")  # as an editor saves
        return echo_memory(messages)

    result = mem.consolidate(model, force=True)
    assert (result.ran, result.reason) == (
        False,
        "superseded: MEMORY.md was edited meanwhile; nothing written",
    )
    assert mem.facts()[0].text == "6000"


def test_a_consolidation_killed_before_its_commit_still_supersedes_one_in_flight(tmp_path, monkeypatch):
    """The generation token changes before MEMORY.md is replaced: a crash between the
    two costs the consolidation waiting for its model, never lets it write stale facts."""
    from context_core.memory.store import Store

    mem = MemoryFiles(tmp_path, max_lines=3, durability="never")
    many_fragments(mem, 2)
    facts = mem.facts()
    write_new = Store.write_new

    def crash_at_the_commit(self, name, data):
        if name == "MEMORY.md":
            raise MemoryStorageError("killed")
        write_new(self, name, data)

    def model(messages):
        with monkeypatch.context() as patch:
            patch.setattr(Store, "write_new", crash_at_the_commit)
            with pytest.raises(MemoryStorageError):
                MemoryFiles(tmp_path, max_lines=3, durability="never").consolidate(force=True)
        return echo_memory(messages)

    result = mem.consolidate(model, force=True)
    assert not result.ran
    assert result.reason.startswith("superseded")
    assert mem.facts() == facts  # the interrupted one undone at the next lock


# -- async ------------------------------------------------------------------------------


def test_async_forms_do_not_block_the_event_loop(tmp_path, monkeypatch):
    mem = MemoryFiles(tmp_path, max_lines=3, min_fragments=2, durability="never", lock_timeout=5)
    many_fragments(mem, 2)
    holder = filelock.FileLock(os.path.join(tmp_path, ".memory.lock"), thread_local=False)
    waiting = threading.Event()
    acquire = mem._lock.acquire

    def acquire_and_tell(*args, **kwargs):
        waiting.set()  # the append now waits for the lock (in its worker thread)
        return acquire(*args, **kwargs)

    monkeypatch.setattr(mem._lock, "acquire", acquire_and_tell)

    async def amodel(messages):
        await asyncio.sleep(0)
        return "- [fact] merged"

    async def main():
        holder.acquire()
        task = asyncio.create_task(mem.apersist_learnings([{"role": "user", "content": "Note: x is 1."}]))
        # The loop runs on while the append waits: had it blocked the loop, the task would
        # have ended (lock_timeout) before this coroutine could look.
        while not waiting.is_set():
            await asyncio.sleep(0.001)
        assert not task.done()
        holder.release()
        appended = await task
        consolidated = await mem.aconsolidate(amodel)
        learned = await mem.apersist_learnings(
            [{"role": "user", "content": "hello"}], llm=lambda messages: "- [fact] from the model"
        )
        more = await mem.aappend(["direct"])
        offline = await mem.aconsolidate(force=True)
        return appended, consolidated, learned, more, offline

    appended, consolidated, learned, more, offline = asyncio.run(main())
    assert [f.line() for f in appended.appended] == ["- [fact: x] x is 1."]
    assert consolidated.ran
    assert learned.appended == (Fact("from the model"),)
    assert more.appended == (Fact("direct"),)
    assert offline.ran
    assert [f.text for f in mem.facts()] == ["merged", "from the model", "direct"]


# -- recovery from what a killed process leaves ----------------------------------------


def test_an_incomplete_batch_is_cut_back(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    mem.append(["kept"])
    path = tmp_path / "MEMORY.md"
    offset = path.stat().st_size
    batch = b"- [fact] half one\n- [fact] half two\n"
    with open(path, "ab") as handle:
        handle.write(batch[:25])  # killed mid-write: one whole line and a half
    digest = hashlib.sha256(batch).hexdigest()
    (tmp_path / ".memory.pending").write_text(
        f"MEMORY.md {path.stat().st_ino} {offset} {len(batch)} {digest}\n"
    )
    assert mem.facts() == [Fact("kept")]
    assert path.read_bytes() == b"- [fact] kept\n"
    assert (tmp_path / ".memory.pending").read_bytes() == b""


def test_a_whole_batch_left_pending_is_kept(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    mem.append(["kept"])
    path = tmp_path / "MEMORY.md"
    offset = path.stat().st_size
    batch = b"- [fact] whole\n"
    with open(path, "ab") as handle:
        handle.write(batch)  # killed after the write, before the record was cleared
    digest = hashlib.sha256(batch).hexdigest()
    (tmp_path / ".memory.pending").write_text(
        f"MEMORY.md {path.stat().st_ino} {offset} {len(batch)} {digest}\n"
    )
    assert mem.facts() == [Fact("kept"), Fact("whole")]


def test_a_hand_written_last_line_without_its_newline_is_kept(tmp_path, fixed_day):
    mem = MemoryFiles(tmp_path, durability="never")
    mem.append(["kept"])
    with open(tmp_path / "MEMORY.md", "ab") as handle:
        handle.write(b"- [fact] hand written")  # an editor that adds no final newline
    assert mem.read() == "- [fact] kept\n- [fact] hand written\n"
    assert mem.facts() == [Fact("kept"), Fact("hand written")]
    assert mem.append(["Hand written."]).duplicates == (Fact("Hand written."),)
    mem.append(["next"])
    assert (tmp_path / "MEMORY.md").read_bytes() == b"- [fact] kept\n- [fact] hand written\n- [fact] next\n"
    # The same in a fragment.
    mem = MemoryFiles(tmp_path / "b", max_lines=5, durability="never")
    mem.append(["a1", "a2", "a3", "a4"])
    name = mem.append(["b1", "b2"]).file
    with open(mem.root + "/" + name, "ab") as handle:
        handle.write(b"- [fact] in the fragment")
    assert mem.facts()[-1] == Fact("in the fragment")
    assert mem.append(["last"]).file == name
    with open(mem.root + "/" + name, "rb") as handle:
        assert handle.read() == b"- [fact] b1\n- [fact] b2\n- [fact] in the fragment\n- [fact] last\n"


def test_a_torn_batch_after_a_hand_written_line_is_cut_back_to_that_line(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"- [fact] kept\n- [fact] hand written")
    offset = path.stat().st_size
    batch = b"\n- [fact] half one\n- [fact] half two\n"  # what append writes: the newline first
    with open(path, "ab") as handle:
        handle.write(batch[:26])  # killed mid-write
    digest = hashlib.sha256(batch).hexdigest()
    (tmp_path / ".memory.pending").write_text(
        f"MEMORY.md {path.stat().st_ino} {offset} {len(batch)} {digest}\n"
    )
    # No lock: the whole lines of the torn batch show until a locked call cuts it back.
    assert mem.read() == "- [fact] kept\n- [fact] hand written\n- [fact] half one\n"
    assert mem.facts() == [Fact("kept"), Fact("hand written")]
    assert path.read_bytes() == b"- [fact] kept\n- [fact] hand written"
    assert mem.read() == "- [fact] kept\n- [fact] hand written\n"


def test_a_lockless_read_leaves_out_a_last_line_an_append_may_be_writing(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    mem.append(["kept"])
    with open(tmp_path / "MEMORY.md", "ab") as handle:
        handle.write(b"- [fact] half writ")
    (tmp_path / ".memory.pending").write_text("MEMORY.md 1 14 40 0000\n")  # an append under way
    assert mem.read() == "- [fact] kept\n"


def test_an_orphan_fragment_gets_its_pointer_and_an_empty_one_goes(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    mem.append(["kept"])
    (tmp_path / "auto-2025-01-01-aaaa.md").write_text("- [fact] orphan\n")
    (tmp_path / "auto-2025-01-01-bbbb.md").write_text("")
    (tmp_path / ".tmp-0123456789abcdef").write_text("- [fact] never memory\n")
    assert mem.facts() == [Fact("kept"), Fact("orphan")]
    assert mem.fragments() == ["auto-2025-01-01-aaaa.md"]
    assert files_in(tmp_path) == [".memory.lock", ".memory.pending", "MEMORY.md", "auto-2025-01-01-aaaa.md"]


def test_an_orphan_fragment_finds_room_in_a_full_memory_md(tmp_path):
    mem = MemoryFiles(tmp_path, max_lines=4, durability="never")
    mem.append(["a1", "a2", "a3", "a4"])
    (tmp_path / "auto-2025-01-01-aaaa.md").write_text("- [fact] orphan\n")
    assert [f.text for f in mem.facts()] == ["a1", "a2", "a3", "a4", "orphan"]
    assert len(mem.read().splitlines()) <= 4
    assert mem.fragments()[-1] == "auto-2025-01-01-aaaa.md"


def test_an_interrupted_consolidation_is_undone_or_finished(tmp_path):
    mem = MemoryFiles(tmp_path, durability="never")
    (tmp_path / "MEMORY.md").write_text("- [fact] a\n- [more] auto-2025-01-01-aaaa.md\n")
    # Killed after renaming a merged fragment, before the new MEMORY.md: undone.
    (tmp_path / ".merged-auto-2025-01-01-aaaa.md").write_text("- [fact] b\n")
    (tmp_path / ".new-auto-2025-01-01-cccc.md").write_text("- [fact] b\n")
    assert [f.text for f in mem.facts()] == ["a", "b"]
    assert fragments_on_disk(tmp_path) == ["auto-2025-01-01-aaaa.md"]
    assert not [n for n in files_in(tmp_path) if n.startswith((".merged", ".new"))]
    # Killed after the new MEMORY.md: finished.
    (tmp_path / "new").write_text("- [fact] a\n- [more] auto-2025-01-01-cccc.md\n")
    os.replace(tmp_path / "new", tmp_path / "MEMORY.md")
    os.rename(tmp_path / "auto-2025-01-01-aaaa.md", tmp_path / ".merged-auto-2025-01-01-aaaa.md")
    (tmp_path / ".new-auto-2025-01-01-cccc.md").write_text("- [fact] b\n")
    assert [f.text for f in mem.facts()] == ["a", "b"]
    assert fragments_on_disk(tmp_path) == ["auto-2025-01-01-cccc.md"]


def test_reply_parser_is_the_public_one():
    assert parse_reply("- [fact] x") == [parse_line("- [fact] x")]


def test_a_failed_write_names_the_file_it_failed_on(tmp_path, monkeypatch):
    """A write that fails inside a step that wraps errors keeps the error
    that names the file written (a new fragment, say), with its errno."""
    import context_core.memory.store as store

    mem = MemoryFiles(tmp_path, durability="never", max_lines=3, min_fragments=0, gc_interval=0)
    mem.append(["a", "b", "c"])

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store, "write_all", full)
    with pytest.raises(MemoryStorageError) as info:
        mem.append(["d", "e", "f", "g"])
    error = info.value
    assert error.errno == errno.ENOSPC
    assert error.filename is not None
    assert os.path.basename(error.filename) != "MEMORY.md", error  # the new fragment it was writing
    assert os.path.basename(error.filename) in str(error)
    assert str(error).count("No space left on device") == 1


def test_a_forked_child_appends_with_a_lock_of_its_own(tmp_path):
    """filelock refuses a lock made in the parent: a forked worker's append
    (a Session's close in it) raised a bare RuntimeError. The child makes
    its own lock on the same file, so parent and child still take turns."""
    from limits import in_child

    mem = MemoryFiles(tmp_path / "memory")
    mem.append(["Use Postgres 16"])

    def in_the_child() -> tuple[str, ...]:
        return mem.append(["Never push to main"]).appended

    assert in_child(in_the_child).startswith("returned (")
    assert "Never push to main" in mem.read()
    mem.append(["Deploy on Tuesdays"])  # the parent's own lock still works
    assert "Deploy on Tuesdays" in mem.read()


def test_a_memory_file_saved_with_a_byte_order_mark_keeps_its_first_fact(tmp_path):
    """An editor that saves UTF-8 with a byte order mark: the first line is
    still a fact (it was raw text, so a newer value of its key never retired
    it and a keyless one was appended again), and the mark reaches no
    prompt."""
    root = tmp_path / "mem"
    memory = MemoryFiles(root, create=True)
    (root / "MEMORY.md").write_text(
        "- [fact: staging db port] The staging DB port is 5433.\n- [constraint] Never force-push to main.\n",
        encoding="utf-8-sig",
    )
    assert [(f.kind, f.key) for f in memory.facts()] == [("fact", "staging db port"), ("constraint", None)]
    assert not memory.read().startswith("\ufeff")
    newer = "- [fact: staging db port] The staging DB port is 5434."
    appended = memory.append([newer, "Never force-push to main."])
    assert len(appended.duplicates) == 1
    memory.consolidate(force=True)
    assert (root / "MEMORY.md").read_text(encoding="utf-8") == (
        "- [fact: staging db port] The staging DB port is 5434.\n- [constraint] Never force-push to main.\n"
    )


@pytest.mark.parametrize("facts", [None, 5, {"kind": "constraint", "text": "Never force-push"}])
def test_facts_that_are_not_a_list_are_the_librarys_type_error(tmp_path, facts):
    """``None`` raised Python's own TypeError; a dict wrote its keys as facts."""
    memory = MemoryFiles(tmp_path / "mem", create=True)
    with pytest.raises(InvalidTypeError, match="facts must be a list of facts or strings"):
        memory.append(facts)
    assert memory.read() == ""


@pytest.mark.parametrize("line", ["- ", "*", " - "])
def test_a_bullet_alone_is_an_empty_fact(tmp_path, line):
    """It was written as the fact "-"."""
    memory = MemoryFiles(tmp_path / "mem", create=True)
    with pytest.raises(MemoryFormatError, match="empty"):
        memory.append([line])
