"""The finetune stage end to end on tasks written by the test: both arms, a grid, two seeds, each
seed with its own labelled sample, baselines beside the arms, two intervals on the lift."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import ArtifactStore, stage_key
from flows.core.config import compose_config
from flows.downstream.kinds.multi_label import THRESHOLDS
from flows.downstream.settings import FinetuneSettings
from flows.stages.control_arm import CONTROL_STAGE, control_record
from flows.stages.finetune import finetune, stage_settings, task_settings
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.training_types import FinetuneOutputs, PretrainSettings
from lightning_modules.models.config import load_encoder_config
from tests.fakes import TASK_WORDS, TINY_ENCODER, WordShards, word_finetune
from tests.fakes import TINY_TRAINER as TRAINER


@pytest.fixture(scope="module")
def evaluated(word_shards: WordShards, word_encoder: Any) -> tuple[Any, ...]:
    store, tokenizer, pretrained = word_shards.store, word_shards.tokenizer, word_encoder
    settings = word_finetune(
        word_shards,
        ["pairs", "tags"],
        # The tagging task alone sets its epochs: the pair task keeps finetune.epochs=5.
        catalog={
            **word_shards.catalog,
            "tags": {**word_shards.catalog["tags"], "recipe": {"epochs": 4}},
        },
        learning_rates=[3e-3, 1e-2],
        epochs=5,
        train_examples=200,
    )
    ref = finetune(settings, 5, TRAINER, pretrained, tokenizer, store)
    return settings, ref, (pretrained, tokenizer, store)


def test_typed_outputs_read_each_task_and_round_trip_the_manifest(evaluated: Any) -> None:
    _, ref, _ = evaluated
    typed = FinetuneOutputs.of(ref)
    tags = typed.figures["tags"]
    assert (tags.metric, tags.seeds, tags.train_examples) == ("entity_f1", 2, 200)
    assert tags.lift == pytest.approx(tags.pretrained.mean - tags.random_init.mean)
    assert set(tags.baselines) == {"seen_entities"}
    assert typed.to_manifest().items() <= ref.outputs.items()
    assert FinetuneOutputs.from_manifest(typed.to_manifest()) == typed


def test_every_task_reports_both_arms_the_lift_and_its_interval(evaluated: Any) -> None:
    _, ref, _ = evaluated
    outputs = ref.outputs
    assert outputs["tasks"] == ["pairs", "tags"]
    for task, metric in (("pairs", "accuracy"), ("tags", "entity_f1")):
        assert outputs[f"{task}.metric"] == metric
        assert outputs[f"{task}.seeds"] == 2
        pre, rand = (
            outputs[f"{task}.pretrained_{metric}_mean"],
            outputs[f"{task}.random_init_{metric}_mean"],
        )
        assert outputs[f"{task}.lift_{metric}"] == pytest.approx(pre - rand)
        low, high = (
            outputs[f"{task}.lift_{metric}_ci_low"],
            outputs[f"{task}.lift_{metric}_ci_high"],
        )
        assert low <= outputs[f"{task}.lift_{metric}"] <= high
        low, high = (
            outputs[f"{task}.lift_{metric}_bootstrap_low"],
            outputs[f"{task}.lift_{metric}_bootstrap_high"],
        )
        assert -1 <= low <= high <= 1
        for arm in ("pretrained", "random_init"):
            assert outputs[f"{task}.{arm}_learning_rate"] in (3e-3, 1e-2)
            assert 1 <= outputs[f"{task}.{arm}_epochs_mean"] <= 5
            assert 0 <= outputs[f"{task}.{arm}_capped_runs"] <= 2
    # 200 labelled examples per seed, drawn from the 360 left after carving validation.
    assert outputs["pairs.train_examples"] == 200 and outputs["pairs.validation_examples"] == 40
    assert outputs["tags.train_examples"] == 200
    results = json.loads((ref.path / "results.json").read_text())
    assert results["pairs"]["caps"] == {
        "train_examples": {"used": 200, "of": 360, "key": "finetune.train_examples"}
    }
    assert outputs["pairs.caps"] == "train 200 of 360 examples per seed (finetune.train_examples)"
    assert outputs["pairs.test_truncated_examples"] == 0  # 32 tokens hold every pair
    assert (outputs["pairs.max_epochs"], outputs["tags.max_epochs"]) == (5, 4)
    assert results["tags"]["recipe"]["epochs"] == 4
    assert results["tags"]["recipe"]["set_by_task"] == ["epochs"]
    # The signal is one word: the recipe must learn it, at least in the best arm's best run. Not
    # the mean over seeds: with 200 examples and early stopping, a seed can stop at the majority
    # class (accuracy ~0.52), on either arm (seen with torch's own dropout and with Cloze's).
    for task, metric, floor in (("pairs", "accuracy", 0.9), ("tags", "entity_f1", 0.8)):
        best = max(
            run["test"][metric]
            for arm in ("pretrained", "random_init")
            for run in results[task][arm]["runs"]
        )
        assert best > floor, (task, best)


def test_baselines_sit_beside_the_arms_fitted_once_per_labelled_sample(evaluated: Any) -> None:
    _, ref, _ = evaluated
    outputs = ref.outputs
    results = json.loads((ref.path / "results.json").read_text())
    assert outputs["pairs.baselines"] == "majority,tfidf_logreg"
    assert outputs["tags.baselines"] == "seen_entities"
    assert 0.3 < outputs["pairs.baseline_majority_accuracy_mean"] < 0.7  # labels are balanced
    assert outputs["pairs.baseline_tfidf_logreg_accuracy_mean"] > 0.9  # one word decides
    assert outputs["tags.baseline_seen_entities_entity_f1_mean"] == 1.0  # one entity string
    for task, name in (("pairs", "tfidf_logreg"), ("tags", "seen_entities")):
        assert len(results[task]["baselines"][name]["test"]) == 2  # one fit per seed's sample
        assert results[task]["labels"]["source"] == "config"  # the label ids, recorded
        per_class = results[task]["pretrained"]["per_class"]
        assert sum(scores["support"] for scores in per_class.values()) > 0


def test_a_run_is_flagged_capped_exactly_when_its_best_epoch_is_the_last(evaluated: Any) -> None:
    settings, ref, _ = evaluated
    results = json.loads((ref.path / "results.json").read_text())
    for task in ("pairs", "tags"):
        for arm in ("pretrained", "random_init"):
            runs = results[task][arm]["runs"]
            epochs = settings.plan[("pairs", "tags").index(task)].recipe.epochs
            assert [run["capped"] for run in runs] == [run["best_epoch"] == epochs for run in runs]
            assert ref.outputs[f"{task}.{arm}_capped_runs"] == sum(r["capped"] for r in runs)


def test_each_arm_takes_the_rate_its_validation_scores_best(evaluated: Any) -> None:
    _, ref, _ = evaluated
    results = json.loads((ref.path / "results.json").read_text())
    for task in ("pairs", "tags"):
        for arm in ("pretrained", "random_init"):
            grid = results[task][arm]["grid"]
            assert set(grid) == {"0.003", "0.01"}
            best = max(grid, key=lambda rate: grid[rate])
            assert results[task][arm]["learning_rate"] == float(best)
            # a two-point grid: whichever rate wins is an end of it, flagged; equal scores tell
            # no rate apart: flagged tied, the first taken
            tied = len(set(grid.values())) == 1
            edge = "tied" if tied else "lowest" if best == "0.003" else "highest"
            assert results[task][arm]["grid_edge"] == edge
            assert ref.outputs[f"{task}.{arm}_grid_edge"] == edge
            runs = results[task][arm]["runs"]
            assert [run["seed"] for run in runs] == [5, 6]
            assert {run["learning_rate"] for run in runs} == {float(best)}


def test_table_and_chart_are_in_the_artifact_and_a_rerun_is_a_cache_hit(evaluated: Any) -> None:
    settings, ref, (pretrained, tokenizer, store) = evaluated
    table = (ref.path / "summary.md").read_text()
    assert "| pairs | accuracy |" in table and "| tags | entity_f1 |" in table
    assert "95% CI, paired t (seeds)" in table and "95% CI, bootstrap (test)" in table
    assert "tfidf_logreg" in table and "seen_entities" in table
    assert (ref.path / "lift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = finetune(settings, 5, TRAINER, pretrained, tokenizer, store)
    assert again.cache_hit and again.key == ref.key


def test_the_key_follows_the_data_content_not_its_path(evaluated: Any, tmp_path: Path) -> None:
    settings, _, _ = evaluated
    before = stage_settings(settings, 5, TRAINER)
    moved = tmp_path / "moved"
    moved.mkdir()
    for source in Path(settings.data_dir).glob("*.tsv"):
        (moved / source.name).write_bytes(source.read_bytes())
    relocated = settings.model_copy(update={"data_dir": str(moved)})
    assert stage_settings(relocated, 5, TRAINER) == before
    (moved / "ner-test.tsv").write_text("fever\tB-Disease\n")
    assert stage_settings(relocated, 5, TRAINER) != before


def test_a_relation_task_with_typed_markers_runs_from_config(
    evaluated: Any, tmp_path: Path
) -> None:
    """ChemProt's convention (docs/guides/downstream.md): `<< >>` around one entity, `[[ ]]`
    around the other, one record per pair; the label's direction and a negative label."""
    _, _, (pretrained, tokenizer, store) = evaluated
    rng = random.Random(2)
    for split, size in (("train", 120), ("test", 40)):
        rows = []
        for _ in range(size):
            label = rng.choice(["CAUSES(e1,e2)", "CAUSES(e2,e1)", "false"])
            first, second = ("<< alpha >>", "[[ beta ]]")[:: -1 if label.endswith("e1)") else 1]
            verb = "cough" if label == "false" else "fever"
            before, after = rng.choice(TASK_WORDS[:8]), rng.choice(TASK_WORDS[:8])
            text = f"{before} {first} {verb} {second} {after}"
            rows.append(json.dumps({"text": text, "label": label}) + "\n")
        (tmp_path / f"relations-{split}.jsonl").write_text("".join(rows))
    entry = (
        "{format:jsonl,kind:relation,labels:auto,text_column:text,metric:macro_f1,"
        'negative_label:"false",train:relations-train.jsonl,test:relations-test.jsonl}'
    )
    config = compose_config(
        [
            "finetune.tasks=[relations]",
            f"+finetune.catalog.relations={entry}",
            '+finetune.catalog.relations.entity_markers=[["<<",">>"],["[[","]]"]]',
        ]
    )
    task = config["finetune"]["catalog"]["relations"]
    settings = FinetuneSettings(
        tasks=["relations"],
        catalog={"relations": task},
        data_dir=str(tmp_path),
        seeds=2,
        learning_rates=[1e-2],
        epochs=3,
        max_length=32,
        bootstrap_samples=100,
    )
    settings.check_task_files(5)  # read, marker-checked and encoded up front
    ref = finetune(settings, 5, TRAINER, pretrained, tokenizer, store)
    outputs = ref.outputs
    results = json.loads((ref.path / "results.json").read_text())
    assert results["relations"]["labels"]["names"] == ["CAUSES(e1,e2)", "CAUSES(e2,e1)", "false"]
    assert set(results["relations"]["pretrained"]["per_class"]) == {"CAUSES", "false"}
    assert outputs["relations.baselines"] == "majority,tfidf_logreg"
    for name in ("macro_f1", "micro_f1", "accuracy"):
        assert 0 <= outputs[f"relations.pretrained_{name}_mean"] <= 1
    low, high = (outputs[f"relations.lift_macro_f1_bootstrap_{end}"] for end in ("low", "high"))
    assert low <= outputs["relations.lift_macro_f1"] <= high
    assert outputs["relations.caps"] == ""  # every row marked whole, 32 tokens hold each
    summary = (ref.path / "summary.md").read_text()
    assert "| class | test support | pretrained P / R / F1 | random_init P / R / F1 |" in summary
    support = results["relations"]["pretrained"]["per_class"]["CAUSES"]["support"]
    assert f"| CAUSES | {support} | " in summary


