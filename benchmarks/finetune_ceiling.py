"""What training the finetune grid as batched ensembles could save on this CPU, measured first.

Issue 36 asks for the runs of one arm (seeds x learning rates) trained as one ensemble, parameters
stacked, so K small matmuls become one large one, and sets a 2x target for the finetune stage. An
ensemble saves only what does not grow with the members: per-op overhead (Python, dispatch,
autograd bookkeeping), Lightning's loop, and whatever a larger matmul gains in throughput. This
measures those on the demo's task (`finetune=pydoc_topics`, the demo's tokenizer, in the precision
`trainer.precision: auto` picks on this CPU: bf16-mixed where bf16 is native, else fp32), with a
random encoder of the model's shape (timing does not depend on the weights):

1. one run through `flows.downstream.finetuning.recipe.train_once`, as the stage runs it (cProfile
   on CPU time): the training steps against per-epoch validation, the test pass and the rest; and
   what the stage spends once per task (encoding the splits, the baselines);
2. one training step's ops (torch.profiler, self time): matmuls, attention, the optimizer, the
   rest (elementwise ops, norms, copies, dispatch);
3. the per-op floor: a step at batch 1 x 8 tokens, against a real batch (32 x up to 64 tokens);
4. matmul throughput at one run's size against 8 runs' stacked (`bmm`), and the 2048^3 peaks;
5. a K-member ensemble against K sequential models (`benchmarks/ensemble_steps.py`): a training
   step (per-member gradient clipping, fused AdamW) and a no-grad forward as validation runs it,
   the ensemble both through `torch.func` (`functional_call` + `vmap`) and written out over
   stacked weights (`benchmarks/stacked_bert.py`, the best case), each checked to give every
   member its own model's logits (classifier dropout off in both: `vmap` cannot draw the CPU
   dropout's bits);
6. attention forward and backward: SDPA's CPU kernel against the same math written out.

It ends with the ceiling (Amdahl): the finetune stage's speedup if every part an ensemble could
shrink shrank by the factor measured here (or by a bound on it: the per-op floor paid once for K
members, the matmuls at the stacked rate), and the per-run rest (Trainer, loops, loaders, model
build) by K, the most it could. Times are this process's CPU time on one thread (a loaded machine
inflates wall time more), and every comparison is made side by side in one run.

    python -m benchmarks.finetune_ceiling --models bert-tiny,bert-mini [HYDRA OVERRIDE ...]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from benchmarks.ensemble_steps import (
    ensemble_eval,
    ensemble_train,
    paired_ms,
    stepper,
    train_batches,
    without_classifier_dropout,
)
from benchmarks.precision_rows import auto_precision
from benchmarks.step_timer import matmul_peaks
from flows.downstream.finetuning.recipe import TaskRun

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
# The demo's grid per arm: every rate on the first seed, then the other seeds at the chosen rate
# (`finetune.grid_seeds: 1`): 4 + 4 runs, two arms.
DEMO_RUNS = 2 * (4 + 4)
HIDDEN = {"bert-tiny": 128, "bert-mini": 256}  # the stacked-matmul gain read for each


@dataclass(frozen=True)
class Prepared:
    run: TaskRun
    once_cpu_s: float  # what the stage spends once per task: encoding, the baselines


def demo_task(work_dir: Path, model: str, overrides: Sequence[str] = ()) -> Prepared:
    """The demo's task as the stage prepares it; a random `model` encoder as 'pretrained'.
    `overrides`: Hydra overrides of the demo's config (a smaller corpus, fewer examples)."""
    from flows.core.artifacts import ArtifactStore
    from flows.corpora import open_corpus
    from flows.downstream.evaluate import prepare_task, run_baselines
    from flows.plan import resolved_trainer
    from flows.resolve import resolve_run
    from flows.stages.finetune import stage_sources
    from flows.stages.tokenizer import load_tokenizer, train_tokenizer
    from flows.training.settings import encoder_config
    from lightning_modules.models.heads import BertForMaskedLM
    from lightning_modules.models.serialization import save_masked_lm

    config = resolve_run([f"model={model}", *overrides], until=None).run
    tokenizer = train_tokenizer(
        config.tokenizer, open_corpus(config.corpus), ArtifactStore(work_dir / "store")
    )
    trained = load_tokenizer(tokenizer)
    encoder_dir = work_dir / f"encoder-{model}"
    if not encoder_dir.exists():
        shape = encoder_config(
            config.model, trained.tokenizer.get_vocab_size(), trained.special.pad
        )
        encoder_dir.mkdir(parents=True)
        save_masked_lm(BertForMaskedLM(shape), encoder_dir)
    settings, trainer = config.finetune, resolved_trainer(config.trainer)[0]
    task = settings.plan[0]  # the demo task, with the recipe and seeds the stage runs it on
    started = time.process_time()
    sources = stage_sources(
        settings,
        config.seed,
        trainer,
        tokenizer,
        encoder_dir,
        work_dir / "runs",
        lambda name, label: (),
    )
    data, run, _ = prepare_task(task, sources)
    run_baselines(data, task, settings.baselines_for(task.spec), task.seeds(config.seed))
    return Prepared(run, time.process_time() - started)


