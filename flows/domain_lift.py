"""`python -m flows.domain_lift [OVERRIDE ...]`: the BioBERT effect in miniature, one command.

Step 1 (`experiment=domain_lift_general`) pretrains on Wikipedia and scores NCBI-disease NER
from that model and from random init. Step 2 (`experiment=domain_lift_pubmed`) continues step
1's model on PubMed abstracts with step 1's tokenizer and scores the same task the same way.
Same seeds, recipe and vocabulary in both steps, so the random-init arms are the same runs and
the two pretrained arms pair by seed: the domain-over-general lift is a paired interval too.
Each step is an ordinary pipeline run, cached by the artifact store like any other.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from flows.core.cli import fail
from flows.core.config import compose_config
from flows.core.logs import setup_logging
from flows.core.settings import ConfigError
from flows.core.tables import markdown_table
from flows.downstream.pairing import ArmScores, paired_difference, read_arm
from flows.plan import load_run_config, start_services
from flows.stages.finetune import ARMS, RESULTS_FILE, FinetuneOutputs
from flows.tracking.links import run_label

TASK = "ncbi_disease"
METRIC = "entity_f1"


def run_step(experiment: str, overrides: list[str]) -> tuple[dict[str, Any], float]:
    """One pipeline run and its wall time (small when every stage is a cache hit)."""
    arguments = [f"experiment={experiment}", *overrides]
    config = compose_config(arguments)
    start_services(load_run_config(config))
    from flows.pipeline import pretraining_pipeline  # after start_services, as in __main__

    started = time.perf_counter()
    summary = pretraining_pipeline(config, name=run_label(arguments, config))
    return summary, time.perf_counter() - started


def seed_scores(summary: dict[str, Any]) -> dict[str, ArmScores]:
    """Per-seed test scores of each arm (the seeds both steps share)."""
    results = Path(summary["stages"]["finetune"]["path"]) / RESULTS_FILE
    return {arm: read_arm(results, TASK, arm, METRIC) for arm in ARMS}


def lift(better: ArmScores, base: ArmScores, confidence: float) -> str:
    return paired_difference(better, base, confidence).text


def row(
    name: str, tokens: str, scores: ArmScores, lifts: str, stage: FinetuneOutputs
) -> tuple[str, ...]:
    arm = stage.figures[TASK].arms["random_init" if name == "random init" else "pretrained"]
    return (
        name,
        tokens,
        scores.summary,
        lifts,
        f"{arm.learning_rate:g}",
        f"{arm.epochs_mean:.1f}",
    )


def render(general: dict[str, Any], domain: dict[str, Any]) -> str:
    """The table of docs/results/: F1 per model, each lift as a paired t-interval over seeds."""
    first, second = seed_scores(general), seed_scores(domain)
    fine = FinetuneOutputs.from_manifest(general["stages"]["finetune"])
    fine_domain = FinetuneOutputs.from_manifest(domain["stages"]["finetune"])
    confidence = fine.confidence
    general_tokens = general["stages"]["pretrain"]["train_tokens"]
    domain_tokens = domain["stages"]["pretrain"]["train_tokens"]
    pct = f"{confidence:.0%}"
    header = [
        "model",
        "MLM tokens seen",
        f"NCBI-disease test {METRIC}",
        f"lift over random init; over general [{pct} CI, paired t]",
        "lr",
        "epochs",
    ]
    rows = [
        row("random init", "0", first["random_init"], "", fine),
        row(
            "general",
            f"{general_tokens / 1e6:.2f} M Wikipedia",
            first["pretrained"],
            lift(first["pretrained"], first["random_init"], confidence),
            fine,
        ),
        row(
            "general + domain",
            f"+ {domain_tokens / 1e6:.2f} M PubMed",
            second["pretrained"],
            f"{lift(second['pretrained'], first['random_init'], confidence)}; "
            f"{lift(second['pretrained'], first['pretrained'], confidence)}",
            fine_domain,
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


def main(argv: list[str]) -> int:
    """Overrides apply to both steps (e.g. trainer.threads=2 finetune.train_examples=500)."""
    setup_logging()
    try:
        general, general_seconds = run_step("domain_lift_general", argv)
        start = general["stages"]["pretrain"]["path"]
        reuse = [f"pretrain.init_from={start}", f"tokenizer.from_artifact={start}"]
        domain, domain_seconds = run_step("domain_lift_pubmed", reuse + argv)
    except ConfigError as error:
        return fail(error)
    print(render(general, domain))
    print(
        f"\nstep 1 (general pretraining + evaluation): {general_seconds / 60:.1f} min; step 2 "
        f"(continued pretraining + evaluation): {domain_seconds / 60:.1f} min; pretraining fit: "
        f"{general['stages']['pretrain']['fit_seconds'] / 60:.1f} + "
        f"{domain['stages']['pretrain']['fit_seconds'] / 60:.1f} min"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
