"""Damage, crafted files and misuse, on the Rust log and its twin alike: no
intact acknowledged record is ever cut, no input aborts, hangs or sizes a
buffer by a length the file cannot hold, and verify finds what readers cannot
see."""

from __future__ import annotations

import json
import os
import random
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import (
    InvalidInputError,
    InvalidTypeError,
    LogCorruptError,
    LogNotFoundError,
    LogStorageError,
    MessageLog,
    reference,
)
from limits import in_child

LOGS = {"rust": MessageLog, "twin": reference.log.MessageLog}
impls = pytest.mark.parametrize("impl", LOGS.values(), ids=LOGS.keys())
NODE = struct.Struct("<QQdQIIIffIBBBB")


def message(n: int) -> dict:
    """Sizes from a few bytes to a few KB; some compress (LZ4), some do not."""
    body = f"message {n}: " + "retry the payment with backoff; " * (n % 9) * 8
    noise = random.Random(n).randbytes(n % 4 * 50).hex()
    return {"role": ("user", "assistant", "tool")[n % 3], "content": body + noise, "n": n}


def written(where: Path, impl: type, count: int) -> list[dict]:
    messages = [message(n) for n in range(count)]
    with impl.open(where, create=True, durability="never") as log:
        log.append_many(messages[: count // 2])
        for m in messages[count // 2 :]:
            log.append(m)
    return messages


def records(where: Path) -> list[tuple]:
    """Every valid-looking index record, as the NODE fields."""
    index = (where / "index").read_bytes()
    rows = []
    for at in range(64, len(index) - 63, 64):
        body = index[at : at + 60]
        if body.strip(b"\0") and zlib.crc32(body) == struct.unpack_from("<I", index, at + 60)[0]:
            rows.append(NODE.unpack(body))
    return rows


def frame(row: tuple) -> tuple[int, int]:
    """(offset, length) of a record's frame, padding aside."""
    return row[3], 72 + row[4]


def flip(path: Path, offset: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ mask]))


def put_record(where: Path, slot: int, fields: tuple, *, frame_too: bool = True) -> None:
    """Write a record with a valid checksum (a crafted file, or a buggy writer),
    in the index and (``frame_too``) in its frame's header copy."""
    body = NODE.pack(*fields)
    record = body + struct.pack("<I", zlib.crc32(body))
    with open(where / "index", "r+b") as index:
        index.seek(64 + 64 * slot)
        index.write(record)
    if frame_too:
        with open(where / "data", "r+b") as data:
            data.seek(fields[3] + 8)
            data.write(record)


# -- 1. mid-log damage is not a torn tail ---------------------------------------------------


@impls
@pytest.mark.parametrize("checkpoint", [False, True], ids=["no meta", "meta"])
def test_damage_mid_log_never_cuts_the_intact_records_after_it(tmp_path, impl, checkpoint):
    where = tmp_path / "log"
    messages = written(where, impl, 121)
    rows = records(where)
    if not checkpoint:
        os.remove(where / "meta")
    flip(where / "index", 64 + 64 * 20 + 40)  # record 20's token count
    offset, length = frame(rows[20])
    flip(where / "data", offset + length - 3)  # inside its payload
    before = {name: (where / name).read_bytes() for name in ("index", "data")}
    refused = None
    try:
        writer = impl.open(where)
    except LogCorruptError as error:
        refused = error
    if refused is not None:
        # Refused, naming the damage and the way out, and nothing was written.
        assert (refused.file, refused.offset) == ("index", 64 + 64 * 20)
        assert "record 20 is damaged, yet 100 later records are intact" in str(refused)
        assert "repair" in str(refused)
        assert {name: (where / name).read_bytes() for name in ("index", "data")} == before
        with pytest.raises(LogCorruptError, match="record 20 is damaged"):
            impl.open(where, readonly=True)
    else:
        # Opened from the checkpoint: nothing cut, the damage reported where it is.
        with writer:
            assert len(writer) == 121
            assert writer.read([19, 21, 120]) == [messages[19], messages[21], messages[120]]
            with pytest.raises(LogCorruptError) as caught:
                writer.verify()
            assert (caught.value.file, caught.value.offset) == ("index", 64 + 64 * 20)
    report = impl.repair(where)
    assert (report.kept, report.lost) == (120, 1)
    with impl.open(where) as log:
        log.verify()
        assert list(log) == [None if n == 20 else m for n, m in enumerate(messages)]


@impls
def test_a_damaged_index_record_is_not_hidden_from_readers_and_a_writer_indexes_it_again(tmp_path, impl):
    where = tmp_path / "log"
    messages = written(where, impl, 60)
    os.remove(where / "meta")
    flip(where / "index", 64 + 64 * 20 + 3)
    with pytest.raises(LogCorruptError, match="record 20 is damaged, yet 39 later records") as caught:
        impl.open(where, readonly=True)
    assert (caught.value.file, caught.value.offset) == ("index", 64 + 64 * 20)
    assert "indexes them again" in str(caught.value)
    with impl.open(where) as writer:  # the frames are intact: the index is rebuilt from them
        assert list(writer) == messages
        writer.verify()
    with impl.open(where, readonly=True) as reader:
        assert list(reader) == messages


@impls
def test_verify_finds_records_past_the_end_that_readers_cannot_see(tmp_path, impl):
    where = tmp_path / "log"
    messages = written(where, impl, 10)
    reader = impl.open(where, readonly=True)
    reader.verify()
    # A record two slots past the end, valid for its slot, with no writer to blame.
    last = records(where)[-1]
    stray = (12, 11, 1.0, last[3], *last[4:])
    put_record(where, 12, stray, frame_too=False)
    with pytest.raises(LogCorruptError) as caught:
        reader.verify()
    assert (caught.value.file, caught.value.offset) == ("index", 64 + 64 * 10)
    with pytest.raises(LogCorruptError, match="record 10 is damaged, yet 1 later records are intact"):
        impl.open(where, readonly=True)
    assert reader.read([9]) == [messages[9]]
    reader.close()


@impls
def test_a_torn_tail_is_reported_by_verify_and_cut_by_a_writer(tmp_path, impl):
    where = tmp_path / "log"
    messages = written(where, impl, 8)
    offset, length = frame(records(where)[-1])
    data_end = (offset + length + 7) // 8 * 8
    with open(where / "data", "r+b") as data:  # half a frame: magic and garbage
        data.seek(data_end)
        data.write(b"CCFRAME1" + os.urandom(40))
    with impl.open(where, readonly=True) as reader:
        assert list(reader) == messages
        with pytest.raises(LogCorruptError, match="a torn tail follows the last record"):
            reader.verify()
    with impl.open(where) as writer:
        writer.verify()
        writer.append(message(8))
    with impl.open(where, readonly=True) as reader:
        reader.verify()
        assert list(reader) == [*messages, message(8)]


# -- 3. crafted headers: no abort, no hang, no allocation the file cannot back ---------------


def operate(impl: type, where: Path) -> list[str]:
    """Open as a reader and a writer, read, walk, verify, repair: what each did."""
    done = []
    for step in ("reader", "path", "writer", "rewind", "verify", "repair", "reopen"):
        try:
            if step == "reader":
                with impl.open(where, readonly=True) as log:
                    log.read(range(len(log)))
            elif step == "path":
                with impl.open(where, readonly=True) as log:
                    log.path()
            elif step == "writer":
                with impl.open(where) as log:
                    log.append(message(99))
            elif step == "rewind":
                with impl.open(where) as log:
                    log.rewind(len(log) - 1)
            elif step == "verify":
                with impl.open(where, readonly=True) as log:
                    log.verify()
            elif step == "repair":
                impl.repair(where)
            else:
                with impl.open(where) as log:
                    log.verify()
                    list(log)
            done.append(f"{step}: ok")
        except (LogCorruptError, LogStorageError) as error:
            done.append(f"{step}: {type(error).__name__}")
    return done


CRAFTED = {
    # A length near 4 GiB in both copies of the header: nothing may be sized by it.
    "huge raw lengths": lambda r: (*r[:4], 0xFFFF_FFFF, 0xFFFF_FFFF, *r[6:13], r[13] & 0x0F),
    "huge LZ4 length": lambda r: (*r[:4], r[4], 0xFFFF_FFFF, *r[6:13], (r[13] & 0x0F) | 0x10),
    "its own parent": lambda r: (r[0], r[0], *r[2:]),
    "a later parent": lambda r: (r[0], r[0] + 3, *r[2:]),
}


@impls
@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
@pytest.mark.parametrize("slot", [5, 9], ids=["mid-log", "last"])
@pytest.mark.parametrize("checkpoint", [False, True], ids=["no meta", "meta"])
def test_crafted_headers_with_valid_checksums(tmp_path, impl, craft, slot, checkpoint):
    where = tmp_path / "log"
    written(where, impl, 10)
    if not checkpoint:
        os.remove(where / "meta")
    put_record(where, slot, craft(records(where)[slot]))
    outcome = in_child(lambda: operate(impl, where), memory_headroom=768 << 20, seconds=120)
    assert outcome.startswith("returned "), outcome  # not killed: no abort, no hang
    # Whatever was refused, repair leaves a log that opens and verifies.
    assert "reopen: ok" in outcome, outcome


@impls
def test_a_parent_cycle_behind_a_checkpoint_is_refused_not_walked(tmp_path, impl):
    where = tmp_path / "log"
    written(where, impl, 12)
    rows = records(where)
    put_record(where, 5, (5, 8, *rows[5][2:]))  # 8 -> 7 -> 6 -> 5 -> 8 ...

    def walk() -> list[str]:
        outcomes = []
        for head in (8, 11):
            try:
                with impl.open(where) as log:
                    log.rewind(head)
                    outcomes.append(f"{head}: {log.path()}")
            except LogCorruptError as error:
                outcomes.append(f"{head}: {error.reason}")
        return outcomes

    outcome = in_child(walk, seconds=60)
    assert outcome.startswith("returned "), outcome
    assert "later parent" in outcome or "not an earlier node" in outcome, outcome


# -- the damage matrix ------------------------------------------------------------------------

spots = st.lists(
    st.tuples(
        st.sampled_from(["index", "data", "meta"]),
        st.floats(0, 1, exclude_max=True),
        st.sampled_from(["flip", "zero", "garbage"]),
        st.integers(1, 96),
    ),
    min_size=1,
    max_size=3,
)


def damage(where: Path, name: str, at: float, how: str, size: int, rng: random.Random) -> None:
    path = where / name
    length = path.stat().st_size
    if name != "meta":  # the written part, not the reserved zeros
        length = len(path.read_bytes().rstrip(b"\0"))
    offset = int(at * length)
    with open(path, "r+b") as file:
        file.seek(offset)
        old = file.read(size if how != "flip" else 1)
        file.seek(offset)
        if how == "flip":
            file.write(bytes([old[0] ^ (1 << rng.randrange(8))]) if old else b"")
        elif how == "zero":
            file.write(bytes(len(old)))
        else:
            file.write(rng.randbytes(len(old)))


@settings(deadline=None, max_examples=30)
@given(impl=st.sampled_from(sorted(LOGS)), hits=spots, seed=st.integers(0, 2**32))
def test_no_intact_acknowledged_record_is_lost_to_open_verify_or_repair(tmp_path_factory, impl, hits, seed):
    cls = LOGS[impl]
    where = tmp_path_factory.mktemp("matrix") / "log"
    messages = written(where, cls, 40)
    rows = records(where)
    data = (where / "data").read_bytes()
    rng = random.Random(seed)
    for hit in hits:
        damage(where, *hit, rng)
    after = (where / "data").read_bytes()
    spans = [(row[3], row[3] + 72 + row[4]) for row in rows]
    intact = {n for n, (start, end) in enumerate(spans) if after[start:end] == data[start:end]}
    appended = None
    try:  # a writer's open: refuses, or opens and appends
        with cls.open(where) as writer:
            appended = writer.append({"role": "user", "content": "after the damage"})
    except LogCorruptError:
        pass
    for attempt in (lambda log: log.verify(), lambda log: list(log)):
        try:
            with cls.open(where, readonly=True) as reader:
                attempt(reader)
        except LogCorruptError:
            pass
    report = cls.repair(where)
    for opener in LOGS.values():  # the repaired log reads the same through both
        with opener.open(where, readonly=True) as log:
            log.verify()
            got = list(log)
            for n in intact:
                assert got[n] == messages[n], f"record {n}, intact on disk, was lost: {report}"
            if appended is not None:
                assert got[appended] == {"role": "user", "content": "after the damage"}


# -- 7. special files --------------------------------------------------------------------------


@impls
@pytest.mark.parametrize("name", ["index", "data", "meta", "lock"])
def test_a_fifo_in_a_files_place_is_refused_without_hanging(tmp_path, impl, name):
    where = tmp_path / "log"
    messages = written(where, impl, 3)
    os.remove(where / name)
    os.mkfifo(where / name)

    def open_both() -> list[str]:
        outcomes = []
        for readonly in (True, False):
            try:
                with impl.open(where, readonly=readonly) as log:
                    outcomes.append(f"opened {len(log)}")
            except (InvalidInputError, LogStorageError) as error:
                outcomes.append(type(error).__name__)
        return outcomes

    outcome = in_child(open_both, seconds=30)
    assert outcome.startswith("returned "), outcome
    if name in ("index", "data"):
        assert outcome == "returned ['InvalidInputError', 'InvalidInputError']", outcome
    elif name == "meta":  # only a cache: skipped
        assert outcome == f"returned ['opened {len(messages)}', 'opened {len(messages)}']", outcome
    else:  # readers never touch the lock; a writer refuses it
        assert outcome == f"returned ['opened {len(messages)}', 'InvalidInputError']", outcome


@impls
def test_headers_map_the_file_the_log_opened_not_a_link_put_in_its_place(tmp_path, impl):
    where, other = tmp_path / "log", tmp_path / "other"
    written(where, impl, 4)
    written(other, impl, 9)
    ours = [row[2] for row in records(where)]  # timestamps: the two logs differ there
    assert ours != [row[2] for row in records(other)][:4]
    with impl.open(where, readonly=True) as log:
        os.rename(where / "index", where / "index.old")
        os.symlink(other / "index", where / "index")
        assert list(log.headers()["timestamp"]) == ours


# -- 9. a failed repair leaves nothing behind --------------------------------------------------


@impls
def test_a_repair_that_runs_out_of_space_leaves_no_temporary_file(tmp_path, impl):
    where = tmp_path / "log"
    messages = written(where, impl, 30)
    flip(where / "data", frame(records(where)[3])[0] + 80)
    outcome = in_child(lambda: impl.repair(where), file_size=4096)
    assert outcome.split("|")[0] == "LogStorageError", outcome
    assert sorted(p.name for p in where.iterdir()) == ["data", "index", "lock", "meta"]
    report = impl.repair(where)  # room again: it works, and so does the writer
    assert (report.kept, report.lost) == (29, 1)
    with impl.open(where) as log:
        log.append(message(30))
        assert len(log) == 31
        assert log[29] == messages[29]


# -- 10. arguments --------------------------------------------------------------------------------


@impls
@pytest.mark.parametrize(
    "options",
    [
        {"lock_timeout": None},
        {"lock_timeout": True},
        {"lock_timeout": "1"},
        {"durability": None},
        {"durability": 1},
        {"encoding": 5},
        {"create": 1},
        {"readonly": "yes"},
    ],
)
def test_open_refuses_bad_options_with_its_own_errors(tmp_path, impl, options):
    with pytest.raises(InvalidTypeError):
        impl.open(tmp_path / "log", **{"create": True, **options})
    assert not (tmp_path / "log" / "index").exists()


@impls
def test_open_and_repair_refuse_a_bytes_path(tmp_path, impl):
    with pytest.raises(InvalidTypeError):
        impl.open(os.fsencode(tmp_path / "log"), create=True)
    with pytest.raises(InvalidTypeError):
        impl.repair(os.fsencode(tmp_path / "log"))
    written(tmp_path / "log", impl, 2)
    with pytest.raises(InvalidTypeError):
        impl.repair(tmp_path / "log", lock_timeout=True)


# -- 13. lone surrogates and closing ---------------------------------------------------------------


@impls
@pytest.mark.parametrize(
    "bad",
    [
        {"role": "user", "content": "half a pair: \ud83d"},
        {"role": "user", "content": "fine", "\udcff": 1},
        {"role": "user", "content": [{"type": "text", "text": "\udc80"}]},
    ],
)
def test_a_lone_surrogate_is_refused_never_stored_changed(tmp_path, impl, bad):
    with impl.open(tmp_path / "log", create=True) as log:
        with pytest.raises(InvalidInputError, match="surrogate"):
            log.append(bad)
        big = [{"role": "user", "content": f"{i} " + "text " * 120} for i in range(200)]
        with pytest.raises(InvalidInputError, match="surrogate"):
            log.append_many([*big, bad])
        assert len(log) == 0
        log.append({"role": "user", "content": "an emoji is fine: 😀"})
        assert log[0]["content"] == "an emoji is fine: 😀"


def open_files_in(where: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(where)):
            found.append(os.path.basename(target))
    return sorted(found)


@impls
@pytest.mark.parametrize("readonly", [False, True])
def test_close_closes_the_files(tmp_path, impl, readonly):
    where = tmp_path / "log"
    written(where, impl, 3)
    log = impl.open(where, readonly=readonly)
    assert open_files_in(where)
    log.close()
    assert open_files_in(where) == []
    assert log.closed


# -- what the fuzzer found (fuzz/fuzz_targets/log_reader.rs) -------------------------------------


def fix_file_header(path: Path, encoding: bytes) -> None:
    """Give the index header another encoding name, with a valid checksum."""
    raw = bytearray(path.read_bytes())
    raw[24:40] = encoding.ljust(16, b"\0")
    raw[56:60] = struct.pack("<I", zlib.crc32(bytes(raw[:56])))
    path.write_bytes(bytes(raw))


@impls
def test_repair_never_keeps_an_encoding_no_log_can_open_with(tmp_path, impl):
    where = tmp_path / "log"
    messages = written(where, impl, 5)
    fix_file_header(where / "index", b"o200")
    with pytest.raises(LogCorruptError, match="encoding"):
        impl.open(where, readonly=True)
    report = impl.repair(where)
    assert any("o200k_base" in problem for problem in report.problems)
    with impl.open(where) as log:
        log.verify()
        assert list(log) == messages


@impls
def test_repair_drops_a_summary_frame_that_covers_nothing(tmp_path, impl):
    """Its checksums hold but its payload has no covers: kept, the rebuilt
    log would not open (its summary pointer cannot be read)."""
    where = tmp_path / "log"
    with impl.open(where, create=True) as log:
        log.append_many([message(n) for n in range(4)])
        log.add_summary("first two", (0, 1))
        log.append(message(4))
    rows = records(where)
    offset, length = frame(rows[4])
    payload = b'{"summary":"no covers here","level":2}'
    with open(where / "data", "r+b") as data:  # same length, valid hash
        data.seek(offset + 72)
        data.write(payload.ljust(length - 72, b" "))
    new_hash = zlib.crc32(payload.ljust(length - 72, b" "))
    put_record(where, 4, (*rows[4][:9], new_hash, *rows[4][10:]))
    report = impl.repair(where)
    assert (report.kept, report.lost) == (5, 1)
    with impl.open(where) as log:
        log.verify()
        assert log[4] is None
        assert log[5] == message(4)


@impls
def test_a_frame_claiming_a_seq_far_ahead_is_damage_not_a_million_placeholders(tmp_path, impl):
    where = tmp_path / "log"
    written(where, impl, 6)
    rows = records(where)
    put_record(where, 5, (10**12, 4, *rows[5][2:]))  # index and frame alike

    def repair() -> tuple:
        report = impl.repair(where)
        with impl.open(where) as log:
            return report.kept, report.lost, len(log)

    outcome = in_child(repair, memory_headroom=512 << 20)
    assert outcome == "returned (5, 0, 5)", outcome


@impls
def test_repair_of_a_last_frame_ending_in_zero_bytes(tmp_path, impl):
    """The last non-zero byte can lie inside the last frame (a payload that
    ends in zeros, from a crafted file or another writer): what repair drops
    is still counted from the frame's end."""
    where = tmp_path / "log"
    written(where, impl, 3)
    rows = records(where)
    offset, length = frame(rows[2])
    payload = (where / "data").read_bytes()[offset + 72 : offset + length]
    if rows[2][13] >> 4 & 3:  # LZ4: store it raw, as the twin writes it
        payload = json.dumps(message(2), separators=(",", ":")).encode()[: len(payload)]
    zeroed = payload[:-24] + bytes(24)
    with open(where / "data", "r+b") as data:
        data.seek(offset + 72)
        data.write(zeroed)
    fields = list(rows[2])
    fields[5], fields[9], fields[13] = len(zeroed), zlib.crc32(zeroed), fields[13] & 0x0F
    put_record(where, 2, tuple(fields))
    report = impl.repair(where)
    assert (report.kept, report.lost, report.dropped_bytes) == (3, 0, 0)


# -- what the review found -------------------------------------------------------------------


@impls
def test_a_damaged_header_copy_in_the_last_frame_is_refused_then_rebuilt(tmp_path, impl):
    """The index record is valid and the payload matches its hash; only the
    frame's copy of the header is hit. That frame was written: cutting the
    record would lose an acknowledged message."""
    where = tmp_path / "log"
    messages = written(where, impl, 5)
    offset, _ = frame(records(where)[-1])
    flip(where / "data", offset + 8 + 20)
    with pytest.raises(LogCorruptError, match="record 4's frame is damaged, not torn"):
        impl.open(where)
    report = impl.repair(where)
    assert (report.kept, report.lost) == (5, 0)
    with impl.open(where) as log:
        log.verify()
        assert list(log) == messages


@impls
def test_a_huge_lz4_claim_on_a_large_frame_is_refused_not_allocated(tmp_path, impl):
    """A 2 MB payload may claim up to 255 times as much: the claim is checked
    against the block before anything that size is allocated."""
    where = tmp_path / "log"
    big = {"role": "tool", "content": "word " * 400_000}
    with impl.open(where, create=True) as log:
        log.append(message(0))
        log.append(big)
    rows = records(where)
    stored = rows[1][4]
    fields = list(rows[1])
    fields[5], fields[13] = 255 * stored, (fields[13] & 0x0F) | 0x10  # raw_len, codec LZ4
    put_record(where, 1, tuple(fields))

    def read() -> list[str]:
        outcomes = []
        for step in (lambda: impl.open(where, readonly=True).read([1]), lambda: impl.open(where)):
            try:
                step()
                outcomes.append("ok")
            except LogCorruptError:
                outcomes.append("LogCorruptError")
        return outcomes

    outcome = in_child(read, memory_headroom=256 << 20)
    assert outcome == "returned ['LogCorruptError', 'LogCorruptError']", outcome


@impls
def test_a_failed_repair_leaves_the_old_files_in_place(tmp_path, impl):
    """The new index cannot be written (here a directory stands where its
    temporary file would go): the new data file must not be renamed in alone,
    or no log could open the pair."""
    where = tmp_path / "log"
    messages = written(where, impl, 6)
    suffix = ".tmp" if impl is MessageLog else ".repair"
    os.mkdir(where / f"index{suffix}")
    before = (where / "data").read_bytes()
    with pytest.raises(LogStorageError):
        impl.repair(where)
    assert (where / "data").read_bytes() == before
    assert not (where / f"data{suffix}").exists()
    with impl.open(where, readonly=True) as log:
        assert list(log) == messages


@impls
def test_a_summary_with_a_lone_surrogate_is_refused(tmp_path, impl):
    with impl.open(tmp_path / "log", create=True) as log:
        log.append(message(0))
        with pytest.raises(InvalidInputError, match="surrogate"):
            log.add_summary("half a pair: \ud83d", (0, 0))
        assert len(log) == 1


@impls
def test_a_checkpoint_never_hides_a_damaged_record_from_the_views(tmp_path, impl):
    """meta vouches for 40 records; record 20 then fails its checksum. A
    view must not go on without it (its kind byte now reads as a branch)."""
    where = tmp_path / "log"
    written(where, impl, 40)
    assert (where / "meta").exists()
    flip(where / "index", 64 + 64 * 20 + 57, 0x02)  # kind 0 -> 2
    with pytest.raises(LogCorruptError) as caught, impl.open(where, readonly=True) as log:
        log.context_view()
    assert (caught.value.file, caught.value.offset) == ("index", 64 + 64 * 20)


# -- a log a kill left unfinished ------------------------------------------------------------


def _unfinished(where: Path, state: str) -> None:
    """What a process killed while making a log at ``where`` leaves: with
    this library's order (temporaries, then ``data``, then ``index``
    renamed in) or an earlier one's (``index`` made first, empty)."""
    where.mkdir()
    header = b"CCLOGDAT" + bytes(56)  # any 64 bytes: a data file's header at most
    files = {
        "none": {},
        "temporaries": {"data.tmp": header, "index.tmp": header[:20]},
        "data renamed in": {"data": header, "index.tmp": header},
        "empty index": {"index": b""},
        "empty index and data": {"index": b"", "data": b""},
        "empty index, data header": {"index": b"", "data": header},
        "index cut short": {"index": bytes(30), "data": header},
    }[state]
    for name, content in files.items():
        (where / name).write_bytes(content)


UNFINISHED = [
    "none",
    "temporaries",
    "data renamed in",
    "empty index",
    "empty index and data",
    "empty index, data header",
    "index cut short",
]


@impls
@pytest.mark.parametrize("state", UNFINISHED)
def test_a_log_a_kill_left_unfinished_is_made_anew(tmp_path, impl, state):
    """A kill while the first open made the files left a 0-byte index that
    every later open refused as damaged, for good: the session at that
    path could never be opened again. Nothing was acknowledged in it."""
    where = tmp_path / "log"
    _unfinished(where, state)
    with pytest.raises(LogNotFoundError):
        impl.open(where, readonly=True)
    with pytest.raises(LogNotFoundError):
        impl.open(where)
    with impl.open(where, create=True, encoding="cl100k_base", durability="never") as log:
        assert len(log) == 0
        assert log.encoding == "cl100k_base"
        log.append({"role": "user", "content": "hi"})
    assert not [p.name for p in where.iterdir() if p.suffix == ".tmp"]  # made and renamed in
    with impl.open(where, readonly=True) as log:
        assert [m["content"] for m in log.read(range(len(log)))] == ["hi"]
        assert log.encoding == "cl100k_base"


@impls
def test_a_missing_index_beside_records_is_damage_for_repair_not_a_new_log(tmp_path, impl):
    """A data file with records and no index is a log whose index was lost:
    making a new log there would throw the records away."""
    where = tmp_path / "log"
    messages = written(where, impl, 5)
    (where / "index").unlink()
    for options in ({"create": True}, {"readonly": True}):
        with pytest.raises(LogCorruptError, match="repair rebuilds it") as raised:
            impl.open(where, **options)
        assert raised.value.file == "index"
        assert raised.value.offset == 0
    impl.repair(where)
    with impl.open(where, readonly=True) as log:
        assert [m["n"] for m in log.read(range(len(log)))] == [m["n"] for m in messages]


def test_a_log_made_while_a_reader_looks_is_not_taken_for_damage(tmp_path, monkeypatch):
    """A reader that looked for ``index`` (none yet), then at ``data`` after
    a writer had made the log and appended, saw records beside no index and
    refused a healthy log. ``data`` is looked at first now. (A writer looks
    under the lock, where no one else makes the log.) The log is made
    between the twin's two looks."""
    where = tmp_path / "log"
    real = os.lstat
    made = []

    def lstat(path, *args, **kwargs):
        found = real(path, *args, **kwargs) if os.path.exists(path) else None
        if not made and str(path).endswith(("index", "data")):
            made.append(path)  # the other process makes the log and appends, between the looks
            with reference.log.MessageLog.open(where, create=True, durability="never") as other:
                other.append({"role": "user", "content": "hello"})
        if found is None:
            raise FileNotFoundError(path)
        return found

    where.mkdir()
    monkeypatch.setattr(reference.log.os, "lstat", lstat)
    with reference.log.MessageLog.open(where, readonly=True) as log:
        assert len(log) == 1


@impls
def test_an_open_refused_for_its_encoding_writes_nothing(tmp_path, impl):
    """A writer refused after reading the headers (another encoding asked
    for) wrote a checkpoint of a log it never loaded as it was dropped: 0
    records, no head. The next open then read the whole log again."""
    where = tmp_path / "log"
    with impl.open(where, create=True, encoding="cl100k_base", durability="never") as log:
        log.append_many([{"role": "user", "content": f"m{n}"} for n in range(50)])
    before = {p.name: p.read_bytes() for p in where.iterdir() if p.name != "lock"}
    with pytest.raises(InvalidInputError, match="counts tokens in cl100k_base"):
        impl.open(where, create=True, encoding="o200k_base")
    assert {p.name: p.read_bytes() for p in where.iterdir() if p.name != "lock"} == before


@impls
def test_new_encoding_makes_a_new_log_in_it_and_leaves_an_existing_one_its_own(tmp_path, impl):
    """A caller that opens a log for a model asks for the model's encoding
    for a new log only: an existing log of another encoding opens as it is
    (where ``encoding=`` refuses it), and says which it counts in. Nothing
    is written to the existing log's files by the open."""
    made = tmp_path / "made"
    with impl.open(made, create=True, new_encoding="cl100k_base", durability="never") as log:
        assert log.encoding == "cl100k_base"
        log.append({"role": "user", "content": "日本語のテキスト"})
    before = {p.name: p.read_bytes() for p in made.iterdir() if p.name != "lock"}
    with impl.open(made, create=True, new_encoding="o200k_base", durability="never") as log:
        assert log.encoding == "cl100k_base"
        assert [m["content"] for m in log.read(range(len(log)))] == ["日本語のテキスト"]
    assert {p.name: p.read_bytes() for p in made.iterdir() if p.name != "lock"} == before
    with impl.open(made, readonly=True, new_encoding="o200k_base") as log:
        assert log.encoding == "cl100k_base"
    with pytest.raises(InvalidInputError, match="not both"):
        impl.open(tmp_path / "both", create=True, encoding="o200k_base", new_encoding="o200k_base")
    assert not (tmp_path / "both").exists()
    with pytest.raises(InvalidInputError):
        impl.open(tmp_path / "unknown", create=True, new_encoding="no_such_encoding")
    with pytest.raises(InvalidTypeError):
        impl.open(tmp_path / "typed", create=True, new_encoding=5)
    assert not (tmp_path / "unknown").exists()
    assert not (tmp_path / "typed").exists()
