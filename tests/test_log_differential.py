"""The Rust message log (context_core.MessageLog) against its pure-Python twin
(context_core.reference.log.MessageLog): the same generated operations applied
to both must leave logs that say the same things, each log must read the same
through the other implementation, and repair of the same damage must salvage the
same records."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import context_core
from context_core.reference import log as reference_log
from context_core.reference.tags import NAMES
from limits import in_child_with_a_file_size_limit
from strategies import log_messages, openai_message, texts

RUST, TWIN = context_core.MessageLog, reference_log.MessageLog
LOGS = {"rust": RUST, "twin": TWIN}
MESSAGE, SUMMARY, BRANCH, LOST = 0, 1, 2, 3
CODEC_BITS = 0x30  # flags bits 4-5: Rust compresses, the twin stores raw
# Where the two may differ: the frame's place and size (LZ4 or raw), and the
# record's checksum, which covers them.
LAYOUT_FIELDS = ("offset", "stored_len", "check")

# -- operations -------------------------------------------------------------------------

timestamps = st.floats(0, 2e9)
stamped_messages = st.tuples(log_messages, timestamps).map(
    lambda pair: pair[0] if "timestamp" in pair[0] else {**pair[0], "timestamp": pair[1]}
)
"""append_many takes no timestamp= keyword: each message carries its own."""

keywords = st.fixed_dictionaries(
    {"timestamp": timestamps},
    optional={
        "tags": st.lists(st.sampled_from(sorted(NAMES)), max_size=2),
        "weight": st.floats(0, 100),
        "pinned": st.booleans(),
        "priority": st.floats(-1e6, 1e6),
    },
)
# Seqs are drawn as plain numbers and mapped onto the log as it is when applied.
picks = st.integers(0, 2**16)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), log_messages, keywords, st.none() | picks),
        st.tuples(st.just("append"), openai_message, keywords, st.none() | picks),
        st.tuples(st.just("append_many"), st.lists(stamped_messages, max_size=3)),
        st.tuples(st.just("add_summary"), texts, picks, picks, st.sampled_from([2, 3])),
        st.tuples(st.just("rewind"), picks),
    ),
    max_size=8,
)


class Expected:
    """What the operations appended: each node's kind and payload."""

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.values: list[Any] = []

    def not_branches(self) -> list[int]:
        return [seq for seq, kind in enumerate(self.kinds) if kind != BRANCH]


def apply(operation: tuple, logs: list, expected: Expected) -> None:
    """One operation on every log (there may be one); each must return (or raise) the same."""
    name, *arguments = operation
    candidates = expected.not_branches()
    if name == "append":
        message, options, parent = arguments
        options = dict(options)
        if parent is not None and candidates:
            options["parent"] = candidates[parent % len(candidates)]
        call: Callable[[Any], Any] = lambda log: log.append(message, **options)  # noqa: E731
        added = [(MESSAGE, message)]
    elif name == "append_many":
        (batch,) = arguments
        call = lambda log: log.append_many(batch)  # noqa: E731
        added = [(MESSAGE, message) for message in batch]
    elif not candidates:
        return  # a summary or a rewind needs a node
    elif name == "add_summary":
        text, first, last, level = arguments
        first, last = sorted((first % len(expected.kinds), last % len(expected.kinds)))
        call = lambda log: log.add_summary(text, (first, last), level)  # noqa: E731
        added = [(SUMMARY, {"summary": text, "covers": [first, last], "level": level})]
    else:
        (pick,) = arguments
        target = candidates[pick % len(candidates)]
        call = lambda log: log.rewind(target)  # noqa: E731
        added = [(BRANCH, None)]
    outcomes = []
    for log in logs:
        try:
            outcomes.append(("returned", call(log)))
        except Exception as error:  # compared between the two: the type, not the words
            outcomes.append(("raised", type(error).__name__, str(error)))
    assert all(outcome[:2] == outcomes[0][:2] for outcome in outcomes), (operation, outcomes)
    if outcomes[0][0] == "returned":
        for kind, value in added:
            expected.kinds.append(kind)
            expected.values.append(value)
    assert [len(log) for log in logs] == [len(expected.kinds)] * len(logs)
    assert len({log.head for log in logs}) == 1, operation


# -- what a log says ----------------------------------------------------------------------


def snapshot(log: Any) -> dict[str, Any]:
    count = len(log)
    rows = np.array(log.headers(), copy=True)
    return {
        "len": count,
        "values": list(log),
        "read": log.read(range(count)),
        "head": log.head,
        "path": log.path(),
        "paths": [log.path(seq) for seq in range(count)],
        "last_summary_index": log.last_summary_index,
        "context_view": log.context_view(),
        "ids": [log.node_id(seq) for seq in range(count) if rows["kind"][seq] == MESSAGE],
        "headers": rows,
    }


