"""`pretrain.general_validation`: what the model forgot, scored at every validation from step 0.

Real stages on a tiny corpus: a one-layer encoder, four steps. The general text is other words
than the domain's (the downstream tests' Greek letters against the word corpus's), so training
on the domain moves its loss.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from pytorch_lightning.loggers import Logger

from flows.core.artifacts import ArtifactRef
from flows.plan import PipelinePlan
from flows.stages.collators import make_collator
from flows.stages.forgetting import LOSS, TOKENS, general_change_interval
from flows.stages.init_point import InitPoint
from flows.stages.pretrain import general_masking, general_rows, pretrain
from flows.stages.tokenizer import load_tokenizer
from flows.stages.training_types import PretrainOutputs, PretrainSettings
from flows.summary import stage_figures
from lightning_modules.data.mlm_datamodule import MaskedLMDataModule
from lightning_modules.models.config import IGNORE_INDEX
from tests.fakes import TINY_ENCODER, TINY_TRAINER, WordShards, composed, greek_text


class Recorded(Logger):
    """Every metric logged, with its step: what MLflow would receive."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recorded"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: object, *args: object, **kwargs: object) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        assert step is not None, "every metric is logged at a step"
        self.metrics.append((step, dict(metrics)))

    def at(self, name: str) -> dict[int, float]:
        return {step: figures[name] for step, figures in self.metrics if name in figures}


