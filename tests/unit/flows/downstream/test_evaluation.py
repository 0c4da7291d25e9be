"""What makes a lift credible: the test-set bootstrap, per-seed labelled samples, the baselines."""

from __future__ import annotations

import random
from functools import partial
from statistics import fmean
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
import torch

from flows.downstream.finetuning import recipe
from flows.downstream.finetuning.baselines import evaluate_baselines
from flows.downstream.finetuning.recipe import RunResult, TaskRun
from flows.downstream.kinds.classification import C_GRID
from flows.downstream.kinds.registry import kind_of
from flows.downstream.kinds.token_classification import seen_entities
from flows.downstream.settings import Recipe
from flows.downstream.statistics.bootstrap import bootstrap_lift
from flows.downstream.tasks.load import train_sample
from flows.downstream.tasks.readers import TaggedSentence, TextExample
from flows.downstream.tasks.spec import TaskSpec
from lightning_modules.models.config import EncoderConfig

NER_LABELS = ["O", "B-Disease", "I-Disease", "B-Chemical", "I-Chemical"]


def random_tags(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(len(NER_LABELS)) for _ in range(length)]


@pytest.mark.parametrize(
    ("kind", "labels", "metrics"),
    [
        ("classification", ["a", "b", "c"], ("accuracy", "macro_f1", "mcc")),
        ("classification", ["0", "1"], ("accuracy", "macro_f1", "mcc", "f1")),
        ("token_classification", NER_LABELS, ("entity_f1", "entity_precision", "entity_recall")),
    ],
)
def test_summed_example_statistics_give_the_metrics_exactly(
    kind: str, labels: list[str], metrics: tuple[str, ...]
) -> None:
    rng = random.Random(0)
    if kind == "classification":
        gold: list = [rng.randrange(len(labels)) for _ in range(200)]
        predicted: list = [g if rng.random() < 0.6 else rng.randrange(len(labels)) for g in gold]
    else:
        gold = [random_tags(rng, rng.randrange(1, 9)) for _ in range(100)]
        # Some predictions are truncated: the missing words count as O, as in scoring.
        predicted = [t if rng.random() < 0.5 else random_tags(rng, len(t))[:6] for t in gold]
    task_kind = kind_of(kind)
    totals = task_kind.example_statistics(gold, predicted, labels).sum(0, keepdims=True)
    expected = task_kind.score(gold, predicted, labels, None)
    for metric in metrics:
        found = task_kind.bootstrap_metric(metric, totals, labels, None)[0]
        assert found == pytest.approx(expected[metric])


def classification_statistics(correct: list[bool]) -> np.ndarray:
    gold = [0] * len(correct)
    predicted = [0 if c else 1 for c in correct]
    return kind_of("classification").example_statistics(gold, predicted, ["a", "b"])


def accuracy_of(totals: np.ndarray) -> np.ndarray:
    return kind_of("classification").bootstrap_metric("accuracy", totals, ["a", "b"], None)


def test_identical_arms_have_a_bootstrap_interval_of_exactly_zero() -> None:
    arm = [classification_statistics([i % 3 == 0 for i in range(90)])]
    assert bootstrap_lift(arm, arm, accuracy_of, 500, 0.95, 0) == (0.0, 0.0)


def test_the_bootstrap_interval_covers_the_lift_and_narrows_with_more_test_examples() -> None:
    def interval(examples: int) -> tuple[float, float]:
        rng = random.Random(examples)
        pretrained = [classification_statistics([rng.random() < 0.7 for _ in range(examples)])]
        random_init = [classification_statistics([rng.random() < 0.5 for _ in range(examples)])]
        return bootstrap_lift(pretrained, random_init, accuracy_of, 1000, 0.95, 1)

    small, large = interval(100), interval(2500)
    assert small[0] < 0.2 < small[1] and large[0] < 0.2 < large[1]
    assert large[1] - large[0] < (small[1] - small[0]) / 3  # ~ 1 / sqrt(25) of the width


def test_each_seed_draws_its_own_labelled_sample_and_the_same_seed_the_same() -> None:
    first, again, other = (train_sample(1000, 50, seed) for seed in (5, 5, 6))
    assert first == again and first != other
    assert first is not None and len(set(first)) == 50 and max(first) < 1000
    assert train_sample(40, 50, 5) is None and train_sample(40, None, 5) is None


def keyword_examples(rng: random.Random, count: int) -> list[TextExample]:
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    examples = []
    for _ in range(count):
        label = int(rng.random() < 0.3)
        text = " ".join(rng.choice(words) for _ in range(6)) + (" fever" if label else " cough")
        examples.append(TextExample(text, None, label))
    return examples


