"""The end-of-run summary: the figures a user checks first, and where to look for the rest."""

from __future__ import annotations

from typing import Any

from flows.core.artifacts import ArtifactRef
from flows.core.redaction import redact_text
from flows.core.tables import markdown_table
from flows.downstream.statistics.base_report import OVER_BASE, base_verdict
from flows.downstream.statistics.distill_report import share_text
from flows.downstream.statistics.label_points import point_line, read_label_points
from flows.downstream.statistics.lift_points import (
    LIFT,
    chosen_on_validation,
    interval_keys,
    read_points,
)
from flows.downstream.statistics.qa_report import qa_summary_lines
from flows.downstream.statistics.report import baselines_text, interval_text, warnings
from flows.downstream.statistics.task_figures import EVALUATED, TaskFigures
from flows.stages.shards.stage import ShardOutputs
from flows.stages.tokenizer import TokenizerOutputs
from flows.stages.tokenizer_import import ImportedTokenizerOutputs
from flows.stages.training_types import (
    CheckpointOutputs,
    DistillOutputs,
    FinetuneOutputs,
    PretrainOutputs,
)


def build_summary(
    refs: dict[str, ArtifactRef], tracking_uri: str, parent_run_id: str, experiment: str
) -> dict[str, Any]:
    return {
        "stages": {
            stage: {
                "stage": ref.stage,  # "checkpoint" where an imported teacher stands in for pretrain
                "key": ref.key,
                "cache_hit": ref.cache_hit,
                "path": str(ref.path),
                **ref.outputs,
            }
            for stage, ref in refs.items()
        },
        "tracking_uri": redact_text(tracking_uri),  # printed and returned to Prefect
        "mlflow_run_id": parent_run_id,
        "experiment": experiment,
    }


def pretraining_result(pre: PretrainOutputs) -> str:
    loss = f"val loss {pre.initial_val_loss:.3f} -> {pre.val_loss:.3f}"
    val = pre.validation
    if "val_discriminator_accuracy" in val:  # ELECTRA: replaced-token detection
        return (
            f"{loss}, discriminator accuracy {val['val_discriminator_accuracy']:.3f} "
            f"(all-original baseline {val['val_baseline_accuracy']:.3f})"
        )
    return (
        f"MLM {loss}, accuracy {val['val_accuracy']:.3f}, perplexity {val['val_perplexity']:.1f}"
        + forgetting_text(pre)
    )


def forgetting_text(pre: PretrainOutputs) -> str:
    """`; domain loss -1.21, general loss +0.08 [+0.05, +0.11] (3.10 -> 3.18, accuracy 0.41 ->
    0.40 [-0.021, -0.004]; 95% paired bootstrap over the general rows)`: what the run learned
    beside what it forgot (`pretrain.general_validation`); empty when off."""
    change, before, val = pre.general_loss_change, pre.before, pre.validation
    if change is None:
        return ""
    since = " since the head warm-up" if pre.head_warmup_validation is not None else ""
    interval = pre.general_change_interval or {}
    method = (
        f"; {interval['confidence']:.0%} paired bootstrap over the general rows" if interval else ""
    )
    return (
        f"; domain loss {pre.val_loss - before['val_loss']:+.2f}, general loss {change:+.2f}"
        f"{bounds_text(interval, 'loss')}{since} ({before['val_general_loss']:.3f} -> "
        f"{val['val_general_loss']:.3f}, accuracy {before['val_general_accuracy']:.3f} -> "
        f"{val['val_general_accuracy']:.3f}{bounds_text(interval, 'accuracy', 3)}{method})"
    )


def bounds_text(interval: dict[str, float], measure: str, digits: int = 2) -> str:
    """` [+0.05, +0.11]`: a change's interval (empty when the artifact holds none)."""
    if not interval:
        return ""
    low, high = interval[f"{measure}_low"], interval[f"{measure}_high"]
    return f" [{low:+.{digits}f}, {high:+.{digits}f}]"