@pytest.fixture(scope="module")
def general_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Held-out general text: 60 paragraphs of Greek letter names."""
    path = tmp_path_factory.mktemp("general") / "general.txt"
    path.write_text(greek_text(60, seed=3))
    return path


def settings_with_general(general_file: Path, *overrides: str) -> PretrainSettings:
    """The tiny recipe with `pretrain.general_validation` set, as the plan builds it."""
    run = composed(f"pretrain.general_validation=['{general_file}']", *overrides)
    general = run.pretrain.general(run.corpus)
    model: Any = TINY_ENCODER  # a dict of model.* keys, as conftest's `word_encoder` passes it
    return PretrainSettings(model, run.objective, TINY_TRAINER, 0, general_validation=general)


@pytest.fixture(scope="module")
def from_scratch(word_shards: WordShards, general_file: Path) -> tuple[ArtifactRef, Recorded]:
    recorded = Recorded()
    ref = pretrain(
        settings_with_general(general_file),
        word_shards.shards,
        word_shards.tokenizer,
        word_shards.store,
        [recorded],
    )
    return ref, recorded


def test_a_run_from_scratch_logs_the_general_loss_and_accuracy_from_step_0(
    from_scratch: tuple[ArtifactRef, Recorded],
) -> None:
    ref, recorded = from_scratch
    losses, accuracies = recorded.at("val_general/loss"), recorded.at("val_general/accuracy")
    # step 0 (before training), and step 4: the validation at the run's last step and the final
    # one share it (metrics are recorded at the optimizer steps done, trainer.MetricSteps)
    assert sorted(losses) == sorted(accuracies) == sorted(recorded.at("val/loss")) == [0, 4]
    outputs = PretrainOutputs.of(ref)
    assert outputs.initial_val_general_loss == pytest.approx(losses[0])
    assert outputs.initial_val_general_accuracy == pytest.approx(accuracies[0])
    assert outputs.validation["val_general_loss"] == pytest.approx(losses[4])
    assert outputs.validation["val_general_accuracy"] == pytest.approx(accuracies[4])
    assert outputs.general_loss_change == pytest.approx(losses[4] - losses[0])


def test_a_continuation_starts_from_the_general_loss_its_base_ended_on(
    from_scratch: tuple[ArtifactRef, Recorded], word_shards: WordShards, general_file: Path
) -> None:
    """Step 0 is the base's value: the same rows under the same fixed masks score the same
    weights identically, in another run."""
    base, _ = from_scratch
    recorded = Recorded()
    start = InitPoint.of_artifact(base.path)
    settings = settings_with_general(general_file)
    continued = pretrain(
        settings, word_shards.shards, word_shards.tokenizer, word_shards.store, [recorded], start
    )
    initial = PretrainOutputs.of(continued).initial_val_general_loss
    assert initial == pytest.approx(PretrainOutputs.of(base).validation["val_general_loss"])
    assert recorded.at("val_general/loss")[0] == pytest.approx(initial)


def test_the_general_rows_are_masked_once_at_15_percent_whatever_the_objective(
    word_shards: WordShards, general_file: Path
) -> None:
    settings = settings_with_general(general_file, "objective.mask_rate=0.4")
    rows = general_rows(settings, word_shards.shards, word_shards.tokenizer, word_shards.store)
    assert rows is not None
    trained = load_tokenizer(word_shards.tokenizer)

    def validation_sets() -> tuple[Any, Any]:
        data = MaskedLMDataModule(
            word_shards.shards.path,
            make_collator(settings.objective, trained, 0),
            8,
            0,
            general=general_masking(rows.path, trained, 0),
        )
        data.setup()
        return data.validation_set, data.general_set

    def share_masked(batch: dict[str, torch.Tensor]) -> float:
        special = torch.isin(batch["input_ids"], torch.tensor(trained.special.all()))
        selected = batch["labels"] != IGNORE_INDEX
        return float(selected.sum() / (~special | selected).sum())

    domain, general = validation_sets()
    assert share_masked(domain.batch) == pytest.approx(0.4, abs=0.05)
    assert share_masked(general.batch) == pytest.approx(0.15, abs=0.04)
    _, again = validation_sets()
    for name, tensor in general.batch.items():  # fixed: the same positions every time
        assert torch.equal(tensor, again.batch[name]), name


def test_the_summary_shows_what_the_run_learned_and_what_it_forgot(
    from_scratch: tuple[ArtifactRef, Recorded],
) -> None:
    ref, _ = from_scratch
    out = PretrainOutputs.of(ref)
    line = stage_figures("pretrain", ref.outputs)
    domain = out.val_loss - out.initial_val_loss
    interval = out.general_change_interval
    assert interval is not None
    change = out.general_loss_change
    bounds = f"[{interval['loss_low']:+.2f}, {interval['loss_high']:+.2f}]"
    assert f"; domain loss {domain:+.2f}, general loss {change:+.2f} {bounds} (" in line
    assert f"{out.initial_val_general_loss:.3f} -> {out.validation['val_general_loss']:.3f}" in line
    assert line.endswith("; 95% paired bootstrap over the general rows)")


def test_the_general_change_has_a_paired_interval_over_the_rows_around_it(
    from_scratch: tuple[ArtifactRef, Recorded],
) -> None:
    out = PretrainOutputs.of(from_scratch[0])
    interval = out.general_change_interval
    assert interval is not None and interval["confidence"] == 0.95
    change = out.general_loss_change
    assert change is not None and interval["loss_low"] <= change <= interval["loss_high"]
    accuracy = out.validation["val_general_accuracy"] - out.before["val_general_accuracy"]
    assert interval["accuracy_low"] <= accuracy <= interval["accuracy_high"]
    assert interval["loss_low"] < interval["loss_high"]  # rows differ: a real spread


def test_a_change_every_row_shares_is_known_exactly_and_none_is_zero() -> None:
    before = torch.tensor([[12.0, 2.0, 6.0], [3.0, 1.0, 2.0], [0.0, 0.0, 0.0], [9.0, 3.0, 4.0]])
    shifted = before.clone()
    shifted[:, LOSS] += 0.5 * before[:, TOKENS]  # +0.5 per token, in every row
    interval = general_change_interval(before, shifted, seed=0)
    assert interval["loss_low"] == pytest.approx(0.5) and interval["loss_high"] == pytest.approx(
        0.5
    )
    assert interval["accuracy_low"] == interval["accuracy_high"] == 0.0
    unchanged = general_change_interval(before, before, seed=0)
    assert unchanged["loss_low"] == unchanged["loss_high"] == 0.0


def test_rows_that_disagree_widen_the_interval_and_the_same_seed_repeats_it() -> None:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.full((200,), 20.0, dtype=torch.float64)
    before = torch.stack([2.0 * tokens, 0.5 * tokens, tokens], 1)
    after = before.clone()
    after[:, LOSS] += tokens * torch.randn(200, generator=generator, dtype=torch.float64)
    interval = general_change_interval(before, after, seed=3)
    mean = float((after[:, LOSS] - before[:, LOSS]).sum() / tokens.sum())
    assert interval["loss_low"] < mean < interval["loss_high"]
    assert 0.2 < interval["loss_high"] - interval["loss_low"] < 0.4  # about 4 x 1 / sqrt(200)
    assert general_change_interval(before, after, seed=3) == interval


def test_rows_before_and_after_must_be_the_same_rows() -> None:
    with pytest.raises(ValueError, match=r"before \(4, 3\) and after \(5, 3\) differ"):
        general_change_interval(torch.zeros(4, 3), torch.zeros(5, 3), seed=0)


def test_after_a_head_warmup_learning_and_forgetting_are_measured_from_its_end(
    from_scratch: tuple[ArtifactRef, Recorded],
) -> None:
    """A checkpoint without an MLM head scores chance at step 0 (a fresh head): the "before" is
    the validation at the warm-up's end, in the summary, the refresh's judgement and its report."""
    from flows.plan import RefreshSettings
    from flows.refresh.flow import general_forgetting

    ref, _ = from_scratch
    warmup_end = {"val_loss": 3.0, "val_accuracy": 0.3, "val_general_loss": 2.5}
    warmup_end["val_general_accuracy"] = 0.4
    outputs = {**ref.outputs, "head_warmup_validation": warmup_end}
    del outputs["general_change_interval"]  # the run's is from step 0; and an older artifact's
    out = PretrainOutputs.from_manifest(outputs)
    assert out.before == warmup_end
    assert out.general_loss_change == pytest.approx(out.validation["val_general_loss"] - 2.5)
    line = stage_figures("pretrain", outputs)
    domain = out.val_loss - 3.0
    change = out.general_loss_change
    words = f"; domain loss {domain:+.2f}, general loss {change:+.2f} since the head warm-up ("
    assert words in line
    assert "(2.500 -> " in line and ", accuracy 0.400 -> " in line
    warmed = replace(ref, outputs=outputs)
    forgetting = general_forgetting(warmed, RefreshSettings(max_general_loss_increase=0.0))
    assert forgetting is not None and forgetting.before == 2.5


def test_off_by_default_it_adds_no_key_no_output_and_no_summary_words(
    word_encoder: ArtifactRef, from_scratch: tuple[ArtifactRef, Recorded]
) -> None:
    """`word_encoder` is `from_scratch`'s recipe without general text (its key pinned in
    tests/unit/test_artifact_keys.py for the shipped configs); set, the rows' key moves it."""
    plan = PipelinePlan.from_run_config(composed())
    assert plan.pretrain.general_validation is None
    assert from_scratch[0].key != word_encoder.key
    assert not [name for name in word_encoder.outputs if "general" in name]
    assert "general" not in stage_figures("pretrain", word_encoder.outputs)


