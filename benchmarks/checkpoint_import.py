"""Import time and peak memory of a BERT-base-sized checkpoint: Cloze's
`read_checkpoint(folder).masked_lm()` against `AutoModelForMaskedLM.from_pretrained(folder)`.

The checkpoint is `transformers`' BertForMaskedLM at bert-base's config (random weights, 110 M
parameters), written with `save_pretrained` (model.safetensors). Each load runs in a fresh
process, the two paths alternating, and the median of the repeats is reported: wall and CPU
seconds of the library import and of the load call, peak RSS after the load, and after one
forward pass over 128 tokens (both libraries map the file and read a page when it is first used,
so the second peak is the one a run pays). Cloze's load includes hashing the weights (its
lineage key).

    PYTHONPATH=. .venv/bin/python -m benchmarks.checkpoint_import [--folder DIR] [--repeats 3]

`--layers` and `--hidden-size` shrink the checkpoint built (bert-base's 12 x 768 by default).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import cpu_seconds, in_child_process, markdown_table, peak_rss_mb

COLUMNS = [
    "path",
    "import_s",
    "load_s",
    "load_cpu_s",
    "rss_after_load_mb",
    "rss_after_forward_mb",
]


def build_checkpoint(folder: str, layers: int, hidden_size: int) -> dict[str, Any]:
    """bert-base's config (its vocabulary and positions) at `layers` x `hidden_size`: 12 x 768
    is bert-base itself, a smaller shape a run of seconds."""
    import transformers

    config = transformers.BertConfig(
        num_hidden_layers=layers,
        hidden_size=hidden_size,
        num_attention_heads=max(1, hidden_size // 64),
        intermediate_size=4 * hidden_size,
    )
    model = transformers.BertForMaskedLM(config)
    model.save_pretrained(folder)
    return {"parameters": sum(parameter.numel() for parameter in model.parameters())}


def load(path: str, folder: str) -> dict[str, Any]:
    """One path's load in this (fresh) process, then a forward pass that touches every weight."""
    started = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    if path == "cloze":
        from lightning_modules.transformers_import import read_checkpoint
    else:
        import transformers

        transformers.logging.set_verbosity_error()
    imported, cpu = time.perf_counter(), cpu_seconds()
    if path == "cloze":
        model = read_checkpoint(Path(folder)).masked_lm().eval()
    else:
        model = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    loaded, load_cpu, after_load = time.perf_counter(), cpu_seconds() - cpu, peak_rss_mb()
    ids = torch.randint(1000, 30000, (1, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if path == "cloze":
            model.head(model.encoder(ids))
        else:
            model(input_ids=ids)
    return {
        "path": path,
        "import_s": imported - started,
        "load_s": loaded - imported,
        "load_cpu_s": load_cpu,
        "rss_after_load_mb": after_load,
        "rss_after_forward_mb": peak_rss_mb(),
    }


def median_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for path in ("cloze", "transformers"):
        mine = [run for run in runs if run["path"] == path]
        rows.append(
            {"path": path}
            | {column: statistics.median(run[column] for run in mine) for column in COLUMNS[1:]}
        )
    cloze, theirs = rows
    rows.append(
        {"path": "cloze / transformers"}
        | {column: cloze[column] / theirs[column] for column in COLUMNS[1:]}
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", help="a checkpoint folder to reuse (built when absent)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=12, help="of the checkpoint built")
    parser.add_argument("--hidden-size", type=int, default=768, help="of the checkpoint built")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or str(Path(scratch) / "bert-base")
        if not (Path(folder) / "config.json").exists():
            built = in_child_process(
                build_checkpoint, folder=folder, layers=args.layers, hidden_size=args.hidden_size
            )
            print(f"built {folder}: {built['parameters']:,} parameters")
        runs = [
            in_child_process(load, path=path, folder=folder)
            for _ in range(args.repeats)
            for path in ("cloze", "transformers")
        ]
    print(markdown_table(median_rows(runs), COLUMNS))


if __name__ == "__main__":
    main()
