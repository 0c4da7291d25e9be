"""`python -m flows.lift [--experiment pubmed|sst2] [--via-transformers] [OVERRIDE ...]`:
general pretraining, then pretraining continued on the task's own domain, each scored against
random init: one command.

`pubmed` (the default) is the BioBERT effect in miniature: step 1 (`experiment=domain_lift_general`)
pretrains on Wikipedia and scores NCBI-disease NER; step 2 (`experiment=domain_lift_pubmed`)
continues step 1's model on PubMed abstracts with step 1's tokenizer and scores the same task the
same way. `sst2` is task-adaptive pretraining: step 1 `experiment=sst2_lift` (Wikipedia), step 2
`experiment=sst2_tapt` (the text of SST-2's train file, labels unread). `--via-transformers`
continues step 1's `transformers` export instead of its artifact, as a team continues a public
checkpoint: imported, tokenizer included, and scored again as the `base` arm, so the table adds
the adapted-over-base figure and the check that the import changed nothing. Same seeds, recipe,
shape and vocabulary in both steps, so step 2 reuses step 1's random-init arm (one
`finetune_control` artifact, fitted once) and the two pretrained arms pair by seed: the
adapted-over-general lift is a paired interval too. Each step is an ordinary pipeline run, cached
by the artifact store like any other.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.core.cli import fail
from flows.core.logs import setup_logging
from flows.core.redaction import redact_console, redact_log_handlers
from flows.core.settings import ConfigError
from flows.core.tables import markdown_table
from flows.corpora.formats import CorpusInputError
from flows.downstream.statistics.base_report import base_verdict
from flows.downstream.statistics.pairing import ArmScores, paired_difference, read_arm
from flows.downstream.tasks.spec import ARMS, BASE_ARM
from flows.orchestration.interrupts import Interrupted, stop_on_signals, stopped_by_signal
from flows.plan import start_services
from flows.resolve import ResolvedRun, resolve_run
from flows.stages.finetune import RESULTS_FILE
from flows.stages.init_source import HUGGINGFACE_DIR
from flows.stages.training_types import FinetuneOutputs
from flows.tracking.links import run_label
from flows.tracking.temporary_server import bind_temporary_server_to_this_run


@dataclass(frozen=True)
class Adaptation:
    """A two-step experiment: its two presets, the task both score, and what each step reads."""

    general: str
    adapted: str
    task: str
    metric: str
    general_text: str
    adapted_text: str


ADAPTATIONS = {
    "pubmed": Adaptation(
        "domain_lift_general", "domain_lift_pubmed", "ncbi_disease", "entity_f1", "Wikipedia",
        "PubMed",
    ),
    "sst2": Adaptation(
        "sst2_lift", "sst2_tapt", "sst2", "accuracy", "Wikipedia", "SST-2 train text"
    ),
}  # fmt: skip


def run_step(resolved: ResolvedRun) -> tuple[dict[str, Any], float]:
    """One pipeline run and its wall time (small when every stage is a cache hit)."""
    start_services(resolved.run)
    from flows.pipeline import pretraining_pipeline  # after start_services, as in __main__

    redact_log_handlers()  # Prefect's own handlers, made when it was imported
    started = time.perf_counter()
    summary = pretraining_pipeline(
        resolved, name=run_label(resolved.run.overrides, resolved.config)
    )
    return summary, time.perf_counter() - started


def seed_scores(summary: dict[str, Any], experiment: Adaptation) -> dict[str, ArmScores]:
    """Per-seed test scores of each arm (the seeds both steps share)."""
    results = Path(summary["stages"]["finetune"]["path"]) / RESULTS_FILE
    return {arm: read_arm(results, experiment.task, arm, experiment.metric) for arm in ARMS}


def lift(better: ArmScores, base: ArmScores, confidence: float) -> str:
    return paired_difference(better, base, confidence).text


def row(
    name: str, tokens: str, scores: ArmScores, lifts: str, stage: FinetuneOutputs, task: str
) -> tuple[str, ...]:
    arm = stage.figures[task].arms["random_init" if name == "random init" else "pretrained"]
    return (
        name,
        tokens,
        scores.summary,
        lifts,
        f"{arm.learning_rate:g}",
        f"{arm.epochs_mean:.1f}",
    )


def render(
    general: dict[str, Any], domain: dict[str, Any], experiment: Adaptation = ADAPTATIONS["pubmed"]
) -> str:
    """The table of docs/results/: the score per model, each lift a paired t-interval over seeds."""
    first, second = seed_scores(general, experiment), seed_scores(domain, experiment)
    task = experiment.task
    fine = FinetuneOutputs.from_manifest(general["stages"]["finetune"])
    fine_domain = FinetuneOutputs.from_manifest(domain["stages"]["finetune"])
    confidence = fine.confidence
    general_tokens = general["stages"]["pretrain"]["train_tokens"]
    domain_tokens = domain["stages"]["pretrain"]["train_tokens"]
    pct = f"{confidence:.0%}"
    header = [
        "model",
        "MLM tokens seen",
        f"{task} test {experiment.metric}",
        f"lift over random init; over general [{pct} CI, paired t]",
        "lr",
        "epochs",
    ]
    rows = [
        row("random init", "0", first["random_init"], "", fine, task),
        row(
            "general",
            f"{general_tokens / 1e6:.2f} M {experiment.general_text}",
            first["pretrained"],
            lift(first["pretrained"], first["random_init"], confidence),
            fine,
            task,
        ),
        row(
            "general + domain",
            f"+ {domain_tokens / 1e6:.2f} M {experiment.adapted_text}",
            second["pretrained"],
            f"{lift(second['pretrained'], first['random_init'], confidence)}; "
            f"{lift(second['pretrained'], first['pretrained'], confidence)}",
            fine_domain,
            task,
        ),
    ]
    lines = [markdown_table(header, rows)]
    if second["random_init"].by_seed != first["random_init"].by_seed:
        lines.append(
            f"\nnote: step 2's random-init arm scored {second['random_init'].by_seed}, step 1's "
            f"{first['random_init'].by_seed}; the table uses step 1's (same seeds, recipe, "
            "vocabulary)"
        )
    return "\n".join(lines)


VIA_TRANSFORMERS = "--via-transformers"


def base_check(general: dict[str, Any], domain: dict[str, Any], experiment: Adaptation) -> str:
    """Step 1's model, exported and imported back, fine-tuned again as step 2's `base` arm:
    the same scores seed by seed if the round trip is exact; and step 2's own over-base figure."""
    step1 = seed_scores(general, experiment)["pretrained"]
    results = Path(domain["stages"]["finetune"]["path"]) / RESULTS_FILE
    base = read_arm(results, experiment.task, BASE_ARM, experiment.metric)
    confidence = FinetuneOutputs.from_manifest(domain["stages"]["finetune"]).confidence
    return "\n".join(
        [
            f"\nthrough transformers: step 1's encoder as imported (the base arm) minus step 1's "
            f"own pretrained arm, per seed: {lift(base, step1, confidence)}",
            *base_verdict(domain["stages"]["finetune"], experiment.task, confidence),
        ]
    )


