"""The pure-Python message log (context_core.reference.log) against
docs/log-format.md and the MessageLog API: round trips of generated messages,
header facts, branches and summaries, the context view, the writer lock,
recovery of torn tails, checksums, repair, and the LZ4 block decoder."""

from __future__ import annotations

import json
import math
import os
import re
import struct
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core.errors import (
    InvalidInputError,
    InvalidTypeError,
    LogClosedError,
    LogCorruptError,
    LogIndexError,
    LogLockedError,
    LogNotFoundError,
    LogStorageError,
)
from context_core.reference import MessageLog, RepairReport, Tokenizer
from context_core.reference import log as reference_log
from context_core.reference import select as reference_select
from context_core.reference.log import HEADER_DTYPE, decode_lz4_block
from context_core.reference.tags import NAMES
from limits import in_child_with_a_file_size_limit
from strategies import log_messages

NONE = 2**64 - 1
ROLE_CODES = {"system": 0, "developer": 0, "user": 1, "assistant": 2, "tool": 3, "function": 3}
TOKENIZERS: dict[str, Tokenizer] = {}


def tokenizer(encoding: str = "o200k_base") -> Tokenizer:
    if encoding not in TOKENIZERS:
        TOKENIZERS[encoding] = Tokenizer(encoding)
    return TOKENIZERS[encoding]


def payload_bytes(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def align8(n: int) -> int:
    return (n + 7) // 8 * 8


def f32(x: float) -> float:
    return float(np.float32(x))


def open_log(path: Path, **options) -> MessageLog:
    options.setdefault("durability", "never")
    return MessageLog.open(path, create=True, **options)


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ mask]))


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are a careful coding agent."},
        {
            "role": "user",
            "content": "You must use snake_case for every SQL column.",
            "timestamp": 1_700_000_000,
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Traceback (most recent call last):\n  boom"},
        {"role": "assistant", "content": "Fixed: 3 files changed. 中文 😀"},
    ]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def filled(log_path: Path) -> Path:
    """A closed log holding conversation()."""
    with open_log(log_path) as log:
        log.append_many(conversation())
    return log_path


# -- generated messages ------------------------------------------------------------------


def check_log(log: MessageLog, expected: list[dict], encoding: str = "o200k_base") -> None:
    """Everything a log of plain appends says, against the messages appended."""
    assert len(log) == len(expected)
    assert list(log) == expected
    assert log.read(range(len(expected))) == expected
    assert log.read([-1] if expected else []) == expected[-1:]
    analysis = reference_select.Analysis(expected, reference_select.CachedTokenizer(encoding), None, None)
    tags = reference_select.Analysis(
        expected, reference_select.CachedTokenizer(encoding), reference_select.Tagger(), None
    ).tags
    rows = log.headers()
    assert rows.dtype == HEADER_DTYPE
    assert not rows.flags.writeable
    assert len(rows) == len(expected)
    offset = 64
    for seq, (message, row, info) in enumerate(zip(expected, rows, analysis.info, strict=True)):
        raw = payload_bytes(message)
        assert row["seq"] == seq
        assert row["parent"] == (NONE if seq == 0 else seq - 1)
        assert row["offset"] == offset
        assert row["stored_len"] == row["raw_len"] == len(raw)
        assert row["hash"] == zlib.crc32(raw)
        assert row["check"] == zlib.crc32(row.tobytes()[:60])
        assert row["tokens"] == tokenizer(encoding).count_message(message)
        assert row["role"] == ROLE_CODES.get(message["role"], 4)
        assert row["kind"] == 0
        assert row["tags"] == tags[seq]
        flags = int(row["flags"])
        assert flags & 1 == (message.get("pinned") is True)
        assert (flags >> 1 & 1, flags >> 2 & 1, flags >> 3 & 1) == (
            info["calls"],
            info["results"],
            info["has_text"],
        )
        assert flags >> 4 == 0  # codec 0 (raw), no summary level
        assert row["priority"] == f32(message.get("priority", 0))
        if "weight" in message:
            assert row["weight"] == f32(message["weight"])
        else:
            assert math.isnan(row["weight"])
        if "timestamp" in message:
            assert row["timestamp"] == message["timestamp"]
        offset += align8(72 + len(raw))
    assert log.path() == list(range(len(expected)))
    assert log.head == (len(expected) - 1 if expected else None)


@given(batch=st.lists(log_messages, max_size=6), split=st.integers(0, 6))
def test_round_trip_and_reopen(batch, split):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        with open_log(path) as log:
            seqs = [log.append(m) for m in batch[:split]] + log.append_many(batch[split:])
            assert seqs == list(range(len(batch)))
            check_log(log, batch)
            log.verify()
        with MessageLog.open(path) as log:
            check_log(log, batch)
        with MessageLog.open(path, readonly=True) as log:
            check_log(log, batch)
            log.verify()


def test_header_facts_follow_keywords(log_path):
    with open_log(log_path) as log:
        message = {"role": "user", "content": "ok thanks", "priority": 2, "weight": 0.5, "tags": ["log"]}
        before = time.time()
        plain = log.append({"role": "user", "content": "You must never drop the table."})
        after = time.time()
        given = log.append(message, tags=["constraint", "pulse"], weight=3.0, pinned=True, priority=-1)
        stamped = log.append(message, timestamp=12.5)
        rows = log.headers()
        assert before <= rows["timestamp"][plain] <= after
        assert rows["tags"][plain] == NAMES["constraint"]  # found by the default tagger
        assert rows["tags"][given] == NAMES["constraint"] | NAMES["pulse"]
        assert rows["tags"][stamped] == NAMES["log"]  # the message's own
        assert (rows["weight"][given], rows["priority"][given], rows["flags"][given] & 1) == (3.0, -1.0, 1)
        assert (rows["weight"][stamped], rows["priority"][stamped]) == (0.5, 2.0)
        assert rows["timestamp"][stamped] == 12.5
        assert log[given] == message  # the keywords are not written into the message


