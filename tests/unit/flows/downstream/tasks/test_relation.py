"""Relation extraction as a task kind: SemEval-2010's official score, entity markers as tokens of
their own (inline or inserted at offsets, windowed rather than cut), the entity-start head and
the markers' embedding rows, alike in every arm."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from flows.downstream.kinds.registry import kind_of
from flows.downstream.tasks.encoding import stand_in_tokenizer
from flows.downstream.tasks.load import Sampling, load_task
from flows.downstream.tasks.markers import insert_markers, keep_marked
from flows.downstream.tasks.readers import LabelIndex, TextExample, read_semeval2010
from flows.downstream.tasks.relation import add_marker_tokens, encode_relations, window
from flows.downstream.tasks.spec import TaskInputError, TaskSpec, default_data_dir
from lightning_modules.label_metrics import relation_scores, relation_type
from lightning_modules.models.config import EncoderConfig
from lightning_modules.models.encoder import BertEncoder
from lightning_modules.models.relation_head import (
    BertForRelationClassification,
    extend_word_embeddings,
)

SEMEVAL = default_data_dir() / "semeval2010_task8"
SEMEVAL_MARKERS = [["<e1>", "</e1>"], ["<e2>", "</e2>"]]
CE12, CE21, MC12, EO12 = (
    "Cause-Effect(e1,e2)",
    "Cause-Effect(e2,e1)",
    "Member-Collection(e1,e2)",
    "Entity-Origin(e1,e2)",
)


def test_the_f1s_score_direction_leave_other_out_and_ignore_types_absent_from_gold() -> None:
    """SemEval-2010's official "(9+1)-way, directionality taken into account" scoring."""
    gold = [CE12, CE12, CE21, "Other", MC12, "Other"]
    predicted = [CE12, CE21, CE21, MC12, "Other", EO12]
    # Cause-Effect: 2 hits (the wrong direction is no hit), 3 predicted, 3 gold: F1 2*2/6.
    # Member-Collection: 0 hits, 1 predicted, 1 gold. Entity-Origin is absent from gold: its
    # prediction counts as one of Other, as the scorer has it; Other is left out.
    scores = relation_scores(gold, predicted, "Other")
    assert scores["macro_f1"] == pytest.approx((4 / 6 + 0.0) / 2)
    assert scores["micro_f1"] == pytest.approx(2 * 2 / (4 + 4))
    assert relation_scores(gold, gold, "Other") == {"micro_f1": 1.0, "macro_f1": 1.0}
    assert relation_type(CE21) == "Cause-Effect" and relation_type("CPR:3") == "CPR:3"


def test_the_bootstrap_form_of_the_relation_f1s_gives_them_exactly() -> None:
    labels = [CE12, CE21, MC12, "Other", EO12]
    rng = random.Random(0)
    gold = [rng.randrange(4) for _ in range(300)]  # Entity-Origin never gold
    predicted = [g if rng.random() < 0.5 else rng.randrange(5) for g in gold]
    relation = kind_of("relation")
    totals = relation.example_statistics(gold, predicted, labels).sum(0, keepdims=True)
    expected = relation.score(gold, predicted, labels, "Other")
    for metric in ("macro_f1", "micro_f1", "accuracy"):
        found = relation.bootstrap_metric(metric, totals, labels, "Other")[0]
        assert found == pytest.approx(expected[metric])


def test_per_class_scores_are_per_relation_type_direction_aware() -> None:
    labels = [CE12, CE21, "Other"]
    report = kind_of("relation").per_class([0, 0, 1, 2], [0, 1, 1, 2], labels)
    assert list(report) == ["Cause-Effect", "Other"]
    assert report["Cause-Effect"] == {
        "precision": 2 / 3,
        "recall": 2 / 3,
        "f1": 2 / 3,
        "support": 3,
    }


