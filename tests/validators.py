"""What each API accepts, as validators written from the providers' documented
rules (`shared/reference/provider-rules.md` collects them with their sources).

Each function returns the list of violations of one history; an empty list
means the API accepts it. Where a rule is model- or provider-dependent, the
strict, portable form is checked (as the sanitize funnel promises).
"""

from __future__ import annotations

from typing import Any

WHITE_SPACE = set(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
TEXT_TYPES = ("text", "input_text", "output_text")


def blank(text: Any) -> bool:
    return isinstance(text, str) and all(c in WHITE_SPACE for c in text)


def _content_blank(content: Any) -> bool:
    if content is None:
        return True
    if isinstance(content, str):
        return blank(content)
    return len(content) == 0


def _blank_text_blocks(content: Any) -> bool:
    return isinstance(content, (list, tuple)) and any(
        isinstance(b, dict) and b.get("type") in TEXT_TYPES and blank(b.get("text", "")) for b in content
    )


def openai(messages: list[dict]) -> list[str]:
    """OpenAI Chat Completions (openai-python `types/chat/*_param.py`, snapshot
    e43b4224; observed 400s quoted in provider-rules.md B2)."""
    problems: list[str] = []
    seen_ids: set[str] = set()
    i = 0
    while i < len(messages):
        m = messages[i]
        role = m.get("role")
        where = f"messages[{i}]"
        # O2: the accepted roles (`function` is deprecated: O10, never emitted).
        if role not in ("system", "developer", "user", "assistant", "tool"):
            problems.append(f"{where}: role {role!r}")
        if m.get("function_call") is not None:
            problems.append(f"{where}: legacy function_call (O10)")
        if role != "assistant" and m.get("tool_calls") is not None:
            problems.append(f"{where}: tool_calls on a {role} message (O4)")
        # O8: a tool message's content is required (an empty list is refused too).
        if role == "tool" and (m.get("content") is None or m.get("content") == []):
            problems.append(f"{where}: tool message without content (O8)")
        # O3: system, developer and user content is required.
        if role in ("system", "developer", "user") and _content_blank(m.get("content")):
            problems.append(f"{where}: empty content (O3)")
        # Strict profile: no empty text parts (A5's rule, portable form).
        if _blank_text_blocks(m.get("content")):
            problems.append(f"{where}: blank text part")
        # Strict profile: user/assistant alternate (some compatible servers require it);
        # same-role neighbours are allowed only when their names differ.
        if i > 0:
            prev = messages[i - 1]
            if prev.get("role") == role and role != "tool" and prev.get("name") == m.get("name"):
                problems.append(f"{where}: same role as the previous message")
        if role == "assistant":
            calls = m.get("tool_calls")
            # O5: tool_calls, when present, is non-empty.
            if calls is not None and len(calls) == 0:
                problems.append(f"{where}: empty tool_calls (O5)")
            # O4: content may be missing only with tool_calls.
            if not calls and _content_blank(m.get("content")):
                problems.append(f"{where}: empty assistant message (O4)")
            if calls:
                ids = [c.get("id") for c in calls]
                for call_id in ids:
                    # A10's rule, portable form: ids unique across the request.
                    if call_id in seen_ids:
                        problems.append(f"{where}: duplicate tool call id {call_id}")
                    seen_ids.add(call_id)
                # O7: followed, contiguously, by one tool message per call id.
                answered: list[str] = []
                j = i + 1
                while j < len(messages) and messages[j].get("role") == "tool":
                    answered.append(messages[j].get("tool_call_id"))
                    j += 1
                if sorted(answered) != sorted(ids):
                    problems.append(f"{where}: tool calls {ids} answered by {answered} (O7/O8)")
                i = j
                continue
        # O8: a tool message must answer the preceding assistant's tool_calls.
        if role == "tool":
            problems.append(f"{where}: tool message without a preceding tool call (O8)")
        i += 1
    return problems


SERVER_USES = ("server_tool_use", "mcp_tool_use")


def _server_result(block: Any) -> bool:
    """A server tool's result block: a type ending in ``_tool_result``, not ``tool_result``."""
    kind = block.get("type") if isinstance(block, dict) else None
    return isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result"


def anthropic(messages: list[dict], system: Any = None, *, request: bool = False) -> list[str]:
    """Anthropic Messages (anthropic-sdk-python `message_create_params.py`,
    "Handle tool calls" and "Extended thinking" docs; rules A1-A19 in
    provider-rules.md B1)."""
    problems: list[str] = []
    seen_ids: set[str] = set()
    # A3 (strict: Bedrock rejects otherwise): the first message is a user message.
    if messages and messages[0].get("role") != "user":
        problems.append("messages[0]: first message is not a user message (A3)")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        content = m.get("content")
        # A1: only user and assistant; system goes to the top-level parameter.
        if role not in ("user", "assistant"):
            problems.append(f"{where}: role {role!r} (A1)")
        if m.get("tool_calls") is not None or m.get("function_call") is not None:
            problems.append(f"{where}: OpenAI tool call keys are not Anthropic fields")
        # A2 (strict profile): roles alternate.
        if i > 0 and messages[i - 1].get("role") == role:
            problems.append(f"{where}: same role as the previous message (A2)")
        # A4: non-empty content (the optional final assistant prefill aside; strict: always).
        if _content_blank(content):
            problems.append(f"{where}: empty content (A4)")
        # A5: text blocks non-empty and not only white space, a tool result's too.
        if _blank_text_blocks(content):
            problems.append(f"{where}: blank text block (A5)")
        results = [b for b in content if isinstance(b, dict)] if isinstance(content, (list, tuple)) else []
        if any(b.get("type") == "tool_result" and _blank_text_blocks(b.get("content")) for b in results):
            problems.append(f"{where}: blank text block in a tool result (A5)")
        blocks = content if isinstance(content, (list, tuple)) else []
        if role == "assistant":
            kinds = [b.get("type") for b in blocks]
            # A16: an assistant message holding thinking starts with it.
            if any(k in ("thinking", "redacted_thinking") for k in kinds) and kinds[0] not in (
                "thinking",
                "redacted_thinking",
            ):
                problems.append(f"{where}: thinking not first (A16)")
            # A19: it does not end with thinking.
            if kinds and kinds[-1] in ("thinking", "redacted_thinking"):
                problems.append(f"{where}: ends with thinking (A19)")
            uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            for use in uses:
                # A10: tool_use ids are unique across the request.
                if use in seen_ids:
                    problems.append(f"{where}: duplicate tool_use id {use} (A10)")
                seen_ids.add(use)
            if uses:
                # A6/A9: the very next message is a user message holding a result for each.
                nxt = messages[i + 1] if i + 1 < len(messages) else None
                results = []
                if (
                    nxt is not None
                    and nxt.get("role") == "user"
                    and isinstance(nxt.get("content"), (list, tuple))
                ):
                    results = [b.get("tool_use_id") for b in nxt["content"] if b.get("type") == "tool_result"]
                if sorted(results) != sorted(uses):
                    problems.append(f"{where}: tool_use {uses} answered by {results} (A6/A8/A9)")
            # A21: a server tool's use and its result are blocks of one assistant
            # message; a use is left unanswered only in a paused turn sent back
            # (``request``, the last message), and a result has its use.
            server_uses = [b.get("id") for b in blocks if b.get("type") in SERVER_USES]
            server_results = [b.get("tool_use_id") for b in blocks if _server_result(b)]
            paused = request and i == len(messages) - 1
            for use in server_uses:
                # A10: ids are unique across the request, server tools' too.
                if use in seen_ids:
                    problems.append(f"{where}: duplicate server tool use id {use} (A10)")
                seen_ids.add(use)
                if use not in server_results and not paused:
                    problems.append(f"{where}: server tool use {use} without its result (A21)")
            for result in server_results:
                if result not in server_uses or server_results.count(result) > 1:
                    problems.append(f"{where}: server tool result {result} without its use, or twice (A21)")
            # ... and a result comes after its use ("must have a corresponding
            # server_tool_use block before it").
            met: set[Any] = set()
            for block in blocks:
                if block.get("type") in SERVER_USES:
                    met.add(block.get("id"))
                elif _server_result(block) and block.get("tool_use_id") in set(server_uses) - met:
                    early = block["tool_use_id"]
                    problems.append(f"{where}: server tool result {early} before its use (A21)")
        if role != "assistant" and any(b.get("type") in SERVER_USES or _server_result(b) for b in blocks):
            problems.append(f"{where}: server tool block outside an assistant message (A21)")
        if role == "user":
            kinds = [b.get("type") for b in blocks]
            results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            # A7: tool_result blocks come first.
            if results and any(k != "tool_result" for k in kinds[: len(results)]):
                problems.append(f"{where}: tool_result blocks not first (A7)")
            # A8: each result refers to a tool_use of the immediately previous assistant message.
            prev = messages[i - 1] if i > 0 else None
            prev_uses = []
            if (
                prev is not None
                and prev.get("role") == "assistant"
                and isinstance(prev.get("content"), (list, tuple))
            ):
                prev_uses = [b.get("id") for b in prev["content"] if b.get("type") == "tool_use"]
            for result in results:
                if result not in prev_uses:
                    problems.append(f"{where}: tool_result {result} without its tool_use (A8)")
    # A20 (``request``: the messages as sent, not a history the caller
    # goes on): a last message of the model's own (a prefill, or a paused
    # turn sent back) does not end in whitespace.
    last = messages[-1] if messages and request else None
    if last is not None and last.get("role") == "assistant":
        content = last.get("content")
        tail = content if isinstance(content, str) else None
        if isinstance(content, (list, tuple)) and content and content[-1].get("type") == "text":
            tail = content[-1].get("text")
        if isinstance(tail, str) and tail != tail.rstrip():
            problems.append(
                f"messages[{len(messages) - 1}]: the last assistant text ends in whitespace (A20)"
            )
    if system is not None and not isinstance(system, (str, list)):
        problems.append("system: not a str or a list of text blocks (A1)")
    return problems
