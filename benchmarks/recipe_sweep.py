"""Screen pretraining recipes: run the pipeline up to `pretrain` for each override set.

`python -m benchmarks.recipe_sweep OUT.jsonl 'a=1 b=2' 'a=1 b=3' ...` appends one JSON line per
set: its overrides, MLM validation accuracy and loss, tokens trained and tokens/s of the fit.
Downstream lift is not screened here (it costs more than the pretraining it judges); confirm
the winners end to end with `python -m flows`. Each set reuses the tokenizer and shards stages
from the content-addressed store when only trainer/objective keys change.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

from flows.core.logs import setup_logging
from flows.plan import start_services
from flows.resolve import resolve_run


def screen(overrides: list[str]) -> dict[str, object]:
    resolved = resolve_run(overrides, until="pretrain")
    start_services(resolved.run)
    from flows.pipeline import pretraining_pipeline  # after start_services (Prefect env)

    started = time.perf_counter()
    summary = pretraining_pipeline(resolved)
    pre = summary["stages"]["pretrain"]
    return {
        "overrides": overrides,
        "val_accuracy": pre.get("val_accuracy"),
        "val_loss": pre.get("val_loss"),
        "train_tokens": pre["train_tokens"],
        "steps": pre["steps"],
        "fit_seconds": pre["fit_seconds"],
        "tokens_per_second": pre["train_tokens"] / pre["fit_seconds"],
        "cache_hit": pre["cache_hit"],
        "wall_seconds": time.perf_counter() - started,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    setup_logging()
    for line in argv[1:]:
        result = screen(shlex.split(line))
        with out.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
