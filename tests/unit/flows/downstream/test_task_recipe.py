"""A recipe per task: the demo's cheap recipe stays with the demo task, an added task runs on the
full one, and what each task runs on is visible before and after the run."""

from __future__ import annotations

import pytest

from flows.__main__ import main as cli_main
from flows.core.config import compose_config
from flows.core.settings import settings_from
from flows.downstream.settings import FinetuneSettings, Recipe, recipe_text
from flows.stages.finetune import stage_settings
from flows.training.settings import TrainerSettings

AGNEWS = "+finetune.catalog.agnews={format:csv,labels:auto,text_column:text,train:a.csv,test:a.csv}"


def settings(*overrides: str) -> FinetuneSettings:
    return settings_from(FinetuneSettings, compose_config(list(overrides))["finetune"], "finetune")


def recipes(*overrides: str) -> dict[str, dict[str, object]]:
    finetune = settings(*overrides)
    return {task.spec.name: task.recipe.model_dump() for task in finetune.plan}


def test_an_added_task_runs_on_the_full_recipe_and_the_demo_task_on_its_own() -> None:
    both = recipes(AGNEWS, "finetune.tasks=[pydoc_topics,agnews]")
    full = settings().model_dump()
    assert both["agnews"]["epochs"] == full["epochs"] == 20
    assert both["agnews"]["max_length"] == 128
    assert both["agnews"]["learning_rates"] == [1e-4, 3e-4, 1e-3]
    assert both["pydoc_topics"]["epochs"] == 15
    assert both["pydoc_topics"]["max_length"] == 64
    assert both["pydoc_topics"]["learning_rates"] == [3e-4, 1e-3]
    assert both["pydoc_topics"]["seeds"] == both["agnews"]["seeds"] == 5  # not set by the task


def test_a_task_field_wins_over_the_shared_one_and_recipe_null_drops_it() -> None:
    assert recipes("finetune.epochs=7")["pydoc_topics"]["epochs"] == 15
    assert recipes("finetune.catalog.pydoc_topics.recipe.epochs=7")["pydoc_topics"]["epochs"] == 7
    dropped = recipes("finetune.epochs=7", "finetune.catalog.pydoc_topics.recipe=null")
    assert dropped["pydoc_topics"]["epochs"] == 7
    smoke = recipes("experiment=smoke")["pydoc_topics"]
    assert (smoke["epochs"], smoke["learning_rates"], smoke["seeds"]) == (1, [1e-3], 1)


def test_the_stage_key_holds_each_task_s_recipe_not_fields_no_task_uses() -> None:
    def key_settings(*overrides: str) -> dict[str, object]:
        return stage_settings(settings(*overrides), 0, TrainerSettings())

    base = key_settings()
    assert key_settings("finetune.epochs=7") == base  # the demo task sets its own epochs
    assert key_settings("finetune.seeds=2") != base
    assert key_settings("finetune.catalog.pydoc_topics.recipe.patience=4") != base
    # grid_seeds enters the key only off its default: adding it moved no existing key
    assert key_settings("finetune.grid_seeds=1") == base
    assert key_settings("finetune.grid_seeds=3") != base
    assert key_settings("finetune.encoder_dropout=null") == base
    assert key_settings("finetune.encoder_dropout=0.1") != base


def test_cfg_ends_with_the_recipe_each_task_runs_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--cfg", AGNEWS, "finetune.tasks=[pydoc_topics,agnews]"]) == 0
    tail = capsys.readouterr().out.splitlines()[-3:]
    assert tail == [
        "# The recipe of each task in finetune.tasks:",
        "#   pydoc_topics: 5 seeds, learning rates 0.0003/0.001, at most 15 epochs "
        "(patience 1), max_length 64, batch 32, at most validation_examples 1000; set by the "
        "task: epochs, learning_rates, max_length, patience",
        "#   agnews: 5 seeds, learning rates 0.0001/0.0003/0.001, at most 20 epochs (patience 3), "
        "max_length 128, batch 32, at most validation_examples 1000",
    ]


