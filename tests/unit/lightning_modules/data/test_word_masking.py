"""Word boundaries from ids, and whole-word / span masking checked statistically (3-sigma bounds).

Most tests use a synthetic vocabulary whose word starts are known by construction; the tokenizer
tests train the three families on stdlib docstrings and compare with the tokenizer's word ids.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Iterator

import pytest
import torch
from tokenizers import Tokenizer, pre_tokenizers

from flows.corpora.stdlib_docs import module_docstrings, stdlib_root
from flows.stages.tokenizer_models import TokenizerRecipe, build_tokenizer
from lightning_modules.data.collator import MaskingCollator
from lightning_modules.data.masking_rules import MaskingRule, SpanLengths
from lightning_modules.data.span_masking import (
    SpanMaskingCollator,
    WholeWordMaskingCollator,
    span_length_probabilities,
)
from lightning_modules.data.word_boundaries import (
    PrefixWordBoundaries,
    WordBoundaries,
    byte_level_alphabet,
    word_boundaries,
)
from lightning_modules.models.config import IGNORE_INDEX

VOCAB = 500
PAD, UNK, CLS, SEP, MASK = range(5)
SPECIALS = [PAD, UNK, CLS, SEP, MASK]
FIRST_CONTINUATION = 300  # ids 5..299 open a word, 300..499 continue one (like `##` pieces)
SPECIAL_NAMES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TRICKY = (
    "it's 'sup\n'real' x\t'dx they'll  x\n\n\tdon't'vex 12ab  \n\n  'd a\r\n'S a\n \nx"
    " f(x='y') -> 3.5e-10 __init__  ok "
)


def synthetic_boundaries() -> PrefixWordBoundaries:
    opens = torch.arange(VOCAB) < FIRST_CONTINUATION
    is_special = torch.zeros(VOCAB, dtype=torch.bool)
    is_special[SPECIALS] = True
    return PrefixWordBoundaries(opens, is_special)


def synthetic_rows(rows: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """[CLS] words [SEP] words [SEP] [PAD]...: two documents and some padding per row."""
    ids = torch.randint(5, VOCAB, (rows, width), generator=generator)
    ids[:, 0] = CLS
    ids[:, width // 2] = SEP
    ids[:, -5] = SEP
    ids[:, -4:] = PAD
    return ids


def make_collator(kind: str, rule: MaskingRule, seed: int) -> MaskingCollator:
    collator_class = WholeWordMaskingCollator if kind == "word" else SpanMaskingCollator
    return collator_class(rule, VOCAB, MASK, SPECIALS, seed, synthetic_boundaries())


def masked_batches(
    kind: str, rule: MaskingRule, batches: int, shape: tuple[int, int] = (32, 64), seed: int = 7
) -> Iterator[tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]]:
    """(original ids, collated batch, unit id per token) for `batches` synthetic batches."""
    collator = make_collator(kind, rule, seed)
    data = torch.Generator().manual_seed(0)
    for _ in range(batches):
        original = synthetic_rows(*shape, data)
        batch = collator([row for row in original])
        # Replay the selection from the same state to read the unit ids `mask` used.
        replay = torch.Generator()
        replay.set_state(collator.generator_state_before(collator.batches_produced - 1))
        special = torch.isin(original, torch.tensor(SPECIALS))
        _, units = collator.select(original, special, replay)
        yield original, batch, units


def words_of(starts: torch.Tensor) -> torch.Tensor:
    """A batch-wide word number per token."""
    return starts.flatten().cumsum(0).view(starts.shape) - 1


def per_unit(units: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The sum of `values` over each unit's tokens, indexed by unit id."""
    counts = torch.bincount(units.flatten(), values.flatten().long(), minlength=units.numel())
    return counts.long()  # bincount with weights counts in float64


def within_three_sigma(count: float, expected: float, variance: float) -> bool:
    return abs(count - expected) <= 3 * math.sqrt(variance)


# --- word boundaries ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained() -> dict[str, Tokenizer]:
    """The three families trained on a few stdlib modules' docstrings (plus every ASCII char)."""
    texts = [
        doc.text
        for name in ("textwrap", "argparse", "shutil")
        for doc in module_docstrings(name, stdlib_root() / f"{name}.py")
    ]
    tokenizers = {}
    for kind in ("wordpiece", "bpe", "unigram"):
        recipe = TokenizerRecipe(kind, 500, kind != "bpe", 1, SPECIAL_NAMES, "[UNK]")
        tokenizer, trainer = build_tokenizer(recipe)
        tokenizer.train_from_iterator([*texts, string.printable], trainer)
        tokenizers[kind] = tokenizer
    return tokenizers


