"""What a model's tables can index, read from its configuration (no weights needed), so the
CPU stage settles on the host the inputs a device cannot survive.

On CPU an embedding lookup past the table is an `IndexError`, one row error; on CUDA the same
gather is a device-side assert that poisons the process, and a retried unit hits it again
(docs/gpu.md, "What the CPU stage settles"). Two limits:
- vocabulary: the rows of the token embedding (`config.vocab_size`). A tokenizer may hold more
  ids than that: published bart-large-cnn maps `<mask>` to id 50,264 on a 50,264-row embedding.
- positions: the longest sequence the position table indexes (`max_position_embeddings`;
  `n_positions` for GPT-2; minus the padding offset for RoBERTa-like models). None for models
  without an absolute table (T5's relative buckets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scoring.errors import UsageError

# position ids start after the padding index: a 514-row table holds 512 tokens
_PADDING_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer", "roberta-prelayernorm")
_RELATIVE_POSITIONS = ("t5", "mt5", "umt5", "longt5")


@dataclass(frozen=True)
class ModelLimits:
    model: str
    vocabulary: int | None
    positions: int | None

    @classmethod
    def from_config(cls, config, model: str = "the model") -> "ModelLimits":
        vocabulary = getattr(config, "vocab_size", None)
        model_type = getattr(config, "model_type", "")
        positions = None
        if model_type not in _RELATIVE_POSITIONS:
            positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
            if positions and model_type in _PADDING_OFFSET_POSITIONS:
                positions -= int(getattr(config, "pad_token_id", 1) or 0) + 1
        return cls(model, int(vocabulary) if vocabulary else None, int(positions) if positions else None)

    def check_max_length(self, max_length: int | None) -> None:
        """Refuse (UsageError, exit 2) a `max_length` past the position table."""
        if max_length is not None and self.positions is not None and int(max_length) > self.positions:
            raise UsageError(f"max_length {max_length} is past the position table of {self.model} "
                             f"({self.positions} positions); use max_length <= {self.positions}")

    def problems(self, values: np.ndarray, offsets: np.ndarray) -> dict[int, str]:
        """{sequence index: reason} for the sequences (flat `values`, `offsets`) holding a token
        id outside the embedding or longer than the position table; one numpy pass each."""
        values, offsets = np.asarray(values), np.asarray(offsets, dtype=np.int64)
        found: dict[int, str] = {}
        if self.positions is not None:
            lengths = np.diff(offsets)
            for k in np.flatnonzero(lengths > self.positions).tolist():
                found[k] = (f"{int(lengths[k])} tokens is longer than the position table of {self.model} "
                            f"({self.positions} positions)")
        if self.vocabulary is not None and len(values):
            base = int(offsets[0])
            bad = np.flatnonzero((values[base:int(offsets[-1])] >= self.vocabulary) | (values[base:int(offsets[-1])] < 0))
            if len(bad):
                owners = np.searchsorted(offsets, bad + base, side="right") - 1
                for position, k in zip(bad.tolist(), owners.tolist()):
                    if k not in found:
                        found[k] = (f"token id {int(values[base + position])} is outside the vocabulary of {self.model} "
                                    f"({self.vocabulary} embedding rows)")
        return found

    def check_sequences(self, sequences, what: str = "text") -> None:
        """ValueError naming the first bad sequence of a list of id lists (library calls)."""
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter((i for s in sequences for i in s), dtype=np.int64, count=int(offsets[-1]))
        found = self.problems(values, offsets)
        if found:
            k = min(found)
            raise ValueError(f"{what} {k}: {found[k]}")


def limits_for(source, config=None) -> ModelLimits:
    """The limits of a resolved model (`scoring.models.ModelSource`), from its config."""
    if config is None:
        from scoring.models import load_config

        config = load_config(source)
    return ModelLimits.from_config(config, source.location.rstrip("/").rsplit("/", 1)[-1])


def raise_row_error(limits: ModelLimits, values, offsets, owners, what: str) -> None:
    """RowError for the first input row (`owners[sequence]`) whose `what` sequence the model
    cannot index (`ModelLimits.problems`); nothing when every sequence fits."""
    found = limits.problems(values, offsets)
    if found:
        from scoring.metric import RowError

        owner_of = {k: int(owners[k]) for k in found}
        k = min(found, key=lambda k: (owner_of[k], k))
        raise RowError(owner_of[k], f"{what}: {found[k]}")


# tokenizers without a known limit report a huge sentinel (transformers' VERY_LARGE_INTEGER)
_UNSET_TOKENIZER_LIMIT = 1_000_000


def default_max_length(max_length: int | None, limits: ModelLimits, tokenizer=None, fallback: int = 1024) -> int:
    """`max_length` as given; unset, the model's own limit: its position table, or, for
    relative positions (T5), the tokenizer's `model_max_length`; `fallback` when neither
    says (docs/metrics.md, "max_length")."""
    if max_length is not None:
        return int(max_length)
    if limits.positions is not None:
        return int(limits.positions)
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < _UNSET_TOKENIZER_LIMIT:
        return declared
    return int(fallback)
