"""``context-core count`` and ``context-core sanitize``: exact token counts
of files, stdin or chat histories (a JSON list of messages, a request body
with ``messages``, or JSONL with one message a line), and a history repaired
for the OpenAI or Anthropic API, printed as JSON with its changes."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from context_core import ContextCoreError, Tokenizer, UnknownModelError, sanitize
from context_core.cli.output import write_json
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


class InputError(ContextCoreError):
    """An input the command cannot read (reported on stderr, exit status 2)."""


def _json_files(source: str) -> bool:
    return source.lower().endswith((".json", ".jsonl"))


def _named(source: str) -> str:
    return "stdin" if source == "-" else source


#: How a JSON object, a list of them or JSONL opens: ``{"``, ``{}``, ``[{``,
#: ``[]`` (where ``[INFO] ...``, ``[project]`` or ``{{ name }}`` do not).
_OPENS_LIKE_JSON = re.compile(r'\s*(?:\{\s*["}]|\[\s*[{\]])')


def _meant_as_json(source: str, text: str, strict: bool) -> bool:
    """Whether ``text`` that does not parse is an error rather than plain
    text: asked for as a chat (``strict``), a ``.json``/``.jsonl`` file, or
    stdin that opens as a chat's JSON would (``--format text`` counts it as
    text)."""
    if strict or _json_files(source):
        return True
    return source == "-" and _OPENS_LIKE_JSON.match(text) is not None


@dataclass(frozen=True)
class Chat:
    """A chat history read from a file: its messages and tools, and what a
    request body says of where it goes."""

    messages: list[Any]
    tools: list[Any] | None = None
    model: str | None = None
    """A request body's ``model``."""
    anthropic: bool = False
    """A request body with a top-level ``system``, which only Anthropic's has."""
    settings: dict[str, Any] | None = None
    """A request body's other fields (``temperature``, ``max_tokens``, ...)."""


def parse_chat(text: str, source: str = "-", *, strict: bool = False) -> Chat | None:
    """The chat history ``text`` holds, else ``None``.
    Text meant as JSON (see :func:`_meant_as_json`) that is not valid JSON
    raises :class:`InputError` with the parser's reason, never counted as
    plain text."""
    stripped = text.removeprefix("\ufeff").strip()  # a byte order mark some editors write
    if not stripped:
        if _json_files(source) or strict:
            raise InputError(f"{_named(source)}: empty, not JSON or JSONL")
        return None
    try:
        document = _strict_json(stripped)
    except RecursionError:
        _unreadable(source, stripped, strict, "nested too deeply to read")
        return None
    except ValueError as whole:
        # Numbered as in the file (the blank lines before the first count).
        given = text.removeprefix("\ufeff").splitlines()
        lines = [(at, line) for at, line in enumerate(given, 1) if line.strip()]
        document = []
        for at, line in lines:
            try:
                document.append(_strict_json(line))
            except RecursionError:
                _unreadable(source, stripped, strict, f"line {at}: nested too deeply to read")
                return None
            except ValueError as error:
                # JSONL whose earlier lines read: the line that does not is the one to name.
                reason = f"line {at}: {error}" if document else str(whole)
                _unreadable(source, stripped, strict, reason)
                return None
    tools, model, anthropic, settings = None, None, False, None
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        tools = document.get("tools") if isinstance(document.get("tools"), list) else None
        model = document.get("model") if isinstance(document.get("model"), str) else None
        settings = {k: v for k, v in document.items() if k not in _BODY_PARTS}
        messages = list(document["messages"])
        if isinstance(document.get("system"), (str, list)):  # an Anthropic request body
            messages.insert(0, {"role": "system", "content": document["system"]})
            anthropic = True
        document = messages
    if isinstance(document, dict) and "role" in document:
        document = [document]  # one message: a JSONL file of one line reads whole as its object
    if isinstance(document, list) and document and all(isinstance(m, dict) and "role" in m for m in document):
        return Chat(document, tools, model, anthropic, settings or None)
    return None


#: A request body's fields the replay makes itself; the others are settings.
_BODY_PARTS = frozenset({"messages", "system", "tools", "model"})


