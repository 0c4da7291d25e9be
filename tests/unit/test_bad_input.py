"""Bad input a user would plausibly hit, one row each: the exact message, and nothing published.

Every row runs the real stages on real files. After the failure no artifact directory may exist
(a half-written one would be visible as `<stage>/<key>/`): temp and work dirs start with a dot.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.__main__ import main as cli_main
from flows.core.artifacts import ArtifactRef, ArtifactStore
from flows.core.config import compose_config
from flows.core.logs import new_run_warnings
from flows.core.settings import ConfigError
from flows.corpora import CorpusSettings, open_corpus
from flows.corpora.formats import CorpusInputError
from flows.corpora.replay import ReplaySettings
from flows.downstream.settings import FinetuneSettings
from flows.downstream.tasks.spec import TaskInputError
from flows.plan import PipelinePlan
from flows.stages.distill_plan import DistillSettings, external_teacher
from flows.stages.finetune import finetune
from flows.stages.lift_curve import lift_curve
from flows.stages.objectives import ObjectiveSettings
from flows.stages.pretrain import pretrain
from flows.stages.public_import import import_checkpoint
from flows.stages.shards.stage import ShardSettings, build_shards
from flows.stages.tokenizer import TokenizerSettings, train_tokenizer
from flows.stages.tokenizer_import import import_tokenizer
from flows.stages.training_types import PretrainSettings
from flows.tracking.runs import Tracker
from flows.training.settings import TrainerSettings
from lightning_modules.data.shard_format import CorruptShardError
from lightning_modules.export import export_huggingface
from lightning_modules.models.config import EncoderConfig, load_encoder_config
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.heads import BertForMaskedLM
from lightning_modules.models.serialization import load_encoder_weights
from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint
from tests.fakes import GREEK_LETTERS, greek_text, on_this_machine, write_results

TEXT = "a paragraph with comfortably more than five words in it, numbered {}"


@dataclass(frozen=True)
class FileCase:
    name: str
    write: Callable[[Path], list[str]]  # writes files, returns corpus.paths
    message: str
    settings: dict[str, Any] = field(default_factory=dict)


def write(path: Path, content: bytes | str) -> list[str]:
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return [str(path)]


def gzip_bytes(text: str) -> bytes:
    return gzip.compress(text.encode())


def unclosed_quote_csv(rows: int, bad: int) -> str:
    """`rows` rows of id,text under a header; row `bad` (line `bad + 1`) opens a quote it never
    closes: read leniently, it would swallow every row after it into one document."""
    lines = [f'{number},"{TEXT.format(number)}"' for number in range(1, rows + 1)]
    lines[bad - 1] = f'{bad},"{TEXT.format(bad)}'
    return "id,text\n" + "\n".join(lines) + "\n"


def parquet(path: Path) -> list[str]:
    pq.write_table(pa.table({"body": [TEXT.format(1)]}), path)
    return [str(path)]


EMPTY = r"the corpus is empty after cleaning: no training document is left from .*{} \({}\)"
FILE_CASES = [
    FileCase(
        "missing path",
        lambda d: [str(d / "nowhere.txt")],
        r"corpus\.paths: .*/nowhere\.txt does not exist",
    ),
    FileCase(
        "glob matching nothing",
        lambda d: [f"{d}/*.md"],
        r"corpus\.paths: the glob '.*/\*\.md' matches no file",
    ),
    FileCase(
        "directory without text files",
        lambda d: write(d / "image.png", b"\x89PNG") and [str(d)],
        r"corpus\.paths: the directory .* holds no .*txt.* file",
    ),
    FileCase(
        "empty file",
        lambda d: write(d / "empty.txt", b""),
        EMPTY.format("empty\\.txt", "the input holds no text"),
    ),
    FileCase(
        "only short paragraphs",
        lambda d: write(d / "short.txt", "too short\n\nalso short"),
        EMPTY.format("short\\.txt", "2 shorter than corpus\\.min_words=5"),
    ),
    FileCase(
        "only a binary file",
        lambda d: write(d / "blob.txt", b"\x00\x01binary\x00"),
        EMPTY.format("blob\\.txt", "1 binary files skipped"),
    ),
    FileCase(
        "non-UTF-8 bytes",
        lambda d: write(
            d / "latin1.txt", (TEXT.format(1) + "\n\ncaf\xe9 au lait").encode("latin-1")
        ),
        r"latin1\.txt:3 is not valid UTF-8 \(invalid continuation byte at byte 3\); fix the "
        r"file or set corpus\.decode_errors=replace\|skip",
    ),
    FileCase(
        "jsonl without the text field",
        lambda d: write(d / "rows.jsonl", json.dumps({"body": TEXT.format(1)})),
        r"rows\.jsonl:1 has no field 'text'; set corpus\.text_field to the field that holds "
        r"the text",
    ),
    FileCase(
        "broken jsonl line",
        lambda d: write(d / "rows.jsonl", json.dumps({"text": TEXT.format(1)}) + "\n{oops"),
        r"rows\.jsonl:2 is not valid JSON: Expecting property name",
    ),
    FileCase(
        "csv without the column",
        lambda d: write(d / "a.csv", f"id,body\n1,{TEXT}\n"),
        r"a\.csv has no column 'text' \(columns: id, body\); set corpus\.text_field",
    ),
    FileCase(
        "parquet without the column",
        lambda d: parquet(d / "a.parquet"),
        r"a\.parquet has no column 'text' \(columns: body\); set corpus\.text_field",
    ),
    FileCase(
        "a 2 MB line and nothing else",
        lambda d: write(d / "huge.txt", "word " * 400_000),
        EMPTY.format("huge\\.txt", "1 longer than corpus\\.max_chars=100000"),
        {"max_chars": 100_000},
    ),
    FileCase(
        "orphan </doc> in WikiExtractor output",
        lambda d: write(d / "wiki_00", f'<doc id="1">\nT\n{TEXT}\n</doc>\n</doc>\n'),
        r"wiki_00:5: </doc> without an opening <doc>",
        {"format": "wikiextractor"},
    ),
    FileCase(
        "truncated gzip",
        lambda d: write(d / "a.txt.gz", gzip_bytes(TEXT * 50)[:40]),
        r"a\.txt\.gz cannot be read \(EOFError: .*\); if it is compressed, it may be "
        r"truncated or not really the format its suffix says",
    ),
    FileCase(
        "tsv without the column",
        lambda d: write(d / "a.tsv", f"sentence\tlabel\n{TEXT}\t1\n"),
        r"a\.tsv:1 has no column 'text' \(columns: sentence, label\); set corpus\.text_field",
    ),
    FileCase(
        "tsv row short of the text column",
        lambda d: write(d / "a.tsv", f"label\ttext\n1\t{TEXT}\n0\n"),
        r"a\.tsv:3 has 1 tab-separated field\(s\), the header has 2: fix or remove the row, or "
        r"set corpus\.on_bad_rows=skip to count and drop such rows",
    ),
    FileCase(
        "tsv row with an extra field",
        lambda d: write(d / "a.tsv", f"label\ttext\n1\t{TEXT}\n0\t{TEXT}\tstray\n"),
        r"a\.tsv:3 has 3 tab-separated field\(s\), the header has 2: fix or remove the row",
    ),
    FileCase(
        "csv field over the field limit",
        lambda d: write(d / "wide.csv", 'text\n"' + ("x" * 80 + "\n") * 9 + '"\n'),
        r"wide\.csv:2: the CSV record starting here cannot be parsed \(field larger than field "
        r"limit \(401\)\).* a field may hold at most corpus\.max_chars=100 characters",
        {"max_chars": 100},
    ),
    FileCase(
        "csv with an unclosed quote in row 11 of 400",
        lambda d: write(d / "rows.csv", unclosed_quote_csv(400, 11)),
        r"rows\.csv:12: the CSV record starting here cannot be parsed \(.*\); an unclosed or "
        r'stray " is the usual cause',
    ),
    FileCase(
        "csv row with another field count than the header",
        lambda d: write(d / "rows.csv", f'id,text\n1,"{TEXT}"\n2,"{TEXT}",extra\n'),
        r"rows\.csv:3 has 3 comma-separated field\(s\), the header has 2: fix or remove the row, "
        r"or set corpus\.on_bad_rows=skip",
    ),
    FileCase(
        "UTF-16 with a byte-order mark, but broken",
        lambda d: write(d / "utf16.txt", (TEXT.format(1) + "\n").encode("utf-16") + b"\x00\xd8"),
        r"utf16\.txt:2 is not valid UTF-16 .*re-encode it as UTF-8",
    ),
    FileCase(
        "text named .zst",
        lambda d: write(d / "b.txt.zst", TEXT.format(1)),
        r"b\.txt\.zst cannot be read \(ZstdError: .*\); if it is compressed",
    ),
]


def published(root: Path) -> list[Path]:
    return [
        entry
        for stage in (root.iterdir() if root.exists() else [])
        for entry in stage.iterdir()
        if not entry.name.startswith(".")
    ]


@pytest.mark.parametrize("case", FILE_CASES, ids=[case.name for case in FILE_CASES])
def test_bad_corpus_input(tmp_path: Path, case: FileCase) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store_root = tmp_path / "store"
    with pytest.raises(CorpusInputError, match=case.message):
        settings = CorpusSettings(kind="files", paths=case.write(data), **case.settings)
        corpus = open_corpus(settings)
        tokenizer = train_tokenizer(
            TokenizerSettings(vocab_size=100), corpus, ArtifactStore(store_root)
        )
        build_shards(ShardSettings(), corpus, tokenizer, ArtifactStore(store_root))
    assert published(store_root) == []


REPLAY_CASES = [
    FileCase(
        "replay glob matching nothing",
        lambda d: [f"{d}/*.md"],
        r"^corpus\.replay\.paths: the glob '.*/\*\.md' matches no file$",
    ),
    FileCase(
        "missing replay path",
        lambda d: [str(d / "nowhere.txt")],
        r"^corpus\.replay\.paths: .*/nowhere\.txt does not exist",
    ),
    FileCase(
        "replay too small for its share",
        lambda d: write(d / "wiki.txt", "\n\n".join(TEXT.format(n) for n in range(3))),
        r"^corpus\.replay\.share=0\.5 needs [\d,]+ replay tokens beside the corpus's [\d,]+ "
        r"training tokens, but corpus\.replay\.paths \(1 file\(s\)\) hold [\d,]+ after cleaning "
        r"and dedupe; add general text or lower corpus\.replay\.share \(at most 0\.\d+ fits\)\. "
        r"A replay is never repeated$",
        {"share": 0.5},
    ),
]


@pytest.mark.parametrize("case", REPLAY_CASES, ids=[case.name for case in REPLAY_CASES])
def test_bad_replay_input(tmp_path: Path, case: FileCase) -> None:
    """`corpus.replay.paths` are checked where `corpus.paths` are: when the corpus is opened,
    before any stage; a replay too small for its share, once the shards stage has counted."""
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(TEXT.format(n) for n in range(40)))
    data = tmp_path / "data"
    data.mkdir()
    store_root = tmp_path / "store"
    with pytest.raises(CorpusInputError, match=case.message):
        replay = ReplaySettings(paths=case.write(data), **case.settings)
        corpus = open_corpus(CorpusSettings(kind="files", paths=[str(text)], replay=replay))
        tokenizer = train_tokenizer(
            TokenizerSettings(vocab_size=100), corpus, ArtifactStore(store_root)
        )
        build_shards(ShardSettings(), corpus, tokenizer, ArtifactStore(store_root))
    assert [entry for entry in published(store_root) if entry.parent.name == "shards"] == []


CONFIG_CASES = [
    # A typo'd key: the nearest valid keys, never Hydra's "+key" advice.
    (
        ["trainer.max_stepz=5"],
        r"^unknown config key trainer\.max_stepz; nearest valid keys: trainer\.max_steps, "
        r"trainer\.max_tokens$",
    ),
    (["modle=bert-mini"], r"^unknown config key modle; nearest valid keys: model$"),
    (
        ["finetune.catalog.pydoc_topics.recipe.epoch=3"],
        r"^unknown config key finetune\.catalog\.pydoc_topics\.recipe\.epoch; nearest valid "
        r"keys: finetune\.catalog\.pydoc_topics\.recipe\.epochs$",
    ),
    (
        ["distill=default", "distill.tacher=x"],
        r"^unknown config key distill\.tacher; nearest valid keys: distill\.teacher, ",
    ),
    (["trainer.zzz=1"], r"^unknown config key trainer\.zzz; valid keys under trainer: accel"),
    (
        ["corpus.paths=[a.txt]"],
        r"^corpus\.paths is read by corpus=files only, not by the corpus=pydoc this config "
        r"selects: select corpus=files first$",
    ),
    (
        ["distill.teacher=x"],
        r"^unknown config key distill\.teacher: it belongs to distill=default, not to the distill "
        r"this config selects; select one first \(e\.g\. distill=default\)$",
    ),
    (["experiment=smok"], r"^experiment=smok is not in conf/experiment/; nearest: smoke$"),
    (["trainer.max_steps=abc"], r"trainer\.max_steps='abc' must be an integer"),
    (["trainer.learning_rate=fast"], r"trainer\.learning_rate='fast' must be a number"),
    (["model.share_layers=yes"], r"model\.share_layers='yes' must be true or false"),
    (
        ["model.num_heads=3"],
        r"model\.hidden_size=128 is not divisible by model\.num_heads=3; pick a head count",
    ),
    (
        ["shards.seq_len=1024"],
        r"shards\.seq_len=1024 exceeds model\.max_position_embeddings=512, the range of its "
        r"absolute positions",
    ),
    (
        ["model=modernbert-tiny", "shards.seq_len=64"],
        r"model\.local_attention=128 is larger than shards\.seq_len=64: the sliding window",
    ),
    (
        ["model=modernbert-tiny", "model.num_heads=3"],
        r"model\.hidden_size=128 is not divisible by model\.num_heads=3",
    ),
    (["objective.mask_rate=-0.1"], r"objective\.mask_rate=-0\.1 must be between 0 and 1"),
    (["objective.mask_rate=1.5"], r"objective\.mask_rate=1\.5 must be between 0 and 1"),
    (
        ["objective.replace_with_mask=0.95"],
        r"objective\.replace_with_mask \+ objective\.replace_with_random must not exceed 1",
    ),
    (["objective.selection=ngram"], r"objective\.selection='ngram' must be one of"),
    (
        ["trainer.precision=16"],
        r"trainer\.precision=16 must be one of \('auto', '32-true', 'bf16-mixed', '16-mixed'\)",
    ),
    (
        ["trainer.precision=16-mixed"],
        r"trainer\.precision=16-mixed needs a CUDA GPU .* but trainer\.accelerator=cpu: use "
        r"trainer\.precision=auto or 32-true",
    ),
    (["corpus=files"], r"^corpus\.kind=files needs corpus\.paths \(files, globs or directories\)$"),
    (["corpus=huggingface"], r"^corpus\.kind=huggingface needs corpus\.name \(a hub name or a "),
    (
        ["corpus.replay={share:0.1}"],
        r"^corpus\.replay needs corpus\.replay\.paths \(files, globs or directories of general "
        r"text, e\.g\. a Wikipedia sample\); or leave corpus\.replay unset \(null\) for no replay$",
    ),
    (["corpus.replay={paths:[a.txt],share:0}"], r"^corpus\.replay\.share=0 must be in \(0, 1\)$"),
    (
        ["corpus.replay={paths:[a.txt],share:1.0}"],
        r"^corpus\.replay\.share=1\.0 must be in \(0, 1\)$",
    ),
    (
        ["corpus.replay={paths:[a.txt],format:xml}"],
        r"^corpus\.replay\.format='xml' must be one of \('auto', ",
    ),
    (["model=bert-huge"], r"^model=bert-huge is not in conf/model/; nearest: bert-base"),
    (
        ["trainer.max_steps=[1"],
        r"^cannot parse the override 'trainer\.max_steps=\[1' \(key trainer\.max_steps\): no "
        r"viable alternative at input '\[1'\. A value holding spaces, brackets, commas, quotes "
        r"or non-ASCII characters needs Hydra's own quotes inside the shell's: "
        r"'trainer\.max_steps=\"\[1\"'$",
    ),
    (["shards.seq_len=4"], r"shards\.seq_len=4 must be between 8 and 8192"),
    (["trainer.learning_rate=-0.001"], r"trainer\.learning_rate=-0\.001 must be greater than 0"),
    (["trainer.learning_rate=nan"], r"trainer\.learning_rate=nan must be a finite number"),
    (["trainer.weight_decay=inf"], r"trainer\.weight_decay=inf must be a finite number"),
    (["trainer.beta2=1.5"], r"trainer\.beta2=1\.5 must be in \[0, 1\)"),
    (["trainer.num_workers=-1"], r"trainer\.num_workers=-1 must be at least 0"),
    (["seed=-1"], r"^seed=-1 must be in \[0, 4294967296\)"),
    (["finetune.confidence=1.0"], r"finetune\.confidence=1\.0 must be in \[0\.5, 1\)"),
    (["+trainr.max_steps=5"], r"^unknown config key trainr; nearest valid keys: trainer, "),
    (["+trainer.max_stepz=5"], r"^unknown config key trainer\.max_stepz; nearest valid keys: "),
    (["+trainer.stepz=5"], r"^unknown config key trainer\.stepz; valid keys under trainer: "),
    (["finetune.seeds=0"], r"finetune\.seeds=0 must be at least 1"),
    (["finetune.pooling=max"], r"finetune\.pooling='max' must be one of \('cls', 'mean'\)"),
    (["finetune.encoder_dropout=1.0"], r"finetune\.encoder_dropout=1\.0 must be in \[0, 1\)"),
    (
        ["finetune.group_by_length=often"],
        r"finetune\.group_by_length='often' must be true or false",
    ),
    (
        ["finetune.prompt={template:'{text} was good',verbalizer:{0:bad,1:good}}"],
        r"finetune\.prompt\.template='\{text\} was good' must hold \{mask\} exactly once",
    ),
    (
        ["finetune.prompt={template:'{text} was {mask}',verbalizer:{0:good,1:good}}"],
        r"finetune\.prompt\.verbalizer=.* must map each label to its own non-empty word",
    ),
    (
        [
            "finetune.tasks=[ncbi_disease]",
            "finetune.prompt={template:'{text} was {mask}',verbalizer:{O:no,B:yes}}",
        ],
        r"finetune\.prompt is set, but task ncbi_disease is token_classification: a prompt gives",
    ),
    (
        [
            "objective=electra",
            "finetune.prompt={template:'{text} was {mask}',verbalizer:{0:a,1:b}}",
        ],
        r"finetune\.prompt reads the masked-LM head, but objective=electra pretrains ELECTRA",
    ),
    (
        ["corpus.exclude_validation_of=[sst3]"],
        r"corpus\.exclude_validation_of: 'sst3' is not in finetune\.catalog \(known: bc5cdr, cola, "
        r".*\); name a task of the catalog",
    ),
    (
        ["finetune.catalog.pydoc_topics.recipe.epochs=0"],
        r"finetune\.catalog\.pydoc_topics\.recipe\.epochs=0 must be at least 1",
    ),
    (
        ["+finetune.catalog.pydoc_topics.recipe.epoch=3"],
        r"unknown config key finetune\.catalog\.pydoc_topics\.recipe\.epoch; nearest valid "
        r"keys: finetune\.catalog\.pydoc_topics\.recipe\.epochs",
    ),
    (
        [
            "finetune.tasks=[ncbi_disease]",
            "+finetune.catalog.ncbi_disease.drop_contained_rows=true",
        ],
        r"finetune\.catalog\.ncbi_disease\.drop_contained_rows compares single texts: it applies "
        r"to classification tasks without a pair_column; remove it from this task",
    ),
    (
        ["finetune.tasks=[mrpc]", "+finetune.catalog.mrpc.drop_contained_rows=true"],
        r"finetune\.catalog\.mrpc\.drop_contained_rows compares single texts",
    ),
    (
        ["finetune.grid_seeds=6"],
        r"finetune\.grid_seeds=6 scores the learning-rate grid on more seeds than task "
        r"pydoc_topics runs \(5\); set it to at most 5",
    ),
    (
        ["finetune.catalog.pydoc_topics.recipe.learning_rates=[]"],
        r"finetune\.catalog\.pydoc_topics\.recipe\.learning_rates=\[\] must be a non-empty list",
    ),
    (
        ["finetune.checkpoints=[0,1]"],
        r"finetune\.checkpoints=\[0, 1\]: 0 is not a fraction of the pretraining budget in "
        r"\(0, 1\]",
    ),
    (
        ["finetune.checkpoints=[0.5,1.5]"],
        r"finetune\.checkpoints=\[0\.5, 1\.5\]: 1\.5 is not a fraction of the pretraining budget",
    ),
    (
        ["finetune.baselines=[seen_entities]"],
        r"finetune\.baselines: 'seen_entities' cannot be computed for task pydoc_topics, a "
        r"classification task; a classification task has majority, tfidf_logreg",
    ),
    (
        ["finetune.baselines=[majority]", "finetune.tasks=[pydoc_topics,ncbi_disease]"],
        r"finetune\.baselines: 'majority' cannot be computed for task ncbi_disease, a "
        r"token_classification task; a token_classification task has seen_entities",
    ),
    (
        ["finetune=semeval2010", "finetune.catalog.semeval2010.entity_markers=null"],
        r"finetune\.catalog\.semeval2010\.entity_markers is not set: a relation task needs its "
        r"entities marked, inline \(finetune\.catalog\.semeval2010\.entity_markers=",
    ),
    (
        ["finetune=semeval2010", "finetune.catalog.semeval2010.labels=[a,b]"],
        r"finetune\.catalog\.semeval2010\.negative_label='Other' is not among the labels "
        r"\['a', 'b'\]; name the label of pairs without a relation",
    ),
    (
        ["finetune=semeval2010", 'finetune.catalog.semeval2010.entity_markers=[["<e1>","</e1>"]]'],
        r"finetune\.catalog\.semeval2010\.entity_markers must list an \[open, close\] pair",
    ),
    (
        ["finetune.tasks=[ncbi_disease]", "+finetune.catalog.ncbi_disease.negative_label=O"],
        r"finetune\.catalog\.ncbi_disease\.negative_label applies to relation tasks, but task "
        r"ncbi_disease is token_classification",
    ),
    (
        ["finetune=semeval2010", "+finetune.catalog.semeval2010.pair_column=b"],
        r"finetune\.catalog\.semeval2010\.pair_column: a relation is read from one text",
    ),
    (
        ["finetune.label_counts=[0,100]"],
        r"finetune\.label_counts=\[0, 100\]: 0 is not a number of labelled examples",
    ),
    (
        ["finetune.doc_stride=40", "finetune.max_length=64"],
        r"finetune\.doc_stride=40 must be below max_length // 2 - 2 \(30\): a window holds the "
        r"question",
    ),
    (
        ["+finetune.catalog.q={format:squad,train:q.json,labels:[a,b]}", "finetune.tasks=[q]"],
        r"finetune\.catalog\.q\.labels: a question-answering task's answers are spans of the "
        r"context, not labels; remove labels",
    ),
    (
        [
            "+finetune.catalog.q={format:squad,kind:classification,train:q.json}",
            "finetune.tasks=[q]",
        ],
        r"finetune\.catalog\.q: format 'squad' cannot be kind 'classification'",
    ),
    (  # a CSV row holds its label names in one column: the separator must be named
        [
            "+finetune.catalog.m={format:csv,kind:multi_label,labels:[a,b],train:m.csv,test:m.csv}",
            "finetune.tasks=[m]",
        ],
        r"finetune\.catalog\.m\.label_separator is not set: a multi_label csv task holds each "
        r"row's label names in one column, separated; name the separator "
        r"\(finetune\.catalog\.m\.label_separator='\|'",
    ),
    (
        [
            "+finetune.catalog.m={format:csv,kind:multi_label,labels:[a,b],label_separator:'',"
            "train:m.csv,test:m.csv}",
            "finetune.tasks=[m]",
        ],
        r"finetune\.catalog\.m\.label_separator is empty: a multi_label csv task",
    ),
    (  # a record holds a list of label names: a separator would split nothing
        [
            "+finetune.catalog.m={format:jsonl,kind:multi_label,labels:[a,b],label_separator:'|',"
            "train:m.jsonl,test:m.jsonl}",
            "finetune.tasks=[m]",
        ],
        r"finetune\.catalog\.m\.label_separator splits a csv column of label names, but format "
        r"'jsonl' reads a list of them per record: remove label_separator",
    ),
    (
        [
            "+finetune.catalog.t={format:csv,labels:[a,b],label_separator:'|',train:t.csv,"
            "test:t.csv}",
            "finetune.tasks=[t]",
        ],
        r"finetune\.catalog\.t\.label_separator applies to multi_label tasks, but task t is "
        r"classification: set finetune\.catalog\.t\.kind=multi_label, or remove label_separator",
    ),
    (
        [
            "+finetune.catalog.t={format:jsonl,labels:[a,b],allow_empty_labels:false,"
            "train:t.jsonl,test:t.jsonl}",
            "finetune.tasks=[t]",
        ],
        r"finetune\.catalog\.t\.allow_empty_labels applies to multi_label tasks, but task t is "
        r"classification",
    ),
    (  # a GLUE row is split on tabs alone: its label column is one label
        [
            "+finetune.catalog.m={format:glue,kind:multi_label,labels:[a,b],train:m.tsv,"
            "test:m.tsv}",
            "finetune.tasks=[m]",
        ],
        r"finetune\.catalog\.m: format 'glue' cannot be kind 'multi_label'",
    ),
    (
        ["finetune.relation_head=mean"],
        r"finetune\.relation_head='mean' must be one of \('entity_start', 'cls'\)",
    ),
    (
        ["refresh.max_general_loss_increase=0.05"],
        r"^refresh\.max_general_loss_increase=0\.05 compares the general validation loss, but "
        r"pretrain\.general_validation is not set: name held-out general text \(e\.g\. "
        r"pretrain\.general_validation=\[/data/wiki/wiki_00\]\) or drop the bound$",
    ),
    (
        ["refresh.max_general_loss_increase=-1"],
        r"refresh\.max_general_loss_increase=-1 must be at least 0",
    ),
    (
        ["objective=electra", "pretrain.general_validation=[wiki_00]"],
        r"^pretrain\.general_validation is scored with the masked-LM head, but objective=electra "
        r"pretrains ELECTRA: drop it or use objective=mlm$",
    ),
    (
        ["pretrain.general_validation_format=xml"],
        r"pretrain\.general_validation_format='xml' must be one of \('auto', 'txt', ",
    ),
    (
        ["distill.layer_map=[0,7]", "distill=default"],
        r"distill\.layer_map=\[0, 7\] names teacher layer\(s\) \[7\], but the teacher \(this "
        r"run's model=bert-tiny\) has 2 layers \(0\.\.1\)",
    ),
    (
        ["model@distill.student=bert-mini", "distill=default"],
        r"distill\.student \(4 layers x 256, [\d,]+ parameters\) is larger than its teacher "
        r"\(this run's model=bert-tiny\) \([\d,]+\): distillation compresses; set "
        r"distill\.allow_larger_student=true",
    ),
    (
        [
            "distill.kl_weight=0",
            "distill=default",
            "distill.mlm_weight=0",
            "distill.cosine_weight=0",
        ],
        r"distill\.\*_weight are all 0: the student would learn nothing",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "message"), CONFIG_CASES, ids=[c[0][0] for c in CONFIG_CASES]
)
def test_bad_config(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PipelinePlan.from_config(compose_config(overrides))


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[ArtifactStore, ArtifactRef, ArtifactRef]:
    root = tmp_path_factory.mktemp("built")
    (root / "text.txt").write_text(greek_text(400, words=GREEK_LETTERS[:8], length=(20, 21)))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(root / "text.txt")]))
    store = ArtifactStore(root / "store")
    tokenizer = train_tokenizer(TokenizerSettings(vocab_size=100), corpus, store)
    shards = build_shards(ShardSettings(seq_len=32), corpus, tokenizer, store)
    return store, tokenizer, shards


TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
ONE_STEP = on_this_machine(
    TrainerSettings(max_steps=2, warmup_steps=1, batch_size=4, val_every_steps=2, log_every_steps=1)
)


def test_shards_from_another_tokenizer_are_refused(tmp_path: Path, built: Any) -> None:
    _, tokenizer, shards = built
    other = ArtifactRef("tokenizer", "0" * 20, tokenizer.path, tokenizer.outputs, True)
    store = ArtifactStore(tmp_path)
    with pytest.raises(ValueError, match=r"were written by tokenizer .* not by 0{20}"):
        pretrain(PretrainSettings(TINY, ObjectiveSettings(), ONE_STEP, 0), shards, other, store)
    assert published(tmp_path) == []


def test_a_corpus_too_small_for_one_batch_is_an_input_error_before_training(
    tmp_path: Path, built: Any
) -> None:
    _, tokenizer, shards = built
    batch = shards.outputs["train_sequences"] + 1
    trainer = on_this_machine(
        TrainerSettings(max_steps=2, warmup_steps=1, batch_size=batch, val_every_steps=2)
    )
    with pytest.raises(
        CorpusInputError,
        match=rf"gives {batch - 1} training sequences, fewer than trainer.batch_size={batch} ",
    ):
        pretrain(
            PretrainSettings(TINY, ObjectiveSettings(), trainer, 0),
            shards,
            tokenizer,
            ArtifactStore(tmp_path),
        )
    assert published(tmp_path) == [] and not list(tmp_path.rglob("*.ckpt"))


def test_a_flipped_byte_in_a_shard_stops_training_and_names_the_shard(
    tmp_path: Path, built: Any
) -> None:
    _, tokenizer, shards = built
    copy = tmp_path / "shards"
    shutil.copytree(shards.path, copy)
    shard = copy / "train-00000.bin"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF
    shard.write_bytes(bytes(data))
    corrupt = ArtifactRef("shards", shards.key, copy, shards.outputs, True)
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(
        CorruptShardError, match=r"train-00000\.bin fails its sha256 check .* Rerun"
    ):
        pretrain(
            PretrainSettings(TINY, ObjectiveSettings(), ONE_STEP, 0), corrupt, tokenizer, store
        )
    assert published(tmp_path / "store") == []


def test_an_encoder_of_another_shape_refuses_pretrained_weights(tmp_path: Path, built: Any) -> None:
    _, tokenizer, shards = built
    settings = PretrainSettings(TINY, ObjectiveSettings(), ONE_STEP, 0)
    pretrained = pretrain(settings, shards, tokenizer, ArtifactStore(tmp_path))
    other = BertEncoder(EncoderConfig(vocab_size=100, hidden_size=64, num_layers=1, num_heads=2))
    with pytest.raises(ValueError, match=r"pretrained encoder in .* was built with"):
        load_encoder_weights(other, pretrained.path)
    # Dropout rates shape no weight: fine-tuning may set its own (finetune.encoder_dropout).
    rates = {"dropout": 0.3, "attention_dropout": 0.2}
    saved = load_encoder_config(pretrained.path)
    load_encoder_weights(BertEncoder(replace(saved, **rates)), pretrained.path)


def test_exporting_what_no_rotary_class_can_represent_names_what_the_closest_one_lacks(
    tmp_path: Path,
) -> None:
    """RoFormer lacks one option here, ModernBERT three (GeGLU, pre-LN, first norm): RoFormer's."""
    rotary_without_token_types = EncoderConfig(
        vocab_size=50, hidden_size=32, num_heads=4, position_embedding="rotary", type_vocab_size=0
    )
    with pytest.raises(
        ValueError,
        match=r"^RoFormerForMaskedLM cannot represent this model; it lacks embeddings without "
        r"token types \(model\.type_vocab_size=0\)$",
    ):
        export_huggingface(
            BertForMaskedLM(rotary_without_token_types),
            tmp_path,
            {},
            "wordpiece",
            True,
            tmp_path / "hf",
        )


