"""A task's recipe in one line, as `--cfg`, the run summary and the finetune artifact show it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings module imports this one
    from flows.downstream.settings import Recipe


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def recipe_text(recipe: Recipe, from_task: list[str]) -> str:
    """`5 seeds, learning rates 0.0003/0.001/0.003, at most 15 epochs (patience 2), ...`."""
    caps = ", ".join(
        f"{name} {value}"
        for name, value in (
            ("train_examples", recipe.train_examples),
            ("validation_examples", recipe.validation_examples),
            ("test_examples", recipe.test_examples),
        )
        if value is not None
    )
    scored = f" (chosen on {plural(recipe.grid_seeds, 'seed')})" if recipe.grid_seeds > 1 else ""
    dropout = (
        "" if recipe.encoder_dropout is None else f", encoder dropout {recipe.encoder_dropout:g}"
    )
    prompt = "" if recipe.prompt is None else f", prompt {recipe.prompt.template!r}"
    text = (
        f"{plural(recipe.seeds, 'seed')}, learning rates "
        f"{'/'.join(f'{rate:g}' for rate in recipe.learning_rates)}{scored}, at most "
        f"{plural(recipe.epochs, 'epoch')} (patience {recipe.patience}), max_length "
        f"{recipe.max_length}, batch {recipe.batch_size}{dropout}{prompt}"
        + (f", at most {caps}" if caps else "")
    )
    origin = f"; set by the task: {', '.join(from_task)}" if from_task else ""
    return f"{text}{origin}"
