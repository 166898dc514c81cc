"""Embedders: the user's own OpenAI SDK client against the local HTTP
server (sync and async), the async form of any embedder, and refusals of
what an embedder must not return."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import numpy as np
import openai
import pytest

from context_core import EmbeddingError, InvalidInputError, InvalidTypeError, MemoryStore
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


def test_each_form_of_embed_uses_the_client_it_can_call(server, recwarn):
    """An async client's embed() made a coroutine and failed on it ("no
    attribute 'data'", and a never-awaited warning), so a Session's
    background writes failed on the README's AsyncOpenAI embedder; a sync
    client's aembed() awaited what is not awaitable."""
    url = server.url + "/v1"
    sync = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
    async_ = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0)
    server.script(*[Reply(body=embeddings_body([[0.5, 0.5]])) for _ in range(3)])
    alone = OpenAIEmbedder(async_, "emb")
    with pytest.raises(EmbeddingError, match="needs a sync client"):
        alone.embed(["x"])
    assert server.received == []  # nothing sent, no coroutine made
    assert asyncio.run(aembed(OpenAIEmbedder(sync, "emb"), ["x"])).tolist() == [[0.5, 0.5]]
    both = OpenAIEmbedder(sync, "emb", async_client=async_)
    assert both.embed(["y"]).tolist() == [[0.5, 0.5]]
    assert asyncio.run(aembed(both, ["z"])).tolist() == [[0.5, 0.5]]
    assert [r.json["input"] for r in server.received] == [["x"], ["y"], ["z"]]
    assert not [w for w in recwarn if "never awaited" in str(w.message)]
    with pytest.raises(InvalidTypeError, match="async_client must be an async client"):
        OpenAIEmbedder(sync, "emb", async_client=sync)


def test_a_store_on_an_async_client_writes_and_searches_through_its_async_methods(server, tmp_path):
    """An ``AsyncOpenAI`` client backs a store through ``aremember``,
    ``aremember_many`` and ``asearch``: the embeddings are awaited, the
    database work runs in a worker thread. A wrong width writes nothing."""
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    server.script(
        Reply(body=embeddings_body([[1.0, 0.0, 0.0]])),
        Reply(body=embeddings_body([[0.0, 1.0, 0.0], [0.0, 0.0, 3.0]])),
        Reply(body=embeddings_body([[0.0, 0.0, 1.0]])),
        Reply(body=embeddings_body([[1.0, 0.0]])),
    )

    async def main(store: MemoryStore) -> None:
        first = await store.aremember("order A-8812 was refunded", kind="episodic")
        assert first.kind == "episodic"
        many = await store.aremember_many(["the second memory", {"text": "the third memory"}])
        assert [m.text for m in many] == ["the second memory", "the third memory"]
        hits = await store.asearch("which one?", k=1)
        assert [h.text for h in hits] == ["the third memory"]
        assert hits[0].cosine == pytest.approx(1.0)
        with pytest.raises(EmbeddingError) as wide:
            await store.aremember("the wrong width")
        assert wide.value.expected == 3

    with MemoryStore(tmp_path / "m.db", embedder=OpenAIEmbedder(client, "emb")) as store:
        asyncio.run(main(store))
        assert store.count() == 3
    assert [r.json["input"] for r in server.received] == [
        ["order A-8812 was refunded"],
        ["the second memory", "the third memory"],
        ["which one?"],
        ["the wrong width"],
    ]


def test_the_async_methods_find_what_the_sync_ones_do(tmp_path):
    """With an embedder that has no async form (its ``embed`` runs in a
    worker thread), ``asearch`` ranks as ``search`` does, and
    ``asearch_texts`` returns what ``search_texts`` does."""
    texts = [f"memory {i} about services/payments/retry.go and order A-{8800 + i}" for i in range(40)]

    def store(name: str) -> MemoryStore:  # the same clock: the same recency, so the same scores
        return MemoryStore(tmp_path / name, embedder=HashingEmbedder(64), clock=lambda: 1_000_000.0)

    with store("a.db") as a, store("s.db") as b:
        asyncio.run(a.aremember_many(texts))
        b.remember_many(texts)
        for query in ("order A-8812", "retry.go", "something else entirely"):
            ours = asyncio.run(a.asearch(query, k=5))
            theirs = b.search(query, k=5)
            assert [h.text for h in ours] == [h.text for h in theirs]
            assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], rel=1e-6)
            assert ours[0].reasons == theirs[0].reasons
            # The texts alone, as a session asks: the same, in the same order.
            texts_found = asyncio.run(a.asearch_texts(query, k=5, max_tokens=40))
            assert texts_found == b.search_texts(query, k=5, max_tokens=40)
            assert texts_found
        with pytest.raises(InvalidInputError):
            asyncio.run(a.asearch("x", k=0))
        with pytest.raises(InvalidInputError):
            asyncio.run(a.asearch_texts("x", k=0))
    with MemoryStore(tmp_path / "empty.db", embedder=HashingEmbedder(64)) as empty:
        assert asyncio.run(empty.asearch("anything")) == []


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


def test_loading_wordllama_leaves_the_programs_logging_as_it_was():
    """wordllama's import calls ``logging.basicConfig(level=INFO)``: a host
    program would start printing every library's INFO lines."""
    probe = (
        "import logging\n"
        "from context_core.memory_store import WordLlamaEmbedder\n"
        "WordLlamaEmbedder()\n"
        "root = logging.getLogger()\n"
        "print(len(root.handlers), root.level)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", str(logging.WARNING)]
