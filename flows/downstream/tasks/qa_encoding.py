"""Question answering to token ids, as BERT's SQuAD recipe (and `transformers`' run_qa.py) does.

Question and context go in as a pair, and only the context is truncated: a context longer than
`max_length` is split into windows that overlap by `doc_stride` tokens (the tokenizer's own
overflow), so every answer lies whole in some window. Each window keeps its tokens' character
offsets into the context, read from the fast tokenizer: an answer's characters map to its start
and end tokens, and a predicted span maps back to the context's own text. A window that does not
hold the answer whole (and an unanswerable question's) is labelled with the [CLS] span, (0, 0).
Plain lists, no torch, like encoding.py.
"""

from __future__ import annotations

from typing import Any

from tokenizers import Encoding, Tokenizer

from flows.downstream.tasks.encoding import EncodedSplit, Item
from flows.downstream.tasks.squad import QAExample

Offsets = list[tuple[int, int] | None]  # per token: characters of the context, None elsewhere
CLS_SPAN = (0, 0)


class QAEncodedSplit(EncodedSplit):
    """Windows (the items a model reads) and questions (what is scored): `window_example[w]` is
    the question of window w, `offsets[w]` its context offsets; `gold` holds each question's
    reference answers (empty: unanswerable); `truncated` counts questions cut short."""

    def __init__(
        self,
        items: list[Item],
        examples: list[QAExample],
        window_example: list[int],
        offsets: list[Offsets],
        truncated: int = 0,
    ) -> None:
        super().__init__(items, [list(example.answers) for example in examples], truncated)
        self.examples = examples
        self.window_example = window_example
        self.offsets = offsets

    @property
    def windows_per_question(self) -> float:
        return len(self.items) / max(1, len(self.examples))

    def subset(self, positions: list[int]) -> QAEncodedSplit:
        """Some questions (a seed's labelled sample), with all their windows."""
        renumber = {old: new for new, old in enumerate(positions)}
        windows = [w for w, e in enumerate(self.window_example) if e in renumber]
        windows.sort(key=lambda w: renumber[self.window_example[w]])
        return QAEncodedSplit(
            [self.items[w] for w in windows],
            [self.examples[p] for p in positions],
            [renumber[self.window_example[w]] for w in windows],
            [self.offsets[w] for w in windows],
        )


def context_offsets(window: Encoding) -> Offsets:
    return [
        offset if sequence == 1 else None
        for offset, sequence in zip(window.offsets, window.sequence_ids, strict=True)
    ]


def answer_span(offsets: Offsets, start: int, end: int) -> tuple[int, int]:
    """The tokens of characters [start, end) in a window, or the [CLS] span when the window does
    not hold them whole."""
    inside = [token for token, offset in enumerate(offsets) if offset is not None]
    if not inside or offsets[inside[0]][0] > start or offsets[inside[-1]][1] < end:  # type: ignore[index]
        return CLS_SPAN
    first = max(t for t in inside if offsets[t][0] <= start)  # type: ignore[index]
    last = min(t for t in inside if offsets[t][1] >= end)  # type: ignore[index]
    return (first, last) if last >= first else CLS_SPAN


def capped_question(tokenizer: Tokenizer, question: str, limit: int) -> tuple[str, bool]:
    """The question cut to `limit` tokens, so that a window always holds some context."""
    encoding = tokenizer.encode(question, add_special_tokens=False)
    if len(encoding.ids) <= limit:
        return question, False
    return question[: encoding.offsets[limit - 1][1]], True


def encode_questions(
    tokenizer: Tokenizer,
    examples: list[QAExample],
    max_length: int,
    doc_stride: int,
    token_types: bool,
) -> QAEncodedSplit:
    """Every question's windows; train labels each window with its first answer's span."""
    tokenizer.enable_truncation(max_length, stride=doc_stride, strategy="only_second")
    items: list[Item] = []
    window_example: list[int] = []
    offsets: list[Offsets] = []
    truncated = 0
    for index, example in enumerate(examples):
        question, cut = capped_question(tokenizer, example.question, max_length // 2)
        truncated += cut
        encoding = tokenizer.encode(question, example.context)
        for window in [encoding, *encoding.overflowing]:
            window_offsets = context_offsets(window)
            span = CLS_SPAN
            if example.answers:
                start = example.starts[0]
                span = answer_span(window_offsets, start, start + len(example.answers[0]))
            items.append(
                {
                    "input_ids": window.ids,
                    "token_type_ids": window.type_ids if token_types else [0] * len(window.ids),
                    "labels": span,
                }
            )
            window_example.append(index)
            offsets.append(window_offsets)
    return QAEncodedSplit(items, examples, window_example, offsets, truncated)


def span_text(context: str, offsets: Offsets, start: int, end: int) -> str:
    first, last = offsets[start], offsets[end]
    assert first is not None and last is not None
    return context[first[0] : last[1]]


def window_outputs(task: str, splits: dict[str, Any]) -> dict[str, int]:
    """`<task>.<split>_windows`: how many windows each split's questions became (reported: a
    long context costs windows, and `max_length`/`doc_stride` set how many)."""
    return {f"{task}.{name}_windows": len(split.items) for name, split in splits.items()}
