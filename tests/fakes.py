"""Helpers shared by the tests (conftest.py hands them out as fixtures or re-exports them).

Synthetic text built from Greek letter names, two small downstream tasks written as files with
the tiny encoder and trainer that pretrain for them, a clock that moves only when slept on, and
the comparison of an exported model's logits against `transformers`.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.core.config import compose_config
from flows.core.settings import settings_from
from flows.downstream.settings import FinetuneSettings
from flows.plan import RunConfig, load_run_config, resolved_trainer
from flows.training.hardware import Hardware
from flows.training.settings import TrainerSettings

if TYPE_CHECKING:
    import torch

    from flows.downstream.finetuning.recipe import ArmResult
    from lightning_modules.models.config import EncoderConfig
    from lightning_modules.models.heads import BertForMaskedLM

# The repository's root: where the tests that read its files, or run commands in it, look.
REPO = Path(__file__).resolve().parents[1]

GREEK_LETTERS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
)


def greek_text(
    paragraphs: int,
    seed: int = 0,
    words: Sequence[str] = GREEK_LETTERS,
    length: tuple[int, int] = (8, 40),
) -> str:
    """`paragraphs` blank-line-separated paragraphs of `length[0]` to `length[1] - 1` words
    drawn from `words`, the same for the same seed."""
    rng = np.random.default_rng(seed)
    chosen = [rng.choice(list(words), size=int(rng.integers(*length))) for _ in range(paragraphs)]
    return "\n\n".join(" ".join(paragraph) for paragraph in chosen)


@cache
def composed(*overrides: str) -> RunConfig:
    """The run config `python -m flows <overrides>` would run, composed from conf/ and validated:
    what the tests start from, so they train the recipe users run, not the classes' defaults."""
    return load_run_config(compose_config(list(overrides)))


# A one-layer encoder and four optimizer steps: the downstream tests' pretraining budget. One
# thread: a tiny model on a loaded 2-core machine runs many times faster than with two.
# Stand-ins for the machine `trainer.precision: auto` resolves on (flows/training/hardware.py): a
# test that pins a key or a precision names the hardware instead of depending on the one it runs on.
NATIVE_BF16_CPU = Hardware("cpu", True, "AVX512 with avx512_bf16")
EMULATED_BF16_CPU = Hardware("cpu", False, "AVX2")
TINY_ENCODER = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}


def on_this_machine(trainer: TrainerSettings) -> TrainerSettings:
    """`trainer` as a run's plan hands it to the stages, `precision: auto` resolved here: a stage
    reads the precision it is given and never resolves one (flows/plan.py `resolved_trainer`)."""
    return resolved_trainer(trainer)[0]


TINY_TRAINER = on_this_machine(
    composed(
        "trainer.max_steps=4",
        "trainer.warmup_steps=1",
        "trainer.batch_size=8",
        "trainer.val_every_steps=4",
        "trainer.log_every_steps=2",
        "trainer.threads=1",
    ).trainer
)
# The downstream tests' fine-tuning budget: two seeds, one rate, two short epochs, small samples.
TINY_RECIPE: dict[str, Any] = {
    "seeds": 2,
    "learning_rates": [1e-2],
    "epochs": 2,
    "batch_size": 16,
    "max_length": 32,
    "train_examples": 100,
    "validation_examples": 40,
    "bootstrap_samples": 200,
}


@dataclass(frozen=True)
class WordShards:
    """The downstream tests' starting point (conftest's `word_shards`): tokenizer and shards
    (seq_len 32) of `word_paragraphs(300)`, and the tasks of `write_word_tasks` in `root`."""

    root: Path
    store: ArtifactStore
    tokenizer: ArtifactRef
    shards: ArtifactRef
    catalog: dict[str, Any]


# The downstream tests' vocabulary: Greek letters plus the two words their tasks turn on.
TASK_WORDS = [*GREEK_LETTERS[:8], "fever", "cough"]


def word_finetune(
    shards: WordShards, tasks: Sequence[str] = ("pairs",), **fields: Any
) -> FinetuneSettings:
    """`finetune.*` as conf/ composes it, for the word tasks of `shards` at TINY_RECIPE's budget;
    `fields` set anything else (or more)."""
    section = {
        **composed().finetune.model_dump(),
        "tasks": list(tasks),
        "catalog": shards.catalog,
        "data_dir": str(shards.root),
        **TINY_RECIPE,
        **fields,
    }
    return settings_from(FinetuneSettings, section, "finetune")


def word_paragraphs(count: int, seed: int = 1) -> str:
    """`count` paragraphs of 20 words from TASK_WORDS: the downstream tests' pretraining text."""
    rng = random.Random(seed)
    return "\n\n".join(" ".join(rng.choice(TASK_WORDS) for _ in range(20)) for _ in range(count))


