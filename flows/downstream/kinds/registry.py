"""The task kinds by their `kind:` name: the one place a kind's name picks its code. A new kind is
its module under flows/downstream/kinds/, its row here, and its row of facts for config validation
and the readers (facts.py)."""

from __future__ import annotations

from flows.downstream.kinds.base import TaskKind
from flows.downstream.kinds.classification import CLASSIFICATION
from flows.downstream.kinds.multi_label import MULTI_LABEL
from flows.downstream.kinds.question_answering import QUESTION_ANSWERING
from flows.downstream.kinds.relation import RELATION
from flows.downstream.kinds.token_classification import TOKEN_CLASSIFICATION

TASK_KINDS: dict[str, TaskKind] = {
    kind.name: kind
    for kind in (CLASSIFICATION, TOKEN_CLASSIFICATION, RELATION, QUESTION_ANSWERING, MULTI_LABEL)
}


def kind_of(name: str) -> TaskKind:
    """The kind a task's `kind:` names (TaskSpec validated it against facts.py's)."""
    return TASK_KINDS[name]