def test_classification_baselines_majority_and_bag_of_words() -> None:
    rng = random.Random(0)
    splits = {
        "validation": keyword_examples(rng, 60),
        "test": keyword_examples(rng, 200),
    }
    train_sets = [keyword_examples(rng, 100), keyword_examples(rng, 100)]
    spec = TaskSpec(name="t", format="glue", labels=["0", "1"], train="x", test="y")
    results = evaluate_baselines(spec, ("majority", "tfidf_logreg"), ["0", "1"], splits, train_sets)
    assert list(results) == ["majority", "tfidf_logreg"]
    share_of_zero = sum(e.label == 0 for e in splits["test"]) / 200
    majority = [fit["accuracy"] for fit in results["majority"].test]
    assert majority == pytest.approx([share_of_zero] * 2)
    assert all(fit["accuracy"] > 0.95 for fit in results["tfidf_logreg"].test)  # one word decides
    assert all(choice["C"] in C_GRID for choice in results["tfidf_logreg"].choices)


def test_seen_entities_tags_train_entity_strings_longest_first() -> None:
    def sentence(pairs: list[tuple[str, str]]) -> TaggedSentence:
        tokens, tags = zip(*pairs, strict=True)
        return TaggedSentence(tuple(tokens), tuple(NER_LABELS.index(tag) for tag in tags))

    train = [
        sentence([("lung", "B-Disease"), ("cancer", "I-Disease"), ("and", "O")]),
        sentence([("cancer", "B-Disease"), ("of", "O"), ("aspirin", "B-Chemical")]),
    ]
    test = [sentence([("no", "O"), ("lung", "O"), ("cancer", "O"), ("aspirin", "O")])]
    predicted = seen_entities(NER_LABELS, train, test)
    assert [NER_LABELS[tag] for tag in predicted[0]] == [
        "O",
        "B-Disease",
        "I-Disease",
        "B-Chemical",
    ]


# Validation score of each (learning rate, seed): 1e-3 wins on seed 0 alone, 3e-4 on the mean.
NOISY_GRID = {
    (3e-4, 0): 0.70, (3e-4, 1): 0.72, (3e-4, 2): 0.71,
    (1e-3, 0): 0.74, (1e-3, 1): 0.60, (1e-3, 2): 0.62,
}  # fmt: skip


@pytest.mark.parametrize(("grid_seeds", "chosen", "trained"), [(1, 1e-3, 4), (3, 3e-4, 6)])
def test_the_grid_is_scored_on_the_mean_of_grid_seeds_and_no_run_is_trained_twice(
    monkeypatch: pytest.MonkeyPatch, grid_seeds: int, chosen: float, trained: int
) -> None:
    """Fine-tuning itself is replaced by the table above: this is the choice, not the training."""
    calls: list[tuple[float, int]] = []

    def scored(run: TaskRun, arm: str, rate: float, seed: int, pruning: object) -> RunResult:
        calls.append((rate, seed))
        return RunResult(arm, rate, seed, NOISY_GRID[rate, seed], 1, False, {}, [])

    monkeypatch.setattr(recipe, "train_once", scored)
    settings = Recipe(seeds=3, learning_rates=[3e-4, 1e-3], grid_seeds=grid_seeds)
    # a stand-in with the real grid rule (no checkpoint: the task's own grid) and a name to show
    run = SimpleNamespace(settings=settings, spec=SimpleNamespace(name="t"), base_dir=None)
    run.grid = partial(TaskRun.grid, run)
    arm = recipe.evaluate_arm(cast(TaskRun, run), "x", [0, 1, 2])
    assert arm.learning_rate == chosen and len(calls) == trained
    assert [run.seed for run in arm.runs] == [0, 1, 2]
    assert {run.learning_rate for run in arm.runs} == {chosen}
    assert arm.grid["0.0003"] == pytest.approx(
        fmean(NOISY_GRID[3e-4, s] for s in range(grid_seeds))
    )


@pytest.mark.parametrize(("encoder_dropout", "noisy"), [(None, False), (0.1, True)])
def test_encoder_dropout_turns_on_dropout_that_pretraining_had_off(
    encoder_dropout: float | None, noisy: bool
) -> None:
    """The small-budget recipe pretrains without dropout; fine-tuning may put it back."""
    encoder = EncoderConfig(vocab_size=40, dropout=0.0, attention_dropout=0.0)
    run = SimpleNamespace(
        settings=Recipe(encoder_dropout=encoder_dropout, classifier_dropout=0.0),
        encoder=encoder,
        student_encoder=None,
        spec=SimpleNamespace(kind="classification"),
        labels=["a", "b"],
        prompt=None,
        source=lambda arm: None,  # random init: no weights to load
    )
    model = recipe.build_model(cast(TaskRun, run), "random_init").train()
    ids = torch.randint(1, 40, (4, 12))
    mask = torch.ones_like(ids)
    torch.manual_seed(0)
    first = model(ids, mask)
    assert model.encoder.config.dropout == (encoder_dropout or 0.0)
    assert (not torch.equal(first, model(ids, mask))) is noisy
