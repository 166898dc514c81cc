"""The exact values of a text (ids, paths, file names, URLs, numbers, dates,
quoted strings, code identifiers) and the test of whether a summary carries
a message: prose may reword a rule, but it must keep these character for
character, or the rule is not carried."""

from __future__ import annotations

import re
import unicodedata

from context_core._core import _named, _occurs

__all__ = ["carried", "exact_values", "key_words", "named", "named_files", "occurs"]

_FILE_EXTENSIONS = (
    "py|pyi|go|rs|js|mjs|ts|tsx|jsx|java|kt|rb|php|swift|c|h|cc|cpp|hpp|cs|scala|sql|sh|bash|zsh|"
    "md|rst|txt|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|lock|csv|tsv|xml|html|css|scss|proto|"
    "tf|gradle|log|ipynb|vue|svelte|dockerfile|mk"
)
_URL = r"https?://[^\s<>\"'`)\]}]+"
# A path has a slash between name characters; a leading / or ./ or ~/ is kept.
_PATH = r"(?:~|\.{1,2})?/?(?:[\w@%+=.,-]+/)+[\w@%+=.,-]*[\w]"
_FILE = rf"\b[\w.-]*\w\.(?:{_FILE_EXTENSIONS})\b"
_UUID = r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
_HEX = r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b"
# Letters, then a - or _ and a run holding a digit: A-8812, order_123, PAY-42, call_22_5.
_ID = r"\b[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*[-_](?=[A-Za-z0-9]*\d)[A-Za-z0-9]+\b"
_DATE = r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}:\d{2}(?::\d{2})?\b"
_VERSION = r"\bv?\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?\b"
# A number with its unit: one glued to it whole (64px, 3x, 2nd, 10k: the number
# alone is no whole word of the text, so no summary could be seen to carry it),
# or a common one after a space.
_NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)*(?:[^\W\d_]+\b|\s?(?:%|ms|s|sec|min|h|kb|mb|gb|tb|k|m)\b)?"
_SNAKE = r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"
_CAMEL = r"\b[A-Z]?[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b"
_QUOTED = r"`([^`\n]{1,80})`|\"([^\"\n]{2,80})\"|“([^”\n]{2,80})”|「([^」\n]{1,80})」"
_HANDLE = r"(?<![\w@])@[A-Za-z0-9_][A-Za-z0-9_.-]*\w"

_VALUES = re.compile(
    "|".join(
        f"(?:{p})"
        for p in (_URL, _UUID, _DATE, _PATH, _FILE, _ID, _HEX, _VERSION, _NUMBER, _SNAKE, _CAMEL, _HANDLE)
    )
)
_QUOTES = re.compile(_QUOTED)
_WORD = re.compile(r"[^\W\d_]{4,}")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]{2,}")
_STOP = frozenset(
    """that this with from into have been were will would should could about there their them
    then than when what which while your yours also only just very more most some such each
    every make sure please before after always never must ensure required it's these those""".split()  # noqa: SIM905
)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


#: The longest run without a space searched for exact values.
MAX_VALUE_CHARS = 128
_LONG_RUN = re.compile(rf"\S{{{MAX_VALUE_CHARS + 1},}}")


def exact_values(text: str) -> list[str]:
    """Every exact value in ``text``, in order, each once: URLs, UUIDs,
    dates, times, paths, file names, ids (``A-8812``, ``order_123``),
    hex hashes, versions, numbers, ``snake_case`` and ``CamelCase``
    identifiers, @handles and quoted strings (their inside).

    Runs of more than :data:`MAX_VALUE_CHARS` characters without a space
    are passed over: the patterns backtrack within a run, and a longer one
    (a minified blob, a 20 KB kebab-case line) would cost time quadratic in
    its length, holding the interpreter all the while."""
    found: dict[str, None] = {}
    if len(text) > MAX_VALUE_CHARS:
        text = _LONG_RUN.sub(" ", text)
    for match in _VALUES.finditer(text):
        value = match.group().strip(".,")
        if value:
            found.setdefault(value)
    for match in _QUOTES.finditer(text):
        value = next(g for g in match.groups() if g is not None).strip()
        if value:
            found.setdefault(value)
    return list(found)


def key_words(text: str) -> list[str]:
    """The content words of ``text`` (four letters or more, not the common
    glue or the rule words themselves) and its runs of Chinese characters,
    folded; used when a rule holds no exact value."""
    folded = _fold(text)
    words = [w for w in _WORD.findall(folded) if w not in _STOP]
    words += _CJK_RUN.findall(folded)
    return list(dict.fromkeys(words))


def occurs(value: str, text: str) -> bool:
    """Whether ``value`` is in ``text`` as a whole: not inside a longer run
    of ASCII letters, digits and underscores (``3`` is not in ``13`` nor in
    ``call_abc123``; ``A-8812`` is in ``订单A-8812已退款``). In Rust."""
    return _occurs(value, text)


def carried(message: str, summary: str, *, share: float = 2 / 3) -> bool:
    """Whether ``summary`` carries ``message``: every exact value of the
    message occurs in it (compared after NFKC and case folding), or, for a
    message with none, at least ``share`` of its key words do. A Chinese run
    counts as carried when the summary holds it whole."""
    folded = _fold(summary)
    values = exact_values(message)
    if values:
        return all(occurs(_fold(value), folded) for value in values)
    words = key_words(message)
    if not words:
        return _fold(message).strip() in folded
    return sum(word in folded for word in words) >= share * len(words)


def named(text: str) -> tuple[list[str], list[str]]:
    """``(tool call ids, paths and file names)`` named in ``text``, each once,
    in one pass over its words (as ``str.split()`` splits, quotes and
    brackets taken off): ids ``call_…``, ``toolu_…``, ``tool_…``, ``fc_…``;
    paths of ASCII names (rooted, or deeper than one slash, or ending in a
    file name: not ``I/O`` or ``3/4``) and names with a known file
    extension; URLs left out. In Rust."""
    return _named(text)


def named_files(text: str) -> list[str]:
    """Paths and file names named in ``text`` (see :func:`named`)."""
    return named(text)[1]
