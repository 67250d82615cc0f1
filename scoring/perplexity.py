"""Perplexity under a causal LM, the usual CTG fluency baseline (docs/metrics.md, P1).

PPL(x) = exp( (1/N) sum_{t=1..N} -log p(x_t | BOS, x_<t) ): the model's BOS token (EOS when it
has none, as for GPT-2 where both are `<|endoftext|>`) is prepended so the first word is
predicted too, and every token of the text counts.

`min_words` (off by default) leaves texts with fewer words (counted as `text.split(" ")`)
unscored, with a warning, as CompMCTG's evaluation skips texts under 10 words before
averaging (docs/metrics.md, "Perplexity").
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from scoring.engine import DEFAULT_TOKEN_BUDGET, CausalLikelihood
from scoring.metric import RowMetric
from scoring.models import load_pretrained, load_tokenizer, resolve_model
from scoring.params import check_model_args, check_positive_int, check_text_list
from scoring.signature import Signature, library_versions

VERSION = "1.0"


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
        self.model = load_pretrained(AutoModelForCausalLM, self.source, dtype=dtype, device=device)
        self.dtype = dtype
        positions = getattr(self.model.config, "max_position_embeddings", None) or getattr(self.model.config, "n_positions", 1024)
        self.max_length = int(max_length or positions)
        start = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
        if start is None:
            raise ValueError(f"{model}: tokenizer has neither a BOS nor an EOS token to start from")
        self.start_id = int(start)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.start_id
        self.engine = CausalLikelihood(self.model, pad_id=pad, token_budget=token_budget)

    def score_with_flags(self, texts: Sequence[str], batch_size: int | None = None) -> tuple[list[float], list[bool]]:
        texts = check_text_list("texts", texts)
        if not texts:
            return [], []
        self.engine.max_batch_items = check_positive_int("batch_size", batch_size, allow_none=True)
        token_ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        sequences, truncated = [], []
        for i, ids in enumerate(token_ids):
            if not ids:
                raise ValueError(f"row {i}: text has no tokens")
            sequence = [self.start_id] + list(ids)
            truncated.append(len(sequence) > self.max_length)
            sequences.append(sequence[: self.max_length])
        totals = self.engine.sequence_nll(sequences)
        return [math.exp(total / count) for total, count in totals], truncated

    def score(self, texts: Sequence[str], batch_size: int | None = None) -> list[float]:
        """Perplexity per text (lower is better)."""
        return self.score_with_flags(texts, batch_size)[0]

    def signature_params(self) -> dict[str, Any]:
        return {
            **self.source.identity(),
            "dtype": self.dtype,
            "max_length": self.max_length,
            "start_token": self.start_id,
            "batching": f"length-sorted,token_budget={self.engine.token_budget}",
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

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in rows]
        scored = []
        for i, row in enumerate(rows):
            words = len(row["text"].split(" "))
            if self.min_words and words < self.min_words:
                results[i] = {"perplexity": None, "warning": f"not scored: {words} words < min_words={self.min_words}"}
            else:
                scored.append(i)
        scores, flags = self.scorer.score_with_flags([rows[i]["text"] for i in scored])
        for i, value, flag in zip(scored, scores, flags):
            results[i]["perplexity"] = value
            if flag:
                results[i]["warning"] = f"truncated to max_length={self.scorer.max_length} tokens"
        return results
