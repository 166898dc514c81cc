"""The command line's session commands (demo, replay, build, inspect, eval)
and the fixes to count: the numbers they print are checked, not the look."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import validators
from context_core import MessageLog, Tokenizer, sanitize
from context_core.cli import main
from context_core.cli.demo_session import write_session


def run(argv: list[str], stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_demo_reports_what_the_session_saved_and_kept(capsys):
    code, out = run(["demo", "--turns", "40", "--json"])
    assert code == 0
    document = json.loads(out)
    summary, calls = document["summary"], document["calls"]
    assert summary["turns"] == 40
    assert summary["calls"] == len(calls) > 40
    assert summary["tokens_sent"] == sum(c["sent"] for c in calls)
    assert summary["tokens_sent"] < summary["tokens_naive"]
    assert summary["constraints"] >= 4
    assert summary["retained_final"] == summary["constraints"]  # every rule still sent, word for word
    assert summary["retained_final_last_20"] < summary["constraints"]  # which messages[-20:] loses
    assert sum(summary["compactions_written"].values()) >= 1
    assert summary["prefix_stable"] == 1.0
    assert all(c["sent"] <= 89_600 for c in calls)
    assert "wrote a 40-turn agent session" in capsys.readouterr().err  # progress and notes on stderr


def test_replay_of_a_transcript_file_a_log_and_an_anthropic_chat(tmp_path, capsys):
    path = tmp_path / "chat.jsonl"
    write_session(path, 12, seed=3)
    code, out = run(["replay", str(path), "--json", "--policy", "weighted", "--budget", "32000"])
    assert code == 0
    replayed = json.loads(out)["summary"]
    assert replayed["policy"] == "weighted"
    log_dir = tmp_path / "log"
    with MessageLog.open(log_dir, create=True) as log:
        log.append_many([json.loads(line) for line in path.read_text().splitlines()])
    code, out = run(["replay", str(log_dir), "--json", "--policy", "weighted", "--budget", "32000"])
    assert code == 0
    assert json.loads(out)["summary"]["calls"] == replayed["calls"]
    anthropic = tmp_path / "claude.json"
    anthropic.write_text(
        json.dumps(
            {
                "system": "You are terse.",
                "messages": [
                    {"role": "user", "content": "Read a.py. You must never drop the order_id."},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1"},
                            {"type": "text", "text": "Also check b.py."},
                        ],
                    },
                    {"role": "assistant", "content": [{"type": "text", "text": "It sets x."}]},
                ],
            }
        )
    )
    code, out = run(["replay", str(anthropic), "--json"])
    assert code == 0
    summary = json.loads(out)["summary"]
    assert (summary["provider"], summary["calls"], summary["retained_final"]) == ("anthropic", 2, 1)
    # A prefix under Claude's minimum is never cached, however stable: said so, not "100%".
    assert summary["prefix_cacheable"] is False
    assert 0 < summary["prefix_tokens"] < 1024
    code, out = run(["replay", str(anthropic)])
    assert code == 0
    assert "under the 1,024-token minimum claude-sonnet-4-5 caches" in " ".join(out.split())
    assert replayed["prefix_cacheable"] is None  # OpenAI caches the prompt's start, messages too
    code, out = run(["build", str(anthropic), "--json"])
    assert "Also check b.py." in out  # text said after the results is the next call's input
    assert "cache_control" not in out
    assert "no cache breakpoint: the cached prefix (tools, system) counts" in capsys.readouterr().err
    assert run(["replay", str(anthropic), "--provider", "openai"])[0] == 2  # the wrong shape, said


def replay_calls(tmp_path, transcript, *options: str) -> int:
    """Replay ``transcript`` (written as JSON) and return how many calls it made."""
    path = tmp_path / "transcript.json"
    path.write_text(json.dumps(transcript), encoding="utf-8")
    code, out = run(["replay", str(path), "--json", *options])
    assert code == 0
    return json.loads(out)["summary"]["calls"]


def test_replay_passes_over_an_empty_user_message(tmp_path):
    chat = [
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "  "},
        {"role": "assistant", "content": "Anything else?"},
        {"role": "user", "content": [{"type": "text", "text": " "}]},
        {"role": "assistant", "content": "Still here."},
        {"role": "user", "content": None},
        {"role": "assistant", "content": "Say when."},
        {"role": "user", "content": "No, thanks."},
        {"role": "assistant", "content": "Bye."},
    ]
    # A reply after a blank input has nothing new to answer: kept, but no
    # call made it (the request would end with the model's own reply).
    assert replay_calls(tmp_path, chat) == 2


def test_replay_logs_two_inputs_with_no_reply_between_as_a_session_does(tmp_path):
    """The first goes in unanswered, through the session: the same input
    twice is one retry, after a tool result or a reply alike."""
    from context_core.cli.replay import replay

    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    opening = [
        {"role": "user", "content": "read a.py"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    for between in ([], [{"role": "assistant", "content": "ok?"}]):
        for second in ("yes", "yes, and b.py"):
            chat = [
                *opening,
                *between,
                {"role": "user", "content": "yes"},
                {"role": "user", "content": second},
                {"role": "assistant", "content": "done"},
            ]
            where = tmp_path / f"{len(between)}-{second}"
            replay(
                chat,
                [],
                model="gpt-4o",
                provider="openai",
                budget=None,
                policy="priority",
                directory=str(where),
            )
            with MessageLog.open(where / "log", readonly=True) as log:
                said = [m["content"] for m in log.read(log.path()) if m.get("role") == "user"]
            assert said == ["read a.py", *dict.fromkeys(["yes", second])]


def test_replay_of_an_anthropic_transcript_that_opens_with_a_reply(tmp_path):
    chat = {
        "system": "You are terse.",
        "messages": [
            {"role": "assistant", "content": "Hi, how can I help?"},
            {"role": "user", "content": "Fix the build."},
            {"role": "assistant", "content": "Done."},
        ],
    }
    assert (
        replay_calls(tmp_path, chat, "--model", "claude-sonnet-4-5") == 1
    )  # the opening reply answered nothing


def test_replay_makes_the_call_that_answers_a_tool_result_before_any_input(tmp_path):
    chat = [
        {"role": "system", "content": "You are terse."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"},
        {"role": "assistant", "content": "Two files."},
        {"role": "user", "content": "Fix the build."},
        {"role": "assistant", "content": "Done."},
    ]
    assert replay_calls(tmp_path, chat) == 2  # the opening reply answered nothing; the next two did


def test_build_prints_the_last_request_ready_to_send(tmp_path):
    path = tmp_path / "chat.jsonl"
    write_session(path, 15, seed=4)
    code, out = run(["build", str(path), "--json"])
    assert code == 0
    request = json.loads(out)
    assert request["model"] == "gpt-4o"
    assert validators.openai(request["messages"]) == []
    assert not sanitize(request["messages"]).changed
    code, table = run(["build", str(path)])
    assert code == 0
    total = Tokenizer().count_messages(request["messages"], request.get("tools"))
    assert f"{total:,}" in table


def test_build_sends_no_response_fields_of_a_transcripts_replies(tmp_path, capsys):
    """A stored reply's usage, stop reason and reasoning text are the
    response's, not the request's: Anthropic refuses them, and the usage was
    fed to the budget as if the replayed request had made it."""
    chat = [
        {"role": "user", "content": "What changed?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Two files."}],
            "id": "msg_1",
            "model": "claude-sonnet-4-5",
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 90_000, "output_tokens": 3},
            "reasoning_content": "I looked.",
        },
        {"role": "user", "content": "Fix the build."},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat))
    code, out = run(["build", str(path), "--json", "--provider", "anthropic"])
    assert code == 0
    request = json.loads(out)
    assert [sorted(m) for m in request["messages"]] == [["content", "role"]] * 3
    assert validators.anthropic(request["messages"], request["system"], request=True) == []
    assert "usage sample" not in capsys.readouterr().err


def test_build_says_what_leaves_the_last_input_no_room(tmp_path, capsys):
    """A budget the prompt fills was blamed on the input ("the last turn's
    input alone is over the budget"): the session's own reason is given."""
    path = tmp_path / "chat.json"
    path.write_text(
        json.dumps(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"},
                {"role": "user", "content": "go on"},
            ]
        )
    )
    assert run(["build", str(path), "--budget", "150"])[0] == 2
    said = capsys.readouterr().err
    assert "no request can be built for the last turn" in said
    assert "beside the prompt" in said