def test_a_text_without_every_marker_once_in_order_is_left_out_counted_and_named() -> None:
    markers = [("<e1>", "</e1>"), ("<e2>", "</e2>")]
    texts = {
        "ok": "a <e1>b</e1> c <e2>d</e2>",
        "missing": "a <e1>b</e1> c d",
        "closed before opened": "a </e1>b<e1> c <e2>d</e2>",
        "twice": "<e1>a</e1> <e1>b</e1> <e2>c</e2>",
        "entities in either order": "<e2>a</e2> then <e1>b</e1>",
    }
    examples = [TextExample(text, None, 0, f"f:{name}") for name, text in texts.items()]
    kept, drops = keep_marked(examples, markers)
    assert [e.at for e in kept] == ["f:ok", "f:entities in either order"]
    assert drops.record() == {
        "dropped": 3,
        "of": 5,
        "first": ["f:missing", "f:closed before opened", "f:twice"],
    }


def test_markers_go_in_at_character_offsets_and_overlapping_spans_are_refused() -> None:
    markers = [("[E1]", "[/E1]"), ("[E2]", "[/E2]")]
    text = "Aspirin inhibits COX-1."
    assert insert_markers(text, [(17, 22), (0, 7)], markers, "t:1") == (
        "[E2]Aspirin[/E2] inhibits [E1]COX-1[/E1]."
    )
    with pytest.raises(TaskInputError, match=r"t:1: entity offsets \[\(0, 7\), \(5, 9\)\] overlap"):
        insert_markers(text, [(0, 7), (5, 9)], markers, "t:1")


def test_a_jsonl_task_with_offsets_reads_as_marked_text(tmp_path: Path) -> None:
    rows = [
        {"text": "Aspirin inhibits COX-1.", "head": [0, 7], "tail": [17, 22], "label": "CPR:4"},
        {"text": "Aspirin and insulin.", "head": [0, 7], "tail": [12, 19], "label": "false"},
    ]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = TaskSpec(
        name="r", format="jsonl", kind="relation", labels="auto", text_column="text",
        entity_offsets=["head", "tail"], negative_label="false", metric="micro_f1",
        train="r.jsonl", validation="r.jsonl", test="r.jsonl",
    )  # fmt: skip
    data = load_task(spec, tmp_path, Sampling(None, None, 0))
    assert [e.text for e in data.splits["test"]] == [
        "[E1]Aspirin[/E1] inhibits [E2]COX-1[/E2].",
        "[E1]Aspirin[/E1] and [E2]insulin[/E2].",
    ]
    assert data.labels == ["CPR:4", "false"]


