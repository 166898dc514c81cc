"""Skills: the on-demand layer. Only the index (name and one-line description
of each skill) is resident in the system part; a skill's body enters the
prompt, after the cache breakpoint, only on a turn that asks for it by name or
whose task matches it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from context_core.errors import InvalidInputError, InvalidTypeError, UnknownSkillError
from context_core.prompt.escape import FORMAT_CHARS, one_line

__all__ = ["Skill", "SkillRegistry"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SEPARATORS = r"[\W_]+"
_WORD_SPLIT = re.compile(_SEPARATORS)
_UNSPACED = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f]")
_FORMAT = re.compile(f"[{FORMAT_CHARS}]")


def _normal(text: str) -> str:
    """``text`` as matching reads it: caseless (``ß`` is ``ss``), each
    character in its NFKC form (full-width letters as ASCII ones, a
    decomposed ``é`` as one letter), format characters (zero-width spaces...)
    removed."""
    if text.isascii():
        return text.lower()
    text = unicodedata.normalize("NFKC", _FORMAT.sub("", text))
    return unicodedata.normalize("NFKC", text.casefold())


def _phrase(text: str) -> str:
    """A name or trigger as words: ``db-migrations`` -> ``db migrations``."""
    return " ".join(w for w in _WORD_SPLIT.split(_normal(text)) if w)


@dataclass(frozen=True)
class Skill:
    """A skill: ``name`` (letters, digits, ``_ . -``; up to 64), a one-line
    ``description`` for the index, the ``body`` loaded on demand, and
    ``triggers``: words or phrases that, found in a turn's task, load it.
    ``match_name`` (default true): the name is a trigger too. Turn it off for
    a name that is a common word (``test``, ``go``), which would load on any
    task that uses the word; asking by name (``build(skills=[...])``) always
    works. Phrases match whole words, caseless, with any punctuation between
    them, the task and the phrase NFKC-normalised (full-width letters match
    ASCII ones, a decomposed ``é`` is one letter) and format characters
    ignored; a phrase in a script written without spaces (Chinese, Japanese,
    Korean) matches as a substring. Matching is by words, not meaning: "do
    not release" still names ``release``."""

    name: str
    description: str
    body: str
    triggers: tuple[str, ...] = ()
    match_name: bool = True

    def __post_init__(self) -> None:
        for field in ("name", "description", "body"):
            if not isinstance(getattr(self, field), str):
                raise InvalidTypeError(
                    f"Skill.{field} must be a str, got {type(getattr(self, field)).__name__}"
                )
        if not _NAME.fullmatch(self.name):
            raise InvalidInputError(
                f"skill name {self.name!r}: use 1-64 letters, digits, '_', '.' or '-',"
                " starting with a letter or digit"
            )
        if isinstance(self.triggers, str):
            triggers: tuple[str, ...] = (self.triggers,)
        elif isinstance(self.triggers, Iterable):
            triggers = tuple(self.triggers)
        else:
            raise InvalidTypeError(
                f"skill {self.name!r}: triggers must be a str or a list of str,"
                f" got {type(self.triggers).__name__}"
            )
        for trigger in triggers:
            if not isinstance(trigger, str):
                raise InvalidTypeError(
                    f"skill {self.name!r}: a trigger must be a str, got {type(trigger).__name__}"
                )
            if not _phrase(trigger):
                raise InvalidInputError(
                    f"skill {self.name!r}: a trigger must be a non-blank str, got {trigger!r}"
                )
        if not isinstance(self.match_name, bool):
            raise InvalidTypeError(f"skill {self.name!r}: match_name must be a bool")
        object.__setattr__(self, "triggers", triggers)
        object.__setattr__(self, "description", one_line(self.description).strip())