def test_inspect_names_summaries_branches_and_damage(tmp_path):
    where = tmp_path / "log"
    with MessageLog.open(where, create=True) as log:
        for i in range(6):
            log.append({"role": "user", "content": f"q{i}"})
            log.append({"role": "assistant", "content": f"a{i}"})
        log.add_summary("Constraints:\n- none", (0, 3))
        log.rewind(5)
        log.append({"role": "assistant", "content": "again"})
    code, out = run(["inspect", str(where), "--json", "--tail", "2"])
    assert code == 0
    facts = json.loads(out)
    assert (facts["messages"], facts["summaries"], facts["branches"], facts["check"]) == (
        13,
        {"L2": 1},
        1,
        "ok",
    )
    assert [row["text"] for row in facts["tail"]] == ["a2", "again"]  # the branch from seq 5
    with open(where / "data", "r+b") as data:
        data.seek(-3, 2)
        data.write(b"\xff\xff\xff")
    code, out = run(["inspect", str(where), "--json"])
    assert code == 2
    assert json.loads(out)["check"].startswith("corrupt")
    assert run(["inspect", str(tmp_path / "nothing")])[0] == 2


def test_inspect_prints_the_users_text_as_it_is(tmp_path):
    """Messages, paths and names hold brackets rich would read as markup:
    ``[/x]`` raised, and ``x[i]`` lost its ``[i]``."""
    where = tmp_path / "log [/x]"
    with MessageLog.open(where, create=True) as log:
        log.append({"role": "user", "content": "close the tag [/x] please, total += x[i]"})
        custom = {"id": "c2", "type": "custom", "custom": {"name": "sql", "input": "SELECT 1"}}
        log.append({"role": "assistant", "content": None, "tool_calls": [_call("c1", "read_file"), custom]})
    code, out = run(["inspect", str(where), "--tail", "2"])
    assert code == 0
    assert "close the tag [/x] please, total += x[i]" in " ".join(out.split())
    assert "(tool calls: read_file, sql)" in out  # not null
    assert "log [/x]" in out  # the path in the title