def test_a_multi_label_task_runs_from_config_and_reports_micro_and_macro_f1(
    evaluated: Any, tmp_path: Path
) -> None:
    """A label list per record, none or several (a note with its codes): a sigmoid per label,
    each label cut at its threshold chosen on validation (recorded per run and shown per arm in
    summary.md), micro- and macro-F1 with the lift's two intervals, the per-label majority and
    the one-vs-rest TF-IDF baselines."""
    _, _, (pretrained, tokenizer, store) = evaluated
    rng = random.Random(3)
    for split, size in (("train", 120), ("test", 40)):
        rows = []
        for _ in range(size):
            codes = sorted(rng.sample(["fever", "cough"], rng.randrange(0, 3)))
            words = [rng.choice(TASK_WORDS[:8]) for _ in range(4)] + codes
            rng.shuffle(words)
            rows.append(json.dumps({"note": " ".join(words), "codes": codes}) + "\n")
        (tmp_path / f"codes-{split}.jsonl").write_text("".join(rows))
    entry = (
        "{format:jsonl,kind:multi_label,labels:auto,text_column:note,label_column:codes,"
        "train:codes-train.jsonl,test:codes-test.jsonl}"
    )
    config = compose_config(["finetune.tasks=[codes]", f"+finetune.catalog.codes={entry}"])
    settings = FinetuneSettings(
        tasks=["codes"],
        catalog={"codes": config["finetune"]["catalog"]["codes"]},
        data_dir=str(tmp_path),
        seeds=2,
        learning_rates=[1e-2],
        epochs=3,
        max_length=32,
        bootstrap_samples=100,
    )
    settings.check_task_files(5)  # read and encoded up front
    ref = finetune(settings, 5, TRAINER, pretrained, tokenizer, store)
    outputs = ref.outputs
    results = json.loads((ref.path / "results.json").read_text())
    assert results["codes"]["labels"]["names"] == ["cough", "fever"]
    assert set(results["codes"]["pretrained"]["per_class"]) == {"cough", "fever"}
    assert outputs["codes.baselines"] == "majority,tfidf_logreg"
    for name in ("micro_f1", "macro_f1"):
        assert 0 <= outputs[f"codes.pretrained_{name}_mean"] <= 1
    low, high = (outputs[f"codes.lift_micro_f1_bootstrap_{end}"] for end in ("low", "high"))
    assert low <= outputs["codes.lift_micro_f1"] <= high
    assert "codes.baseline_tfidf_logreg_micro_f1_mean" in outputs
    for arm in ("pretrained", "random_init"):
        for run in results["codes"][arm]["runs"]:
            assert len(run["label_thresholds"]) == 2
            assert set(run["label_thresholds"]) <= set(THRESHOLDS)
    summary = (ref.path / "summary.md").read_text()
    assert "Per-label thresholds, codes (chosen on validation" in summary
    assert "| label | pretrained | random_init | baseline tfidf_logreg |" in summary


