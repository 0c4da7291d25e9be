"""Artifact keys are a contract with every store already on disk: they move only by the rule of
flows/core/keys.py, never by a refactor.

The pins are the keys of the shipped default and smoke configs and of the distillation smoke
experiment, computed as on a CPU with native bf16 (where `trainer.precision: auto` resolves to
bf16-mixed), with fixed stand-ins for what depends on the machine or on a build: the corpus
fingerprint (`CORPUS`), the built tokenizer's content key (`TOKENIZER_CONTENT`), the task data's
fingerprint and the teacher's weights hash. A pin that moves must move on purpose: bump the
stage's `VERSION` when the code changes its output, re-pin, and say why in the commit; a shipped
config whose values change re-pins without a bump. `git log -p` on this file is each pin's history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import canonical_json, stage_key
from flows.core.config import compose_config
from flows.core.keys import opt_ins_at_default
from flows.corpora.file_source import OPT_IN_RULES
from flows.corpora.formats import ReadRules
from flows.corpora.replay import open_replay
from flows.downstream.settings import OPT_IN_RECIPE_FIELDS, FinetuneSettings, Recipe
from flows.downstream.tasks.spec import OPT_IN_FIELDS, QA_DECODING, TaskSpec
from flows.plan import PipelinePlan
from flows.stages import distill, finetune, pretrain, tokenizer
from flows.stages.distill_plan import plan_student
from flows.stages.shards import stage as shards
from flows.training.hardware import Hardware
from flows.training.settings import (
    OPT_IN_MODEL_FIELDS,
    ModelSettings,
    TrainerSettings,
    encoder_config,
    model_in_key,
)
from tests.fakes import EMULATED_BF16_CPU, NATIVE_BF16_CPU, write_word_tasks

CORPUS: dict[str, Any] = {"kind": "pinned-corpus"}
TOKENIZER_CONTENT = "pinned-tokenizer-content"  # the built tokenizer's content key

PINNED = {
    "smoke": {
        "tokenizer": "42adec7afb521f040291",
        "shards": "94fb36023401051d7de7",
        "pretrain": "13cf8590ea42fd7dabc8",
        "finetune": "99000d20a4c99c888044",
    },
    "default": {
        "tokenizer": "fb4be842b66af12ba6ff",
        "shards": "b625087590a26be3806f",
        "pretrain": "289283bbea2930bf7cd0",
        "finetune": "3ff5f109bdbd75b7eda1",
    },
}
# experiment=distilbert_smoke (its other stages are the smoke pins above: distillation moves none;
# it keys on the tokenizer's content key, like the later stages).
PINNED_DISTILL = "3160c2942fc99692beea"


def stage_keys(overrides: list[str], hardware: Hardware = NATIVE_BF16_CPU) -> dict[str, str]:
    plan = PipelinePlan.from_config(compose_config(overrides), hardware)
    record = tokenizer.tokenizer_record(plan.tokenizer, CORPUS)
    keys = {"tokenizer": stage_key(tokenizer.STAGE, tokenizer.VERSION, **record)}
    replay = plan.corpus.replay
    replayed = None if replay is None else open_replay(replay, plan.corpus.read_rules)
    record = shards.shards_record(
        plan.shards, TOKENIZER_CONTENT, CORPUS, None if replayed is None else replayed.fingerprint()
    )
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


def test_corpus_replay_keys_the_shards_and_what_follows_them_never_the_tokenizer(
    tmp_path: Path,
) -> None:
    """Unset (null, the default) it is in no key: the pins above hold. Set, the shards key holds
    its files' content and its share, and the stages after the shards follow."""
    (tmp_path / "wiki_00").write_text("<doc id=1>\nGeneral text of an encyclopedia.\n</doc>\n")
    assert PipelinePlan.from_config(compose_config([]), NATIVE_BF16_CPU).corpus.replay is None
    plain = stage_keys([])
    replayed = stage_keys([f"corpus.replay={{paths:[{tmp_path}/wiki_00],share:0.1}}"])
    assert replayed["tokenizer"] == plain["tokenizer"]
    assert all(replayed[stage] != plain[stage] for stage in ("shards", "pretrain", "finetune"))
    other_share = stage_keys([f"corpus.replay={{paths:[{tmp_path}/wiki_00],share:0.2}}"])
    assert other_share["shards"] != replayed["shards"]


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


