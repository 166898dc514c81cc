"""The offline extractors on the hand-labelled conversations
(``tests/data/durable_labels.json``): precision and recall of what each
keeps (durable against one-off), on the half looked at while writing them
and on the half never looked at, and their cost per conversation."""

from __future__ import annotations

import pytest

from context_core.memory import extract_facts
from context_core.memory_store import extract_memories
from extraction_labels import conversations, score
from support import REPORTS

SEMANTIC = frozenset({"semantic"})


def _store(messages):
    return [(m.text, m.kind) for m in extract_memories(messages)]


def _files(messages):
    return [(f.text, None) for f in extract_facts(messages)]


@pytest.mark.parametrize(("impl", "extract"), [("memory store", _store), ("memory files", _files)])
def test_precision_and_recall(benchmark, impl, extract):
    benchmark.group = f"extraction: {impl}, all 48 labelled conversations"
    benchmark.extra_info["impl"] = "ours"
    data = conversations()
    for split in ("dev", "held_out"):
        every = score(extract, split)
        semantic = score(extract, split, kinds=SEMANTIC)
        kinds = f", kind right {every.kind_right}/{every.kind_checked}" if every.kind_checked else ""
        REPORTS.append(
            f"extraction, {impl}, {split}: precision {every.precision:.2f}"
            f" ({every.kept_durable}/{every.kept_durable + every.kept_one_off}),"
            f" recall {every.recall:.2f} ({every.found}/{every.durable}),"
            f" semantic recall {semantic.recall:.2f} ({semantic.found}/{semantic.durable}){kinds},"
            f" unlabelled kept {every.unlabelled}"
        )
        assert every.precision >= 0.9
    benchmark(lambda: [extract(c["messages"]) for c in data])
