"""The recipe a run continuing a `transformers` checkpoint trains with, unless the user sets it.

The trainer's defaults are a from-scratch recipe (a peak rate of 2e-3 after 300 warmup steps);
applied to a pretrained encoder they tear its features apart within tens of steps (measured on
all-MiniLM-L6-v2: token cosine to the base 0.52 after 40 steps at 1e-4 with a fresh head trained
jointly). So a run that continues a checkpoint takes a continuation recipe instead, from DAPT
(Gururangan et al. 2020) and BERT, chosen by measurement
(docs/results/2026-12-04-checkpoint-adaptation.md); a value the user set explicitly wins, and
the note says which values were adopted and which kept.

A checkpoint without an MLM head (BertModel, RobertaModel, an ELECTRA discriminator continued
with objective=mlm, a sentence-transformers folder) gets a fresh head, which first trains alone
for `pretrain.head_warmup_steps` steps with the encoder frozen.
"""

from __future__ import annotations

from typing import Any

# trainer.* of the continuation recipe: DAPT's and BERT's starting points (warmup 6%, beta2
# 0.98, linear decay) at a fifth of their peak rate. At 1e-4, 10 head-only then 30 whole-model
# steps left all-MiniLM-L6-v2's token outputs at a mean cosine of 0.748 to the base's (the slow
# test, tests/integration/test_real_checkpoint.py); the results page has the rest.
CONTINUATION: dict[str, Any] = {
    "learning_rate": 2e-5,
    "warmup_ratio": 0.06,
    "beta2": 0.98,
    "schedule": "linear",
}
# Steps of the head warm-up: where the head's validation loss stopped improving (measured).
HEAD_WARMUP_STEPS = 100


def explicit_trainer_keys(values: dict[str, Any], groups: dict[str, str]) -> set[str]:
    """The `trainer.*` keys the user set: by name, or all of them with a `trainer=` preset."""
    if "trainer" in groups:
        return set(CONTINUATION)
    return {key.removeprefix("trainer.") for key in values if key.startswith("trainer.")}


def continuation_recipe(
    config: dict[str, Any],
    explicit: set[str],
    has_mlm_head: bool,
) -> tuple[dict[str, Any], str]:
    """`config` with the continuation recipe where the user set nothing, and the note's words."""
    trainer = dict(config["trainer"])
    adopted = {key: value for key, value in CONTINUATION.items() if key not in explicit}
    kept = sorted(set(CONTINUATION) & explicit)
    trainer |= adopted
    pretrain = dict(config["pretrain"])
    mlm = config.get("objective", {}).get("kind", "mlm") == "mlm"
    if pretrain.get("head_warmup_steps") is None:
        steps = HEAD_WARMUP_STEPS if mlm and not has_mlm_head else 0
        if trainer.get("max_tokens") is None:
            steps = min(steps, int(trainer["max_steps"]) // 2)  # a short run keeps half
        pretrain["head_warmup_steps"] = steps
    words = "continuation recipe: " + ", ".join(f"trainer.{k}={v}" for k, v in adopted.items())
    if kept:
        words += f" (yours kept: {', '.join(f'trainer.{key}' for key in kept)})"
    if pretrain["head_warmup_steps"]:
        head = (
            "its MLM head trains alone first"
            if has_mlm_head
            else "the checkpoint has no MLM head: a new one trains alone"
        )
        words += (
            f"; {head} for pretrain.head_warmup_steps={pretrain['head_warmup_steps']} steps, "
            "encoder frozen"
        )
    return {**config, "trainer": trainer, "pretrain": pretrain}, words
