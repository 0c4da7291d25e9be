"""`python -m flows [--cfg] [hydra overrides...]`: compose the config and run the pipeline flow."""

from __future__ import annotations

import logging
import sys
import warnings

from flows.config import compose_config, to_yaml
from flows.corpora.formats import CorpusInputError
from flows.environment import configure_services
from flows.settings import ConfigError

USAGE = """usage: python -m flows [--cfg] [OVERRIDE ...]

Runs the Cloze pretraining pipeline (tokenizer -> shards -> pretrain -> finetune).
OVERRIDEs are Hydra overrides, e.g. model=bert-mini trainer.max_steps=500 experiment=smoke.
  --cfg   print the composed config and exit
"""


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(USAGE)
        return 0
    overrides = [arg for arg in argv if arg != "--cfg"]
    try:
        config = compose_config(overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if "--cfg" in argv:
        print(to_yaml(config))
        return 0
    configure_services(config)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for name in ("flows", "lightning_modules", "cloze"):
        logging.getLogger(name).setLevel(logging.INFO)
    # Lightning's hardware banner and tips repeat for every Trainer; our own lines say more.
    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")

    from flows.pipeline import (
        pretraining_pipeline,
    )  # after configure_services: Prefect reads env on import

    try:
        pretraining_pipeline(config)
    except (ConfigError, CorpusInputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
