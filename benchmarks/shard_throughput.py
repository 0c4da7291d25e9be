"""Corpus-to-shards throughput: Cloze's shards stage against the `run_mlm.py` path, same tokenizer.

Input: the WikiExtractor Wikipedia dump in ../shared/data, written once as plain paragraphs
(blank-line separated) in files of about 1 MB, as the dump itself is laid out, so every path
reads identical text. Paths, each in its own process:
- Cloze: the shards stage (streaming read, clean, dedupe, split, `encode_batch`, pack, checksum)
  with `shards.num_workers` = N;
- Hugging Face: `load_dataset("text")` + `map(tokenize, batched=True, num_proc=N)` +
  `map(group_texts)`, as in transformers' examples/pytorch/language-modeling/run_mlm.py;
- raw `tokenizers`: `encode_batch` over the same paragraphs into one uint16 array, and
  `encode_batch_fast` (no character offsets) plus Cloze's concat packing: the limit any path can
  reach with this tokenizer.
Token counts differ by design (Cloze drops paragraphs under `corpus.min_words` and duplicates;
run_mlm adds [CLS]/[SEP] per line), so input MB/s is reported beside tokens/s; the ratio column
compares input MB/s, the work every path must do. On a shared machine wall time measures the
neighbours too, so CPU seconds (the process and its worker processes) are reported beside it, and
ratios per CPU-second.

Cloze runs with one worker (one process: `tokenizers` already encodes on every core, and a
thread reads ahead) and with N, the transformers path with `num_proc=N`.

    python -m benchmarks.shard_throughput --sizes-mb 10,40 --num-proc 2 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import cpu_seconds, data_file, in_child_process, markdown_table

SEQ_LEN = 128
VOCAB_SIZE = 30522
LIMIT = "raw encode_batch_fast + packing"


def write_paragraph_corpus(work_dir: Path, megabytes: int) -> Path:
    """The first `megabytes` of article text as blank-line separated paragraphs, 1 MB per file."""
    from flows.corpora.formats import ReadRules, decoded_lines, wikiextractor_documents
    from flows.corpora.stats import CorpusStats

    target = work_dir / f"wiki-{megabytes}mb"
    if target.exists():
        return target
    partial = work_dir / f"wiki-{megabytes}mb.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    rules, stats = ReadRules(), CorpusStats()
    written = 0
    for number, path in enumerate(
        sorted(data_file("wikipedia_en_wikiextractor/AA").glob("wiki_*"))
    ):
        with (partial / f"part-{number:03d}.txt").open("w") as output:
            lines = decoded_lines(path, rules, stats)
            for document in wikiextractor_documents(path, lines, rules, stats):
                for paragraph in document.splitlines():
                    if paragraph.strip():
                        output.write(paragraph + "\n\n")
                        written += len(paragraph) + 2
        if written >= megabytes * 1_000_000:
            break
    partial.rename(target)
    return target


def corpus_files(corpus_dir: str) -> list[str]:
    return [str(path) for path in sorted(Path(corpus_dir).glob("*.txt"))]


def train_shared_tokenizer(work_dir: Path, corpus_file: Path) -> Path:
    from flows.core.artifacts import ArtifactStore
    from flows.corpora import CorpusSettings, open_corpus
    from flows.stages.tokenizer import TokenizerSettings, train_tokenizer

    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(corpus_file)]))
    ref = train_tokenizer(TokenizerSettings(vocab_size=VOCAB_SIZE), corpus, ArtifactStore(work_dir))
    return ref.path


def run_cloze(corpus_dir: str, tokenizer_dir: str, num_proc: int) -> dict[str, Any]:
    from flows.core.artifacts import ArtifactRef, ArtifactStore
    from flows.corpora import CorpusSettings, open_corpus
    from flows.stages.shards.stage import ShardSettings, build_shards

    tokenizer = ArtifactRef("tokenizer", Path(tokenizer_dir).name, Path(tokenizer_dir), {}, True)
    corpus = open_corpus(CorpusSettings(kind="files", paths=[corpus_dir]))
    settings = ShardSettings(seq_len=SEQ_LEN, num_workers=num_proc)
    with tempfile.TemporaryDirectory() as scratch:
        started, cpu = time.perf_counter(), cpu_seconds()
        ref = build_shards(settings, corpus, tokenizer, ArtifactStore(Path(scratch)))
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    tokens = ref.outputs["train_tokens"] + ref.outputs["validation_tokens"]
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu}


def run_transformers(corpus_dir: str, tokenizer_dir: str, num_proc: int) -> dict[str, Any]:
    import datasets
    from transformers import PreTrainedTokenizerFast

    datasets.disable_progress_bars()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(tokenizer_dir) / "tokenizer.json"))

    def tokenize(batch: dict[str, list[str]]) -> Any:
        return tokenizer(batch["text"], return_special_tokens_mask=True)

    def group_texts(examples: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        concatenated = {k: list(chain(*examples[k])) for k in examples}  # as run_mlm.py
        total = (len(concatenated["input_ids"]) // SEQ_LEN) * SEQ_LEN
        return {
            k: [v[i : i + SEQ_LEN] for i in range(0, total, SEQ_LEN)]
            for k, v in concatenated.items()
        }

    cache = tempfile.mkdtemp()
    try:
        started, cpu = time.perf_counter(), cpu_seconds()
        files = {"train": corpus_files(corpus_dir)}
        raw = datasets.load_dataset("text", data_files=files, cache_dir=cache)
        tokenized = raw.map(tokenize, batched=True, num_proc=num_proc, remove_columns=["text"])
        grouped = tokenized.map(group_texts, batched=True, num_proc=num_proc)
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        tokens = len(grouped["train"]) * SEQ_LEN
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"tokens": tokens, "wall_s": wall, "cpu_s": cpu}


def run_raw_tokenizers(corpus_dir: str, tokenizer_dir: str, fast: bool) -> dict[str, Any]:
    """`encode_batch` into one array; or, `fast`, `encode_batch_fast` plus concat packing."""
    from tokenizers import Tokenizer

    from flows.stages.shards.packing import ConcatPacker

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    encode = tokenizer.encode_batch_fast if fast else tokenizer.encode_batch
    packer = ConcatPacker(SEQ_LEN, 2, 3)
    started, cpu = time.perf_counter(), cpu_seconds()
    arrays: list[np.ndarray] = []

    def add(batch: list[str]) -> None:
        ids = [encoding.ids for encoding in encode(batch, add_special_tokens=False)]
        if not fast:
            arrays.extend(np.asarray(row, np.uint16) for row in ids)
            return
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        tokens = np.fromiter(chain.from_iterable(ids), np.uint16, count=int(lengths.sum()))
        arrays.append(packer.add(tokens, lengths).astype(np.uint16))

    batch: list[str] = []
    for path in corpus_files(corpus_dir):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    batch.append(line)
                if len(batch) == 1000:
                    add(batch)
                    batch = []
    add(batch)
    flat = np.concatenate([array.reshape(-1) for array in arrays])
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return {"tokens": int(flat.size), "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mb", default="10,40")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench-shards"))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    sizes = [int(size) for size in args.sizes_mb.split(",")]
    tokenizer_dir = train_shared_tokenizer(args.work_dir, write_paragraph_corpus(args.work_dir, 5))
    rows = []
    for size in sizes:
        corpus = str(write_paragraph_corpus(args.work_dir, size))
        megabytes = sum(Path(path).stat().st_size for path in corpus_files(corpus)) / 1e6
        common = {"corpus_dir": corpus, "tokenizer_dir": str(tokenizer_dir)}
        paths: dict[str, Callable[[], dict[str, Any]]] = {
            f"transformers num_proc={args.num_proc}": partial(
                in_child_process, run_transformers, num_proc=args.num_proc, **common
            ),
            **{
                f"cloze shards num_workers={workers}": partial(
                    in_child_process, run_cloze, num_proc=workers, **common
                )
                for workers in sorted({1, args.num_proc})
            },
            "raw encode_batch": partial(in_child_process, run_raw_tokenizers, fast=False, **common),
            LIMIT: partial(in_child_process, run_raw_tokenizers, fast=True, **common),
        }
        # Interleaved repeats, median wall per path: this machine's speed drifts between runs.
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
        for _ in range(args.repeats):
            for name, measure in paths.items():
                runs[name].append(measure())
        results = {
            name: sorted(measured, key=lambda run: run["wall_s"])[len(measured) // 2]
            for name, measured in runs.items()
        }
        reference = results[f"transformers num_proc={args.num_proc}"]
        limit = results[LIMIT]
        for name, result in results.items():
            rows.append(
                {
                    "corpus_mb": size,
                    "path": name,
                    **result,
                    "input_mb_per_s": megabytes / result["wall_s"],
                    "input_mb_per_cpu_s": megabytes / result["cpu_s"],
                    "vs_transformers": reference["wall_s"] / result["wall_s"],
                    "vs_limit": limit["wall_s"] / result["wall_s"],
                    "vs_transformers_cpu": reference["cpu_s"] / result["cpu_s"],
                    "vs_limit_cpu": limit["cpu_s"] / result["cpu_s"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print()
    print(
        markdown_table(
            rows,
            [
                "corpus_mb",
                "path",
                "tokens",
                "wall_s",
                "cpu_s",
                "input_mb_per_s",
                "input_mb_per_cpu_s",
                "vs_transformers",
                "vs_limit",
                "vs_transformers_cpu",
                "vs_limit_cpu",
                "peak_rss_mb",
                "worker_peak_rss_mb",
            ],
        )
    )
    if args.output:
        args.output.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