def test_a_curve_from_a_pretrain_artifact_without_its_checkpoints(
    built: Any, pretrained: ArtifactRef, tmp_path: Path
) -> None:
    _, tokenizer, _ = built
    settings = FinetuneSettings(tasks=["t"], catalog={"t": GLUE}, checkpoints=[0.25, 0.5, 1.0])
    refs = {"pretrain": pretrained, "tokenizer": tokenizer}
    with pytest.raises(
        ConfigError,
        match=r"finetune\.checkpoints=\[0\.25, 0\.5, 1\.0\] asks for the encoder at 0\.25, 0\.5 "
        r"of pretraining, but pretrain artifact \w+ kept only \['1'\]; rerun pretraining",
    ):
        lift_curve(settings, 0, ONE_STEP, refs, ArtifactStore(tmp_path / "store"))
    assert published(tmp_path / "store") == []


def test_a_teacher_trained_with_another_tokenizer_is_refused_before_any_stage(
    built: Any, pretrained: ArtifactRef, tmp_path: Path
) -> None:
    store, _, _ = built
    (tmp_path / "other.txt").write_text(greek_text(200, words=GREEK_LETTERS[8:16], length=(20, 21)))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(tmp_path / "other.txt")]))
    other = train_tokenizer(TokenizerSettings(vocab_size=120), corpus, store)
    settings = DistillSettings(teacher=str(pretrained.path), student=TINY)
    with pytest.raises(
        ConfigError,
        match=rf"distill\.teacher='.*' was trained with tokenizer \w+, this run's tokenizer is "
        rf"{other.key}: a student must read the teacher's token ids; drop tokenizer\.from_artifact",
    ):
        external_teacher(
            settings, TokenizerSettings(from_artifact=str(other.path)), store, *NO_LOOKUP
        )
    ref, tokenizer = external_teacher(settings, TokenizerSettings(), store, *NO_LOOKUP)
    assert ref.path == pretrained.path and tokenizer.from_artifact == str(pretrained.path)