def test_inspect_reads_one_snapshot_of_a_log_another_writer_grows(tmp_path, monkeypatch):
    """The path is read before the headers, so a message appended between
    the two (another process writing) has its header: it used to raise
    IndexError."""
    where = tmp_path / "log"
    writer = MessageLog.open(where, create=True)
    writer.append_many([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    path = MessageLog.path

    def growing(self):
        seqs = path(self)
        writer.append_many([{"role": "user", "content": "more"}, {"role": "assistant", "content": "yes"}])
        return seqs

    monkeypatch.setattr(MessageLog, "path", growing)
    code, out = run(["inspect", str(where), "--json", "--tail", "5"])
    writer.close()
    assert code == 0
    facts = json.loads(out)
    assert facts["nodes"] == 4
    assert facts["messages"] == 4
    assert facts["on_active_path"] == 2


def _call(call_id: str, name: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_eval_scores_every_policy_and_budget(tmp_path):
    plot = tmp_path / "retention.png"
    argv = [
        "eval",
        "--sessions",
        "1",
        "--turns",
        "30",
        "--budgets",
        "4000,16000",
        "--json",
        "--plot",
        str(plot),
    ]
    code, out = run(argv)
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert code == 0
    rows = json.loads(out)
    assert {(r["policy"], r["budget"]) for r in rows} == {
        (p, b) for p in ("priority", "weighted", "shape") for b in (4000, 16000)
    }
    assert all(0.0 <= r["retention"] <= 1.0 for r in rows)
    assert run(["eval", "--budgets", "lots"])[0] == 2


def test_count_names_each_bad_input_and_counts_the_rest(tmp_path, capsys):
    good = tmp_path / "notes.txt"
    good.write_text("hello world", encoding="utf-8")
    broken = tmp_path / "chat.json"
    broken.write_text('[{"role": "user", "content": ', encoding="utf-8")
    binary = tmp_path / "blob.dat"
    binary.write_bytes(b"\x00\x01\xff\xfe" * 10)
    code, out = run(["count", str(broken), str(good), str(binary), str(tmp_path / "missing.txt")])
    assert code == 2
    assert out.split() == [str(Tokenizer().count("hello world")), str(good)]
    err = capsys.readouterr().err
    assert f"{broken}: not valid JSON" in err
    assert f"{binary}: not UTF-8 text" in err
    assert "missing.txt" in err
    assert run(["count", "--model", "not-a-model", str(good)])[0] == 2
    err = capsys.readouterr().err
    assert "--encoding" in err
    assert "fallback" not in err


def test_a_closed_pipe_and_the_version(tmp_path):
    small = tmp_path / "a.txt"
    small.write_text("hi", encoding="utf-8")
    many = [sys.executable, "-m", "context_core", "count", *[str(small)] * 5000]  # more than a pipe holds
    with subprocess.Popen(many, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None
        child.stdout.readline()
        child.stdout.close()  # as `| head -1` does
        _, err = child.communicate()
    assert child.returncode == 141
    assert b"Broken pipe" not in err
    assert b"Traceback" not in err
    version = subprocess.run(
        [sys.executable, "-m", "context_core", "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("context-core ")
    helped = subprocess.run(
        [sys.executable, "-m", "context_core", "--help"], capture_output=True, text=True, check=True
    )
    assert "The ``context-core`` command" not in helped.stdout
    for command in ("demo", "replay", "build", "inspect", "eval", "count"):
        assert command in helped.stdout


def test_a_closed_pipe_under_a_table_ends_quietly_with_141(tmp_path):
    """rich's own handling of a closed pipe exits with status 1."""
    path = tmp_path / "chat.jsonl"
    write_session(path, 3, seed=1)
    probe = (
        "import io, sys\n"
        "from context_core.cli import main\n"
        "class Closed(io.StringIO):\n"
        "    def write(self, text):\n"
        "        raise BrokenPipeError\n"
        f"sys.exit(main(['replay', {str(path)!r}, '--rows', '2'], stdout=Closed()))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 141
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "argv",
    [["demo", "--turns", "0"], ["replay", "/no/such/file.json"], ["build", "-"], ["demo", "--rows", "0"]],
)
def test_bad_arguments_exit_2_without_a_traceback(argv, capsys):
    assert run(argv)[0] == 2
    assert "Traceback" not in capsys.readouterr().err


def test_build_says_when_the_last_turn_cannot_fit(tmp_path, capsys):
    big = tmp_path / "big.json"
    big.write_text(
        json.dumps(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hey"},
                {"role": "user", "content": "word " * 6000},
            ]
        )
    )
    assert run(["build", str(big), "--budget", "4000"])[0] == 2
    assert run(["build", str(big), "--budget", "4000", "--json"])[0] == 2
    err = capsys.readouterr().err
    assert "no request can be built for the last turn: the input counts 6008 tokens" in err
    assert "Traceback" not in err


def test_a_pipe_closed_before_the_buffered_output_is_written_ends_with_141(tmp_path):
    """Output smaller than the buffer is written when the command ends, not
    at the interpreter's exit, where the error escaped the handler (exit 120)."""
    small = tmp_path / "a.txt"
    small.write_text("hi", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    argv = [sys.executable, "-m", "context_core", "count", str(small)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as child:
        assert child.stdout is not None
        child.stdout.close()  # as `| true` does, before the child writes
        _, err = child.communicate()
    assert child.returncode == 141
    assert err == b""


def test_json_output_is_json_whatever_text_it_holds(tmp_path):
    lone = tmp_path / "lone.json"
    lone.write_text(json.dumps([{"role": "user", "content": "hi \ud800 there 你好"}]), encoding="ascii")
    code, out = run(["sanitize", str(lone)])
    assert code == 0
    assert json.loads(out)["messages"][0]["content"] == "hi \ud800 there 你好"
    # A strict UTF-8 stdout and a file name that is not UTF-8: written, not a traceback.
    odd = tmp_path.joinpath(os.fsdecode(b"\xff.txt"))
    odd.write_text("hi", encoding="utf-8")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    for argv in (["count", str(odd)], ["sanitize", str(lone)]):
        done = subprocess.run(
            [sys.executable, "-m", "context_core", *argv], capture_output=True, env=env, check=False
        )
        assert done.returncode == 0, done.stderr
        assert b"Traceback" not in done.stderr
        done.stdout.decode("utf-8")  # valid UTF-8
    assert json.loads(done.stdout)["messages"][0]["content"] == "hi \ud800 there 你好"


def test_the_baselines_count_in_the_models_encoding_with_the_priming_once(tmp_path):
    chat = [
        {"role": "user", "content": "请把订单 A-88 的退款写进报告，金额保持人民币。" * 4},
        {"role": "assistant", "content": "好的，我会把退款写进报告。"},
        {"role": "user", "content": "再检查一遍所有的金额。"},
        {"role": "assistant", "content": "已经检查过了。"},
    ]
    path = tmp_path / "zh.json"
    path.write_text(json.dumps(chat, ensure_ascii=False), encoding="utf-8")
    naive = {}
    for model in ("gpt-4o", "gpt-4"):
        code, out = run(["replay", str(path), "--json", "--model", model])
        assert code == 0
        calls = json.loads(out)["calls"]
        assert all(c["last_n"] == c["naive"] for c in calls)  # fewer than 20 messages: the same count
        naive[model] = calls[0]["naive"]
    cl100k, o200k = Tokenizer("cl100k_base"), Tokenizer("o200k_base")
    assert cl100k.count(chat[0]["content"]) > o200k.count(chat[0]["content"])
    assert naive["gpt-4"] > naive["gpt-4o"]  # gpt-4 counts Chinese in cl100k_base, as `sent` is


def test_the_progress_bar_is_drawn_on_the_terminal_it_was_checked_for(monkeypatch):
    from context_core.cli.replay import _progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stdout, stderr = io.StringIO(), Terminal()
    monkeypatch.setattr(sys, "stdout", stdout)
    update, stop = _progress(stderr)
    update(3, 10)
    stop()
    assert "replaying" in stderr.getvalue()
    assert stdout.getvalue() == ""


def test_replay_reads_a_sessions_directory_and_warns_of_a_damaged_log(tmp_path, capsys):
    from context_core import Session

    with Session.open(tmp_path / "s", model="gpt-4o", store=False, compact=False) as session:
        for i in range(3):
            session.prepare(f"question {i}")
            session.record({"role": "assistant", "content": f"answer {i}"})
    code, out = run(["replay", str(tmp_path / "s"), "--json"])
    assert code == 0
    assert json.loads(out)["summary"]["calls"] == 3
    code, _ = run(["inspect", str(tmp_path / "s"), "--json"])
    assert code == 0
    index = tmp_path / "s" / "log" / "index"
    index.write_bytes(index.read_bytes()[: 64 + 4 * 72])  # the header and the first four records
    capsys.readouterr()
    code, out = run(["replay", str(tmp_path / "s"), "--json"])
    err = capsys.readouterr().err
    assert "warning" in err
    # Every record the index still holds reads: the warning says what is left out, not "0 of".
    assert "replaying the 4 records on the path, which all read" in err
    assert "MessageLog.repair" in err
    assert code == 0
    assert json.loads(out)["summary"]["calls"] == 2  # what the index still holds
    # A payload damaged in the middle: the messages around it are still replayed.
    with Session.open(tmp_path / "t", model="gpt-4o", store=False, compact=False) as session:
        for i in range(3):
            session.prepare(f"question {i}")
            session.record({"role": "assistant", "content": f"answer {i}"})
    with MessageLog.open(tmp_path / "t" / "log", readonly=True) as log:
        offset = int(log.headers()["offset"][1])  # the first answer's frame
    with open(tmp_path / "t" / "log" / "data", "r+b") as data:
        data.seek(offset + 80 + 2)  # inside its payload, past the frame's head
        byte = data.read(1)
        data.seek(-1, 1)
        data.write(bytes([byte[0] ^ 0xFF]))
    code, out = run(["replay", str(tmp_path / "t"), "--json"])
    assert code == 0
    assert "(1 of the 6 records on the path do not)" in capsys.readouterr().err
    assert json.loads(out)["summary"]["calls"] == 2  # the answer left out made no call
    code, out = run(["inspect", str(tmp_path / "t"), "--json", "--tail", "6"])
    assert code == 2  # the check fails, and the report is still made
    facts = json.loads(out)
    assert facts["check"].startswith("corrupt")
    assert [row["seq"] for row in facts["tail"]] == [0, 2, 3, 4, 5]  # the damaged one left out
    # An index record damaged: the log does not read; the error names the repair of its directory.
    index = tmp_path / "t" / "log" / "index"
    damaged = bytearray(index.read_bytes())
    damaged[64 + 64 + 5] ^= 0xFF  # inside the second record
    index.write_bytes(bytes(damaged))
    capsys.readouterr()
    for command in ("replay", "inspect"):
        assert run([command, str(tmp_path / "t")])[0] == 2
        assert f"MessageLog.repair({str(tmp_path / 't' / 'log')!r})" in capsys.readouterr().err


def test_the_demo_writes_its_session_in_a_private_directory(capsys):
    paths = []
    for _ in range(2):
        assert run(["demo", "--turns", "1", "--seed", "5", "--json"])[0] == 0
        said = capsys.readouterr().err
        paths.append(Path(said.split(" to ", 1)[1].split()[0]))
    assert paths[0] != paths[1]  # the same seed twice: two files, neither a fixed name
    for path in paths:
        assert path.is_file()
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        shutil.rmtree(path.parent)


@pytest.mark.parametrize("options", [["--provider", "anthropic"], ["--model", "claude-sonnet-4-5"]])
def test_the_demo_runs_for_anthropic_in_anthropics_shape(capsys, options):
    """The demo wrote OpenAI's tool calls whatever the provider, and then
    refused to replay them for Anthropic: ``demo --provider anthropic``
    always failed, though its help offered it."""
    code, out = run(["demo", "--turns", "12", "--seed", "2", "--json", *options])
    said = capsys.readouterr().err
    assert code == 0, said
    summary = json.loads(out)["summary"]
    assert summary["provider"] == "anthropic"
    assert summary["retained_final"] == summary["constraints"] >= 4
    path = Path(said.split(" to ", 1)[1].split()[0])
    written = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    shutil.rmtree(path.parent)
    blocks = [b["type"] for m in written if isinstance(m["content"], list) for b in m["content"]]
    assert "tool_use" in blocks
    assert "tool_result" in blocks
    assert not any(m["role"] == "tool" or "tool_calls" in m for m in written)


def test_eval_checks_for_the_plot_extra_before_it_runs(tmp_path, monkeypatch, capsys):
    import context_core.cli.evaluate as evaluate

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the evaluation ran")

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    monkeypatch.setattr(evaluate, "score", never)
    assert run(["eval", "--plot", str(tmp_path / "x.png")])[0] == 2
    assert "matplotlib" in capsys.readouterr().err


def test_input_meant_as_json_that_is_not_is_an_error_naming_it(tmp_path, capsys):
    """Broken JSON on stdin was counted as text; --format chat hid the
    parser's reason; an invalid message did not name its file; a byte
    order mark made a chat unreadable."""
    assert run(["count"], stdin='[{"role": "user", "content": ')[0] == 2
    err = capsys.readouterr().err
    assert "stdin: not valid JSON or JSONL" in err
    assert "--format text" in err
    code, out = run(["count", "--format", "text"], stdin="[1] see the notes")
    assert code == 0
    assert out.split()[0] == str(Tokenizer().count("[1] see the notes"))
    for text in ("plain words", "[INFO] server started", "[project]\nname = 'x'", "{{ name }}"):
        assert run(["count"], stdin=text)[0] == 0  # text is still text
    notes = tmp_path / "notes.txt"
    notes.write_text('{"not": json', encoding="utf-8")
    assert run(["count", "--format", "chat", str(notes)])[0] == 2
    assert f"{notes}: not valid JSON or JSONL (Expecting value" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "user", "content": 5}]), encoding="utf-8")
    good = tmp_path / "good.json"
    good.write_text("\ufeff" + json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    code, out = run(["count", str(bad), str(good), "--json"])
    assert code == 2
    assert json.loads(out)["inputs"][0]["kind"] == "chat"  # the one with a byte order mark
    assert f"{bad}: messages[0].content: expected str" in capsys.readouterr().err
    for command in ("replay", "build", "sanitize"):
        assert run([command, str(bad)])[0] == 2
        assert f"{bad}: messages[0].content: expected str" in capsys.readouterr().err
    code, out = run(["count", "--encoding", "gpt2", "--json", str(good)])
    assert code == 0
    assert json.loads(out)["encoding"] == "r50k_base"


def test_session_commands_advise_their_own_options(tmp_path, capsys):
    """The library's advice named keyword arguments (window=, reserves) the
    command does not have; an explicit --model was taken for the default."""
    path = tmp_path / "chat.jsonl"
    write_session(path, 3, seed=1)
    assert run(["replay", str(path), "--model", "no-such-model"])[0] == 2
    err = capsys.readouterr().err
    assert "--budget N" in err
    assert "window=" not in err
    assert run(["replay", str(path), "--budget", "0"])[0] == 2
    err = capsys.readouterr().err
    assert "--budget 0 leaves no room" in err
    assert "reserves" not in err
    for command in (["replay", str(path)], ["build", str(path)], ["demo", "--turns", "2"]):
        assert run([*command, "--budget", "-5"])[0] == 2
        err = capsys.readouterr().err
        assert "--budget is a window in tokens, never negative; got -5" in err
        assert "window must" not in err
        assert "wrote a" not in err  # refused before the demo writes its session
    only_system = tmp_path / "system.json"
    only_system.write_text(json.dumps([{"role": "system", "content": "You are terse."}]), encoding="utf-8")
    assert run(["build", str(only_system)])[0] == 2
    assert "no user input" in capsys.readouterr().err
    claude = tmp_path / "claude.json"
    claude.write_text(
        json.dumps(
            [
                {"role": "user", "content": "Read a.py."},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
                },
                {"role": "assistant", "content": "Done."},
            ]
        ),
        encoding="utf-8",
    )
    code, out = run(["replay", str(claude), "--json"])
    assert code == 0
    assert json.loads(out)["summary"]["model"] == "claude-sonnet-4-5"  # the default, for its shape
    assert run(["replay", str(claude), "--model", "gpt-4o"])[0] == 2  # asked for, not replaced
    assert "anthropic's shape" in capsys.readouterr().err


def test_replay_names_the_message_it_cannot_store_and_never_drops_it(tmp_path, capsys):
    """A tool result the session could not store (a lone surrogate) was
    dropped without a word, and the run said 1 of 2 calls, exit 0; a
    tool-call argument nested past the JSON parser's depth printed a
    traceback."""
    surrogate = tmp_path / "surrogate.json"
    surrogate.write_text(
        json.dumps(
            [
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": None, "tool_calls": [call_of("c1")]},
                {"role": "tool", "tool_call_id": "c1", "content": "bad \udcff byte"},
                {"role": "assistant", "content": "done"},
            ]
        )
    )
    assert run(["replay", str(surrogate)])[0] == 2
    err = capsys.readouterr().err
    assert f"{surrogate}: message 2: result.content" in err
    assert "lone surrogate" in err
    # An input is sent (and checked) when the reply after it comes: the
    # error named that reply, not the input. Also for two inputs in a row.
    bad_input = tmp_path / "bad_input.json"
    for messages, blamed in (
        ([{"role": "user", "content": "必须 \ud800 x"}, {"role": "assistant", "content": "ok"}], 0),
        (
            [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "bad \ud800"},
                {"role": "user", "content": "then this"},
                {"role": "assistant", "content": "ok"},
            ],
            2,
        ),
    ):
        bad_input.write_text(json.dumps(messages))
        for command in ("replay", "build"):
            assert run([command, str(bad_input)])[0] == 2
            err = capsys.readouterr().err
            assert f"{bad_input}: message {blamed}: user_input holds a lone surrogate" in err, err
    # An input over the budget is counted and the replay goes on: a bad reply
    # after it is the reply's fault, not the input's.
    no_id = {"role": "assistant", "content": None, "tool_calls": [call_of("c1")]}
    del no_id["tool_calls"][0]["id"]
    bad_input.write_text(json.dumps([{"role": "user", "content": "word " * 3000}, no_id]))
    assert run(["replay", str(bad_input), "--budget", "2000"])[0] == 2
    assert f"{bad_input}: message 1: message.tool_calls[0].id" in capsys.readouterr().err
    deep = tmp_path / "deep.json"
    nested = call_of("c1")
    nested["function"]["arguments"] = "[" * 1000 + "]" * 1000
    deep.write_text(
        json.dumps(
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [nested]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "assistant", "content": "done"},
            ]
        )
    )
    for command in ("replay", "build"):
        assert run([command, str(deep)])[0] == 0
    assert "Traceback" not in capsys.readouterr().err