def _strict_json(text: str) -> Any:
    """``text`` parsed as JSON, as the APIs read it: ``NaN`` and
    ``Infinity`` (which Python's parser takes) are not JSON, and written
    back out they would make the command's own output invalid."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):  # 1e400: JSON, but past what a float (or the APIs) holds
            raise ValueError(f"{number} is out of a number's range")
        return value

    return json.loads(text, parse_constant=refuse, parse_float=finite)


def _unreadable(source: str, text: str, strict: bool, reason: str) -> None:
    """Text that does not parse: an error where it was meant as JSON (see
    :func:`_meant_as_json`), else ``None`` (plain text)."""
    if _meant_as_json(source, text, strict):
        hint = " (--format text counts it as text)" if source == "-" and not strict else ""
        raise InputError(f"{_named(source)}: not valid JSON or JSONL ({reason}){hint}")
    return None


def count_input(tokenizer: Tokenizer, source: str, text: str, kind: str) -> Report:
    chat = parse_chat(text, source, strict=kind == "chat") if kind in ("auto", "chat") else None
    if chat is None:
        if kind == "chat":
            raise InputError(f"{_named(source)}: not a chat history (a JSON list of messages or JSONL)")
        return Report(source, "text", tokenizer.count(text))
    messages, tools = chat.messages, chat.tools
    _check_blocks(source, messages)
    try:
        total = tokenizer.count_messages(messages, tools)  # first: its errors name messages[i]
    except ContextCoreError as error:
        raise InputError(f"{_named(source)}: {error}") from None
    rows = [
        {"index": i, "role": str(message.get("role")), "tokens": tokenizer.count_message(message)}
        for i, message in enumerate(messages)
    ]
    tool_tokens = tokenizer.count_tools(tools) if tools else 0
    return Report(source, "chat", total, rows, tool_tokens)


def _check_blocks(source: str, messages: list[Any]) -> None:
    """A content list holds blocks (dicts): both APIs refuse a bare string
    there, as ``build`` and the session do, so it is no chat to count."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for j, block in enumerate(content):
                if not isinstance(block, dict):
                    raise InputError(
                        f"{_named(source)}: messages[{i}].content[{j}]: expected a content block dict,"
                        f" got {type(block).__name__}"
                    )


def read_source(path: str, stdin: TextIO) -> str:
    try:
        if path == "-":
            # Bytes when there are any, so line endings are counted as sent.
            raw = getattr(stdin, "buffer", None)
            return raw.read().decode("utf-8") if raw is not None else stdin.read()
        # newline="": count the file's own line endings, not translated ones.
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except UnicodeDecodeError as error:
        name = _named(path)
        raise InputError(
            f"{name}: not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x})"
        ) from None
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None


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


def _model_tokenizer(model: str) -> Tokenizer:
    """``model``'s tokenizer; for a model whose tokenizer is not public but
    whose window is known (Claude's), o200k_base, as a session counts its
    requests (an estimate, said on stderr). Else :class:`UnknownModelError`."""
    try:
        return Tokenizer.for_model(model)
    except UnknownModelError:
        from context_core import Budget

        Budget.for_model(model)  # unknown here too: raised
        print(f"context-core: {model}'s tokenizer is not public: counted in o200k_base", file=sys.stderr)
        return Tokenizer("o200k_base")


def run_count(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    """Counts every input it can read; each one it cannot is named on stderr
    (the others are still counted) and makes the exit status 2."""
    try:
        tokenizer = _model_tokenizer(args.model) if args.model else Tokenizer(args.encoding or "o200k_base")
    except UnknownModelError:
        raise InputError(
            f"unknown model {args.model!r}: give its encoding instead, e.g. --encoding o200k_base"
            f" (one of {', '.join(ENCODINGS)})"
        ) from None
    reports, failed = [], False
    for path in args.paths:
        try:
            reports.append(count_input(tokenizer, path, read_source(path, stdin), args.format))
        except ContextCoreError as error:
            print(f"context-core: {error}", file=sys.stderr)
            failed = True
    if args.json:
        document = {
            "encoding": tokenizer.name,
            "inputs": [report.as_json() for report in reports],
            "total": sum(report.total for report in reports),
        }
        write_json(document, stdout)
    elif reports:
        print_table(reports, tokenizer.name, stdout)
    return 2 if failed else 0


def run_sanitize(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    chat = parse_chat(read_source(args.path, stdin), args.path, strict=True)
    if chat is None:
        raise InputError(f"{_named(args.path)}: not a chat history (a JSON list of messages or JSONL)")
    try:
        result = sanitize(
            chat.messages, args.provider, convert_function=args.convert_function, on_invalid=args.on_invalid
        )
    except ContextCoreError as error:
        raise InputError(f"{_named(args.path)}: {error}") from None
    document = {
        "messages": result.messages,
        "system": result.system,
        "changes": [
            {"stage": c.stage, "index": c.index, "action": c.action, "reason": c.reason}
            for c in result.changes
        ],
    }
    write_json(document, stdout)
    return 0