def write_word_tasks(directory: Path) -> dict[str, Any]:
    """A pair task (label: does the second sentence say `fever`?) and a tagging task."""
    rng = random.Random(0)

    def words(count: int) -> str:
        return " ".join(rng.choice(TASK_WORDS[:8]) for _ in range(count))

    for split, size in (("train", 400), ("test", 60)):
        rows = ["index\tfirst\tsecond\tlabel"]
        for index in range(size):
            label = rng.random() < 0.5
            second = f"{words(3)} {'fever' if label else 'cough'} {words(2)}"
            rows.append(f"{index}\t{words(6)}\t{second}\t{'yes' if label else 'no'}")
        (directory / f"pairs-{split}.tsv").write_text("\n".join(rows) + "\n")
        sentences = []
        for _ in range(size):
            tokens = [(word, "O") for word in words(5).split()]
            at = rng.randrange(len(tokens))
            tokens[at:at] = [("fever", "B-Disease"), ("cough", "I-Disease")]
            sentences.append("\n".join(f"{token}\t{tag}" for token, tag in tokens))
        (directory / f"ner-{split}.tsv").write_text("\n\n".join(sentences) + "\n")
    return {
        "pairs": {
            "format": "glue",
            "labels": ["no", "yes"],
            "metric": "accuracy",
            "train": "pairs-train.tsv",
            "test": "pairs-test.tsv",
            "text_column": "first",
            "pair_column": "second",
        },
        "tags": {
            "format": "conll",
            "kind": "token_classification",
            "metric": "entity_f1",
            "labels": ["O", "B-Disease", "I-Disease"],
            "train": "ner-train.tsv",
            "test": "ner-test.tsv",
        },
    }


