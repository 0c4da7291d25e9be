"""The finetune stage end to end on tasks written by the test: both arms, a grid, two seeds, each
seed with its own labelled sample, baselines beside the arms, two intervals on the lift."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from flows.core.artifacts import ArtifactStore
from flows.corpora import CorpusSettings, open_corpus
from flows.stages.finetune import FinetuneOutputs, FinetuneSettings, finetune, stage_settings
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import PretrainSettings, pretrain
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.training.trainer import TrainerSettings

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "fever", "cough"]
TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
# One thread: a tiny model on a loaded 2-core machine runs many times faster than with two.
TRAINER = TrainerSettings(
    max_steps=4, warmup_steps=1, batch_size=8, val_every_steps=4, log_every_steps=2, threads=1
)


def write_tasks(directory: Path) -> dict[str, Any]:
    """A pair task (label: does the second sentence say `fever`?) and a tagging task."""
    rng = random.Random(0)

    def words(count: int) -> str:
        return " ".join(rng.choice(WORDS[:8]) for _ in range(count))

    for split, size in (("train", 400), ("test", 60)):
        rows = ["index\tfirst\tsecond\tlabel"]
        for index in range(size):
            label = rng.random() < 0.5
            second = f"{words(3)} {'fever' if label else 'cough'} {words(2)}"
            rows.append(f"{index}\t{words(6)}\t{second}\t{'yes' if label else 'no'}")
        (directory / f"pairs-{split}.tsv").write_text("\n".join(rows) + "\n")
        sentences = []
        for _ in range(size):
            tokens = [(word, "O") for word in words(5).split()]
            at = rng.randrange(len(tokens))
            tokens[at:at] = [("fever", "B-Disease"), ("cough", "I-Disease")]
            sentences.append("\n".join(f"{token}\t{tag}" for token, tag in tokens))
        (directory / f"ner-{split}.tsv").write_text("\n\n".join(sentences) + "\n")
    return {
        "pairs": {
            "format": "glue",
            "labels": ["no", "yes"],
            "metric": "accuracy",
            "train": "pairs-train.tsv",
            "test": "pairs-test.tsv",
            "text_column": "first",
            "pair_column": "second",
        },
        "tags": {
            "format": "conll",
            "kind": "token_classification",
            "metric": "entity_f1",
            "labels": ["O", "B-Disease", "I-Disease"],
            "train": "ner-train.tsv",
            "test": "ner-test.tsv",
        },
    }


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    root = tmp_path_factory.mktemp("finetune")
    rng = random.Random(1)
    (root / "corpus.txt").write_text(
        "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(20)) for _ in range(300))
    )
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(root / "corpus.txt")]))
    store = ArtifactStore(root / "store")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=100), corpus, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    pretrained = pretrain(
        PretrainSettings(TINY, ObjectiveSettings(), TRAINER, 0), shards, tokenizer, store
    )
    settings = FinetuneSettings(
        tasks=["pairs", "tags"],
        catalog=write_tasks(root),
        data_dir=str(root),
        seeds=2,
        learning_rates=[3e-3, 1e-2],
        epochs=5,
        batch_size=16,
        max_length=32,
        train_examples=200,
        validation_examples=40,
        bootstrap_samples=200,
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
    # The signal is one word: the recipe must learn it on both arms, at least from the best rate.
    assert (
        max(outputs["pairs.pretrained_accuracy_mean"], outputs["pairs.random_init_accuracy_mean"])
        > 0.9
    )
    assert (
        max(outputs["tags.pretrained_entity_f1_mean"], outputs["tags.random_init_entity_f1_mean"])
        > 0.8
    )


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
            assert [run["capped"] for run in runs] == [
                run["best_epoch"] == settings.epochs for run in runs
            ]
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