def downstream_result(line: TaskFigures, confidence: float) -> list[str]:
    """`sst2 accuracy over 5 seed(s): pretrained 0.800 ± 0.010, ...; lift +0.100`, then its two
    intervals, the baselines, the recipe, and a warning when a run was capped by its epochs or
    an arm chose an end of its learning-rate grid. `cloze evaluate`'s (`line.evaluated`) says
    `base`: its pretrained arm is the checkpoint as it is."""
    pre, rand = line.pretrained, line.random_init
    arm, lift = (
        ("base", "base over random init") if line.evaluated else ("pretrained", "pretraining lift")
    )
    lines = [
        f"{line.task} {line.metric} over {line.seeds} seed(s): {arm} "
        f"{pre.mean:.3f} ± {pre.std:.3f}, random init {rand.mean:.3f} ± {rand.std:.3f}; "
        f"{lift} {line.lift:+.3f}",
        f"  {confidence:.0%} CI of the lift: paired t over seeds {interval_text(line.ci)}, "
        f"bootstrap over test examples {interval_text(line.bootstrap)}",
        f"  baselines (no encoder): {baselines_text(line.baselines)}",
        f"  recipe: {line.recipe}",
    ]
    return [*lines, *(f"  {warning}" for warning in warnings(line))]


def arms_named(fine: dict[str, Any]) -> str:
    """The arms the finetune stage ran: with a base checkpoint, all three by name."""
    if EVALUATED in fine:
        return f"the checkpoint {fine[EVALUATED]} as it is (base) vs random init"
    if any(key.endswith(".base_learning_rate") for key in fine):
        return "adapted (pretrained) vs base checkpoint vs random init"
    return "pretrained vs random init"


def distill_result(stages: dict[str, Any]) -> list[str]:
    """The distill stage's line, when the run distilled a student."""
    if "distill" not in stages:
        return []
    out = DistillOutputs.from_manifest(stages["distill"])
    origin = "reused (cache hit)" if stages["distill"]["cache_hit"] else "computed"
    return [
        f"  distill    [{origin}] {out.steps} steps, student {out.parameters:,} parameters "
        f"({out.parameters / out.teacher_parameters:.0%} of the teacher), init {out.student_init}, "
        f"val loss {out.initial_val_loss:.3f} -> {out.val_loss:.3f} (teacher "
        f"{out.val_teacher_loss:.3f}), agrees with the teacher on {out.val_teacher_agreement:.1%}"
    ]


def student_result(fine: dict[str, Any], task: str, confidence: float) -> list[str]:
    """The student's score and share of the teacher's lift, with the measured sizes and speed."""
    metric = fine[f"{task}.metric"]
    if f"{task}.student_{metric}_mean" not in fine:
        return []
    return [
        f"  student {fine[f'{task}.student_{metric}_mean']:.3f} ± "
        f"{fine[f'{task}.student_{metric}_std']:.3f}, lift "
        f"{fine[f'{task}.student_lift_{metric}']:+.3f}, share of the teacher's lift "
        f"{share_text(fine, task, metric, confidence)}; "
        f"{fine['distill.parameter_ratio']:.0%} of the parameters, "
        f"{fine['distill.speedup']:.2f}x the teacher's inference tokens/s (measured in this run)"
    ]


def curve_result(curve: dict[str, Any] | None) -> list[str]:
    """One line per task: the lift at each kept fraction of pretraining, with its t-interval;
    for a continued checkpoint, a second: adapted over base at each fraction."""
    if curve is None:
        return []
    lines = [f"  lift curve [{'reused (cache hit)' if curve['cache_hit'] else 'computed'}]:"]
    for task, points in read_points(curve).items():
        for measure, words in ((LIFT, ""), (OVER_BASE, " adapted over base")):
            if any(measure not in p for p in points):
                continue  # over base: only a continued checkpoint's curve has it
            value, ci_low, ci_high, _, _ = interval_keys(measure)
            steps = ", ".join(
                f"{p['tokens'] / 1e6:.2f} M tokens {p[value]:+.3f}"
                + (f" [{p[ci_low]:+.3f}, {p[ci_high]:+.3f}]" if ci_low in p else "")
                for p in points
            )
            lines.append(f"    {task}{words}: {steps}")
        chosen = chosen_on_validation(points)
        if chosen is not None:
            lines.append(
                f"    {task}: validation picks {chosen['tokens'] / 1e6:.2f} M tokens (adapted "
                f"arm's validation score {chosen['pretrained_validation']:.3f}); the test figures "
                "above are reported, not chosen on"
            )
    return lines


