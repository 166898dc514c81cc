"""Resident memory of a process that holds one encoding, and the time from
``import`` to the first count (loading the vocabulary): ours against tiktoken,
each measured in a fresh interpreter."""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap

import pytest

from context_core import _core
from context_core.reference.encodings import tiktoken_file
from support import REPORTS, register

RSS = "int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])"

OURS = f"""
import time
start = time.perf_counter()
import context_core
tok = context_core.Tokenizer("{{encoding}}")
assert tok.count("hello world") == 2
print({RSS}, time.perf_counter() - start)
"""

# tiktoken's production path: load_tiktoken_bpe on the vocabulary file, then Encoding.
TIKTOKEN = f"""
import time
from context_core.reference.encodings import _SPECS
pattern, specials, _ = _SPECS["{{encoding}}"]
start = time.perf_counter()
import tiktoken
from tiktoken.load import load_tiktoken_bpe
enc = tiktoken.Encoding("{{encoding}}", pat_str=pattern,
                        mergeable_ranks=load_tiktoken_bpe("{{path}}"), special_tokens=specials)
assert len(enc.encode_ordinary("hello world")) == 2
elapsed = time.perf_counter() - start
print({RSS}, elapsed)
"""


def rss_kb_and_load_seconds(code: str) -> tuple[int, float]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    rss, seconds = out.stdout.split()
    return int(rss), float(seconds)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_resident_memory_of_one_encoding(benchmark, tmp_path, encoding):
    vocabulary = tmp_path / f"{encoding}.tiktoken"
    vocabulary.write_bytes(tiktoken_file(_core._mergeable_ranks(encoding)))
    register(benchmark, f"resident memory, one encoding: {encoding}", "ours")
    ours, ours_load = rss_kb_and_load_seconds(OURS.format(encoding=encoding))
    theirs, their_load = rss_kb_and_load_seconds(TIKTOKEN.format(encoding=encoding, path=vocabulary))
    benchmark.extra_info.update(
        ours_rss_mb=round(ours / 1024, 1),
        tiktoken_rss_mb=round(theirs / 1024, 1),
        ours_first_count_ms=round(ours_load * 1e3, 1),
        tiktoken_first_count_ms=round(their_load * 1e3, 1),
    )
    benchmark.pedantic(lambda: None, rounds=1)
    print(
        f"\n{encoding}: resident ours {ours / 1024:.1f} MB, tiktoken {theirs / 1024:.1f} MB; "
        f"import to first count ours {ours_load * 1e3:.0f} ms, tiktoken {their_load * 1e3:.0f} ms"
    )
    assert ours <= theirs, f"ours {ours} KB > tiktoken {theirs} KB"


#: Fresh interpreters per side for the import row, the sides alternating.
IMPORT_ROUNDS = 7


def test_import_to_first_count(benchmark, tmp_path):
    """``import context_core`` and one count against ``import tiktoken`` and
    one encode of the same vocabulary (read from a local file, as tiktoken's
    cache serves it), timed inside fresh interpreters taking turns; the
    median of each side, with the range."""
    encoding = "o200k_base"
    vocabulary = tmp_path / f"{encoding}.tiktoken"
    vocabulary.write_bytes(tiktoken_file(_core._mergeable_ranks(encoding)))
    times: dict[str, list[float]] = {"ours": [], "tiktoken": []}

    def run():
        for _ in range(IMPORT_ROUNDS if not benchmark.disabled else 1):
            times["ours"].append(rss_kb_and_load_seconds(OURS.format(encoding=encoding))[1])
            tiktoken_code = TIKTOKEN.format(encoding=encoding, path=vocabulary)
            times["tiktoken"].append(rss_kb_and_load_seconds(tiktoken_code)[1])

    register(benchmark, "import to first count, o200k_base", "ours")
    benchmark.pedantic(run, rounds=1, iterations=1)
    ours, theirs = (statistics.median(times[side]) for side in ("ours", "tiktoken"))
    benchmark.extra_info.update(ours_ms=round(ours * 1e3, 1), tiktoken_ms=round(theirs * 1e3, 1))
    spread = {side: f"{min(v) * 1e3:.0f}-{max(v) * 1e3:.0f}" for side, v in times.items()}
    REPORTS.append(
        f"import to first count, {encoding}: ours {ours * 1e3:.0f} ms ({spread['ours']}), tiktoken"
        f" {theirs * 1e3:.0f} ms ({spread['tiktoken']}): {ours / theirs:.2f}x of tiktoken's time;"
        f" medians of {len(times['ours'])} fresh interpreters each, taking turns"
    )
