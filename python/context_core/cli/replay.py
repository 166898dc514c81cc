"""``context-core demo``, ``replay`` and ``build``: a transcript replayed
through a :class:`~context_core.Session`, one model call at a time, as a
server would have run it.

At each assistant message of the transcript the session prepares the
request (the reply is then recorded, tool results before the next call), and
the call is measured against what naive glue would send: the whole history
so far, or its last 20 messages. A constraint counts as retained when its
text, word for word, is in the request (a summary that rephrases a rule is
not counted, so the figure is a floor).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from context_core.cli.count import Chat, InputError, parse_chat
from context_core.cli.log_dir import open_log, readable, unreadable
from context_core.cli.output import write_json

__all__ = ["Replay", "load_transcript", "replay", "run_build", "run_demo", "run_replay"]

LAST_N = 20


@dataclass
class Call:
    """One model call of the replay."""

    turn: int
    step: int
    sent: int
    naive: int
    last_n: int
    latency_ms: float
    prefix_changed: bool
    constraints: int
    retained: int
    retained_last_n: int
    messages: int
    repairs: int


@dataclass
class Replay:
    calls: list[Call] = field(default_factory=list)
    compactions: dict[str, Any] = field(default_factory=dict)
    last_request: dict[str, Any] = field(default_factory=dict)
    last_report: Any = None
    over_budget: int = 0
    """Calls whose turn in progress alone was over the budget (no request)."""
    last_over_budget: str = ""
    """Why the last call had no request, as the session said ("" if it had one)."""
    model: str = ""
    provider: str = ""
    policy: str = ""

    def summary(self) -> dict[str, Any]:
        calls = self.calls
        latencies = sorted(c.latency_ms for c in calls)
        sent, naive, last_n = (sum(getattr(c, name) for c in calls) for name in ("sent", "naive", "last_n"))
        final = calls[-1] if calls else None
        kept = [c.retained / c.constraints for c in calls if c.constraints]
        stable = sum(not c.prefix_changed for c in calls[1:])
        return {
            "model": self.model,
            "provider": self.provider,
            "policy": self.policy,
            "calls": len(calls),
            "over_budget": self.over_budget,
            "turns": final.turn + 1 if final else 0,
            "tokens_sent": sent,
            "tokens_naive": naive,
            "tokens_last_20": last_n,
            "vs_naive": round(sent / naive, 4) if naive else None,
            "vs_last_20": round(sent / last_n, 4) if last_n else None,
            "constraints": final.constraints if final else 0,
            "retained_final": final.retained if final else 0,
            "retained_final_last_20": final.retained_last_n if final else 0,
            "retention_min": round(min(kept), 4) if kept else None,
            "compactions_written": self.compactions.get("written", {}),
            "compaction_failures": self.compactions.get("failures", 0),
            "prefix_stable": round(stable / (len(calls) - 1), 4) if len(calls) > 1 else None,
            "prefix_tokens": self.prefix_tokens(),
            "prefix_cacheable": self.prefix_cacheable(),
            "latency_p50_ms": round(_percentile(latencies, 0.5), 3) if calls else None,
            "latency_p99_ms": round(_percentile(latencies, 0.99), 3) if calls else None,
        }

    def prefix_tokens(self) -> int | None:
        """Tokens of the last request's cached prefix (tools, system, stable part)."""
        if self.last_report is None:
            return None
        sections: dict[str, int] = self.last_report.sections
        return sum(sections.get(name, 0) for name in ("tools", "system", "stable"))

    def prefix_cacheable(self) -> bool | None:
        """Whether Claude caches that prefix (``None``: not Anthropic, or no
        request): one under the model's minimum is never cached, however
        stable it is. (OpenAI caches the prompt's start, messages too, past
        1,024 tokens.)"""
        from context_core.prompt import min_cache_tokens

        tokens = self.prefix_tokens()
        if self.provider != "anthropic" or tokens is None:
            return None
        return tokens >= min_cache_tokens(self.model)


def _prefix_line(s: dict[str, Any]) -> str:
    """How stable the cached prefix was, or why nothing of it was cached."""
    if s["prefix_cacheable"] is False:
        from context_core.prompt import min_cache_tokens

        return (
            f"n/a: {s['prefix_tokens']:,} tokens, under the {min_cache_tokens(s['model']):,}-token"
            f" minimum {s['model']} caches (nothing cached)"
        )
    return _ratio(s["prefix_stable"])


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- reading a transcript ------------------------------------------------------------