def test_tokens_in_the_logs_encoding(log_path):
    message = {"role": "user", "content": "Tokens differ between encodings: 日本語のテキスト"}
    with open_log(log_path, encoding="cl100k_base") as log:
        log.append(message)
        assert log.headers()["tokens"][0] == tokenizer("cl100k_base").count_message(message)
    with MessageLog.open(log_path) as log:
        assert log.encoding == "cl100k_base"
        check_log(log, [message], "cl100k_base")
    with pytest.raises(InvalidInputError, match="cl100k_base"):
        MessageLog.open(log_path, encoding="o200k_base")


def test_indexing(filled):
    expected = conversation()
    with MessageLog.open(filled, readonly=True) as log:
        assert log[0] == expected[0]
        assert log[-1] == expected[-1]
        assert log[-len(expected)] == expected[0]
        assert log.read([4, -5, 2]) == [expected[4], expected[0], expected[2]]
        assert list(iter(log)) == expected
        for bad in (len(expected), -len(expected) - 1, 10**30):
            with pytest.raises(LogIndexError):
                log[bad]
        for bad in ("0", 1.0, None, True):
            with pytest.raises(InvalidTypeError):
                log[bad]
        with pytest.raises(InvalidTypeError):
            log.read(3)
        assert log[np.int64(1)] == expected[1]


def test_node_id(log_path):
    with open_log(log_path) as log:
        seq = log.append({"role": "user", "content": "hi"}, timestamp=1_700_000_000.25)
        branch = log.append({"role": "user", "content": "x"})
        expected = f"{round(1_700_000_000.25 * 1e6):x}-{zlib.crc32(payload_bytes(log[seq])):08x}"
        assert log.node_id(seq) == expected == "60a2418221090-" + f"{log.headers()['hash'][0]:08x}"
        assert re.fullmatch(r"[0-9a-f]+-[0-9a-f]{8}", log.node_id(branch))
        with pytest.raises(LogIndexError):
            log.node_id(5)


# -- the tree: summaries, branches, the head ---------------------------------------------------


def test_summaries(log_path):
    with open_log(log_path) as log:
        assert log.last_summary_index is None
        log.append_many(conversation())
        s = log.add_summary("The user set naming rules.", covers=(0, 3))
        assert (log.head, log.last_summary_index) == (s, 3)
        assert log[s] == {"summary": "The user set naming rules.", "covers": [0, 3], "level": 2}
        row = log.headers()[s]
        rendered = {
            "role": "system",
            "content": "Summary of an earlier part of the conversation:\nThe user set naming rules.",
        }
        assert (row["kind"], row["role"], row["parent"], int(row["flags"]) >> 6) == (1, 0, 4, 2)
        assert row["tokens"] == tokenizer().count_message(rendered)
        after = log.append({"role": "user", "content": "next"})
        assert log.headers()["parent"][after] == s
        g = log.add_summary("Everything so far.", (0, after), level=3)
        assert log.last_summary_index == after
        assert int(log.headers()["flags"][g]) >> 6 == 3
    with MessageLog.open(log_path) as log:
        assert (log.head, log.last_summary_index) == (g, after)


def test_rewind_branches_and_paths(log_path):
    with open_log(log_path) as log:
        assert (log.head, log.path()) == (None, [])
        log.append_many(conversation())  # 0..4
        s = log.add_summary("summary", (0, 2))  # 5
        log.append({"role": "user", "content": "on the summarised path"})  # 6
        assert log.rewind(2) is None
        marker = 7
        assert log[marker] is None
        row = log.headers()[marker]
        assert (row["kind"], row["parent"], row["raw_len"], row["stored_len"]) == (2, 2, 0, 0)
        assert (log.head, log.last_summary_index) == (2, None)
        fork = log.append({"role": "user", "content": "another way"})  # 8
        assert log.path() == [0, 1, 2, fork]
        assert log.path(6) == [0, 1, 2, 3, 4, s, 6]
        log.rewind(-3)  # counted from the end: node 6
        assert (log.head, log.last_summary_index) == (6, 2)
        side = log.append({"role": "user", "content": "a child of 3"}, parent=3)  # 10
        assert (log.head, log.path(), log.last_summary_index) == (side, [0, 1, 2, 3, side], None)
        state = (len(log), log.head, log.path(), log.last_summary_index, list(log))
    for meta in ("kept", "missing", "damaged"):
        if meta == "missing":
            os.unlink(log_path / "meta")
        elif meta == "damaged":
            flip(log_path / "meta", 80)
        with MessageLog.open(log_path, readonly=True) as log:
            assert (len(log), log.head, log.path(), log.last_summary_index, list(log)) == state
        with MessageLog.open(log_path) as log:  # writes a fresh meta on close
            assert (len(log), log.head, log.path(), log.last_summary_index, list(log)) == state
        assert (log_path / "meta").exists()


def test_tree_errors(log_path):
    with open_log(log_path) as log:
        log.append_many(conversation())
        log.rewind(1)  # 5: a branch marker
        before = len(log)
        with pytest.raises(InvalidInputError):
            log.rewind(5)
        with pytest.raises(InvalidInputError):
            log.append({"role": "user", "content": "x"}, parent=5)
        for bad in (before, -1):  # a parent is a seq, never counted from the end
            with pytest.raises(LogIndexError):
                log.append({"role": "user", "content": "x"}, parent=bad)
        for bad in (before, -before - 1):  # others count from the end, as indexing does
            with pytest.raises(LogIndexError):
                log.rewind(bad)
            with pytest.raises(LogIndexError):
                log.path(bad)
            with pytest.raises(LogIndexError):
                log.node_id(bad)
        assert log.path(-2) == log.path(4)
        assert log.node_id(-1) == log.node_id(before - 1)
        with pytest.raises(InvalidTypeError):
            log.append({"role": "user", "content": "x"}, parent="1")
        with pytest.raises(InvalidTypeError):
            log.rewind(None)
        for covers in ((2, 1), (-1, 0), (0, before)):
            with pytest.raises(InvalidInputError):
                log.add_summary("s", covers)
        for level in (1, 4):
            with pytest.raises(InvalidInputError):
                log.add_summary("s", (0, 1), level=level)
        with pytest.raises(InvalidTypeError):
            log.add_summary(5, (0, 1))
        with pytest.raises(InvalidTypeError):
            log.add_summary("s", ("a", "b"))
        with pytest.raises(InvalidTypeError):
            log.add_summary("s", 3)
        assert len(log) == before
        log.verify()


