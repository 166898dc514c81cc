"""Write the seed corpus of the fuzz targets (fuzz/corpus/<target>/): real
logs in log_reader's input layout and chat histories for message_reader.
Run from anywhere with context_core installed: python fuzz/make_corpus.py."""

from __future__ import annotations

import hashlib
import json
import struct
import tempfile
from pathlib import Path

from context_core import MessageLog

HERE = Path(__file__).parent

HISTORY = [
    {"role": "system", "content": "You are a careful agent. You must never delete user files."},
    {"role": "user", "content": "为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "curl -s http://localhost:8080/health\n" * 20},
    {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "plan"}, {"type": "text", "text": "ok"}],
    },
    {"role": "user", "content": "thanks", "pinned": True, "priority": 2.5, "weight": 1.25},
]
ANTHROPIC = [
    {"role": "user", "content": "look it up"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "THINK: search first", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "A-8812"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}]},
    {"role": "assistant", "content": "The request was cancelled..."},
    {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]},
]
LEGACY = [
    {"role": "user", "content": "call it"},
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "function", "name": "f", "content": "done"},
    {"role": "assistant", "content": "[tool_call: f]"},
    {"role": "user", "content": "", "tags": ["constraint"], "timestamp": 1.7e9},
]


def layout(path: Path, flags: int) -> bytes:
    """A log's files as log_reader reads them: index and data cut to what the
    records use (not the reserved zeros), meta whole."""
    with MessageLog.open(path, readonly=True) as log:
        rows = log.headers().copy()
    index = (path / "index").read_bytes()[: 64 + 64 * len(rows)]
    end = int(rows["offset"][-1] + (72 + rows["stored_len"][-1] + 7) // 8 * 8) if len(rows) else 64
    data = (path / "data").read_bytes()[:end]
    meta = (path / "meta").read_bytes() if (path / "meta").exists() else b""
    return bytes([flags]) + struct.pack("<I", len(index)) + index + struct.pack("<I", len(data)) + data + meta


def logs(tmp: Path) -> dict[str, Path]:
    made = {}
    for name, build in {
        "linear": lambda log: log.append_many(HISTORY),
        "branched": lambda log: (
            log.append_many(HISTORY),
            log.add_summary("the user wants retries", (1, 3), level=2),
            log.rewind(2),
            log.append({"role": "user", "content": "again, " * 60}),
            log.add_summary("all of it", (0, 5), level=3),
        ),
        "anthropic": lambda log: log.append_many(ANTHROPIC + LEGACY),
        "empty": lambda log: None,
    }.items():
        path = tmp / name
        with MessageLog.open(path, create=True) as log:
            build(log)
        made[name] = path
    # A repaired log holds a lost node.
    lost = tmp / "lost"
    with MessageLog.open(lost, create=True) as log:
        log.append_many(HISTORY)
        offset = int(log.headers()["offset"][2])
    with open(lost / "data", "r+b") as data:
        data.seek(offset + 80)
        data.write(b"\xff")
    MessageLog.repair(lost)
    made["lost"] = lost
    return made


def write(target: str, content: bytes) -> None:
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(content).hexdigest()[:16]).write_bytes(content)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for path in logs(Path(tmp)).values():
            for flags in (0, 0b0111, 0b1111, 0b10111):
                write("log_reader", layout(path, flags))
    for history in (HISTORY, ANTHROPIC, LEGACY, HISTORY + ANTHROPIC + LEGACY):
        write("message_reader", json.dumps(history, ensure_ascii=False).encode())
        for message in history:
            write("message_reader", json.dumps(message, ensure_ascii=False).encode())


if __name__ == "__main__":
    main()
