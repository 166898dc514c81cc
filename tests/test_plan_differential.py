"""The compaction plan in Rust (``_MessageLog._plan``) against its numpy
twin (``context_core.reference.plan``), on logs built from random steps:
turns of user text, tool calls and results (as tool messages, and as
Anthropic blocks with and without text), system and pinned messages,
rules and pasted logs, segment and global summaries, rewinds."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import MessageLog
from context_core.compaction import plan
from context_core.reference.plan import plan as twin_plan

STEPS = st.sampled_from(
    [
        "turn",
        "turn",
        "turn",
        "rule",
        "paste",
        "tools",
        "blocks",
        "system",
        "pinned",
        "pinned rule",
        "segment",
        "global",
        "rewind",
    ]
)


def build(log: MessageLog, steps: list[str], draw_seq: list[int]) -> None:
    for i, step in enumerate(steps):
        pick = draw_seq[i % len(draw_seq)]
        if step == "turn":
            log.append({"role": "user", "content": f"Task {i}: look at item-{i}."})
            log.append({"role": "assistant", "content": f"Done {i}."})
        elif step == "rule":
            log.append({"role": "user", "content": f"You must never touch port {8000 + i}."})
        elif step == "paste":
            log.append(
                {
                    "role": "user",
                    "content": "Traceback (most recent call last):\n  must not fail\nError: boom",
                },
                tags=["constraint", "log"],
            )
        elif step == "tools":
            call = f"call_{i}"
            log.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call, "type": "function", "function": {"name": "read", "arguments": "{}"}}
                    ],
                }
            )
            log.append({"role": "tool", "tool_call_id": call, "content": f"file {i}"})
        elif step == "blocks":  # Anthropic's form: the result in a user message, with text or not
            call = f"toolu_{i}"
            log.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call, "name": "read", "input": {}}],
                }
            )
            content: list[dict] = [{"type": "tool_result", "tool_use_id": call, "content": f"file {i}"}]
            if pick % 2:
                content.append({"type": "text", "text": f"Now look at item-{i}."})
            log.append({"role": "user", "content": content})
        elif step == "system":
            log.append({"role": "system", "content": f"Rule set {i}."})
        elif step == "pinned":
            log.append({"role": "user", "content": f"Pinned {i}."}, pinned=True)
        elif step == "pinned rule":  # an anchor: raw in every view, so no summary carries it
            log.append({"role": "user", "content": f"Always log call {i}; never drop it."}, pinned=True)
        elif step in ("segment", "global") and len(log) >= 2:
            path = log.path()
            messages = [s for s in path if log.headers()["kind"][s] == 0]
            pointer = log.last_summary_index
            raw = [s for s in messages if pointer is None or s > pointer]
            if len(raw) >= 2:
                last = raw[pick % (len(raw) - 1)]
                log.add_summary(f"Summary {i}.", (raw[0], last), 2 if step == "segment" else 3)
        elif step == "rewind" and len(log) >= 2:
            path = log.path()
            if path:
                log.rewind(path[pick % len(path)])


def _bound(small: int) -> st.SearchStrategy[int]:
    """Mostly small; sometimes past what a u64 holds (the public plan caps
    bounds at 2**62, so the twin is given the capped value)."""
    return st.one_of(st.integers(1, small), st.integers(1, small), st.integers(2**40, 2**70))


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(STEPS, max_size=60),
    picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    recent=_bound(6),
    segment=_bound(6),
    kept=_bound(3),
    tail=st.one_of(st.none(), _bound(400)),
)
def test_the_rust_plan_is_the_numpy_plan(steps, picks, recent, segment, kept, tail):
    with tempfile.TemporaryDirectory() as where:
        log = MessageLog.open(Path(where) / "log", create=True)
        try:
            build(log, steps, picks)
            options = {
                "recent_turns": recent,
                "segment_turns": segment,
                "segments_kept": kept,
                "tail_tokens": tail,
            }
            capped = {k: None if v is None else min(v, 2**62) for k, v in options.items()}
            assert plan(log, **options) == twin_plan(log, **capped)
        finally:
            log.close()
