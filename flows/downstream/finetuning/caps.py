"""The caps of a recipe that bit: which splits were cut to fewer examples, how many examples
`max_length` truncated (a relation's: windowed around its entities), and which rows of a relation
task were left out for a missing or unbalanced entity marker.

A cap that bites changes what a score means (a validation sample, not the file; a tagger scored
on words it never saw), so each one is recorded in results.json and printed in the summary and
summary.md, with the key that sets it. A cap that did not bite is not mentioned.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from flows.downstream.settings import Recipe, recipe_key
from flows.downstream.tasks.encoding import EncodedSplit

SPLIT_CAPS = {
    "train": "train_examples",
    "validation": "validation_examples",
    "test": "test_examples",
}


def caps_record(
    task: str,
    recipe: Recipe,
    pools: dict[str, int],
    splits: dict[str, EncodedSplit],
    max_length: int,
    set_by_task: Collection[str],
    marker_drops: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`<task>.caps` of results.json. `pools` are the split sizes before their caps; train's cap
    is each seed's labelled sample (`train_examples`), drawn from the whole pool. `marker_drops`:
    a relation task's rows left out per split (flows/downstream/tasks/markers.py)."""
    record: dict[str, Any] = {}
    for split, field in SPLIT_CAPS.items():
        pool = pools[split]
        used = (
            min(recipe.train_examples or pool, pool)
            if split == "train"
            else len(splits[split].gold)
        )
        if used < pool:
            record[field] = {"used": used, "of": pool, "key": recipe_key(task, field, set_by_task)}
    truncated = {
        split: {"examples": encoded.truncated, "of": len(encoded.gold)}
        for split, encoded in splits.items()
        if encoded.truncated
    }
    if truncated:
        key = recipe_key(task, "max_length", set_by_task)
        record["max_length"] = {"value": max_length, "key": key, "truncated": truncated}
    if marker_drops:
        key = f"finetune.catalog.{task}.entity_markers"
        record["entity_markers"] = {"key": key, "dropped": marker_drops}
    return record


def caps_outputs(
    task: str, record: dict[str, Any], splits: dict[str, EncodedSplit]
) -> dict[str, Any]:
    """Flat outputs: truncated examples per split (0 when none) and the caps that bit, as text."""
    outputs: dict[str, Any] = {
        f"{task}.{split}_truncated_examples": encoded.truncated for split, encoded in splits.items()
    }
    outputs[f"{task}.caps"] = caps_text(record)
    return outputs


def caps_text(record: dict[str, Any]) -> str:
    """`validation 1,000 of 5,432 examples (finetune.validation_examples); max_length 64 ...`."""
    parts = []
    for split, field in SPLIT_CAPS.items():
        if field in record:
            cap = record[field]
            per_seed = " per seed" if split == "train" else ""
            parts.append(
                f"{split} {cap['used']:,} of {cap['of']:,} examples{per_seed} ({cap['key']})"
            )
    if "max_length" in record:
        cap = record["max_length"]
        shares = ", ".join(
            f"{split} {n['examples']:,} of {n['of']:,} ({n['examples'] / n['of']:.1%})"
            for split, n in cap["truncated"].items()
        )
        parts.append(f"max_length {cap['value']} ({cap['key']}) truncated {shares} examples")
    if "entity_markers" in record:
        cap = record["entity_markers"]
        left = ", ".join(
            f"{split} {n['dropped']:,} of {n['of']:,} (first: {', '.join(n['first'])})"
            for split, n in cap["dropped"].items()
        )
        parts.append(f"left out for a missing or unbalanced marker ({cap['key']}): {left} rows")
    if "carved" in record:  # a question-answering task's splits, carved by article or context
        parts.extend(f"{split} carved: {how}" for split, how in record["carved"].items())
    return "; ".join(parts)
