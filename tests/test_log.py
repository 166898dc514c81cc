"""The message log (Rust): round trips, headers, summaries, branches, locks,
crash recovery, corruption and repair."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import context_core
from context_core import (
    InvalidInputError,
    InvalidTypeError,
    LogClosedError,
    LogCorruptError,
    LogIndexError,
    LogLockedError,
    LogNotFoundError,
    MessageLog,
    WeightedWindow,
    reference,
)
from context_core.log import HEADER_DTYPE
from test_select import history

HISTORY = [
    {"role": "system", "content": "You are a careful agent. You must never delete user files."},
    {"role": "user", "content": "为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "curl -s http://localhost:8080/health\n" * 20},
    {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "plan"}, {"type": "text", "text": "Done. 🎉"}],
    },
    {"role": "user", "content": "thanks", "pinned": True, "priority": 2.5, "weight": 1.25},
]


@pytest.fixture
def where(tmp_path: Path) -> Path:
    return tmp_path / "log"


def filled(where: Path, **options) -> MessageLog:
    log = MessageLog.open(where, create=True, **options)
    log.append_many(HISTORY)
    return log


def test_messages_come_back_exactly_and_survive_reopening(where):
    with filled(where) as log:
        assert len(log) == len(HISTORY)
        assert log.read(range(len(HISTORY))) == HISTORY
        assert list(log) == HISTORY
        assert log[-1] == HISTORY[-1]
    with MessageLog.open(where) as log:
        assert list(log) == HISTORY
        assert log.head == len(HISTORY) - 1
        assert log.path() == list(range(len(HISTORY)))


def test_headers_hold_the_counts_and_tags_selection_would_find(where):
    oracle = reference.Tokenizer("o200k_base")
    with filled(where) as log:
        rows = log.headers()
        assert rows.dtype == HEADER_DTYPE
        assert rows.dtype.itemsize == 64
        assert not rows.flags.writeable
        assert list(rows["seq"]) == list(range(len(HISTORY)))
        assert list(rows["parent"]) == [2**64 - 1, 0, 1, 2, 3, 4]
        assert [int(t) for t in rows["tokens"]] == [oracle.count_messages([m]) - 3 for m in HISTORY]
        assert list(rows["role"]) == [0, 1, 2, 3, 2, 1]
        tag = context_core.select.tag
        tags = [tag(m["content"]) if isinstance(m["content"], str) else None for m in HISTORY]
        assert "constraint" in tags[0]
        assert "constraint" in tags[1]
        assert list(rows["tags"][:2] & 1) == [1, 1], "constraints are tagged"
        assert rows["tags"][3] & 8, "tool output with curl is a log"
        assert rows["flags"][2] & 2, "calls"
        assert rows["flags"][3] & 4, "results"
        assert rows["flags"][5] & 1
        assert rows["priority"][5] == 2.5
        assert rows["weight"][5] == 1.25
        assert np.isnan(rows["weight"][0])
        assert (rows["flags"][3] >> 4) & 3 == 1, "a long repetitive tool output is compressed"
        assert rows["stored_len"][3] < rows["raw_len"][3]


def test_headers_view_the_mapped_index_without_copying(where):
    with filled(where) as log:
        rows = log.headers()
        assert rows.base is not None
        assert not rows.flags.owndata
        log.append({"role": "user", "content": "one more"})
        assert len(log.headers()) == len(HISTORY) + 1


def test_append_overrides_and_node_ids(where):
    with MessageLog.open(where, create=True) as log:
        seq = log.append(
            {"role": "user", "content": "plain words"}, tags=["log"], weight=0.5, pinned=True, timestamp=1.5
        )
        row = log.headers()[seq]
        assert row["tags"] == 8
        assert row["weight"] == 0.5
        assert row["flags"] & 1
        assert row["timestamp"] == 1.5
        assert log.node_id(seq) == f"{1_500_000:x}-{int(row['hash']):08x}"


@pytest.mark.parametrize("impl", [MessageLog, reference.log.MessageLog])
def test_append_checks_its_keywords_alike(where, impl):
    message = {"role": "assistant", "content": "nothing to tag here"}
    with impl.open(where, create=True) as log:
        for tags in (["log", "pulse"], ("pulse", "log"), {"log", "pulse"}, (t for t in ["log", "pulse"])):
            seq = log.append(message, tags=tags)
            assert log.headers()[seq]["tags"] == 8 | 4
        refused = [
            {"tags": "log"},
            {"tags": {"log": 1}},
            {"tags": b"log"},
            {"pinned": 0},
            {"pinned": 1},
            {"weight": "0.5"},
            {"weight": True},
            {"priority": [1]},
            {"timestamp": "now"},
            {"parent": "0"},
            {"parent": True},
            {"parent": 1.0},
        ]
        for keywords in refused:
            with pytest.raises(InvalidTypeError):
                log.append(message, **keywords)
        with pytest.raises(InvalidInputError, match="unknown tag"):
            log.append(message, tags=["urgent"])
        with pytest.raises(LogIndexError):
            log.append(message, parent=2**70)
        seq = log.append(message, weight=1, priority=2, timestamp=3, pinned=True, parent=0)
        row = log.headers()[seq]
        assert (row["weight"], row["priority"], row["timestamp"], row["parent"]) == (1.0, 2.0, 3.0, 0)
        seq = log.append(message, pinned=None)
        assert not log.headers()[seq]["flags"] & 1, "None: not given"
        assert len(log) == 6, "nothing was written by the refused calls"
    with pytest.raises(LogClosedError):
        log.append(message)


@pytest.mark.parametrize("impl", [MessageLog, reference.log.MessageLog])
def test_seqs_levels_and_texts_are_checked_alike(where, impl):
    with impl.open(where, create=True) as log:
        log.append({"role": "user", "content": "one"})
        log.append({"role": "user", "content": "two"})
        bad_types = [
            lambda: log["0"],
            lambda: log[True],
            lambda: log.read(["0"]),
            lambda: log.read([0.0]),
            lambda: log.read("0"),
            lambda: log.rewind("0"),
            lambda: log.rewind(True),
            lambda: log.node_id(None),
            lambda: log.path("0"),
            lambda: log.path(False),
            lambda: log.add_summary("s", covers=("0", 0)),
            lambda: log.add_summary("s", covers=5),
            lambda: log.add_summary("s", covers=(0, 0), level="2"),
            lambda: log.add_summary(5, covers=(0, 0)),
        ]
        for call in bad_types:
            with pytest.raises(InvalidTypeError):
                call()
        for call in [
            lambda: log.add_summary("s", covers=(0, 0), level=300),
            lambda: log.add_summary("s", covers=(-1, 0)),
        ]:
            with pytest.raises(InvalidInputError):
                call()
        for call in [lambda: log[2**70], lambda: log.rewind(-(2**70))]:
            with pytest.raises(LogIndexError):
                call()
        # numpy's integers are seqs (headers() hands them out).
        seqs = log.headers()["seq"]
        assert log[seqs[1]] == {"role": "user", "content": "two"}
        assert log.read(seqs) == [log[0], log[1]]
        assert log.path(np.uint32(1)) == [0, 1]
        assert log.add_summary("s", covers=(np.int64(0), seqs[1])) == 2
        assert len(log) == 3


def test_append_can_be_patched_and_overridden(where):
    class Counting(MessageLog):
        calls = 0

        def append(self, message, **options):
            Counting.calls += 1
            return super().append(message, **options)

    with Counting.open(where / "sub", create=True) as log:
        assert log.append({"role": "user", "content": "one"}, weight=2.0) == 0
        assert Counting.calls == 1
        assert log.headers()[0]["weight"] == 2.0
    with MessageLog.open(where / "plain", create=True) as log:
        with mock.patch.object(MessageLog, "append", return_value=-1):
            assert log.append({"role": "user", "content": "two"}) == -1
        with mock.patch.object(log, "append", return_value=-2):
            assert log.append({"role": "user", "content": "three"}) == -2
        assert log.append({"role": "user", "content": "four"}) == 0


def test_summaries_move_the_pointer_and_shape_the_view(where):
    with filled(where) as log:
        seg = log.add_summary("the payment retry task was set up", covers=(1, 3))
        assert log.last_summary_index == 3
        assert log.head == seg
        assert log[seg] == {"summary": "the payment retry task was set up", "covers": [1, 3], "level": 2}
        log.append({"role": "user", "content": "next step"})
        view = log.context_view()
        assert view[0] == HISTORY[0], "the system message stays"
        assert view[1]["content"].endswith("the payment retry task was set up")
        assert view[2:] == [*HISTORY[4:], {"role": "user", "content": "next step"}]
        log.add_summary("everything so far", covers=(0, 7), level=3)
        assert log.last_summary_index == 7
    with MessageLog.open(where) as log:
        assert log.last_summary_index == 7
        view = log.context_view()
        # The system message and the pinned one stay, then the global summary.
        assert view[:2] == [HISTORY[0], HISTORY[5]]
        assert view[2]["content"].endswith("everything so far")
        assert view[3:] == [], "nothing after the summary's cover"


def test_branches_coexist_and_the_head_persists(where):
    with filled(where) as log:
        log.rewind(2)
        assert log.head == 2
        b = log.append({"role": "user", "content": "the other way"})
        assert log.path() == [0, 1, 2, b]
        assert log.path(5) == [0, 1, 2, 3, 4, 5], "the first branch is still there"
        assert log[b - 1] is None, "the branch marker has no payload"
    with MessageLog.open(where) as log:
        assert log.head == b
        assert log.path() == [0, 1, 2, b]
        with pytest.raises(InvalidInputError, match="branch marker"):
            log.rewind(b - 1)


def test_one_writer_many_readers(where):
    with filled(where) as writer:
        with pytest.raises(LogLockedError, match="another writer"):
            MessageLog.open(where)
        reader = MessageLog.open(where, readonly=True)
        assert len(reader) == len(HISTORY)
        writer.append({"role": "user", "content": "seen by the reader"})
        assert len(reader) == len(HISTORY) + 1
        assert reader[-1]["content"] == "seen by the reader"
        with pytest.raises(LogClosedError, match="read-only"):
            reader.append({"role": "user", "content": "no"})
        reader.close()
    with MessageLog.open(where, lock_timeout=0.05) as again:
        assert len(again) == len(HISTORY) + 1


@pytest.mark.parametrize("reference", [False, True], ids=["rust", "twin"])
def test_numbers_past_a_float_or_not_numbers_at_all_are_the_librarys_errors(tmp_path, reference):
    """An int past a float's range is as far out as infinity, an int
    subclass whose conversion fails is no number, and a float subclass is
    read as its own value: each log refuses them with its own errors."""
    from context_core import reference as twin

    class Broken(int):
        def __float__(self) -> float:
            raise ValueError("no float here")

    class Disguised(float):
        def __float__(self) -> float:
            return 1.0

    class Interrupting(int):
        def __float__(self) -> float:
            raise KeyboardInterrupt

    log_type = twin.MessageLog if reference else MessageLog
    for bad in (10**400, -(10**400), float("inf")):
        with pytest.raises(InvalidInputError, match="lock_timeout"):
            log_type.open(tmp_path / "log", create=True, lock_timeout=bad)
    with log_type.open(tmp_path / "log", create=True) as log:
        fine = {"role": "user", "content": "x"}
        with pytest.raises(InvalidTypeError, match="weight: expected a number"):
            log.append(fine, weight=Broken(5))
        with pytest.raises(InvalidInputError, match="timestamp: must be"):
            log.append(fine, timestamp=Disguised(1e300))
        log.append(fine, timestamp=Disguised(5.0))
        assert list(log.headers()["timestamp"]) == [5.0]
        with pytest.raises(KeyboardInterrupt):  # an interrupt is no bad number: it goes on
            log.append(fine, priority=Interrupting(3))
        assert len(log) == 1
    with pytest.raises(InvalidInputError, match="lock_timeout"):  # checked before the path
        log_type.repair(tmp_path / "nowhere", lock_timeout=float("nan"))


@pytest.mark.parametrize("reference", [False, True], ids=["rust", "twin"])
def test_numbers_the_header_cannot_hold_are_refused_by_both_logs(tmp_path, reference):
    """A time that is not seconds since the epoch up to the year 5138 (every
    later default stamp would follow it: one in milliseconds, 1.7e12, put
    the rest of the log in the far future) and a weight or priority that is
    not finite or beyond f32's range are refused, in the keywords and in
    the message alike."""
    from context_core import reference as twin

    opened = (twin.MessageLog if reference else MessageLog).open(tmp_path / "log", create=True)
    fine = {"role": "user", "content": "x"}
    with opened as log:
        for keywords in (
            {"timestamp": float("inf")},
            {"timestamp": float("-inf")},
            {"timestamp": float("nan")},
            {"timestamp": 1.7e12},
            {"timestamp": -1.0},
            {"timestamp": -5e-324},
            {"timestamp": 10**400},
            {"weight": -(10**400)},
            {"weight": 1e300},
            {"weight": float("inf")},
            {"priority": -1e39},
            {"priority": float("nan")},
        ):
            with pytest.raises(InvalidInputError) as keyword_error:
                log.append(fine, **keywords)
            with pytest.raises((InvalidInputError, InvalidTypeError)) as field_error:
                log.append({**fine, **keywords})
            if not reference:
                # Each named where it was given, the value in a few characters.
                (key,) = keywords
                assert str(keyword_error.value).startswith(f"{key}: ")
                assert str(field_error.value).startswith(f"message.{key}: ")
                assert len(str(keyword_error.value)) < 120
        assert len(log) == 0, "nothing was written by the refused calls"
        # A weight that is not finite is refused as a list's policy refuses it
        # (selection reads the stored message), even where a keyword overrides it.
        for weight in (float("nan"), float("-inf"), 10**400):
            with pytest.raises(InvalidInputError, match="weight: must be a finite number, not "):
                log.append({**fine, "weight": weight}, weight=1.0)
        assert len(log) == 0
        # The keywords override the message's own fields: those are then not
        # held to the header's range (a time past 1e11, a weight past f32's).
        log.append({**fine, "timestamp": float("inf"), "weight": 1e300}, timestamp=5.0, weight=1.0)
        assert len(log) == 1
        log.append(fine, weight=3.5, timestamp=5.0)
        log.append(fine)
        later = log.headers()["timestamp"]
        assert list(later[:2]) == [5.0, 5.0]
        assert later[2] > 5.0
        assert log.headers()["weight"][1] == 3.5


def _restamp_last(directory, when: float) -> None:
    """Sets the last node's timestamp in its index record and its frame's
    copy (checksums made again): a log an earlier version wrote."""
    import struct
    import zlib

    with MessageLog.open(directory, readonly=True) as log:
        last = len(log) - 1
        frame = int(log.headers()["offset"][last])
    for name, at in (("index", 64 + 64 * last), ("data", frame + 8)):
        path = directory / name
        raw = bytearray(path.read_bytes())
        record = raw[at : at + 64]
        record[16:24] = struct.pack("<d", when)
        record[60:64] = struct.pack("<I", zlib.crc32(bytes(record[:60])))
        raw[at : at + 64] = record
        path.write_bytes(bytes(raw))


@pytest.mark.parametrize("reference", [False, True], ids=["rust", "twin"])
def test_a_log_holding_a_time_out_of_range_still_takes_default_stamps(tmp_path, reference):
    """A log written before times were checked may end in milliseconds;
    only a time given is checked, so its default stamps still go in."""
    from context_core import reference as twin

    made = twin.MessageLog if reference else MessageLog
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append({"role": "user", "content": "x"}, timestamp=5.0)
    _restamp_last(tmp_path / "log", 1.8e12)
    with made.open(tmp_path / "log") as log:
        log.append({"role": "assistant", "content": "y"})
        log.append_many([{"role": "user", "content": "z"}])
        assert list(log.headers()["timestamp"]) == [1.8e12] * 3  # never before the last
        with pytest.raises(InvalidInputError, match="seconds since the epoch"):
            log.append({"role": "user", "content": "w"}, timestamp=1.8e12)
        log.verify()


def test_bad_input_is_refused_cleanly(where):
    with pytest.raises(LogNotFoundError):
        MessageLog.open(where)
    with MessageLog.open(where, create=True) as log:
        with pytest.raises(InvalidTypeError):
            log.append({"role": "user", "content": ("a", "tuple")})
        with pytest.raises(InvalidTypeError):
            log.append({"role": "user", "content": "x", 3: "int key"})
        with pytest.raises(InvalidTypeError):
            log.append(["not", "a", "dict"])
        with pytest.raises(LogIndexError):
            log[0]
        with pytest.raises(InvalidInputError):
            log.add_summary("nothing to cover", covers=(0, 0))
        assert len(log) == 0, "nothing was written by the refused calls"
        log.append({"role": "user", "content": "hello"})
        with pytest.raises(InvalidTypeError, match="now"):
            WeightedWindow().select(log, 1000, now="yesterday")
        with pytest.raises(InvalidInputError, match="now"):
            WeightedWindow().select(log, 1000, now=float("nan"))
    with pytest.raises(InvalidInputError, match="durability"):
        MessageLog.open(where, durability="sometimes")
    with pytest.raises(InvalidInputError, match="counts tokens in o200k_base"):
        MessageLog.open(where, encoding="cl100k_base")
    log = MessageLog.open(where)
    log.close()
    log.close()
    with pytest.raises(LogClosedError):
        len(log)


# -- crashes and damage ------------------------------------------------------------


def frame_ends(where: Path) -> list[int]:
    with MessageLog.open(where, readonly=True) as log:
        rows = log.headers().copy()
    return [int(o + ((72 + s + 7) // 8) * 8) for o, s in zip(rows["offset"], rows["stored_len"], strict=True)]


def test_a_torn_data_tail_is_cut(where):
    filled(where).close()
    ends = frame_ends(where)
    with open(where / "data", "r+b") as data:
        data.seek(ends[-2] + 20)
        data.write(b"\x00" * (ends[-1] - ends[-2] - 20))
    with MessageLog.open(where) as log:
        assert list(log) == HISTORY[:-1]
        log.append(HISTORY[-1])
        assert list(log) == HISTORY


def test_an_index_behind_its_data_is_rebuilt_from_the_frames(where):
    filled(where).close()
    os.remove(where / "meta")
    with open(where / "index", "r+b") as index:
        index.seek(64 + 64 * 4)
        index.write(b"\x00" * 128)
    with MessageLog.open(where) as log:
        assert list(log) == HISTORY
        log.verify()


def test_garbage_after_the_index_is_cleared(where):
    filled(where).close()
    with open(where / "index", "r+b") as index:
        index.seek(64 + 64 * len(HISTORY))
        index.write(os.urandom(64))
    with MessageLog.open(where) as log:
        assert list(log) == HISTORY
        log.append({"role": "user", "content": "after the garbage"})
    with MessageLog.open(where) as log:
        assert len(log) == len(HISTORY) + 1


@pytest.mark.parametrize(
    ("file", "offset", "names"), [("data", None, "data"), ("index", 64 + 64 * 2 + 40, "index")]
)
def test_a_flipped_bit_is_named_by_file_and_offset(where, file, offset, names):
    filled(where).close()
    if offset is None:
        offset = frame_ends(where)[1] + 72 + 5  # inside the payload of node 2
    with open(where / file, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x04]))
    with (
        MessageLog.open(where, readonly=True) as log,
        pytest.raises(LogCorruptError, match=rf"^{names}: damaged at byte \d+"),
    ):
        log.verify()


def test_a_wrong_magic_is_refused(where):
    filled(where).close()
    with open(where / "index", "r+b") as f:
        f.write(b"NOTALOG!")
    with pytest.raises(LogCorruptError, match="index: damaged at byte 0: wrong magic"):
        MessageLog.open(where, readonly=True)


def test_repair_rebuilds_a_frame_whose_header_copy_is_damaged(where):
    filled(where).close()
    ends = frame_ends(where)
    with open(where / "data", "r+b") as f:
        f.seek(ends[1] + 30)  # inside frame 2's header copy; its payload is intact
        f.write(b"\xff\xff")
    report = MessageLog.repair(where)
    assert (report.kept, report.lost) == (len(HISTORY), 0)
    assert "data: damaged at byte" in report.problems[0]
    assert "rebuilt from its index record" in report.problems[0]
    with MessageLog.open(where) as log:
        log.verify()
        assert list(log) == HISTORY


def test_repair_salvages_every_intact_record(where):
    filled(where).close()
    ends = frame_ends(where)
    with open(where / "data", "r+b") as f:
        f.seek(ends[1] + 80)  # inside frame 2's payload
        f.write(b"\xff\xff")
    report = MessageLog.repair(where)
    assert report.kept == len(HISTORY) - 1
    assert report.lost == 1
    assert report.problems
    assert "data: damaged at byte" in report.problems[0]
    with MessageLog.open(where) as log:
        log.verify()
        got = list(log)
        assert got[:2] == HISTORY[:2]
        assert got[2] is None
        assert got[3:] == HISTORY[3:]
        assert log.path() == [0, 1, 3, 4, 5]


# -- round trips --------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=300)},
    optional={"name": st.from_regex(r"[a-z]{1,8}", fullmatch=True), "extra": json_values},
)


@settings(deadline=None, max_examples=40)
@given(st.lists(messages, min_size=1, max_size=8))
def test_any_messages_round_trip(tmp_path_factory, batch):
    where = tmp_path_factory.mktemp("log") / "log"
    with MessageLog.open(where, create=True, durability="never") as log:
        log.append_many(batch)
        single = log.append(batch[0])
        assert log.read(range(len(batch))) == batch
        assert log[single] == batch[0]
    with MessageLog.open(where, readonly=True) as log:
        assert list(log)[: len(batch)] == batch
        log.verify()


def same_json(a, b) -> bool:
    """Equal with the same types all the way down (``1 == 1.0 == True`` is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


class Text(str):
    pass


class Number(int):
    pass


odd_values = st.one_of(
    json_values,
    st.tuples(json_values, json_values),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.builds(Text, st.text(max_size=20)),
    st.builds(Number, st.integers(-5, 5)),
    st.dictionaries(st.integers(0, 3), json_values, max_size=2),
    st.text(alphabet=st.characters(categories=("Cs",)), min_size=1, max_size=2),
)
kept_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=300)},
    optional={"extra": odd_values, "tool_call_id": st.from_regex(r"c[0-9]", fullmatch=True)},
)


