"""The deterministic extractor (context_core.memory.extract): exactly what it
keeps, and what it leaves."""

from __future__ import annotations

import pytest

from context_core import InvalidTypeError
from context_core.memory import Fact, extract_facts
from context_core.memory.extract import MAX_FACT_CHARS, conversation_text


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def lines(messages: list[dict]) -> list[str]:
    return [fact.line() for fact in extract_facts(messages)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # constraints (the constraint tagger's words, after normalisation)
        ("You must never push to main.", "- [constraint] You must never push to main."),
        ("Always run the tests first", "- [constraint] Always run the tests first"),
        ("Make sure to log every retry.", "- [constraint] Make sure to log every retry."),
        ("必须使用UTF-8编码。", "- [constraint] 必须使用UTF-8编码。"),
        ("ＮＥＶＥＲ delete the backups.", "- [constraint] ＮＥＶＥＲ delete the backups."),
        # stated preferences
        ("I prefer short answers without emoji.", "- [preference] I prefer short answers without emoji."),
        ("I'd rather see diffs than whole files.", "- [preference] I'd rather see diffs than whole files."),
        ("I don't like tabs.", "- [preference] I don't like tabs."),
        ("我喜欢简洁的回答。", "- [preference] 我喜欢简洁的回答。"),
        # decisions, keyed by what they are for
        (
            "Let's use Postgres 16 for the database.",
            "- [decision: database] Let's use Postgres 16 for the database.",
        ),
        ("We decided to ship on Friday.", "- [decision] We decided to ship on Friday."),
        (
            "We'll go with FastAPI as the web framework.",
            "- [decision: web framework] We'll go with FastAPI as the web framework.",
        ),
        ("我们决定下周发布。", "- [decision] 我们决定下周发布。"),
        # exact facts, keyed by their subject
        ("The staging DB port is 5433.", "- [fact: staging db port] The staging DB port is 5433."),
        ("Our API key id = key_9f8e7d", "- [fact: api key id] Our API key id = key_9f8e7d"),
        ("数据库端口是5433。", "- [fact: 数据库端口] 数据库端口是5433。"),
        # exact facts without a subject
        ("Logs go to /var/log/app.log now", "- [fact] Logs go to /var/log/app.log now"),
        ("The box answers on 10.0.0.12:8080", "- [fact] The box answers on 10.0.0.12:8080"),
        (
            "Builds for PROJ-1234 publish to s3://ci/artifacts.",
            "- [fact] Builds for PROJ-1234 publish to s3://ci/artifacts.",
        ),
        # standing statements about the user, the team and the project
        ("We use pnpm, not npm, in this repo.", "- [fact] We use pnpm, not npm, in this repo."),
        ("Hi, I'm Ana and I own the search service.", "- [fact] Hi, I'm Ana and I own the search service."),
        ("Our nightly jobs run on Airflow 2.8.", "- [fact] Our nightly jobs run on Airflow 2.8."),
        ("The web app uses Vite, not webpack.", "- [fact] The web app uses Vite, not webpack."),
        (
            "我们的值班时间是早上 9 点到晚上 9 点。",
            "- [fact: 我们的值班时间] 我们的值班时间是早上 9 点到晚上 9 点。",
        ),
        # a request made to hold from now on is a rule
        (
            "Going forward, send release notes to the #eng channel.",
            "- [constraint] Going forward, send release notes to the #eng channel.",
        ),
        # labelled sentences (any role), keyed when they read "X is Y"
        ("Remember: the deploy key is deploy_k3y.", "- [fact: deploy key] the deploy key is deploy_k3y."),
        ("Note: staging resets nightly.", "- [fact] staging resets nightly."),
        ("Decision: cache TTL is 300 seconds.", "- [decision: cache ttl] cache TTL is 300 seconds."),
        ("Rule: one PR per change.", "- [constraint] one PR per change."),
        ("记住：部署在周五。", "- [fact] 部署在周五。"),
        # a correction is keyed by its subject, so it replaces the old value
        (
            "Correction: the staging DB port is 5434 now.",
            "- [fact: staging db port] the staging DB port is 5434 now.",
        ),
        ("Update: the deploy key is deploy_k4y.", "- [fact: deploy key] the deploy key is deploy_k4y."),
    ],
)
def test_what_is_kept(text, expected):
    assert lines([user(text)]) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "Hi! Thanks a lot.",
        "Can you fix the bug in src/app/main.py?",  # a question
        "Must we use Postgres?",
        "I have 2 questions.",  # a number that is not the value of "X is N"
        "It is 5 o'clock.",  # no subject to key it by, no exact value
        "The build takes 12 minutes.",
        "I want you to refactor this.",  # a request, not a preference
        # requests for the moment, even when they name exact values
        "Edit src/app/main.py next.",
        "Write to ops@example.org when done.",
        "Run the linter on src/app.ts too.",
        "OK, please summarise ticket ZD-55102 for the channel.",
        "Yes, bump the version to 2.4.1 and tag it.",
        "请帮我把 v2.3.1 发布到预发环境。",
        # the news of the moment: failures, status, one instance
        "It broke after commit 3f9a2c1b was merged.",
        "The nightly build on run 8812 failed again.",
        "Error: connection refused on localhost:5432.",
        "The export job has been running for 3 hours.",
        "A customer on ticket ZD-60211 wants a refund.",
        # an exact value with nothing said about it
        "Tracked in PROJ-1234.",
        "Job id application_1718_0042.",
        "```\nrm -rf /tmp/cache\nYou must not do this\n```",  # code
        "    /usr/local/bin/indented-code",
        "x" * (MAX_FACT_CHARS + 1) + " /etc/long",  # prose, not a fact
        # an update or a correction that gives no new value of a key: as unlabelled
        "update: the tests pass now",
        "Update: I pushed the fix.",
        "Update: can you rerun the job?",
        "Update: is the port 5434?",
        "Correction: can you redo it?",
        "Correction: oops.",
        "Correction: I meant the other file.",
    ],
)
def test_what_is_left(text):
    assert lines([user(text)]) == []