def no_registry(uri: str) -> Path:
    raise AssertionError(f"{uri} is a path, not a registry URI")


def no_import(folder: Path, key: str) -> ArtifactRef:
    raise AssertionError(f"{folder} is a pretrain artifact, not a transformers checkpoint")


NO_LOOKUP = (no_registry, no_import)


def test_a_teacher_fault_only_the_import_finds_names_distill_teacher(tmp_path: Path) -> None:
    """Whole weights and a vocab.txt that fits them pass the preflight; a tokenizer_config.json
    that is not JSON is found only by `transformers`, in the import, under the key given."""
    folder = tmp_path / "teacher"
    tiny_checkpoint("bert", folder, vocab_size=write_tokenizer(folder, "wordpiece"), scale=0.0)
    (folder / "tokenizer_config.json").write_text("{not json")
    (tmp_path / "text.txt").write_text(greek_text(20, seed=0))
    corpus = open_corpus(CorpusSettings(kind="files", paths=[str(tmp_path / "text.txt")]))
    store = ArtifactStore(tmp_path / "store")

    def import_folder(path: Path, key: str) -> ArtifactRef:
        return import_checkpoint(path, import_tokenizer(path, corpus, store, key=key), store, key)

    settings = DistillSettings(teacher=str(folder), student=TINY)
    with pytest.raises(
        CorpusInputError,
        match=rf"^distill\.teacher={folder}: transformers could not load its tokenizer",
    ):
        external_teacher(settings, TokenizerSettings(), store, no_registry, import_folder)
    assert published(tmp_path / "store") == []


