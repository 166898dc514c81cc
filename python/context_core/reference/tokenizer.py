"""The reference tokenizer: the public API of ``context_core.Tokenizer`` in plain
Python over tiktoken, with the chat accounting written out as README.md states it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from context_core.errors import (
    InvalidInputError,
    InvalidTypeError,
    UnknownEncodingError,
    UnknownModelError,
)
from context_core.reference.document import PDF_TYPE, ascii_lower, pdf_tokens
from context_core.reference.encodings import get_encoding, tiktoken_module

# README.md, "Chat accounting".
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 3
IMAGE_TOKENS_LOW = 85
IMAGE_TOKENS = 765
ANTHROPIC_IMAGE_TOKENS = 1600

# Containers nested deeper than this are refused (README, "Errors").
MAX_DEPTH = 256

# Model families context_core resolves beyond tiktoken's table.
_EXTRA_PREFIXES = {"o4-": "o200k_base", "text-embedding-3-": "cl100k_base", "gpt-oss-": "o200k_base"}
_KNOWN = ("o200k_base", "cl100k_base", "p50k_base", "r50k_base", "gpt2")


def encoding_name_for_model(model: str) -> str:
    """tiktoken's answer, plus the families tiktoken lacks."""
    if not isinstance(model, str):
        raise InvalidTypeError(f"model must be str, not {type(model).__name__}")
    try:
        name = tiktoken_module("tiktoken.model").encoding_name_for_model(model)
    except KeyError:
        for prefix, name in _EXTRA_PREFIXES.items():
            if model.startswith(prefix):
                return name
        raise UnknownModelError(f"unknown model {model!r}") from None
    return "o200k_base" if name == "o200k_harmony" else name


def _json_text(value: Any) -> str:
    _check_depth(value)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except TypeError as error:
        raise InvalidTypeError(str(error)) from None
    except (ValueError, RecursionError) as error:  # a reference cycle
        raise InvalidInputError(str(error)) from None


