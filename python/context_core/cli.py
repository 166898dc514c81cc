"""The ``context-core`` command.

``context-core count`` prints exact token counts of files, of stdin, or of a
chat history (a JSON list of messages, a request body with ``messages``, or
JSONL with one message a line), per message and in total.
``context-core sanitize`` repairs a chat history for the OpenAI or Anthropic
API and prints the result as JSON, with the list of changes.
``context-core memory show|append|consolidate DIR`` reads, appends to and
consolidates an agent's memory files (MEMORY.md and its fragments) in DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from context_core import ContextCoreError, Tokenizer, sanitize
from context_core.tokens import ENCODINGS, REPLY_PRIMING


@dataclass
class Report:
    """Counts for one input."""

    source: str
    kind: str  # "text" or "chat"
    total: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: int = 0

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "kind": self.kind, "tokens": self.total}
        if self.kind == "chat":
            out["messages"] = self.messages
            out["tools"] = self.tools
        return out


def parse_chat(text: str) -> tuple[list[Any], list[Any] | None] | None:
    """``(messages, tools)`` if ``text`` is a chat history, else ``None``."""
    stripped = text.strip()
    if not stripped:
        return None
    try:
        document = json.loads(stripped)
    except (ValueError, RecursionError):
        document = None
    if document is None:
        lines = [line for line in stripped.splitlines() if line.strip()]
        try:
            document = [json.loads(line) for line in lines]
        except (ValueError, RecursionError):
            return None
    tools = None
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        tools = document.get("tools") if isinstance(document.get("tools"), list) else None
        messages = list(document["messages"])
        if isinstance(document.get("system"), (str, list)):  # an Anthropic request body
            messages.insert(0, {"role": "system", "content": document["system"]})
        document = messages
    if isinstance(document, list) and document and all(isinstance(m, dict) and "role" in m for m in document):
        return document, tools
    return None


def count_input(tokenizer: Tokenizer, source: str, text: str, kind: str) -> Report:
    chat = parse_chat(text) if kind in ("auto", "chat") else None
    if chat is None:
        if kind == "chat":
            raise ContextCoreError(f"{source}: not a chat history (a JSON list of messages or JSONL)")
        return Report(source, "text", tokenizer.count(text))
    messages, tools = chat
    total = tokenizer.count_messages(messages, tools)  # first: its errors name messages[i]
    rows = [
        {"index": i, "role": str(message.get("role")), "tokens": tokenizer.count_message(message)}
        for i, message in enumerate(messages)
    ]
    tool_tokens = tokenizer.count_tools(tools) if tools else 0
    return Report(source, "chat", total, rows, tool_tokens)


def read_source(path: str, stdin: TextIO) -> str:
    if path == "-":
        # Bytes when there are any, so line endings are counted as sent.
        raw = getattr(stdin, "buffer", None)
        return raw.read().decode("utf-8") if raw is not None else stdin.read()
    # newline="": count the file's own line endings, not translated ones.
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def print_table(reports: list[Report], encoding: str, out: TextIO) -> None:
    for report in reports:
        if report.kind == "text":
            out.write(f"{report.total:>10}  {report.source}\n")
            continue
        out.write(f"{report.source} (chat, {encoding})\n")
        out.write(f"{'#':>6}  {'role':<12}{'tokens':>10}\n")
        for row in report.messages:
            out.write(f"{row['index']:>6}  {row['role']:<12}{row['tokens']:>10}\n")
        if report.tools:
            out.write(f"{'':>6}  {'tools':<12}{report.tools:>10}\n")
        out.write(f"{'':>6}  {'priming':<12}{REPLY_PRIMING:>10}\n")
        out.write(f"{'':>6}  {'total':<12}{report.total:>10}\n")
    if len(reports) > 1:
        out.write(f"{sum(r.total for r in reports):>10}  total\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="context-core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    count = commands.add_parser("count", help="exact token counts of files, stdin or a chat history")
    count.add_argument("paths", nargs="*", default=["-"], help="files to count; '-' or nothing reads stdin")
    which = count.add_mutually_exclusive_group()
    which.add_argument("--model", help="count with this model's encoding (e.g. gpt-4o)")
    which.add_argument("--encoding", choices=ENCODINGS, help="count with this encoding (default o200k_base)")
    count.add_argument(
        "--format",
        choices=("auto", "text", "chat"),
        default="auto",
        help="text, or a chat history in JSON/JSONL; auto (default) detects chats",
    )
    count.add_argument("--json", action="store_true", help="print JSON instead of a table")
    repair = commands.add_parser("sanitize", help="repair a chat history so the API accepts it (prints JSON)")
    repair.add_argument(
        "path", nargs="?", default="-", help="a chat history file; '-' or nothing reads stdin"
    )
    repair.add_argument("--provider", choices=("openai", "anthropic"), default="openai")
    repair.add_argument("--convert-function", action="store_true", help="convert legacy function messages")
    repair.add_argument("--on-invalid", choices=("raise", "drop"), default="raise")
    add_memory_parser(commands)
    return parser


def add_memory_parser(commands: Any) -> None:
    memory = commands.add_parser("memory", help="an agent's memory files (MEMORY.md and its fragments)")
    actions = memory.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="print MEMORY.md")
    show.add_argument("dir", help="the memory root")
    show.add_argument("--all", action="store_true", help="with each fragment's lines in place of its pointer")
    append = actions.add_parser("append", help="append facts, skipping those already there")
    append.add_argument("dir", help="the memory root (created 0700 if missing)")
    append.add_argument(
        "facts",
        nargs="*",
        help="facts such as '- [decision: db] Use Postgres 16'; none: one a line from stdin",
    )
    consolidate = actions.add_parser("consolidate", help="merge the fragments with the offline consolidator")
    consolidate.add_argument("dir", help="the memory root")
    consolidate.add_argument("--force", action="store_true", help="run even if it is not due")
    for action in (show, append, consolidate):
        action.add_argument("--max-lines", type=int, default=150, help="MEMORY.md's size in lines (150)")
        action.add_argument("--lock-timeout", type=float, default=10.0, help="seconds to wait for the lock")


def run_memory(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> None:
    from context_core.memory import MemoryFiles  # here: counting never loads it

    files = MemoryFiles(
        args.dir, max_lines=args.max_lines, lock_timeout=args.lock_timeout, create=args.action == "append"
    )
    if args.action == "show":
        stdout.write(files.read(expand=args.all))
    elif args.action == "append":
        lines = args.facts or [line for line in stdin.read().splitlines() if line.strip()]
        result = files.append(lines)
        where = f" to {', '.join(result.files)}" if result.files else ""
        stdout.write(f"appended {len(result.appended)}{where}, {len(result.duplicates)} already there\n")
    else:
        done = files.consolidate(force=args.force)
        if done.ran:
            stdout.write(
                f"consolidated: {done.facts_before} facts -> {done.facts_after},"
                f" {len(done.merged)} fragments merged, {len(done.created)} written\n"
            )
        else:
            stdout.write(f"nothing done ({done.reason})\n")


def run_count(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> None:
    tokenizer = Tokenizer.for_model(args.model) if args.model else Tokenizer(args.encoding or "o200k_base")
    reports = [count_input(tokenizer, path, read_source(path, stdin), args.format) for path in args.paths]
    if args.json:
        document = {
            "encoding": tokenizer.name,
            "inputs": [report.as_json() for report in reports],
            "total": sum(report.total for report in reports),
        }
        json.dump(document, stdout, ensure_ascii=False, indent=2)
        stdout.write("\n")
    else:
        print_table(reports, tokenizer.name, stdout)


def run_sanitize(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> None:
    chat = parse_chat(read_source(args.path, stdin))
    if chat is None:
        raise ContextCoreError(f"{args.path}: not a chat history (a JSON list of messages or JSONL)")
    result = sanitize(
        chat[0], args.provider, convert_function=args.convert_function, on_invalid=args.on_invalid
    )
    document = {
        "messages": result.messages,
        "system": result.system,
        "changes": [
            {"stage": c.stage, "index": c.index, "action": c.action, "reason": c.reason}
            for c in result.changes
        ],
    }
    json.dump(document, stdout, ensure_ascii=False, indent=2)
    stdout.write("\n")


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    command = {"sanitize": run_sanitize, "memory": run_memory}.get(args.command, run_count)
    try:
        command(args, stdin, stdout)
    except (ContextCoreError, OSError, UnicodeDecodeError) as error:
        print(f"context-core: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