def test_a_registry_uri_that_does_not_resolve_is_refused_naming_it(
    built: Any, tmp_path: Path
) -> None:
    store, _, _ = built
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", tmp_path / "mlartifacts")
    settings = DistillSettings(teacher="models:/cloze-encoder@champion", student=TINY)
    with pytest.raises(
        ConfigError,
        match=r"models:/cloze-encoder@champion: the registered model 'cloze-encoder' has no "
        r"alias 'champion'",
    ):
        external_teacher(settings, TokenizerSettings(), store, tracker.resolve_model_uri, no_import)
    with pytest.raises(ConfigError, match=r"'models:/cloze-encoder' is not models:/<name>@<alias>"):
        external_teacher(
            DistillSettings(teacher="models:/cloze-encoder", student=TINY),
            TokenizerSettings(),
            store,
            tracker.resolve_model_uri,
            no_import,
        )


@dataclass(frozen=True)
class TaskCase:
    name: str
    files: dict[str, str | bytes]  # file name -> content, written into the task's data dir
    spec: dict[str, Any]  # finetune.catalog.t, on top of a GLUE single-sentence task
    message: str


GLUE = {"format": "glue", "labels": ["0", "1"], "train": "t.tsv", "test": "t.tsv"}
CONLL = {
    "format": "conll",
    "kind": "token_classification",
    "metric": "entity_f1",
    "labels": ["O", "B-Disease", "I-Disease"],
    "train": "n.tsv",
    "test": "n.tsv",
}
TASK_CASES = [
    TaskCase(
        "label outside the label list",
        {"t.tsv": "sentence\tlabel\na fine film\t1\na dull one\t2\n"},
        GLUE,
        r"t\.tsv:3: label '2' is not in finetune\.catalog\.t\.labels \['0', '1'\]; add it to "
        r"the label list or fix the row",
    ),
    TaskCase(
        "missing column",
        {"t.tsv": "text\tlabel\na fine film\t1\n"},
        GLUE,
        r"t\.tsv:1 has no column 'sentence' \(columns: 'text', 'label'\); set the "
        r"finetune\.catalog\.t column settings to one of them",
    ),
    TaskCase(
        "headerless TSV read with the default header: true",
        {"t.tsv": "a fine and moving film\t1\na dull one\t0\n"},
        GLUE,
        r"t\.tsv:1 has no column 'sentence' \(columns: 'a fine and moving film', '1'\); set the "
        r"finetune\.catalog\.t column settings to one of them\. If it is an example, not column "
        r"names, set finetune\.catalog\.t\.header=false and name the columns by position",
    ),
    TaskCase(
        "row short of the label column",
        {"t.tsv": "sentence\tlabel\na fine film\n"},
        GLUE,
        r"t\.tsv:2 has 1 tab-separated fields, but finetune\.catalog\.t reads column 1",
    ),
    TaskCase(
        "empty split",
        {"t.tsv": "sentence\tlabel\n\n"},
        GLUE,
        r"t\.tsv: the train split of task t holds no example; point finetune\.catalog\.t\.train "
        r"at a file with labelled rows",
    ),
    TaskCase(
        "pair row without its second sentence",
        {"t.tsv": "a\tb\tlabel\nx\ty\t1\nonly one\t\t0\n"},
        {**GLUE, "text_column": "a", "pair_column": "b"},
        r"t\.tsv:3 has no second sentence \(column 'b'\); every row of a sentence-pair task "
        r"needs both sentences",
    ),
    TaskCase(
        "missing task file",
        {},
        GLUE,
        r"t\.tsv does not exist; fix finetune\.catalog\.t\.train, or set CLOZE_DATA_DIR",
    ),
    TaskCase(
        "IOB line without a tab",
        {"n.tsv": "fever\tB-Disease\ncough I-Disease\n"},
        CONLL,
        r"n\.tsv:2 has no tab: expected 'token<TAB>tag'; separate the token from its tag",
    ),
    TaskCase(
        "IOB line with a broken tag",
        {"n.tsv": "fever\tX-Disease\n"},
        CONLL,
        r"n\.tsv:1: tag 'X-Disease' is not IOB2 \(O, B-<type> or I-<type>\); fix the line",
    ),
    TaskCase(
        "IOB tag outside the label list",
        {"n.tsv": "a\tO\n\nBRCA1\tB-Gene\n"},
        CONLL,
        r"n\.tsv:3: tag 'B-Gene' is not in finetune\.catalog\.t\.labels .*; add it to the label "
        r"list",
    ),
]


