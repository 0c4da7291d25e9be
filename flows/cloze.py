"""`cloze COMMAND [...]`: the one console script, a subcommand per entry point.

Each subcommand is an existing entry point, imported only when chosen (so `cloze --help` and a
refused config cost no Prefect, MLflow or torch import) and given its own arguments, parser and
exit codes: `cloze run` is `python -m flows`, `cloze compare` is `python -m flows.compare`, and
so on; both spellings keep working.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from flows.core.cli import USAGE_ERROR


@dataclass(frozen=True)
class Command:
    """A subcommand: the module whose `main(argv, prog)` runs it, and what it does."""

    module: str
    summary: str
    entry: str = "main"  # the module's function `(argv, prog) -> exit code`

    def main(self) -> Callable[[list[str], str], int]:
        return getattr(importlib.import_module(self.module), self.entry)  # type: ignore[no-any-return]


COMMANDS = {
    "run": Command(
        "flows.__main__",
        "run the pipeline (tokenizer, shards, pretrain, finetune) with Hydra overrides; "
        "--until STAGE stops early",
    ),
    "serve": Command(
        "flows.deploy.cli",
        "register the Prefect deployments and run their flow runs from here",
        entry="serve_main",
    ),
    "deploy": Command(
        "flows.deploy.cli", "register the Prefect deployments to a work pool (or serve them)"
    ),
    "refresh": Command(
        "flows.refresh.cli", "refresh a domain's model once: continue on new files, promote"
    ),
    "compare": Command("flows.compare.cli", "compare pipeline runs recorded in MLflow"),
    "lift": Command(
        "flows.lift", "general pretraining, then continued on a domain, scored for lift"
    ),
    "evaluate": Command(
        "flows.evaluate.cli",
        "score a checkpoint (pretrain.init_from) as it is on the tasks: base and random-init "
        "arms, no pretraining",
    ),
    "ui": Command("flows.ui", "serve the Prefect UI and the MLflow UI over the local run stores"),
}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(
        [
            "usage: cloze [-h] COMMAND [ARGS ...]",
            "",
            "Cloze: masked-language-model pretraining, tracked, cached and compared.",
            "",
            "commands:",
            *lines,
            "",
            "`cloze COMMAND --help` lists a command's options.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """The console script's entry (`[project.scripts]`); the exit code of the subcommand."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else USAGE_ERROR
    name, rest = args[0], args[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(usage(), file=sys.stderr)
        print(f"error: unknown command {name!r}; one of {', '.join(COMMANDS)}", file=sys.stderr)
        return USAGE_ERROR
    return command.main()(rest, f"cloze {name}")


if __name__ == "__main__":
    sys.exit(main())