def test_the_recipe_line_names_encoder_dropout_only_when_fine_tuning_sets_one() -> None:
    assert "dropout" not in recipe_text(Recipe(), [])
    assert "batch 32, encoder dropout 0.1," in recipe_text(Recipe(encoder_dropout=0.1), [])


def test_the_recipe_line_says_when_the_grid_grows_past_its_end() -> None:
    # The rates tried are then more than the configured ones: the line must not hide them.
    assert "grown" not in recipe_text(Recipe(), [])
    assert (
        "learning rates 0.0001/0.0003/0.001 (grown by up to 2 rates past an end validation chose)"
        in recipe_text(Recipe(grid_extensions=2), [])
    )


def test_a_task_on_another_recipe_than_its_own_is_named_with_what_differs() -> None:
    # An experiment's finetune.* applies to a task a user adds to it: 10 seeds, 1,000 examples.
    added = settings(AGNEWS, "experiment=domain_lift_pubmed", "finetune.tasks=[agnews]")
    [note] = added.recipe_notes()
    assert note.startswith(
        "task agnews runs on this config's recipe, not its own: seeds 10 (own 5)"
    )
    assert "train_examples 1000 (own None)" in note
    assert note.endswith("finetune.catalog.agnews.recipe=own keeps its own")
    assert settings().recipe_notes() == []  # the demo task on its own recipe
    assert settings(AGNEWS, "finetune.tasks=[agnews]").recipe_notes() == []


def test_recipe_own_keeps_a_task_on_its_own_recipe_whatever_the_experiment_sets() -> None:
    own = recipes(
        AGNEWS,
        "experiment=domain_lift_pubmed",
        "finetune.tasks=[ncbi_disease,agnews]",
        "finetune.catalog.agnews.recipe=own",
        "finetune.catalog.ncbi_disease.recipe=own",
    )
    assert (own["agnews"]["seeds"], own["agnews"]["train_examples"]) == (5, None)
    assert own["ncbi_disease"] == recipes("finetune=ncbi_disease")["ncbi_disease"]
    smoke = recipes("experiment=smoke", "finetune.catalog.pydoc_topics.recipe=own")
    assert smoke["pydoc_topics"] == recipes()["pydoc_topics"]  # the demo task's own, not smoke's


def test_the_plan_holds_each_task_recipe_resolved_when_validated_and_a_copy_plans_again() -> None:
    """Stages read `plan`; a copy with other tasks or recipe fields is validated and planned
    anew, never left with the plan of the settings it was copied from."""
    finetune = settings(AGNEWS, "finetune.tasks=[pydoc_topics,agnews]")
    demo, agnews = finetune.plan
    assert (demo.spec.name, demo.recipe.epochs, agnews.spec.name, agnews.recipe.epochs) == (
        "pydoc_topics",
        15,
        "agnews",
        20,
    )
    assert finetune.task(agnews.spec) is agnews
    assert agnews.seeds(7) == [7, 8, 9, 10, 11]
    copy = finetune.model_copy(update={"tasks": ["agnews"], "epochs": 3})
    assert [(task.spec.name, task.recipe.epochs) for task in copy.plan] == [("agnews", 3)]


def test_fine_tuning_adamw_beta2_and_eps_are_keys_kept_out_of_the_key_at_their_defaults() -> None:
    trainer = TrainerSettings()
    default = stage_settings(settings(), 1, trainer)
    changed = stage_settings(settings("finetune.beta2=0.999", "finetune.eps=1e-8"), 1, trainer)
    recipe = changed["specs"]["pydoc_topics"]["recipe"]
    assert "beta2" not in default["specs"]["pydoc_topics"]["recipe"]
    assert (recipe["beta2"], recipe["eps"]) == (0.999, 1e-8)
