"""Downstream metrics from label names: entity-level scores from IOB2 tags, and relation types.

Plain Python: a task's relation types are read while its files are checked, before torch loads.
"""

from __future__ import annotations

Span = tuple[str, int, int]


def entity_spans(tags: list[str]) -> set[Span]:
    """`(type, start, end)` spans of an IOB2 sequence, end exclusive, with seqeval's semantics.

    As seqeval and conlleval do (their default, non-strict mode): an `I-X` with no open `X` entity
    (after `O`, or after another type) starts a new entity instead of being dropped, and a type
    change ends the open entity.
    """
    spans: set[Span] = set()
    open_type: str | None = None
    start = 0
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, kind = tag.partition("-")
        continues = prefix == "I" and kind == open_type
        if open_type is not None and not continues:
            spans.add((open_type, start, position))
            open_type = None
        if prefix in ("B", "I") and not continues:
            open_type, start = kind, position
    return spans


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Entity-level precision, recall and F1 with exact span (and type) match, micro-averaged."""
    true_positive = predicted_total = gold_total = 0
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        gold_spans, predicted_spans = entity_spans(gold_tags), entity_spans(predicted_tags)
        true_positive += len(gold_spans & predicted_spans)
        predicted_total += len(predicted_spans)
        gold_total += len(gold_spans)
    precision = true_positive / predicted_total if predicted_total else 0.0
    recall = true_positive / gold_total if gold_total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"entity_precision": precision, "entity_recall": recall, "entity_f1": f1}


def relation_type(label: str) -> str:
    """`Cause-Effect(e1,e2)` -> `Cause-Effect`: a label's trailing parenthesis is the direction
    of its relation (SemEval-2010 Task 8); a label without one is its own type."""
    name, parenthesis, _ = label.partition("(")
    return name if parenthesis and label.endswith(")") else label


RelationCounts = dict[str, tuple[int, int, int]]  # type -> (true positive, predicted, gold)


def relation_counts(gold: list[str], predicted: list[str]) -> RelationCounts:
    """Per relation type: exact-label hits, predictions of the type, gold examples of the type.

    A prediction of the right relation in the wrong direction counts as a prediction of its type
    and is not a hit: SemEval-2010's official scoring, "(9+1)-way, directionality taken into
    account", of which the primary figure is the macro-F1 below.
    """
    counts: dict[str, list[int]] = {}
    for truth, guess in zip(gold, predicted, strict=True):
        counts.setdefault(relation_type(truth), [0, 0, 0])[2] += 1
        counts.setdefault(relation_type(guess), [0, 0, 0])[1] += 1
        if truth == guess:
            counts[relation_type(truth)][0] += 1
    return {name: (hits, guessed, support) for name, (hits, guessed, support) in counts.items()}


def relation_scores(
    gold: list[str], predicted: list[str], negative: str | None
) -> dict[str, float]:
    """Micro- and macro-F1 over the relation types of the gold labels, the negative label's type
    ("Other", "false") excluded, direction-aware (`relation_counts`), as the official SemEval-2010
    scorer computes them: macro averages the types' F1, and a prediction of a type absent from the
    gold labels counts as a prediction of the negative label."""
    counts = {name: count for name, count in relation_counts(gold, predicted).items() if count[2]}
    if negative is not None:
        counts.pop(relation_type(negative), None)
    f1s = [2 * hits / (guessed + support) for hits, guessed, support in counts.values()]
    hits = sum(count[0] for count in counts.values())
    guessed = sum(count[1] for count in counts.values())
    support = sum(count[2] for count in counts.values())
    return {
        "micro_f1": 2 * hits / (guessed + support) if guessed + support else 0.0,
        "macro_f1": sum(f1s) / len(f1s) if f1s else 0.0,
    }
