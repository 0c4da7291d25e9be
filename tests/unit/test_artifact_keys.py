"""Artifact keys are a contract with every store already on disk: a refactor must not move them.

The keys below were computed by the code before the layout and settings refactor (commit a5b4250)
for the default and smoke configs, with fixed stand-ins for what depends on the machine (the
corpus fingerprint, the task data's fingerprint). A change that alters one must be deliberate:
bump the stage's VERSION, update the pin here and say why in the commit.

Deliberate changes since: finetune VERSION 3 (seeds per sample, bootstrap, baselines, early
stopping under a generous cap) moved both finetune keys; the small-budget pretraining defaults
(no dropout, bf16, lr 2e-3, 3,000 steps) moved the pretrain keys and, through them, finetune's.
Finetune VERSION 4 (a recipe per task: the key holds each task's effective recipe instead of the
shared fields; results.json gained the recipe, the caps and the grid-edge flags) moved both
finetune keys; the demo task's effective recipe itself is unchanged.
Tokenizer VERSION 4 (WordPiece trained deterministically, so its output changed) moved the
tokenizer's input keys; since then the tokenizer is published by content and later stages key on
its content key, which only a build knows: `TOKENIZER_CONTENT` stands in for it, as `CORPUS` does
for the corpus, so the shards, pretrain and finetune pins moved with the stand-in.
Pretrain VERSION 3 and distill VERSION 2 key `model.*` as `model_in_key` (every option at its
value or default, no display name: conf/model/base.yaml now spells every option out in every
preset); finetune VERSION 5 adds `finetune.pooling` to each classification task's recipe (tagging
tasks ignore it). All pins but the tokenizer's and the shards' moved.
The demo task's grid gained 1e-4 (the pretrained arm chose 3e-4, its lowest rate): a config
change, not a code change, so only the default finetune pin moved; VERSION stays.
`trainer.precision: auto` (issue 41) keys the precision it resolves to: on a CPU with native bf16
that is bf16-mixed, the default before, so the pins (computed as on such a machine) did not move;
on one that emulates bf16 it is 32-true, a key of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import canonical_json, stage_key
from flows.core.config import compose_config
from flows.downstream.settings import FinetuneSettings
from flows.downstream.tasks.spec import TaskSpec
from flows.plan import PipelinePlan
from flows.stages import distill, finetune, pretrain, tokenizer
from flows.stages.distill_plan import plan_student
from flows.stages.shards import stage as shards
from flows.training.hardware import Hardware
from flows.training.settings import TrainerSettings, encoder_config, model_in_key
from tests.fakes import EMULATED_BF16_CPU, NATIVE_BF16_CPU, write_word_tasks

CORPUS: dict[str, Any] = {"kind": "pinned-corpus"}
TOKENIZER_CONTENT = "pinned-tokenizer-content"  # the built tokenizer's content key

PINNED = {
    "smoke": {
        "tokenizer": "42adec7afb521f040291",
        "shards": "94fb36023401051d7de7",
        "pretrain": "13cf8590ea42fd7dabc8",
        "finetune": "77a12076352968b890b6",
    },
    "default": {
        "tokenizer": "fb4be842b66af12ba6ff",
        "shards": "b625087590a26be3806f",
        "pretrain": "289283bbea2930bf7cd0",
        "finetune": "0e6e9a0925445f03de66",
    },
}
# experiment=distilbert_smoke (its other stages are the smoke pins above: distillation moves none;
# it keys on the tokenizer's content key, like the later stages).
PINNED_DISTILL = "3160c2942fc99692beea"


def stage_keys(overrides: list[str], hardware: Hardware = NATIVE_BF16_CPU) -> dict[str, str]:
    plan = PipelinePlan.from_config(compose_config(overrides), hardware)
    record = tokenizer.tokenizer_record(plan.tokenizer, CORPUS)
    keys = {"tokenizer": stage_key(tokenizer.STAGE, tokenizer.VERSION, **record)}
    record = shards.shards_record(plan.shards, TOKENIZER_CONTENT, CORPUS)
    keys["shards"] = stage_key(shards.STAGE, shards.VERSION, **record)
    record = pretrain.pretrain_record(plan.pretrain, keys["shards"], TOKENIZER_CONTENT)
    keys["pretrain"] = stage_key(pretrain.STAGE, pretrain.VERSION, **record)
    settings = finetune.stage_settings(plan.finetune, plan.pretrain.seed, plan.pretrain.trainer)
    for spec in settings["specs"].values():
        spec["data"] = "pinned-data"
    inputs = {"pretrain": keys["pretrain"], "tokenizer": TOKENIZER_CONTENT}
    keys["finetune"] = stage_key(finetune.STAGE, finetune.VERSION, settings, inputs)
    return keys


@pytest.mark.parametrize("experiment", sorted(PINNED))
def test_artifact_keys_of_the_shipped_configs_do_not_move(experiment: str) -> None:
    overrides = [] if experiment == "default" else [f"experiment={experiment}"]
    assert stage_keys(overrides) == PINNED[experiment]


def test_the_distill_key_of_the_shipped_smoke_experiment_does_not_move() -> None:
    """experiment=distilbert_smoke, with a stand-in for the teacher's weights hash."""
    overrides = ["experiment=distilbert_smoke"]
    keys = stage_keys(overrides)
    plan = PipelinePlan.from_config(compose_config(overrides), NATIVE_BF16_CPU)
    assert plan.distill is not None
    settings, vocab = plan.distill, plan.tokenizer.vocab_size
    student = plan_student(
        settings.distill,
        encoder_config(settings.distill.student, vocab, 0),
        encoder_config(plan.pretrain.model, vocab, 0),
        "pinned",
    )
    record = distill.distill_record(
        settings, student, "weights:pinned", keys["shards"], TOKENIZER_CONTENT
    )
    assert stage_key(distill.STAGE, distill.VERSION, **record) == PINNED_DISTILL


