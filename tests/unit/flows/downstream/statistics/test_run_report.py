"""The flags a reader must not miss, in the summary and in summary.md: an arm capped by its
epochs, an arm whose chosen learning rate is an end of its grid, and every cap that bit."""

from __future__ import annotations

from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from flows.downstream.finetuning.caps import caps_outputs, caps_record
from flows.downstream.finetuning.recipe import ArmResult, RunResult, chosen_rate, grid_edge
from flows.downstream.settings import Recipe
from flows.downstream.statistics.base_report import base_outputs, base_verdict, is_worse_than_base
from flows.downstream.statistics.report import markdown_table, task_outputs
from flows.downstream.statistics.task_figures import EVALUATED, TaskFigures
from flows.downstream.tasks.encoding import encode
from flows.downstream.tasks.readers import TaggedSentence, TextExample
from flows.downstream.tasks.spec import ARMS, BASE_ARM
from flows.refresh.promotion import decide
from flows.summary import downstream_result
from tests.fakes import finetune_outputs as outputs_of
from tests.fakes import grid_arm as arm

# What a GRID EDGE line ends on: the setting that extends a grid past its end on validation.
ON_VALIDATION = " (finetune.grid_extensions does it on validation)"


def summary_lines(outputs: dict[str, Any]) -> list[str]:
    return downstream_result(TaskFigures.read(outputs, "t"), 0.95)


def table(outputs: dict[str, Any]) -> str:
    return markdown_table([TaskFigures.read(outputs, "t")], 0.95)


def test_the_grid_edge_is_an_end_of_a_grid_of_two_or_more_rates() -> None:
    grid = [1e-4, 3e-4, 1e-3]
    assert [grid_edge(rate, grid) for rate in grid] == ["lowest", None, "highest"]
    assert grid_edge(1e-3, [1e-3]) is None  # one rate: nothing was chosen


def test_a_grid_whose_every_rate_tied_is_tied_not_an_edge() -> None:
    grid = [1e-4, 3e-4, 1e-3]
    assert grid_edge(1e-4, grid, [0.5, 0.5, 0.5]) == "tied"
    assert grid_edge(1e-4, grid, [0.5, 0.5, 0.4]) == "lowest"  # two tied, the third lower


def run_at(rate: float, score: float, span_f1: float | None, pruned: bool = False) -> RunResult:
    return RunResult(
        "arm", rate, 0, score, 1, False, {}, [], pruned=pruned, validation_span_f1=span_f1
    )


def test_rates_that_tie_on_the_metric_are_chosen_on_validation_span_f1() -> None:
    """Every rate at the score of abstaining everywhere: the span F1 chooses; a higher score
    still wins over any span F1; without span F1s (not QA) the first of equals; a pruned rate
    never."""
    tied = [(1e-4, [run_at(1e-4, 0.5, 0.1)]), (3e-4, [run_at(3e-4, 0.5, 0.3)])]
    assert chosen_rate(tied, [0.5, 0.5]) == 1
    assert chosen_rate(tied, [0.6, 0.5]) == 0
    plain = [(rate, [run_at(rate, 0.5, None)]) for rate in (1e-4, 3e-4)]
    assert chosen_rate(plain, [0.5, 0.5]) == 0
    pruned = [tied[0], (3e-4, [run_at(3e-4, 0.5, 0.3, pruned=True)])]
    assert chosen_rate(pruned, [0.5, 0.5]) == 0


def test_a_tied_grid_says_how_the_rate_was_chosen_instead_of_naming_an_edge() -> None:
    grid = [1e-4, 3e-4]
    tied = ArmResult(1e-4, {"0.0001": 0.5, "0.0003": 0.5}, arm(1e-4, grid, [3, 4]).runs, "tied")
    arms = {"pretrained": arm(3e-4, [3e-4], [3, 4]), "random_init": tied}
    plain = outputs_of(arms)
    assert (
        "  GRID EDGE t: random init: every rate of finetune.learning_rates tied on validation "
        "accuracy, 0.0001 taken as the first; validation accuracy told no rate apart"
    ) in summary_lines(plain)
    question_answering = outputs_of(arms, **{"t.pretrained_span_f1_mean": 0.3})
    assert any(
        "0.0001 chosen on validation span F1" in line for line in summary_lines(question_answering)
    )


