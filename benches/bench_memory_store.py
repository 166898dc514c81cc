"""The memory store: search latency and recall at 100,000 memories (and
1,000,000), ingest, and the vector scan against numpy's, in one run.

Memories come from ``tests/memory_corpus.py`` (20-200 words, English with
some Chinese, each naming its own id and often a path). Search queries are
fresh each call: entity queries name one memory's id or path in other
words, paraphrase queries restate a planted fact with no entity. Vectors
are the hashing embedder's, 256 wide; ingest is measured with the vectors
computed beforehand, so it counts the store's work and not the model's.

Without ``--benchmark-enable`` (the test run's smoke pass) the stores have
5,000 and 3,000 memories.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import pytest

from context_core import MemoryStore
from context_core._core import _VectorIndex
from context_core.memory_store import HashingEmbedder
from memory_corpus import GISTS, corpus
from support import REPORTS, register

DIM = 256
HASHING = HashingEmbedder(DIM)


def _enabled(request: pytest.FixtureRequest) -> bool:
    session = getattr(request.config, "_benchmarksession", None)
    return session is not None and not session.disabled


class Precomputed:
    """An embedder's vectors (the hashing one's unless given), computed
    once, looked up by text."""

    def __init__(self, texts: list[str], embedder=HASHING) -> None:
        self.embedder = embedder
        started = time.perf_counter()
        rows = embedder.embed(texts)
        self.rate = len(texts) / (time.perf_counter() - started)
        self.rows = {t: rows[i] for i, t in enumerate(texts)}

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[t] if t in self.rows else self.embedder.embed([t])[0] for t in texts])


def _build(path: Path, texts: list[str], kinds: list[str], embedder=HASHING) -> tuple[MemoryStore, float]:
    """A store of ``texts``, and the memories per second ingested."""
    vectors = Precomputed(texts, embedder)
    store = MemoryStore(path, embedder=vectors, durability="normal")
    started = time.perf_counter()
    for at in range(0, len(texts), 2000):
        store.remember_many(
            [
                {"text": t, "kind": k}
                for t, k in zip(texts[at : at + 2000], kinds[at : at + 2000], strict=True)
            ]
        )
    rate = len(texts) / (time.perf_counter() - started)
    store.embedder = embedder
    REPORTS.append(
        f"{type(embedder).__name__}: {vectors.rate:,.0f} memories/s embedded ({len(texts):,}, 20-200 words)"
    )
    return store, rate


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _hit_at(
    store: MemoryStore, queries: list[tuple[str, int]], ids: list[str], k: int = 5
) -> tuple[float, list[float]]:
    found, times = 0, []
    for query, index in queries:
        started = time.perf_counter()
        hits = store.search(query, k=k)
        times.append(time.perf_counter() - started)
        found += ids[index] in [h.memory.id for h in hits]
    return found / len(queries), times


@pytest.fixture(scope="module")
def store_100k(request, tmp_path_factory):
    n = 100_000 if _enabled(request) else 5_000
    data = corpus(n, seed=3, queries=300)
    store, rate = _build(tmp_path_factory.mktemp("store") / "m.db", data.texts, data.kinds)
    ids = [row[0] for row in store._db.execute("SELECT id FROM memories ORDER BY rowid")]
    REPORTS.append(
        f"memory store: ingest of {n:,} memories, vectors computed beforehand: {rate:,.0f} memories/s"
    )
    yield n, data, store, ids
    store.close()


def test_search_latency_and_recall(benchmark, store_100k):
    n, data, store, ids = store_100k
    store.search("warm up the vectors", k=8)
    entity_hit, entity_times = _hit_at(store, data.entity_queries, ids)
    para_hit, para_times = _hit_at(store, data.paraphrase_queries, ids)
    times = entity_times + para_times
    REPORTS.append(
        f"memory store, {n:,} memories: search p50 {statistics.median(times) * 1e3:.2f} ms, "
        f"p99 {_percentile(times, 0.99) * 1e3:.2f} ms over {len(times)} fresh queries; "
        f"entity hit@5 {entity_hit:.1%} ({len(entity_times)} queries), "
        f"paraphrase hit@5 {para_hit:.1%} ({len(para_times)}, hashing embedder)"
    )
    assert entity_hit == 1.0
    queries = iter([q for q, _ in data.entity_queries] * 1000)
    register(benchmark, f"memory search, {n:,} memories, top 8", "ours")
    benchmark(lambda: store.search(next(queries), k=8))


def test_search_texts_against_search(benchmark, store_100k):
    """``search_texts`` (what a prompt takes: the texts, no entities read,
    no ``Memory`` built) against ``search`` on the same fresh queries,
    alternated query by query so both see the same machine."""
    n, data, store, _ = store_100k
    store.search_texts("warm up the vectors", k=8)
    queries = [q for q, _ in data.entity_queries + data.paraphrase_queries]
    hits, texts = [], []
    for query in queries:
        started = time.perf_counter()
        found = store.search(query, k=8, max_tokens=600)
        hits.append(time.perf_counter() - started)
        started = time.perf_counter()
        said = store.search_texts(query, k=8, max_tokens=600)
        texts.append(time.perf_counter() - started)
        assert len(said) == len(found)

    def row(times: list[float]) -> str:
        return f"p50 {statistics.median(times) * 1e3:.2f} / p99 {_percentile(times, 0.99) * 1e3:.2f} ms"

    REPORTS.append(
        f"memory store, {n:,} memories, k=8, max_tokens=600, {len(queries)} queries alternated: "
        f"search {row(hits)}, search_texts {row(texts)} "
        f"({statistics.median(hits) / statistics.median(texts):.2f}x)"
    )
    cycle = iter(queries * 1000)
    register(benchmark, f"memory search, {n:,} memories, top 8", "ours, search_texts")
    benchmark(lambda: store.search_texts(next(cycle), k=8))


def test_chromadb_with_the_same_vectors(benchmark, request, store_100k, tmp_path):
    """chromadb (embedded, persistent; telemetry off) given the same
    memories and the same hashing vectors: its ingest, its query latency,
    and its hit@5 on the same queries (vector search: it has no entity
    index). The query's vector is computed outside its timed call."""
    import chromadb

    n, data, _, _ = store_100k
    client = chromadb.PersistentClient(
        path=str(tmp_path / "chroma"), settings=chromadb.Settings(anonymized_telemetry=False)
    )
    collection = client.create_collection(
        "memories", metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    vectors = HASHING.embed(data.texts)
    started = time.perf_counter()
    for at in range(0, n, 2000):
        collection.add(
            ids=[str(i) for i in range(at, min(at + 2000, n))],
            embeddings=vectors[at : at + 2000],
            documents=data.texts[at : at + 2000],
        )
    rate = n / (time.perf_counter() - started)

    def hit_at_5(queries: list[tuple[str, int]]) -> tuple[float, list[float]]:
        found, times = 0, []
        for query, index in queries:
            q = HASHING.embed([query])
            began = time.perf_counter()
            ids = collection.query(query_embeddings=q, n_results=5)["ids"][0]
            times.append(time.perf_counter() - began)
            found += str(index) in ids
        return found / len(queries), times

    entity_hit, entity_times = hit_at_5(data.entity_queries)
    para_hit, para_times = hit_at_5(data.paraphrase_queries)
    times = entity_times + para_times
    REPORTS.append(
        f"chromadb, {n:,} memories, same vectors: ingest {rate:,.0f}/s; query p50 "
        f"{statistics.median(times) * 1e3:.2f} ms, p99 {_percentile(times, 0.99) * 1e3:.2f} ms; "
        f"entity hit@5 {entity_hit:.1%}, paraphrase hit@5 {para_hit:.1%}"
    )
    queries = iter([HASHING.embed([q]) for q, _ in data.entity_queries] * 100)
    register(benchmark, f"memory search, {n:,} memories, top 8", "chromadb")
    benchmark(lambda: collection.query(query_embeddings=next(queries), n_results=8))


def test_wordllama_on_the_same_memories(request, tmp_path):
    """The embed extra's static model on the same corpus and queries: what
    it recovers of the paraphrases the hashing embedder misses, and what
    it costs."""
    from context_core.memory_store import WordLlamaEmbedder

    n = 100_000 if _enabled(request) else 5_000
    data = corpus(n, seed=3, queries=300)
    store, _ = _build(tmp_path / "m.db", data.texts, data.kinds, WordLlamaEmbedder())
    ids = [row[0] for row in store._db.execute("SELECT id FROM memories ORDER BY rowid")]
    store.search("warm up the vectors", k=8)
    entity_hit, entity_times = _hit_at(store, data.entity_queries, ids)
    para_hit, para_times = _hit_at(store, data.paraphrase_queries, ids)
    times = entity_times + para_times
    REPORTS.append(
        f"memory store, {n:,} memories, wordllama: search p50 {statistics.median(times) * 1e3:.2f} ms "
        f"(query embedding included), p99 {_percentile(times, 0.99) * 1e3:.2f} ms; "
        f"entity hit@5 {entity_hit:.1%}, paraphrase hit@5 {para_hit:.1%} ({len(para_times)} queries)"
    )
    assert entity_hit == 1.0
    store.close()
    pairs = {}
    for embedder in (HASHING, store.embedder):
        facts = embedder.embed([fact for fact, _ in GISTS])
        asked = embedder.embed([question for _, question in GISTS])
        pairs[type(embedder).__name__] = (facts * asked).sum(axis=1)
    hashing, wordllama = pairs["HashingEmbedder"], pairs["WordLlamaEmbedder"]
    REPORTS.append(
        f"paraphrase pairs ({len(GISTS)}): mean cosine hashing {hashing.mean():.2f}, wordllama "
        f"{wordllama.mean():.2f}; wordllama higher in {(wordllama > hashing).sum()} of {len(GISTS)}"
    )


def test_mem0_with_the_same_vectors(request, tmp_path, monkeypatch):
    """mem0 (``infer=False``: no model call, offline; its embedded Qdrant
    on disk, telemetry off) given the same memories and the same hashing
    vectors, beside our store on the same corpus. 10,000 memories unless
    ``BENCH_MEM0_MEMORIES`` says otherwise: its ingest runs at a few
    hundred a second."""
    import logging
    import warnings

    n = int(os.environ.get("BENCH_MEM0_MEMORIES", "10000")) if _enabled(request) else 300
    data = corpus(n, seed=5, queries=100)
    vectors = Precomputed(data.texts)
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("OPENAI_API_KEY", "unused: infer=False makes no model call")
    logging.getLogger("mem0").setLevel(logging.ERROR)  # it reports its optional extras missing

    class SameVectors:
        def embed(self, text, memory_action=None):
            return vectors.embed([text])[0].tolist()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its dependencies' deprecation warnings
        from mem0 import Memory

        memory = Memory.from_config(
            {
                "vector_store": {
                    "provider": "qdrant",
                    "config": {
                        "path": str(tmp_path / "qdrant"),
                        "on_disk": True,
                        "embedding_model_dims": DIM,
                        "collection_name": "memories",
                    },
                },
                "history_db_path": str(tmp_path / "history.db"),
            }
        )
        memory.embedding_model = SameVectors()
        started = time.perf_counter()
        for text in data.texts:
            memory.add(text, user_id="u", infer=False)
        rate = n / (time.perf_counter() - started)
        index = {t: i for i, t in enumerate(data.texts)}

        def hit_at_5(queries: list[tuple[str, int]]) -> tuple[float, list[float]]:
            found, times = 0, []
            for query, target in queries:
                began = time.perf_counter()
                results = memory.search(query, filters={"user_id": "u"}, limit=5)["results"]
                times.append(time.perf_counter() - began)
                found += target in [index.get(r["memory"]) for r in results]
            return found / len(queries), times

        entity_hit, entity_times = hit_at_5(data.entity_queries)
        para_hit, para_times = hit_at_5(data.paraphrase_queries)
        memory.vector_store.client.close()
    times = entity_times + para_times
    REPORTS.append(
        f"mem0 (infer=False), {n:,} memories, same vectors: ingest {rate:,.0f}/s; search p50 "
        f"{statistics.median(times) * 1e3:.2f} ms, p99 {_percentile(times, 0.99) * 1e3:.2f} ms "
        f"(query vector included); entity hit@5 {entity_hit:.1%}, paraphrase hit@5 {para_hit:.1%}"
    )
    ours, ours_rate = _build(tmp_path / "ours.db", data.texts, data.kinds)
    ids = [row[0] for row in ours._db.execute("SELECT id FROM memories ORDER BY rowid")]
    ours.search("warm up the vectors", k=8)
    ours_entity, ours_times = _hit_at(ours, data.entity_queries, ids)
    ours_para, para_times = _hit_at(ours, data.paraphrase_queries, ids)
    ours_times += para_times
    REPORTS.append(
        f"memory store, the same {n:,} memories: ingest {ours_rate:,.0f}/s; search p50 "
        f"{statistics.median(ours_times) * 1e3:.2f} ms, p99 {_percentile(ours_times, 0.99) * 1e3:.2f} ms; "
        f"entity hit@5 {ours_entity:.1%}, paraphrase hit@5 {ours_para:.1%}"
    )
    assert ours_entity == 1.0
    ours.close()


@pytest.mark.parametrize("impl", ["ours (int8 + exact rescore)", "ours (exact float32)", "numpy"])
def test_vector_scan_against_numpy(benchmark, request, impl):
    """The Rust scan (int8, rescored exactly) against numpy's matrix-vector
    product and argpartition, over the same unit rows."""
    n = 100_000 if _enabled(request) else 5_000
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = _VectorIndex(DIM)
    index.extend(rows.tobytes())
    queries = iter(rows[rng.integers(0, n, 100_000)])
    ours = [i for i, _ in index.top_k(rows[7].tobytes(), 8, 64)]
    exact = list(np.argsort(-(rows @ rows[7]))[:8])
    assert ours == exact
    group = f"vector top-8, {n:,} x {DIM}"

    def numpy_scan() -> list[int]:
        q = next(queries)
        scores = rows @ q
        best = np.argpartition(scores, -8)[-8:]
        return list(best[np.argsort(-scores[best])])

    def rust_int8() -> list[tuple[int, float]]:
        return index.top_k(next(queries).tobytes(), 8, 64)

    def rust_exact() -> list[tuple[int, float]]:
        return index.top_k(next(queries).tobytes(), 8)

    register(benchmark, group, impl)
    benchmark(
        {"ours (int8 + exact rescore)": rust_int8, "ours (exact float32)": rust_exact, "numpy": numpy_scan}[
            impl
        ]
    )


def test_search_at_a_million(benchmark, request, tmp_path):
    """1,000,000 memories with ``--benchmark-enable`` (minutes to build);
    3,000 in the smoke pass, which checks the same code."""
    n = 1_000_000 if _enabled(request) else 3_000
    data = corpus(n, seed=4, queries=100)
    store, rate = _build(tmp_path / "m.db", data.texts, data.kinds)
    ids = [row[0] for row in store._db.execute("SELECT id FROM memories ORDER BY rowid")]
    store.search("warm up", k=8)
    hit, times = _hit_at(store, data.entity_queries, ids)
    REPORTS.append(
        f"memory store, {n:,} memories: ingest {rate:,.0f}/s; search p50 "
        f"{statistics.median(times) * 1e3:.1f} ms, p99 {_percentile(times, 0.99) * 1e3:.1f} ms; "
        f"entity hit@5 {hit:.1%}"
    )
    queries = iter([q for q, _ in data.entity_queries] * 100)
    assert hit == 1.0
    register(benchmark, f"memory search, {n:,} memories, top 8", "ours")
    benchmark.pedantic(lambda: store.search(next(queries), k=8), rounds=30, iterations=1)
    store.close()


def test_the_precomputed_vectors_are_the_hashing_ones():
    """Ingest is measured with vectors computed beforehand: they must be
    the ones the store would have computed itself."""
    texts = corpus(20, seed=1).texts
    assert np.array_equal(Precomputed(texts).embed(texts), HASHING.embed(texts))
