"""Tags (mirrors rust/core/src/tags): a rule in any punctuation, normalisation, word
boundaries, custom lists, and agreement with the reference."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_core import InvalidInputError, InvalidTypeError
from context_core.reference import tags as reference
from context_core.select import Tagger, tag

PAYMENT_RULE = "为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性"


def is_rule(text: str) -> bool:
    """Whether ``text`` is tagged ``constraint``, the extension and the
    reference agreeing."""
    found = "constraint" in tag(text)
    assert found == ("constraint" in reference.tag(text)), text
    return found


@pytest.mark.parametrize(
    "text",
    [
        PAYMENT_RULE,
        PAYMENT_RULE.replace("，", ","),
        PAYMENT_RULE.replace("，", "。").replace("保证", "·保证"),
        PAYMENT_RULE.replace("，", "；").replace(
            "PaymentCallbackService", "ＰａｙｍｅｎｔＣａｌｌｂａｃｋＳｅｒｖｉｃｅ"
        ),
        PAYMENT_RULE.replace("，", " ").replace("必须", "必须！"),
        PAYMENT_RULE.replace("，", ""),
    ],
)
def test_a_chinese_rule_is_a_constraint_in_any_punctuation(text):
    assert "constraint" in tag(text)
    assert "constraint" in reference.tag(text)


def test_curl_and_stack_traces_are_logs():
    text = (
        "curl -X POST http://localhost:8080/callback -H 'Content-Type: application/json'\n"
        'Traceback (most recent call last):\n  File "pay.py", line 12, in retry\nTimeoutError'
    )
    assert "log" in tag(text)
    assert "log" in tag("java.lang.IllegalStateException: boom\n    at com.acme.Pay.retry(Pay.java:42)")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("You MUST use snake_case.", {"constraint"}),
        ("Never delete production data", {"constraint", "pulse"}),
        ("Pass me the mustard", set()),
        ("<THINK> the retry loop needs a cap </THINK>", {"evidence"}),
        ("Please fix the flaky test", {"pulse"}),
        ("禁止修改数据库结构，请修复登录问题", {"constraint", "pulse"}),
        ("see https://example.com", {"log"}),
        ("hello there", set()),
    ],
)
def test_tags_of_texts(text, expected):
    assert set(tag(text)) == expected
    assert set(reference.tag(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Please refrain from using sudo.",
        "Under no circumstances push to main.",
        "Keep the audit log on at all times.",
        "请勿修改接口",
        "勿删 migrations 目录",
        "勿改生产配置",
        "千万别在周五发布",
        "不许用 print 调试",
        "仅限 staging 环境跑压测",
    ],
)
def test_rules_said_without_must_or_never_are_constraints(text):
    assert is_rule(text)


@pytest.mark.parametrize(
    "text",
    [
        "这个特别动人",
        "两者的区别是什么",
        "分别用 A 和 B 跑一遍",
        "把日志级别改成 DEBUG",
        "我分别删掉了 a.py 和 b.py 里的旧代码。",
        "稍安勿躁，我再看看日志。",
        "这个时间戳不准，改成 UTC 吧",
        "怎么避免这个死锁？",
        "响应时间不超过 100ms，已经挺快了。",
        "可不可以帮我看一下这个报错？",
        "我们只用了两分钟",
        "How do I avoid this deprecation warning?",
        "This should not happen: the test fails with KeyError.",
        "The API returns at most 100 rows per page, but I get 120.",
        "Why does the worker use only one core?",
        "That may not be the root cause.",
        "I dont get why the import fails.",
    ],
)
def test_chat_that_only_holds_a_rule_word_is_no_constraint(text):
    """Chat that holds a rule word in another sense: a tagged message is
    carried whole by every later summary, so these must stay untagged."""
    assert not is_rule(text)


@pytest.mark.parametrize(
    "text",
    [
        "Avoid touching the production database.",
        "Fix the login bug. Avoid touching prod.",
        "Please avoid sudo.",
        "Two things:\n- avoid globals\n- keep it short",
        "1. Avoid global state",
        "Rule 4: avoid the legacy API.",
        "别动生产环境的配置。",
        "好的。避免使用全局变量",
        "请别改 README",
        "修好了！别动配置文件",
        "1、避免在循环里查询数据库",
        "好的，别动配置",
        "\u2013 avoid globals",
        "Avoid X? Avoid Y.",
    ],
)
def test_an_opener_starting_a_sentence_states_a_rule(text):
    """ "Avoid ..." and 别动... are rules where a sentence starts with them,
    and chat elsewhere (see the next test)."""
    assert is_rule(text)


@pytest.mark.parametrize(
    "text",
    [
        "How do I avoid the race here?",
        "We should avoid it, I think, but why?",
        "Avoidance of doubt is a legal phrase",
        "怎么避免这个死锁？",
        "把日志级别改成 DEBUG",
        "我分别删掉了 a.py 和 b.py",
        "see v1.avoid",
        "避免死锁有哪些好方法？",
        "Avoid? What do you mean by that?",
        "Q: avoid or retry, which is better?",
        "Avoid-list entries are loaded from S3, can you check them",
        "avoid_cache = True",
        "别动队是什么意思？",
    ],
)
def test_an_opener_inside_a_sentence_or_a_question_is_no_rule(text):
    assert not is_rule(text)


def test_a_text_of_blank_lines_is_read_once():
    """Each line break starts a sentence, whose lead skipped all the white
    space after it: a text of blank lines was read once per line (40,000
    took 0.5 s, 200,000 would take minutes). The lead stops at a break."""
    blank = "\n \r\n" * 200_000
    assert tag(blank + "hello") == []
    assert tag(blank + "- avoid it") == ["constraint"]
    assert tag(blank + "怎么避免") == []


def test_openers_can_be_replaced_or_turned_off():
    tagger = Tagger(constraint_openers=["leave"])
    assert tagger.tag("Leave the lockfile alone.") == ["constraint"]
    assert tagger.tag("Avoid the lockfile.") == []
    assert tagger.tag("Please leave it. Must be so.") == ["constraint"]  # the keywords stay
    assert Tagger(constraint_openers=[]).tag("Avoid touching prod.") == []
    assert Tagger(constraint_openers=["please avoid"]).tag("Please avoid it.") == ["constraint"]
    assert reference.Tagger(constraint_openers=["leave"]).tag("Leave the lockfile alone.") == ["constraint"]
    with pytest.raises(InvalidInputError, match="no letters or digits"):
        Tagger(constraint_openers=["--"])
    with pytest.raises(InvalidInputError, match="no letters or digits"):
        reference.Tagger(constraint_openers=["--"])


def test_custom_lists_replace_the_defaults():
    tagger = Tagger(constraint_keywords=["verboten", "绝对不可"], log_markers=["[debug]"])
    assert tagger.tag("Das ist VERBOTEN!") == ["constraint"]
    assert tagger.tag("这里绝对，不可以") == ["constraint"]
    assert tagger.tag("must") == []
    assert tagger.tag("[DEBUG] x=1") == ["log"]
    assert tagger.tag("curl http://x") == []
    assert tagger.tag(text="Das ist verboten") == ["constraint"]  # the stub's parameter name
    with pytest.raises(InvalidInputError, match="no letters or digits"):
        Tagger(constraint_keywords=["!!"])
    with pytest.raises(InvalidTypeError):
        Tagger(pulse_keywords="fix")
    with pytest.raises(InvalidTypeError):
        tag(5)


KEYWORDS = [
    "must",
    "Must-not",
    "never",
    "必须",
    "禁止",
    "确保",
    "fix",
    "修复",
    "<think>",
    "http://",
    "curl ",
    "mustard",
    "avoid",
    "Avoidance",
    "别动",
    "避免",
    "please ",
    "请",
    "- ",
    "• ",
    "1. ",
    "2)",
    "3、",
    "\u2013 ",
    "avoid-",
    "avoid_",
    "好的，",
]
PUNCTUATION = list("，。！？、；：“”‘’（）【】《》…—·,.!?;:'\"()[]<>-_/ \u3000\t\n\x0b\x0c\r")
assigned = st.characters(exclude_categories=("Cs", "Cn", "Co"))
texts = st.lists(
    st.one_of(
        st.sampled_from(KEYWORDS), st.sampled_from(PUNCTUATION), st.text(alphabet=assigned, max_size=4)
    ),
    max_size=12,
).map("".join)


@given(text=texts)
def test_agrees_with_the_reference(text):
    """Characters unassigned in this Python's Unicode tables are left out: the
    extension's tables may be newer, and normalisation of those may differ."""
    assert all(unicodedata.category(c) != "Cn" for c in text)
    assert tag(text) == reference.tag(text)