class FakeClock:
    """A monotonic clock that moves only when slept on: budgets checked without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def logits_match(
    ours: Callable[[Any, Any], Any], theirs: Any, vocab_size: int, atol: float = 1e-4
) -> bool:
    """Our forward pass against a `transformers` model on a padded batch: the padded row is
    compared on its real tokens only (what padding does there is nobody's business)."""
    import torch

    input_ids = torch.randint(5, vocab_size, (2, 12))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    with torch.no_grad():
        mine = ours(input_ids, attention_mask)
        reference = theirs(input_ids=input_ids, attention_mask=attention_mask).logits
    return torch.allclose(mine[0], reference[0], atol=atol) and torch.allclose(
        mine[1, :9], reference[1, :9], atol=atol
    )


def perturbed(config: EncoderConfig) -> BertForMaskedLM:
    """A seeded masked LM in eval mode whose every parameter is nudged off its initial value
    (non-trivial norms and biases), so an export that misplaces a tensor shows in the logits."""
    import torch

    from lightning_modules.models.heads import BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model.eval()


# Overrides that shrink any shipped preset to a 20-step pretraining on the demo corpus.
SHORT_RUN = [
    "corpus.max_documents=1200",
    "tokenizer.vocab_size=1000",
    "shards.seq_len=64",
    "shards.sequences_per_shard=256",
    "trainer.max_steps=20",
    "trainer.batch_size=16",
    "trainer.learning_rate=2e-3",
    "trainer.warmup_steps=4",
    "trainer.val_every_steps=20",
    "trainer.checkpoint_every_steps=20",
    "trainer.max_validation_sequences=64",
    "trainer.log_every_steps=10",
]


# Overrides for a served or refreshed run that must finish in seconds: 12 steps, small tasks.
SERVED_RUN = [
    "trainer.max_steps=12",
    "trainer.warmup_steps=2",
    "trainer.val_every_steps=12",
    "trainer.checkpoint_every_steps=12",
    "finetune.train_examples=100",
    "finetune.validation_examples=50",
    "finetune.test_examples=100",
    "finetune.max_length=32",
]


def grid_arm(
    rate: float, grid: list[float], best_epochs: list[int], allowed: int = 10
) -> ArmResult:
    """An arm that chose `rate` from `grid`, one seed per best epoch (`allowed` epochs at most:
    a run whose best epoch is that one was capped)."""
    from flows.downstream.finetuning.recipe import ArmResult, RunResult, grid_edge

    runs = [
        RunResult(
            "arm", rate, seed, 0.5, epoch, epoch == allowed, {"accuracy": 0.6 + seed / 100}, []
        )
        for seed, epoch in enumerate(best_epochs)
    ]
    return ArmResult(rate, {f"{r:g}": 0.5 for r in grid}, runs, grid_edge(rate, grid))


def finetune_outputs(arms: dict[str, ArmResult], **extra: Any) -> dict[str, Any]:
    """A finetune stage's flat outputs for one task `t` scored by accuracy, as the stage writes
    them (figures, bootstrap, baselines, recipe, caps): what its readers are given."""
    from flows.downstream.statistics.report import task_outputs

    return {
        "tasks": ["t"],
        "confidence": 0.95,
        **task_outputs("t", "accuracy", arms, 0.95, 10),
        "t.lift_accuracy_bootstrap_low": -0.1,
        "t.lift_accuracy_bootstrap_high": 0.1,
        "t.baselines": "",
        "t.train_examples": 100,
        "t.recipe": "2 seeds, ...",
        "t.recipe_set_by_task": "",
        "t.caps": "",
        **extra,
    }


def gradient_pairs(
    ours: torch.Tensor, theirs: torch.Tensor, leaves: Sequence[torch.Tensor]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The gradients of two outputs with respect to `leaves` under one random upstream gradient,
    paired leaf by leaf: how a rewritten backward is checked against autograd's."""
    import torch

    upstream = torch.randn_like(ours)
    return list(
        zip(
            torch.autograd.grad(ours, leaves, upstream),
            torch.autograd.grad(theirs, leaves, upstream),
            strict=True,
        )
    )


def write_results(
    directory: Path,
    arms: dict[str, dict[int, float]],
    train_pool: int = 6000,
    metric: str = "accuracy",
    **sampling: int | None,
) -> Path:
    """A finetune artifact's results.json for task `t`: each arm's test score per seed (under
    `metric`, recorded after a `precision` of 0.5), and what decides each seed's
    examples: the recipe's sampling fields, overridable by name, and the train pool the
    labelled sample is drawn from."""
    directory.mkdir(parents=True, exist_ok=True)
    task: dict[str, Any] = {
        arm: {
            "runs": [
                {"seed": seed, "test": {"precision": 0.5, metric: score}}
                for seed, score in scores.items()
            ]
        }
        for arm, scores in arms.items()
    }
    task["recipe"] = {
        "train_examples": 500,
        "validation_examples": 1000,
        "test_examples": None,
        **sampling,
    }
    task["caps"] = {"train_examples": {"used": task["recipe"]["train_examples"], "of": train_pool}}
    (directory / "results.json").write_text(json.dumps({"t": task}))
    # The manifest names the task's own metric, as a finetune artifact's does.
    outputs = {"tasks": ["t"], "t.metric": metric}
    (directory / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    return directory


PIPELINE_STAGES = ("tokenizer", "shards", "pretrain", "finetune")


def run_twice_together(command: list[str], env: dict[str, str], timeout: float) -> list[str]:
    """Starts `command` twice at once and waits for both; each must succeed, and each stage must
    be computed by exactly one of them (the other reads it from the shared store).

    Returns both runs' merged stdout and stderr, for the caller's further checks.
    """
    runs = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=timeout)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]
    for stage in PIPELINE_STAGES:
        computed = sum(
            bool(re.search(rf"^\s+{stage}\s+\[computed\]", output, re.MULTILINE))
            for output in outputs
        )
        assert computed == 1, f"{stage} computed {computed} times"
    return outputs


SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


def tiny_tokenizer(path: Path) -> Path:
    """A small WordPiece tokenizer with BERT's special tokens, saved at `path`: for export tests."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(
        ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france"] * 20,
        trainers.WordPieceTrainer(vocab_size=120, special_tokens=list(SPECIALS.values())),
    )
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tokenizer.save(str(path))
    return path


RESUME_WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex").split()  # noqa: SIM905


def write_corpus(path: Path) -> Path:
    """300 seeded paragraphs of 8-29 words from a 14-word vocabulary, for short pretraining runs."""
    rng = np.random.default_rng(0)
    path.write_text(
        "\n\n".join(
            " ".join(rng.choice(RESUME_WORDS, size=int(rng.integers(8, 30)))) for _ in range(300)
        )
    )
    return path


MODERNBERT_OPTIONS: dict[str, Any] = {  # ModernBERT's architecture on the encoder, any size
    "position_embedding": "rotary",
    "rope_theta": 160_000.0,
    "feed_forward": "geglu",
    "linear_bias": False,
    "norm_bias": False,
    "norm_placement": "pre",
    "first_attention_norm": False,
    "type_vocab_size": 0,
    "global_attention_every": 3,
}


def squad_articles(
    articles: int, paragraphs: int, seed: int = 0, v2: bool = True
) -> dict[str, Any]:
    """A SQuAD-format document over TASK_WORDS: each paragraph's question asks for `fever`, the
    answer where the context holds it; with `v2`, every other context has no `fever` and its
    question is unanswerable (`is_impossible`)."""
    rng = random.Random(seed)
    data = []
    for article in range(articles):
        rows = []
        for paragraph in range(paragraphs):
            words = [rng.choice(TASK_WORDS[:8]) for _ in range(rng.randrange(8, 30))]
            impossible = v2 and paragraph % 2 == 1
            at = rng.randrange(len(words))
            answers = []
            if not impossible:
                words[at] = "fever"
                answers = [{"text": "fever", "answer_start": len(" ".join(words[: at + 1])) - 5}]
            context = " ".join(words)
            qa: dict[str, Any] = {
                "id": f"q{article}-{paragraph}",
                "question": "fever ?",
                "answers": answers,
            }
            if v2:
                qa["is_impossible"] = impossible
            rows.append({"context": context, "qas": [qa]})
        data.append({"title": f"article{article}", "paragraphs": rows})
    return {"version": "v2.0" if v2 else "1.1", "data": data}


def quiet_trainer(max_steps: int, *callbacks: Any) -> Any:
    """A bare Lightning Trainer on the CPU for a module test: no logger, checkpoint, progress
    bar or sanity validation, only `callbacks`."""
    import pytorch_lightning as pl

    return pl.Trainer(
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        callbacks=list(callbacks),
    )
