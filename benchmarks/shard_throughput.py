"""Corpus-to-shards throughput: Cloze's shards stage against the `run_mlm.py` path, same tokenizer.

Input: the WikiExtractor Wikipedia dump in ../shared/data, written once as plain paragraphs
(blank-line separated) so every path reads identical text. Paths, each in its own process:
- Cloze: the shards stage (streaming read, clean, dedupe, split, `encode_batch`, pack, checksum);
- Hugging Face: `load_dataset("text")` + `map(tokenize, batched=True, num_proc=N)` +
  `map(group_texts)`, as in transformers' examples/pytorch/language-modeling/run_mlm.py;
- raw `tokenizers`: `encode_batch` over the same paragraphs packed into one uint16 array (the
  limit any path can reach with this tokenizer).
Token counts differ by design (Cloze drops paragraphs under `corpus.min_words` and duplicates;
run_mlm adds [CLS]/[SEP] per line), so input MB/s is reported beside tokens/s; the ratio column
compares input MB/s, the work every path must do.

    python -m benchmarks.shard_throughput --sizes-mb 10,40 --num-proc 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import data_file, in_child_process, markdown_table

SEQ_LEN = 128
VOCAB_SIZE = 30522


def write_paragraph_corpus(work_dir: Path, megabytes: int) -> Path:
    """The first `megabytes` of article text, one paragraph per blank-line separated block."""
    from flows.corpora.formats import decoded_lines, wikiextractor_documents

    target = work_dir / f"wiki-{megabytes}mb.txt"
    if target.exists():
        return target
    budget = megabytes * 1_000_000
    written = 0
    with target.open("w") as output:
        for path in sorted(data_file("wikipedia_en_wikiextractor/AA").glob("wiki_*")):
            for document in wikiextractor_documents(path, decoded_lines(path, "strict")):
                for paragraph in document.splitlines():
                    if paragraph.strip():
                        output.write(paragraph + "\n\n")
                        written += len(paragraph) + 2
                if written >= budget:
                    return target
    return target


def train_shared_tokenizer(work_dir: Path, corpus_file: Path) -> Path:
    from flows.artifacts import ArtifactStore
    from flows.corpora import CorpusSettings, open_corpus
    from flows.stages.tokenizer import TokenizerSettings, train_tokenizer

    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(corpus_file)]))
    ref = train_tokenizer(TokenizerSettings(vocab_size=VOCAB_SIZE), corpus, ArtifactStore(work_dir))
    return ref.path


def run_cloze(corpus_file: str, tokenizer_dir: str) -> dict[str, Any]:
    from flows.artifacts import ArtifactRef, ArtifactStore
    from flows.corpora import CorpusSettings, open_corpus
    from flows.stages.shards import ShardSettings, build_shards

    tokenizer = ArtifactRef("tokenizer", Path(tokenizer_dir).name, Path(tokenizer_dir), {}, True)
    corpus = open_corpus(CorpusSettings(kind="files", paths=[corpus_file]))
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        ref = build_shards(
            ShardSettings(seq_len=SEQ_LEN), corpus, tokenizer, ArtifactStore(Path(scratch))
        )
        wall = time.perf_counter() - started
    tokens = ref.outputs["train_tokens"] + ref.outputs["validation_tokens"]
    return {"tokens": tokens, "wall_s": wall}


def run_transformers(corpus_file: str, tokenizer_dir: str, num_proc: int) -> dict[str, Any]:
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
        started = time.perf_counter()
        raw = datasets.load_dataset("text", data_files={"train": corpus_file}, cache_dir=cache)
        tokenized = raw.map(tokenize, batched=True, num_proc=num_proc, remove_columns=["text"])
        grouped = tokenized.map(group_texts, batched=True, num_proc=num_proc)
        wall = time.perf_counter() - started
        tokens = len(grouped["train"]) * SEQ_LEN
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"tokens": tokens, "wall_s": wall}


def run_raw_tokenizers(corpus_file: str, tokenizer_dir: str) -> dict[str, Any]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    started = time.perf_counter()
    arrays: list[np.ndarray] = []
    batch: list[str] = []
    with open(corpus_file, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                batch.append(line)
            if len(batch) == 1000:
                arrays += [np.asarray(e.ids, np.uint16) for e in tokenizer.encode_batch(batch)]
                batch = []
    arrays += [np.asarray(e.ids, np.uint16) for e in tokenizer.encode_batch(batch)]
    flat = np.concatenate(arrays)
    return {"tokens": int(flat.size), "wall_s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mb", default="10,40")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--work-dir", type=Path, default=Path(".cloze/bench-shards"))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    sizes = [int(size) for size in args.sizes_mb.split(",")]
    tokenizer_dir = train_shared_tokenizer(args.work_dir, write_paragraph_corpus(args.work_dir, 5))
    rows = []
    for size in sizes:
        corpus = str(write_paragraph_corpus(args.work_dir, size))
        megabytes = Path(corpus).stat().st_size / 1e6
        common = {"corpus_file": corpus, "tokenizer_dir": str(tokenizer_dir)}
        results = {
            f"transformers num_proc={args.num_proc}": in_child_process(
                run_transformers, num_proc=args.num_proc, **common
            ),
            "cloze shards stage": in_child_process(run_cloze, **common),
            "raw encode_batch": in_child_process(run_raw_tokenizers, **common),
        }
        reference = results[f"transformers num_proc={args.num_proc}"]
        for name, result in results.items():
            tokens_per_s = result["tokens"] / result["wall_s"]
            rows.append(
                {
                    "corpus_mb": size,
                    "path": name,
                    **result,
                    "tokens_per_s": tokens_per_s,
                    "input_mb_per_s": megabytes / result["wall_s"],
                    "vs_transformers": reference["wall_s"] / result["wall_s"],
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
                "tokens_per_s",
                "input_mb_per_s",
                "vs_transformers",
                "peak_rss_mb",
            ],
        )
    )
    if args.output:
        args.output.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