class Tokenizer:
    """Pure-Python twin of :class:`context_core.Tokenizer` (no count cache)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        if not isinstance(encoding, str):
            raise InvalidTypeError(f"encoding must be str, not {type(encoding).__name__}")
        if encoding not in _KNOWN:
            raise UnknownEncodingError(f"unknown encoding {encoding!r}")
        self._encoding = get_encoding(encoding)
        self.name = self._encoding.name

    @classmethod
    def for_model(cls, model: str, *, fallback: str | None = None) -> Tokenizer:
        try:
            return cls(encoding_name_for_model(model))
        except UnknownModelError:
            if fallback is None:
                raise
            return cls(fallback)

    def __repr__(self) -> str:
        return f"reference.Tokenizer({self.name!r})"

    # -- text -------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        _check_str(text, "text")
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors="replace")

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        ids = [_check_int(t, "token") for t in _items(tokens, "tokens")]
        try:
            return self._encoding.decode_bytes(ids)
        except KeyError as error:
            raise InvalidInputError(f"token id {error} is not in this encoding's vocabulary") from None

    def count(self, text: str, limit: int | None = None) -> int:
        n = len(self.encode(text))
        if limit is None:
            return n
        if _check_int(limit, "limit") < 0:
            raise InvalidInputError("limit must be a non-negative int")
        return min(n, limit + 1)

    def count_many(self, texts: Iterable[str]) -> np.ndarray:
        return np.array([self.count(text) for text in _items(texts, "texts")], dtype=np.int64)

    def truncate(self, text: str, max_tokens: int, marker: str | None = None) -> str:
        """README.md, "truncate": keep ``k`` tokens, shrinking ``k`` by the excess
        until prefix + marker fits."""
        if self.count(text) <= max_tokens:
            return text  # the caller's own object, even with lone surrogates in it
        # A cut text is built from the repaired string, as tiktoken repairs it.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        ids = self.encode(text)

        def marker_for(kept: int) -> str:
            return "" if marker is None else marker.replace("{dropped}", str(len(ids) - kept))

        encoded = text.encode("utf-8")
        kept = max(0, max_tokens - self.count(marker_for(max_tokens)))
        while True:
            byte_len = sum(len(self._encoding.decode_single_token_bytes(t)) for t in ids[:kept])
            # errors="ignore" drops a character cut in half at the end, and only that.
            prefix = encoded[:byte_len].decode("utf-8", errors="ignore")
            candidate = prefix + marker_for(kept)
            tokens = self.count(candidate)
            if tokens <= max_tokens:
                return candidate
            if kept == 0:
                raise InvalidInputError(f"the truncation marker alone takes {tokens} tokens")
            kept = max(0, kept - max(1, tokens - max_tokens))

    # -- chat accounting ----------------------------------------------------

    def count_messages(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> int:
        total = REPLY_PRIMING + sum(self.count_message(m) for m in _items(messages, "messages"))
        if tools is not None:
            total += self.count_tools(tools)
        return total

    def count_message(self, message: dict[str, Any]) -> int:
        if not isinstance(message, dict):
            raise InvalidTypeError(f"message must be a dict, not {type(message).__name__}")
        if "role" not in message:
            raise InvalidInputError("role: required field is missing")
        total = TOKENS_PER_MESSAGE + self._text(message["role"])
        if message.get("name") is not None:
            total += self._text(message["name"]) + TOKENS_PER_NAME
        if message.get("content") is not None:
            total += self._content(message["content"])
        if message.get("refusal") is not None:
            total += self._text(message["refusal"])
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, (list, tuple)):
                raise InvalidTypeError("tool_calls must be a list")
            for call in calls:
                if not isinstance(call, dict):
                    raise InvalidTypeError("a tool call must be a dict")
                if "function" in call:
                    total += self._function(call["function"])
                elif "custom" in call:  # a custom tool's call: its input counted as arguments are
                    total += self._function(call["custom"], "input")
                else:
                    raise InvalidInputError("tool call without function")
        if message.get("function_call") is not None:
            total += self._function(message["function_call"])
        return total

    def _text(self, value: Any) -> int:
        if not isinstance(value, str):
            raise InvalidTypeError(f"expected str, got {type(value).__name__}")
        return self.count(value)

    def _content(self, content: Any, depth: int = 0) -> int:
        if isinstance(content, str):
            return self.count(content)
        if isinstance(content, (list, tuple)):
            return sum(self._block(block, depth) for block in content)
        raise InvalidTypeError(f"content must be str or a list, not {type(content).__name__}")

    def _block(self, block: Any, depth: int) -> int:
        if isinstance(block, str):
            return self.count(block)
        if not isinstance(block, dict):
            raise InvalidTypeError(f"a content block must be a dict, not {type(block).__name__}")
        if "type" not in block:
            raise InvalidInputError("content block without type")
        kind = block["type"]
        if not isinstance(kind, str):
            raise InvalidTypeError("block type must be str")

        def field(name: str) -> int:
            if name not in block:
                raise InvalidInputError(f"{kind} block without {name}")
            return self._text(block[name])

        if kind in ("text", "input_text", "output_text"):
            return field("text")
        if kind == "refusal":
            return field("refusal")
        if kind == "thinking":
            return field("thinking")
        if kind == "redacted_thinking":
            return field("data")
        if kind in ("image_url", "input_image"):
            url = block.get("image_url")
            detail = url.get("detail") if isinstance(url, dict) and "detail" in url else block.get("detail")
            return IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS
        if kind == "image":
            return ANTHROPIC_IMAGE_TOKENS
        if kind in ("tool_use", "server_tool_use"):
            name = field("name")
            arguments = self.count(_json_text(block["input"])) if block.get("input") is not None else 0
            return TOKENS_PER_TOOL_CALL + name + arguments
        if kind == "tool_result" or kind.endswith("_tool_result"):
            if depth >= MAX_DEPTH:
                raise InvalidInputError("tool results nested too deep")
            content = block.get("content")
            if kind != "tool_result" and isinstance(content, dict):
                # A server tool's result may hold one object (an error, a code run's output).
                return TOKENS_PER_TOOL_CALL + self.count(_json_text(content))
            return TOKENS_PER_TOOL_CALL + (0 if content is None else self._content(content, depth + 1))
        if kind == "document":
            found = self._document(block, depth)
        elif kind == "file":
            file = block.get("file")
            found = None if file is None else self._file(file)
        elif kind == "input_file":
            found = self._file(block)
        else:
            found = None
        return self.count(_json_text(block)) if found is None else found

    def _document(self, block: dict[str, Any], depth: int) -> int | None:
        """An Anthropic document: a base64 PDF by its pages, a text source
        by its text, a content source by its blocks, with ``title`` and
        ``context``; ``None`` (its JSON text) otherwise."""
        source = block.get("source")
        if not isinstance(source, dict):
            return None
        kind, data = source.get("type"), source.get("data")
        media = source.get("media_type")
        pdf_type = media is None or (isinstance(media, str) and ascii_lower(media) == PDF_TYPE)
        if kind == "base64" and pdf_type:
            body = pdf_tokens(data) if isinstance(data, str) else None
        elif kind == "text":
            body = self.count(data) if isinstance(data, str) else None
        elif kind == "content":
            if depth >= MAX_DEPTH:
                raise InvalidInputError("content nested too deep")
            content = source.get("content")
            body = 0 if content is None else self._content(content, depth + 1)
        else:
            body = None
        return None if body is None else body + self._texts_of(block, ("title", "context"))

    def _file(self, fields: Any) -> int | None:
        """An OpenAI file part's fields: a PDF in ``file_data`` by its pages,
        with its ``filename``; ``None`` (the part's JSON text) otherwise."""
        if not isinstance(fields, dict):
            return None
        data = fields.get("file_data")
        pages = pdf_tokens(data) if isinstance(data, str) else None
        return None if pages is None else pages + self._texts_of(fields, ("filename",))

    def _texts_of(self, fields: dict[str, Any], names: tuple[str, ...]) -> int:
        total = 0
        for name in names:
            value = fields.get(name)
            if value is not None:
                total += self.count(value if isinstance(value, str) else _json_text(value))
        return total

    def _function(self, function: Any, field: str = "arguments") -> int:
        if not isinstance(function, dict):
            raise InvalidTypeError("a function call must be a dict")
        if "name" not in function:
            raise InvalidInputError("function call without name")
        arguments = function.get(field)
        if arguments is None:
            argument_tokens = 0
        elif isinstance(arguments, str):
            argument_tokens = self.count(arguments)
        else:
            argument_tokens = self.count(_json_text(arguments))
        return TOKENS_PER_TOOL_CALL + self._text(function["name"]) + argument_tokens

    # -- tool schemas (the cookbook's num_tokens_for_tools) ------------------

    def count_tools(self, tools: Sequence[dict[str, Any]]) -> int:
        tools = _items(tools, "tools")
        if not tools:
            return 0
        func_init = 7 if self.name == "o200k_base" else 10
        total = 12  # func_end
        for tool in tools:
            if not isinstance(tool, dict):
                raise InvalidTypeError("a tool must be a dict")
            custom = "function" not in tool and tool.get("type") == "custom" and "custom" in tool
            function = tool["custom"] if custom else tool.get("function", tool)
            if not isinstance(function, dict) or "name" not in function:
                raise InvalidInputError("tool without name")
            description = _optional_text(function.get("description"))
            total += func_init + self._text(f"{self._name(function['name'])}:{_strip_dot(description)}")
            schema = function.get("parameters", function.get("input_schema"))
            if schema is not None:
                total += self._properties(schema)
            if custom and function.get("format") is not None:  # its grammar or text format
                total += self.count(_json_text(function["format"]))
        return max(total, 0)

    def _name(self, name: Any) -> str:
        if not isinstance(name, str):
            raise InvalidTypeError("tool name must be str")
        return name

    def _properties(self, schema: Any, depth: int = 0) -> int:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict) or not properties:
            return 0
        if depth >= MAX_DEPTH:
            raise InvalidInputError("schema nested too deep")
        total = 3  # prop_init
        for key, prop in properties.items():
            total += 3  # prop_key
            enum = prop.get("enum") if isinstance(prop, dict) else None
            if isinstance(enum, (list, tuple)):
                total += -3  # enum_init
                for item in enum:
                    total += 3 + self.count(item if isinstance(item, str) else _json_text(item))
            key_text = _key_text(key)
            kind = _type_label(prop.get("type") if isinstance(prop, dict) else None)
            description = _optional_text(prop.get("description") if isinstance(prop, dict) else None)
            total += self.count(f"{key_text}:{kind}:{_strip_dot(description)}")
            if isinstance(prop, dict):
                total += self._properties(prop, depth + 1)
                if "items" in prop:
                    total += self._properties(prop["items"], depth + 1)
        return total


def _items(values: Any, what: str) -> list[Any]:
    """A list of the values of any iterable but a str, bytes or dict."""
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
        raise InvalidTypeError(f"{what} must be a list, tuple or other iterable, not {type(values).__name__}")
    return list(values)


def _check_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidTypeError(f"{what} must be int, not {type(value).__name__}")
    index: int = value.__index__()
    return index


def _check_depth(value: Any) -> None:
    """Refuse values nested deeper than MAX_DEPTH (which also stops cycles)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidInputError(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)


def _key_text(key: Any) -> str:
    """A dict key as json.dumps writes it."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return _json_text(key)
    raise InvalidTypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _check_str(value: Any, what: str) -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be str, not {type(value).__name__}")


def _optional_text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidTypeError("description must be str")
    return value


def _type_label(kind: Any) -> str:
    if isinstance(kind, str):
        return kind
    if isinstance(kind, (list, tuple)):
        return " | ".join(k if isinstance(k, str) else _json_text(k) for k in kind)
    return "any"


def _strip_dot(text: str) -> str:
    return text[:-1] if text.endswith(".") else text
