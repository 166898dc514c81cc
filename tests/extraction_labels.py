"""Precision and recall of a memory extractor on the hand-labelled
conversations of ``tests/data/durable_labels.json``.

Each conversation labels some of its sentences ``durable`` (worth keeping
for later conversations: preferences, rules, decisions, facts, finished
work, lessons; with the memory kind it belongs to) or ``one_off`` (requests
for the moment, questions, status, narration). The labels were written
apart from the extractors, without reading them. An extracted memory counts
for the label whose sentence it contains or is contained in (after case and
space folding); one matching no label is reported as unlabelled, counted in
neither precision nor recall. Conversations alternate between a ``dev``
half, looked at while writing the extractors, and a ``held_out`` half,
never looked at.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LABELS = Path(__file__).parent / "data" / "durable_labels.json"

Extractor = Callable[[list[dict[str, Any]]], Iterable[tuple[str, str | None]]]
"""messages -> ``(text, kind or None)`` of each memory kept."""


def conversations(split: str = "all") -> list[dict[str, Any]]:
    data = json.loads(LABELS.read_text(encoding="utf-8"))
    if split == "all":
        return data
    return [c for i, c in enumerate(data) if (i % 2 == 0) == (split == "dev")]


def _fold(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".!?。！？")


@dataclass
class Score:
    durable: int = 0
    found: int = 0  # durable labels some memory matched
    kept_durable: int = 0  # memories matching a durable label
    kept_one_off: int = 0  # memories matching a one-off label
    unlabelled: int = 0
    kind_right: int = 0
    kind_checked: int = 0
    false: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        kept = self.kept_durable + self.kept_one_off
        return self.kept_durable / kept if kept else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.durable if self.durable else 1.0


def _label_of(text: str, labels: Sequence[tuple[str, str, str | None]]) -> tuple[str, str, str | None] | None:
    folded = _fold(text)
    for label in labels:
        if label[0] in folded or folded in label[0]:
            return label
    return None


def score(extract: Extractor, split: str = "all", *, kinds: frozenset[str] | None = None) -> Score:
    """``extract`` over the conversations of ``split``; ``kinds`` limits
    the durable labels counted for recall (a memory file keeps semantic
    ones only, say)."""
    out = Score()
    for conversation in conversations(split):
        labels = [(_fold(d["text"]), "durable", d["kind"]) for d in conversation["durable"]]
        labels += [(_fold(t), "one_off", None) for t in conversation["one_off"]]
        wanted = {d["text"] for d in conversation["durable"] if kinds is None or d["kind"] in kinds}
        out.durable += len(wanted)
        found = set()
        for text, kind in extract(conversation["messages"]):
            label = _label_of(text, labels)
            if label is None:
                out.unlabelled += 1
            elif label[1] == "one_off":
                out.kept_one_off += 1
                out.false.append(text)
            else:
                out.kept_durable += 1
                found.add(label[0])
                if kind is not None:
                    out.kind_checked += 1
                    out.kind_right += kind == label[2]
        for d in conversation["durable"]:
            if d["text"] in wanted:
                if _fold(d["text"]) in found:
                    out.found += 1
                else:
                    out.missed.append(d["text"])
    return out
