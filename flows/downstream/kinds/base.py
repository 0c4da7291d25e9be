"""What a task kind owns, as one protocol: a new kind is one module that implements it, and one
row of the registry (registry.py).

Before this protocol, each thing a kind decides (its scores, its bootstrap units, its per-class
figures, its baselines, how its splits are read and encoded) was a branch on `spec.kind` in the
module that needed it, so adding question answering touched 24 files. The callers (the finetune
stage, the recipe's runs, the up-front check of task files) now ask the task's kind instead, and
never name one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from flows.downstream.statistics.per_class import Report
from flows.downstream.tasks.encoding import EncodedSplit
from flows.downstream.tasks.prompting import PromptIds, PromptSettings
from flows.downstream.tasks.relation import MarkerIds
from flows.downstream.tasks.spec import TaskSpec
from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn
    from torch.utils.data import DataLoader


class RecipeView(Protocol):
    """The recipe fields a kind reads (flows/downstream/settings.py `Recipe` has them): a
    protocol, not the class, because the settings module reads the kinds (baselines, the
    up-front check) and a kind importing it back would be an import circle."""

    @property
    def prompt(self) -> PromptSettings | None: ...

    @property
    def stride(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    @property
    def classifier_dropout(self) -> float: ...

    @property
    def pooling(self) -> str: ...

    @property
    def relation_head(self) -> str: ...


class HeadInputs(Protocol):
    """What a kind's head is built from (flows/downstream/finetuning/recipe.py `TaskRun` has
    it): the task's labels and recipe, and the ids its encoding gave the head."""

    @property
    def labels(self) -> list[str]: ...

    @property
    def settings(self) -> RecipeView: ...

    @property
    def prompt(self) -> PromptIds | None: ...

    @property
    def markers(self) -> MarkerIds | None: ...


@dataclass(frozen=True)
class EncodeJob:
    """One task's splits to encode, and with what: the run's tokenizer (truncating at
    `max_length`) and its special token ids, or for the up-front check a stand-in tokenizer and
    the first rows (`stand_in`: the run's vocabulary does not exist yet, so nothing that looks a
    word up in it is checked)."""

    spec: TaskSpec
    recipe: RecipeView
    labels: list[str]
    splits: Mapping[str, list[Any]]
    tokenizer: Tokenizer
    special: Mapping[str, int]
    token_types: bool
    max_length: int
    stand_in: bool = False


@dataclass(frozen=True)
class Encoded:
    """Each split's token ids as the kind's head reads them, and the ids the head needs beside
    them: a prompt's mask and label words, or a relation's entity markers."""

    splits: dict[str, EncodedSplit]
    prompt: PromptIds | None = None
    markers: MarkerIds | None = None


@dataclass(frozen=True)
class SplitNotes:
    """What a kind's reading did to the splits, for results.json: a relation's rows left out per
    split for their markers (markers.py), a question-answering task's carved splits
    (qa_splits.py)."""

    marker_drops: dict[str, Any] = field(default_factory=dict)
    carved: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """A split's predictions as the kind's head's outputs decide them, and the rule fitted on the
    validation split that cut them: a multi-label task's threshold per label, in label order
    (None where the kind's outputs are its predictions)."""

    predictions: list[Any]
    thresholds: list[float] | None = None


