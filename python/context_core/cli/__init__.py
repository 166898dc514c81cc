"""The ``context-core`` command line.

Its main job is ``context-core demo``: a long agent session written and
replayed through a :class:`~context_core.Session`, turn by turn, with what
the library sent against naive history. ``replay`` does the same for your
own transcript, ``build`` shows the request for its last turn, ``inspect``
reads a message log, and ``eval`` scores constraint retention across
policies and budgets. ``count``, ``sanitize`` and ``memory`` are the tools
underneath.

Each command's module is imported only when it runs, so ``--help`` and
``count`` never pay for the session's parts.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Sequence
from typing import TextIO

__all__ = ["build_parser", "main"]

ENCODINGS = ("o200k_base", "cl100k_base", "p50k_base", "r50k_base")
POLICIES = ("priority", "weighted", "shape")
DESCRIPTION = "Decide what goes into an LLM agent's context window, exactly and fast."

#: The module and function that run each command.
COMMANDS = {
    "count": ("count", "run_count"),
    "sanitize": ("count", "run_sanitize"),
    "memory": ("memory", "run_memory"),
    "demo": ("replay", "run_demo"),
    "replay": ("replay", "run_replay"),
    "build": ("replay", "run_build"),
    "inspect": ("inspect_log", "run_inspect"),
    "eval": ("evaluate", "run_eval"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("context-core")
    except PackageNotFoundError:  # a source tree on the path
        return "unknown"


def _session_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        help="the model the session is for (default: gpt-4o; claude-sonnet-4-5 for an Anthropic"
        " transcript or --provider anthropic)",
    )
    parser.add_argument("--provider", choices=("openai", "anthropic"), help="default: from the model")
    parser.add_argument("--budget", type=int, help="the window in tokens (default: the model's)")
    parser.add_argument("--policy", choices=POLICIES, default="priority", help="selection policy (priority)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="context-core", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"context-core {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="write a long agent session and replay it through a Session")
    demo.add_argument("--turns", type=int, default=300, help="user turns to write (300)")
    demo.add_argument("--seed", type=int, default=0, help="the session's random seed")
    demo.add_argument("--rows", type=int, default=12, help="turns shown in the per-turn table (12)")
    _session_options(demo)

    replay = commands.add_parser("replay", help="what this library would have sent each turn of a transcript")
    replay.add_argument(
        "file", help="a transcript: JSON or JSONL messages (OpenAI or Anthropic), or a log directory"
    )
    replay.add_argument("--rows", type=int, default=12, help="turns shown in the per-turn table (12)")
    _session_options(replay)

    build = commands.add_parser("build", help="the request for a transcript's last turn, with its breakdown")
    build.add_argument("file", help="a transcript file or a log directory")
    _session_options(build)

    inspect = commands.add_parser("inspect", help="a message log: messages, tokens, summaries, branches")
    inspect.add_argument("log", help="the log directory")
    inspect.add_argument("--tail", type=int, default=0, help="also show the last N messages")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of tables")

    evaluate = commands.add_parser("eval", help="constraint retention across policies and budgets")
    evaluate.add_argument("--sessions", type=int, default=6, help="generated sessions to score (6)")
    evaluate.add_argument("--turns", type=int, default=120, help="user turns per session (120)")
    evaluate.add_argument(
        "--budgets", default="2000,4000,8000,16000", help="comma-separated budgets (2000,4000,8000,16000)"
    )
    evaluate.add_argument(
        "--plot", metavar="PNG", help="write retention against budget per policy (needs matplotlib)"
    )
    evaluate.add_argument("--json", action="store_true", help="print JSON instead of a table")

    count = commands.add_parser("count", help="exact token counts of files, stdin or a chat history")
    count.add_argument("paths", nargs="*", default=["-"], help="files to count; '-' or nothing reads stdin")
    which = count.add_mutually_exclusive_group()
    which.add_argument("--model", help="count with this model's encoding (e.g. gpt-4o)")
    which.add_argument(
        "--encoding",
        choices=[*ENCODINGS, "gpt2"],
        help="count with this encoding (default o200k_base; gpt2 is r50k_base)",
    )
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

    _memory_parser(commands)
    return parser


def _memory_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run one command; 0 on success, 2 for bad input (named on stderr,
    never a traceback)."""
    args = build_parser().parse_args(argv)
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    module, function = COMMANDS[args.command]
    from context_core.errors import ContextCoreError

    if stdout is sys.stdout and isinstance(stdout, io.TextIOWrapper):
        # A text the terminal's encoding cannot hold (a lone surrogate from
        # JSON or a file name that is not UTF-8) is written as its escape,
        # which inside a JSON string is the same character.
        stdout.reconfigure(errors="backslashreplace")
    try:
        command = getattr(importlib.import_module(f"context_core.cli.{module}"), function)
        status = int(command(args, stdin, stdout))
        # Written while the pipe may still close under us, not at the
        # interpreter's exit, where the error would escape the handler.
        stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as a pipeline expects.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by it
    except (ContextCoreError, OSError, UnicodeError) as error:
        print(f"context-core: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("context-core: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
