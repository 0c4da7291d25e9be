"""The SQuAD metrics reproduce the official evaluate-v2.0.py on crafted cases.

Each expected value is worked out by the script's rules (normalise: lowercase, drop punctuation,
drop a/an/the, collapse whitespace; max over references; no answer = the empty string).
"""

from __future__ import annotations

import pytest

from lightning_modules.squad_metrics import example_scores, normalize_answer, squad_scores


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Norman dynasty.", "norman dynasty"),
        ("  An   apple, a pear ", "apple pear"),
        ("theory", "theory"),  # 'the' inside a word stays
        ("Rollo's (911)", "rollos 911"),
    ],
)
def test_normalisation_follows_the_script(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


@pytest.mark.parametrize(
    ("answers", "predicted", "expected"),
    [
        # articles and punctuation removed: the same answer
        (["The Norman dynasty"], "norman dynasty.", (1.0, 1.0)),
        (["an apple"], "Apple", (1.0, 1.0)),
        # 'in 10th century' vs '10th century': 2 shared of 3 gold, 2 predicted -> F1 0.8
        (["in 10th century"], "the 10th century", (0.0, 0.8)),
        # several references: the best of each measure; F1 against the second: 3 of 4, p 1 -> 6/7
        (["France", "Normandy region of France"], "region of France", (0.0, 6 / 7)),
        (["Denmark, Iceland and Norway", "Denmark"], "denmark", (1.0, 1.0)),
        # no-answer: the empty string is the only reference
        ([], "", (1.0, 1.0)),
        ([], "France", (0.0, 0.0)),
        (["France"], "", (0.0, 0.0)),
        # a word repeated counts once per occurrence in both
        (["the the cat cat"], "cat", (0.0, 2 * 1 * 0.5 / 1.5)),
    ],
)
def test_one_question(answers: list[str], predicted: str, expected: tuple[float, float]) -> None:
    assert example_scores(answers, predicted) == pytest.approx(expected)


def test_totals_split_has_answer_from_no_answer() -> None:
    gold = [["in 10th century"], ["France"], [], []]
    predicted = ["the 10th century", "France", "", "Paris"]
    scores = squad_scores(gold, predicted)
    assert scores == pytest.approx(
        {
            "exact_match": (0 + 1 + 1 + 0) / 4,
            "f1": (0.8 + 1 + 1 + 0) / 4,
            "has_ans_exact_match": 0.5,
            "has_ans_f1": 0.9,
            "no_ans_accuracy": 0.5,
        }
    )


def test_a_split_without_unanswerable_questions_has_no_no_ans_score() -> None:
    assert "no_ans_accuracy" not in squad_scores([["x y"]], ["x"])
    assert squad_scores([["x y"]], ["x"])["f1"] == pytest.approx(2 / 3)