def parquet_bytes(columns: dict[str, list[Any]]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), sink)
    return bytes(sink.getvalue().to_pybytes())


CSV = {"format": "csv", "labels": ["0", "1"], "train": "t.csv", "test": "t.csv"}
JSONL = {"format": "jsonl", "labels": "auto", "text_column": "text", "train": "t.jsonl"}
SQUAD = {"format": "squad", "kind": "question_answering", "train": "q.json", "test": "q.json"}
MULTI_LABEL = {
    "format": "jsonl",
    "kind": "multi_label",
    "labels": "auto",
    "text_column": "text",
    "label_column": "labels",
    "train": "m.jsonl",
    "test": "m.jsonl",
}
MULTI_LABEL_CSV = {
    **MULTI_LABEL,
    "format": "csv",
    "labels": ["flu", "cold"],
    "label_separator": "|",
    "train": "m.csv",
    "test": "m.csv",
}


def squad_json(paragraphs: list[tuple[str, str, int]]) -> str:
    """One article of SQuAD JSON: a question per (context, answer text, answer_start)."""
    rows = [
        {
            "context": context,
            "qas": [
                {
                    "id": f"q{index}",
                    "question": "who?",
                    "answers": [{"text": text, "answer_start": start}],
                }
            ],
        }
        for index, (context, text, start) in enumerate(paragraphs)
    ]
    return json.dumps({"version": "1.1", "data": [{"title": "a", "paragraphs": rows}]})


def squad_qas(*qas: dict[str, Any], context: str = "Rollo led the Normans.") -> str:
    """One paragraph of SQuAD 2.0 JSON holding these `qas` entries as given."""
    paragraph = {"context": context, "qas": list(qas)}
    return json.dumps({"version": "v2.0", "data": [{"title": "a", "paragraphs": [paragraph]}]})


def question(id: str, *answers: tuple[str, int], impossible: bool = False) -> dict[str, Any]:
    return {
        "id": id,
        "question": "who?",
        "answers": [{"text": text, "answer_start": start} for text, start in answers],
        "is_impossible": impossible,
    }


ROLLO = ("Rollo", 0)


def squad_paragraphs(*paragraphs: list[dict[str, Any]]) -> str:
    """One article of SQuAD 2.0 JSON, a context of its own per list of `qas` entries."""
    rows = [
        {"context": f"Rollo led the Normans in year {index}.", "qas": qas}
        for index, qas in enumerate(paragraphs)
    ]
    return json.dumps({"version": "v2.0", "data": [{"title": "a", "paragraphs": rows}]})


