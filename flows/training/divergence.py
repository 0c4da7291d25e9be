"""What a diverged training run says: the setting most likely at fault, and what was kept.

The guard itself (lightning_modules/divergence.py) knows nothing of settings; this names them.
"""

from __future__ import annotations

from pathlib import Path

from flows.training.settings import TrainerSettings
from lightning_modules.divergence import DivergenceGuard

# Above this, AdamW on a transformer is far outside the range that trains (1e-5 to 5e-3 is usual;
# Cloze's recipes use 5e-4 to 2e-3), so the learning rate is the first suspect.
HIGH_LEARNING_RATE = 1e-2


def likely_cause(settings: TrainerSettings) -> str:
    """The setting to change first, named as the user sets it."""
    optimizer = settings.optimizer(settings.max_steps)
    rate = f"trainer.learning_rate={optimizer.learning_rate:g}"
    if optimizer.learning_rate > HIGH_LEARNING_RATE:
        return (
            f"Most likely {rate}, far above what trains a transformer with AdamW (1e-5 to "
            "5e-3): lower it"
        )
    if not settings.grad_clip:
        return (
            f"Most likely trainer.grad_clip=0, which turns gradient clipping off: set it to 1.0 "
            f"(or lower {rate})"
        )
    if optimizer.warmup_steps == 0:
        return (
            f"Most likely trainer.warmup_steps=0: warm up (e.g. 10% of the steps) or lower {rate}"
        )
    return f"Most likely {rate}: lower it (or raise trainer.warmup_steps)"


def divergence_guard(settings: TrainerSettings, stage: str, work_dir: Path) -> DivergenceGuard:
    """The guard of a resumable training stage, whose checkpoints live in `work_dir`."""
    advice = (
        f"{likely_cause(settings)}. Nothing was published; any checkpoint saved before it stays "
        f"in {work_dir / 'checkpoints'}, and a rerun with the setting changed trains under a "
        "new key."
    )
    return DivergenceGuard(
        stage,
        advice,
        immediate=settings.accelerator == "cpu",  # elsewhere, no host-device wait every step
        check_every_steps=settings.log_every_steps,  # the progress line waits there anyway
    )
