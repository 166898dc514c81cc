"""``context-core inspect LOG``: what a message log holds: messages and
their tokens, summaries by level, branches and the head, and whether every
record checks out."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from context_core.cli.count import InputError
from context_core.cli.log_dir import open_log, readable, unreadable
from context_core.cli.output import write_json

__all__ = ["run_inspect"]

_KINDS = {0: "message", 1: "summary", 2: "branch"}


def describe(path: str, tail: int) -> dict[str, Any]:
    from context_core import LogCorruptError

    log, where = open_log(path)
    with log:
        try:
            # The path first, then the headers: a log another process writes
            # only grows, so every seq of the path has its header, and the
            # headers read are the one snapshot everything below counts.
            path_seqs = log.path()
            headers = log.headers()
            kinds = headers["kind"]
        except LogCorruptError as error:  # the index itself: nothing to describe
            raise unreadable(where, error) from None
        try:
            log.verify()
            check = "ok"
        except LogCorruptError as error:
            check = f"corrupt: {error}"
        summaries: dict[str, int] = {}
        nodes = len(kinds)
        for _, payload in readable(log, [int(s) for s in range(nodes) if kinds[s] == 1]):
            level = f"L{payload['level']}"
            summaries[level] = summaries.get(level, 0) + 1
        messages = [int(s) for s in range(nodes) if kinds[s] == 0]
        tail_rows = []
        if tail > 0:
            shown = [seq for seq in path_seqs if kinds[seq] == 0][-tail:]
            for seq, message in readable(log, shown):  # a damaged one is left out (`check` says so)
                content = message.get("content")
                if isinstance(content, str):
                    text = content
                elif content is None:  # a reply of tool calls alone: named
                    calls = message.get("tool_calls") or []
                    names = [
                        str((c.get("function") or c.get("custom") or {}).get("name"))
                        for c in calls
                        if isinstance(c, dict)
                    ]
                    text = f"(tool calls: {', '.join(names)})" if names else ""
                else:
                    text = json.dumps(content, ensure_ascii=False)
                tail_rows.append(
                    {
                        "seq": seq,
                        "role": message.get("role"),
                        "tokens": int(headers["tokens"][seq]),
                        "text": text or "",
                    }
                )
        return {
            "path": str(path),
            "encoding": log.encoding,
            "nodes": nodes,
            "messages": len(messages),
            "tokens": int(sum(int(headers["tokens"][s]) for s in messages)),
            "on_active_path": len(path_seqs),
            "active_path_tokens": int(sum(int(headers["tokens"][s]) for s in path_seqs)),
            "summaries": summaries,
            "branches": int(sum(1 for k in kinds if k == 2)),
            "head": log.head,
            "last_summary_index": log.last_summary_index,
            "check": check,
            "tail": tail_rows,
        }


def run_inspect(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    if args.tail < 0:
        raise InputError(f"--tail must be >= 0, got {args.tail}")
    facts = describe(args.log, args.tail)
    if args.json:
        write_json(facts, stdout)
        return 0 if facts["check"] == "ok" else 2
    from rich.table import Table

    from context_core.cli.console import console

    screen = console(stdout, 120)
    table = Table(title=f"Message log {facts['path']}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in [
        ("encoding", facts["encoding"]),
        ("nodes", f"{facts['nodes']:,}"),
        ("messages (tokens)", f"{facts['messages']:,} ({facts['tokens']:,})"),
        ("on the active path (tokens)", f"{facts['on_active_path']:,} ({facts['active_path_tokens']:,})"),
        (
            "summaries by level",
            ", ".join(f"{k}: {v}" for k, v in sorted(facts["summaries"].items())) or "none",
        ),
        ("branches", str(facts["branches"])),
        ("head", str(facts["head"])),
        (
            "summaries cover up to",
            str(facts["last_summary_index"] if facts["last_summary_index"] is not None else "none"),
        ),
        ("check", facts["check"]),
    ]:
        table.add_row(what, value)
    screen.print(table)
    if facts["tail"]:
        last = Table(title=f"Last {len(facts['tail'])} messages")
        for name in ("seq", "role", "tokens", "text"):
            last.add_column(name, justify="right" if name in ("seq", "tokens") else "left", overflow="fold")
        for row in facts["tail"]:
            text = row["text"] if len(row["text"]) <= 200 else row["text"][:200] + "…"
            last.add_row(str(row["seq"]), str(row["role"]), f"{row['tokens']:,}", text)
        screen.print(last)
    return 0 if facts["check"] == "ok" else 2