RELATION = {
    **JSONL,
    "kind": "relation",
    "metric": "macro_f1",
    "entity_markers": [["<<", ">>"], ["[[", "]]"]],
    "test": "t.jsonl",
}
MARKED = (
    '{"text": "<< aspirin >> inhibits [[ cox ]]", "label": "CPR:4"}\n'
    '{"text": "<< aspirin >> and [[ insulin ]]", "label": "false"}\n'
)
TASK_CASES += [
    TaskCase(
        "broken JSON line",
        {"t.jsonl": '{"text": "a fine film", "label": "1"}\n{"text": "a dull one", "label"\n'},
        {**JSONL, "test": "t.jsonl"},
        r"t\.jsonl:2 is not valid JSON: Expecting ':' delimiter",
    ),
    TaskCase(
        "CSV with an unclosed quote",
        {"t.csv": 'sentence,label\n"an unclosed, quote,1\nmore,0\n'},
        CSV,
        r"t\.csv:2: the CSV record starting here cannot be parsed \(unexpected end of data\); "
        r'an unclosed or stray " is the usual cause',
    ),
    TaskCase(
        "parquet file without the column",
        {"t.parquet": parquet_bytes({"text": ["a fine film"], "label": ["1"]})},
        {**CSV, "format": "parquet", "train": "t.parquet", "test": "t.parquet"},
        r"t\.parquet has no column 'sentence' \(columns: text, label\)",
    ),
    TaskCase(
        "empty label",
        {"t.csv": "sentence,label\na fine film,1\na dull one,\n"},
        CSV,
        r"t\.csv:3: the label is empty; every row needs a label: fix or remove the row",
    ),
    TaskCase(
        "label seen only in test (labels: auto)",
        {
            "t.jsonl": '{"text": "fine", "label": "pos"}\n{"text": "dull", "label": "neg"}\n',
            "u.jsonl": '{"text": "fine", "label": "pos"}\n\n{"text": "so-so", "label": "meh"}\n',
        },
        {**JSONL, "test": "u.jsonl"},
        r"u\.jsonl:3: label 'meh' never occurs in the train split \(finetune\.catalog\.t\.labels="
        r"auto takes the label set from train: \['neg', 'pos'\]\); if the task has it \(a rare "
        r"label a train sample can miss\), list the labels: 'finetune\.catalog\.t\.labels="
        r"\[meh, neg, pos\]' \(in a task file: labels: \[meh, neg, pos\]\); else fix the row",
    ),
    TaskCase(
        "CSV file read as GLUE TSV",
        {"t.tsv": "sentence,label\na fine film,1\n"},
        GLUE,
        r"t\.tsv:1 has no column 'sentence' \(columns: 'sentence,label'\); set the finetune\."
        r"catalog\.t column settings to one of them\. The first line is comma-separated: format: "
        r"csv reads it",
    ),
    TaskCase(
        "TSV file read as JSON lines",
        {"t.jsonl": "text\tlabel\na fine film\t1\n"},
        {**JSONL, "test": "t.jsonl"},
        r"t\.jsonl:1 is not valid JSON: .*\. The first line is tab-separated: format: glue reads",
    ),
    TaskCase(
        "token and tag lists of different lengths",
        {"n.jsonl": '{"tokens": ["fever", "and", "cough"], "tags": ["B-Disease", "O"]}\n'},
        {**CONLL, "format": "jsonl", "train": "n.jsonl", "test": "n.jsonl"},
        r"n\.jsonl:1: 'tokens' and 'tags' must be lists of equal length \(one IOB2 tag per token\)",
    ),
    TaskCase(
        "empty text",
        {"t.csv": 'sentence,label\na fine film,1\n"  ",0\n'},
        CSV,
        r"t\.csv:3: the text \(column 'sentence'\) is empty; a model cannot classify nothing: fix "
        r"or remove the row",
    ),
    TaskCase(
        "empty word in a token list",
        {"n.jsonl": '{"tokens": ["fever", ""], "tags": ["B-Disease", "O"]}\n'},
        {**CONLL, "format": "jsonl", "train": "n.jsonl", "test": "n.jsonl"},
        r"n\.jsonl:1: 'tokens' must be a non-empty list of non-empty words; fix or remove the "
        r"record",
    ),
    TaskCase(
        "IOB line with an empty token",
        {"n.tsv": "fever\tB-Disease\n\tO\n"},
        CONLL,
        r"n\.tsv:2 has an empty token before its tab; every line needs a word",
    ),
    TaskCase(
        "relation markers that never occur in the train file",
        {"t.jsonl": MARKED.replace("<<", "@").replace(">>", "$")},
        RELATION,
        r"finetune\.catalog\.t\.entity_markers: marker '<<' never occurs in the train file "
        r".*t\.jsonl; set finetune\.catalog\.t\.entity_markers to the markers the file uses",
    ),
    TaskCase(
        "relation negative label absent from train (labels: auto)",
        {"t.jsonl": MARKED},
        {**RELATION, "negative_label": "Other"},
        r"finetune\.catalog\.t\.negative_label='Other' is not among the labels \['CPR:4', "
        r"'false'\] \(found in the train split\)",
    ),
    TaskCase(
        "relation offsets outside the text",
        {"t.jsonl": '{"text": "aspirin inhibits cox", "h": [0, 7], "t": [17, 40], "label": "x"}\n'},
        {**RELATION, "entity_markers": None, "entity_offsets": ["h", "t"]},
        r"t\.jsonl:1: field 't' must hold an entity's character offsets \[start, end\) within "
        r"the text \(0 <= start < end <= 20\); got \[17, 40\]",
    ),
    TaskCase(
        "SemEval record without its ID and quoted sentence",
        {"s.txt": '1\t"The <e1>child</e1> in the <e2>cradle</e2>."\r\nOther\r\n\r\nThe child\r\n'},
        {
            **RELATION,
            "format": "semeval2010",
            "entity_markers": [["<e1>", "</e1>"], ["<e2>", "</e2>"]],
            "train": "s.txt",
            "test": "s.txt",
        },
        r"s\.txt:4: expected a record's first line, 'ID<TAB>\"sentence\"' \(format: semeval2010",
    ),
    TaskCase(
        "SQuAD answer text not at its answer_start",
        {"q.json": squad_json([("Rollo led the Normans.", "Rollo", 0), ("Rollo led.", "led", 1)])},
        SQUAD,
        r"q\.json: 1 answer\(s\) differ from context\[answer_start:answer_start\+len\(text\)\], "
        r"first: question q1 \(.*q\.json: \$\.data\[0\]\.paragraphs\[1\]\.qas\[0\]\); fix the "
        r"offsets",
    ),
    TaskCase(
        "SQuAD question marked is_impossible that lists answers",
        {"q.json": squad_qas(question("a", ROLLO), question("b", *[ROLLO] * 4, impossible=True))},
        SQUAD,
        r"q\.json: 1 question\(s\) are marked is_impossible: true but list answers, first: "
        r"question b \(.*q\.json: \$\.data\[0\]\.paragraphs\[0\]\.qas\[1\]\), with 4; SQuAD "
        r"2\.0 keeps an unanswerable question's spans under plausible_answers: empty its answers",
    ),
    TaskCase(
        "SQuAD train file with duplicate question ids",
        {"q.json": squad_qas(question("a", ROLLO), question("a", ROLLO), question("b", ROLLO))},
        SQUAD,
        r"q\.json: 1 question id\(s\) repeat, first: 'a' \(.*q\.json: \$\.data\[0\]\.paragraphs"
        r"\[0\]\.qas\[0\] and .*qas\[1\]\); each question needs its own id",
    ),
    TaskCase(
        "SQuAD test file where an unanswerable question reuses an answerable one's id",
        {
            "q.json": squad_qas(question("a", ROLLO), question("b", ROLLO)),
            "u.json": squad_qas(question("c", ROLLO), question("c", impossible=True)),
        },
        {**SQUAD, "test": "u.json"},
        r"u\.json: 1 question id\(s\) repeat, first: 'c' \(.*u\.json: .*qas\[0\] and .*qas\[1\]"
        r"\); each question needs its own id \(predictions and scores are keyed by it\)",
    ),
    TaskCase(
        "SQuAD answer of empty text on an answerable question",
        {"q.json": squad_qas(question("a", ROLLO), question("b", ("", 0)))},
        SQUAD,
        r"q\.json: 1 answer\(s\) have empty text, first: question b \(.*qas\[1\]\); an "
        r"unanswerable question has no answers \(answers: \[\], or is_impossible: true\)",
    ),
    TaskCase(
        "SQuAD question without its question field",
        {
            "q.json": json.dumps(
                {"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x"}]}]}]}
            )
        },
        SQUAD,
        r"q\.json: \$\.data\[0\]\.paragraphs\[0\]\.qas\[0\] has no field 'answers'; every "
        r"SQuAD entry needs it",
    ),
    TaskCase(
        "SQuAD file without data",
        {"q.json": json.dumps({"version": "v2.0"})},
        SQUAD,
        r"q\.json: \$ has no field 'data'",
    ),
    TaskCase(
        "SQuAD v1.1 file run with the v2.0 null-score threshold",
        {"q.json": squad_json([("Rollo led the Normans.", "Rollo", 0)] * 3)},
        {**SQUAD, "unanswerable": True},
        r"q\.json: no question is unanswerable \(SQuAD v1\.1: no is_impossible, no empty "
        r"answers\), but finetune\.catalog\.t\.unanswerable=true asks for the v2\.0 null-score "
        r"threshold; remove unanswerable \(or set it to null, or to drop for answerable-only "
        r"EM/F1\), or use a v2\.0 file",
    ),
    TaskCase(
        "SQuAD task that drops unanswerable questions, on a train split of nothing else",
        {
            "q.json": squad_paragraphs(
                [question("a", impossible=True)], [question("b", impossible=True)]
            )
        },
        {**SQUAD, "unanswerable": "drop"},
        r"task t: every question of its train split \(1\) is unanswerable, and finetune\.catalog"
        r"\.t\.unanswerable=drop leaves them all out; give the train split answerable questions, "
        r"or remove unanswerable",
    ),
    TaskCase(
        "squad-schema record whose answer is not at its answer_start",
        {
            "q.jsonl": json.dumps(
                {
                    "id": "r1",
                    "question": "who?",
                    "context": "Rollo led.",
                    "answers": {"text": ["led"], "answer_start": [0]},
                }
            )
        },
        {**SQUAD, "format": "jsonl", "train": "q.jsonl", "test": "q.jsonl"},
        r"q\.jsonl: 1 answer\(s\) differ from .*first: question r1 \(.*q\.jsonl:1\)",
    ),
    TaskCase(
        "squad-schema record without answers",
        {"q.jsonl": json.dumps({"id": "r1", "question": "who?", "context": "Rollo led."})},
        {**SQUAD, "format": "jsonl", "train": "q.jsonl", "test": "q.jsonl"},
        r"q\.jsonl:1 has no field 'answers'; every SQuAD entry needs it",
    ),
    TaskCase(
        "a single label in train (labels: auto)",
        {"t.jsonl": '{"text": "a fine film", "label": "pos"}\n'},
        {**JSONL, "test": "t.jsonl"},
        r"finetune\.catalog\.t\.labels must list at least 2 labels \(the label vocabulary\); "
        r"got \['pos'\] \(found in the train split\)",
    ),
    TaskCase(
        "a multi-label row's label not in the label set",
        {"m.jsonl": '{"text": "fever and cough", "labels": ["flu", "gout"]}\n'},
        {**MULTI_LABEL, "labels": ["flu", "cold"]},
        r"m\.jsonl:1: label 'gout' is not in finetune\.catalog\.t\.labels \['flu', 'cold'\]; "
        r"add it to the label list or fix the row",
    ),
    TaskCase(
        "a multi-label row whose labels are not a list",
        {"m.jsonl": '{"text": "fever", "labels": ["flu"]}\n{"text": "cough", "labels": "cold"}\n'},
        MULTI_LABEL,
        r"m\.jsonl:2: 'labels' must be a list of label names \(a multi_label task's labels, \[\] "
        r"for none\), not 'cold': fix the row",
    ),
    TaskCase(
        "a multi-label row with an empty label name",
        {"m.jsonl": '{"text": "fever", "labels": ["flu", ""]}\n'},
        {**MULTI_LABEL, "labels": ["flu", "cold"]},
        r"m\.jsonl:1: the label is empty; every row needs a label: fix or remove the row",
    ),
    TaskCase(
        "a multi-label row without a label where every example needs one",
        {"m.jsonl": '{"text": "fever", "labels": ["flu"]}\n{"text": "no code", "labels": []}\n'},
        {**MULTI_LABEL, "labels": ["flu", "cold"], "allow_empty_labels": False},
        r"m\.jsonl:2: the label list is empty, but finetune\.catalog\.t\.allow_empty_labels=false "
        r"asks every example for a label: fix or remove the row",
    ),
    TaskCase(
        "a multi-label csv row's label not in the label set",
        {"m.csv": "text,labels\nfever and cough,flu|gout\n"},
        MULTI_LABEL_CSV,
        r"m\.csv:2: label 'gout' is not in finetune\.catalog\.t\.labels \['flu', 'cold'\]; "
        r"add it to the label list or fix the row",
    ),
    TaskCase(
        "a multi-label csv cell with two separators in a row",
        {"m.csv": "text,labels\nfever,flu\ncough,flu||cold\n"},
        MULTI_LABEL_CSV,
        r"m\.csv:3: the label is empty; every row needs a label: fix or remove the row",
    ),
    TaskCase(
        "a multi-label csv row with an empty cell where every example needs a label",
        {"m.csv": "text,labels\nfever,flu\na quiet day,\n"},
        {**MULTI_LABEL_CSV, "allow_empty_labels": False},
        r"m\.csv:3: the label list is empty, but finetune\.catalog\.t\.allow_empty_labels=false",
    ),
]


@pytest.fixture(scope="module")
def pretrained(built: Any, tmp_path_factory: pytest.TempPathFactory) -> ArtifactRef:
    _, tokenizer, shards = built
    store = ArtifactStore(tmp_path_factory.mktemp("pretrained"))
    return pretrain(
        PretrainSettings(TINY, ObjectiveSettings(), ONE_STEP, 0), shards, tokenizer, store
    )


@pytest.mark.parametrize("case", TASK_CASES, ids=[case.name for case in TASK_CASES])
def test_bad_task_input(
    tmp_path: Path, built: Any, pretrained: ArtifactRef, case: TaskCase
) -> None:
    _, tokenizer, _ = built
    for name, content in case.files.items():
        write(tmp_path / name, content)
    settings = FinetuneSettings(
        tasks=["t"],
        catalog={"t": case.spec},
        data_dir=str(tmp_path),
        seeds=1,
        learning_rates=[1e-3],
    )
    store_root = tmp_path / "store"
    with pytest.raises((TaskInputError, ConfigError), match=case.message):
        finetune(settings, 0, ONE_STEP, pretrained, tokenizer, ArtifactStore(store_root))
    assert published(store_root) == []


def test_the_cli_checks_task_files_before_any_service_or_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text("text\tlabel\na fine film\t1\n")
    task = "{format:csv,labels:auto,text_column:text,train:t.csv,test:t.csv}"
    code = cli_main(
        ["finetune.tasks=[t]", f"+finetune.catalog.t={task}", f"finetune.data_dir={tmp_path}"]
    )
    assert code == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 't.csv'}:1 has no column 'text' (columns: 'text\\tlabel'); set the "
        "finetune.catalog.t column settings to one of them. The first line is tab-separated: "
        "format: glue reads TSV (tabs, no quoting).\n"
    )


