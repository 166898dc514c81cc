"""The twin of the entity scan (``context_core._core._entities``): the same
pieces, the same rules in the same order, the same normal forms.

Everything is decided on ASCII classes, by hand rather than with ``re``, so
both sides agree whatever Unicode the text holds. Whitespace is what
``str.split()`` takes; Chinese characters and CJK punctuation also end a
piece (``订单A-8812已退款`` names ``A-8812``); full-width ASCII is read as
ASCII.
"""

from __future__ import annotations

from itertools import pairwise

__all__ = ["MAX_PIECE_CHARS", "entities"]

#: Pieces longer than this (a minified blob, a base64 run) are passed over.
MAX_PIECE_CHARS = 128

_EDGES = frozenset("\"'`()<>[]{},;:!?*")
_SENTENCE_END = frozenset(".!?:")
_DIGITS = frozenset("0123456789")
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALNUM = _DIGITS | _LOWER | _UPPER
_WORD = _ALNUM | {"_"}
_HEX = _DIGITS | frozenset("abcdef")
_PATH_CHARS = _WORD | frozenset("@%+=.,-")
_UNITS = frozenset(["%", "ms", "s", "sec", "min", "h", "kb", "mb", "gb", "tb", "k", "m"])
_FILE_EXTENSIONS = frozenset(
    """py pyi go rs js mjs ts tsx jsx java kt rb php swift c h cc cpp hpp cs scala sql sh bash
    zsh md rst txt json jsonl yaml yml toml ini cfg conf env lock csv tsv xml html css scss
    proto tf gradle log ipynb vue svelte dockerfile mk""".split()  # noqa: SIM905
)
#: Capitalised words that are not names.
_NOT_NAMES = frozenset(
    """a an and also are as at be but by can could did do does for from he her his how i if
    in is it its let may me my no not now of ok okay on or our please she should so thanks
    that the then there these they this those to use we what when where which who why will
    with would yes you your hi hello sure error warn warning info debug todo note fixme
    fatal""".split()  # noqa: SIM905
)


def _is_space(c: str) -> bool:
    return c.isspace() or "\x1c" <= c <= "\x1f"


def _breaks(c: str) -> bool:
    """A character that ends a piece besides whitespace: Chinese characters
    and CJK punctuation."""
    o = ord(c)
    return (
        0x3000 <= o <= 0x303F
        or 0x3400 <= o <= 0x4DBF
        or 0x4E00 <= o <= 0x9FFF
        or 0xF900 <= o <= 0xFAFF
        or o == 0xFF0C
        or 0xFF1A <= o <= 0xFF1B
        or 0xFF08 <= o <= 0xFF09
    )


def _ascii_width(c: str) -> str:
    """Full-width ASCII (U+FF01..U+FF5E) as ASCII."""
    o = ord(c)
    return chr(o - 0xFEE0) if 0xFF01 <= o <= 0xFF5E else c


def _lower(text: str) -> str:
    return "".join(chr(ord(c) + 32) if c in _UPPER else c for c in text)


def _pieces(text: str) -> list[tuple[str, bool]]:
    """``(piece, starts_sentence)``: runs of characters that neither space
    nor a break ends. A piece starts a sentence when it is the first, or a
    newline came before it, or the one before ended in ``. ! ? :``."""
    out: list[tuple[str, bool]] = []
    current: list[str] = []
    start_of_sentence = pending_start = True
    for raw in text:
        c = _ascii_width(raw)
        if _is_space(raw) or _breaks(raw):
            if current:
                piece = "".join(current)
                out.append((piece, pending_start))
                start_of_sentence = piece[-1] in _SENTENCE_END
                current = []
            if raw in "\n\r" or 0x3000 <= ord(raw) <= 0x303F:
                start_of_sentence = True
            continue
        if not current:
            pending_start = start_of_sentence
        current.append(c)
    if current:
        out.append(("".join(current), pending_start))
    return out


def _bare(word: str) -> str:
    """``word`` without the quotes, brackets and punctuation around it, a
    trailing ``'s``, or a ``:line[:column]`` after a file reference."""
    while True:
        nxt = word.strip("".join(sorted(_EDGES))).rstrip(".")
        if nxt.endswith("'s") or nxt.endswith("\u2019s"):
            nxt = nxt[:-2]
        for _ in range(2):
            colon = nxt.rfind(":")
            if colon >= 0:
                digits = nxt[colon + 1 :]
                head = nxt[:colon]
                if digits and all(d in _DIGITS for d in digits) and ("/" in head or "." in head):
                    nxt = head
        if nxt == word:
            return word
        word = nxt


def _digits(s: str) -> bool:
    return bool(s) and all(c in _DIGITS for c in s)


