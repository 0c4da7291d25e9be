"""A `transformers` checkpoint read into our encoder's, MLM head's and ELECTRA head's state dicts.

Every tensor of the file is accounted for: mapped to ours, known to be unused (pooler, NSP head,
buffers, a tied decoder's copy), or refused as unexpected, so nothing a checkpoint holds is
dropped silently. Tensors stay memory-mapped from the file until used, and `masked_lm` takes
them as its parameters: no random initialisation, no copy of an fp32 tensor that needs no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from lightning_modules.hf_layouts import (
    HEAD_NAMES,
    Layout,
    Tensors,
    discriminator_layout,
    encoder_layout,
    head_layout,
    to_ours,
)
from lightning_modules.models.electra import ReplacedTokenHead
from lightning_modules.models.heads import BertForMaskedLM, MaskedLMHead
from lightning_modules.transformers_import.errors import CheckpointError
from lightning_modules.transformers_import.families import Family
from lightning_modules.transformers_import.mapping import for_import, normalised, unused
from lightning_modules.transformers_import.shape import CheckpointShape, peek_checkpoint
from lightning_modules.transformers_import.weights import read_tensors, weights_sha256

SHOWN = 5  # names a message lists before "and N more"


class Unfilled(TorchFunctionMode):
    """Builds modules whose parameters are allocated but never filled: each is replaced by a
    checkpoint tensor straight after. Initialising a BERT-base's 110 M parameters twice (the
    layers' own reset, then BERT's) took 1.8 s; the meta device avoids that but its first use
    imports torch._dynamo (1.5 to 4 s on the loaded 2-core machine)."""

    # In-place fills modules call directly; torch.nn.init's functions are skipped whole (the
    # mode does not see the calls they make).
    FILLS = frozenset(
        (torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.zero_, torch.Tensor.fill_)
    )

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in self.FILLS or getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]  # the tensor, as it was
        return func(*args, **kwargs)


@dataclass(frozen=True)
class ImportedCheckpoint:
    """A checkpoint's weights under our names, fp32: `encoder` is a complete
    `BertEncoder.state_dict()`; `mlm_head` a `MaskedLMHead`'s without the tied word embeddings
    (None when the checkpoint has no MLM head); `discriminator_head` a `ReplacedTokenHead`'s
    (ELECTRA's discriminator only). `weights_sha256` hashes the weight files' bytes."""

    shape: CheckpointShape
    encoder: Tensors
    mlm_head: Tensors | None
    discriminator_head: Tensors | None
    weights_sha256: str

    def masked_lm(self) -> BertForMaskedLM:
        """The masked LM of `shape.config`, encoder and head loaded; a checkpoint without an
        MLM head gets a freshly initialised one (from torch's global generator).

        The model's parameters are this checkpoint's tensors, not copies (as `from_pretrained`
        maps them): training it changes `encoder` and `mlm_head` too. Read the checkpoint again
        for a second, independent model.
        """
        config = self.shape.config
        with Unfilled():
            model = BertForMaskedLM(config)
        head = self.mlm_head
        if head is None:
            model.head = MaskedLMHead(config, model.encoder.embeddings.word)
            head = dict(model.head.state_dict())
        state = {f"encoder.{name}": tensor for name, tensor in self.encoder.items()}
        state |= {f"head.{name}": tensor for name, tensor in head.items()}
        if config.tie_word_embeddings:
            state["head.word_embeddings.weight"] = state["encoder.embeddings.word.weight"]
        model.load_state_dict(state, strict=True, assign=True)
        return model

    def replaced_token_head(self) -> ReplacedTokenHead:
        """ELECTRA's discriminator head as imported; a CheckpointError for any other class."""
        if self.discriminator_head is None:
            raise CheckpointError(
                f"{self.shape.folder} is a {self.shape.architecture}: it has no replaced-token "
                "head (only ElectraForPreTraining has)"
            )
        head = ReplacedTokenHead(self.shape.config)
        head.load_state_dict(self.discriminator_head, strict=True)
        return head


def read_checkpoint(folder: Path) -> ImportedCheckpoint:
    """config.json and the weights of a checkpoint folder, mapped to our names; a tensor missing,
    or one no part of the class explains, is a CheckpointError naming the first few."""
    shape = peek_checkpoint(Path(folder))
    family, config = shape.family, shape.config
    where = str(shape.weight_files[0] if len(shape.weight_files) == 1 else shape.folder)
    theirs = for_import(normalised(read_tensors(shape.weight_files), family), family, config, where)
    sections: list[tuple[str, Layout]] = [("encoder", encoder_layout(family.model_type, config))]
    if shape.has_mlm_head:
        tie_decoder(theirs, family, shape, where)
        sections.append(("mlm_head", head_layout(family.model_type, config)))
    if shape.has_discriminator_head:
        sections.append(("discriminator_head", discriminator_layout()))
    states: dict[str, Tensors] = {}
    missing: list[str] = []
    for section, layout in sections:
        states[section], absent = to_ours(theirs, layout)
        missing += absent
    if missing:
        raise CheckpointError(f"{where}: {shape.architecture} tensors missing: {listed(missing)}")
    read = {name for _, layout in sections for _, names in layout for name in names}
    unexpected = [name for name in theirs if name not in read and not unused(name, family)]
    if unexpected:
        raise CheckpointError(
            f"{where}: tensors that are not part of a {shape.architecture} Cloze imports: "
            f"{listed(unexpected)}"
        )
    return ImportedCheckpoint(
        shape=shape,
        encoder=fp32(states["encoder"]),
        mlm_head=fp32(states["mlm_head"]) if "mlm_head" in states else None,
        discriminator_head=(
            fp32(states["discriminator_head"]) if "discriminator_head" in states else None
        ),
        weights_sha256=weights_sha256(shape.weight_files),
    )


def tie_decoder(theirs: Tensors, family: Family, shape: CheckpointShape, where: str) -> None:
    """The decoder's bias is the output bias `transformers` adds (tied to the head's `bias` or
    not); a tied decoder's weight, where the file keeps a copy, must be the word table."""
    bias, decoder = HEAD_NAMES[family.model_type][2:]
    if f"{decoder}.bias" in theirs:
        theirs[bias] = theirs.pop(f"{decoder}.bias")
    copy = theirs.pop(f"{decoder}.weight", None) if shape.config.tie_word_embeddings else None
    word = dict(encoder_layout(family.model_type, shape.config))["embeddings.word.weight"][0]
    if copy is not None and not same_tensor(copy, theirs[word]):
        raise CheckpointError(
            f"{where}: {decoder}.weight differs from {word} but config.json says "
            "tie_word_embeddings=true; set it false (transformers would not tie them either)"
        )


def same_tensor(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Equal; a .bin file's tied pair shares storage, which settles it without a comparison."""
    if first.shape != second.shape:
        return False
    shared = first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
    return (shared and first.storage_offset() == second.storage_offset()) or torch.equal(
        first, second
    )


def fp32(state: Tensors) -> Tensors:
    """Floating tensors in fp32, as Cloze trains (no copy for those already fp32)."""
    return {
        name: tensor.float() if tensor.is_floating_point() else tensor
        for name, tensor in state.items()
    }


def listed(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more