def test_the_cli_refuses_a_squad_offset_mismatch_before_any_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "q.json").write_text(squad_json([("Rollo led.", "led", 0)]))
    task = "{format:squad,kind:question_answering,train:q.json,test:q.json}"
    code = cli_main(
        ["finetune.tasks=[q]", f"+finetune.catalog.q={task}", f"finetune.data_dir={tmp_path}"]
    )
    assert code == 2
    path = tmp_path / "q.json"
    assert capsys.readouterr().err == (
        f"error: {path}: 1 answer(s) differ from context[answer_start:answer_start+len(text)], "
        f"first: question q0 ({path}: $.data[0].paragraphs[0].qas[0]); fix the offsets (0-based "
        "characters into the context)\n"
    )


@pytest.mark.parametrize("case", TASK_CASES, ids=[case.name for case in TASK_CASES])
def test_bad_task_input_fails_the_up_front_check(tmp_path: Path, case: TaskCase) -> None:
    for name, content in case.files.items():
        write(tmp_path / name, content)
    settings = FinetuneSettings(tasks=["t"], catalog={"t": case.spec}, data_dir=str(tmp_path))
    with pytest.raises((TaskInputError, ConfigError), match=case.message.split(";")[0]):
        settings.check_task_files(0)


# Input that runs but not as it reads: (name, files, finetune.catalog.t, every warning line a
# check of the task files logs, in order). Each is said once, with its counts.
TASK_WARNING_CASES = [
    (
        "unanswerable questions in a task that drops them, a line per file",
        {
            "q.json": squad_paragraphs(
                [question("a", ROLLO), question("b", impossible=True)], [question("c", ROLLO)]
            ),
            "u.json": squad_paragraphs([question("d", ROLLO)], [question("e", impossible=True)]),
        },
        {**SQUAD, "test": "u.json", "unanswerable": "drop"},
        [
            "task t: {dir}/q.json holds 1 unanswerable question(s) of 3, left out of every split "
            "(finetune.catalog.t.unanswerable=drop)",
            "task t: {dir}/u.json holds 1 unanswerable question(s) of 2, left out of every split "
            "(finetune.catalog.t.unanswerable=drop)",
        ],
    ),
    (
        "one file as train and test in a task that drops its unanswerable questions",
        {"q.json": squad_paragraphs([question("a", ROLLO)], [question("b", impossible=True)])},
        {**SQUAD, "test": "q.json", "unanswerable": "drop", "validation": "q.json"},
        [
            "task t: {dir}/q.json holds 1 unanswerable question(s) of 2, left out of every split "
            "(finetune.catalog.t.unanswerable=drop)"
        ],
    ),
    (
        "a SQuAD v1.1 train file beside a v2.0 test file",
        {
            "q.json": squad_json(
                [("Rollo led the Normans.", "Rollo", 0), ("Rollo led.", "Rollo", 0)]
            ),
            "u.json": squad_paragraphs([question("d", ROLLO)], [question("e", impossible=True)]),
        },
        {**SQUAD, "test": "u.json"},
        [
            "task t: its train split holds no unanswerable question (SQuAD v1.1), so no run "
            "abstains, but 1 of 2 test questions are unanswerable; each scores 0: set "
            "finetune.catalog.t.unanswerable=drop to leave them out (answerable-only EM/F1), or "
            "train on a v2.0 file"
        ],
    ),
    (
        "a SQuAD v1.1 file in a task that drops unanswerable questions: nothing to say",
        {
            "q.json": squad_json(
                [("Rollo led the Normans.", "Rollo", 0), ("Rollo led.", "Rollo", 0)]
            )
        },
        {**SQUAD, "unanswerable": "drop"},
        [],
    ),
]


@pytest.mark.parametrize(
    ("files", "spec", "lines"),
    [case[1:] for case in TASK_WARNING_CASES],
    ids=[case[0] for case in TASK_WARNING_CASES],
)
def test_task_input_that_runs_otherwise_than_it_reads_is_said_once(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    files: dict[str, str],
    spec: dict[str, Any],
    lines: list[str],
) -> None:
    for name, content in files.items():
        write(tmp_path / name, content)
    settings = FinetuneSettings(tasks=["t"], catalog={"t": spec}, data_dir=str(tmp_path))
    with caplog.at_level("WARNING", logger="flows.downstream.tasks"):
        settings.check_task_files(0)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("flows.downstream")]
    assert said == [line.format(dir=tmp_path) for line in lines]


def test_a_task_input_warning_is_said_once_per_run_though_check_and_stage_both_read_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, files, spec, lines = TASK_WARNING_CASES[1]
    for name, content in files.items():
        write(tmp_path / name, content)
    settings = FinetuneSettings(tasks=["t"], catalog={"t": spec}, data_dir=str(tmp_path))
    with caplog.at_level("WARNING", logger="flows.downstream.tasks"):
        settings.check_task_files(0)  # resolve_run's up-front check
        settings.check_task_files(0)  # the finetune stage reads the same files
        new_run_warnings()  # a served worker's next run
        settings.check_task_files(0)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("flows.downstream")]
    assert said == [line.format(dir=tmp_path) for line in lines] * 2