class TaskKind(Protocol):
    """One kind of downstream task: everything that differs between kinds, so no caller
    branches on a kind's name. Predictions and gold are what the kind's head predicts and its
    examples hold (a label id, a tag list, reference answers)."""

    name: str
    # The kind's examples carry labels from the task's label set (a per-label report, a warning
    # for labels the test split lacks); an answer span does not.
    has_labels: bool
    # The head predicts answer spans over windows of a context, decoded after prediction
    # (flows/downstream/finetuning/qa_runs.py) and scored with the span skill beside.
    decodes_spans: bool
    # A prompt (finetune.prompt) can give the kind's examples their one label at a cloze's mask.
    prompts: bool

    def abstains(self, spec: TaskSpec, train: list[Any]) -> bool:
        """Whether the runs may answer nothing below a null-score threshold (SQuAD 2.0)."""
        ...

    def unused_fields(self, recipe: RecipeView) -> set[str]:
        """Recipe fields the kind's head ignores: out of the task's key, so setting one for
        another kind's sake moves no stored result of this one."""
        ...

    def score(
        self, gold: list[Any], predictions: Any, labels: list[str], negative: str | None
    ) -> dict[str, float]:
        """Every metric of the kind; the recipe picks the task's for selection. `negative`: a
        relation task's label of "no relation", out of its F1s."""
        ...

    def example_statistics(
        self, gold: Sequence[Any], predictions: Sequence[Any], labels: list[str]
    ) -> np.ndarray:
        """Per test example, the additive pieces of its metrics `(examples, k)`: the bootstrap's
        units (flows/downstream/statistics/bootstrap.py)."""
        ...

    def bootstrap_metric(
        self, metric: str, totals: np.ndarray, labels: list[str], negative: str | None
    ) -> np.ndarray:
        """`metric` of each row of summed example statistics `(replicates, k)`: the same
        figure `score` gives when every example weighs one (tests check it)."""
        ...

    def per_class(self, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
        """Precision, recall, F1 and support per class as the kind counts classes."""
        ...

    def fit_baseline(
        self, name: str, spec: TaskSpec, labels: list[str], splits: dict[str, list[Any]]
    ) -> tuple[Any, dict[str, float]]:
        """Test predictions of baseline `name` (one of spec.py's `BASELINES` for the kind)
        fitted on `splits["train"]`, and what it chose on validation."""
        ...

    def prepare_splits(
        self, spec: TaskSpec, splits: dict[str, list[Any]], data_dir: Path, seed: int
    ) -> SplitNotes:
        """The kind's own reading after the splits are read: rows it cannot use left out, splits
        carved the kind's way; in place. Run by the stage and the up-front check alike."""
        ...

    def encode(self, job: EncodeJob) -> Encoded:
        """Each split's token ids as the kind's head reads them; the stage and the up-front
        check (with a stand-in tokenizer) both encode through here."""
        ...

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        """The kind's head over an encoder of `config`, the encoder's weights from `source`
        (None: random init)."""
        ...

    def predict(self, model: nn.Module, loader: DataLoader) -> list[Any]:
        """The model's outputs over `loader`, per example in split order, as the kind reads
        them: a label id, tag ids, a label set, or a window's logits to decode."""
        ...

    def decide(
        self,
        outputs: list[Any],
        validation: Callable[[], list[Any]],
        gold: list[Any],
        labels: list[str],
    ) -> Decision:
        """A split's predictions from the head's `outputs` (`predict`'s), by a rule the kind fits
        on the validation split alone: `validation()` gives validation's outputs, asked only by a
        kind that fits one (the others never pay for the pass), `gold` validation's labels.
        Scoring validation passes its own outputs; scoring test, the chosen model's on
        validation: test never sets the rule."""
        ...

    def size_outputs(self, task: str, splits: Mapping[str, EncodedSplit]) -> dict[str, Any]:
        """What the kind reports about its encoded splits beside their sizes."""
        ...

    def report_outputs(
        self, task: str, arms: Mapping[str, Any], baselines: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The kind's own figures of a task's arms and baselines, beside the shared ones."""
        ...

    def summary(
        self, task: str, outputs: Mapping[str, Any], record: Mapping[str, Any], arms: list[str]
    ) -> str:
        """The kind's own section of summary.md for a task ("" for none)."""
        ...


class OneOutputPerExample:
    """The defaults of a kind whose head gives one output per example (a label, a tag list, a
    label set): it never abstains, keeps its splits as read, reads its predictions in split
    order as they come, takes them as they come (no rule fitted on validation), and adds no
    figures or summary section of its own. Its kinds subclass it and override what differs, so
    the defaults are written once."""

    def abstains(self, spec: TaskSpec, train: list[Any]) -> bool:
        return False

    def prepare_splits(
        self, spec: TaskSpec, splits: dict[str, list[Any]], data_dir: Path, seed: int
    ) -> SplitNotes:
        return SplitNotes()

    def predict(self, model: nn.Module, loader: DataLoader) -> list[Any]:
        from lightning_modules.classifier import predict

        return predict(model, loader)

    def decide(
        self,
        outputs: list[Any],
        validation: Callable[[], list[Any]],
        gold: list[Any],
        labels: list[str],
    ) -> Decision:
        return Decision(outputs)

    def size_outputs(self, task: str, splits: Mapping[str, EncodedSplit]) -> dict[str, Any]:
        return {}

    def report_outputs(
        self, task: str, arms: Mapping[str, Any], baselines: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {}

    def summary(
        self, task: str, outputs: Mapping[str, Any], record: Mapping[str, Any], arms: list[str]
    ) -> str:
        return ""