@pytest.mark.parametrize(
    "text",
    [
        "Update: I pushed the fix.",
        "Update: the build is broken again today.",
        "Correction: I misread the log, the failure is in test_auth.py.",
        "Update: I ran pytest and 3 tests failed in tests/test_api.py.",
        "Update: the build is 80% done.",
        "Update: the ETA is 10 min.",
        "Correction: the staging DB port is 5434.",
    ],
)
def test_an_assistants_news_labelled_update_is_left(text):
    """An agent's status reports are news, not memory: "Update:" and
    "Correction:" label a fact only in a user's words."""
    assert lines([{"role": "assistant", "content": text}]) == []


def test_only_user_and_assistant_text_is_read():
    messages = [
        {"role": "system", "content": "You must always answer. The secret is at /etc/secret."},
        {"role": "developer", "content": "Never reveal /etc/dev."},
        {"role": "tool", "tool_call_id": "1", "content": "Wrote /tmp/out.json"},
        {"role": "function", "name": "f", "content": "You must see /tmp/fn"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "w", "arguments": "/tmp/x"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "1", "content": "You must see /tmp/result"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "..."}},
                {"type": "text", "text": "The repo is at /srv/repo."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "You must remember /tmp/thought"},
                {"type": "text", "text": "I'll use /srv/repo. You must run the tests."},
            ],
        },
    ]
    assert lines(messages) == ["- [fact: repo] The repo is at /srv/repo."]
    assert (
        conversation_text(messages)
        == [
            ("assistant", ""),
            ("user", "The repo is at /srv/repo."),
            ("assistant", "I'll use /srv/repo. You must run the tests."),
        ][1:]
    )


def test_assistant_text_counts_only_when_labelled():
    messages = [
        {
            "role": "assistant",
            "content": "I will use Redis. Decision: cache TTL is 300 seconds. /etc/passwd exists.",
        }
    ]
    assert lines(messages) == ["- [decision: cache ttl] cache TTL is 300 seconds."]


def test_sentences_bullets_and_order():
    text = "Notes for later:\n- The staging DB port is 5433.\n2. You must never push to main. I prefer tabs!"
    assert lines([user(text)]) == [
        "- [fact: staging db port] The staging DB port is 5433.",
        "- [constraint] You must never push to main.",
        "- [preference] I prefer tabs!",
    ]


def test_duplicates_within_a_conversation_kept_once_at_the_newest_place():
    messages = [user("Never push to main."), user("I prefer tabs."), user("never push to main")]
    assert extract_facts(messages) == [
        Fact("I prefer tabs.", "preference"),
        Fact("never push to main", "constraint"),
    ]


def test_a_later_value_of_the_same_key_is_extracted_too():
    messages = [
        user("Let's use Postgres 16 for the database."),
        user("Let's switch to MySQL 8 for the database."),
    ]
    facts = extract_facts(messages)
    assert [f.key for f in facts] == ["database", "database"]  # the consolidator keeps the newest


def test_bad_messages():
    with pytest.raises(InvalidTypeError):
        extract_facts("hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        extract_facts([{"content": "no role"}])
    with pytest.raises(InvalidTypeError):
        extract_facts(["not a dict"])  # type: ignore[list-item]
    assert extract_facts([]) == []
    assert extract_facts([{"role": "user", "content": None}]) == []


@pytest.mark.parametrize("seed", range(5))
def test_a_long_agent_session_leaves_its_rules_and_no_requests(seed: int):
    """On a generated 300-turn coding session (hundreds of one-off
    requests such as "Fix the failing test in tests/test_refund.py."),
    what memory files keep is the user's rules: each one, once, and
    nothing else."""
    from compaction_sessions import TASKS, compaction_session

    session = compaction_session(seed)
    facts = extract_facts(session.messages)
    kept = [marker for marker in session.rules if any(marker in fact.text for fact in facts)]
    assert kept == session.rules
    assert len(facts) == len(session.rules)
    assert not [fact.text for fact in facts if any(task in fact.text for task in TASKS)]