def assert_same_log(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two readers of the same files: everything equal, the headers byte for byte."""
    assert {k: v for k, v in a.items() if k != "headers"} == {k: v for k, v in b.items() if k != "headers"}
    assert a["headers"].tobytes() == b["headers"].tobytes()


def assert_twins(rust: dict[str, Any], twin: dict[str, Any]) -> None:
    """A Rust log and a twin log of the same operations."""
    assert {k: v for k, v in rust.items() if k != "headers"} == {
        k: v for k, v in twin.items() if k != "headers"
    }
    r, t = rust["headers"], twin["headers"]
    assert len(r) == len(t)
    for field in r.dtype.names:
        if field in LAYOUT_FIELDS:
            continue
        a, b = r[field], t[field]
        if field == "timestamp":  # summaries and branch markers take time.time()
            a, b = np.where(r["kind"] == MESSAGE, a, 0.0), np.where(t["kind"] == MESSAGE, b, 0.0)
        elif field == "flags":
            a, b = a & np.uint8(0xFF ^ CODEC_BITS), b & np.uint8(0xFF ^ CODEC_BITS)
        same = a == b
        if a.dtype.kind == "f":  # weight: NaN when none was given
            same |= np.isnan(a) & np.isnan(b)
        differ = np.flatnonzero(~same)
        assert not differ.size, (
            f"{field} differs at seqs {differ.tolist()}: rust {a[differ]}, twin {b[differ]}"
        )
    assert (t["flags"] & CODEC_BITS == 0).all()  # the twin stores raw
    assert (t["stored_len"] == t["raw_len"]).all()


def check_against_expected(state: dict[str, Any], expected: Expected) -> None:
    assert state["values"] == expected.values
    assert [int(k) for k in state["headers"]["kind"]] == expected.kinds


# -- the differential tests ---------------------------------------------------------------


@given(operations)
def test_the_same_operations_leave_the_same_log(ops):
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / name for name in LOGS}
        logs = [cls.open(paths[name], create=True, durability="never") for name, cls in LOGS.items()]
        expected = Expected()
        try:
            for operation in ops:
                apply(operation, logs, expected)
            rust, twin = snapshot(logs[0]), snapshot(logs[1])
        finally:
            for log in logs:
                log.close()
        check_against_expected(rust, expected)
        assert_twins(rust, twin)
        # Each directory read by the other implementation, and reopened by its own.
        for name, own in (("rust", rust), ("twin", twin)):
            for cls in (RUST, TWIN):
                with cls.open(paths[name], readonly=True) as log:
                    assert_same_log(snapshot(log), own)
                    log.verify()


damages = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
        st.tuples(st.just("zero"), st.floats(0, 1, exclude_max=True), st.integers(1, 80)),
        st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
        st.tuples(st.just("index"), st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
    ),
    min_size=1,
    max_size=3,
)


def damage(path: Path, data_end: int, index_end: int, how: tuple[str, float, int]) -> None:
    kind, where, amount = how
    name, end = ("index", index_end) if kind == "index" else ("data", data_end)
    offset = 64 + int(where * (end - 64))  # past the file header: inside the records or frames
    with open(path / name, "r+b") as file:
        if kind == "truncate":
            file.truncate(offset)
            return
        file.seek(offset)
        old = file.read(amount if kind == "zero" else 1)
        file.seek(offset)
        file.write(bytes(len(old)) if kind == "zero" else bytes([old[0] ^ 1 << amount]) if old else b"")


@given(writer=st.sampled_from(sorted(LOGS)), ops=operations, hits=damages)
def test_repair_salvages_the_same_records(writer, ops, hits):
    with tempfile.TemporaryDirectory() as tmp:
        original = Path(tmp) / "original"
        with LOGS[writer].open(original, create=True, durability="never") as log:
            expected = Expected()
            for operation in ops:
                apply(operation, [log], expected)
            rows = log.headers()
            data_end = (
                int(rows["offset"][-1] + (72 + rows["stored_len"][-1] + 7) // 8 * 8) if len(rows) else 64
            )
            index_end = 64 + 64 * len(rows)
        if not expected.kinds:
            return
        for how in hits:
            damage(original, data_end, index_end, how)
        paths = {name: Path(tmp) / name for name in LOGS}
        reports = {}
        for name, cls in LOGS.items():
            shutil.copytree(original, paths[name])
            reports[name] = cls.repair(paths[name])
        counts = {name: (r.kept, r.lost, r.dropped_bytes) for name, r in reports.items()}
        assert counts["rust"] == counts["twin"], reports
        for name in ("data", "index"):  # only the new log ids differ
            assert (paths["rust"] / name).read_bytes()[64:] == (paths["twin"] / name).read_bytes()[64:], name
        for path in paths.values():
            assert not (path / "meta").exists()
        states = []
        for cls in (RUST, TWIN):
            with cls.open(paths["twin"], readonly=True) as log:
                log.verify()
                states.append(snapshot(log))
        assert_same_log(*states)
        kinds = [int(kind) for kind in states[0]["headers"]["kind"]]
        assert len(kinds) == reports["twin"].kept + reports["twin"].lost <= len(expected.kinds)
        assert kinds.count(LOST) == reports["twin"].lost
        assert states[0]["values"] == [
            None if kind == LOST else value for kind, value in zip(kinds, expected.values, strict=False)
        ]
        assert all(kind in (LOST, was) for kind, was in zip(kinds, expected.kinds, strict=False))


# -- storage errors ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOGS))
def test_a_full_file_is_a_storage_error_in_both(tmp_path, name):
    path = tmp_path / name
    with LOGS[name].open(path, create=True, durability="never") as log:
        log.append({"role": "user", "content": "first"}, timestamp=1.0)
        end = int(log.headers()["offset"][0]) + 72 + int(log.headers()["stored_len"][0])

    def work() -> None:
        with LOGS[name].open(path, durability="always") as log:
            log.append({"role": "user", "content": "".join(f"{i} " for i in range(500))}, timestamp=2.0)

    assert in_child_with_a_file_size_limit(end + 16, work).split("|")[0] == "LogStorageError"
    for cls in (RUST, TWIN):
        with cls.open(path, readonly=True) as log:
            assert log.read([0]) == [{"role": "user", "content": "first"}]
            assert len(log) == 1
