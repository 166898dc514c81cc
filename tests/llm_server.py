"""A real HTTP server on 127.0.0.1 that speaks the OpenAI Chat Completions and
Anthropic Messages wire formats, scripted per test.

The tests drive the real ``openai`` and ``anthropic`` SDKs against it, so what
is checked is what goes over the wire: the JSON the SDK sent, the status codes
and headers it got back.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

__all__ = ["FakeLLMServer", "Received", "Reply", "anthropic_body", "openai_body"]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"


@dataclass
class Reply:
    """One scripted answer. ``body`` None means a well-formed completion saying
    ``text`` in the format of the path asked; a dict is sent as JSON, bytes as is."""

    status: int = 200
    text: str = "Hello from the fake model."
    body: Union[dict[str, Any], bytes, None] = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    gate: Union[threading.Event, None] = None
    """If set, the reply waits (up to 30 s) until the test sets it."""
    trickle: float = 0.0
    """If set, ``trickle_bytes`` bytes of the reply go out one at a time, this
    many seconds apart (then the rest at once): a server slow as a whole though
    never silent for that long. The body trickles, or the status line and
    headers too with ``trickle_headers``."""
    trickle_bytes: int = 8
    trickle_headers: bool = False
    hung_up: threading.Event = field(default_factory=threading.Event)
    """Set when the client closed the connection before a trickled reply was sent."""
    sent: threading.Event = field(default_factory=threading.Event)
    """Set once the whole reply was sent."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    json: Any
    at: float
    client_port: int = 0
    """The client's end of the connection: two requests on one port shared it."""


def openai_body(text: Union[str, None], model: str = "fake-model", finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
    }


def anthropic_body(
    blocks: list[dict[str, Any]], model: str = "fake-model", stop: str = "end_turn"
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 5},
    }


class FakeLLMServer:
    """Answers each POST with the next scripted :class:`Reply` (a default
    success once the script runs out) and records every request received.

    Each connection serves one request (HTTP/1.0) unless ``keep_alive``
    (HTTP/1.1: the client can reuse it, as it would with a real server)."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        self.received: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        handler = self._handler_class()
        if keep_alive:
            handler.protocol_version = "HTTP/1.1"
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def reset(self) -> None:
        """Forget the requests received and the replies not yet sent (between tests)."""
        with self._lock:
            self.received.clear()
            self._script.clear()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def paths(self) -> list[str]:
        return [r.path for r in self.received]

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # wakes handlers sleeping through a scripted delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def _next(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else Reply()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload: Any = json.loads(raw)
                except ValueError:
                    payload = raw
                with server._lock:
                    server.received.append(
                        Received(
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            payload,
                            time.monotonic(),
                            self.client_address[1],
                        )
                    )
                reply = server._next()
                if reply.delay and server._stop.wait(reply.delay):
                    return
                if reply.gate is not None and not reply.gate.wait(30):
                    return
                body = reply.body
                if body is None:
                    if self.path == OPENAI_PATH:
                        body = openai_body(reply.text)
                    elif self.path == ANTHROPIC_PATH:
                        body = anthropic_body([{"type": "text", "text": reply.text}])
                    else:
                        body = {"error": {"type": "not_found", "message": f"no route {self.path}"}}
                        reply = Reply(status=404)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                if reply.trickle:
                    self._trickle(reply, data)
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                    reply.sent.set()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

            def _trickle(self, reply: Reply, data: bytes) -> None:
                head = "".join(
                    f"{name}: {value}\r\n"
                    for name, value in {
                        "content-type": "application/json",
                        "content-length": str(len(data)),
                        **reply.headers,
                    }.items()
                )
                raw = f"{self.protocol_version} {reply.status} {self.responses[reply.status][0]}\r\n"
                raw = (raw + head + "\r\n").encode("latin-1")
                start = 0 if reply.trickle_headers else len(raw)
                raw += data
                slow = range(start, min(len(raw), start + reply.trickle_bytes))
                try:
                    self.wfile.write(raw[:start])
                    for i in slow:
                        self.wfile.write(raw[i : i + 1])
                        if self._client_left(reply.trickle):
                            reply.hung_up.set()
                            return
                        if server._stop.is_set():
                            return
                    self.wfile.write(raw[slow.stop :])
                    reply.sent.set()
                except OSError:  # the client closed the connection under a write
                    reply.hung_up.set()

            def _client_left(self, seconds: float) -> bool:
                """Wait ``seconds``; whether the client closed the connection meanwhile."""
                sock = self.connection
                readable, _, _ = select.select([sock], [], [], seconds)
                if not readable:
                    return False
                try:
                    return sock.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    return True

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

        return Handler