def test_the_semeval_reader_takes_the_released_format(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_bytes(
        b'1\t"The <e1>child</e1> was wrapped into the <e2>cradle</e2>."\r\nOther\r\n'
        b"Comment:\r\n\r\n"
        b'2\t"A <e1>ridge</e1> uprises from the <e2>surge</e2>."\r\nCause-Effect(e2,e1)\r\n'
        b"Comment: made up\r\n\r\n"
    )
    spec = TaskSpec(
        name="s", format="semeval2010", kind="relation", labels="auto", train="s.txt",
        test="s.txt", entity_markers=SEMEVAL_MARKERS, metric="macro_f1",
    )  # fmt: skip
    examples = read_semeval2010(path, spec, LabelIndex(spec, ["Cause-Effect(e2,e1)", "Other"]))
    assert examples == [
        TextExample("The <e1>child</e1> was wrapped into the <e2>cradle</e2>.", None, 1),
        TextExample("A <e1>ridge</e1> uprises from the <e2>surge</e2>.", None, 0),
    ]
    assert examples[1].at == f"{path}:5"
    path.write_bytes(b"1 The child\r\nOther\r\n")
    with pytest.raises(TaskInputError, match=r"s\.txt:1: expected a record's first line"):
        read_semeval2010(path, spec, LabelIndex(spec, ["Other", "x"]))


@pytest.mark.skipif(not SEMEVAL.is_dir(), reason=f"no shared data at {SEMEVAL}")
def test_semeval_as_given_reads_as_its_provenance_counts() -> None:
    spec = TaskSpec(
        name="semeval2010", format="semeval2010", kind="relation", labels="auto",
        negative_label="Other", entity_markers=SEMEVAL_MARKERS, metric="macro_f1",
        train=str(SEMEVAL / "TRAIN_FILE.TXT"), test=str(SEMEVAL / "TEST_FILE_FULL.TXT"),
    )  # fmt: skip
    data = load_task(spec, SEMEVAL, Sampling(None, None, 0))
    assert len(data.labels) == 19 and "Other" in data.labels
    assert len(data.splits["train"]) + len(data.splits["validation"]) == 8_000
    assert len(data.splits["test"]) == 2_717
    assert data.marker_drops == {}


def test_each_marker_is_one_token_and_a_long_text_is_windowed_around_the_entities() -> None:
    tokenizer = stand_in_tokenizer(12)
    markers = add_marker_tokens(tokenizer, [("<e1>", "</e1>"), ("<e2>", "</e2>")])
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    short = TextExample("a <e1>b</e1> c <e2>d</e2>", None, 1)
    filler = " ".join(["w"] * 20)
    long = TextExample(f"{filler} <e1>b</e1> c <e2>d</e2> {filler}", None, 0)
    split = encode_relations(tokenizer, [short, long], markers, max_length=12)
    first, second = (item["input_ids"] for item in split.items)
    assert first[0] == cls_id and first[-1] == sep_id and len(first) == 10
    assert [first[position] for position in (2, 4, 6, 8)] == markers.all
    assert len(second) == 12 and set(markers.all) <= set(second)  # windowed, markers kept
    assert split.truncated == 1 and split.gold == [1, 0]


def test_entities_too_far_apart_keep_their_markers_and_nearest_words() -> None:
    ids = list(range(100, 130))
    entities = [(2, 4), (25, 27)]  # open and close positions of two entities
    kept = window(ids, entities, 10)
    assert len(kept) == 10 and kept == sorted(kept)
    assert {102, 103, 104, 125, 126, 127} <= set(kept)
    assert window(ids, [(10, 12), (14, 16)], 10) == ids[9:19]  # it fits: one stretch, centred


CONFIG = EncoderConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2,
                       intermediate_size=32, max_position_embeddings=32)  # fmt: skip


def test_the_entity_start_head_reads_the_hidden_states_at_the_start_markers() -> None:
    torch.manual_seed(0)
    model = BertForRelationClassification(CONFIG, 3, 0.0, "entity_start", [30, 32]).eval()
    input_ids = torch.tensor([[2, 5, 30, 6, 31, 32, 7, 33, 3], [2, 32, 8, 33, 30, 9, 31, 3, 0]])
    mask = input_ids != 0
    with torch.no_grad():
        hidden = model.encoder(input_ids, mask)
        by_hand = torch.stack(
            [torch.cat([hidden[0, 2], hidden[0, 5]]), torch.cat([hidden[1, 4], hidden[1, 1]])]
        )
        expected = model.classifier(torch.tanh(model.pooler(by_hand)))
        assert torch.allclose(model(input_ids, mask), expected, atol=1e-6)
    cls = BertForRelationClassification(CONFIG, 3, 0.0, "cls", [30, 32])
    assert cls.pooler.in_features == CONFIG.hidden_size  # [CLS] alone, not the two entities


def test_the_markers_rows_are_alike_in_every_arm_of_a_seed_and_other_rows_kept() -> None:
    torch.manual_seed(1)
    pretrained, random_init = BertEncoder(CONFIG), BertEncoder(CONFIG)
    before = pretrained.embeddings.word.weight[:40].clone()
    for encoder in (pretrained, random_init):
        extend_word_embeddings(encoder, [40, 41, 42, 43], seed=7)
    rows = pretrained.embeddings.word.weight
    assert rows.shape[0] == 44 and pretrained.config.vocab_size == 44
    assert torch.equal(rows[40:], random_init.embeddings.word.weight[40:])
    assert torch.equal(rows[:40], before)
    other = BertEncoder(CONFIG)
    extend_word_embeddings(other, [40, 41, 42, 43], seed=8)
    assert not torch.equal(other.embeddings.word.weight[40:], rows[40:])