def control_artifacts(store: ArtifactStore) -> set[str]:
    return {path.name for path in (store.root / CONTROL_STAGE).iterdir()}


def test_another_encoder_of_the_same_shape_reuses_the_random_init_runs(
    evaluated: Any, word_shards: WordShards
) -> None:
    """Random init reads nothing of pretraining but the shape and vocabulary: a second
    pretrained model (here another seed; in flows.lift the domain-continued one) is
    scored against the same control runs, fitted once."""
    settings, ref, (_, tokenizer, store) = evaluated
    other = pretrain(
        PretrainSettings(TINY_ENCODER, ObjectiveSettings(), TRAINER, 1),
        word_shards.shards,
        tokenizer,
        store,
    )
    before = control_artifacts(store)
    second = finetune(settings, 5, TRAINER, other, tokenizer, store)
    assert second.key != ref.key and control_artifacts(store) == before
    first, again = (json.loads((r.path / "results.json").read_text()) for r in (ref, second))
    for task in ("pairs", "tags"):
        assert again[task]["random_init"] == first[task]["random_init"]


def test_the_control_key_follows_the_shape_and_vocabulary_not_the_weights(
    evaluated: Any,
) -> None:
    settings, _, (pretrained, tokenizer, _) = evaluated
    task = task_settings(settings.plan[0], settings.resolved_data_dir())
    encoder = load_encoder_config(pretrained.path)

    def key(**changes: Any) -> str:
        record = control_record(
            changes.get("task", task),
            changes.get("seed", 5),
            TRAINER,
            replace(encoder, **changes.get("shape", {})),
            changes.get("tokenizer", tokenizer),
        )
        return stage_key(CONTROL_STAGE, 1, record["settings"], record["inputs"])

    assert key() == key(shape={})
    assert key(shape={"hidden_size": 64}) != key()
    assert key(seed=6) != key()
    assert key(tokenizer=replace(tokenizer, key="another")) != key()
    assert key(task={**task, "recipe": {**task["recipe"], "seeds": 3}}) != key()


