"""``context-core memory show|append|consolidate DIR``."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from context_core import MemoryFiles
from context_core.cli import main


def run(*argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_append_show_consolidate(tmp_path):
    root = str(tmp_path / "mem")
    assert run("memory", "append", root, "- [decision: db] Use Postgres 16", "a fact") == (
        0,
        "appended 2 to MEMORY.md, 0 already there\n",
    )
    assert stat_mode(root) == 0o700
    code, out = run("memory", "append", "--max-lines", "3", root, stdin="one\n\n- [fact] two\na fact\n")
    assert (code, out) == (0, f"appended 2 to {MemoryFiles(root).fragments()[0]}, 1 already there\n")
    code, out = run("memory", "show", root)
    assert code == 0
    assert out.startswith("- [decision: db] Use Postgres 16\n- [fact] a fact\n- [more] auto-")
    code, out = run("memory", "show", "--all", root)
    assert out == "- [decision: db] Use Postgres 16\n- [fact] a fact\n- [fact] one\n- [fact] two\n"
    assert run("memory", "consolidate", root) == (
        0,
        "nothing done (not due: 1 fragments, fewer than min_fragments=12)\n",
    )
    assert run("memory", "consolidate", "--force", root) == (
        0,
        "consolidated: 4 facts -> 4, 1 fragments merged, 0 written\n",
    )
    assert (
        run("memory", "show", root)[1]
        == "- [decision: db] Use Postgres 16\n- [fact] a fact\n- [fact] one\n- [fact] two\n"
    )


def stat_mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777


def test_errors_exit_2_with_a_message(tmp_path, capsys):
    assert run("memory", "show", str(tmp_path / "missing"))[0] == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()  # show and consolidate never create a root
    assert run("memory", "append", str(tmp_path), "[broken")[0] == 2
    assert "malformed fact bracket" in capsys.readouterr().err
    assert run("memory", "append", str(tmp_path), "x" * 5000)[0] == 2
    assert "max_line_bytes" in capsys.readouterr().err
    os.symlink(tmp_path / "elsewhere", tmp_path / "MEMORY.md")
    assert run("memory", "append", str(tmp_path), "x")[0] == 2
    assert "symlink" in capsys.readouterr().err


def test_the_installed_command(tmp_path):
    root = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "context_core", "memory", "append", root],
        input="- [constraint] Never push to main\n",
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "appended 1 to MEMORY.md, 0 already there\n"
    shown = subprocess.run(
        [sys.executable, "-m", "context_core", "memory", "show", root],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == "- [constraint] Never push to main\n"


def test_facts_on_stdin_after_a_byte_order_mark_keep_their_keys(tmp_path, capsys):
    """Windows editors and PowerShell 5's redirection start the text with a
    byte order mark: the first fact keeps its kind and key (it became a
    keyless fact whose text was the whole line, so a newer value of its key
    never replaced it). Facts from stdin that are refused name stdin."""
    root = str(tmp_path / "mem")
    stdin = "\ufeff- [fact: port] The staging port is 5433\r\n- [constraint] Never push to main\r\n"
    assert run("memory", "append", root, stdin=stdin)[0] == 0
    assert [(f.kind, f.key, f.text) for f in MemoryFiles(root).facts()] == [
        ("fact", "port", "The staging port is 5433"),
        ("constraint", None, "Never push to main"),
    ]
    assert run("memory", "append", root, stdin="- [broken\n")[0] == 2
    assert capsys.readouterr().err.startswith("context-core: stdin: malformed fact bracket")