def call_of(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def test_replay_leaves_out_thinking_an_export_stripped_of_its_signature(tmp_path):
    transcript = tmp_path / "unsigned.json"
    thinking = {"type": "thinking", "thinking": "the user wants a summary"}
    transcript.write_text(
        json.dumps(
            [
                {"role": "user", "content": "summarise the log"},
                {"role": "assistant", "content": [thinking, {"type": "text", "text": "It rotated twice."}]},
                {"role": "user", "content": "thanks"},
                {"role": "assistant", "content": [{"type": "text", "text": "Welcome."}]},
            ]
        )
    )
    code, out = run(["build", str(transcript), "--model", "claude-sonnet-4-5", "--json"])
    assert code == 0
    sent = json.loads(out)["messages"]
    assert sent[1]["content"] == [{"type": "text", "text": "It rotated twice."}]


def test_a_bad_jsonl_line_and_json_nested_past_reading_are_named(tmp_path, capsys):
    """A JSONL file with one bad line was reported with the whole-document
    parser's error (its "line 2"); JSON nested past what the parser reads
    was counted as plain text, exit 0."""
    lines = [json.dumps({"role": "user", "content": "a"}), json.dumps({"role": "assistant", "content": "b"})]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "\n".join([*lines, "", '{"role": "user", "content": "c"', lines[0]]) + "\n", encoding="utf-8"
    )
    for command in ("count", "replay", "sanitize"):
        assert run([command, str(bad)])[0] == 2
        assert f"{bad}: not valid JSON or JSONL (line 4: Expecting" in capsys.readouterr().err
    lead = tmp_path / "lead.jsonl"
    lead.write_text("\n\n" + lines[0] + '\n{"role": "user"\n', encoding="utf-8")
    assert run(["count", str(lead)])[0] == 2
    assert (
        f"{lead}: not valid JSON or JSONL (line 4: Expecting" in capsys.readouterr().err
    )  # blank lines count
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000, encoding="utf-8")
    assert run(["count", str(deep)])[0] == 2
    assert f"{deep}: not valid JSON or JSONL (nested too deeply to read)" in capsys.readouterr().err
    assert run(["count"], stdin="[" * 100_000 + " plain words")[0] == 0  # stdin that is not meant as JSON


