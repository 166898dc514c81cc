"""Benchmark setup: implementations side by side per group, and a summary of
the ratios of medians (peer time / ours) at the end of the run.

Run the benchmarks with ``pytest benches --benchmark-enable`` on a release
build; the default test run executes each once as a smoke test (correctness of
every implementation's answer is asserted either way).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The replay benchmarks share the tests' generator of agent sessions.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import REPORTS, TARGETS


def pytest_terminal_summary(terminalreporter, config):
    if REPORTS:
        terminalreporter.section("context_core: reports")
        for line in REPORTS:
            terminalreporter.write_line(line)
    session = getattr(config, "_benchmarksession", None)
    if session is None or session.disabled:
        return
    by_group: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    for bench in session.benchmarks:
        if bench.stats is None:
            continue
        impl = bench.extra_info.get("impl", bench.name)
        by_group.setdefault(bench.group or "", {})[impl] = bench.stats.median
        extra = {k: v for k, v in bench.extra_info.items() if k != "impl"}
        if extra:  # measurements that are not times (memory, a peer's failure)
            notes.append(
                f"{bench.group} [{impl}]: " + ", ".join(f"{k}={v}" for k, v in sorted(extra.items()))
            )
    terminalreporter.section("context_core: ratios of medians (peer / ours)")
    for group in sorted(by_group):
        medians = by_group[group]
        ours = medians.get("ours")
        if ours is None:
            continue
        for impl, median in sorted(medians.items()):
            if impl == "ours":
                continue
            ratio = median / ours
            target = TARGETS.get(group)
            # Another figure of ours ("ours, seen before") is shown, not judged.
            judged = target is not None and not impl.startswith("ours")
            verdict = "" if not judged else (" ok" if ratio >= target else f" BELOW TARGET {target}x")
            terminalreporter.write_line(
                f"{group:<44} {impl:<22} {ratio:7.2f}x  (ours {ours * 1e6:10.1f} us,"
                f" {impl} {median * 1e6:10.1f} us){verdict}"
            )
    for note in notes:
        terminalreporter.write_line(note)


@pytest.fixture(scope="session")
def tiktoken_encoding():
    """tiktoken's own encodings, built offline by the reference."""
    from context_core.reference.encodings import get_encoding

    return get_encoding