def test_label_counts_above_a_train_pool_are_refused_before_any_service_or_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "".join(f'{{"text": "row {i}", "label": "{i % 2}"}}\n' for i in range(20))
    (tmp_path / "t.jsonl").write_text(rows)
    task = "{format:jsonl,labels:auto,text_column:text,train:t.jsonl,test:t.jsonl}"
    code = cli_main(
        [
            "finetune.tasks=[t]",
            f"+finetune.catalog.t={task}",
            f"finetune.data_dir={tmp_path}",
            "finetune.label_counts=[10,all,50]",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err == (
        "error: finetune.label_counts=[10, 'all', 50]: 50 labels is more than task t's train "
        "pool holds (18 examples, validation carved out); use counts up to 18, or all\n"
    )


# `pretrain.general_validation`: (name, files to write, the glob, the `error:` line's text).
GENERAL_TEXT_CASES = [
    (
        "glob matching nothing",
        {"other.md": TEXT.format(1)},
        "*.txt",
        "pretrain.general_validation: the glob '{d}/*.txt' matches no file",
    ),
    (
        "nothing left after cleaning",
        {"wiki.txt": "too short\n\nfar too short\n"},
        "*.txt",
        "pretrain.general_validation: '{d}/*.txt' holds no document after cleaning (2 shorter "
        "than corpus.min_words=5); point it at general-domain text or relax the corpus's "
        "cleaning rules",
    ),
    (
        "a directory without text",
        {"image.png": "not text"},
        "",
        "pretrain.general_validation: the directory {d} holds no ",
    ),
]


@pytest.mark.parametrize(
    ("files", "pattern", "message"),
    [case[1:] for case in GENERAL_TEXT_CASES],
    ids=[case[0] for case in GENERAL_TEXT_CASES],
)
def test_bad_general_validation_text_is_refused_before_any_service_or_stage(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    pattern: str,
    message: str,
) -> None:
    data = tmp_path / "general"
    data.mkdir()
    for name, content in files.items():
        write(data / name, content)
    glob = f"{data}/{pattern}" if pattern else str(data)
    code = cli_main([f"pretrain.general_validation=['{glob}']", f"paths.root={tmp_path / 'run'}"])
    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {message.format(d=data)}") and error.count("\n") == 1
    assert not (tmp_path / "run").exists()  # no service, no store, no stage


# `pretrain.general_validation` naming a file the run trains on: (name, the override that names
# it for training, the key the `error:` line names).
TRAINED_ON_CASES = [
    ("as the corpus", "corpus.paths=['{f}']", "corpus.paths"),
    ("as the replay", "corpus.replay={{paths:['{f}'],share:0.1}}", "corpus.replay.paths"),
]


@pytest.mark.parametrize(
    ("override", "key"),
    [case[1:] for case in TRAINED_ON_CASES],
    ids=[c[0] for c in TRAINED_ON_CASES],
)
def test_general_validation_text_the_run_trains_on_is_refused_before_any_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, key: str
) -> None:
    (tmp_path / "general").mkdir()
    wiki = tmp_path / "general" / "wiki.txt"
    domain = tmp_path / "domain.txt"
    for path in (wiki, domain):
        write(path, "\n\n".join(TEXT.format(index) for index in range(20)))
    overrides = [
        "corpus.kind=files",
        f"corpus.paths=['{domain}']",
        override.format(f=wiki),
        f"pretrain.general_validation=['{tmp_path}/general/*.txt']",  # matched by a glob
        f"paths.root={tmp_path / 'run'}",
    ]
    assert cli_main(overrides) == 2
    assert capsys.readouterr().err == (
        f"error: pretrain.general_validation and {key} both name {wiki.resolve()}: general text "
        f"the run trains on cannot measure what it forgot; hold it out of {key} or name other "
        "text\n"
    )
    assert not (tmp_path / "run").exists()  # no service, no store, no stage


RUN_FORM_CASES = [
    ({"until": "evaluate"}, "parameter until: Input should be 'tokenizer', 'shards', "),
    ({"experiment": "smok"}, "parameter experiment: Input should be 'none', 'albert', "),
    ({"max_steps": 0}, "parameter max_steps: Input should be greater than or equal to 1 (got 0)"),
    ({"tasks": ["sst3"]}, "parameter tasks.0: Input should be 'bc5cdr', "),
    ({"max_step": 5}, "parameter max_step: Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("parameters", "message"), RUN_FORM_CASES, ids=lambda c: str(c)[:20])
def test_bad_run_form_parameters(parameters: dict[str, Any], message: str) -> None:
    from flows.orchestration.flow_runs import read_form

    with pytest.raises(ConfigError) as error:
        read_form(**parameters)
    assert str(error.value).startswith(message), error.value


# `python -m flows.compare.arms`: (arguments after --task t, with {a} a run holding arm `student`
# at seeds 1 and 2, and {b} one holding `pretrained` at seeds 1 and 3), the one-line error.
ARM_PAIR_CASES = [
    (["{a}", "{b}:pretrained"], "error: '{a}': give a finetune artifact directory and an arm"),
    (["{a}/missing:student", "{b}:pretrained"], "error: {a}/missing/results.json: no such file"),
    (["{a}:teacher", "{b}:pretrained"], "error: {a}/results.json: task 't' has no arm 'teacher'"),
    (["{a}:student", "{b}:pretrained"], "error: {a}:student has seeds [1, 2], {b}:pretrained has"),
]


@pytest.mark.parametrize(("arguments", "message"), ARM_PAIR_CASES, ids=lambda c: str(c)[:30])
def test_bad_arm_pairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    from flows.compare.arms import main as compare_arms

    a = write_results(tmp_path / "a", {"student": {1: 0.6, 2: 0.7}})
    b = write_results(tmp_path / "b", {"pretrained": {1: 0.5, 3: 0.6}})
    filled = [argument.format(a=a, b=b) for argument in arguments]
    assert compare_arms(["--task", "t", *filled]) == 2
    assert capsys.readouterr().err.startswith(message.format(a=a, b=b))


@pytest.mark.parametrize("arguments", [["--experiment", "wiki"], ["--experiment"]])
def test_an_unknown_two_step_experiment_is_refused_before_any_run(
    capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    from flows.lift import main as domain_lift

    with pytest.raises(SystemExit) as refused:  # argparse's usage line, then its error line
        domain_lift(arguments)
    assert refused.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("python -m flows.lift: error: argument --experiment")
    assert "pubmed" in error or "expected one argument" in error


# `python -m flows.ui` (`make ui`): (arguments, the one-line error), before any server starts.
UI_CASES = [
    (["--prefect-port", "70000"], "error: --prefect-port=70000 is not a TCP port (1 to 65535)"),
    (["--prefect-port", "5999", "--mlflow-port", "5999"], "error: --prefect-port and --mlflow"),
]


@pytest.mark.parametrize(("arguments", "message"), UI_CASES, ids=lambda c: str(c)[:30])
def test_bad_ui_ports(
    capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    from flows.ui import main as ui_main

    assert ui_main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


# `cloze compare` (`python -m flows.compare`): (arguments, with {home} a read-only CLOZE_HOME,
# the one-line error), before any run is read.
COMPARE_CASES = [
    (
        [],
        r"error: {home}/compare is not writable \((Read-only file system|Permission denied)\): "
        r"compare writes its charts there \(--out, by default <paths\.root>/compare\); pass --out "
        r"with a writable folder\n",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), COMPARE_CASES, ids=lambda c: str(c)[:30])
def test_bad_compare_outputs(
    read_only_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    from flows.cloze import main as cloze_main

    monkeypatch.setenv("CLOZE_HOME", str(read_only_home))
    assert cloze_main(["compare", *arguments]) == 2
    assert re.fullmatch(
        message.format(home=re.escape(str(read_only_home))), capsys.readouterr().err
    )


# An override Hydra's grammar refuses, wherever the CLI parses overrides: (the override, the one
# `error:` line). Each entry point below gives the same line.
PARSE_CASES = [
    (
        "trainer.max_steps=[4",
        "error: cannot parse the override 'trainer.max_steps=[4' (key trainer.max_steps): no "
        "viable alternative at input '[4'. A value holding spaces, brackets, commas, quotes or "
        "non-ASCII characters needs Hydra's own quotes inside the shell's: "
        """'trainer.max_steps="[4"'\n""",
    ),
    (
        "pretrain.init_from=/data/my models/bért",
        "error: cannot parse the override 'pretrain.init_from=/data/my models/bért' (key "
        "pretrain.init_from): a character Hydra's grammar does not take unquoted ('é', column "
        "36). A value holding spaces, brackets, commas, quotes or non-ASCII characters needs "
        """Hydra's own quotes inside the shell's: 'pretrain.init_from="/data/my models/bért"'\n""",
    ),
]


def served_run(overrides: list[str]) -> int:
    """A served or deployed run's resolution of its form (flows/orchestration/flow_runs.py),
    ending as the flow body reports an expected error."""
    from flows.core.cli import fail
    from flows.orchestration.flow_runs import read_form
    from flows.resolve import resolve_run

    form = read_form(overrides=overrides)
    try:
        resolve_run(form.to_overrides(), form.until)
    except ConfigError as error:
        return fail(error)
    return 0


ENTRY_POINTS: dict[str, Callable[[list[str]], int]] = {
    "python -m flows": lambda overrides: cli_main(overrides),
    "python -m flows --multirun": lambda overrides: cli_main(["--multirun", *overrides]),
    "cloze run": lambda overrides: __import__("flows.cloze").cloze.main(["run", *overrides]),
    "served run": served_run,
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("override", "message"), PARSE_CASES, ids=lambda c: str(c)[:24])
def test_an_override_hydra_cannot_parse_is_one_error_line_with_the_quoting_hint(
    capsys: pytest.CaptureFixture[str], entry: str, override: str, message: str
) -> None:
    assert ENTRY_POINTS[entry]([override]) == 2
    assert capsys.readouterr().err == message


@pytest.fixture(scope="module")
def bert_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT checkpoint folder with its tokenizer, built offline."""
    folder = tmp_path_factory.mktemp("checkpoint") / "bert-tiny"
    return tiny_checkpoint("bert", folder, vocab_size=write_tokenizer(folder, "wordpiece"))


def pretrain_artifact(tmp_path: Path) -> Path:
    """A folder holding what a Cloze pretrain artifact holds: its own encoder config."""
    folder = tmp_path / "artifacts" / "pretrain" / "0123abcd"
    folder.mkdir(parents=True)
    (folder / "model_config.json").write_text(json.dumps(EncoderConfig(100, **TINY).to_dict()))
    return folder


# `cloze evaluate`: (overrides given the checkpoint folder and a scratch folder, exact message).
EVALUATE_CASES: list[tuple[str, Callable[[Path, Path], list[str]], str]] = [
    (
        "no checkpoint",
        lambda checkpoint, scratch: ["finetune=pydoc_topics"],
        "pretrain.init_from is not set: cloze evaluate scores a checkpoint as it is; name one, "
        "pretrain.init_from=<transformers checkpoint folder, Hub name or models:/NAME@ALIAS>",
    ),
    (
        "not a checkpoint",
        lambda checkpoint, scratch: [f"pretrain.init_from={scratch}"],
        "pretrain.init_from='{scratch}' is neither a transformers checkpoint (no config.json) "
        "nor a pretrain artifact (no model_config.json): give the folder save_pretrained or "
        "huggingface-cli download wrote, <artifact root>/pretrain/<key>, or a "
        "models:/<name>@<alias> URI",
    ),
    (
        "unknown task",
        lambda checkpoint, scratch: [f"pretrain.init_from={checkpoint}", "finetune.tasks=[nope]"],
        "finetune.tasks: 'nope' is not in finetune.catalog (known: {known}); add "
        "finetune.catalog.nope or pick a known task",
    ),
    (
        "extended vocabulary",
        lambda checkpoint, scratch: [
            f"pretrain.init_from={checkpoint}",
            "tokenizer.extend_vocabulary=10",  # shards.seq_len=128: evaluate builds no rows
        ],
        "tokenizer.extend_vocabulary=10 adds corpus words to the checkpoint's vocabulary, but "
        "cloze evaluate reads no corpus: the checkpoint is scored as it is; drop it",
    ),
]


@pytest.mark.parametrize("case", EVALUATE_CASES, ids=[case[0] for case in EVALUATE_CASES])
def test_cloze_evaluate_refuses_bad_input_before_any_stage(
    case: tuple[str, Callable[[Path, Path], list[str]], str],
    bert_tiny: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flows.cloze import main as cloze_main

    _, overrides, message = case
    scratch = tmp_path / "notes"
    scratch.mkdir()
    root = tmp_path / "run"
    code = cloze_main(["evaluate", f"paths.root={root}", *overrides(bert_tiny, scratch)])
    assert code == 2
    known = ", ".join(sorted(compose_config([])["finetune"]["catalog"]))
    assert capsys.readouterr().err == f"error: {message.format(scratch=scratch, known=known)}\n"
    assert not root.exists()  # no service started, no stage ran


def test_cloze_evaluate_scores_a_checkpoint_with_fewer_positions_than_shards_seq_len(
    bert_tiny: Path,
) -> None:
    """`shards.seq_len` (128) against the checkpoint's 64 positions matters to a continuation,
    which packs rows of that length, and to nothing `cloze evaluate` runs."""
    from flows.evaluate.cli import resolve
    from flows.resolve import resolve_run

    overrides = [f"pretrain.init_from={bert_tiny}", "finetune=pydoc_topics"]
    assert resolve(overrides).run.shards.seq_len == 128
    with pytest.raises(ConfigError, match=r"^shards\.seq_len=128 exceeds model\.max_position_"):
        resolve_run(overrides)


def test_cloze_evaluate_refuses_a_pretrain_artifact_naming_its_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.cloze import main as cloze_main

    artifact = pretrain_artifact(tmp_path)
    root = tmp_path / "run"
    assert cloze_main(["evaluate", f"paths.root={root}", f"pretrain.init_from={artifact}"]) == 2
    assert capsys.readouterr().err == (
        f"error: pretrain.init_from={artifact} is a Cloze pretrain artifact, not a transformers "
        f"checkpoint: evaluate its export, pretrain.init_from={artifact / 'huggingface'}\n"
    )
    assert not root.exists()
