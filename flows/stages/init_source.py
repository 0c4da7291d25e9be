"""Where `pretrain.init_from` (or `distill.teacher`) points: a `transformers` checkpoint folder, a
Hub name fetched into the local cache, a pretrain artifact of this store, or a registry URI.

Telling them apart needs only the file system; fetching a Hub name needs the Hub. What the
checkpoint then implies for the run's config, and the typed starting point, are
flows/stages/init_point.py's business.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from flows.core.settings import ConfigError
from lightning_modules.models.config import CONFIG_FILE

# Where a pretrain artifact keeps its `transformers` export (from_pretrained loads it).
HUGGINGFACE_DIR = "huggingface"
REGISTRY_PREFIX = "models:/"
HF_CONFIG_FILE = "config.json"
# A Hub repository id: `name` or `owner/name` (what `huggingface-cli download` takes).
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
# The files a checkpoint needs, fetched from the Hub; the rest (other frameworks' weights) is not.
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "pytorch_model*.bin"]
# A sentence-transformers folder lists its modules here; the encoder is the Transformer one.
SENTENCE_MODULES_FILE = "modules.json"
TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"


def is_registry_uri(init_from: str | None) -> bool:
    return init_from is not None and init_from.startswith(REGISTRY_PREFIX)


def is_checkpoint_folder(path: Path) -> bool:
    """A `transformers` folder (config.json), as opposed to a pretrain artifact of this store."""
    return (path / HF_CONFIG_FILE).is_file() and not (path / CONFIG_FILE).is_file()


def is_hub_name(value: str) -> bool:
    """Not a local path, but shaped like a Hub repository id (`name` or `owner/name`)."""
    return not Path(value).expanduser().exists() and bool(HUB_NAME.fullmatch(value))


def locate(value: str, key: str = "pretrain.init_from") -> Path:
    """The folder `value` names: as given, or a Hub name downloaded to the local cache."""
    path = Path(value).expanduser()
    if path.is_dir():
        return transformer_module(path.resolve(), key)
    if not is_hub_name(value):
        raise ConfigError(
            f"{key}={value!r} is not a folder: give a transformers checkpoint folder "
            "(config.json and weights), a pretrain artifact directory, a Hub name or a "
            "models:/<name>@<alias> URI"
        )
    return transformer_module(download(value, key), key)


def transformer_module(folder: Path, key: str) -> Path:
    """The `transformers` folder inside a sentence-transformers one (`modules.json`: a
    Transformer module, then pooling and normalisation, which pretraining does not use): the
    folder itself for all-MiniLM-L6-v2, `0_Transformer/` for older exports; any other folder as
    it is."""
    modules = folder / SENTENCE_MODULES_FILE
    if not modules.is_file():
        return folder
    try:
        listed = json.loads(modules.read_text())
        paths = [entry.get("path", "") for entry in listed if entry["type"] == TRANSFORMER_MODULE]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(f"{key}={folder}: {modules} is not readable ({error})") from None
    if len(paths) != 1:
        raise ConfigError(
            f"{key}={folder}: {modules} lists {len(paths)} {TRANSFORMER_MODULE} modules; Cloze "
            "continues a sentence-transformers model with exactly one"
        )
    module = (folder / paths[0]).resolve()
    if not module.is_dir():
        raise ConfigError(
            f"{key}={folder}: {modules} names the transformer module {paths[0]!r}, but {module} "
            "is not a folder; restore it (the encoder's config.json and weights live there)"
        )
    return module


def download(name: str, key: str) -> Path:
    """A Hub checkpoint's files; a machine without the Hub gets the command to run elsewhere."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, allow_patterns=HUB_FILES))
    except Exception as error:  # offline, unknown repository, gated model: all one fix
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(
            f"{key}={name!r} is no folder here and could not be fetched from the Hugging Face "
            f"Hub ({reason}); on a machine with internet run `huggingface-cli download {name} "
            f"--local-dir DIR`, copy DIR here and give {key}=DIR"
        ) from None
