"""What a conversation leaves for the memory store: extract_memories (offline
and with a model, whose reply is checked), conversation_ended, and the
precision and recall of both offline extractors on the labelled set."""

from __future__ import annotations

import asyncio

import pytest

from context_core import InvalidTypeError, MemoryFormatError, MemoryStore
from context_core.memory import extract_facts
from context_core.memory_store import HashingEmbedder, aextract_memories, extract_memories
from extraction_labels import conversations, score

CONVERSATION = [
    {"role": "user", "content": "Hi, I'm Ana and I own the search service. Can you look at search/rank.py?"},
    {"role": "assistant", "content": "Let me check the file. The ranker sorts twice."},
    {"role": "user", "content": "Fix it please. Never deploy search on Fridays."},
    {
        "role": "assistant",
        "content": "I replaced the second sort with a heap; ranking now takes 40 ms for query Q-7781.",
    },
    {"role": "user", "content": "The reindex job fails unless REDIS_URL is set, so export it first."},
    {"role": "tool", "content": "Remember: a tool result is never read."},
]


def _kinds(found):
    return [(m.kind, m.text) for m in found]


def test_offline_memories_have_their_kinds_and_leave_the_requests():
    assert _kinds(extract_memories(CONVERSATION)) == [
        ("semantic", "Hi, I'm Ana and I own the search service."),
        ("semantic", "Never deploy search on Fridays."),
        ("episodic", "I replaced the second sort with a heap; ranking now takes 40 ms for query Q-7781."),
        ("procedural", "The reindex job fails unless REDIS_URL is set, so export it first."),
    ]
    weights = {m.text[:6]: m.importance for m in extract_memories(CONVERSATION)}
    assert weights["Never "] > weights["Hi, I'"] > weights["I repl"]


def test_a_model_reply_is_kept_when_it_passes_both_checks():
    reply = "- [semantic] Ana owns the search service.\n- [episodic] The ranker for Q-7781 now uses a heap."
    seen = []

    def model(messages):
        seen.append(messages)
        return reply

    found = extract_memories(CONVERSATION, model)
    assert _kinds(found) == [
        ("semantic", "Ana owns the search service."),
        ("episodic", "The ranker for Q-7781 now uses a heap."),
    ]
    prompt = seen[0][1]["content"]
    assert "Fix it please" in prompt
    assert "a tool result is never read" not in prompt
    assert extract_memories(CONVERSATION, lambda _: "NONE") == []


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("Ana owns search.", "not a fact line"),
        ("- [fact] Ana owns search.", "kind 'fact'"),
        ("- [semantic: owner] Ana owns search.", "a key"),
        ("- [episodic] Fixed ticket Q-9999 in search/rank.py.", "'q-9999'"),  # invented
        ("- [semantic] Ana owns search.\n- [procedural] Use port 6380.", "'6380'"),
        ("- [episodic] The ranker for q-7781 now uses a heap.", "'q-7781'"),  # a value's case changed
        ("- [semantic] Ranking lives in Search/Rank.py.", "'Search/Rank.py'"),
    ],
)
def test_a_model_reply_that_breaks_a_check_keeps_nothing(tmp_path, reply, why):
    with pytest.raises(MemoryFormatError, match=why):
        extract_memories(CONVERSATION, lambda _: reply)
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(32)) as store:
        with pytest.raises(MemoryFormatError):
            store.conversation_ended(CONVERSATION, llm=lambda _: reply)
        assert store.count() == 0


def test_the_end_of_a_conversation_is_stored_once(tmp_path):
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as store:
        first = store.conversation_ended(CONVERSATION, namespace="ana", source="session-1")
        assert [m.kind for m in first] == ["semantic", "semantic", "episodic", "procedural"]
        assert {m.source for m in first} == {"session-1"}
        again = store.conversation_ended(CONVERSATION, namespace="ana", source="session-2")
        assert [m.id for m in again] == [m.id for m in first]
        assert store.count("ana") == 4
        assert store.search("REDIS_URL", namespace="ana", k=1)[0].memory.kind == "procedural"
        async_found = asyncio.run(store.aconversation_ended(CONVERSATION[:3], namespace="bob"))
        assert store.count("bob") == len(async_found) == 2


def test_async_extraction_matches_the_sync_one():
    assert asyncio.run(aextract_memories(CONVERSATION)) == extract_memories(CONVERSATION)

    async def model(messages):
        return "- [semantic] Ana owns the search service."

    assert _kinds(asyncio.run(aextract_memories(CONVERSATION, model))) == [
        ("semantic", "Ana owns the search service.")
    ]


def test_a_conversation_ended_twice_updates_memories_without_entities_too(tmp_path):
    talk = [{"role": "user", "content": "We use conventional commits in every repo."}]
    again = [{"role": "user", "content": "We use conventional commits in every repo!"}]
    with MemoryStore(tmp_path / "m.db", embedder=HashingEmbedder(64)) as store:
        first = store.conversation_ended(talk)
        second = store.conversation_ended(again)
        assert [m.id for m in second] == [m.id for m in first]
        assert store.count() == 1


@pytest.mark.parametrize(
    "text",
    [
        "已" * 600 + "修复" * 300,  # nested gaps in the Chinese episode pattern
        "a." * 10_000,
        "x" * 20_000,
        "Decision: use x as y " + "z " * 10_000,
        "我们已经" * 3000 + "修复" * 2000,
    ],
)
@pytest.mark.parametrize("role", ["user", "assistant"])
def test_a_long_crafted_sentence_is_prose_and_is_passed_over(text, role):
    """A sentence past MAX_FACT_CHARS is never a fact, so no pattern runs
    over it (some are polynomial on crafted text: such a line took seconds
    to hours before)."""
    messages = [{"role": role, "content": text}]
    assert extract_memories(messages) == []
    assert extract_facts(messages) == []


def test_bad_messages_are_refused():
    for bad in ("hello", {"role": "user"}, 5, [3]):
        with pytest.raises(InvalidTypeError):
            extract_memories(bad)  # type: ignore[arg-type]
    assert extract_memories([]) == []
    assert extract_memories([], lambda _: pytest.fail("no conversation, no call")) == []


def test_the_labelled_set_is_well_formed():
    data = conversations()
    assert len(data) >= 40
    for c in data:
        said = " ".join(m["content"] for m in c["messages"])
        for text in [d["text"] for d in c["durable"]] + c["one_off"]:
            assert text in said, (c["id"], text)
        assert {d["kind"] for d in c["durable"]} <= {"semantic", "episodic", "procedural"}


def test_the_store_extractor_on_conversations_never_looked_at():
    """The held-out half: precision and recall stay where the README says."""
    result = score(lambda m: [(e.text, e.kind) for e in extract_memories(m)], "held_out")
    assert result.precision >= 0.9, result.false
    assert result.recall >= 0.5, result.missed
    assert result.kind_right >= 0.8 * result.kind_checked


def test_the_memory_file_extractor_keeps_few_one_off_requests():
    result = score(
        lambda m: [(f.text, None) for f in extract_facts(m)], "held_out", kinds=frozenset({"semantic"})
    )
    assert result.precision >= 0.9, result.false
    assert result.recall >= 0.65, result.missed
