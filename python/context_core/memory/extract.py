"""The deterministic extractor: what ``persist_learnings()`` keeps with no model.

Only what holds beyond this conversation is worth a line in ``MEMORY.md``,
which goes into every prompt: the user's rules, preferences, decisions,
facts about themselves, the team or the project, and lessons. A request for
the moment ("Fix the flaky test in payments/161.py") is not, even when it
names a path. :func:`extract_facts` reads a conversation sentence by
sentence and keeps:

* **labelled sentences**, in user and assistant messages: a sentence starting
  with ``Remember:``, ``Note:``, ``Fact:``, ``Decision:``, ``Constraint:``,
  ``Rule:``, ``Preference:`` (or ``记住``, ``备注``, ``决定``, ``约束``, ``规则``,
  ``偏好`` and a colon, ASCII or full-width) becomes a fact of that kind, keyed
  as below when it reads ``<subject> is <value>``;

and, in user messages only, the first of these that a sentence is:

* a **stated preference**: ``I prefer``, ``I'd rather``, ``my preference is``,
  ``I (don't) like``, ``I love``, ``I hate``, ``我喜欢``, ``我更喜欢``, ``我偏好``,
  ``我倾向``, ``我不喜欢`` (not inside a request);
* a **lesson** (kind ``fact``): what fails and why or what to do when it
  happens: ``fails unless``, ``only works if``, ``needs ... because``,
  ``has to be ... by hand``, ``the fix is``, ``so check ... first``,
  ``If/When/Whenever ..., ...``, ``To <do> ..., use ...``, ``rather than
  retrying``, ``Next time ...``, ``否则``, ``一定要先``, ``是因为``;
* a **constraint**: a sentence the constraint tagger flags (``must``, ``never``,
  ``always``, ``ensure``, ``do not``, ``必须``, ``禁止``, ``确保``... matched after
  Unicode normalisation, see :class:`~context_core.select.Tagger`), or a
  request made to hold from now on (``Going forward, route refunds to ...``);

and, unless it is **one-off** (below):

* a **decision**: ``we decided``, ``the decision is``, ``let's use / go with /
  stick with / switch to``, ``we'll use``, ``we're going with``, ``决定``,
  ``就用``, ``改用``, ``采用``; ``use X for Y`` gets the key ``Y`` (so a later
  ``switch to Z for Y`` replaces it);
* a **keyed fact**: ``<the subject> is/are/=/: <value>`` whose value holds a
  number or an exact value, keyed by the subject (``The staging DB port is
  5433`` -> key ``staging db port``);
* a **standing statement**: ``we use / run / release ...``, ``our <thing>
  ...``, ``my name / team / role ...``, ``I'm <Name>``, ``I lead / own /
  maintain ...``, ``... in this repo``, ``... here``, ``<X> uses / runs on /
  targets / allows / requires / lives in <Y>``, ``我们...``, ``我在/是/负责...``;
  or a sentence marked to last (``for context``, ``going forward``, ``from now
  on``, ``by default``, ``以后``, ``记住``...);
* a sentence of at least :data:`MIN_EXACT_WORDS` words holding an exact value
  (a path, a file name, a URL, an e-mail address, an IP address, a version,
  a UUID, a commit hash, a ticket id, an identifier mixing letters and digits),
  unless it is about one instance (it starts with ``this``, ``it``, ``a``...).

A sentence is **one-off** when it is a request (an imperative such as
``Run``, ``Fix``, ``Save``, ``Deploy``..., or ``please``, ``can you``, ``help
me``, ``I want to``, ``请``, ``帮我``, ``把``..., after openers such as ``OK,``
or ``Yes,``) or the news of the moment (``again``, ``today``, ``last night``,
``keeps failing``, ``is broken``, ``has been``, ``fired``, ``reported``,
``wrong``, ``Error:``, ``I'm looking``, ``现在``, ``一直``, ``正在``...), and
nothing marks it to last.

The fact's text is the sentence as written (list bullets and surrounding
white space removed), so exact values are never paraphrased.

It does not keep: system, developer and tool messages (never read), tool
calls and results, thinking and image blocks; anything inside Markdown code
fences or indented code lines; questions (a sentence ending in ``?``);
sentences over :data:`MAX_FACT_CHARS` characters; assistant text other than
labelled sentences; anything that needs understanding to recognise (a
preference stated without one of the phrases above, a decision implied by
agreement, a fact paraphrased across sentences). A model
(``persist_learnings(llm=...)``) does those. Measured on a hand-labelled set
of conversations (durable against one-off), the README gives its precision
and recall.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from context_core.errors import InvalidTypeError, MemoryFormatError
from context_core.memory.facts import Fact
from context_core.select import tag

_T = TypeVar("_T")

__all__ = [
    "MAX_FACT_CHARS",
    "MIN_EXACT_WORDS",
    "classify",
    "conversation_text",
    "extract_facts",
    "in_batches",
    "in_runs",
    "labelled",
    "sentences",
]

MAX_FACT_CHARS = 300
"""Longer sentences are prose, not facts: the extractor skips them."""

READ_ROLES = frozenset({"user", "assistant"})
"""The roles whose messages are read (system, developer and tool never are)."""

_LABELS = {
    "remember": "fact",
    "note": "fact",
    "fact": "fact",
    # A new value of something said before: a fact keyed by its subject, so
    # it replaces the old value; only where it reads "X is <exact value>"
    # (see _KEYED_ONLY), as "Update: I pushed the fix." is news, not a fact.
    "correction": "fact",
    "update": "fact",
    "更正": "fact",
    "decision": "decision",
    "decided": "decision",
    "constraint": "constraint",
    "rule": "constraint",
    "preference": "preference",
    "记住": "fact",
    "备注": "fact",
    "决定": "decision",
    "约束": "constraint",
    "规则": "constraint",
    "偏好": "preference",
}
_LABEL = re.compile(
    r"(?P<label>"
    + "|".join(sorted(map(re.escape, _LABELS), key=len, reverse=True))
    + r")\s*[:\uff1a]\s*(?P<rest>.+)",
    re.I,
)
_PREFERENCE = re.compile(
    r"\bI(?:'d| would)? (?:really |much |strongly )?(?:prefer|rather)\b|\bmy preference is\b"
    r"|\bI (?:really )?(?:(?:don't|do not) like|like|love|hate|dislike)\b"
    r"|我(?:更|比较)?喜欢|我偏好|我倾向|我不喜欢",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:we|I)(?:'ve| have)? decided\b|\bthe decision is\b"
    r"|\blet'?s (?:use|go with|stick with|switch to|keep using|adopt)\b"
    r"|\bwe(?:'ll| will| are going to|'re going to) (?:use|go with|stick with|switch to|adopt)\b"
    r"|\bwe're going with\b|\bwe are going with\b"
    r"|决定|就用|改用|采用",
    re.I,
)
_DECISION_KEY = re.compile(
    r"\b(?:use|go with|stick with|switch to|adopt|keep using)\s+.+?\s+(?:for|as)\s+(?:the\s+|our\s+|a\s+)?"
    r"(?P<key>[\w][\w ./-]{0,40}?)\s*[.!;]?$",
    re.I,
)

# Words that open a sentence without changing what it asks for.
_OPENERS = (
    r"(?:(?:ok(?:ay)?|yes|yeah|yep|sure|cool|great|perfect|nice|good|thanks|thank you|ah|oh|hey|hi|hello"
    r"|so|and|also|then|now|first|next|quick question|one more thing|alright|right|fine|done|well"
    r"|going forward|from now on|in (?:the )?future|next time|by default)"
    r"\s*[,!.:;\u2014-]?\s+)*"
)
# A request for the moment: an imperative, "please", "can you", "help me",
# "请", "帮我". The work it asks for is done in this conversation.
_TASK_VERBS = (
    "add|adjust|amend|apply|ask|batch|build|bump|change|check|clean|close|commit|compare|compute|convert"
    "|copy|create|debug|delete|deploy|describe|diff|draft|drop|edit|email|explain|export|find|fix|format"
    "|generate|give|go|grab|help|implement|import|install|investigate|list|look|make|merge|migrate|move"
    "|open|paste|patch|ping|post|print|profile|pull|push|put|read|rebase|recompute|redeploy|refactor"
    "|reformat|remove|rename|reply|rerun|reset|resolve|restart|retry|revert|review|rewrite|roll|rollback|route"
    "|run|save|schedule|search|send|set|share|show|sort|split|squash|start|stop|suggest|summari[sz]e|tag"
    "|tell|test|tighten|translate|try|update|upgrade|upload|verify|write"
)
_REQUEST = re.compile(
    rf"{_OPENERS}(?:please|pls|can you|could you|would you|will you|can we|could we|let me|help me"
    rf"|i (?:want|need|would like) you to|i'd like you to|i want to|i'd like to|i need to"
    rf"|(?:{_TASK_VERBS}))\b"
    r"|.*\bplease\b"
    r"|\s*(?:另外[\uff0c,]?\s*)?(?:请|麻烦|帮我|帮忙|给我|先把|把)",
    re.I,
)
# What makes a request standing: it holds from now on, not only now.
_STANDING = re.compile(
    r"\b(?:going forward|from now on|in (?:the )?future|next time|every time|whenever|by default|as a rule"
    r"|in this (?:repo|project|codebase|team)|for context|for reference|fyi)\b"
    r"|以后|今后|下次|每次|要记住|记一下|记住",
    re.I,
)
# The news of the moment: a failure seen now, a status, work in progress.
_TRANSIENT = re.compile(
    r"\b(?:last night|yesterday|today|tonight|this (?:morning|afternoon|evening)|right now|just now"
    r"|at the moment|again|keeps? \w+ing|(?:is|are) (?:still )?(?:failing|broken|down|slow|throwing|running"
    r"|timing out|stuck)|fired|crashed|broke|(?:has|have) been|reported|wrong|can't|cannot"
    r"|doesn't work|isn't working|is not working|passes alone|fails when|dropped to"
    r"|i'm (?:looking|working|trying|seeing|getting)|i am (?:looking|working|trying|seeing|getting))\b"
    r"|\b(?:error|exception|traceback|warning)\s*:"
    r"|一直|现在|刚才|今天|昨天|正在",
    re.I,
)
# A standing statement about the user, the team or the project.
_STATEMENT = re.compile(
    rf"{_OPENERS}(?:(?:for context|fyi|btw|note that|by the way)\s*[,:]?\s*)?"
    r"(?:we(?:'re| are)? (?:only |always |usually |never |still )?(?:use|using|run|running|release|deploy"
    r"|ship|build|building|host|store|keep|follow|target|support|work|write|have|need|prefer|pay)\b"
    r"|our \w+|my (?:name|team|role|job|timezone|time zone|manager|company)\b"
    r"|i(?:'m| am) (?:[A-Z]\w+|the |in charge|responsible|picking up|on the|based)"
    r"|i (?:lead|own|manage|maintain|run|work on|work in|write|only|usually|report to)\b"
    r"|you (?:have to|need to) be\b)"
    r"|.*\b(?:in this (?:repo|project|codebase)|here)\.?$"
    r"|.*\b(?:uses|runs on|targets|allows|requires|depends on|lives (?:in|at)|is hosted on|is deployed to"
    r"|goes to|go to|answers on|listens on|is owned by|belongs to)\b"
    r"|(?:另外[\uff0c,]?\s*)?(?:我们|我(?:在|是|负责))",
    re.I,
)
# An exact value in a sentence about one instance ("it", "a customer") is
# news, not a fact about the project.
# A lesson: what fails and why, what to do when it happens.
_LESSON = re.compile(
    r"\b(?:fails?|breaks?|hangs?) (?:unless|if|when|because)\b|\bonly works (?:if|when|with)\b"
    r"|\bneeds? .{1,60} because\b|\bha(?:s|ve) to be .{1,60} by hand\b|^(?:next time|in future)\b"
    r"|\bthe (?:fix|trick|workaround) (?:is|was)\b"
    r"|\broot cause\b|\bso (?:export|check|set|run|fix|pass|use) .{1,60} first\b"
    r"|^(?:if|when|whenever) [^,]{3,120}, |^to [a-z]+ [^,]{3,80}, (?:use|run|set|call|pass)\b"
    r"|\b(?:rather than|instead of) \w+ing\b"
    r"|否则|一定要先|之前(?:要|一定要)|是因为|导致",
    re.I,
)
# A finished change told with its outcome ("I replaced the loop ...; it
# now responds in 140 ms"): a record of the task worth finding later.
_EPISODE = re.compile(
    r"(?:done[.:,!]?\s*)?(?:i|we)(?:'ve| have)? (?:changed|fixed|added|replaced|migrated|converted|filtered"
    r"|implemented|refactored|moved|switched|removed|rewrote|updated|upgraded|enabled|disabled|wrapped"
    r"|introduced|split|backfilled|patched|reworked|optimi[sz]ed|cached|batched|limited|capped|finished"
    r"|completed|shipped|dropped|tuned|reduced|increased)\b"
    r".*\b(?:now|so that|no longer|which (?:fixes|fixed)|fixes|resolves|so we)\b"
    r"|.*\b(?:is|was|are|were) (?:now )?fixed by\b"
    r"|.{0,100}?(?:已经?|我们?把).{0,80}?(?:修复|改成|换成|迁移|替换|优化).{0,80}?(?:现在|之后|提升|通过|降)",
    re.I,
)
_INSTANCE_START = re.compile(r"(?:this|that|it|these|those|he|she|they|a|an|some|one)\b", re.I)
MIN_EXACT_WORDS = 4
"""A sentence kept only for an exact value needs this many words: a bare
``Job id application_1718_0042.`` is a label, not a fact."""

# Exact values: the tokens that make a sentence worth keeping verbatim.
_EXACT = re.compile(
    r"https?://\S+"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
    r"|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|(?:^|(?<=[\s(\"'`]))(?:~|\.{1,2})?/[\w.@%+~-]+(?:/[\w.@%+~-]*)*"
    r"|\b[A-Za-z]:\\[\w\\ .-]+"
    r"|\b[\w.-]+(?:/[\w.-]+)+\.\w{1,8}\b"
    r"|\b[\w-]+\.(?:py|rs|md|json|ya?ml|toml|txt|cfg|ini|conf|sh|js|ts|tsx|go|java|c|h|cc|cpp|hpp|sql"
    r"|env|lock|log|csv|xml|html|css|rb|php|kt|swift)\b"
    r"|\bv\d+(?:\.\d+)+\b|\b\d+\.\d+\.\d+\b"
    r"|\b[A-Z][A-Z0-9]+-\d+\b|(?<![\w&])#\d+\b"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
    r"|\b(?=\w*[A-Za-z])(?=\w*\d)\w+[_-][\w-]*\b",
)
_NUMBER = re.compile(r"\d")
_KEYED = re.compile(
    r"(?:(?:the|our|my|your)\s+)?(?P<subject>[^\W\d_][\w'./ -]{0,60}?)"
    r"\s*(?:\bis set to\b|\bis at\b|\blives (?:at|in)\b|\bis\b|\bare\b|=|:(?=\s)|\uff1a)\s*(?P<value>.+)",
    re.I,
)
_KEYED_ZH = re.compile(r"(?P<subject>[\u4e00-\u9fff][\w\u4e00-\u9fff ]{0,19}?)(?:是|为|在)(?P<value>.+)")
_NOT_SUBJECTS = frozenset(
    {"it", "this", "that", "there", "here", "he", "she", "they", "we", "i", "you", "what", "which"}
    | {"who", "where", "when", "why", "how", "one"}
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f\uff1b])")
_BULLET = re.compile(r"(?:[-*+•]|\d{1,3}[.)])\s+")
_FENCE = re.compile(r"\s*(?:```|~~~)")


def _blocks_text(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                yield block
            elif isinstance(block, Mapping) and block.get("type") in ("text", "input_text", "output_text"):
                text = block.get("text")
                if isinstance(text, str):
                    yield text


def conversation_text(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(role, text)`` of the user and assistant messages, in order: plain
    text content and text blocks only. System, developer and tool messages,
    tool calls and results, thinking and image blocks are left out."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise InvalidTypeError("messages must be a list of message dicts")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidTypeError(f"messages[{index}] must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidTypeError(f"messages[{index}] has no 'role' string")
        if role not in READ_ROLES:
            continue
        text = "\n".join(_blocks_text(message.get("content")))
        if text.strip():
            out.append((role, text))
    return out


def in_runs(
    items: Iterable[_T], size: Callable[[_T], int], max_total: int, max_each: int | None = None
) -> tuple[list[list[_T]], int]:
    """``items`` in order, in runs whose sizes come to at most ``max_total``
    each; and how many were left out, each over ``max_each`` (default
    ``max_total``) alone."""
    most = max_total if max_each is None else max_each
    runs: list[list[_T]] = []
    run: list[_T] = []
    total = skipped = 0
    for item in items:
        grows = size(item)
        if grows > most:
            skipped += 1
            continue
        if run and total + grows > max_total:
            runs.append(run)
            run, total = [], 0
        run.append(item)
        total += grows
    if run:
        runs.append(run)
    return runs, skipped


def in_batches(
    messages: Sequence[Mapping[str, Any]], max_bytes: int
) -> tuple[list[list[Mapping[str, Any]]], int]:
    """``messages`` in runs whose :func:`conversation_text` comes to at most
    ``max_bytes`` each (the limit a transcript sent at once is held to), in
    order; and how many messages were left out, each over the limit alone."""

    def text_bytes(message: Mapping[str, Any]) -> int:
        return sum(len(text.encode("utf-8", "surrogatepass")) for _, text in conversation_text([message]))

    return in_runs(messages, text_bytes, max_bytes)


def _lines(text: str) -> Iterator[str]:
    """Lines outside code fences and indented code."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")) or not line.strip():
            continue
        line = line.strip()
        bullet = _BULLET.match(line)
        yield line[bullet.end() :] if bullet else line