def test_a_machine_that_emulates_bf16_keys_its_fp32_weights_apart() -> None:
    """A store shared by two kinds of machine never holds fp32 and bf16 weights under one key;
    forcing 32-true on a native machine gives the weights, and key, of `auto` on an AVX2 one."""
    native, emulated = stage_keys([]), stage_keys([], EMULATED_BF16_CPU)
    assert emulated["shards"] == native["shards"]
    assert emulated["pretrain"] != native["pretrain"]
    assert emulated["finetune"] != native["finetune"]
    assert stage_keys(["trainer.precision=32-true"]) == emulated


def test_a_model_option_keys_the_same_spelled_out_at_its_default_or_left_out() -> None:
    short = {"name": "bert-tiny", "hidden_size": 128}
    spelled = {"name": "renamed", "hidden_size": 128, "position_embedding": "absolute"}

    # compared as the key hashes them: `0 == 0.0` in Python, but not in their JSON
    def keyed(model: dict[str, Any]) -> str:
        return canonical_json(model_in_key(model))

    assert keyed(short) == keyed(spelled)
    # an integer given for a float option is the same value (`model.dropout=0`, `rope_theta=1e4`)
    assert keyed({**short, "dropout": 0, "rope_theta": 10000}) == keyed(
        {**short, "dropout": 0.0, "rope_theta": 10000.0}
    )
    assert keyed(short) != keyed({**short, "position_embedding": "rotary"})


def test_pooling_keys_classification_tasks_only(tmp_path: Path) -> None:
    """A tagging head scores every token: `finetune.pooling` changes nothing it computes."""
    catalog = write_word_tasks(tmp_path)

    def recipes(pooling: str) -> dict[str, Any]:
        settings = FinetuneSettings(
            tasks=["pairs", "tags"], catalog=catalog, data_dir=str(tmp_path), pooling=pooling
        )
        keyed = finetune.stage_settings(settings, 1, TrainerSettings(precision="32-true"))["specs"]
        return {task: spec["recipe"] for task, spec in keyed.items()}

    cls, mean = recipes("cls"), recipes("mean")
    assert cls["tags"] == mean["tags"]
    assert cls["pairs"] != mean["pairs"]


def test_an_opt_in_task_field_keys_the_task_only_when_set() -> None:
    """Adding `drop_contained_rows` moved no task's key; setting it moves its task's."""
    task = {"format": "glue", "labels": ["0", "1"], "train": "t.tsv", "test": "t.tsv"}
    off = TaskSpec(name="t", **task).key_record()
    assert "drop_contained_rows" not in off
    assert TaskSpec(name="t", **task, drop_contained_rows=False).key_record() == off
    assert TaskSpec(name="t", **task, drop_contained_rows=True).key_record() != off
