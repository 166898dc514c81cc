"""The call ids a reopened session reads from its log's payload text agree
with the ids of the decoded messages, whatever the ids hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from context_core import MessageLog
from context_core.session.tool_calls import call_ids_in_payloads, calls_of

ids = st.text(min_size=1, max_size=12)  # quotes, backslashes, any code point a log holds
replies = st.lists(
    st.tuples(st.booleans(), st.lists(ids, min_size=1, max_size=3)),
    min_size=1,
    max_size=6,
)


def _reply(anthropic: bool, call_ids: list[str]) -> dict:
    if anthropic:
        blocks = [
            {"type": "tool_use", "id": i, "name": "read", "input": {"path": "a.py", "note": i}}
            for i in call_ids
        ]
        return {"role": "assistant", "content": blocks}
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": '{"id": "x"}'}}
        for i in call_ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


@settings(max_examples=60, deadline=None)
@given(replies)
def test_the_payload_text_gives_every_call_id_the_messages_hold(tmp_path_factory, made):
    where = tmp_path_factory.mktemp("log")
    with MessageLog.open(where, create=True) as log:
        for anthropic, call_ids in made:
            log.append({"role": "user", "content": "go"})
            log.append(_reply(anthropic, call_ids))
        seqs = list(range(len(log)))
        decoded = {call.id for message in log.read(seqs) for call in calls_of(message)}
        assert decoded == {i for _, call_ids in made for i in call_ids}
        # Exactly: a key `id` elsewhere is in an object the calls' text
        # escapes (OpenAI's arguments) or is not a string (none here).
        assert call_ids_in_payloads(log._read(seqs)) == decoded


def test_a_key_id_in_a_tools_input_only_adds_a_name_to_avoid(tmp_path):
    with MessageLog.open(tmp_path / "log", create=True) as log:
        log.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "get", "input": {"id": "row-7"}}],
            }
        )
        assert call_ids_in_payloads(log._read([0])) == {"t1", "row-7"}
