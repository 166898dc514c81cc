"""Embedders: anything with ``embed(texts) -> float32 array (n, dim)``.

:class:`HashingEmbedder` is the offline default (in Rust: no model, no
network, the same vector on every host). :class:`WordLlamaEmbedder` uses the
``wordllama`` package's bundled static model when it is installed (the
``embed`` extra); :func:`default_embedder` prefers it. :class:`CallableEmbedder`
wraps any function and :class:`OpenAIEmbedder` the user's own OpenAI (or
compatible) SDK client. :func:`checked` is what the store applies to every
answer, so an embedder that returns garbage is refused before anything is
written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from context_core._core import _hash_embed
from context_core.errors import EmbeddingError, InvalidInputError, InvalidTypeError

__all__ = [
    "CallableEmbedder",
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "WordLlamaEmbedder",
    "aembed",
    "checked",
    "default_embedder",
]

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into one float32 row each (``(len(texts), dim)``). An
    embedder may also have ``async aembed(texts)``; :func:`aembed` calls it,
    or ``embed`` in a worker thread."""

    def embed(self, texts: Sequence[str]) -> Vectors: ...


async def aembed(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """``embedder``'s async ``aembed`` if it has one, else ``embed`` in a
    worker thread (the event loop never waits on a model)."""
    native = getattr(embedder, "aembed", None)
    if native is not None:
        return checked(await native(list(texts)), len(texts))
    return checked(await asyncio.to_thread(embedder.embed, list(texts)), len(texts))


def checked(vectors: Any, count: int, dim: int | None = None) -> Vectors:
    """``vectors`` as a C-contiguous float32 ``(count, dim)`` array of finite
    values, or :class:`EmbeddingError` saying what is wrong."""
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise EmbeddingError(
            f"the embedder returned something that is not an array of numbers: {error}"
        ) from None
    if array.ndim != 2 or array.shape[0] != count or array.shape[1] == 0:
        raise EmbeddingError(
            f"the embedder returned shape {array.shape}, expected ({count}, dim)",
            expected=dim,
            got=tuple(array.shape),
        )
    if dim is not None and array.shape[1] != dim:
        raise EmbeddingError(
            f"the embedder returned vectors of {array.shape[1]} values; this store holds {dim}",
            expected=dim,
            got=tuple(array.shape),
        )
    if not np.isfinite(array).all():
        raise EmbeddingError("the embedder returned NaN or infinity", expected=dim, got=tuple(array.shape))
    return np.ascontiguousarray(array)


def _texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidTypeError(f"texts must be a sequence of str, not {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidTypeError(f"texts[{i}] must be str, not {type(text).__name__}")
    return list(texts)


class HashingEmbedder:
    """Offline embeddings by feature hashing (in Rust): ASCII-lowered words
    with their character trigrams, Chinese characters alone and in pairs,
    each hashed to a signed slot of ``dim``, then L2-normalised. Texts that
    share words or spellings are close; it knows no synonyms."""

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidInputError(f"dim must be a positive int, not {dim!r}")
        self.dim = dim

    @property
    def name(self) -> str:
        """What a store records as its vectors' maker."""
        return f"hashing-{self.dim}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        items = _texts(texts)
        raw = _hash_embed(items, self.dim)
        return np.frombuffer(raw, dtype=np.float32).reshape(len(items), self.dim)


class CallableEmbedder:
    """Any function ``texts -> vectors`` as an :class:`Embedder`.

    ``name``: what a store records as its vectors' maker, and refuses
    another embedder for; by default ``callable:`` and the function's
    qualified name (not its module, so a script's ``__main__.embed`` and
    a server's ``embmod.embed`` are one function), so a store does not mix
    the vectors of two functions (their cosines mean nothing across two).
    Name the model behind it where one function may call several, or the
    function was renamed, and for lambdas (all named ``<lambda>``)."""

    def __init__(self, function: Callable[[list[str]], Any], *, name: str | None = None) -> None:
        if not callable(function):
            raise InvalidTypeError(f"function must be callable, not {type(function).__name__}")
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(f"name must be a str, not {type(name).__name__}")
        if name is not None and not name.strip():
            raise InvalidInputError("name must not be blank")
        self.function = function
        self._name = name if name is not None else _function_name(function)

    @property
    def name(self) -> str:
        """What a store records as this embedder's vectors' maker."""
        return self._name

    def embed(self, texts: Sequence[str]) -> Vectors:
        items = _texts(texts)
        try:
            answer = self.function(items)
        except Exception as error:
            raise EmbeddingError(f"the embedding function raised {type(error).__name__}: {error}") from error
        return checked(answer, len(items))


class OpenAIEmbedder:
    """Embeddings through the user's own ``openai.OpenAI`` client (or any
    OpenAI-compatible one): ``client.embeddings.create(model=..., input=...)``.

    ``embed`` needs a sync client and ``aembed`` prefers an async one: give
    one, or both (the async one as ``async_client=``). A store's async
    methods work on an ``AsyncOpenAI`` client alone; a
    :class:`~context_core.Session` also writes memories from a thread of
    its own, through ``embed``, so it needs the sync one too."""

    def __init__(
        self,
        client: Any,
        model: str = "text-embedding-3-small",
        *,
        dimensions: int | None = None,
        async_client: Any = None,
    ) -> None:
        if async_client is not None and not _is_async(async_client):
            raise InvalidTypeError(
                "async_client must be an async client (embeddings.create a coroutine function),"
                f" got {type(async_client).__name__}"
            )
        self.client = client
        self.async_client = async_client
        self.model = model
        self.dimensions = dimensions

    @property
    def name(self) -> str:
        """What a store records as its vectors' maker."""
        return f"openai:{self.model}" + ("" if self.dimensions is None else f":{self.dimensions}")

    def _arguments(self, items: list[str]) -> dict[str, Any]:
        arguments: dict[str, Any] = {"model": self.model, "input": items}
        if self.dimensions is not None:
            arguments["dimensions"] = self.dimensions
        return arguments

    @staticmethod
    def _rows(response: Any, count: int) -> Vectors:
        data = sorted(response.data, key=lambda item: item.index)
        return checked([item.embedding for item in data], count)

    def embed(self, texts: Sequence[str]) -> Vectors:
        items = _texts(texts)
        if _is_async(self.client):
            # Called, it would only make a coroutine (never awaited).
            raise EmbeddingError(
                "embed() needs a sync client, and this OpenAIEmbedder has only an async one:"
                " await aembed(), or give both: OpenAIEmbedder(OpenAI(), async_client=AsyncOpenAI())"
            )
        try:
            response = self.client.embeddings.create(**self._arguments(items))
        except Exception as error:
            raise EmbeddingError(f"the embeddings request failed: {type(error).__name__}: {error}") from error
        return self._rows(response, len(items))

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        items = _texts(texts)
        client = self.async_client if self.async_client is not None else self.client
        if not _is_async(client):  # a sync client alone: off the event loop
            return await asyncio.to_thread(self.embed, items)
        try:
            response = await client.embeddings.create(**self._arguments(items))
        except Exception as error:
            raise EmbeddingError(f"the embeddings request failed: {type(error).__name__}: {error}") from error
        return self._rows(response, len(items))


def _is_async(client: Any) -> bool:
    """Whether ``client.embeddings.create`` is a coroutine function (an
    ``AsyncOpenAI`` client's is)."""
    create = getattr(getattr(client, "embeddings", None), "create", None)
    return create is not None and inspect.iscoroutinefunction(create)


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """The root logger's handlers and level as they were before the block:
    a library's import must not turn on logging for the host program."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


class WordLlamaEmbedder:
    """The ``wordllama`` package's bundled static embedding model (no
    network): ``pip install 'context-core[embed]'``."""

    def __init__(self, dim: int = 256) -> None:
        with _root_logging_kept():  # its import calls logging.basicConfig(level=INFO)
            import wordllama  # type: ignore[import-untyped, import-not-found, unused-ignore]  # optional extra

        self.dim = dim
        self.name = f"wordllama-{dim}"  # what a store records as its vectors' maker
        # The wheel bundles its weights and tokenizer in the layout of its own
        # cache (weights/, tokenizers/), while its lookup beside the package
        # expects tokenizer/: pointed at the package as its cache, it finds
        # both. Downloads stay off, so a missing file is an error, not a
        # network call.
        try:
            self._model = wordllama.WordLlama.load(
                dim=dim, cache_dir=Path(wordllama.__file__).parent, disable_download=True
            )
        except (OSError, ValueError) as error:
            raise EmbeddingError(
                f"wordllama is installed, but its bundled model ({dim} dimensions) did not load: {error}"
            ) from error

    def embed(self, texts: Sequence[str]) -> Vectors:
        items = _texts(texts)
        return checked(self._model.embed(items, norm=True), len(items), self.dim)


def _function_name(function: Any) -> str:
    """``callable:`` and the qualified name of ``function`` (of its class,
    for an object with ``__call__``; of the function a ``functools.partial``
    wraps)."""
    while isinstance(function, functools.partial):
        function = function.func
    named = function if hasattr(function, "__qualname__") else type(function)
    return f"callable:{named.__qualname__}"


#: What a store recorded for any :class:`CallableEmbedder` before they were named.
UNNAMED_CALLABLE = "CallableEmbedder"


def embedder_name(embedder: Any) -> str:
    """What made a store's vectors, as the store records it: the embedder's
    ``name`` if it has one (the built-in ones do), else its class's name."""
    name = getattr(embedder, "name", None)
    return name if isinstance(name, str) and name else type(embedder).__name__


def embedder_named(name: str) -> Embedder | None:
    """The built-in embedder a recorded ``name`` stands for (``None`` for
    one the store cannot make itself). wordllama needs its extra."""
    kind, _, dim = name.rpartition("-")
    if kind in ("hashing", "wordllama") and dim.isdigit():
        return HashingEmbedder(int(dim)) if kind == "hashing" else WordLlamaEmbedder(int(dim))
    return None


def default_embedder() -> Embedder:
    """:class:`WordLlamaEmbedder` when ``wordllama`` is installed, else
    :class:`HashingEmbedder`."""
    try:
        return WordLlamaEmbedder()
    except ImportError:
        return HashingEmbedder()
