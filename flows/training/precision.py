"""bf16 autocast that clips gradients whatever the optimizer: fused AdamW in bf16-mixed runs.

Lightning's `MixedPrecision` refuses gradient clipping with any optimizer that unscales its own
gradients (`_step_supports_amp_scaling`, which fused AdamW sets), because a GradScaler would have
to unscale before the clip. bf16 has no scaler, so there is nothing to unscale and clipping is
plain `clip_grad_norm_`, as in 32-true. Measured on bert-mini (1 thread, CPU): fused AdamW
steps in 6-7 ms against 20 ms for the foreach and for-loop versions.
"""

from __future__ import annotations

import torch
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities.enums import GradClipAlgorithmType
from torch.optim import Optimizer


class BF16MixedPrecision(MixedPrecision):
    """`precision="bf16-mixed"` without the scaler-only refusal to clip."""

    def __init__(self, accelerator: str) -> None:
        cuda = accelerator in ("gpu", "cuda") or (
            accelerator == "auto" and torch.cuda.is_available()
        )
        super().__init__("bf16-mixed", "cuda" if cuda else "cpu")

    def clip_gradients(
        self,
        optimizer: Optimizer,
        clip_val: int | float = 0.0,
        gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM,
    ) -> None:
        # The base class's clipping: there is no scaler, so no unscaling to wait for.
        Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)
