"""``context-core memory show|append|consolidate DIR``: an agent's memory
files (MEMORY.md and its fragments) read, appended to and consolidated."""

from __future__ import annotations

import argparse
from typing import TextIO


def run_memory(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    from context_core.cli.count import InputError
    from context_core.errors import InvalidInputError, InvalidTypeError
    from context_core.memory import MemoryFiles  # here: counting never loads it

    try:
        files = MemoryFiles(
            args.dir, max_lines=args.max_lines, lock_timeout=args.lock_timeout, create=args.action == "append"
        )
    except (InvalidInputError, InvalidTypeError) as error:  # named as the options are here
        said = str(error).replace("max_lines", "--max-lines").replace("lock_timeout", "--lock-timeout")
        raise InputError(said) from None
    if args.action == "show":
        stdout.write(files.read(expand=args.all))
    elif args.action == "append":
        lines = args.facts or [line for line in stdin.read().splitlines() if line.strip()]
        try:
            result = files.append(lines)
        except InvalidInputError as error:
            if args.facts:
                raise
            raise InputError(f"stdin: {error}") from None  # where the facts came from
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

    return 0