def held_out_texts() -> list[str]:
    docs = [doc.text for doc in module_docstrings("json", stdlib_root() / "json" / "__init__.py")]
    docs += [doc.text for doc in module_docstrings("string", stdlib_root() / "string.py")]
    return [text for text in [*docs, TRICKY] if text.isascii()]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_word_starts_from_ids_equal_the_tokenizers_word_ids(
    trained: dict[str, Tokenizer], kind: str
) -> None:
    tokenizer = trained[kind]
    boundaries = word_boundaries(tokenizer, kind, range(len(SPECIALS)))
    encodings = tokenizer.encode_batch(held_out_texts(), add_special_tokens=False)
    checked = 0
    for encoding in encodings:
        word_ids = encoding.word_ids
        expected = [True] + [a != b for a, b in itertools.pairwise(word_ids)]
        assert boundaries.word_starts(torch.tensor(encoding.ids)).tolist() == expected
        checked += len(expected)
    assert checked > 4000


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_special_tokens_and_the_token_after_them_start_words(
    trained: dict[str, Tokenizer], kind: str
) -> None:
    tokenizer = trained[kind]
    boundaries = word_boundaries(tokenizer, kind, range(len(SPECIALS)))
    ids = tokenizer.encode("don't stop-words", add_special_tokens=False).ids
    encoded = boundaries.word_starts(torch.tensor([[CLS, *ids, SEP, *ids, PAD, PAD]]))[0]
    one = boundaries.word_starts(torch.tensor(ids)).tolist()
    assert encoded.tolist() == [True, *one, True, *one, True, True]
    assert one[0] and not all(one)  # the text has multi-token words


def test_the_byte_level_alphabet_is_the_one_tokenizers_uses() -> None:
    alphabet = byte_level_alphabet()
    assert set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet())
    assert sorted(alphabet.values()) == list(range(256))
    assert (alphabet["Ġ"], alphabet["Ċ"], alphabet["a"]) == (ord(" "), ord("\n"), ord("a"))


# --- whole-word and span masking ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["word", "span"])
def test_selection_spends_the_budget_first_fit_and_only_whole_words(kind: str) -> None:
    """Each row selects at most round(0.15 * non-special tokens), and stops short only when no
    unselected word fits the rest; a word is selected entirely or not at all."""
    boundaries = synthetic_boundaries()
    selected_total = budget_total = 0
    for original, batch, _ in masked_batches(kind, MaskingRule(), batches=20):
        special = torch.isin(original, torch.tensor(SPECIALS))
        selected = batch["labels"] != IGNORE_INDEX
        words = words_of(boundaries.word_starts(original))
        selected_in_word = per_unit(words, selected)[: words.numel()]
        length = per_unit(words, torch.ones_like(words))
        assert ((selected_in_word == 0) | (selected_in_word == length)).all()
        budget = torch.round((~special).sum(1).double() * 0.15).long().clamp(min=1)
        count = selected.sum(1)
        assert (count <= budget).all()
        free_word = (selected_in_word == 0) & (length > 0)
        free_word[words[special]] = False
        for row in range(len(original)):
            row_words = torch.unique(words[row])
            free = row_words[free_word[row_words]]
            assert length[free].min() > budget[row] - count[row]
        selected_total += int(count.sum())
        budget_total += int(budget.sum())
    assert selected_total > 0.97 * budget_total  # short rows are the exception


@pytest.mark.parametrize("kind", ["word", "span"])
def test_80_10_10_is_applied_per_unit_within_three_sigma(kind: str) -> None:
    counts = dict.fromkeys(("mask", "random", "kept"), 0)
    expected = dict.fromkeys(counts, 0.0)
    variance = dict.fromkeys(counts, 0.0)
    collision = 1 / (VOCAB - len(SPECIALS))
    for original, batch, span_units in masked_batches(kind, MaskingRule(), batches=30):
        selected = batch["labels"] != IGNORE_INDEX
        # Words come from the vocabulary's table, not from the collator; spans from the collator.
        words = words_of(synthetic_boundaries().word_starts(original))
        units = words if kind == "word" else span_units
        length = per_unit(units, selected)
        masked = per_unit(units, selected & (batch["input_ids"] == MASK))
        unchanged = per_unit(units, selected & (batch["input_ids"] == original))
        unit = length > 0
        assert ((masked[unit] == 0) | (masked[unit] == length[unit])).all()  # one action per unit
        counts["mask"] += int((unit & (masked > 0)).sum())
        counts["kept"] += int((unit & (unchanged == length)).sum())
        counts["random"] += int((unit & (masked == 0) & (unchanged < length)).sum())
        # A random replacement equal to the original at every token of its unit looks kept.
        all_collide = collision ** length[unit].double()
        for name, probability in (
            ("mask", torch.full_like(all_collide, 0.8)),
            ("random", 0.1 * (1 - all_collide)),
            ("kept", 0.1 + 0.1 * all_collide),
        ):
            expected[name] += float(probability.sum())
            variance[name] += float((probability * (1 - probability)).sum())
    assert sum(counts.values()) > 2500
    for name in counts:
        assert within_three_sigma(counts[name], expected[name], variance[name]), name