class SkillRegistry:
    """An immutable set of skills, ordered by name (so the index renders the
    same bytes whatever order the skills were given in).

    ``index()`` is the resident part; ``get(name)`` and ``match(task)`` the
    on-demand part. Matching is by whole words, caseless, punctuation read as
    spaces: the skill ``db-migrations`` matches the task "write the DB
    migrations", and ``sql`` does not match "nosql"."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        if isinstance(skills, (str, bytes)) or not isinstance(skills, Iterable):
            raise InvalidTypeError(f"skills must be a list of Skill objects, got {type(skills).__name__}")
        by_name: dict[str, Skill] = {}
        for skill in skills:
            if not isinstance(skill, Skill):
                raise InvalidTypeError(f"expected Skill objects, got {type(skill).__name__}")
            if skill.name in by_name:
                raise InvalidInputError(f"two skills are named {skill.name!r}")
            by_name[skill.name] = skill
        self._skills = dict(sorted(by_name.items()))
        # Phrases as word tuples (matched on whole words) or, for scripts written
        # without spaces (CJK), as substrings.
        self._words: dict[tuple[str, ...], list[str]] = {}
        self._substrings: dict[str, list[str]] = {}
        for skill in self._skills.values():
            names = (_phrase(skill.name),) if skill.match_name else ()
            for phrase in (*names, *(_phrase(t) for t in skill.triggers)):
                if _UNSPACED.search(phrase):
                    self._substrings.setdefault(phrase.replace(" ", ""), []).append(skill.name)
                else:
                    self._words.setdefault(tuple(phrase.split(" ")), []).append(skill.name)
        # One-word phrases are found by a set intersection; longer ones are
        # tried only where their first word is.
        self._singles = {words[0]: owners for words, owners in self._words.items() if len(words) == 1}
        self._phrases: dict[str, list[tuple[tuple[str, ...], list[str]]]] = {}
        for words, owners in self._words.items():
            if len(words) > 1:
                self._phrases.setdefault(words[0], []).append((words, owners))
        self._last: tuple[str, list[Skill]] = ("", [])

    def __len__(self) -> int:
        return len(self._skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills.values())

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __repr__(self) -> str:
        return f"SkillRegistry({list(self._skills)!r})"

    def names(self) -> list[str]:
        """The skills' names, sorted."""
        return list(self._skills)

    def get(self, name: str) -> Skill:
        """The skill named ``name``; :class:`~context_core.UnknownSkillError`
        (a ``KeyError``) if there is none."""
        skill = self._skills.get(name)
        if skill is None:
            raise UnknownSkillError(f"no skill named {name!r}; known: {', '.join(self._skills) or '(none)'}")
        return skill

    def match(self, task: str) -> list[Skill]:
        """The skills ``task`` names (by name or trigger), by name."""
        if not task or not (self._words or self._substrings):
            return []
        if task == self._last[0]:
            return list(self._last[1])
        found: set[str] = set()
        normal = _normal(task)
        if self._words:
            words = _WORD_SPLIT.split(normal)
            for word in self._singles.keys() & words:
                found.update(self._singles[word])
            if self._phrases and not self._phrases.keys().isdisjoint(words):
                for i, word in enumerate(words):
                    for phrase, owners in self._phrases.get(word, ()):
                        if tuple(words[i : i + len(phrase)]) == phrase:
                            found.update(owners)
        if self._substrings:
            compact = _WORD_SPLIT.sub("", normal)
            for text, owners in self._substrings.items():
                if text in compact:
                    found.update(owners)
        result = [self._skills[name] for name in sorted(found)]
        self._last = (task, result)
        return list(result)

    def select(self, names: Sequence[str] = (), task: str | None = None) -> list[Skill]:
        """The skills to load this turn: those asked for by name (an unknown
        name raises), then those the task matches, each once, by name."""
        if isinstance(names, str):
            names = (names,)
        elif isinstance(names, bytes) or not isinstance(names, Iterable):
            raise InvalidTypeError(f"skills must be a list of skill names, got {type(names).__name__}")
        chosen = {}
        for name in names:
            if not isinstance(name, str):
                raise InvalidTypeError(f"a skill name must be a str, got {type(name).__name__}")
            chosen[name] = self.get(name)
        for skill in self.match(task or ""):
            chosen.setdefault(skill.name, skill)
        return [chosen[name] for name in sorted(chosen)]

    def index(self) -> str:
        """The resident index: one ``- name: description`` line a skill."""
        return "\n".join(f"- {skill.name}: {skill.description}" for skill in self._skills.values())
