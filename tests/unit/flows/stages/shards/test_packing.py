from __future__ import annotations

import numpy as np
import pytest

from flows.stages.shards.packing import ConcatPacker, DocumentPacker

CLS, SEP, PAD = 2, 3, 0


def flat(documents: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.array([token for doc in documents for token in doc], dtype=np.uint16)
    return tokens, np.array([len(doc) for doc in documents])


def test_blocks_start_with_cls_and_carry_the_document_stream_in_order() -> None:
    packer = ConcatPacker(seq_len=8, cls_id=CLS, sep_id=SEP)
    documents = [[10, 11, 12], [20, 21, 22, 23, 24, 25], [30], [40, 41, 42, 43]]
    blocks = np.concatenate([packer.add(*flat(documents[:2])), packer.add(*flat(documents[2:]))])
    assert blocks.shape == (2, 8)
    assert (blocks[:, 0] == CLS).all()
    stream = [token for doc in documents for token in [*doc, SEP]]
    assert blocks[:, 1:].reshape(-1).tolist() == stream[:14]
    assert packer.dropped_tokens == len(stream) - 14


def test_a_document_longer_than_a_block_spans_several_blocks() -> None:
    packer = ConcatPacker(seq_len=8, cls_id=CLS, sep_id=SEP)
    blocks = packer.add(*flat([list(range(100, 130))]))
    assert blocks.shape == (4, 8)
    assert blocks[:, 1:].reshape(-1).tolist() == list(range(100, 128))


def test_document_packing_gives_each_document_one_padded_truncated_row() -> None:
    packer = DocumentPacker(seq_len=8, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    rows = packer.add(*flat([[10, 11], list(range(20, 30)), [40]]))
    assert rows.tolist() == [
        [CLS, 10, 11, SEP, PAD, PAD, PAD, PAD],
        [CLS, 20, 21, 22, 23, 24, 25, SEP],
        [CLS, 40, SEP, PAD, PAD, PAD, PAD, PAD],
    ]
    assert packer.dropped_tokens == 4


def test_too_short_sequence_length_is_rejected_with_the_key() -> None:
    with pytest.raises(ValueError, match=r"shards\.seq_len=4"):
        ConcatPacker(seq_len=4, cls_id=CLS, sep_id=SEP)
