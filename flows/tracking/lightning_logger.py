"""Lightning's MLflow logger, bound to a run that Cloze's RunHandle ends (runs.py)."""

from __future__ import annotations

from pytorch_lightning.loggers import MLFlowLogger


class RunLogger(MLFlowLogger):
    """Lightning's MLflow logger for a run that its RunHandle ends.

    Lightning ends the run at the end of every fit; a stage fits several times (a task's
    seeds and learning rates), and MLflow prints the run's "View run" link at each end, so the
    link appeared up to 4 times per run. The handle ends the run once, with the stage's outcome.
    """

    def finalize(self, status: str = "success") -> None:
        return None