def test_a_system_prompt_in_blocks_is_the_identity_and_block_chats_are_read_whole(tmp_path):
    """Found trying the commands as a new user: Anthropic's ``system`` as a
    list of blocks (with ``cache_control``) was replayed as a pinned message
    after the volatile part; an Anthropic chat with only images and text was
    taken for OpenAI's and refused; rules stated in text blocks were not
    counted."""
    identity = "You are the payments agent. Cite every file you read."
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": identity, "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Check the refund job."},
            {"role": "assistant", "content": "Checked."},
            {"role": "user", "content": "And the ledger?"},
        ],
    }
    as_blocks, as_text = tmp_path / "blocks.json", tmp_path / "text.json"
    as_blocks.write_text(json.dumps(body), encoding="utf-8")
    as_text.write_text(json.dumps({**body, "system": identity}), encoding="utf-8")
    built = []
    for path in (as_blocks, as_text):
        code, out = run(["build", str(path), "--json"])
        assert code == 0
        built.append(json.loads(out))
    assert built[0] == built[1]
    assert built[0]["system"][0]["text"].startswith(identity)  # first: in the cached prefix
    plain = tmp_path / "plain.json"  # a body with no system: its model still says where it goes
    plain.write_text(json.dumps({k: v for k, v in body.items() if k != "system"}), encoding="utf-8")
    code, out = run(["build", str(plain), "--json"])
    assert code == 0
    assert json.loads(out)["model"] == "claude-sonnet-4-5"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _PNG}}
    rule = "You must never drop the order_id from any log line."
    chat = [
        {"role": "user", "content": [image, {"type": "text", "text": f"What is this? {rule}"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A chart."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Welcome."}]},
    ]
    path = tmp_path / "images.json"
    path.write_text(json.dumps(chat), encoding="utf-8")
    code, out = run(["replay", str(path), "--json"])
    assert code == 0
    replayed = json.loads(out)
    assert replayed["summary"]["provider"] == "anthropic"
    assert [call["constraints"] for call in replayed["calls"]] == [1, 1]
    assert [call["retained"] for call in replayed["calls"]] == [1, 1]


