from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from flows.core.config import BASE, CONF_DIR, compose_config, composed_once, expand_sweeps
from flows.core.settings import ConfigError
from flows.plan import PipelinePlan
from flows.training.settings import ModelSettings, model_in_key


def test_default_config_composes_and_validates() -> None:
    config = compose_config()
    plan = PipelinePlan.from_config(config)
    assert plan.corpus.kind == "pydoc"
    assert plan.tokenizer.kind == "wordpiece"
    assert plan.pretrain.objective.mask_rate == 0.15
    assert config["model"]["name"] == "bert-tiny"


def test_the_default_recipe_is_the_measured_small_budget_one() -> None:
    """docs/results/2026-12-01-small-budget-recipe.md: no dropout, lr 2e-3, 10% warmup; bf16
    where the hardware computes it natively (`auto`, issue 41)."""
    config = compose_config(["model=bert-mini"])
    assert (config["model"]["dropout"], config["model"]["attention_dropout"]) == (0.0, 0.0)
    trainer = config["trainer"]
    assert (trainer["precision"], trainer["learning_rate"]) == ("auto", 2e-3)
    assert trainer["warmup_steps"] * 10 == trainer["max_steps"]


def test_experiment_bert_keeps_the_original_recipe_whatever_the_defaults() -> None:
    config = compose_config(["experiment=bert"])
    model, trainer = config["model"], config["trainer"]
    assert (model["dropout"], model["attention_dropout"], model["norm_placement"]) == (
        0.1,
        0.1,
        "post",
    )
    assert config["objective"]["mask_rate"] == 0.15
    assert (trainer["schedule"], trainer["precision"]) == ("linear", "32-true")


def test_experiment_bundle_overrides_groups() -> None:
    config = compose_config(["experiment=smoke", "model=bert-mini"])
    assert config["trainer"]["max_steps"] == 60
    assert config["model"]["hidden_size"] == 256


def test_a_key_no_preset_sets_is_the_settings_classes_to_judge() -> None:
    # A valid key the task's entry leaves unset needs no Hydra `+`...
    config = compose_config(["finetune.tasks=[sst2]", "finetune.catalog.sst2.recipe.seeds=2"])
    assert config["finetune"]["catalog"]["sst2"]["recipe"] == {"seeds": 2}
    finetune = PipelinePlan.from_config(config).finetune
    assert finetune.plan[0].recipe.seeds == 2
    # ...and a typo'd one is refused by the settings class, naming the nearest valid keys.
    typo = compose_config(["trainer.max_stepz=5"])
    with pytest.raises(ConfigError, match=r"^unknown config key trainer\.max_stepz; nearest"):
        PipelinePlan.from_config(typo)


def test_missing_mandatory_value_is_named() -> None:
    with pytest.raises(ConfigError, match=r"corpus\.paths"):
        PipelinePlan.from_config(compose_config(["corpus=files"]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.num_heads=3", "model.hidden_size=128 is not divisible by model.num_heads=3"),
        ("objective.mask_rate=1.5", "objective.mask_rate=1.5 must be between 0 and 1"),
        ("trainer.precision=fp8", "trainer.precision='fp8' must be one of"),
        ("trainer.warmup_steps=5000", "trainer.warmup_steps=5000 must be in"),
        ("tokenizer.kind=sentencepiece", "tokenizer.kind='sentencepiece'"),
        ("finetune.tasks=[mnli]", "finetune.tasks: 'mnli' is not in finetune.catalog"),
    ],
)
def test_bad_values_fail_before_any_stage_runs_and_name_the_key(
    override: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        PipelinePlan.from_config(compose_config([override]))


def test_a_hand_built_dict_with_an_unknown_key_is_named() -> None:
    config = compose_config()
    config["shards"]["seq_length"] = 64
    with pytest.raises(ConfigError, match=r"unknown config key shards\.seq_length"):
        PipelinePlan.from_config(config)


@pytest.mark.parametrize(
    "preset", sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml") if path.stem != BASE)
)
def test_every_model_preset_composes_into_a_valid_encoder(preset: str) -> None:
    config = compose_config([f"model={preset}"])
    plan = PipelinePlan.from_config(config)
    assert plan.pretrain.model.name == preset


def test_a_token_budget_sets_the_step_count() -> None:
    plan = PipelinePlan.from_config(compose_config(["trainer.max_tokens=4096000"]))
    assert plan.pretrain.trainer.total_steps(seq_len=128) == 1000  # batch 32 x 128


def test_a_token_budget_smaller_than_the_warmup_is_named() -> None:
    plan = PipelinePlan.from_config(compose_config(["trainer.max_tokens=4096"]))
    with pytest.raises(ConfigError, match=r"trainer\.max_tokens=4096 gives 1 steps"):
        plan.pretrain.trainer.total_steps(seq_len=128)


def test_multirun_sweeps_expand_to_their_product_and_lists_are_not_swept() -> None:
    runs = expand_sweeps(["experiment=bert,electra", "seed=1,2", "corpus.paths=[a.txt,b.txt]"])
    assert runs == [
        ["experiment=bert", "seed=1", "corpus.paths=[a.txt,b.txt]"],
        ["experiment=bert", "seed=2", "corpus.paths=[a.txt,b.txt]"],
        ["experiment=electra", "seed=1", "corpus.paths=[a.txt,b.txt]"],
        ["experiment=electra", "seed=2", "corpus.paths=[a.txt,b.txt]"],
    ]


def test_every_model_option_is_a_key_of_every_preset() -> None:
    """conf/model/base.yaml lists each `model.*` key (tests/unit/test_conf.py: generated from
    ModelSettings), so an option such as `model.position_embedding=rotary` overrides on any
    preset without Hydra's `+`."""
    base = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / "base.yaml"))
    assert isinstance(base, dict)
    assert set(base) == set(ModelSettings.model_fields)
    config = compose_config(["model=bert-tiny", "model.position_embedding=rotary"])
    assert PipelinePlan.from_config(config).pretrain.model.position_embedding == "rotary"


def test_the_checkpoint_options_enter_the_model_key_only_when_set() -> None:
    """`model.activation` and `model.tie_word_embeddings` came after the pinned keys: at their
    defaults a model keys as before (test_artifact_keys.py), set otherwise they key."""
    bert = {"name": "bert-tiny", "hidden_size": 128}
    assert "activation" not in model_in_key(bert)
    assert model_in_key(bert) == model_in_key({**bert, "tie_word_embeddings": True})
    assert model_in_key({**bert, "activation": "gelu_tanh"})["activation"] == "gelu_tanh"
    assert model_in_key({**bert, "tie_word_embeddings": False})["tie_word_embeddings"] is False
    with pytest.raises(ConfigError, match=r"model.activation='relu' must be one of"):
        model_in_key({**bert, "activation": "relu"})


def test_the_same_overrides_compose_once_and_each_caller_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A served run composes its overrides to name itself, then again to run: Hydra works once."""
    overrides = ["experiment=distilbert", "trainer.max_steps=7"]
    first = compose_config(overrides)
    hits = composed_once.cache_info().hits
    first["trainer"]["max_steps"] = 0
    second = compose_config(overrides)
    assert composed_once.cache_info().hits == hits + 1
    assert second["trainer"]["max_steps"] == 7

    monkeypatch.setenv("CLOZE_DATA_DIR", "/elsewhere")  # what `oc.env` reads: composed again
    moved = compose_config(overrides)
    assert composed_once.cache_info().hits == hits + 1
    assert moved["corpus"]["paths"][0].startswith("/elsewhere/")