def run_split(run: TaskRun, epochs: int, warm_up: bool) -> dict[str, float]:
    """Shares of one `train_once` run (cProfile, CPU time): steps, per-epoch validation, the test
    pass, the rest; with the run's CPU seconds profiled and not. `warm_up`: a one-epoch run first
    (the process's first-call costs)."""
    from flows.downstream.finetuning.recipe import train_once

    if warm_up:
        one_epoch = run.settings.model_copy(update={"epochs": 1})
        train_once(replace(run, settings=one_epoch), "pretrained", 1e-3, 0)
    run = replace(run, settings=run.settings.model_copy(update={"epochs": epochs}))
    started = time.process_time()
    train_once(run, "pretrained", 1e-3, 1)
    unprofiled = time.process_time() - started
    profiler = cProfile.Profile(time.process_time)
    started = time.process_time()
    profiler.runcall(train_once, run, "pretrained", 1e-3, 1)
    total = time.process_time() - started
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def entry(path: str, function: str) -> tuple:
        (found,) = (
            value for (file, _, name), value in stats.items() if name == function and path in file
        )
        return found

    wall = entry("recipe.py", "train_once")[3]
    steps = entry("optimization/automatic.py", "_optimizer_step")[3]
    validation = entry("classifier.py", "on_train_epoch_end")[3]
    # `predict` runs under `torch.no_grad()`'s wrapper: the test pass is train_once's call of it.
    test = sum(
        timing[3]
        for (_, _, caller), timing in entry("_contextlib.py", "decorate_context")[4].items()
        if caller == "train_once"
    )
    return {
        "run_cpu_s": unprofiled,
        "profiled_cpu_s": total,
        "steps": steps / wall,
        "validation": validation / wall,
        "test": test / wall,
        "rest": 1 - (steps + validation + test) / wall,
    }


def step_ops(run: TaskRun, bf16: bool) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Per-step self time by kind of op (wall ms inside ops, as torch.profiler times them), over
    real batches; and the top ops."""
    from flows.downstream.finetuning.recipe import build_model

    step, batches = stepper(build_model(run, "pretrained"), bf16), train_batches(run, 10)
    for batch in batches[:2]:
        step(batch)
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for batch in batches[2:]:
            step(batch)
    kinds = {"matmul": 0.0, "attention": 0.0, "optimizer": 0.0, "rest": 0.0}
    ops = []
    for event in profiled.key_averages():
        name, ms = event.key, event.self_cpu_time_total / 1000 / (len(batches) - 2)
        kind = (
            "matmul"
            if name in MATMULS
            else "attention"
            if "scaled_dot_product" in name
            else "optimizer"
            if "adamw" in name
            else "rest"
        )
        kinds[kind] += ms
        ops.append((name, ms))
    return kinds, sorted(ops, key=lambda op: -op[1])[:8]


def per_op_floor(run: TaskRun, bf16: bool) -> tuple[float, float]:
    """CPU ms of a step on real batches, and of one at batch 1 x 8 (all overhead, no work)."""
    from flows.downstream.finetuning.recipe import build_model

    step, batches = stepper(build_model(run, "pretrained"), bf16), train_batches(run, 12)
    tiny = {name: tensor[:1, :8] for name, tensor in batches[0].items() if name != "labels"}
    tiny["labels"] = batches[0]["labels"][:1]
    real = iter(batches * 3)
    return paired_ms(lambda: step(next(real)), lambda: step(tiny), 3)


def matmul_rates(hidden: int, dtype: torch.dtype) -> tuple[float, float]:
    """GFLOP/s of a QKV-shaped matmul at one run's size (2,048 tokens), and of 8 stacked."""
    one = (torch.randn(2048, hidden, dtype=dtype), torch.randn(hidden, 3 * hidden, dtype=dtype))
    eight = (
        torch.randn(8, 2048, hidden, dtype=dtype),
        torch.randn(8, hidden, 3 * hidden, dtype=dtype),
    )
    flops = 2 * 2048 * hidden * 3 * hidden
    single, stacked = paired_ms(lambda: one[0] @ one[1], lambda: torch.bmm(*eight), 40)
    return flops / single / 1e6, 8 * flops / stacked / 1e6