#: A 1x1 PNG.
_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def test_a_plot_matplotlib_cannot_write_is_refused_before_the_evaluation(tmp_path, monkeypatch, capsys):
    """A format matplotlib has no writer for raised a traceback once the
    whole evaluation had run; a name with no extension was reported as
    written while matplotlib wrote it with .png."""
    import context_core.cli.evaluate as evaluate

    real = evaluate.score

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(evaluate, "score", never)
    (tmp_path / "adir.png").mkdir()
    monkeypatch.setattr("shutil.which", lambda name: None)  # no LaTeX program for pgf
    for plot, said in (
        ("out.txt", "matplotlib cannot write .txt files"),
        ("out.pgf", "matplotlib cannot write .pgf files here"),
        (str(tmp_path / "no" / "x.png"), "is not a directory"),
        (str(tmp_path / "adir.png"), "is a directory"),
        ("/proc/self/x.png", "cannot write /proc/self/x.png"),  # a directory no one writes in
    ):
        assert run(["eval", "--plot", plot])[0] == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    monkeypatch.setattr(evaluate, "score", real)
    named = tmp_path / "retention"
    assert run(["eval", "--sessions", "1", "--turns", "3", "--budgets", "2000", "--plot", str(named)])[0] == 0
    assert f"wrote {named}.png" in capsys.readouterr().err
    assert (tmp_path / "retention.png").read_bytes().startswith(b"\x89PNG")


