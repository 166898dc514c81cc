"""Embedders: the user's own OpenAI SDK client against the local HTTP
server (sync and async), the async form of any embedder, and refusals of
what an embedder must not return."""

from __future__ import annotations

import asyncio

import numpy as np
import openai
import pytest

from context_core import EmbeddingError, MemoryStore
from context_core.memory_store import (
    CallableEmbedder,
    HashingEmbedder,
    OpenAIEmbedder,
    WordLlamaEmbedder,
    aembed,
    default_embedder,
)
from llm_server import FakeLLMServer, Reply


def embeddings_body(rows: list[list[float]]) -> dict:
    # Out of order on purpose: the SDK's rows carry their index.
    data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)][::-1]
    return {"object": "list", "data": data, "model": "emb", "usage": {"prompt_tokens": 3, "total_tokens": 3}}


@pytest.fixture
def server():
    with FakeLLMServer() as s:
        yield s


def test_openai_embeddings_through_the_users_client(server, tmp_path):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    server.script(
        Reply(body=embeddings_body([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])),
        Reply(body=embeddings_body([[0.0, 2.0, 0.0]])),
    )
    embedder = OpenAIEmbedder(client, "emb", dimensions=3)
    with MemoryStore(tmp_path / "m.db", embedder=embedder) as store:
        store.remember_many(["first memory", "second memory"])
        hit = store.search("something", k=1)[0]
    assert hit.text == "second memory"
    assert hit.cosine == pytest.approx(1.0)
    sent = server.received[0]
    assert sent.path == "/v1/embeddings"
    assert sent.json["model"] == "emb"
    assert sent.json["input"] == ["first memory", "second memory"]
    assert sent.json["dimensions"] == 3


def test_a_failed_or_wrong_answer_writes_nothing(server, tmp_path):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    server.script(
        Reply(body=embeddings_body([[1.0, 0.0]])),
        Reply(status=500, body={"error": {"message": "boom", "type": "server_error"}}),
        Reply(body=embeddings_body([[1.0, 0.0, 0.0]])),
        Reply(body=embeddings_body([[1.0], [2.0]])),
    )
    with MemoryStore(tmp_path / "m.db", embedder=OpenAIEmbedder(client, "emb")) as store:
        store.remember("the first one")
        with pytest.raises(EmbeddingError, match="request failed"):
            store.remember("a server error")
        with pytest.raises(EmbeddingError) as wide:
            store.remember("the wrong width")
        assert wide.value.expected == 2
        with pytest.raises(EmbeddingError, match="shape"):
            store.remember("one text, two rows")
        assert store.count() == 1


def test_async_embeddings(server):
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    server.script(Reply(body=embeddings_body([[0.5, 0.5]])))
    rows = asyncio.run(aembed(OpenAIEmbedder(client, "emb"), ["x"]))
    assert rows.dtype == np.float32
    assert rows.tolist() == [[0.5, 0.5]]
    local = asyncio.run(aembed(HashingEmbedder(8), ["x", "y"]))
    assert np.array_equal(local, HashingEmbedder(8).embed(["x", "y"]))


def test_a_callable_that_returns_garbage_is_refused():
    with pytest.raises(EmbeddingError, match="not an array of numbers"):
        CallableEmbedder(lambda texts: [["a", "b"]]).embed(["x"])
    with pytest.raises(EmbeddingError, match="NaN"):
        CallableEmbedder(lambda texts: [[float("nan")]]).embed(["x"])
    with pytest.raises(EmbeddingError, match="raised"):
        CallableEmbedder(lambda texts: 1 / 0).embed(["x"])


def test_wordllama_loads_its_bundled_model_with_no_network(tmp_path, monkeypatch):
    """The embed extra's model loads from the wheel alone: any attempt to
    download fails this test, and the store picks it by default."""
    import requests

    def no_network(*args, **kwargs):
        raise AssertionError(f"wordllama tried the network: {args}")

    monkeypatch.setattr(requests, "get", no_network)
    embedder = WordLlamaEmbedder()
    rows = embedder.embed(["refund the order", "退款", "issue a refund for the purchase"])
    assert rows.shape == (3, 256)
    assert rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert rows[0] @ rows[2] > rows[0] @ rows[1]  # a paraphrase is nearer than another language's word
    assert isinstance(default_embedder(), WordLlamaEmbedder)
    with MemoryStore(tmp_path / "m.db") as store:
        assert isinstance(store.embedder, WordLlamaEmbedder)
        store.remember("the nightly backup job writes to the cold storage bucket")
        store.remember("Alice prefers dark mode in the dashboard")
        assert store.search("where do backups go at night?", k=1)[0].text.startswith("the nightly backup")


def test_wordllama_refuses_a_width_it_does_not_have():
    with pytest.raises(EmbeddingError, match="did not load"):
        WordLlamaEmbedder(dim=100)
