"""Compaction killed with SIGKILL, again and again: the log always holds the
old view or the new one, never half a summary, and every acknowledged
summary survives."""

from __future__ import annotations

import os
import random
from pathlib import Path

from context_core import MessageLog
from context_core.compaction import Compactor
from killed import reports_until_killed

KILLS = 40


def turn(n: int) -> list[dict]:
    return [
        {
            "role": "user",
            "content": f"Task {n}: check item-{n}." + (" Rule: you must keep item-0." if n == 0 else ""),
        },
        {"role": "assistant", "content": f"Item-{n} checked. " + "details " * (n % 9) * 30},
    ]


def compacting_writer(where: Path, report_fd: int) -> None:
    """Append turns and compact after each; report each summary written."""
    log = MessageLog.open(where, create=True, durability="always", lock_timeout=5.0)
    compactor = Compactor(log, recent_turns=2, segment_turns=2, segments_kept=2)
    n = sum(1 for h in log.headers() if h["kind"] == 0) // 2
    while True:
        log.append_many(turn(n))
        n += 1
        while (outcome := compactor.compact()).status == "written":
            assert outcome.seq is not None
            os.write(report_fd, outcome.seq.to_bytes(8, "little"))


def check_view(log: MessageLog) -> None:
    """The view is whole: raw history resumes right after the newest
    summary's range, and that summary is intact."""
    log.verify()
    headers = log.headers()
    path = log.path()
    summaries = [seq for seq in path if headers["kind"][seq] == 1]
    if not summaries:
        assert log.last_summary_index is None
        return
    newest = log.read([summaries[-1]])[0]
    assert log.last_summary_index == newest["covers"][1]
    assert newest["summary"].startswith("Constraints:")
    view = log._view()
    raw = [seq for seq, part in view if part == "raw"]
    assert all(seq > log.last_summary_index for seq in raw)
    assert sum(part == "segment" for _, part in view) <= 2
    text = "\n".join(str(m["content"]) for m in log.context_view())
    assert "item-0" in text  # the rule of turn 0 is carried through every summary


def test_killed_compaction_leaves_the_old_view_or_the_new(tmp_path: Path):
    where = tmp_path / "log"
    with MessageLog.open(where, create=True) as log:  # the tokenizer loads here, not in each child
        log.append({"role": "system", "content": "You are an agent."})
    rng = random.Random(5)
    acknowledged: list[int] = []
    for kill in range(KILLS):
        acknowledged += reports_until_killed(lambda fd: compacting_writer(where, fd), rng.uniform(0.0, 0.05))
        with MessageLog.open(where) as log:
            kinds = log.headers()["kind"]
            for seq in acknowledged:
                assert seq < len(log), f"kill {kill}: acknowledged summary {seq} lost"
                assert kinds[seq] == 1
            check_view(log)
    assert len(acknowledged) >= 10
    with MessageLog.open(where) as log:
        compactor = Compactor(log, recent_turns=2, segment_turns=2, segments_kept=2)
        log.append_many(turn(10_000) + turn(10_001) + turn(10_002))
        assert compactor.compact().status == "written"
        check_view(log)
