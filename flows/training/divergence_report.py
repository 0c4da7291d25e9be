"""What a diverged training run says: what was observed, what was kept, and the change that
usually stops a divergence.

The guard itself (lightning_modules/divergence.py) knows nothing of settings; this names them. A
divergence has many causes (a rate too high, no clipping or warm-up, damaged weights resumed
from), so the message states the step and the value, not a guess; the remedy is the standard one
for these settings, offered for a divergence that repeats from finite weights.
"""

from __future__ import annotations

from pathlib import Path

from flows.training.settings import TrainerSettings
from lightning_modules.divergence import DivergenceGuard

# Above this, AdamW on a transformer is far outside the range that trains (1e-5 to 5e-3 is usual;
# Cloze's recipes use 5e-4 to 2e-3), so lowering the learning rate is the first remedy.
HIGH_LEARNING_RATE = 1e-2


def remedy(settings: TrainerSettings) -> str:
    """The setting to change first, named as the user sets it."""
    optimizer = settings.optimizer(settings.max_steps)
    rate = f"trainer.learning_rate={optimizer.learning_rate:g}"
    if optimizer.learning_rate > HIGH_LEARNING_RATE:
        return f"lower {rate}: AdamW trains a transformer at 1e-5 to 5e-3"
    if not settings.grad_clip:
        return f"set trainer.grad_clip=1.0 (clipping is off), or lower {rate}"
    if optimizer.warmup_steps == 0:
        return f"warm up (trainer.warmup_steps=0; e.g. 10% of the steps), or lower {rate}"
    return f"lower {rate}, or raise trainer.warmup_steps"


def divergence_guard(settings: TrainerSettings, stage: str, work_dir: Path) -> DivergenceGuard:
    """The guard of a resumable training stage, whose checkpoints live in `work_dir`."""
    advice = (
        f"Nothing was published; the checkpoints saved before it stay in "
        f"{work_dir / 'checkpoints'} and the same command resumes from the last one with finite "
        f"weights. If it diverges again: {remedy(settings)} (a new key: trained afresh)."
    )
    return DivergenceGuard(
        stage,
        advice,
        immediate=settings.accelerator == "cpu",  # elsewhere, no host-device wait every step
        check_every_steps=settings.log_every_steps,  # the progress line waits there anyway
    )
