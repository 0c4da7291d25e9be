"""Classification: one label per text or text pair, read by a pooled head or, with a prompt, by
the MLM head at a cloze's mask (a head variant of the same kind: same labels, scores, baselines).

Baselines: `majority` gives every test example the most frequent train label; `tfidf_logreg` is
TF-IDF over word uni- and bigrams (one bag over both texts of a pair, a relation's text with its
entity markers), logistic regression with its C chosen on the validation split (0.01 to 1000: a
weak C grid would flatter the encoder). Multi-label's TF-IDF baseline reads the same features
and chooses its C the same way (`tfidf_features`, `best_c`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from flows.downstream.kinds.base import (
    Encoded,
    EncodeJob,
    HeadInputs,
    OneOutputPerExample,
    RecipeView,
)
from flows.downstream.statistics.bootstrap import confusion_cells, confusion_metric
from flows.downstream.statistics.per_class import Report, class_scores
from flows.downstream.tasks.encoding import encode
from flows.downstream.tasks.prompting import PromptIds, encode_prompted, label_word_ids
from flows.downstream.tasks.readers import LabelSetExample, TextExample
from flows.downstream.tasks.spec import TaskSpec, recipe_key
from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn

C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
Scorer = Callable[[list[Any], Any, list[str], str | None], dict[str, float]]
Fit = TypeVar("Fit")


def majority(train: list[TextExample], evaluate: list[TextExample]) -> list[int]:
    counts = Counter(example.label for example in train)
    most = max(sorted(counts), key=lambda label: counts[label])  # the lowest id of equals
    return [most] * len(evaluate)


def joined(example: TextExample | LabelSetExample) -> str:
    return example.text if example.pair is None else f"{example.text} {example.pair}"


def tfidf_features(splits: dict[str, list[Any]]) -> tuple[Any, Any, Any]:
    """Train, validation and test as TF-IDF rows over word uni- and bigrams, the vocabulary and
    weights fitted on train: the features of every kind's TF-IDF baseline."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    train = vectorizer.fit_transform([joined(example) for example in splits["train"]])
    validation, test = (
        vectorizer.transform([joined(example) for example in splits[name]])
        for name in ("validation", "test")
    )
    return train, validation, test


def best_c(fit: Callable[[float], tuple[float, Fit]]) -> tuple[float, Fit]:
    """The C of `C_GRID` whose fit scores best on validation (the lowest of equals), and that
    fit: `fit(C)` gives (validation score, the fitted model and what it chose beside C).
    Ascending, so an estimator with warm starts begins each fit at the last optimum of the same
    convex problem, which halves the solver's iterations."""
    best: tuple[float, float, Fit] | None = None
    for c in C_GRID:
        validation_score, fitted = fit(c)
        if best is None or validation_score > best[0]:
            best = (validation_score, c, fitted)
    assert best is not None
    return best[1], best[2]


def tfidf_logreg(
    spec: TaskSpec,
    labels: list[str],
    splits: dict[str, list[TextExample]],
    score: Scorer,
) -> tuple[list[int], dict[str, float]]:
    """Test predictions of the C whose `score` (the task kind's) is best on validation."""
    from sklearn.linear_model import LogisticRegression

    train, validation, test = splits["train"], splits["validation"], splits["test"]
    targets = [example.label for example in train]
    if len(set(targets)) < 2:  # logistic regression needs two classes; so does any learner
        return majority(train, test), {"C": 0.0}
    features, held_out, test_features = tfidf_features(splits)
    gold = [example.label for example in validation]
    model = LogisticRegression(max_iter=1000, warm_start=True)

    def fit(c: float) -> tuple[float, Any]:
        model.set_params(C=c).fit(features, targets)
        predicted = model.predict(held_out).tolist()
        validation_score = score(gold, predicted, labels, spec.negative_label)[spec.metric]
        return validation_score, copy.deepcopy(model)

    c, best = best_c(fit)
    return best.predict(test_features).tolist(), {"C": c}


