"""Baselines without an encoder: what the lift has to beat to be worth a GPU.

- `majority`: every test example gets the most frequent train label.
- `tfidf_logreg`: TF-IDF over word uni- and bigrams (one bag over both sentences of a pair, a
  relation's text with its entity markers),
  logistic regression with its C chosen on the validation split (0.01 to 1000: a weak C grid
  would flatter the encoder).
- `seen_entities`: tags every string that was an entity in train, with its most frequent type,
  longest match first. A tagger that only memorises names scores this; the encoder must beat it.

Question answering's (`no_answer`, `lexical_overlap`) are in qa_baselines.py.

Each is fitted on the same labelled examples the arms train on (one fit per seed's sample in
limited-label mode) and scored with the arms' metric code; test never steers a choice.
"""

from __future__ import annotations

import copy
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from flows.downstream.finetuning.qa_baselines import fit_qa_baseline
from flows.downstream.tasks.readers import TaggedSentence, TextExample
from flows.downstream.tasks.scores import score
from flows.downstream.tasks.spec import TaskSpec
from flows.downstream.tasks.squad import QAExample
from lightning_modules.label_metrics import entity_spans

C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)


@dataclass
class BaselineResult:
    """One baseline over every fit (one per distinct train sample): test scores and choices."""

    name: str
    test: list[dict[str, float]] = field(default_factory=list)
    choices: list[dict[str, float]] = field(default_factory=list)  # e.g. {"C": 1.0}


def majority(train: list[TextExample], evaluate: list[TextExample]) -> list[int]:
    counts = Counter(example.label for example in train)
    most = max(sorted(counts), key=lambda label: counts[label])  # the lowest id of equals
    return [most] * len(evaluate)


def joined(example: TextExample) -> str:
    return example.text if example.pair is None else f"{example.text} {example.pair}"


def tfidf_logreg(
    spec: TaskSpec,
    labels: list[str],
    train: list[TextExample],
    validation: list[TextExample],
    test: list[TextExample],
) -> tuple[list[int], dict[str, float]]:
    """Test predictions of the C (from `C_GRID`) that scores best on validation."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    features = vectorizer.fit_transform([joined(example) for example in train])
    targets = [example.label for example in train]
    if len(set(targets)) < 2:  # logistic regression needs two classes; so does any learner
        return majority(train, test), {"C": 0.0}
    held_out = vectorizer.transform([joined(example) for example in validation])
    gold = [example.label for example in validation]
    # Ascending C with warm starts: each fit starts from the last optimum of the same convex
    # problem, which halves the solver's iterations.
    model = LogisticRegression(max_iter=1000, warm_start=True)
    best: tuple[float, float, Any] | None = None
    for c in C_GRID:
        model.set_params(C=c).fit(features, targets)
        predicted = model.predict(held_out).tolist()
        scores = score(spec.kind, gold, predicted, labels, spec.negative_label)
        validation_score = scores[spec.metric]
        if best is None or validation_score > best[0]:
            best = (validation_score, c, copy.deepcopy(model))
    assert best is not None
    predictions = best[2].predict(vectorizer.transform([joined(e) for e in test])).tolist()
    return predictions, {"C": best[1]}


def entity_lexicon(train: list[TaggedSentence], labels: list[str]) -> dict[tuple[str, ...], str]:
    """Each entity string of train and the type it had most often."""
    types: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    for sentence in train:
        for kind, start, end in entity_spans([labels[tag] for tag in sentence.tags]):
            types[sentence.tokens[start:end]][kind] += 1
    return {words: counts.most_common(1)[0][0] for words, counts in types.items()}


def seen_entities(
    labels: list[str], train: list[TaggedSentence], test: list[TaggedSentence]
) -> list[list[int]]:
    lexicon = entity_lexicon(train, labels)
    longest = max((len(words) for words in lexicon), default=0)
    tag_id = {tag: position for position, tag in enumerate(labels)}
    predictions = []
    for sentence in test:
        tags = [tag_id["O"]] * len(sentence.tokens)
        position = 0
        while position < len(tags):
            for length in range(min(longest, len(tags) - position), 0, -1):
                kind = lexicon.get(sentence.tokens[position : position + length])
                if kind is not None and f"B-{kind}" in tag_id:
                    tags[position] = tag_id[f"B-{kind}"]
                    for inside in range(position + 1, position + length):
                        tags[inside] = tag_id.get(f"I-{kind}", tag_id["O"])
                    position += length - 1
                    break
            position += 1
        predictions.append(tags)
    return predictions


def fit_baseline(
    name: str, spec: TaskSpec, labels: list[str], splits: dict[str, list[Any]]
) -> tuple[Any, dict[str, float]]:
    """Test predictions of one baseline fitted on `splits["train"]`, and what it chose."""
    if name == "majority":
        return majority(splits["train"], splits["test"]), {}
    if name == "tfidf_logreg":
        return tfidf_logreg(spec, labels, splits["train"], splits["validation"], splits["test"])
    if name == "seen_entities":
        return seen_entities(labels, splits["train"], splits["test"]), {}
    if name in ("no_answer", "lexical_overlap"):
        return fit_qa_baseline(name, spec.metric, splits)
    raise ValueError(f"unknown baseline {name!r}")  # TaskSpec validates names first


def gold_of(example: Any) -> Any:
    """What an example is scored against: tags, reference answers, or a label id."""
    if isinstance(example, TaggedSentence):
        return list(example.tags)
    return list(example.answers) if isinstance(example, QAExample) else example.label


def evaluate_baselines(
    spec: TaskSpec,
    names: tuple[str, ...],
    labels: list[str],
    splits: dict[str, list[Any]],
    train_samples: list[list[Any]],
) -> dict[str, BaselineResult]:
    """Every baseline of the task, fitted once per train sample (the arms' labelled examples)."""
    test_gold: list[Any] = [gold_of(example) for example in splits["test"]]
    results = {name: BaselineResult(name) for name in names}
    for train in train_samples:
        for name, result in results.items():
            predictions, choices = fit_baseline(name, spec, labels, {**splits, "train": train})
            scores = score(spec.kind, test_gold, predictions, labels, spec.negative_label)
            result.test.append(scores)
            result.choices.append(choices)
    return results
