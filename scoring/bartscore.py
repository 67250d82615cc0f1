"""BARTScore (Yuan, Neubig, Liu 2021): text quality as seq2seq log-likelihood.

score(x -> y) = (1/|y|) sum_t log p(y_t | y_<t, x)   (paper Eq. 2 with uniform weights), so a
score is always < 0 and higher is better. Directions over canonical rows: s->h =
score(source, text), r->h = score(reference, text) (precision), h->r = score(text,
reference) (recall), F = (r->h + h->r) / 2. Prompts (paper A.3, Eq. 3): encoder side
x' = x + " " + prompt + ",", decoder side y' = prompt + ", " + y; the ensemble is the mean of
the per-prompt scores. Decoder-side prompts and multiple references in h->r share one
encoder pass per source.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from scoring.engine import DEFAULT_TOKEN_BUDGET, Seq2SeqLikelihood
from scoring.metric import RowMetric
from scoring.models import file_digest, load_pretrained, load_tokenizer, resolve_model
from scoring.resources import bartscore_prompt_path
from scoring.signature import Signature, library_versions, stable_hash
from scoring.text_encoding import encode_texts, read_lines

VERSION = "1.0"
DIRECTIONS = ("s_h", "r_h", "h_r", "f")
AGGREGATES = {"mean": statistics.fmean, "max": max}


def encoder_prompted(source: str, prompt: str) -> str:
    """Encoder-side prompt: x' = x + " " + prompt + ","."""
    return f"{source} {prompt},"


def decoder_prompted(target: str, prompt: str) -> str:
    """Decoder-side prompt: y' = prompt + ", " + y."""
    return f"{prompt}, {target}"


