"""`pretrain.init_from=<checkpoint>`: the checkpoint's shape overrules what only a from-scratch run
uses, and refuses what the user set against it; a folder that cannot be continued stops the run
in one `error:` line, exit 2, before any service or stage starts."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from flows.__main__ import main as cli_main
from flows.core.config import compose_config
from flows.plan import PipelinePlan, load_run_config
from flows.resolve import resolve_run
from flows.stages.init_point import CONTINUATION, HEAD_WARMUP_STEPS, adopt_init
from tests.checkpoint_tokenizers import write_tokenizer
from tests.checkpoints import tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "bert-tiny-medical"
    size = write_tokenizer(folder, "wordpiece")
    return tiny_checkpoint("bert", folder, vocab_size=size, scale=0.0)


def adopted(*overrides: str) -> tuple[dict, list[str]]:
    config, notes, _ = adopt_init(compose_config(list(overrides)))
    return config, notes


def test_the_shape_comes_from_the_checkpoint_and_the_preset_gives_way(checkpoint: Path) -> None:
    config, notes = adopted(f"pretrain.init_from={checkpoint}", "experiment=smoke")
    model = config["model"]
    assert (model["hidden_size"], model["num_layers"], model["num_heads"]) == (32, 2, 4)
    assert model["intermediate_size"] == 37 and model["name"] == checkpoint.name
    assert model["dropout"] == 0.1  # the checkpoint's (hidden_dropout_prob), not the preset's 0.0
    vocabulary = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    assert config["tokenizer"]["vocab_size"] == vocabulary  # what the run records is the truth
    (note,) = notes
    assert f"continuing the bert checkpoint {checkpoint}" in note
    assert "from-scratch values set aside: model.attention_dropout, model.dropout, " in note
    plan = PipelinePlan.from_run_config(load_run_config(config))
    assert plan.checkpoint == checkpoint and plan.init.kind == "checkpoint"
    assert plan.init.weights is None  # pretraining continues the import, once it exists


def test_rates_that_shape_no_weight_stay_the_users(checkpoint: Path) -> None:
    config, _ = adopted(f"pretrain.init_from={checkpoint}", "model.dropout=0.0")
    assert config["model"]["dropout"] == 0.0
    assert config["model"]["attention_dropout"] == 0.1


def test_an_explicit_value_equal_to_the_checkpoints_is_accepted(checkpoint: Path) -> None:
    config, _ = adopted(f"pretrain.init_from={checkpoint}", "model.hidden_size=32")
    assert config["model"]["hidden_size"] == 32


def test_adoption_is_idempotent(checkpoint: Path) -> None:
    """A config adopted by one entry point, resolved again where a flow run is started with it
    (flows/orchestration/handoff.py `resolved_here`), is the same config."""
    once, _ = adopted(f"pretrain.init_from={checkpoint}", "model.dropout=0.0")
    twice, _, _ = adopt_init(once)
    assert twice == once


def write_unsupported(folder: Path) -> Path:
    write_tokenizer(folder, "wordpiece")
    (folder / "config.json").write_text(json.dumps({"model_type": "deberta-v2"}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def without(checkpoint: Path, folder: Path, *names: str) -> Path:
    shutil.copytree(checkpoint, folder)
    for name in names:
        (folder / name).unlink()
    return folder


def with_file(checkpoint: Path, folder: Path, name: str, content: str) -> Path:
    shutil.copytree(checkpoint, folder)
    (folder / name).write_text(content)
    return folder


def edited(checkpoint: Path, folder: Path, **changes: object) -> Path:
    shutil.copytree(checkpoint, folder)
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, **changes}))
    return folder


def truncated(checkpoint: Path, folder: Path) -> Path:
    shutil.copytree(checkpoint, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    return folder


def with_rows(folder: Path, rows: int) -> Path:
    """A consistent checkpoint (config.json and weights agree) whose table has `rows` rows
    beside a tokenizer of about 400 tokens."""
    write_tokenizer(folder, "wordpiece")
    return tiny_checkpoint("bert", folder, vocab_size=rows, scale=0.0)


CASES = {
    "a config.json contradicting its weights": (
        lambda ckpt, tmp: [f"pretrain.init_from={edited(ckpt, tmp / 'wide', hidden_size=64)}"],
        r"^error: pretrain\.init_from=.*wide: .*wide/config\.json contradicts .*wide/model\."
        r"safetensors: bert\.embeddings\.word_embeddings\.weight is \[\d+, 32\], not \[\d+, 64\]",
    ),
    "truncated weights": (
        lambda ckpt, tmp: [f"pretrain.init_from={truncated(ckpt, tmp / 'cut')}"],
        r"^error: pretrain\.init_from=.*cut: .*cut/model\.safetensors is truncated: its header "
        r"lists \d+ bytes, the file holds \d+; download it again",
    ),
    "a tokenizer larger than the embedding table": (
        lambda ckpt, tmp: [f"pretrain.init_from={with_rows(tmp / 'narrow', 120)}"],
        r"^error: pretrain\.init_from=.*narrow: its tokenizer has \d+ tokens but .*narrow/"
        r"config\.json vocab_size=120 embedding rows",
    ),
    "a vocabulary too small to train": (
        lambda ckpt, tmp: [f"pretrain.init_from={with_rows(tmp / 'toy', 99)}"],
        r"^error: pretrain\.init_from=.*toy: .*toy/config\.json has vocab_size=99, too small to "
        r"train \(Cloze needs at least 100 tokens\)",
    ),
    "a teacher's fault, under the teacher's key": (
        lambda ckpt, tmp: ["distill=default", f"distill.teacher={truncated(ckpt, tmp / 'cut')}"],
        r"^error: distill\.teacher=.*cut: .*cut/model\.safetensors is truncated",
    ),
    "a vocabulary extension without a checkpoint": (
        lambda ckpt, tmp: ["tokenizer.extend_vocabulary=100"],
        r"^error: tokenizer\.extend_vocabulary=100 extends the vocabulary of a checkpoint, but "
        r"pretrain\.init_from names none",
    ),
    "a sentence-transformers folder without one transformer module": (
        lambda ckpt, tmp: [f"pretrain.init_from={sentence_folder(ckpt, tmp / 'st', modules=0)}"],
        r"^error: pretrain\.init_from=.*st: .*modules\.json lists 0 "
        r"sentence_transformers\.models\.Transformer modules",
    ),
    "a head warm-up without a checkpoint": (
        lambda ckpt, tmp: ["pretrain.head_warmup_steps=2"],
        r"^error: pretrain\.head_warmup_steps=2 trains a checkpoint's MLM head alone first, but "
        r"pretrain\.init_from names none: set pretrain\.init_from=<transformers checkpoint "
        r"folder>, or drop it",
    ),
    "a tokenizer.json that is not JSON": (
        lambda ckpt, tmp: [
            f"pretrain.init_from={with_file(ckpt, tmp / 'bad-tok', 'tokenizer.json', '[oops')}"
        ],
        r"^error: pretrain\.init_from=.*bad-tok: .*bad-tok/tokenizer\.json is not a readable "
        r"tokenizer file \(.* line 1 column \d+\); download it again",
    ),
    "a sentence-transformers folder whose transformer module is missing": (
        lambda ckpt, tmp: [f"pretrain.init_from={sentence_folder(ckpt, tmp / 'st', gone=True)}"],
        r"^error: pretrain\.init_from=.*st: .*st/modules\.json names the transformer module "
        r"'0_Transformer', but .*st/0_Transformer is not a folder; restore it",
    ),
    "a shape key set against the checkpoint": (
        lambda ckpt, tmp: [f"pretrain.init_from={ckpt}", "model.hidden_size=256"],
        r"is a bert checkpoint whose shape and vocabulary are fixed, but model\.hidden_size=256 "
        r"\(the checkpoint's 32\) was set explicitly: drop the override",
    ),
    "a model preset picked against the checkpoint": (
        lambda ckpt, tmp: [f"pretrain.init_from={ckpt}", "model=bert-mini"],
        r"model\.hidden_size=256 \(the checkpoint's 32\); model\.num_layers=4 \(the checkpoint's "
        r"2\)",
    ),
    "a vocabulary size set against the checkpoint": (
        lambda ckpt, tmp: [f"pretrain.init_from={ckpt}", "tokenizer.vocab_size=8000"],
        r"tokenizer\.vocab_size=8000 \(the checkpoint's \d+\) was set explicitly",
    ),
    "a second tokenizer": (
        lambda ckpt, tmp: [f"pretrain.init_from={ckpt}", f"tokenizer.from_artifact={tmp}"],
        r"tokenizer\.from_artifact=.* \(the checkpoint brings its own tokenizer\)",
    ),
    "an unsupported model type": (
        lambda ckpt, tmp: [f"pretrain.init_from={write_unsupported(tmp / 'deberta')}"],
        r"model_type='deberta-v2' is not supported.*bert, roberta",
    ),
    "no weights": (
        lambda ckpt, tmp: [
            f"pretrain.init_from={without(ckpt, tmp / 'no-weights', 'model.safetensors')}"
        ],
        r"no-weights.*(model\.safetensors|weights)",
    ),
    "no tokenizer": (
        lambda ckpt, tmp: [
            "pretrain.init_from="
            + str(without(ckpt, tmp / "no-tok", "vocab.txt", "tokenizer_config.json"))
        ],
        r"no-tok holds no tokenizer: it needs tokenizer\.json, or vocab\.txt",
    ),
    "a folder that is neither": (
        lambda ckpt, tmp: [f"pretrain.init_from={tmp}"],
        r"is neither a transformers checkpoint \(no config\.json\) nor a pretrain artifact",
    ),
    "a Hub name, offline": (
        lambda ckpt, tmp: ["pretrain.init_from=no-such-org/no-such-model"],
        r"pretrain\.init_from='no-such-org/no-such-model' is no folder here and could not be "
        r"fetched from the Hugging Face Hub .*huggingface-cli download no-such-org/no-such-model",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_checkpoint_that_cannot_be_continued_is_one_error_line(
    case: str,
    checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the Hub case must fail fast, never download
    arguments, message = CASES[case]
    overrides = arguments(checkpoint, tmp_path)
    capsys.readouterr()  # what building the broken folder printed (transformers' progress bars)
    assert cli_main([*overrides, f"paths.root={tmp_path / 'home'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and len(error.splitlines()) == 1, error
    assert re.search(message, error), error
    assert not (tmp_path / "home").exists()  # nothing started, nothing written
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_a_registered_checkpoint_without_a_store_artifact_is_downloaded_and_adopted(
    checkpoint: Path, tmp_path: Path
) -> None:
    """A version someone registered by hand (or another machine's, whose store is not here)
    holds a transformers folder: it is downloaded under the run root and continued."""
    from flows.tracking.runs import Tracker

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "cloze", tmp_path / "mlartifacts")
    tracker.downloads = tmp_path / "downloads"
    run = tracker.client.create_run(tracker.experiment_id)
    tracker.client.log_artifacts(run.info.run_id, str(checkpoint), "model")
    tracker.client.create_registered_model("foreign")
    source = f"{run.info.artifact_uri}/model"
    version = tracker.client.create_model_version("foreign", source, run.info.run_id)
    tracker.client.set_registered_model_alias("foreign", "base", version.version)
    # Where the run enters, the URI waits for the tracker; the pipeline adopts it with one.
    overrides = ["pretrain.init_from=models:/foreign@base", "shards.seq_len=64"]  # its range
    waiting = resolve_run(overrides, until=None)
    assert waiting.registry_uri == "models:/foreign@base" and waiting.notes == ()
    resolved = waiting.from_registry(tracker.resolve_model_uri)
    folder = Path(resolved.run.pretrain.init_from or "")
    assert folder.is_relative_to(tmp_path / "downloads") and (folder / "config.json").is_file()
    assert resolved.run.model.hidden_size == 32
    assert "continuing the bert checkpoint" in resolved.notes[0]
    again = waiting.from_registry(tracker.resolve_model_uri)
    assert again.run.pretrain.init_from == str(folder)  # one download serves every run


def test_a_cloze_export_is_named_by_its_family_and_artifact_key(
    checkpoint: Path, tmp_path: Path
) -> None:
    """Run names start with the model: `huggingface` (every export's folder) would tell none
    apart, so an export continued as a checkpoint is named by the artifact it came from."""
    export = tmp_path / "pretrain" / "20c58f0dfabae6fc5a92" / "huggingface"
    shutil.copytree(checkpoint, export)
    config, _ = adopted(f"pretrain.init_from={export}")
    assert config["model"]["name"] == "bert-20c58f0d"
    config, _ = adopted(f"pretrain.init_from={checkpoint}")
    assert config["model"]["name"] == checkpoint.name


def sentence_folder(checkpoint: Path, folder: Path, modules: int = 1, gone: bool = False) -> Path:
    """A sentence-transformers export: modules.json, the transformer in `0_Transformer/` (left
    out if `gone`), then pooling (no weights of its own)."""
    if not gone:
        shutil.copytree(checkpoint, folder / "0_Transformer")
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_tokens": True})
    )
    listed = [
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": TRANSFORMER},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    (folder / "modules.json").write_text(json.dumps(listed[1 - modules :]))
    return folder


TRANSFORMER = "sentence_transformers.models.Transformer"


def test_a_sentence_transformers_folder_continues_its_transformer_module(
    checkpoint: Path, tmp_path: Path
) -> None:
    folder = sentence_folder(checkpoint, tmp_path / "st")
    config, notes = adopted(f"pretrain.init_from={folder}")
    assert config["pretrain"]["init_from"] == str(folder / "0_Transformer")
    assert config["model"]["hidden_size"] == 32 and "continuing the bert checkpoint" in notes[0]


def test_cfg_prints_the_shape_that_will_run_and_refuses_one_that_would_not(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["--cfg", f"pretrain.init_from={checkpoint}", "shards.seq_len=64"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"# pretrain.init_from: continuing the bert checkpoint {checkpoint}")
    assert "  hidden_size: 32\n" in printed and "  num_layers: 2\n" in printed
    # the default rows are longer than the checkpoint's 64 positions: the run would be refused
    assert cli_main(["--cfg", f"pretrain.init_from={checkpoint}"]) == 2
    assert capsys.readouterr().err.startswith("error: shards.seq_len=128 exceeds model.max_pos")


def test_a_checkpoint_continues_on_the_continuation_recipe(checkpoint: Path) -> None:
    config, (note,) = adopted(f"pretrain.init_from={checkpoint}", "experiment=smoke")
    trainer = config["trainer"]
    assert {key: trainer[key] for key in CONTINUATION} == CONTINUATION
    assert "continuation recipe: trainer.learning_rate=2e-05, trainer.warmup_ratio=0.06" in note
    assert config["pretrain"]["head_warmup_steps"] == 0  # BertForMaskedLM: its head is trained


def test_an_explicit_trainer_value_wins_and_the_note_says_so(checkpoint: Path) -> None:
    config, (note,) = adopted(f"pretrain.init_from={checkpoint}", "trainer.learning_rate=3e-5")
    assert config["trainer"]["learning_rate"] == 3e-5
    assert config["trainer"]["beta2"] == CONTINUATION["beta2"]
    assert "(yours kept: trainer.learning_rate)" in note


def test_a_headless_checkpoint_warms_its_new_head_up_first(tmp_path: Path) -> None:
    folder = tmp_path / "headless"
    tiny_checkpoint(
        "bert", folder, vocab_size=write_tokenizer(folder, "wordpiece"), architecture="BertModel"
    )
    config, (note,) = adopted(f"pretrain.init_from={folder}", "shards.seq_len=64")
    assert config["pretrain"]["head_warmup_steps"] == HEAD_WARMUP_STEPS
    assert f"pretrain.head_warmup_steps={HEAD_WARMUP_STEPS} steps, encoder frozen" in note
    short, _ = adopted(f"pretrain.init_from={folder}", "trainer.max_steps=20")
    assert short["pretrain"]["head_warmup_steps"] == 10  # a short run keeps half for the model
    off, _ = adopted(f"pretrain.init_from={folder}", "pretrain.head_warmup_steps=0")
    assert off["pretrain"]["head_warmup_steps"] == 0
    plan = PipelinePlan.from_run_config(load_run_config(config))
    assert plan.pretrain.head_warmup_steps == HEAD_WARMUP_STEPS


def test_a_checkpoint_with_its_mlm_head_warms_that_head_up_when_asked(checkpoint: Path) -> None:
    """BertForMaskedLM has its head: an explicit warm-up trains that head alone, and the note
    says so (never "no MLM head", which the checkpoint stage would contradict)."""
    config, (note,) = adopted(f"pretrain.init_from={checkpoint}", "pretrain.head_warmup_steps=2")
    assert config["pretrain"]["head_warmup_steps"] == 2
    assert "; its MLM head trains alone first for pretrain.head_warmup_steps=2 steps" in note
    assert "no MLM head" not in note