def test_a_stopped_stage_keeps_each_finished_task_and_the_rerun_trains_only_the_rest(
    word_shards: WordShards, word_encoder: Any, tmp_path: Path
) -> None:
    settings = word_finetune(
        word_shards, ["pairs", "tags"], seeds=1, epochs=1, bootstrap_samples=100
    )
    store = ArtifactStore(tmp_path / "store")
    trained: list[str] = []
    stop_in: set[str] = {"tags"}

    def loggers_for(task: str, label: str) -> list[Any]:
        if task in stop_in:
            stop_in.clear()
            raise KeyboardInterrupt  # Ctrl-C while the second task trains
        trained.append(task)
        return []

    def run() -> Any:
        return finetune(
            settings, 5, TRAINER, word_encoder, word_shards.tokenizer, store, loggers_for
        )

    with pytest.raises(KeyboardInterrupt):
        run()
    assert set(trained) == {"pairs"}
    trained.clear()
    ref = run()
    assert set(trained) == {"tags"}  # the first task was restored, not trained again
    results = json.loads((ref.path / "results.json").read_text())
    assert sorted(results) == ["pairs", "tags"]
    pre, rand = (ref.outputs[f"pairs.{arm}_accuracy_mean"] for arm in ("pretrained", "random_init"))
    assert ref.outputs["pairs.lift_accuracy"] == pytest.approx(pre - rand)
    assert not store.work_dir("finetune", ref.key).exists()  # gone once published