class BARTScorer:
    """BARTScore with the original call shapes; the model is loaded once.

    `batch_size` in the methods is kept for call compatibility: it caps the rows per forward
    pass, while the token budget does the batching.
    """

    def __init__(
        self,
        checkpoint: str = "facebook/bart-large-cnn",
        device: str = "cpu",
        max_length: int = 1024,
        dtype: str = "float32",
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
    ):
        from transformers import AutoModelForSeq2SeqLM

        self.source = resolve_model(checkpoint, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        self.model = load_pretrained(AutoModelForSeq2SeqLM, self.source, dtype=dtype, device=device)
        self.max_length = int(max_length)
        self.dtype = dtype
        self.state_dict_digest: str | None = None
        self.engine = Seq2SeqLikelihood(
            self.model,
            pad_id=self.tokenizer.pad_token_id,
            decoder_start_id=self.model.config.decoder_start_token_id,
            token_budget=token_budget,
        )

    # ----- loading ----------------------------------------------------------------------
    def load(self, path: str) -> None:
        """Load a fine-tuned state dict (safetensors only) on top of the checkpoint, like the
        ParaBank variant on bart-large-cnn."""
        from safetensors.torch import load_file

        if not str(path).endswith(".safetensors"):
            raise ValueError(f"{path}: only .safetensors state dicts are loaded (pickles are refused)")
        state = load_file(str(path), device=str(self.engine.device))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"{path}: keys not in the model: {unexpected[:5]}")
        self.model.tie_weights()
        self.state_dict_digest = file_digest(path)

    # ----- core ---------------------------------------------------------------------------
    def score_shared(
        self, sources: Sequence[str], targets: Sequence[Sequence[str]], batch_size: int | None = None
    ) -> tuple[list[list[float]], list[bool], list[list[bool]]]:
        """score(source_i -> target_ij) for every target of every source. Identical sources
        are encoded once (e.g. the 16 systems of one SummEval document) and every target is
        decoded against the cached encoder states. Returns scores, source-truncated flags and
        target-truncated flags, in input order."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} target lists")
        self.engine.max_batch_items = batch_size
        unique_index: dict[str, int] = {}
        for source in sources:
            unique_index.setdefault(source, len(unique_index))
        unique_sources = list(unique_index)
        merged: list[list[str]] = [[] for _ in unique_sources]
        slots = []  # (unique source, offset of this row's first target)
        for source, group in zip(sources, targets):
            u = unique_index[source]
            slots.append((u, len(merged[u])))
            merged[u].extend(group)
        encoded_sources = encode_texts(self.tokenizer, unique_sources, self.max_length)
        encoded_targets = encode_texts(self.tokenizer, [t for group in merged for t in group], self.max_length)
        grouped, position = [], 0
        for group in merged:
            grouped.append(encoded_targets[position : position + len(group)])
            position += len(group)
        nll = self.engine.mean_nll([e.ids for e in encoded_sources], [[e.ids for e in g] for g in grouped])
        scores, source_flags, target_flags = [], [], []
        for (u, offset), group in zip(slots, targets):
            span = slice(offset, offset + len(group))
            scores.append([-value for value in nll[u][span]])
            source_flags.append(encoded_sources[u].truncated)
            target_flags.append([e.truncated for e in grouped[u][span]])
        return scores, source_flags, target_flags

    def score(self, srcs: Sequence[str], tgts: Sequence[str], batch_size: int | None = None) -> list[float]:
        """score(src_i -> tgt_i) per pair (the original `BARTScorer.score`)."""
        _check_lengths(srcs, tgts)
        scores, _, _ = self.score_shared(srcs, [[t] for t in tgts], batch_size)
        return [row[0] for row in scores]

    def multi_ref_score(
        self, srcs: Sequence[str], tgts: Sequence[Sequence[str]], agg: str = "mean", batch_size: int | None = None
    ) -> list[float]:
        """Aggregate score(src_i -> tgt) over each row's targets (ragged lists allowed); each
        source is encoded once for all of its targets."""
        _check_lengths(srcs, tgts)
        aggregate = _aggregate(agg)
        for i, group in enumerate(tgts):
            if len(group) == 0:
                raise ValueError(f"row {i} has no references")
        scores, _, _ = self.score_shared(srcs, tgts, batch_size)
        return [aggregate(row) for row in scores]

    def score_prompted(
        self, srcs: Sequence[str], tgts: Sequence[str], prompts: Sequence[str], side: str = "encoder", batch_size: int | None = None
    ) -> list[float]:
        """Prompt ensemble (paper Eq. 3): the mean over prompts of the prompted scores."""
        _check_lengths(srcs, tgts)
        if not prompts:
            raise ValueError("no prompts given")
        if side == "decoder":
            scores, _, _ = self.score_shared(srcs, [[decoder_prompted(t, p) for p in prompts] for t in tgts], batch_size)
            return [statistics.fmean(row) for row in scores]
        if side == "encoder":
            prompted_sources = [encoder_prompted(s, p) for s in srcs for p in prompts]
            scores, _, _ = self.score_shared(prompted_sources, [[t] for t in tgts for _ in prompts], batch_size)
            width = len(prompts)
            return [statistics.fmean(row[0] for row in scores[i * width : (i + 1) * width]) for i in range(len(srcs))]
        raise ValueError(f"prompt side must be 'encoder' or 'decoder', not '{side}'")

    # ----- reproducibility --------------------------------------------------------------
    def signature_params(self) -> dict[str, Any]:
        params = {
            **self.source.identity(),
            "dtype": self.dtype,
            "max_length": self.max_length,
            "batching": f"length-sorted,token_budget={self.engine.token_budget},decode_token_budget={self.engine.decode_token_budget}",
            **library_versions("torch", "transformers"),
        }
        if self.state_dict_digest:
            params["state_dict"] = f"sha256:{self.state_dict_digest}"
        return params


def _check_lengths(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} sources but {len(b)} targets")


def _aggregate(agg: str):
    if agg not in AGGREGATES:
        raise ValueError(f"agg must be one of {sorted(AGGREGATES)}, not '{agg}'")
    return AGGREGATES[agg]


class BARTScoreMetric(RowMetric):
    """BARTScore over canonical rows: columns `bartscore_<direction>` for the chosen
    directions, references aggregated by `agg`, optional prompt ensemble."""

    name = "bartscore"

    def __init__(
        self,
        model: str = "facebook/bart-large-cnn",
        directions: Sequence[str] = DIRECTIONS,
        agg: str = "mean",
        prompts: str | Sequence[str] | None = None,
        prompt_side: str = "decoder",
        state_dict: str | None = None,
        revision: str | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        max_length: int = 1024,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        cache_dir: str | None = None,
    ):
        directions = tuple(directions)
        unknown = [d for d in directions if d not in DIRECTIONS]
        if unknown or not directions:
            raise ValueError(f"unknown BARTScore directions {unknown}; choose from {DIRECTIONS}")
        _aggregate(agg)
        if prompt_side not in ("encoder", "decoder"):
            raise ValueError(f"prompt_side must be 'encoder' or 'decoder', not '{prompt_side}'")
        self.directions = directions
        self.agg = agg
        self.prompt_side = prompt_side
        if isinstance(prompts, str):
            prompts = read_lines(bartscore_prompt_path(prompts), "prompt")
        self.prompts = list(prompts) if prompts else None
        self.scorer = BARTScorer(model, device=device, max_length=max_length, dtype=dtype, token_budget=token_budget, revision=revision, cache_dir=cache_dir)
        if state_dict:
            self.scorer.load(state_dict)
        needs_references = any(d != "s_h" for d in directions)
        self.required_columns = ("text",) + (("source",) if "s_h" in directions else ()) + (("references",) if needs_references else ())
        self.output_columns = tuple(f"bartscore_{d}" for d in directions)

    def signature(self) -> Signature:
        params = {
            **self.scorer.signature_params(),
            "directions": list(self.directions),
            "agg": self.agg,
            "prompts": f"{len(self.prompts)}:{stable_hash(self.prompts)}:{self.prompt_side}" if self.prompts else "none",
        }
        return Signature(self.name, VERSION, params)

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is None and "references" in self.required_columns:
            references = list(row["references"])
            if any(not isinstance(r, str) or not r.strip() for r in references):
                return "empty or null reference in 'references'"
        return reason

    def _pair_scores(self, sources: list[str], targets: list[list[str]]) -> tuple[list[list[float]], list[bool]]:
        """Scores for (source -> each target), prompt ensemble applied; plus per-source
        'anything truncated' flags."""
        if not self.prompts:
            scores, src_trunc, tgt_trunc = self.scorer.score_shared(sources, targets)
            return scores, [s or any(t) for s, t in zip(src_trunc, tgt_trunc)]
        if self.prompt_side == "decoder":
            prompted = [[decoder_prompted(t, p) for t in group for p in self.prompts] for group in targets]
            scores, src_trunc, tgt_trunc = self.scorer.score_shared(sources, prompted)
            width = len(self.prompts)
            folded = [[statistics.fmean(row[k * width : (k + 1) * width]) for k in range(len(group))] for row, group in zip(scores, targets)]
            return folded, [s or any(t) for s, t in zip(src_trunc, tgt_trunc)]
        flat_sources, flat_targets, owners = [], [], []
        for i, (source, group) in enumerate(zip(sources, targets)):
            for target in group:
                for prompt in self.prompts:
                    flat_sources.append(encoder_prompted(source, prompt))
                    flat_targets.append([target])
                    owners.append(i)
        scores, src_trunc, tgt_trunc = self.scorer.score_shared(flat_sources, flat_targets)
        width = len(self.prompts)
        folded: list[list[float]] = [[] for _ in sources]
        truncated = [False] * len(sources)
        for start in range(0, len(flat_sources), width):
            owner = owners[start]
            folded[owner].append(statistics.fmean(scores[k][0] for k in range(start, start + width)))
            truncated[owner] = truncated[owner] or any(src_trunc[start : start + width]) or any(t[0] for t in tgt_trunc[start : start + width])
        return folded, truncated

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        aggregate = _aggregate(self.agg)
        results: list[dict[str, Any]] = [{} for _ in rows]
        truncated = [False] * len(rows)
        texts = [row["text"] for row in rows]
        if "s_h" in self.directions:
            scores, flags = self._pair_scores([row["source"] for row in rows], [[t] for t in texts])
            for i, row_scores in enumerate(scores):
                results[i]["bartscore_s_h"] = row_scores[0]
                truncated[i] |= flags[i]
        if any(d in self.directions for d in ("r_h", "f")):
            sources, targets, owners = [], [], []
            for i, row in enumerate(rows):
                for reference in row["references"]:
                    sources.append(reference)
                    targets.append([texts[i]])
                    owners.append(i)
            scores, flags = self._pair_scores(sources, targets)
            per_row: list[list[float]] = [[] for _ in rows]
            for owner, row_scores, flag in zip(owners, scores, flags):
                per_row[owner].append(row_scores[0])
                truncated[owner] |= flag
            for i, values in enumerate(per_row):
                results[i]["bartscore_r_h"] = aggregate(values)
        if any(d in self.directions for d in ("h_r", "f")):
            scores, flags = self._pair_scores(texts, [list(row["references"]) for row in rows])
            for i, row_scores in enumerate(scores):
                results[i]["bartscore_h_r"] = aggregate(row_scores)
                truncated[i] |= flags[i]
        for i, result in enumerate(results):
            if "f" in self.directions:
                result["bartscore_f"] = (result["bartscore_r_h"] + result["bartscore_h_r"]) / 2
            if truncated[i]:
                result["warning"] = f"truncated to max_length={self.scorer.max_length} tokens"
        return results