def test_the_rows_are_their_own_piece_reused_by_runs_that_share_text_tokenizer_and_shape(
    from_scratch: tuple[ArtifactRef, Recorded], word_shards: WordShards, general_file: Path
) -> None:
    again = general_rows(
        settings_with_general(general_file),
        word_shards.shards,
        word_shards.tokenizer,
        word_shards.store,
    )
    assert again is not None and again.cache_hit and again.stage == "general_validation"
    assert again.outputs["sequences"] >= 1 and again.outputs["seq_len"] == 32


def test_a_refresh_reads_the_loss_before_and_after_from_the_challengers_run(
    from_scratch: tuple[ArtifactRef, Recorded],
) -> None:
    """What `refresh.max_general_loss_increase` judges (flows/refresh/promotion.py `decide`):
    step 0 (the weights continued: the champion) against the end, and both in the report."""
    from flows.plan import RefreshSettings
    from flows.refresh.flow import general_forgetting, general_losses

    ref, _ = from_scratch
    out = PretrainOutputs.of(ref)
    forgetting = general_forgetting(ref, RefreshSettings(max_general_loss_increase=0.0))
    assert forgetting is not None
    assert (forgetting.before, forgetting.after) == (
        out.initial_val_general_loss,
        out.validation["val_general_loss"],
    )
    assert forgetting.too_much is (forgetting.increase > 0.0)
    interval = out.general_change_interval
    assert interval is not None
    assert forgetting.interval == (interval["loss_low"], interval["loss_high"])
    assert general_losses(ref, forgetting) == {
        "champion_general_loss": forgetting.before,
        "challenger_general_loss": forgetting.after,
        "general_loss_increase_low": interval["loss_low"],
        "general_loss_increase_high": interval["loss_high"],
    }