def test_context_view(log_path):
    def message(role: str, content: str, **extra) -> dict:
        return {"role": role, "content": content, **extra}

    with open_log(log_path) as log:
        assert log.context_view() == []
        first = [
            message("system", "rules"),
            message("user", "pinned fact", pinned=True),
            message("assistant", "a2"),
            message("user", "u3"),
        ]
        log.append_many(first)
        assert log.context_view() == first  # no summary: every message
        log.add_summary("s1", (1, 3))  # 4
        log.append_many([message("user", "u5"), message("developer", "dev6")])  # 5, 6
        assert log.context_view() == [
            first[0],
            first[1],
            {"role": "system", "content": "Summary of an earlier part of the conversation:\ns1"},
            message("user", "u5"),
            message("developer", "dev6"),
        ]
        log.add_summary("g", (0, 6), level=3)  # 7
        for seq, name in ((8, "a"), (10, "b"), (12, "c"), (14, "d")):
            assert log.append(message("user", f"u{seq}")) == seq
            log.add_summary(name, (seq, seq))
        latest = [message("user", "latest"), message("assistant", "reply")]
        log.append_many(latest)  # 16, 17
        assert log.last_summary_index == 14
        segment = "Summary of an earlier part of the conversation:\n"
        assert log.context_view() == [
            first[0],
            first[1],
            message("developer", "dev6"),
            {"role": "system", "content": "Summary of the conversation so far:\ng"},
            {"role": "system", "content": segment + "b"},
            {"role": "system", "content": segment + "c"},
            {"role": "system", "content": segment + "d"},
            *latest,
        ]
        log.rewind(5)  # back before the level-3 summary
        assert log.context_view() == [
            first[0],
            first[1],
            {"role": "system", "content": segment + "s1"},
            message("user", "u5"),
        ]


# -- the lock, read-only use, durability, closing ----------------------------------------------