def _sentences(line: str) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(line):
        sentence = sentence.strip()
        if sentence:
            yield sentence


def _fact(text: str, kind: str, key: str | None = None) -> Fact | None:
    if len(text) > MAX_FACT_CHARS:
        return None
    try:
        return Fact(text, kind, key)
    except MemoryFormatError:
        return None


def _subject_key(subject: str) -> str | None:
    words = subject.strip(" '-./").lower().split()
    if not words or len(words) > 6 or (len(words) == 1 and words[0] in _NOT_SUBJECTS):
        return None
    return " ".join(words)


def _value_key(sentence: str) -> str | None:
    """The subject of ``<subject> is <value>`` where the value holds an exact
    token or a number; else ``None``."""
    for pattern in (_KEYED, _KEYED_ZH):
        match = pattern.fullmatch(sentence.rstrip(".!\u3002\uff01"))
        if match is None:
            continue
        value = match.group("value")
        if _EXACT.search(value) or _NUMBER.search(value):
            key = _subject_key(match.group("subject"))
            if key is not None:
                return key
    return None


#: Labels of a new value of a key: only in a user's words and only of
#: "X is <exact value>"; any other such sentence is read as it always was.
_KEYED_ONLY = frozenset({"correction", "update", "更正"})


def _labelled(labelled: re.Match[str]) -> Fact | None:
    label = labelled.group("label").lower()
    kind = _LABELS[label]
    rest = labelled.group("rest").strip()
    if label in _KEYED_ONLY:
        key = None if rest.endswith(("?", "\uff1f")) else _value_key(rest)
        return None if key is None else _fact(rest, kind, key)
    if kind == "decision":
        decision = _decision(rest)
        if decision is None or decision.key is not None:
            return decision
    return _fact(rest, kind, _value_key(rest))


