"""The model table (mirrors rust/core/src/encoding.rs) agrees with tiktoken's."""

from __future__ import annotations

import pytest
import tiktoken.model

from context_core import UnknownModelError, reference
from context_core.tokens import MODELS, encoding_name_for_model


def tiktoken_names() -> list[str]:
    exact = list(tiktoken.model.MODEL_TO_ENCODING)
    prefixed = [prefix + "2025-01-01" for prefix in tiktoken.model.MODEL_PREFIX_TO_ENCODING]
    # p50k_edit served only the retired edit models; context_core does not offer it.
    return [m for m in exact + prefixed if tiktoken.model.encoding_name_for_model(m) != "p50k_edit"]


@pytest.mark.parametrize("model", tiktoken_names())
def test_every_tiktoken_model_resolves_as_tiktoken_does(model):
    expected = tiktoken.model.encoding_name_for_model(model)
    if expected == "o200k_harmony":
        expected = "o200k_base"  # identical ordinary-text encoding; only special tokens differ
    elif expected == "gpt2":
        expected = "r50k_base"
    assert encoding_name_for_model(model) == expected


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-5", "o200k_base"),
        ("gpt-5.1-codex", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("o4-mini-deep-research", "o200k_base"),
        ("o3-pro", "o200k_base"),
        ("gpt-4-turbo-preview", "cl100k_base"),
        ("text-embedding-3-large-v2", "cl100k_base"),
    ],
)
def test_current_families(model, encoding):
    assert encoding_name_for_model(model) == encoding
    assert reference.encoding_name_for_model(model) == encoding


def test_edit_models_are_not_offered():
    with pytest.raises(UnknownModelError):
        encoding_name_for_model("text-davinci-edit-001")


def test_unknown_model_lists_known_ones():
    with pytest.raises(UnknownModelError) as info:
        encoding_name_for_model("llama-3-70b")
    for known in ("gpt-4o", "gpt-5*", "o1-*"):
        assert known in str(info.value)
    assert "gpt-4o-*" in MODELS