class Clock:
    """The lock's clock, injected: time passes only as the lock sleeps, and no
    sleep is real. ``sleeps`` is every wait asked for, in order; ``during[n]``
    (if set) runs in wait number ``n`` (1-based), as another writer letting
    go of the lock while this one waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.during: dict[int, Callable[[], object]] = {}

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        action = self.during.pop(len(self.sleeps), None)
        if action is not None:
            action()

    def restart(self) -> None:
        self.now = 0.0
        self.sleeps.clear()


def assert_polled_for(clock: Clock, seconds: float) -> None:
    """The lock waited ``seconds`` in all, in polls of at most LOCK_POLL_SECONDS."""
    assert clock.sleeps, "the lock never waited"
    assert max(clock.sleeps) <= reference_log.LOCK_POLL_SECONDS
    assert min(clock.sleeps) > 0
    assert sum(clock.sleeps) == pytest.approx(seconds)


def test_writer_lock(filled, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(reference_log, "time", clock)
    writer = MessageLog.open(filled)
    try:
        # lock_timeout=0 waits only the grace a reader's brief check may need.
        with pytest.raises(LogLockedError):
            MessageLog.open(filled)
        assert_polled_for(clock, reference_log.READER_GRACE_SECONDS)
        clock.restart()
        with pytest.raises(LogLockedError):
            MessageLog.repair(filled)
        assert_polled_for(clock, reference_log.READER_GRACE_SECONDS)
        clock.restart()
        with pytest.raises(LogLockedError):
            MessageLog.open(filled, lock_timeout=0.15)
        assert_polled_for(clock, 0.15)  # waited out the whole timeout, then gave up
        with MessageLog.open(filled, readonly=True) as reader:  # readers take no lock
            assert len(reader) == 5
        clock.restart()
        clock.during[3] = writer.close  # the writer lets go in the third wait
        with MessageLog.open(filled, lock_timeout=5) as second:
            # Polled, and took the lock at the first look after the writer let go.
            assert clock.sleeps == [reference_log.LOCK_POLL_SECONDS] * 3
            assert len(second) == 5
    finally:
        writer.close()


def test_readonly(filled):
    with MessageLog.open(filled, readonly=True) as reader:
        assert reader.readonly
        for write in (
            lambda: reader.append({"role": "user", "content": "x"}),
            lambda: reader.append_many([]),
            lambda: reader.add_summary("s", (0, 1)),
            lambda: reader.rewind(0),
        ):
            with pytest.raises(LogClosedError, match="read-only"):
                write()
        reader.flush()  # nothing to flush
        with MessageLog.open(filled) as writer:  # a reader sees what a writer appends
            writer.append({"role": "user", "content": "more"})
            assert len(reader) == 6
            assert reader[5] == {"role": "user", "content": "more"}
            assert reader.head == 5
    with pytest.raises(LogNotFoundError):
        MessageLog.open(filled.parent / "missing", readonly=True)


def test_a_file_truncated_under_a_reader(filled):
    with MessageLog.open(filled, readonly=True) as reader:
        assert len(reader) == 5
        os.truncate(filled / "data", 100)
        with pytest.raises(LogCorruptError, match="data"):
            reader[0]


@pytest.mark.parametrize("durability", ["always", "batch", "never"])
def test_durability(log_path, monkeypatch, durability):
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    with open_log(log_path, durability=durability) as log:
        synced.clear()
        log.append({"role": "user", "content": "one"})
        assert len(synced) == {"always": 2, "batch": len(synced), "never": 0}[durability]
        log.append_many([{"role": "user", "content": str(i)} for i in range(70)])
        if durability != "never":
            assert synced
        else:
            assert not synced
        log.flush()
        assert len(synced) >= 2
    with MessageLog.open(log_path) as log:
        assert len(log) == 71


def test_close(filled):
    log = MessageLog.open(filled)
    log.close()
    log.close()  # idempotent
    assert log.closed
    for operation in (
        len,
        list,
        lambda log: log[0],
        lambda log: log.read([0]),
        lambda log: log.append({"role": "user", "content": "x"}),
        lambda log: log.append_many([]),
        lambda log: log.add_summary("s", (0, 1)),
        lambda log: log.rewind(0),
        lambda log: log.headers(),
        lambda log: log.node_id(0),
        lambda log: log.head,
        lambda log: log.last_summary_index,
        lambda log: log.path(),
        lambda log: log.context_view(),
        lambda log: log.verify(),
        lambda log: log.flush(),
    ):
        with pytest.raises(LogClosedError):
            operation(log)
    with MessageLog.open(filled) as log:  # the lock was released
        pass
    with pytest.raises(LogClosedError):
        log.__enter__()


def test_invalid_arguments(tmp_path, filled):
    with pytest.raises(InvalidTypeError):
        MessageLog.open(42)
    with pytest.raises(LogNotFoundError):
        MessageLog.open(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(InvalidInputError):
        MessageLog.open(filled, durability="sometimes")
    with pytest.raises(InvalidInputError):
        MessageLog.open(tmp_path / "new", create=True, encoding="no_such_encoding")
    with pytest.raises(InvalidTypeError):
        MessageLog.open(filled, encoding=5)
    with pytest.raises(InvalidInputError):
        MessageLog.open(filled, lock_timeout=-1)
    with pytest.raises(InvalidTypeError):
        MessageLog.open(filled, lock_timeout="1")
    cycle: list = []
    cycle.append(cycle)
    with MessageLog.open(filled) as log:
        type_errors = [
            "not a dict",
            [("role", "user")],
            {"role": "user", "content": ("a", "tuple")},
            {"role": "user", "content": "x", "extra": {1, 2}},
            {"role": "user", "content": "x", "extra": b"bytes"},
            {"role": "user", "content": "x", "extra": {1: "int key"}},
            {"role": "user", "content": "x", "extra": object()},
            {"role": 5, "content": "x"},
            {"role": "user", "content": "x", "pinned": "yes"},
            {"role": "user", "content": "x", "priority": "high"},
        ]
        for message in type_errors:
            with pytest.raises(InvalidTypeError):
                log.append(message)
        input_errors = [
            {"content": "no role"},
            {"role": "user", "content": "lone \ud800 surrogate"},
            {"role": "user", "content": "x", "extra": cycle},
            {"role": "user", "content": "x", "tags": ["no_such_tag"]},
        ]
        for message in input_errors:
            with pytest.raises(InvalidInputError):
                log.append(message)
        fine = {"role": "user", "content": "x"}
        for keywords, error in (
            ({"tags": "constraint"}, InvalidTypeError),
            ({"tags": [1]}, InvalidTypeError),
            ({"tags": ["nope"]}, InvalidInputError),
            ({"weight": "heavy"}, InvalidTypeError),
            ({"pinned": 1}, InvalidTypeError),
            ({"priority": None, "timestamp": "now"}, InvalidTypeError),
            ({"timestamp": math.inf}, InvalidInputError),
            ({"priority": 1e300}, InvalidInputError),
        ):
            with pytest.raises(error):
                log.append(fine, **keywords)
        with pytest.raises(InvalidTypeError, match=r"messages\[1\]"):
            log.append_many([fine, (1, 2), fine])
        with pytest.raises(InvalidTypeError):
            log.append_many(fine)
        assert len(log) == 5  # nothing was written
        log.verify()


# -- the files, byte for byte ----------------------------------------------------------------------


def read_file_header(path: Path, magic: bytes) -> tuple[int, bytes]:
    raw = path.read_bytes()[:64]
    found, version, record_size, log_id, encoding, reserved, check, zero = struct.unpack(
        "<8sIIQ16s16sII", raw
    )
    assert (found, version, reserved, zero) == (magic, 1, bytes(16), 0)
    assert record_size == (64 if magic == b"CCLOGIDX" else 0)
    assert check == zlib.crc32(raw[:56])
    return log_id, encoding


def test_files_follow_the_format(log_path):
    with open_log(log_path) as log:
        log.append_many(conversation())
        log.add_summary("s", (0, 4), level=3)
        log.rewind(2)
    assert oct(log_path.stat().st_mode & 0o777) == "0o700"
    for name in ("index", "data", "meta", "lock"):
        assert oct((log_path / name).stat().st_mode & 0o777) == "0o600"
    log_id, encoding = read_file_header(log_path / "index", b"CCLOGIDX")
    assert encoding == b"o200k_base".ljust(16, b"\0")
    assert read_file_header(log_path / "data", b"CCLOGDAT") == (log_id, bytes(16))
    assert read_file_header(log_path / "meta", b"CCLOGMET") == (log_id, bytes(16))
    index, data = (log_path / "index").read_bytes(), (log_path / "data").read_bytes()
    offset = 64
    for seq in range(7):
        record = index[64 + 64 * seq : 128 + 64 * seq]
        fields = struct.unpack("<QQdQIIIffIBBBBI", record)
        assert (fields[0], fields[3], fields[-1]) == (seq, offset, zlib.crc32(record[:60]))
        stored_len = fields[4]
        assert data[offset : offset + 8] == b"CCFRAME1"
        assert data[offset + 8 : offset + 72] == record
        payload = data[offset + 72 : offset + 72 + stored_len]
        assert zlib.crc32(payload) == fields[9]
        end = offset + align8(72 + stored_len)
        assert data[offset + 72 + stored_len : end] == bytes(end - offset - 72 - stored_len)
        offset = end
    assert (fields[11], fields[13], fields[1], stored_len) == (2, 0, 2, 0)  # the branch marker
    assert not index[64 + 64 * 7 :].strip(b"\0")
    assert not data[offset:].strip(b"\0")
    meta = (log_path / "meta").read_bytes()
    count, head, summary, summary_last, data_end, reserved, check, zero = struct.unpack_from(
        "<QQQQQ16sII", meta, 64
    )
    assert (count, head, summary, summary_last, data_end) == (7, 2, NONE, NONE, offset)
    assert (len(meta), reserved, check, zero) == (128, bytes(16), zlib.crc32(meta[64:120]), 0)


def lz4_compress(data: bytes) -> bytes:
    """A naive LZ4 block encoder (greedy, longest match in the window), per the block format."""
    out = bytearray()

    def length(extra: int) -> None:
        while extra >= 255:
            out.append(255)
            extra -= 255
        out.append(extra)

    def sequence(literals: bytes, distance: int = 0, match: int = 0) -> None:
        out.append(min(len(literals), 15) << 4 | (min(match - 4, 15) if distance else 0))
        if len(literals) >= 15:
            length(len(literals) - 15)
        out.extend(literals)
        if distance:
            out.extend(distance.to_bytes(2, "little"))
            if match - 4 >= 15:
                length(match - 19)

    anchor = i = 0
    while i + 12 <= len(data):  # the last match starts 12 bytes before the end at the latest
        best, distance = 0, 0
        for j in range(max(0, i - 65535), i):
            k = 0
            while i + k < len(data) - 5 and data[j + k] == data[i + k]:
                k += 1
            if k > best:
                best, distance = k, i - j
        if best < 4:
            i += 1
            continue
        sequence(data[anchor:i], distance, best)
        i = anchor = i + best
    sequence(data[anchor:])
    return bytes(out)


def write_log_by_hand(path: Path, nodes: list[tuple[int, bytes, bytes, int]]) -> None:
    """A log written from docs/log-format.md alone: (kind, raw payload, stored payload, codec) each."""
    path.mkdir()
    log_id = 0x0123456789ABCDEF

    def header(magic: bytes, record_size: int, encoding: bytes) -> bytes:
        body = struct.pack("<8sIIQ16s16s", magic, 1, record_size, log_id, encoding, b"")
        return body + struct.pack("<II", zlib.crc32(body), 0)

    index = bytearray(header(b"CCLOGIDX", 64, b"o200k_base"))
    data = bytearray(header(b"CCLOGDAT", 0, b""))
    for seq, (kind, raw, stored, codec) in enumerate(nodes):
        parent = NONE if seq == 0 else seq - 1
        body = struct.pack(
            "<QQdQIIIffIBBBB",
            seq,
            parent,
            1.5e9 + seq,
            len(data),
            len(stored),
            len(raw),
            7,
            math.nan,
            0.0,
            zlib.crc32(raw),
            1,
            kind,
            0,
            codec << 4 | (2 << 6 if kind == 1 else 0),
        )
        record = body + struct.pack("<I", zlib.crc32(body))
        index += record
        frame = b"CCFRAME1" + record + stored
        data += frame + bytes(align8(len(frame)) - len(frame))
    (path / "index").write_bytes(bytes(index))
    (path / "data").write_bytes(bytes(data))


def test_reads_a_log_written_by_hand_with_lz4_payloads(log_path):
    long_message = {"role": "user", "content": "the same words again and again, " * 20}
    summary = {"summary": "ab" * 100, "covers": [0, 0], "level": 2}
    raw_long, raw_summary = payload_bytes(long_message), payload_bytes(summary)
    short = {"role": "assistant", "content": "ok"}
    write_log_by_hand(
        log_path,
        [
            (0, raw_long, lz4_compress(raw_long), 1),
            (1, raw_summary, lz4_compress(raw_summary), 1),
            (0, payload_bytes(short), payload_bytes(short), 0),
        ],
    )
    assert len(lz4_compress(raw_long)) < len(raw_long) // 2
    with MessageLog.open(log_path, readonly=True) as log:
        assert list(log) == [long_message, summary, short]
        assert (log.head, log.last_summary_index) == (2, 0)
        log.verify()
    with MessageLog.open(log_path) as log:  # a writer appends after the hand-made frames
        log.append({"role": "user", "content": "and one more"})
        log.verify()
    with MessageLog.open(log_path) as log:
        assert list(log)[:3] == [long_message, summary, short]
        assert len(log) == 4


# -- the LZ4 block decoder ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (b"\x00", b""),
        (b"\x50hello", b"hello"),
        (b"\xf0\x00" + b"fifteen bytes!!", b"fifteen bytes!!"),  # 15 literals: one extension byte, 0
        (b"\xf0\xff\x1e" + bytes(range(256)) + bytes(44), bytes(range(256)) + bytes(44)),  # 300 = 15+255+30
        (b"\x35abc\x03\x00\x50XYZ12", b"abc" + b"abcabcabc" + b"XYZ12"),  # a match overlapping its source
        (b"\x1fa\x01\x00\x4b\x50aaaaa", b"a" * 100),  # offset 1, match 4+15+75
        (b"\x4fabcd\x04\x00\xff\x0a\x50tail!", b"abcd" * 72 + b"tail!"),  # match 4+15+255+10 = 284
        (b"\x42wxyz\x02\x00\x10!", b"wxyz" + b"yzyzyz" + b"!"),
    ],
)
def test_lz4_hand_made_blocks(block, expected):
    assert decode_lz4_block(block, len(expected)) == expected


@pytest.mark.parametrize(
    "block",
    [
        b"\x40abc",  # literals run past the block
        b"\x10a\x00\x00\x50bbbbb",  # offset 0
        b"\x10a\x02\x00\x50bbbbb",  # offset past the output
        b"\x10a\x01",  # the offset cut off
        b"\xf0",  # a length cut off
        b"\x1fa\x01\x00\xff",  # a match length cut off
    ],
)
def test_lz4_malformed_blocks(block):
    with pytest.raises(ValueError, match="LZ4 block"):
        decode_lz4_block(block, 20)


def test_lz4_wrong_size():
    with pytest.raises(ValueError, match="LZ4 block"):
        decode_lz4_block(b"\x50hello", 4)
    with pytest.raises(ValueError, match="LZ4 block"):
        decode_lz4_block(b"\x50hello", 6)


@given(
    data=st.binary(max_size=300)
    | st.lists(st.sampled_from([b"ab", b"abc", b"x" * 20, b"\0", "中文".encode()]), max_size=60).map(b"".join)
)
def test_lz4_round_trips_through_a_naive_encoder(data):
    assert decode_lz4_block(lz4_compress(data), len(data)) == data


# -- recovery of torn tails -----------------------------------------------------------------------


def frame_offsets(path: Path) -> list[int]:
    with MessageLog.open(path, readonly=True) as log:
        return [int(o) for o in log.headers()["offset"]]


@pytest.mark.parametrize("into", [3, 20, 80, 100])  # the magic, the header copy, the payload, its end
def test_recovery_of_a_truncated_data_file(filled, into):
    offsets = frame_offsets(filled)
    os.truncate(filled / "data", offsets[-1] + into)
    with MessageLog.open(filled) as log:
        assert list(log) == conversation()[:4]
        log.verify()
        assert log.append({"role": "user", "content": "after"}) == 4
    with MessageLog.open(filled) as log:
        assert list(log) == [*conversation()[:4], {"role": "user", "content": "after"}]
        log.verify()


def test_recovery_of_a_truncated_padding(log_path):
    with open_log(log_path) as log:
        log.append({"role": "user", "content": "x"})  # a 28-byte payload: 4 bytes of padding
    (end,) = [64 + align8(72 + 28)]
    os.truncate(log_path / "data", end - 2)
    with MessageLog.open(log_path) as log:
        assert list(log) == [{"role": "user", "content": "x"}]
        log.append({"role": "user", "content": "y"})
        log.verify()


def test_recovery_of_garbage_after_the_last_record(filled):
    with open(filled / "index", "r+b") as index:
        index.seek(64 + 64 * 5)
        index.write(os.urandom(100))
    with open(filled / "data", "r+b") as data:
        data.seek(frame_offsets(filled)[-1] + 200)
        data.write(b"torn frame")
    with MessageLog.open(filled, readonly=True) as reader:  # readers see the valid prefix
        assert list(reader) == conversation()
        with pytest.raises(LogCorruptError, match=rf"index: offset {64 + 64 * 5}:"):
            reader.verify()
    with MessageLog.open(filled) as log:
        assert list(log) == conversation()
        log.verify()


@pytest.mark.parametrize("behind", [1, 3])
def test_recovery_of_an_index_behind_the_data(filled, behind):
    with open(filled / "index", "r+b") as index:
        index.seek(64 + 64 * (5 - behind))
        index.write(bytes(64 * behind))
    with MessageLog.open(filled, readonly=True) as reader:
        assert len(reader) == 5 - behind
    with MessageLog.open(filled) as log:  # the frames are indexed again
        assert list(log) == conversation()
        log.verify()


def test_recovery_cuts_a_last_frame_that_was_never_written(filled):
    """A torn tail: the last frame's sectors never reached the disk (zeros)."""
    start = frame_offsets(filled)[-1]
    with open(filled / "data", "r+b") as data:
        data.seek(start)
        data.write(bytes(frame_offsets_end(conversation()) - start))
    with MessageLog.open(filled) as log:
        assert list(log) == conversation()[:4]
        log.verify()


