"""Splits of a question-answering task that cannot leak: whole articles, else whole contexts.

Questions on one paragraph share its text, and paragraphs of one article share its names and
facts: a split by question would score a model on text it trained on. So a split missing from
the config is carved out of train by article (`title`), or, where train holds too few articles to
spare one, by context. A task given one file has its test split carved too: the last articles of
the file, so the same questions are tested whatever the seed.

`unanswerable: drop` (answerable-only) leaves a task's unanswerable questions out of every split
after carving, so its splits are the SQuAD 2.0 task's less those questions: the same articles and
contexts, scored with plain EM/F1. What was left out is counted per file and said once.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

from flows.core.logs import warn_once
from flows.downstream.tasks.spec import TaskInputError, TaskSpec
from flows.downstream.tasks.squad import QAExample

log = logging.getLogger(__name__)

TEST_SHARE = 0.2  # of the articles, when test is carved from the one file
VALIDATION_SHARE = 0.1  # of the articles (or contexts), when validation is carved from train
MIN_ARTICLES = 10  # fewer left in train: validation is carved by context instead


def carve_groups(
    examples: list[QAExample], share: float, by: str, seed: int | None
) -> tuple[list[QAExample], list[QAExample], int]:
    """(kept, carved, groups carved): `share` of the groups, at least one, by article (`group`)
    or by context; the last ones in file order (`seed` None) or a seeded draw."""
    key = (lambda e: e.group) if by == "article" else (lambda e: e.context)
    groups = list(dict.fromkeys(key(example) for example in examples))
    count = max(1, round(share * len(groups)))
    if len(groups) < 2:
        raise TaskInputError(
            f"{examples[0].at if examples else 'the train split'}: the train split holds one "
            f"{by} only; a split carved from it would leave nothing to train on: give the task "
            "a test (and validation) file, or more articles"
        )
    chosen = set(groups[-count:] if seed is None else random.Random(seed).sample(groups, count))
    kept = [example for example in examples if key(example) not in chosen]
    carved = [example for example in examples if key(example) in chosen]
    return kept, carved, count


def articles(examples: list[QAExample]) -> int:
    return len({example.group for example in examples})


def carve_qa_splits(spec: TaskSpec, splits: dict[str, list[Any]], seed: int) -> dict[str, str]:
    """Fills a missing test (last articles of the file) and validation (a seeded draw of train's
    articles, or of its contexts when fewer than `MIN_ARTICLES` articles remain); says what it
    carved, for the summary's caps line."""
    carved: dict[str, str] = {}
    if "test" not in splits:
        splits["train"], splits["test"], count = carve_groups(
            splits["train"], TEST_SHARE, "article", None
        )
        carved["test"] = f"the last {count} article(s) of the train file"
    if "validation" not in splits:
        by = "article" if articles(splits["train"]) >= MIN_ARTICLES else "context"
        splits["train"], splits["validation"], count = carve_groups(
            splits["train"], VALIDATION_SHARE, by, seed
        )
        carved["validation"] = f"{count} {by}(s) of train, drawn with seed {seed}"
    return carved


def unanswerable_per_file(
    spec: TaskSpec, splits: dict[str, list[Any]], data_dir: Path
) -> dict[str, tuple[int, int]]:
    """(unanswerable, questions) of each file read, before any split is carved from it; a file
    that two splits name is counted once."""
    counts: dict[str, tuple[int, int]] = {}
    for split, examples in splits.items():
        unanswerable = sum(not example.answers for example in examples)
        counts.setdefault(str(spec.source(split, data_dir)), (unanswerable, len(examples)))
    return counts


def drop_unanswerable(
    spec: TaskSpec, splits: dict[str, list[Any]], counts: dict[str, tuple[int, int]]
) -> None:
    """Answerable-only: every split less its unanswerable questions, one warning per file that
    held any; a split left with none is refused."""
    key = f"finetune.catalog.{spec.name}.unanswerable=drop"
    for source, (unanswerable, questions) in counts.items():
        if unanswerable:
            warn_once(
                log,
                "task %s: %s holds %d unanswerable question(s) of %d, left out of every split (%s)",
                spec.name,
                source,
                unanswerable,
                questions,
                key,
            )
    for split, examples in splits.items():
        splits[split] = [example for example in examples if example.answers]
        if not splits[split]:
            raise TaskInputError(
                f"task {spec.name}: every question of its {split} split ({len(examples)}) is "
                f"unanswerable, and {key} leaves them all out; give the {split} split answerable "
                f"questions, or remove unanswerable (SQuAD 2.0 scoring)"
            )


def warn_never_abstains(spec: TaskSpec, splits: dict[str, list[Any]]) -> None:
    """A v1.1 train split (no unanswerable question) beside validation or test questions that
    are unanswerable: no run abstains, so each of those scores 0; said once, with the fix."""
    if spec.unanswerable is not None or any(not e.answers for e in splits["train"]):
        return
    held = {
        split: sum(not example.answers for example in splits[split])
        for split in ("validation", "test")
    }
    if any(held.values()):
        warn_once(
            log,
            "task %s: its train split holds no unanswerable question (SQuAD v1.1), so no run "
            "abstains, but %s; each scores 0: set finetune.catalog.%s.unanswerable=drop to "
            "leave them out (answerable-only EM/F1), or train on a v2.0 file",
            spec.name,
            " and ".join(
                f"{count} of {len(splits[split])} {split} questions are unanswerable"
                for split, count in held.items()
                if count
            ),
            spec.name,
        )
