"""Perplexity under a causal LM, the usual CTG fluency baseline (docs/metrics.md, P1).

PPL(x) = exp( (1/N) sum_{t=1..N} -log p(x_t | BOS, x_<t) ): the model's BOS token (EOS when it
has none, as for GPT-2 where both are `<|endoftext|>`) is prepended so the first word is
predicted too, and every token of the text counts.

The text is tokenised literally (docs/security.md, "Special tokens in data"): a special-token
string inside it (`<|endoftext|>`, `</s>`) is the pieces of its characters, never the special
id, so a text cannot end its own document or reset the model's context; a text whose literal ids
would still hold a control token (`scoring.literal_tokens`) is its row's error.

`min_words` (off by default) leaves texts with fewer words (counted as `text.split(" ")`)
unscored, with a warning, as CompMCTG's evaluation skips texts under 10 words before
averaging (docs/metrics.md, "Perplexity").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from scoring.engine import DEFAULT_TOKEN_BUDGET, CausalLikelihood, Ragged
from scoring.literal_tokens import LiteralTokenizer
from scoring.metric import RowError, RowMetric
from scoring.model_limits import ModelLimits, default_max_length, raise_row_error
from scoring.models import load_config, load_pretrained, load_tokenizer, resolve_model
from scoring.text_encoding import id_lists

if TYPE_CHECKING:
    import pyarrow as pa
from scoring.params import check_model_args, check_positive_int, check_text_list
from scoring.signature import Signature, library_versions

# 1.1: the output layer reads real positions only; float32 sums run in another order,
# so values move by up to 5e-6 relative, and stored 1.0 scores are not reused as 1.1 ones.
# 1.2: float32 head logits for 14 more causal families (bf16 models move by bf16 rounding) and
# LongRoPE models never batched across their rotary switch (Phi-3 128k scores were batch-dependent);
# in the same release texts are tokenised literally: only texts holding special-token strings
# move (a clean text's ids are unchanged), the signature's `text` parameter says so, and the
# number stays 1.2
# 1.3: float32 head logits for 22 more causal families (Mixtral, Qwen2-MoE, OLMoE, Granite-MoE,
# GPT-NeoX, GPT-J, StarCoder 1, OPT, Phi, Phi-3.5-MoE, Falcon, BLOOM, DeepSeek-V2/V3, GLM-4-MoE,
# GPT-OSS, Seed-OSS, ERNIE 4.5 and its MoE, Apertus, Hunyuan dense, Nemotron), before scored
# through their own forward: bf16 models move by bf16 rounding
VERSION = "1.3"


class Perplexity:
    """`Perplexity(model).score(texts) -> list[float]`; the model is loaded once."""

    def __init__(
        self,
        model: str = "gpt2",
        device: str = "cpu",
        dtype: str = "float32",
        max_length: int | None = None,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
    ):
        from transformers import AutoModelForCausalLM

        check_model_args(dtype, device, token_budget, max_length)
        self.source = resolve_model(model, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        # embedding and position sizes from the config, before (or without) the weights
        self.limits = ModelLimits.from_config(load_config(self.source), model.rstrip("/").rsplit("/", 1)[-1])
        self.limits.check_max_length(max_length)
        self.model = load_pretrained(AutoModelForCausalLM, self.source, dtype=dtype, device=device)
        self.dtype = dtype
        self.max_length = default_max_length(max_length, self.limits, self.tokenizer)
        start = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
        if start is None:
            raise ValueError(f"{model}: tokenizer has neither a BOS nor an EOS token to start from")
        self.start_id = int(start)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.start_id
        self.token_budget = int(token_budget)
        self.literal = LiteralTokenizer(self.tokenizer)
        self.engine = None if self.model is None else CausalLikelihood(self.model, pad_id=pad, token_budget=token_budget)

    def encode(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Per text: [start] + its literal ids, cut to `max_length` (empty when the text has no
        tokens), and whether it was cut; only the text's head is tokenised
        (`scoring.text_encoding.tokenize_heads`). ValueError naming the first text whose ids
        would hold a control token (`encode_checked`)."""
        sequences, truncated, found = self.encode_checked(texts)
        if found:
            k = min(found)
            raise ValueError(f"text {k}: {found[k]}")
        return sequences, truncated

    def encode_checked(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool], dict[int, str]]:
        """`encode`, with {text: reason} for the texts whose literal ids hold a control token
        instead of an error."""
        sequences, truncated, found = [], [], {}
        from scoring.text_encoding import tokenize_heads

        encoded, heads = tokenize_heads(self.literal.ids, texts, self.max_length)
        for k, (ids, head) in enumerate(zip(encoded, heads)):
            problem = self.literal.problem(head, ids[: self.max_length - 1])  # what is scored
            if problem is not None:
                found[k] = f"text {problem}"
            sequence = [self.start_id] + list(ids) if ids else []
            truncated.append(len(sequence) > self.max_length)
            sequences.append(sequence[: self.max_length])
        return sequences, truncated, found

    def perplexities(self, sequences: Ragged) -> list[float]:
        """Perplexity of each encoded sequence (`encode`); a sequence without tokens raises."""
        for i, length in enumerate(sequences.lengths.tolist()):
            if length == 0:
                raise ValueError(f"row {i}: text has no tokens")
        totals = self.engine.ragged_nll(sequences)
        return [math.exp(total / count) for total, count in totals]

    def score_with_flags(self, texts: Sequence[str], batch_size: int | None = None) -> tuple[list[float], list[bool]]:
        texts = check_text_list("texts", texts)
        if not texts:
            return [], []
        self.engine.max_batch_items = check_positive_int("batch_size", batch_size, allow_none=True)
        sequences, truncated = self.encode(texts)
        self.limits.check_sequences(sequences, "text")
        return self.perplexities(Ragged.from_lists(sequences)), truncated

    def score(self, texts: Sequence[str], batch_size: int | None = None) -> list[float]:
        """Perplexity per text (lower is better)."""
        return self.score_with_flags(texts, batch_size)[0]

    def signature_params(self) -> dict[str, Any]:
        return {
            **self.source.identity(),
            "dtype": self.dtype,
            "max_length": self.max_length,
            "start_token": self.start_id,
            "text": self.literal.describe(),
            "batching": (f"length-sorted,token_budget={self.token_budget}" if self.engine is None
                         else self.engine.batching()),
            **library_versions("torch", "transformers"),
        }


