"""A student's layer mapping onto its teacher, and its init from the teacher's weights.

Each student layer is paired with one teacher layer: the layer whose weights it starts from
(DistilBERT's init) and whose hidden states and attention it is trained to match (TinyBERT).
The default spreads the student evenly over the teacher, ending on the teacher's last layer:
a 2-layer student of a 4-layer teacher takes layers 1 and 3 (0-based), every other layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_modules.models.config import EncoderConfig

if TYPE_CHECKING:  # the layer map is checked while a config is validated, before torch loads
    from lightning_modules.models.heads import BertForMaskedLM

# What must be equal for a teacher block's tensors to fit a student block.
COPY_SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "embedding_size",
    "norm_placement",
    "share_layers",
    "tie_word_embeddings",
)


def uniform_layer_map(student_layers: int, teacher_layers: int) -> tuple[int, ...]:
    """Student layer i -> teacher layer round((i + 1) * N / M) - 1 (0-based)."""
    return tuple(
        max(0, round((index + 1) * teacher_layers / student_layers) - 1)
        for index in range(student_layers)
    )


def copy_mismatches(student: EncoderConfig, teacher: EncoderConfig) -> list[str]:
    """Why the teacher's tensors cannot be copied into the student: `key: student vs teacher`."""
    return [
        f"{key}={getattr(student, key)} (teacher: {getattr(teacher, key)})"
        for key in COPY_SHAPE_KEYS
        if getattr(student, key) != getattr(teacher, key)
    ]


def init_from_teacher(
    student: BertForMaskedLM, teacher: BertForMaskedLM, layer_map: tuple[int, ...]
) -> None:
    """Copies embeddings, the mapped blocks, the final norm and the MLM head into `student`.

    The caller checks `copy_mismatches` first; a mismatch left here fails in `load_state_dict`.
    """
    state = {}
    for name, tensor in teacher.state_dict().items():
        if not name.startswith("encoder.layers."):
            state[name] = tensor.detach().clone()
    for student_layer, teacher_layer in enumerate(layer_map):
        prefix = f"encoder.layers.{teacher_layer}."
        for name, tensor in teacher.state_dict().items():
            if name.startswith(prefix):
                rest = name.removeprefix(prefix)
                state[f"encoder.layers.{student_layer}.{rest}"] = tensor.detach().clone()
    student.load_state_dict(state, strict=True)
