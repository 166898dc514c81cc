"""``context-core eval``: constraint retention across selection policies and
budgets, on generated agent sessions replayed through a Session.

Each session states its rules in the first turns and buries them under
hundreds of tool outputs; each (policy, budget) pair replays every session
with compaction on, and scores the share of the rules still in the request,
word for word, at the last call (and the lowest share on any call).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, TextIO

from context_core.cli.count import InputError
from context_core.cli.output import write_json
from context_core.cli.replay import MAX_BUDGET

__all__ = ["run_eval", "score"]


def _budgets(text: str) -> list[int]:
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--budgets must be comma-separated token counts, got {text!r}") from None
    if not budgets or min(budgets) < 1000:
        raise InputError(f"--budgets must name windows of at least 1000 tokens, got {text!r}")
    if max(budgets) > MAX_BUDGET:
        raise InputError(f"--budgets must name windows of at most {MAX_BUDGET:,} tokens, got {text!r}")
    return sorted(set(budgets))  # one row each, in order: a budget named twice is scored once


def score(
    sessions: int, turns: int, budgets: list[int], policies: tuple[str, ...], progress: Any = None
) -> list[dict[str, Any]]:
    """One row per (policy, budget): mean final retention and lowest retention."""
    from context_core import PromptCacheWarning
    from context_core.cli.demo_session import TOOLS, write_session
    from context_core.cli.replay import replay

    rows = []
    total, done = len(policies) * len(budgets) * sessions, 0
    with tempfile.TemporaryDirectory(prefix="context-core-eval-") as root, warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptCacheWarning)
        generated = [write_session(Path(root) / f"s{seed}.jsonl", turns, seed) for seed in range(sessions)]
        for policy in policies:
            for budget in budgets:
                finals, lows = [], []
                for seed, messages in enumerate(generated):
                    result = replay(
                        messages,
                        TOOLS,
                        model="gpt-4o",
                        provider="openai",
                        budget=budget,
                        policy=policy,
                        directory=str(Path(root) / f"{policy}-{budget}-{seed}"),
                    )
                    summary = result.summary()
                    if summary["constraints"]:
                        finals.append(summary["retained_final"] / summary["constraints"])
                        lows.append(summary["retention_min"])
                    done += 1
                    if progress is not None:
                        progress(done, total)
                rows.append(
                    {
                        "policy": policy,
                        "budget": budget,
                        "retention": round(sum(finals) / len(finals), 4) if finals else None,
                        "lowest": round(min(lows), 4) if lows else None,
                    }
                )
    return rows


def _pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only; checked before the
    evaluation runs, so a missing extra does not throw its results away."""
    try:
        import matplotlib  # the plot extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'context-core[plot]'") from None
    return plt


def _plot_path(path: str) -> str:
    """Where ``--plot`` writes: ``path`` (with ``.png`` if it names no
    format), checked before the evaluation runs, so a format matplotlib
    cannot write or a missing directory does not throw the results away."""
    from matplotlib.backend_bases import FigureCanvasBase

    where = Path(path)
    if not where.suffix:
        where = where.with_name(where.name + ".png")
    formats = dict(FigureCanvasBase.get_supported_filetypes())
    if not any(shutil.which(tex) for tex in ("xelatex", "lualatex", "pdflatex")):
        formats.pop("pgf", None)  # written through a LaTeX program, which this machine lacks
    if where.suffix[1:].lower() not in formats:
        known = ", ".join(sorted(formats))
        raise InputError(
            f"--plot {path}: matplotlib cannot write {where.suffix} files here (it writes {known})"
        )
    if not where.parent.is_dir():
        raise InputError(f"--plot {path}: {where.parent} is not a directory")
    if where.is_dir():
        raise InputError(f"--plot {path}: {where} is a directory")
    existed = where.exists()
    try:  # opened for writing now, as the plot will be: refused here, not after the run
        with open(where, "ab"):
            pass
    except OSError as error:
        raise InputError(f"--plot {path}: cannot write {where}: {error.strerror or error}") from None
    if not existed:
        where.unlink(missing_ok=True)
    return str(where)


def _plot(rows: list[dict[str, Any]], path: str, plt: Any) -> None:
    figure, axes = plt.subplots(figsize=(7, 4.5))
    markers = iter("osD^v")
    for at, policy in enumerate(dict.fromkeys(r["policy"] for r in rows)):
        mine = [r for r in rows if r["policy"] == policy and r["retention"] is not None]
        budgets = [r["budget"] for r in mine]
        marker, color, size = next(markers, "o"), f"C{at}", max(4, 10 - 2 * at)
        # Policies often keep the same share: markers of their own keep each in sight.
        axes.plot(
            budgets,
            [r["retention"] * 100 for r in mine],
            marker=marker,
            markersize=size,
            color=color,
            label=f"{policy}, last call",
        )
        axes.plot(
            budgets,
            [r["lowest"] * 100 for r in mine],
            marker=marker,
            color=color,
            linestyle="--",
            alpha=0.6,
            fillstyle="none",
            label=f"{policy}, lowest",
        )
    budgets = sorted({r["budget"] for r in rows})
    axes.set_xscale("log", base=2)
    axes.set_xticks(budgets, [f"{b:,}" for b in budgets])
    axes.minorticks_off()
    axes.set_xlabel("budget (tokens)")
    axes.set_ylabel("constraints kept (%)")
    axes.set_ylim(0, 105)
    axes.set_title("Constraint retention by policy")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run_eval(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    import sys

    from context_core.cli import POLICIES
    from context_core.cli.replay import _progress

    if args.sessions < 1 or args.turns < 1:
        raise InputError("--sessions and --turns must be at least 1")
    budgets = _budgets(args.budgets)
    plt = _pyplot() if args.plot else None
    plot = _plot_path(args.plot) if args.plot else None
    update, stop = _progress(sys.stderr, "replays")
    try:
        rows = score(args.sessions, args.turns, budgets, POLICIES, update)
    finally:
        stop()
    if plot is not None:
        _plot(rows, plot, plt)
        print(f"wrote {plot}", file=sys.stderr)
    if args.json:
        write_json(rows, stdout)
        return 0
    from rich.table import Table

    from context_core.cli.console import console

    table = Table(
        title=f"Constraints kept at the last call ({args.sessions} sessions of {args.turns} turns;"
        " lowest on any call)"
    )
    table.add_column("policy")
    for budget in budgets:
        table.add_column(f"{budget:,}", justify="right")
    for policy in POLICIES:
        cells = []
        for budget in budgets:
            row = next(r for r in rows if r["policy"] == policy and r["budget"] == budget)
            cells.append(
                "n/a" if row["retention"] is None else f"{row['retention']:.0%} ({row['lowest']:.0%})"
            )
        table.add_row(policy, *cells)
    console(stdout, 120).print(table)
    return 0
