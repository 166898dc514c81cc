"""The public face: exports, stubs that cover the extension, typing marker."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import context_core
from context_core import (
    InvalidInputError,
    LogNotFoundError,
    MessageLog,
    Tokenizer,
    UnknownModelError,
    _core,
    errors,
)

PACKAGE = Path(context_core.__file__).parent


def stub_members(class_name: str) -> set[str]:
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    raise AssertionError(f"{class_name} missing from _core.pyi")


def test_every_public_name_is_exported():
    for name in context_core.__all__:
        assert hasattr(context_core, name), name
    assert {"Tokenizer", "ContextCoreError"} <= set(context_core.__all__)


def test_stubs_cover_every_method_of_the_extension():
    classes = (
        _core.Tokenizer,
        _core.CacheInfo,
        _core.Sanitizer,
        _core.SanitizeResult,
        _core.Change,
        _core.Tagger,
    )
    for cls in classes:
        dunders = {"__eq__", "__hash__", "__reduce__"}
        public = {
            name
            for name, value in vars(cls).items()
            if (not name.startswith("_") or name in dunders) and value is not None  # __hash__ = None
        }
        missing = public - stub_members(cls.__name__)
        assert not missing, f"{cls.__name__}: not in _core.pyi: {sorted(missing)}"


def test_stub_module_names_exist():
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    names = {t.target.id for t in tree.body if isinstance(t, ast.AnnAssign)}
    names |= {f.name for f in tree.body if isinstance(f, (ast.FunctionDef, ast.ClassDef))}
    for name in names - {"EncodingName"}:
        assert hasattr(_core, name), name


def test_typing_marker_ships():
    assert (PACKAGE / "py.typed").exists()
    assert (PACKAGE / "_core.pyi").exists()


def test_exceptions_subclass_the_matching_builtins():
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.InvalidTypeError, TypeError)
    assert issubclass(errors.UnknownModelError, KeyError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ContextCoreError)
    assert str(errors.UnknownModelError("plain message")) == "plain message"


def test_counting_imports_none_of_the_heavier_layers():
    """A process that imports the package and counts never loads the model
    clients, the log, memory files or prompt layers, nor what they import;
    naming one loads it."""
    import subprocess
    import sys

    code = (
        "import sys, context_core\n"
        "assert context_core.Tokenizer().count('x') == 1\n"
        "heavy = ['numpy', 'asyncio', 'filelock', 'statistics', 'context_core.llm', 'context_core.log',\n"
        "         'context_core.memory', 'context_core.prompt']\n"
        "from context_core.cli import main\n"
        "main(['count', context_core.__file__])  # the CLI's main job too\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "context_core.MessageLog, context_core.llm.retry, context_core.MemoryFiles\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.splitlines()[-2:]
    assert before == "[]"
    assert "'context_core.log'" in after
    assert "'context_core.llm'" in after
    assert "'context_core.memory'" in after
    assert "'numpy'" in after


def test_the_reference_imports_without_tiktoken():
    """The twin ships in the package: it imports where tiktoken (a test
    dependency) is missing, and says what to install when asked to count."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['tiktoken'] = None  # as if it were not installed\n"
        "import context_core.reference\n"
        "from context_core.reference import log, sanitize, select\n"
        "try:\n"
        "    context_core.reference.Tokenizer().count('x')\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'context-core[test]'" in out.stdout


TYPED_CALLER = """
from context_core import Tokenizer, shape_history
from context_core.select import Tagger
from context_core.types import AnthropicMessage, Message, OpenAIMessage

pinned: OpenAIMessage = {"role": "user", "content": "keep me", "pinned": True, "priority": 2}
pinned["timestamp"] = 1.5
tagged: AnthropicMessage = {"role": "user", "content": "must retry", "tags": ["constraint"], "id": "m1"}
follow: OpenAIMessage = {"role": "assistant", "content": "ok", "depends_on": ["m1"], "weight": 0.5}
history: list[Message] = [pinned, tagged, follow]
total: int = shape_history(history, 1000).breakdown.total + Tokenizer().count_message(pinned)
tags: list[str] = Tagger().tag(text="never drop the order_id")

import tempfile
from context_core import Session

with tempfile.TemporaryDirectory() as where:
    # A whole request's tokens as an int, as the README says (it is a Budget otherwise).
    with Session.open(where + "/s", model="gpt-4o", budget=8000, store=False, compact=False) as session:
        sent: int = session.prepare("hi").report.total
"""


def test_a_typed_caller_type_checks(tmp_path):
    """The metadata keys the README tells callers to write are in the
    message types, and the stubs name parameters as the runtime does:
    ``mypy --strict`` passes on such a caller, and the code runs."""
    import subprocess
    import sys

    caller = tmp_path / "caller.py"
    caller.write_text(TYPED_CALLER)
    # And a name that does not exist is still an error, lazy names or not.
    typo = tmp_path / "typo.py"
    typo.write_text("from context_core import MesageLog\nimport context_core\nx: int = context_core.Nope\n")
    mypy = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache")]
    checked = subprocess.run(
        [*mypy, str(caller), str(typo)],
        capture_output=True,
        text=True,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[0:2] for line in errors] == [[str(typo), "1"], [str(typo), "3"]], checked.stdout
    subprocess.run([sys.executable, str(caller)], check=True)


def test_message_log_shows_its_options_in_its_signature():
    """``MessageLog(path, ...)`` and ``MessageLog.open`` name the same
    keywords with the same defaults (the Rust base class reads them)."""
    import inspect

    made = inspect.signature(context_core.MessageLog).parameters
    opened = inspect.signature(context_core.MessageLog.open).parameters
    names = ["path", "create", "readonly", "encoding", "new_encoding", "durability", "lock_timeout"]
    assert list(made) == list(opened) == names
    assert [p.default for p in made.values()] == [p.default for p in opened.values()]


def test_the_binding_adds_the_python_keyword_to_core_messages(tmp_path):
    """The core's messages name no syntax; the binding says which keyword helps."""
    with pytest.raises(LogNotFoundError, match=r"no message log here \(pass create=True to make one\)$"):
        MessageLog.open(tmp_path / "absent")
    with pytest.raises(UnknownModelError, match=r'fallback="o200k_base"'):
        Tokenizer.for_model("no-such-model")
    with pytest.raises(InvalidInputError, match=r"more than the cap of 2 \(max_tokens\)$"):
        Tokenizer().truncate("x " * 50, 2, "[this marker alone is long]")