@settings(deadline=None, max_examples=60)
@given(st.lists(kept_messages, min_size=1, max_size=6))
def test_a_message_kept_at_append_is_what_reading_it_back_gives(tmp_path_factory, batch):
    # A session keeps what it appends in the decoded cache, so the next
    # window does not decode it: the kept copy must be what the JSON reads
    # back as, types and all, or be left out of the cache.
    where = tmp_path_factory.mktemp("log") / "log"
    with MessageLog.open(where, create=True, durability="never") as log:
        for message in batch:
            try:
                seq = log.append(message)
            except (InvalidInputError, InvalidTypeError, ValueError):
                continue
            log._keep_appended(seq, message)
            kept = log._decoded.get(seq)
            decoded = log.read([seq])[0]
            if kept is not None:
                assert same_json(kept, decoded)
                assert kept is not message
                message["role"] = "changed after the append"  # the caller's dict is not the log's
                assert same_json(log._cached([seq])[0], decoded)
            else:
                plain = json.loads(json.dumps(message))
                assert not same_json(plain, message)  # left out only where a copy would differ


def test_a_message_that_cannot_be_kept_is_read_back_instead(tmp_path, monkeypatch):
    # A copy that fails (a dict changed by another thread while copied, say)
    # keeps nothing: the append stands, and the message is read back.
    import context_core.log as log_module

    def failing(value):
        raise RuntimeError("dictionary changed size during iteration")

    with MessageLog.open(tmp_path / "log", create=True, durability="never") as log:
        message = {"role": "user", "content": "hello"}
        seq = log.append(message)
        monkeypatch.setattr(log_module, "_plain_copy", failing)
        log._keep_appended(seq, message)
        assert seq not in log._decoded
        assert log._cached([seq]) == [message]