def attention_ms(dtype: torch.dtype, masked: bool) -> tuple[float, float]:
    """Forward + backward of one bert-tiny layer's attention (32 x 2 heads x 64 x 64): SDPA's
    CPU kernel, then the same math written out (as `encoder.attention_with_dropout`)."""
    query = torch.randn(32, 2, 64, 64, dtype=dtype, requires_grad=True)
    mask = torch.ones(32, 1, 1, 64, dtype=torch.bool)
    mask[..., 48:] = False
    keys = mask if masked else None

    def fused() -> None:
        F.scaled_dot_product_attention(query, query, query, attn_mask=keys).sum().backward()

    def written_out() -> None:
        scores = (query * 64**-0.5) @ query.transpose(-2, -1)
        if keys is not None:
            scores = scores.masked_fill(~keys, float("-inf"))
        (scores.softmax(-1) @ query).sum().backward()

    return paired_ms(fused, written_out, 20)


def ceiling(
    split: dict[str, float], fixed: float, train: float, evaluation: float, members: int
) -> float:
    """The finetune stage's speedup (Amdahl) if the steps shrank by `train`, validation and test
    by `evaluation` and the rest of a run by `members` (all of it, the most it could), with the
    `fixed` share of the stage (once-per-task work) unshrunk."""
    shrunk = (
        split["steps"] / train
        + (split["validation"] + split["test"]) / evaluation
        + split["rest"] / members
    )
    return 1 / (fixed + (1 - fixed) * shrunk)


def step_bound(kinds: dict[str, float], full: float, floor: float, gain: float, k: int) -> float:
    """The most a K-member step could gain per member: the per-op floor paid once for K, the
    matmuls at the stacked rate (`gain` over one run's), the rest of the work unchanged."""
    matmul = kinds["matmul"] / sum(kinds.values())
    work = full - floor
    return full / (floor / k + work * (1 - matmul) + work * matmul / gain)