def test_recovery_refuses_a_last_frame_that_was_written_and_damaged(filled):
    """A flipped bit in the last payload is damage, not a torn write: nothing is cut."""
    flip(filled / "data", frame_offsets(filled)[-1] + 80)
    before = (filled / "index").read_bytes(), (filled / "data").read_bytes()
    with pytest.raises(LogCorruptError, match="record 4's frame is damaged, not torn") as caught:
        MessageLog.open(filled)
    assert (caught.value.file, caught.value.offset) == ("data", frame_offsets(filled)[-1])
    assert ((filled / "index").read_bytes(), (filled / "data").read_bytes()) == before
    report = MessageLog.repair(filled)  # the payload is gone, and nothing intact follows it
    assert (report.kept, report.lost) == (4, 0)
    assert any(f"offset {frame_offsets_end(conversation()[:4])}" in p for p in report.problems)


# -- damage: bit flips and repair ---------------------------------------------------------------------


def test_a_flipped_index_record(filled):
    flip(filled / "index", 64 + 64 * 2 + 20)
    # A reader cannot pass the first invalid slot, and must not hide the
    # intact records after it.
    with pytest.raises(LogCorruptError, match=rf"index: offset {64 + 64 * 2}: record 2 is damaged") as caught:
        MessageLog.open(filled, readonly=True)
    assert (caught.value.file, caught.value.offset) == ("index", 64 + 64 * 2)
    with MessageLog.open(filled) as writer:  # recovery indexes the intact frames again
        assert list(writer) == conversation()
        writer.verify()