def test_nan_budgets_past_any_window_and_progress_to_the_end(tmp_path, capsys):
    """Found trying the commands: NaN in a chat was read (Python's parser
    takes it) and written back out by ``sanitize`` as invalid JSON; a
    budget of 10**20 printed a limit rounded in floats; replay's progress
    stopped short of its total when replies answered no call."""
    chat = tmp_path / "nan.json"
    for number, said in (("NaN", "NaN is not a JSON value"), ("1e400", "1e400 is out of a number's range")):
        chat.write_text(f'[{{"role": "user", "content": "hi", "score": {number}}}]', encoding="utf-8")
        for command in ("sanitize", "count", "replay"):
            assert run([command, str(chat)])[0] == 2
            assert said in capsys.readouterr().err
    path = tmp_path / "chat.json"
    transcript = [
        {"role": "assistant", "content": "Hello! What are we working on?"},  # answers no call
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": "Done."},
        {"role": "assistant", "content": "Anything else?"},  # answers no call either
        {"role": "user", "content": "No."},
        {"role": "assistant", "content": "Bye."},
    ]
    path.write_text(json.dumps(transcript), encoding="utf-8")
    assert run(["replay", str(path), "--budget", str(10**20)])[0] == 2
    assert "--budget is a window in tokens, at most 1,000,000,000" in capsys.readouterr().err
    assert run(["replay", str(path)])[0] == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("replayed")]
    assert lines[-1] == "replayed 4/4 replies"