class Classification(OneOutputPerExample):
    """One label per example, scored on accuracy, macro-F1, MCC (and F1 for two labels)."""

    name = "classification"
    has_labels = True
    decodes_spans = False
    prompts = True

    def unused_fields(self, recipe: RecipeView) -> set[str]:
        """A prompt reads the MLM head, so neither pooling nor the classifier's dropout."""
        head = {"pooling", "classifier_dropout"} if recipe.prompt is not None else set()
        return {*head, "relation_head", "doc_stride"}

    def score(
        self, gold: list[Any], predictions: Any, labels: list[str], negative: str | None
    ) -> dict[str, float]:
        import torch  # a score runs in the stage, never while a config is only validated

        from lightning_modules.metrics import accuracy, binary_f1, macro_f1, matthews_corrcoef

        predicted, truth = torch.tensor(predictions), torch.tensor(gold)
        scores = {
            "accuracy": accuracy(predicted, truth),
            "macro_f1": macro_f1(predicted, truth, len(labels)),
            "mcc": matthews_corrcoef(predicted, truth, len(labels)),
        }
        if len(labels) == 2:
            scores["f1"] = binary_f1(predicted, truth, positive=1)
        return scores

    def example_statistics(
        self, gold: Sequence[Any], predictions: Sequence[Any], labels: list[str]
    ) -> np.ndarray:
        """The one-hot cell of an `L x L` confusion matrix."""
        return confusion_cells(gold, predictions, len(labels))

    def bootstrap_metric(
        self, metric: str, totals: np.ndarray, labels: list[str], negative: str | None
    ) -> np.ndarray:
        return confusion_metric(metric, totals, len(labels))

    def per_class(self, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
        hits: Counter[str] = Counter()
        predicted: Counter[str] = Counter()
        support: Counter[str] = Counter()
        for truth, guess in zip(gold, predictions, strict=True):
            support[labels[truth]] += 1
            predicted[labels[guess]] += 1
            hits[labels[truth]] += int(truth == guess)
        return {name: class_scores(hits[name], predicted[name], support[name]) for name in labels}

    def fit_baseline(
        self, name: str, spec: TaskSpec, labels: list[str], splits: dict[str, list[Any]]
    ) -> tuple[Any, dict[str, float]]:
        if name == "majority":
            return majority(splits["train"], splits["test"]), {}
        if name == "tfidf_logreg":
            return tfidf_logreg(spec, labels, splits, self.score)
        raise ValueError(f"unknown baseline {name!r}")  # TaskSpec validates names first

    def encode(self, job: EncodeJob) -> Encoded:
        """Plain token ids, or with a prompt the template's cloze and each label's word id (not
        looked up in a stand-in's vocabulary, which has no words)."""
        prompt = job.recipe.prompt
        if prompt is None:
            return Encoded(
                {
                    name: encode(job.tokenizer, examples, job.token_types)
                    for name, examples in job.splits.items()
                }
            )
        key = recipe_key(job.spec.name, "prompt", job.spec.recipe)
        special = dict(job.special)
        encoded = {
            name: encode_prompted(
                job.tokenizer, examples, prompt.template, special, job.max_length, key
            )
            for name, examples in job.splits.items()
        }
        if job.stand_in:
            return Encoded(encoded)
        words = label_word_ids(job.tokenizer, prompt, job.labels, key)
        return Encoded(encoded, PromptIds(job.special["mask"], words))

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        """A pooled head; with a prompt, the MLM head at the mask (its weights from `source`)."""
        from lightning_modules.models.prompt_head import PromptClassifier
        from lightning_modules.models.serialization import load_masked_lm_weights

        if run.prompt is not None:
            prompted = PromptClassifier(config, run.prompt.labels, run.prompt.mask)
            if source is not None:
                load_masked_lm_weights(prompted.masked_lm, source)
            return prompted
        return pooled_head(config, run, source)


def pooled_head(config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
    """One logit per label over the pooled encoder (classification; multi-label reads each
    through a sigmoid), the encoder's weights from `source` (None: random init)."""
    from lightning_modules.models.heads import BertForSequenceClassification
    from lightning_modules.models.serialization import load_encoder_weights

    recipe = run.settings
    model = BertForSequenceClassification(
        config, len(run.labels), recipe.classifier_dropout, recipe.pooling
    )
    if source is not None:
        load_encoder_weights(model.encoder, source)
    return model


CLASSIFICATION = Classification()