def stage_figures(stage: str, outputs: dict[str, Any]) -> str:
    """What a tokenizer, shards or pretrain artifact holds, in a few words (empty for others):
    the summary's line, and the line the pipeline logs when the stage ends."""
    if stage == "tokenizer" and "imported_from" in outputs:
        imported = ImportedTokenizerOutputs.from_manifest(outputs)
        if "fertility" not in outputs:  # `cloze evaluate`: no corpus to measure it on
            return f"{imported.imported_from}, vocab {imported.vocab_size}"
        return (
            f"{imported.imported_from}, vocab {imported.vocab_size}, fertility "
            f"{imported.fertility:.3f} tokens/word on this corpus, unknown rate "
            f"{imported.unknown_rate:.4%}"
        )
    if stage == "tokenizer":
        tok = TokenizerOutputs.from_manifest(outputs)
        return (
            f"vocab {tok.vocab_size}, fertility {tok.fertility:.3f} tokens/word, unknown rate "
            f"{tok.unknown_rate:.4%}"
        )
    if stage == "shards":
        shards = ShardOutputs.from_manifest(outputs)
        share = shards.replay_share
        sources = f" (domain {1 - share:.1%}, replay {share:.1%})" if share else ""
        return (
            f"train {shards.train_sequences} x {shards.seq_len} tokens in "
            f"{shards.train_shards} shard(s){sources}, validation {shards.validation_sequences}"
        )
    if stage == "pretrain":
        pre = PretrainOutputs.from_manifest(outputs)
        return f"{pre.steps} steps, {pretraining_result(pre)}"
    if stage == CheckpointOutputs.STAGE:
        base = CheckpointOutputs.from_manifest(outputs)
        head = "with its MLM head" if base.has_mlm_head else "no MLM head (a fresh one is trained)"
        return (
            f"{base.name}: {base.architecture} ({base.model_type}), {base.parameters:,} "
            f"parameters, {head}"
        )
    return ""


def label_curve_result(curve: dict[str, Any] | None) -> list[str]:
    """A line per task and count (`<task> <metric> at <n> labels: ...`), then the sentence
    naming where the lift's interval stops excluding zero."""
    if curve is None:
        return []
    lines = [f"  label curve [{'reused (cache hit)' if curve['cache_hit'] else 'computed'}]:"]
    for task, points in read_label_points(curve).items():
        metric = curve[f"{task}.metric"]
        lines += [
            f"    {task} {metric} at {int(p['labels'])} labels: {point_line(p)}" for p in points
        ]
        lines.append(f"    {curve[f'{task}.crossing']}")
    return lines


def render_summary(summary: dict[str, Any]) -> str:
    """The stages the run went through (`--until` stops early), then where MLflow holds them."""
    stages = summary["stages"]

    def origin(stage: str) -> str:
        if stages[stage]["cache_hit"]:
            return "reused (cache hit)"
        imported = "imported_from" in stages[stage] or stages[stage]["stage"] == "checkpoint"
        return "imported" if imported else "computed"

    evaluated = "finetune" in stages and EVALUATED in stages["finetune"]
    lines = [  # no blank line: a log record (Prefect's, through print) shows it as an empty one
        "Cloze evaluate summary" if evaluated else "Cloze pipeline summary",
        *(
            # An external distill teacher stands in for pretrain: its own stage says what it is.
            f"  {name:<10} [{origin(name)}] {stage_figures(stages[name]['stage'], stages[name])}"
            for name in ("tokenizer", "checkpoint", "shards", "pretrain")
            if name in stages
        ),
        *distill_result(stages),
        *(finetune_result(stages, origin("finetune")) if "finetune" in stages else []),
        *curve_result(stages.get("lift_curve")),
        *label_curve_result(stages.get("label_curve")),
        f"MLflow: experiment '{summary['experiment']}', run {summary['mlflow_run_id']} "
        f"at {summary['tracking_uri']}",
    ]
    uri = summary["tracking_uri"]
    if uri.startswith("sqlite:"):
        lines.append(f"  browse: mlflow ui --backend-store-uri {uri}   (or `make ui`)")
    if "mlflow_run_url" in summary:
        lines.append(f"  run page: {summary['mlflow_run_url']}")
    return "\n".join(lines)