@pytest.mark.parametrize(("where", "name"), [(8 + 20, "header"), (72 + 5, "payload")])
def test_a_flipped_frame(filled, where, name):
    offset = frame_offsets(filled)[2] + where
    flip(filled / "data", offset)
    expected_offset = frame_offsets(filled)[2] + (8 if name == "header" else 72)
    with MessageLog.open(filled) as log:
        assert log[1] == conversation()[1]
        with pytest.raises(LogCorruptError, match=rf"data: offset {expected_offset}:"):
            log[2]
        with pytest.raises(LogCorruptError, match=rf"data: offset {expected_offset}:") as caught:
            log.verify()
        assert str(filled / "data") in str(caught.value)
    report = MessageLog.repair(filled)
    assert isinstance(report, RepairReport)
    damaged_from, damaged_to = frame_offsets_end(conversation()[:2]), frame_offsets_end(conversation()[:3])
    if name == "header":  # the payload is intact: the frame is rebuilt from its index record
        assert (report.kept, report.lost, report.dropped_bytes) == (5, 0, 0)
        assert any("rebuilt from its index record" in p for p in report.problems)
        with MessageLog.open(filled) as log:
            assert list(log) == conversation()
            log.verify()
        return
    assert (report.kept, report.lost, report.dropped_bytes) == (4, 1, damaged_to - damaged_from)
    assert any(f"data: offset {damaged_from}:" in p for p in report.problems)
    assert any(f"index: offset {64 + 64 * 2}: record 2" in p for p in report.problems)
    with MessageLog.open(filled) as log:  # the frames after the damaged one are kept
        assert list(log) == [*conversation()[:2], None, *conversation()[3:]]
        assert (log.head, log.path(), log.last_summary_index) == (4, [0, 1, 3, 4], None)
        assert log.context_view() == [m for i, m in enumerate(conversation()) if i != 2]
        log.verify()
        assert log.append({"role": "user", "content": "again"}) == 5


