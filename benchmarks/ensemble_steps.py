"""K fine-tuning runs as one ensemble against K sequential runs, step for step, on CPU time.

The pieces of `benchmarks.finetune_ceiling` that time steps: a training step as the finetune
stage takes it (bf16 autocast, cross-entropy, clipping, fused AdamW), and K members' steps and
validation forwards through `torch.func` (`vmap` of `functional_call`) or written out over stacked
weights (`benchmarks.stacked_bert`), each ensemble first checked to give every member its own
model's logits. Classifier dropout goes off in both (`without_classifier_dropout`): `vmap` cannot
draw the CPU dropout's bits.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from statistics import median

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from benchmarks.stacked_bert import stacked_logits, supported
from flows.downstream.finetuning.recipe import TaskRun
from lightning_modules.optim import build_optimizer
from lightning_modules.optim_settings import OptimizerSettings

Batch = dict[str, torch.Tensor]


def without_classifier_dropout(run: TaskRun) -> TaskRun:
    return replace(run, settings=run.settings.model_copy(update={"classifier_dropout": 0.0}))


def cpu_ms(step: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        step()
    started = time.process_time()
    for _ in range(repeats):
        step()
    return 1000 * (time.process_time() - started) / repeats


def paired_ms(
    first: Callable[[], object], second: Callable[[], object], repeats: int, rounds: int = 3
) -> tuple[float, float]:
    """Median CPU ms of each, timed in alternating rounds so drift on a shared machine falls on
    both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        times[0].append(cpu_ms(first, repeats, warmup=1))
        times[1].append(cpu_ms(second, repeats, warmup=1))
    return median(times[0]), median(times[1])


def train_batches(run: TaskRun, count: int) -> list[Batch]:
    return list(itertools.islice(run.loader("train", 1, shuffle=True), count))


def clipped_step(
    parameters: list[torch.Tensor], optimizer: torch.optim.Optimizer, members: int | None
) -> Callable[[], None]:
    """Gradient clipping to norm 1 (`trainer.grad_clip`), each member on its own norm when the
    parameters are stacked (`members`), then fused AdamW."""

    def step() -> None:
        if members is None:
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        else:
            grads = [parameter.grad for parameter in parameters if parameter.grad is not None]
            norms = torch.stack([grad.flatten(1).float().norm(dim=1) for grad in grads])
            scale = (1.0 / (norms.square().sum(0).sqrt() + 1e-6)).clamp(max=1.0)
            for grad in grads:
                grad.mul_(scale.view(members, *[1] * (grad.dim() - 1)).to(grad.dtype))
        optimizer.step()
        optimizer.zero_grad()

    return step


def stepper(model: torch.nn.Module, bf16: bool) -> Callable[[Batch], None]:
    """One training step as the stage takes it: autocast, cross-entropy, clipping, and the
    project's AdamW (`build_optimizer`: its parameter groups and fused kernel)."""
    optimizer, _ = build_optimizer(model, OptimizerSettings(learning_rate=1e-5))
    update = clipped_step(list(model.parameters()), optimizer, None)

    def step(batch: Batch) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        F.cross_entropy(logits.float(), batch["labels"]).backward()
        update()

    return step


Logits = Callable[[dict[str, torch.Tensor], Batch], torch.Tensor]  # stacked weights, batch


def ensemble(run: TaskRun, members: int, way: str) -> tuple[list[torch.nn.Module], Logits]:
    """K models of the run's shape, and the logits of all K from their stacked parameters:
    `vmap` of `functional_call` over a skeleton that holds no weights, or the demo's classifier
    written out over stacked weights (`stacked_bert`), checked against each model's own logits."""
    from flows.downstream.finetuning.recipe import build_model

    models = [build_model(run, "pretrained") for _ in range(members)]
    config = run.encoder
    if way == "stacked":
        supported(config, models[0])

        def written_out(weights: dict[str, torch.Tensor], batch: Batch) -> torch.Tensor:
            inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            return stacked_logits(weights, config, *inputs)

        logits: Logits = written_out
    else:
        skeleton = copy.deepcopy(models[0]).to("meta")

        def member(weights: dict[str, torch.Tensor], batch: Batch) -> torch.Tensor:
            inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            return functional_call(skeleton, weights, inputs)

        logits = vmap(member, in_dims=(0, None), randomness="different")
    weights, _ = stack_module_state(models)  # type: ignore[arg-type]
    check_equivalent(models, logits(weights, next(iter(run.loader("validation", 1)))), run)
    return models, logits


def check_equivalent(models: list[torch.nn.Module], together: torch.Tensor, run: TaskRun) -> None:
    """Each member's ensemble logits equal its own model's (fp32), or this raises."""
    batch = next(iter(run.loader("validation", 1)))
    with torch.no_grad():
        for member, model in enumerate(models):
            alone = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            torch.testing.assert_close(together[member].detach(), alone, atol=1e-4, rtol=1e-4)


def ensemble_train(run: TaskRun, bf16: bool, members: int, way: str) -> tuple[float, float]:
    """CPU ms of K sequential training steps and of one K-member ensemble step, on the same
    batch (the grid's rate phase: one seed, one data order; the seed phase stacks K batches of
    the same shape, at least as costly). One rate for all members: a rate per member costs more,
    so this stays a best case."""
    models, logits = ensemble(run, members, way)
    sequential = [stepper(model, bf16) for model in models]
    weights, _ = stack_module_state(models)  # type: ignore[arg-type]
    optimizer = torch.optim.AdamW(list(weights.values()), lr=1e-5, fused=True)
    update = clipped_step(list(weights.values()), optimizer, members)

    def ensemble_step(batch: Batch) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            scores = logits(weights, batch)
        labels = batch["labels"].repeat(members)
        F.cross_entropy(scores.float().flatten(0, 1), labels, reduction="sum").div(
            len(batch["labels"])
        ).backward()
        update()

    batches = train_batches(run, 8)
    one_by_one, together = iter(batches * 20), iter(batches * 20)
    return paired_ms(
        lambda: [step(batch) for batch in [next(one_by_one)] for step in sequential],
        lambda: ensemble_step(next(together)),
        3,
        rounds=2,
    )


def ensemble_eval(run: TaskRun, members: int, way: str) -> tuple[float, float]:
    """CPU ms of K sequential no-grad forwards over a validation batch and of one K-member
    forward: validation and test, as `predict` runs them (fp32: outside the training autocast)."""
    models, logits = ensemble(run, members, way)
    for model in models:
        model.eval()
    weights, _ = stack_module_state(models)  # type: ignore[arg-type]
    batch = next(iter(run.loader("validation", 1)))
    inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    with torch.no_grad():
        return paired_ms(
            lambda: [model(*inputs).argmax(-1) for model in models],
            lambda: logits(weights, batch).argmax(-1),
            10,
        )