def parse_args(argv: list[str], prog: str = "python -m flows.lift") -> argparse.Namespace:
    """`--experiment NAME` (default pubmed), `--via-transformers`, and the overrides."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="General pretraining, then pretraining continued on the task's own domain, "
        "each scored against random init, and the lift of the second over the first.",
        epilog="Overrides apply to both steps, e.g. trainer.threads=2 finetune.train_examples=500.",
    )
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="a Hydra override")
    parser.add_argument(
        "--experiment",
        choices=ADAPTATIONS,
        default="pubmed",
        help="pubmed: Wikipedia then PubMed, scored on NCBI-disease; sst2: Wikipedia then "
        "SST-2's train text, scored on SST-2 (default: pubmed)",
    )
    parser.add_argument(
        VIA_TRANSFORMERS,
        dest="via_transformers",
        action="store_true",
        help="continue step 1's transformers export (imported, scored as the base arm) instead "
        "of its artifact",
    )
    return parser.parse_intermixed_args(argv)


def main(argv: list[str], prog: str = "python -m flows.lift") -> int:
    """Both steps, then the table; the exit code."""
    args = parse_args(argv, prog)  # a bad flag: argparse's usage line and exit 2
    redact_console()  # before any handler keeps a reference to the streams
    setup_logging()
    via_transformers = args.via_transformers
    experiment, overrides = ADAPTATIONS[args.experiment], args.overrides
    stop_on_signals()  # Ctrl-C or SIGTERM: runs marked KILLED, servers stopped, one line
    try:
        # One temporary Prefect server for both steps, bound to this process as in __main__.
        general_run = resolve_run([f"experiment={experiment.general}", *overrides])
        start_services(general_run.run)
        bind_temporary_server_to_this_run()
        general, general_seconds = run_step(general_run)
        start = general["stages"]["pretrain"]["path"]
        reuse = (
            [f"pretrain.init_from={start}/{HUGGINGFACE_DIR}"]
            if via_transformers
            else [f"pretrain.init_from={start}", f"tokenizer.from_artifact={start}"]
        )
        domain_run = resolve_run([f"experiment={experiment.adapted}", *reuse, *overrides])
        domain, domain_seconds = run_step(domain_run)
    except (ConfigError, CorpusInputError) as error:
        return fail(error)
    except (Interrupted, SystemExit):
        # Lightning turns Ctrl-C (a KeyboardInterrupt) into `exit(1)` after its own cleanup.
        code = stopped_by_signal()
        if code is None:
            raise
        return code
    print(render(general, domain, experiment))
    if via_transformers:
        print(base_check(general, domain, experiment))
    print(
        f"\nstep 1 (general pretraining + evaluation): {general_seconds / 60:.1f} min; step 2 "
        f"(continued pretraining + evaluation): {domain_seconds / 60:.1f} min; pretraining fit: "
        f"{general['stages']['pretrain']['fit_seconds'] / 60:.1f} + "
        f"{domain['stages']['pretrain']['fit_seconds'] / 60:.1f} min"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
