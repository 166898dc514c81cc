"""The twin of the hashing embedder (``context_core._core._hash_embed``):
the same features, hashes, slots, signs and weights, in float64 (the Rust
side sums in float32, so the two agree to about 1e-6)."""

from __future__ import annotations

import math

__all__ = ["hash_embed"]

_WORD, _TRIGRAM, _HAN, _HAN_PAIR = 1.0, 0.25, 0.5, 1.0
_MASK = (1 << 64) - 1


def _fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & _MASK
    return h


def _is_han(c: str) -> bool:
    o = ord(c)
    return 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF


_NOT_WORD = (
    (0xD7, 0xD7),
    (0xF7, 0xF7),
    (0x2000, 0x2BFF),
    (0x3000, 0x303F),
    (0xFE30, 0xFE4F),
    (0xFF00, 0xFF0F),
    (0xFF1A, 0xFF20),
    (0xFF3B, 0xFF40),
    (0xFF5B, 0xFF65),
)


def _is_word_char(c: str) -> bool:
    if c.isascii():
        return c.isalnum()
    o = ord(c)
    return (
        o >= 0xC0
        and not _is_han(c)
        and not any(lo <= o <= hi for lo, hi in _NOT_WORD)
        and not (c.isspace() or "\x1c" <= c <= "\x1f")
    )


def _add(out: list[float], weight: float, data: bytes) -> None:
    h = _fnv1a(data)
    out[h % len(out)] += weight if (h >> 32) & 1 == 0 else -weight


def _add_word(out: list[float], word: str) -> None:
    _add(out, _WORD, b"w:" + word.encode())
    padded = f"<{word}>"
    for i in range(len(padded) - 2):
        _add(out, _TRIGRAM, b"g:" + padded[i : i + 3].encode())


def hash_embed(text: str, dim: int) -> list[float]:
    """The ``dim``-wide embedding of ``text``: ASCII-lowered words and their
    character trigrams (``<`` and ``>`` around the word), each Chinese
    character and each pair of neighbouring ones, hashed (64-bit FNV-1a of
    a kind prefix and the UTF-8) to slot ``hash % dim`` with the sign of bit
    32; then L2-normalised."""
    out = [0.0] * dim
    word: list[str] = []
    previous_han: str | None = None
    for raw in text:
        c = raw.lower() if "A" <= raw <= "Z" else raw
        if _is_word_char(c):
            word.append(c)
            previous_han = None
            continue
        if word:
            _add_word(out, "".join(word))
            word = []
        if _is_han(c):
            _add(out, _HAN, b"h:" + c.encode())
            if previous_han is not None:
                _add(out, _HAN_PAIR, b"p:" + (previous_han + c).encode())
            previous_han = c
        else:
            previous_han = None
    if word:
        _add_word(out, "".join(word))
    norm = math.sqrt(sum(v * v for v in out))
    return [v / norm for v in out] if norm > 0 else out
