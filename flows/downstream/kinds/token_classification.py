"""Token classification: an IOB2 tag per word (named entities), the tag on a word's first
sub-token (flows/downstream/tasks/encoding.py). Scored per entity span, on the whole sentence: words
cut off by `max_length` count as predicted `O`, so truncation costs recall, visibly.

Baseline: `seen_entities` tags every string that was an entity in train, with its most frequent
type, longest match first. A tagger that only memorises names scores this; the encoder must beat
it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flows.downstream.kinds.base import (
    Encoded,
    EncodeJob,
    HeadInputs,
    OneOutputPerExample,
    RecipeView,
)
from flows.downstream.statistics.bootstrap import count_metric
from flows.downstream.statistics.per_class import Report, class_scores
from flows.downstream.tasks.encoding import encode
from flows.downstream.tasks.readers import TaggedSentence
from flows.downstream.tasks.spec import TaskSpec
from lightning_modules.label_metrics import entity_scores, entity_spans
from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # torch: a head is built in the stage, never while a config is validated
    from torch import nn


def padded_tags(truth: Sequence[int], predicted: Sequence[int], labels: list[str]) -> list[str]:
    """A sentence's predicted tag names, `O` for the words past the truncated prediction."""
    return [labels[tag] for tag in predicted] + ["O"] * (len(truth) - len(predicted))


def entity_lexicon(train: list[TaggedSentence], labels: list[str]) -> dict[tuple[str, ...], str]:
    """Each entity string of train and the type it had most often."""
    types: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    for sentence in train:
        for kind, start, end in entity_spans([labels[tag] for tag in sentence.tags]):
            types[sentence.tokens[start:end]][kind] += 1
    return {words: counts.most_common(1)[0][0] for words, counts in types.items()}


def seen_entities(
    labels: list[str], train: list[TaggedSentence], test: list[TaggedSentence]
) -> list[list[int]]:
    lexicon = entity_lexicon(train, labels)
    longest = max((len(words) for words in lexicon), default=0)
    tag_id = {tag: position for position, tag in enumerate(labels)}
    predictions = []
    for sentence in test:
        tags = [tag_id["O"]] * len(sentence.tokens)
        position = 0
        while position < len(tags):
            for length in range(min(longest, len(tags) - position), 0, -1):
                kind = lexicon.get(sentence.tokens[position : position + length])
                if kind is not None and f"B-{kind}" in tag_id:
                    tags[position] = tag_id[f"B-{kind}"]
                    for inside in range(position + 1, position + length):
                        tags[inside] = tag_id.get(f"I-{kind}", tag_id["O"])
                    position += length - 1
                    break
            position += 1
        predictions.append(tags)
    return predictions


class TokenClassification(OneOutputPerExample):
    """Scored on entity F1, precision and recall (exact span and type)."""

    name = "token_classification"
    has_labels = True
    decodes_spans = False
    prompts = False

    def unused_fields(self, recipe: RecipeView) -> set[str]:
        """A tagging head scores every token: no pooling, no relation head, no stride."""
        return {"pooling", "relation_head", "doc_stride"}

    def score(
        self, gold: list[Any], predictions: Any, labels: list[str], negative: str | None
    ) -> dict[str, float]:
        predicted_tags = [
            padded_tags(truth, predicted, labels)
            for truth, predicted in zip(gold, predictions, strict=True)
        ]
        gold_tags = [[labels[tag] for tag in truth] for truth in gold]
        return entity_scores(gold_tags, predicted_tags)

    def example_statistics(
        self, gold: Sequence[Any], predictions: Sequence[Any], labels: list[str]
    ) -> np.ndarray:
        """`(true positive, predicted, gold)` entity counts of the sentence."""
        rows = []
        for truth, predicted in zip(gold, predictions, strict=True):
            gold_spans = entity_spans([labels[tag] for tag in truth])
            predicted_spans = entity_spans(padded_tags(truth, predicted, labels))
            rows.append((len(gold_spans & predicted_spans), len(predicted_spans), len(gold_spans)))
        return np.asarray(rows, dtype=np.float64).reshape(-1, 3)

    def bootstrap_metric(
        self, metric: str, totals: np.ndarray, labels: list[str], negative: str | None
    ) -> np.ndarray:
        return count_metric(metric, totals)

    def per_class(self, gold: list[Any], predictions: list[Any], labels: list[str]) -> Report:
        """Per entity type."""
        hits: Counter[str] = Counter()
        predicted: Counter[str] = Counter()
        support: Counter[str] = Counter()
        for truth, guess in zip(gold, predictions, strict=True):
            gold_spans = entity_spans([labels[tag] for tag in truth])
            predicted_spans = entity_spans(padded_tags(truth, guess, labels))
            support.update(span[0] for span in gold_spans)
            predicted.update(span[0] for span in predicted_spans)
            hits.update(span[0] for span in gold_spans & predicted_spans)
        names = sorted({label.partition("-")[2] for label in labels if label != "O"})
        return {name: class_scores(hits[name], predicted[name], support[name]) for name in names}

    def fit_baseline(
        self, name: str, spec: TaskSpec, labels: list[str], splits: dict[str, list[Any]]
    ) -> tuple[Any, dict[str, float]]:
        if name == "seen_entities":
            return seen_entities(labels, splits["train"], splits["test"]), {}
        raise ValueError(f"unknown baseline {name!r}")  # TaskSpec validates names first

    def encode(self, job: EncodeJob) -> Encoded:
        """Each word's tag on its first sub-token (encoding.py)."""
        return Encoded(
            {
                name: encode(job.tokenizer, examples, job.token_types)
                for name, examples in job.splits.items()
            }
        )

    def build_model(self, config: EncoderConfig, run: HeadInputs, source: Path | None) -> nn.Module:
        from lightning_modules.models.heads import BertForTokenClassification
        from lightning_modules.models.serialization import load_encoder_weights

        model = BertForTokenClassification(config, len(run.labels), run.settings.classifier_dropout)
        if source is not None:
            load_encoder_weights(model.encoder, source)
        return model


TOKEN_CLASSIFICATION = TokenClassification()