def test_an_arm_at_the_grid_edge_is_flagged_with_the_key_to_extend() -> None:
    grid = [1e-4, 3e-4, 1e-3]
    arms = {"pretrained": arm(1e-3, grid, [3, 4]), "random_init": arm(3e-4, grid, [3, 4])}
    figures = outputs_of(arms)
    assert figures["t.pretrained_grid_edge"] == "highest"
    assert figures["t.random_init_grid_edge"] == ""
    warning = (
        "GRID EDGE t: pretrained chose 0.001, the highest rate of finetune.learning_rates; the "
        "best rate may lie outside the grid: extend finetune.learning_rates past that end"
        + ON_VALIDATION
    )
    assert f"  {warning}" in summary_lines(figures)
    assert f"**{warning}**" in table(figures)
    inside = outputs_of({name: arm(3e-4, grid, [3, 4]) for name in arms})
    assert not any("GRID EDGE" in line for line in summary_lines(inside))


def test_a_flag_names_the_task_s_own_key_when_its_entry_sets_the_field() -> None:
    grid = [1e-4, 1e-3]
    arms = {name: arm(1e-4, grid, [10, 2]) for name in ("pretrained", "random_init")}
    lines = summary_lines(outputs_of(arms, **{"t.recipe_set_by_task": "epochs"}))
    assert any("raise finetune.catalog.t.recipe.epochs" in line for line in lines)
    assert any("the lowest rate of finetune.learning_rates" in line for line in lines)


def word_tokenizer(max_length: int) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.enable_truncation(max_length)
    return tokenizer


def test_caps_that_bite_are_recorded_with_their_key_and_the_others_are_not() -> None:
    tokenizer = word_tokenizer(4)
    texts = [TextExample("a b a b a", None, 0), TextExample("a b", None, 1)]
    splits = {
        "train": encode(tokenizer, texts * 5, token_types=False),
        "validation": encode(tokenizer, texts[1:], token_types=False),
        "test": encode(tokenizer, texts, token_types=False),
    }
    assert [splits[name].truncated for name in ("train", "validation", "test")] == [5, 0, 1]
    recipe = Recipe(train_examples=4, validation_examples=1)  # max_length: the tokenizer's 4
    pools = {"train": 10, "validation": 3, "test": 2}  # test: no cap bit
    record = caps_record("t", recipe, pools, splits, 4, set_by_task=["max_length"])
    assert set(record) == {"train_examples", "validation_examples", "max_length"}
    assert record["max_length"]["truncated"] == {
        "train": {"examples": 5, "of": 10},
        "test": {"examples": 1, "of": 2},
    }
    outputs = caps_outputs("t", record, splits)
    assert outputs["t.validation_truncated_examples"] == 0
    assert outputs["t.caps"] == (
        "train 4 of 10 examples per seed (finetune.train_examples); validation 1 of 3 examples "
        "(finetune.validation_examples); max_length 4 (finetune.catalog.t.recipe.max_length) "
        "truncated train 5 of 10 (50.0%), test 1 of 2 (50.0%) examples"
    )
    arms = {name: arm(3e-4, [3e-4], [3]) for name in ("pretrained", "random_init")}
    figures = {**outputs_of(arms), **outputs}
    assert f"  CAPS t: {outputs['t.caps']}" in summary_lines(figures)
    assert f"**CAPS t: {outputs['t.caps']}**" in table(figures)


def test_a_tagged_sentence_cut_by_max_length_counts_as_truncated() -> None:
    sentences = [TaggedSentence(("a", "b", "a"), (0, 0, 0)), TaggedSentence(("a",), (0,))]
    assert encode(word_tokenizer(2), sentences, token_types=False).truncated == 1


def scored(*accuracies: float, capped: int = 0) -> ArmResult:
    runs = [
        RunResult("arm", 1e-4, seed, 0.5, 3, seed < capped, {"accuracy": value}, [])
        for seed, value in enumerate(accuracies)
    ]
    return ArmResult(1e-4, {"0.0001": 0.5}, runs)