def load_transcript(path: str) -> Chat:
    """A transcript file (JSON or JSONL, OpenAI or Anthropic, a request
    body) or a message log directory, read."""
    where = Path(path)
    if where.is_dir():
        from context_core import LogCorruptError

        log, where = open_log(path)
        with log:
            try:
                log.verify()
                nodes = log.read(log.path())
            except LogCorruptError as error:
                # What can be read is still replayed; the user is told it is partial.
                try:
                    seqs = log.path()
                except LogCorruptError as damage:  # the index itself: no path to follow
                    raise unreadable(where, damage) from None
                nodes = [payload for _, payload in readable(log, seqs)]
                unread = len(seqs) - len(nodes)
                # Damage off the path (records the index lacks, say) leaves
                # every record on it readable: what it holds is not replayed.
                partial = (
                    f"replaying what reads ({unread} of the {len(seqs)} records on the path do not)"
                    if unread
                    else f"replaying the {len(seqs)} records on the path, which all read; what the"
                    " damage holds is left out (MessageLog.repair recovers what it can)"
                )
                print(f"context-core: warning: {error}; {partial}", file=sys.stderr)
        return Chat([n for n in nodes if isinstance(n, dict) and "role" in n], [])
    try:
        text = where.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    chat = parse_chat(text, path, strict=True)
    if chat is None:
        raise InputError(f"{path}: not a transcript (a JSON list of messages, JSONL, or a request body)")
    from context_core import ContextCoreError, Tokenizer

    try:  # a message no API takes, said as such (and where), not as what it then lacks
        Tokenizer().count_messages(chat.messages, chat.tools)
    except ContextCoreError as error:
        raise InputError(f"{path}: {error}") from None
    return Chat(
        [dict(m) for m in chat.messages], list(chat.tools or []), chat.model, chat.anthropic, chat.settings
    )


def shape_of(messages: list[dict[str, Any]]) -> str:
    """``"anthropic"`` when the transcript's first message shaped for one API
    only is Anthropic's, else ``"openai"`` (as a session's directory tells)."""
    from context_core.session.session import shape_of as provider_shape

    return provider_shape(messages) or "openai"


# -- the replay ------------------------------------------------------------------------