def test_build_refuses_a_transcript_whose_last_input_is_blank(tmp_path, capsys):
    """The replay passes a blank input over, so the request printed was an
    older turn's, under the title of the last."""
    path = tmp_path / "chat.json"
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "  "},
    ]
    path.write_text(json.dumps(chat))
    assert run(["build", str(path), "--json"])[0] == 2
    assert "the last user message is blank" in capsys.readouterr().err


def test_build_keeps_a_request_bodys_own_settings(tmp_path):
    """temperature, a reply cap and the like were dropped from the request
    built from a body; the cap now bounds the room, in the model's field."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "temperature": 0,
        "top_p": 0.9,
        "system": "You help.",
        "messages": [{"role": "user", "content": "hi"}],
    }
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    code, out = run(["build", str(path), "--json"])
    assert code == 0
    request = json.loads(out)
    assert (request["max_tokens"], request["temperature"], request["top_p"]) == (1024, 0, 0.9)
    openai = {
        "model": "o3-mini",
        "max_completion_tokens": 512,
        "messages": [{"role": "user", "content": "hi"}],
    }
    path.write_text(json.dumps(openai))
    code, out = run(["build", str(path), "--json"])
    assert code == 0
    request = json.loads(out)
    assert request["max_completion_tokens"] == 512
    assert "max_tokens" not in request


@pytest.mark.parametrize("cap", ["big", -5, 0, 1.5, True, "1000"])
@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_build_and_replay_refuse_a_reply_cap_the_apis_refuse(tmp_path, capsys, key, cap):
    """A cap that is not a positive int was copied into the built request
    (exit 0), where the API would refuse it; a null one is no cap."""
    body = {"model": "gpt-4o", key: cap, "messages": [{"role": "user", "content": "hi"}]}
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    assert run(["build", str(path), "--json"])[0] == 2
    err = capsys.readouterr().err
    said = f"{key} must be a positive whole number of tokens, not {json.dumps(cap)}"
    assert err == f"context-core: {path}: {said}\n"  # the file named once, no traceback
    body["messages"].append({"role": "assistant", "content": "hello"})
    path.write_text(json.dumps(body))
    assert run(["replay", str(path), "--json"])[0] == 2
    assert f"{key} must be a positive whole number" in capsys.readouterr().err
    body[key] = None
    path.write_text(json.dumps(body))
    assert run(["build", str(path), "--json"])[0] == 0


def test_count_knows_the_models_the_session_knows(tmp_path, capsys):
    """``count --model claude-sonnet-4-5`` said "unknown model" while replay
    and build default to it: a model whose window is known but whose
    tokenizer is not public counts in o200k_base, as a session does."""
    path = tmp_path / "chat.json"
    chat = [{"role": "user", "content": "hi"}]
    path.write_text(json.dumps(chat))
    code, out = run(["count", "--json", "--model", "claude-sonnet-4-5", str(path)])
    assert code == 0
    assert json.loads(out)["total"] == Tokenizer("o200k_base").count_messages(chat)
    assert "not public: counted in o200k_base" in capsys.readouterr().err
    assert run(["count", "--model", "banana", str(path)])[0] == 2
    assert "unknown model 'banana'" in capsys.readouterr().err


def test_eval_scores_a_budget_named_twice_once(tmp_path, capsys):
    code, out = run(["eval", "--sessions", "1", "--turns", "3", "--budgets", "4000,2000,4000", "--json"])
    assert code == 0
    rows = json.loads(out)["rows"] if isinstance(json.loads(out), dict) else json.loads(out)
    budgets = [r["budget"] for r in rows if r["policy"] == "priority"]
    assert budgets == [2000, 4000]
    assert run(["eval", "--budgets", "2000,2000000000"])[0] == 2
    assert "at most 1,000,000,000 tokens" in capsys.readouterr().err


def test_memory_errors_name_the_options(tmp_path, capsys):
    assert run(["memory", "show", str(tmp_path), "--max-lines", "0"])[0] == 2
    assert run(["memory", "show", str(tmp_path), "--lock-timeout", "-1"])[0] == 2
    said = capsys.readouterr().err
    assert "--max-lines must be at least 1" in said
    assert "--lock-timeout must be" in said
    assert "max_lines" not in said