def _is_email(lw: str) -> bool:
    if lw.count("@") != 1:
        return False
    local, domain = lw.split("@")
    labels = domain.split(".")
    return (
        bool(local)
        and all(c in _ALNUM or c in "._%+-" for c in local)
        and len(labels) >= 2
        and all(labels)
        and all(c in _ALNUM or c == "-" for c in domain.replace(".", ""))
        and len(labels[-1]) >= 2
        and all(c in _LOWER for c in labels[-1])
    )


def _is_handle(lw: str) -> bool:
    rest = lw[1:]
    return (
        lw.startswith("@")
        and len(rest) >= 2
        and rest[0] in _WORD
        and rest[-1] in _WORD
        and all(c in _WORD or c in ".-" for c in rest)
    )


def _is_uuid(lw: str) -> bool:
    parts = lw.split("-")
    return [len(p) for p in parts] == [8, 4, 4, 4, 12] and all(c in _HEX for p in parts for c in p)


def _is_date(w: str) -> bool:
    day, _, time = w.partition("T")
    d = day.split("-")
    if [len(p) for p in d] != [4, 2, 2] or not all(_digits(p) for p in d):
        return False
    return (not time and "T" not in w) or _is_clock(time, hours=2)


def _is_clock(w: str, *, hours: int = 0) -> bool:
    parts = w.split(":")
    if len(parts) not in (2, 3) or not all(_digits(p) for p in parts):
        return False
    first_ok = len(parts[0]) == hours if hours else len(parts[0]) in (1, 2)
    return first_ok and all(len(p) == 2 for p in parts[1:])


def _path_word(word: str) -> bool:
    rest = word[1:] if word.startswith("~") else word
    rest = rest[1:] if rest.startswith("/") else rest
    return (
        "/" in rest
        and not rest.startswith("/")
        and "//" not in rest
        and all(c == "/" or c in _PATH_CHARS for c in rest)
        and rest[-1] in _WORD
    )


def _path_like(word: str) -> bool:
    return word.startswith(("/", "./", "../", "~/")) or word.count("/") >= 2 or "." in word.rsplit("/", 1)[-1]


def _file_word(word: str) -> bool:
    dot = word.rfind(".")
    if dot < 0:
        return False
    stem, extension = word[:dot], word[dot + 1 :]
    return (
        _lower(extension) in _FILE_EXTENSIONS
        and bool(stem)
        and stem[-1] in _WORD
        and all(c in _WORD or c in ".-" for c in stem)
    )


def _version(lw: str) -> str | None:
    body = lw[1:] if lw.startswith("v") else lw
    core, sep, suffix = body, "", ""
    for i, c in enumerate(body):
        if c in "-+":
            core, sep, suffix = body[:i], c, body[i + 1 :]
            break
    parts = core.split(".")
    if not (2 <= len(parts) <= 4 and all(_digits(p) for p in parts)):
        return None
    if sep and not (suffix and all(c in _ALNUM or c == "." for c in suffix)):
        return None
    if lw.startswith("v") or len(parts) >= 3 or sep:
        return body
    return None


def _is_hex(lw: str) -> bool:
    return (
        7 <= len(lw) <= 64
        and all(c in _HEX for c in lw)
        and any(c in _DIGITS for c in lw)
        and any(c in _LOWER for c in lw)
    )


def _is_id(w: str) -> bool:
    if not w or w[0] not in _LOWER | _UPPER:
        return False
    segments = w.replace("_", "-").split("-")
    if len(segments) >= 2:
        return all(s and all(c in _ALNUM for c in s) for s in segments) and any(
            c in _DIGITS for c in segments[-1]
        )
    letters = len(w) - len(w.lstrip("".join(sorted(_LOWER | _UPPER))))
    return 1 <= letters <= 10 and len(w) - letters >= 3 and _digits(w[letters:])


def _number(lw: str) -> tuple[str, str] | None:
    """``(number, unit)`` of a number with an optional attached unit."""
    end = 0
    while end < len(lw) and (
        lw[end] in _DIGITS or (lw[end] in ".," and end + 1 < len(lw) and lw[end + 1] in _DIGITS)
    ):
        end += 1
    if end == 0 or lw[0] not in _DIGITS:
        return None
    unit = lw[end:]
    if unit and unit not in _UNITS:
        return None
    return lw[:end], unit


def _is_snake(w: str) -> bool:
    parts = w.split("_")
    return (
        len(parts) >= 2
        and w[0] in _LOWER
        and all(p and all(c in _LOWER or c in _DIGITS for c in p) for p in parts)
    )


def _is_camel(w: str) -> bool:
    return (
        len(w) >= 4
        and w[0] in _LOWER | _UPPER
        and all(c in _ALNUM for c in w)
        and any(a in _LOWER and b in _UPPER for a, b in pairwise(w))
    )