def _identity(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The transcript's opening system prompt, as the session's identity
    (the rest replayed): given as text, or as text blocks (Anthropic's
    ``system`` list, often with ``cache_control``: the session places its
    own breakpoints)."""
    if messages and messages[0].get("role") in ("system", "developer"):
        text = _blocks_text(messages[0].get("content"))
        if text is not None:
            return text, messages[1:]
    return "", messages


def _blocks_text(content: Any) -> str | None:
    """``content`` as one text: a str, or text blocks joined (``None`` for
    anything else, an image say)."""
    from context_core.summarize.offline import own_text

    if isinstance(content, list) and content and not all(map(_text_block, content)):
        return None
    return own_text({"content": content}) if isinstance(content, (str, list)) else None


def replay(
    messages: list[dict[str, Any]],
    tools: list[Any],
    *,
    model: str,
    provider: str,
    budget: int | None,
    policy: str,
    directory: str,
    progress: Any = None,
    max_tokens: int | None = None,
) -> Replay:
    """Drive a session in ``directory`` through ``messages`` (``max_tokens``:
    the reply cap a request body gave, which the room is kept beside)."""
    from context_core import Budget, ContextCoreError, MemoryStore, OverBudgetError, Session
    from context_core.memory_store import HashingEmbedder
    from context_core.session.session import says_nothing
    from context_core.summarize.offline import own_text, rule_texts

    identity, rest = _identity(messages)
    Path(directory).mkdir(parents=True, exist_ok=True)
    chosen = None if budget is None else Budget.for_model(model, window=budget)
    session = Session.open(
        directory,
        model=model,
        provider=provider,  # type: ignore[arg-type]
        identity=identity,
        tools=tools,
        policy=policy,  # type: ignore[arg-type]
        budget=chosen,
        max_tokens=max_tokens,
        # Hashing vectors: no model to load, the same on every host.
        store=MemoryStore(Path(directory) / "memory.db", embedder=HashingEmbedder()),
    )
    tok = session.tokenizer  # the model's encoding: the baselines in the units `sent` is in
    fixed = tok.count_messages([{"role": "system", "content": identity}] if identity else [], tools or None)
    history: list[dict[str, Any]] = []
    running = 0  # tokens of the history so far, message by message
    constraints: list[str] = []
    said: str | dict[str, Any] | None = None
    turn = -1
    result = Replay(model=model, provider=provider, policy=policy)
    assistants = sum(m.get("role") == "assistant" for m in rest)
    done = 0

    def replied() -> None:  # one more of the transcript's replies replayed
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, assistants)

    at = len(messages) - len(rest) - 1  # the transcript's number of the message replayed
    said_at = blamed = at  # the message `said` came from; the one an error is about
    try:
        for message in rest:
            at += 1
            blamed = at
            role = message.get("role")
            if role == "assistant" and said is None and not session.needs_reply:
                # A reply with nothing before it to answer (the first, one
                # after another, one after results no call waited on): no
                # call could have made it. Kept.
                session.record(_reply(message))
                history.append(message)
                running += tok.count_message(message)
                replied()
                continue
            if role == "assistant":
                blamed = at if said is None else said_at  # an input is checked when it is sent
                try:
                    request = session.prepare(said)
                except OverBudgetError as error:
                    # The turn in progress alone is over the budget: a server's
                    # call would fail here. Counted, and the replay goes on.
                    if said is not None:
                        turn += 1
                    said, blamed = None, at
                    result.over_budget += 1
                    result.last_over_budget = str(error)
                    session.record(_reply(message))
                    history.append(message)
                    running += tok.count_message(message)
                    replied()
                    continue
                if said is not None:
                    turn += 1
                said, blamed = None, at
                report = request.report
                # The model's time: a server's background work (compaction,
                # the store's writes) runs while the model answers. Called
                # back to back, the turns would leave it no time, and the
                # windows would show a session that never compacts.
                session.join()
                started = time.perf_counter()
                session.record(_reply(message))
                recorded = time.perf_counter() - started
                sent_text = json.dumps(dict(request), ensure_ascii=False)
                result.calls.append(
                    Call(
                        turn=max(turn, 0),
                        step=report.step,
                        sent=report.total,
                        naive=fixed + running,
                        # `fixed` holds the reply priming once; the messages are counted alone.
                        last_n=fixed + sum(map(tok.count_message, history[-LAST_N:])),
                        latency_ms=(report.timings["total"] + recorded) * 1e3,
                        prefix_changed=report.prefix_changed,
                        constraints=len(constraints),
                        retained=sum(
                            json.dumps(c, ensure_ascii=False)[1:-1] in sent_text for c in constraints
                        ),
                        retained_last_n=sum(
                            any(c in own_text(m) for m in history[-LAST_N:]) for c in constraints
                        ),
                        messages=len(request["messages"]),
                        repairs=len(report.repairs),
                    )
                )
                result.last_request, result.last_report = dict(request), report
                result.last_over_budget = ""
                replied()
            elif role == "tool":
                _result(session, message.get("tool_call_id"), message.get("content"), False)
            elif role == "user" and _results_of(message):
                rest_of_it = [
                    b
                    for b in message["content"]
                    if not (isinstance(b, dict) and b.get("type") == "tool_result")
                ]
                for block in _results_of(message):
                    is_error = bool(block.get("is_error", False))
                    _result(session, block.get("tool_use_id"), block.get("content"), is_error)
                if not says_nothing(rest_of_it):  # text said after the results: the turn's input too
                    said, said_at = {"role": "user", "content": rest_of_it}, at
            elif role in ("system", "developer"):
                session.log.append({k: v for k, v in message.items() if k != "timestamp"})
            elif role == "user" and says_nothing(message.get("content")):
                pass  # an empty input, which a session refuses: the reply after it continues the turn
            elif role == "user":
                text = message.get("content")
                if said is not None:
                    # Two inputs with no reply between: the first goes in
                    # unanswered, through the session as a server's would (an
                    # input it refuses stays out; the same one again is a retry).
                    blamed = said_at
                    with contextlib.suppress(OverBudgetError):
                        session.prepare(said)
                    blamed = at
                # Text as a str; blocks (images, documents) as the message itself.
                said = (
                    text if isinstance(text, str) else {k: v for k, v in message.items() if k != "timestamp"}
                )
                said_at = at
                stated = own_text(message)  # a str, or its text blocks' (beside images)
                if stated:  # the rules it states, as compaction carries them
                    constraints.extend(rule_texts(stated))
            history.append(message)
            running += tok.count_message(message)
        if session.compactor is not None:
            session.compactor.close(wait=True)
            status = session.compactor.status
            result.compactions = {"written": dict(status.written), "failures": status.failures}
    except ContextCoreError as error:  # which message of the transcript it was
        raise _at_message(error, blamed) from error
    finally:
        session.close(persist=False)
        session.store.close()
    return result


def _text_block(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _reply(message: dict[str, Any]) -> dict[str, Any]:
    """A transcript's reply as the API gave it: no timestamp or usage, no thinking
    block that lost its signature in an export (the API refuses one sent
    back, so a session refuses to record it; the model's text and calls
    are what the replay is about)."""
    from context_core.session.tool_calls import unsigned_thinking

    # Its usage was another request's: fed to the budget, it would be
    # taken for the replayed request's (a sample the budget refuses).
    reply = {k: v for k, v in message.items() if k not in ("timestamp", "usage")}
    content = reply.get("content")
    if isinstance(content, list):
        reply["content"] = [block for block in content if not unsigned_thinking(block)]
    return reply


def _at_message(error: Exception, at: int) -> Exception:
    """``error`` naming message ``at`` of the transcript, its class and
    fields kept (``error`` itself, if its class cannot be made so)."""
    try:
        located = type(error)(f"message {at}: {error}")
    except Exception:  # a class that takes more than a message
        return error
    located.__dict__.update(error.__dict__)
    return located


def _results_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _result(session: Any, call_id: Any, content: Any, is_error: bool) -> None:
    # A result no call is waiting on (the transcript's own defect) is left
    # out, as repair would; one that is waited on and cannot be stored (a
    # lone surrogate) fails the replay, as a reply that cannot does.
    if isinstance(call_id, str) and session._waiting_as(call_id) in session._pending:
        session.record_tool_result(call_id, "" if content is None else content, is_error=is_error)


# -- output ------------------------------------------------------------------------------


def _progress(stderr: TextIO, unit: str = "replies") -> tuple[Any, Any]:
    """A progress callback (a bar on a terminal, a plain line every tenth
    when piped, counting ``unit``) and what stops it."""
    if stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        from context_core.cli.console import console

        # On stderr, the terminal it was checked for: stdout may be a file
        # the report goes to.
        bar = Progress(
            "replaying",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=True,
            console=console(stderr, None),
        )
        task = bar.add_task("replay", total=None)
        bar.start()

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return update, bar.stop
    step = {"next": 0}

    def line(done: int, total: int) -> None:
        if done >= step["next"] or done == total:
            print(f"replayed {done}/{total} {unit}", file=stderr, flush=True)
            step["next"] = done + max(1, total // 10)

    return line, lambda: None


def print_replay(result: Replay, rows: int, out: TextIO) -> None:
    from rich.table import Table

    from context_core.cli.console import console

    screen = console(out, 120)
    calls = result.calls
    rows = min(rows, len(calls))  # evenly spaced calls: never more rows than calls
    pick = sorted({round(i * (len(calls) - 1) / max(1, rows - 1)) for i in range(rows)}) if calls else []
    table = Table(title=f"Per call ({len(pick)} of {len(calls)}, evenly spaced)")
    for name in ("turn", "call", "msgs", "sent", "naive", "last 20", "kept rules", "ms", "prefix"):
        table.add_column(name, justify="right")
    for i in pick:
        c = calls[i]
        table.add_row(
            str(c.turn),
            f"{c.turn}.{c.step}",
            str(c.messages),
            f"{c.sent:,}",
            f"{c.naive:,}",
            f"{c.last_n:,}",
            f"{c.retained}/{c.constraints}",
            f"{c.latency_ms:.2f}",
            "changed" if c.prefix_changed else "kept",
        )
    screen.print(table)
    s = result.summary()
    report = Table(title="Report", show_header=False)
    report.add_column("what")
    report.add_column("value", justify="right")
    rows_out = [
        ("model / provider / policy", f"{s['model']} / {s['provider']} / {s['policy']}"),
        ("turns / model calls", f"{s['turns']:,} / {s['calls']:,}"),
        ("calls over the budget (not sent)", str(s["over_budget"])),
        ("tokens sent", f"{s['tokens_sent']:,}"),
        ("  naive full history", f"{s['tokens_naive']:,} ({_ratio(s['vs_naive'])} of it sent)"),
        ("  messages[-20:]", f"{s['tokens_last_20']:,} ({_ratio(s['vs_last_20'])} of it sent)"),
        ("constraints kept at the end", f"{s['retained_final']}/{s['constraints']} (verbatim)"),
        ("  by messages[-20:]", f"{s['retained_final_last_20']}/{s['constraints']}"),
        ("lowest retention on any call", _ratio(s["retention_min"])),
        (
            "compactions written (by level)",
            ", ".join(f"L{k}: {v}" for k, v in s["compactions_written"].items()) or "none",
        ),
        ("compactions failed or rejected", str(s["compaction_failures"])),
        ("cached prefix kept, call to call", _prefix_line(s)),
        (
            "turn latency p50 / p99",
            "n/a (no call sent)"
            if s["latency_p50_ms"] is None
            else f"{s['latency_p50_ms']} / {s['latency_p99_ms']} ms",
        ),
    ]
    for what, value in rows_out:
        report.add_row(what, value)
    screen.print(report)


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _options(args: argparse.Namespace, chat: Chat) -> tuple[str, str]:
    from context_core import Budget, ContextCoreError
    from context_core.session import provider_of

    messages = chat.messages
    shape = "anthropic" if chat.anthropic else shape_of(messages)
    model = args.model
    if model is None and chat.model is not None and args.provider in (None, provider_of(chat.model)):
        with contextlib.suppress(ContextCoreError):  # a model of the body's it knows
            Budget.for_model(chat.model)
            model = chat.model
    if model is None:  # the default: one of the provider's, else of the transcript's shape
        model = "claude-sonnet-4-5" if (args.provider or shape) == "anthropic" else "gpt-4o"
    provider = args.provider or provider_of(model)
    if provider != shape and any(m.get("role") == "tool" or _results_of(m) for m in messages):
        # Tool results in the other provider's shape would be repaired away.
        raise InputError(
            f"this transcript's tool calls are in {shape}'s shape; replay it for {shape}"
            f" (--provider {shape} or one of its models), not {provider}"
        )
    return model, provider


def _reply_cap(chat: Chat, file: str) -> int | None:
    """The reply cap a request body gives (``max_tokens``, or OpenAI's
    ``max_completion_tokens``), or ``None`` (absent or null). Any other
    value than a positive int is refused, as the APIs refuse it: copied
    into the request, it would fail there."""
    cap = None
    for key in ("max_tokens", "max_completion_tokens"):
        value = (chat.settings or {}).get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            shown = json.dumps(value, ensure_ascii=False)
            raise InputError(f"{file}: {key} must be a positive whole number of tokens, not {shown[:80]}")
        cap = value if cap is None else cap
    return cap


def _run(args: argparse.Namespace, chat: Chat, stderr: TextIO) -> Replay:
    import warnings

    from context_core import BudgetTooSmallError, ContextCoreError, PromptCacheWarning, UnknownModelError

    model, provider = _options(args, chat)
    # Checked before the run, whose errors are said with the file's name.
    cap = _reply_cap(chat, getattr(args, "file", "the demo session"))
    update, stop = _progress(stderr) if not getattr(args, "quiet", False) else (None, lambda: None)
    with tempfile.TemporaryDirectory(prefix="context-core-") as directory, warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptCacheWarning)  # said once in the report instead
        try:
            return replay(
                chat.messages,
                list(chat.tools or []),
                model=model,
                provider=provider,
                budget=args.budget,
                policy=args.policy,
                directory=directory,
                progress=update,
                max_tokens=cap,
            )
        except UnknownModelError:
            # The library's own words name a keyword argument; here it is an option.
            raise InputError(
                f"unknown model {model!r}: give its window in tokens with --budget N"
                " (or --model with a known one, e.g. gpt-4o or claude-sonnet-4-5)"
            ) from None
        except BudgetTooSmallError:
            raise InputError(
                f"--budget {args.budget} leaves no room for the history; give a larger one"
            ) from None
        except ContextCoreError as error:  # a message the session refused: named with its file
            raise InputError(f"{args.file}: {error}") from None
        finally:
            stop()


#: The largest ``--budget``: a hundred times the largest window on sale.
MAX_BUDGET = 1_000_000_000


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric options, before anything is written or read."""
    if getattr(args, "rows", 1) < 1:
        raise InputError(f"--rows must be at least 1, got {args.rows}")
    if args.budget is not None and args.budget < 0:
        raise InputError(f"--budget is a window in tokens, never negative; got {args.budget}")
    if args.budget is not None and args.budget > MAX_BUDGET:
        # Past any model's window; the limits, computed in floats, would print rounded.
        raise InputError(f"--budget is a window in tokens, at most {MAX_BUDGET:,}; got {args.budget:,}")


def _emit(result: Replay, args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        document = {"summary": result.summary(), "calls": [vars(c) for c in result.calls]}
        write_json(document, out)
    else:
        print_replay(result, args.rows, out)


def run_demo(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    from context_core.cli.demo_session import TOOLS, write_session

    if args.turns < 1:
        raise InputError(f"--turns must be at least 1, got {args.turns}")
    _check_numbers(args)
    from context_core.session import provider_of

    # Written in the shape of the provider it is replayed for.
    provider = args.provider or provider_of(args.model or "gpt-4o")
    # A directory of its own (0700): a fixed name in a shared /tmp could be
    # another user's file, or a link to one.
    path = Path(tempfile.mkdtemp(prefix="context-core-demo-")) / f"session-{args.seed}.jsonl"
    messages = write_session(path, args.turns, args.seed, provider)
    print(f"wrote a {args.turns}-turn agent session ({len(messages):,} messages) to {path}", file=sys.stderr)
    _emit(_run(args, Chat(messages, TOOLS), sys.stderr), args, stdout)
    return 0


def run_replay(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    _check_numbers(args)
    chat = load_transcript(args.file)
    if not any(m.get("role") == "assistant" for m in chat.messages):
        raise InputError(f"{args.file}: no assistant message, so no model call to replay")
    _emit(_run(args, chat, sys.stderr), args, stdout)
    return 0


def run_build(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    """The request for the transcript's last turn: the history replayed,
    then one more prepare for what follows its last message."""
    _check_numbers(args)
    chat = load_transcript(args.file)
    messages = chat.messages
    from context_core.session.session import says_nothing

    if messages and messages[-1].get("role") == "user" and says_nothing(messages[-1].get("content")):
        # The replay passes a blank input over: the request built would be an older turn's.
        raise InputError(f"{args.file}: the last user message is blank, so no request is built for it")
    if messages and messages[-1].get("role") == "assistant":
        pass  # the request is the one that produced the last reply
    else:
        messages = [
            *messages,
            {"role": "assistant", "content": ""},
        ]  # a placeholder reply, not recorded as sent
    args.quiet = True
    result = _run(args, replace(chat, messages=messages), sys.stderr)
    request, report = result.last_request, result.last_report
    if report is None and not result.last_over_budget:
        raise InputError(f"{args.file}: no user input, so no request to build")
    if report is None or result.last_over_budget:
        # The session's own words: the prompt may be what leaves the input no room.
        raise InputError(f"{args.file}: no request can be built for the last turn: {result.last_over_budget}")
    # The body's own settings (temperature, a reply cap, ...) go as given;
    # the session's fields (model, messages, system, tools) are its own.
    # (The reply cap went to the session, which writes it in the model's own field.)
    caps = {"max_tokens", "max_completion_tokens"}
    caps = caps if not caps.isdisjoint(request) else set()
    settings = {k: v for k, v in (chat.settings or {}).items() if k not in request and k not in caps}
    request = {**settings, **request}
    if result.prefix_cacheable() is False:  # the breakpoints left out, the body's own on its system too
        from context_core.prompt import min_cache_tokens

        print(
            f"note: no cache breakpoint: the cached prefix (tools, system) counts {result.prefix_tokens():,}"
            f" tokens, under the {min_cache_tokens(result.model):,}-token minimum {result.model} caches",
            file=sys.stderr,
        )
    if args.json:
        write_json(request, stdout)
        return 0
    from rich.table import Table

    from context_core.cli.console import console

    table = Table(title=f"Request for the last turn ({result.model}, {result.provider}, {result.policy})")
    table.add_column("section")
    table.add_column("tokens", justify="right")
    for name, tokens in report.sections.items():
        table.add_row(name, f"{tokens:,}")
    table.add_row("total (exact, as sent)", f"{report.total:,}")
    table.add_row("limit", f"{report.limit:,}")
    screen = console(stdout, 100)
    screen.print(table)
    summary = f"{len(request['messages'])} messages, prefix {report.prefix_hash[:16]}"
    screen.print(f"{summary}, {len(report.repairs)} repairs")
    return 0