def frame_offsets_end(batch: list[dict]) -> int:
    return 64 + sum(align8(72 + len(payload_bytes(m))) for m in batch)


@pytest.mark.parametrize("name", ["index", "data"])
@pytest.mark.parametrize(("offset", "where"), [(0, 0), (40, 56)])  # the magic; the reserved bytes (checksum)
def test_a_flipped_file_header(filled, name, offset, where):
    flip(filled / name, offset)
    for readonly in (True, False):
        with pytest.raises(LogCorruptError, match=rf"{name}: offset {where}:"):
            MessageLog.open(filled, readonly=readonly)


def test_a_flipped_meta_is_only_a_cache(filled):
    flip(filled / "meta", 0)
    with MessageLog.open(filled) as log:
        assert list(log) == conversation()
        assert log.head == 4


def test_repair_of_a_healthy_log(filled):
    old_id, _ = read_file_header(filled / "index", b"CCLOGIDX")
    report = MessageLog.repair(filled)
    assert report == RepairReport(kept=5, lost=0, dropped_bytes=0, problems=[])
    new_id, _ = read_file_header(filled / "index", b"CCLOGIDX")
    assert new_id != old_id
    assert read_file_header(filled / "data", b"CCLOGDAT") == (new_id, bytes(16))
    assert not (filled / "meta").exists()
    assert sorted(p.name for p in filled.iterdir()) == ["data", "index", "lock"]
    with MessageLog.open(filled) as log:
        assert list(log) == conversation()
        assert frame_offsets(filled) == [frame_offsets_end(conversation()[:i]) for i in range(5)]
        log.verify()


def test_repair_of_a_truncated_log_and_a_lost_index(filled):
    os.truncate(filled / "data", frame_offsets(filled)[3] + 30)
    flip(filled / "index", 0)
    report = MessageLog.repair(filled)
    # Nothing intact after the damage; the 30 bytes of the cut frame (to 8) are dropped.
    assert (report.kept, report.lost, report.dropped_bytes) == (3, 0, 32)
    assert any(p.startswith(str(filled / "index")) for p in report.problems)
    assert any(
        f"data: offset {frame_offsets_end(conversation()[:3])}:" in p and "no intact frame after it" in p
        for p in report.problems
    )
    with MessageLog.open(filled) as log:
        assert list(log) == conversation()[:3]
        assert log.encoding == "o200k_base"
        log.verify()


def branched(path: Path) -> list[int]:
    """A closed log with a summary and a branch; the offsets of its frames.

    0-4 conversation(), 5 summary of (0, 2), 6 its child, 7 branch marker back to 4, 8 child of 4."""
    with open_log(path) as log:
        log.append_many(conversation())
        log.add_summary("s", (0, 2))
        log.append({"role": "user", "content": "after the summary"})
        log.rewind(4)
        log.append({"role": "user", "content": "another way"})
        return [int(o) for o in log.headers()["offset"]]


def check_lost(row: np.void, seq: int) -> None:
    """A lost node's header: docs/log-format.md, "kind" and "Payload"."""
    assert row["check"] == zlib.crc32(row.tobytes()[:60])
    assert math.isnan(row["weight"])
    fields = {
        name: row[name].item() for name in HEADER_DTYPE.names if name not in ("offset", "weight", "check")
    }
    assert fields == {
        "seq": seq,
        "parent": NONE if seq == 0 else seq - 1,
        "timestamp": 0.0,
        "stored_len": 0,
        "raw_len": 0,
        "tokens": 0,
        "priority": 0.0,
        "hash": 0,  # crc32(b"")
        "role": 4,
        "kind": 3,
        "tags": 0,
        "flags": 0,
    }