def _one_off(sentence: str) -> bool:
    """A request for now, or the news of the moment (and not a rule meant
    to hold from now on)."""
    if _STANDING.search(sentence):
        return False
    return bool(_REQUEST.match(sentence) or _TRANSIENT.search(sentence))


def classify(sentence: str, role: str) -> tuple[Fact, str] | None:
    """The fact ``sentence`` (said by ``role``) is worth keeping, with the
    kind of memory it is (``semantic``, ``episodic`` or ``procedural``), or
    ``None``. Labelled sentences are handled by the caller. Memory files keep
    user sentences only; :func:`~context_core.memory_store.extract_memories`
    also keeps an assistant's finished changes and lessons."""
    if len(sentence) > MAX_FACT_CHARS or sentence.endswith(("?", "\uff1f")):
        return None  # prose, not a fact: and no pattern ever runs over a long crafted line
    if role != "user":
        return _assistant(sentence)
    if _PREFERENCE.search(sentence) and not _REQUEST.match(sentence):
        return _kept(_fact(sentence, "preference"), "semantic")
    if _LESSON.search(sentence) and not _TRANSIENT.search(sentence):
        return _kept(_fact(sentence, "fact"), "procedural")
    if "constraint" in tag(sentence) and (_STANDING.search(sentence) or not _TRANSIENT.search(sentence)):
        return _kept(_fact(sentence, "constraint"), "semantic")
    if _STANDING.search(sentence) and _REQUEST.match(sentence):
        return _kept(_fact(sentence, "constraint"), "semantic")  # "going forward, route refunds to ..."
    if _one_off(sentence):
        return None
    if _EPISODE.match(sentence):
        return _kept(_fact(sentence, "fact"), "episodic")
    if _DECISION.search(sentence):
        return _kept(_decision(sentence), "semantic")
    key = _value_key(sentence)
    if key is not None:
        return _kept(_fact(sentence, "fact", key), "semantic")
    if _STATEMENT.match(sentence) or _STANDING.search(sentence):
        return _kept(_fact(sentence, "fact"), "semantic")
    if (
        _EXACT.search(sentence)
        and len(sentence.split()) >= MIN_EXACT_WORDS
        and not _INSTANCE_START.match(sentence)
    ):
        return _kept(_fact(sentence, "fact"), "semantic")
    return None


