"""Pure-torch networks: no Lightning, Hydra, Prefect or MLflow imports allowed here."""

from lightning_modules.models.electra import ElectraConfig, ElectraForPreTraining
from lightning_modules.models.encoder import BertEncoder, EncoderConfig
from lightning_modules.models.heads import BertForMaskedLM, BertForSequenceClassification

__all__ = [
    "BertEncoder",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "ElectraConfig",
    "ElectraForPreTraining",
    "EncoderConfig",
]
