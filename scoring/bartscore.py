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

import os
import pathlib
import statistics
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from scoring import preprocess as preprocessing
from scoring.engine import DEFAULT_TOKEN_BUDGET, Ragged, Seq2SeqLikelihood
from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.model_files import safetensors_elements
from scoring.model_limits import default_max_length, limits_for, raise_row_error
from scoring.models import file_digest, load_pretrained, load_tokenizer, resolve_model
from scoring.params import (
    check_choice,
    check_choices,
    check_model_args,
    check_positive_int,
    check_text_list,
    check_text_lists,
)
from scoring.parsed_tokens import ParsedTokens, joined, kept_for
from scoring.resources import bartscore_prompt_path
from scoring.signature import Signature, library_versions, stable_hash
from scoring.text_encoding import encode_ragged, encode_texts, id_lists, read_lines

if TYPE_CHECKING:
    import pyarrow as pa

VERSION = "1.2"  # 1.2: a row gets each direction whose columns it has
DIRECTIONS = ("s_h", "r_h", "h_r", "f")
# what each direction reads: s->h the source, the others the references (F: both r->h and h->r)
DIRECTION_INPUTS = {"s_h": ("text", "source"), "r_h": ("text", "references"), "h_r": ("text", "references"),
                    "f": ("text", "references")}
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
        max_length: int | None = None,
        dtype: str = "float32",
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
        compile: bool = False,
    ):
        from transformers import AutoModelForSeq2SeqLM

        check_model_args(dtype, device, token_budget, max_length)
        self.source = resolve_model(checkpoint, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        # what the embedding and position tables can index, from the config (no weights)
        self.limits = limits_for(self.source)
        self.limits.check_max_length(max_length)
        self.model = load_pretrained(AutoModelForSeq2SeqLM, self.source, dtype=dtype, device=device)
        # unset: the model's own limit (position table; the tokenizer's for relative positions)
        self.max_length = default_max_length(max_length, self.limits, self.tokenizer)
        self.dtype = dtype
        self.state_dict_digest: str | None = None
        self.engine = None if self.model is None else Seq2SeqLikelihood(  # None: built to prepare ids only
            self.model,
            pad_id=self.tokenizer.pad_token_id,
            decoder_start_id=self.model.config.decoder_start_token_id,
            token_budget=token_budget,
            compile_layers=bool(compile),
        )
        self.compile = bool(compile)

    # ----- loading ----------------------------------------------------------------------
    def load(self, path: str) -> None:
        """Load a fine-tuned state dict (safetensors only) on top of the checkpoint, like the
        ParaBank variant on bart-large-cnn."""
        from safetensors.torch import load_file

        if not str(path).endswith(".safetensors"):
            raise UsageError(f"state_dict: {path}: only .safetensors state dicts are loaded (pickles are refused)")
        if os.path.exists(path) and not os.path.isfile(path):  # /dev/zero, a FIFO: never opened
            raise UsageError(f"state_dict: {path}: not a regular file")
        try:
            if os.path.isfile(path):
                safetensors_elements(pathlib.Path(path))  # a header that lies about the file, named by tensor
            state = load_file(str(path), device=str(self.engine.device))
        except Exception as exc:  # noqa: BLE001 - missing file or not a safetensors file (SafetensorError)
            raise UsageError(f"state_dict: {' '.join(str(exc).split())[:300]}" if isinstance(exc, UsageError)
                             else f"state_dict: {path}: {exc}") from None
        try:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
        except RuntimeError as exc:  # a tensor of another shape than the model's
            raise UsageError(f"state_dict: {path}: does not fit {self.source.location} "
                             f"({' '.join(str(exc).split())[:300]})") from None
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
        self.limits.check_sequences([e.ids for e in encoded_sources], "source")
        self.limits.check_sequences([e.ids for e in encoded_targets], "target")
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

    def pair_scores(self, sources: Ragged, targets: Ragged) -> list[float]:
        """score(source_k -> target_k) for token id pairs (ids as `encode_texts` gives them).
        Pairs with equal source ids share one encoder pass, their targets decoded in pair
        order (the grouping `score_shared` makes from texts)."""
        self.engine.max_batch_items = None
        unique: dict[bytes, int] = {}
        firsts: list[int] = []
        groups: list[list[int]] = []
        for k in range(len(sources)):
            key = sources.key(k)
            u = unique.get(key)
            if u is None:
                u = unique[key] = len(firsts)
                firsts.append(k)
                groups.append([])
            groups[u].append(k)
        nll = self.engine.pair_nll(sources.take(firsts), targets, groups)
        return [-value for value in nll]

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
            "batching": self.engine.batching(),
            **library_versions("torch", "transformers"),
        }
        if self.state_dict_digest:
            params["state_dict"] = f"sha256:{self.state_dict_digest}"
        if self.compile:  # only when set: default signatures (and their stored scores) stay as they were
            params["compile"] = "regional torch.compile of the layers (CUDA)"
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
    score_inputs = DIRECTION_INPUTS

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
        max_length: int | None = None,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        cache_dir: str | None = None,
        compile: bool = False,
    ):
        """`compile: true` compiles each encoder and decoder layer with `torch.compile` on CUDA
        (off by default; ignored on CPU; docs/gpu.md)."""
        directions = check_choices("directions", directions, DIRECTIONS, "BARTScore ")
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
        except (FileNotFoundError, TypeError, UsageError) as exc:  # no file, not UTF-8, no line: named
            raise UsageError(f"prompts: {exc}") from exc
        self.scorer = BARTScorer(model, device=device, max_length=max_length, dtype=dtype, token_budget=token_budget, revision=revision, cache_dir=cache_dir,
                                 compile=compile)
        if state_dict and self.scorer.model is not None:
            self.scorer.load(state_dict)
        needs_references = any(d != "s_h" for d in directions)
        self.required_columns = ("text",) + (("source",) if "s_h" in directions else ()) + (("references",) if needs_references else ())
        self.output_columns = tuple(f"bartscore_{d}" for d in directions)

    def score_needs(self) -> dict[str, tuple[str, ...]]:
        """s_h needs `source`; r_h, h_r and F need `references` (`DIRECTION_INPUTS`)."""
        return {f"bartscore_{d}": tuple(c for c in DIRECTION_INPUTS[d] if c != "text") for d in self.directions}

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
        if reason is None and "references" in self.checked_columns(row):
            references = list(row["references"])
            if any(not isinstance(r, str) or not r.strip() for r in references):
                return "empty or null reference in 'references'"
        return reason

    # ----- two stages: prepare (CPU) and score_prepared (device) -------------------------
    def _groups(self) -> list[str]:
        """The scoring passes the directions need: s->h, r->h (for r_h and F), h->r (h_r, F)."""
        wanted = {"s_h": ("s_h",), "r_h": ("r_h", "f"), "h_r": ("h_r", "f")}
        return [group for group, directions in wanted.items() if any(d in self.directions for d in directions)]

    def _entries(self, group: str, source: str | None, text: str, references: list[str] | None) -> list[tuple[str, list[str]]]:
        """(encoder text, decoder texts) of one row in one pass, before prompting; none when
        the row lacks the pass's input (its direction is left out for that row)."""
        if group == "s_h":
            return [] if source is None else [(source, [text])]
        if not references:
            return []
        if group == "r_h":
            return [(reference, [text]) for reference in references]
        return [(text, references)]

    def _prompted(self, source: str, target: str) -> list[tuple[str, str]]:
        """The (source, target) pairs one pair becomes under the prompt ensemble, in prompt order."""
        if not self.prompts:
            return [(source, target)]
        if self.prompt_side == "decoder":
            return [(source, decoder_prompted(target, prompt)) for prompt in self.prompts]
        return [(encoder_prompted(source, prompt), target) for prompt in self.prompts]

    def prepare(self, rows: Sequence[dict[str, Any]]) -> "pa.Table":
        """Per row and pass (`<pass>_source_ids`, `<pass>_target_ids`, `list<list<int32>>`):
        the token ids of every (source, target) pair the row is scored on, in the order
        (entry, target, prompt) (no pairs where the row lacks the pass's input), `truncated`
        when any of them was cut to `max_length`, `parsed_tokens` (the warning naming the
        special-token strings the row's text, source or references hold, `scoring.parsed_tokens`)
        and `skipped` (`RowMetric.partial_reason`)."""
        import pyarrow as pa

        clean = self._clean or (lambda text: text)
        texts = [clean(row["text"]) for row in rows]
        sources = ([None if row.get("source") is None else clean(row["source"]) for row in rows] if "s_h" in self.directions
                   else [None] * len(rows))
        references = ([[clean(r) for r in row.get("references") or []] for row in rows] if "references" in self.required_columns
                      else [None] * len(rows))
        columns: dict[str, pa.Array] = {}
        truncated = np.zeros(len(rows), dtype=bool)
        for group in self._groups():
            pair_sources, pair_targets, counts = [], [], []
            for source, text, refs in zip(sources, texts, references):
                pairs = [pair for encoder_text, decoder_texts in self._entries(group, source, text, refs)
                         for target in decoder_texts for pair in self._prompted(encoder_text, target)]
                pair_sources += [pair[0] for pair in pairs]
                pair_targets += [pair[1] for pair in pairs]
                counts.append(len(pairs))
            row_offsets = np.zeros(len(rows) + 1, dtype=np.int32)
            np.cumsum(counts, out=row_offsets[1:])
            source_values, source_offsets, source_cut = encode_ragged(self.scorer.tokenizer, pair_sources, self.scorer.max_length)
            target_values, target_offsets, target_cut = encode_ragged(self.scorer.tokenizer, pair_targets, self.scorer.max_length)
            owners = np.repeat(np.arange(len(rows)), counts)
            np.logical_or.at(truncated, owners, source_cut | target_cut)
            # ids the device cannot index are this row's error here, never a device-side assert
            raise_row_error(self.scorer.limits, source_values, source_offsets, owners, f"{group} source")
            raise_row_error(self.scorer.limits, target_values, target_offsets, owners, f"{group} target")
            columns[f"{group}_source_ids"] = id_lists(source_values, source_offsets, row_offsets)
            columns[f"{group}_target_ids"] = id_lists(target_values, target_offsets, row_offsets)
        columns["truncated"] = pa.array(truncated, type=pa.bool_())
        notes = [self.parsed_tokens.note([("text", [text]), ("source", [source]), ("references", refs or ())])
                 for text, source, refs in zip(texts, sources, references)]
        columns["parsed_tokens"] = pa.array(notes, type=pa.string())
        columns["skipped"] = pa.array([self.partial_reason(row) for row in rows], type=pa.string())
        return pa.table(columns)

    @property
    def parsed_tokens(self) -> ParsedTokens:
        """The special-token strings this metric's tokenizer parses in a text."""
        return kept_for(self, self.scorer.tokenizer)

    def score_prepared(self, table: "pa.Table") -> list[dict[str, Any]]:
        width = len(self.prompts) if self.prompts else 1
        passes: dict[str, list[list[list[float]]]] = {}  # pass -> [row][entry target][prompt]
        for group in self._groups():
            source_column = table.column(f"{group}_source_ids").combine_chunks()
            scores = self.scorer.pair_scores(Ragged.from_arrow(source_column), Ragged.from_arrow(table.column(f"{group}_target_ids")))
            bounds = source_column.offsets.to_numpy(zero_copy_only=False)
            bounds = (bounds - bounds[0]).tolist()
            passes[group] = [[scores[k : k + width] for k in range(bounds[i], bounds[i + 1], width)] for i in range(table.num_rows)]
        results: list[dict[str, Any]] = [{} for _ in range(table.num_rows)]
        if "s_h" in passes:
            for i, row_scores in enumerate(passes["s_h"]):
                if row_scores:  # none: the row has no source
                    results[i]["bartscore_s_h"] = statistics.fmean(row_scores[0])
        if "references" in self.required_columns:
            precision = passes.get("r_h", [[] for _ in results])  # [row][reference][prompt], score(r -> y)
            recall = passes.get("h_r", [[] for _ in results])  # [row][reference][prompt], score(y -> r)
            for i, result in enumerate(results):
                if precision[i]:
                    result["bartscore_r_h"] = self._reduce(precision[i])
                if recall[i]:
                    result["bartscore_h_r"] = self._reduce(recall[i])
                if "f" in self.directions and precision[i] and recall[i]:
                    if self.f_reference == "per_direction":
                        result["bartscore_f"] = (result["bartscore_r_h"] + result["bartscore_h_r"]) / 2
                    else:
                        averaged = [[(p + r) / 2 for p, r in zip(ps, rs)] for ps, rs in zip(precision[i], recall[i])]
                        result["bartscore_f"] = self._reduce(averaged)
        skipped = table.column("skipped").to_pylist() if "skipped" in table.column_names else [None] * len(results)
        for result, reason in zip(results, skipped):
            if reason is not None:
                result["skipped"] = reason
        notes = table.column("parsed_tokens").to_pylist() if "parsed_tokens" in table.column_names else [None] * len(results)
        return self._finish(results, table.column("truncated").to_pylist(), notes)

    def _reduce(self, per_reference: list[list[float]]) -> float:
        """One number from scores[reference][prompt]: aggregate over references (`agg`) and
        average over prompts, in the configured order."""
        aggregate = _aggregate(self.agg)
        if self.prompt_order == "references_first":
            n_prompts = len(per_reference[0])
            return statistics.fmean(aggregate([row[p] for row in per_reference]) for p in range(n_prompts))
        return aggregate([statistics.fmean(row) for row in per_reference])

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.score_prepared(self.prepare(rows))

    def _finish(self, results: list[dict[str, Any]], truncated: list[bool], notes: list[str | None]) -> list[dict[str, Any]]:
        """Each row's warning: truncation, then the special-token strings it holds."""
        for result, flag, note in zip(results, truncated, notes):
            warning = joined(f"truncated to max_length={self.scorer.max_length} tokens" if flag else None, note)
            if warning:
                result["warning"] = warning
        return results
