"""One task, both arms, n seeds: the runs behind a lift that a tuned control cannot erase.

Per arm, the learning rate is chosen on the validation split from `finetune.learning_rates`
(mean score over the first `finetune.grid_seeds` seeds, by default the first alone), then the
remaining seeds train at that rate. Each run keeps its best validation epoch (early stopping with
`finetune.patience` under a generous `finetune.epochs`); a run whose best epoch is the last
allowed may still have been improving and is flagged `capped`; an arm whose chosen rate is the
lowest or highest of the grid is flagged `grid_edge`. A question-answering task breaks ties of
its metric (every rate, or every epoch, at the score of abstaining everywhere) on the span F1 of
validation (qa_runs.py); a grid whose every rate tied is flagged `tied`. In limited-label mode
each seed trains on its own labelled sample. Test scores are computed once per run, after
training, and never steer a choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import Logger
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from flows.downstream.finetuning.pruning import GridPruning
from flows.downstream.finetuning.qa_runs import Decoded, decoded_answers, span_scores
from flows.downstream.finetuning.results import ArmResult, RunResult
from flows.downstream.kinds.base import TaskKind
from flows.downstream.kinds.registry import kind_of
from flows.downstream.settings import Recipe
from flows.downstream.tasks.encoding import EncodedSplit, Item
from flows.downstream.tasks.load import train_sample
from flows.downstream.tasks.prompting import PromptIds
from flows.downstream.tasks.relation import MarkerIds
from flows.downstream.tasks.spec import ARMS, BASE_ARM, STUDENT_ARM, TaskSpec
from flows.training.settings import TrainerSettings
from flows.training.trainer import make_trainer
from lightning_modules.classifier import (
    BestEpoch,
    FinetuneModule,
    LengthGroups,
    LengthOrder,
    predict_spans,
)
from lightning_modules.models.config import IGNORE_INDEX, EncoderConfig
from lightning_modules.optim_settings import OptimizerSettings
from lightning_modules.progress import ProgressLog, runs_progress

LoggerFactory = Callable[[str, str], Sequence[Logger]]  # (task, run label) -> loggers


class SplitDataset(Dataset[Item]):
    """An encoded split as the DataLoader reads it (encoding.py keeps splits free of torch)."""

    def __init__(self, split: EncodedSplit) -> None:
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, position: int) -> Item:
        return self.split[position]


def pad_batch(items: list[Item], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(item["input_ids"]) for item in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(items), width), dtype=torch.long)
    # A list of labels is a sentence's tags, one per token; a tuple, a multi-label example's
    # multi-hot targets (flows/downstream/kinds/multi_label.py), one row like a label id.
    tagged = isinstance(items[0]["labels"], list)
    labels = (
        torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long)
        if tagged
        else torch.tensor([item["labels"] for item in items])
    )
    attention_mask = torch.zeros((len(items), width), dtype=torch.bool)
    for row, item in enumerate(items):
        length = len(item["input_ids"])
        input_ids[row, :length] = torch.tensor(item["input_ids"])
        token_type_ids[row, :length] = torch.tensor(item["token_type_ids"])
        attention_mask[row, :length] = True
        if tagged:
            labels[row, :length] = torch.tensor(item["labels"])
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "labels": labels,
    }


def rate_beyond(grid: list[float], chosen: float) -> float | None:
    """The rate one grid step past the end of `grid` that `chosen` sits at (the step: the ratio
    of that end's two rates); None when `chosen` lies inside."""
    ordered = sorted(set(grid))
    if len(ordered) < 2 or ordered[0] < chosen < ordered[-1]:
        return None
    if chosen == ordered[-1]:
        return ordered[-1] * ordered[-1] / ordered[-2]
    return ordered[0] * ordered[0] / ordered[1]


def grid_edge(chosen: float, grid: list[float], scores: Sequence[float] = ()) -> str | None:
    """Where the chosen rate sits in the grid, when that is an end of it; "tied" when every rate
    scored the same (`scores`, one per rate): no end was chosen for its score."""
    if len(set(grid)) < 2:
        return None
    if scores and len(set(scores)) == 1:
        return "tied"
    if chosen == min(grid):
        return "lowest"
    return "highest" if chosen == max(grid) else None


@dataclass(frozen=True)
class TaskRun:
    """What every run of one task shares."""

    spec: TaskSpec
    labels: list[str]
    splits: dict[str, EncodedSplit]
    settings: Recipe  # the task's: finetune.* with its catalog entry's `recipe:` on top
    log_every_steps: int
    trainer: TrainerSettings
    encoder: EncoderConfig
    pretrained_dir: Path
    pad_id: int
    work_dir: Path
    loggers_for: LoggerFactory
    # A third arm: a distilled student (its own shape), evaluated with the same recipe and seeds.
    student_dir: Path | None = None
    student_encoder: EncoderConfig | None = None
    # Prompt-based fine-tuning (settings.prompt): the mask and label-word ids the head reads.
    prompt: PromptIds | None = None
    # A third arm: the imported checkpoint the pretrained encoder continued, as it was imported.
    base_dir: Path | None = None
    # A relation task: its entity markers' token ids, added to the vocabulary (relation.py).
    markers: MarkerIds | None = None
    # A question-answering task answers nothing below a null-score threshold (SQuAD 2.0).
    unanswerable: bool = False

    @property
    def arms(self) -> tuple[str, ...]:
        student = () if self.student_dir is None else (STUDENT_ARM,)
        base = () if self.base_dir is None else (BASE_ARM,)
        return (*ARMS, *student, *base)

    def source(self, arm: str) -> Path | None:
        """The weights an arm starts from; None: random init."""
        return {
            "pretrained": self.pretrained_dir,
            STUDENT_ARM: self.student_dir,
            BASE_ARM: self.base_dir,
        }.get(arm)

    def grid(self, arm: str) -> tuple[list[float], int]:
        """The learning rates and most epochs `arm` is tuned over: a public checkpoint's weights
        (the base arm, and the pretrained one continuing it) on the grid for pretrained
        encoders, every other arm on the task's grid."""
        if self.base_dir is not None and arm in ("pretrained", BASE_ARM):
            return self.settings.pretrained_learning_rates, self.settings.pretrained_epochs
        return self.settings.learning_rates, self.settings.epochs

    def split(self, name: str, seed: int) -> EncodedSplit:
        """A split; for train, the seed's labelled sample of the pool (load.train_sample)."""
        data = self.splits[name]
        if name != "train":
            return data
        # Drawn over examples (a QA split's gold is per question, its items per window).
        positions = train_sample(len(data.gold), self.settings.train_examples, seed)
        return data if positions is None else data.subset(positions)

    def loader(self, split: str, seed: int, shuffle: bool = False) -> DataLoader:
        """Training batches shuffled by the seed, of like length unless `group_by_length` is
        off; scoring ones by length (predict restores the split's order)."""
        data = self.split(split, seed)
        lengths = [len(item["input_ids"]) for item in data.items]
        order: Sampler[int] | None = None  # the DataLoader shuffles, from the generator below
        if not shuffle:
            order = LengthOrder(lengths)
        elif self.settings.group_by_length:
            order = LengthGroups(lengths, self.settings.batch_size, seed)
        return DataLoader(
            SplitDataset(data),
            batch_size=self.settings.batch_size,
            shuffle=order is None,
            sampler=order,
            collate_fn=lambda items: pad_batch(items, self.pad_id),
            generator=torch.Generator().manual_seed(seed),
        )

    @property
    def kind(self) -> TaskKind:
        return kind_of(self.spec.kind)

    @property
    def question_answering(self) -> bool:
        """The head predicts answer spans, decoded after prediction (qa_runs.py)."""
        return self.kind.decodes_spans

    def predictor(self) -> Callable[[nn.Module, DataLoader], Any]:
        """What a model's outputs are read as: the kind's (window logits, labels, label sets)."""
        return self.kind.predict

    def decoded(self, split: str, logits: Any, validation: Any = None) -> Decoded:
        """A QA split's answers, threshold and best spans (qa_runs.decoded_answers)."""
        return decoded_answers(
            self.splits, split, logits, validation, self.unanswerable, self.spec.metric
        )

    def validation_score(self, predictions: Any) -> tuple[float, float]:
        """An epoch's validation (score, tiebreak) for BestEpoch: the task's metric, and a QA
        task's span F1 (answerable questions, abstention off; 0 without one), both read from
        one decoding of the window logits (decoding is most of a QA epoch's scoring time);
        -inf: no tiebreak."""
        metric = self.spec.metric
        if not self.question_answering:
            gold = self.splits["validation"].gold
            decided = self.kind.decide(predictions, lambda: predictions, gold, self.labels)
            return self.metrics("validation", decided.predictions)[metric], float("-inf")
        decoded = self.decoded("validation", predictions)
        spans = span_scores(self.splits["validation"].gold, decoded.spans)
        return self.metrics("validation", decoded.answers)[metric], spans.get("span_f1", 0.0)

    def test_predictions(self, model: nn.Module, seed: int) -> Decoded:
        """Test predictions, and a QA run's null-score threshold (fitted on validation first)
        and best spans, or the rule the kind fitted on validation (kinds/base.py `decide`)."""
        if not self.question_answering:
            test = self.kind.predict(model, self.loader("test", seed))
            decided = self.kind.decide(
                test,
                lambda: self.kind.predict(model, self.loader("validation", seed)),
                self.splits["validation"].gold,
                self.labels,
            )
            return Decoded(decided.predictions, None, [], decided.thresholds)
        validation = predict_spans(model, self.loader("validation", seed))
        test = predict_spans(model, self.loader("test", seed))
        return self.decoded("test", test, validation)

    def test_metrics(self, decoded: Decoded) -> dict[str, float]:
        """The task's test scores; a QA task's span skill beside them."""
        scores = self.metrics("test", decoded.answers)
        if self.question_answering:
            scores |= span_scores(self.splits["test"].gold, decoded.spans)
        return scores

    def metrics(self, split: str, predictions: Any) -> dict[str, float]:
        gold, negative = self.splits[split].gold, self.spec.negative_label
        return self.kind.score(gold, predictions, self.labels, negative)


def build_model(run: TaskRun, arm: str) -> nn.Module:
    settings = run.settings
    student = arm == STUDENT_ARM
    config = run.student_encoder if student else run.encoder
    assert config is not None
    if settings.encoder_dropout is not None:
        config = replace(
            config, dropout=settings.encoder_dropout, attention_dropout=settings.encoder_dropout
        )
    return kind_of(run.spec.kind).build_model(config, run, run.source(arm))


def train_once(
    run: TaskRun, arm: str, learning_rate: float, seed: int, pruning: GridPruning | None = None
) -> RunResult:
    """One fine-tuning run; the same seed gives both arms the same head init and data order.
    With `pruning`, a grid run stops once it trails its seed's leader too far."""
    settings = run.settings
    epochs = run.grid(arm)[1]
    pl.seed_everything(seed, workers=True, verbose=False)
    model = build_model(run, arm)
    steps = epochs * -(-len(run.split("train", seed)) // settings.batch_size)
    module = FinetuneModule(
        model,
        OptimizerSettings(
            learning_rate=learning_rate,
            weight_decay=settings.weight_decay,
            warmup_steps=int(settings.warmup_ratio * steps),
            total_steps=steps,
            beta2=settings.beta2,
            eps=settings.eps,
        ),
    )
    selector = BestEpoch(
        run.loader("validation", seed),
        run.validation_score,
        settings.patience,
        run.predictor(),
        None if pruning is None else pruning.behind,
    )
    label = f"{arm}-lr{learning_rate:g}-seed{seed}"
    trainer = make_trainer(
        run.trainer.model_copy(update={"accumulate_grad_batches": 1}),
        run.work_dir / run.spec.name / label,
        run.loggers_for(run.spec.name, label),
        [ProgressLog(run.log_every_steps, f"finetune/{run.spec.name}/{label}"), selector],
        max_epochs=epochs,
        enable_checkpointing=False,
    )
    trainer.fit(module, train_dataloaders=run.loader("train", seed, shuffle=True))
    selector.restore(model)
    with trainer.precision_plugin.forward_context():  # at the run's precision, as validation
        decoded = run.test_predictions(model, seed)
    return RunResult(
        arm,
        learning_rate,
        seed,
        selector.best_score,
        selector.best_epoch,
        selector.best_epoch == epochs,
        run.test_metrics(decoded),
        decoded.answers,
        decoded.threshold,
        selector.scores,
        selector.pruned,
        selector.best_tiebreak if run.question_answering else None,
        decoded.spans if run.question_answering else None,
        decoded.label_thresholds,
    )


def chosen_rate(grid: list[tuple[float, list[RunResult]]], scores: list[float]) -> int:
    """The rate (its position in `grid`) with the best mean validation score (`scores`); among
    equals, the best mean validation span F1 (a QA task's tiebreak), then the first. A rate with
    a pruned run is out."""
    tiebreaks = [fmean(r.validation_span_f1 or 0.0 for r in runs) for _, runs in grid]
    whole = [i for i, (_, runs) in enumerate(grid) if not any(r.pruned for r in runs)]
    return max(whole, key=lambda i: (scores[i], tiebreaks[i]))


def evaluate_arm(run: TaskRun, arm: str, seeds: list[int]) -> ArmResult:
    """Each rate of the grid scored on the first `grid_seeds` seeds (mean validation score; ties:
    the higher mean validation span F1 of a QA task, then the first; a rate with a pruned run is
    out), extended a rate at a time past the end it chose (`grid_extensions`), then the other
    seeds at the chosen rate."""
    rates = run.grid(arm)[0]
    tuning = seeds[: run.settings.grid_seeds]
    total = len(rates) * len(tuning) + len(seeds) - len(tuning)
    finished: list[RunResult] = []
    with runs_progress(f"finetune/{run.spec.name}/{arm} grid", total) as progress:

        def timed(rate: float, seed: int, pruning: GridPruning | None = None) -> RunResult:
            result = train_once(run, arm, rate, seed, pruning)
            finished.append(result)
            progress.finished(f"lr {rate:g}, seed {seed}" + (", pruned" if result.pruned else ""))
            return result

        def rival(seed: int) -> GridPruning | None:
            """The bar for a grid run of `seed`: the best finished unpruned run of that seed."""
            margin = run.settings.grid_pruning_margin
            runs = [r for r in finished if r.seed == seed and not r.pruned]
            if margin is None or not runs:
                return None
            leader = max(runs, key=lambda r: r.validation_score)
            return GridPruning(tuple(leader.validation_scores), margin)

        def scored(rate: float) -> tuple[float, list[RunResult]]:
            return rate, [timed(rate, seed, rival(seed)) for seed in tuning]

        grid = [scored(rate) for rate in rates]
        for _ in range(run.settings.grid_extensions):  # past the end validation chose, if any
            scores = [fmean(result.validation_score for result in runs) for _, runs in grid]
            tried = [rate for rate, _ in grid]
            beyond = rate_beyond(tried, grid[chosen_rate(grid, scores)][0])
            if beyond is None or len(set(scores)) == 1:  # all tied: no end was chosen
                break
            progress.grow(len(tuning))
            grid.append(scored(beyond))
        scores = [fmean(result.validation_score for result in runs) for _, runs in grid]
        chosen, runs = grid[chosen_rate(grid, scores)]
        result = ArmResult(
            chosen,
            {f"{rate:g}": score for (rate, _), score in zip(grid, scores, strict=True)},
            list(runs),
            grid_edge(chosen, [rate for rate, _ in grid], scores),
        )
        result.runs += [timed(chosen, seed) for seed in seeds[len(tuning) :]]
    return result