def large_batch(drawn: list[dict]) -> list[dict]:
    """Over the batch size (128 messages) and text size (64 KB) that
    append_many builds on every core."""
    text = "keep the retry idempotent; 必须保证一致性 " * 20
    filler = [{"role": "user", "content": f"{i}: {text}"} for i in range(150)]
    return drawn + HISTORY + filler + drawn


def stored(log: MessageLog) -> tuple[bytes, list]:
    """Every header field but the clock (and the checksum over it), and every payload."""
    headers = log.headers().copy()
    headers["timestamp"] = 0
    headers["check"] = 0
    return headers.tobytes(), list(log)


@settings(deadline=None, max_examples=15)
@given(st.lists(messages, min_size=1, max_size=6))
def test_a_large_batch_is_stored_as_one_message_at_a_time(tmp_path_factory, drawn):
    batch = large_batch(drawn)
    where = tmp_path_factory.mktemp("log")
    with (
        MessageLog.open(where / "batched", create=True, durability="never") as batched,
        MessageLog.open(where / "single", create=True, durability="never") as single,
    ):
        assert batched.append_many(batch) == list(range(len(batch)))
        for message in batch:
            single.append(message)
        assert stored(batched) == stored(single)
        assert list(batched) == batch


@pytest.mark.parametrize(
    "bad",
    [
        {"role": 5, "content": "a role that is an int"},
        {"role": "user", "content": ("a", "tuple")},
        {"role": "user", "content": "x", 3: "int key"},
        {"role": "user", "content": {1, 2}},
    ],
)
def test_a_large_batch_refuses_a_bad_message_as_a_small_one_does(where, bad):
    with MessageLog.open(where, create=True) as log:
        with pytest.raises(context_core.ContextCoreError) as small:
            log.append_many([bad])
        batch = large_batch([])
        batch.insert(100, bad)
        with pytest.raises(type(small.value)) as large:
            log.append_many(batch)
        assert str(large.value) == str(small.value).replace("messages[0]", "messages[100]")
        assert len(log) == 0, "nothing of a refused batch is written"