@pytest.mark.parametrize("kind", ["word", "span"])
def test_special_tokens_are_never_selected_nor_used_as_replacements(kind: str) -> None:
    rule = MaskingRule(mask_rate=0.5, replace_with_mask=0.0, replace_with_random=1.0)
    for original, batch, _ in masked_batches(kind, rule, batches=5):
        special = torch.isin(original, torch.tensor(SPECIALS))
        chosen = batch["labels"] != IGNORE_INDEX
        assert not (chosen & special).any()
        assert torch.equal(batch["input_ids"][~chosen], original[~chosen])
        assert torch.equal(batch["labels"][chosen], original[chosen])
        assert not torch.isin(batch["input_ids"][chosen], torch.tensor(SPECIALS)).any()


def test_spans_are_contiguous_whole_words_within_one_document() -> None:
    boundaries = synthetic_boundaries()
    spans = 0
    for original, batch, units in masked_batches("span", MaskingRule(mask_rate=0.4), batches=5):
        rows, width = original.shape
        special = torch.isin(original, torch.tensor(SPECIALS)).flatten()
        starts = boundaries.word_starts(original).flatten()
        selected = (batch["labels"] != IGNORE_INDEX).flatten()
        span, position = units.flatten()[selected], torch.arange(rows * width)[selected]
        first = torch.full((rows * width,), rows * width).scatter_reduce(0, span, position, "amin")
        last = torch.full((rows * width,), -1).scatter_reduce(0, span, position, "amax")
        length = per_unit(units, selected.view(rows, width))
        is_span = length > 0
        first, last, length = first[is_span], last[is_span], length[is_span]
        assert torch.equal(last - first + 1, length)  # contiguous
        assert torch.equal(first // width, last // width)  # within one row
        specials_before = torch.cat([torch.zeros(1, dtype=torch.long), special.cumsum(0)])
        assert torch.equal(specials_before[last + 1], specials_before[first])  # none inside
        assert starts[first].all()  # begins a word; whole words: see the budget test
        spans += len(first)
    assert spans > 800


def test_span_lengths_follow_spanberts_truncated_geometric() -> None:
    """Each row's first span is drawn before anything is masked: where its start leaves room for
    10 words in a long row, its length in words is exactly the drawn length, so the lengths of
    those spans are a sample of the distribution (chi-square and a 3-sigma bound on the mean)."""
    probabilities = span_length_probabilities(SpanLengths())
    lengths_k = torch.arange(1, 11, dtype=torch.float64)
    mean = float((probabilities * lengths_k).sum())
    assert mean == pytest.approx(3.797, abs=1e-3)  # SpanBERT's reported 3.8
    variance = float((probabilities * lengths_k**2).sum()) - mean**2

    one_token_words = torch.ones(VOCAB, dtype=torch.bool)
    is_special = torch.zeros(VOCAB, dtype=torch.bool)
    is_special[SPECIALS] = True
    boundaries = PrefixWordBoundaries(one_token_words, is_special)
    collator = SpanMaskingCollator(MaskingRule(), VOCAB, MASK, SPECIALS, 3, boundaries)
    data = torch.Generator().manual_seed(1)
    generator = torch.Generator().manual_seed(2)
    rows, width = 1024, 200  # [CLS] + 198 one-token words + [SEP]: budget 30 >= 10 words
    observed = []
    for _ in range(3):
        ids = torch.randint(5, VOCAB, (rows, width), generator=data)
        ids[:, 0], ids[:, -1] = CLS, SEP
        selected, units = collator.select(ids, torch.isin(ids, torch.tensor(SPECIALS)), generator)
        first_span = selected & (units < rows)  # span number 0 of each row
        start = first_span.int().argmax(dim=1)
        room = start <= width - 1 - 10
        observed.append(first_span.sum(dim=1)[room])
    sample = torch.cat(observed)
    assert len(sample) > 2800
    assert abs(float(sample.double().mean()) - mean) <= 3 * math.sqrt(variance / len(sample))

    counts = torch.bincount(sample, minlength=11)[1:].double()
    expected = probabilities * len(sample)
    assert counts.sum() == len(sample)  # no span longer than 10 words
    statistic = float(((counts - expected) ** 2 / expected).sum())
    scipy_stats = pytest.importorskip("scipy.stats")
    assert scipy_stats.chi2.sf(statistic, df=9) > 0.001


@pytest.mark.parametrize("kind", ["word", "span"])
def test_same_seed_gives_same_masks_and_other_seed_differs(kind: str) -> None:
    def run(seed: int) -> list[torch.Tensor]:
        return [
            batch["input_ids"] for _, batch, _ in masked_batches(kind, MaskingRule(), 3, seed=seed)
        ]

    first, again, other = run(1), run(1), run(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("kind", ["word", "span"])
def test_resuming_from_a_saved_generator_state_replays_the_next_batches(kind: str) -> None:
    data = torch.Generator().manual_seed(3)
    batches = [list(synthetic_rows(8, 64, data)) for _ in range(5)]
    collator = make_collator(kind, MaskingRule(), seed=5)
    produced = [collator(batch) for batch in batches]
    replay = make_collator(kind, MaskingRule(), seed=5)
    replay.resume_at(3, collator.generator_state_before(3))
    for number in (3, 4):
        again = replay(batches[number])
        assert torch.equal(again["input_ids"], produced[number]["input_ids"])
        assert torch.equal(again["labels"], produced[number]["labels"])
    assert replay.batches_produced == 5


@pytest.mark.parametrize("collator_class", [WholeWordMaskingCollator, SpanMaskingCollator])
def test_real_tokenizer_words_are_masked_whole(
    trained: dict[str, Tokenizer],
    collator_class: type[WholeWordMaskingCollator] | type[SpanMaskingCollator],
) -> None:
    """Byte-level BPE, checked against the tokenizer's own word ids rather than our starts."""
    tokenizer = trained["bpe"]
    boundaries = word_boundaries(tokenizer, "bpe", range(len(SPECIALS)))
    collator = collator_class(
        MaskingRule(mask_rate=0.3), tokenizer.get_vocab_size(), MASK, SPECIALS, 0, boundaries
    )
    width = 48
    rows, word_rows = [], []
    for encoding in tokenizer.encode_batch(held_out_texts(), add_special_tokens=False):
        ids, word_ids = encoding.ids[: width - 2], encoding.word_ids[: width - 2]
        padding = width - 2 - len(ids)
        rows.append([CLS, *ids, SEP] + [PAD] * padding)
        word_rows.append([-1, *word_ids, -1] + [-1] * padding)  # -1: a special token
    batch = collator([torch.tensor(row) for row in rows])
    selected = batch["labels"] != IGNORE_INDEX
    word_in_row = torch.tensor(word_rows)
    assert not selected[word_in_row < 0].any()
    words = word_in_row + width * torch.arange(len(rows))[:, None]  # batch-wide word numbers
    for word in torch.unique(words[selected]):
        assert selected[(words == word) & (word_in_row >= 0)].all()
    assert int(selected.sum()) > 0.25 * int((word_in_row >= 0).sum())


def test_invalid_span_lengths_name_the_config_key() -> None:
    with pytest.raises(ValueError, match=r"objective\.span_p=0 must be in \(0, 1\]"):
        SpanLengths(p=0)
    with pytest.raises(ValueError, match=r"objective\.span_max_words=0 must be at least 1"):
        SpanLengths(max_words=0)


def test_word_boundaries_reject_an_unknown_kind(trained: dict[str, Tokenizer]) -> None:
    with pytest.raises(ValueError, match=r"tokenizer\.kind='sentencepiece' must be one of"):
        word_boundaries(trained["bpe"], "sentencepiece", SPECIALS)


def test_synthetic_words_start_at_prefixless_tokens_and_around_specials() -> None:
    boundaries: WordBoundaries = synthetic_boundaries()
    ids = torch.tensor([[CLS, 300, 5, 301, 302, SEP, 301, PAD]])
    assert boundaries.word_starts(ids).tolist() == [
        [True, True, True, False, False, True, True, True]
    ]
