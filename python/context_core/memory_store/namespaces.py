"""Namespaces: who a memory belongs to, as a tenant, a user of it and an
agent of that user.

A namespace is one key in the database. A plain string is a tenant on its
own (``"user-42"`` stays exactly that string, so stores written before
:class:`Namespace` existed read the same). ``Namespace("acme", "u42",
"support")`` is stored as its parts joined by the ASCII unit separator,
which no part may hold: then the memories of one user, whatever the agent,
are one range of the key's index, and deleting or counting them reads no
other user's rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from context_core.errors import InvalidInputError, InvalidTypeError
from context_core.memory_store.checks import check_str

__all__ = [
    "Namespace",
    "NamespaceLike",
    "namespace_key",
    "namespace_keys",
    "namespace_of",
    "scope",
    "space_token",
]

#: Joins a namespace's parts in its key; refused inside a part.
SEPARATOR = "\x1f"
# The character after the separator: the children of key ``k`` are the keys
# in ``[k + SEPARATOR, k + _AFTER)``.
_AFTER = chr(ord(SEPARATOR) + 1)


def _part(value: Any, what: str) -> str:
    check_str(value, what)
    if SEPARATOR in value:
        raise InvalidInputError(f"{what} must not hold the unit separator \\x1f")
    return str(value)


@dataclass(frozen=True)
class Namespace:
    """A tenant, optionally one of its users, optionally one agent of that
    user. Memories are written to and searched in exactly the namespace
    given; :meth:`MemoryStore.delete`, ``count`` and ``forget`` cover the
    namespace and every namespace under it, so ``Namespace("acme", "u42")``
    there means everything of user ``u42``, every agent's included."""

    tenant: str
    user: str | None = None
    agent: str | None = None

    def __post_init__(self) -> None:
        _part(self.tenant, "namespace.tenant")
        if self.user is not None:
            _part(self.user, "namespace.user")
        if self.agent is not None:
            if self.user is None:
                raise InvalidInputError("namespace.agent needs a user (an agent's memories are a user's)")
            _part(self.agent, "namespace.agent")

    @property
    def key(self) -> str:
        """The string the database stores for this namespace."""
        return SEPARATOR.join(p for p in (self.tenant, self.user, self.agent) if p is not None)

    def __str__(self) -> str:
        return "/".join(p for p in (self.tenant, self.user, self.agent) if p is not None)


#: What the store's ``namespace=`` arguments take.
NamespaceLike = str | Namespace


def namespace_key(value: Any, what: str = "namespace") -> str:
    """The database key of ``value`` (a string or a :class:`Namespace`), checked."""
    if isinstance(value, Namespace):
        return value.key
    return _part(value, what)


def namespace_keys(value: Any) -> tuple[str, ...]:
    """The keys of one namespace or of a sequence of them (a search over
    several), each once, in order."""
    if isinstance(value, str | Namespace):
        return (namespace_key(value),)
    if not isinstance(value, Sequence) or not value:
        raise InvalidTypeError(
            "namespace must be a str, a Namespace or a non-empty sequence of them,"
            f" not {type(value).__name__}"
        )
    keys = [namespace_key(item, f"namespace[{i}]") for i, item in enumerate(value)]
    return tuple(dict.fromkeys(keys))


def namespace_of(key: str) -> NamespaceLike:
    """What a stored key reads back as: the plain string for a tenant on its
    own, a :class:`Namespace` otherwise."""
    if SEPARATOR not in key:
        return key
    parts = key.split(SEPARATOR)
    return Namespace(*parts)


def scope(key: str) -> tuple[str, tuple[str, str, str]]:
    """A SQL condition on ``namespace`` that holds for ``key`` and every key
    under it, and its three arguments. Both halves use the key's index."""
    return "(namespace = ? OR (namespace >= ? AND namespace < ?))", (
        key,
        key + SEPARATOR,
        key + _AFTER,
    )


def space_token(key: str) -> str:
    """The tag the keyword index puts before each word of a memory in
    namespace ``key``: 21 letters and digits, an 80-bit digest, so two
    namespaces share one only by chance (a query still checks the key)."""
    return "n" + hashlib.blake2b(key.encode(), digest_size=10).hexdigest()