# -- selection on a log -------------------------------------------------------------


HEADER_POLICIES = {
    "weighted": lambda provider, cap: context_core.WeightedWindow(provider=provider, tool_result_cap=cap),
    "shape": lambda provider, cap: context_core.ShapeHistory(
        provider=provider, summary="Earlier: the migration was read.", tool_result_cap=cap
    ),
    "priority": lambda provider, cap: context_core.PriorityAssembly(provider=provider, tool_result_cap=cap),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("name", sorted(HEADER_POLICIES))
@settings(deadline=None, max_examples=30)
@given(data=st.data(), budget=st.integers(20, 3000), cap=st.sampled_from([None, 12, 40]))
def test_the_window_from_headers_is_the_window_from_messages(
    tmp_path_factory, provider, name, data, budget, cap
):
    """Stored counts, tags and flags (and tool results counted as cut) give
    exactly the choice made from the messages themselves."""
    messages = data.draw(history(provider))
    policy = HEADER_POLICIES[name](provider, cap)
    with MessageLog.open(tmp_path_factory.mktemp("log") / "log", create=True, durability="never") as log:
        if messages:
            log.append_many(messages)
        try:
            expected = policy.select(messages, budget)
        except (context_core.OverBudgetError, context_core.NothingToSendError) as error:
            with pytest.raises(type(error), match=re.escape(str(error))):
                policy.select(log, budget)
            return
        got = policy.select(log, budget)
    assert got.kept == expected.kept
    assert got.messages == expected.messages
    assert got.system == expected.system
    assert got.breakdown == expected.breakdown
    assert got.truncated == expected.truncated
    assert got.missing_dependencies == expected.missing_dependencies
    assert got.turns == expected.turns


def test_summaries_are_kept_and_counted_as_sent(where):
    with filled(where) as log:
        log.add_summary("the payment retry task was set up", covers=(1, 3))
        log.append({"role": "user", "content": "what next?"})
        selection = context_core.WeightedWindow().select(log, 200)
        sent = selection.messages
        # Sanitize merges the summary into the system message before it.
        assert context_core.select.SEGMENT_PREFIX in sent[0]["content"]
        assert selection.breakdown.segments > 0
        assert selection.breakdown.total == context_core.Tokenizer().count_messages(sent) <= 200
        assert sent[-1]["content"].endswith("what next?"), "the current input is kept"
        assert "pinned" not in str(sent), "metadata keys are not sent"


def test_a_long_log_keeps_what_the_same_messages_would(where):
    messages = []
    for i in range(3000):
        if i % 50 == 0:
            messages.append({"role": "user", "content": f"Constraint {i}: you must never skip tests."})
        else:
            messages.append({"role": "assistant" if i % 2 else "user", "content": f"step {i} " * (i % 13)})
    with MessageLog.open(where, create=True, durability="never") as log:
        log.append_many(messages)
        for budget in (500, 8000):
            policy = context_core.WeightedWindow(tool_result_cap=None)
            assert policy.select(log, budget).kept == policy.select(messages, budget).kept


def test_repair_reports_a_frame_cut_short(where):
    with MessageLog.open(where, create=True) as log:
        log.append_many([{"role": "user", "content": f"short {i}"} for i in range(5)])
        offsets = [int(o) for o in log.headers()["offset"]]
    os.truncate(where / "data", offsets[3] + 30)
    report = MessageLog.repair(where)
    assert (report.kept, report.lost, report.dropped_bytes) == (3, 0, 32)
    assert any(f"damaged at byte {offsets[3]}" in p for p in report.problems)
    with MessageLog.open(where) as log:
        assert [m["content"] for m in log] == ["short 0", "short 1", "short 2"]


def test_an_index_truncated_under_the_writer_is_an_error_at_its_next_read(where):
    """A plain append reads nothing through the map, so it skips the length
    check; the next call that reads makes it, and it is an error, not a SIGBUS."""
    writer = filled(where)
    os.truncate(where / "index", 64 + 64 * 2)
    writer.append({"role": "user", "content": "written past the cut"})
    with pytest.raises(LogCorruptError, match="index: damaged at byte"):
        writer[0]
    with pytest.raises(LogCorruptError, match="index: damaged at byte"):
        writer.headers()
    writer.close()


def test_a_file_truncated_under_a_reader_is_an_error_not_a_crash(where):
    filled(where).close()
    reader = MessageLog.open(where, readonly=True)
    assert len(reader) == len(HISTORY)
    os.truncate(where / "index", 64 + 64 * 2)
    with pytest.raises(LogCorruptError, match="index: damaged at byte 192: truncated under this reader"):
        len(reader)
    reader.close()
    reader = MessageLog.open(where, readonly=True)
    os.truncate(where / "data", 100)
    with pytest.raises(LogCorruptError, match="data: damaged at byte 100: truncated under this reader"):
        reader.read([0])
    reader.close()


@pytest.mark.parametrize("impl", ["extension", "reference"])
def test_os_errors_keep_their_class_and_fields(impl, where):
    """A log's OS-level failure is a LogStorageError and also the built-in
    class of the OS error, with ``errno``, ``strerror`` and ``filename``;
    the message is still ours."""
    import errno

    from context_core import errors
    from context_core.reference import MessageLog as ReferenceLog

    log_class = MessageLog if impl == "extension" else ReferenceLog
    with pytest.raises(LogNotFoundError) as missing:
        log_class.open(where)
    assert isinstance(missing.value, FileNotFoundError)
    assert (missing.value.errno, missing.value.filename) == (errno.ENOENT, str(where))
    assert str(missing.value).startswith(f"{where}: no message log")
    inside_a_file = "/dev/null/log"  # ENOTDIR on every Unix, root or not
    with pytest.raises(errors.LogStorageError) as failed:
        log_class.open(inside_a_file, create=True)
    error = failed.value
    assert isinstance(error, NotADirectoryError)
    assert type(error).__name__ == "LogStorageError"
    assert (error.errno, error.strerror) == (errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    assert error.filename.startswith("/dev/null")
    assert str(error).startswith("/dev/null")
    assert "could not" in str(error)


def test_a_storage_error_takes_the_class_python_gives_its_errno():
    import errno

    from context_core.errors import LogStorageError, storage_error

    denied = storage_error("data: could not write: Permission denied", errno.EACCES, "/x/data")
    assert isinstance(denied, PermissionError)
    assert isinstance(denied, LogStorageError)
    assert str(denied) == "data: could not write: Permission denied"
    assert type(storage_error("m", errno.EACCES, "f")) is type(denied)  # one class per built-in
    full = storage_error("data: could not write: No space left", errno.ENOSPC, "/x/data")
    assert type(full) is LogStorageError
    assert full.errno == errno.ENOSPC
    assert type(storage_error("m", None, None)) is LogStorageError


def test_storage_errors_pickle_and_copy_with_their_class_and_fields():
    """An error raised in a worker process reaches the parent whole."""
    import copy
    import errno
    import pickle

    from context_core.errors import LogStorageError, memory_storage_error, storage_error

    made = [
        storage_error("index: could not map: Permission denied", errno.EACCES, "/x/index"),
        storage_error("data: could not write: No space left", errno.ENOSPC, "/x/data"),
        memory_storage_error("MEMORY.md: Operation not permitted", PermissionError(errno.EPERM, "no"), "/m"),
    ]
    try:
        MessageLog.open("/tmp/no-log-here-at-all")
    except LogNotFoundError as error:
        made.append(error)
    for error in made:
        for again in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
            assert type(again) is type(error)
            assert (str(again), again.errno, again.strerror, again.filename) == (
                str(error),
                error.errno,
                error.strerror,
                error.filename,
            )
    assert isinstance(pickle.loads(pickle.dumps(made[0])), PermissionError)
    assert type(storage_error("m", errno.EAGAIN, "f")) is LogStorageError  # never a BlockingIOError


@pytest.mark.parametrize(
    ("payloads", "expected"),
    [
        (
            [b'{"role": "user", "content": "hi"}', b"", b"[1, 2]"],
            [{"role": "user", "content": "hi"}, None, [1, 2]],
        ),
        ([b"1,2", b"3"], None),  # one array of three values from two payloads: not taken
        ([b'{"a": 1', b"}"], None),  # halves of one value
        ([b'"x"]', b'["y"'], None),
    ],
)
def test_payloads_read_together_decode_as_each_would_alone(tmp_path, payloads, expected):
    """A read parses its payloads as one array, and keeps that only if it
    gives one value per payload; a crafted payload still reads as corrupt."""

    class Crafted(MessageLog):
        def _read(self, seqs):
            return [payloads[i] for i in seqs]

    log = Crafted.open(tmp_path / "log", create=True)
    try:
        if expected is None:
            with pytest.raises(LogCorruptError, match="not the JSON of a message"):
                log.read(range(len(payloads)))
        else:
            assert log.read(range(len(payloads))) == expected
    finally:
        log.close()
