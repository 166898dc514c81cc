"""Token-for-token parity with tiktoken (through the reference), all encodings."""

from __future__ import annotations

import functools
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

import context_core
from context_core import _core, reference
from context_core.reference.encodings import tiktoken_file
from corpus import CORPUS
from strategies import ENCODINGS, any_text, edge_text, texts


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_encodes_exactly_as_tiktoken(pair, name):
    rust, ref = pair
    text = CORPUS[name]
    assert rust.encode(text) == ref.encode(text)
    assert rust.count(text) == len(ref.encode(text))


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=texts)
def test_generated_text_encodes_exactly_as_tiktoken(encoding, text):
    rust, ref = context_core.Tokenizer(encoding), reference.Tokenizer(encoding)
    assert rust.encode(text) == ref.encode(text)


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(parts=st.lists(st.one_of(edge_text, any_text), max_size=8))
def test_long_mixed_text_encodes_exactly_as_tiktoken(encoding, parts):
    text = " ".join(parts) * 3
    rust, ref = context_core.Tokenizer(encoding), reference.Tokenizer(encoding)
    assert rust.encode(text) == ref.encode(text)


@functools.cache
def valid_ids(encoding: str) -> list[int]:
    ranks = _core._mergeable_ranks(encoding)
    specials = reference.Tokenizer(encoding)._encoding._special_tokens
    return sorted({*ranks.values(), *specials.values()})


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(data=st.data())
def test_decode_matches_tiktoken_on_any_token_sequence(encoding, data):
    rust, ref = context_core.Tokenizer(encoding), reference.Tokenizer(encoding)
    tokens = data.draw(st.lists(st.sampled_from(valid_ids(encoding)), max_size=30))
    assert rust.decode(tokens) == ref.decode(tokens)
    assert rust.decode_bytes(tokens) == ref.decode_bytes(tokens)


def test_vocabularies_are_openais_files(encoding):
    """The extension's vocabulary, written in tiktoken's format, hashes to the
    SHA-256 tiktoken pins for the file OpenAI publishes."""
    pinned = {
        "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
        "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    }
    ranks = _core._mergeable_ranks(encoding)
    assert hashlib.sha256(tiktoken_file(ranks)).hexdigest() == pinned[encoding]


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=st.text(max_size=60))
def test_lone_surrogates_are_replaced_as_tiktoken_does(encoding, text):
    # st.text() may produce lone surrogates and valid pairs written as two code units.
    text = text + "\ud800" + text + "\ud83d\ude00"
    rust, ref = context_core.Tokenizer(encoding), reference.Tokenizer(encoding)
    assert rust.encode(text) == ref.encode(text)
    assert rust.count(text) == ref.count(text)


def test_one_megabyte_inputs_count_exactly():
    """The worst-case inputs of the benchmarks: exact, and no crash where
    tiktoken's own regex overflows its stack (a megabyte of spaces)."""
    rust, ref = context_core.Tokenizer("o200k_base"), reference.Tokenizer("o200k_base")
    mb = 1 << 20
    for text in ["a" * mb, "7" * mb, "中文字符" * (mb // 12)]:
        assert rust.count(text) == ref.count(text)
    assert rust.count(" " * mb) == len(rust.encode(" " * mb)) > 0
