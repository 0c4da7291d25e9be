"""A Hugging Face `datasets` corpus: a hub name (needs a hub) or a `save_to_disk` folder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.corpora.formats import CorpusInputError
from flows.corpora.stats import CorpusStats


@dataclass(frozen=True)
class HubUnit:
    """The whole dataset as one unit of work; it is loaded where the unit runs."""

    name: str
    config_name: str | None
    split: str
    text_field: str

    def load(self) -> Any:
        import datasets

        if Path(self.name).is_dir():
            loaded = datasets.load_from_disk(self.name)
            dataset = loaded[self.split] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            dataset = datasets.load_dataset(self.name, self.config_name, split=self.split)
        if self.text_field not in dataset.column_names:
            raise CorpusInputError(
                f"dataset {self.name!r} has no column {self.text_field!r} (columns: "
                f"{', '.join(dataset.column_names)}); set corpus.text_field"
            )
        return dataset

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        for batch in self.load().select_columns([self.text_field]).iter(batch_size=1000):
            yield from (str(text) for text in batch[self.text_field] if text)


class HubSource:
    def __init__(self, name: str, config_name: str | None, split: str, text_field: str) -> None:
        self.unit = HubUnit(name, config_name, split, text_field)
        self._dataset: Any = None

    def _load(self) -> Any:
        if self._dataset is None:
            self._dataset = self.unit.load()
        return self._dataset

    def fingerprint(self) -> dict[str, Any]:
        # datasets' own fingerprint changes whenever the underlying data or processing changes.
        return {
            "kind": "huggingface",
            "name": self.unit.name,
            "config": self.unit.config_name,
            "split": self.unit.split,
            "text_field": self.unit.text_field,
            "dataset": self._load()._fingerprint,
        }

    def units(self) -> list[HubUnit]:
        return [self.unit]