def _assistant(sentence: str) -> tuple[Fact, str] | None:
    if _REQUEST.match(sentence) or _TRANSIENT.search(sentence):
        return None
    if _EPISODE.match(sentence):
        return _kept(_fact(sentence, "fact"), "episodic")
    if _LESSON.search(sentence):
        return _kept(_fact(sentence, "fact"), "procedural")
    return None


def _kept(fact: Fact | None, kind: str) -> tuple[Fact, str] | None:
    return None if fact is None else (fact, kind)


def _decision(sentence: str) -> Fact | None:
    match = _DECISION_KEY.search(sentence)
    key = _subject_key(match.group("key")) if match else None
    return _fact(sentence, "decision", key)


def sentences(messages: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """``(role, sentence)`` of the user and assistant text, in order, outside
    code (see the module's documentation)."""
    for role, text in conversation_text(messages):
        for line in _lines(text):
            for sentence in _sentences(line):
                yield role, sentence


def labelled(sentence: str, role: str = "user") -> Fact | None:
    """The fact a ``Remember:`` / ``Decision:`` / ... sentence states, or
    ``None``. ``Update:`` and ``Correction:`` state one only in a user's
    words (an agent's are its news) and only as a new value of a key;
    any other is for :func:`classify`, whole, as an unlabelled sentence."""
    if len(sentence) > MAX_FACT_CHARS + 16:  # the longest label and its colon, then a fact
        return None
    found = _LABEL.match(sentence)
    if found is None or (found.group("label").lower() in _KEYED_ONLY and role != "user"):
        return None
    return _labelled(found)


def extract_facts(messages: Iterable[Mapping[str, Any]]) -> list[Fact]:
    """The facts worth keeping from a conversation, oldest first, without
    duplicates (see the module's documentation for exactly what is kept)."""
    facts: dict[str, Fact] = {}
    for role, sentence in sentences(messages):
        fact = labelled(sentence, role)
        if fact is None and role == "user":  # unlabelled assistant text is never kept here
            found = classify(sentence, role)
            fact = None if found is None else found[0]
        if fact is not None:
            facts.pop(fact.signature, None)  # the newest copy, at its place
            facts[fact.signature] = fact
    return list(facts.values())