def test_only_a_question_answering_task_keys_its_decoding_and_unanswerable_mode() -> None:
    """QA decoding 3 (abstain everywhere where validation says so, span tiebreaks) moved every
    QA task's key, and only theirs; `unanswerable: drop` keys the task apart from its SQuAD 2.0
    twin on the same file."""
    qa = {"format": "squad", "kind": "question_answering", "train": "q.json"}
    assert TaskSpec(name="q", **qa).key_record()["decoding"] == QA_DECODING == 3
    dropped = TaskSpec(name="q", **qa, unanswerable="drop").key_record()
    assert dropped != TaskSpec(name="q", **qa).key_record() and dropped["unanswerable"] == "drop"
    glue = TaskSpec(name="t", format="glue", labels=["0", "1"], train="t.tsv", test="t.tsv")
    assert not {"decoding", "unanswerable", "qa_columns"} & set(glue.key_record())


MULTI_LABEL = {"kind": "multi_label", "labels": ["a", "b"], "train": "m", "test": "m"}


def test_only_a_multi_label_task_keys_its_results_version() -> None:
    """Per-label thresholds chosen on validation and the TF-IDF baseline (results version 2)
    moved every multi-label task's key, and only theirs; its csv separator keys its task."""
    records = TaskSpec(name="m", format="jsonl", **MULTI_LABEL).key_record()
    assert records["kind_version"] == 2 and "label_separator" not in records
    csv = TaskSpec(name="m", format="csv", label_separator="|", **MULTI_LABEL).key_record()
    assert csv["label_separator"] == "|"
    glue = TaskSpec(name="t", format="glue", labels=["0", "1"], train="t.tsv", test="t.tsv")
    qa = TaskSpec(name="q", format="squad", kind="question_answering", train="q.json")
    assert "kind_version" not in glue.key_record() and "kind_version" not in qa.key_record()


TASK = {"format": "glue", "labels": ["0", "1"], "train": "t.tsv", "test": "t.tsv"}
# Each class's declared opt-ins, at their defaults in a default instance.
OPT_INS = [
    (TrainerSettings(), TrainerSettings.OPT_IN),
    (ModelSettings(), OPT_IN_MODEL_FIELDS),
    (Recipe(), OPT_IN_RECIPE_FIELDS),
    (TaskSpec(name="t", **TASK), OPT_IN_FIELDS),
    (ReadRules(), OPT_IN_RULES),
]


@pytest.mark.parametrize(("settings", "opt_in"), OPT_INS, ids=lambda v: type(v).__name__)
def test_every_declared_opt_in_is_a_defaulted_field_left_out_at_its_default(
    settings: object, opt_in: tuple[str, ...]
) -> None:
    assert opt_ins_at_default(settings, opt_in) == set(opt_in)


def set_off_default(name: str, value: object) -> tuple[Any, Any]:
    """The key of a default instance and of one with opt-in `name` set to `value`."""
    keyed: dict[str, Any] = {
        "warmup_ratio": lambda **v: TrainerSettings(**v).in_key(),
        "activation": lambda **v: model_in_key(v),
        "tie_word_embeddings": lambda **v: model_in_key(v),
        "grid_seeds": lambda **v: Recipe(**v).key_record(set()),
        "grid_pruning_margin": lambda **v: Recipe(**v).key_record(set()),
        "doc_stride": lambda **v: Recipe(**v).key_record(set()),
        "drop_contained_rows": lambda **v: TaskSpec(name="t", **TASK, **v).key_record(),
        "allow_empty_labels": lambda **v: TaskSpec(
            name="m", format="jsonl", **MULTI_LABEL, **v
        ).key_record(),
    }
    return keyed[name](), keyed[name](**{name: value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("warmup_ratio", 0.05),
        ("activation", "gelu_tanh"),
        ("tie_word_embeddings", False),
        ("grid_seeds", 2),
        ("grid_pruning_margin", 0.02),
        ("doc_stride", 64),
        ("drop_contained_rows", True),
        ("allow_empty_labels", False),
    ],
)
def test_an_opt_in_set_off_its_default_enters_the_key(name: str, value: object) -> None:
    """The other half of the rule: once set, the output changes and so does the key."""
    default, changed = set_off_default(name, value)
    assert name not in default, f"{name} at its default entered the key"
    assert changed.get(name, "left out") == value, f"{name} set off its default is not keyed"


def test_training_batches_grouped_by_length_or_random_key_apart() -> None:
    """Not an opt-in: grouped batches (the default) changed every run's results when they came
    (finetune VERSION 7), and `group_by_length: false` reproduces the random batches before."""
    assert "group_by_length" not in OPT_IN_RECIPE_FIELDS
    grouped = Recipe().key_record(set())
    assert grouped["group_by_length"] is True
    assert Recipe(group_by_length=False).key_record(set()) != grouped