def with_base(
    adapted: list[float], base: list[float], capped: int = 0, adapted_capped: int = 0
) -> dict[str, Any]:
    arms = {
        "pretrained": scored(*adapted, capped=adapted_capped),
        "random_init": scored(0.3, 0.31, 0.29),
        BASE_ARM: scored(*base, capped=capped),
    }
    outputs = outputs_of(arms, **base_outputs("t", arms, 0.95))
    return outputs | {
        "t.over_base_accuracy_bootstrap_low": -1.0,
        "t.over_base_accuracy_bootstrap_high": 1.0,
    }


def test_with_a_base_arm_the_first_line_is_adapted_over_base_with_both_intervals() -> None:
    lines = base_verdict(with_base([0.71, 0.72, 0.70], [0.70, 0.70, 0.70]), "t", 0.95)
    assert lines[0].startswith("t accuracy over 3 seed(s): adapted over base +0.010; 95% CI ")
    assert (
        "paired t over seeds [" in lines[0]
        and "bootstrap over test examples [-1.000, +1.000]" in lines[0]
    )
    assert "continuing is not told apart from the checkpoint; base checkpoint " in lines[1]


def test_a_verdict_read_from_an_arm_stopped_at_its_epoch_limit_is_called_provisional() -> None:
    """Its best epoch was its last: it may still have been improving (the issue's "a verdict
    only from arms that were not capped"); the words name each capped arm and its count."""
    outputs = with_base([0.71, 0.72, 0.70], [0.70, 0.70, 0.70], capped=1, adapted_capped=2)
    words = base_verdict(outputs, "t", 0.95)[1]
    assert words.startswith("  continuing is not told apart from the checkpoint (provisional: ")
    assert "the adapted arm in 2 of 3 runs and the base arm in 1 of 3 runs); base" in words


def test_a_continuation_worse_than_its_base_is_said_in_words_and_never_promoted() -> None:
    outputs = with_base([0.50, 0.52, 0.51], [0.70, 0.71, 0.72], capped=2)
    lines = base_verdict(outputs, "t", 0.95)
    assert "WORSE: continuing made the model worse than the checkpoint" in lines[1]
    assert (
        " (provisional: best epoch at the epoch limit for the base arm in 2 of 3 runs); "
        in lines[1]
    )
    assert lines[2].startswith("  CAPPED t: the base arm's best validation epoch was the last")
    assert "2 of 3 runs" in lines[2]
    assert is_worse_than_base(outputs, "t")
    decision = decide(0.51, None, 0.0, worse_than_base=("t",))
    assert not decision.promote and "worse than its base checkpoint on t" in decision.reason


def test_a_task_where_every_arm_scores_the_majority_baseline_is_flagged() -> None:
    arms = {name: scored(0.5, 0.5) for name in ("pretrained", "random_init")}
    figures = outputs_of(
        arms, **{"t.baselines": "majority", "t.baseline_majority_accuracy_mean": 0.5}
    )
    assert any(
        line.startswith("  UNINFORMATIVE t: every arm scores") for line in summary_lines(figures)
    )
    learned = outputs_of(
        {"pretrained": scored(0.6, 0.6), "random_init": scored(0.5, 0.5)},
        **{"t.baselines": "majority", "t.baseline_majority_accuracy_mean": 0.5},
    )
    assert not any("UNINFORMATIVE" in line for line in summary_lines(learned))