def finetune_result(stages: dict[str, Any], origin: str) -> list[str]:
    """The finetune stage's lines: each task's arms, lift and baselines."""
    return [
        f"  finetune   [{origin}] {finetune_figures(stages['finetune'])}, each arm at its own "
        "validation-chosen learning rate:",
        *(f"    {text}" for lines in task_verdicts(stages["finetune"]) for text in lines),
    ]


def finetune_figures(outputs: dict[str, Any]) -> str:
    """`1 task(s), pretrained vs random init`."""
    return f"{len(FinetuneOutputs.from_manifest(outputs).tasks)} task(s), {arms_named(outputs)}"


def task_verdicts(outputs: dict[str, Any]) -> list[list[str]]:
    """Per task: its verdict line (the arms, the lift), then the lines under it (the intervals,
    the baselines, warnings), each of those indented by two spaces."""
    fine = FinetuneOutputs.from_manifest(outputs)
    return [
        [
            *base_verdict(outputs, line.task, fine.confidence),
            *downstream_result(line, fine.confidence),
            *student_result(outputs, line.task, fine.confidence),
            *qa_summary_lines(outputs, line.task, EVALUATED in outputs),
        ]
        for line in fine.figures.values()
    ]


def summary_markdown(summary: dict[str, Any], until: str) -> str:
    """The run's one Prefect artifact, in the CLI summary's shape: the verdict per task first,
    then the stages as a table (each with its figures in words), then the MLflow run. A table
    cell of raw `key value` pairs, about 40 per stage, hid the result."""
    stages = summary["stages"]
    verdicts = task_verdicts(stages["finetune"]) if "finetune" in stages else []
    headline = [
        f"{'  ' if text.startswith('  ') else ''}- {text.strip()}"
        for lines in verdicts
        for text in lines
    ]
    rows = []
    for name, outputs in stages.items():
        origin = "reused" if outputs["cache_hit"] else "computed"
        if name == "finetune":
            figures = finetune_figures(outputs)
        elif name == "distill":
            figures = distill_result(stages)[0].split("] ", 1)[1]
        else:
            figures = stage_figures(outputs["stage"], outputs)
        rows.append((name, origin, figures, f"`{outputs['key']}`"))
    url = summary.get("mlflow_run_url")
    run = f"[{summary['mlflow_run_id']}]({url})" if url else summary["mlflow_run_id"]
    return "\n".join(
        [
            f"# Cloze pipeline (through `{until}`)",
            "",
            *(["## Verdict", "", *headline, ""] if headline else []),
            "## Stages",
            "",
            markdown_table(["stage", "origin", "result", "artifact key"], rows),
            "",
            f"MLflow: experiment `{summary['experiment']}`, run {run}",
        ]
    )


def render_comparison(runs: list[list[str]], summaries: list[dict[str, Any]]) -> str:
    """One row per run of a multirun: same token budget, what each recipe bought."""
    rows = []
    for overrides, summary in zip(runs, summaries, strict=True):
        fine = FinetuneOutputs.from_manifest(summary["stages"]["finetune"])
        pre = PretrainOutputs.from_manifest(summary["stages"]["pretrain"])
        lifts = ", ".join(
            f"{line.task} {line.metric} {line.lift:+.3f}" for line in fine.figures.values()
        )
        rows.append(
            (
                " ".join(overrides) or "(defaults)",
                f"{pre.train_tokens:,}",
                f"{pre.train_tokens / max(pre.fit_seconds, 1e-9):,.0f}",
                pretraining_result(pre),
                lifts,
            )
        )
    header = ["run", "train tokens", "tokens/s", "held-out after pretraining", "pretraining lift"]
    return markdown_table(header, rows)
