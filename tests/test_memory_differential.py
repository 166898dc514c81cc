"""The memory store's Rust hot paths against their pure-Python twins: the
entity scan (``context_core.reference.entities``) and the hashing embedder
(``context_core.reference.embed``), on texts built from the pieces that
decide them (ids, paths, emails, dates, units, quotes, names, Chinese and
full-width text) mixed with any Unicode."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from context_core import _core
from context_core.reference.embed import hash_embed
from context_core.reference.entities import MAX_PIECE_CHARS, entities

PIECES = [
    "A-8812",
    "order_123",
    "PAY-42",
    "INC0012345",
    "call_22_5",
    "Services/Payments/retry.go",
    "./src/app.py:42:7",
    "~/notes.md",
    "/etc/hosts",
    "I/O",
    "3/4",
    "README.md",
    "deploy.sh",
    "https://Example.com/a/",
    "http://x",
    "bob@example.com",
    "a@b",
    "@alice",
    "@",
    "@_x.",
    "123e4567-e89b-12d3-a456-426614174000",
    "3f9a2c1d",
    "DEADBEEF1",
    "2026-11-30",
    "2026-11-30T10:30",
    "2026-11-30T",
    "10:30",
    "7:05:09",
    "1:2",
    "v1.2",
    "1.2.3",
    "1.2.3-rc.1",
    "1.2",
    "200",
    "200ms",
    "ms",
    "5%",
    "%",
    "3.14",
    "1,500",
    "12",
    "kb",
    "max_retries",
    "retryPolicy",
    "RetryPolicy",
    "HTTPServer",
    "Alice",
    "Chen",
    "AWS",
    "S3",
    "EC2",
    "The",
    "Friday",
    "ERROR",
    "I",
    "'s",
    "’s",
    '"',
    "`",
    "“",
    "”",
    "「",
    "」",
    "(",
    ")",
    ",",
    ".",
    ":",
    "!",
    "?",
    "*",
    "[",
    "]",
    "'",
    "\n",
    "\r\n",
    " ",
    "\t",
    "\x1c",
    "\u3000",
    "\u00a0",
    "\u2019",
    "订单",
    "已退款",
    "日志",
    "。",
    "，",
    "：",
    "（",
    "）",
    "Ａ-８８１２",
    "ｖ１.２.３",
    "é",
    "ß",
    "K",
    "ǅ",
    "İ",
    "x" * (MAX_PIECE_CHARS - 2),
    "y" * MAX_PIECE_CHARS,
]

texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=30).map("".join)
spaced = st.lists(st.sampled_from(PIECES), max_size=20).map(" ".join)


@given(st.one_of(texts, spaced))
def test_entities_agree_with_the_twin(text):
    assert _core._entities(text) == entities(text)


@given(st.one_of(texts, spaced), st.sampled_from([1, 7, 64, 256]))
def test_hash_embeddings_agree_with_the_twin(text, dim):
    ours = np.frombuffer(_core._hash_embed([text], dim), dtype=np.float32)
    twin = np.array(hash_embed(text, dim))
    assert ours.shape == (dim,)
    np.testing.assert_allclose(ours, twin, atol=1e-5)


def test_the_same_thing_named_two_ways_meets():
    a = {v: k for k, v in _core._entities("edit Services/Payments/retry.go for A-8812")}
    b = {v: k for k, v in _core._entities("services/payments/retry.go； 订单Ａ-８８１２")}
    assert set(a) == set(b) == {"services/payments/retry.go", "retry.go", "a-8812"}
    assert a["a-8812"] == "id"
    assert a["retry.go"] == "file"


def test_entity_kinds_on_a_realistic_memory():
    text = (
        "Alice Chen (@alice) wants refunds for order A-8812 retried at most 3 times; "
        "see https://Example.com/runbook/ and services/payments/retry.go, commit 3f9a2c1d, "
        'v2.4.1, by 2026-12-01 10:30, timeouts of 200 ms, mail ops@example.com, "never on Fridays".'
    )
    kinds = {v: k for k, v in _core._entities(text)}
    assert kinds == {
        "a-8812": "id",
        "@alice": "handle",
        "https://example.com/runbook": "url",
        "services/payments/retry.go": "path",
        "retry.go": "file",
        "3f9a2c1d": "hex",
        "2.4.1": "version",
        "2026-12-01": "date",
        "10:30": "time",
        "200 ms": "number",
        "ops@example.com": "email",
        "alice chen": "name",
        "fridays": "name",
        "never on fridays": "quoted",
    }