# A GRID EDGE line names the key of the grid the arm was tuned on: (arms at the edge of their
# grid, whether a base arm continues a checkpoint beside them, the line).
GRID_EDGE_CASES = [
    (
        {"pretrained": 1e-4},
        True,
        "GRID EDGE t: pretrained chose 0.0001, the highest rate of "
        "finetune.pretrained_learning_rates; the best rate may lie outside the grid: extend "
        "finetune.pretrained_learning_rates past that end" + ON_VALIDATION,
    ),
    (
        {"pretrained": 1e-4, "random_init": 1e-3},
        True,
        "GRID EDGE t: pretrained chose 0.0001, the highest rate of "
        "finetune.pretrained_learning_rates; random init chose 0.001, the highest rate of "
        "finetune.learning_rates; the best rate may lie outside the grid: extend "
        "finetune.pretrained_learning_rates and finetune.learning_rates past that end"
        + ON_VALIDATION,
    ),
    (
        {"pretrained": 1e-3},
        False,
        "GRID EDGE t: pretrained chose 0.001, the highest rate of finetune.learning_rates; the "
        "best rate may lie outside the grid: extend finetune.learning_rates past that end"
        + ON_VALIDATION,
    ),
]


@pytest.mark.parametrize(("edges", "continued", "line"), GRID_EDGE_CASES)
def test_a_grid_edge_names_the_grid_the_arm_was_tuned_on(
    edges: dict[str, float], continued: bool, line: str
) -> None:
    task_grid, checkpoint_grid = [1e-4, 3e-4, 1e-3], [2e-5, 5e-5, 1e-4]
    grids = {"pretrained": checkpoint_grid if continued else task_grid, "random_init": task_grid}
    arms = {name: arm(edges.get(name, grid[1]), grid, [3, 4]) for name, grid in grids.items()}
    if continued:
        arms[BASE_ARM] = arm(5e-5, checkpoint_grid, [3, 4])
    outputs = outputs_of(arms, **(base_outputs("t", arms, 0.95) if continued else {}))
    assert f"  {line}" in summary_lines(outputs)


# A CAPPED or GRID EDGE line names the key that bounds each arm, and calls each arm by the name
# the summary gives it: (the run, the capped arms' best epochs, the arms at the edge of their
# grid, the flag's line). The pretrained arm of a continuation, and `cloze evaluate`'s (the
# checkpoint as it is: `base`), are bounded by finetune.pretrained_epochs (8 here) and tuned on
# finetune.pretrained_learning_rates; random init by finetune.epochs (10) and
# finetune.learning_rates.
ARM_KEY_CASES = [
    (
        "pipeline",
        {"pretrained": [10, 10]},
        {},
        "CAPPED t: the best validation epoch was the last allowed (finetune.epochs=10) in "
        "pretrained 2 of 2, random init 0 of 2 runs; those runs may still have been improving: "
        "raise finetune.epochs",
    ),
    (
        "continuation",
        {"pretrained": [8, 8]},
        {},
        "CAPPED t: the best validation epoch was the last allowed "
        "(finetune.pretrained_epochs=8) in pretrained 2 of 2, base 0 of 2 runs, "
        "(finetune.epochs=10) in random init 0 of 2 runs; those runs may still have been "
        "improving: raise finetune.pretrained_epochs",
    ),
    (
        "continuation",  # the base arm is tuned and capped like the others, and flagged
        {BASE_ARM: [8, 3]},
        {},
        "CAPPED t: the best validation epoch was the last allowed "
        "(finetune.pretrained_epochs=8) in pretrained 0 of 2, base 1 of 2 runs, "
        "(finetune.epochs=10) in random init 0 of 2 runs; those runs may still have been "
        "improving: raise finetune.pretrained_epochs",
    ),
    (
        "continuation",
        {},
        {BASE_ARM: 1e-4},
        "GRID EDGE t: base chose 0.0001, the highest rate of finetune.pretrained_learning_rates; "
        "the best rate may lie outside the grid: extend finetune.pretrained_learning_rates past "
        "that end" + ON_VALIDATION,
    ),
    (
        "continuation",
        {"pretrained": [8, 8], "random_init": [10, 3]},
        {},
        "CAPPED t: the best validation epoch was the last allowed "
        "(finetune.pretrained_epochs=8) in pretrained 2 of 2, base 0 of 2 runs, "
        "(finetune.epochs=10) in random init 1 of 2 runs; those runs may still have been "
        "improving: raise finetune.pretrained_epochs and finetune.epochs",
    ),
    (
        "evaluate",
        {"pretrained": [8, 3]},
        {},
        "CAPPED t: the best validation epoch was the last allowed "
        "(finetune.pretrained_epochs=8) in base 1 of 2 runs, (finetune.epochs=10) in random init "
        "0 of 2 runs; those runs may still have been improving: raise finetune.pretrained_epochs",
    ),
    (
        "evaluate",
        {},
        {"pretrained": 2e-5},
        "GRID EDGE t: base chose 2e-05, the lowest rate of finetune.pretrained_learning_rates; "
        "the best rate may lie outside the grid: extend finetune.pretrained_learning_rates past "
        "that end" + ON_VALIDATION,
    ),
    (
        "evaluate",
        {},
        {"pretrained": 1e-4, "random_init": 1e-4},
        "GRID EDGE t: base chose 0.0001, the highest rate of finetune.pretrained_learning_rates; "
        "random init chose 0.0001, the lowest rate of finetune.learning_rates; the best rate may "
        "lie outside the grid: extend finetune.pretrained_learning_rates and "
        "finetune.learning_rates past that end" + ON_VALIDATION,
    ),
]