class PerplexityMetric(RowMetric):
    """Perplexity of `text` over canonical rows: column `perplexity`."""

    name = "perplexity"
    required_columns = ("text",)
    output_columns = ("perplexity",)

    def __init__(self, model: str = "gpt2", dtype: str = "float32", device: str = "cpu", max_length: int | None = None,
                 token_budget: int = DEFAULT_TOKEN_BUDGET, revision: str | None = None, cache_dir: str | None = None,
                 min_words: int | None = None):
        self.min_words = check_positive_int("min_words", min_words, allow_none=True)
        self.scorer = Perplexity(model, device=device, dtype=dtype, max_length=max_length, token_budget=token_budget,
                                 revision=revision, cache_dir=cache_dir)

    def signature(self) -> Signature:
        params = self.scorer.signature_params()
        if self.min_words:
            params["min_words"] = f"{self.min_words}(split on ' ')"
        return Signature(self.name, VERSION, params)

    def prepare(self, rows: Sequence[dict[str, Any]]) -> "pa.Table":
        """`text_ids` (`list<int32>`: start token + text ids, cut to max_length; empty when
        the text has no tokens), `truncated`, and `words` (for `min_words`)."""
        import pyarrow as pa

        sequences, truncated, found = self.scorer.encode_checked([row["text"] for row in rows])
        if found:
            k = min(found)
            raise RowError(k, found[k])
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(offsets[-1]))
        raise_row_error(self.scorer.limits, values, offsets, np.arange(len(rows)), "text")
        return pa.table({
            "text_ids": id_lists(values, offsets),
            "truncated": pa.array(truncated, type=pa.bool_()),
            "words": pa.array([len(row["text"].split(" ")) for row in rows], type=pa.int32()),
        })

    def score_prepared(self, table: "pa.Table") -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in range(table.num_rows)]
        scored = []
        for i, words in enumerate(table.column("words").to_pylist()):
            if self.min_words and words < self.min_words:
                results[i] = {"perplexity": None, "warning": f"not scored: {words} words < min_words={self.min_words}"}
            else:
                scored.append(i)
        flags = table.column("truncated").to_pylist()
        if scored:
            self.scorer.engine.max_batch_items = None
            scores = self.scorer.perplexities(Ragged.from_arrow(table.column("text_ids")).take(scored))
        else:
            scores = []
        for i, value in zip(scored, scores):
            results[i]["perplexity"] = value
            if flags[i]:
                results[i]["warning"] = f"truncated to max_length={self.scorer.max_length} tokens"
        return results

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.score_prepared(self.prepare(rows))