def test_repair_keeps_every_intact_frame(log_path):
    offsets = branched(log_path)
    with MessageLog.open(log_path, readonly=True) as log:
        before = list(log)
    flip(log_path / "data", offsets[0] + 72 + 3)  # the root's payload
    flip(log_path / "data", offsets[3] + 8 + 30)  # node 3's header copy
    flip(log_path / "data", offsets[4])  # node 4's magic
    (log_path / "index").write_bytes(os.urandom(64 * 12))  # and the index is garbage
    report = MessageLog.repair(log_path)
    dropped = (offsets[1] - offsets[0]) + (offsets[5] - offsets[3])
    assert (report.kept, report.lost, report.dropped_bytes) == (6, 3, dropped)
    assert any(f"data: offset {offsets[0]}:" in p for p in report.problems)
    assert any(f"data: offset {offsets[3]}:" in p for p in report.problems)
    assert any(p.startswith(str(log_path / "index")) for p in report.problems)
    with MessageLog.open(log_path) as log:
        log.verify()
        expected = [None if seq in (0, 3, 4) else value for seq, value in enumerate(before)]
        assert list(log) == expected
        rows = log.headers()
        for seq in (0, 3, 4):
            check_lost(rows[seq], seq)
        assert [int(p) for p in rows["parent"]] == [NONE, 0, 1, 2, 3, 4, 5, 4, 4]
        # 7 rewound to 4 (now lost), 8 is its child: the path passes through lost nodes.
        assert (log.head, log.path(), log.last_summary_index) == (8, [1, 2, 8], None)
        assert log.path(6) == [1, 2, 5, 6]
        assert log.context_view() == [conversation()[1], conversation()[2], before[8]]
    second = MessageLog.repair(log_path)  # the placeholders are intact frames now
    assert second == RepairReport(kept=9, lost=0, dropped_bytes=0, problems=[])


def test_repair_finishes_after_a_crash_between_its_renames(filled):
    old_index = (filled / "index").read_bytes()
    flip(filled / "data", frame_offsets(filled)[1] + 80)
    MessageLog.repair(filled)
    (filled / "index").write_bytes(old_index)  # as if the index had not been renamed in yet
    with pytest.raises(LogCorruptError, match="log id"):
        MessageLog.open(filled)
    report = MessageLog.repair(filled)
    assert (report.kept, report.lost) == (5, 0)  # node 1 is a placeholder already
    with MessageLog.open(filled) as log:
        assert list(log) == [conversation()[0], None, *conversation()[2:]]
        log.verify()


def test_a_lost_node_is_readable(log_path):
    summary = payload_bytes({"summary": "s", "covers": [0, 0], "level": 2})
    message = payload_bytes({"role": "user", "content": "hello"})
    write_log_by_hand(
        log_path,
        [
            (0, message, message, 0),
            (1, summary, summary, 0),
            (3, b"", b"", 0),
            (0, message, message, 0),
            (3, b"", b"", 0),
        ],
    )
    with MessageLog.open(log_path, readonly=True) as log:
        assert list(log) == [json.loads(message), json.loads(summary), None, json.loads(message), None]
        assert log[2] is None
        assert log.read([-1]) == [None]
        assert list(log.headers()["kind"]) == [0, 1, 3, 0, 3]
        # A lost node moves the head as a message does, and is never on a path.
        assert (log.head, log.last_summary_index) == (4, 0)
        assert (log.path(), log.path(2)) == ([0, 1, 3], [0, 1])
        assert log.context_view() == [
            {"role": "system", "content": "Summary of an earlier part of the conversation:\ns"},
            json.loads(message),
        ]
        log.verify()
    with MessageLog.open(log_path) as log:
        assert log.append({"role": "user", "content": "a child of the lost node"}) == 5
        assert log.path() == [0, 1, 3, 5]
        log.rewind(2)  # a lost node is a place to branch from
        assert (log.head, log.path(), log.last_summary_index) == (2, [0, 1], 0)
        assert log.append({"role": "user", "content": "x"}, parent=4) == 7
        assert log.path() == [0, 1, 3, 7]
        log.verify()


@pytest.mark.parametrize(
    ("kind", "payload", "error"), [(3, b"{}", "lost node with a payload"), (4, b"", "kind 4")]
)
def test_a_bad_lost_node_or_unknown_kind(log_path, kind, payload, error):
    message = payload_bytes({"role": "user", "content": "hello"})
    write_log_by_hand(log_path, [(0, message, message, 0), (kind, payload, payload, 0)])
    if kind == 3:
        with MessageLog.open(log_path, readonly=True) as log, pytest.raises(LogCorruptError, match=error):
            log[1]
    else:
        with pytest.raises(LogCorruptError, match=error):
            MessageLog.open(log_path, readonly=True)


@pytest.mark.parametrize("what", ["append", "append_many", "repair"])
def test_a_failed_write_is_a_storage_error(filled, what):
    end = frame_offsets_end(conversation())
    big = [{"role": "user", "content": "words " * 400} for _ in range(3)]

    def work():
        if what == "repair":
            return MessageLog.repair(filled)
        with MessageLog.open(filled) as log:
            return log.append(big[0]) if what == "append" else log.append_many(big)

    limit = 100 if what == "repair" else end + 100  # inside the new data file; inside the next frame
    outcome = in_child_with_a_file_size_limit(limit, work)
    name, is_os_error, message = outcome.split("|", 2)
    assert (name, is_os_error) == ("LogStorageError", "True"), outcome
    assert "File too large" in message
    assert str(filled / ("data" if what != "repair" else "data.repair")) in message
    with MessageLog.open(filled) as log:  # nothing was committed
        assert list(log) == conversation()
        log.verify()
    assert issubclass(LogStorageError, OSError)


def test_repair_needs_a_log(tmp_path):
    with pytest.raises(LogNotFoundError):
        MessageLog.repair(tmp_path / "nothing")


def test_a_log_missing_a_file(filled):
    os.unlink(filled / "data")
    with pytest.raises(LogCorruptError, match="data"):
        MessageLog.open(filled)
