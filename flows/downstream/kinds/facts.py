"""What each task kind is, as data: the facts config validation (flows/downstream/tasks/spec.py)
and the record readers need before any kind's code is loaded.

A leaf module, importing nothing of the project: TaskSpec and the readers are imported by the
kinds' modules (base.py and one per kind), so they cannot ask the registry (registry.py) without
an import circle, and validating a config must not load the kinds' heavier dependencies. What a
kind does (encode, score, predict) stays behind the TaskKind protocol; what a config or a record
of the kind must look like is here, so nothing outside kinds/ compares a kind's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# What one example of a kind is, as the readers build it from a record (jsonl, parquet) or a hub
# row: a labelled text (or a pair), a tagged sentence, a text with a label set, or a question over
# a context (flows/downstream/tasks/readers.py, squad.py).
Example = Literal["text", "tagged", "label_set", "question"]


@dataclass(frozen=True)
class KindFacts:
    """One kind's rules for its config and records."""

    # Every metric the kind scores; the first is the task's default where accuracy is not one.
    metrics: tuple[str, ...]
    # What a task of the kind is compared against besides random init
    # (flows/downstream/finetuning/baselines.py).
    baselines: tuple[str, ...]
    example: Example = "text"
    # The task lists labels (a question's answers are spans of its context: no label set).
    has_labels: bool = True
    # Its record fields where a records format (jsonl, parquet) names none.
    record_columns: dict[str, str] = field(default_factory=dict)
    # A label the set must hold (IOB2 tagging's outside tag).
    required_label: str | None = None
    # Its entities are marked (`entity_markers`, `entity_offsets`, `negative_label` apply).
    marks_entities: bool = False
    # Its examples are single texts that may be spans of longer ones (`drop_contained_rows`).
    single_texts: bool = False
    # Answer spans decoded after prediction: its own key fields (spec.py `QA_FIELDS`) and
    # decoding version, and a missing test split is carved like validation.
    decodes_spans: bool = False
    # The version of what the kind's code makes of its tasks, in their keys only when set (spec.py
    # `key_record`): bumped when the kind's code changes its tasks' results, so stored ones are
    # not reused; the kinds without one keep the keys they always had.
    results_version: int | None = None


KIND_FACTS = {
    "classification": KindFacts(
        ("accuracy", "macro_f1", "mcc", "f1"), ("majority", "tfidf_logreg"), single_texts=True
    ),
    "token_classification": KindFacts(
        ("entity_f1", "entity_precision", "entity_recall"),
        ("seen_entities",),
        example="tagged",
        record_columns={"text_column": "tokens", "label_column": "tags"},
        required_label="O",
    ),
    # Relation F1s exclude `negative_label` and score direction (lightning_modules/metrics.py);
    # TF-IDF reads the text with its markers.
    "relation": KindFacts(
        ("macro_f1", "micro_f1", "accuracy"), ("majority", "tfidf_logreg"), marks_entities=True
    ),
    # The official SQuAD evaluation's metrics (lightning_modules/squad_metrics.py).
    "question_answering": KindFacts(
        ("f1", "exact_match"),
        ("no_answer", "lexical_overlap"),
        example="question",
        has_labels=False,
        decodes_spans=True,
    ),
    # F1 over every label's hits (micro) or the mean of each label's F1 (macro); the majority
    # baseline gives each label most train examples carry: mostly the empty set; tfidf_logreg is
    # one-vs-rest. Results version (none before 2): 2 cuts each label at its threshold chosen on
    # validation, not at 0.5, and adds tfidf_logreg.
    "multi_label": KindFacts(
        ("micro_f1", "macro_f1"),
        ("majority", "tfidf_logreg"),
        example="label_set",
        results_version=2,
    ),
}
