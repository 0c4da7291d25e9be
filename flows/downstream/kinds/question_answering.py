"""Extractive question answering (SQuAD 1.1 and 2.0): an answer is a span of the context, found
by a span head over windows of the context (flows/downstream/tasks/qa_encoding.py), decoded after
prediction with SQuAD 2.0's null-score threshold (flows/downstream/finetuning/qa_runs.py). Scored
with the official evaluation's exact match and F1, means over questions; the classes of its
per-class report are HasAns and NoAns. Baselines: `no_answer` and `lexical_overlap`
(flows/downstream/finetuning/qa_baselines.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flows.downstream.finetuning.qa_baselines import fit_qa_baseline
from flows.downstream.kinds.base import (
    Decision,
    Encoded,
    EncodeJob,
    HeadInputs,
    RecipeView,
    SplitNotes,
)
from flows.downstream.statistics.bootstrap import ratio
from flows.downstream.statistics.per_class import Report
from flows.downstream.statistics.qa_report import qa_markdown, qa_outputs
from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.qa_encoding import encode_questions, window_outputs
from flows.downstream.tasks.qa_splits import (
    carve_qa_splits,
    drop_unanswerable,
    unanswerable_per_file,
    warn_never_abstains,
)
from flows.downstream.tasks.spec import TaskSpec
from flows.downstream.tasks.squad import check_unanswerable
from lightning_modules.models.config import EncoderConfig
from lightning_modules.squad_metrics import QA_METRICS, example_scores, has_answer, squad_scores

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn
    from torch.utils.data import DataLoader


def question_splits(
    spec: TaskSpec, splits: dict[str, list[Any]], data_dir: Path, seed: int
) -> dict[str, str]:
    """A QA task's splits checked against its `unanswerable` setting, carved where missing
    (qa_splits.py), then answerable-only under `unanswerable: drop`; says what it carved."""
    check_unanswerable(spec, splits["train"], str(spec.source("train", data_dir)))
    counts = unanswerable_per_file(spec, splits, data_dir)
    carved = carve_qa_splits(spec, splits, seed)
    if spec.unanswerable == "drop":
        drop_unanswerable(spec, splits, counts)
    warn_never_abstains(spec, splits)
    return carved


def answer_groups(gold: list[Any], predictions: list[Any]) -> Report:
    """SQuAD 2.0's HasAns and NoAns questions, each with its mean F1 (no precision or recall: an
    answer is scored against references, not a class)."""
    groups: dict[str, list[float]] = {"HasAns": [], "NoAns": []}
    for answers, predicted in zip(gold, predictions, strict=True):
        groups["HasAns" if has_answer(answers) else "NoAns"].append(
            example_scores(answers, predicted)[1]
        )
    return {
        name: {
            "precision": None,
            "recall": None,
            "f1": sum(scores) / len(scores) if scores else None,
            "support": len(scores),
        }
        for name, scores in groups.items()
    }


class QuestionAnswering:
    """Answers as spans of a context; no label set."""

    name = "question_answering"
    has_labels = False
    decodes_spans = True
    prompts = False

    def abstains(self, spec: TaskSpec, train: list[Any]) -> bool:
        """As the task says (`drop`: never, its unanswerable questions are left out), else as
        its train split holds unanswerable questions."""
        if spec.unanswerable is not None:
            return spec.unanswerable is True
        return any(not example.answers for example in train)

    def unused_fields(self, recipe: RecipeView) -> set[str]:
        """A span head reads no pooling, no relation head and no classifier dropout; only it
        reads `doc_stride`."""
        return {"pooling", "relation_head", "classifier_dropout"}

    def score(
        self, gold: list[Any], predictions: Any, labels: list[str], negative: str | None
    ) -> dict[str, float]:
        """Predictions are answer texts, scored against each question's references."""
        return squad_scores(gold, predictions)

    def example_statistics(
        self, gold: Sequence[Any], predictions: Sequence[Any], labels: list[str]
    ) -> np.ndarray:
        """`(exact match, F1, 1)` of the question: its metrics are means."""
        rows = [(*example_scores(a, p), 1.0) for a, p in zip(gold, predictions, strict=True)]
        return np.asarray(rows, dtype=np.float64).reshape(-1, 3)

    def bootstrap_metric(
        self, metric: str, totals: np.ndarray, labels: list[str], negative: str | None
    ) -> np.ndarray:
        return ratio(totals[:, QA_METRICS.index(metric)], totals[:, 2])

    def per_class(self, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
        return answer_groups(gold, predictions)

    def fit_baseline(
        self, name: str, spec: TaskSpec, labels: list[str], splits: dict[str, list[Any]]
    ) -> tuple[Any, dict[str, float]]:
        if name in ("no_answer", "lexical_overlap"):
            return fit_qa_baseline(name, spec.metric, splits)
        raise ValueError(f"unknown baseline {name!r}")  # TaskSpec validates names first

    def prepare_splits(
        self, spec: TaskSpec, splits: dict[str, list[Any]], data_dir: Path, seed: int
    ) -> SplitNotes:
        return SplitNotes(carved=question_splits(spec, splits, data_dir, seed))

    def encode(self, job: EncodeJob) -> Encoded:
        """Question and context as a pair, the context in windows `recipe.stride` apart."""
        return Encoded(
            {
                name: encode_questions(
                    job.tokenizer, examples, job.max_length, job.recipe.stride, job.token_types
                )
                for name, examples in job.splits.items()
            }
        )

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        """A start and an end logit per token."""
        from lightning_modules.models.qa_head import BertForQuestionAnswering
        from lightning_modules.models.serialization import load_encoder_weights

        model = BertForQuestionAnswering(config)
        if source is not None:
            load_encoder_weights(model.encoder, source)
        return model

    def predict(self, model: nn.Module, loader: DataLoader) -> list[Any]:
        from lightning_modules.classifier import predict_spans

        return predict_spans(model, loader)

    def decide(
        self,
        outputs: list[Any],
        validation: Callable[[], list[Any]],
        gold: list[Any],
        labels: list[str],
    ) -> Decision:
        """Window logits as they are: the runs decode them into answers with the null-score
        threshold fitted on validation (flows/downstream/finetuning/qa_runs.py)."""
        return Decision(outputs)

    def size_outputs(self, task: str, splits: Mapping[str, EncodedSplit]) -> dict[str, Any]:
        """How many windows each split's questions became."""
        return window_outputs(task, dict(splits))

    def report_outputs(
        self, task: str, arms: Mapping[str, Any], baselines: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Null-score thresholds per arm and every score of every baseline (qa_report.py)."""
        return qa_outputs(task, dict(arms), dict(baselines))

    def summary(
        self, task: str, outputs: Mapping[str, Any], record: Mapping[str, Any], arms: list[str]
    ) -> str:
        return qa_markdown(dict(outputs), task)


QUESTION_ANSWERING = QuestionAnswering()
