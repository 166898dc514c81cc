"""Tagging benchmarks by group and implementation, and the targets to reach."""

from __future__ import annotations

TARGETS: dict[str, float] = {}
"""Ratio to reach per group (peer median / our median)."""

REPORTS: list[str] = []
"""Lines printed at the end of the run (measurements that are not timings)."""


def register(benchmark, group: str, impl: str, target: float | None = None) -> None:
    """Tag a benchmark with its group and implementation (``ours`` or a peer)."""
    benchmark.group = group
    benchmark.extra_info["impl"] = impl
    if target is not None:
        TARGETS[group] = target