@pytest.mark.parametrize(("run", "capped", "edges", "line"), ARM_KEY_CASES)
def test_a_flag_names_the_key_that_bounds_each_arm(
    run: str, capped: dict[str, list[int]], edges: dict[str, float], line: str
) -> None:
    task_grid, checkpoint_grid = [1e-4, 3e-4, 1e-3], [2e-5, 5e-5, 1e-4]
    own = run != "pipeline"  # the pretrained arm starts from a public checkpoint
    grids = {"pretrained": checkpoint_grid if own else task_grid, "random_init": task_grid}
    allowed = {"pretrained": 8 if own else 10, "random_init": 10}
    arms = {
        name: arm(edges.get(name, grid[1]), grid, capped.get(name, [3, 4]), allowed[name])
        for name, grid in grids.items()
    }
    if run == "continuation":
        arms[BASE_ARM] = arm(
            edges.get(BASE_ARM, 5e-5), checkpoint_grid, capped.get(BASE_ARM, [3, 4]), 8
        )
    extra = base_outputs("t", arms, 0.95) if run == "continuation" else {}
    if run == "evaluate":
        extra[EVALUATED] = "bert-tiny"
    limits = task_outputs("t", "accuracy", arms, 0.95, 10, 8 if own else None)
    outputs = outputs_of(arms, **extra, **limits)
    flags = [text for text in summary_lines(outputs) if "CAPPED" in text or "GRID EDGE" in text]
    assert flags == [f"  {line}"]
    assert f"**{line}**" in table(outputs)


# A task that cannot tell the encoders apart is flagged: (each arm's scores over two seeds, the
# baselines' mean scores, the flag's line; None: no flag).
UNINFORMATIVE_CASES = [
    (
        (0.5, 0.5),
        {"majority": 0.5},
        "UNINFORMATIVE t: every arm scores the majority baseline's 0.500; no arm learned the "
        "task, so no difference between them means anything",
    ),
    (
        (0.8, 0.8),  # a QA file whose every question is unanswerable: the arms answer a few
        {"no_answer": 1.0, "lexical_overlap": 0.2},
        "UNINFORMATIVE t: the no_answer baseline scores 1.000, the most accuracy can be (every "
        "test question is unanswerable); no arm can beat it, so no difference between the arms "
        "means anything",
    ),
    ((0.6, 0.5), {"no_answer": 0.5, "lexical_overlap": 0.2}, None),
]


@pytest.mark.parametrize(("scores", "baselines", "line"), UNINFORMATIVE_CASES)
def test_a_task_no_arm_can_tell_apart_is_flagged_uninformative(
    scores: tuple[float, float], baselines: dict[str, float], line: str | None
) -> None:
    arms = {name: scored(score, score) for name, score in zip(ARMS, scores, strict=True)}
    means = {f"t.baseline_{name}_accuracy_mean": value for name, value in baselines.items()}
    outputs = outputs_of(arms, **{"t.baselines": ",".join(baselines), **means})
    flags = [flag for flag in summary_lines(outputs) if "UNINFORMATIVE" in flag]
    assert flags == ([f"  {line}"] if line else [])