def _is_capitalised(w: str) -> bool:
    return len(w) >= 2 and w[0] in _UPPER and all(c in _LOWER for c in w[1:])


def _is_acronym(w: str) -> bool:
    letters = w.rstrip("0123456789")
    return 2 <= len(letters) <= 6 and all(c in _UPPER for c in letters)


def _classify(w: str, following: str | None) -> list[tuple[str, str]]:
    """The entities one bare piece names (``following`` is the next bare
    piece, for a unit written apart: ``200 ms``)."""
    lw = _lower(w)
    if lw.startswith(("http://", "https://")) and len(lw) > 8:
        return [("url", lw.rstrip("/"))]
    if "@" in lw:
        if _is_email(lw):
            return [("email", lw)]
        if _is_handle(lw):
            return [("handle", lw)]
        return []
    if _is_uuid(lw):
        return [("uuid", lw)]
    if _is_date(w):
        return [("date", lw)]
    if _is_clock(w):
        return [("time", w)]
    if "/" in w and "://" not in w and _path_word(w) and _path_like(w):
        path = lw[2:] if lw.startswith("./") else lw
        found = [("path", path)]
        name = w.rsplit("/", 1)[-1]
        if _file_word(name):
            found.append(("file", _lower(name)))
        return found
    if _file_word(w):
        return [("file", lw)]
    version = _version(lw)
    if version is not None:
        return [("version", version)]
    if _is_hex(lw):
        return [("hex", lw)]
    if _is_id(w):
        return [("id", lw)]
    number = _number(lw)
    if number is not None:
        value, unit = number
        if not unit and following is not None and _lower(following) in _UNITS:
            unit = _lower(following)
        if unit:
            return [("number", f"{value} {unit}")]
        if len(value) >= 3:
            return [("number", value)]
        return []
    if _is_snake(w) or _is_camel(w):
        return [("ident", lw)]
    return []


def _quoted(text: str) -> list[str]:
    """The insides of ``"…"`` (2-80 characters), `` `…` `` (1-80), ``“…”``
    (2-80) and ``「…」`` (1-80) on one line, leftmost first, as a regex
    would find them."""
    pairs = {'"': ('"', 2), "`": ("`", 1), "“": ("”", 2), "「": ("」", 1)}
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        pair = pairs.get(text[i])
        if pair is None:
            i += 1
            continue
        close, shortest = pair
        j = i + 1
        while j < n and j - i - 1 <= 80 and text[j] != close and text[j] != "\n":
            j += 1
        inside = j - i - 1
        if j < n and text[j] == close and shortest <= inside <= 80:
            out.append(text[i + 1 : j])
            i = j + 1
        else:
            i += 1
    return out


def _names(pieces: list[tuple[str, bool]], bares: list[str]) -> list[str]:
    """Runs of capitalised words and acronyms (``Alice Chen``, ``AWS``), at
    most four words each: a run goes on to the next piece when nothing was
    stripped from this one and the next does not start a sentence. A lone
    capitalised word that starts a sentence is not a name."""
    out: list[str] = []
    run: list[str] = []
    run_starts = False

    def close() -> None:
        if run and not (len(run) == 1 and run_starts and _is_capitalised(run[0])):
            out.append(_lower(" ".join(run)))
        run.clear()

    for index, ((piece, starts), w) in enumerate(zip(pieces, bares, strict=True)):
        name_like = bool(w) and (_is_capitalised(w) or _is_acronym(w)) and _lower(w) not in _NOT_NAMES
        if not name_like:
            close()
            continue
        if not run:
            run_starts = starts
        run.append(w)
        joins = index + 1 < len(pieces) and piece == w and not pieces[index + 1][1]
        if not joins or len(run) == 4:
            close()
    close()
    return out


def entities(text: str) -> list[tuple[str, str]]:
    """``(kind, value)`` of every entity ``text`` names, each value once, in
    order of first appearance: the pieces' own entities, then names, then
    quoted strings. Values are normal forms (ASCII lowered; a path without
    its leading ``./``; a unit after one space), so that
    ``Services/Payments/retry.go`` and ``services/payments/retry.go`` meet."""
    found: dict[str, str] = {}
    pieces = _pieces(text)
    bares = [(_bare(p) if len(p) <= MAX_PIECE_CHARS else "") for p, _ in pieces]
    for index, w in enumerate(bares):
        if w:
            following = bares[index + 1] if index + 1 < len(bares) else None
            for kind, value in _classify(w, following):
                found.setdefault(value, kind)
    for name in _names(pieces, bares):
        found.setdefault(name, "name")
    for inside in _quoted(text):
        value = _lower(inside.strip())
        if value:
            found.setdefault(value, "quoted")
    return [(kind, value) for value, kind in found.items()]
