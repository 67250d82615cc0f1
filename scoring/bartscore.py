"""BARTScore (Yuan, Neubig, Liu 2021): text quality as seq2seq log-likelihood (docs/metrics.md,
B1-B6; behaviours of the original code: docs/fidelity.md).

score(x -> y) = (1/|y|) sum_t log p(y_t | y_<t, x)   (paper Eq. 2 with uniform weights), so a
score is always < 0 and higher is better. Directions over canonical rows: s->h =
score(source, text), r->h = score(reference, text) (precision), h->r = score(text,
reference) (recall), F = (r->h + h->r) / 2. Prompts (paper A.3, Eq. 3): encoder side
x' = x + " " + prompt + ",", decoder side y' = prompt + ", " + y; the ensemble is the mean of
the per-prompt scores. Decoder-side prompts and multiple references in h->r share one
encoder pass per source.

Multiple references (docs/metrics.md, "BARTScore with several references"): with P_r =
score(r -> y) and R_r = score(y -> r) per reference r, r->h = agg_r P_r, h->r = agg_r R_r and,
by default, F = agg_r (P_r + R_r) / 2 (`f_reference: per_reference`, the original data-to-text
code with agg = max); `per_direction` gives F = (agg_r P_r + agg_r R_r) / 2 instead, which is
never lower under max. With prompts the default aggregates over references within each prompt
and then averages over prompts (`prompt_order: references_first`, the original's order);
`prompts_first` averages over prompts per reference first. Under agg = mean all four agree.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from scoring import preprocess as preprocessing
from scoring.engine import DEFAULT_TOKEN_BUDGET, Seq2SeqLikelihood
from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.models import file_digest, load_pretrained, load_tokenizer, resolve_model
from scoring.params import check_choice, check_model_args, check_positive_int, check_text_list, check_text_lists
from scoring.resources import bartscore_prompt_path
from scoring.signature import Signature, library_versions, stable_hash
from scoring.text_encoding import encode_texts, read_lines

VERSION = "1.1"
DIRECTIONS = ("s_h", "r_h", "h_r", "f")
AGGREGATES = {"mean": statistics.fmean, "max": max}
F_REFERENCE = ("per_reference", "per_direction")
PROMPT_ORDER = ("references_first", "prompts_first")
PROMPT_SIDES = ("encoder", "decoder")


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

        check_model_args(dtype, device, token_budget, max_length)
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
            raise UsageError(f"state_dict: {path}: only .safetensors state dicts are loaded (pickles are refused)")
        try:
            state = load_file(str(path), device=str(self.engine.device))
        except Exception as exc:  # noqa: BLE001 - missing file or not a safetensors file (SafetensorError)
            raise UsageError(f"state_dict: {path}: {exc}") from exc
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise UsageError(f"state_dict: {path}: keys not in the model: {unexpected[:5]}")
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
        sources = check_text_list("sources", sources)
        targets = check_text_lists("targets", targets)
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} target lists")
        if not sources:
            return [], [], []
        self.engine.max_batch_items = check_positive_int("batch_size", batch_size, allow_none=True)
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
        srcs, tgts = check_text_list("srcs", srcs), check_text_list("tgts", tgts)
        _check_lengths(srcs, tgts)
        scores, _, _ = self.score_shared(srcs, [[t] for t in tgts], batch_size)
        return [row[0] for row in scores]

    def multi_ref_score(
        self, srcs: Sequence[str], tgts: Sequence[Sequence[str]], agg: str = "mean", batch_size: int | None = None
    ) -> list[float]:
        """Aggregate score(src_i -> tgt) over each row's targets (ragged lists allowed); each
        source is encoded once for all of its targets."""
        srcs, tgts = check_text_list("srcs", srcs), check_text_lists("tgts", tgts)
        _check_lengths(srcs, tgts)
        aggregate = _aggregate(agg)
        for i, group in enumerate(tgts):
            if len(group) == 0:
                raise ValueError(f"row {i} has no references")
        scores, _, _ = self.score_shared(srcs, tgts, batch_size)
        return [aggregate(row) for row in scores]

    def score_prompted(
        self, srcs: Sequence[str], tgts: Sequence[str], prompts: str | Sequence[str], side: str = "encoder", batch_size: int | None = None
    ) -> list[float]:
        """Prompt ensemble (paper Eq. 3): the mean over prompts of the prompted scores.
        `prompts` is a list of prompts or the name of a prompt set (`src_hypo`, `ref_hypo`,
        `tiny_ref_hypo`, a shipped file name, or a path to one prompt per line)."""
        srcs, tgts = check_text_list("srcs", srcs), check_text_list("tgts", tgts)
        _check_lengths(srcs, tgts)
        prompts = load_prompts(prompts)
        if not prompts:
            raise ValueError("no prompts given")
        if not srcs:
            return []
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


def load_prompts(prompts: str | Sequence[str] | None) -> list[str] | None:
    """A prompt list as given, or the prompts of a named set / file (see `score_prompted`)."""
    if prompts is None:
        return None
    if isinstance(prompts, str):
        return read_lines(bartscore_prompt_path(prompts), "prompt")
    return list(check_text_list("prompts", prompts))


def _check_lengths(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} sources but {len(b)} targets")


def _aggregate(agg: str):
    return AGGREGATES[check_choice("agg", agg, AGGREGATES)]


class BARTScoreMetric(RowMetric):
    """BARTScore over canonical rows: columns `bartscore_<direction>` for the chosen
    directions, references aggregated by `agg`, optional prompt ensemble and preprocessing
    (module docstring; docs/metrics.md)."""

    name = "bartscore"
    needs = "text; source for s_h; references for r_h, h_r, f"

    def __init__(
        self,
        model: str = "facebook/bart-large-cnn",
        directions: Sequence[str] = DIRECTIONS,
        agg: str = "mean",
        f_reference: str = "per_reference",
        prompts: str | Sequence[str] | None = None,
        prompt_side: str = "decoder",
        prompt_order: str = "references_first",
        preprocess: str = "none",
        state_dict: str | None = None,
        revision: str | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        max_length: int = 1024,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        cache_dir: str | None = None,
    ):
        if isinstance(directions, str):
            directions = [directions]
        directions = tuple(directions)
        unknown = [d for d in directions if d not in DIRECTIONS]
        if unknown or not directions:
            raise UsageError(f"directions: unknown BARTScore directions {unknown}; choose from {list(DIRECTIONS)}")
        _aggregate(agg)
        self.f_reference = check_choice("f_reference", f_reference, F_REFERENCE)
        self.prompt_side = check_choice("prompt_side", prompt_side, PROMPT_SIDES)
        self.prompt_order = check_choice("prompt_order", prompt_order, PROMPT_ORDER)
        self.preprocess = preprocessing.check_preprocess(preprocess)
        self._clean = preprocessing.preprocessor(preprocess)
        check_model_args(dtype, device, token_budget, max_length)
        self.directions = directions
        self.agg = agg
        try:
            self.prompts = load_prompts(prompts) or None
        except (FileNotFoundError, TypeError) as exc:
            raise UsageError(f"prompts: {exc}") from exc
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
            "preprocess": preprocessing.signature_value(self.preprocess),
        }
        if "references" in self.required_columns:
            params["f_reference"] = self.f_reference
            if self.prompts:
                params["prompt_order"] = self.prompt_order
        return Signature(self.name, VERSION, params)

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is None and "references" in self.required_columns:
            references = list(row["references"])
            if any(not isinstance(r, str) or not r.strip() for r in references):
                return "empty or null reference in 'references'"
        return reason

    def _prompt_scores(self, sources: list[str], targets: list[list[str]]) -> tuple[list[list[list[float]]], list[bool]]:
        """scores[i][j][p] = score(source_i -> target_ij) under prompt p (one entry per pair
        without prompts), plus per-source 'anything truncated' flags."""
        if not self.prompts:
            scores, src_trunc, tgt_trunc = self.scorer.score_shared(sources, targets)
            return [[[value] for value in row] for row in scores], [s or any(t) for s, t in zip(src_trunc, tgt_trunc)]
        width = len(self.prompts)
        if self.prompt_side == "decoder":
            prompted = [[decoder_prompted(t, p) for t in group for p in self.prompts] for group in targets]
            scores, src_trunc, tgt_trunc = self.scorer.score_shared(sources, prompted)
            unfolded = [[row[k * width : (k + 1) * width] for k in range(len(group))] for row, group in zip(scores, targets)]
            return unfolded, [s or any(t) for s, t in zip(src_trunc, tgt_trunc)]
        flat_sources, flat_targets, owners = [], [], []
        for i, (source, group) in enumerate(zip(sources, targets)):
            for target in group:
                for prompt in self.prompts:
                    flat_sources.append(encoder_prompted(source, prompt))
                    flat_targets.append([target])
                    owners.append(i)
        scores, src_trunc, tgt_trunc = self.scorer.score_shared(flat_sources, flat_targets)
        unfolded: list[list[list[float]]] = [[] for _ in sources]
        truncated = [False] * len(sources)
        for start in range(0, len(flat_sources), width):
            owner = owners[start]
            unfolded[owner].append([scores[k][0] for k in range(start, start + width)])
            span = range(start, start + width)
            truncated[owner] = truncated[owner] or any(src_trunc[k] or tgt_trunc[k][0] for k in span)
        return unfolded, truncated

    def _reduce(self, per_reference: list[list[float]]) -> float:
        """One number from scores[reference][prompt]: aggregate over references (`agg`) and
        average over prompts, in the configured order."""
        aggregate = _aggregate(self.agg)
        if self.prompt_order == "references_first":
            n_prompts = len(per_reference[0])
            return statistics.fmean(aggregate([row[p] for row in per_reference]) for p in range(n_prompts))
        return aggregate([statistics.fmean(row) for row in per_reference])

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        clean = self._clean or (lambda text: text)
        results: list[dict[str, Any]] = [{} for _ in rows]
        truncated = [False] * len(rows)
        texts = [clean(row["text"]) for row in rows]
        if "s_h" in self.directions:
            scores, flags = self._prompt_scores([clean(row["source"]) for row in rows], [[t] for t in texts])
            for i, row_scores in enumerate(scores):
                results[i]["bartscore_s_h"] = statistics.fmean(row_scores[0])
                truncated[i] |= flags[i]
        if "references" not in self.required_columns:
            return self._finish(results, truncated)
        references = [[clean(r) for r in row["references"]] for row in rows]
        precision: list[list[list[float]]] = [[] for _ in rows]  # [row][reference][prompt], score(r -> y)
        recall: list[list[list[float]]] = [[] for _ in rows]  # [row][reference][prompt], score(y -> r)
        if any(d in self.directions for d in ("r_h", "f")):
            sources, owners = [], []
            for i, group in enumerate(references):
                sources += group
                owners += [i] * len(group)
            scores, flags = self._prompt_scores(sources, [[texts[i]] for i in owners])
            for owner, row_scores, flag in zip(owners, scores, flags):
                precision[owner].append(row_scores[0])
                truncated[owner] |= flag
        if any(d in self.directions for d in ("h_r", "f")):
            scores, flags = self._prompt_scores(texts, references)
            for i, row_scores in enumerate(scores):
                recall[i] = row_scores
                truncated[i] |= flags[i]
        for i, result in enumerate(results):
            if precision[i]:
                result["bartscore_r_h"] = self._reduce(precision[i])
            if recall[i]:
                result["bartscore_h_r"] = self._reduce(recall[i])
            if "f" in self.directions:
                if self.f_reference == "per_direction":
                    result["bartscore_f"] = (result["bartscore_r_h"] + result["bartscore_h_r"]) / 2
                else:
                    averaged = [[(p + r) / 2 for p, r in zip(ps, rs)] for ps, rs in zip(precision[i], recall[i])]
                    result["bartscore_f"] = self._reduce(averaged)
        return self._finish(results, truncated)

    def _finish(self, results: list[dict[str, Any]], truncated: list[bool]) -> list[dict[str, Any]]:
        for result, flag in zip(results, truncated):
            if flag:
                result["warning"] = f"truncated to max_length={self.scorer.max_length} tokens"
        return results
