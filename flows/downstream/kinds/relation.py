"""Relation classification: one label per marked pair of entities in a text, read by a head over
the markers (flows/downstream/tasks/relation.py encodes, lightning_modules/models/relation_head.py
reads). A classification with its own F1s: SemEval-2010's, direction-aware, per relation type,
without the `negative_label` ("no relation"); its baselines are classification's, TF-IDF reading
the text with its markers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flows.core.logs import warn_once
from flows.downstream.kinds.base import Encoded, EncodeJob, HeadInputs, RecipeView, SplitNotes
from flows.downstream.kinds.classification import Classification
from flows.downstream.statistics.bootstrap import confusion_metric
from flows.downstream.statistics.per_class import Report, class_scores, per_class_markdown
from flows.downstream.tasks.markers import check_train_markers, keep_marked
from flows.downstream.tasks.relation import add_marker_tokens, encode_relations, type_matrix
from flows.downstream.tasks.spec import TaskSpec
from lightning_modules.label_metrics import relation_counts, relation_scores, relation_type
from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn

log = logging.getLogger(__name__)


def relation_names(labels: list[str]) -> list[str]:
    """A label list's relation types, in its order (`Cause-Effect(e1,e2)` -> `Cause-Effect`)."""
    return list(dict.fromkeys(relation_type(label) for label in labels))


def keep_relations(
    spec: TaskSpec, data_dir: Path, splits: dict[str, list[Any]]
) -> dict[str, dict[str, Any]]:
    """Each split less its rows without every marker once, in order (markers.py); the drops of
    the splits that had any. A train split left with no row is the markers' fault."""
    drops, train = {}, splits["train"]
    for split, examples in splits.items():
        splits[split], dropped = keep_marked(examples, spec.markers())
        if dropped.dropped:
            drops[split] = dropped.record()
            warn_once(
                log,
                "task %s: %d of %d %s rows lack a marker of %s or hold one unbalanced, left out "
                "(first: %s)",
                spec.name,
                dropped.dropped,
                dropped.read,
                split,
                spec.markers(),
                ", ".join(dropped.first),
            )
    if not splits["train"]:
        check_train_markers(spec, train, str(spec.source("train", data_dir)))
    return drops


class Relation(Classification):
    """Scored on relation macro- and micro-F1 (and accuracy), per relation type."""

    name = "relation"
    prompts = False  # a prompt reads a text's sentence, not a marked pair

    def unused_fields(self, recipe: RecipeView) -> set[str]:
        """The head reads the markers' positions (`relation_head`), no pooling and no stride."""
        return {"pooling", "doc_stride"}

    def score(
        self, gold: list[Any], predictions: Any, labels: list[str], negative: str | None
    ) -> dict[str, float]:
        import torch  # a score runs in the stage, never while a config is only validated

        from lightning_modules.metrics import accuracy

        names = [labels[label] for label in gold], [labels[label] for label in predictions]
        correct = accuracy(torch.tensor(predictions), torch.tensor(gold))
        return {"accuracy": correct, **relation_scores(*names, negative)}

    def bootstrap_metric(
        self, metric: str, totals: np.ndarray, labels: list[str], negative: str | None
    ) -> np.ndarray:
        return confusion_metric(metric, totals, len(labels), type_matrix(labels, negative))

    def per_class(self, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
        """Per relation type, direction-aware, as its F1s count."""
        counts = relation_counts([labels[g] for g in gold], [labels[p] for p in predictions])
        return {name: class_scores(*counts.get(name, (0, 0, 0))) for name in relation_names(labels)}

    def prepare_splits(
        self, spec: TaskSpec, splits: dict[str, list[Any]], data_dir: Path, seed: int
    ) -> SplitNotes:
        return SplitNotes(marker_drops=keep_relations(spec, data_dir, splits))

    def encode(self, job: EncodeJob) -> Encoded:
        """The text with its markers as tokens of their own (added to the tokenizer here)."""
        markers = add_marker_tokens(job.tokenizer, job.spec.markers())
        encoded = {
            name: encode_relations(job.tokenizer, examples, markers, job.max_length)
            for name, examples in job.splits.items()
        }
        return Encoded(encoded, markers=markers)

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        """The relation head over the encoder, its table grown by the markers' rows: drawn from
        the run's seed (`train_once` seeded torch with it), the same in every arm."""
        import torch

        from lightning_modules.models.relation_head import (
            BertForRelationClassification,
            extend_word_embeddings,
        )
        from lightning_modules.models.serialization import load_encoder_weights

        assert run.markers is not None
        recipe = run.settings
        model = BertForRelationClassification(
            config,
            len(run.labels),
            recipe.classifier_dropout,
            recipe.relation_head,
            run.markers.starts,
        )
        if source is not None:
            load_encoder_weights(model.encoder, source)
        extend_word_embeddings(model.encoder, run.markers.all, torch.initial_seed())
        return model

    def summary(
        self, task: str, outputs: Mapping[str, Any], record: Mapping[str, Any], arms: list[str]
    ) -> str:
        """The per-type table: a relation's macro-F1 averages its rows."""
        return per_class_markdown(task, dict(record), arms)


RELATION = Relation()
