"""The context-core command."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest

from context_core import Tokenizer
from context_core.cli import main

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
]


def run(args, stdin_text=""):
    out = io.StringIO()
    code = main(args, stdin=io.StringIO(stdin_text), stdout=out)
    return code, out.getvalue()


def test_counts_stdin_text():
    code, out = run(["count"], "hello world")
    assert code == 0
    assert out.split() == [str(Tokenizer().count("hello world")), "-"]


def test_counts_files_with_a_total(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.md"
    a.write_text("The quick brown fox.", encoding="utf-8")
    b.write_text("日本語のテキスト", encoding="utf-8")
    code, out = run(["count", "--encoding", "cl100k_base", str(a), str(b)])
    tok = Tokenizer("cl100k_base")
    na, nb = tok.count(a.read_text()), tok.count(b.read_text())
    assert code == 0
    assert out.splitlines()[-1].split() == [str(na + nb), "total"]


@pytest.mark.parametrize(
    "document",
    [
        json.dumps(CHAT),
        "\n".join(json.dumps(m) for m in CHAT) + "\n",
        json.dumps({"model": "gpt-4o", "messages": CHAT}),
    ],
    ids=["json-list", "jsonl", "request-body"],
)
def test_counts_a_chat_per_message(document):
    code, out = run(["count", "--json", "--model", "gpt-4o"], document)
    report = json.loads(out)
    tok = Tokenizer.for_model("gpt-4o")
    assert code == 0
    assert report["encoding"] == "o200k_base"
    (chat,) = report["inputs"]
    assert chat["kind"] == "chat"
    assert [m["tokens"] for m in chat["messages"]] == [tok.count_message(m) for m in CHAT]
    assert chat["tokens"] == report["total"] == tok.count_messages(CHAT)


def test_a_one_line_jsonl_file_is_a_chat_of_one_message(tmp_path):
    """One line of JSONL parses whole as its object: it was counted as text
    (and refused by ``build`` as no transcript)."""
    message = {"role": "user", "content": "hello there"}
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(message) + "\n")
    for argv in (["count", "--json", str(path)], ["count", "--json"]):
        code, out = run(argv, json.dumps(message))
        assert code == 0
        (chat,) = json.loads(out)["inputs"]
        assert chat["kind"] == "chat"
        assert chat["tokens"] == Tokenizer().count_messages([message])
    code, out = run(["build", "--json", str(path)])
    assert code == 0
    assert json.loads(out)["messages"][-1] == message


def test_chat_with_tools_and_anthropic_system():
    body = {
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [{"name": "search", "description": "Search.", "input_schema": {"properties": {}}}],
    }
    code, out = run(["count", "--json"], json.dumps(body))
    (chat,) = json.loads(out)["inputs"]
    tok = Tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, *body["messages"]]
    assert code == 0
    assert chat["tools"] == tok.count_tools(body["tools"])
    assert chat["tokens"] == tok.count_messages(messages, body["tools"])


def test_table_output_for_a_chat():
    code, out = run(["count"], json.dumps(CHAT))
    assert code == 0
    assert "assistant" in out
    assert out.splitlines()[-1].split() == ["total", str(Tokenizer().count_messages(CHAT))]


def test_text_format_forces_plain_counting():
    document = json.dumps(CHAT)
    code, out = run(["count", "--format", "text"], document)
    assert code == 0
    assert out.split()[0] == str(Tokenizer().count(document))


def test_bad_input_exits_2_with_a_message(tmp_path, capsys):
    assert run(["count", str(tmp_path / "missing.txt")])[0] == 2
    assert "missing.txt" in capsys.readouterr().err
    assert run(["count", "--format", "chat"], "just text")[0] == 2
    assert run(["count", "--model", "not-a-model"], "x")[0] == 2
    assert "unknown model" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "user", "content": 42}]), encoding="utf-8")
    assert run(["count", str(bad)])[0] == 2
    assert "messages[0].content" in capsys.readouterr().err
    # A bare string in a content list: both APIs refuse it, and so does build.
    bad.write_text(json.dumps([{"role": "user", "content": [{"type": "text", "text": "a"}, "b"]}]))
    assert run(["count", str(bad)])[0] == 2
    assert "messages[0].content[1]: expected a content block dict, got str" in capsys.readouterr().err
    assert run(["build", str(bad)])[0] == 2


def test_an_empty_json_file_is_an_error_not_text(tmp_path, capsys):
    empty, blank, text = tmp_path / "empty.json", tmp_path / "blank.jsonl", tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    blank.write_text("\n\n", encoding="utf-8")
    text.write_text("", encoding="utf-8")
    assert run(["count", str(empty)])[0] == 2
    assert "empty.json: empty, not JSON" in capsys.readouterr().err
    assert run(["count", str(blank)])[0] == 2
    assert "blank.jsonl: empty, not JSON" in capsys.readouterr().err
    code, out = run(["count", str(text)])  # an empty text file is 0 tokens of text
    assert (code, out.split()) == (0, ["0", str(text)])


def test_line_endings_are_counted_as_they_are(tmp_path):
    raw = "a\rb\rc\rd\r\r\r\re \r\n \r\n"
    path = tmp_path / "crlf.txt"
    path.write_bytes(raw.encode())
    code, out = run(["count", "--json", str(path)])
    assert code == 0
    assert json.loads(out)["total"] == Tokenizer().count(raw)
    piped = subprocess.run(
        [sys.executable, "-m", "context_core", "count", "--json"],
        input=raw.encode(),
        capture_output=True,
        check=True,
    )
    assert json.loads(piped.stdout)["total"] == Tokenizer().count(raw)


def test_deeply_nested_json_is_counted_as_text():
    document = "[" * 100_000 + "]" * 100_000
    code, out = run(["count", "--json"], document)
    assert code == 0
    assert json.loads(out)["inputs"][0]["kind"] == "text"


def test_module_and_console_script_run():
    result = subprocess.run(
        [sys.executable, "-m", "context_core", "count", "--json"],
        input="hello world",
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout)["total"] == Tokenizer().count("hello world")
    script = shutil.which("context-core")
    assert script is not None, "the context-core console script is installed"
    result = subprocess.run([script, "count"], input="hello", capture_output=True, text=True, check=True)
    assert result.stdout.split()[0] == "1"


def test_sanitize_subcommand():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "The request was cancelled..."},
    ]
    code, out = run(["sanitize", "--provider", "anthropic"], json.dumps(history))
    document = json.loads(out)
    assert code == 0
    assert document["messages"] == [{"role": "user", "content": "hi"}]
    assert document["system"] == "Be brief."
    assert [c["action"] for c in document["changes"]] == ["lift_system", "drop_error_reply"]
    assert run(["sanitize"], "not json")[0] == 2
    assert run(["sanitize"], json.dumps([{"role": "user", "content": 5}]))[0] == 2
