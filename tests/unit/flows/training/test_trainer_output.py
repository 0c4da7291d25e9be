"""What the project's Trainer says and records besides our own lines: no Lightning warning a
person cannot act on, and every metric at the step the progress lines name (issue 53, case 22)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader

from flows.core.logs import show_progress
from flows.tracking.runs import Tracker
from flows.training.settings import TrainerSettings
from flows.training.trainer import make_trainer


class Toy(pl.LightningModule):
    """A one-parameter model that logs a training and a validation loss, as the stages do."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = (self.weight * batch.float().mean()) ** 2
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val/loss", (self.weight * batch.float().mean()) ** 2)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_metrics_sit_at_the_logged_steps_and_a_short_epoch_draws_no_lightning_warning(
    tmp_path: Path,
) -> None:
    """`compare`'s loss_curves.png drew points at steps 9/19/29/39 where the logs say
    10/20/30/40, and Lightning's `log_every_n_steps` warning printed in the CLI and the serve
    terminal for every fine-tuning fit whose epoch is shorter than the logging interval."""
    run = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "steps", None).start_run("pretrain")
    settings = TrainerSettings(log_every_steps=10, precision="32-true")
    batches = [torch.ones(4) for _ in range(4)]  # an epoch of 4 steps: shorter than 10
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        show_progress()  # what every entry point runs first
        trainer = make_trainer(
            settings,
            tmp_path,
            [run.lightning_logger()],
            [],
            max_steps=40,
            val_check_interval=10,
            check_val_every_n_epoch=None,
            enable_checkpointing=False,
        )
        loader: DataLoader[torch.Tensor] = DataLoader(batches, batch_size=None)  # type: ignore[arg-type]
        trainer.fit(Toy(), loader, loader)
    run.finish()
    history = {
        name: [point.step for point in run.client.get_metric_history(run.run_id, name)]
        for name in ("train/loss", "val/loss")
    }
    assert history == {"train/loss": [10, 20, 30, 40], "val/loss": [10, 20, 30, 40]}
    assert not [str(w.message) for w in caught if "logging interval" in str(w.message)]
    assert "step" not in MlflowClient(run.tracking_uri).get_run(run.run_id).data.metrics
