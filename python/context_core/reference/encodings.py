"""tiktoken encodings built offline from the vocabularies inside the extension.

tiktoken downloads its vocabulary files on first use; context_core embeds them
instead. Here each vocabulary is read back out of ``context_core._core``,
written out in tiktoken's own file format and checked against the SHA-256 that
tiktoken pins for the file OpenAI publishes, so the reference runs with no
network and proves the embedded vocabulary is byte-for-byte OpenAI's.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
from typing import TYPE_CHECKING, Any

from context_core import _core

if TYPE_CHECKING:
    import tiktoken

    from context_core._core import EncodingName

# From tiktoken_ext/openai_public.py: the patterns and the pinned file hashes.
_R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

# Keyed by the extension's encoding names, so a name found here is one ``_mergeable_ranks`` takes.
_SPECS: dict[EncodingName, tuple[str, dict[str, int], str]] = {
    "o200k_base": (
        _O200K_PATTERN,
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "p50k_base": (
        _R50K_PATTERN,
        {"<|endoftext|>": 50256},
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    ),
    "r50k_base": (
        _R50K_PATTERN,
        {"<|endoftext|>": 50256},
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    ),
}

ALIASES = {"gpt2": "r50k_base"}


def tiktoken_file(ranks: dict[bytes, int]) -> bytes:
    """The vocabulary in tiktoken's ``.tiktoken`` format: ``base64 rank`` lines."""
    lines = (
        f"{base64.b64encode(token).decode()} {rank}\n"
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    )
    return "".join(lines).encode()


def tiktoken_module(name: str = "tiktoken") -> Any:
    """``tiktoken`` (or one of its modules), imported when the twin first
    needs it: the twin ships in the package and imports without it, but
    counting with it needs the test extra."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            "context_core.reference counts with OpenAI's tiktoken, a test dependency: "
            "pip install 'context-core[test]'"
        ) from error


@functools.cache
def get_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, built from the extension's vocabulary."""
    name = ALIASES.get(name, name)
    if name not in _SPECS:
        raise ValueError(f"unknown encoding {name!r}")
    pattern, special_tokens, expected_sha256 = _SPECS[name]
    ranks = _core._mergeable_ranks(name)
    digest = hashlib.sha256(tiktoken_file(ranks)).hexdigest()
    if digest != expected_sha256:
        raise RuntimeError(
            f"{name}: embedded vocabulary hashes to {digest}, OpenAI's file to {expected_sha256}"
        )
    encoding: tiktoken.Encoding = tiktoken_module().Encoding(
        name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special_tokens
    )
    return encoding
