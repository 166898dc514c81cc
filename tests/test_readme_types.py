"""The README's examples type-check against the package, under ``mypy
--strict``: a renamed class, a wrong keyword or a missing import in an
example is an error here, as it would be in a user's editor.

Each ``python`` block that imports from ``context_core`` is checked, inside
an ``async def`` (so its ``await`` lines stand). Two checks are off, and
only these: the names an example leaves to the reader (``history``,
``client``...) are not defined, and its own small helpers are unannotated.
A ``...`` that stands for further arguments is dropped."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def examples() -> list[str]:
    blocks = BLOCK.findall(README.read_text(encoding="utf-8"))
    return [b for b in blocks if re.search(r"^\s*from context_core[.\w]* import ", b, re.M)]


def as_module(block: str) -> str:
    body = re.sub(r",\s*\.\.\.(?=\s*\))", "", block)  # f(a=1, ...) -> f(a=1)
    imports = [line for line in body.splitlines() if re.match(r"(from \S+ )?import ", line)]
    rest = [line for line in body.splitlines() if line not in imports]
    body = textwrap.indent("\n".join([*rest, "..."]), "    ")
    return "\n".join(imports) + "\n\n\nasync def example() -> None:\n" + body


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--disable-error-code=name-defined",
            "--disable-error-code=no-untyped-def",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


MISTAKES = {
    "a_name_that_is_gone": "from context_core import ContextBuilder",
    "a_wrong_keyword": "from context_core import WeightedWindow\nWeightedWindow().select([], 10, when=1.0)",
    "a_wrong_type": "from context_core import Tokenizer\nTokenizer().count(3)",
}


def test_the_readme_examples_type_check(tmp_path):
    """One mypy run (it is the slow part): every example passes, and each
    planted mistake is reported in its own file, so the check can fail."""
    blocks = examples()
    assert len(blocks) >= 8
    for i, block in enumerate(blocks):
        (tmp_path / f"example_{i:02d}.py").write_text(as_module(block), encoding="utf-8")
    for name, mistake in MISTAKES.items():
        (tmp_path / f"mistake_{name}.py").write_text(as_module(mistake), encoding="utf-8")
    result = mypy(tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    in_examples = [line for line in errors if "example_" in line]
    assert not in_examples, "\n".join(in_examples)
    for name in MISTAKES:
        assert any(f"mistake_{name}.py" in line for line in errors), (name, result.stdout)