def report_model(
    work_dir: Path,
    model: str,
    epochs: int,
    matmul_gain: float,
    warm_up: bool,
    bf16: bool,
    overrides: Sequence[str] = (),
) -> float:
    """Prints the model's figures; returns its ceiling (the higher of measured and bound)."""
    prepared = demo_task(work_dir, model, overrides)
    run, max_epochs = prepared.run, prepared.run.settings.epochs
    split = run_split(run, epochs, warm_up)
    # Every run as long as the recipe allows: the smallest share for the once-per-task work.
    runs_s = DEMO_RUNS * split["run_cpu_s"] * max_epochs / epochs
    fixed = prepared.once_cpu_s / (prepared.once_cpu_s + runs_s)
    print(
        f"\n## {model}\n\none run, {epochs} epochs: {split['run_cpu_s']:.1f} CPU-s "
        f"({split['profiled_cpu_s']:.1f} profiled): training steps {split['steps']:.1%}, "
        f"per-epoch validation {split['validation']:.1%}, test pass {split['test']:.1%}, "
        f"the rest (Trainer, model build, loaders, loops) {split['rest']:.1%}; once per task "
        f"(encoding, baselines) {prepared.once_cpu_s:.1f} CPU-s"
    )
    kinds, top = step_ops(run, bf16)
    full, floor = per_op_floor(run, bf16)
    label = "bf16" if bf16 else "fp32"
    total = sum(kinds.values())  # the profiler times ops by the wall clock: shares, not ms
    print(
        f"- {label} step {full:.1f} CPU-ms; at batch 1 x 8 {floor:.1f} ms = "
        f"{floor / full:.0%} of a step; ops' self time: "
        + ", ".join(f"{kind} {ms / total:.1%}" for kind, ms in kinds.items())
        + "\n  top ops: "
        + ", ".join(f"{name} {ms / total:.1%}" for name, ms in top)
    )
    quiet = without_classifier_dropout(run)
    best = 0.0
    for way, members in (("vmap", 4), ("stacked", 4), ("stacked", 8)):
        apart, together = ensemble_train(quiet, bf16, members, way)
        print(
            f"- training step, {members} members, {label}: {members} sequential "
            f"{apart:.1f} CPU-ms, {way} ensemble {together:.1f}: {apart / together:.2f}x"
        )
        if way == "vmap":
            continue
        eval_apart, eval_together = ensemble_eval(quiet, members, way)
        print(
            f"- validation forward, {members} members (fp32, no grad): {members} sequential "
            f"{eval_apart:.1f} CPU-ms, stacked ensemble {eval_together:.1f}: "
            f"{eval_apart / eval_together:.2f}x"
        )
        bound = step_bound(kinds, full, floor, matmul_gain, members)
        measured = ceiling(split, fixed, apart / together, eval_apart / eval_together, members)
        generous = ceiling(split, fixed, bound, bound, members)
        best = max(best, measured, generous)
        print(
            f"- **ceiling, {members} members**: with the measured ensemble {measured:.2f}x; with "
            f"the bound on a step ({bound:.2f}x: floor once, matmuls {matmul_gain:.2f}x) "
            f"{generous:.2f}x ({DEMO_RUNS} runs of up to {max_epochs} epochs, once-per-task "
            f"share {fixed:.1%})"
        )
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert-tiny,bert-mini")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of the profiled run")
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench/finetune"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the demo's config")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average at start: {' '.join(f'{value:.1f}' for value in os.getloadavg())}")
    peaks = matmul_peaks()
    print(
        f"matmul peak (1 thread, 2048^3): fp32 {peaks['fp32_cpu']:.0f} GFLOP/s per CPU-s "
        f"({peaks['fp32']:.0f} wall), bf16 {peaks['bf16_cpu']:.0f} ({peaks['bf16']:.0f} wall)"
    )
    choice = auto_precision("cpu")
    print(choice.line)
    bf16 = choice.precision == "bf16-mixed"
    dtype_trained = torch.bfloat16 if bf16 else torch.float32
    dtypes = (torch.bfloat16, torch.float32) if bf16 else (torch.float32,)
    gains = {}
    for hidden in (128, 256):
        for dtype in dtypes:
            single, stacked_rate = matmul_rates(hidden, dtype)
            gains[hidden, dtype] = stacked_rate / single
            print(
                f"matmul 2048 x {hidden} x {3 * hidden} {str(dtype)[6:]}: {single:.0f} GFLOP/s, "
                f"8 stacked {stacked_rate:.0f} GFLOP/s"
            )
    for dtype in dtypes:
        for masked in (True, False):
            fused, written = attention_ms(dtype, masked)
            print(
                f"attention {str(dtype)[6:]} {'masked' if masked else 'unmasked'}: SDPA "
                f"{fused:.2f} ms, written out {written:.2f} ms"
            )
    ceilings = {}
    for index, model in enumerate(args.models.split(",")):
        hidden = HIDDEN[model]
        gain = max(1.0, gains[hidden, dtype_trained])
        ceilings[model] = report_model(
            args.work_dir, model, args.epochs, gain, index == 0, bf16, args.overrides
        )
    print(
        "\nceiling of the finetune stage from ensembles, the higher of measured and bound: "
        + ", ".join(f"{model} {value:.2f}x" for model, value in ceilings.items())
    )
    print(f"load average at end: {' '.join(f'{value:.1f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
