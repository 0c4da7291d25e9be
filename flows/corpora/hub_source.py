"""A Hugging Face `datasets` corpus: a hub name (needs a hub) or a `save_to_disk` folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flows.corpora.formats import CorpusInputError


class HubSource:
    def __init__(self, name: str, config_name: str | None, split: str, text_field: str) -> None:
        self.name = name
        self.config_name = config_name
        self.split = split
        self.text_field = text_field
        self._dataset: Any = None

    def _load(self) -> Any:
        if self._dataset is None:
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
            self._dataset = dataset
        return self._dataset

    def fingerprint(self) -> dict[str, Any]:
        # datasets' own fingerprint changes whenever the underlying data or processing changes.
        return {
            "kind": "huggingface",
            "name": self.name,
            "config": self.config_name,
            "split": self.split,
            "text_field": self.text_field,
            "dataset": self._load()._fingerprint,
        }

    def texts(self) -> Iterator[str]:
        for batch in self._load().select_columns([self.text_field]).iter(batch_size=1000):
            yield from (str(text) for text in batch[self.text_field] if text)
