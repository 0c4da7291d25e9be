"""Mixed-precision autocast that clips gradients whatever the optimizer: fused AdamW in bf16-mixed
and 16-mixed runs.

Lightning's `MixedPrecision` refuses gradient clipping with any optimizer that unscales its own
gradients (`_step_supports_amp_scaling`, which fused AdamW sets), because a GradScaler would have
to unscale before the clip. bf16 has no scaler, so there is nothing to unscale and clipping is
plain `clip_grad_norm_`, as in 32-true. fp16 (16-mixed, a GPU without native bf16) has one: the
gradients are unscaled first, which the scaler records, so the fused step then skips its own
unscaling and still skips a step whose gradients overflowed. Measured on bert-mini (1 thread,
CPU): fused AdamW steps in 6-7 ms against 20 ms for the foreach and for-loop versions.
"""

from __future__ import annotations

from typing import Literal

from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities.enums import GradClipAlgorithmType
from torch.optim import Optimizer

from flows.training.hardware import trains_on_cuda


class ClippingMixedPrecision(MixedPrecision):
    """`precision="bf16-mixed"` or `"16-mixed"` without the refusal to clip."""

    def __init__(self, precision: Literal["bf16-mixed", "16-mixed"], accelerator: str) -> None:
        super().__init__(precision, "cuda" if trains_on_cuda(accelerator) else "cpu")

    def clip_gradients(
        self,
        optimizer: Optimizer,
        clip_val: int | float = 0.0,
        gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM,
    ) -> None:
        if clip_val > 0 and self.scaler is not None:
            # Real gradients, not scaled ones, are what the norm is taken of; the scaler then
            # tells the fused step they are unscaled already.
            self.scaler.unscale_(optimizer)  # type: ignore[arg-type]
        # The base class's clipping, which MixedPrecision refuses for fused optimizers.
        Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)
